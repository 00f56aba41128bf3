//! `sandglass schema KIND`: the JSON Schema (draft 2020-12) of each `--json` output, derived
//! from the Rust types that print it, so that a schema cannot drift from its output. The
//! committed copies in `docs/schema/` are compared with these in the tests (docs/json.md).

use crate::common::{print_json, Failure};
use sandglass::microbench::{self, BENCH_JSON_VERSION};
use sandglass::result::Versioned;
use schemars::{generate::SchemaSettings, JsonSchema};
use serde_json::{json, Value};

/// One versioned JSON output.
pub struct Output {
    /// The kind, as in `schema`'s value (`sandglass-KIND/N`) and the file's name
    /// (`docs/schema/KIND.schema.json`).
    pub kind: &'static str,
    /// The version in `schema`.
    pub version: String,
    /// The commands that print it.
    pub commands: &'static str,
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
    SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

fn bench(kind: &'static str, commands: &'static str, generate: fn() -> Value) -> Output {
    Output {
        kind,
        version: format!("sandglass-{kind}/{BENCH_JSON_VERSION}"),
        commands,
        generate,
    }
}

/// Every versioned JSON output.
pub fn outputs() -> Vec<Output> {
    let fixed = |kind, version: &str, commands, generate| Output {
        kind,
        version: version.to_string(),
        commands,
        generate,
    };
    vec![
        fixed(
            "timer",
            sandglass::timer::JSON_SCHEMA,
            "timer --json and a timer run's summary.json",
            of::<sandglass::timer::TimerResult>,
        ),
        fixed(
            "noise",
            sandglass::noise::JSON_SCHEMA,
            "noise --json and a noise run's summary.json",
            of::<sandglass::noise::NoiseResult>,
        ),
        fixed(
            "hourglass",
            sandglass::hourglass::result::JSON_SCHEMA,
            "hourglass: a run's summary.json",
            of::<sandglass::hourglass::result::HourglassResult>,
        ),
        fixed(
            "study",
            sandglass::study::run::JSON_SCHEMA,
            "study --json and quick --json",
            of::<sandglass::study::run::StudyOutcome>,
        ),
        fixed(
            "load",
            crate::load::JSON_SCHEMA,
            "load --json",
            of::<crate::load::LoadRun<'static>>,
        ),
        bench(
            "bench-copy",
            "bench copy --json",
            of::<microbench::copy::CopyResult>,
        ),
        bench(
            "bench-ipc",
            "bench ipc --json",
            of::<microbench::ipc::IpcResult>,
        ),
        bench(
            "bench-ctxsw",
            "bench ctxsw --json",
            of::<microbench::ctxsw::CtxswResult>,
        ),
        bench(
            "bench-file",
            "bench file --json",
            of::<microbench::file::FileResult>,
        ),
        bench(
            "bench-timer-overhead",
            "bench timer-overhead --json",
            of::<microbench::timer_overhead::TimerOverheadResult>,
        ),
        bench(
            "bench-budget",
            "bench budget --json",
            of::<microbench::budget::BudgetResult>,
        ),
        fixed(
            "compare",
            sandglass::compare::JSON_SCHEMA,
            "compare --json",
            of::<sandglass::compare::Report>,
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
    ]
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
