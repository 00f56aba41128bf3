//! The export flags shared by the commands that read a finished run (`sandglass report RUN`):
//! `--csv DIR`, `--cyclictest FILE` and `--perfetto FILE`. The formats are in
//! `docs/export.md`; the library in `sandglass_report::export` writes them.

use crate::common::Failure;
use sandglass::store::RunReader;
use sandglass::units::Nanos;
use sandglass_report::export::{csv, cyclictest, perfetto, ExportError};
use std::path::{Path, PathBuf};

/// `--csv`, `--cyclictest`, `--cyclictest-max`, `--cyclictest-raw` and `--perfetto`.
#[derive(clap::Args, Clone, Debug)]
pub struct ExportFlags {
    /// Write the run's tables as CSV files into DIR (created if missing; a file that already
    /// exists there is never overwritten)
    #[arg(long, value_name = "DIR")]
    pub csv: Option<PathBuf>,
    /// Write the wakeup latencies as cyclictest's histogram file (cyclictest -h), for timer runs
    /// and Hourglass runs with LAT threads
    #[arg(long, value_name = "FILE")]
    pub cyclictest: Option<PathBuf>,
    /// Number of 1 us buckets in the cyclictest histogram (cyclictest -h US); later samples
    /// are overflows
    #[arg(long = "cyclictest-max", value_name = "US", default_value_t = cyclictest::DEFAULT_MAX_US)]
    pub cyclictest_max: usize,
    /// Put one sample per wakeup in the cyclictest histogram (cyclictest's own view) instead
    /// of every release with missed releases included
    #[arg(long = "cyclictest-raw")]
    pub cyclictest_raw: bool,
    /// Write the trace and kernel events as Chrome trace-event JSON for ui.perfetto.dev and
    /// chrome://tracing
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<PathBuf>,
    /// With --perfetto: only the 2 ms around each of the run's N largest delays (late wakeups,
    /// interruptions, preemption gaps), so that a long run gives a small file
    #[arg(
        long,
        value_name = "N",
        requires = "perfetto",
        conflicts_with = "window"
    )]
    pub largest: Option<usize>,
}

impl Default for ExportFlags {
    fn default() -> ExportFlags {
        ExportFlags {
            csv: None,
            cyclictest: None,
            cyclictest_max: cyclictest::DEFAULT_MAX_US,
            cyclictest_raw: false,
            perfetto: None,
            largest: None,
        }
    }
}

impl ExportFlags {
    /// True when any export was asked for.
    pub fn any(&self) -> bool {
        self.csv.is_some() || self.cyclictest.is_some() || self.perfetto.is_some()
    }
}

/// The part of the run `--window` (START and LENGTH) and `--largest` ask the Perfetto export
/// for.
fn perfetto_part(
    flags: &ExportFlags,
    window: Option<(Nanos, Nanos)>,
) -> Result<perfetto::Options, Failure> {
    if flags.largest == Some(0) {
        return Err(Failure::usage(
            "--largest 0: give how many of the largest delays to export, such as 20".to_string(),
        ));
    }
    Ok(perfetto::Options {
        window_ns: window.map(|(a, len)| (a.0 as i64, a.0.saturating_add(len.0) as i64)),
        largest: flags.largest,
    })
}

/// The largest histogram cyclictest's own option accepts in practice: ten seconds in 1 µs
/// buckets.
const MAX_BUCKETS: usize = 10_000_000;

/// Checks a file given to `flag`: it must not exist and its directory must.
pub(crate) fn output_file(flag: &str, path: &Path) -> Result<(), Failure> {
    if path.exists() || path.symlink_metadata().is_ok() {
        return Err(Failure::usage(format!(
            "{flag} {}: the file already exists; exports never overwrite a file, so remove it or give another name",
            path.display()
        )));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(Failure::usage(format!(
            "{flag} {}: the directory {} does not exist; create it first",
            path.display(),
            parent.display()
        )));
    }
    if path.file_name().is_none() {
        return Err(Failure::usage(format!(
            "{flag} {}: give a file name",
            path.display()
        )));
    }
    Ok(())
}

fn failure(flag: &str, path: &Path, e: ExportError) -> Failure {
    Failure::usage(format!("{flag} {}: {e}", path.display()))
}

/// Writes every export `flags` asks for from the run at `run`, and returns the files written
/// (none when no export was asked for). Every problem is one line and exit code 2: a run that
/// cannot be read or is damaged (the message names the file), an export that does not apply
/// to the run's kind, an output that exists or cannot be written. Outputs are checked before
/// anything is written.
/// Writes the exports `flags` asks for of `run`; `window` (start and length from the run's
/// start) narrows the Perfetto export.
pub fn write_exports(
    flags: &ExportFlags,
    run: &Path,
    window: Option<(Nanos, Nanos)>,
) -> Result<Vec<PathBuf>, Failure> {
    if flags.csv.is_none() && flags.cyclictest.is_none() && flags.perfetto.is_none() {
        return Ok(Vec::new());
    }
    if flags.cyclictest_max == 0 || flags.cyclictest_max > MAX_BUCKETS {
        return Err(Failure::usage(format!(
            "--cyclictest-max {}: give a number of 1 us buckets from 1 to {MAX_BUCKETS}, such as 10000",
            flags.cyclictest_max
        )));
    }
    if let Some(p) = &flags.cyclictest {
        output_file("--cyclictest", p)?;
    }
    let part = perfetto_part(flags, window)?;
    if let Some(p) = &flags.perfetto {
        output_file("--perfetto", p)?;
    }
    if let Some(d) = &flags.csv {
        if d.exists() && !d.is_dir() {
            return Err(Failure::usage(format!(
                "--csv {}: it exists and is not a directory; give a directory",
                d.display()
            )));
        }
    }
    let reader = RunReader::open_kept(run).map_err(|e| Failure::usage(e.to_string()))?;
    if reader.manifest.state == sandglass::store::RunState::Incomplete {
        eprintln!(
            "sandglass: note: {} is incomplete ({}); exporting what it kept",
            run.display(),
            reader
                .manifest
                .end_detail
                .as_deref()
                .unwrap_or("no reason recorded")
        );
    }
    let mut written = Vec::new();
    if let Some(d) = &flags.csv {
        written.extend(csv::write(&reader, d).map_err(|e| failure("--csv", d, e))?);
    }
    if let Some(p) = &flags.cyclictest {
        let view = if flags.cyclictest_raw {
            cyclictest::View::Raw
        } else {
            cyclictest::View::Corrected
        };
        cyclictest::write(&reader, p, flags.cyclictest_max, view)
            .map_err(|e| failure("--cyclictest", p, e))?;
        written.push(p.clone());
    }
    if let Some(p) = &flags.perfetto {
        perfetto::write(&reader, p, &part).map_err(|e| failure("--perfetto", p, e))?;
        written.push(p.clone());
    }
    Ok(written)
}
