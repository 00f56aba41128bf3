//! The lifecycle's stages on a host that records every call and fails where a test asks: each
//! failure path leaves every setting restored and every thread joined.

use super::host::{Host, Loads, MainThread, Stop, ThreadReportParts, ThreadSetup, Tracing};
use super::*;
use crate::causes::tracefs::{KernelTrace, TraceError, TraceOptions};
use crate::load::{LoadError, LoadReport};
use crate::model::{TimerKind, Workload};
use crate::os::{AppliedPolicy, PolicyFailure};
use crate::plan::tests::plan_of;
use crate::plan::LoadPlan;
use crate::policy::Policy;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the mock fails.
#[derive(Clone, Debug, Default)]
struct Fail {
    block_signals: bool,
    spawn: Option<usize>,
    policy: Option<usize>,
    loads: bool,
    tracing: bool,
    /// A SIGINT this long after the signals were blocked.
    interrupt_after: Option<Duration>,
    /// A stop of the process this long after the signals were blocked: by SIGTSTP when `true`
    /// (the wait takes it, and the stop happens in `stop_process`), else by SIGSTOP (the stop
    /// happens inside the wait, which then takes SIGCONT); it lasts the second duration.
    stop: Option<(Duration, Duration, bool)>,
}

#[derive(Clone, Default)]
struct Mock {
    log: Arc<Mutex<Vec<String>>>,
    fail: Fail,
    blocked_at: Arc<Mutex<Option<Instant>>>,
    interrupted: Arc<Mutex<bool>>,
    /// 0: not stopped yet; 1: stopped, SIGCONT to come; 2: done.
    stop_phase: Arc<Mutex<u8>>,
}

impl Mock {
    fn failing(fail: Fail) -> Mock {
        Mock {
            fail,
            ..Mock::default()
        }
    }
    fn note(&self, s: impl Into<String>) {
        if let Ok(mut l) = self.log.lock() {
            l.push(s.into());
        }
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

struct MockLoads(Mock);
impl Loads for MockLoads {
    fn mark(&self) {
        self.0.note("loads marked");
    }
    fn stop(self: Box<Self>) -> Vec<LoadReport> {
        self.0.note("loads stopped");
        Vec::new()
    }
}

struct MockTracing(Mock, std::path::PathBuf);
impl Tracing for MockTracing {
    fn drain(&mut self) {}
    fn mark(&self, _text: &str) {}
    fn finish(self: Box<Self>) -> KernelTrace {
        self.0.note("tracing stopped");
        KernelTrace::default()
    }
    fn dir(&self) -> &std::path::Path {
        &self.1
    }
}

impl Host for Mock {
    fn allowed_cpus(&self) -> Vec<usize> {
        vec![0, 1]
    }
    fn block_signals(&self) -> Result<bool, host::HostError> {
        if self.fail.block_signals {
            return Err(host::HostError {
                call: "pthread_sigmask",
                reason: "refused by the test".into(),
            });
        }
        if let Ok(mut b) = self.blocked_at.lock() {
            *b = Some(Instant::now());
        }
        self.note("signals blocked");
        Ok(false)
    }
    fn unblock_signals(&self) {
        self.note("signals unblocked");
    }
    fn wait_signal(&self, ns: u64) -> Option<Stop> {
        if let (Some(after), Ok(b), Ok(mut done)) = (
            self.fail.interrupt_after,
            self.blocked_at.lock(),
            self.interrupted.lock(),
        ) {
            if !*done && b.is_some_and(|t| t.elapsed() >= after) {
                *done = true;
                return Some(Stop::Interrupt);
            }
        }
        std::thread::sleep(Duration::from_nanos(ns.min(5_000_000)));
        None
    }
    fn wait_event(&self, ns: u64) -> Option<host::Signal> {
        if let (Some((after, length, tstp)), Ok(b), Ok(mut phase)) = (
            self.fail.stop,
            self.blocked_at.lock(),
            self.stop_phase.lock(),
        ) {
            match *phase {
                0 if b.is_some_and(|t| t.elapsed() >= after) => {
                    if tstp {
                        *phase = 1;
                        return Some(host::Signal::TerminalStop);
                    }
                    *phase = 2;
                    self.note("stopped");
                    std::thread::sleep(length);
                    return Some(host::Signal::Continued);
                }
                1 => {
                    *phase = 2;
                    return Some(host::Signal::Continued);
                }
                _ => {}
            }
        }
        self.wait_signal(ns).map(host::Signal::End)
    }
    fn stop_process(&self) {
        self.note("stopped");
        if let Some((_, length, _)) = self.fail.stop {
            std::thread::sleep(length);
        }
    }
    fn hold_pm_qos(&self, _us: u32) -> Result<(), host::HostError> {
        self.note("pm_qos held");
        Ok(())
    }
    fn release_pm_qos(&self) {
        self.note("pm_qos released");
    }
    fn lock_memory(
        &self,
        _p: &crate::system::Privileges,
    ) -> Result<(), crate::os::MemoryLockError> {
        Err(crate::os::MemoryLockError::Limited { limit_bytes: 0 })
    }
    fn main_thread(&self) -> MainThread {
        MainThread::default()
    }
    fn place_main_thread(&self, _cpu: Option<usize>, _fifo: bool) {
        self.note("main placed");
    }
    fn restore_main_thread(&self, _saved: &MainThread) {
        self.note("main restored");
    }
    fn spawn(
        &self,
        index: usize,
        name: String,
        body: Box<dyn FnOnce() -> ThreadReportParts + Send>,
    ) -> std::io::Result<std::thread::JoinHandle<ThreadReportParts>> {
        if self.fail.spawn == Some(index) {
            return Err(std::io::Error::other("refused by the test"));
        }
        self.note(format!("thread {index} created"));
        let me = self.clone();
        std::thread::Builder::new().name(name).spawn(move || {
            let r = body();
            me.note(format!("thread {index} ended"));
            r
        })
    }
    fn wake(&self, _tid: i32) {}
    fn setup_thread(
        &self,
        index: usize,
        _cpus: &[usize],
        policy: &Policy,
        timer: TimerKind,
        _privileged: bool,
    ) -> ThreadSetup {
        let refused = self.fail.policy == Some(index);
        ThreadSetup {
            tid: sandglass_sys::sched::gettid().0,
            policy: if refused {
                Err(PolicyFailure::Refused(format!(
                    "the kernel refused {} (the test)",
                    policy.describe()
                )))
            } else {
                Ok(AppliedPolicy {
                    requested: *policy,
                    effective: Some(*policy),
                    downgraded: None,
                })
            },
            timer: crate::os::make_timer(timer),
            problem: None,
            timer_slack_ns: None,
        }
    }
    fn start_loads(&self, _plan: &LoadPlan, _cpus: &[usize]) -> Result<Box<dyn Loads>, LoadError> {
        if self.fail.loads {
            return Err(LoadError::EmptySpec);
        }
        self.note("loads started");
        Ok(Box::new(MockLoads(self.clone())))
    }
    fn start_tracing(
        &self,
        _cpus: &[usize],
        _opts: &TraceOptions,
    ) -> Result<Box<dyn Tracing>, TraceError> {
        if self.fail.tracing {
            return Err(TraceError::Unavailable(
                "tracing refused by the test".into(),
            ));
        }
        self.note("tracing started");
        Ok(Box::new(MockTracing(self.clone(), "/nonexistent".into())))
    }
}

/// Counts the releases it is given; fails after `fail_after` of them when asked to.
#[derive(Default)]
struct Counting {
    releases: u64,
    fail_after: Option<u64>,
    ticks: u64,
}

impl Sink for Counting {
    fn releases(&mut self, _t: usize, batch: &[Release], _tb: &Timebase) -> Result<(), StoreError> {
        self.releases += batch.len() as u64;
        match self.fail_after {
            Some(n) if self.releases >= n => Err(StoreError::Write {
                path: "samples-0000.parquet".into(),
                source: std::io::Error::from_raw_os_error(28),
            }),
            _ => Ok(()),
        }
    }
    fn tick(&mut self, _now: u64, _w: u64, _tb: &Timebase) -> Result<(), StoreError> {
        self.ticks += 1;
        Ok(())
    }
}

const TIMER: Workload = Workload::Timer {
    period_ns: Nanos(1_000_000),
    resync: false,
    duty: None,
};

fn timer_plan(threads: usize, ms: u64) -> RunPlan {
    let specs: Vec<(&str, Workload, TimerKind, Option<&str>)> = (0..threads)
        .map(|_| ("o:0", TIMER, TimerKind::Hr, Some("1")))
        .collect();
    let mut p = plan_of(&specs);
    p.kind = crate::RunKind::Timer;
    p.duration_ns = Nanos::from_millis(ms);
    for t in &mut p.threads {
        t.finish_ns = p.duration_ns;
    }
    p.cpu_dma_latency_us = Some(0);
    p
}

fn context(base: &std::path::Path, faults: Faults) -> RunContext {
    RunContext {
        command_line: vec!["sandglass".into(), "test".into()],
        tool: Tool {
            name: "sandglass".into(),
            version: "0".into(),
            commit: "test".into(),
        },
        base_dir: base.to_path_buf(),
        faults,
        shared_cpus: None,
    }
}

/// Every setting applied was restored, after everything that ran in between, and every thread
/// created ended.
fn assert_restored(log: &[String]) {
    let pos = |s: &str| log.iter().rposition(|x| x == s);
    for (applied, restored) in [
        ("signals blocked", "signals unblocked"),
        ("pm_qos held", "pm_qos released"),
        ("main placed", "main restored"),
        ("loads started", "loads stopped"),
        ("tracing started", "tracing stopped"),
    ] {
        if let Some(a) = pos(applied) {
            let r = pos(restored).unwrap_or_else(|| panic!("{applied} never undone: {log:?}"));
            assert!(r > a, "{restored} before {applied}: {log:?}");
        }
    }
    let created = log.iter().filter(|x| x.ends_with(" created")).count();
    let ended = log.iter().filter(|x| x.ends_with(" ended")).count();
    assert_eq!(created, ended, "a thread was left running: {log:?}");
    if let (Some(u), Some(last_thread)) = (
        pos("signals unblocked"),
        log.iter().rposition(|x| x.ends_with(" ended")),
    ) {
        assert!(
            u > last_thread,
            "signals unblocked before a thread ended: {log:?}"
        );
    }
}

fn run_with(
    mock: &Mock,
    plan: &RunPlan,
    faults: Faults,
    sink: Counting,
) -> (Result<(Measured, Counting), RunError>, tempfile::TempDir) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ctx = context(tmp.path(), faults);
    let r = measure_with(mock, plan, &ctx, &mut Silent, |_| Ok(sink));
    // The run's results would be written here; then the signals are released.
    let r = r.map(|(mut m, s)| {
        mock.note("results written");
        m.signals = SignalHold::none();
        (m, s)
    });
    (r, tmp)
}

/// The manifest state of the only run under `base`.
fn state_of(base: &std::path::Path) -> RunState {
    let dir = std::fs::read_dir(base)
        .expect("base")
        .filter_map(|e| e.ok())
        .find(|e| e.path().is_dir())
        .expect("a run directory");
    store::RunReader::open_any_state(&dir.path())
        .expect("manifest")
        .manifest
        .state
}

#[test]
fn a_run_measures_and_restores_everything() {
    let mock = Mock::default();
    let (r, _tmp) = run_with(
        &mock,
        &timer_plan(1, 100),
        Faults::default(),
        Counting::default(),
    );
    let (m, sink) = r.expect("run");
    assert_eq!(m.state, RunState::Completed, "{}", m.end_detail);
    // ⌈100 ms / 1 ms⌉ releases, every one streamed to the sink.
    assert_eq!(sink.releases, 100);
    assert!(sink.ticks >= 1);
    assert_eq!(m.reports.len(), 1);
    let out = m.reports[0].outcome.as_ref().expect("outcome");
    assert_eq!(out.samples, 100);
    assert_eq!(out.samples_dropped, 0);
    assert_eq!(m.pm_qos_us, Some(0));
    assert!(!m.memory_locked);
    assert!(m
        .warnings
        .iter()
        .any(|w| w.kind == WarningKind::MemoryNotLocked));
    assert_restored(&mock.log());
}

/// The signals stay blocked until the run's results are written.
#[test]
fn signals_are_released_after_the_results_are_written() {
    let mock = Mock::default();
    let (r, _tmp) = run_with(
        &mock,
        &timer_plan(1, 20),
        Faults::default(),
        Counting::default(),
    );
    r.expect("run");
    let log = mock.log();
    let written = log.iter().position(|x| x == "results written");
    let unblocked = log.iter().position(|x| x == "signals unblocked");
    assert!(written.is_some() && unblocked > written, "{log:?}");
}

#[test]
fn a_thread_that_cannot_be_created_fails_the_run_and_the_others_are_joined() {
    let mock = Mock::failing(Fail {
        spawn: Some(1),
        ..Fail::default()
    });
    let (r, tmp) = run_with(
        &mock,
        &timer_plan(2, 100),
        Faults::default(),
        Counting::default(),
    );
    let e = r.err().expect("fails");
    assert!(matches!(e, RunError::Failed(_)), "{e}");
    assert!(e.to_string().contains("cannot create thread 1"), "{e}");
    let log = mock.log();
    assert!(log.contains(&"thread 0 created".to_string()), "{log:?}");
    assert_restored(&log);
    assert_eq!(state_of(tmp.path()), RunState::Failed);
}

#[test]
fn a_refused_policy_is_a_usage_error_and_nothing_is_left_behind() {
    let mock = Mock::failing(Fail {
        policy: Some(0),
        ..Fail::default()
    });
    let (r, tmp) = run_with(
        &mock,
        &timer_plan(2, 100),
        Faults::default(),
        Counting::default(),
    );
    let e = r.err().expect("fails");
    assert!(matches!(e, RunError::Usage(_)), "{e}");
    assert!(
        e.to_string().contains("thread 0: the kernel refused"),
        "{e}"
    );
    assert_restored(&mock.log());
    assert_eq!(state_of(tmp.path()), RunState::Failed);
}

#[test]
fn signals_that_cannot_be_blocked_fail_before_anything_else() {
    let mock = Mock::failing(Fail {
        block_signals: true,
        ..Fail::default()
    });
    let (r, _tmp) = run_with(
        &mock,
        &timer_plan(1, 100),
        Faults::default(),
        Counting::default(),
    );
    assert!(r
        .err()
        .expect("fails")
        .to_string()
        .contains("pthread_sigmask"));
    assert!(mock.log().is_empty(), "{:?}", mock.log());
}

#[test]
fn a_load_that_cannot_start_leaves_no_thread_and_no_setting() {
    let mock = Mock::failing(Fail {
        loads: true,
        ..Fail::default()
    });
    let mut plan = timer_plan(1, 100);
    plan.loads = LoadPlan {
        specs: vec![crate::load::LoadSpec::parse("cpu").expect("spec")],
        settle_ns: Nanos(0),
    };
    let (r, _tmp) = run_with(&mock, &plan, Faults::default(), Counting::default());
    let e = r.err().expect("fails");
    assert!(e.to_string().contains("cannot start the load"), "{e}");
    assert_restored(&mock.log());
}

#[test]
fn tracing_that_fails_after_it_started_is_undone_with_the_loads() {
    let mock = Mock::default();
    let mut plan = timer_plan(1, 100);
    plan.loads = LoadPlan {
        specs: vec![crate::load::LoadSpec::parse("cpu").expect("spec")],
        settle_ns: Nanos(0),
    };
    plan.trace = Some(TraceOptions::default());
    let faults = Faults {
        fail_after_trace_start: true,
        ..Faults::default()
    };
    let (r, _tmp) = run_with(&mock, &plan, faults, Counting::default());
    let e = r.err().expect("fails");
    assert!(e.to_string().contains("fail-after-trace-start"), "{e}");
    let log = mock.log();
    assert!(log.contains(&"tracing started".to_string()), "{log:?}");
    assert_restored(&log);
    // Tracing that cannot start at all is a usage error, also undone.
    let mock = Mock::failing(Fail {
        tracing: true,
        ..Fail::default()
    });
    let (r, _tmp) = run_with(&mock, &plan, Faults::default(), Counting::default());
    assert!(matches!(r.err().expect("fails"), RunError::Usage(_)));
    assert_restored(&mock.log());
}

#[test]
fn a_store_that_cannot_be_written_ends_the_run_incomplete() {
    let mock = Mock::default();
    let sink = Counting {
        fail_after: Some(10),
        ..Counting::default()
    };
    // A minute's plan: ended by the store's error, it stops long before, however slowly a
    // busy machine runs it.
    let (r, _tmp) = run_with(&mock, &timer_plan(1, 60_000), Faults::default(), sink);
    let (m, _) = r.expect("the run ends with what it measured");
    assert_eq!(m.state, RunState::Incomplete);
    assert!(
        m.end_detail.contains("could not be written"),
        "{}",
        m.end_detail
    );
    assert!(m.store_error.is_some());
    // It stopped long before its minute.
    assert!(m.elapsed_ns() < 30_000_000_000, "{}", m.elapsed_ns());
    assert_restored(&mock.log());
}

#[test]
fn a_signal_stops_the_run_and_keeps_what_was_measured() {
    let mock = Mock::failing(Fail {
        interrupt_after: Some(Duration::from_millis(400)),
        ..Fail::default()
    });
    let (r, _tmp) = run_with(
        &mock,
        &timer_plan(1, 5_000),
        Faults::default(),
        Counting::default(),
    );
    let (m, sink) = r.expect("run");
    assert_eq!(m.state, RunState::Interrupted);
    assert_eq!(m.signal, Some(Stop::Interrupt));
    assert!(m.end_detail.contains("SIGINT"), "{}", m.end_detail);
    assert!(
        sink.releases > 0 && sink.releases < 5_000,
        "{}",
        sink.releases
    );
    assert_restored(&mock.log());
}

/// Ctrl-Z and SIGSTOP: each stop is recorded with its length, announced by a warning, and
/// moves the watchdog later, so that a run stopped past its end completes as any other.
#[test]
fn a_stop_of_the_process_is_recorded_and_does_not_wake_the_watchdog() {
    for tstp in [true, false] {
        let mock = Mock::failing(Fail {
            stop: Some((
                Duration::from_millis(500),
                Duration::from_millis(2_600),
                tstp,
            )),
            ..Fail::default()
        });
        let (r, _tmp) = run_with(
            &mock,
            &timer_plan(1, 800),
            Faults::default(),
            Counting::default(),
        );
        let (m, _) = r.expect("run");
        assert_eq!(m.state, RunState::Completed, "{tstp}: {}", m.end_detail);
        assert_eq!(m.signal, None);
        assert_eq!(m.stops.len(), 1, "{tstp}");
        let s = &m.stops[0];
        let by = if tstp {
            crate::stops::StoppedBy::Sigtstp
        } else {
            crate::stops::StoppedBy::Sigstop
        };
        assert_eq!(s.by, by);
        assert!(
            s.from_ns > 0 && (2_600_000_000..3_600_000_000).contains(&s.length_ns()),
            "{tstp}: {s:?}"
        );
        assert_eq!(s.from_uncertainty_ns == 0, tstp, "{s:?}");
        assert!(m
            .warnings
            .iter()
            .any(|w| w.kind == WarningKind::ProcessStopped && w.message.contains("stopped by")));
        assert!(mock.log().contains(&"stopped".to_string()));
        assert_restored(&mock.log());
    }
}

#[test]
fn a_thread_that_does_not_stop_is_abandoned_by_the_watchdog() {
    let mock = Mock::default();
    let faults = Faults {
        stuck_thread: Some(0),
        ..Faults::default()
    };
    let (r, _tmp) = run_with(&mock, &timer_plan(1, 50), faults, Counting::default());
    let (m, sink) = r.expect("run");
    assert_eq!(m.state, RunState::Watchdog, "{}", m.end_detail);
    assert!(m.end_detail.contains("abandoned"), "{}", m.end_detail);
    assert!(m.reports[0].outcome.is_none());
    // The releases it made before it stuck were still drained.
    assert_eq!(sink.releases, 50);
    let log = mock.log();
    for (a, b) in [
        ("pm_qos held", "pm_qos released"),
        ("main placed", "main restored"),
    ] {
        assert!(
            log.contains(&a.to_string()) && log.contains(&b.to_string()),
            "{log:?}"
        );
    }
}

/// An observer that has learned what it needed ends the run early, complete, with every
/// setting restored.
#[test]
fn an_observer_ends_the_run_early_and_it_is_complete() {
    struct Knows(Vec<u64>);
    impl Observer for Knows {
        fn end_early(&mut self, elapsed: Nanos) -> Option<String> {
            self.0.push(elapsed.0);
            (elapsed >= Nanos::from_secs(2)).then(|| "the answer is known".to_string())
        }
    }
    let mock = Mock::failing(Fail::default());
    let tmp = tempfile::tempdir().expect("tempdir");
    let ctx = context(tmp.path(), Faults::default());
    let mut obs = Knows(Vec::new());
    let r = measure_with(&mock, &timer_plan(1, 10_000), &ctx, &mut obs, |_| {
        Ok(Counting::default())
    });
    let (mut m, sink) = r.expect("run");
    m.signals = SignalHold::none();
    assert_eq!(m.state, RunState::Completed, "{}", m.end_detail);
    assert!(
        m.end_detail.starts_with("ended early after 2")
            && m.end_detail.ends_with(": the answer is known"),
        "{}",
        m.end_detail
    );
    // Asked about once a second, and not after it said so.
    assert_eq!(obs.0.len(), 2, "{:?}", obs.0);
    assert!(m.elapsed_ns() < 5_000_000_000, "{}", m.elapsed_ns());
    assert!(sink.releases > 0);
    assert_restored(&mock.log());
}
