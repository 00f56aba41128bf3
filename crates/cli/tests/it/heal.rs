//! A damaged catalog heals: the file is moved aside (kept, and named in the message) and the
//! catalog is rebuilt from the run directories, so every run is listed again, a run made while
//! the catalog was damaged included.

use crate::common;
use common::{lock, run_in};

fn run_dirs(runs: &std::path::Path) -> Vec<String> {
    let mut d: Vec<String> = std::fs::read_dir(runs)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    d.sort();
    d
}

fn damage(runs: &std::path::Path) {
    // What `head -c 100 /dev/urandom > catalog.sqlite` leaves: not a database.
    let bytes: Vec<u8> = (0..100u32).map(|i| (i * 37 + 11) as u8).collect();
    std::fs::write(runs.join("catalog.sqlite"), bytes).unwrap();
}

fn kept_aside(runs: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(runs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with("catalog.sqlite.damaged-") && !n.ends_with("-wal") && !n.ends_with("-shm")
        })
        .collect()
}

#[test]
fn runs_rebuild_moves_a_damaged_catalog_aside_and_lists_every_run() {
    let _machine = lock();
    let runs = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        assert_eq!(run_in(runs.path(), &["timer", "-d", "200ms"]).code, Some(0));
    }
    damage(runs.path());
    let out = run_in(runs.path(), &["runs", "rebuild"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let aside = kept_aside(runs.path());
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(out.stderr.contains(&aside[0]), "{}", out.stderr);
    assert!(
        out.stderr.contains("file is not a database"),
        "{}",
        out.stderr
    );
    let listed = run_in(runs.path(), &["runs", "--all"]);
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    let dirs = run_dirs(runs.path());
    assert_eq!(dirs.len(), 2);
    for d in dirs {
        assert!(
            listed.stdout.contains(&d),
            "{d} not listed:\n{}",
            listed.stdout
        );
    }
}

#[test]
fn a_run_made_while_the_catalog_is_damaged_is_catalogued() {
    let _machine = lock();
    let runs = tempfile::tempdir().unwrap();
    assert_eq!(run_in(runs.path(), &["timer", "-d", "200ms"]).code, Some(0));
    damage(runs.path());
    let out = run_in(runs.path(), &["timer", "-d", "200ms"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("not catalogued"), "{}", out.stderr);
    assert!(!out.stderr.contains("was not added"), "{}", out.stderr);
    assert_eq!(kept_aside(runs.path()).len(), 1);
    let listed = run_in(runs.path(), &["runs", "--all"]);
    for d in run_dirs(runs.path()) {
        assert!(
            listed.stdout.contains(&d),
            "{d} not listed:\n{}",
            listed.stdout
        );
    }
}
