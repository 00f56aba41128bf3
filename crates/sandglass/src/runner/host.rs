//! The operating system as the run lifecycle sees it, behind a trait that tests replace.
//!
//! [`Host`] holds every operation of the lifecycle that changes the process or the machine:
//! signal masks, PM QoS, memory locking, the main thread's CPU and priority, creating the
//! measuring threads and setting each one up (CPU, policy, timer), starting loads and kernel
//! tracing. [`RealHost`] does them; the runner's unit tests use a host that records every call
//! and fails where a test asks it to, so that each stage's failure path is tested without
//! privileges: every setting applied is restored, every thread started is joined.

use crate::causes::tracefs::{KernelTrace, Session, TraceError, TraceOptions};
use crate::engine::ThreadOutcome;
use crate::load::{self, LoadError, LoadReport};
use crate::model::TimerKind;
use crate::os::{self, AppliedPolicy, OsTimer, PolicyFailure};
use crate::plan::LoadPlan;
use crate::policy::Policy;
use crate::system::Privileges;
use sandglass_sys::sched::{self, Tid};
use sandglass_sys::signal;
use std::path::Path;
use std::thread::JoinHandle;
use thiserror::Error;

/// A signal that ends a run (one of [`signal::TERMINATING`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT: Ctrl-C.
    Interrupt,
    /// SIGTERM: a request to end (a service manager, `kill`).
    Terminate,
    /// SIGHUP: the terminal hung up (its window closed, an ssh session dropped).
    HangUp,
}

impl Stop {
    /// The signal's name, as the run records it (`SIGINT`, `SIGTERM`, `SIGHUP`).
    pub fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
            Stop::HangUp => "SIGHUP",
        }
    }

    /// The stop a signal of [`signal::TERMINATING`] asks for (any other number is taken as a
    /// request to end, as SIGTERM).
    pub fn of(signo: i32) -> Stop {
        match signo {
            signal::SIGINT => Stop::Interrupt,
            signal::SIGHUP => Stop::HangUp,
            _ => Stop::Terminate,
        }
    }
}

/// What the main thread's wait took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT, SIGTERM or SIGHUP: the run ends.
    End(Stop),
    /// SIGTSTP (Ctrl-Z): the process is to stop (see [`Host::stop_process`]).
    TerminalStop,
    /// SIGCONT: the process was stopped and runs again.
    Continued,
}

/// A system call of the lifecycle that failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{call} failed: {reason}")]
pub struct HostError {
    pub call: &'static str,
    pub reason: String,
}

/// The main thread's CPU affinity and scheduling, to restore after the run.
#[derive(Clone, Debug, Default)]
pub struct MainThread {
    pub affinity: Option<Vec<usize>>,
    pub attr: Option<sched::SchedAttr>,
}

/// What a measuring thread's setup gave.
pub struct ThreadSetup {
    /// The thread's id.
    pub tid: i32,
    /// The policy applied (read back), or why it could not be.
    pub policy: Result<AppliedPolicy, PolicyFailure>,
    /// Its timer, or why it could not be created.
    pub timer: Result<OsTimer, os::TimerError>,
    /// A problem that does not stop the thread by itself (it could not be pinned).
    pub problem: Option<String>,
    pub timer_slack_ns: Option<u64>,
}

/// Loads running beside a measurement. Sent between threads: a caller whose own thread is
/// real-time starts them from a thread of its own (`bench budget`).
pub trait Loads: Send {
    /// The measured window begins: the loads' throughput counts from here.
    fn mark(&self);
    /// Stops every load and says what each achieved.
    fn stop(self: Box<Self>) -> Vec<LoadReport>;
}

/// Loads started and settled by [`start_loads`]: stopped when dropped, and `settle_ended` is
/// what ended their settle time early, if anything did.
pub struct Settled<T> {
    pub loads: Box<dyn Loads>,
    pub settle_ended: Option<T>,
}

/// Starts the loads of `plan` on `cpus` (by default; a load may name its own CPUs) and lets them
/// settle: `settle(ns)`, called once the loads run (with 0 too: the plan may have no settle
/// time), waits out the settle time and says what ended it early (a signal, a stop request).
/// `None` for a plan without loads. The one load starter of the measuring commands:
/// the runner's measurement, its loads-alone control and `bench budget` all start theirs here.
/// The caller marks the measured window ([`Loads::mark`]) where it begins.
pub fn start_loads<H: Host, T>(
    host: &H,
    plan: &LoadPlan,
    cpus: &[usize],
    settle: impl FnOnce(u64) -> Option<T>,
) -> Result<Option<Settled<T>>, LoadError> {
    if plan.is_empty() {
        return Ok(None);
    }
    let loads = host.start_loads(plan, cpus)?;
    let settle_ended = settle(plan.settle_ns.0);
    Ok(Some(Settled {
        loads,
        settle_ended,
    }))
}

/// Kernel tracing on the measured CPUs.
pub trait Tracing {
    /// Reads what the kernel buffered so far (only from a CPU no measuring thread uses).
    fn drain(&mut self);
    /// Writes a marker into the trace.
    fn mark(&self, text: &str);
    /// Writes the events into the run directory `dir` as they are read, instead of keeping them
    /// in memory.
    fn keep_in(&mut self, dir: &Path) -> Result<(), String> {
        let _ = dir;
        Ok(())
    }
    /// Stops tracing, removes the instance, and returns the events.
    fn finish(self: Box<Self>) -> KernelTrace;
    fn dir(&self) -> &Path;
}

/// The operating system's part of a run. A host is cloned into each measuring thread.
pub trait Host: Clone + Send + Sync + 'static {
    /// The CPUs this process may run on.
    fn allowed_cpus(&self) -> Vec<usize>;
    /// Blocks the signals that end a run (SIGINT, SIGTERM, SIGHUP), SIGTSTP, SIGCONT and the
    /// timer signal for this thread and the threads it creates (the main thread takes them in
    /// its wait; see [`crate::stops`]), and installs the handler that interrupts a measuring
    /// thread's sleep. Returns whether the caller had the signals that end a run blocked
    /// already (a study running many cells does).
    fn block_signals(&self) -> Result<bool, HostError>;
    /// Unblocks the signals that end a run, SIGTSTP and SIGCONT.
    fn unblock_signals(&self);
    /// Waits up to `ns` for a signal that ends a run.
    fn wait_signal(&self, ns: u64) -> Option<Stop>;
    /// Waits up to `ns` for a signal that ends a run, SIGTSTP or SIGCONT (the supervision's
    /// wait).
    fn wait_event(&self, ns: u64) -> Option<Signal> {
        self.wait_signal(ns).map(Signal::End)
    }
    /// Stops the process, as the default action of the SIGTSTP it took would have.
    fn stop_process(&self) {}
    /// The process tracing this one (a debugger), if any.
    fn tracer(&self) -> Option<i32> {
        None
    }
    /// Holds `/dev/cpu_dma_latency` at `us` until [`Host::release_pm_qos`].
    fn hold_pm_qos(&self, us: u32) -> Result<(), HostError>;
    fn release_pm_qos(&self);
    /// Locks the process's memory.
    fn lock_memory(&self, privileges: &Privileges) -> Result<(), os::MemoryLockError>;
    /// The calling thread's CPU affinity and scheduling.
    fn main_thread(&self) -> MainThread;
    /// Pins the calling thread to `cpu` and, with `fifo`, raises it to SCHED_FIFO 99.
    fn place_main_thread(&self, cpu: Option<usize>, fifo: bool);
    fn restore_main_thread(&self, saved: &MainThread);
    /// Creates measuring thread `index`.
    fn spawn(
        &self,
        index: usize,
        name: String,
        body: Box<dyn FnOnce() -> ThreadReportParts + Send>,
    ) -> std::io::Result<JoinHandle<ThreadReportParts>>;
    /// Interrupts thread `tid`'s sleep so that it sees the stop request.
    fn wake(&self, tid: i32);
    /// In a measuring thread: pins it to `cpus`, applies `policy`, creates its timer.
    fn setup_thread(
        &self,
        index: usize,
        cpus: &[usize],
        policy: &Policy,
        timer: TimerKind,
        privileged: bool,
    ) -> ThreadSetup;
    fn start_loads(&self, plan: &LoadPlan, cpus: &[usize]) -> Result<Box<dyn Loads>, LoadError>;
    fn start_tracing(
        &self,
        cpus: &[usize],
        opts: &TraceOptions,
    ) -> Result<Box<dyn Tracing>, TraceError>;
}

/// What a measuring thread returns when it ends.
pub struct ThreadReportParts {
    pub outcome: ThreadOutcome,
    /// CPU time the thread used while it measured (CLOCK_THREAD_CPUTIME_ID).
    pub cpu_time_ns: Option<u64>,
    /// The first unexpected error of its timer.
    pub error: Option<String>,
}

/// The real operating system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealHost;

struct RealLoads(load::RunningLoads);

impl Loads for RealLoads {
    fn mark(&self) {
        self.0.mark();
    }
    fn stop(self: Box<Self>) -> Vec<LoadReport> {
        self.0.stop()
    }
}

struct RealTracing(Session);

impl Tracing for RealTracing {
    fn drain(&mut self) {
        self.0.drain();
    }
    fn mark(&self, text: &str) {
        self.0.mark(text);
    }
    fn keep_in(&mut self, dir: &Path) -> Result<(), String> {
        self.0.keep_in(dir).map_err(|e| e.to_string())
    }
    fn finish(self: Box<Self>) -> KernelTrace {
        self.0.finish()
    }
    fn dir(&self) -> &Path {
        self.0.dir()
    }
}

/// PM QoS requests held by this process (the kernel keeps one only while its file is open).
static PM_QOS: std::sync::Mutex<Vec<os::PmQos>> = std::sync::Mutex::new(Vec::new());

impl Host for RealHost {
    fn allowed_cpus(&self) -> Vec<usize> {
        crate::system::allowed_cpus()
    }

    fn block_signals(&self) -> Result<bool, HostError> {
        let caller = signal::terminating_blocked();
        let mut all = signal::WITH_JOB_CONTROL.to_vec();
        all.push(signal::timer_signal());
        signal::block(&all).map_err(|e| HostError {
            call: "blocking SIGINT, SIGTERM and SIGHUP (pthread_sigmask)",
            reason: e.to_string(),
        })?;
        signal::install_wake_handler(signal::wake_signal()).map_err(|e| HostError {
            call: "installing the wake-up signal handler (sigaction)",
            reason: e.to_string(),
        })?;
        Ok(caller)
    }

    fn unblock_signals(&self) {
        let _ = signal::unblock(&signal::WITH_JOB_CONTROL);
    }

    fn wait_event(&self, ns: u64) -> Option<Signal> {
        signal::wait_timeout(&signal::WITH_JOB_CONTROL, ns).map(|s| match s {
            signal::SIGTSTP => Signal::TerminalStop,
            signal::SIGCONT => Signal::Continued,
            s => Signal::End(Stop::of(s)),
        })
    }

    fn stop_process(&self) {
        signal::stop_self();
    }

    fn tracer(&self) -> Option<i32> {
        sandglass_sys::process::tracer_pid()
    }

    fn wait_signal(&self, ns: u64) -> Option<Stop> {
        // Ctrl-Z outside the supervision's wait stops the process at once, unrecorded: no
        // measurement is under way then.
        signal::wait_termination(ns).map(Stop::of)
    }

    fn hold_pm_qos(&self, us: u32) -> Result<(), HostError> {
        let held = os::hold_cpu_dma_latency(us).map_err(|e| HostError {
            call: "writing /dev/cpu_dma_latency",
            reason: match e.raw_os_error() {
                Some(n) => sandglass_sys::Errno(n).to_string(),
                None => e.to_string(),
            },
        })?;
        match PM_QOS.lock() {
            Ok(mut v) => v.push(held),
            Err(p) => p.into_inner().push(held),
        }
        Ok(())
    }

    fn release_pm_qos(&self) {
        match PM_QOS.lock() {
            Ok(mut v) => v.clear(),
            Err(p) => p.into_inner().clear(),
        }
    }

    fn lock_memory(&self, privileges: &Privileges) -> Result<(), os::MemoryLockError> {
        os::lock_memory(privileges)
    }

    fn main_thread(&self) -> MainThread {
        MainThread {
            affinity: sched::get_affinity(Tid::SELF).ok(),
            attr: sched::get_attr(Tid::SELF).ok(),
        }
    }

    fn place_main_thread(&self, cpu: Option<usize>, fifo: bool) {
        if let Some(c) = cpu {
            let _ = sched::set_affinity(Tid::SELF, &[c]);
        }
        if fifo {
            let _ = sched::set_attr(Tid::SELF, &Policy::Fifo { priority: 99 }.to_attr());
        }
    }

    fn restore_main_thread(&self, saved: &MainThread) {
        if let Some(attr) = &saved.attr {
            let _ = sched::set_attr(Tid::SELF, attr);
        }
        if let Some(aff) = &saved.affinity {
            let _ = sched::set_affinity(Tid::SELF, aff);
        }
    }

    fn spawn(
        &self,
        _index: usize,
        name: String,
        body: Box<dyn FnOnce() -> ThreadReportParts + Send>,
    ) -> std::io::Result<JoinHandle<ThreadReportParts>> {
        std::thread::Builder::new().name(name).spawn(body)
    }

    fn wake(&self, tid: i32) {
        if tid > 0 {
            let _ = signal::send_to_thread(Tid(tid), signal::wake_signal());
        }
    }

    fn setup_thread(
        &self,
        index: usize,
        cpus: &[usize],
        policy: &Policy,
        timer: TimerKind,
        privileged: bool,
    ) -> ThreadSetup {
        let tid = sched::gettid().0;
        let problem = sched::set_affinity(Tid::SELF, cpus)
            .err()
            .map(|e| format!("cannot pin thread {index} to CPUs {cpus:?}: {e}"));
        let policy = os::apply_policy(policy, privileged);
        let timer = os::make_timer(timer);
        os::prefault_stack();
        ThreadSetup {
            tid,
            policy,
            timer,
            problem,
            timer_slack_ns: sandglass_sys::process::timer_slack_ns(),
        }
    }

    fn start_loads(&self, plan: &LoadPlan, cpus: &[usize]) -> Result<Box<dyn Loads>, LoadError> {
        let options = load::LoadOptions::new(cpus.to_vec());
        Ok(Box::new(RealLoads(load::start(&plan.specs, &options)?)))
    }

    fn start_tracing(
        &self,
        cpus: &[usize],
        opts: &TraceOptions,
    ) -> Result<Box<dyn Tracing>, TraceError> {
        let mut s = Session::create(cpus, opts)?;
        s.start()?;
        Ok(Box::new(RealTracing(s)))
    }
}
