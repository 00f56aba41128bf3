//! The machine is left as it was found: runs of every kind that end normally, by SIGINT, by
//! SIGTERM, by the watchdog and by an error leave the kernel's settings, the holders of
//! `/dev/cpu_dma_latency`, the calling thread's scheduling and affinity, and the process table
//! exactly as they were, and keep what they measured.

use crate::common;
use common::{is_root, lock, skip};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const TRACEFS: &str = "/sys/kernel/tracing";

/// Everything a run could change that outlives it.
fn state() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| format!("unreadable: {e}"));
    let root = Path::new(TRACEFS);
    for f in [
        "tracing_on",
        "current_tracer",
        "trace_clock",
        "buffer_size_kb",
        "tracing_cpumask",
        "set_event",
        "trace_options",
        "events/enable",
    ] {
        m.insert(format!("tracefs {f}"), read(&root.join(f)));
    }
    let mut instances: Vec<String> = std::fs::read_dir(root.join("instances"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    instances.sort();
    m.insert("tracefs instances".into(), instances.join(","));
    for k in [
        "sched_rt_runtime_us",
        "sched_rt_period_us",
        "perf_event_paranoid",
        "timer_migration",
    ] {
        m.insert(k.into(), read(&Path::new("/proc/sys/kernel").join(k)));
    }
    let cpus = std::fs::read_dir("/sys/devices/system/cpu")
        .map(|rd| rd.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default();
    for c in cpus {
        let gov = c.join("cpufreq/scaling_governor");
        if gov.exists() {
            m.insert(format!("{} governor", c.display()), read(&gov));
        }
    }
    m.insert(
        "cpu_dma_latency holders".into(),
        format!("{:?}", dma_latency_holders()),
    );
    m.insert("cpu_dma_latency".into(), {
        // The value in force: reading the device gives the current request.
        std::fs::read("/dev/cpu_dma_latency")
            .map(|b| format!("{b:?}"))
            .unwrap_or_else(|e| format!("unreadable: {e}"))
    });
    let attr = sandglass_sys::sched::get_attr(sandglass_sys::sched::Tid::SELF).unwrap();
    m.insert(
        "this thread's policy".into(),
        format!("{} {} {}", attr.policy, attr.priority, attr.nice),
    );
    m.insert(
        "this thread's affinity".into(),
        format!(
            "{:?}",
            sandglass_sys::sched::get_affinity(sandglass_sys::sched::Tid::SELF).unwrap()
        ),
    );
    m
}

/// Processes that hold `/dev/cpu_dma_latency` open.
fn dma_latency_holders() -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        if fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|t| t == Path::new("/dev/cpu_dma_latency"))
        }) {
            out.insert(pid);
        }
    }
    out
}

/// Live processes running the sandglass binary, this test's own process aside.
fn sandglass_processes() -> BTreeSet<i32> {
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_sandglass")).unwrap();
    let me = std::process::id() as i32;
    let mut out = BTreeSet::new();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        // A zombie or a process of another user has no readable exe: it is not ours.
        if std::fs::read_link(p.path().join("exe")).is_ok_and(|e| e == exe) {
            out.insert(pid);
        }
    }
    out
}

fn diff(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: {v:?} became {:?}", after.get(k)))
        .collect()
}

/// How a run is ended.
#[derive(Clone, Copy, Debug)]
enum End {
    Normally,
    Signal(i32, Duration),
}

/// One run of the test: its name, arguments, ending, environment, exit code and final state.
struct Case<'a> {
    name: &'a str,
    args: Vec<&'a str>,
    end: End,
    env: Vec<(&'a str, &'a str)>,
    code: i32,
    state: &'a str,
}

fn case<'a>(
    name: &'a str,
    args: &[&'a str],
    end: End,
    env: &[(&'a str, &'a str)],
    code: i32,
    state: &'a str,
) -> Case<'a> {
    Case {
        name,
        args: args.to_vec(),
        end,
        env: env.to_vec(),
        code,
        state,
    }
}

fn manifest_state(dir: &Path) -> String {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    m["state"].as_str().unwrap_or("").to_string()
}

/// Runs `args` with `-o dir`, ends it as `end` says, and returns its exit code.
fn run(args: &[&str], dir: &Path, end: End, env: &[(&str, &str)]) -> Option<i32> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandglass"));
    cmd.args(args)
        .arg("-o")
        .arg(dir)
        .env("SANDGLASS_RUNS_DIR", dir.parent().unwrap().join("runs"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    if let End::Signal(sig, after) = end {
        // Signalled once it measures (its manifest says `running`), however long a busy
        // machine takes to start it, and `after` into its run.
        let manifest = dir.join("manifest.json");
        common::wait_until("the run's running manifest", || {
            std::fs::read_to_string(&manifest).is_ok_and(|m| m.contains("\"running\""))
                || child.try_wait().unwrap().is_some()
        });
        std::thread::sleep(after);
        sandglass_sys::signal::send_to_process(child.id() as i32, sig).unwrap();
    }
    let deadline = Instant::now() + common::COMMAND_GUARD;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        assert!(
            Instant::now() < deadline,
            "{}: sandglass {args:?}",
            common::hang_guard("the run's end", common::COMMAND_GUARD)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn runs_leave_the_machine_as_they_found_it() {
    let _g = lock();
    if !is_root() {
        skip("needs root: the runs use real-time priorities and /dev/cpu_dma_latency, and the check reads every process's files");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let before = state();
    let procs_before = sandglass_processes();
    let sigint = sandglass_sys::signal::SIGINT;
    let sigterm = sandglass_sys::signal::SIGTERM;
    let mid = Duration::from_millis(2500);
    let traced = Path::new(TRACEFS)
        .join("events/sched/sched_switch")
        .is_dir();
    let hourglass = [
        "hourglass",
        "-n",
        "2",
        "-d",
        "20s",
        "-t",
        "1",
        "-w",
        "PERIODIC",
        "2ms",
        "10ms",
        "-p",
        "f:50",
    ];
    let mut cases = vec![
        case(
            "timer",
            &["timer", "-d", "1s"],
            End::Normally,
            &[],
            0,
            "completed",
        ),
        case(
            "timer-sigint",
            &["timer", "-d", "20s", "--load", "cpu"],
            End::Signal(sigint, mid),
            &[],
            130,
            "interrupted",
        ),
        case(
            "noise-sigterm",
            &["noise", "-d", "20s"],
            End::Signal(sigterm, mid),
            &[],
            143,
            "interrupted",
        ),
        case(
            "hourglass-sigint",
            &hourglass,
            End::Signal(sigint, mid),
            &[],
            130,
            "interrupted",
        ),
        // A thread that never stops: the watchdog ends the run and the results are kept.
        case(
            "timer-watchdog",
            &["timer", "-d", "1s"],
            End::Normally,
            &[("SANDGLASS_FAULT", "stuck-thread=0")],
            1,
            "watchdog",
        ),
    ];
    if traced {
        cases.push(case(
            "timer-error",
            &["timer", "-d", "2s", "--trace"],
            End::Normally,
            &[("SANDGLASS_FAULT", "fail-after-trace-start")],
            1,
            "failed",
        ));
    } else {
        skip("no tracefs with sched_switch: the error case with tracing under way is left out");
    }
    for c in cases {
        let (name, expected) = (c.name, c.state);
        let dir = tmp.path().join(name);
        let got = run(&c.args, &dir, c.end, &c.env);
        assert_eq!(got, Some(c.code), "{name}: exit code");
        assert_eq!(manifest_state(&dir), expected, "{name}: run state");
        // Whatever the ending, the run's files are as its manifest lists them.
        let r = sandglass::store::RunReader::open_any_state(&dir).unwrap();
        r.verify().unwrap_or_else(|e| panic!("{name}: {e}"));
        // Give an orphan the time to show itself.
        std::thread::sleep(Duration::from_millis(300));
        let changed = diff(&before, &state());
        assert!(changed.is_empty(), "{name} changed: {changed:#?}");
        let left: Vec<i32> = sandglass_processes()
            .difference(&procs_before)
            .copied()
            .collect();
        assert!(left.is_empty(), "{name} left processes {left:?}");
    }
}

#[test]
fn every_cpu_busy_at_real_time_is_refused_unless_allowed_and_still_ends_on_time() {
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    let cpus: Vec<usize> =
        sandglass_sys::sched::get_affinity(sandglass_sys::sched::Tid::SELF).unwrap();
    let list = cpus
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let args = ["noise", "-P", "f:1", "-c", list.as_str(), "-d", "2s"];
    // Refused before anything runs, without the option (privileged or not).
    let out = Command::new(env!("CARGO_BIN_EXE_sandglass"))
        .args(args)
        .arg("-o")
        .arg(tmp.path().join("refused"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--allow-rt-busy"), "{err}");
    assert!(!tmp.path().join("refused").exists());
    if !is_root() {
        skip("needs root to run real-time polling threads on every CPU");
        return;
    }
    let before = state();
    // Allowed: every CPU polls at SCHED_FIFO, and the run still ends on time, and so does a
    // run whose thread never stops, by the watchdog. "On time" is the run's own deadline (2 s,
    // and the watchdog's few seconds more), checked with a margin many times as large so that
    // a busy machine's slow start of the process does not count.
    for (name, env, code, expected, within) in [
        ("busy", None, 0, "completed", 120),
        ("stuck", Some("stuck-thread=0"), 1, "watchdog", 120),
    ] {
        let dir = tmp.path().join(name);
        let started = Instant::now();
        let mut all = args.to_vec();
        all.push("--allow-rt-busy");
        let env: Vec<(&str, &str)> = env.map(|v| ("SANDGLASS_FAULT", v)).into_iter().collect();
        let code_got = run(&all, &dir, End::Normally, &env);
        let took = started.elapsed();
        assert_eq!(code_got, Some(code), "{name}: exit code");
        assert_eq!(manifest_state(&dir), expected, "{name}");
        assert!(
            took < Duration::from_secs(within),
            "{name}: a 2 s run took {took:?}: it did not end at its own deadline (or the machine is extremely overloaded)"
        );
    }
    let changed = diff(&before, &state());
    assert!(changed.is_empty(), "changed: {changed:#?}");
}

/// Regression: SIGHUP (a closed terminal) ended a run with the signal's default action (exit
/// 129 from the shell, no summary, no final manifest). It ends a run as SIGTERM does: the
/// summary printed, every file written and checked, the run catalogued as `interrupted`, the
/// hang-up named, and the exit code 129 (128 + SIGHUP, as 130 after SIGINT and 143 after
/// SIGTERM).
#[test]
fn a_hang_up_ends_a_run_like_sigterm_and_keeps_it() {
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let (mut child, dir) = common::start_run(&runs, &["timer", "-c", "0", "-d", "30s"]);
    std::thread::sleep(Duration::from_secs(1));
    sandglass_sys::signal::send_to_process(child.id() as i32, sandglass_sys::signal::SIGHUP)
        .unwrap();
    let deadline = Instant::now() + common::WAIT_GUARD;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{}",
                common::hang_guard("the run's end after SIGHUP", common::WAIT_GUARD)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(129), "{status:?}");
    assert_eq!(manifest_state(&dir), "interrupted");
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let detail = m["end_detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with("stopped by SIGHUP"), "{detail}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["signal"], "SIGHUP", "{summary}");
    let out = common::run_in(&runs, &["report", dir.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let listed = common::run_in(&runs, &["runs", "--json"]);
    let id = dir.file_name().unwrap().to_str().unwrap();
    assert!(listed.stdout.contains(id), "{}", listed.stdout);
}
