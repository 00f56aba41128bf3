//! Synthetic run directories with known contents and a known clock, for the exports' tests
//! (unit tests here and the command's integration tests), in either run format: format 2
//! stores the tables in Parquet, format 1 in CSV. Not part of the stable API.

use sandglass::clock::{Anchor, Calibration, ClockPair, CounterInfo, CounterKind};
use sandglass::store::table::{tables, Kind, Limits, Table, TableWriter};
use sandglass::store::{FileEntry, Manifest, RunDir, RunState, StoreError, Tool};
use sandglass::RunKind;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Why a fixture could not be written.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no column {0} in the fixture")]
    NoColumn(&'static str),
    #[error("'{value}' in column {column} is not an integer")]
    NotInteger { value: String, column: &'static str },
}

/// The run format a fixture is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Tables as CSV files, as sandglass wrote them before run format 2.
    V1,
    /// Tables as Parquet segments.
    V2,
}

/// The table a file of a run of `kind` holds, with its format-1 format name.
fn table_of(kind: &RunKind, name: &str) -> Option<(&'static Table, &'static str)> {
    Some(match (kind, name) {
        (RunKind::Timer, "samples.csv") => {
            (&tables::TIMER_SAMPLES, "sandglass-timer-samples-csv/1")
        }
        (RunKind::Timer, "timeline.csv") => {
            (&tables::TIMER_TIMELINE, "sandglass-timer-timeline-csv/1")
        }
        (RunKind::Noise, "interruptions.csv") => (
            &tables::NOISE_INTERRUPTIONS,
            "sandglass-interruptions-csv/1",
        ),
        (RunKind::Noise, "timeline.csv") => {
            (&tables::NOISE_TIMELINE, "sandglass-noise-timeline-csv/1")
        }
        (RunKind::Hourglass, "trace.csv") => (&tables::TRACE, "sandglass-trace-csv/1"),
        (RunKind::Hourglass, "latency.csv") => (&tables::LATENCY, "sandglass-latency-csv/1"),
        (RunKind::Hourglass, "jobs.csv") => (&tables::JOBS, "sandglass-jobs-csv/1"),
        _ => return None,
    })
}

/// Writes the CSV text `csv` of `table` as Parquet segments into `run`.
fn parquet_of(
    run: &RunDir,
    table: &'static Table,
    csv: &str,
) -> Result<Vec<FileEntry>, FixtureError> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let cols: Vec<usize> = table
        .columns
        .iter()
        .map(|c| {
            header
                .iter()
                .position(|h| *h == c.name)
                .ok_or(FixtureError::NoColumn(c.name))
        })
        .collect::<Result<_, _>>()?;
    let mut w = TableWriter::create(run.path(), table, Limits::default())?;
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let b = w.row();
        for (i, (c, &k)) in table.columns.iter().zip(&cols).enumerate() {
            let v = f.get(k).copied().unwrap_or("");
            let int = || {
                v.parse::<i64>().map_err(|_| FixtureError::NotInteger {
                    value: v.to_string(),
                    column: c.name,
                })
            };
            match c.kind {
                Kind::I32 => b.push_i32(i, int()? as i32),
                Kind::I64 => b.push_i64(i, int()?),
                Kind::Bool => b.push_bool(i, v == "1" || v == "true"),
                Kind::Text => b.push_text(i, &v.as_bytes().to_vec().into()),
            }
        }
        w.end_row(0)?;
    }
    Ok(w.finish(0)?)
}

/// Counter ticks per second of CLOCK_MONOTONIC_RAW in the synthetic clock.
pub const FREQUENCY_HZ: f64 = 2_500_000_000.0;
/// Ticks per second of CLOCK_MONOTONIC (NTP slews it 0.8 ppm away from the raw clock).
pub const MONOTONIC_FREQUENCY_HZ: f64 = 2_500_002_000.0;
/// The start anchor: this counter value was read at [`ANCHOR_MONOTONIC_NS`].
pub const ANCHOR_COUNTER: u64 = 10_000_000_000;
pub const ANCHOR_MONOTONIC_NS: u64 = 5_000_000_000_000;
/// The run's time zero on the counter: 1 ms of CLOCK_MONOTONIC after the anchor.
pub const RUN_START_COUNTER: u64 = ANCHOR_COUNTER + 2_500_002;
/// CLOCK_MONOTONIC at the run's time zero.
pub const RUN_START_MONOTONIC_NS: u64 = ANCHOR_MONOTONIC_NS + 1_000_000;

/// The manifest's `clock` section of the synthetic clock, as the runner writes it.
pub fn clock() -> serde_json::Value {
    let pair = |counter, clock_ns| ClockPair {
        counter,
        clock_ns,
        width_ticks: 40,
    };
    let start = Anchor {
        monotonic_raw: pair(ANCHOR_COUNTER, 4_000_000_000_000),
        monotonic: pair(ANCHOR_COUNTER, ANCHOR_MONOTONIC_NS),
    };
    let end = Anchor {
        monotonic_raw: pair(ANCHOR_COUNTER + 25_000_000_000, 4_000_010_000_000),
        monotonic: pair(
            ANCHOR_COUNTER + 25_000_020_000,
            ANCHOR_MONOTONIC_NS + 10_000_000_000,
        ),
    };
    let calibration = Calibration {
        counter: CounterKind::Tsc,
        frequency_hz: FREQUENCY_HZ,
        uncertainty_ppm: 0.01,
        monotonic_frequency_hz: MONOTONIC_FREQUENCY_HZ,
        advertised_frequency_hz: None,
        start,
        end,
    };
    serde_json::json!({
        "counter": CounterInfo { kind: CounterKind::Tsc, rdtscp: true, reason: "synthetic".into() },
        "calibration": calibration,
        "run_start_counter": RUN_START_COUNTER,
        "run_start_monotonic_ns": RUN_START_MONOTONIC_NS,
        "gap_threshold_ns": 500,
    })
}

/// Writes a finished run of `kind` at `dir` in run format 2 with `files` (name, contents) and
/// `summary` (written as `summary.json`), listed in its manifest with their checksums. A file
/// that holds one of the kind's tables is given as its format-1 CSV text.
pub fn write_run(
    dir: &Path,
    kind: RunKind,
    files: &[(&str, String)],
    summary: &serde_json::Value,
) -> Result<PathBuf, FixtureError> {
    write_run_as(dir, kind, files, summary, Format::V2)
}

/// [`write_run`] in run format `format`.
pub fn write_run_as(
    dir: &Path,
    kind: RunKind,
    files: &[(&str, String)],
    summary: &serde_json::Value,
    format: Format,
) -> Result<PathBuf, FixtureError> {
    let run = RunDir::create(Some(dir), Path::new("."), kind.as_str())?;
    let mut entries: Vec<FileEntry> = Vec::new();
    let text = serde_json::to_vec_pretty(summary).unwrap_or_default();
    entries.push(run.write_file("summary.json", &text, "test/1", "synthetic")?);
    for (name, data) in files {
        match (table_of(&kind, name), format) {
            (Some((table, _)), Format::V2) => entries.extend(parquet_of(&run, table, data)?),
            (Some((_, csv_format)), Format::V1) => {
                entries.push(run.write_file(name, data.as_bytes(), csv_format, "synthetic")?)
            }
            (None, _) => {
                entries.push(run.write_file(name, data.as_bytes(), "test/1", "synthetic")?)
            }
        }
    }
    let m = Manifest {
        schema_version: match format {
            Format::V1 => 1,
            Format::V2 => 2,
        },
        id: run.id().to_string(),
        kind: kind.clone(),
        tool: Tool {
            name: "sandglass".into(),
            version: "0".into(),
            commit: "test".into(),
        },
        command_line: vec!["sandglass".into(), kind.to_string()],
        state: RunState::Completed,
        started_at: "2026-01-01T00:00:00Z".into(),
        ended_at: Some("2026-01-01T00:00:10Z".into()),
        end_detail: Some("completed".into()),
        system: sandglass::system::snapshot(),
        clock: clock(),
        config: serde_json::Value::Null,
        warnings: vec![],
        files: entries,
    };
    run.write_manifest(&m)?;
    Ok(dir.to_path_buf())
}

/// Timer samples `(cpu, release, release_ns, lateness_ns, missed)`: CPU 1 with a stall that
/// made two releases late, CPU 2 with an early wakeup.
pub fn timer_samples() -> Vec<(u64, u64, i64, i64, bool)> {
    vec![
        (1, 0, 0, 10, false),
        (1, 1, 1_000_000, 20, false),
        (1, 2, 2_000_000, 3_000_040, false),
        (1, 3, 3_000_000, 2_000_040, true),
        (1, 4, 4_000_000, 1_000_040, true),
        (1, 5, 5_000_000, 1_015, false),
        (2, 0, 0, -3, false),
        (2, 1, 1_000_000, 12_345, false),
    ]
}

/// A timer run with `samples` on CPUs 1 and 2.
pub fn timer_run(
    dir: &Path,
    samples: &[(u64, u64, i64, i64, bool)],
) -> Result<PathBuf, FixtureError> {
    timer_run_as(dir, samples, Format::V2)
}

/// [`timer_run`] in run format `format`.
pub fn timer_run_as(
    dir: &Path,
    samples: &[(u64, u64, i64, i64, bool)],
    format: Format,
) -> Result<PathBuf, FixtureError> {
    let mut csv = String::from("cpu,release,release_ns,lateness_ns,missed\n");
    for (cpu, k, rel, late, missed) in samples {
        let _ = writeln!(csv, "{cpu},{k},{rel},{late},{}", u8::from(*missed));
    }
    let mut cpus: Vec<u64> = samples.iter().map(|s| s.0).collect();
    cpus.dedup();
    let summary = serde_json::json!({
        "kind": RunKind::Timer,
        "cpus": cpus.iter().enumerate().map(|(i, c)| serde_json::json!({
            "cpu": c, "thread": i, "tid": 1000 + i,
            "count": samples.iter().filter(|s| s.0 == *c).count(),
        })).collect::<Vec<_>>(),
    });
    write_run_as(
        dir,
        RunKind::Timer,
        &[("samples.csv", csv)],
        &summary,
        format,
    )
}

/// A noise run with interruptions `(cpu, start_ns, duration_ns)`.
pub fn noise_run(dir: &Path, list: &[(u64, u64, u64)]) -> Result<PathBuf, FixtureError> {
    noise_run_as(dir, list, Format::V2)
}

/// [`noise_run`] in run format `format`.
pub fn noise_run_as(
    dir: &Path,
    list: &[(u64, u64, u64)],
    format: Format,
) -> Result<PathBuf, FixtureError> {
    let mut csv = String::from("cpu,start_ns,duration_ns\n");
    for (cpu, s, d) in list {
        let _ = writeln!(csv, "{cpu},{s},{d}");
    }
    let mut cpus: Vec<u64> = list.iter().map(|s| s.0).collect();
    cpus.dedup();
    let summary = serde_json::json!({
        "kind": RunKind::Noise,
        "cpus": cpus.iter().enumerate().map(|(i, c)| serde_json::json!({
            "cpu": c, "thread": i, "tid": 2000 + i,
        })).collect::<Vec<_>>(),
    });
    write_run_as(
        dir,
        RunKind::Noise,
        &[("interruptions.csv", csv)],
        &summary,
        format,
    )
}

/// Hourglass trace rows `(thread, cpu, start_counter, end_counter, end_reason)`; `*_ns` are
/// computed from the synthetic clock as the engine does.
pub fn trace_csv(rows: &[(u64, u64, u64, u64, &str)]) -> String {
    let ns = |c: u64| ((c as f64 - RUN_START_COUNTER as f64) * 1e9 / FREQUENCY_HZ).round() as i64;
    let mut s = String::from("thread,cpu,start_ns,end_ns,start_counter,end_counter,end_reason\n");
    for (t, cpu, a, b, why) in rows {
        let _ = writeln!(s, "{t},{cpu},{},{},{a},{b},{why}", ns(*a), ns(*b));
    }
    s
}

/// An Hourglass run of two threads on CPU 1 with `extra` files (such as `latency.csv`,
/// `jobs.csv` or `kernel_events.csv`).
pub fn hourglass_run(
    dir: &Path,
    rows: &[(u64, u64, u64, u64, &str)],
    extra: &[(&str, String)],
) -> Result<PathBuf, FixtureError> {
    hourglass_run_as(dir, rows, extra, Format::V2)
}

/// [`hourglass_run`] in run format `format`.
pub fn hourglass_run_as(
    dir: &Path,
    rows: &[(u64, u64, u64, u64, &str)],
    extra: &[(&str, String)],
    format: Format,
) -> Result<PathBuf, FixtureError> {
    let mut files = vec![("trace.csv", trace_csv(rows))];
    files.extend(extra.iter().map(|(n, t)| (*n, t.clone())));
    let summary = serde_json::json!({
        "threads": [
            {"thread": 0, "tid": 3000, "workload": "CPU"},
            {"thread": 1, "tid": 3001, "workload": "CPU"},
        ],
    });
    write_run_as(dir, RunKind::Hourglass, &files, &summary, format)
}
