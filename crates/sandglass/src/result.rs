//! What every probe's result shares, and the end of every run: one header (identity, how the
//! run ended, settings held, warnings, loads, causes), the summary file, and the final manifest.
//!
//! A probe's result is this header flattened beside the probe's own figures
//! (`#[serde(flatten)]`), so every `summary.json` and `--json` output starts with the same
//! fields and the code that writes, reads and prints them is written once.

use crate::causes::Causes;
use crate::load::LoadReport;
#[cfg(feature = "linux")]
use crate::runner::{Measured, RunError};
use crate::store::RunState;
#[cfg(feature = "linux")]
use crate::store::{self, FileEntry, ReadError, StoreError};
use crate::units::Nanos;
use crate::warning::Warning;
#[cfg(feature = "linux")]
use crate::warning::WarningKind;
use serde::{Deserialize, Serialize};

/// The fields every result starts with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunHeader {
    /// The version of the result's format, such as `sandglass-timer/2`; empty in summaries
    /// written before the field existed.
    #[serde(default)]
    pub schema: String,
    /// The probe (`timer`, `noise`, `hourglass`); empty in Hourglass summaries of run format 1,
    /// which had no such field (the manifest names the kind).
    #[serde(default)]
    #[schemars(with = "String")]
    pub kind: crate::RunKind,
    pub run_id: String,
    pub run_dir: String,
    pub state: RunState,
    pub end_detail: String,
    pub duration_ns: Nanos,
    /// From the run's start to the last counter value any thread read.
    #[serde(default)]
    pub elapsed_ns: u64,
    /// `/dev/cpu_dma_latency` held during the run, in µs.
    pub pm_qos_us: Option<u32>,
    pub memory_locked: bool,
    pub warnings: Vec<Warning>,
    /// What each load achieved during the measurement.
    #[serde(default)]
    pub loads: Vec<LoadReport>,
    /// The spikes' explanation and their periodic trains.
    #[serde(default)]
    pub causes: Option<Causes>,
    /// The signal that ended the run early (`SIGINT`, `SIGTERM`, `SIGHUP`), when one did; the
    /// exit code is then 130, 143 or 129.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Stops of the measuring process (Ctrl-Z, SIGSTOP, a debugger), in run time: the delays
    /// they caused are the stop's, not the machine's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stops: Vec<crate::stops::ProcessStop>,
}

impl RunHeader {
    /// The header of run `m` of `duration`, with its warnings so far.
    #[cfg(feature = "linux")]
    pub fn of(m: &mut Measured, schema: &str, duration: Nanos) -> RunHeader {
        RunHeader {
            schema: schema.to_string(),
            kind: m.manifest.kind.clone(),
            run_id: m.dir.id().to_string(),
            run_dir: m.dir.path().display().to_string(),
            state: m.state,
            end_detail: m.end_detail.clone(),
            duration_ns: duration,
            elapsed_ns: m.elapsed_ns(),
            pm_qos_us: m.pm_qos_us,
            memory_locked: m.memory_locked,
            warnings: m.warnings.clone(),
            loads: std::mem::take(&mut m.loads),
            causes: None,
            signal: m.signal.map(|s| s.name().to_string()),
            stops: m.stops.clone(),
        }
    }
}

/// An output whose type has no `schema` field of its own, with its version first.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Versioned<T> {
    /// The version of the output's format, such as `sandglass-sysinfo/1`.
    pub schema: &'static str,
    #[serde(flatten)]
    pub body: T,
}

/// A result that starts with a [`RunHeader`].
pub trait WithHeader {
    fn header(&self) -> &RunHeader;
    fn header_mut(&mut self) -> &mut RunHeader;
}

/// What a timer or noise run writes at its end, besides its result.
#[cfg(feature = "linux")]
pub struct Ending<'a> {
    /// What the stored table holds, for the warning when it cannot be read back
    /// (`samples`, `interruptions`).
    pub stored: &'a str,
    /// The format and description of `summary.json`.
    pub summary_format: &'a str,
    pub summary_description: &'a str,
}

/// Ends a timer or noise run whose store closed with `files` and whose `result` is built: in a
/// run that was not cut short, `exact` replaces figures the threads kept at three significant
/// digits by exact ones from one pass over the stored table (a warning when the table cannot be
/// read back, the histograms' figures kept) and `totals` writes the whole-run histograms; then
/// the run's final state goes into the result, and [`save`] writes the summary and the manifest.
#[cfg(feature = "linux")]
pub fn conclude<T: Serialize + WithHeader>(
    m: &mut Measured,
    mut files: Vec<FileEntry>,
    result: &mut T,
    exact: impl FnOnce(&std::path::Path, &[FileEntry], &mut T) -> Result<(), ReadError>,
    totals: impl FnOnce(&Measured, &T) -> Result<FileEntry, StoreError>,
    ending: &Ending<'_>,
) -> Result<(), RunError> {
    if m.state != RunState::Incomplete {
        if let Err(e) = exact(m.dir.path(), &files, result) {
            m.warnings.push(Warning::new(
                WarningKind::RecordsDropped,
                format!(
                    "the stored {} could not be read back for exact percentiles ({e}); the percentiles are the histograms' (three significant digits)",
                    ending.stored
                ),
            ));
            result.header_mut().warnings = m.warnings.clone();
        }
        match totals(m, result) {
            Ok(f) => files.push(f),
            Err(e) => files = close_store(m, Err(e)),
        }
    }
    let h = result.header_mut();
    h.state = m.state;
    h.end_detail = m.end_detail.clone();
    let h = result.header();
    save(
        m,
        result,
        ending.summary_format,
        ending.summary_description,
        h.causes.as_ref(),
        &h.warnings,
        files,
    )
    .map_err(|e| {
        RunError::Failed(format!(
            "the run finished but its results could not be saved: {e}"
        ))
    })
}

/// Closes a run's store. `closed` is what the probe's store gave when it closed its files:
/// the files, or the error that stopped it. When the run or its closing could not write (a
/// full disk), the files that can be read are recovered and listed ([`store::recover_run`]),
/// and the run is marked incomplete with the reason.
#[cfg(feature = "linux")]
pub fn close_store(m: &mut Measured, closed: Result<Vec<FileEntry>, StoreError>) -> Vec<FileEntry> {
    let failure = match (closed, m.store_error.take()) {
        (Ok(files), None) => return files,
        (Ok(_), Some(e)) | (Err(e), None) => e,
        (Err(_), Some(first)) => first,
    };
    if m.state != RunState::Incomplete {
        m.store_failed(format!(
            "{}; then the run's store could not be written: {failure}; what was written is kept (free some space, or choose another place with -o)",
            m.end_detail
        ));
    }
    store::recover_run(m.dir.path()).unwrap_or_default()
}

/// Writes `totals.hlog`: whole-run histograms `(tag, histogram)` with `comments`, placed at the
/// run's start in time.
#[cfg(feature = "linux")]
pub fn write_totals(
    m: &Measured,
    comments: &[String],
    entries: &[(String, &hdrhistogram::Histogram<u64>)],
) -> Result<FileEntry, StoreError> {
    let elapsed_s = m.elapsed_ns() as f64 / 1e9;
    let entries: Vec<crate::histo::LogEntry<'_>> = entries
        .iter()
        .map(|(tag, h)| crate::histo::LogEntry {
            tag: tag.clone(),
            start_s: 0.0,
            duration_s: elapsed_s,
            histogram: h,
        })
        .collect();
    let name = store::TOTALS_LOG;
    let log = crate::histo::write_interval_log(comments, Some(m.started), &entries).map_err(
        |source| StoreError::Write {
            path: m.dir.path().join(name),
            source,
        },
    )?;
    m.dir
        .write_file(name, &log, store::HLOG_FORMAT, store::TOTALS_DESCRIPTION)
}

/// Writes `summary.json` (format `format`), the sampler's and the kernel attribution's files,
/// and the final manifest listing `files` and those.
#[cfg(feature = "linux")]
pub fn save<T: Serialize>(
    m: &Measured,
    result: &T,
    format: &str,
    description: &str,
    causes: Option<&Causes>,
    warnings: &[Warning],
    mut files: Vec<FileEntry>,
) -> Result<(), StoreError> {
    let summary = serde_json::to_vec_pretty(result).map_err(|source| StoreError::Encode {
        what: "summary.json".into(),
        source,
    })?;
    if let Some(f) = m.sampler.as_ref().and_then(|d| d.file.clone()) {
        if !files.iter().any(|x| x.name == f.name) {
            files.push(f);
        }
    }
    if let Some(k) = causes.and_then(|c| c.kernel.as_ref()) {
        files.push(crate::causes::write_attribution(&m.dir, k)?);
        files.extend(k.files.iter().cloned());
    }
    files.push(
        m.dir
            .write_file("summary.json", &summary, format, description)?,
    );
    m.finish(files, warnings)
}
