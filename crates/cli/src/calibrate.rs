//! `sandglass calibrate`: the counter survey on one CPU.

use crate::common::Failure;
use anyhow::Context;
use clap::Args;
use std::io::{self, Write};

#[derive(Args)]
pub struct CalibrateArgs {
    /// CPU to measure on (default: the highest-numbered CPU this process may use)
    #[arg(short = 'c', long = "cpus", visible_alias = "cpu", value_name = "CPU")]
    pub cpu: Option<usize>,
    /// How long to run each loop
    #[arg(short, long, default_value = "2s")]
    pub duration: String,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

/// The `schema` of `calibrate --json` (docs/json.md).
pub const JSON_SCHEMA: &str = "sandglass-calibrate/1";

/// `calibrate --json`: the counter, its calibration, each timing loop's figures and the gap
/// threshold they give.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct CalibrateOutput {
    /// `sandglass-calibrate/1`.
    pub schema: &'static str,
    /// The CPU the loops ran on.
    pub cpu: usize,
    pub counter: sandglass::clock::CounterInfo,
    pub calibration: sandglass::clock::Calibration,
    pub loops: Vec<LoopOutput>,
    /// The gap threshold the polling loop's figures give, as a measuring command would choose it.
    pub gap_threshold: Option<sandglass::engine::calibrate::GapChoice>,
}

/// One timing loop.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct LoopOutput {
    /// What the loop times, as the table names it.
    #[serde(rename = "loop")]
    pub name: String,
    pub stats: sandglass::engine::calibrate::LoopStats,
    /// Iterations longer than each threshold.
    pub above: Vec<Above>,
}

/// Iterations above a threshold.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct Above {
    pub threshold_ns: u64,
    pub count: u64,
}

pub fn calibrate(a: &CalibrateArgs) -> Result<u8, Failure> {
    let d = sandglass::duration::parse(&a.duration)
        .map_err(|e| Failure::usage(format!("--duration {}: {e}", a.duration)))?;
    if d.0 == 0 {
        return Err(Failure::usage("--duration must be longer than zero"));
    }
    let allowed = sandglass::system::allowed_cpus();
    let cpu = a
        .cpu
        .unwrap_or_else(|| allowed.iter().copied().max().unwrap_or(0));
    if !allowed.contains(&cpu) {
        return Err(Failure::usage(format!(
            "--cpu {cpu}: this process may not use CPU {cpu} (allowed: {:?})",
            allowed
        )));
    }
    let sys = sandglass::system::snapshot();
    let counter = sandglass::clock::select_counter(Default::default(), &sys.cpu_flags)
        .map_err(|e| Failure::usage(e.to_string()))?;
    let survey = sandglass::survey::run(cpu, counter.kind, d.0)
        .ok_or_else(|| Failure::runtime("the calibration thread failed"))?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    if a.json {
        let v = CalibrateOutput {
            schema: JSON_SCHEMA,
            cpu,
            counter: counter.clone(),
            calibration: survey.calibration,
            loops: survey
                .loops
                .iter()
                .map(|l| LoopOutput {
                    name: l.name.clone(),
                    stats: l.stats.clone(),
                    above: l
                        .above_ns
                        .iter()
                        .map(|&(threshold_ns, count)| Above {
                            threshold_ns,
                            count,
                        })
                        .collect(),
                })
                .collect(),
            gap_threshold: survey.threshold.clone(),
        };
        serde_json::to_writer_pretty(&mut out, &v).map_err(crate::common::json_output)?;
        writeln!(out).context("writing the output")?;
    } else {
        writeln!(
            out,
            "counter: {} at {:.3} MHz (uncertainty {:.3} ppm); {}",
            counter.kind,
            survey.calibration.frequency_hz / 1e6,
            survey.calibration.uncertainty_ppm,
            counter.reason
        )
        .context("writing the output")?;
        writeln!(
            out,
            "{:<44} {:>12} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10}",
            format!("loop on CPU {cpu} (times in ns)"),
            "iterations",
            "mean",
            "p50",
            "p99",
            "p99.9",
            "p99.99",
            "p99.999",
            "max"
        )
        .context("writing the output")?;
        for l in &survey.loops {
            let s = &l.stats;
            writeln!(
                out,
                "{:<44} {:>12} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>10}",
                l.name,
                s.iterations,
                s.mean_ns,
                s.p50_ns,
                s.p99_ns,
                s.p99_9_ns,
                s.p99_99_ns,
                s.p99_999_ns,
                s.max_ns as u64
            )
            .context("writing the output")?;
        }
        if let Some(c) = &survey.threshold {
            writeln!(
                out,
                "gap threshold: {} ns ({})",
                c.threshold_ns, c.explanation
            )
            .context("writing the output")?;
        }
    }
    out.flush().context("writing the output")?;
    Ok(0)
}
