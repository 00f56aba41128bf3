//! The loads on the real kernel: each kind does work and reports it; nothing is left behind.
//!
//! Every load here runs for a fraction of a second with one worker. None of these tests asserts
//! a speed: throughput only has to be positive, and the bound on `stop` is a correctness bound
//! (a stop that is never seen would hang), set far above what a stop takes.

use super::*;
use sandglass_sys::child::group_alive;
use std::io::Write;

const RUN: Duration = Duration::from_millis(300);
/// A stop that takes longer than this has missed the stop flag or a process: a hang guard far
/// above what a stop takes on a busy machine, and below the 100 s of the tests' `sleep 100`
/// commands, which a stop that missed their process would wait for.
const STOP_BOUND: Duration = Duration::from_secs(60);

/// Holds the machine shared, as the command's tests that load the machine do, while a test's
/// loads run: with `SANDGLASS_TEST_MACHINE_LOCK` set (.ci/run sets it), a test of the command
/// that has the machine alone (one that names the culprit of a delay, say) never runs beside
/// them. A disk load's writes hold the CPU in the kernel, unpreempted, for milliseconds.
fn share_machine() -> Option<std::fs::File> {
    let path = std::env::var_os("SANDGLASS_TEST_MACHINE_LOCK")?;
    let file = std::fs::File::open(&path).unwrap_or_else(|e| {
        panic!(
            "SANDGLASS_TEST_MACHINE_LOCK={}: {e}",
            path.to_string_lossy()
        )
    });
    sandglass_sys::process::lock_shared(&file)
        .unwrap_or_else(|e| panic!("flock {}: {e}", path.to_string_lossy()));
    Some(file)
}

fn skip(reason: &str) {
    let current = std::thread::current();
    let test = current.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "skipped {test}: {reason}");
}

/// Options that spread the tests' loads over the CPUs and keep their files in `dir`.
fn options(dir: &Path, salt: usize) -> LoadOptions {
    let allowed = crate::system::allowed_cpus();
    LoadOptions {
        default_cpus: vec![allowed[salt % allowed.len()]],
        temp_dir: dir.to_path_buf(),
    }
}

fn run(profile: &str, opts: &LoadOptions, time: Duration) -> Vec<LoadReport> {
    let specs = parse_profile(profile).expect("profile");
    let running = start(&specs, opts).unwrap_or_else(|e| panic!("{profile}: {e}"));
    std::thread::sleep(time);
    let t = Instant::now();
    let reports = running.stop();
    assert!(
        t.elapsed() < STOP_BOUND,
        "{profile}: stop took {:?}: it missed its stop flag or a process (or the machine is extremely overloaded)",
        t.elapsed()
    );
    assert_eq!(reports.len(), specs.len());
    reports
}

/// Runs one built-in kind and checks its report.
fn built_in(kind: &str, salt: usize) -> LoadReport {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut reports = run(kind, &options(dir.path(), salt), RUN);
    let r = reports.remove(0);
    let spec = LoadSpec::parse(kind).expect("spec");
    assert_eq!(r.error, None, "{r:?}");
    assert_eq!(r.kind, kind);
    assert_eq!(r.spec, kind);
    assert_eq!(r.intensity, 1);
    assert_eq!(r.unit, spec.kind.unit(), "{r:?}");
    assert!(r.work > 0.0, "{r:?}");
    assert!(r.per_s > 0.0, "{r:?}");
    assert!(r.duration_ns >= RUN.as_nanos() as u64 / 2, "{r:?}");
    assert!((r.per_s - r.work / (r.duration_ns as f64 / 1e9)).abs() <= r.per_s * 1e-9);
    assert_eq!(
        r.cpus,
        options(dir.path(), salt).default_cpus[0].to_string()
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "{kind} left files in its directory"
    );
    r
}

#[test]
fn cpu_load_counts_iterations() {
    let _machine = share_machine();
    built_in("cpu", 0);
}

#[test]
fn memory_load_counts_bytes_touched() {
    let _machine = share_machine();
    let r = built_in("memory", 1);
    assert!(r.detail.unwrap_or_default().contains("working set"));
}

#[test]
fn disk_load_counts_bytes_and_fsyncs() {
    let _machine = share_machine();
    let r = built_in("disk", 2);
    let detail = r.detail.unwrap_or_default();
    assert!(detail.contains("fsyncs"), "{detail}");
    assert!(detail.contains("16 MiB files"), "{detail}");
}

#[test]
fn net_load_reports_bytes_per_second() {
    let _machine = share_machine();
    let r = built_in("net", 3);
    assert_eq!(r.unit, "bytes");
    assert!(r.per_s > 0.0);
    assert!(r.detail.unwrap_or_default().contains(" sent"));
}

#[test]
fn compile_load_counts_processes() {
    let _machine = share_machine();
    built_in("compile", 4);
}

#[test]
fn sched_load_counts_handoffs() {
    let _machine = share_machine();
    built_in("sched", 5);
}

#[test]
fn timers_load_counts_wakeups() {
    let _machine = share_machine();
    let r = built_in("timers", 6);
    // At most one wakeup per 50 µs of sleep.
    assert!(r.per_s < 20_000.0 * 1.01, "{r:?}");
}

#[test]
fn no_intensity_starts_one_worker_per_cpu() {
    let _machine = share_machine();
    let dir = tempfile::tempdir().expect("tempdir");
    let allowed = crate::system::allowed_cpus();
    let opts = LoadOptions {
        default_cpus: allowed.clone(),
        temp_dir: dir.path().into(),
    };
    let reports = run("cpu", &opts, Duration::from_millis(100));
    assert_eq!(reports[0].intensity as usize, allowed.len());
    assert_eq!(reports[0].spec, "cpu");
    assert_eq!(
        CpuList::parse(&reports[0].cpus).expect("cpus").to_vec(),
        allowed
    );
}

#[test]
fn intensity_starts_that_many_workers_round_robin() {
    let _machine = share_machine();
    let dir = tempfile::tempdir().expect("tempdir");
    let allowed = crate::system::allowed_cpus();
    let opts = LoadOptions {
        default_cpus: allowed.clone(),
        temp_dir: dir.path().into(),
    };
    let reports = run("cpu:2+timers:1", &opts, Duration::from_millis(100));
    let used = |r: &LoadReport| CpuList::parse(&r.cpus).expect("cpus").to_vec();
    let expected: Vec<usize> = allowed.iter().copied().cycle().take(3).collect();
    let mut cpu_cpus: Vec<usize> = expected[..2].to_vec();
    cpu_cpus.sort_unstable();
    cpu_cpus.dedup();
    assert_eq!(used(&reports[0]), cpu_cpus);
    assert_eq!(used(&reports[1]), vec![expected[2]]);
    assert_eq!(reports[0].intensity, 2);
}

#[test]
fn mark_restarts_the_counted_window() {
    let _machine = share_machine();
    let dir = tempfile::tempdir().expect("tempdir");
    let specs = parse_profile("cpu").expect("profile");
    let running = start(&specs, &options(dir.path(), 7)).expect("start");
    std::thread::sleep(Duration::from_millis(400));
    let marked = Instant::now();
    running.mark();
    std::thread::sleep(Duration::from_millis(100));
    let r = running.stop().remove(0);
    let since_mark = marked.elapsed();
    assert!(r.work > 0.0, "{r:?}");
    // The 400 ms (at least) before the mark are not counted: the window is within the time
    // from the mark to the end of the stop, however long a busy machine made that.
    assert!(
        r.duration_ns <= since_mark.as_nanos() as u64,
        "{r:?} counted more than the {since_mark:?} since the mark"
    );
    assert!(r.duration_ns >= 100_000_000, "{r:?}");
}

#[test]
fn a_command_spec_for_options_that_take_the_command_alone() {
    let _machine = share_machine();
    let s = LoadSpec::command(" make -j4 ");
    assert_eq!(s, LoadSpec::parse("cmd:make -j4").expect("spec"));
    assert_eq!(s.to_string(), "cmd:make -j4");
    let o = LoadOptions::new(vec![1]);
    assert_eq!(o.default_cpus, vec![1]);
    assert_eq!(o.temp_dir, default_temp_dir());
}

#[test]
fn no_loads_is_an_empty_report() {
    let _machine = share_machine();
    let running = start(&[], &LoadOptions::default()).expect("start");
    assert!(running.process_groups().is_empty());
    assert!(running.stop().is_empty());
}

/// Whether a process of process group `group` runs the command `comm`.
fn group_runs(group: i32, comm: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .any(|stat| {
            let Some((name, rest)) = stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(") "))
            else {
                return false;
            };
            // After the command: state, ppid, pgrp.
            let pgrp = rest.split_whitespace().nth(2).and_then(|x| x.parse().ok());
            name == comm && pgrp == Some(group)
        })
}

#[test]
fn a_command_and_its_group_are_gone_after_stop() {
    let _machine = share_machine();
    let dir = tempfile::tempdir().expect("tempdir");
    let specs = parse_profile("cmd:sleep 100").expect("profile");
    let running = start(&specs, &options(dir.path(), 0)).expect("start");
    let groups = running.process_groups();
    assert_eq!(groups.len(), 1);
    let group = groups[0];
    assert!(group_alive(group));
    // Stopped once `sleep` runs in the group (before the shell has started it, a signal finds
    // a process still being set up), however late a busy machine starts it.
    let guard = Instant::now() + Duration::from_secs(300);
    while !group_runs(group, "sleep") {
        assert!(
            Instant::now() < guard,
            "hang guard: sleep did not start within 300 s (the machine may be overloaded, or it hung)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = Instant::now();
    let reports = running.stop();
    assert!(t.elapsed() < STOP_BOUND, "stop took {:?}", t.elapsed());
    assert!(!group_alive(group), "process group {group} survived stop");
    assert!(!Path::new(&format!("/proc/{group}")).exists());
    let r = &reports[0];
    assert_eq!(r.error, None, "{r:?}");
    assert_eq!(r.kind, "cmd");
    assert_eq!((r.work, r.unit.as_str(), r.per_s), (0.0, "", 0.0));
    assert!(
        r.detail
            .as_deref()
            .unwrap_or("")
            .starts_with("stopped with SIGINT"),
        "{r:?}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

#[test]
fn a_command_and_its_group_are_gone_after_drop() {
    let _machine = share_machine();
    let dir = tempfile::tempdir().expect("tempdir");
    let specs = parse_profile("cpu+cmd:sleep 100; sleep 100").expect("profile");
    let running = start(&specs, &options(dir.path(), 1)).expect("start");
    let group = running.process_groups()[0];
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    drop(running);
    assert!(t.elapsed() < STOP_BOUND, "drop took {:?}", t.elapsed());
    assert!(!group_alive(group), "process group {group} survived drop");
}

#[test]
fn a_command_that_fails_reports_its_status_and_message() {
    let _machine = share_machine();
    let dir = tempfile::tempdir().expect("tempdir");
    let reports = run(
        "cmd:echo out; echo 'no such widget' >&2; exit 3",
        &options(dir.path(), 2),
        RUN,
    );
    let error = reports[0].error.clone().unwrap_or_default();
    assert!(error.contains("exited with status 3"), "{error}");
    assert!(error.contains("no such widget"), "{error}");
    let reports = run("cmd:true", &options(dir.path(), 2), RUN);
    assert_eq!(reports[0].error, None);
    let detail = reports[0].detail.clone().unwrap_or_default();
    assert!(detail.contains("exited with status 0"), "{detail}");
}

#[test]
fn a_command_that_ignores_sigint_is_killed() {
    let _machine = share_machine();
    let dir = tempfile::tempdir().expect("tempdir");
    // Stopped once the shell ignores SIGINT (it says so with a file), however late a busy
    // machine starts it.
    let marks = tempfile::tempdir().expect("tempdir");
    let ready = marks.path().join("ready");
    let profile = format!("cmd:trap '' INT; : > {}; sleep 100 & wait", ready.display());
    let specs = parse_profile(&profile).expect("profile");
    let running = start(&specs, &options(dir.path(), 3)).expect("start");
    let guard = Instant::now() + Duration::from_secs(300);
    while !ready.exists() {
        assert!(
            Instant::now() < guard,
            "hang guard: the command did not start within 300 s (the machine may be overloaded, or it hung)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = Instant::now();
    let reports = running.stop();
    assert!(t.elapsed() < STOP_BOUND, "stop took {:?}", t.elapsed());
    let detail = reports[0].detail.clone().unwrap_or_default();
    assert!(detail.contains("SIGKILL"), "{detail}");
}

#[test]
fn stress_ng_reports_bogo_ops_or_asks_to_be_installed() {
    let _machine = share_machine();
    let dir = tempfile::tempdir().expect("tempdir");
    let specs = parse_profile("stress-ng:--cpu 1").expect("profile");
    if find_program("stress-ng", std::env::var_os("PATH").as_deref()).is_none() {
        let e = start(&specs, &options(dir.path(), 4))
            .err()
            .expect("an error");
        assert!(e.to_string().contains("apt-get install stress-ng"), "{e}");
        assert!(e.is_usage());
        skip("stress-ng is not installed; checked the error instead");
        return;
    }
    let reports = run(
        "stress-ng:--cpu 1",
        &options(dir.path(), 4),
        Duration::from_millis(800),
    );
    let r = &reports[0];
    assert_eq!(r.error, None, "{r:?}");
    assert_eq!(r.unit, "bogo ops", "{r:?}");
    assert!(r.work > 0.0 && r.per_s > 0.0, "{r:?}");
    assert!(r.detail.as_deref().unwrap_or("").contains("cpu "), "{r:?}");
    let reports = run("stress-ng:--bogus-option", &options(dir.path(), 4), RUN);
    assert!(reports[0].error.is_some(), "{:?}", reports[0]);
}

#[test]
fn a_missing_stress_ng_names_the_package() {
    let _machine = share_machine();
    assert_eq!(
        find_program("stress-ng", Some(std::ffi::OsStr::new(""))),
        None
    );
    let e = LoadError::StressNgMissing {
        spec: "stress-ng:--cpu 2".into(),
    };
    let text = e.to_string();
    assert!(text.contains("'stress-ng:--cpu 2'"));
    assert!(text.contains("apt-get install stress-ng"));
    assert!(find_program("sh", std::env::var_os("PATH").as_deref()).is_some());
}

#[test]
fn every_load_stops_in_bounded_time() {
    let _machine = share_machine();
    let dir = tempfile::tempdir().expect("tempdir");
    let allowed = crate::system::allowed_cpus();
    let opts = LoadOptions {
        default_cpus: allowed,
        temp_dir: dir.path().into(),
    };
    let reports = run(
        "cpu+memory+disk+net+compile+sched+timers+cmd:sleep 100",
        &opts,
        RUN,
    );
    for r in &reports {
        assert_eq!(r.error, None, "{r:?}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

#[test]
fn refused_starts_name_the_problem() {
    let _machine = share_machine();
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = options(dir.path(), 0);
    let cpu = crate::cpulist::MAX_CPU;
    let specs = parse_profile(&format!("cpu@{cpu}")).expect("profile");
    let e = start(&specs, &opts).err().expect("refused");
    assert!(matches!(e, LoadError::CpuUnavailable { .. }), "{e}");
    assert!(e
        .to_string()
        .contains(&format!("CPU {cpu} is not available")));
    assert!(e.is_usage());
    let missing = LoadOptions {
        temp_dir: dir.path().join("absent"),
        ..opts.clone()
    };
    for profile in ["disk", "cmd:true"] {
        let e = start(&parse_profile(profile).expect("profile"), &missing)
            .err()
            .expect("refused");
        assert!(matches!(e, LoadError::TempDir { .. }), "{e}");
        assert!(e.to_string().contains("absent"), "{e}");
        assert!(e.to_string().contains("ENOENT"), "{e}");
    }
}

#[test]
fn file_system_types_come_from_the_longest_mount() {
    let _machine = share_machine();
    let mounts =
        "/dev/vda / ext4 rw 0 0\ntmpfs /tmp tmpfs rw 0 0\n/dev/sdb /mnt/my\\040disk xfs rw 0 0\n";
    assert_eq!(
        fs_type_in(mounts, Path::new("/var/tmp")).as_deref(),
        Some("ext4")
    );
    assert_eq!(
        fs_type_in(mounts, Path::new("/tmp/x")).as_deref(),
        Some("tmpfs")
    );
    assert_eq!(
        fs_type_in(mounts, Path::new("/tmpx")).as_deref(),
        Some("ext4")
    );
    assert_eq!(
        fs_type_in(mounts, Path::new("/mnt/my disk/a")).as_deref(),
        Some("xfs")
    );
    assert_eq!(fs_type_in("", Path::new("/")), None);
}

#[test]
fn reports_serialize_to_json_and_back() {
    let _machine = share_machine();
    let r = LoadReport {
        spec: "disk:2@1".into(),
        kind: "disk".into(),
        intensity: 2,
        cpus: "1".into(),
        duration_ns: 1_000_000_000,
        work: 3.0 * (1 << 20) as f64,
        unit: "bytes".into(),
        per_s: 3.0 * (1 << 20) as f64,
        detail: Some("1 fsyncs (1.0/s)".into()),
        error: None,
    };
    let json = serde_json::to_string(&r).expect("json");
    let back: LoadReport = serde_json::from_str(&json).expect("back");
    assert_eq!(back, r);
}

/// Threads of the process, from `/proc/self/task`.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Waits up to 30 s for the thread count to come back to `expected` (a joined thread leaves
/// `/proc/self/task` a moment after `join` returns, later on a busy machine) and returns it.
fn settled(expected: usize) -> usize {
    let end = Instant::now() + Duration::from_secs(30);
    while threads() != expected && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    threads()
}

const FRESH: &str = "SANDGLASS_LOAD_TEST_FRESH_PROCESS";

#[test]
fn no_thread_outlives_the_loads() {
    let _machine = share_machine();
    // Other tests start threads at the same time, so the count is taken in a process that runs
    // only one test.
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "load::tests::thread_count_in_a_fresh_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FRESH, "1")
        .output()
        .expect("run the test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

#[test]
#[ignore = "run by no_thread_outlives_the_loads in a process of its own"]
fn thread_count_in_a_fresh_process() {
    let _machine = share_machine();
    if std::env::var_os(FRESH).is_none() {
        skip("counts threads only in a process of its own");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = LoadOptions {
        default_cpus: crate::system::allowed_cpus(),
        temp_dir: dir.path().into(),
    };
    let specs =
        parse_profile("cpu:2+memory:1+disk:1+net:2+compile:1+sched:2+timers:2+cmd:sleep 100")
            .expect("profile");
    let before = threads();
    let running = start(&specs, &opts).expect("start");
    // 2 + 1 + 1 + 4 + 1 + 4 + 2 workers and a supervisor.
    assert_eq!(threads(), before + 16);
    std::thread::sleep(Duration::from_millis(200));
    let reports = running.stop();
    assert!(reports.iter().all(|r| r.error.is_none()), "{reports:?}");
    assert_eq!(settled(before), before, "threads left after stop");

    let running = start(&specs, &opts).expect("start");
    assert!(threads() > before);
    std::thread::sleep(Duration::from_millis(100));
    drop(running);
    assert_eq!(settled(before), before, "threads left after drop");
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

#[test]
fn load_threads_run_at_sched_other_even_when_started_from_fifo() {
    let _machine = share_machine();
    use sandglass_sys::sched::{self, SchedAttr, Tid, SCHED_FIFO, SCHED_OTHER};
    if sandglass_sys::process::euid() != 0 {
        skip("needs root to start the loads from a SCHED_FIFO thread (CI runs as root)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = options(dir.path(), 0);
    std::thread::spawn(move || {
        let fifo = SchedAttr {
            policy: SCHED_FIFO,
            priority: 10,
            ..SchedAttr::default()
        };
        sched::set_attr(Tid::SELF, &fifo).expect("SCHED_FIFO");
        let specs = parse_profile("cpu+timers+cmd:sleep 100").expect("profile");
        let running = start(&specs, &opts).expect("start");
        let group = running.process_groups()[0];
        let load_threads: Vec<i32> = std::fs::read_dir("/proc/self/task")
            .expect("tasks")
            .flatten()
            .filter_map(|e| {
                let tid: i32 = e.file_name().to_str()?.parse().ok()?;
                let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
                comm.starts_with("load-").then_some(tid)
            })
            .collect();
        // Other tests' load threads are in the list too; every load thread is SCHED_OTHER.
        assert!(load_threads.len() >= 3, "{load_threads:?}");
        for tid in load_threads.into_iter().chain([group]) {
            let attr = sched::get_attr(Tid(tid)).expect("sched_getattr");
            assert_eq!((attr.policy, attr.nice), (SCHED_OTHER, 0), "task {tid}");
        }
        // The command inherits its supervisor's CPUs.
        assert_eq!(
            sched::get_affinity(Tid(group)).expect("affinity"),
            opts.default_cpus
        );
        running.stop();
    })
    .join()
    .expect("thread");
}

#[test]
fn start_errors_keep_their_wording() {
    let _machine = share_machine();
    let denied = || std::io::Error::from_raw_os_error(Errno::EACCES.0);
    let cases = [
        (
            LoadError::Start {
                spec: "net".into(),
                source: StartError::SetupTimeout { secs: 30 },
            }
            .to_string(),
            "load 'net' could not start: the loads were not set up within 30 s; use fewer or lighter loads",
        ),
        (
            LoadError::Start {
                spec: "disk".into(),
                source: ThreadError::CreateFile {
                    dir: "/data".into(),
                    source: denied(),
                }
                .into(),
            }
            .to_string(),
            "load 'disk' could not start: cannot create a file in /data: EACCES (Permission denied); give a writable directory",
        ),
        (
            ThreadError::Pin {
                cpus: vec![1, 2],
                source: Errno::EINVAL,
            }
            .to_string(),
            "cannot pin a load thread to CPUs [1, 2]: EINVAL (Invalid argument)",
        ),
        (
            ThreadError::Allocate { bytes: 16 << 20 }.to_string(),
            "cannot allocate a working set of 16 MiB",
        ),
        (
            ThreadError::Disk {
                call: "fsync",
                source: denied(),
            }
            .to_string(),
            "fsync failed: EACCES (Permission denied)",
        ),
        (
            StartError::Loopback {
                action: "cannot listen on 127.0.0.1".into(),
                source: denied(),
            }
            .to_string(),
            "cannot listen on 127.0.0.1: EACCES (Permission denied)",
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }
}
