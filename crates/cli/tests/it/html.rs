//! `sandglass report --html` and `--markdown` of real runs of every kind and of a study: every
//! plot the page promises is drawn from data, the page is self-contained, and a damaged run,
//! an existing output file or a bad window is one error line with exit code 2 and no file.
//!
//! `tests/render.sh` renders the same pages in headless Chromium.

use crate::common;
use common::{share, Guarded};

use assert_cmd::Command;
use std::path::Path;

fn sandglass(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::cargo_bin("sandglass")
        .unwrap()
        .current_dir(dir)
        .env("SANDGLASS_RUNS_DIR", dir.join("runs"))
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(dir))
        .args(args)
        .guarded_output()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = sandglass(dir, args);
    assert!(
        out.status.success(),
        "sandglass {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `data-plot` names of the figures drawn with data, and those left empty.
fn plots(page: &str) -> (Vec<String>, Vec<String>) {
    let mut drawn = Vec::new();
    let mut empty = Vec::new();
    for part in page.split("<figure class=\"plot\"").skip(1) {
        let end = part.find("</figure>").expect("closed figure");
        let fig = &part[..end];
        let name = fig
            .split("data-plot=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("data-plot")
            .to_string();
        if fig.contains("data-empty=") {
            empty.push(name);
        } else {
            assert!(fig.contains("<svg"), "{name}: no svg");
            assert!(fig.contains("class=\"d\""), "{name}: no data drawn");
            assert!(fig.contains("class=\"axis-title x\""), "{name}: no x title");
            drawn.push(name);
        }
    }
    (drawn, empty)
}

fn assert_page(page: &str, kind: &str, expected: &[&str]) {
    assert!(page.starts_with("<!DOCTYPE html>"), "{kind}: not a page");
    assert!(
        page.contains(&format!("data-sandglass-kind=\"{kind}\"")),
        "{kind}: kind"
    );
    // Self-contained: nothing is fetched and nothing runs.
    assert!(!page.contains("<script"), "{kind}: script");
    assert!(!page.contains("src="), "{kind}: external source");
    assert!(!page.contains("<link"), "{kind}: link element");
    let (drawn, empty) = plots(page);
    for e in expected {
        assert!(
            drawn.iter().any(|d| d == e),
            "{kind}: plot {e} missing (drawn {drawn:?}, empty {empty:?})"
        );
    }
}

#[test]
fn pages_of_every_kind_draw_every_plot() {
    let _guard = share();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(d, &["timer", "-d", "1s", "-o", "t"]);
    ok(d, &["noise", "-d", "1s", "-o", "n"]);
    ok(
        d,
        &[
            "hourglass",
            "-n",
            "2",
            "-d",
            "1s",
            "-t",
            "1",
            "-w",
            "PERIODIC",
            "2ms",
            "10ms",
            "-o",
            "h",
        ],
    );
    ok(d, &["study", "quick", "--duration-scale", "0.1", "-o", "s"]);
    let cases: [(&str, &str, &[&str]); 4] = [
        (
            "t",
            "timer",
            &[
                "latency-histogram",
                "exceedance",
                "lateness-over-time",
                "interarrival",
                "mttf",
            ],
        ),
        (
            "n",
            "noise",
            &["noise-histogram", "exceedance", "noise-timeline"],
        ),
        (
            "h",
            "hourglass",
            &["execution-timeline", "latency-histogram"],
        ),
        (
            "s",
            "study",
            &["latency-histogram", "exceedance", "mttf", "noise-histogram"],
        ),
    ];
    for (dir, kind, expected) in cases {
        let file = format!("{dir}.html");
        let out = ok(d, &["report", dir, "--html", &file]);
        assert!(out.contains(&file), "{out}");
        let page = std::fs::read_to_string(d.join(&file)).unwrap();
        assert_page(&page, kind, expected);
        // Markdown of the same run or study: a table with a header row.
        let md = ok(d, &["report", dir, "--markdown"]);
        assert!(md.contains("|---"), "{kind} markdown: {md}");
    }
    // The study page holds its tables as the terminal shows them.
    let page = std::fs::read_to_string(d.join("s.html")).unwrap();
    assert!(page.contains("Timer wakeup latency, 1 ms SCHED_FIFO 95"));
    let text = ok(d, &["report", "s"]);
    assert!(text.contains("4 of 4 cells completed"), "{text}");

    // A window inside the Hourglass run, in the caption; one outside it is refused.
    ok(
        d,
        &["report", "h", "--html", "w.html", "--window", "500ms:20ms"],
    );
    let page = std::fs::read_to_string(d.join("w.html")).unwrap();
    assert!(page.contains("from 500 ms to 520 ms"), "window caption");
    let out = sandglass(
        d,
        &["report", "h", "--html", "x.html", "--window", "5s:20ms"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(!d.join("x.html").exists());

    // A study whose cell was altered: no page, and the error names the cell's file.
    let cell = std::fs::read_dir(d.join("s"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("timeline-0000.parquet").is_file())
        .unwrap();
    let timeline = cell.join("timeline-0000.parquet");
    let mut bytes = std::fs::read(&timeline).unwrap();
    bytes.push(0);
    std::fs::write(&timeline, bytes).unwrap();
    let out = sandglass(d, &["report", "s", "--html", "y.html"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("timeline-0000.parquet"), "{err}");
    assert!(!d.join("y.html").exists());
}

#[test]
fn bad_requests_and_damaged_runs_write_nothing() {
    let _guard = share();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(d, &["timer", "-d", "300ms", "-o", "t"]);
    let expect_usage = |args: &[&str], needle: &str| {
        let out = sandglass(d, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    };
    std::fs::write(d.join("exists.html"), "keep").unwrap();
    expect_usage(&["report", "t", "--html", "exists.html"], "already exists");
    assert_eq!(
        std::fs::read_to_string(d.join("exists.html")).unwrap(),
        "keep"
    );
    expect_usage(
        &["report", "t", "--html", "a.html", "--window", "0:10ms"],
        "Hourglass",
    );
    expect_usage(
        &["report", "t", "--html", "a.html", "--window", "10ms"],
        "START:LENGTH",
    );
    expect_usage(
        &["report", "t", "--html", "no/such/dir/a.html"],
        "does not exist",
    );
    // The Perfetto export of a part of the run.
    expect_usage(&["report", "t", "--window", "0:10ms"], "add one of them");
    expect_usage(
        &["report", "t", "--perfetto", "p.json", "--largest", "0"],
        "--largest 0",
    );
    assert!(!d.join("p.json").exists());
    // Each release as (ts, lateness) in µs: a wakeup (a slice from its release to the thread's
    // read) or a missed release (an instant; without privileges the thread is not real-time and
    // misses some), whose lateness counts among the largest delays as well.
    let wakeups = |file: &str| -> Vec<(f64, f64)> {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join(file)).unwrap()).unwrap();
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "wakeup" || e["name"] == "missed release")
            .map(|e| {
                let late = e["args"]["lateness_ns"].as_f64().unwrap() / 1e3;
                (e["ts"].as_f64().unwrap(), late)
            })
            .collect()
    };
    ok(d, &["report", "t", "--perfetto", "all.json"]);
    ok(
        d,
        &[
            "report",
            "t",
            "--perfetto",
            "w.json",
            "--window",
            "100ms:50ms",
        ],
    );
    ok(
        d,
        &["report", "t", "--perfetto", "l.json", "--largest", "2"],
    );
    let (all, w, l) = (wakeups("all.json"), wakeups("w.json"), wakeups("l.json"));
    // The window keeps each release whose span (release to wakeup) overlaps it: the 50 releases
    // of its 50 ms, give or take the ends, and earlier ones still late inside it (a thread
    // without real-time priority can be late by more than a period). Times are from the first
    // release, which is within a period of the run's start.
    let first = all.iter().map(|e| e.0).fold(f64::MAX, f64::min);
    let (from, to) = (first + 100_000.0, first + 150_000.0);
    assert!(w.len() >= 49, "{} wakeups in 50 ms", w.len());
    for e in &w {
        assert!(
            all.contains(e),
            "{e:?} of the window is not in the whole export"
        );
        assert!(
            e.0 <= to + 1_000.0 && e.0 + e.1.max(0.0) >= from - 1_000.0,
            "{e:?} lies outside the window {from}..{to}"
        );
    }
    for e in all
        .iter()
        .filter(|e| e.0 >= from + 1_000.0 && e.0 <= to - 1_000.0)
    {
        assert!(
            w.contains(e),
            "{e:?} lies inside the window but is not in its export"
        );
    }
    // --largest 2: the two largest delays, and only releases within 2 ms of one of them.
    let mut by_size = all.clone();
    by_size.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top = &by_size[..2];
    for t in top {
        assert!(l.contains(t), "{t:?} is not in the --largest 2 export");
    }
    assert!(
        l.iter().all(|e| top
            .iter()
            .any(|t| e.0 + e.1 >= t.0 - 2_000.0 && e.0 <= t.0 + t.1 + 2_000.0)),
        "{l:?} has releases away from the two largest delays {top:?}"
    );
    assert!(l.len() < all.len() / 4, "{} of {}", l.len(), all.len());
    // One byte of the samples changed: the page is refused, naming the file.
    let samples = d.join("t/samples-0000.parquet");
    let mut bytes = std::fs::read(&samples).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&samples, bytes).unwrap();
    expect_usage(&["report", "t", "--html", "a.html"], "samples-0000.parquet");
    assert!(!d.join("a.html").exists());
}

/// A timer run of more than two million wakeups (replayed: 210 s at 100 µs) draws the interval
/// plot from each second's shortest and longest interval, read from the timeline, and says so;
/// the 2.5 ms stall every 10 s shows as a longest interval of about 2.6 ms in those seconds.
#[test]
fn a_long_timer_run_draws_the_interval_plot_from_the_timeline() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("long");
    let spec = sandglass::replay::TimerReplay::new(
        &[1],
        sandglass::Nanos::from_micros(100),
        sandglass::Nanos::from_secs(210),
        3,
    );
    let tool = sandglass::store::Tool {
        name: "sandglass".into(),
        version: "0".into(),
        commit: "replay".into(),
    };
    sandglass::replay::timer(&run, &spec, tool).unwrap();
    let longest = common::column(
        &run,
        &sandglass::store::table::tables::TIMER_TIMELINE,
        "interval_max_ns",
    );
    assert_eq!(longest.len(), 210);
    for (second, &d) in longest.iter().enumerate() {
        if second % 10 == 0 && second > 0 {
            assert!((2_500_000..2_700_000).contains(&d), "second {second}: {d}");
        } else {
            assert!((100_000..2_200_000).contains(&d), "second {second}: {d}");
        }
    }
    let page = tmp.path().join("long.html");
    ok(
        tmp.path(),
        &[
            "report",
            run.to_str().unwrap(),
            "--html",
            page.to_str().unwrap(),
        ],
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert_page(&html, "timer", &["interarrival"]);
    assert!(
        html.contains("the shortest and the longest interval of each second"),
        "caption"
    );
}
