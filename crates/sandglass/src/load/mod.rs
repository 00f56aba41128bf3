//! Load profiles run beside a measurement (issue 5, capability C7): built-in loads and external
//! commands, each recording its own throughput.
//!
//! Every seed measured under load: Cota-Robles and Held ran office, workstation and game loads
//! (seed 000 §3.1), Dannenberg et al. computation, file-system and network loads (seed 002 §5),
//! and Regehr measured how much network throughput a real-time reservation cost (seed 003
//! §5.4, Table 2). A real-time gain often costs the load, so a load here is not just noise to
//! run beside a measurement: it reports the work it got done.
//!
//! Built-in loads ([`spec::BUILT_IN`]) run as threads inside the sandglass process, so nothing
//! of theirs can outlive it. A load starts `intensity` workers (one per CPU of its set when no
//! intensity is given, as stress-ng's `--cpu 0`); each thread is pinned to the
//! next of the load's CPUs in turn (continuing where the previous load stopped, so `cpu+disk`
//! on two CPUs puts one on each) and sets itself to SCHED_OTHER, nice 0: the thread that starts
//! the loads may run at SCHED_FIFO, and threads inherit their creator's policy. Workers wait at
//! a gate until every load is set up, so that all loads start together and their run times are
//! comparable; then they work in steps of well under 10 ms and check a shared stop flag between
//! steps. Every blocking call has a timeout (sockets, condition variables) or a bounded length
//! (a sleep of at most 1 ms, a write of 1 MiB, the fsync of a 16 MiB file, the wait for `true`
//! to exit), so a stop is never missed.
//!
//! External loads (`stress-ng:ARGS`, `cmd:COMMAND`) run as child processes in their own
//! process group, which dies with sandglass even on SIGKILL
//! ([`sandglass_sys::child::isolate`]). A supervising thread spawns the child (the parent-death
//! signal belongs to the spawning thread), polls it every 10 ms, and stops it with SIGINT to the
//! group, then SIGKILL two seconds later.

#[cfg(feature = "linux")]
mod builtin;
#[cfg(feature = "linux")]
mod external;
pub mod spec;

pub use spec::{
    format_profile, parse_profile, split_args, LoadKind, LoadSpec, SplitArgsError, MAX_INTENSITY,
};

#[cfg(feature = "linux")]
use crate::cpulist::CpuList;
use crate::cpulist::CpuListError;
#[cfg(feature = "linux")]
use sandglass_sys::Errno;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
#[cfg(feature = "linux")]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(feature = "linux")]
use std::sync::{mpsc, Arc, Condvar, Mutex};
#[cfg(feature = "linux")]
use std::thread::JoinHandle;
#[cfg(feature = "linux")]
use std::time::{Duration, Instant};
use thiserror::Error;

/// Why a load spec, a profile or a load's start was refused. Every message names the bad text
/// and says how to fix it.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("empty load profile: give loads joined by '+', such as cpu+disk, or idle for none")]
    EmptyProfile,
    #[error("empty load: give a load such as cpu, disk:2 or memory@0-1")]
    EmptySpec,
    #[error("empty load in profile '{profile}': remove the extra '+' (loads are joined by one '+', such as cpu+disk)")]
    EmptyLoad { profile: String },
    #[error("'{text}': idle means no load, so use it alone (sandglass load idle), not in a profile with other loads")]
    IdleInProfile { text: String },
    #[error(
        "unknown load '{kind}' in '{text}': {hint}",
        hint = "use cpu, memory, disk, net, compile, sched, timers, stress-ng:ARGS or cmd:COMMAND"
    )]
    UnknownKind { text: String, kind: String },
    #[error("bad intensity '{value}' in '{text}': give a whole number of workers from 1 to {max}, such as {kind}:2", max = MAX_INTENSITY)]
    BadIntensity {
        text: String,
        value: String,
        kind: &'static str,
    },
    #[error("bad CPU list '{cpus}' in '{text}': {source}")]
    BadCpus {
        text: String,
        cpus: String,
        source: CpuListError,
    },
    #[error("'{text}' has no command: write it after the colon, such as cmd:make -j4")]
    EmptyCommand { text: String },
    #[error("'{text}' has no stress-ng arguments: write them after the colon, such as stress-ng:--cpu 2")]
    EmptyArgs { text: String },
    #[error("bad stress-ng arguments in '{text}': {source}")]
    BadArgs {
        text: String,
        source: SplitArgsError,
    },
    #[error("load '{spec}': CPU {cpu} is not available to this process (it may use CPUs {allowed}); choose CPUs from that list")]
    CpuUnavailable {
        spec: String,
        cpu: usize,
        allowed: String,
    },
    #[error("load '{spec}': stress-ng is not installed or not on PATH; install it (apt-get install stress-ng) or use a built-in load such as cpu or disk")]
    StressNgMissing { spec: String },
    #[error("load '{spec}': no `true` program in /bin, /usr/bin or PATH, which the compile load runs; install coreutils or choose another load")]
    TrueMissing { spec: String },
    #[error("load '{spec}': temporary directory {}: {reason}; give an existing writable directory", .path.display())]
    TempDir {
        spec: String,
        path: PathBuf,
        reason: String,
    },
    #[cfg(feature = "linux")]
    #[error("load '{spec}' could not start: {source}")]
    Start { spec: String, source: StartError },
}

/// Why a load that was accepted could not start.
#[cfg(feature = "linux")]
#[derive(Debug, Error)]
pub enum StartError {
    /// One of the load's threads failed while setting itself up.
    #[error(transparent)]
    Thread(#[from] ThreadError),
    #[error("cannot create a thread: {0}")]
    CreateThread(#[source] std::io::Error),
    #[error("the loads were not set up within {secs} s; use fewer or lighter loads")]
    SetupTimeout { secs: u64 },
    /// The net load's TCP connection over 127.0.0.1 could not be made; `action` says which
    /// step failed (`cannot listen on 127.0.0.1`, `cannot connect to 127.0.0.1:40000`).
    #[error("{action}: {}", io_reason(.source))]
    Loopback {
        action: String,
        source: std::io::Error,
    },
    /// An external load was given to the built-in loads' planner.
    #[error("{kind} is not a built-in load")]
    NotBuiltIn { kind: &'static str },
    /// A built-in load was given to the external loads' planner.
    #[error("not an external load")]
    NotExternal,
}

/// Why a load thread could not set itself up, or stopped working before the loads were stopped.
#[cfg(feature = "linux")]
#[derive(Debug, Error)]
pub enum ThreadError {
    #[error("cannot pin a load thread to CPUs {cpus:?}: {source}")]
    Pin { cpus: Vec<usize>, source: Errno },
    #[error("cannot set a load thread to SCHED_OTHER: {0}")]
    Policy(#[source] Errno),
    #[error("cannot allocate a working set of {}", builtin::format_bytes(*.bytes))]
    Allocate { bytes: u64 },
    #[error("the working set is empty")]
    EmptyWorkingSet,
    #[error("cannot create a file in {}: {}; give a writable directory", .dir.display(), io_reason(.source))]
    CreateFile {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// A disk worker's `write`, `fsync`, `read` or `truncate` failed.
    #[error("{call} failed: {}", io_reason(.source))]
    Disk {
        call: &'static str,
        source: std::io::Error,
    },
    /// A net worker could not set the `write` or `read` timeout of its socket.
    #[error("cannot set a {direction} timeout: {}", io_reason(.source))]
    SocketTimeout {
        direction: &'static str,
        source: std::io::Error,
    },
    #[error("send failed: {}", io_reason(.0))]
    Send(#[source] std::io::Error),
    #[error("receive failed: {}", io_reason(.0))]
    Receive(#[source] std::io::Error),
    #[error("the loopback connection closed")]
    ConnectionClosed,
    #[error("cannot run {}: {}", .program.display(), io_reason(.source))]
    Run {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("{} ended with {status}", .program.display())]
    ProgramFailed {
        program: PathBuf,
        status: std::process::ExitStatus,
    },
    /// An external load's output file could not be created.
    #[error("cannot create a file for its output in {}: {}", .dir.display(), io_reason(.source))]
    OutputFile {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// An external load's output file could not be given to the child.
    #[error("cannot pass its output: {}", io_reason(.0))]
    PassOutput(#[source] std::io::Error),
}

impl LoadError {
    /// True when the error is answered by changing the input (a bad spec, an unavailable CPU, a
    /// missing program or directory), false when something failed while starting.
    pub fn is_usage(&self) -> bool {
        #[cfg(feature = "linux")]
        if let LoadError::Start { .. } = self {
            return false;
        }
        true
    }
}

/// Where and how loads run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// CPUs of loads without `@CPUS`; empty means every CPU this process may use.
    pub default_cpus: Vec<usize>,
    /// Directory of the disk load's files and of external loads' captured output; it should be
    /// on the disk to load (a tmpfs directory makes `disk` a memory load).
    pub temp_dir: PathBuf,
}

impl LoadOptions {
    /// Loads on `default_cpus` (empty: every CPU this process may use), with their files in
    /// [`default_temp_dir`].
    pub fn new(default_cpus: Vec<usize>) -> LoadOptions {
        LoadOptions {
            default_cpus,
            temp_dir: default_temp_dir(),
        }
    }
}

#[cfg(feature = "linux")]
impl Default for LoadOptions {
    /// Every CPU this process may use, and [`default_temp_dir`].
    fn default() -> LoadOptions {
        LoadOptions {
            default_cpus: crate::system::allowed_cpus(),
            temp_dir: default_temp_dir(),
        }
    }
}

/// `$TMPDIR` when set, else `/var/tmp` (on a disk by convention, unlike `/tmp`, which is often a
/// tmpfs), else `/tmp`.
pub fn default_temp_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TMPDIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if Path::new("/var/tmp").is_dir() {
        return PathBuf::from("/var/tmp");
    }
    PathBuf::from("/tmp")
}

/// What one load got done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoadReport {
    /// The spec, as [`LoadSpec`]'s `Display` prints it.
    pub spec: String,
    /// `cpu`, `memory`, ..., `stress-ng`, `cmd`.
    pub kind: String,
    pub intensity: u32,
    /// The CPUs the load's threads or processes were allowed to run on.
    pub cpus: String,
    /// From the common start of the loads (or [`RunningLoads::mark`]) to the end of this
    /// load's last worker.
    pub duration_ns: u64,
    /// Work done, in `unit`s.
    pub work: f64,
    /// `iterations`, `bytes`, `processes`, `handoffs`, `wakeups`, `bogo ops`, or `""` when the
    /// load cannot count its work.
    pub unit: String,
    /// Work per second of `duration_ns` (for stress-ng, its own real-time rate).
    pub per_s: f64,
    /// Kind-specific facts: fsyncs, the working set, the exit status of a command.
    pub detail: Option<String>,
    /// Why the load stopped early or failed, if it did.
    pub error: Option<String>,
}

/// The stop flag and the start gate that every load thread shares.
#[cfg(feature = "linux")]
#[derive(Default)]
pub(crate) struct Shared {
    stop: AtomicBool,
    gate: Mutex<Option<bool>>,
    opened: Condvar,
}

#[cfg(feature = "linux")]
impl Shared {
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.set_gate(false);
    }

    fn set_gate(&self, go: bool) {
        let mut g = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(go);
        }
        self.opened.notify_all();
    }

    /// Waits until the gate opens (`true`) or the loads are stopped before they began (`false`).
    pub(crate) fn wait_go(&self) -> bool {
        let mut g = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(go) = *g {
                return go && !self.stopped();
            }
            if self.stopped() {
                return false;
            }
            g = match self.opened.wait_timeout(g, STEP) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

/// The longest a load thread goes without looking at the stop flag, while waiting.
#[cfg(feature = "linux")]
pub(crate) const STEP: Duration = Duration::from_millis(10);
/// The longest the setup of every load may take before `start` gives up.
#[cfg(feature = "linux")]
const SETUP_LIMIT: Duration = Duration::from_secs(30);
/// How long `stop` waits for a thread before it leaves it behind and says so.
#[cfg(feature = "linux")]
const JOIN_LIMIT: Duration = Duration::from_secs(10);

/// What a load thread reports once it is set up: the process group it started, if any.
#[cfg(feature = "linux")]
pub(crate) type Ready = Result<Option<i32>, ThreadError>;

/// Sends one thread's setup outcome to `start`.
#[cfg(feature = "linux")]
pub(crate) struct Starter {
    load: usize,
    tx: mpsc::Sender<(usize, Ready)>,
}

#[cfg(feature = "linux")]
impl Starter {
    pub(crate) fn ready(&self, r: Ready) {
        let _ = self.tx.send((self.load, r));
    }
}

/// Work counted by one thread.
#[cfg(feature = "linux")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Units of the load's work.
    pub work: u64,
    /// A second count some loads keep: fsyncs (disk), bytes sent (net).
    pub aux: u64,
}

/// A thread's running totals, published after every step so that [`RunningLoads::mark`] can
/// take a baseline without stopping anything.
#[cfg(feature = "linux")]
#[derive(Debug, Default)]
pub(crate) struct Counters {
    work: AtomicU64,
    aux: AtomicU64,
    base_work: AtomicU64,
    base_aux: AtomicU64,
}

#[cfg(feature = "linux")]
impl Counters {
    pub(crate) fn publish(&self, t: Tally) {
        self.work.store(t.work, Ordering::Relaxed);
        self.aux.store(t.aux, Ordering::Relaxed);
    }

    fn mark(&self) {
        self.base_work
            .store(self.work.load(Ordering::Relaxed), Ordering::Relaxed);
        self.base_aux
            .store(self.aux.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// `t` without what was done before the mark.
    fn since_mark(&self, t: Tally) -> Tally {
        Tally {
            work: t
                .work
                .saturating_sub(self.base_work.load(Ordering::Relaxed)),
            aux: t.aux.saturating_sub(self.base_aux.load(Ordering::Relaxed)),
        }
    }
}

/// What an external load's supervisor learnt.
#[cfg(feature = "linux")]
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ExternalEnd {
    pub work: f64,
    pub unit: String,
    /// The program's own rate, when it printed one that fits.
    pub per_s: Option<f64>,
    pub detail: String,
}

/// How one load thread ended.
#[cfg(feature = "linux")]
#[derive(Debug, Default)]
pub(crate) struct ThreadEnd {
    pub tally: Tally,
    /// When the thread stopped working; `None` when it never started.
    pub ended: Option<Instant>,
    pub error: Option<String>,
    pub external: Option<ExternalEnd>,
}

#[cfg(feature = "linux")]
impl ThreadEnd {
    pub(crate) fn failed(error: String) -> ThreadEnd {
        ThreadEnd {
            error: Some(error),
            ..ThreadEnd::default()
        }
    }
}

/// Pins the calling thread to `cpus` and sets it to SCHED_OTHER, nice 0 (or, when nice 0 is not
/// permitted because the process runs at a higher nice value, SCHED_OTHER at that value).
#[cfg(feature = "linux")]
pub(crate) fn enter_load_thread(cpus: &[usize]) -> Result<(), ThreadError> {
    use sandglass_sys::sched::{self, SchedAttr, Tid, SCHED_OTHER};
    sched::set_affinity(Tid::SELF, cpus).map_err(|source| ThreadError::Pin {
        cpus: cpus.to_vec(),
        source,
    })?;
    let other = SchedAttr {
        policy: SCHED_OTHER,
        nice: 0,
        ..SchedAttr::default()
    };
    if sched::set_attr(Tid::SELF, &other).is_ok() {
        return Ok(());
    }
    let nice = sched::get_attr(Tid::SELF)
        .map(|a| {
            if a.policy == SCHED_OTHER {
                a.nice.max(0)
            } else {
                0
            }
        })
        .unwrap_or(0);
    sched::set_attr(Tid::SELF, &SchedAttr { nice, ..other }).map_err(ThreadError::Policy)
}

/// One thread of a load, about to be spawned.
#[cfg(feature = "linux")]
pub(crate) struct ThreadPlan {
    pub name: String,
    pub cpus: Vec<usize>,
    pub body: Body,
}

/// What a load thread runs once it is pinned and at SCHED_OTHER.
#[cfg(feature = "linux")]
pub(crate) type Body = Box<dyn FnOnce(&Shared, &Starter, &Counters) -> ThreadEnd + Send>;

/// A load whose threads run.
#[cfg(feature = "linux")]
struct Started {
    spec: LoadSpec,
    /// Workers started: the intensity, or one per CPU when none was given.
    workers: u32,
    cpus: Vec<usize>,
    detail: Option<String>,
    threads: Vec<(JoinHandle<ThreadEnd>, Arc<Counters>)>,
    process_group: Option<i32>,
}

/// Loads that run until [`RunningLoads::stop`] or drop.
#[cfg(feature = "linux")]
pub struct RunningLoads {
    shared: Arc<Shared>,
    loads: Vec<Started>,
    /// When the gate opened: the common start of every load.
    go: Option<Instant>,
    /// When [`RunningLoads::mark`] last moved the start of the counted window.
    marked: Mutex<Option<Instant>>,
}

/// Starts every load; returns once all are running.
#[cfg(feature = "linux")]
pub fn start(specs: &[LoadSpec], opts: &LoadOptions) -> Result<RunningLoads, LoadError> {
    let allowed = crate::system::allowed_cpus();
    let default_cpus = if opts.default_cpus.is_empty() {
        allowed.clone()
    } else {
        opts.default_cpus.clone()
    };
    let mut prepared = Vec::with_capacity(specs.len());
    let mut next_cpu = 0usize;
    for spec in specs {
        let cpus = spec
            .cpus
            .as_ref()
            .map(|c| c.to_vec())
            .unwrap_or_else(|| default_cpus.clone());
        if let Some(&cpu) = cpus.iter().find(|c| !allowed.contains(c)) {
            return Err(LoadError::CpuUnavailable {
                spec: spec.to_string(),
                cpu,
                allowed: CpuList::from_cpus(allowed.iter().copied())
                    .map(|l| l.to_string())
                    .unwrap_or_else(|| "none".into()),
            });
        }
        let (plans, detail) = if spec.kind.is_built_in() {
            builtin::plan(spec, &cpus, &mut next_cpu, opts)?
        } else {
            external::plan(spec, &cpus, opts)?
        };
        prepared.push((spec.clone(), cpus, detail, plans));
    }

    let mut running = RunningLoads {
        shared: Arc::new(Shared::default()),
        loads: Vec::with_capacity(prepared.len()),
        go: None,
        marked: Mutex::new(None),
    };
    let (tx, rx) = mpsc::channel();
    let mut expected = 0;
    for (index, (spec, cpus, detail, plans)) in prepared.into_iter().enumerate() {
        let workers = match spec.intensity {
            0 if spec.kind.is_built_in() => cpus.len().max(1) as u32,
            0 => 1,
            n => n,
        };
        let mut used: Vec<usize> = plans.iter().flat_map(|p| p.cpus.iter().copied()).collect();
        if used.is_empty() {
            used = cpus;
        }
        let mut started = Started {
            spec,
            workers,
            cpus: used,
            detail,
            threads: Vec::with_capacity(plans.len()),
            process_group: None,
        };
        for plan in plans {
            let shared = running.shared.clone();
            let counters = Arc::new(Counters::default());
            let published = counters.clone();
            let starter = Starter {
                load: index,
                tx: tx.clone(),
            };
            let spawned = std::thread::Builder::new().name(plan.name).spawn(move || {
                if let Err(e) = enter_load_thread(&plan.cpus) {
                    let reason = e.to_string();
                    starter.ready(Err(e));
                    return ThreadEnd::failed(reason);
                }
                (plan.body)(&shared, &starter, &published)
            });
            match spawned {
                Ok(h) => started.threads.push((h, counters)),
                Err(e) => {
                    let spec = started.spec.to_string();
                    running.loads.push(started);
                    return Err(LoadError::Start {
                        spec,
                        source: StartError::CreateThread(e),
                    });
                }
            }
            expected += 1;
        }
        running.loads.push(started);
    }
    drop(tx);

    let deadline = Instant::now() + SETUP_LIMIT;
    for _ in 0..expected {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((index, Ok(group))) => {
                if group.is_some() {
                    running.loads[index].process_group = group;
                }
            }
            Ok((index, Err(e))) => {
                return Err(LoadError::Start {
                    spec: running.loads[index].spec.to_string(),
                    source: e.into(),
                })
            }
            Err(_) => {
                return Err(LoadError::Start {
                    spec: format_profile(
                        &running
                            .loads
                            .iter()
                            .map(|l| l.spec.clone())
                            .collect::<Vec<_>>(),
                    ),
                    source: StartError::SetupTimeout {
                        secs: SETUP_LIMIT.as_secs(),
                    },
                })
            }
        }
    }
    running.go = Some(Instant::now());
    running.shared.set_gate(true);
    Ok(running)
}

#[cfg(feature = "linux")]
impl RunningLoads {
    /// The process groups of external loads, in the order of the specs that have one.
    pub fn process_groups(&self) -> Vec<i32> {
        self.loads.iter().filter_map(|l| l.process_group).collect()
    }

    /// Starts the counted window now: the reports count only the work done from here, over the
    /// time from here (a measurement calls it when loads have settled and it starts). External
    /// loads' own figures (stress-ng's bogo ops) still cover their whole run.
    pub fn mark(&self) {
        let mut m = self.marked.lock().unwrap_or_else(|p| p.into_inner());
        *m = Some(Instant::now());
        for load in &self.loads {
            for (_, c) in &load.threads {
                c.mark();
            }
        }
    }

    /// The specs being run.
    pub fn specs(&self) -> Vec<LoadSpec> {
        self.loads.iter().map(|l| l.spec.clone()).collect()
    }

    /// Stops every load (within about a second; an external load that ignores SIGINT gets
    /// SIGKILL after two), waits for all threads and processes, and returns each load's
    /// throughput.
    pub fn stop(mut self) -> Vec<LoadReport> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Vec<LoadReport> {
        self.shared.request_stop();
        let stopped_at = Instant::now();
        let loads = std::mem::take(&mut self.loads);
        let marked = *self.marked.lock().unwrap_or_else(|p| p.into_inner());
        let go = marked.or(self.go);
        let mut reports = Vec::with_capacity(loads.len());
        for load in loads {
            let mut ends = Vec::with_capacity(load.threads.len());
            let mut left_behind = 0;
            for (h, counters) in load.threads {
                while !h.is_finished() && stopped_at.elapsed() < JOIN_LIMIT {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if h.is_finished() {
                    let mut end = h
                        .join()
                        .unwrap_or_else(|_| ThreadEnd::failed("a load thread panicked".into()));
                    end.tally = counters.since_mark(end.tally);
                    ends.push(end);
                } else {
                    left_behind += 1;
                }
            }
            let mut report = report(&load.spec, load.workers, &load.cpus, load.detail, go, &ends);
            if left_behind > 0 {
                let e = format!(
                    "{left_behind} thread(s) did not stop within {} s and were left running",
                    JOIN_LIMIT.as_secs()
                );
                report.error = Some(match report.error {
                    Some(prev) => format!("{prev}; {e}"),
                    None => e,
                });
            }
            reports.push(report);
        }
        reports
    }
}

#[cfg(feature = "linux")]
impl Drop for RunningLoads {
    /// Stops everything if `stop` was not called; the reports are lost.
    fn drop(&mut self) {
        if !self.loads.is_empty() {
            let _ = self.shutdown();
        }
    }
}

/// An I/O error's reason, as the kernel names it, without std's "(os error N)" suffix.
#[cfg(feature = "linux")]
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => sandglass_sys::Errno(n).to_string(),
        None => e.to_string(),
    }
}

/// Refuses a temporary directory that does not exist, is not a directory, or where no file can
/// be created.
#[cfg(feature = "linux")]
pub(crate) fn check_temp_dir(spec: &str, dir: &Path) -> Result<(), LoadError> {
    let refuse = |reason: String| LoadError::TempDir {
        spec: spec.into(),
        path: dir.to_path_buf(),
        reason,
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(refuse("not a directory".into())),
        Err(e) => return Err(refuse(io_reason(&e))),
    }
    anonymous_file(dir)
        .map(drop)
        .map_err(|e| refuse(format!("cannot create a file there: {}", io_reason(&e))))
}

/// A new file in `dir` that is unlinked at once: its space is freed when the descriptor closes,
/// even if the process is killed.
#[cfg(feature = "linux")]
pub(crate) fn anonymous_file(dir: &Path) -> std::io::Result<std::fs::File> {
    use std::sync::atomic::AtomicU64;
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        ".sandglass-load-{}-{}",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    );
    let path = dir.join(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// True when `path` is a regular file someone may execute.
#[cfg(feature = "linux")]
pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The first executable `name` in the directories of `path_var` (a `PATH` value).
#[cfg(feature = "linux")]
pub(crate) fn find_program(name: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path_var?)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// The type of the file system holding `path` (`ext4`, `tmpfs`), from `/proc/self/mounts`.
#[cfg(feature = "linux")]
pub(crate) fn fs_type(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    fs_type_in(&mounts, &path)
}

/// The type of the longest mount point in `mounts` (the `/proc/self/mounts` format, `fstab(5)`)
/// that contains `path`; the last such mount wins, as it hides the earlier ones.
#[cfg(feature = "linux")]
pub(crate) fn fs_type_in(mounts: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(_dev), Some(dir), Some(kind)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let dir = dir.replace("\\040", " ").replace("\\011", "\t");
        let longer = match &best {
            Some((len, _)) => dir.len() >= *len,
            None => true,
        };
        if longer && path.starts_with(&dir) {
            best = Some((dir.len(), kind.to_string()));
        }
    }
    best.map(|(_, kind)| kind)
}

/// Adds up the threads of one load.
#[cfg(feature = "linux")]
fn report(
    spec: &LoadSpec,
    workers: u32,
    cpus: &[usize],
    detail: Option<String>,
    go: Option<Instant>,
    ends: &[ThreadEnd],
) -> LoadReport {
    let last = ends.iter().filter_map(|e| e.ended).max();
    let duration_ns = match (go, last) {
        (Some(g), Some(l)) => l.saturating_duration_since(g).as_nanos() as u64,
        _ => 0,
    };
    let secs = duration_ns as f64 / 1e9;
    let tally = ends.iter().fold(Tally::default(), |a, e| Tally {
        work: a.work + e.tally.work,
        aux: a.aux + e.tally.aux,
    });
    let mut errors: Vec<&str> = ends.iter().filter_map(|e| e.error.as_deref()).collect();
    errors.dedup();
    let error = match errors.len() {
        0 => None,
        1 => Some(errors[0].to_string()),
        n => Some(format!("{} (and {} more)", errors[0], n - 1)),
    };
    let external = ends.iter().find_map(|e| e.external.clone());
    let (work, unit, per_s, detail) = match external {
        Some(x) => {
            let per_s = x
                .per_s
                .unwrap_or(if secs > 0.0 { x.work / secs } else { 0.0 });
            let detail = (!x.detail.is_empty()).then_some(x.detail);
            (x.work, x.unit, per_s, detail)
        }
        None => {
            let work = tally.work as f64;
            let per_s = if secs > 0.0 { work / secs } else { 0.0 };
            let detail = builtin::detail(&spec.kind, tally, secs, detail);
            (work, spec.kind.unit().to_string(), per_s, detail)
        }
    };
    LoadReport {
        spec: spec.to_string(),
        kind: spec.kind.name().to_string(),
        intensity: workers,
        cpus: CpuList::from_cpus(cpus.iter().copied())
            .map(|c| c.to_string())
            .unwrap_or_default(),
        duration_ns,
        work,
        unit,
        per_s,
        detail,
        error,
    }
}

#[cfg(test)]
mod tests;
