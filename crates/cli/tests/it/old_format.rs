//! Runs recorded by run format 1 (tables as CSV files written at the end of the run), kept in
//! `tests/data/v1/` as `sandglass 0.1.0 (commit 6dd841f)` wrote them: a timer run, a noise run
//! and an Hourglass run with a LAT and a PERIODIC thread. Every reader still reads them: the
//! summary, the page, Markdown, every export, `compare`, `analyze … --run`, `--jitter-from`,
//! `--wcet-from`, and the catalog's import. Runs of every kind of the previous release (run
//! format 2) are kept in `tests/data/v2/` and read the same way. Nothing here writes into the
//! fixtures.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/v1")
        .join(kind)
}

/// Runs the command with its runs directory in `runs`; expects success and returns stdout.
fn ok(runs: &Path, args: &[&str]) -> String {
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .env("SANDGLASS_RUNS_DIR", runs)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap().lines().count()
}

#[test]
fn the_fixtures_are_of_run_format_1_and_intact() {
    for kind in ["timer", "noise", "hourglass"] {
        let r = sandglass::store::RunReader::open(&fixture(kind)).unwrap();
        assert_eq!(r.manifest.schema_version, 1, "{kind}");
        assert_eq!(r.manifest.tool.commit, "6dd841f0c481", "{kind}");
        r.verify().unwrap();
    }
}

#[test]
fn summaries_pages_and_markdown_of_old_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    for (kind, head) in [
        ("timer", "sandglass timer: 1 CPU(s), interval 1 ms"),
        ("noise", "sandglass noise: 1 CPU(s)"),
        ("hourglass", "LAT"),
    ] {
        let dir = fixture(kind);
        let d = dir.to_str().unwrap();
        let text = ok(&runs, &["report", d]);
        assert!(text.contains(head), "{kind}: {text}");
        let md = ok(&runs, &["report", d, "--markdown"]);
        assert!(md.starts_with('#') || md.contains('|'), "{kind}: {md}");
        if kind == "hourglass" {
            // Written when response times were of the hits alone: the figures say so.
            assert!(
                text.contains("response time of the 476 hits (release to completion; 24 missed of 500 left out): "),
                "{text}"
            );
            assert!(md.contains("| 1.943 ms of the hits (24 missed) |"), "{md}");
        }
        let page = tmp.path().join(format!("{kind}.html"));
        ok(&runs, &["report", d, "--html", page.to_str().unwrap()]);
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(html.contains("<svg") && html.contains("</html>"), "{kind}");
    }
}

#[test]
fn exports_of_old_runs_keep_every_row() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    for (kind, tables) in [
        ("timer", &["samples.csv"][..]),
        ("noise", &["interruptions.csv"][..]),
        ("hourglass", &["trace.csv", "latency.csv", "jobs.csv"][..]),
    ] {
        let out = tmp.path().join(format!("csv-{kind}"));
        ok(
            &runs,
            &[
                "report",
                fixture(kind).to_str().unwrap(),
                "--csv",
                out.to_str().unwrap(),
            ],
        );
        for t in tables {
            assert_eq!(
                lines(&out.join(t)),
                lines(&fixture(kind).join(t)),
                "{kind}: {t}"
            );
        }
    }
    let cyc = tmp.path().join("timer.cyclictest");
    ok(
        &runs,
        &[
            "report",
            fixture("timer").to_str().unwrap(),
            "--cyclictest",
            cyc.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&cyc).unwrap();
    assert!(text.contains("# Total:"), "{text}");
    let pf = tmp.path().join("hourglass.json");
    ok(
        &runs,
        &[
            "report",
            fixture("hourglass").to_str().unwrap(),
            "--perfetto",
            pf.to_str().unwrap(),
        ],
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&pf).unwrap()).unwrap();
    assert!(!v["traceEvents"].as_array().unwrap().is_empty());
}

#[test]
fn compare_and_analyze_read_old_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let timer = fixture("timer");
    let t = timer.to_str().unwrap();
    let v: Value = serde_json::from_str(&ok(&runs, &["compare", t, t, "--json"])).unwrap();
    assert_eq!(v["figures"][0]["samples"], 1000, "{v}");
    let v: Value =
        serde_json::from_str(&ok(&runs, &["analyze", "worst-case", "--run", t, "--json"])).unwrap();
    assert!(v.is_object(), "{v}");
    let text = ok(
        &runs,
        &[
            "analyze",
            "mttf",
            "--run",
            t,
            "--buffer",
            "2ms",
            "--buffers",
            "2",
        ],
    );
    assert!(text.contains("2 buffers of 2 ms"), "{text}");
    let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hourglass-5.5.toml");
    let hg = fixture("hourglass");
    let v: Value = serde_json::from_str(&ok(
        &runs,
        &[
            "analyze",
            "rta",
            tasks.to_str().unwrap(),
            "--jitter-from",
            &format!("{t}@p99.9"),
            "--wcet-from",
            &format!("modem={}@max:1", hg.display()),
            "--json",
        ],
    ))
    .unwrap();
    assert!(v["tasks"][0]["jitter_ns"].as_u64().unwrap() > 0, "{v}");
    assert!(v["tasks"][0]["wcet_ns"].as_u64().unwrap() >= 200_000, "{v}");
}

#[test]
fn old_runs_are_imported_into_the_catalog() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    for kind in ["timer", "noise", "hourglass"] {
        let copy = tmp.path().join(format!("copy-{kind}"));
        std::fs::create_dir_all(&copy).unwrap();
        for e in std::fs::read_dir(fixture(kind)).unwrap().flatten() {
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
        ok(&runs, &["runs", "import", copy.to_str().unwrap()]);
    }
    let v: Value = serde_json::from_str(&ok(&runs, &["runs", "--all", "--json"])).unwrap();
    let kinds: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.len(), 3, "{v}");
    for k in ["timer", "noise", "hourglass"] {
        assert!(kinds.contains(&k), "{v}");
    }
}

/// Runs of every kind as the previous release wrote them (`sandglass 0.1.0 (commit 7e898a5)`,
/// run format 2), kept in `tests/data/v2/KIND`: a timer, a noise and an Hourglass run, a study
/// (`study.toml`) with a timer cell and a load cell, and one run of each bench: every kind but
/// `load`, which is kept as the study's cell.
fn v2_kinds() -> Vec<&'static str> {
    sandglass::RunKind::KNOWN
        .iter()
        .filter(|k| **k != sandglass::RunKind::Load)
        .filter_map(sandglass::RunKind::known_name)
        .collect()
}

fn v2(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/v2")
        .join(kind)
}

/// The run directories of fixture `kind`: the run, or a study's cells.
fn v2_runs(kind: &str) -> Vec<PathBuf> {
    if kind != "study" {
        return vec![v2(kind)];
    }
    let mut cells: Vec<PathBuf> = std::fs::read_dir(v2(kind))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    cells.sort();
    cells
}

#[test]
fn runs_of_every_kind_from_the_previous_release_read_verify_and_report() {
    let mut seen = std::collections::BTreeSet::new();
    for kind in v2_kinds() {
        for dir in v2_runs(kind) {
            let r = sandglass::store::RunReader::open(&dir).unwrap();
            r.verify().unwrap();
            assert_eq!(r.manifest.schema_version, 2, "{}", dir.display());
            assert_eq!(r.manifest.tool.commit, "7e898a5fde52", "{}", dir.display());
            assert!(
                r.manifest.kind.known_name().is_some(),
                "{}: {:?}",
                dir.display(),
                r.manifest.kind
            );
            if kind != "study" {
                assert_eq!(r.manifest.kind.as_str(), kind);
            }
            seen.insert(r.manifest.kind.clone());
        }
    }
    seen.insert(sandglass::RunKind::Study);
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        {
            let mut all = sandglass::RunKind::KNOWN.to_vec();
            all.sort();
            all
        },
        "a kind of run has no fixture of the previous release"
    );
    // Every kind prints its summary or its table again (a study its tables).
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    for kind in v2_kinds() {
        let out = ok(&runs, &["report", v2(kind).to_str().unwrap()]);
        assert!(out.lines().count() >= 3, "{kind}: {out}");
    }
}

#[test]
fn runs_of_every_kind_from_the_previous_release_are_catalogued_with_their_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    for kind in v2_kinds() {
        let copy = tmp.path().join(format!("copy-{kind}"));
        crate::common::copy_tree(&v2(kind), &copy);
        ok(&runs, &["runs", "import", copy.to_str().unwrap()]);
    }
    let v: Value = serde_json::from_str(&ok(&runs, &["runs", "--all", "--json"])).unwrap();
    let rows = v["runs"].as_array().unwrap();
    for kind in v2_kinds() {
        let row = rows
            .iter()
            .find(|r| r["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} row: {v}"));
        let figures = row["figures"].as_object().unwrap();
        assert!(!figures.is_empty(), "{kind}: no key figures: {row}");
    }
    // Every figure of every row, cells included, is one its kind declares with a unit.
    for row in rows {
        let kind = sandglass::RunKind::named(row["kind"].as_str().unwrap());
        for key in row["figures"].as_object().unwrap().keys() {
            assert!(kind.key_figure(key).is_some(), "{kind}: {key} undeclared");
        }
    }
}
