//! Files that a hostile local user (or a damaged disk) puts where sandglass reads: a FIFO, a
//! link to /dev/zero, a file far larger than it should be, a manifest that names a file outside
//! its run, a run another user cannot read, a study matrix or a task set too large to work on.
//! Each is refused with one error line that names the file and what is wrong, exit code 2, and
//! the command ends: every invocation here is killed, and the test failed, if it has not ended
//! after 10 s, so a regression makes a test fail instead of hanging the suite.
//!
//! Also: `study` takes SIGTERM while it reads its input, and a run killed 1.5 s after it
//! started keeps samples that `report --csv` exports.

use crate::common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long an invocation may take before the test kills it and fails: a hang guard (these
/// inputs must not make the command wait for ever), far above what any takes on a busy machine.
const DEADLINE: Duration = common::WAIT_GUARD;

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Out {
    /// The error lines it printed.
    fn errors(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("sandglass: error:"))
            .collect()
    }

    /// Asserts exit code 2 and exactly one error line, which contains every one of `words`.
    fn refused(&self, words: &[&str]) {
        assert_eq!(self.code, Some(2), "stderr: {}", self.stderr);
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
        let errors = self.errors();
        assert_eq!(errors.len(), 1, "one error line: {}", self.stderr);
        for w in words {
            assert!(errors[0].contains(w), "'{w}' not in: {}", errors[0]);
        }
    }
}

/// Runs `cmd` with its output in files (no pipe can fill), polling until it ends; kills it and
/// fails the test when it has not ended within [`DEADLINE`].
fn timed(mut cmd: Command) -> Out {
    let dir = tempfile::tempdir().unwrap();
    let (o, e) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{}: {cmd:?}; stderr: {}",
                common::hang_guard("the command's end", DEADLINE),
                std::fs::read_to_string(&e).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Out {
        code: status.code(),
        stdout: std::fs::read_to_string(&o).unwrap(),
        stderr: std::fs::read_to_string(&e).unwrap(),
    }
}

fn sandglass(runs: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("sandglass"));
    c.env("SANDGLASS_RUNS_DIR", runs)
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(runs))
        .args(args);
    c
}

fn run(runs: &Path, args: &[&str]) -> Out {
    timed(sandglass(runs, args))
}

fn mkfifo(path: &Path) {
    let s = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(s.success(), "mkfifo {}", path.display());
}

/// A short finished timer run in `runs`; returns its directory.
fn timer_run(runs: &Path) -> PathBuf {
    let _machine = common::lock();
    let o = run(runs, &["timer", "-c", "0", "-d", "300ms", "--json"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    PathBuf::from(v["run_dir"].as_str().unwrap())
}

/// The name of the run's first listed Parquet segment.
fn segment_of(dir: &Path) -> String {
    let m = sandglass::store::RunReader::open_any_state(dir)
        .unwrap()
        .manifest;
    m.files
        .iter()
        .find(|f| f.name.ends_with(".parquet"))
        .expect("a segment")
        .name
        .clone()
}

/// Replaces `dir/name` with a FIFO.
fn as_fifo(dir: &Path, name: &str) {
    std::fs::remove_file(dir.join(name)).unwrap();
    mkfifo(&dir.join(name));
}

/// Replaces `dir/name` with a link to /dev/zero.
fn as_zero_link(dir: &Path, name: &str) {
    std::fs::remove_file(dir.join(name)).unwrap();
    symlink("/dev/zero", dir.join(name)).unwrap();
}

/// Makes `dir/name` a sparse file of `bytes` bytes (no disk space used).
fn as_sparse(dir: &Path, name: &str, bytes: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(name))
        .unwrap();
    f.set_len(bytes).unwrap();
}

const TWENTY_GB: u64 = 20 << 30;

/// `report` and `report --csv` both refuse the run with one line containing `words`.
fn every_reader_refuses(runs: &Path, dir: &Path, words: &[&str]) {
    let d = dir.to_str().unwrap();
    run(runs, &["report", d]).refused(words);
    let csv = runs.parent().unwrap().join("csv-out");
    run(runs, &["report", d, "--csv", csv.to_str().unwrap()]).refused(words);
}

/// `report` refuses the run with one line containing `words` (the CSV export does not read the
/// summary).
fn report_refuses(runs: &Path, dir: &Path, words: &[&str]) {
    run(runs, &["report", dir.to_str().unwrap()]).refused(words);
}

#[test]
fn a_manifest_that_is_a_fifo_a_link_to_dev_zero_or_oversized_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let dir = timer_run(&runs);
    let saved = std::fs::read(dir.join("manifest.json")).unwrap();

    as_fifo(&dir, "manifest.json");
    every_reader_refuses(&runs, &dir, &["manifest.json", "FIFO"]);

    as_zero_link(&dir, "manifest.json");
    every_reader_refuses(&runs, &dir, &["manifest.json", "symbolic link"]);

    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    std::fs::write(dir.join("manifest.json"), &saved).unwrap();
    as_sparse(&dir, "manifest.json", 65 << 20);
    every_reader_refuses(&runs, &dir, &["manifest.json", "above the limit"]);
}

#[test]
fn a_summary_that_is_a_fifo_a_link_to_dev_zero_or_oversized_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let dir = timer_run(&runs);
    let saved = std::fs::read(dir.join("summary.json")).unwrap();

    as_fifo(&dir, "summary.json");
    report_refuses(&runs, &dir, &["summary.json", "FIFO"]);

    as_zero_link(&dir, "summary.json");
    report_refuses(&runs, &dir, &["summary.json", "symbolic link"]);

    std::fs::remove_file(dir.join("summary.json")).unwrap();
    std::fs::write(dir.join("summary.json"), &saved).unwrap();
    as_sparse(&dir, "summary.json", TWENTY_GB);
    report_refuses(&runs, &dir, &["summary.json", "where the manifest records"]);
}

#[test]
fn a_segment_that_is_a_fifo_a_link_to_dev_zero_or_oversized_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let dir = timer_run(&runs);
    let seg = segment_of(&dir);
    let saved = std::fs::read(dir.join(&seg)).unwrap();

    as_fifo(&dir, &seg);
    every_reader_refuses(&runs, &dir, &[&seg, "FIFO"]);

    as_zero_link(&dir, &seg);
    every_reader_refuses(&runs, &dir, &[&seg, "symbolic link"]);

    // A 20 GB sparse segment is refused by its size, before a byte of it is hashed.
    std::fs::remove_file(dir.join(&seg)).unwrap();
    std::fs::write(dir.join(&seg), &saved).unwrap();
    as_sparse(&dir, &seg, TWENTY_GB);
    every_reader_refuses(&runs, &dir, &[&seg, "where the manifest records"]);
}

#[test]
fn a_manifest_entry_outside_the_run_is_named_so() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let dir = timer_run(&runs);
    let path = dir.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let files = m["files"].as_array_mut().unwrap();
    let mut entry = files[0].clone();
    entry["name"] = "../../etc/hostname".into();
    files.push(entry);
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    run(&runs, &["report", dir.to_str().unwrap()])
        .refused(&["../../etc/hostname", "outside the run directory"]);
}

#[test]
fn an_unreadable_run_is_reported_by_its_permission_error() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let dir = timer_run(&runs);
    let d = dir.to_str().unwrap().to_string();
    if common::is_root() {
        let setpriv = Path::new("/usr/bin/setpriv");
        if !setpriv.exists() {
            common::skip("setpriv is not installed to run as the user nobody");
            return;
        }
        // The user nobody may reach the run but not read it, and keeps its own catalog.
        use std::os::unix::fs::PermissionsExt;
        let chmod = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        chmod(tmp.path(), 0o755);
        chmod(&runs, 0o755);
        chmod(&dir, 0o700);
        let theirs = tmp.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        chmod(&theirs, 0o777);
        let mut c = Command::new(setpriv);
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            assert_cmd::cargo::cargo_bin("sandglass").to_str().unwrap(),
            "report",
            &d,
        ])
        .env("SANDGLASS_RUNS_DIR", &theirs)
        .env("SANDGLASS_RUNTIME_DIR", theirs.join("rt"));
        let o = timed(c);
        o.refused(&["ermission denied"]);
        assert!(!o.stderr.contains("has no manifest.json"), "{}", o.stderr);
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o000)).unwrap();
        let o = run(&runs, &["report", &d]);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        o.refused(&["ermission denied"]);
        assert!(!o.stderr.contains("has no manifest.json"), "{}", o.stderr);
    }
}

#[test]
fn rebuild_leaves_a_damaged_run_out_and_indexes_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let good = [timer_run(&runs), timer_run(&runs)];
    let bad = timer_run(&runs);
    as_fifo(&bad, "manifest.json");
    let other = timer_run(&runs);
    as_zero_link(&other, &segment_of(&other));

    let o = run(&runs, &["runs", "rebuild"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let warnings: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("sandglass: warning: left out"))
        .collect();
    assert_eq!(warnings.len(), 2, "{}", o.stderr);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(bad.to_str().unwrap()) && w.contains("FIFO")),
        "{}",
        o.stderr
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(other.to_str().unwrap()) && w.contains("symbolic link")),
        "{}",
        o.stderr
    );
    let o = run(&runs, &["runs", "--all", "--json"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let listed: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["path"].as_str())
        .collect();
    for g in &good {
        assert!(listed.contains(&g.to_str().unwrap()), "{listed:?}");
    }
    assert_eq!(listed.len(), 2, "{listed:?}");
}

#[test]
fn a_study_file_that_is_a_fifo_or_a_device_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let fifo = tmp.path().join("study.toml");
    mkfifo(&fifo);
    let f = fifo.to_str().unwrap();
    run(&runs, &["study", f, "--dry-run"]).refused(&[f, "FIFO"]);
    run(&runs, &["study", f]).refused(&[f, "FIFO"]);
    run(&runs, &["study", "/dev/zero", "--dry-run"]).refused(&["/dev/zero", "character device"]);
    let big = tmp.path().join("big.toml");
    std::fs::write(&big, vec![b'#'; (1 << 20) + 1]).unwrap();
    run(&runs, &["study", big.to_str().unwrap(), "--dry-run"])
        .refused(&["big.toml", "above the limit of 1048576 bytes"]);
}

#[test]
fn a_study_matrix_above_the_cell_limit_is_refused_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let file = tmp.path().join("huge.toml");
    std::fs::write(
        &file,
        "[study]\nname = \"huge\"\nrepetitions = 20000\n\n[[measure]]\nkind = \"noise\"\nduration = \"1s\"\n",
    )
    .unwrap();
    run(&runs, &["study", file.to_str().unwrap(), "--dry-run"]).refused(&[
        "huge.toml",
        "20000 cells",
        "limit of 10000",
    ]);
}

#[test]
fn task_files_that_are_devices_or_too_large_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let many = tmp.path().join("many.toml");
    let one = "[[task]]\nwcet = \"1ms\"\nperiod = \"100ms\"\n";
    std::fs::write(&many, one.repeat(4097)).unwrap();
    let big = tmp.path().join("big.toml");
    std::fs::write(&big, vec![b'#'; (1 << 20) + 1]).unwrap();
    for kind in ["rta", "edf", "admission"] {
        run(&runs, &["analyze", kind, "/dev/zero"]).refused(&["/dev/zero", "character device"]);
        run(&runs, &["analyze", kind, big.to_str().unwrap()])
            .refused(&["big.toml", "above the limit"]);
    }
    for kind in ["rta", "edf"] {
        run(&runs, &["analyze", kind, many.to_str().unwrap()]).refused(&[
            "many.toml",
            "4097 tasks",
            "limit of 4096",
        ]);
    }
}

#[test]
fn a_histogram_that_is_a_device_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    run(&runs, &["analyze", "mttf", "--histogram", "/dev/zero"])
        .refused(&["/dev/zero", "character device"]);
    let fifo = tmp.path().join("h.txt");
    mkfifo(&fifo);
    run(
        &runs,
        &["analyze", "mttf", "--histogram", fifo.to_str().unwrap()],
    )
    .refused(&["h.txt", "FIFO"]);
}

/// `study FIFO --dry-run` with a writer that holds the FIFO open and never writes (so a
/// blocking read would wait for ever) ends on SIGTERM, or refuses the FIFO before it comes:
/// either way it ends, where it used to hold SIGTERM blocked while it waited.
#[test]
fn study_reading_a_fifo_ends_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let fifo = tmp.path().join("study.toml");
    mkfifo(&fifo);
    // Open for reading and writing, which does not block: a writer exists from now on.
    let _writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    let mut child = sandglass(&runs, &["study", fifo.to_str().unwrap(), "--dry-run"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{}",
                common::hang_guard("the end of a study on a FIFO after SIGTERM", DEADLINE)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.code() == Some(2) || status.signal() == Some(libc::SIGTERM),
        "{status:?}"
    );
}

/// A timer run killed with SIGKILL 1.5 s after it started keeps the samples of its first
/// row group: `report` says so and `report --csv` exports them.
#[test]
fn a_run_killed_after_1_5_s_keeps_samples() {
    let _machine = common::lock();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    // 1.5 s into its measurement (from its `running` manifest), however long a busy machine
    // took to start it.
    let (mut child, dir) = common::start_timer_run(&runs);
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    // The next start marks it incomplete and recovers its segments.
    let o = run(&runs, &["runs"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(common::rows(&dir, &sandglass::store::table::tables::TIMER_SAMPLES) > 0);
    let d = dir.to_str().unwrap();
    let o = run(&runs, &["report", d]);
    o.refused(&["incomplete", "--csv"]);
    let csv = tmp.path().join("csv");
    let o = run(&runs, &["report", d, "--csv", csv.to_str().unwrap()]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let samples = std::fs::read_to_string(csv.join("samples.csv")).unwrap();
    assert!(samples.lines().count() > 1, "{samples}");
}

/// An incomplete run that kept no samples is not sent to `report --csv`.
#[test]
fn an_incomplete_run_without_samples_advises_nothing_that_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let dir = timer_run(&runs);
    let path = dir.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["state"] = "incomplete".into();
    m["files"].as_array_mut().unwrap().clear();
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let o = run(&runs, &["report", dir.to_str().unwrap()]);
    o.refused(&["incomplete", "kept any samples"]);
    assert!(!o.stderr.contains("--csv"), "{}", o.stderr);
}

/// A FIFO and a link to /dev/zero planted as the partial segment and row-group journal of an
/// abandoned run: the next start marks the run incomplete without blocking, and leaves both
/// where they are (sandglass did not write them).
#[test]
fn a_planted_partial_segment_neither_blocks_nor_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let dir = timer_run(&runs);
    let path = dir.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["state"] = "running".into();
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let partial = dir.join("samples-0099.parquet.partial");
    let journal = dir.join("samples-0099.parquet.rowgroups");
    mkfifo(&partial);
    symlink("/dev/zero", &journal).unwrap();
    let o = run(&runs, &["runs", "rebuild"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let m = sandglass::store::RunReader::open_any_state(&dir)
        .unwrap()
        .manifest;
    assert_eq!(m.state, sandglass::store::RunState::Incomplete);
    assert!(
        std::fs::symlink_metadata(&partial).is_ok(),
        "the FIFO was removed"
    );
    assert!(
        std::fs::symlink_metadata(&journal).is_ok(),
        "the link was removed"
    );
}
