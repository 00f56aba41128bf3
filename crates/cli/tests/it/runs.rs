//! `sandglass runs`: the catalog of runs. A short real timer run registers itself and is
//! listed, shown, filtered and removed; copies are imported; a deleted, truncated or altered
//! file is named in one error line and a damaged directory adds nothing to the catalog. No test
//! asserts a speed, and none needs root (without privileges the timer runs at SCHED_OTHER).

use crate::common;

use common::run_in as run;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Expects success and returns standard output.
fn ok(runs: &Path, args: &[&str]) -> String {
    let o = run(runs, args);
    assert_eq!(o.code, Some(0), "{args:?}: {}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{args:?}: {}", o.stderr);
    o.stdout
}

/// Expects exit code 2 and exactly one `sandglass: error:` line containing every needle.
fn usage_error(runs: &Path, args: &[&str], needles: &[&str]) -> String {
    let o = run(runs, args);
    assert_eq!(o.code, Some(2), "{args:?}: {}{}", o.stdout, o.stderr);
    assert!(!o.stderr.contains("panicked"), "{args:?}: {}", o.stderr);
    let errors: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("sandglass: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{args:?}: {}", o.stderr);
    for n in needles {
        assert!(
            errors[0].contains(n),
            "{args:?}: {:?} lacks {n:?}",
            errors[0]
        );
    }
    errors[0].to_string()
}

/// The catalog's rows, cells included, as JSON.
fn rows(runs: &Path) -> Vec<Value> {
    let text = ok(runs, &["runs", "--all", "--json"]);
    serde_json::from_str::<Value>(&text).unwrap()["runs"]
        .as_array()
        .unwrap()
        .clone()
}

/// A short real timer run in `runs`; returns its directory.
fn timer_run(runs: &Path) -> PathBuf {
    let text = ok(runs, &["timer", "-c", "0", "-d", "1s", "--json"]);
    let v: Value = serde_json::from_str(&text).unwrap();
    PathBuf::from(v["run_dir"].as_str().unwrap())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn a_timer_run_is_listed_shown_filtered_and_removed() {
    let _machine = common::lock();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let dir = timer_run(&runs);
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        runs.join("catalog.sqlite").exists(),
        "the run registered itself"
    );

    let list = ok(&runs, &["runs"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("FIGURES"),
        "{list}"
    );
    assert!(
        lines[1].starts_with(&id) && lines[1].contains("timer"),
        "{list}"
    );
    assert!(
        lines[1].contains("completed") && lines[1].contains("p99"),
        "{list}"
    );
    // The columns are aligned: every column starts where its heading does.
    let at = |l: &str, word: &str| l.find(word).unwrap();
    assert_eq!(at(lines[0], "KIND"), at(lines[1], " timer ") + 1, "{list}");

    let r = rows(&runs);
    assert_eq!(r.len(), 1);
    let e = &r[0];
    assert_eq!(e["id"], id.as_str());
    assert_eq!(e["kind"], "timer");
    assert_eq!(
        Path::new(e["path"].as_str().unwrap()),
        dir.canonicalize().unwrap()
    );
    assert!(e["host"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(e["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    assert!(e["figures"]["count"].as_u64().unwrap() > 0, "{e}");
    for k in ["p50_ns", "p99_ns", "p99.99_ns", "max_ns", "missed"] {
        assert!(e["figures"][k].is_number(), "{k}: {e}");
    }

    // Filters.
    let one = |args: &[&str]| -> usize {
        let mut all = vec!["runs", "--json"];
        all.extend_from_slice(args);
        let text = ok(&runs, &all);
        serde_json::from_str::<Value>(&text).unwrap()["runs"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(one(&["--kind", "timer"]), 1);
    assert_eq!(one(&["--kind", "noise"]), 0);
    assert_eq!(one(&["--host", e["host"].as_str().unwrap()]), 1);
    assert_eq!(one(&["--host", "no-such-host"]), 0);
    assert_eq!(one(&["--since", "1d"]), 1);
    assert_eq!(one(&["--until", "2000-01-01"]), 0);
    assert_eq!(one(&["--since", "2000-01-01", "--until", "2999-12-31"]), 1);

    // Show, by a unique prefix.
    let prefix = &id[..id.len() - 2];
    let show = ok(&runs, &["runs", "show", prefix]);
    assert!(show.starts_with(&format!("run {id}")), "{show}");
    for f in ["manifest.json", "summary.json", "samples-0000.parquet"] {
        assert!(show.contains(f), "{f}: {show}");
    }
    let v: Value = serde_json::from_str(&ok(&runs, &["runs", "show", &id, "--json"])).unwrap();
    assert_eq!(v["intact"], true);
    assert!(
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["status"] == "ok"),
        "{v}"
    );

    // The catalog is rebuilt from the directories.
    std::fs::remove_file(runs.join("catalog.sqlite")).unwrap();
    let text = ok(&runs, &["runs", "rebuild"]);
    assert!(text.contains("1 runs and studies indexed"), "{text}");
    assert_eq!(rows(&runs).len(), 1);

    // rm removes the directory and the row, and says so.
    let text = ok(&runs, &["runs", "rm", &id]);
    assert!(text.contains(&id) && text.contains("removed"), "{text}");
    assert!(!dir.exists());
    assert!(rows(&runs).is_empty());
    usage_error(&runs, &["runs", "show", &id], &[&id, "sandglass runs"]);
}

#[test]
fn copies_are_imported_and_damage_is_named() {
    let _machine = common::lock();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let dir = timer_run(&runs);
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    let copy = tmp.path().join("elsewhere").join("copy");
    copy_dir(&dir, &copy);
    let shown = copy.display().to_string();

    // A copy cannot take the id of the run still in place.
    usage_error(
        &runs,
        &["runs", "import", &shown],
        &[&id, "already in the catalog"],
    );
    ok(&runs, &["runs", "rm", &id]);
    let text = ok(&runs, &["runs", "import", &shown]);
    assert!(
        text.contains("imported timer") && text.contains(&id),
        "{text}"
    );
    let r = rows(&runs);
    assert_eq!(r.len(), 1);
    assert_eq!(
        Path::new(r[0]["path"].as_str().unwrap()),
        copy.canonicalize().unwrap()
    );
    let before = rows(&runs);

    // Deleting, truncating or altering a file: one error naming it, and nothing added.
    type Damage = fn(&Path);
    let cases: [(&str, &str, Damage); 5] = [
        ("deleted", "samples-0000.parquet", |d| {
            std::fs::remove_file(d.join("samples-0000.parquet")).unwrap()
        }),
        ("truncated", "samples-0000.parquet", |d| {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(d.join("samples-0000.parquet"))
                .unwrap();
            f.set_len(10).unwrap();
        }),
        ("altered", "summary.json", |d| {
            let text = std::fs::read_to_string(d.join("summary.json")).unwrap();
            std::fs::write(d.join("summary.json"), text.replacen('1', "2", 1)).unwrap();
        }),
        ("manifest deleted", "manifest.json", |d| {
            std::fs::remove_file(d.join("manifest.json")).unwrap()
        }),
        ("manifest truncated", "manifest.json", |d| {
            let text = std::fs::read(d.join("manifest.json")).unwrap();
            std::fs::write(d.join("manifest.json"), &text[..text.len() / 2]).unwrap();
        }),
    ];
    for (i, (what, file, damage)) in cases.iter().enumerate() {
        let damaged = tmp.path().join(format!("damaged-{i}"));
        copy_dir(&copy, &damaged);
        damage(&damaged);
        let named = damaged.join(file).display().to_string();
        let needle = if file == &"manifest.json" && what.contains("deleted") {
            "manifest.json"
        } else {
            named.as_str()
        };
        let line = usage_error(
            &runs,
            &["runs", "import", &damaged.display().to_string()],
            &[needle],
        );
        assert!(line.contains(file), "{what}: {line}");
        assert_eq!(rows(&runs), before, "{what}: the catalog is unchanged");
    }

    // Damage to an indexed run is named by show.
    std::fs::write(copy.join("timeline-0000.parquet"), b"altered\n").unwrap();
    let line = usage_error(
        &runs,
        &["runs", "show", &id],
        &["timeline-0000.parquet", "damaged"],
    );
    assert!(
        line.contains(&copy.join("timeline-0000.parquet").display().to_string()),
        "{line}"
    );
}

#[test]
fn bad_input_is_one_error_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    // Nothing to list is not an error, and creates nothing.
    let o = run(&runs, &["runs"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(!runs.exists());
    usage_error(
        &runs,
        &["runs", "--since", "yesterday"],
        &["--since", "YYYY-MM-DD"],
    );
    usage_error(&runs, &["runs", "--kind"], &["--kind"]);
    usage_error(&runs, &["runs", "show"], &["ID"]);
    usage_error(&runs, &["runs", "show", "nosuch"], &["nosuch"]);
    usage_error(&runs, &["runs", "rm", "nosuch"], &["nosuch"]);
    usage_error(
        &runs,
        &["runs", "import", "/nonexistent/run"],
        &["/nonexistent/run", "no such directory"],
    );
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    usage_error(
        &runs,
        &["runs", "import", &empty.display().to_string()],
        &["manifest.json"],
    );
    std::fs::create_dir_all(&runs).unwrap();
    usage_error(
        &runs,
        &["runs", "--since", "2026-11-23", "--until", "2026-11-22"],
        &["--since"],
    );
    usage_error(&runs, &["runs", "bogus"], &["bogus"]);
}

/// A run killed with SIGKILL cannot write its final state; the next start (here `runs`) finds
/// its directory unlocked and marks it `incomplete`, and no reader takes it for a result.
#[test]
fn a_run_killed_with_sigkill_is_marked_incomplete_by_the_next_start() {
    let _machine = common::lock();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    // A catalog to settle against: one finished run.
    let done = timer_run(&runs);
    let (mut child, killed) = common::start_timer_run(&runs);
    assert_ne!(killed, done);
    let id = killed.file_name().unwrap().to_string_lossy().into_owned();
    // While it runs, it is listed as running and cannot be marked.
    let listed = rows(&runs);
    let row = listed.iter().find(|r| r["id"] == id.as_str());
    assert!(row.is_none_or(|r| r["state"] == "running"), "{listed:?}");
    child.kill().unwrap();
    child.wait().unwrap();

    let o = run(&runs, &["runs", "--all", "--json"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.stderr.contains("marked incomplete") && o.stderr.contains(&id),
        "{}",
        o.stderr
    );
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let row = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{id} not listed: {v}"));
    assert_eq!(row["state"], "incomplete", "{row}");
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(killed.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(m["state"], "incomplete");
    // Marked once; the finished run is untouched.
    let o = run(&runs, &["runs"]);
    assert!(!o.stderr.contains("marked incomplete"), "{}", o.stderr);
    usage_error(&runs, &["report", &id], &["incomplete", "killed"]);
    let finished: Value =
        serde_json::from_str(&std::fs::read_to_string(done.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(finished["state"], "completed");
}
