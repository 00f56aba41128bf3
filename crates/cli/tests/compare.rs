//! `sandglass compare`: exit codes 0 (pass), 2 (a gate crossed) and 1 (an error), a 2x
//! regression of p99 flagged and the same distribution not. The runs are real timer run
//! directories whose samples are replaced by synthetic ones, with the manifest's size and
//! checksum updated as the run format documents.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use assert_cmd::Command;
use sandglass::analysis::rng::SplitMix64;
use serde_json::Value;
use std::path::Path;

fn sg(runs: &Path) -> Command {
    let mut c = Command::cargo_bin("sandglass").unwrap();
    c.env("SANDGLASS_RUNS_DIR", runs);
    c
}

/// Lateness with a Pareto tail (at least 20 µs, p99 about 200 µs), times `scale`.
fn synthetic(seed: u64, n: usize, scale: f64) -> Vec<i64> {
    let mut r = SplitMix64::new(seed);
    (0..n)
        .map(|_| {
            let u = (r.below(1_000_000) as f64 + 0.5) / 1e6;
            (20_000.0 * (1.0 / (1.0 - u)).powf(0.5) * scale) as i64
        })
        .collect()
}

/// A timer run in `dir` whose samples are `lateness`.
fn timer_run(runs: &Path, dir: &Path, lateness: &[i64]) {
    let out = sg(runs)
        .args(["timer", "-c", "0", "-d", "200ms", "-P", "o:0", "-o"])
        .arg(dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut csv = String::from("cpu,release,release_ns,lateness_ns,missed\n");
    for (k, l) in lateness.iter().enumerate() {
        csv.push_str(&format!("0,{k},{},{l},0\n", k as u64 * 1_000_000));
    }
    std::fs::write(dir.join("samples.csv"), &csv).unwrap();
    let mpath = dir.join("manifest.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&mpath).unwrap()).unwrap();
    for f in m["files"].as_array_mut().unwrap() {
        if f["name"] == "samples.csv" {
            f["bytes"] = csv.len().into();
            f["sha256"] = sandglass::store::sha256_hex(csv.as_bytes()).into();
        }
    }
    std::fs::write(&mpath, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn p99_change(v: &Value) -> &Value {
    v["comparisons"][0]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["figure"] == "p99")
        .unwrap()
}

#[test]
fn pass_threshold_regression_and_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    timer_run(&runs, &a, &synthetic(1, 10_000, 1.0));
    timer_run(&runs, &b, &synthetic(2, 10_000, 1.0));
    timer_run(&runs, &c, &synthetic(3, 10_000, 2.0));

    // The same distribution: no regression, exit 0.
    let out = sg(&runs)
        .arg("compare")
        .args([&a, &b])
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(p99_change(&v)["regression"], false, "{v}");
    assert_eq!(v["comparisons"][0]["differs"], false, "{v}");

    // p99 twice as late: flagged; with --fail-regression 10%, exit 2.
    let out = sg(&runs)
        .arg("compare")
        .args([&a, &c])
        .args(["--fail-regression", "10%", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v = json(&out);
    assert_eq!(p99_change(&v)["regression"], true, "{v}");
    assert!(p99_change(&v)["relative"].as_f64().unwrap() > 0.7);
    // Without a gate the same comparison passes, and the table marks the regression.
    let out = sg(&runs).arg("compare").args([&a, &c]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(" !") && text.contains("verdict: pass"),
        "{text}"
    );

    // A threshold: crossed (exit 2) and not (exit 0); one run alone is gated too.
    let out = sg(&runs)
        .arg("compare")
        .args([&a, &c])
        .args(["--fail-above", "p99=300us"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("threshold crossed: p99"));
    let out = sg(&runs)
        .arg("compare")
        .arg(&a)
        .args(["--fail-above", "p99=10ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));

    // Errors are 1: a missing run, bad gates, bad flags, one run without a gate.
    for args in [
        vec![
            a.display().to_string(),
            tmp.path().join("nope").display().to_string(),
        ],
        vec![
            a.display().to_string(),
            b.display().to_string(),
            "--fail-above".into(),
            "p98=1ms".into(),
        ],
        vec![
            a.display().to_string(),
            b.display().to_string(),
            "--fail-regression".into(),
            "lots".into(),
        ],
        vec![a.display().to_string(), "--bogus".into()],
        vec![a.display().to_string()],
    ] {
        let out = sg(&runs).arg("compare").args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("sandglass: error:") && err.lines().count() == 1,
            "{err}"
        );
    }

    // A damaged run is refused, naming the file.
    let mut csv = std::fs::read(b.join("samples.csv")).unwrap();
    csv[60] ^= 1;
    std::fs::write(b.join("samples.csv"), csv).unwrap();
    let out = sg(&runs).arg("compare").args([&a, &b]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("samples.csv"));

    // A run id in the runs directory is found by its prefix.
    let id = a.file_name().unwrap().to_string_lossy().to_string();
    std::fs::create_dir_all(&runs).unwrap();
    let moved = runs.join(format!("{id}-moved"));
    std::fs::rename(&a, &moved).unwrap();
    let out = sg(&runs)
        .arg("compare")
        .arg(format!("{id}-mo"))
        .args(["--fail-above", "max=1h"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
