//! The cost of one timer wakeup, by the two-rate method of Dannenberg et al. (§6).
//!
//! "We measured the overhead of the clock by changing its interrupt frequency and measuring the
//! resulting impact on a background process. The background process simply loops to consume all
//! the available processing power." If each wakeup costs `o` and each loop iteration `x`, a
//! loop that completes `I` iterations per second while a timer fires `f` times per second on the
//! same CPU obeys `I(f) = (1 − f·o)/x`; two rates give two equations, solved by
//! [`crate::analysis::two_rate::solve`]. The seed found 67 µs per tick on a 33 MHz i486, "a
//! 1KHz clock rate will consume 6.7% of the available processing time".
//!
//! Linux has no tick rate to change from user space, so the wakeups come from a timer thread:
//! a SCHED_FIFO thread pinned to the loop's CPU that sleeps until the next release on an
//! absolute grid at rate f1, then f2 (100 Hz and 10 kHz by default), in alternating phases
//! repeated several times. What one wakeup costs the loop is everything it brings: the timer
//! interrupt, the wakeup, two context switches, the timer thread's own system calls, and the
//! cache lines the loop has to fetch again. The loop reads its working set (64 KiB by default)
//! word by word, as the seed's loop "accessed many memory addresses in an attempt to flush the
//! cache between timer interrupts". Each timer kind sandglass offers is measured in turn: `hr`
//! (`clock_nanosleep` absolute), `timerfd`, `posix` (`timer_create`, a signal to the thread) and
//! `native` (a relative `nanosleep`).
//!
//! The rates solved with are the wakeup rates achieved (wakeups over the phase), the medians over
//! the repetitions; each repetition's pair is also solved on its own, so the spread of the
//! estimate is visible. Wakeups that both phases share (the kernel's tick, the supervising
//! thread's 20 checks per second) bias the estimate by a factor `1/(1 − f₀·o)`, well under 1%
//! at the rates seen here. Without the privilege for SCHED_FIFO the timer thread runs at
//! SCHED_OTHER and the loop at SCHED_IDLE, so that each wakeup still preempts the loop.

#[cfg(feature = "linux")]
use super::{now, setup_thread, CpusSeen, Session};
use super::{Header, ThreadSetup};
use crate::analysis::two_rate::{solve, RateMeasurement, TwoRate};
use crate::kind::{fig, KeyFigure, OverCpus, Unit, LOAD};
use crate::model::TimerKind;
#[cfg(feature = "linux")]
use crate::policy::Policy;
use crate::probe::{array, num, Figures, Probe};
#[cfg(feature = "linux")]
use crate::runner::{Observer, RunContext, RunError};
use crate::units::Nanos;
#[cfg(feature = "linux")]
use crate::warning::{Warning, WarningKind};
use crate::RunKind;
#[cfg(feature = "linux")]
use sandglass_sys::clock::{sleep_for, sleep_until, ClockId};
#[cfg(feature = "linux")]
use sandglass_sys::timer::{PosixTimer, TimerFd};
#[cfg(feature = "linux")]
use sandglass_sys::Errno;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
#[cfg(feature = "linux")]
use std::sync::atomic::{AtomicBool, Ordering};
use thiserror::Error;

/// The timer kinds this benchmark measures, in order.
pub const KINDS: [TimerKind; 4] = [
    TimerKind::Hr,
    TimerKind::Timerfd,
    TimerKind::Posix,
    TimerKind::Native,
];

/// `--timers`: some of [`KINDS`] separated by commas (`hr,posix`), or `all`.
pub fn parse_timers(text: &str) -> Result<Vec<TimerKind>, TimerOverheadError> {
    if text.trim() == "all" {
        return Ok(KINDS.to_vec());
    }
    text.split(',')
        .map(|t| {
            TimerKind::parse(t)
                .ok()
                .filter(|k| KINDS.contains(k))
                .ok_or_else(|| {
                    TimerOverheadError::UnknownTimer(text.to_string(), t.trim().to_string())
                })
        })
        .collect()
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimerOverheadConfig {
    pub timers: Vec<TimerKind>,
    /// f1 and f2, in Hz.
    pub rates_hz: [f64; 2],
    /// Length of one phase at one rate.
    pub phase_ns: Nanos,
    /// Pairs of phases (f1 then f2) per timer kind.
    pub repeat: usize,
    pub cpu: Option<usize>,
    /// Bytes the background loop reads per iteration.
    pub working_set_bytes: u64,
    /// The timer thread's SCHED_FIFO priority.
    pub priority: u32,
    pub output_dir: Option<PathBuf>,
}

impl Default for TimerOverheadConfig {
    fn default() -> TimerOverheadConfig {
        TimerOverheadConfig {
            timers: KINDS.to_vec(),
            rates_hz: [100.0, 10_000.0],
            phase_ns: Nanos::from_millis(500),
            repeat: 3,
            cpu: None,
            working_set_bytes: 64 << 10,
            priority: 90,
            output_dir: None,
        }
    }
}

/// Time between two phases, for the last wakeups of one to finish before the next starts.
#[cfg(feature = "linux")]
const GAP_NS: u64 = 20_000_000;

/// One phase: the loop's speed while the timer fired at one rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Phase {
    /// The requested rate.
    pub rate_hz: f64,
    pub repetition: usize,
    /// From the loop's first to its last clock read of the phase.
    pub elapsed_ns: u64,
    pub iterations: u64,
    pub iterations_per_s: f64,
    pub wakeups: u64,
    /// The rate achieved: wakeups over the phase's length.
    pub wakeups_per_s: f64,
}

/// The two-rate analysis of one timer kind's phases.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Analysis {
    /// Per rate: the median achieved wakeup rate and the median iterations per second.
    pub medians: Vec<RateMeasurement>,
    /// Solved from the medians.
    pub solution: Option<TwoRate>,
    /// Why there is no solution.
    pub error: Option<String>,
    /// The per-wakeup cost solved from each repetition's pair alone.
    pub per_repetition_overhead_ns: Vec<Option<f64>>,
    /// The share of the CPU 1000 wakeups per second take: 1000·o.
    pub share_at_1khz: Option<f64>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    crate::stats::median_f64(&mut v)
}

/// Solves the two-rate equations from the phases at `rates` (pure: tested on exact data).
pub fn analyse(phases: &[Phase], rates: [f64; 2]) -> Analysis {
    let at = |f: f64| phases.iter().filter(move |p| p.rate_hz == f);
    let medians: Vec<RateMeasurement> = rates
        .iter()
        .filter_map(|&f| {
            Some(RateMeasurement {
                tick_hz: median(at(f).map(|p| p.wakeups_per_s).collect())?,
                iterations_per_s: median(at(f).map(|p| p.iterations_per_s).collect())?,
            })
        })
        .collect();
    let (solution, error) = match medians.as_slice() {
        [a, b] => match solve(*a, *b) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        },
        _ => (None, Some("a phase at each rate is needed".to_string())),
    };
    let reps = phases.iter().map(|p| p.repetition + 1).max().unwrap_or(0);
    let per_repetition_overhead_ns = (0..reps)
        .map(|r| {
            let m = |f: f64| {
                phases
                    .iter()
                    .find(|p| p.repetition == r && p.rate_hz == f)
                    .map(|p| RateMeasurement {
                        tick_hz: p.wakeups_per_s,
                        iterations_per_s: p.iterations_per_s,
                    })
            };
            let (a, b) = (m(rates[0])?, m(rates[1])?);
            solve(a, b).ok().map(|s| s.overhead_ns)
        })
        .collect();
    Analysis {
        share_at_1khz: solution.as_ref().map(|s| s.overhead_share(1000.0)),
        medians,
        solution,
        error,
        per_repetition_overhead_ns,
    }
}

/// One timer kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KindResult {
    pub timer: TimerKind,
    pub timer_thread: Option<ThreadSetup>,
    pub loop_thread: Option<ThreadSetup>,
    pub phases: Vec<Phase>,
    pub analysis: Analysis,
    pub cpus_seen: Vec<usize>,
    pub placement_verified: bool,
    pub error: Option<String>,
}

/// The result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimerOverheadResult {
    #[serde(flatten)]
    pub header: Header,
    pub cpu: usize,
    pub rates_hz: [f64; 2],
    pub phase_ns: Nanos,
    pub repeat: usize,
    pub working_set_bytes: u64,
    pub kinds: Vec<KindResult>,
}

/// One phase of the schedule: (requested rate, repetition, start, end).
#[cfg(feature = "linux")]
type Slot = (f64, usize, u64, u64);

#[cfg(feature = "linux")]
fn schedule(config: &TimerOverheadConfig, t0: u64) -> Vec<Slot> {
    let mut out = Vec::new();
    let step = config.phase_ns.0 + GAP_NS;
    for r in 0..config.repeat {
        for (k, &f) in config.rates_hz.iter().enumerate() {
            let start = t0 + (2 * r + k) as u64 * step;
            out.push((f, r, start, start + config.phase_ns.0));
        }
    }
    out
}

/// Why a two-rate configuration was refused (named by its flag, with the fix) or a timer could
/// not be set up or waited on (named by its system call).
#[derive(Clone, Debug, PartialEq, Error)]
pub enum TimerOverheadError {
    #[error("--timers {0}: unknown timer '{1}'; use hr, timerfd, posix, native or all")]
    UnknownTimer(String, String),
    #[error("--rates: {0} Hz is outside 1 Hz to 50 kHz")]
    RateOutOfRange(f64),
    #[error("--rates: give two different rates, such as 100,10000")]
    SameRates,
    #[error("--timers: give at least one of hr, timerfd, posix, native")]
    NoTimers,
    #[error("--timers: {} is not measured here; use hr, timerfd, posix or native", .0.name().to_ascii_lowercase())]
    TimerNotOffered(TimerKind),
    #[error("--phase must be at least 10ms")]
    PhaseTooShort,
    #[error("--repeat must be at least 1")]
    ZeroRepeat,
    #[error("--priority {0}: a SCHED_FIFO priority is 1 to 99")]
    Priority(u32),
    #[error("--working-set: at most 64 MiB")]
    WorkingSetTooLarge,
    #[cfg(feature = "linux")]
    #[error("timerfd_create failed: {0}")]
    TimerfdCreate(Errno),
    #[cfg(feature = "linux")]
    #[error("cannot block the timer signal: {0}")]
    BlockSignal(Errno),
    #[cfg(feature = "linux")]
    #[error("timer_create failed: {0}")]
    TimerCreate(Errno),
    #[error("the {0} timer is not measured here")]
    NotMeasured(TimerKind),
    #[cfg(feature = "linux")]
    #[error("waiting on the timer failed: {0}")]
    Wait(Errno),
}

#[cfg(feature = "linux")]
enum Waker {
    Hr,
    Native,
    Fd(TimerFd),
    Posix(PosixTimer),
}

#[cfg(feature = "linux")]
impl Waker {
    #[cfg(feature = "linux")]
    fn new(kind: TimerKind) -> Result<Waker, TimerOverheadError> {
        Ok(match kind {
            TimerKind::Hr => Waker::Hr,
            TimerKind::Native => Waker::Native,
            TimerKind::Timerfd => {
                Waker::Fd(TimerFd::new().map_err(TimerOverheadError::TimerfdCreate)?)
            }
            TimerKind::Posix => {
                let signo = sandglass_sys::signal::timer_signal();
                sandglass_sys::signal::block(&[signo]).map_err(TimerOverheadError::BlockSignal)?;
                Waker::Posix(
                    PosixTimer::new_for_thread(sandglass_sys::sched::gettid(), signo)
                        .map_err(TimerOverheadError::TimerCreate)?,
                )
            }
            other => return Err(TimerOverheadError::NotMeasured(other)),
        })
    }

    /// Sleeps until CLOCK_MONOTONIC reaches `at`.
    #[cfg(feature = "linux")]
    fn wait_until(&self, at: u64) -> Result<(), TimerOverheadError> {
        loop {
            let r = match self {
                Waker::Hr => sleep_until(ClockId::Monotonic, at),
                Waker::Native => {
                    let n = now();
                    if n >= at {
                        return Ok(());
                    }
                    sleep_for(at - n)
                }
                Waker::Fd(t) => t.arm_at(at).and_then(|_| t.wait().map(|_| ())),
                Waker::Posix(t) => t.arm_at(at).and_then(|_| t.wait()),
            };
            match r {
                Ok(()) if now() >= at => return Ok(()),
                Ok(()) => continue,
                Err(e) if e == sandglass_sys::Errno::EINTR => continue,
                Err(e) => return Err(TimerOverheadError::Wait(e)),
            }
        }
    }
}

#[cfg(feature = "linux")]
struct TimerOutcome {
    setup: Option<ThreadSetup>,
    wakeups: Vec<u64>,
    seen: CpusSeen,
    error: Option<String>,
}

#[cfg(feature = "linux")]
fn timer_thread(
    kind: TimerKind,
    cpu: usize,
    policy: &Policy,
    privileged: bool,
    slots: &[Slot],
    stop: &AtomicBool,
) -> TimerOutcome {
    let mut out = TimerOutcome {
        setup: None,
        wakeups: Vec::with_capacity(slots.len()),
        seen: CpusSeen::new(),
        error: None,
    };
    match setup_thread(cpu, policy, privileged) {
        Ok(s) => out.setup = Some(s),
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    }
    let waker = match Waker::new(kind) {
        Ok(w) => w,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    for &(f, _, start, end) in slots {
        let period = (1e9 / f).round().max(1.0) as u64;
        let mut next = start + period;
        let mut n = 0u64;
        while next < end && !stop.load(Ordering::Relaxed) {
            if let Err(e) = waker.wait_until(next) {
                out.error = Some(e.to_string());
                return out;
            }
            n += 1;
            next += period;
        }
        out.seen.record_current();
        out.wakeups.push(n);
    }
    out
}

#[cfg(feature = "linux")]
struct LoopOutcome {
    setup: Option<ThreadSetup>,
    /// Per slot: iterations and elapsed nanoseconds.
    counts: Vec<(u64, u64)>,
    seen: CpusSeen,
    error: Option<String>,
}

/// One iteration of the background loop: every word of the working set.
#[cfg(feature = "linux")]
#[inline]
fn iteration(ws: &[u64]) -> u64 {
    ws.iter().fold(0u64, |a, &w| a.wrapping_add(w))
}

#[cfg(feature = "linux")]
fn loop_thread(
    cpu: usize,
    policy: &Policy,
    privileged: bool,
    ws_bytes: u64,
    slots: &[Slot],
    stop: &AtomicBool,
) -> LoopOutcome {
    let mut out = LoopOutcome {
        setup: None,
        counts: Vec::with_capacity(slots.len()),
        seen: CpusSeen::new(),
        error: None,
    };
    match setup_thread(cpu, policy, privileged) {
        Ok(s) => out.setup = Some(s),
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    }
    let ws: Vec<u64> = (0..(ws_bytes / 8).max(1)).collect();
    let mut sink = 0u64;
    for &(_, _, start, end) in slots {
        // Wait for the phase without competing with the timer thread for the CPU.
        let n = now();
        if n < start {
            let _ = sleep_until(ClockId::Monotonic, start);
        }
        let first = now();
        let mut last = first;
        let mut iterations = 0u64;
        while last < end {
            sink = sink.wrapping_add(iteration(std::hint::black_box(&ws)));
            iterations += 1;
            last = now();
        }
        out.seen.record_current();
        out.counts.push((iterations, last - first));
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    std::hint::black_box(sink);
    out
}

#[cfg(feature = "linux")]
fn measure_kind(
    kind: TimerKind,
    config: &TimerOverheadConfig,
    cpu: usize,
    policies: (Policy, Policy),
    privileged: bool,
    stop: &AtomicBool,
) -> KindResult {
    let slots = schedule(config, now() + 50_000_000);
    let (t, l) = std::thread::scope(|s| {
        let slots = &slots;
        let t = std::thread::Builder::new()
            .name("sg-two-rate-timer".into())
            .spawn_scoped(s, move || {
                timer_thread(kind, cpu, &policies.0, privileged, slots, stop)
            });
        let l = std::thread::Builder::new()
            .name("sg-two-rate-loop".into())
            .spawn_scoped(s, move || {
                loop_thread(
                    cpu,
                    &policies.1,
                    privileged,
                    config.working_set_bytes,
                    slots,
                    stop,
                )
            });
        (
            t.ok().and_then(|h| h.join().ok()),
            l.ok().and_then(|h| h.join().ok()),
        )
    });
    let t = t.unwrap_or(TimerOutcome {
        setup: None,
        wakeups: Vec::new(),
        seen: CpusSeen::new(),
        error: Some("the timer thread failed".to_string()),
    });
    let l = l.unwrap_or(LoopOutcome {
        setup: None,
        counts: Vec::new(),
        seen: CpusSeen::new(),
        error: Some("the loop thread failed".to_string()),
    });
    let phases: Vec<Phase> = slots
        .iter()
        .zip(l.counts.iter().zip(&t.wakeups))
        .map(|(&(f, r, _, _), (&(iterations, elapsed), &wakeups))| {
            let secs = elapsed.max(1) as f64 / 1e9;
            Phase {
                rate_hz: f,
                repetition: r,
                elapsed_ns: elapsed,
                iterations,
                iterations_per_s: iterations as f64 / secs,
                wakeups,
                wakeups_per_s: wakeups as f64 / secs,
            }
        })
        .collect();
    let mut seen = t.seen.clone();
    seen.merge(&l.seen);
    let cpus_seen = seen.to_vec();
    KindResult {
        timer: kind,
        analysis: analyse(&phases, config.rates_hz),
        phases,
        placement_verified: super::placement_holds(&cpus_seen, cpu),
        cpus_seen,
        timer_thread: t.setup,
        loop_thread: l.setup,
        error: t.error.or(l.error),
    }
}

/// Checks the configuration; the error names the flag.
pub fn validate(config: &TimerOverheadConfig) -> Result<(), TimerOverheadError> {
    let [f1, f2] = config.rates_hz;
    for f in [f1, f2] {
        if !(f.is_finite() && (1.0..=50_000.0).contains(&f)) {
            return Err(TimerOverheadError::RateOutOfRange(f));
        }
    }
    if f1 == f2 {
        return Err(TimerOverheadError::SameRates);
    }
    if config.timers.is_empty() {
        return Err(TimerOverheadError::NoTimers);
    }
    if let Some(&t) = config.timers.iter().find(|t| !KINDS.contains(t)) {
        return Err(TimerOverheadError::TimerNotOffered(t));
    }
    if config.phase_ns.0 < 10_000_000 {
        return Err(TimerOverheadError::PhaseTooShort);
    }
    if config.repeat == 0 {
        return Err(TimerOverheadError::ZeroRepeat);
    }
    if !(1..=99).contains(&config.priority) {
        return Err(TimerOverheadError::Priority(config.priority));
    }
    if config.working_set_bytes > 64 << 20 {
        return Err(TimerOverheadError::WorkingSetTooLarge);
    }
    Ok(())
}

/// Runs the two-rate measurement for every timer kind and writes its run directory.
#[cfg(feature = "linux")]
pub fn run(
    config: &TimerOverheadConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<TimerOverheadResult, RunError> {
    validate(config).map_err(super::usage)?;
    let allowed = crate::system::allowed_cpus();
    let cpu = super::choose_cpu(&allowed, config.cpu).map_err(super::usage)?;
    let session = Session::open(
        TimerOverheadProbe::KIND,
        config.output_dir.as_deref(),
        ctx,
        serde_json::json!({ "timer_overhead": config, "cpu": cpu }),
    )?;
    let privileged = super::privileged();
    let mut warnings = Vec::new();
    let policies = if privileged {
        (
            Policy::Fifo {
                priority: config.priority,
            },
            Policy::Other { nice: 0 },
        )
    } else {
        warnings.push(Warning::new(
            WarningKind::PolicyDowngraded,
            "SCHED_FIFO is not permitted: the timer thread runs at SCHED_OTHER and the background loop at SCHED_IDLE, so that each wakeup still preempts the loop; run as root or grant CAP_SYS_NICE for the method as published".to_string(),
        ));
        (Policy::Other { nice: 0 }, Policy::Idle)
    };
    for w in &warnings {
        obs.warning(w);
    }
    let per_kind = 2 * config.repeat as u64 * (config.phase_ns.0 + GAP_NS);
    obs.note(&format!(
        "two-rate method on CPU {cpu}: {} timer kind(s) at {} Hz and {} Hz, about {} each",
        config.timers.len(),
        config.rates_hz[0],
        config.rates_hz[1],
        Nanos(per_kind)
    ));
    let stop = AtomicBool::new(false);
    let body = || {
        let mut out = Vec::new();
        for &k in &config.timers {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            out.push(measure_kind(k, config, cpu, policies, privileged, &stop));
        }
        out
    };
    let (kinds, ended) = match super::supervise(&stop, body) {
        Ok(v) => v,
        Err(e) => return Err(session.fail(e.to_string())),
    };
    let setups: Vec<&ThreadSetup> = kinds
        .iter()
        .flat_map(|k| k.timer_thread.iter().chain(k.loop_thread.iter()))
        .collect();
    super::downgrade_warnings(&setups, &mut warnings);
    let header = session.header(ended.state, &ended.detail, &warnings);
    let result = TimerOverheadResult {
        header,
        cpu,
        rates_hz: config.rates_hz,
        phase_ns: config.phase_ns,
        repeat: config.repeat,
        working_set_bytes: config.working_set_bytes,
        kinds,
    };
    let mut csv = String::from(
        "timer,rate_hz,repetition,elapsed_ns,iterations,iterations_per_s,wakeups,wakeups_per_s\n",
    );
    for k in &result.kinds {
        for p in &k.phases {
            csv.push_str(&format!(
                "{},{},{},{},{},{:.3},{},{:.3}\n",
                k.timer.name().to_ascii_lowercase(),
                p.rate_hz,
                p.repetition,
                p.elapsed_ns,
                p.iterations,
                p.iterations_per_s,
                p.wakeups,
                p.wakeups_per_s
            ));
        }
    }
    let files = vec![session.write(
        "phases.csv",
        csv.as_bytes(),
        "sandglass-bench-timer-overhead-phases-csv/1",
        "one row per phase: the loop's iterations and the timer's wakeups",
    )?];
    session.finish(&result, &result.header, files)?;
    Ok(result)
}

/// The timer-overhead probe (`bench timer-overhead`): each timer kind's cost per expiry, by
/// the two-rate method.
pub struct TimerOverheadProbe;

impl Probe for TimerOverheadProbe {
    const KIND: RunKind = RunKind::BenchTimerOverhead;
    type Config = TimerOverheadConfig;
    type Result = TimerOverheadResult;

    /// Its key figures, in the order people read them (one per timer kind the two-rate method measures, in its order).
    const FIGURES: &'static [KeyFigure] = &[
        fig("hr_overhead_ns", "hr overhead", Unit::Nanos, OverCpus::Run),
        fig(
            "timerfd_overhead_ns",
            "timerfd overhead",
            Unit::Nanos,
            OverCpus::Run,
        ),
        fig(
            "posix_overhead_ns",
            "posix overhead",
            Unit::Nanos,
            OverCpus::Run,
        ),
        fig(
            "native_overhead_ns",
            "native overhead",
            Unit::Nanos,
            OverCpus::Run,
        ),
        LOAD,
    ];

    #[cfg(feature = "linux")]
    fn run(
        c: &TimerOverheadConfig,
        ctx: &RunContext,
        obs: &mut dyn Observer,
    ) -> Result<TimerOverheadResult, RunError> {
        run(c, ctx, obs)
    }

    fn figures(s: &Value, f: &mut Figures) {
        for k in array(&s["kinds"]) {
            if let (Some(t), Some(o)) = (
                k["timer"].as_str(),
                num(&k["analysis"]["solution"]["overhead_ns"]),
            ) {
                let key = format!("{}_overhead_ns", t.to_ascii_lowercase());
                f.add(&key, Some(o.round()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(rate_hz: f64, repetition: usize, iterations_per_s: f64) -> Phase {
        Phase {
            rate_hz,
            repetition,
            elapsed_ns: 1_000_000_000,
            iterations: iterations_per_s as u64,
            iterations_per_s,
            wakeups: rate_hz as u64,
            wakeups_per_s: rate_hz,
        }
    }

    /// Exact data through the shared solver: o = 10 µs and x = 1 ms give I(100) = 999 and
    /// I(1000) = 990; a disturbed third repetition moves neither median.
    #[test]
    fn two_rate_analysis_on_exact_data() {
        let phases = vec![
            phase(100.0, 0, 999.0),
            phase(1000.0, 0, 990.0),
            phase(100.0, 1, 999.0),
            phase(1000.0, 1, 990.0),
            phase(100.0, 2, 950.0),
            phase(1000.0, 2, 995.0),
        ];
        let a = analyse(&phases, [100.0, 1000.0]);
        let s = a.solution.expect("solution");
        assert!((s.overhead_ns - 10_000.0).abs() < 1e-6, "{s:?}");
        assert!((s.iteration_ns - 1_000_000.0).abs() < 1e-3);
        assert!((a.share_at_1khz.expect("share") - 0.01).abs() < 1e-12);
        assert_eq!(a.medians.len(), 2);
        assert_eq!(a.per_repetition_overhead_ns.len(), 3);
        assert!((a.per_repetition_overhead_ns[0].expect("rep 0") - 10_000.0).abs() < 1e-6);
        assert_eq!(
            a.per_repetition_overhead_ns[2], None,
            "faster at the higher rate"
        );
    }

    /// The seed's own figures (§6): 1530 iterations/s at 100 Hz and 1333.6 at 2000 Hz: 67 µs.
    #[test]
    fn dannenberg_figures() {
        let a = analyse(
            &[phase(100.0, 0, 1530.0), phase(2000.0, 0, 1333.6)],
            [100.0, 2000.0],
        );
        let o = a.solution.expect("solution").overhead_ns;
        assert!((o / 1000.0 - 67.1).abs() < 0.05, "{o}");
        assert!((a.share_at_1khz.expect("share") - 0.067).abs() < 0.001);
    }

    #[test]
    fn analysis_without_both_rates_explains() {
        let a = analyse(&[phase(100.0, 0, 999.0)], [100.0, 1000.0]);
        assert!(a.solution.is_none());
        assert!(a.error.expect("error").contains("each rate"));
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(validate(&TimerOverheadConfig::default()).is_ok());
        let same = TimerOverheadConfig {
            rates_hz: [100.0, 100.0],
            ..TimerOverheadConfig::default()
        };
        assert!(validate(&same)
            .expect_err("same")
            .to_string()
            .contains("two different"));
        let busy = TimerOverheadConfig {
            timers: vec![TimerKind::Busy],
            ..TimerOverheadConfig::default()
        };
        assert!(validate(&busy).is_err());
        let fast = TimerOverheadConfig {
            rates_hz: [100.0, 1e6],
            ..TimerOverheadConfig::default()
        };
        assert!(validate(&fast).is_err());
    }

    #[test]
    fn schedule_alternates_rates() {
        let c = TimerOverheadConfig {
            repeat: 2,
            phase_ns: Nanos::from_millis(100),
            ..TimerOverheadConfig::default()
        };
        let s = schedule(&c, 1000);
        let rates: Vec<f64> = s.iter().map(|x| x.0).collect();
        assert_eq!(rates, vec![100.0, 10_000.0, 100.0, 10_000.0]);
        assert!(s.windows(2).all(|w| w[0].3 + GAP_NS == w[1].2));
    }

    #[test]
    fn short_run_of_every_timer_kind() {
        let base = tempfile::tempdir().expect("tempdir");
        let ctx = super::super::test_context(base.path());
        let config = TimerOverheadConfig {
            rates_hz: [100.0, 2000.0],
            phase_ns: Nanos::from_millis(20),
            repeat: 1,
            working_set_bytes: 4096,
            ..TimerOverheadConfig::default()
        };
        let r = run(&config, &ctx, &mut crate::runner::Silent).expect("run");
        assert_eq!(r.header.kind, crate::RunKind::BenchTimerOverhead);
        assert_eq!(r.kinds.len(), 4);
        for k in &r.kinds {
            assert!(k.error.is_none(), "{:?}: {:?}", k.timer, k.error);
            assert_eq!(k.phases.len(), 2);
            assert!(
                k.placement_verified,
                "{:?}: seen on {:?}, threads {:?} {:?}",
                k.timer, k.cpus_seen, k.timer_thread, k.loop_thread
            );
            // A loop thread that wakes after its phase has ended (a host stall, or other work
            // on the CPU at SCHED_OTHER without privileges) counts nothing for it, and says so.
            for p in &k.phases {
                assert_eq!(p.iterations == 0, p.elapsed_ns == 0, "{:?}: {p:?}", k.timer);
            }
            // 2000 Hz over 20 ms is 39 releases after the first period.
            assert!(k.phases[1].wakeups > k.phases[0].wakeups);
            assert_eq!(k.analysis.medians.len(), 2);
        }
        let measured = r
            .kinds
            .iter()
            .flat_map(|k| &k.phases)
            .filter(|p| p.iterations > 0);
        assert!(
            measured.count() > 0,
            "no phase of any timer kind was measured"
        );
    }

    #[test]
    fn refusals_and_failures_keep_their_wording() {
        let cases = [
            (
                TimerOverheadError::RateOutOfRange(0.5),
                "--rates: 0.5 Hz is outside 1 Hz to 50 kHz".to_string(),
            ),
            (
                TimerOverheadError::SameRates,
                "--rates: give two different rates, such as 100,10000".into(),
            ),
            (
                TimerOverheadError::NoTimers,
                "--timers: give at least one of hr, timerfd, posix, native".into(),
            ),
            (
                TimerOverheadError::TimerNotOffered(TimerKind::Busy),
                "--timers: busy is not measured here; use hr, timerfd, posix or native".into(),
            ),
            (
                TimerOverheadError::PhaseTooShort,
                "--phase must be at least 10ms".into(),
            ),
            (
                TimerOverheadError::ZeroRepeat,
                "--repeat must be at least 1".into(),
            ),
            (
                TimerOverheadError::Priority(0),
                "--priority 0: a SCHED_FIFO priority is 1 to 99".into(),
            ),
            (
                TimerOverheadError::WorkingSetTooLarge,
                "--working-set: at most 64 MiB".into(),
            ),
            (
                TimerOverheadError::TimerfdCreate(Errno::ENOMEM),
                format!("timerfd_create failed: {}", Errno::ENOMEM),
            ),
            (
                TimerOverheadError::BlockSignal(Errno::EINVAL),
                format!("cannot block the timer signal: {}", Errno::EINVAL),
            ),
            (
                TimerOverheadError::TimerCreate(Errno::EAGAIN),
                format!("timer_create failed: {}", Errno::EAGAIN),
            ),
            (
                TimerOverheadError::NotMeasured(TimerKind::Busy),
                format!("the {} timer is not measured here", TimerKind::Busy),
            ),
            (
                TimerOverheadError::Wait(Errno::EINVAL),
                format!("waiting on the timer failed: {}", Errno::EINVAL),
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
