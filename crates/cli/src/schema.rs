//! `sandglass schema KIND`: the JSON Schema (draft 2020-12) of each `--json` output, derived
//! from the Rust types that print it, so that a schema cannot drift from its output. The
//! committed copies in `docs/schema/` are compared with these in the tests (docs/json.md).

use crate::analyze::{Analysis, Rows, Ttest};
use crate::common::{print_json, Failure};
use sandglass::analysis::{
    admission, edf, fit, mttf, rta, switch_cost, trace, two_rate, worst_case,
};
use sandglass::microbench::BENCH_JSON_VERSION;
use sandglass::result::Versioned;
use sandglass::RunKind;
use schemars::JsonSchema;
use serde_json::{json, Value};

/// One versioned JSON output.
pub struct Output {
    /// The kind, as in `schema`'s value (`sandglass-KIND/N`) and the file's name
    /// (`docs/schema/KIND.schema.json`).
    pub kind: &'static str,
    /// The version in `schema`.
    pub version: String,
    /// The commands that print it.
    pub commands: String,
    generate: fn() -> Value,
}

impl Output {
    /// The schema, with its title, description and the `schema` field's value.
    pub fn schema(&self) -> Value {
        let body = (self.generate)();
        let mut out = serde_json::Map::new();
        out.insert(
            "$schema".into(),
            "https://json-schema.org/draft/2020-12/schema".into(),
        );
        out.insert(
            "title".into(),
            format!("sandglass {}, {}", self.commands, self.version).into(),
        );
        out.insert(
            "description".into(),
            "Derived from sandglass's result types by `sandglass schema`; docs/json.md says how \
             versions change."
                .into(),
        );
        if let Value::Object(body) = body {
            for (k, v) in body {
                if !matches!(k.as_str(), "$schema" | "title" | "description") {
                    out.insert(k, v);
                }
            }
        }
        let mut v = Value::Object(out);
        v["properties"]["schema"] = json!({ "const": self.version });
        v
    }
}

fn of<T: JsonSchema>() -> Value {
    sandglass::registry::schema_of::<T>()
}

/// The output of each bench kind, from the registry: a new kind's schema needs no line here.
fn benches() -> impl Iterator<Item = Output> {
    RunKind::KNOWN
        .into_iter()
        .filter(RunKind::is_bench)
        .map(|kind| {
            let name = kind.known_name().unwrap_or_default();
            let probe = sandglass::registry::probe_of(&kind)
                .unwrap_or_else(|| panic!("the bench kind {name} has no probe in the registry"));
            Output {
                kind: name,
                version: format!("sandglass-{name}/{BENCH_JSON_VERSION}"),
                commands: format!("{} --json", name.replacen('-', " ", 1)),
                generate: probe.schema,
            }
        })
}

/// The output named after a run kind: its result's schema.
fn run(kind: RunKind) -> &'static str {
    kind.known_name().unwrap_or_default()
}

/// Every versioned JSON output.
pub fn outputs() -> Vec<Output> {
    let fixed = |kind, version: &str, commands: &str, generate| Output {
        kind,
        version: version.to_string(),
        commands: commands.to_string(),
        generate,
    };
    let mut all = vec![
        fixed(
            run(RunKind::Timer),
            sandglass::timer::JSON_SCHEMA,
            "timer --json and a timer run's summary.json",
            of::<sandglass::timer::TimerResult>,
        ),
        fixed(
            "check",
            sandglass::check::SCHEMA,
            "check --json and check.json in its run",
            of::<sandglass::check::CheckReport>,
        ),
        fixed(
            run(RunKind::Noise),
            sandglass::noise::JSON_SCHEMA,
            "noise --json and a noise run's summary.json",
            of::<sandglass::noise::NoiseResult>,
        ),
        fixed(
            run(RunKind::Hourglass),
            sandglass::hourglass::result::JSON_SCHEMA,
            "hourglass --json and a run's summary.json",
            of::<sandglass::hourglass::result::HourglassResult>,
        ),
        fixed(
            run(RunKind::Study),
            sandglass::study::run::JSON_SCHEMA,
            "study --json and quick --json",
            of::<sandglass::study::run::StudyOutcome>,
        ),
        fixed(
            run(RunKind::Load),
            crate::load::JSON_SCHEMA,
            "load --json",
            of::<crate::load::LoadRun<'static>>,
        ),
        fixed(
            "compare",
            sandglass::compare::JSON_SCHEMA,
            "compare --json",
            of::<sandglass::compare::Report>,
        ),
        fixed(
            "merge",
            sandglass::merge::JSON_SCHEMA,
            "report --merge --json",
            of::<sandglass::merge::Merged>,
        ),
        fixed(
            "runs",
            crate::runs::JSON_SCHEMA,
            "runs list --json",
            of::<crate::runs::RunList>,
        ),
        fixed(
            "sysinfo",
            crate::sysinfo::JSON_SCHEMA,
            "sysinfo --json",
            of::<Versioned<sandglass::system::SystemSnapshot>>,
        ),
        fixed(
            "study-record",
            sandglass::study::run::RECORD_SCHEMA,
            "a study's study.json (the record in study --json)",
            of::<sandglass::study::run::StudyRecord>,
        ),
        fixed(
            "calibrate",
            crate::calibrate::JSON_SCHEMA,
            "calibrate --json",
            of::<crate::calibrate::CalibrateOutput>,
        ),
        fixed(
            "runs-show",
            crate::runs::SHOW_SCHEMA,
            "runs show ID --json",
            of::<crate::runs::RunShow>,
        ),
        fixed(
            "runs-rebuild",
            crate::runs::REBUILD_SCHEMA,
            "runs rebuild --json",
            of::<Versioned<sandglass::catalog::RebuildReport>>,
        ),
        analyze(
            "analyze-rta",
            "analyze rta --json",
            of::<Analysis<rta::RtaReport>>,
        ),
        analyze(
            "analyze-rta-validate",
            "analyze rta --validate --json",
            of::<Analysis<crate::analyze::RtaValidated>>,
        ),
        analyze(
            "analyze-edf",
            "analyze edf --json",
            of::<Analysis<edf::EdfReport>>,
        ),
        analyze(
            "analyze-admission",
            "analyze admission --json",
            of::<Analysis<admission::AdmissionReport>>,
        ),
        analyze(
            "analyze-mttf",
            "analyze mttf --buffer T --buffers N --json",
            of::<Analysis<mttf::MttfResult>>,
        ),
        analyze(
            "analyze-mttf-grid",
            "analyze mttf --grid --json",
            of::<Analysis<Rows<mttf::MttfResult>>>,
        ),
        analyze(
            "analyze-mttf-target",
            "analyze mttf --target T --json",
            of::<Analysis<Rows<mttf::LeastBuffering>>>,
        ),
        analyze(
            "analyze-worst-case",
            "analyze worst-case --json",
            of::<Analysis<worst_case::WorstCaseReport>>,
        ),
        analyze(
            "analyze-fit",
            "analyze fit --json",
            of::<Analysis<fit::CostFit>>,
        ),
        analyze(
            "analyze-two-rate",
            "analyze two-rate --json",
            of::<Analysis<two_rate::TwoRate>>,
        ),
        analyze(
            "analyze-switch-cost",
            "analyze switch-cost --json",
            of::<Analysis<switch_cost::SwitchCost>>,
        ),
        analyze(
            "analyze-ctxsw",
            "analyze ctxsw --json",
            of::<Analysis<trace::Switches>>,
        ),
        analyze(
            "analyze-cache-cost",
            "analyze cache-cost --json",
            of::<Analysis<Rows<sandglass::experiments::CacheCostRow>>>,
        ),
        analyze(
            "analyze-ttest",
            "analyze ttest --json",
            of::<Analysis<Ttest>>,
        ),
    ];
    // After the load's output, where the bench kinds have always been listed.
    let load = run(RunKind::Load);
    let at = all
        .iter()
        .position(|o| o.kind == load)
        .map_or(all.len(), |i| i + 1);
    all.splice(at..at, benches());
    all
}

/// An `analyze KIND --json` output (its kind is `analyze-KIND`).
fn analyze(kind: &'static str, commands: &str, generate: fn() -> Value) -> Output {
    Output {
        kind,
        version: format!("sandglass-{kind}/{}", crate::analyze::JSON_VERSION),
        commands: commands.to_string(),
        generate,
    }
}

/// `sandglass schema KIND`.
pub fn schema(kind: &str) -> Result<u8, Failure> {
    let all = outputs();
    match all.iter().find(|o| o.kind == kind) {
        Some(o) => {
            print_json(&o.schema())?;
            Ok(0)
        }
        None => Err(Failure::usage(format!(
            "schema {kind}: no such output; give one of {}",
            all.iter().map(|o| o.kind).collect::<Vec<_>>().join(", ")
        ))),
    }
}
