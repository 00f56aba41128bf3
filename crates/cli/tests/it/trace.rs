//! `--trace` on the real kernel: the attribution of a competing thread, and tracing settings
//! left exactly as they were however a run ends.
//!
//! These need root and tracefs; without them they skip with a printed reason. They are
//! serialised by a lock because they measure the machine they run on.

use crate::common;
use common::{lock, skip, Guarded};

use assert_cmd::Command;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const TRACEFS: &str = "/sys/kernel/tracing";

/// Whether this process can create tracing instances (root, and tracefs mounted or mountable:
/// sandglass mounts it itself, but the test reads it before sandglass runs).
fn tracing_available() -> bool {
    if sandglass_sys::process::euid() != 0 {
        skip("needs root for tracefs and SCHED_FIFO (CI runs as root)");
        return false;
    }
    if !Path::new(TRACEFS).join("instances").is_dir() {
        let _ = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS])
            .status();
    }
    if !Path::new(TRACEFS)
        .join("events/sched/sched_switch")
        .is_dir()
    {
        skip("this kernel has no tracefs with sched_switch");
        return false;
    }
    true
}

/// Every global tracing setting a run could change, the list of instances, and tracefs mounts.
fn tracing_state() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
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
        "events/sched/sched_switch/enable",
        "events/irq/enable",
        "per_cpu/cpu0/buffer_size_kb",
    ] {
        m.insert(
            f.to_string(),
            std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| format!("unreadable: {e}")),
        );
    }
    let mut instances: Vec<String> = std::fs::read_dir(root.join("instances"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    instances.sort();
    m.insert("instances".into(), instances.join(","));
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let tracefs: Vec<&str> = mounts.lines().filter(|l| l.contains("tracefs")).collect();
    m.insert("mounts".into(), tracefs.join("\n"));
    m
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The competitor's time inside [from, to] (CLOCK_MONOTONIC ns), from its Hourglass trace:
/// `cpu`, every interval of continuous CPU time it recorded; `wall`, each burst from its first
/// interval's start to its last interval's end (intervals less than 10 ms apart are one burst),
/// which also holds the interrupts and the host's stolen time inside a burst that the thread
/// did not see as its own but during which the kernel had it on the CPU. Both clipped to the
/// window.
fn time_within(run: &Path, from: u64, to: u64) -> (u64, u64) {
    let zero = json(&run.join("manifest.json"))["clock"]["run_start_monotonic_ns"]
        .as_u64()
        .unwrap();
    let starts = common::column(run, &sandglass::store::table::tables::TRACE, "start_ns");
    let ends = common::column(run, &sandglass::store::table::tables::TRACE, "end_ns");
    let clip = |s: u64, e: u64| e.min(to).saturating_sub(s.max(from));
    let (mut cpu, mut wall) = (0, 0);
    let mut burst: Option<(u64, u64)> = None;
    for (&s, &e) in starts.iter().zip(&ends) {
        let (s, e) = (zero + s as u64, zero + e as u64);
        cpu += clip(s, e);
        burst = match burst {
            Some((bs, be)) if s < be + 10_000_000 => Some((bs, be.max(e))),
            Some((bs, be)) => {
                wall += clip(bs, be);
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((bs, be)) = burst {
        wall += clip(bs, be);
    }
    (cpu, wall)
}

/// A SCHED_FIFO 95 thread that runs 2 ms every 100 ms on the measured CPU is the top cause of
/// a SCHED_FIFO 50 timer thread's delays, named comm:pid. It is charged from each wakeup it
/// delayed to the switch-in, never before the wakeup: of each 2 ms burst, all but the time
/// from its start to the first release it delays (less than the 1 ms interval).
#[test]
fn traced_timer_names_the_competing_thread() {
    if !tracing_available() {
        return;
    }
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    let competitor_dir = tmp.path().join("competitor");
    let Some(mut child) = competitor(&competitor_dir, 20) else {
        return;
    };
    let tid = burst_thread(&mut child);
    let timer_dir = tmp.path().join("timer");
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args([
            "timer",
            "-c",
            "1",
            "-P",
            "f:50",
            "-d",
            "10s",
            "--trace",
            "--json",
            "--shared-cpus",
            "-o",
        ])
        .arg(&timer_dir)
        .guarded_output();
    let _ = child.wait();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let k = &v["causes"]["kernel"];
    // The competitor is the first thread named. Only the host's late timer interrupts (a real
    // cause on this virtual machine, reported as such) may rank above it.
    let causes = k["causes"].as_array().unwrap();
    let first_thread = causes
        .iter()
        .position(|c| c["kind"] == "thread")
        .unwrap_or_else(|| panic!("no thread named: {k}"));
    assert!(
        causes[..first_thread].iter().all(|c| c["kind"] == "timer"),
        "only late timer interrupts may rank above the competitor: {k}"
    );
    let top = &causes[first_thread];
    assert_eq!(top["name"], format!("sg-hourglass-0:{tid}"), "{k}");
    assert_eq!(top["cpu"], 1);
    // The measurement's window on CLOCK_MONOTONIC.
    let zero = json(&timer_dir.join("manifest.json"))["clock"]["run_start_monotonic_ns"]
        .as_u64()
        .unwrap();
    let elapsed = v["elapsed_ns"].as_u64().unwrap();
    let (used, on_cpu) = time_within(&competitor_dir, zero, zero + elapsed);
    let stolen = top["stolen_ns"].as_u64().unwrap();
    eprintln!(
        "competitor used {used} ns during the run ({on_cpu} ns from the start to the end of its bursts); attributed {stolen} ns over {} delays; {} events, {} lost, clock offset {} ns",
        top["count"], k["events"], k["lost_events"], k["clock_offset_ns"]
    );
    assert!(used > 150_000_000, "the competitor hardly ran: {used} ns");
    let bursts = top["count"].as_u64().unwrap();
    assert!(
        stolen <= on_cpu + on_cpu / 50,
        "stolen {stolen} ns against {on_cpu} ns on the CPU"
    );
    assert!(
        stolen + bursts * 1_000_000 >= used - used / 20,
        "stolen {stolen} ns over {bursts} delays against {used} ns used"
    );
    assert_eq!(k["lost_events"], 0, "{k}");
    // The trace and the run share CLOCK_MONOTONIC: a marker written between two clock reads
    // came back between them (allowing the write's own duration).
    let offset = k["clock_offset_ns"].as_i64().unwrap();
    let uncertainty = k["clock_uncertainty_ns"].as_u64().unwrap() as i64;
    assert!(offset.abs() <= uncertainty + 1_000, "{k}");
    // The per-spike attribution is in the run directory, and every file checks out.
    let csv = std::fs::read_to_string(timer_dir.join("attribution.csv")).unwrap();
    assert!(csv.contains(&format!("sg-hourglass-0:{tid}")));
    let m = json(&timer_dir.join("manifest.json"));
    for f in m["files"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        let data = std::fs::read(timer_dir.join(name)).unwrap();
        assert_eq!(
            f["sha256"].as_str().unwrap(),
            sandglass::store::sha256_hex(&data),
            "{name}"
        );
    }
}

fn timer_cmd(dir: &Path, duration: &str) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_sandglass"));
    c.args(["timer", "-c", "1", "-d", duration, "--trace", "-o"])
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    c
}

fn assert_same(before: &BTreeMap<String, String>, how: &str) {
    let after = tracing_state();
    for (k, v) in before {
        assert_eq!(Some(v), after.get(k), "{k} changed by a run that {how}");
    }
    assert!(
        !after["instances"].contains("sandglass-"),
        "an instance was left by a run that {how}: {}",
        after["instances"]
    );
}

/// Issue acceptance: the tracing settings are the same before and after a run that ends
/// normally, one ended by SIGINT, and one that fails with tracing under way; and a run removes
/// the instance a killed run left.
#[test]
fn tracing_settings_are_restored_however_a_run_ends() {
    if !tracing_available() {
        return;
    }
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    let before = tracing_state();

    let out = timer_cmd(&tmp.path().join("normal"), "1s")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_same(&before, "ended normally");

    let mut child = timer_cmd(&tmp.path().join("sigint"), "20s")
        .spawn()
        .unwrap();
    // Into the measurement (its manifest says `running`), however long a busy machine takes
    // to start it.
    let manifest = tmp.path().join("sigint/manifest.json");
    common::wait_until("the run's running manifest", || {
        assert!(child.try_wait().unwrap().is_none(), "the run ended");
        std::fs::read_to_string(&manifest).is_ok_and(|m| m.contains("\"running\""))
    });
    std::thread::sleep(Duration::from_millis(500));
    sandglass_sys::signal::send_to_process(child.id() as i32, sandglass_sys::signal::SIGINT)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = json(&tmp.path().join("sigint/manifest.json"));
    assert_eq!(m["state"], "interrupted", "{m}");
    assert_same(&before, "was ended by SIGINT");

    let out = timer_cmd(&tmp.path().join("fails"), "2s")
        .env("SANDGLASS_FAULT", "fail-after-trace-start")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("fail-after-trace-start"), "{err}");
    assert_same(&before, "failed with tracing under way");

    // A killed run's instance: a name whose process does not exist.
    let stale = (4_000_000u32..4_100_000)
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .unwrap();
    let stale_dir = PathBuf::from(TRACEFS).join(format!("instances/sandglass-{stale}-12345"));
    std::fs::create_dir(&stale_dir).unwrap();
    let out = timer_cmd(&tmp.path().join("after-kill"), "1s")
        .output()
        .unwrap();
    let left = stale_dir.exists();
    if left {
        let _ = std::fs::remove_dir(&stale_dir);
    }
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !left,
        "the stale instance {} was not removed",
        stale_dir.display()
    );
    assert_same(&before, "followed a killed one");

    // A traced run killed with SIGKILL leaves its instance recording, buffers pinned; the next
    // start of any measuring command, untraced, removes it. So does a name whose pid lives on
    // with another start time (a reused pid); a living sandglass's instance stays.
    let instances = PathBuf::from(TRACEFS).join("instances");
    let mut child = timer_cmd(&tmp.path().join("killed"), "30s")
        .spawn()
        .unwrap();
    let prefix = format!("sandglass-{}-", child.id());
    let deadline = std::time::Instant::now() + common::WAIT_GUARD;
    let killed = loop {
        let found = std::fs::read_dir(&instances)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with(&prefix));
        if let Some(n) = found {
            break n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            common::hang_guard(&format!("an instance {prefix}*"), common::WAIT_GUARD)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap();
    let _ = child.wait();
    assert!(
        instances.join(&killed).is_dir(),
        "{killed} went with its run"
    );
    let me = std::process::id();
    let reused = instances.join(format!("sandglass-{me}-1"));
    std::fs::create_dir(&reused).unwrap();
    let start = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
    let start = start
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap();
    let living = instances.join(format!("sandglass-{me}-{start}"));
    std::fs::create_dir(&living).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandglass"))
        .args(["timer", "-c", "0", "-d", "200ms", "-q", "-o"])
        .arg(tmp.path().join("untraced"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let kept = living.is_dir();
    let _ = std::fs::remove_dir(&living);
    let _ = std::fs::remove_dir(&reused);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        !instances.join(&killed).exists(),
        "the killed run's instance {killed} survived the next start: {err}"
    );
    assert!(
        err.contains(&format!("removed the tracing instance {killed}")),
        "{err}"
    );
    assert!(err.contains(&format!("sandglass-{me}-1")), "{err}");
    assert!(kept, "a living sandglass's instance was removed: {err}");
    assert_same(&before, "followed a killed traced one");
}

/// Starts the competitor of these tests: a SCHED_FIFO 95 Hourglass thread on CPU 1 that runs
/// 2 ms every 100 ms for `secs` seconds; `None` (after printing why) without taskset.
fn competitor(dir: &Path, secs: u32) -> Option<std::process::Child> {
    burst(dir, secs, "RTHIGH")
}

/// The id of the measuring thread (sg-hourglass-0) of a [`burst`] or [`competitor`], once it
/// exists: from then on it runs its bursts.
fn burst_thread(child: &mut std::process::Child) -> String {
    common::wait_for_thread(child, "sg-hourglass-0")
}

/// An Hourglass thread of priority `priority` on CPU 1 that runs 2 ms every 100 ms for `secs`
/// seconds; `None` (after printing why) without taskset.
fn burst(dir: &Path, secs: u32, priority: &str) -> Option<std::process::Child> {
    let spawned = std::process::Command::new("taskset")
        .args([
            "-c",
            "1",
            env!("CARGO_BIN_EXE_sandglass"),
            "hourglass",
            "-n",
            "1",
        ])
        .args([
            "-d",
            &format!("{secs}s"),
            "-t",
            "0",
            "-p",
            priority,
            "-w",
            "PERIODIC",
        ])
        .args(["2ms", "100ms", "-i", "HR", "-o"])
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        Ok(c) => Some(c),
        Err(_) => {
            skip("taskset (util-linux) is not installed");
            None
        }
    }
}

/// `--stop-above` ends the run at the first delay above it, keeps what was measured and says
/// why; `--on-threshold shell:CMD` with `continue` runs the command and measures to the end.
#[test]
fn stop_above_ends_the_run_and_actions_run() {
    if !tracing_available() {
        return;
    }
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    let Some(mut child) = competitor(&tmp.path().join("competitor"), 12) else {
        return;
    };
    burst_thread(&mut child);
    let dir = tmp.path().join("stop");
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args([
            "timer",
            "-c",
            "1",
            "-P",
            "f:50",
            "-d",
            "8s",
            "--trace",
            "--shared-cpus",
        ])
        .args([
            "--stop-above",
            "500us",
            "--on-threshold",
            "mark",
            "--json",
            "-o",
        ])
        .arg(&dir)
        .guarded_output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "interrupted", "{}", v["end_detail"]);
    let detail = v["end_detail"].as_str().unwrap();
    assert!(detail.contains("--stop-above 500"), "{detail}");
    // The competitor delays the timer thread by about 2 ms every 100 ms: the run stops within
    // a fraction of a second, and the delay that stopped it is in what it kept.
    assert!(v["elapsed_ns"].as_u64().unwrap() < 3_000_000_000, "{v}");
    assert!(v["cpus"][0]["lateness_ns"]["max"].as_u64().unwrap() > 500_000);
    assert!(v["causes"]["kernel"]["windows"].as_u64().unwrap() >= 1);

    let dir = tmp.path().join("continue");
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args([
            "timer",
            "-c",
            "1",
            "-P",
            "f:50",
            "-d",
            "2s",
            "--stop-above",
            "500us",
            "--shared-cpus",
        ])
        .args([
            "--on-threshold",
            "shell:echo $SANDGLASS_DELAY_NS > \"$SANDGLASS_RUN_DIR/hit\"",
            "--on-threshold",
            "continue",
            "--json",
            "-o",
        ])
        .arg(&dir)
        .guarded_output();
    let _ = child.wait();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "completed", "{}", v["end_detail"]);
    let hit = std::fs::read_to_string(dir.join("hit")).unwrap();
    assert!(hit.trim().parse::<u64>().unwrap() > 500_000, "{hit}");
}

/// `hourglass --trace` attributes the gaps of a CPU-bound thread that a periodic real-time
/// thread preempts: every gap after a preemption is a window, and the summary says so.
#[test]
fn hourglass_trace_attributes_preemption_gaps() {
    if !tracing_available() {
        return;
    }
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("hg");
    let before = tracing_state();
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args([
            "hourglass",
            "-n",
            "2",
            "-d",
            "2s",
            "-t",
            "0",
            "-p",
            "RTHIGH",
        ])
        .args([
            "-w", "PERIODIC", "2ms", "10ms", "-t", "1", "-w", "CPU", "--trace", "-o",
        ])
        .arg(&dir)
        .guarded_output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("# traced: "), "{stdout}");
    let summary = json(&dir.join("summary.json"));
    let k = &summary["causes"]["kernel"];
    // The CPU thread is preempted about 200 times by the periodic thread.
    assert!(k["windows"].as_u64().unwrap() >= 150, "{k}");
    assert!(k["events"].as_u64().unwrap() > 0, "{k}");
    assert!(dir.join("attribution.csv").exists());
    assert_same(&before, "ran hourglass --trace");
}

/// A tracing instance of the test's own, on CPU 1, read as the kernel's text: the independent
/// record the wakeup path is checked against. Removed when dropped.
struct Independent {
    dir: PathBuf,
}

impl Independent {
    fn start(tag: &str) -> Independent {
        let dir =
            PathBuf::from(TRACEFS).join(format!("instances/sgcheck-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).unwrap();
        let set = |f: &str, v: &str| {
            std::fs::write(dir.join(f), v).unwrap_or_else(|e| panic!("{f} <- {v}: {e}"))
        };
        set("tracing_on", "0");
        set("trace_clock", "mono");
        set("tracing_cpumask", "2");
        set("buffer_size_kb", "32768");
        for e in [
            "sched/sched_switch",
            "sched/sched_wakeup",
            "irq_vectors/local_timer_entry",
            "timer/hrtimer_start",
        ] {
            if dir.join("events").join(e).is_dir() {
                set(&format!("events/{e}/enable"), "1");
            }
        }
        set("tracing_on", "1");
        Independent { dir }
    }

    /// The recorded events, after stopping: (CLOCK_MONOTONIC ns, event name, its arguments).
    /// The text is kept in `keep` for a failed attempt's inspection.
    fn stop_and_read(&self, keep: &Path) -> Vec<(u64, String, String)> {
        std::fs::write(self.dir.join("tracing_on"), "0").unwrap();
        let text = std::fs::read_to_string(self.dir.join("trace")).unwrap();
        std::fs::write(keep, &text).unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                // "  comm-pid  [001] d.h1.  1234.567890: local_timer_entry: vector=236"
                let (head, rest) = l.split_once(": ")?;
                let ts = head.split_whitespace().last()?;
                let (sec, usec) = ts.split_once('.')?;
                let ns =
                    sec.parse::<u64>().ok()? * 1_000_000_000 + usec.parse::<u64>().ok()? * 1_000;
                let (name, args) = rest.split_once(": ").unwrap_or((rest, ""));
                // The task in whose context the event came, as one more argument: "comm-pid"
                // before the CPU field (a command name may hold blanks and dashes).
                let task = head.split_once(" [").map_or("", |t| t.0).trim();
                let pid = task.rsplit_once('-').map_or("", |t| t.1);
                Some((ns, name.to_string(), format!("{args} task_pid={pid}")))
            })
            .collect()
    }
}

impl Drop for Independent {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("tracing_on"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `key=value` in a text event's arguments.
fn arg<'a>(args: &'a str, key: &str) -> Option<&'a str> {
    args.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// One attributed delay of `attribution.csv`: its release and read (absolute), its path, and
/// its shares (name, why, ns).
struct Delay {
    start: u64,
    end: u64,
    irq: Option<u64>,
    wakeup: Option<u64>,
    switch: Option<u64>,
    shares: Vec<(String, String, u64)>,
}

fn delays(run: &Path) -> Vec<Delay> {
    let map = sandglass_report::export::perfetto::clock_map(
        &sandglass::store::RunReader::open(run).unwrap(),
    )
    .unwrap();
    let text = std::fs::read_to_string(run.join("attribution.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("cpu,start_ns,end_ns,from_ns,kind,name,ns,why,policy,irq_ns,wakeup_ns,switch_ns")
    );
    let mut out: Vec<Delay> = Vec::new();
    for l in lines {
        // Names are quoted and may hold commas: split the quoted fields out first.
        let q: Vec<&str> = l.split('"').collect();
        let (head, name, mid, tail) = (q[0], q[1], q[2], q[q.len() - 1]);
        let h: Vec<&str> = head.split(',').collect();
        let m: Vec<&str> = mid.split(',').collect();
        let t: Vec<&str> = tail.split(',').collect();
        let abs = |s: &str| {
            s.parse::<i64>()
                .ok()
                .map(|v| map.run_to_monotonic_ns(v) as u64)
        };
        let start = abs(h[1]).unwrap();
        let share = (name.to_string(), m[2].to_string(), m[1].parse().unwrap());
        match out.last_mut() {
            Some(d) if d.start == start => d.shares.push(share),
            _ => out.push(Delay {
                start,
                end: abs(h[2]).unwrap(),
                irq: abs(t[1]),
                wakeup: abs(t[2]),
                switch: abs(t[3]),
                shares: vec![share],
            }),
        }
    }
    out
}

/// One event of the independent record: the times the two instances gave it (the one enabled
/// before sandglass's, the one after), its name and its arguments.
type Recorded = (u64, String, String, u64);

/// A wakeup's path in the independent record: timer interrupt entry, wakeup, switch-in (each
/// when it came before the thread read the clock), as the first instance timed them, and the
/// task switched out for it; then the same three as the second instance timed them.
type RecordPath = (
    u64,
    Option<u64>,
    Option<u64>,
    String,
    (u64, Option<u64>, Option<u64>),
);

/// The independent record's timer interrupt, wakeup and switch-in of the release at `release`
/// of thread `tid` that it read at `read`, and the task switched out for it: the first wakeup
/// of the thread from the release on, the last timer interrupt entry before it, and the first
/// switch to the thread after it (none when the thread was still current when its timer
/// woke it: it read the clock before any switch).
fn independent_path(events: &[Recorded], tid: &str, release: u64, read: u64) -> Option<RecordPath> {
    let from = events.partition_point(|e| e.0 + 2_000 < release);
    let woken = events[from..]
        .iter()
        .position(|e| e.1 == "sched_wakeup" && arg(&e.2, "pid") == Some(tid))?
        + from;
    let irq = events[..woken]
        .iter()
        .rposition(|e| e.1 == "local_timer_entry")?;
    let on = events[woken..]
        .iter()
        .position(|e| e.1 == "sched_switch" && arg(&e.2, "next_pid") == Some(tid))
        .map(|i| i + woken)
        .filter(|&i| events[i].0 <= read + 2_000);
    let prev = on
        .and_then(|i| arg(&events[i].2, "prev_comm"))
        .unwrap_or("")
        .to_string();
    let woke = (events[woken].0 <= read + 2_000).then_some(woken);
    Some((
        events[irq].0,
        woke.map(|i| events[i].0),
        on.map(|i| events[i].0),
        prev,
        (
            events[irq].3,
            woke.map(|i| events[i].3),
            on.map(|i| events[i].3),
        ),
    ))
}

/// The events both instances recorded, each with its two times. The second instance starts
/// later: its events are the first one's from some point on. A task's state may change
/// between the two copies of a switch (an exiting task is a zombie in one and dead in the
/// next), so `prev_state` is left out of the comparison. The kernel writes an event into one
/// instance, then the next; an interrupt that comes in between (after a host stop, the timer
/// interrupt that was due) has its events written into both before the second copy, so the
/// two orders can differ: each event of the second is looked for by its time in the first.
/// An event of the second that is not found has no bracket and is left out; a few in a
/// thousand at most.
fn bracket(first: Vec<(u64, String, String)>, second: Vec<(u64, String, String)>) -> Vec<Recorded> {
    let args = |a: &str| -> Vec<String> {
        a.split_whitespace()
            .filter(|kv| !kv.starts_with("prev_state="))
            .map(str::to_string)
            .collect()
    };
    let same = |a: &(u64, String, String), b: &(u64, String, String)| {
        a.1 == b.1 && args(&a.2) == args(&b.2) && b.0 + 2_000 >= a.0 && b.0 <= a.0 + 100_000_000
    };
    let k = (0..first.len())
        .find(|&k| {
            second.len() >= 8
                && first.len() >= k + 8
                && (0..8).all(|i| same(&first[k + i], &second[i]))
        })
        .expect("the second instance's events are not the first one's");
    // The first instance is in time order: each event of the second is matched with the
    // nearest unused copy in the first at most 2 µs after it and 100 ms before.
    let mut used = vec![false; first.len()];
    let mut out = Vec::with_capacity(second.len());
    let mut unmatched = Vec::new();
    for b in &second {
        let hi = first.partition_point(|a| a.0 <= b.0 + 2_000);
        let lo = first.partition_point(|a| a.0 + 100_000_000 < b.0).max(k);
        match (lo..hi).rev().find(|&j| !used[j] && same(&first[j], b)) {
            Some(j) => {
                used[j] = true;
                let a = &first[j];
                out.push((a.0, a.1.clone(), a.2.clone(), b.0));
            }
            None => unmatched.push(b.clone()),
        }
    }
    assert!(
        unmatched.len() <= 3 + second.len() / 1000,
        "{} of the second instance's {} events are not in the first: {:?}",
        unmatched.len(),
        second.len(),
        &unmatched[..unmatched.len().min(5)]
    );
    out.sort_by_key(|r| r.0);
    out
}

/// Runs `timer -c 1 -d 8s --trace` with `extra` arguments between two independent records:
/// one enabled before sandglass's tracing instance, one after. The kernel writes each event
/// into the instances in the order they were enabled, reading the clock for each copy, so
/// sandglass's time of an event lies between the two records' (the host can stop this
/// virtual CPU between two copies: two text instances of the same events differ by up to 20
/// µs a few times in ten thousand events, the later one always later). Returns the run
/// directory, the timer thread's id, its delays and the record.
fn traced_timer(dir: &Path, extra: &[&str]) -> (String, Vec<Delay>, Vec<Recorded>) {
    use std::io::{BufRead, Read};
    let first = Independent::start("a");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sandglass"))
        .args(["timer", "-c", "1", "-d", "8s", "--trace", "--json"])
        // The burst beside it is an Hourglass run on the same CPU, holding its CPU lock.
        .args(["--shared-cpus"])
        .args(extra)
        .arg("-o")
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reading = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let lines = std::thread::spawn(move || {
        let mut all = String::new();
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("tracing kernel events on CPU") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let second = rx
        .recv_timeout(common::WAIT_GUARD)
        .ok()
        .map(|_| Independent::start("b"));
    let deadline = Instant::now() + common::COMMAND_GUARD;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{}",
                common::hang_guard("the traced run's end", common::COMMAND_GUARD)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = reading.join().unwrap();
    let stderr = lines.join().unwrap();
    assert!(
        second.is_some(),
        "sandglass did not start tracing: {stderr}"
    );
    let second = second.unwrap_or_else(|| panic!("sandglass did not start tracing: {stderr}"));
    // The second stops first: every event it holds is then in the first as well (the kernel
    // writes the first's copy before the second's).
    let later = second.stop_and_read(&dir.with_extension("record-b.txt"));
    let events = bracket(
        first.stop_and_read(&dir.with_extension("record-a.txt")),
        later,
    );
    assert_eq!(status.code(), Some(0), "{stderr}");
    let out = std::process::Output {
        status,
        stdout,
        stderr: Vec::new(),
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tid = v["cpus"][0]["tid"].as_i64().unwrap().to_string();
    let lat = &v["causes"]["kernel"]["latency"][0];
    assert_eq!(lat["cpu"], 1, "{v}");
    assert!(lat["activations"].as_u64().unwrap() > 7_000, "{lat}");
    assert!(lat["irq_ns"]["p50"].as_u64().is_some(), "{lat}");
    assert!(lat["thread_ns"]["p50"].as_u64().is_some(), "{lat}");
    (tid, delays(dir), events)
}

/// How far before a release the record must reach for its path to be found (its timer was
/// armed by then, and an interrupt that delayed it had begun).
const MATCH_WINDOW_NS: u64 = 50_000_000;

/// Checks every attributed delay's path against the independent record: each time within
/// 5 µs of the span the two instances give it; returns each delay with the record's path.
fn check_paths<'a>(
    tid: &str,
    delays: &'a [Delay],
    events: &[Recorded],
) -> Vec<(&'a Delay, RecordPath)> {
    assert!(!delays.is_empty(), "no delay was attributed");
    let near = |a: Option<u64>, lo: Option<u64>, hi: Option<u64>| match (a, lo, hi) {
        (Some(a), Some(lo), Some(hi)) => a + 5_000 >= lo && a <= hi + 5_000,
        (None, None, _) => true,
        _ => false,
    };
    let mut out = Vec::new();
    // The second instance starts a few milliseconds after sandglass's: the record covers the
    // run from there.
    let covered = events.first().map_or(u64::MAX, |e| e.0 + MATCH_WINDOW_NS);
    for d in delays.iter().filter(|d| d.start >= covered) {
        let p = independent_path(events, tid, d.start, d.end);
        let from = events.partition_point(|e| e.0 + 50_000 < d.start);
        let to = events.partition_point(|e| e.0 <= d.end + 5_000);
        let around: Vec<String> = events[from..to]
            .iter()
            .map(|e| format!("{}/{} {} {}", e.0, e.3, e.1, e.2))
            .collect();
        let at = format!(
            "delay at {} ({} ns): sandglass {:?}/{:?}/{:?}, record {:?}; the record around it:\n{}",
            d.start,
            d.end - d.start,
            d.irq,
            d.wakeup,
            d.switch,
            p,
            around.join("\n")
        );
        // The thread armed its timer for the release sandglass computed: the nearest expiry
        // of a sleeping timer (hrtimer_wakeup) the thread itself armed lies within 1 µs of it
        // (another task's sleep, such as the burst's, may end at any time near it). Regression: a
        // clock pair read across a stall of the virtual CPU armed ten timers up to 55 µs
        // away from their releases.
        let armed_from = events.partition_point(|e| e.0 + 5_000_000 < d.start);
        if let Some(armed) = events[armed_from..]
            .iter()
            .take_while(|e| e.0 <= d.end)
            .filter(|e| {
                e.1 == "hrtimer_start"
                    && arg(&e.2, "function") == Some("hrtimer_wakeup")
                    && arg(&e.2, "task_pid") == Some(tid)
            })
            .filter_map(|e| arg(&e.2, "softexpires")?.parse::<u64>().ok())
            .min_by_key(|x| x.abs_diff(d.start))
            .filter(|x| x.abs_diff(d.start) < 500_000)
        {
            assert!(
                armed.abs_diff(d.start) <= 1_000,
                "armed for {armed}, {} ns from the release: {at}",
                armed as i64 - d.start as i64
            );
        }
        // A release the thread did not sleep for (the previous one ran past it) has no
        // wakeup of its own before the thread read the clock.
        let Some(p) = p.filter(|p| p.1.is_some()) else {
            assert_eq!(d.wakeup, None, "{at}");
            continue;
        };
        let hi = p.4;
        assert!(near(d.irq, Some(p.0), Some(hi.0)), "timer interrupt: {at}");
        assert!(near(d.wakeup, p.1, hi.1), "wakeup: {at}");
        assert!(near(d.switch, p.2, hi.2), "switch-in: {at}");
        out.push((d, p));
    }
    assert!(
        !out.is_empty(),
        "no attributed delay came after the record began"
    );
    out
}

/// The kernel slices of `report RUN --perfetto` (the run's own `kernel-*.parquet`) line up
/// with the attribution: for every delay with a switch-in, the timer thread's slice on the
/// CPU's tasks track starts at the switch-in within 1 µs, and the slice before it ends there;
/// `--largest 3` keeps the largest delay's slices in a smaller file.
fn check_perfetto(run: &Path, tid: &str, delays: &[Delay]) {
    let export = |file: &Path, extra: &[&str]| {
        let out = Command::cargo_bin("sandglass")
            .unwrap()
            .arg("report")
            .arg(run)
            .args(extra)
            .arg("--perfetto")
            .arg(file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
    };
    let file = run.with_extension("perfetto.json");
    export(&file, &[]);
    let v = json(&file);
    let ns = |e: &serde_json::Value, k: &str| (e[k].as_f64().unwrap() * 1_000.0).round() as u64;
    // CPU 1's tasks track of the kernel process (pid 3): tid 1 × 3 + 0.
    let tasks: Vec<(u64, u64, String)> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pid"] == 3 && e["tid"] == 3 && e["ph"] == "X")
        .map(|e| {
            (
                ns(e, "ts"),
                ns(e, "ts") + ns(e, "dur"),
                e["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(tasks.len() > 1_000, "{} task slices on CPU 1", tasks.len());
    let me = format!("sg-timer-0:{tid}");
    let mut lined = 0;
    for d in delays {
        let Some(sw) = d.switch else { continue };
        let i = tasks
            .iter()
            .position(|t| t.2 == me && t.0.abs_diff(sw) <= 1_000)
            .unwrap_or_else(|| {
                panic!(
                    "no slice of {me} starts at the switch-in {sw} of the delay at {}",
                    d.start
                )
            });
        let before = &tasks[i - 1];
        assert!(
            before.1.abs_diff(sw) <= 1_000,
            "{before:?} does not end at the switch-in {sw}"
        );
        lined += 1;
    }
    assert!(lined > 0, "no delay had a switch-in");
    let small = run.with_extension("largest.json");
    export(&small, &["--largest", "3"]);
    let largest = delays.iter().max_by_key(|d| d.end - d.start).unwrap();
    let w = json(&small);
    let kept = w["traceEvents"].as_array().unwrap();
    assert!(kept.len() * 10 < v["traceEvents"].as_array().unwrap().len());
    assert!(
        kept.iter().any(|e| e["pid"] == 3
            && e["ph"] == "X"
            && ns(e, "ts") <= largest.end
            && ns(e, "ts") + ns(e, "dur") >= largest.start),
        "--largest 3 has no kernel slice in the largest delay"
    );
    eprintln!("{lined} delays line up with the Perfetto export's kernel slices");
}

/// Issue acceptance: with a SCHED_OTHER spinner on the measured CPU, every late wakeup's timer
/// interrupt, wakeup and switch-in agree with an independent record of the CPU within 5 µs,
/// and the spinner is never charged time before the wakeup. Every wakeup at least 20 µs late
/// is explained, so that the check does not wait for the host to deliver a timer late.
#[test]
fn wakeup_path_matches_an_independent_record_beside_a_spinner() {
    if !tracing_available() {
        return;
    }
    let _g = lock();
    beside_a_spinner();
}

fn beside_a_spinner() {
    let tmp = common::KeptOnFailure::new();
    let (tid, delays, events) = traced_timer(
        &tmp.path().join("spinner"),
        &["--load", "cpu:1@1", "--explain-above", "20us"],
    );
    assert!(
        events
            .iter()
            .any(|e| e.1 == "sched_switch" && arg(&e.2, "next_comm") == Some("load-cpu-0")),
        "the spinner never ran on CPU 1"
    );
    let checked = check_paths(&tid, &delays, &events);
    check_perfetto(&tmp.path().join("spinner"), &tid, &delays);
    for (d, p) in &checked {
        for (name, _, ns) in &d.shares {
            if name.starts_with("load-cpu-0:") {
                // Its time must fit between the record's wakeup and switch-in: from the first
                // record's wakeup to the second record's switch-in (a host stop between two
                // copies of the switch moves sandglass's copy up to the second's).
                let waited = (p.4)
                    .2
                    .unwrap_or(d.end)
                    .saturating_sub(p.1.unwrap_or(d.start));
                assert!(
                    *ns <= waited + 5_000,
                    "{name} charged {ns} ns, but the thread waited {waited} ns after its wakeup",
                );
            }
        }
    }
    eprintln!(
        "{} delays checked against the independent record",
        checked.len()
    );
}

/// Issue acceptance: with a SCHED_FIFO 99 thread that runs 2 ms every 100 ms on the measured
/// CPU, the paths agree with the independent record within 5 µs, and every delay the burst
/// held after the wakeup names it first (after the host's late timer, where that took longer).
#[test]
fn wakeup_path_names_a_fifo_99_burst() {
    if !tracing_available() {
        return;
    }
    let _g = lock();
    beside_a_burst();
}

fn beside_a_burst() {
    let tmp = common::KeptOnFailure::new();
    let Some(mut child) = burst(&tmp.path().join("burst"), 16, "f:99") else {
        return;
    };
    burst_thread(&mut child);
    let (tid, delays, events) = traced_timer(&tmp.path().join("timer"), &[]);
    let _ = child.wait();
    let checked = check_paths(&tid, &delays, &events);
    let mut held = 0;
    for (d, p) in &checked {
        let waited = p.2.unwrap_or(0).saturating_sub(p.1.unwrap_or(0));
        if p.3 == "sg-hourglass-0" && waited > 100_000 {
            held += 1;
            // The burst is named, as preemption by higher priority, and no other task took
            // more of the delay; only a late timer (the host's) may come before it.
            let burst = d
                .shares
                .iter()
                .position(|(name, _, _)| name.starts_with("sg-hourglass-0:"));
            assert!(
                burst.is_some_and(|i| d.shares[i].1 == "higher or equal priority"
                    && d.shares[..i]
                        .iter()
                        .all(|(name, why, _)| why.is_empty()
                            && name.starts_with("timer interrupt late"))),
                "delay at {}: {:?}",
                d.start,
                d.shares
            );
        }
    }
    eprintln!("{} delays checked, {held} held by the burst", checked.len());
    assert!(held >= 30, "only {held} delays were held by the burst");
}

/// The fields of one `attribution.csv` line (names are quoted, their quotes doubled).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    out.push(field);
    out
}

/// A traced timer run beside `--load disk`: for every delay the sampler explains, the kernel's
/// attribution of the same delay (from `attribution.csv`) decides. Where a task took most of
/// it, no sampler sentence says the wakeup or its timer interrupt came late, and the sampler's
/// wait is labelled as its window's; every delay the trace attributed says what the trace
/// found, first.
#[test]
fn a_traced_timer_beside_a_disk_load_never_contradicts_its_trace() {
    if !tracing_available() {
        return;
    }
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("timer");
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args([
            "timer",
            "-c",
            "1",
            "-d",
            "6s",
            "--trace",
            "--load",
            "disk",
            "--settle",
            "1s",
            "--explain-above",
            "100us",
            "--json",
            "-o",
        ])
        .arg(&dir)
        // A hang guard only: the run takes about 8 s.
        .timeout(Duration::from_secs(180))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Every attributed delay: (cpu, start, end) and its largest share's kind and name.
    let csv = std::fs::read_to_string(dir.join("attribution.csv")).unwrap();
    let mut windows: Vec<(u64, u64, u64, String, String, u64)> = Vec::new();
    for line in csv.lines().skip(1) {
        let f = csv_fields(line);
        let n = |i: usize| f[i].parse::<u64>().unwrap();
        let (cpu, start, end, ns) = (n(0), n(1), n(2), n(6));
        match windows.last_mut() {
            Some(w) if (w.0, w.1, w.2) == (cpu, start, end) => {
                if ns > w.5 {
                    (w.3, w.4, w.5) = (f[4].clone(), f[5].clone(), ns);
                }
            }
            _ => windows.push((cpu, start, end, f[4].clone(), f[5].clone(), ns)),
        }
    }
    let spikes = v["causes"]["explanation"]["spikes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut checked = 0;
    for s in &spikes {
        let (cpu, at, size) = (
            s["cpu"].as_u64().unwrap(),
            s["at_ns"].as_u64().unwrap(),
            s["size_ns"].as_u64().unwrap(),
        );
        let overlap = |w: &&(u64, u64, u64, String, String, u64)| {
            w.2.min(at + size).saturating_sub(w.1.max(at))
        };
        let Some(w) = windows
            .iter()
            .filter(|w| w.0 == cpu && overlap(w) > 0)
            .max_by_key(overlap)
        else {
            continue;
        };
        let inferred = s["inferred"]["text"].as_str().unwrap_or("");
        let traced = s["traced"].as_str().unwrap_or("");
        assert!(
            traced.contains(&w.4),
            "a traced delay says what the trace found ({} {}): {s}",
            w.3,
            w.4
        );
        if w.3 == "thread" {
            for claim in [
                "came late",
                "timer interrupt was late",
                "runnable only",
                "without a task switch",
            ] {
                assert!(
                    !inferred.contains(claim),
                    "the trace names the task {} for the delay, the sampler says {inferred:?}: {s}",
                    w.4
                );
            }
        }
        if inferred.contains("waited runnable") {
            assert!(inferred.contains("window around it"), "{inferred}");
        }
        checked += 1;
    }
    eprintln!(
        "{checked} of {} explained delays checked against {} traced ones",
        spikes.len(),
        windows.len()
    );
}
