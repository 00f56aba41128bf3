//! `sandglass compare`: key figures of runs side by side, regressions flagged, and gates for CI.
//! Exit codes are rtla's: 0 pass, 2 a gate crossed, 1 an error (bad arguments included).

use crate::common::{print_json, Failure};
use clap::Args;
use sandglass::compare::{self, Options};
use std::io::{self, Write};

/// Options of `sandglass compare`.
#[derive(Args)]
pub struct CompareArgs {
    /// Timer or noise runs: directories, or run ids (or unique prefixes) in the runs directory;
    /// the first is the baseline. RUN+RUN+... is one side made of several runs (from many hosts
    /// as well), their histograms merged without loss and every CPU pooled
    #[arg(required = true, num_args = 1..)]
    pub runs: Vec<String>,
    /// Fail (exit 2) when a figure of a compared run exceeds its limit, such as
    /// p99.99=100us,max=1ms,missed=0 (with one run, the run itself is checked)
    #[arg(long, value_name = "FIGURE=VALUE,...")]
    pub fail_above: Option<String>,
    /// Fail (exit 2) when a flagged regression is worse than the baseline by more than this,
    /// such as 10%
    #[arg(long, value_name = "PERCENT")]
    pub fail_regression: Option<String>,
    /// A worse figure is a regression beyond this change, where that figure's own change is
    /// significant (a maximum, one sample per run, never is)
    #[arg(long, value_name = "PERCENT", default_value = "5%")]
    pub tolerance: String,
    /// Significance level of the tests: of each count's change, and Mann-Whitney's
    #[arg(long, default_value_t = 0.01)]
    pub alpha: f64,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
}

/// Every problem of compare is exit code 1: 2 means a gate was crossed.
fn error(message: impl std::fmt::Display) -> Failure {
    Failure::runtime(message)
}

/// One side of the comparison: a run, or `RUN+RUN+...` (a directory whose own name holds a `+`
/// is taken as it is).
fn side(arg: &str) -> Result<Vec<std::path::PathBuf>, Failure> {
    if !arg.contains('+') || std::path::Path::new(arg).is_dir() {
        return Ok(vec![crate::common::resolve_run(arg).map_err(error)?]);
    }
    arg.split('+')
        .map(|r| {
            if r.trim().is_empty() {
                Err(error(format!(
                    "{arg}: an empty run in a group; write runs joined by +, such as RUN1+RUN2"
                )))
            } else {
                crate::common::resolve_run(r).map_err(error)
            }
        })
        .collect()
}

pub fn compare(a: &CompareArgs) -> Result<u8, Failure> {
    if a.runs.len() < 2 && a.fail_above.is_none() {
        return Err(error(
            "compare needs two runs or more (the first is the baseline), or one run with --fail-above",
        ));
    }
    if !(a.alpha > 0.0 && a.alpha < 1.0) {
        return Err(error(format!(
            "--alpha {}: must be between 0 and 1, such as 0.01",
            a.alpha
        )));
    }
    let options = Options {
        alpha: a.alpha,
        tolerance: compare::parse_share(&a.tolerance)
            .map_err(|e| error(format!("--tolerance: {e}")))?,
        fail_above: a
            .fail_above
            .as_deref()
            .map(compare::parse_gates)
            .transpose()
            .map_err(|e| error(format!("--fail-above: {e}")))?
            .unwrap_or_default(),
        fail_regression: a
            .fail_regression
            .as_deref()
            .map(compare::parse_share)
            .transpose()
            .map_err(|e| error(format!("--fail-regression: {e}")))?,
    };
    let sides = a
        .runs
        .iter()
        .map(|r| side(r))
        .collect::<Result<Vec<_>, _>>()?;
    let runs = if sides.iter().all(|s| s.len() == 1) {
        let paths: Vec<_> = sides.into_iter().flatten().collect();
        compare::load_all(&paths)
    } else {
        sides.iter().map(|s| compare::load_group(s)).collect()
    }
    .map_err(|e| error(e.to_string()))?;
    let report = compare::compare(&runs, &options).map_err(|e| error(e.to_string()))?;
    if a.json {
        print_json(&report)?;
    } else {
        let mut out = crate::common::text_stdout();
        sandglass_report::compare::write(&mut out, &report)
            .and_then(|_| out.flush())
            .map_err(|e| match e.kind() {
                io::ErrorKind::BrokenPipe => crate::common::output_error(e),
                _ => error(format!("writing the output: {e}")),
            })?;
    }
    Ok(report.exit_code)
}
