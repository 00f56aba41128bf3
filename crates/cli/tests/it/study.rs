//! `sandglass study`: bad study files, the built-in studies' files, a study stopped by SIGINT
//! and resumed, and loads that must not outlive their measurement.
//!
//! The measuring tests run without root too (timer threads fall back to SCHED_OTHER with a
//! warning); they are serialised by a lock because they measure the machine they run on, and
//! none of them asserts a speed.

use crate::common;
use common::{lock, share, Guarded};

use assert_cmd::Command;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn sandglass() -> Command {
    Command::cargo_bin("sandglass").unwrap()
}

fn bin() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("sandglass")
}

/// Runs `study FILE --dry-run` on `text` and returns (exit code, stderr).
fn check(text: &str) -> (Option<i32>, String) {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.toml");
    std::fs::write(&file, text).unwrap();
    let out = sandglass()
        .args(["study", file.to_str().unwrap(), "--dry-run"])
        .guarded_output();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const GOOD: &str = r#"[study]
name = "t"

[[measure]]
kind = "timer"
duration = "1s"

[[load]]
name = "busy"
profile = "cpu"
"#;

#[test]
fn a_good_study_file_lists_its_cells() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.toml");
    std::fs::write(&file, GOOD).unwrap();
    let out = sandglass()
        .args(["study", file.to_str().unwrap(), "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("1 cells"), "{stdout}");
    assert!(stdout.contains("cell-001-timer-busy"), "{stdout}");
}

#[test]
fn bad_study_files_name_the_line_and_exit_2() {
    let cases = [
        (
            GOOD.replace("kind = \"timer\"", "kind = \"stopwatch\""),
            ":5:",
            "unknown measurement 'stopwatch'",
        ),
        (
            GOOD.replace("profile = \"cpu\"", "profile = \"earthquake\""),
            ":10:",
            "unknown load 'earthquake'",
        ),
        (
            GOOD.replace("duration = \"1s\"", "duration = \"1\""),
            ":6:",
            "no unit",
        ),
        (
            GOOD.replace("duration = \"1s\"", "duration = \"-3s\""),
            ":6:",
            "duration",
        ),
        (
            "[study]\nname = \"empty\"\n".to_string(),
            "s.toml:",
            "matrix is empty",
        ),
        (GOOD.replace("[[load]]", "[[loads]]"), ":8:", "loads"),
        ("[study\nname = 1".to_string(), ":1:", ""),
    ];
    for (text, line, message) in cases {
        let (code, stderr) = check(&text);
        assert_eq!(code, Some(2), "{text}\n{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.starts_with("sandglass: error: "), "{stderr}");
        assert!(stderr.contains(line), "{line} in {stderr}");
        assert!(stderr.contains(message), "{message} in {stderr}");
    }
}

#[test]
fn unknown_studies_and_options_are_usage_errors() {
    let out = sandglass()
        .args(["study", "no-such-study"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("quick") && stderr.contains("wdm"),
        "{stderr}"
    );
    for scale in ["0", "-1", "abc", "nan"] {
        let out = sandglass()
            .args(["study", "quick", "--dry-run", "--duration-scale", scale])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{scale}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = sandglass()
        .args(["study", "--resume", tmp.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a study directory"));
}

/// Regression: `study --resume` without a directory was refused ("a value is required") instead
/// of looking for the most recent unfinished study.
#[test]
fn resume_without_a_directory_looks_for_the_latest_study() {
    let tmp = tempfile::tempdir().unwrap();
    let out = sandglass()
        .args(["study", "--resume"])
        .env("SANDGLASS_RUNS_DIR", tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no unfinished study under"), "{stderr}");
}

#[test]
fn every_builtin_study_prints_and_fits_in_five_minutes() {
    let out = sandglass().args(["study", "--list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    for name in ["quick", "mach", "wdm", "hourglass", "timers"] {
        assert!(list.contains(name), "{list}");
        let out = sandglass()
            .args(["study", "--print", name])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("name = \"{name}\"")));
        let out = sandglass()
            .args(["study", name, "--dry-run"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // "about M:SS at scale 1": the plan must fit in five minutes.
        let about = text.split("about ").nth(1).unwrap();
        let clock = about.split_whitespace().next().unwrap();
        let (m, s) = clock.split_once(':').unwrap();
        let secs: u64 = m.parse::<u64>().unwrap() * 60 + s.parse::<u64>().unwrap();
        assert!(secs <= 300, "{name} plans {clock}");
    }
}

/// A study of five one-second timer cells, each a separate run.
const FIVE: &str = r#"[study]
name = "five"

[[measure]]
kind = "timer"
duration = "1500ms"
interval = "1ms"

[[setting]]
name = "a"
interval = "1ms"

[[setting]]
name = "b"
interval = "2ms"

[[setting]]
name = "c"
interval = "1ms"

[[setting]]
name = "d"
interval = "2ms"

[[setting]]
name = "e"
interval = "1ms"

[[table]]
title = "latency"
rows = "setting"
columns = "metric"
values = ["p99_us", "count"]
"#;

fn state(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("study.json")).unwrap()).unwrap()
}

fn cell_states(dir: &Path) -> Vec<String> {
    state(dir)["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["state"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_study_stopped_in_its_third_cell_resumes_with_what_is_left() {
    // What it asserts (which cells completed, the states, the refusal, the resumed cells) is
    // the same under any load: the signal comes 0.7 s into a 1.5 s cell. It shares the
    // machine, with CPU locks of its own.
    let _g = share();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("five.toml");
    std::fs::write(&file, FIVE).unwrap();
    let dir = tmp.path().join("study");
    let runtime = tmp.path().join("runtime");
    let mut child = std::process::Command::new(bin())
        .args(["study", file.to_str().unwrap(), "-o", dir.to_str().unwrap()])
        .env("SANDGLASS_RUNTIME_DIR", &runtime)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the third cell to start, then let it measure for a moment.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + common::WAIT_GUARD;
    let mut seen = Vec::new();
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| {
                panic!(
                    "{}: {seen:?}",
                    common::hang_guard("the third cell's start", common::WAIT_GUARD)
                )
            });
        let third = line.contains("cell 3 of 5");
        seen.push(line);
        if third {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(700));
    sandglass_sys::signal::send_to_process(child.id() as i32, sandglass_sys::signal::SIGINT)
        .unwrap();
    // An impatient second signal while the study stops must not end the process before its
    // tables are printed and it is catalogued (the soak found it killed by this SIGTERM).
    std::thread::sleep(Duration::from_millis(30));
    let _ =
        sandglass_sys::signal::send_to_process(child.id() as i32, sandglass_sys::signal::SIGTERM);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    assert!(
        stdout.contains("resume with: sandglass study --resume"),
        "{stdout}"
    );
    assert!(stdout.contains("2 of 5 cells completed"), "{stdout}");
    assert_eq!(
        cell_states(&dir),
        [
            "completed",
            "completed",
            "interrupted",
            "pending",
            "pending"
        ]
    );
    assert_eq!(state(&dir)["state"], "interrupted");
    // A study that ended, like a run, no longer holds back the space kept for its last files.
    assert!(!dir.join(".reserve").exists(), "the study kept its reserve");
    // The interrupted cell kept what it measured.
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("cell-003-timer-idle-c/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(m["state"], "interrupted");

    // While another process holds the study (here: this test holds its lock), a resume is
    // refused and changes nothing.
    let held = sandglass::store::DirLock::try_acquire(&dir)
        .unwrap()
        .expect("nobody holds the study");
    let out = sandglass()
        .args(["study", "--resume", dir.to_str().unwrap()])
        .env("SANDGLASS_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("another sandglass process is running this study"),
        "{stderr}"
    );
    assert_eq!(state(&dir)["state"], "interrupted");
    drop(held);

    let out = sandglass()
        .args(["study", "--resume", dir.to_str().unwrap()])
        .env("SANDGLASS_RUNTIME_DIR", &runtime)
        .guarded_output();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains("cell 1 of 5") && !stderr.contains("cell 2 of 5"),
        "{stderr}"
    );
    for i in 3..=5 {
        assert!(stderr.contains(&format!("cell {i} of 5")), "{stderr}");
    }
    assert_eq!(cell_states(&dir), ["completed"; 5]);
    assert!(stdout.contains("5 of 5 cells completed"), "{stdout}");
    // The table has a row per setting, and the first two cells were not run again.
    for s in ["a", "b", "c", "d", "e"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{s} "))),
            "{stdout}"
        );
    }
    let st = state(&dir);
    assert_eq!(st["command_lines"].as_array().unwrap().len(), 2);
    assert_eq!(
        st["cells"][2]["earlier_attempts"][0],
        "cell-003-timer-idle-c.attempt-1"
    );
    assert!(dir
        .join("cell-003-timer-idle-c.attempt-1/manifest.json")
        .exists());
    // Nothing is left to resume.
    let out = sandglass()
        .args(["study", "--resume", dir.to_str().unwrap()])
        .env("SANDGLASS_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) && !cmd.contains("--load-cmd") && !cmd.contains("profile") {
                out.push(pid);
            }
        }
    }
    out
}

/// How long a load's process may take to be gone once its run has ended: a load left behind
/// lives for a day (its `sleep`), so a bound far above the moment its killing takes on a busy
/// machine still tells.
const LEFT: Duration = Duration::from_secs(30);

/// Waits up to `limit` for no process to carry `marker`.
fn gone(marker: &str, limit: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if processes_with(marker).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Starts a timer run beside `cpu+timers` and the command load `marker_cmd`, with its CPU locks
/// and load records in `runtime`.
fn spawn_timer(
    args: &[&str],
    marker_cmd: &str,
    env: Option<(&str, &str)>,
    runtime: &std::path::Path,
) -> std::process::Child {
    let mut c = std::process::Command::new(bin());
    c.args([
        "timer",
        "-i",
        "1ms",
        "--settle",
        "200ms",
        "--load",
        "cpu+timers",
        "--load-cmd",
    ])
    .arg(marker_cmd)
    .args(args)
    .env(
        "SANDGLASS_RUNS_DIR",
        std::env::temp_dir().join("sandglass-test-runs"),
    )
    .env("SANDGLASS_RUNTIME_DIR", runtime)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// Waits until `marker`'s process runs (the loads started).
fn wait_for(marker: &str) {
    let t = Instant::now();
    while processes_with(marker).is_empty() {
        assert!(
            t.elapsed() < common::WAIT_GUARD,
            "{}",
            common::hang_guard("the load's start", common::WAIT_GUARD)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn no_load_outlives_its_measurement() {
    let _g = lock();
    let runtime = tempfile::tempdir().unwrap();
    let runtime = runtime.path();
    // 1. A normal end (3 s, so that the load runs long enough to be seen by a test that a
    // busy machine schedules late).
    let marker = "86399.125";
    let child = spawn_timer(&["-d", "3s"], &format!("sleep {marker}"), None, runtime);
    wait_for(marker);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(gone(marker, LEFT), "left after a normal end");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("what each load achieved") && stdout.lines().any(|l| l.starts_with("cpu ")),
        "the loads are reported: {stdout}"
    );

    // 2. SIGINT in the middle of the measurement.
    let marker = "86399.25";
    let child = spawn_timer(&["-d", "60s"], &format!("sleep {marker}"), None, runtime);
    wait_for(marker);
    std::thread::sleep(Duration::from_millis(800));
    sandglass_sys::signal::send_to_process(child.id() as i32, sandglass_sys::signal::SIGINT)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert!(gone(marker, LEFT), "left after SIGINT");

    // 3. A measurement that ends in error: a measuring thread that never stops, so that the
    // watchdog ends the run.
    let marker = "86399.375";
    let child = spawn_timer(
        &["-d", "1s"],
        &format!("sleep {marker}"),
        Some(("SANDGLASS_FAULT", "stuck-thread=0")),
        runtime,
    );
    wait_for(marker);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(gone(marker, LEFT), "left after a failed run");

    // 4. Inside a study, the load of one cell is gone while the next cell measures.
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("two.toml");
    let marker = "86399.5";
    std::fs::write(
        &file,
        format!(
            "[study]\nname = \"two\"\nsettle = \"200ms\"\n\n[[measure]]\nkind = \"timer\"\nduration = \"1s\"\n\n[[load]]\nname = \"sleeper\"\nprofile = \"cmd:sleep {marker}\"\n\n[[load]]\nname = \"idle\"\nprofile = \"idle\"\n"
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(bin())
        .args(["study", file.to_str().unwrap(), "-o"])
        .arg(tmp.path().join("study"))
        .env("SANDGLASS_RUNTIME_DIR", runtime)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut second = false;
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        if line.contains("cell 2 of 2") {
            second = true;
            assert!(
                processes_with(marker).is_empty(),
                "the first cell's load still runs in the second"
            );
        }
    }
    assert!(second);
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(gone(marker, LEFT));
}
