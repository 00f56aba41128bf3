//! Experiments that run the engine several times and feed an analysis.
//!
//! `cache_cost` is Hourglass's measurement of the indirect cost of context switches (Regehr
//! 2002, §5.2, Figure 5): for each working-set size, one CPU_SCAN thread alone and then ten of
//! them share one CPU for the same time T; each pass over a working set is a unit of work, and
//! the work the ten lose against the one, per context switch, is the cost of refilling the
//! caches: C = ((W1 − W10)/W1)·T/N10. Each size is repeated and given a t confidence interval,
//! as the paper's 15 trials per size were.
//!
//! [`rta_validate`] runs a task set as Hourglass PERIODIC threads and sets the response-time
//! analysis's predictions against what the threads did (Hourglass §5.5).

#[cfg(feature = "linux")]
use crate::analysis::switch_cost;
use crate::analysis::switch_cost::{SwitchCostSummary, SwitchTrial};
#[cfg(feature = "linux")]
use crate::hourglass::cmdline::{self, Command};
#[cfg(feature = "linux")]
use crate::hourglass::run;
#[cfg(feature = "linux")]
use crate::runner::{Observer, RunContext, RunError};
use crate::units::Nanos;
use serde::Serialize;

pub mod rta_validate;

/// The settings of the cache-cost experiment.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CacheCostConfig {
    /// Working-set sizes in KiB.
    pub sizes_kb: Vec<u64>,
    /// Trials per size.
    pub reps: usize,
    /// T: the length of each run.
    pub duration_ns: Nanos,
    /// Threads in the many-thread run (ten in the paper).
    pub threads: usize,
    /// The CPU both runs share.
    pub cpu: Option<usize>,
    pub confidence: f64,
}

/// One size's result.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct CacheCostRow {
    pub size_kb: u64,
    pub trials: Vec<SwitchTrial>,
    pub summary: Option<SwitchCostSummary>,
    /// Why there is no summary (for example no context switch happened).
    pub error: Option<String>,
}

/// Runs the experiment. `progress` is told each trial as it starts (size, trial, total).
#[cfg(feature = "linux")]
pub fn cache_cost(
    c: &CacheCostConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
    progress: &mut dyn FnMut(u64, usize, usize),
) -> Result<Vec<CacheCostRow>, RunError> {
    if c.sizes_kb.is_empty() || c.reps == 0 || c.threads < 2 {
        return Err(RunError::Usage(
            "cache-cost needs at least one size, one repetition and two threads".into(),
        ));
    }
    let d = crate::duration::format_exact(c.duration_ns);
    let affinity = c
        .cpu
        .map(|cpu| format!(" --affinity {cpu}"))
        .unwrap_or_default();
    let total = c.sizes_kb.len() * c.reps;
    let mut done = 0;
    let mut rows = Vec::new();
    for &kb in &c.sizes_kb {
        let mut trials = Vec::new();
        for _ in 0..c.reps {
            done += 1;
            progress(kb, done, total);
            let one = format!("-n 1 -d {d} -x -a -p NORMAL -w CPU_SCAN {kb}{affinity}");
            let many = format!(
                "-n {} -d {d} -x -a -p NORMAL -w CPU_SCAN {kb}{affinity}",
                c.threads
            );
            let r1 = run_spec(&one, ctx, obs)?;
            let rn = run_spec(&many, ctx, obs)?;
            let work = |r: &crate::hourglass::result::HourglassResult| -> f64 {
                r.threads
                    .iter()
                    .map(|t| t.scan_passes.unwrap_or(0) as f64)
                    .sum()
            };
            trials.push(SwitchTrial {
                work_one: work(&r1),
                work_many: work(&rn),
                duration_ns: c.duration_ns,
                switches: rn.switches.count,
            });
        }
        let (summary, error) = match switch_cost::summarize(&trials, c.confidence) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        };
        rows.push(CacheCostRow {
            size_kb: kb,
            trials,
            summary,
            error,
        });
    }
    Ok(rows)
}

#[cfg(feature = "linux")]
fn run_spec(
    words: &str,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<crate::hourglass::result::HourglassResult, RunError> {
    let args: Vec<String> = words.split_whitespace().map(String::from).collect();
    match cmdline::parse(&args) {
        Ok(Command::Run(spec)) => run::run(&spec, ctx, obs),
        Ok(Command::Help) => Err(RunError::Usage("unexpected help request".into())),
        Err(e) => Err(RunError::Usage(e.to_string())),
    }
}
