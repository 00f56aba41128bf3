//! `sandglass compare`: exit codes 0 (pass), 2 (a gate crossed) and 1 (an error), a 2x
//! regression of p99 flagged and the same distribution not. The runs are real timer run
//! directories whose samples are replaced by synthetic ones, with the manifest's size and
//! checksum updated as the run format documents.

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

/// A finished timer run in `dir` (synthetic, in run format 2) whose samples are `lateness`.
fn timer_run(_runs: &Path, dir: &Path, lateness: &[i64]) {
    let samples: Vec<(u64, u64, i64, i64, bool)> = lateness
        .iter()
        .enumerate()
        .map(|(k, &l)| (0, k as u64, k as i64 * 1_000_000, l, false))
        .collect();
    sandglass_report::export::fixture::timer_run(dir, &samples).unwrap();
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
        text.lines().any(|l| l.ends_with(" !"))
            && text.contains("verdict: no gate crossed (exit 0), but "),
        "{text}"
    );
    assert!(!text.contains("verdict: pass"), "{text}");
    // The flag rests on p99's own interval, above the baseline's.
    let out = sg(&runs)
        .arg("compare")
        .args([&a, &c])
        .arg("--json")
        .output()
        .unwrap();
    let v = json(&out);
    let p99 = p99_change(&v);
    assert_eq!(
        (&p99["basis"], &p99["significant"]),
        (&"interval".into(), &true.into()),
        "{v}"
    );
    assert!(
        p99["ci"]["low_ns"].as_f64().unwrap() > p99["ci_baseline"]["high_ns"].as_f64().unwrap()
    );
    let max = v["comparisons"][0]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["figure"] == "max")
        .unwrap();
    assert_eq!(
        (&max["basis"], &max["regression"]),
        (&"one sample".into(), &false.into()),
        "{v}"
    );
    // The same distribution passes and says so.
    let out = sg(&runs).arg("compare").args([&a, &b]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("verdict: pass (no significant regression"),
        "{text}"
    );
    assert!(!text.lines().any(|l| l.ends_with(" !")), "{text}");

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
    let mut data = std::fs::read(b.join("samples-0000.parquet")).unwrap();
    data[60] ^= 1;
    std::fs::write(b.join("samples-0000.parquet"), data).unwrap();
    let out = sg(&runs).arg("compare").args([&a, &b]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("samples-0000.parquet"));

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
