//! `sandglass report RUN`: a finished run for people (its terminal summary, read back from the
//! run directory) and for other tools (the exports of [`crate::export`]).

use crate::common::{resolve_run, Failure};
use crate::export::{write_exports, ExportFlags};
use clap::Args;
use sandglass::store::RunReader;
use std::io::{self, Write};

/// Options of `sandglass report`.
#[derive(Args)]
pub struct ReportArgs {
    /// The run directory, or a run id (or a unique prefix of one) in the runs directory
    pub run: String,
    /// Print the key figures as Markdown, for pasting into an issue (timer and noise runs)
    #[arg(long)]
    pub markdown: bool,
    #[command(flatten)]
    pub export: ExportFlags,
}

fn summary<T: serde::de::DeserializeOwned>(r: &RunReader) -> Result<T, Failure> {
    let text = r
        .read_text("summary.json")
        .map_err(|e| Failure::usage(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| {
        Failure::usage(format!(
            "{}: summary.json is not a summary this sandglass reads ({e})",
            r.path().display()
        ))
    })
}

pub fn report(a: &ReportArgs) -> Result<u8, Failure> {
    let path = resolve_run(&a.run).map_err(Failure::usage)?;
    if a.export.any() {
        for p in write_exports(&a.export, &path)? {
            println!("wrote {}", p.display());
        }
        return Ok(0);
    }
    let r = RunReader::open(&path).map_err(|e| Failure::usage(e.to_string()))?;
    // Every file of the run, not only the summary, must be as the run wrote it.
    r.verify().map_err(|e| Failure::usage(e.to_string()))?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let kind = r.manifest.kind.as_str();
    if a.markdown && !matches!(kind, "timer" | "noise") {
        return Err(Failure::usage(format!(
            "--markdown: {} is a run of kind {kind}; Markdown covers timer and noise runs",
            path.display()
        )));
    }
    let written = match kind {
        "timer" if a.markdown => sandglass_report::markdown::timer(&mut out, &summary(&r)?),
        "noise" if a.markdown => sandglass_report::markdown::noise(&mut out, &summary(&r)?),
        "timer" => sandglass_report::timer::write(&mut out, &summary(&r)?),
        "noise" => sandglass_report::noise::write(&mut out, &summary(&r)?),
        "hourglass" => sandglass_report::hourglass::write_summary(&mut out, &summary(&r)?),
        kind => {
            return Err(Failure::usage(format!(
                "{}: a {kind} run; the summary is printed for timer, noise and hourglass runs (the exports --csv and --perfetto take others too)",
                path.display()
            )))
        }
    };
    // The whole distribution at a glance, from the run's own samples.
    let histogram = match kind {
        "timer" if !a.markdown => Some(("lateness of every release:", "samples.csv", 3)),
        "noise" if !a.markdown => Some(("interruptions:", "interruptions.csv", 2)),
        _ => None,
    };
    let written = written.and_then(|_| match histogram {
        Some((title, file, column)) => {
            let text = r
                .read_text(file)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            let values: Vec<i64> = text
                .lines()
                .skip(1)
                .filter_map(|l| l.split(',').nth(column)?.trim().parse().ok())
                .collect();
            sandglass_report::text::log_histogram(&mut out, title, &values)
        }
        None => Ok(()),
    });
    written
        .and_then(|_| out.flush())
        .map_err(|e| Failure::runtime(format!("writing the output: {e}")))?;
    Ok(0)
}
