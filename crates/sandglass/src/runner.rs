//! The lifecycle every measurement shares, as rtla has it: check, set up, measure, collect,
//! restore, write. Hourglass, the timer probe and the noise probe are sets of measuring threads
//! that differ in what each thread does; this module runs any such set.
//!
//! 1. Check: choose the counter, place the threads (refusing plans that could starve the
//!    machine), collect the warnings, create the run directory and write a `running` manifest,
//!    so that an unwritable place fails before anything is measured.
//! 2. Set up: block SIGINT and SIGTERM (the main thread receives them synchronously), hold
//!    `/dev/cpu_dma_latency`, calibrate the counter and the gap threshold, lock memory, allocate
//!    and touch the trace buffer, create the threads. Each thread pins itself, applies its
//!    policy (reading it back), creates its timer, touches its buffers and stack, reports, and
//!    waits at a gate. A refused reservation stops the run here with a clear error.
//! 3. Measure: the main thread opens the gate with a common start time and sleeps on its own
//!    CPU, waking every 50 ms to look for signals, report progress and watch the clock. A signal
//!    sets the stop flag and interrupts sleeping threads; past the end plus a grace period, the
//!    watchdog does the same, and a thread that still does not stop is abandoned.
//! 4. Collect and restore: join the threads, take the closing calibration anchor, restore the
//!    main thread's policy and affinity, release PM QoS.
//! 5. Write: the caller turns the [`Measured`] data into its result and files, then
//!    [`Measured::finish`] writes the final manifest.

use crate::causes::tracefs::{KernelTrace, Session, TraceError, TraceOptions};
use crate::clock::{self, Calibration, CounterInfo, CounterKind, CycleClock, RawClock};
use crate::engine::calibrate::{self, GapChoice, LoopHistogram, LoopStats};
use crate::engine::{
    run_thread, Clock, Model, Progress, Record, ThreadOutcome, ThreadPlan, TraceBuffer, Work,
};
use crate::hourglass::cmdline::{HourglassSpec, ThreadSpec};
use crate::hourglass::plan::{self, Placement};
use crate::load::{self, LoadReport, LoadSpec};
use crate::model::{TimerKind, Workload};
use crate::os::{self, AppliedPolicy, OsOps, PolicyFailure};
use crate::store::{self, FileEntry, Manifest, RunDir, RunState, StoreError, Tool};
use crate::system::{self, SystemSnapshot};
use crate::units::Nanos;
use crate::warning::{Warning, WarningKind};
use sandglass_sys::sched::{self, Tid};
use sandglass_sys::signal;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use thiserror::Error;

/// How the run was invoked.
#[derive(Clone, Debug)]
pub struct RunContext {
    pub command_line: Vec<String>,
    pub tool: Tool,
    /// Parent of new run directories when `-o` is not given.
    pub base_dir: PathBuf,
}

impl RunContext {
    /// The manifest of a run just created in `dir`: state running, started now, no files yet.
    pub fn manifest(
        &self,
        dir: &RunDir,
        kind: &str,
        system: SystemSnapshot,
        clock: serde_json::Value,
        config: serde_json::Value,
    ) -> Manifest {
        Manifest {
            schema_version: store::SCHEMA_VERSION,
            id: dir.id().to_string(),
            kind: kind.to_string(),
            tool: self.tool.clone(),
            command_line: self.command_line.clone(),
            state: RunState::Running,
            started_at: store::now_rfc3339(),
            ended_at: None,
            end_detail: None,
            system,
            clock,
            config,
            warnings: Vec::new(),
            files: Vec::new(),
        }
    }
}

/// Receives what the run has to say while it runs (the library itself never prints).
pub trait Observer {
    /// A measurement-quality warning, known before or during setup.
    fn warning(&mut self, _w: &Warning) {}
    /// A line for people: what is about to happen.
    fn note(&mut self, _text: &str) {}
    /// About once a second during the measurement.
    fn progress(&mut self, _elapsed: Nanos, _total: Nanos) {}
    /// About once a second during the measurement: what each thread has seen so far.
    fn live(&mut self, _elapsed: Nanos, _rows: &[LiveRow]) {}
}

/// What one measuring thread has seen so far, for a live display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveRow {
    pub thread: usize,
    /// The CPU it is pinned to, when it is pinned to one.
    pub cpu: Option<usize>,
    /// Wakeups (timer threads) or interruptions (polling threads).
    pub events: u64,
    pub missed: u64,
    pub max_ns: u64,
}

/// An observer that ignores everything.
pub struct Silent;
impl Observer for Silent {}

/// Why a run did not produce a result.
#[derive(Debug, Error)]
pub enum RunError {
    /// The command cannot run as given; the message says how to change it (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// Something failed while running (exit code 1).
    #[error("{0}")]
    Failed(String),
}

/// The environment variable that injects a fault, to test the failure paths end to end:
/// `stuck-thread=N` makes thread N ignore every stop request once its measurement is over, as a
/// thread stuck in the kernel would, so that only the watchdog can end the run.
pub const FAULT_ENV: &str = "SANDGLASS_FAULT";

/// `fail-after-trace-start` makes a run fail once kernel tracing has started, to test that
/// tracing is undone on every path.
fn fault_after_trace_start() -> bool {
    std::env::var(FAULT_ENV).ok().as_deref() == Some("fail-after-trace-start")
}

fn stuck_thread_fault() -> Option<usize> {
    std::env::var(FAULT_ENV)
        .ok()?
        .strip_prefix("stuck-thread=")?
        .parse()
        .ok()
}

/// Loads to run during a measurement: they start after the threads' setup, run `settle_ns`
/// before the measurement starts, and stop as soon as it ends, however it ends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadPlan {
    #[serde(default)]
    pub specs: Vec<LoadSpec>,
    #[serde(default)]
    pub settle_ns: Nanos,
}

impl LoadPlan {
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }
}

/// How long loads settle before a measurement unless told otherwise.
pub const DEFAULT_SETTLE: Nanos = Nanos(2_000_000_000);

/// A set of measuring threads to run, and what to collect.
pub struct Job<'a> {
    /// The run's kind: `hourglass`, `timer`, `noise`.
    pub kind: &'static str,
    pub spec: &'a HourglassSpec,
    /// The kind's own configuration, stored in the manifest beside the thread plan.
    pub config: serde_json::Value,
    /// Collect interruption statistics for polling threads.
    pub gap_stats: bool,
    /// Bytes copied between two polls by CPU-bound threads (oslat's memmove workload).
    pub memmove_bytes: usize,
    /// Loads to run around the measurement.
    pub loads: &'a LoadPlan,
    /// Snapshots per second of the `/proc` counters on the measured CPUs (0: none); taken by the
    /// main thread between its waits.
    pub sample_hz: u32,
    /// Record kernel events on the measured CPUs (`--trace`).
    pub trace: Option<TraceOptions>,
    /// What to do at the first delay above a threshold (`--stop-above`, `--on-threshold`).
    pub threshold: Option<Threshold>,
}

/// An action at a delay above the threshold, as rtla's `--on-threshold`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThresholdAction {
    /// Write a marker into the kernel trace (with `--trace`).
    Mark,
    /// Run a command with `sh -c`; it gets SANDGLASS_DELAY_NS and SANDGLASS_RUN_DIR.
    Shell(String),
    /// Keep measuring instead of stopping.
    Continue,
}

impl ThresholdAction {
    /// Parses `mark`, `shell:CMD` or `continue`.
    pub fn parse(text: &str) -> Result<ThresholdAction, String> {
        match text {
            "mark" => Ok(ThresholdAction::Mark),
            "continue" => Ok(ThresholdAction::Continue),
            _ => match text.strip_prefix("shell:") {
                Some(cmd) if !cmd.trim().is_empty() => Ok(ThresholdAction::Shell(cmd.to_string())),
                _ => Err(format!(
                    "--on-threshold {text}: use mark (a marker in the --trace trace), shell:COMMAND (run it with sh -c) or continue (keep measuring)"
                )),
            },
        }
    }
}

/// A delay threshold and what to do when a measuring thread reports a delay above it (a late
/// wakeup for timer threads, an interruption for polling threads). Without `Continue` among
/// the actions, the run stops there and keeps everything measured, the trace included.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Threshold {
    pub above_ns: Nanos,
    #[serde(default)]
    pub actions: Vec<ThresholdAction>,
}

/// Longest a `shell:` action may run after the measurement before it is killed.
const ACTION_GRACE: Duration = Duration::from_secs(10);

/// What one thread reported from its setup and run.
#[derive(Debug)]
pub struct ThreadReport {
    pub tid: i32,
    pub applied: Option<AppliedPolicy>,
    pub timer_slack_ns: Option<u64>,
    /// CPU time the thread used while it measured (CLOCK_THREAD_CPUTIME_ID).
    pub cpu_time_ns: Option<u64>,
    /// `None` when the thread never returned (the watchdog abandoned it).
    pub outcome: Option<ThreadOutcome>,
    pub error: Option<String>,
}

/// Everything a run measured, before any kind-specific analysis.
pub struct Measured {
    pub dir: RunDir,
    /// The manifest as written before the run (state `running`); [`Measured::finish`]
    /// completes it.
    pub manifest: Manifest,
    pub system: SystemSnapshot,
    pub placement: Placement,
    pub counter: CounterInfo,
    /// The calibration over the whole run.
    pub calibration: Calibration,
    pub gap: GapChoice,
    pub loop_histogram: Option<LoopHistogram>,
    /// The counter value at the run's time zero.
    pub start_tick: u64,
    pub records: Vec<Record>,
    pub trace_capacity: usize,
    pub reports: Vec<ThreadReport>,
    pub state: RunState,
    pub end_detail: String,
    pub warnings: Vec<Warning>,
    pub pm_qos_us: Option<u32>,
    pub memory_locked: bool,
    /// What each load achieved while it ran.
    pub loads: Vec<LoadReport>,
    /// The sampler's snapshots (times in ns from the run's time zero), when it ran.
    pub sampler: Option<crate::causes::sampler::Record>,
    /// The kernel's events on the measured CPUs, with `--trace`.
    pub kernel: Option<KernelTrace>,
    /// The measuring threads' ids.
    pub tids: Vec<i32>,
}

impl Measured {
    /// The `clock` section of the manifest: the counter, its calibration over the run, and the
    /// run's time zero on the counter and on CLOCK_MONOTONIC.
    pub fn clock_json(&self) -> serde_json::Value {
        serde_json::json!({
            "counter": self.counter,
            "calibration": self.calibration,
            "run_start_counter": self.start_tick,
            "run_start_monotonic_ns": self.calibration.to_monotonic(self.start_tick),
            "gap_threshold_ns": self.gap.threshold_ns,
        })
    }

    /// Writes the final manifest, listing `files` and `warnings`.
    pub fn finish(&self, files: Vec<FileEntry>, warnings: &[Warning]) -> Result<(), StoreError> {
        let mut manifest = self.manifest.clone();
        manifest.state = self.state;
        manifest.ended_at = Some(store::now_rfc3339());
        manifest.end_detail = Some(self.end_detail.clone());
        manifest.clock = self.clock_json();
        manifest.warnings = warnings.to_vec();
        manifest.files = files;
        self.dir.write_manifest(&manifest)
    }
}

/// Above this busy share, an SMT sibling of a measured CPU is reported.
const SIBLING_BUSY: f64 = 0.05;

/// Longest a thread may take to report its setup.
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Time between the barrier and the common start, for every thread to reach its first sleep.
const START_MARGIN_NS: u64 = 50_000_000;
/// How long the calibration loop runs.
const CALIBRATION_NS: u64 = 200_000_000;
/// The shortest window over which the counter's rate is measured before a run.
const MIN_WINDOW_NS: u64 = 100_000_000;
/// Largest job log and latency buffer per thread.
const MAX_JOBS: u64 = 2_000_000;
const MAX_LATENCIES: u64 = 10_000_000;

/// Runs the threads of `job` and returns what they measured.
pub fn measure(
    job: &Job<'_>,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<Measured, RunError> {
    let spec = job.spec;
    let sys = system::snapshot();
    let counter = clock::select_counter(spec.counter, &sys.cpu_flags)
        .map_err(|e| RunError::Usage(e.to_string()))?;
    let allowed = system::allowed_cpus();
    let placement = plan::place(spec, &allowed).map_err(RunError::Usage)?;
    if spec.threads.iter().any(|t| t.timer == TimerKind::Rtc) && os::rtc_path().is_none() {
        return Err(RunError::Usage(os::rtc_missing_message()));
    }
    let warnings = plan::pre_run_warnings(spec, &placement, &sys, &counter);
    for w in &warnings {
        obs.warning(w);
    }
    let dir = RunDir::create(spec.output_dir.as_deref(), &ctx.base_dir, job.kind)
        .map_err(|e| RunError::Usage(e.to_string()))?;
    let manifest = Manifest {
        warnings: warnings.clone(),
        ..ctx.manifest(
            &dir,
            job.kind,
            sys.clone(),
            serde_json::json!({ "counter": counter }),
            serde_json::json!({
                "kind": job.config,
                "threads": spec,
                "placement": placement,
            }),
        )
    };
    if let Err(e) = dir.write_manifest(&manifest) {
        // Nothing was measured (a full disk): leave nothing behind, as bench runs do; a
        // directory given with -o is kept.
        if spec.output_dir.is_none() {
            let _ = std::fs::remove_dir_all(dir.path());
        }
        return Err(RunError::Usage(e.to_string()));
    }
    let kind = counter.kind;
    let rdtscp = counter.rdtscp;
    let setup = Setup {
        job,
        spec,
        sys: &sys,
        allowed,
        placement: &placement,
        counter,
        dir,
        manifest,
        warnings,
    };
    match kind {
        CounterKind::Tsc | CounterKind::Cntvct => run_threads(CycleClock { rdtscp }, setup, obs),
        CounterKind::MonotonicRaw => run_threads(RawClock, setup, obs),
    }
}

struct Setup<'a> {
    job: &'a Job<'a>,
    spec: &'a HourglassSpec,
    sys: &'a SystemSnapshot,
    allowed: Vec<usize>,
    placement: &'a Placement,
    counter: CounterInfo,
    dir: RunDir,
    manifest: Manifest,
    warnings: Vec<Warning>,
}

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
}

/// Everything one measuring thread needs.
struct WorkerArgs<C> {
    clock: C,
    spec: ThreadSpec,
    cpus: Vec<usize>,
    privileged: bool,
    model: Model,
    start_offset: u64,
    finish_offset: u64,
    gap: u64,
    check: u64,
    calibration: Calibration,
    jobs_capacity: usize,
    latency_capacity: usize,
    work: Work,
    gap_stats: bool,
    progress: Arc<Progress>,
    ns_per_tick: f64,
    stop: Arc<AtomicBool>,
    start_tick: Arc<AtomicU64>,
    gate: Arc<Gate>,
    tx: mpsc::Sender<SetupReport>,
    trace: Arc<TraceBuffer>,
}

fn worker<C: Clock + Copy>(a: WorkerArgs<C>) -> ThreadReport {
    let tid = sched::gettid();
    let mut problem = None;
    if let Err(e) = sched::set_affinity(Tid::SELF, &a.cpus) {
        problem = Some(format!(
            "cannot pin thread {} to CPUs {:?}: {e}",
            a.spec.index, a.cpus
        ));
    }
    let applied = os::apply_policy(&a.spec.policy, a.privileged);
    let timer = os::make_timer(a.spec.timer);
    if let Err(e) = &timer {
        problem.get_or_insert_with(|| e.clone());
    }
    let mut work = a.work;
    let mut out = ThreadOutcome::with_capacity(a.jobs_capacity, a.latency_capacity);
    if a.gap_stats && a.spec.workload.records_trace() {
        out.gaps = Some(Box::default());
    }
    if matches!(a.spec.workload, Workload::Timer { .. }) {
        out.timer = Some(Box::default());
    }
    os::prefault_stack();
    let slack = sandglass_sys::process::timer_slack_ns();
    let report = SetupReport {
        index: a.spec.index,
        tid: tid.0,
        applied: applied.clone(),
        problem,
    };
    let _ = a.tx.send(report);
    let go = a.gate.wait();
    let base = ThreadReport {
        tid: tid.0,
        applied: applied.ok(),
        timer_slack_ns: slack,
        cpu_time_ns: None,
        outcome: None,
        error: None,
    };
    let timer = match timer {
        Ok(t) if go => t,
        _ => return base,
    };
    let start = a.start_tick.load(Ordering::SeqCst);
    let plan = ThreadPlan {
        thread: a.spec.index as u16,
        model: a.model,
        start: start + a.start_offset,
        finish: start + a.finish_offset,
        gap: a.gap,
        check_interval: a.check,
        ns_per_tick: a.ns_per_tick,
    };
    let mut ops = OsOps::new(a.clock, a.calibration, timer, a.stop.clone());
    let cpu0 = sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::ThreadCpu);
    run_thread(
        &plan,
        &a.clock,
        &mut ops,
        &a.trace,
        &mut work,
        &mut out,
        &a.progress,
    );
    let cpu_time = sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::ThreadCpu) - cpu0;
    std::hint::black_box(&work);
    if stuck_thread_fault() == Some(a.spec.index) {
        loop {
            let _ = sandglass_sys::clock::sleep_for(1_000_000_000);
        }
    }
    ThreadReport {
        outcome: Some(out),
        cpu_time_ns: Some(cpu_time),
        error: ops.error,
        ..base
    }
}

fn model_ticks(w: &Workload, cal: &Calibration) -> Model {
    let t = |n: Nanos| cal.ticks_for_ns(n.0);
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
        Workload::Timer { period_ns, resync } => Model::Release {
            period: t(period_ns),
            resync,
        },
    }
}

/// When a thread stops, in ticks from the run's start. A timer thread on a fixed grid stops
/// after a whole number of periods, each rounded to whole ticks, so that a run of D at interval
/// P has exactly ⌈D/P⌉ releases however the rounding falls.
fn finish_offset(t: &ThreadSpec, cal: &Calibration) -> u64 {
    match t.workload {
        Workload::Timer {
            period_ns,
            resync: false,
        } if period_ns.0 > 0 => {
            let span = t.finish_ns.0.saturating_sub(t.start_ns.0);
            let releases = span.div_ceil(period_ns.0);
            cal.ticks_for_ns(t.start_ns.0) + releases * cal.ticks_for_ns(period_ns.0)
        }
        _ => cal.ticks_for_ns(t.finish_ns.0),
    }
}

/// Buffer sizes for a thread's job log and latency samples.
fn capacities(t: &ThreadSpec) -> (usize, usize) {
    let span = t.finish_ns.0.saturating_sub(t.start_ns.0);
    let per = |p: Nanos| span / p.0.max(1) + 2;
    match t.workload {
        Workload::Periodic { period_ns, .. } => (per(period_ns).min(MAX_JOBS) as usize, 0),
        Workload::CpuPeriodic {
            amount_ns,
            period_ns,
        } => ((per(amount_ns) + per(period_ns)).min(MAX_JOBS) as usize, 0),
        Workload::Lat { period_ns } | Workload::Timer { period_ns, .. } => {
            (0, per(period_ns).min(MAX_LATENCIES) as usize)
        }
        _ => (0, 0),
    }
}

fn calibrate_gap<C: Clock + Copy + Send + 'static>(
    clock: C,
    spec: &HourglassSpec,
    memmove_bytes: usize,
    cpu: usize,
    cal: &Calibration,
) -> (GapChoice, Option<LoopHistogram>) {
    let traced = spec.threads.iter().any(|t| t.workload.records_trace());
    if spec.gap_ns.is_none() && !traced && !spec.gap_histogram {
        return (
            GapChoice {
                threshold_ns: 0,
                source: "unused".to_string(),
                explanation: "no thread makes trace records (LAT only)".to_string(),
                loop_stats: None,
            },
            None,
        );
    }
    if let Some(g) = spec.gap_ns {
        let choice = GapChoice {
            threshold_ns: g.0,
            source: "given".to_string(),
            explanation: format!("given with -g {}", crate::duration::format_exact(g)),
            loop_stats: None,
        };
        if !spec.gap_histogram {
            return (choice, None);
        }
        let (_, hist) = run_calibration(clock, spec, memmove_bytes, cpu, cal);
        return (choice, hist);
    }
    match run_calibration(clock, spec, memmove_bytes, cpu, cal) {
        (Some(stats), hist) => (calibrate::choose_threshold(&stats), hist),
        (None, hist) => (
            GapChoice {
                threshold_ns: 1_000,
                source: "default".to_string(),
                explanation: "the calibration thread could not run; using 1 us".to_string(),
                loop_stats: None,
            },
            hist,
        ),
    }
}

fn run_calibration<C: Clock + Copy + Send + 'static>(
    clock: C,
    spec: &HourglassSpec,
    memmove_bytes: usize,
    cpu: usize,
    cal: &Calibration,
) -> (Option<LoopStats>, Option<LoopHistogram>) {
    // Calibrate with the heaviest work any thread does between two reads.
    let scan_kb = spec
        .threads
        .iter()
        .filter_map(|t| t.workload.scan_kb())
        .max()
        .unwrap_or(0);
    let memmove = memmove_bytes > 0 && spec.threads.iter().any(|t| t.workload == Workload::Cpu);
    let ns_per_tick = cal.ns_per_tick();
    let handle = std::thread::Builder::new()
        .name("sg-calibrate".into())
        .spawn(move || {
            let _ = sched::set_affinity(Tid::SELF, &[cpu]);
            let mut work = if memmove {
                Work::memmove(memmove_bytes)
            } else {
                Work::scan_kb(scan_kb)
            };
            // Estimate the iteration rate, then run for about CALIBRATION_NS.
            let probe = 100_000u64;
            let t0 = sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::Monotonic);
            let _ = calibrate::measure(|| clock.now(), probe, &mut work);
            let dt = sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::Monotonic) - t0;
            let per_iter = (dt as f64 / probe as f64).max(1.0);
            let n = ((CALIBRATION_NS as f64 / per_iter) as u64).clamp(1_000_000, 100_000_000);
            let t1 = sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::Monotonic);
            let hist = calibrate::measure(|| clock.now(), n, &mut work);
            let elapsed =
                sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::Monotonic) - t1;
            let stats =
                LoopStats::from_histogram(&hist, ns_per_tick, elapsed as f64, sched::current_cpu());
            (stats, hist)
        });
    match handle.map(|h| h.join()) {
        Ok(Ok((stats, hist))) => (Some(stats), Some(hist)),
        _ => (None, None),
    }
}

fn run_threads<C: Clock + Copy + Send + 'static>(
    clock: C,
    s: Setup<'_>,
    obs: &mut dyn Observer,
) -> Result<Measured, RunError> {
    let Setup {
        job,
        spec,
        sys,
        allowed,
        placement,
        counter,
        dir,
        mut manifest,
        mut warnings,
    } = s;
    let fail = |dir: &RunDir, manifest: &mut Manifest, msg: String| {
        manifest.state = RunState::Failed;
        manifest.ended_at = Some(store::now_rfc3339());
        manifest.end_detail = Some(msg.clone());
        let _ = dir.write_manifest(manifest);
        RunError::Failed(msg)
    };

    let terminate = [signal::SIGINT, signal::SIGTERM];
    // A caller that already blocks them (a study running many cells) keeps them blocked.
    let caller_blocks = signal::is_blocked(signal::SIGINT) && signal::is_blocked(signal::SIGTERM);
    signal::block(&[signal::SIGINT, signal::SIGTERM, signal::timer_signal()])
        .map_err(|e| fail(&dir, &mut manifest, format!("cannot block signals: {e}")))?;
    signal::install_wake_handler(signal::wake_signal()).map_err(|e| {
        fail(
            &dir,
            &mut manifest,
            format!("cannot install a signal handler: {e}"),
        )
    })?;

    let pm_qos = match spec.cpu_dma_latency_us {
        Some(us) => match os::hold_cpu_dma_latency(us) {
            Ok(h) => Some(h),
            Err(e) => {
                let w = Warning::new(
                    WarningKind::PmQosUnavailable,
                    format!("could not hold /dev/cpu_dma_latency at {us} us ({}): deep idle states may add wakeup latency; run as root, or pass --cpu-dma-latency off to silence this", io_reason(&e)),
                );
                obs.warning(&w);
                warnings.push(w);
                None
            }
        },
        None => None,
    };

    let kind = counter.kind;
    let a0 = clock::anchor(kind);
    let calibration_cpu = placement
        .threads
        .iter()
        .flatten()
        .next()
        .map(|c| c.first())
        .unwrap_or(placement.default_cpu);
    let prelim = Calibration::from_anchors(kind, a0, clock::anchor(kind));
    let (gap, loop_histogram) =
        calibrate_gap(clock, spec, job.memmove_bytes, calibration_cpu, &prelim);
    // The rate used during the run needs a window of at least MIN_WINDOW_NS.
    let elapsed = sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::MonotonicRaw)
        .saturating_sub(a0.monotonic_raw.clock_ns);
    if elapsed < MIN_WINDOW_NS {
        let _ = sandglass_sys::clock::sleep_for(MIN_WINDOW_NS - elapsed);
    }
    let a1 = clock::anchor(kind);
    let cal0 = Calibration::from_anchors(kind, a0, a1);
    if gap.source == "calibrated" {
        obs.note(&format!(
            "gap threshold {} ns ({})",
            gap.threshold_ns, gap.explanation
        ));
    }

    let memory_locked = match os::lock_memory(&sys.privileges) {
        Ok(()) => true,
        Err(msg) => {
            let w = Warning::new(WarningKind::MemoryNotLocked, msg);
            obs.warning(&w);
            warnings.push(w);
            false
        }
    };

    let n = spec.threads.len();
    let trace = Arc::new(TraceBuffer::new(spec.records));
    let stop = Arc::new(AtomicBool::new(false));
    let start_tick = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(Gate::default());
    let (tx, rx) = mpsc::channel();
    let privileged = sys.privileges.euid == 0 || sys.privileges.cap_sys_nice;
    let gap_ticks = cal0.ticks_for_ns(gap.threshold_ns);
    let check = cal0.ticks_for_ns(10_000_000);

    let mut handles = Vec::with_capacity(n);
    let progress: Vec<Arc<Progress>> = (0..n).map(|_| Arc::new(Progress::default())).collect();
    for t in &spec.threads {
        let (jobs_capacity, latency_capacity) = capacities(t);
        let work = match t.workload.scan_kb() {
            Some(kb) => Work::scan_kb(kb),
            None if t.workload == Workload::Cpu => Work::memmove(job.memmove_bytes),
            None => Work::None,
        };
        let args = WorkerArgs {
            clock,
            spec: t.clone(),
            cpus: placement.threads[t.index]
                .as_ref()
                .map(|c| c.to_vec())
                .unwrap_or_else(|| allowed.clone()),
            privileged,
            model: model_ticks(&t.workload, &cal0),
            start_offset: cal0.ticks_for_ns(t.start_ns.0),
            finish_offset: finish_offset(t, &cal0),
            gap: gap_ticks,
            check,
            calibration: cal0,
            jobs_capacity,
            latency_capacity,
            work,
            gap_stats: job.gap_stats,
            progress: progress[t.index].clone(),
            ns_per_tick: cal0.ns_per_tick(),
            stop: stop.clone(),
            start_tick: start_tick.clone(),
            gate: gate.clone(),
            tx: tx.clone(),
            trace: trace.clone(),
        };
        match std::thread::Builder::new()
            .name(format!("sg-{}-{}", job.kind, t.index))
            .spawn(move || worker(args))
        {
            Ok(h) => handles.push(h),
            Err(e) => {
                gate.set(false);
                for h in handles {
                    let _ = h.join();
                }
                return Err(fail(
                    &dir,
                    &mut manifest,
                    format!("cannot create thread {}: {e}", t.index),
                ));
            }
        }
    }
    drop(tx);

    let mut tids = vec![0i32; n];
    let mut problems: Vec<String> = Vec::new();
    let mut applied: Vec<Option<AppliedPolicy>> = vec![None; n];
    let mut admission_failures = Vec::new();
    for _ in 0..n {
        match rx.recv_timeout(SETUP_TIMEOUT) {
            Ok(r) => {
                tids[r.index] = r.tid;
                if let Some(p) = r.problem {
                    problems.push(format!("thread {}: {p}", r.index));
                }
                match r.applied {
                    Ok(a) => {
                        if let Some(msg) = &a.downgraded {
                            let w = Warning::new(
                                WarningKind::PolicyDowngraded,
                                format!("thread {}: {msg}", r.index),
                            );
                            obs.warning(&w);
                            warnings.push(w);
                        }
                        applied[r.index] = Some(a);
                    }
                    Err(PolicyFailure::Admission) => admission_failures.push(r.index),
                    Err(PolicyFailure::Refused(msg)) => {
                        problems.push(format!("thread {}: {msg}", r.index))
                    }
                }
            }
            Err(_) => {
                problems.push("a thread did not finish its setup within 20 s".to_string());
                break;
            }
        }
    }
    for i in admission_failures {
        let held: f64 = applied
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
            &spec.threads[i].policy,
            held,
            allowed.len(),
            sys.rt_runtime_us,
            sys.rt_period_us,
        ));
    }
    if !problems.is_empty() {
        // Every setup problem (a refused policy or reservation, a timer this machine lacks) is
        // answered by changing the command line.
        gate.set(false);
        for h in handles {
            let _ = h.join();
        }
        let msg = problems.join("; ");
        let _ = fail(&dir, &mut manifest, msg.clone());
        return Err(RunError::Usage(msg));
    }

    // Loads start now, with every thread ready, and settle before the measurement starts. A
    // signal while they settle ends the run as soon as it starts.
    let mut early_signal = None;
    let running_loads = if job.loads.is_empty() {
        None
    } else {
        let options = load::LoadOptions::new(allowed.clone());
        match load::start(&job.loads.specs, &options) {
            Ok(r) => {
                obs.note(&format!(
                    "loads running: {}; settling for {}",
                    job.loads
                        .specs
                        .iter()
                        .map(|l| l.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    job.loads.settle_ns
                ));
                if job.loads.settle_ns.0 > 0 {
                    early_signal = signal::wait_timeout(&terminate, job.loads.settle_ns.0);
                }
                Some(r)
            }
            Err(e) => {
                gate.set(false);
                for h in handles {
                    let _ = h.join();
                }
                let msg = format!("cannot start the load: {e}");
                let _ = fail(&dir, &mut manifest, msg.clone());
                return Err(RunError::Usage(msg));
            }
        }
    };

    // Kernel tracing starts with every thread ready and the loads settled.
    let mut tracing = match &job.trace {
        None => None,
        Some(opts) => {
            let started = Session::create(&placement.measured.to_vec(), opts).and_then(|mut t| {
                t.start().map_err(TraceError::Failed)?;
                if fault_after_trace_start() {
                    return Err(TraceError::Failed(format!(
                        "{FAULT_ENV}=fail-after-trace-start: failing with tracing under way"
                    )));
                }
                Ok(t)
            });
            match started {
                Ok(t) => {
                    obs.note(&format!(
                        "tracing kernel events on CPU {} in {}",
                        placement.measured,
                        t.dir().display()
                    ));
                    Some(t)
                }
                Err(e) => {
                    gate.set(false);
                    for h in handles {
                        let _ = h.join();
                    }
                    if let Some(r) = running_loads {
                        r.stop();
                    }
                    let msg = e.to_string();
                    let _ = fail(&dir, &mut manifest, msg.clone());
                    return Err(match e {
                        TraceError::Unavailable(m) => RunError::Usage(m),
                        TraceError::Failed(m) => RunError::Failed(m),
                    });
                }
            }
        }
    };

    // The main thread sleeps on its own CPU, above every measuring thread's priority when a
    // real-time thread could otherwise keep it from ending the run.
    let main_affinity = sched::get_affinity(Tid::SELF).ok();
    let main_attr = sched::get_attr(Tid::SELF).ok();
    if let Some(c) = placement.main_cpu {
        let _ = sched::set_affinity(Tid::SELF, &[c]);
    }
    let raised = spec.threads.iter().any(plan::rt_busy) && privileged;
    if raised {
        let _ = sched::set_attr(
            Tid::SELF,
            &crate::policy::Policy::Fifo { priority: 99 }.to_attr(),
        );
    }

    let siblings = plan::idle_siblings(placement);
    let sibling_times: Vec<Option<system::CpuTimes>> = siblings
        .iter()
        .map(|&(_, s)| system::cpu_times(s))
        .collect();
    let margin = cal0.ticks_for_ns(START_MARGIN_NS);
    let t0 = clock.now() + margin;
    start_tick.store(t0, Ordering::SeqCst);
    obs.note(&format!(
        "measuring {} thread(s) for {} on CPU {}; Ctrl-C stops early and keeps the results",
        n, spec.duration_ns, placement.measured
    ));
    // The loads' throughput counts from here: the settle time is not part of the window.
    if let Some(r) = &running_loads {
        r.mark();
    }
    gate.set(true);

    let duration_ticks = cal0.ticks_for_ns(spec.duration_ns.0);
    let grace_ns = 2_000_000_000 + spec.duration_ns.0 / 20;
    let end_tick = t0 + duration_ticks;
    let watchdog_tick = end_tick + cal0.ticks_for_ns(grace_ns);
    let abandon_tick = watchdog_tick + cal0.ticks_for_ns(2_000_000_000);
    let mut state = RunState::Completed;
    let mut end_detail = "ran for the whole duration".to_string();
    let mut stop_since: Option<u64> = None;
    let mut last_progress = 0u64;
    // The sampler reads /proc on the main thread (a few hundred microseconds a snapshot): only
    // where the main thread has a CPU of its own, so that it never disturbs a measuring thread.
    let sample_every = if job.sample_hz > 0 && placement.main_cpu.is_some() {
        1_000_000_000 / u64::from(job.sample_hz)
    } else {
        0
    };
    let mut sampler = (sample_every > 0).then(|| {
        use crate::causes::sampler::{Proc, Sampler, SamplerSpec};
        let what = SamplerSpec {
            cpus: placement.measured.to_vec(),
            tids: tids.clone(),
        };
        // The run, its grace time and the closing snapshot.
        let capacity = (spec.duration_ns.0 + grace_ns) / sample_every + 4;
        let mut s = Sampler::new(Proc, what, capacity as usize);
        s.sample(cal0.ns_for_ticks(clock.now().saturating_sub(t0)));
        s
    });
    let mut next_sample_ns = sample_every;
    let mut fired_ns = 0u64;
    let mut actions_running: Vec<std::process::Child> = Vec::new();
    loop {
        if handles.iter().all(|h| h.is_finished()) {
            break;
        }
        let sig = early_signal
            .take()
            .or_else(|| signal::wait_timeout(&terminate, 50_000_000));
        let now = clock.now();
        if let Some(sig) = sig {
            if stop_since.is_none() {
                state = RunState::Interrupted;
                let name = if sig == signal::SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                };
                end_detail = format!(
                    "stopped by {name} after {}",
                    Nanos(cal0.ns_for_ticks(now.saturating_sub(t0)))
                );
                stop.store(true, Ordering::SeqCst);
                stop_since = Some(now);
            }
        }
        if stop_since.is_none() && now > watchdog_tick {
            state = RunState::Watchdog;
            end_detail = format!(
                "the watchdog stopped the run: threads were still running {} after its end",
                Nanos(grace_ns)
            );
            stop.store(true, Ordering::SeqCst);
            stop_since = Some(now);
        }
        if let Some(since) = stop_since {
            for (h, &tid) in handles.iter().zip(&tids) {
                if !h.is_finished() && tid > 0 {
                    let _ = signal::send_to_thread(Tid(tid), signal::wake_signal());
                }
            }
            if now > abandon_tick.max(since + cal0.ticks_for_ns(2_000_000_000)) {
                state = RunState::Watchdog;
                end_detail = format!("{end_detail}; a thread did not stop and was abandoned");
                break;
            }
        }
        if let (Some(th), None) = (&job.threshold, stop_since) {
            let worst = progress.iter().map(|p| p.read().2).max().unwrap_or(0);
            if worst > th.above_ns.0 && worst > fired_ns {
                fired_ns = worst;
                let at = Nanos(cal0.ns_for_ticks(now.saturating_sub(t0)));
                let what = format!(
                    "a delay of {} above --stop-above {} at {at}",
                    Nanos(worst),
                    th.above_ns
                );
                for a in &th.actions {
                    match a {
                        ThresholdAction::Mark => {
                            if let Some(t) = &tracing {
                                t.mark(&format!("sandglass: {what}"));
                            }
                        }
                        ThresholdAction::Shell(cmd) => {
                            match std::process::Command::new("sh")
                                .args(["-c", cmd])
                                .env("SANDGLASS_DELAY_NS", worst.to_string())
                                .env("SANDGLASS_RUN_DIR", dir.path())
                                .stdin(std::process::Stdio::null())
                                .spawn()
                            {
                                Ok(c) => actions_running.push(c),
                                Err(e) => {
                                    let w = Warning::new(
                                        WarningKind::LoadFailed,
                                        format!("--on-threshold shell:{cmd} could not start: {e}"),
                                    );
                                    obs.warning(&w);
                                    warnings.push(w);
                                }
                            }
                        }
                        ThresholdAction::Continue => {}
                    }
                }
                obs.note(&what);
                if !th.actions.contains(&ThresholdAction::Continue) {
                    state = RunState::Interrupted;
                    end_detail = format!("stopped at {what}");
                    stop.store(true, Ordering::SeqCst);
                    stop_since = Some(now);
                }
            }
        }
        // The trace is drained as the run goes only from a CPU no measuring thread uses.
        if let (Some(t), Some(_)) = (tracing.as_mut(), placement.main_cpu) {
            t.drain();
        }
        let elapsed_ns = cal0.ns_for_ticks(now.saturating_sub(t0));
        if let Some(s) = sampler.as_mut() {
            if stop_since.is_none() && elapsed_ns >= next_sample_ns {
                s.sample(elapsed_ns);
                next_sample_ns = elapsed_ns - elapsed_ns % sample_every + sample_every;
            }
        }
        if elapsed_ns >= last_progress + 1_000_000_000 && now < end_tick {
            last_progress = elapsed_ns - elapsed_ns % 1_000_000_000;
            obs.progress(Nanos(elapsed_ns), spec.duration_ns);
            let rows: Vec<LiveRow> = progress
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let (events, missed, max_ns) = p.read();
                    let cpu = placement.threads[i]
                        .as_ref()
                        .filter(|c| c.len() == 1)
                        .map(|c| c.first());
                    LiveRow {
                        thread: i,
                        cpu,
                        events,
                        missed,
                        max_ns,
                    }
                })
                .collect();
            obs.live(Nanos(elapsed_ns), &rows);
        }
    }

    // The closing snapshot ends the last interval.
    if let Some(s) = sampler.as_mut() {
        s.sample(cal0.ns_for_ticks(clock.now().saturating_sub(t0)));
    }
    let sampler = sampler.map(|s| s.finish());
    let kernel = tracing.map(|t| t.finish());
    // Threshold commands get a bounded time to finish; none is left behind.
    let deadline = std::time::Instant::now() + ACTION_GRACE;
    for mut c in actions_running {
        while matches!(c.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
            let w = Warning::new(
                WarningKind::LoadFailed,
                format!("an --on-threshold command was still running {} s after the threshold and was killed", ACTION_GRACE.as_secs()),
            );
            obs.warning(&w);
            warnings.push(w);
        }
        let _ = c.wait();
    }

    let reports: Vec<ThreadReport> = handles
        .into_iter()
        .zip(&tids)
        .map(|(h, &tid)| {
            if h.is_finished() {
                h.join().unwrap_or(ThreadReport {
                    tid,
                    applied: None,
                    timer_slack_ns: None,
                    cpu_time_ns: None,
                    outcome: None,
                    error: Some("the thread panicked".to_string()),
                })
            } else {
                ThreadReport {
                    tid,
                    applied: None,
                    timer_slack_ns: None,
                    cpu_time_ns: None,
                    outcome: None,
                    error: Some("the thread did not stop".to_string()),
                }
            }
        })
        .collect();
    // Loads stop with the measurement.
    let load_reports = running_loads.map(|r| r.stop()).unwrap_or_default();
    for r in &load_reports {
        if let Some(e) = &r.error {
            let w = Warning::new(
                WarningKind::LoadFailed,
                format!("load {} did not run as asked: {e}", r.spec),
            );
            obs.warning(&w);
            warnings.push(w);
        }
    }
    let a2 = clock::anchor(kind);
    let calibration = Calibration::from_anchors(kind, a0, a2);
    // A sibling busy with the run's own load is what the load is for.
    let siblings_checked = if load_reports.is_empty() {
        &siblings[..]
    } else {
        &[]
    };
    for (&(cpu, sib), before) in siblings_checked.iter().zip(&sibling_times) {
        let busy = before
            .as_ref()
            .zip(system::cpu_times(sib))
            .and_then(|(b, a)| b.busy_share(&a));
        if let Some(share) = busy.filter(|&b| b > SIBLING_BUSY) {
            warnings.push(Warning::new(
                WarningKind::SmtSibling,
                format!("CPU {sib}, which shares a core with measured CPU {cpu} (SMT), was busy {:.0}% of the run: its work slows the measured thread and shows as false gaps and latency; keep it idle or take it offline (echo 0 > /sys/devices/system/cpu/cpu{sib}/online)", share * 100.0),
            ));
        }
    }

    if raised {
        if let Some(attr) = main_attr {
            let _ = sched::set_attr(Tid::SELF, &attr);
        }
    }
    if let Some(aff) = main_affinity {
        let _ = sched::set_affinity(Tid::SELF, &aff);
    }
    let pm_qos_us = pm_qos.as_ref().map(|p| p.value_us);
    drop(pm_qos);
    // Take any signal that arrived after the wait loop, then let later ones act normally,
    // unless the caller blocked them itself.
    while signal::wait_timeout(&terminate, 0).is_some() {
        if state == RunState::Completed {
            state = RunState::Interrupted;
            end_detail = "stopped by a signal at the end of the run".to_string();
        }
    }
    if !caller_blocks {
        let _ = signal::unblock(&terminate);
    }

    let records = trace.records();
    Ok(Measured {
        dir,
        manifest,
        system: sys.clone(),
        placement: placement.clone(),
        counter,
        calibration,
        gap,
        loop_histogram,
        start_tick: t0,
        records,
        trace_capacity: spec.records,
        reports,
        state,
        end_detail,
        warnings,
        pm_qos_us,
        memory_locked,
        loads: load_reports,
        sampler,
        kernel,
        tids,
    })
}

/// An I/O error's reason without std's "(os error N)" suffix.
fn io_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => sandglass_sys::Errno(n).to_string(),
        None => e.to_string(),
    }
}

/// Runs the loads of `plan` alone for `duration` (after its settle time), as a control for what
/// a measurement costs them. SIGINT and SIGTERM end it early, keeping what the loads did.
pub fn run_loads_alone(
    plan: &LoadPlan,
    duration: Nanos,
    obs: &mut dyn Observer,
) -> Result<(RunState, String, Vec<LoadReport>), RunError> {
    let terminate = [signal::SIGINT, signal::SIGTERM];
    let caller_blocks = signal::is_blocked(signal::SIGINT) && signal::is_blocked(signal::SIGTERM);
    signal::block(&terminate)
        .map_err(|e| RunError::Failed(format!("cannot block signals: {e}")))?;
    let result = loads_alone_blocked(plan, duration, obs);
    if !caller_blocks {
        let _ = signal::unblock(&terminate);
    }
    result
}

fn loads_alone_blocked(
    plan: &LoadPlan,
    duration: Nanos,
    obs: &mut dyn Observer,
) -> Result<(RunState, String, Vec<LoadReport>), RunError> {
    let terminate = [signal::SIGINT, signal::SIGTERM];
    let options = load::LoadOptions::new(system::allowed_cpus());
    let running = load::start(&plan.specs, &options)
        .map_err(|e| RunError::Usage(format!("cannot start the load: {e}")))?;
    let signal_name = |sig| {
        if sig == signal::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        }
    };
    if plan.settle_ns.0 > 0 {
        if let Some(sig) = signal::wait_timeout(&terminate, plan.settle_ns.0) {
            let reports = running.stop();
            return Ok((
                RunState::Interrupted,
                format!("stopped by {} while the loads settled", signal_name(sig)),
                reports,
            ));
        }
    }
    obs.note(&format!(
        "running the loads alone for {duration}; Ctrl-C stops early and keeps what they did"
    ));
    // The settle time is excluded from the loads' throughput: only the measured window counts.
    running.mark();
    let start = sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::Monotonic);
    let mut state = RunState::Completed;
    let mut detail = "ran for the whole duration".to_string();
    let mut last = 0u64;
    loop {
        let elapsed =
            sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::Monotonic) - start;
        if elapsed >= duration.0 {
            break;
        }
        let step = (duration.0 - elapsed).min(100_000_000);
        if let Some(sig) = signal::wait_timeout(&terminate, step) {
            state = RunState::Interrupted;
            detail = format!("stopped by {} after {}", signal_name(sig), Nanos(elapsed));
            break;
        }
        if elapsed >= last + 1_000_000_000 {
            last = elapsed - elapsed % 1_000_000_000;
            obs.progress(Nanos(elapsed), duration);
        }
    }
    Ok((state, detail, running.stop()))
}
