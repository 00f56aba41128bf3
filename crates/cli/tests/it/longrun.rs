//! What a run keeps when it cannot finish: a run killed with SIGKILL keeps the samples it
//! streamed up to its last closed row group (the next start recovers them), and a run that
//! fills its disk ends with one error line, marked incomplete, with every file it wrote
//! readable and the catalog consistent. No test asserts a speed.

use crate::common;

use common::run_in as run;
use sandglass::store::table::tables;
use sandglass::store::RunReader;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn catalog_row(runs: &Path, id: &str) -> Value {
    let o = run(runs, &["runs", "--all", "--json"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} not in the catalog: {v}"))
}

/// The span, in seconds, of the release times stored in the timer samples of `dir`.
fn stored_span_s(dir: &Path) -> f64 {
    let t = common::column(dir, &tables::TIMER_SAMPLES, "release_ns");
    match (t.iter().min(), t.iter().max()) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e9,
        _ => 0.0,
    }
}

/// Every file the manifest of `dir` lists has the size and SHA-256 it records, and no
/// half-written file is left beside them.
fn all_files_readable(dir: &Path) {
    let r = RunReader::open_any_state(dir).unwrap();
    r.verify()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(
            !name.ends_with(".partial") && !name.ends_with(".tmp") && name != ".reserve",
            "{name} left in {}",
            dir.display()
        );
    }
}

/// A 60 s run killed with SIGKILL at 15 s: the next start marks it incomplete and recovers
/// its partial segments, which then hold at least 11 s of samples (all but the row group being
/// filled, 2 s), each file listed with its checksum, and `report --csv` exports them.
#[test]
fn a_run_killed_at_15_s_keeps_11_s_of_samples() {
    let _machine = common::lock();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    // 15 s into its measurement (from its `running` manifest), however long a busy machine
    // took to start it.
    let (mut child, killed) = common::start_timer_run(&runs);
    std::thread::sleep(Duration::from_secs(15));
    child.kill().unwrap();
    child.wait().unwrap();
    let id = killed.file_name().unwrap().to_string_lossy().into_owned();

    // The next start.
    let o = run(&runs, &["runs"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(catalog_row(&runs, &id)["state"], "incomplete");
    let m = RunReader::open_any_state(&killed).unwrap().manifest;
    assert_eq!(m.state, sandglass::store::RunState::Incomplete);
    all_files_readable(&killed);
    let span = stored_span_s(&killed);
    assert!(span >= 11.0, "only {span:.1} s of samples kept");

    // What it kept is exported; the summary it never wrote is named as missing.
    let out = tmp.path().join("csv");
    let o = run(&runs, &["report", &id, "--csv", out.to_str().unwrap()]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stderr.contains("incomplete"), "{}", o.stderr);
    let lines = std::fs::read_to_string(out.join("samples.csv"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(lines - 1, common::rows(&killed, &tables::TIMER_SAMPLES));
    let o = run(&runs, &["report", &id]);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("--csv"), "{}", o.stderr);
}

/// An Hourglass run killed with SIGKILL keeps its trace too, and `report --csv` exports it
/// without the summary the run never wrote (the threads' ids are then 0).
#[test]
fn a_killed_hourglass_run_exports_its_trace() {
    let _machine = common::share();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let (mut child, killed) =
        common::start_run(&runs, &["hourglass", "-n", "2", "-d", "60s", "-x"]);
    // Two CPU-bound threads share one CPU: a trace record at every switch between them.
    std::thread::sleep(Duration::from_secs(7));
    child.kill().unwrap();
    child.wait().unwrap();
    let id = killed.file_name().unwrap().to_string_lossy().into_owned();
    let o = run(&runs, &["runs"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    all_files_readable(&killed);
    let kept = common::rows(&killed, &tables::TRACE);
    assert!(kept > 0, "the killed run kept no trace record");

    let out = tmp.path().join("csv");
    let o = run(&runs, &["report", &id, "--csv", out.to_str().unwrap()]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stderr.contains("incomplete"), "{}", o.stderr);
    let csv = std::fs::read_to_string(out.join("trace.csv")).unwrap();
    assert_eq!(csv.lines().count() - 1, kept);
    assert!(
        csv.lines()
            .skip(1)
            .all(|l| l.split(',').nth(1) == Some("0")),
        "a tid other than 0 without a summary"
    );
    let o = run(
        &runs,
        &[
            "report",
            &id,
            "--perfetto",
            tmp.path().join("p.json").to_str().unwrap(),
        ],
    );
    assert_ne!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stderr.contains("--csv"), "{}", o.stderr);
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }

    fn free_bytes(&self) -> u64 {
        let out = std::process::Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(&self.0)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A run on a 2 MB tmpfs (most of it already taken, so that it fills in seconds): one error
/// line naming the full disk and what to do, exit code 1, the run marked incomplete with its
/// results for the time it measured, every file it wrote readable, and the catalog consistent
/// (rebuilt from the directories, it says the same).
#[test]
fn a_run_that_fills_its_disk_ends_cleanly() {
    if !common::is_root() {
        common::skip("mounting a tmpfs needs root");
        return;
    }
    let _machine = common::share();
    let tmp = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(&tmp.path().join("small"), "2m") else {
        common::skip("mount -t tmpfs failed");
        return;
    };
    // Leave the reserve plus a few seconds of samples free.
    let fill = fs.free_bytes().saturating_sub(900 * 1024);
    std::fs::write(fs.0.join("filler"), vec![1u8; fill as usize]).unwrap();
    let runs = fs.0.join("runs");
    let o = run(
        &runs,
        &["timer", "-c", "0", "-i", "100us", "-d", "120s", "--json"],
    );
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    let errors: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("sandglass: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", o.stderr);
    assert!(
        errors[0].contains("No space left on device") && errors[0].contains("-o"),
        "{}",
        errors[0]
    );
    assert!(
        !o.stderr.contains("not added to the catalog"),
        "{}",
        o.stderr
    );
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["state"], "incomplete");
    let dir = PathBuf::from(v["run_dir"].as_str().unwrap());
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    all_files_readable(&dir);
    let m = RunReader::open(&dir).unwrap();
    assert_eq!(m.manifest.state, sandglass::store::RunState::Incomplete);
    assert!(common::rows(&dir, &tables::TIMER_SAMPLES) > 0);
    assert!(stored_span_s(&dir) > 1.0);

    // The report reads it and says why it is incomplete.
    let o = run(&runs, &["report", &id]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stdout.contains("incomplete"), "{}", o.stdout);
    assert!(o.stdout.contains("No space left"), "{}", o.stdout);

    // The catalog lists it as it is, and says the same once rebuilt from the directories.
    let before = catalog_row(&runs, &id);
    assert_eq!(before["state"], "incomplete");
    let o = run(&runs, &["runs", "rebuild"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let after = catalog_row(&runs, &id);
    assert_eq!(before["state"], after["state"]);
    assert_eq!(before["figures"], after["figures"]);
}
