//! The lifecycle every measurement shares, as rtla has it, one function per stage.
//!
//! 1. [`prepare`]: choose the counter, place the threads (refusing plans that could starve the
//!    machine), collect the warnings, create the run directory and write a `running` manifest,
//!    so that an unwritable place fails before anything is measured.
//! 2. [`Settings::apply`]: block SIGINT, SIGTERM and SIGHUP (the main thread receives them
//!    synchronously), hold `/dev/cpu_dma_latency`, lock memory. Dropping the settings restores
//!    them, on every path.
//! 3. [`calibrate`]: calibrate the counter and the gap threshold; the [`Timebase`] follows.
//! 4. [`threads::Threads::start`]: create the threads. Each pins itself, applies its policy
//!    (reading it back), creates its timer, touches its stack, reports, and waits at a gate. A
//!    refused policy or reservation stops the run here with a clear error, and every thread
//!    created is joined.
//! 5. [`extras::Extras::start`]: start the loads (they settle before the measurement) and kernel
//!    tracing; dropping them stops both.
//! 6. [`supervise::supervise`]: open the gate with a common start time; the main thread sleeps
//!    on its own CPU, waking ten times a second to take signals, watch the clock and the
//!    thresholds, drain the threads' rings into the probe's [`Sink`] (which streams them to the
//!    run's store), sample `/proc` and report progress. A signal sets the stop flag and
//!    interrupts sleeping threads; past the end plus a grace period the watchdog does the same,
//!    and a thread that still does not stop is abandoned. A store that cannot be written (a full
//!    disk) stops the run too, keeping what was written.
//! 7. [`collect`]: join the threads, drain what is left, stop loads and tracing, take the
//!    closing calibration anchor; then the settings are restored.
//!
//! The probe then turns the [`Measured`] data and its sink into its result and files, and
//! [`Measured::finish`] writes the final manifest. The operating system is reached only through
//! [`host::Host`], which the unit tests replace.

#[cfg(feature = "linux")]
pub mod host;
pub mod streams;
#[cfg(feature = "linux")]
mod supervise;
#[cfg(feature = "linux")]
mod threads;

#[cfg(test)]
mod tests;

use crate::engine::{JobRecord, LatSample, Record, Release};
use crate::plan::{Faults, Placement, RunPlan};
use crate::store::{StoreError, Tool};
use crate::units::Nanos;
use crate::warning::Warning;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use thiserror::Error;
#[cfg(feature = "linux")]
use {
    crate::causes::sampler::Digest,
    crate::causes::tracefs::KernelTrace,
    crate::clock::{self, Anchor, Calibration, CounterInfo, CounterKind, CycleClock, RawClock},
    crate::engine::calibrate::{self, GapChoice, LoopHistogram, LoopStats},
    crate::engine::{Clock, ThreadOutcome, Work},
    crate::load::LoadReport,
    crate::model::{TimerKind, Workload},
    crate::os::{self, AppliedPolicy},
    crate::plan::{self, LoadPlan},
    crate::store::{self, FileEntry, Manifest, RunDir, RunState},
    crate::system::{self, SystemSnapshot},
    crate::warning::WarningKind,
    host::{Host, MainThread, RealHost},
    sandglass_sys::sched::{self, Tid},
};

pub use crate::causes::sampler::SpikeAt;
pub use crate::clock::Timebase;
pub use crate::plan::{Threshold, ThresholdAction, DEFAULT_SETTLE};

/// How the run was invoked.
#[derive(Clone, Debug)]
pub struct RunContext {
    pub command_line: Vec<String>,
    pub tool: Tool,
    /// Parent of new run directories when no output directory is given.
    pub base_dir: PathBuf,
    /// Failures to inject (tests of the failure paths).
    pub faults: Faults,
    /// The measured CPUs' locks ([`crate::cpulock`]): `Some(false)` refuses CPUs another
    /// sandglass is measuring, `Some(true)` measures them with a warning (`--shared-cpus`),
    /// `None` takes no lock (tests that run in one process).
    pub shared_cpus: Option<bool>,
}

impl RunContext {
    /// The manifest of a run just created in `dir`: state running, started now, no files yet.
    #[cfg(feature = "linux")]
    pub fn manifest(
        &self,
        dir: &RunDir,
        kind: &crate::RunKind,
        system: SystemSnapshot,
        clock: serde_json::Value,
        config: serde_json::Value,
    ) -> Manifest {
        Manifest {
            schema_version: store::SCHEMA_VERSION,
            id: dir.id().to_string(),
            kind: kind.clone(),
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
    /// About once a second during the measurement: `Some(why)` ends the run early, complete,
    /// because what it set out to learn is already known (`sandglass check`).
    fn end_early(&mut self, _elapsed: Nanos) -> Option<String> {
        None
    }
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

/// Where a probe's samples go as the run goes: the main thread hands every batch it drains from
/// a thread's ring to the sink, then calls [`Sink::tick`]. The sink converts ticks with the
/// [`Timebase`] it is given, writes the run's tables and keeps running figures. An error stops
/// the run (what was written stays).
pub trait Sink {
    /// Releases of timer thread `thread`, in its order.
    fn releases(
        &mut self,
        _thread: usize,
        _batch: &[Release],
        _tb: &Timebase,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    /// Execution intervals of polling thread `thread`, in its order.
    fn records(
        &mut self,
        _thread: usize,
        _batch: &[Record],
        _tb: &Timebase,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    /// Wakeups of LAT thread `thread`.
    fn lat(
        &mut self,
        _thread: usize,
        _batch: &[LatSample],
        _tb: &Timebase,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    /// Jobs of periodic thread `thread`.
    fn jobs(
        &mut self,
        _thread: usize,
        _batch: &[JobRecord],
        _tb: &Timebase,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    /// After each drain: the run has reached `now_ns`, and no record that starts before counter
    /// value `watermark` will arrive any more.
    fn tick(&mut self, _now_ns: u64, _watermark: u64, _tb: &Timebase) -> Result<(), StoreError> {
        Ok(())
    }
    /// Moves the spikes found since the last call into `out`, for the sampler's explanation.
    fn spikes(&mut self, _out: &mut Vec<SpikeAt>) {}
}

/// What a sink is made from, once the run directory exists and the counter is calibrated.
pub struct SinkSetup<'a> {
    pub dir: &'a Path,
    pub plan: &'a RunPlan,
    pub placement: &'a Placement,
    pub timebase: Timebase,
    /// The wall-clock time of the run's time zero, within a few milliseconds.
    pub started: SystemTime,
}

/// What one thread reported from its setup and run.
#[cfg(feature = "linux")]
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
#[cfg(feature = "linux")]
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
    /// The conversion the run's samples were stored with.
    pub timebase: Timebase,
    pub gap: GapChoice,
    pub loop_histogram: Option<LoopHistogram>,
    /// The counter value at the run's time zero.
    pub start_tick: u64,
    pub reports: Vec<ThreadReport>,
    pub state: RunState,
    pub end_detail: String,
    /// The signal that ended the run (SIGINT, SIGTERM, SIGHUP), when one did.
    pub signal: Option<host::Stop>,
    /// Stops of the process while it measured (Ctrl-Z, SIGSTOP, a debugger).
    pub stops: Vec<crate::stops::ProcessStop>,
    pub warnings: Vec<Warning>,
    pub pm_qos_us: Option<u32>,
    pub memory_locked: bool,
    /// What each load achieved while it ran.
    pub loads: Vec<LoadReport>,
    /// The sampler's digest (times in ns from the run's time zero), when it ran.
    pub sampler: Option<Digest>,
    /// The kernel's events on the measured CPUs, with `--trace`.
    pub kernel: Option<KernelTrace>,
    /// The measuring threads' ids.
    pub tids: Vec<i32>,
    /// Why the store could not be written, when that ended the run.
    pub store_error: Option<StoreError>,
    /// The wall-clock time of the run's time zero.
    pub started: SystemTime,
    /// From the run's start to the last counter value any thread read.
    pub elapsed_ns: u64,
    /// The signals that end a run stay blocked until the run's files are written.
    pub signals: SignalHold,
}

/// Keeps the signals that end a run (SIGINT, SIGTERM, SIGHUP) blocked until dropped, so that a signal that arrives while a run's
/// results are written cannot end the process half-way; a signal that arrived meanwhile is
/// taken when it is dropped (the run is over by then).
#[cfg(feature = "linux")]
pub struct SignalHold(Option<Box<dyn FnOnce() + Send>>);

#[cfg(feature = "linux")]
impl SignalHold {
    /// A hold that does nothing when dropped.
    pub fn none() -> SignalHold {
        SignalHold(None)
    }

    /// Blocks the signals that end a run now, until the hold is dropped (unless the caller had blocked
    /// them already): for a run that writes its own files, from its first to its last.
    pub fn block() -> Result<SignalHold, RunError> {
        let host = RealHost;
        let caller = host
            .block_signals()
            .map_err(|e| RunError::Failed(e.to_string()))?;
        if caller {
            return Ok(SignalHold::none());
        }
        Ok(SignalHold(Some(Box::new(move || {
            while host.wait_signal(0).is_some() {}
            host.unblock_signals();
        }))))
    }
}

#[cfg(feature = "linux")]
impl Drop for SignalHold {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

#[cfg(feature = "linux")]
impl Measured {
    /// The exact attribution of `spikes` (per CPU, times from the run's start) from the run's
    /// kernel trace, when it has one.
    pub fn attribute(
        &self,
        spikes: &[crate::causes::CpuSpikes],
    ) -> Option<crate::causes::KernelCauses> {
        let k = self.kernel.as_ref()?;
        let map = self.calibration.clock_map(self.start_tick);
        crate::causes::attribute_run(self.dir.path(), k, map, &self.tids, spikes)
    }

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

    /// Elapsed time from the run's start to the last counter value any thread read.
    pub fn elapsed_ns(&self) -> u64 {
        self.elapsed_ns
    }

    /// Writes the final manifest, listing `files` and `warnings`.
    pub fn finish(&self, files: Vec<FileEntry>, warnings: &[Warning]) -> Result<(), StoreError> {
        self.finish_as(self.state, &self.end_detail, files, warnings)
    }

    /// Writes the final manifest with state `state` and `detail`.
    pub fn finish_as(
        &self,
        state: RunState,
        detail: &str,
        files: Vec<FileEntry>,
        warnings: &[Warning],
    ) -> Result<(), StoreError> {
        let mut manifest = self.manifest.clone();
        manifest.state = state;
        manifest.ended_at = Some(store::now_rfc3339());
        manifest.end_detail = Some(detail.to_string());
        manifest.clock = self.clock_json();
        manifest.warnings = warnings.to_vec();
        manifest.files = files;
        self.dir.write_manifest(&manifest)
    }

    /// Marks the run incomplete because its store could not be written: what `detail` says.
    pub fn store_failed(&mut self, detail: String) {
        self.state = RunState::Incomplete;
        self.end_detail = detail;
    }
}

/// Above this busy share, an SMT sibling of a measured CPU is reported.
#[cfg(feature = "linux")]
const SIBLING_BUSY: f64 = 0.05;
/// The shortest window over which the counter's rate is measured before a run.
#[cfg(feature = "linux")]
const MIN_WINDOW_NS: u64 = 100_000_000;
/// How long the calibration loop runs.
#[cfg(feature = "linux")]
const CALIBRATION_NS: u64 = 200_000_000;

/// Runs `plan` on the real operating system; `make_sink` makes the probe's sink once the run
/// directory exists and the counter is calibrated.
#[cfg(feature = "linux")]
pub fn measure<S: Sink>(
    plan: &RunPlan,
    ctx: &RunContext,
    obs: &mut dyn Observer,
    make_sink: impl FnOnce(&SinkSetup<'_>) -> Result<S, StoreError>,
) -> Result<(Measured, S), RunError> {
    measure_with(&RealHost, plan, ctx, obs, make_sink)
}

/// [`measure`] with the operating system `host`.
#[cfg(feature = "linux")]
pub fn measure_with<H: Host, S: Sink>(
    host: &H,
    plan: &RunPlan,
    ctx: &RunContext,
    obs: &mut dyn Observer,
    make_sink: impl FnOnce(&SinkSetup<'_>) -> Result<S, StoreError>,
) -> Result<(Measured, S), RunError> {
    let p = prepare(host, plan, ctx, obs)?;
    match p.counter.kind {
        CounterKind::Tsc | CounterKind::Cntvct => {
            let rdtscp = p.counter.rdtscp;
            run(host, CycleClock { rdtscp }, p, ctx, obs, make_sink)
        }
        CounterKind::MonotonicRaw => run(host, RawClock, p, ctx, obs, make_sink),
    }
}

/// What the first stage settled.
#[cfg(feature = "linux")]
pub(crate) struct Prepared<'a> {
    plan: &'a RunPlan,
    sys: SystemSnapshot,
    allowed: Vec<usize>,
    placement: Placement,
    counter: CounterInfo,
    dir: RunDir,
    manifest: Manifest,
    warnings: Vec<Warning>,
    /// The measured CPUs' locks, held until the run ends.
    _cpu_locks: crate::cpulock::CpuLocks,
}

#[cfg(feature = "linux")]
impl Prepared<'_> {
    /// Marks the run failed with `msg` (best effort: the directory may be unwritable) and
    /// returns the error.
    fn fail(&mut self, err: RunError) -> RunError {
        self.manifest.state = RunState::Failed;
        self.manifest.ended_at = Some(store::now_rfc3339());
        self.manifest.end_detail = Some(err.to_string());
        let _ = self.dir.write_manifest(&self.manifest);
        err
    }

    fn privileged(&self) -> bool {
        self.sys.privileges.euid == 0 || self.sys.privileges.cap_sys_nice
    }
}

/// Stage 1: check the plan, place the threads, create the run directory.
#[cfg(feature = "linux")]
fn prepare<'a, H: Host>(
    host: &H,
    plan: &'a RunPlan,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<Prepared<'a>, RunError> {
    let sys = system::snapshot();
    let counter = clock::select_counter(plan.counter, &sys.cpu_flags)
        .map_err(|e| RunError::Usage(e.to_string()))?;
    let allowed = host.allowed_cpus();
    let placement = plan::place(plan, &allowed).map_err(|e| RunError::Usage(e.to_string()))?;
    if plan.threads.iter().any(|t| t.timer == TimerKind::Rtc) && os::rtc_path().is_none() {
        return Err(RunError::Usage(
            os::TimerError::Rtc(os::RtcUnusable::Missing).to_string(),
        ));
    }
    let mut warnings = plan::pre_run_warnings(plan, &placement, &sys, &counter);
    let (cpu_locks, shared_with) = match ctx.shared_cpus {
        Some(shared) => crate::cpulock::acquire(
            &placement.measured.to_vec(),
            shared,
            &ctx.command_line.join(" "),
        )
        .map_err(|e| RunError::Usage(e.to_string()))?,
        None => Default::default(),
    };
    if !shared_with.is_empty() {
        warnings.push(Warning::new(
            WarningKind::CpusShared,
            format!(
                "--shared-cpus: another sandglass was measuring {} when this run started; each run counts the other's work as noise",
                shared_with
                    .iter()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    for w in &warnings {
        obs.warning(w);
    }
    let dir = RunDir::create(
        plan.output_dir.as_deref(),
        &ctx.base_dir,
        plan.kind.as_str(),
    )
    .map_err(|e| RunError::Usage(e.to_string()))?;
    let manifest = Manifest {
        warnings: warnings.clone(),
        ..ctx.manifest(
            &dir,
            &plan.kind,
            sys.clone(),
            serde_json::json!({ "counter": counter }),
            serde_json::json!({
                "kind": plan.config,
                "threads": plan.threads,
                "placement": placement,
            }),
        )
    };
    if let Err(e) = dir.write_manifest(&manifest) {
        // Nothing was measured (a full disk): leave nothing behind; a directory given with -o
        // is kept.
        if plan.output_dir.is_none() {
            let _ = std::fs::remove_dir_all(dir.path());
        }
        return Err(RunError::Failed(format!(
            "cannot start the run: {e} (free some space or choose another place with -o)"
        )));
    }
    Ok(Prepared {
        plan,
        sys,
        allowed,
        placement,
        counter,
        dir,
        manifest,
        warnings,
        _cpu_locks: cpu_locks,
    })
}

/// Stage 2: the settings a run holds, restored when dropped.
#[cfg(feature = "linux")]
pub(crate) struct Settings<'h, H: Host> {
    host: &'h H,
    caller_blocks: bool,
    pm_qos_us: Option<u32>,
    memory_locked: bool,
    main: Option<MainThread>,
}

#[cfg(feature = "linux")]
impl<'h, H: Host> Settings<'h, H> {
    fn apply(host: &'h H, p: &mut Prepared<'_>, obs: &mut dyn Observer) -> Result<Self, RunError> {
        let caller_blocks = host
            .block_signals()
            .map_err(|e| p.fail(RunError::Failed(e.to_string())))?;
        let mut s = Settings {
            host,
            caller_blocks,
            pm_qos_us: None,
            memory_locked: false,
            main: None,
        };
        if let Some(us) = p.plan.cpu_dma_latency_us {
            match host.hold_pm_qos(us) {
                Ok(()) => s.pm_qos_us = Some(us),
                Err(e) => warn(
                    obs,
                    &mut p.warnings,
                    WarningKind::PmQosUnavailable,
                    format!("could not hold /dev/cpu_dma_latency at {us} us ({}): deep idle states may add wakeup latency; run as root, or pass --cpu-dma-latency off to silence this", e.reason),
                ),
            }
        }
        match host.lock_memory(&p.sys.privileges) {
            Ok(()) => s.memory_locked = true,
            Err(e) => warn(
                obs,
                &mut p.warnings,
                WarningKind::MemoryNotLocked,
                e.to_string(),
            ),
        }
        Ok(s)
    }

    /// Hands the unblocking of the signals over to the returned hold (the run's results are
    /// still to be written).
    fn hold_signals(&mut self) -> SignalHold {
        if self.caller_blocks {
            return SignalHold::none();
        }
        self.caller_blocks = true;
        let host = self.host.clone();
        SignalHold(Some(Box::new(move || {
            while host.wait_signal(0).is_some() {}
            host.unblock_signals();
        })))
    }

    /// Moves the main thread to its CPU, above every measuring thread's priority when a
    /// real-time thread could otherwise keep it from ending the run.
    fn place_main(&mut self, p: &Prepared<'_>) {
        self.main = Some(self.host.main_thread());
        let fifo = p.plan.threads.iter().any(plan::rt_busy) && p.privileged();
        self.host.place_main_thread(p.placement.main_cpu, fifo);
    }
}

#[cfg(feature = "linux")]
impl<H: Host> Drop for Settings<'_, H> {
    fn drop(&mut self) {
        if let Some(m) = self.main.take() {
            self.host.restore_main_thread(&m);
        }
        if self.pm_qos_us.is_some() {
            self.host.release_pm_qos();
        }
        if !self.caller_blocks {
            self.host.unblock_signals();
        }
    }
}

#[cfg(feature = "linux")]
fn warn(obs: &mut dyn Observer, list: &mut Vec<Warning>, kind: WarningKind, msg: String) {
    let w = Warning::new(kind, msg);
    obs.warning(&w);
    list.push(w);
}

/// What stage 3 measured.
#[cfg(feature = "linux")]
pub(crate) struct Calibrated {
    kind: CounterKind,
    first: Anchor,
    /// The calibration before the run.
    before: Calibration,
    gap: GapChoice,
    loop_histogram: Option<LoopHistogram>,
}

/// Stage 3: the counter's rate and the gap threshold.
#[cfg(feature = "linux")]
fn calibrate<C: Clock + Copy + Send + 'static>(
    clock: C,
    p: &Prepared<'_>,
    obs: &mut dyn Observer,
) -> Calibrated {
    let kind = p.counter.kind;
    let a0 = clock::anchor(kind);
    let cpu = p
        .placement
        .threads
        .iter()
        .flatten()
        .next()
        .map(|c| c.first())
        .unwrap_or(p.placement.default_cpu);
    let prelim = Calibration::from_anchors(kind, a0, clock::anchor(kind));
    let (gap, loop_histogram) = calibrate_gap(clock, p.plan, cpu, &prelim);
    // The rate used during the run needs a window of at least MIN_WINDOW_NS.
    let elapsed = sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::MonotonicRaw)
        .saturating_sub(a0.monotonic_raw.clock_ns);
    if elapsed < MIN_WINDOW_NS {
        let _ = sandglass_sys::clock::sleep_for(MIN_WINDOW_NS - elapsed);
    }
    let before = Calibration::from_anchors(kind, a0, clock::anchor(kind));
    if gap.source == "calibrated" {
        obs.note(&format!(
            "gap threshold {} ns ({})",
            gap.threshold_ns, gap.explanation
        ));
    }
    Calibrated {
        kind,
        first: a0,
        before,
        gap,
        loop_histogram,
    }
}

#[cfg(feature = "linux")]
fn calibrate_gap<C: Clock + Copy + Send + 'static>(
    clock: C,
    plan: &RunPlan,
    cpu: usize,
    cal: &Calibration,
) -> (GapChoice, Option<LoopHistogram>) {
    let traced = plan.threads.iter().any(|t| t.workload.records_trace());
    if plan.gap_ns.is_none() && !traced && !plan.gap_histogram {
        let unused = GapChoice {
            threshold_ns: 0,
            source: "unused".to_string(),
            explanation: "no thread makes trace records (LAT and timer threads only)".to_string(),
            loop_stats: None,
        };
        return (unused, None);
    }
    if let Some(g) = plan.gap_ns {
        let choice = GapChoice {
            threshold_ns: g.0,
            source: "given".to_string(),
            explanation: format!("given with -g {}", crate::duration::format_exact(g)),
            loop_stats: None,
        };
        if !plan.gap_histogram {
            return (choice, None);
        }
        let (_, hist) = run_calibration(clock, plan, cpu, cal);
        return (choice, hist);
    }
    match run_calibration(clock, plan, cpu, cal) {
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

#[cfg(feature = "linux")]
fn run_calibration<C: Clock + Copy + Send + 'static>(
    clock: C,
    plan: &RunPlan,
    cpu: usize,
    cal: &Calibration,
) -> (Option<LoopStats>, Option<LoopHistogram>) {
    // Calibrate with the heaviest work any thread does between two reads.
    let scan_kb = plan
        .threads
        .iter()
        .filter_map(|t| t.workload.scan_kb())
        .max()
        .unwrap_or(0);
    let memmove_bytes = plan.memmove_bytes;
    let memmove = memmove_bytes > 0 && plan.threads.iter().any(|t| t.workload == Workload::Cpu);
    let ns_per_tick = cal.ns_per_tick();
    let handle = std::thread::Builder::new()
        .name("sg-calibrate".into())
        .spawn(move || {
            use sandglass_sys::clock::{now_ns, ClockId::Monotonic};
            let _ = sched::set_affinity(Tid::SELF, &[cpu]);
            let mut work = if memmove {
                Work::memmove(memmove_bytes)
            } else {
                Work::scan_kb(scan_kb)
            };
            // Estimate the iteration rate, then run for about CALIBRATION_NS.
            let probe = 100_000u64;
            let t0 = now_ns(Monotonic);
            let _ = calibrate::measure(|| clock.now(), probe, &mut work);
            let per_iter = ((now_ns(Monotonic) - t0) as f64 / probe as f64).max(1.0);
            let n = ((CALIBRATION_NS as f64 / per_iter) as u64).clamp(1_000_000, 100_000_000);
            let t1 = now_ns(Monotonic);
            let hist = calibrate::measure(|| clock.now(), n, &mut work);
            let elapsed = now_ns(Monotonic) - t1;
            let stats =
                LoopStats::from_histogram(&hist, ns_per_tick, elapsed as f64, sched::current_cpu());
            (stats, hist)
        });
    match handle.map(|h| h.join()) {
        Ok(Ok((stats, hist))) => (Some(stats), Some(hist)),
        _ => (None, None),
    }
}

/// Stages 2 to 7 with counter `clock`.
#[cfg(feature = "linux")]
fn run<H: Host, C: Clock + Copy + Send + Sync + 'static, S: Sink>(
    host: &H,
    clock: C,
    mut p: Prepared<'_>,
    ctx: &RunContext,
    obs: &mut dyn Observer,
    make_sink: impl FnOnce(&SinkSetup<'_>) -> Result<S, StoreError>,
) -> Result<(Measured, S), RunError> {
    let mut settings = Settings::apply(host, &mut p, obs)?;
    let cal = calibrate(clock, &p, obs);
    let mut threads = match threads::Threads::start(host, clock, &p, &cal, &ctx.faults, obs) {
        Ok(t) => t,
        Err(e) => return Err(p.fail(e)),
    };
    let mut extras = match extras::Extras::start(host, &p, &threads, &ctx.faults, obs) {
        Ok(x) => x,
        Err(e) => return Err(p.fail(e)),
    };
    settings.place_main(&p);
    obs.note(&format!(
        "measuring {} thread(s) for {} on CPU {}; Ctrl-C stops early and keeps the results",
        p.plan.threads.len(),
        p.plan.duration_ns,
        p.placement.measured
    ));
    // The loads' throughput counts from here: the settle time is not part of the window.
    if let Some(l) = &extras.loads {
        l.mark();
    }
    let zero = threads.open_gate(clock, &cal);
    let timebase = cal.before.timebase(zero);
    let started = SystemTime::now()
        + std::time::Duration::from_nanos(
            cal.before.ns_for_ticks(zero.saturating_sub(clock.now())),
        );
    let setup = SinkSetup {
        dir: p.dir.path(),
        plan: p.plan,
        placement: &p.placement,
        timebase,
        started,
    };
    let mut sink = match make_sink(&setup) {
        Ok(s) => s,
        Err(e) => {
            threads.stop_all();
            return Err(p.fail(RunError::Failed(format!(
                "cannot create the run's store: {e} (free some space or choose another place with -o)"
            ))));
        }
    };
    let sup = supervise::supervise(
        host,
        clock,
        &p,
        &cal,
        timebase,
        &mut threads,
        &mut extras,
        &mut sink,
        obs,
    );
    // The measuring is over: what is left to write may use the space held back.
    p.dir.release_reserve();
    let mut collected = collect(host, &cal, threads, extras, obs, sup, &mut sink);
    collected.pm_qos_us = settings.pm_qos_us;
    collected.memory_locked = settings.memory_locked;
    let signals = settings.hold_signals();
    drop(settings);
    let mut measured = collected.into_measured(p);
    measured.started = started;
    measured.signals = signals;
    Ok((measured, sink))
}

#[cfg(feature = "linux")]
mod extras {
    //! Stage 5: loads and kernel tracing beside the measurement.
    use super::host::{Host, Loads, Tracing};
    use super::threads::Threads;
    use super::{Observer, Prepared, RunError};
    use crate::causes::tracefs::TraceError;
    use crate::plan::Faults;

    /// Loads and tracing, stopped when dropped.
    pub(crate) struct Extras {
        pub loads: Option<Box<dyn Loads>>,
        pub tracing: Option<Box<dyn Tracing>>,
        /// A signal that arrived while the loads settled.
        pub early_signal: Option<super::host::Stop>,
    }

    impl Extras {
        /// Starts the loads (they settle before the measurement; a signal meanwhile ends the
        /// run as soon as it starts), then kernel tracing, with every thread ready.
        pub fn start<H: Host>(
            host: &H,
            p: &Prepared<'_>,
            threads: &Threads<'_, H>,
            faults: &Faults,
            obs: &mut dyn Observer,
        ) -> Result<Extras, RunError> {
            let _ = threads;
            let mut x = Extras {
                loads: None,
                tracing: None,
                early_signal: None,
            };
            let plan = &p.plan.loads;
            let settled = super::host::start_loads(host, plan, &p.allowed, |ns| {
                obs.note(&format!(
                    "loads running: {}; settling for {}",
                    plan.specs
                        .iter()
                        .map(|l| l.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    plan.settle_ns
                ));
                (ns > 0).then(|| host.wait_signal(ns)).flatten()
            })
            .map_err(|e| RunError::Usage(format!("cannot start the load: {e}")))?;
            if let Some(s) = settled {
                x.loads = Some(s.loads);
                x.early_signal = s.settle_ended;
            }
            if let Some(opts) = &p.plan.trace {
                let mut t = host
                    .start_tracing(&p.placement.measured.to_vec(), opts)
                    .map_err(|e| match e {
                        TraceError::Unavailable(m) => RunError::Usage(m),
                        TraceError::Failed(m) => RunError::Failed(m),
                    })?;
                obs.note(&format!(
                    "tracing kernel events on CPU {} in {}",
                    p.placement.measured,
                    t.dir().display()
                ));
                let kept = t.keep_in(p.dir.path());
                x.tracing = Some(t);
                if let Err(e) = kept {
                    return Err(RunError::Failed(format!(
                        "--trace: cannot write the kernel's events into the run: {e} (free some space, or choose another place with -o)"
                    )));
                }
                if faults.fail_after_trace_start {
                    return Err(RunError::Failed(
                        "SANDGLASS_FAULT=fail-after-trace-start: failing with tracing under way"
                            .to_string(),
                    ));
                }
            }
            Ok(x)
        }
    }

    impl Drop for Extras {
        fn drop(&mut self) {
            if let Some(l) = self.loads.take() {
                l.stop();
            }
            if let Some(t) = self.tracing.take() {
                t.finish().remove_spill();
            }
        }
    }
}

/// What the supervision loop ended with.
#[cfg(feature = "linux")]
pub(crate) struct Supervised {
    /// The run time the loop reached.
    elapsed_ns: u64,
    /// The signal that ended the run, when one did.
    signal: Option<host::Stop>,
    /// Stops of the process while it measured.
    stops: Vec<crate::stops::ProcessStop>,
    state: RunState,
    end_detail: String,
    timebase: Timebase,
    sampler: Option<Digest>,
    store_error: Option<StoreError>,
    warnings: Vec<Warning>,
}

/// What stage 7 gathered.
#[cfg(feature = "linux")]
pub(crate) struct Collected {
    elapsed_ns: u64,
    calibration: Calibration,
    timebase: Timebase,
    gap: GapChoice,
    loop_histogram: Option<LoopHistogram>,
    start_tick: u64,
    reports: Vec<ThreadReport>,
    state: RunState,
    end_detail: String,
    signal: Option<host::Stop>,
    stops: Vec<crate::stops::ProcessStop>,
    warnings: Vec<Warning>,
    pm_qos_us: Option<u32>,
    memory_locked: bool,
    loads: Vec<LoadReport>,
    sampler: Option<Digest>,
    kernel: Option<KernelTrace>,
    tids: Vec<i32>,
    store_error: Option<StoreError>,
}

#[cfg(feature = "linux")]
impl Collected {
    fn into_measured(self, p: Prepared<'_>) -> Measured {
        let mut warnings = p.warnings;
        warnings.extend(self.warnings);
        Measured {
            dir: p.dir,
            manifest: p.manifest,
            system: p.sys,
            placement: p.placement,
            counter: p.counter,
            calibration: self.calibration,
            timebase: self.timebase,
            gap: self.gap,
            loop_histogram: self.loop_histogram,
            start_tick: self.start_tick,
            reports: self.reports,
            state: self.state,
            end_detail: self.end_detail,
            signal: self.signal,
            stops: self.stops,
            warnings,
            pm_qos_us: self.pm_qos_us,
            memory_locked: self.memory_locked,
            loads: self.loads,
            sampler: self.sampler,
            kernel: self.kernel,
            tids: self.tids,
            store_error: self.store_error,
            started: SystemTime::UNIX_EPOCH,
            elapsed_ns: self.elapsed_ns,
            signals: SignalHold::none(),
        }
    }
}

/// Stage 7: join the threads and drain what they left, stop loads and tracing, close the
/// calibration, check the SMT siblings.
#[cfg(feature = "linux")]
#[allow(clippy::too_many_arguments)]
fn collect<H: Host, S: Sink>(
    host: &H,
    cal: &Calibrated,
    mut threads: threads::Threads<'_, H>,
    mut extras: extras::Extras,
    obs: &mut dyn Observer,
    sup: Supervised,
    sink: &mut S,
) -> Collected {
    let mut warnings = sup.warnings;
    warnings.extend(threads.downgrades());
    let mut store_error = sup.store_error;
    let reports = threads.join();
    // What the threads sent after the last drain; no record can arrive any more.
    if store_error.is_none() {
        let moved = threads
            .drain_all(sink, &sup.timebase)
            .and_then(|()| sink.tick(sup.elapsed_ns, u64::MAX, &sup.timebase));
        if let Err(e) = moved {
            store_error = Some(e);
        }
    }
    let kernel = extras.tracing.take().map(|t| t.finish());
    let loads = extras.loads.take().map(|l| l.stop()).unwrap_or_default();
    for r in &loads {
        if let Some(e) = &r.error {
            warn(
                obs,
                &mut warnings,
                WarningKind::LoadFailed,
                format!("load {} did not run as asked: {e}", r.spec),
            );
        }
    }
    let calibration = Calibration::from_anchors(cal.kind, cal.first, clock::anchor(cal.kind));
    // A sibling busy with the run's own load is what the load is for.
    if loads.is_empty() {
        for (cpu, sib, share) in threads.busy_siblings() {
            if share > SIBLING_BUSY {
                warnings.push(Warning::new(
                    WarningKind::SmtSibling,
                    format!("CPU {sib}, which shares a core with measured CPU {cpu} (SMT), was busy {:.0}% of the run: its work slows the measured thread and shows as false gaps and latency; keep it idle or take it offline (echo 0 > /sys/devices/system/cpu/cpu{sib}/online)", share * 100.0),
                ));
            }
        }
    }
    let mut state = sup.state;
    let mut end_detail = sup.end_detail;
    let mut signal = sup.signal;
    // A signal that arrived after the loop ends the run as interrupted.
    while let Some(sig) = host.wait_signal(0) {
        if state == RunState::Completed {
            state = RunState::Interrupted;
            signal = Some(sig);
            end_detail = format!("stopped by {} at the end of the run", sig.name());
        }
    }
    let elapsed_ns = reports
        .iter()
        .filter_map(|r| r.outcome.as_ref())
        .filter(|o| o.last > sup.timebase.zero)
        .map(|o| sup.timebase.at_ns(o.last).max(0) as u64)
        .max()
        .unwrap_or(0);
    Collected {
        elapsed_ns,
        calibration,
        timebase: sup.timebase,
        gap: cal.gap.clone(),
        loop_histogram: cal.loop_histogram.clone(),
        start_tick: sup.timebase.zero,
        tids: threads.tids.clone(),
        reports,
        state,
        end_detail,
        signal,
        stops: sup.stops,
        warnings,
        pm_qos_us: None,
        memory_locked: false,
        loads,
        sampler: sup.sampler,
        kernel,
        store_error,
    }
}

/// Runs the loads of `plan` alone for `duration` (after its settle time), as a control for what
/// a measurement costs them. SIGINT, SIGTERM and SIGHUP end it early, keeping what the loads did.
#[cfg(feature = "linux")]
pub fn run_loads_alone(
    plan: &LoadPlan,
    duration: Nanos,
    obs: &mut dyn Observer,
) -> Result<(RunState, String, Vec<LoadReport>), RunError> {
    loads_alone_with(&RealHost, plan, duration, obs)
}

#[cfg(feature = "linux")]
fn loads_alone_with<H: Host>(
    host: &H,
    plan: &LoadPlan,
    duration: Nanos,
    obs: &mut dyn Observer,
) -> Result<(RunState, String, Vec<LoadReport>), RunError> {
    let caller_blocks = host
        .block_signals()
        .map_err(|e| RunError::Failed(e.to_string()))?;
    let result = (|| {
        let settled = host::start_loads(host, plan, &host.allowed_cpus(), |ns| {
            (ns > 0).then(|| host.wait_signal(ns)).flatten()
        })
        .map_err(|e| RunError::Usage(format!("cannot start the load: {e}")))?;
        let running = match settled {
            Some(host::Settled {
                loads,
                settle_ended: Some(sig),
            }) => {
                return Ok((
                    RunState::Interrupted,
                    format!("stopped by {} while the loads settled", sig.name()),
                    loads.stop(),
                ));
            }
            Some(s) => s.loads,
            // An empty plan: nothing runs, and the control still lasts its duration.
            None => host
                .start_loads(plan, &host.allowed_cpus())
                .map_err(|e| RunError::Usage(format!("cannot start the load: {e}")))?,
        };
        obs.note(&format!(
            "running the loads alone for {duration}; Ctrl-C stops early and keeps what they did"
        ));
        // The settle time is excluded from the loads' throughput: only the measured window counts.
        running.mark();
        let now = || sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::Monotonic);
        let start = now();
        let mut state = RunState::Completed;
        let mut detail = "ran for the whole duration".to_string();
        let mut last = 0u64;
        loop {
            let elapsed = now() - start;
            if elapsed >= duration.0 {
                break;
            }
            let step = (duration.0 - elapsed).min(100_000_000);
            if let Some(sig) = host.wait_signal(step) {
                state = RunState::Interrupted;
                detail = format!("stopped by {} after {}", sig.name(), Nanos(elapsed));
                break;
            }
            if elapsed >= last + 1_000_000_000 {
                last = elapsed - elapsed % 1_000_000_000;
                obs.progress(Nanos(elapsed), duration);
            }
        }
        Ok((state, detail, running.stop()))
    })();
    if !caller_blocks {
        host.unblock_signals();
    }
    result
}
