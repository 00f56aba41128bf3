//! The registry: every probe by the kind of run it writes ([`probe_of`], one line per probe),
//! and what the catalog asks of them: a kind's key figures ([`RunKind::key_figures`]) and a
//! stored result's ([`figures`]).

use crate::kind::KeyFigure;
use crate::probe::{array, Figures, Probe};
use crate::RunKind;
use serde_json::{Map, Value};

/// What the catalog needs of a probe, without its types: its key figures and how to read them
/// from a stored result.
#[derive(Clone, Copy)]
pub struct Entry {
    pub figures: &'static [KeyFigure],
    pub read: fn(&Value, &mut Figures),
    /// The JSON Schema (draft 2020-12) of the probe's result as it is written.
    pub schema: fn() -> Value,
}

fn entry<P: Probe>() -> Entry {
    Entry {
        figures: P::FIGURES,
        read: P::figures,
        schema: schema_of::<P::Result>,
    }
}

/// The JSON Schema (draft 2020-12) of `T` as it is serialised.
pub fn schema_of<T: schemars::JsonSchema>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// The registry: every probe, by the kind of run it writes. `None` for a kind that no probe
/// writes (a load run, a study, a kind this version does not know).
pub fn probe_of(kind: &RunKind) -> Option<Entry> {
    use crate::hourglass::HourglassProbe;
    use crate::microbench::{budget, copy, ctxsw, file, ipc, timer_overhead};
    Some(match kind {
        RunKind::Timer => entry::<crate::timer::TimerProbe>(),
        RunKind::Noise => entry::<crate::noise::NoiseProbe>(),
        RunKind::Hourglass => entry::<HourglassProbe>(),
        RunKind::BenchCopy => entry::<copy::CopyProbe>(),
        RunKind::BenchIpc => entry::<ipc::IpcProbe>(),
        RunKind::BenchCtxsw => entry::<ctxsw::CtxswProbe>(),
        RunKind::BenchFile => entry::<file::FileProbe>(),
        RunKind::BenchTimerOverhead => entry::<timer_overhead::TimerOverheadProbe>(),
        RunKind::BenchBudget => entry::<budget::BudgetProbe>(),
        RunKind::Load | RunKind::Study | RunKind::Unknown(_) => return None,
    })
}

impl RunKind {
    /// The key figures the catalog keeps for a run of this kind, in the order people read
    /// them: its probe's, a load run's profile, a study's cells; none for a kind this version
    /// does not know.
    pub fn key_figures(&self) -> &'static [KeyFigure] {
        match (probe_of(self), self) {
            (Some(p), _) => p.figures,
            (None, RunKind::Load) => std::slice::from_ref(&crate::kind::LOAD),
            (None, RunKind::Study) => crate::kind::STUDY,
            (None, _) => &[],
        }
    }

    /// The key figure `key` of this kind, when it declares one.
    pub fn key_figure(&self, key: &str) -> Option<&'static KeyFigure> {
        self.key_figures().iter().find(|f| f.key == key)
    }
}

/// The key figures of a run of `kind`, from its summary (`summary.json` or `result.json`) and,
/// for a load run, its `loads.json`. Times are integer nanoseconds in keys ending in `_ns`. A
/// figure the summary does not have is left out; a run that no probe wrote has only its load
/// profile.
pub fn figures(kind: &RunKind, summary: &Value, loads: &Value) -> Map<String, Value> {
    let mut f = Figures::new(kind.key_figures());
    if let Some(p) = probe_of(kind) {
        (p.read)(summary, &mut f);
    }
    let load = if *kind == RunKind::Load {
        profile(loads)
    } else {
        profile(&summary["loads"])
    };
    if let Some(p) = load {
        f.text("load", p);
    }
    f.finish()
}

/// The load profile of a list of load reports: their specs joined with `+`.
fn profile(loads: &Value) -> Option<String> {
    let specs: Vec<&str> = array(loads)
        .iter()
        .filter_map(|l| l.get("spec")?.as_str())
        .collect();
    (!specs.is_empty()).then(|| specs.join("+"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn figures_of_every_kind() {
        let f = figures(
            &RunKind::Noise,
            &json!({"cpus": [
                {"noise_share": 0.02, "interruptions_per_s": 100.0, "max_ns": 5000},
                {"noise_share": 0.03, "interruptions_per_s": 90.0, "max_ns": 7000}]}),
            &Value::Null,
        );
        assert_eq!(f["noise_share"], 0.03);
        assert_eq!(f["interruptions_per_s"], 100);
        assert_eq!(f["max_ns"], 7000);
        let f = figures(
            &RunKind::Hourglass,
            &json!({"threads": [{"misses": 2}, {"misses": null}, {"misses": 1}],
                    "trace": {"records": 544}}),
            &Value::Null,
        );
        assert_eq!(
            (
                f["threads"].clone(),
                f["records"].clone(),
                f["misses"].clone()
            ),
            (json!(3), json!(544), json!(3))
        );
        let f = figures(
            &RunKind::Load,
            &Value::Null,
            &json!([{"spec": "cpu"}, {"spec": "net:2"}]),
        );
        assert_eq!(f["load"], "cpu+net:2");
        let f = figures(
            &RunKind::BenchBudget,
            &json!({"measured": {"frames": 6, "missed": 1, "response_ns": {"p99_ns": 900}}}),
            &Value::Null,
        );
        assert_eq!(f["missed"], 1);
        assert_eq!(f["response_p99_ns"], 900);
        assert!(figures(&RunKind::Timer, &Value::Null, &Value::Null)
            .get("p99_ns")
            .is_none());
        let f = figures(
            &RunKind::Timer,
            &json!({"cpus": [], "causes": {"kernel": {"latency": [
                {"irq_ns": {"p99": 12000, "max": 90000}, "thread_ns": {"p99": 30000, "max": 95000}},
                {"irq_ns": {"p99": 15000, "max": 40000}, "thread_ns": null}]}}}),
            &Value::Null,
        );
        assert_eq!(
            (
                f["irq_p99_ns"].clone(),
                f["irq_max_ns"].clone(),
                f["thread_p99_ns"].clone(),
                f["thread_max_ns"].clone()
            ),
            (json!(15000), json!(90000), json!(30000), json!(95000))
        );
        for key in f.keys() {
            assert!(RunKind::Timer.key_figure(key).is_some(), "{key} undeclared");
        }
    }

    /// Every figure the catalog keeps is one its kind declares, with a unit.
    #[test]
    fn every_figure_is_declared_by_its_kind() {
        let cpus = json!({"cpus": [{"count": 5, "missed_releases": 1, "noise_share": 0.1,
            "interruptions_per_s": 9.0, "max_ns": 7,
            "lateness_ns": {"p50": 1, "p90": 2, "p99": 3, "p99.9": 4, "p99.99": 5, "max": 6},
            "percentiles_ns": {"p50": 1, "p99": 2, "p99.9": 3}}],
            "loads": [{"spec": "cpu"}]});
        let timers: Vec<Value> = ["HR", "native", "posix", "timerfd"]
            .iter()
            .map(|t| json!({"timer": t, "analysis": {"solution": {"overhead_ns": 800.0}}}))
            .collect();
        let cases = [
            (RunKind::Timer, cpus.clone()),
            (RunKind::Noise, cpus),
            (
                RunKind::Hourglass,
                json!({"threads": [{"misses": 1}], "trace": {"records": 4}}),
            ),
            (
                RunKind::BenchCopy,
                json!({"cells": [{"size_bytes": 4096, "copies_per_sample": 1,
                    "sample_ns": {"p50_ns": 100}}]}),
            ),
            (
                RunKind::BenchIpc,
                json!({"mechanisms": [{"cells": [{"one_way_ns": {"p50_ns": 900}}]}]}),
            ),
            (
                RunKind::BenchCtxsw,
                json!({"cells": [{"working_set_bytes": 0, "switch_ns": {"p50_ns": 1500}}]}),
            ),
            (
                RunKind::BenchFile,
                json!({"passes": [{"throughput_bytes_per_s": 1e9}]}),
            ),
            (RunKind::BenchTimerOverhead, json!({"kinds": timers})),
            (
                RunKind::BenchBudget,
                json!({"measured": {"frames": 6, "missed": 1, "response_ns": {"p99_ns": 900}}}),
            ),
        ];
        for (kind, summary) in cases {
            let f = figures(&kind, &summary, &Value::Null);
            assert!(!f.is_empty(), "{kind}: {f:?}");
            for key in f.keys() {
                assert!(kind.key_figure(key).is_some(), "{kind}: {key} undeclared");
            }
        }
        let f = figures(&RunKind::Load, &Value::Null, &json!([{"spec": "net"}]));
        assert_eq!(f["load"], "net");
        assert!(RunKind::Load.key_figure("load").is_some());
    }
}
