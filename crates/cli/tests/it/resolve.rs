//! Every command that takes a run names it the same way: a directory, an id, a unique prefix of
//! one, or a study's cell `STUDY/CELL`; an ambiguous prefix is one error naming the candidates.
//! These tests name runs by id, as a person would, not by directory.

use crate::common;

use common::{run_in, Out};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn ok(runs: &Path, args: &[&str]) -> Out {
    let o = run_in(runs, args);
    assert_eq!(o.code, Some(0), "{args:?}: {}{}", o.stdout, o.stderr);
    o
}

/// The single error line of a command that failed with `code`.
fn one_error(runs: &Path, args: &[&str], code: i32) -> String {
    let o = run_in(runs, args);
    assert_eq!(o.code, Some(code), "{args:?}: {}{}", o.stdout, o.stderr);
    let lines: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("sandglass: error:"))
        .collect();
    assert_eq!(lines.len(), 1, "{args:?}: {}", o.stderr);
    lines[0].to_string()
}

fn id_of(dir: &Path) -> String {
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    m["id"].as_str().unwrap().to_string()
}

/// The shortest prefix of `id` that no other id starts with.
fn unique_prefix(id: &str, others: &[&str]) -> String {
    (1..=id.len())
        .map(|n| &id[..n])
        .find(|p| others.iter().all(|o| *o == id || !o.starts_with(p)))
        .unwrap()
        .to_string()
}

struct Store {
    tmp: tempfile::TempDir,
    runs: PathBuf,
    /// Two timer runs and a study in the runs directory, each under its id.
    timer: PathBuf,
    timer_id: String,
    other_id: String,
    study_id: String,
}

/// A short timer run in `runs`; returns its directory.
fn timer_run(runs: &Path) -> PathBuf {
    let o = ok(runs, &["timer", "-c", "0", "-d", "300ms", "--json"]);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    PathBuf::from(v["run_dir"].as_str().unwrap())
}

fn store() -> Store {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let timer = timer_run(&runs);
    let other = timer_run(&runs);
    ok(&runs, &["study", "quick", "--duration-scale", "0.02", "-q"]);
    let study = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("study.json").is_file())
        .unwrap();
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(study.join("study.json")).unwrap()).unwrap();
    Store {
        timer_id: id_of(&timer),
        other_id: id_of(&other),
        study_id: record["id"].as_str().unwrap().to_string(),
        tmp,
        runs,
        timer,
    }
}

#[test]
fn every_command_takes_an_id_a_prefix_a_cell_and_a_directory() {
    let _machine = common::share();
    let s = store();
    let runs = s.runs.as_path();
    let ids = [
        s.timer_id.as_str(),
        s.other_id.as_str(),
        s.study_id.as_str(),
    ];
    let prefix = unique_prefix(&s.timer_id, &ids);
    assert!(prefix.len() < s.timer_id.len(), "{prefix}");
    let study_prefix = unique_prefix(&s.study_id, &ids);
    let id = s.timer_id.as_str();
    let dir = s.timer.to_str().unwrap();
    let tasks = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tasks.toml");

    // The forms the README promises, by id.
    let o = ok(runs, &["analyze", "worst-case", "--run", id]);
    assert!(o.stdout.contains(id), "{}", o.stdout);
    let mttf = [
        "analyze",
        "mttf",
        "--buffer",
        "10ms",
        "--buffers",
        "2",
        "--run",
    ];
    for run in [id, prefix.as_str(), dir] {
        let o = ok(runs, &[&mttf[..], &[run]].concat());
        assert!(o.stdout.contains(id), "{run}: {}", o.stdout);
    }
    for spec in [
        format!("{id}@p99"),
        format!("{prefix}@p99.99"),
        format!("{dir}@max"),
    ] {
        let o = ok(runs, &["analyze", "rta", tasks, "--jitter-from", &spec]);
        assert!(o.stdout.contains("release jitter"), "{spec}: {}", o.stdout);
    }
    // A study's cells by the study's id (or a prefix of it) and a prefix of the cell's name.
    let cell1 = format!("{}/cell-001", s.study_id);
    let cell2 = format!("{study_prefix}/cell-002");
    let o = ok(runs, &["compare", &cell1, &cell2]);
    assert!(
        o.stdout.contains("cell-001-timer-idle") && o.stdout.contains("cell-002-timer-cpu-disk"),
        "{}",
        o.stdout
    );
    ok(runs, &["compare", &format!("{id}+{}", s.other_id), &cell1]);
    ok(runs, &[&mttf[..], &[cell1.as_str()]].concat());
    for run in [
        id,
        prefix.as_str(),
        dir,
        cell1.as_str(),
        s.study_id.as_str(),
    ] {
        ok(runs, &["report", run]);
        ok(runs, &["runs", "show", run]);
    }
    let o = ok(runs, &["runs", "show", &cell2, "--json"]);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(
        v["run"]["id"],
        format!("{}/cell-002-timer-cpu-disk", s.study_id)
    );
    ok(runs, &["report", "--merge", id, &prefix, &cell1]);
    let o = ok(runs, &["runs", "list", "--study", &study_prefix]);
    assert!(o.stdout.contains("cell-004"), "{}", o.stdout);

    // A run imported in place from elsewhere is found by its id through the catalog.
    let ext = s.tmp.path().join("elsewhere").join("imported-run");
    let e = ext.to_str().unwrap();
    ok(runs, &["timer", "-c", "0", "-d", "300ms", "-o", e, "-q"]);
    ok(runs, &["runs", "import", e]);
    let ext_id = id_of(&ext);
    for run in [ext_id.as_str(), &ext_id[..ext_id.len() - 3]] {
        ok(runs, &["report", run]);
        ok(runs, &["analyze", "worst-case", "--run", run]);
        ok(runs, &["compare", run, id]);
    }
}

#[test]
fn an_ambiguous_or_unknown_run_is_one_error_naming_what_it_found() {
    let _machine = common::share();
    let s = store();
    let runs = s.runs.as_path();
    // The date every id starts with: three runs and a study match it.
    let common = &s.timer_id[..8];
    let tasks = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tasks.toml");
    let spec = format!("{common}@p99");
    for (args, code) in [
        (vec!["analyze", "worst-case", "--run", common], 2),
        (vec!["analyze", "rta", tasks, "--jitter-from", &spec], 2),
        (vec!["report", common], 2),
        (vec!["runs", "show", common], 2),
        (vec!["compare", common, &s.other_id], 1),
    ] {
        let e = one_error(runs, &args, code);
        assert!(e.contains(&format!("run {common} is ambiguous")), "{e}");
        for want in [
            format!("{} (timer)", s.timer_id),
            format!("{} (timer)", s.other_id),
            format!("{} (study)", s.study_id),
        ] {
            assert!(e.contains(&want), "{want}: {e}");
        }
        assert!(e.contains("give more of the id"), "{e}");
        // A prefix names runs and studies, not a study's cells.
        assert!(!e.contains("cell-00"), "{e}");
    }
    // Cells: a prefix of several, a cell that is not there, a run that is no study.
    let e = one_error(runs, &["report", &format!("{}/cell-00", s.study_id)], 2);
    assert!(
        e.contains("is ambiguous") && e.contains("cell-004-noise-cpu-disk (noise)"),
        "{e}"
    );
    let e = one_error(runs, &["report", &format!("{}/cell-9", s.study_id)], 2);
    assert!(
        e.contains("has no cell cell-9") && e.contains("cell-001-timer-idle"),
        "{e}"
    );
    let e = one_error(
        runs,
        &[
            "analyze",
            "worst-case",
            "--run",
            &format!("{}/cell-001", s.timer_id),
        ],
        2,
    );
    assert!(e.contains("is a timer run, not a study"), "{e}");
    for missing in ["19990101", "/no/such/run", "no-such-run"] {
        let e = one_error(runs, &["analyze", "worst-case", "--run", missing], 2);
        assert!(e.contains(&format!("no run or study {missing}")), "{e}");
    }
    let e = one_error(runs, &["analyze", "worst-case", "--run", ""], 2);
    assert!(e.contains("the run is empty"), "{e}");
}
