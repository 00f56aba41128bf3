//! Hourglass (Regehr, USENIX 2002) on Linux: the command line, the plan, the run and its result.

pub mod cmdline;
pub mod result;
#[cfg(feature = "linux")]
pub mod run;
pub mod siblings;

use crate::kind::{fig, KeyFigure, OverCpus, Unit, LOAD};
use crate::probe::{array, num, Figures, Probe};
use crate::RunKind;
use serde_json::Value;

/// The Hourglass probe: synthetic real-time threads (periodic, CPU-bound, latency) as a command
/// line describes them, and their trace.
pub struct HourglassProbe;

impl Probe for HourglassProbe {
    const KIND: RunKind = RunKind::Hourglass;
    type Config = cmdline::HourglassSpec;
    type Result = result::HourglassResult;

    /// Its key figures, in the order people read them.
    const FIGURES: &'static [KeyFigure] = &[
        fig("threads", "threads", Unit::Count, OverCpus::Run),
        fig("records", "records", Unit::Count, OverCpus::Run),
        fig("misses", "misses", Unit::Count, OverCpus::Sum),
        LOAD,
    ];

    #[cfg(feature = "linux")]
    fn run(
        spec: &Self::Config,
        ctx: &crate::runner::RunContext,
        obs: &mut dyn crate::runner::Observer,
    ) -> Result<result::HourglassResult, crate::runner::RunError> {
        run::run(spec, ctx, obs)
    }

    fn figures(s: &Value, f: &mut Figures) {
        let threads = array(&s["threads"]);
        f.add("threads", Some(threads.len() as f64));
        f.add("records", num(&s["trace"]["records"]));
        for t in threads {
            f.add("misses", num(&t["misses"]));
        }
    }
}
