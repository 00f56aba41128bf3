//! Nothing a load starts outlives its run: a command load whose descendants double-fork, call
//! `setsid` and run `timeout` (which calls `setpgid`) around a busy loop is ended with the run,
//! whether the run ends normally, by SIGINT, by SIGTERM or by SIGKILL (then the cgroup's warden
//! or the next start ends it, and the next start says so); in a cgroup where one can be made
//! (root) and with sandglass as subreaper otherwise.

use crate::common;
use common::{is_root, lock, skip};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let state = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .next()?
                .to_string();
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (cmd.contains(marker) && state != "Z").then(|| format!("{}: {cmd}", e.path().display()))
        })
        .collect()
}

fn wait_until_gone(marker: &str, limit: Duration) -> Vec<String> {
    let end = Instant::now() + limit;
    loop {
        let left = processes_with(marker);
        if left.is_empty() || Instant::now() > end {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A command load that double-forks, leaves its session and group, and spins under `timeout`
/// (at SCHED_FIFO 1 when it may), its busy loop named by `marker`.
fn escaping_load(marker: &str) -> String {
    let fifo = if is_root() { "chrt -f 1 " } else { "" };
    format!(
        "(setsid sh -c '{fifo}timeout 30 sh -c \"while :; do :; done\" {marker} & sleep 60' &); sleep 60"
    )
}

#[derive(Clone, Copy, Debug)]
enum End {
    Normal,
    Signal(i32),
}

/// Runs `timer -d 3s` beside the escaping load, ends it as `end` says, and checks that no
/// process of the load is left (after the next start, for SIGKILL).
fn check(end: End, subreaper: bool, runtime: &Path, runs: &Path) {
    let marker =
        format!("sg-contain-{}-{end:?}-{subreaper}", std::process::id()).replace(['(', ')'], "");
    let load = escaping_load(&marker);
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("sandglass"));
    cmd.args(["timer", "-d", "3s", "--settle", "1s", "--load-cmd", &load])
        .env("SANDGLASS_RUNS_DIR", runs)
        .env("SANDGLASS_RUNTIME_DIR", runtime)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if subreaper {
        cmd.env("SANDGLASS_CONTAIN", "subreaper");
    }
    let mut child = cmd.spawn().unwrap();
    let started = Instant::now();
    while processes_with(&marker).is_empty()
        && started.elapsed() < common::WAIT_GUARD
        && child.try_wait().unwrap().is_none()
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !processes_with(&marker).is_empty(),
        "{end:?}: the load's busy loop never started (or the hang guard of {} s expired)",
        common::WAIT_GUARD.as_secs()
    );
    if let End::Signal(sig) = end {
        // A subreaper jail records its processes every 100 ms at first.
        std::thread::sleep(Duration::from_millis(800));
        sandglass_sys::signal::send_to_process(child.id() as i32, sig).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    match end {
        End::Signal(s) if s == sandglass_sys::child::SIGKILL => {
            // The cgroup's warden ends the load at once; with a subreaper only the next start
            // can, from the state file.
            let next = Command::new(assert_cmd::cargo::cargo_bin("sandglass"))
                .args(["load", "cpu:1", "-d", "100ms"])
                .env("SANDGLASS_RUNS_DIR", runs)
                .env("SANDGLASS_RUNTIME_DIR", runtime)
                .output()
                .unwrap();
            let note = String::from_utf8_lossy(&next.stderr);
            assert!(
                note.contains("was killed before it could stop its load"),
                "{end:?} subreaper={subreaper}: the next start said nothing: {note}"
            );
        }
        End::Signal(s) => assert_eq!(out.status.code(), Some(128 + s), "{end:?}: {stderr}"),
        _ => assert_eq!(out.status.code(), Some(0), "{end:?}: {stderr}"),
    }
    // A process left behind would live on until its `timeout 30`: a bound well under that
    // (and far above the moment killing takes on a busy machine) still tells.
    let left = wait_until_gone(&marker, Duration::from_secs(15));
    assert!(
        left.is_empty(),
        "{end:?} subreaper={subreaper}: left running: {left:?}\n{stderr}"
    );
}

fn every_end(subreaper: bool) {
    let _machine = lock();
    let runtime = tempfile::tempdir().unwrap();
    let runs = tempfile::tempdir().unwrap();
    for end in [
        End::Normal,
        End::Signal(sandglass_sys::signal::SIGINT),
        End::Signal(sandglass_sys::signal::SIGTERM),
        End::Signal(sandglass_sys::child::SIGKILL),
    ] {
        check(end, subreaper, runtime.path(), runs.path());
    }
    let loads = runtime.path().join("loads");
    let left: Vec<_> = std::fs::read_dir(&loads)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "state files left: {left:?}");
}

#[test]
fn a_load_that_leaves_its_group_is_ended_with_its_cgroup() {
    if !is_root() {
        skip("making a cgroup for a load needs root or a delegated cgroup; the subreaper test covers the rest");
        return;
    }
    every_end(false);
}

#[test]
fn a_load_that_leaves_its_group_is_ended_by_sandglass_as_subreaper() {
    every_end(true);
}
