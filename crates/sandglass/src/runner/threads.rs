//! Stage 4: the measuring threads, from their creation to their reports, and the rings the main
//! thread drains while they run.

use super::host::{Host, ThreadReportParts};
use super::{Calibrated, Observer, Prepared, RunError, Sink, ThreadReport, Timebase};
use crate::engine::ring::{ring, Consumer};
use crate::engine::{
    run_thread, Clock, JobRecord, LatSample, Model, Outputs, Progress, Record, Release,
    ThreadOutcome, ThreadPlan, Work,
};
use crate::model::Workload;
use crate::os::{self, AppliedPolicy, OsOps, PolicyFailure};
use crate::plan::{Faults, ThreadSpec};
use crate::store::StoreError;
use crate::system::{self, CpuTimes};
use crate::warning::{Warning, WarningKind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest a thread may take to report its setup.
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Time between the gate and the common start, for every thread to reach its first sleep.
const START_MARGIN_NS: u64 = 50_000_000;
/// Items moved from a ring per batch.
const BATCH: usize = 1 << 14;
/// The least a ring holds, and the seconds of samples a timer thread's ring holds: how long
/// the main thread may fall behind before samples are lost.
const RING_MIN: usize = 4096;
const RING_SECONDS: u64 = 4;
const RING_MAX: usize = 1 << 22;

/// The start gate: threads wait at it after their setup until the main thread opens it with
/// `true` (go) or `false` (abort). Unlike a barrier it works whatever number of threads were
/// actually created.
#[derive(Default)]
struct Gate {
    open: Mutex<Option<bool>>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) -> bool {
        let mut g = match self.open.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        loop {
            if let Some(go) = *g {
                return go;
            }
            g = match self.cv.wait(g) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
    }
    fn set(&self, go: bool) {
        let mut g = match self.open.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *g = Some(go);
        self.cv.notify_all();
    }
}

/// What a thread reports after its setup, before the gate.
struct SetupReport {
    index: usize,
    tid: i32,
    applied: Result<AppliedPolicy, PolicyFailure>,
    problem: Option<String>,
    slack: Option<u64>,
}

/// The main thread's ends of one thread's rings.
#[derive(Default)]
struct Streams {
    records: Option<Consumer<Record>>,
    releases: Option<Consumer<Release>>,
    lat: Option<Consumer<LatSample>>,
    jobs: Option<Consumer<JobRecord>>,
}

/// Buffers the rings are drained into, allocated once.
struct Scratch {
    records: Vec<Record>,
    releases: Vec<Release>,
    lat: Vec<LatSample>,
    jobs: Vec<JobRecord>,
}

/// The measuring threads of a run.
pub(crate) struct Threads<'h, H: Host> {
    host: &'h H,
    handles: Vec<Option<JoinHandle<ThreadReportParts>>>,
    pub tids: Vec<i32>,
    applied: Vec<Option<AppliedPolicy>>,
    slack: Vec<Option<u64>>,
    pub progress: Vec<Arc<Progress>>,
    streams: Vec<Streams>,
    scratch: Scratch,
    stop: Arc<AtomicBool>,
    gate: Arc<Gate>,
    start_tick: Arc<AtomicU64>,
    /// The SMT siblings of the measured CPUs, with their busy time when the run started.
    siblings: Vec<(usize, usize, Option<CpuTimes>)>,
    /// The CPU each thread is pinned to, when it is pinned to one.
    pub cpus: Vec<Option<usize>>,
    joined: bool,
}

/// The thread model in counter ticks.
fn model_ticks(w: &Workload, tb: &Timebase) -> Model {
    let t = |n: crate::units::Nanos| tb.ticks(n.0);
    match *w {
        Workload::Cpu | Workload::CpuScan { .. } => Model::Cpu,
        Workload::CpuYield { amount_ns } | Workload::CpuScanYield { amount_ns, .. } => {
            Model::Yield {
                amount: t(amount_ns),
            }
        }
        Workload::Periodic {
            amount_ns,
            period_ns,
        } => Model::Periodic {
            amount: t(amount_ns),
            period: t(period_ns),
        },
        Workload::CpuPeriodic {
            amount_ns,
            period_ns,
        } => Model::CpuPeriodic {
            amount: t(amount_ns),
            period: t(period_ns),
        },
        Workload::Lat { period_ns } => Model::Lat {
            period: t(period_ns),
        },
        Workload::Timer {
            period_ns,
            resync,
            duty,
        } => Model::Release {
            period: t(period_ns),
            resync,
            // Windows counted in whole periods where they can be, so that rounding to ticks
            // never adds a release: a window holds ⌈on / period⌉ of them, and a cycle that is
            // a multiple of the period stays on the release grid to the run's end.
            duty: duty.map(|d| {
                let p = period_ns.0.max(1);
                let every =
                    d.every_ns.0 / p * t(period_ns) + t(crate::units::Nanos(d.every_ns.0 % p));
                // `timer::validate` refuses a window longer than its cycle; a window is never
                // longer than its cycle here either, so windows never overlap.
                crate::engine::Duty {
                    on: (d.on_ns.0.div_ceil(p) * t(period_ns)).min(every),
                    every,
                }
            }),
        },
    }
}

/// When a thread stops, in ticks from the run's start. A timer thread on a fixed grid stops
/// after a whole number of periods, each rounded to whole ticks, so that a run of D at interval
/// P has exactly ⌈D/P⌉ releases however the rounding falls.
fn finish_offset(t: &ThreadSpec, tb: &Timebase) -> u64 {
    match t.workload {
        Workload::Timer {
            period_ns,
            resync: false,
            ..
        } if period_ns.0 > 0 => {
            let span = t.finish_ns.0.saturating_sub(t.start_ns.0);
            let releases = span.div_ceil(period_ns.0);
            tb.ticks(t.start_ns.0) + releases * tb.ticks(period_ns.0)
        }
        _ => tb.ticks(t.finish_ns.0),
    }
}

/// A ring size for a thread that makes an item every `period` (at least [`RING_MIN`]).
fn ring_for_period(period_ns: u64) -> usize {
    let per_s = 1_000_000_000 / period_ns.max(1);
    ((per_s * RING_SECONDS) as usize).clamp(RING_MIN, RING_MAX)
}

/// The thread's rings: producers for the thread, consumers for the main thread.
fn rings(t: &ThreadSpec, record_share: usize) -> (Outputs, Streams) {
    let mut o = Outputs::default();
    let mut s = Streams::default();
    if t.workload.records_trace() {
        let (p, c) = ring(record_share);
        o.records = Some(p);
        s.records = Some(c);
    }
    match t.workload {
        Workload::Timer { period_ns, .. } => {
            let (p, c) = ring(ring_for_period(period_ns.0));
            o.releases = Some(p);
            s.releases = Some(c);
        }
        Workload::Lat { period_ns } => {
            let (p, c) = ring(ring_for_period(period_ns.0));
            o.lat = Some(p);
            s.lat = Some(c);
        }
        Workload::Periodic { period_ns, .. } | Workload::CpuPeriodic { period_ns, .. } => {
            let (p, c) = ring(ring_for_period(period_ns.0));
            o.jobs = Some(p);
            s.jobs = Some(c);
        }
        _ => {}
    }
    (o, s)
}

/// Everything one measuring thread needs.
struct WorkerArgs<C> {
    clock: C,
    spec: ThreadSpec,
    cpus: Vec<usize>,
    privileged: bool,
    plan: ThreadPlan,
    start_offset: u64,
    finish_offset: u64,
    calibration: crate::clock::Calibration,
    work: Work,
    outcome: ThreadOutcome,
    progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
    start_tick: Arc<AtomicU64>,
    gate: Arc<Gate>,
    tx: mpsc::Sender<SetupReport>,
    stuck: bool,
}

fn worker<H: Host, C: Clock + Copy>(host: H, a: WorkerArgs<C>) -> ThreadReportParts {
    let setup = host.setup_thread(
        a.spec.index,
        &a.cpus,
        &a.spec.policy,
        a.spec.timer,
        a.privileged,
    );
    let mut problem = setup.problem;
    if let Err(e) = &setup.timer {
        problem.get_or_insert_with(|| e.to_string());
    }
    let _ = a.tx.send(SetupReport {
        index: a.spec.index,
        tid: setup.tid,
        applied: setup.policy,
        problem,
        slack: setup.timer_slack_ns,
    });
    let go = a.gate.wait();
    let mut out = a.outcome;
    let timer = match setup.timer {
        Ok(t) if go => t,
        _ => {
            return ThreadReportParts {
                outcome: out,
                cpu_time_ns: None,
                error: None,
            }
        }
    };
    let start = a.start_tick.load(Ordering::SeqCst);
    let plan = ThreadPlan {
        start: start + a.start_offset,
        finish: start + a.finish_offset,
        ..a.plan
    };
    let mut work = a.work;
    let mut ops = OsOps::new(a.clock, a.calibration, timer, a.stop.clone());
    let thread_cpu = || sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::ThreadCpu);
    let cpu0 = thread_cpu();
    run_thread(&plan, &a.clock, &mut ops, &mut work, &mut out, &a.progress);
    let cpu_time = thread_cpu() - cpu0;
    std::hint::black_box(&work);
    if a.stuck {
        loop {
            let _ = sandglass_sys::clock::sleep_for(1_000_000_000);
        }
    }
    ThreadReportParts {
        outcome: out,
        cpu_time_ns: Some(cpu_time),
        error: ops.error,
    }
}

impl<'h, H: Host> Threads<'h, H> {
    /// Creates the threads of `p` and waits for each to report its setup. Any problem (a refused
    /// policy or reservation, a timer this machine lacks, a thread that could not be created)
    /// stops here: the gate opens with `false` and every thread created is joined.
    pub fn start<C: Clock + Copy + Send + Sync + 'static>(
        host: &'h H,
        clock: C,
        p: &Prepared<'_>,
        cal: &Calibrated,
        faults: &Faults,
        obs: &mut dyn Observer,
    ) -> Result<Self, RunError> {
        let n = p.plan.threads.len();
        let tb = cal.before.timebase(0);
        let gap = tb.ticks(cal.gap.threshold_ns);
        let check = tb.ticks(10_000_000);
        let pollers = p
            .plan
            .threads
            .iter()
            .filter(|t| t.workload.records_trace())
            .count()
            .max(1);
        let record_share = (p.plan.ring_records / pollers).clamp(RING_MIN, RING_MAX);
        let (tx, rx) = mpsc::channel();
        let mut t = Threads {
            host,
            handles: Vec::with_capacity(n),
            tids: vec![0; n],
            applied: vec![None; n],
            slack: vec![None; n],
            progress: (0..n).map(|_| Arc::new(Progress::default())).collect(),
            streams: Vec::with_capacity(n),
            scratch: Scratch {
                records: Vec::with_capacity(BATCH),
                releases: Vec::with_capacity(BATCH),
                lat: Vec::with_capacity(BATCH),
                jobs: Vec::with_capacity(BATCH),
            },
            stop: Arc::new(AtomicBool::new(false)),
            gate: Arc::new(Gate::default()),
            start_tick: Arc::new(AtomicU64::new(0)),
            siblings: Vec::new(),
            cpus: p
                .placement
                .threads
                .iter()
                .map(|c| c.as_ref().filter(|c| c.len() == 1).map(|c| c.first()))
                .collect(),
            joined: false,
        };
        for spec in &p.plan.threads {
            let (outputs, streams) = rings(spec, record_share);
            t.streams.push(streams);
            let mut outcome = ThreadOutcome::new(outputs);
            if p.plan.gap_stats && spec.workload.records_trace() {
                outcome.gaps = Some(Box::default());
            }
            if matches!(spec.workload, Workload::Timer { .. }) {
                outcome.timer = Some(Box::default());
            }
            let args = WorkerArgs {
                clock,
                spec: spec.clone(),
                cpus: p.placement.threads[spec.index]
                    .as_ref()
                    .map(|c| c.to_vec())
                    .unwrap_or_else(|| p.allowed.clone()),
                privileged: p.privileged(),
                plan: ThreadPlan {
                    thread: spec.index as u16,
                    model: model_ticks(&spec.workload, &tb),
                    start: 0,
                    finish: 0,
                    gap,
                    check_interval: check,
                    timebase: tb,
                },
                start_offset: tb.ticks(spec.start_ns.0),
                finish_offset: finish_offset(spec, &tb),
                calibration: cal.before,
                work: match spec.workload.scan_kb() {
                    Some(kb) => Work::scan_kb(kb),
                    None if spec.workload == Workload::Cpu => Work::memmove(p.plan.memmove_bytes),
                    None => Work::None,
                },
                outcome,
                progress: t.progress[spec.index].clone(),
                stop: t.stop.clone(),
                start_tick: t.start_tick.clone(),
                gate: t.gate.clone(),
                tx: tx.clone(),
                stuck: faults.stuck_thread == Some(spec.index),
            };
            let h = host.clone();
            let name = format!("sg-{}-{}", p.plan.kind, spec.index);
            match host.spawn(spec.index, name, Box::new(move || worker(h, args))) {
                Ok(handle) => t.handles.push(Some(handle)),
                Err(e) => {
                    return Err(RunError::Failed(format!(
                        "cannot create thread {}: {e} (lower -n, or raise the limit on threads: ulimit -u)",
                        spec.index
                    )))
                }
            }
        }
        drop(tx);
        t.collect_setup(rx, p, obs)?;
        t.siblings = crate::plan::idle_siblings(&p.placement)
            .into_iter()
            .map(|(cpu, sib)| (cpu, sib, system::cpu_times(sib)))
            .collect();
        Ok(t)
    }

    fn collect_setup(
        &mut self,
        rx: mpsc::Receiver<SetupReport>,
        p: &Prepared<'_>,
        obs: &mut dyn Observer,
    ) -> Result<(), RunError> {
        let n = self.handles.len();
        let mut problems: Vec<String> = Vec::new();
        let mut admission = Vec::new();
        for _ in 0..n {
            let Ok(r) = rx.recv_timeout(SETUP_TIMEOUT) else {
                problems.push("a thread did not finish its setup within 20 s".to_string());
                break;
            };
            self.tids[r.index] = r.tid;
            self.slack[r.index] = r.slack;
            if let Some(pr) = r.problem {
                problems.push(format!("thread {}: {pr}", r.index));
            }
            match r.applied {
                Ok(a) => {
                    if let Some(msg) = &a.downgraded {
                        let w = Warning::new(
                            WarningKind::PolicyDowngraded,
                            format!("thread {}: {msg}", r.index),
                        );
                        obs.warning(&w);
                    }
                    self.applied[r.index] = Some(a);
                }
                Err(PolicyFailure::Admission) => admission.push(r.index),
                Err(PolicyFailure::Refused(msg)) => {
                    problems.push(format!("thread {}: {msg}", r.index))
                }
            }
        }
        for i in admission {
            let held: f64 = self
                .applied
                .iter()
                .flatten()
                .filter_map(|a| match a.effective {
                    Some(crate::policy::Policy::Deadline {
                        runtime_ns,
                        period_ns,
                        ..
                    }) => Some(runtime_ns.0 as f64 / period_ns.0 as f64 * 100.0),
                    _ => None,
                })
                .sum();
            problems.push(os::admission_message(
                i,
                &p.plan.threads[i].policy,
                held,
                p.allowed.len(),
                p.sys.rt_runtime_us,
                p.sys.rt_period_us,
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            // Every setup problem is answered by changing the command line.
            Err(RunError::Usage(problems.join("; ")))
        }
    }

    /// The policy downgrade warnings, for the result.
    pub fn downgrades(&self) -> Vec<Warning> {
        self.applied
            .iter()
            .enumerate()
            .filter_map(|(i, a)| {
                let msg = a.as_ref()?.downgraded.as_ref()?;
                Some(Warning::new(
                    WarningKind::PolicyDowngraded,
                    format!("thread {i}: {msg}"),
                ))
            })
            .collect()
    }

    /// Opens the gate: the run's time zero is a margin from now, so that every thread reaches
    /// its first sleep before it. Returns the counter value of time zero.
    pub fn open_gate<C: Clock>(&self, clock: C, cal: &Calibrated) -> u64 {
        let t0 = clock.now() + cal.before.ticks_for_ns(START_MARGIN_NS);
        self.start_tick.store(t0, Ordering::SeqCst);
        self.gate.set(true);
        t0
    }

    pub fn all_finished(&self) -> bool {
        self.handles
            .iter()
            .all(|h| h.as_ref().is_none_or(|h| h.is_finished()))
    }

    /// Asks every thread to stop, and interrupts those that sleep.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for (h, &tid) in self.handles.iter().zip(&self.tids) {
            if h.as_ref().is_some_and(|h| !h.is_finished()) {
                self.host.wake(tid);
            }
        }
    }

    /// Stops and joins every thread (a run that failed before its measurement).
    pub fn stop_all(&mut self) {
        self.gate.set(false);
        self.request_stop();
        let _ = self.join();
    }

    /// Moves everything the threads sent into `sink`.
    pub fn drain_all<S: Sink>(&mut self, sink: &mut S, tb: &Timebase) -> Result<(), StoreError> {
        let sc = &mut self.scratch;
        for (i, s) in self.streams.iter_mut().enumerate() {
            if let Some(c) = s.releases.as_mut() {
                loop {
                    sc.releases.clear();
                    if c.drain(&mut sc.releases, BATCH) == 0 {
                        break;
                    }
                    sink.releases(i, &sc.releases, tb)?;
                }
            }
            if let Some(c) = s.records.as_mut() {
                loop {
                    sc.records.clear();
                    if c.drain(&mut sc.records, BATCH) == 0 {
                        break;
                    }
                    sink.records(i, &sc.records, tb)?;
                }
            }
            if let Some(c) = s.lat.as_mut() {
                loop {
                    sc.lat.clear();
                    if c.drain(&mut sc.lat, BATCH) == 0 {
                        break;
                    }
                    sink.lat(i, &sc.lat, tb)?;
                }
            }
            if let Some(c) = s.jobs.as_mut() {
                loop {
                    sc.jobs.clear();
                    if c.drain(&mut sc.jobs, BATCH) == 0 {
                        break;
                    }
                    sink.jobs(i, &sc.jobs, tb)?;
                }
            }
        }
        Ok(())
    }

    /// Joins the threads that finished; a thread that did not is abandoned (reported).
    pub fn join(&mut self) -> Vec<ThreadReport> {
        self.joined = true;
        let mut out = Vec::with_capacity(self.handles.len());
        for (i, slot) in self.handles.iter_mut().enumerate() {
            let base = |error: &str| ThreadReport {
                tid: self.tids[i],
                applied: self.applied[i].clone(),
                timer_slack_ns: self.slack[i],
                cpu_time_ns: None,
                outcome: None,
                error: Some(error.to_string()),
            };
            let report = match slot.take() {
                Some(h) if h.is_finished() => match h.join() {
                    Ok(parts) => ThreadReport {
                        tid: self.tids[i],
                        applied: self.applied[i].clone(),
                        timer_slack_ns: self.slack[i],
                        cpu_time_ns: parts.cpu_time_ns,
                        outcome: Some(parts.outcome),
                        error: parts.error,
                    },
                    Err(_) => base("the thread panicked"),
                },
                Some(_) => base("the thread did not stop"),
                None => base("the thread was not created"),
            };
            out.push(report);
        }
        out
    }

    /// Each idle SMT sibling of a measured CPU with the share of the run it was busy.
    pub fn busy_siblings(&self) -> Vec<(usize, usize, f64)> {
        self.siblings
            .iter()
            .filter_map(|(cpu, sib, before)| {
                let after = system::cpu_times(*sib)?;
                let share = before.as_ref()?.busy_share(&after)?;
                Some((*cpu, *sib, share))
            })
            .collect()
    }
}

impl<H: Host> Drop for Threads<'_, H> {
    fn drop(&mut self) {
        if !self.joined {
            // A failed setup: release the threads from the gate and join those that end.
            self.gate.set(false);
            self.stop.store(true, Ordering::SeqCst);
            for h in self.handles.iter_mut() {
                if let Some(h) = h.take() {
                    let _ = h.join();
                }
            }
        }
    }
}
