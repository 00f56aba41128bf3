//! The engine's operations on the real kernel: timers, yields, policies, memory and PM QoS.
//!
//! [`OsOps`] implements [`ThreadOps`] for one measuring thread with one of Hourglass's timer
//! sources. The engine asks to sleep until a counter value; each timer is armed with the
//! `CLOCK_MONOTONIC` time of that value, computed from a pair (counter, CLOCK_MONOTONIC) and
//! the calibrated rate. The pair is read again whenever the target lies more than
//! [`PAIR_REFRESH_NS`] past it, so the conversion error is the rate's uncertainty times at most
//! that span plus the time left (nanoseconds), never times the age of the run, while a thread
//! waking every millisecond reads the clock pair only once in ten wakeups: per wakeup the
//! thread reads only the counter before it sleeps. A pair is taken only from a bracket no wider
//! than [`PAIR_WIDTH_NS`] (an interrupt or a stop of the virtual CPU between the two counter
//! reads would otherwise move every expiry of the next span by up to half the stall:
//! [`narrowest_pair`]). A new pair that lands away from where the previous one predicts, by more
//! than the two brackets allow, means CLOCK_MONOTONIC is being slewed, and the next span
//! converts at the rate measured between the two ([`rate_after`]). NATIVE sleeps for the time left, which is
//! what a relative timer means. A sleep interrupted by a signal re-checks the stop flag and
//! sleeps again if no stop was requested.

use crate::clock::Calibration;
use crate::engine::{Clock, ThreadOps};
use crate::model::TimerKind;
use crate::policy::Policy;
use crate::system::Privileges;
use crate::units::Nanos;
use sandglass_sys::clock::{sleep_for, sleep_until, ClockId};
use sandglass_sys::sched::{self, Tid};
use sandglass_sys::timer::{PosixTimer, Rtc, TimerFd};
use sandglass_sys::Errno;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The RTC's periodic-interrupt rate (Hourglass §3.3: "at 1024 Hz it provides 976 µs
/// resolution").
pub const RTC_HZ: u64 = 1024;

/// How far past its (counter, CLOCK_MONOTONIC) pair a target may lie before the pair is read
/// again: 10 ms, so that a calibration uncertainty of 0.2 ppm (a 100 ms calibration window)
/// moves an expiry by at most 2 ns.
pub const PAIR_REFRESH_NS: u64 = 10_000_000;

/// How far a new pair may land from where the previous one and the calibrated rate put it
/// before sandglass concludes that CLOCK_MONOTONIC is being slewed (NTP, up to 500 ppm) and
/// converts with the rate of the last span instead. 100 ns over 10 ms is 10 ppm, well above the
/// pairs' own jitter (tens of ns).
pub const SLEW_NS: u64 = 100;

/// The widest bracket (two counter reads around one CLOCK_MONOTONIC read) a pair is taken
/// from without trying again: the pair's error is at most half of it. A read undisturbed takes
/// 30 to 60 ns on a virtual machine; an interrupt or a host stop in between takes microseconds
/// to milliseconds.
pub const PAIR_WIDTH_NS: u64 = 100;

/// How many brackets are tried for one pair before the narrowest is taken whatever its width.
pub const PAIR_TRIES: usize = 8;

/// The paths tried for the RTC device.
pub const RTC_PATHS: [&str; 2] = ["/dev/rtc", "/dev/rtc0"];

/// A timer source, ready to use in the thread that created it.
pub enum OsTimer {
    Native,
    Hr,
    Timerfd(TimerFd),
    Posix(PosixTimer),
    Busy,
    Rtc(Rtc),
}

/// Why a thread's timer could not be created.
#[derive(Debug, thiserror::Error)]
pub enum TimerError {
    #[error("timerfd_create failed: {0}")]
    Timerfd(Errno),
    #[error("timer_create failed: {0}")]
    Posix(Errno),
    #[error("-i RTC: {0}; use -i HR, the high-resolution timer (clock_nanosleep), instead")]
    Rtc(#[from] RtcUnusable),
}

/// Why `/dev/rtc` cannot give the periodic interrupts that `-i RTC` waits on.
#[derive(Debug, thiserror::Error)]
pub enum RtcUnusable {
    #[error(
        "this machine has no /dev/rtc (the kernel has no RTC driver, common in virtual machines)"
    )]
    Missing,
    #[error("cannot open {path}: {source}")]
    Open {
        path: &'static str,
        source: std::io::Error,
    },
    #[error("cannot start {RTC_HZ} Hz periodic interrupts on {path}: {errno} (rates above 64 Hz need root or /proc/sys/dev/rtc/max-user-freq)")]
    Start { path: &'static str, errno: Errno },
}

/// Opens the RTC and starts its periodic interrupts, as a thread with `-i RTC` will: the device
/// ready for one user, or why it is not usable here.
fn open_rtc() -> Result<Rtc, RtcUnusable> {
    let path = rtc_path().ok_or(RtcUnusable::Missing)?;
    let rtc = Rtc::open(std::path::Path::new(path))
        .map_err(|source| RtcUnusable::Open { path, source })?;
    rtc.start_periodic(RTC_HZ)
        .map_err(|errno| RtcUnusable::Start { path, errno })?;
    Ok(rtc)
}

/// Whether `-i RTC` can work here: the RTC is opened, started and closed again.
pub fn rtc_usable() -> Result<(), RtcUnusable> {
    open_rtc().map(drop)
}

/// Creates the timer of `kind` for the calling thread. POSIX timers need the timer signal
/// blocked in this thread (the run blocks it before creating threads).
pub fn make_timer(kind: TimerKind) -> Result<OsTimer, TimerError> {
    Ok(match kind {
        TimerKind::Native => OsTimer::Native,
        TimerKind::Hr => OsTimer::Hr,
        TimerKind::Busy => OsTimer::Busy,
        TimerKind::Timerfd => OsTimer::Timerfd(TimerFd::new().map_err(TimerError::Timerfd)?),
        TimerKind::Posix => OsTimer::Posix(
            PosixTimer::new_for_thread(sched::gettid(), sandglass_sys::signal::timer_signal())
                .map_err(TimerError::Posix)?,
        ),
        TimerKind::Rtc => OsTimer::Rtc(open_rtc()?),
    })
}

/// The first RTC device that exists.
pub fn rtc_path() -> Option<&'static str> {
    RTC_PATHS
        .iter()
        .copied()
        .find(|p| std::path::Path::new(p).exists())
}

impl OsTimer {
    /// The kind of timer this is.
    pub fn kind(&self) -> TimerKind {
        match self {
            OsTimer::Native => TimerKind::Native,
            OsTimer::Hr => TimerKind::Hr,
            OsTimer::Timerfd(_) => TimerKind::Timerfd,
            OsTimer::Posix(_) => TimerKind::Posix,
            OsTimer::Busy => TimerKind::Busy,
            OsTimer::Rtc(_) => TimerKind::Rtc,
        }
    }
}

/// What a timer is asked to do so that its thread wakes at a counter value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Sleep for this many nanoseconds (a relative timer).
    For(u64),
    /// Sleep until this CLOCK_MONOTONIC time (an absolute timer).
    Until(u64),
    /// Poll the counter until the target (BUSY), or read interrupts until it (RTC).
    Spin,
}

/// The request that wakes a thread of timer `kind` at counter value `target`, when the counter
/// reads `now`. Relative timers sleep for the time left. Absolute timers ask `pair` for a
/// (counter, CLOCK_MONOTONIC) pair read at most [`PAIR_REFRESH_NS`] before the target and the
/// rate to convert at (counter ticks per second of CLOCK_MONOTONIC), and are armed at the
/// target's [`expiry`], so the conversion error is the rate's uncertainty times that span,
/// however old the run. `pair` is called only for the kinds that need it.
pub fn wait_request(
    kind: TimerKind,
    now: u64,
    target: u64,
    cal: &Calibration,
    pair: impl FnOnce() -> (MonoPair, f64),
) -> Wait {
    match kind {
        TimerKind::Native => Wait::For(cal.ns_for_ticks(target.saturating_sub(now))),
        TimerKind::Hr | TimerKind::Timerfd | TimerKind::Posix => {
            let (p, mono_hz) = pair();
            Wait::Until(expiry(p, target, mono_hz))
        }
        TimerKind::Busy | TimerKind::Rtc => Wait::Spin,
    }
}

/// The CLOCK_MONOTONIC time of counter value `target` (at or after the pair's counter), at
/// `mono_hz` counter ticks per second of CLOCK_MONOTONIC.
#[inline]
pub fn expiry(pair: MonoPair, target: u64, mono_hz: f64) -> u64 {
    let left = target.saturating_sub(pair.counter) as f64 * 1e9 / mono_hz;
    pair.mono_ns
        .saturating_add(crate::units::round_i64(left).max(0) as u64)
}

/// The rate to convert with after reading pair `new`: the calibrated `cal_hz` while `new` lands
/// within [`SLEW_NS`] of where `prev` and `cal_hz` put it, otherwise the rate of the span
/// between the two pairs, so that a CLOCK_MONOTONIC being slewed is followed within one span.
///
/// A pair is uncertain by half its bracket, so the prediction may miss by half of each
/// bracket (in ns at `cal_hz`) on top of [`SLEW_NS`] before the clock counts as slewed.
pub fn rate_after(prev: Option<MonoPair>, new: MonoPair, cal_hz: f64, refresh_ticks: u64) -> f64 {
    let Some(p) = prev else { return cal_hz };
    let span = new.counter.wrapping_sub(p.counter);
    let mono_span = new.mono_ns.wrapping_sub(p.mono_ns);
    if new.counter <= p.counter
        || new.mono_ns <= p.mono_ns
        || span > refresh_ticks.saturating_mul(4)
    {
        // Out of order or too far apart for the span's rate to be the current one.
        return cal_hz;
    }
    let predicted = expiry(p, new.counter, cal_hz);
    let brackets = (p.width_ticks + new.width_ticks) as f64 / 2.0 * 1e9 / cal_hz;
    if predicted.abs_diff(new.mono_ns) as f64 <= SLEW_NS as f64 + brackets {
        cal_hz
    } else {
        span as f64 * 1e9 / mono_span as f64
    }
}

/// A counter value and the CLOCK_MONOTONIC time read with it: the midpoint of two counter
/// reads `width_ticks` apart, between which the clock was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonoPair {
    pub counter: u64,
    pub mono_ns: u64,
    pub width_ticks: u64,
}

/// A pair from the first of up to [`PAIR_TRIES`] brackets that `read` returns (counter before,
/// CLOCK_MONOTONIC, counter after) no wider than `max_width_ticks`, or the narrowest of them.
#[inline]
pub fn narrowest_pair(mut read: impl FnMut() -> (u64, u64, u64), max_width_ticks: u64) -> MonoPair {
    let mut best: Option<MonoPair> = None;
    for _ in 0..PAIR_TRIES {
        let (a, mono_ns, b) = read();
        let width_ticks = b.wrapping_sub(a);
        if best.is_none_or(|p| width_ticks < p.width_ticks) {
            best = Some(MonoPair {
                counter: a.wrapping_add(width_ticks / 2),
                mono_ns,
                width_ticks,
            });
        }
        if width_ticks <= max_width_ticks {
            break;
        }
    }
    // PAIR_TRIES > 0: the loop ran.
    best.unwrap_or(MonoPair {
        counter: 0,
        mono_ns: 0,
        width_ticks: u64::MAX,
    })
}

/// Whether a target can be converted from `pair`: it lies at or after the pair's counter and
/// at most `refresh_ticks` past it.
pub fn pair_serves(pair: Option<MonoPair>, target: u64, refresh_ticks: u64) -> bool {
    match pair {
        Some(p) => target >= p.counter && target - p.counter <= refresh_ticks,
        None => false,
    }
}

/// The operating system as one measuring thread sees it.
pub struct OsOps<C: Clock> {
    pub clock: C,
    pub calibration: Calibration,
    pub timer: OsTimer,
    pub stop: Arc<AtomicBool>,
    /// The first unexpected timer error; the thread stops when one happens.
    pub error: Option<String>,
    /// The pair absolute timers convert their targets from, how far it serves, and the rate
    /// (counter ticks per second of CLOCK_MONOTONIC) they convert with.
    pair: Option<MonoPair>,
    refresh_ticks: u64,
    /// The widest bracket a pair is taken from at once ([`PAIR_WIDTH_NS`]).
    pair_width_ticks: u64,
    mono_hz: f64,
}

impl<C: Clock> OsOps<C> {
    pub fn new(clock: C, calibration: Calibration, timer: OsTimer, stop: Arc<AtomicBool>) -> Self {
        OsOps {
            clock,
            calibration,
            timer,
            stop,
            error: None,
            pair: None,
            refresh_ticks: calibration.ticks_for_ns(PAIR_REFRESH_NS),
            pair_width_ticks: calibration.ticks_for_ns(PAIR_WIDTH_NS),
            mono_hz: calibration.monotonic_frequency_hz,
        }
    }

    fn fail(&mut self, what: &str, e: Errno) -> bool {
        if self.error.is_none() {
            self.error = Some(format!("{what} failed: {e}"));
        }
        false
    }

    /// The pair to convert `target` from: the last one while it serves, otherwise a new one,
    /// CLOCK_MONOTONIC read between two counter reads and paired with their midpoint, from a
    /// bracket no wider than [`PAIR_WIDTH_NS`] where one of [`PAIR_TRIES`] is.
    #[inline]
    fn pair_for(&mut self, target: u64) -> MonoPair {
        match self.pair {
            Some(p) if pair_serves(self.pair, target, self.refresh_ticks) => p,
            _ => self.new_pair(),
        }
    }

    #[cold]
    fn new_pair(&mut self) -> MonoPair {
        let clock = &self.clock;
        let p = narrowest_pair(
            || {
                let a = clock.now();
                let mono_ns = sandglass_sys::clock::now_ns(ClockId::Monotonic);
                (a, mono_ns, clock.now())
            },
            self.pair_width_ticks,
        );
        self.mono_hz = rate_after(
            self.pair,
            p,
            self.calibration.monotonic_frequency_hz,
            self.refresh_ticks,
        );
        self.pair = Some(p);
        p
    }
}

impl<C: Clock> ThreadOps for OsOps<C> {
    fn sleep_until(&mut self, target: u64) -> bool {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = self.clock.now();
            if now >= target {
                return true;
            }
            let (kind, cal) = (self.timer.kind(), self.calibration);
            let wait = wait_request(kind, now, target, &cal, || {
                (self.pair_for(target), self.mono_hz)
            });
            let result = match (&mut self.timer, wait) {
                (OsTimer::Native, Wait::For(ns)) => sleep_for(ns),
                (OsTimer::Hr, Wait::Until(mono)) => sleep_until(ClockId::Monotonic, mono),
                (OsTimer::Timerfd(t), Wait::Until(mono)) => {
                    t.arm_at(mono).and_then(|_| t.wait().map(|_| ()))
                }
                (OsTimer::Posix(t), Wait::Until(mono)) => t.arm_at(mono).and_then(|_| t.wait()),
                (_, Wait::Spin) => {
                    while self.clock.now() < target {
                        if self.stop.load(Ordering::Relaxed) {
                            return false;
                        }
                    }
                    return true;
                }
                (OsTimer::Rtc(r), _) => match r.wait() {
                    // Each read returns at the next interrupt; keep reading until the target.
                    Ok(_) => continue,
                    Err(e) => Err(e),
                },
                // wait_request answers each kind with its own request.
                _ => Err(Errno::EINVAL),
            };
            match result {
                Ok(()) => return true,
                Err(e) if e == Errno::EINTR => continue,
                Err(e) => return self.fail("waiting on the timer", e),
            }
        }
    }

    fn yield_cpu(&mut self) {
        sched::yield_now();
    }

    fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The policy a thread asked for, what the kernel applied, and why they differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedPolicy {
    pub requested: Policy,
    /// As read back with `sched_getattr`.
    pub effective: Option<Policy>,
    /// Why the effective policy is lower than the requested one, with the fix.
    pub downgraded: Option<String>,
}

/// Why a policy could not be applied at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyFailure {
    /// SCHED_DEADLINE admission control refused the bandwidth (EBUSY).
    Admission,
    /// The kernel refused the parameters (EINVAL and the like).
    Refused(String),
}

/// What to tell the user when the kernel refused `p` for lack of privilege.
pub fn downgrade_message(p: &Policy, e: Errno) -> String {
    let exe = "$(command -v sandglass)";
    match p {
        Policy::Fifo { priority } | Policy::RoundRobin { priority } => format!(
            "{} was refused ({}): running at SCHED_OTHER nice 0 instead. Grant CAP_SYS_NICE (sudo setcap cap_sys_nice+ep {exe}) or raise the real-time priority limit (ulimit -r {priority}, or 'rtprio' in /etc/security/limits.conf)",
            p.describe(),
            e.name()
        ),
        Policy::Deadline { .. } => format!(
            "{} was refused ({}): running at SCHED_OTHER nice 0 instead. SCHED_DEADLINE needs CAP_SYS_NICE: run as root or sudo setcap cap_sys_nice+ep {exe}",
            p.describe(),
            e.name()
        ),
        Policy::Other { nice } | Policy::Batch { nice } => format!(
            "{} was refused ({}): running at nice 0 instead. Grant CAP_SYS_NICE or raise the nice limit (ulimit -e {})",
            p.describe(),
            e.name(),
            20 - nice
        ),
        Policy::Idle => format!("{} was refused ({})", p.describe(), e.name()),
    }
}

/// Applies `p` to the calling thread, falling back to SCHED_OTHER nice 0 when a privilege is
/// missing, and reads back what the kernel applied. `privileged` says whether the process has
/// CAP_SYS_NICE: then a refusal is not about privilege, and it is reported as a failure.
pub fn apply_policy(p: &Policy, privileged: bool) -> Result<AppliedPolicy, PolicyFailure> {
    let read_back = || {
        sched::get_attr(Tid::SELF)
            .ok()
            .and_then(|a| Policy::from_attr(&a))
    };
    match sched::set_attr(Tid::SELF, &p.to_attr()) {
        Ok(()) => Ok(AppliedPolicy {
            requested: *p,
            effective: read_back(),
            downgraded: None,
        }),
        Err(e) if (e == Errno::EPERM || e == Errno::EACCES) && privileged => {
            Err(PolicyFailure::Refused(if p.is_deadline() {
                format!("the kernel refused {} ({}) although the process has CAP_SYS_NICE: a SCHED_DEADLINE thread's CPU affinity must span its whole root domain, so run without taskset or cpuset restrictions", p.describe(), e.name())
            } else {
                format!("the kernel refused {} ({}) although the process has CAP_SYS_NICE: the process's cgroup may have no real-time budget (cpu.rt_runtime_us)", p.describe(), e.name())
            }))
        }
        Err(e) if e == Errno::EPERM || e == Errno::EACCES => {
            let fallback = Policy::Other { nice: 0 };
            let _ = sched::set_attr(Tid::SELF, &fallback.to_attr());
            Ok(AppliedPolicy {
                requested: *p,
                effective: read_back(),
                downgraded: Some(downgrade_message(p, e)),
            })
        }
        Err(e) if e == Errno::EBUSY && p.is_deadline() => Err(PolicyFailure::Admission),
        Err(e) => Err(PolicyFailure::Refused(format!(
            "the kernel refused {}: {e}",
            p.describe()
        ))),
    }
}

/// SCHED_DEADLINE bandwidth as the kernel computes it: `runtime · 2^20 / period`, rounded down.
pub fn deadline_bandwidth(runtime: Nanos, period: Nanos) -> u64 {
    if period.0 == 0 {
        return 0;
    }
    ((u128::from(runtime.0) << 20) / u128::from(period.0)) as u64
}

/// The message for a refused reservation: what was asked, what the kernel's limit allows, and
/// what this run already holds.
pub fn admission_message(
    thread: usize,
    p: &Policy,
    held_by_run: f64,
    cpus: usize,
    rt_runtime_us: Option<i64>,
    rt_period_us: Option<i64>,
) -> String {
    let (runtime, period) = match p {
        Policy::Deadline {
            runtime_ns,
            period_ns,
            ..
        } => (*runtime_ns, *period_ns),
        _ => (Nanos::ZERO, Nanos(1)),
    };
    let asked = runtime.0 as f64 / period.0 as f64 * 100.0;
    let per_cpu = match (rt_runtime_us, rt_period_us) {
        (Some(r), Some(p)) if r >= 0 && p > 0 => r as f64 / p as f64 * 100.0,
        (Some(-1), _) => 100.0,
        _ => 95.0,
    };
    let total = per_cpu * cpus as f64;
    format!(
        "thread {thread}: the kernel refused the reservation {runtime}/{period} ({asked:.1}% of a CPU; EBUSY from SCHED_DEADLINE admission control). It admits at most {per_cpu:.0}% per CPU x {cpus} CPUs = {total:.0}% in all; this run's other threads already hold {held_by_run:.1}%, and other SCHED_DEADLINE tasks and the fair server (5% per CPU on kernels since 6.12) count too. Ask for less, or stop other deadline tasks"
    )
}

/// Holds `/dev/cpu_dma_latency` at a value while it lives (the kernel keeps the request only
/// as long as the file stays open).
pub struct PmQos {
    _file: std::fs::File,
    pub value_us: u32,
}

/// Asks the kernel to keep CPU wakeup latency at or below `us` microseconds.
pub fn hold_cpu_dma_latency(us: u32) -> std::io::Result<PmQos> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency")?;
    f.write_all(&(us as i32).to_ne_bytes())?;
    Ok(PmQos {
        _file: f,
        value_us: us,
    })
}

/// Why memory was left unlocked (buffers are prefaulted in every case).
#[derive(Debug, Clone, thiserror::Error)]
pub enum MemoryLockError {
    #[error("memory not locked: mlockall failed ({0}); buffers were prefaulted instead, but page faults may still show as gaps")]
    Failed(Errno),
    #[error("memory not locked: the locked-memory limit is {} KiB and the process lacks CAP_IPC_LOCK, so locking everything could make a later allocation fail. Buffers were prefaulted instead. Raise the limit (ulimit -l unlimited) or grant CAP_IPC_LOCK", .limit_bytes / 1024)]
    Limited { limit_bytes: u64 },
}

/// Locks all memory when that cannot make a later allocation fail.
pub fn lock_memory(privs: &Privileges) -> Result<(), MemoryLockError> {
    let unlimited = privs.rlimit_memlock_bytes.is_none();
    if privs.euid == 0 || privs.cap_ipc_lock || unlimited {
        sandglass_sys::mem::lock_all().map_err(MemoryLockError::Failed)
    } else {
        Err(MemoryLockError::Limited {
            limit_bytes: privs.rlimit_memlock_bytes.unwrap_or(0),
        })
    }
}

/// Touches 128 KiB of the calling thread's stack so that its pages are present before a
/// measurement starts.
#[inline(never)]
pub fn prefault_stack() {
    let buf = [1u8; 128 * 1024];
    std::hint::black_box(&buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Calibration, CounterKind, RawClock};

    #[test]
    fn bandwidth_is_the_kernels_fixed_point() {
        // 3 ms / 8 ms = 0.375 → 0.375 · 2^20 = 393216.
        assert_eq!(
            deadline_bandwidth(Nanos::from_millis(3), Nanos::from_millis(8)),
            393_216
        );
        // 17/33 · 2^20 = 540175.5... → 540175.
        assert_eq!(
            deadline_bandwidth(Nanos::from_millis(17), Nanos::from_millis(33)),
            540_175
        );
        assert_eq!(deadline_bandwidth(Nanos(1), Nanos(0)), 0);
    }

    #[test]
    fn messages_name_the_fix() {
        let m = downgrade_message(&Policy::Fifo { priority: 95 }, Errno::EPERM);
        assert!(
            m.contains("CAP_SYS_NICE") && m.contains("ulimit -r 95"),
            "{m}"
        );
        let d = Policy::deadline(
            Nanos::from_millis(3),
            Nanos::from_millis(8),
            Nanos::from_millis(8),
            false,
        )
        .expect("valid");
        let m = admission_message(0, &d, 10.0, 2, Some(950_000), Some(1_000_000));
        assert!(
            m.contains("37.5%") && m.contains("95% per CPU x 2 CPUs = 190%"),
            "{m}"
        );
        assert!(TimerError::Rtc(RtcUnusable::Missing)
            .to_string()
            .contains("-i HR"));
    }

    /// Each timer kind's arithmetic on an exact calibration: 3 ticks per ns against
    /// CLOCK_MONOTONIC_RAW, and CLOCK_MONOTONIC running 1 ppm fast (NTP slewing).
    #[test]
    fn each_timer_kind_converts_the_time_left() {
        use crate::clock::{Anchor, ClockPair};
        let pair = |counter, clock_ns| ClockPair {
            counter,
            clock_ns,
            width_ticks: 0,
        };
        let cal = Calibration::from_anchors(
            CounterKind::Tsc,
            Anchor {
                monotonic_raw: pair(0, 0),
                monotonic: pair(0, 0),
            },
            Anchor {
                monotonic_raw: pair(3_000_000_000, 1_000_000_000),
                monotonic: pair(3_000_000_000, 1_000_001_000),
            },
        );
        let (now, target, mono_now) = (9_000_000, 12_000_000, 77_000_000);
        // The pair read at `now`, converted at the calibrated rate; only absolute kinds ask.
        let asked = std::cell::Cell::new(0);
        let request = |kind, now| {
            wait_request(kind, now, target, &cal, || {
                asked.set(asked.get() + 1);
                (
                    MonoPair {
                        counter: now,
                        mono_ns: mono_now,
                        width_ticks: 0,
                    },
                    cal.monotonic_frequency_hz,
                )
            })
        };
        // 3 000 000 ticks left: 1 ms of CLOCK_MONOTONIC_RAW, 1.000001 ms of CLOCK_MONOTONIC.
        assert_eq!(request(TimerKind::Native, now), Wait::For(1_000_000));
        for kind in [TimerKind::Hr, TimerKind::Timerfd, TimerKind::Posix] {
            assert_eq!(
                request(kind, now),
                Wait::Until(mono_now + 1_000_001),
                "{kind:?}"
            );
        }
        assert_eq!(request(TimerKind::Busy, now), Wait::Spin);
        assert_eq!(request(TimerKind::Rtc, now), Wait::Spin);
        // A target already passed asks for no time at all.
        assert_eq!(request(TimerKind::Native, target + 5), Wait::For(0));
        assert_eq!(asked.get(), 3, "a pair is read only for absolute timers");
    }

    #[test]
    fn a_clock_pair_serves_targets_up_to_its_refresh_span() {
        let p = Some(MonoPair {
            counter: 1_000,
            mono_ns: 5,
            width_ticks: 0,
        });
        assert!(!pair_serves(None, 1_000, 100));
        assert!(pair_serves(p, 1_000, 100));
        assert!(pair_serves(p, 1_100, 100));
        assert!(!pair_serves(p, 1_101, 100), "too far past the pair");
        assert!(!pair_serves(p, 999, 100), "before the pair");
    }

    /// CLOCK_MONOTONIC slewed by 500 ppm (NTP's limit) over a 10 ms span puts the new pair
    /// 5 µs from its prediction: the next span converts at the measured rate, not the
    /// calibrated one; pairs within the jitter keep the calibrated rate.
    #[test]
    fn a_slewed_monotonic_clock_is_followed_within_one_span() {
        let cal_hz = 3e9; // 3 ticks per ns
        let refresh = 30_000_000; // 10 ms
        let p0 = MonoPair {
            counter: 1_000_000_000,
            mono_ns: 7_000_000_000,
            width_ticks: 0,
        };
        let on_time = MonoPair {
            counter: p0.counter + 30_000_000,
            mono_ns: p0.mono_ns + 10_000_040,
            width_ticks: 0,
        };
        assert_eq!(rate_after(None, on_time, cal_hz, refresh), cal_hz);
        assert_eq!(
            rate_after(Some(p0), on_time, cal_hz, refresh),
            cal_hz,
            "jitter"
        );
        let slewed = MonoPair {
            counter: p0.counter + 30_000_000,
            mono_ns: p0.mono_ns + 10_005_000,
            width_ticks: 0,
        };
        let r = rate_after(Some(p0), slewed, cal_hz, refresh);
        assert!((r - 30_000_000.0 * 1e9 / 10_005_000.0).abs() < 1e-3, "{r}");
        // The next 1 ms after the slewed pair is 1.0005 ms of the slewed clock.
        assert_eq!(
            expiry(slewed, slewed.counter + 3_000_000, r),
            slewed.mono_ns + 1_000_500
        );
        // Pairs out of order or far apart say nothing about the current rate.
        assert_eq!(rate_after(Some(slewed), p0, cal_hz, refresh), cal_hz);
        let late = MonoPair {
            counter: p0.counter + 5 * refresh,
            mono_ns: p0.mono_ns + 60_000_000,
            width_ticks: 0,
        };
        assert_eq!(rate_after(Some(p0), late, cal_hz, refresh), cal_hz);
    }

    /// Regression: a pair was taken from a single bracket, so an interrupt or a stop of the
    /// virtual CPU between its two counter reads moved every expiry of the next 10 ms by up to
    /// half the stall (55 µs seen), and the wrong pair then looked like a slewed clock. A wide
    /// bracket is read again; the narrowest of all is taken when none is narrow.
    #[test]
    fn a_stall_inside_a_pair_is_read_again() {
        // (counter before, CLOCK_MONOTONIC, counter after): a 110 µs stall, then a clean read.
        let script = [(1_000, 50, 111_000), (120_000, 9_000, 120_090), (0, 0, 1)];
        let mut i = 0;
        let p = narrowest_pair(
            || {
                i += 1;
                script[i - 1]
            },
            100,
        );
        assert_eq!(i, 2, "stops at the first narrow bracket");
        assert_eq!(
            p,
            MonoPair {
                counter: 120_045,
                mono_ns: 9_000,
                width_ticks: 90
            }
        );
        // Every bracket wide: the narrowest.
        let mut n = 0u64;
        let p = narrowest_pair(
            || {
                n += 1;
                (n * 10_000, n, n * 10_000 + 1_000 + (n % 3) * 500)
            },
            100,
        );
        assert_eq!(n, PAIR_TRIES as u64);
        assert_eq!(p.width_ticks, 1_000);
    }

    /// Two pairs whose brackets were wide may miss each other's prediction by half of each
    /// bracket without counting as a slewed clock.
    #[test]
    fn bracket_widths_are_not_taken_for_slewing() {
        let cal_hz = 1e9; // 1 tick per ns
        let refresh = 10_000_000;
        let p0 = MonoPair {
            counter: 1_000_000,
            mono_ns: 5_000_000,
            width_ticks: 200,
        };
        let off = |by: u64, width_ticks: u64| MonoPair {
            counter: p0.counter + 10_000_000,
            mono_ns: p0.mono_ns + 10_000_000 + by,
            width_ticks,
        };
        // 100 ns of slack and half of 200 + 200 ticks.
        assert_eq!(rate_after(Some(p0), off(300, 200), cal_hz, refresh), cal_hz);
        assert_ne!(rate_after(Some(p0), off(301, 200), cal_hz, refresh), cal_hz);
        assert_ne!(rate_after(Some(p0), off(300, 0), cal_hz, refresh), cal_hz);
    }

    /// Absolute timers read CLOCK_MONOTONIC again only when a target lies past the pair's span:
    /// a 1 ms wakeup reads the pair once in ten, and every wakeup is still on time.
    #[test]
    fn absolute_timers_reuse_the_clock_pair_within_its_span() {
        let cal = Calibration::measure(CounterKind::MonotonicRaw, 10_000_000);
        std::thread::spawn(move || {
            let mut ops = OsOps::new(
                RawClock,
                cal,
                make_timer(TimerKind::Hr).expect("timer"),
                Arc::new(AtomicBool::new(false)),
            );
            let start = ops.clock.now() + 1_000_000;
            assert!(ops.sleep_until(start));
            let first = ops.pair.expect("a pair after the first sleep");
            for k in 1..=5u64 {
                let target = start + k * 1_000_000;
                assert!(ops.sleep_until(target));
                assert!(ops.clock.now() + 50_000 >= target, "woke early");
            }
            assert_eq!(ops.pair, Some(first), "re-read within the span");
            let far = first.counter + ops.refresh_ticks + 1_000_000;
            assert!(ops.sleep_until(far));
            let second = ops.pair.expect("pair");
            assert!(second.counter > first.counter, "not re-read past the span");
            assert!(ops.clock.now() + 50_000 >= far, "woke early");
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn every_timer_sleeps_to_its_target() {
        let cal = Calibration::measure(CounterKind::MonotonicRaw, 10_000_000);
        for kind in [
            TimerKind::Native,
            TimerKind::Hr,
            TimerKind::Timerfd,
            TimerKind::Posix,
            TimerKind::Busy,
        ] {
            std::thread::spawn(move || {
                sandglass_sys::signal::block(&[sandglass_sys::signal::timer_signal()])
                    .expect("block");
                let mut ops = OsOps::new(
                    RawClock,
                    cal,
                    make_timer(kind).expect("timer"),
                    Arc::new(AtomicBool::new(false)),
                );
                let target = ops.clock.now() + 2_000_000;
                assert!(ops.sleep_until(target), "{kind:?}");
                // Calibration error can make a timer wake a hair before the raw target.
                assert!(ops.clock.now() + 50_000 >= target, "{kind:?} woke early");
                assert!(ops.error.is_none());
                ops.stop.store(true, Ordering::Relaxed);
                assert!(
                    !ops.sleep_until(target + 1_000_000_000),
                    "{kind:?} ignored stop"
                );
            })
            .join()
            .expect("thread");
        }
    }
}
