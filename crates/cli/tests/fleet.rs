//! Runs from many hosts together: `report --merge` gives the histogram of all their samples.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::{lock, run_in};

use sandglass::store::table::tables::TIMER_SAMPLES;

/// Two real timer runs merged: the merged percentiles, count and maximum are those of the
/// histogram of both runs' stored samples together.
#[test]
fn merging_two_runs_gives_the_histogram_of_all_their_samples() {
    let _machine = lock();
    let runs = tempfile::tempdir().unwrap();
    let mut dirs = Vec::new();
    for i in ["500us", "1ms"] {
        let out = run_in(
            runs.path(),
            &["timer", "-c", "1", "-i", i, "-d", "300ms", "--json", "-q"],
        );
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        dirs.push(v["run_dir"].as_str().unwrap().to_string());
    }
    let out = run_in(
        runs.path(),
        &["report", "--merge", &dirs[0], &dirs[1], "--json"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let merged: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let mut all = sandglass::histo::histogram_of(std::iter::empty());
    let mut missed = 0;
    for d in &dirs {
        let dir = std::path::Path::new(d);
        for x in common::column(dir, &TIMER_SAMPLES, "lateness_ns") {
            all.saturating_record(x.max(0) as u64);
        }
        missed += common::column(dir, &TIMER_SAMPLES, "missed")
            .iter()
            .sum::<i64>();
    }
    let expected = sandglass::histo::percentiles(&all, None, None).unwrap();
    let got: sandglass::histo::Percentiles =
        serde_json::from_value(merged["merged"].clone()).unwrap();
    assert_eq!(got, expected);
    assert_eq!(got.count, 300 + 600);
    assert_eq!(merged["missed"], missed);
    assert_eq!(merged["runs"].as_array().unwrap().len(), 2);
    assert_eq!(merged["pooling"], "every CPU of every run");
    // The table names both runs and the merged row.
    let text = run_in(runs.path(), &["report", "--merge", &dirs[0], &dirs[1]]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert!(text.stdout.contains("merged"), "{}", text.stdout);
}

#[test]
fn merging_runs_of_different_kinds_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path().join("t");
    let n = tmp.path().join("n");
    sandglass_report::export::fixture::timer_run(&t, &[(0, 0, 0, 5_000, false)]).unwrap();
    sandglass_report::export::fixture::noise_run(&n, &[(0, 10, 2_000)]).unwrap();
    let out = run_in(
        tmp.path(),
        &[
            "report",
            "--merge",
            t.to_str().unwrap(),
            n.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("one kind"), "{}", out.stderr);
    let out = run_in(tmp.path(), &["report", "--merge"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}
