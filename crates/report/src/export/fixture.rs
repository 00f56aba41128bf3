//! Synthetic run directories with known contents and a known clock, for the exports' tests
//! (unit tests here and the command's integration tests). Not part of the stable API.

use sandglass::clock::{Anchor, Calibration, ClockPair, CounterInfo, CounterKind};
use sandglass::store::{FileEntry, Manifest, RunDir, RunState, Tool, SCHEMA_VERSION};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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

/// Writes a finished run of `kind` at `dir` with `files` (name, contents) and `summary`
/// (written as `summary.json`), listed in its manifest with their checksums.
pub fn write_run(
    dir: &Path,
    kind: &str,
    files: &[(&str, String)],
    summary: &serde_json::Value,
) -> Result<PathBuf, String> {
    let run = RunDir::create(Some(dir), Path::new("."), kind).map_err(|e| e.to_string())?;
    let mut entries: Vec<FileEntry> = Vec::new();
    let text = serde_json::to_vec_pretty(summary).unwrap_or_default();
    let mut all: Vec<(&str, Vec<u8>)> = vec![("summary.json", text)];
    all.extend(files.iter().map(|(n, t)| (*n, t.as_bytes().to_vec())));
    for (name, data) in all {
        let e = run
            .write_file(name, &data, "test/1", "synthetic")
            .map_err(|e| e.to_string())?;
        entries.push(e);
    }
    let m = Manifest {
        schema_version: SCHEMA_VERSION,
        id: run.id().to_string(),
        kind: kind.to_string(),
        tool: Tool {
            name: "sandglass".into(),
            version: "0".into(),
            commit: "test".into(),
        },
        command_line: vec!["sandglass".into(), kind.into()],
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
    run.write_manifest(&m).map_err(|e| e.to_string())?;
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
pub fn timer_run(dir: &Path, samples: &[(u64, u64, i64, i64, bool)]) -> Result<PathBuf, String> {
    let mut csv = String::from("cpu,release,release_ns,lateness_ns,missed\n");
    for (cpu, k, rel, late, missed) in samples {
        let _ = writeln!(csv, "{cpu},{k},{rel},{late},{}", u8::from(*missed));
    }
    let mut cpus: Vec<u64> = samples.iter().map(|s| s.0).collect();
    cpus.dedup();
    let summary = serde_json::json!({
        "kind": "timer",
        "cpus": cpus.iter().enumerate().map(|(i, c)| serde_json::json!({
            "cpu": c, "thread": i, "tid": 1000 + i,
            "count": samples.iter().filter(|s| s.0 == *c).count(),
        })).collect::<Vec<_>>(),
    });
    write_run(dir, "timer", &[("samples.csv", csv)], &summary)
}

/// A noise run with interruptions `(cpu, start_ns, duration_ns)`.
pub fn noise_run(dir: &Path, list: &[(u64, u64, u64)]) -> Result<PathBuf, String> {
    let mut csv = String::from("cpu,start_ns,duration_ns\n");
    for (cpu, s, d) in list {
        let _ = writeln!(csv, "{cpu},{s},{d}");
    }
    let mut cpus: Vec<u64> = list.iter().map(|s| s.0).collect();
    cpus.dedup();
    let summary = serde_json::json!({
        "kind": "noise",
        "cpus": cpus.iter().enumerate().map(|(i, c)| serde_json::json!({
            "cpu": c, "thread": i, "tid": 2000 + i,
        })).collect::<Vec<_>>(),
    });
    write_run(dir, "noise", &[("interruptions.csv", csv)], &summary)
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
) -> Result<PathBuf, String> {
    let mut files = vec![("trace.csv", trace_csv(rows))];
    files.extend(extra.iter().map(|(n, t)| (*n, t.clone())));
    let summary = serde_json::json!({
        "threads": [
            {"thread": 0, "tid": 3000, "workload": "CPU"},
            {"thread": 1, "tid": 3001, "workload": "CPU"},
        ],
    });
    write_run(dir, "hourglass", &files, &summary)
}
