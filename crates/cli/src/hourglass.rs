//! `sandglass hourglass` and `sandglass quick`.

use crate::common::{context, exit_code_for, Console, Failure};
use anyhow::Context;
use clap::Args;
use sandglass::hourglass::cmdline::{self, Command as HgCommand};
use sandglass::hourglass::run;
use sandglass_report::hourglass as hg_report;
use std::io::{self, Write};
use std::path::PathBuf;

#[derive(Args)]
pub struct QuickArgs {
    /// How long to measure (self-describing time: 10s, 1m, 500ms)
    #[arg(short, long, default_value = "10s")]
    pub duration: String,
    /// Run directory (default ./sandglass-runs/<id>)
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

pub fn hourglass(args: &[String]) -> Result<u8, Failure> {
    let spec = match cmdline::parse(args) {
        Ok(HgCommand::Help) => {
            print!("{}", cmdline::HELP);
            return Ok(0);
        }
        Ok(HgCommand::Run(spec)) => spec,
        Err(e) => return Err(Failure::usage(e.to_string())),
    };
    let mut console = Console::new();
    let result = run::run(&spec, &context(), &mut console);
    console.clear();
    let result = result?;
    let opts = hg_report::Options {
        trace: !spec.suppress_trace,
        raw_cycles: spec.raw_cycles,
        gap_histogram: spec.gap_histogram,
        latlate: true,
    };
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    hg_report::write(&mut out, &result, &opts)
        .and_then(|_| out.flush())
        .context("writing the output")?;
    Ok(exit_code_for(&result.state))
}

/// The words of the quick measurement, as an Hourglass command line.
fn quick_words(duration: &str, output: Option<&PathBuf>) -> Vec<String> {
    let mut w: Vec<String> = [
        "-n", "2", "-d", duration, "-x", "-t", "0", "-p", "RTHIGH", "-w", "LAT", "1ms", "-i", "HR",
        "-t", "1", "-p", "NORMAL", "-w", "CPU",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(o) = output {
        w.push("-o".into());
        w.push(o.display().to_string());
    }
    w
}

pub fn quick(a: &QuickArgs) -> Result<u8, Failure> {
    let words = quick_words(&a.duration, a.output.as_ref());
    let spec = match cmdline::parse(&words) {
        Ok(HgCommand::Run(spec)) => spec,
        Ok(HgCommand::Help) => return Ok(0),
        Err(e) => return Err(Failure::usage(e.to_string())),
    };
    eprintln!(
        "sandglass: quick measurement, the same as: sandglass hourglass {}",
        words.join(" ")
    );
    let mut console = Console::new();
    let result = run::run(&spec, &context(), &mut console);
    console.clear();
    let result = result?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    hg_report::write_summary(&mut out, &result)
        .and_then(|_| out.flush())
        .context("writing the output")?;
    Ok(exit_code_for(&result.state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_is_a_valid_hourglass_command_line() {
        let words = quick_words("10s", None);
        assert!(matches!(cmdline::parse(&words), Ok(HgCommand::Run(_))));
    }
}
