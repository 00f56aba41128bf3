//! `sandglass report RUN|STUDY`: a finished run or study for people (its terminal summary,
//! Markdown, or a self-contained HTML page with plots, read back from the directory) and for
//! other tools (the exports of [`crate::export`]).

use crate::common::{resolve_run, time_arg, Failure};
use crate::export::{output_file, write_exports, ExportFlags};
use clap::Args;
use sandglass::store::RunReader;
use sandglass::study::run as study_run;
use sandglass::Nanos;
use sandglass::RunKind;
use sandglass_report::export::write_atomic;
use sandglass_report::html;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Options of `sandglass report`.
#[derive(Args)]
pub struct ReportArgs {
    /// The run or study directory, or an id (or a unique prefix of one) in the runs directory
    #[arg(required_unless_present = "merge")]
    pub run: Option<String>,
    /// Timer or noise runs (from any hosts) as one distribution: each run's figures, then the
    /// histogram of all their samples, merged without loss
    #[arg(long, num_args = 1.., value_name = "RUN", conflicts_with = "run")]
    pub merge: Vec<String>,
    /// With --merge: print JSON (schema sandglass-merge/1) instead of the table
    #[arg(long, requires = "merge")]
    pub json: bool,
    /// Print the key figures as Markdown, for pasting into an issue
    #[arg(long)]
    pub markdown: bool,
    /// Write one self-contained HTML page with plots to FILE (inline CSS and SVG; opens from
    /// disk, no network); an existing file is never overwritten
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// The window of an Hourglass run's execution timeline in the HTML page [default: 0:100ms],
    /// or of the --perfetto export [default: all], from the run's start, such as 1s:50ms
    #[arg(long, value_name = "START:LENGTH")]
    pub window: Option<String>,
    #[command(flatten)]
    pub export: ExportFlags,
}

/// `--window START:LENGTH`.
fn window(text: &str) -> Result<(Nanos, Nanos), Failure> {
    let bad = |why: String| Failure::usage(format!("--window {text}: {why}"));
    let (a, b) = text
        .split_once(':')
        .ok_or_else(|| bad("write START:LENGTH, such as 1s:50ms".into()))?;
    let start = if a.trim() == "0" {
        Nanos::ZERO
    } else {
        time_arg("--window", a.trim())?
    };
    let length = time_arg("--window", b.trim())?;
    if length == Nanos::ZERO {
        return Err(bad("the length must be above zero, such as 50ms".into()));
    }
    Ok((start, length))
}

/// Writes `page` to `file` through a temporary name, so that no half-written page is ever
/// seen under its name.
fn write_page(file: &Path, page: &str) -> Result<(), Failure> {
    write_atomic(file, |w| {
        w.write_all(page.as_bytes()).map_err(|source| {
            sandglass_report::export::ExportError::Write {
                path: file.to_path_buf(),
                source,
            }
        })
    })
    .map_err(|e| Failure::runtime(format!("--html {}: {e}", file.display())))?;
    println!("wrote {}", file.display());
    Ok(())
}

/// A study directory: the tables as after the run, as Markdown, or the HTML page.
fn report_study(a: &ReportArgs, dir: &Path) -> Result<u8, Failure> {
    if a.export.any() || a.window.is_some() {
        return Err(Failure::usage(format!(
            "{}: a study; the exports and --window take a run (a cell's directory inside the study)",
            dir.display()
        )));
    }
    let outcome = study_run::outcome(dir).map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(file) = &a.html {
        output_file("--html", file)?;
        let page = html::study::page(&outcome).map_err(|e| Failure::usage(e.to_string()))?;
        return write_page(file, &page).map(|_| 0);
    }
    let mut out = crate::common::text_stdout();
    let written = if a.markdown {
        sandglass_report::markdown::study(&mut out, &outcome)
    } else {
        sandglass_report::study::write(&mut out, &outcome)
    };
    written
        .and_then(|_| out.flush())
        .map_err(crate::common::output_error)?;
    Ok(0)
}

/// `--merge RUN...`.
fn report_merge(a: &ReportArgs) -> Result<u8, Failure> {
    if a.export.any() || a.html.is_some() || a.markdown || a.window.is_some() {
        return Err(Failure::usage(
            "--merge prints a table or --json: give the other outputs in another call",
        ));
    }
    let paths = a
        .merge
        .iter()
        .map(|r| resolve_run(r).map_err(Failure::usage))
        .collect::<Result<Vec<_>, _>>()?;
    let merged = sandglass::merge::merge(&paths).map_err(|e| Failure::usage(e.to_string()))?;
    if a.json {
        crate::common::print_json(&merged)?;
    } else {
        crate::common::print_text(|out| sandglass_report::merge::write(out, &merged))?;
    }
    Ok(0)
}

pub fn report(a: &ReportArgs) -> Result<u8, Failure> {
    let Some(run) = &a.run else {
        return report_merge(a);
    };
    let path = resolve_run(run).map_err(Failure::usage)?;
    if a.html.is_some() && (a.export.any() || a.markdown) {
        return Err(Failure::usage(
            "--html writes a page on its own: give the exports or --markdown in another call",
        ));
    }
    if path.join(study_run::STATE_FILE).is_file() {
        return report_study(a, &path);
    }
    if a.window.is_some() && a.html.is_none() && a.export.perfetto.is_none() {
        return Err(Failure::usage(
            "--window narrows the --html timeline or the --perfetto export: add one of them",
        ));
    }
    if let Some(file) = &a.html {
        output_file("--html", file)?;
        let options = html::Options {
            window: a.window.as_deref().map(window).transpose()?,
        };
        let r = RunReader::open(&path).map_err(|e| Failure::usage(e.to_string()))?;
        if options.window.is_some() && r.manifest.kind != RunKind::Hourglass {
            return Err(Failure::usage(format!(
                "--window: {} is a {} run; the window applies to Hourglass execution timelines",
                path.display(),
                r.manifest.kind
            )));
        }
        let page = html::run(&r, &options).map_err(|e| Failure::usage(e.to_string()))?;
        return write_page(file, &page).map(|_| 0);
    }
    if a.export.any() {
        let window = a.window.as_deref().map(window).transpose()?;
        for p in write_exports(&a.export, &path, window)? {
            println!("wrote {}", p.display());
        }
        return Ok(0);
    }
    let r = RunReader::open(&path).map_err(|e| Failure::usage(e.to_string()))?;
    // Every file of the run, not only the summary, must be as the run wrote it.
    r.verify().map_err(|e| Failure::usage(e.to_string()))?;
    let mut out = crate::common::text_stdout();
    let kind = &r.manifest.kind;
    if a.markdown && !kind.has_samples() {
        return Err(Failure::usage(format!(
            "--markdown: {} is a run of kind {kind}; Markdown covers timer, noise and hourglass runs and studies",
            path.display()
        )));
    }
    // The result the run stored: a timer, noise or Hourglass run's summary, a bench run's
    // result (a run of another kind, or a bench run without it, has none to print).
    let (name, what) = if kind.is_bench() {
        ("result.json", "result")
    } else {
        ("summary.json", "summary")
    };
    let stored = if kind.has_samples() || (kind.is_bench() && r.has(name)) {
        Some(r.read(name).map_err(|e| Failure::usage(e.to_string()))?)
    } else {
        None
    };
    let written = match stored
        .and_then(|t| sandglass_report::render::stored(&mut out, kind, &t, a.markdown))
    {
        Some(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
            return Err(Failure::usage(format!(
                "{}: {name} is not a {what} this sandglass reads ({e})",
                path.display()
            )))
        }
        Some(written) => written,
        None => {
            return Err(Failure::usage(format!(
                "{}: a {kind} run; the summary is printed for timer, noise, hourglass and bench runs (the exports --csv and --perfetto take others too)",
                path.display()
            )))
        }
    };
    // The whole distribution at a glance, from the run's whole-run histograms.
    let title = match kind {
        RunKind::Timer if !a.markdown => Some("lateness of every release:"),
        RunKind::Noise if !a.markdown => Some("interruptions:"),
        _ => None,
    };
    let written = written.and_then(|_| match title {
        Some(title) => {
            let totals = sandglass::store::data::totals(&r)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            sandglass_report::text::log_histogram(&mut out, title, &totals.pooled())
        }
        None => Ok(()),
    });
    written
        .and_then(|_| out.flush())
        .map_err(crate::common::output_error)?;
    Ok(0)
}
