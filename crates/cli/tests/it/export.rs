//! Exports of finished runs: CSV tables, cyclictest's histogram file and Perfetto's
//! trace-event JSON (docs/export.md).
//!
//! Synthetic runs with a known clock check the structure and the clock alignment on any
//! machine; real runs (root only, skipped with a printed reason otherwise) check that the
//! exports count exactly what the run recorded and that the histogram has the layout of the
//! installed cyclictest's own output.

use crate::common;
use common::{is_root, lock, skip, Guarded};

use assert_cmd::Command;
use sandglass::store::RunReader;
use sandglass_report::export::{csv, cyclictest, fixture, perfetto};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A cyclictest histogram file, parsed strictly: any line out of cyclictest's layout fails.
#[derive(Debug, PartialEq)]
struct Hist {
    /// Counts per bucket, one vector per thread.
    columns: Vec<Vec<u64>>,
    total: Vec<u64>,
    min: Vec<u64>,
    avg: Vec<u64>,
    max: Vec<u64>,
    overflows: Vec<u64>,
    /// Cycle numbers of overflows per thread, and the "others" count.
    outliers: Vec<(Vec<u64>, u64)>,
}

fn digits(s: &str, width: usize) -> Result<u64, String> {
    if s.len() != width || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{s}' is not {width} digits"));
    }
    s.parse().map_err(|e| format!("{s}: {e}"))
}

fn parse_hist(text: &str) -> Result<Hist, String> {
    let mut lines = text.lines().skip_while(|l| *l != "# Histogram");
    if lines.next() != Some("# Histogram") {
        return Err("no '# Histogram' line".into());
    }
    let mut columns: Vec<Vec<u64>> = Vec::new();
    let mut rest = Vec::new();
    for (i, l) in lines.by_ref().enumerate() {
        if l.starts_with('#') {
            rest.push(l);
            break;
        }
        let (idx, counts) = l.split_once(' ').ok_or(format!("bucket line '{l}'"))?;
        if digits(idx, 6)? != i as u64 {
            return Err(format!("bucket {idx} out of order"));
        }
        let counts: Vec<u64> = counts
            .split('\t')
            .map(|c| digits(c, 6))
            .collect::<Result<_, _>>()?;
        if columns.is_empty() {
            columns = vec![Vec::new(); counts.len()];
        }
        if counts.len() != columns.len() {
            return Err(format!("line '{l}' has {} columns", counts.len()));
        }
        for (c, v) in columns.iter_mut().zip(counts) {
            c.push(v);
        }
    }
    rest.extend(lines);
    let field = |line: Option<&&str>, title: &str, width: usize| -> Result<Vec<u64>, String> {
        let l = line.ok_or(format!("no '{title}' line"))?;
        let v = l
            .strip_prefix(title)
            .ok_or(format!("'{l}' is not '{title}'"))?;
        v.split(' ')
            .skip(1)
            .map(|x| digits(x, width))
            .collect::<Result<_, _>>()
    };
    let total = field(rest.first(), "# Total:", 9)?;
    let min = field(rest.get(1), "# Min Latencies:", 5)?;
    let avg = field(rest.get(2), "# Avg Latencies:", 5)?;
    let max = field(rest.get(3), "# Max Latencies:", 5)?;
    let overflows = field(rest.get(4), "# Histogram Overflows:", 5)?;
    if rest.get(5) != Some(&"# Histogram Overflow at cycle number:") {
        return Err(format!(
            "line {:?} instead of the overflow heading",
            rest.get(5)
        ));
    }
    let mut outliers = Vec::new();
    for (j, l) in rest[6..].iter().enumerate() {
        if l.is_empty() {
            if j != columns.len() || rest.len() != 7 + j {
                return Err("the empty line must end the file".into());
            }
            break;
        }
        let body = l
            .strip_prefix(&format!("# Thread {j}:"))
            .ok_or(format!("'{l}' is not '# Thread {j}:'"))?;
        let (cycles, others) = match body.split_once(" # ") {
            Some((c, o)) => (c, digits(o.trim_end_matches(" others"), 5)?),
            None => (body, 0),
        };
        let cycles = cycles
            .split(' ')
            .skip(1)
            .map(|x| digits(x, 5))
            .collect::<Result<_, _>>()?;
        outliers.push((cycles, others));
    }
    if !text.ends_with("\n\n") {
        return Err("the file must end with an empty line".into());
    }
    for v in [&total, &min, &avg, &max, &overflows] {
        if v.len() != columns.len() {
            return Err("summary lines do not have one value per thread".into());
        }
    }
    Ok(Hist {
        columns,
        total,
        min,
        avg,
        max,
        overflows,
        outliers,
    })
}

#[test]
fn cyclictest_file_of_a_synthetic_run_parses_back_to_its_totals() {
    let tmp = tempfile::tempdir().unwrap();
    let samples = fixture::timer_samples();
    let run = fixture::timer_run(&tmp.path().join("run"), &samples).unwrap();
    let r = RunReader::open(&run).unwrap();
    let path = tmp.path().join("hist.txt");
    cyclictest::write(&r, &path, 100, cyclictest::View::Corrected).unwrap();
    let h = parse_hist(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(h.columns.len(), 2);
    assert_eq!(h.columns[0].len(), 100);
    for (j, cpu) in [1u64, 2].iter().enumerate() {
        let n = samples.iter().filter(|s| s.0 == *cpu).count() as u64;
        let in_hist: u64 = h.columns[j].iter().sum();
        assert_eq!(in_hist, h.total[j]);
        assert_eq!(h.total[j] + h.overflows[j], n, "CPU {cpu}");
    }
    assert_eq!(h.max, vec![3000, 12]);
    assert_eq!(h.outliers[0], (vec![2, 3, 4], 0));
    // Existing files are never overwritten.
    let e = cyclictest::write(&r, &path, 100, cyclictest::View::Raw).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
}

#[test]
fn csv_tables_of_a_synthetic_noise_run() {
    let tmp = tempfile::tempdir().unwrap();
    let list = [(1, 100, 20_000), (1, 900_000, 1_500), (3, 5, 7)];
    let run = fixture::noise_run(&tmp.path().join("run"), &list).unwrap();
    let r = RunReader::open(&run).unwrap();
    let out = tmp.path().join("new/dir");
    let files = csv::write(&r, &out).unwrap();
    assert_eq!(files, vec![out.join("interruptions.csv")]);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert_eq!(
        text,
        "cpu,start_ns,duration_ns,end_ns\n1,100,20000,20100\n1,900000,1500,901500\n3,5,7,12\n"
    );
    assert!(!out.join(".interruptions.csv.tmp").exists());
}

fn perfetto_of(run: &Path) -> (String, Value) {
    let out = run.parent().unwrap().join("trace.json");
    perfetto::write(&RunReader::open(run).unwrap(), &out, &Default::default()).unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    let v = serde_json::from_str(&text).unwrap();
    (text, v)
}

/// The acceptance check of the Perfetto file: `traceEvents` whose every event has `ph`, `ts`,
/// `pid` and `tid` (and `dur` when complete), a track per thread and per CPU, and kernel
/// events on the trace's clock.
#[test]
fn perfetto_file_structure_and_one_clock_for_trace_and_kernel_events() {
    use fixture::{RUN_START_COUNTER, RUN_START_MONOTONIC_NS};
    let tmp = tempfile::tempdir().unwrap();
    // Thread 0 starts 100 µs after the run's start (2.5 GHz counter); an interrupt recorded on
    // CLOCK_MONOTONIC at that instant must land at the same ts.
    let start = RUN_START_COUNTER + 250_000;
    let at = RUN_START_MONOTONIC_NS + 100_000;
    let kernel = format!("ts_ns,cpu,event,dur_ns\n{at},1,local_timer_entry,3000\n");
    let jobs = "thread,job,release_ns,deadline_ns,first_run_ns,end_ns,received_ns,outcome\n\
                1,0,0,500000,0,500000,0,miss\n"
        .to_string();
    let run = fixture::hourglass_run(
        &tmp.path().join("run"),
        &[
            (0, 1, start, start + 500_000, "preempted"),
            (1, 1, start + 510_000, start + 900_000, "finished"),
        ],
        &[("kernel_events.csv", kernel), ("jobs.csv", jobs)],
    )
    .unwrap();
    let (text, v) = perfetto_of(&run);
    assert_eq!(v["displayTimeUnit"], "ns");
    let events = v["traceEvents"].as_array().expect("traceEvents");
    assert!(!events.is_empty());
    for e in events {
        for k in ["ph", "ts", "pid", "tid", "name"] {
            assert!(e.get(k).is_some(), "{k} missing in {e}");
        }
        assert!(
            e["ts"].is_number() && e["pid"].is_u64() && e["tid"].is_u64(),
            "{e}"
        );
        if e["ph"] == "X" {
            assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0), "{e}");
        }
        assert!(["X", "i", "M"].contains(&e["ph"].as_str().unwrap()), "{e}");
    }
    let names = |pid: u64| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == pid)
            .map(|e| e["args"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(1), vec!["thread 0 (tid 3000)", "thread 1 (tid 3001)"]);
    assert_eq!(names(2), vec!["CPU 1"]);
    let x = |pid: u64, name: &str| {
        events
            .iter()
            .find(|e| e["ph"] == "X" && e["pid"] == pid && e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} on pid {pid}"))
    };
    let record = x(1, "running");
    assert_eq!(record["tid"], 0);
    assert_eq!(x(2, "thread 0")["ts"], record["ts"]);
    let irq = x(2, "local_timer_entry");
    assert_eq!(
        irq["ts"], record["ts"],
        "kernel event and trace record share one clock"
    );
    assert_eq!(irq["dur"].as_f64(), Some(3.0));
    // Written exactly, in microseconds with nanosecond digits.
    assert!(
        text.contains("\"ts\":5000001100.000,\"dur\":200.000"),
        "{text}"
    );
    let miss = events
        .iter()
        .find(|e| e["name"] == "deadline miss")
        .unwrap();
    assert_eq!(
        (miss["ph"].as_str(), miss["tid"].as_u64()),
        (Some("i"), Some(1))
    );
}

#[test]
fn perfetto_of_a_noise_run_puts_interruptions_on_cpu_tracks() {
    let tmp = tempfile::tempdir().unwrap();
    let run = fixture::noise_run(&tmp.path().join("run"), &[(0, 1_000, 2_000), (1, 0, 5)]).unwrap();
    let (_, v) = perfetto_of(&run);
    let x: Vec<&Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    assert_eq!(x.len(), 2);
    assert!(x
        .iter()
        .all(|e| e["pid"] == 2 && e["name"] == "interruption"));
    assert_eq!(x[0]["tid"], 0);
    assert_eq!(x[0]["dur"].as_f64(), Some(2.0));
}

fn sandglass(args: &[&str]) -> std::process::Output {
    Command::cargo_bin("sandglass")
        .unwrap()
        .args(args)
        .guarded_output()
}

fn measure(kind: &str, dir: &Path) {
    let out = sandglass(&[kind, "-c", "1", "-d", "1s", "-o", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{kind}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn summary(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

fn rows(path: &Path) -> u64 {
    std::fs::read_to_string(path).unwrap().lines().count() as u64 - 1
}

#[test]
fn exports_of_a_real_timer_run_count_what_it_recorded() {
    if !is_root() {
        skip("needs root for SCHED_FIFO timer threads (CI runs as root)");
        return;
    }
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    measure("timer", &run);
    let s = summary(&run);
    let cpu = &s["cpus"][0];
    assert_eq!(cpu["samples_dropped"], 0);
    let r = RunReader::open(&run).unwrap();
    let out = tmp.path().join("csv");
    csv::write(&r, &out).unwrap();
    assert_eq!(
        rows(&out.join("samples.csv")),
        cpu["count"].as_u64().unwrap()
    );
    assert_eq!(
        rows(&out.join("intervals.csv")),
        cpu["wakeups"].as_u64().unwrap() - 1
    );
    assert_eq!(
        rows(&out.join("intervals.csv")),
        cpu["interval_ns"]["count"].as_u64().unwrap()
    );
    for (view, count) in [
        (cyclictest::View::Corrected, cpu["count"].as_u64().unwrap()),
        (cyclictest::View::Raw, cpu["wakeups"].as_u64().unwrap()),
    ] {
        let h = cyclictest::histogram(&r, 200, view).unwrap();
        let parsed = parse_hist(&h.render()).unwrap();
        assert_eq!(parsed.total[0] + parsed.overflows[0], count, "{view:?}");
        let max_us = cpu["lateness_ns"]["max"].as_i64().unwrap().max(0) as u64 / 1000;
        if view == cyclictest::View::Corrected {
            assert_eq!(parsed.max[0], max_us);
        }
    }
    let trace = tmp.path().join("timer.json");
    perfetto::write(&r, &trace, &Default::default()).unwrap();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let wakeups = events.iter().filter(|e| e["name"] == "wakeup").count() as u64;
    let missed = events
        .iter()
        .filter(|e| e["name"] == "missed release")
        .count() as u64;
    assert_eq!(wakeups, cpu["wakeups"].as_u64().unwrap());
    assert_eq!(missed, cpu["missed_releases"].as_u64().unwrap());
    // The first release is the run's time zero on CLOCK_MONOTONIC.
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).unwrap()).unwrap();
    let zero = m["clock"]["run_start_monotonic_ns"].as_u64().unwrap() as f64 / 1000.0;
    let first = events.iter().find(|e| e["name"] == "wakeup").unwrap()["ts"]
        .as_f64()
        .unwrap();
    assert!((first - zero).abs() < 0.01, "{first} vs {zero}");
}

#[test]
fn csv_of_a_real_noise_run_counts_every_interruption() {
    if !is_root() {
        skip("needs root for the polling thread's memory locking (CI runs as root)");
        return;
    }
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    measure("noise", &run);
    let s = summary(&run);
    let cpu = &s["cpus"][0];
    let out = tmp.path().join("csv");
    csv::write(&RunReader::open(&run).unwrap(), &out).unwrap();
    assert_eq!(
        rows(&out.join("interruptions.csv")),
        cpu["interruptions"].as_u64().unwrap() - cpu["list_dropped"].as_u64().unwrap()
    );
}

fn real_cyclictest(buckets: u32) -> Option<String> {
    let out = std::process::Command::new("cyclictest")
        .args([
            "-m", "-p", "95", "-i", "1000", "-D", "1", "-q", "-t", "1", "-a", "1",
        ])
        .arg(format!("-h{buckets}"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn cyclictest_file_has_the_layout_of_real_cyclictest_output() {
    if !is_root() {
        skip("needs root to run cyclictest and a timer run (CI runs as root)");
        return;
    }
    let _g = lock();
    let Some(real) = real_cyclictest(50) else {
        skip("cyclictest is not installed (apt-get install rt-tests)");
        return;
    };
    let theirs =
        parse_hist(&real).unwrap_or_else(|e| panic!("cyclictest's own output: {e}\n{real}"));
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    measure("timer", &run);
    let ours_text =
        cyclictest::histogram(&RunReader::open(&run).unwrap(), 50, cyclictest::View::Raw)
            .unwrap()
            .render();
    let ours = parse_hist(&ours_text).unwrap();
    assert_eq!(ours.columns.len(), theirs.columns.len());
    assert_eq!(ours.columns[0].len(), theirs.columns[0].len());
    // Line by line, the same shapes: digits where cyclictest has digits.
    let shape = |t: &str| -> Vec<String> {
        let from = t.find("# Histogram").unwrap();
        t[from..]
            .lines()
            .map(|l| {
                l.chars()
                    .map(|c| if c.is_ascii_digit() { '0' } else { c })
                    .collect::<String>()
            })
            .filter(|l| !l.starts_with("# Thread"))
            .collect()
    };
    assert_eq!(shape(&ours_text), shape(&real));
}

#[test]
fn report_command_writes_the_exports() {
    let help = sandglass(&["report", "--help"]);
    if !help.status.success() || !String::from_utf8_lossy(&help.stdout).contains("--csv") {
        skip("sandglass report does not take the export flags in this build");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = fixture::timer_run(&tmp.path().join("run"), &fixture::timer_samples()).unwrap();
    let csv_dir = tmp.path().join("csv");
    let hist = tmp.path().join("hist.txt");
    let trace = tmp.path().join("trace.json");
    let out = sandglass(&[
        "report",
        run.to_str().unwrap(),
        "--csv",
        csv_dir.to_str().unwrap(),
        "--cyclictest",
        hist.to_str().unwrap(),
        "--perfetto",
        trace.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for p in [csv_dir.join("samples.csv"), hist.clone(), trace.clone()] {
        assert!(p.exists(), "{}", p.display());
    }
    // A second export refuses to overwrite: one line, exit code 2.
    let again = sandglass(&[
        "report",
        run.to_str().unwrap(),
        "--perfetto",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(2));
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("already exists"), "{err}");
    let bad: PathBuf = tmp.path().join("no/such/dir/trace.json");
    let out = sandglass(&[
        "report",
        run.to_str().unwrap(),
        "--perfetto",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
}

/// `sandglass report RUN` prints a timer run's summary again, and refuses a run with an altered
/// file, naming it.
#[test]
fn report_prints_the_summary_and_refuses_a_damaged_run() {
    let _machine = common::lock();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let out = sandglass(&[
        "timer",
        "-c",
        "0",
        "-d",
        "300ms",
        "-P",
        "o:0",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = sandglass(&["report", dir.to_str().unwrap()]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        text.starts_with("sandglass timer:")
            && text.contains("lateness")
            && text.contains("lateness of every release:\n"),
        "{text}"
    );
    let md = sandglass(&["report", dir.to_str().unwrap(), "--markdown"]);
    assert!(
        md.status.success(),
        "{}",
        String::from_utf8_lossy(&md.stderr)
    );
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(
        md.contains("| CPU | policy | releases |") && md.contains("\n| 0 |"),
        "{md}"
    );
    let samples = dir.join("samples-0000.parquet");
    let mut data = std::fs::read(&samples).unwrap();
    data.push(b'\n');
    std::fs::write(&samples, data).unwrap();
    let out = sandglass(&["report", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("samples-0000.parquet") && err.lines().count() == 1,
        "{err}"
    );
}
