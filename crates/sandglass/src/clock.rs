//! The counter the gap detector polls, and its calibration to nanoseconds.
//!
//! sandglass polls the CPU's cycle counter when it ticks at a constant rate in every power
//! state (the `constant_tsc` and `nonstop_tsc` flags on x86_64; always on aarch64's CNTVCT) and
//! `CLOCK_MONOTONIC_RAW` otherwise. Hourglass converted cycles to time "by comparing the rates at
//! which rdtsc and gettimeofday() run" (§3.1); sandglass does the same against
//! `CLOCK_MONOTONIC_RAW`, with each reference reading bracketed by two counter reads so that its
//! uncertainty is known, and records the result with that uncertainty.
//!
//! Anchors are taken before and after every run. The frequency used to convert a run's trace
//! comes from the whole run, so its uncertainty is the bracket width over the run's length
//! (parts per billion for a run of seconds). Each anchor also pairs the counter with
//! `CLOCK_MONOTONIC`, the clock of timers and of tracefs's `mono` trace clock, so that a trace
//! can be aligned with kernel events and timer expiries can be converted to counter values.

#[cfg(feature = "linux")]
use crate::engine::Clock;
use crate::units::round_i64;
#[cfg(feature = "linux")]
use sandglass_sys::clock::{now_ns, ClockId};
#[cfg(feature = "linux")]
use sandglass_sys::{counter, sched};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Which clock the gap detector polls, as the user asked (`--counter`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CounterChoice {
    /// The cycle counter when it is constant and non-stop, otherwise CLOCK_MONOTONIC_RAW.
    #[default]
    Auto,
    /// The cycle counter (TSC or CNTVCT), refused when it is not usable.
    Tsc,
    /// `clock_gettime(CLOCK_MONOTONIC_RAW)`.
    Raw,
}

/// Which counter a run polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CounterKind {
    /// x86_64 time-stamp counter, read with `lfence; rdtsc`.
    Tsc,
    /// aarch64 virtual counter CNTVCT_EL0.
    Cntvct,
    /// `clock_gettime(CLOCK_MONOTONIC_RAW)` through the vDSO.
    MonotonicRaw,
}

/// The counter's name as its architecture manual writes it.
impl std::fmt::Display for CounterKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CounterKind::Tsc => "TSC",
            CounterKind::Cntvct => "CNTVCT_EL0",
            CounterKind::MonotonicRaw => "CLOCK_MONOTONIC_RAW",
        })
    }
}

/// The x86_64 counter: `lfence; rdtsc` in the loop, `rdtscp` (counter and CPU in one
/// instruction) after a gap when the CPU supports it and Linux keeps the CPU number in TSC_AUX.
#[cfg(feature = "linux")]
#[derive(Clone, Copy, Debug)]
pub struct CycleClock {
    pub rdtscp: bool,
}

#[cfg(feature = "linux")]
impl Clock for CycleClock {
    #[inline(always)]
    fn now(&self) -> u64 {
        counter::read()
    }
    #[inline]
    fn now_with_cpu(&self) -> (u64, u32) {
        if self.rdtscp {
            counter::read_with_cpu()
        } else {
            let t = counter::read();
            (t, sched::current_cpu().unwrap_or(u32::MAX))
        }
    }
}

/// `CLOCK_MONOTONIC_RAW` as the counter, one tick per nanosecond.
#[cfg(feature = "linux")]
#[derive(Clone, Copy, Debug)]
pub struct RawClock;

#[cfg(feature = "linux")]
impl Clock for RawClock {
    #[inline(always)]
    fn now(&self) -> u64 {
        now_ns(ClockId::MonotonicRaw)
    }
    #[inline]
    fn now_with_cpu(&self) -> (u64, u32) {
        let cpu = sched::current_cpu().unwrap_or(u32::MAX);
        (now_ns(ClockId::MonotonicRaw), cpu)
    }
}

/// The counter chosen for a run, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CounterInfo {
    pub kind: CounterKind,
    /// `rdtscp` is used after gaps to read the counter and the CPU together.
    pub rdtscp: bool,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CounterError {
    #[error("--counter tsc: {0}; use --counter raw (CLOCK_MONOTONIC_RAW) or --counter auto")]
    TscUnusable(String),
}

/// Chooses the counter from the user's choice and the CPU flags of `/proc/cpuinfo`.
#[cfg(feature = "linux")]
pub fn select_counter(
    choice: CounterChoice,
    cpu_flags: &[String],
) -> Result<CounterInfo, CounterError> {
    let has = |f: &str| cpu_flags.iter().any(|x| x == f);
    let cycle_usable: Result<(CounterKind, &str), &str> = if cfg!(target_arch = "x86_64") {
        if !has("constant_tsc") {
            Err("the TSC rate changes with CPU frequency (no constant_tsc flag)")
        } else if !has("nonstop_tsc") {
            Err("the TSC stops in deep idle states (no nonstop_tsc flag)")
        } else {
            Ok((
                CounterKind::Tsc,
                "the TSC is constant and non-stop (constant_tsc, nonstop_tsc)",
            ))
        }
    } else if cfg!(target_arch = "aarch64") {
        Ok((
            CounterKind::Cntvct,
            "the architected generic timer CNTVCT_EL0 runs at a constant rate",
        ))
    } else {
        Err("this architecture has no cycle counter sandglass can read")
    };
    let raw = |why: String| CounterInfo {
        kind: CounterKind::MonotonicRaw,
        rdtscp: false,
        reason: why,
    };
    match (choice, cycle_usable) {
        (CounterChoice::Raw, _) => Ok(raw("--counter raw was given".to_string())),
        (CounterChoice::Tsc, Err(why)) => Err(CounterError::TscUnusable(why.to_string())),
        (CounterChoice::Auto, Err(why)) => {
            Ok(raw(format!("{why}; polling CLOCK_MONOTONIC_RAW instead")))
        }
        (_, Ok((kind, why))) => {
            let rdtscp = kind == CounterKind::Tsc && has("rdtscp") && tsc_aux_holds_cpu();
            Ok(CounterInfo {
                kind,
                rdtscp,
                reason: why.to_string(),
            })
        }
    }
}

/// True when `rdtscp`'s TSC_AUX matches `sched_getcpu()` (Linux stores the CPU number there).
#[cfg(feature = "linux")]
fn tsc_aux_holds_cpu() -> bool {
    if !counter::HAS_RDTSCP_INSTRUCTION {
        return false;
    }
    (0..50).any(|_| {
        let (_, aux) = counter::read_with_cpu();
        sched::current_cpu() == Some(aux)
    })
}

/// Reads the counter of `kind`.
#[cfg(feature = "linux")]
pub fn read_counter(kind: CounterKind) -> u64 {
    match kind {
        CounterKind::Tsc | CounterKind::Cntvct => counter::read(),
        CounterKind::MonotonicRaw => now_ns(ClockId::MonotonicRaw),
    }
}

/// A counter value and a clock reading taken between two counter reads `width_ticks` apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClockPair {
    pub counter: u64,
    pub clock_ns: u64,
    pub width_ticks: u64,
}

/// The counter paired with CLOCK_MONOTONIC_RAW and with CLOCK_MONOTONIC at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Anchor {
    pub monotonic_raw: ClockPair,
    pub monotonic: ClockPair,
}

#[cfg(feature = "linux")]
fn best_pair(kind: CounterKind, clock: ClockId) -> ClockPair {
    let mut best = ClockPair {
        counter: 0,
        clock_ns: 0,
        width_ticks: u64::MAX,
    };
    for _ in 0..31 {
        let a = read_counter(kind);
        let c = now_ns(clock);
        let b = read_counter(kind);
        let w = b.wrapping_sub(a);
        if w < best.width_ticks {
            best = ClockPair {
                counter: a + w / 2,
                clock_ns: c,
                width_ticks: w,
            };
        }
    }
    best
}

/// Pairs the counter with both monotonic clocks now.
#[cfg(feature = "linux")]
pub fn anchor(kind: CounterKind) -> Anchor {
    Anchor {
        monotonic_raw: best_pair(kind, ClockId::MonotonicRaw),
        monotonic: best_pair(kind, ClockId::Monotonic),
    }
}

/// The counter's rate and its relation to CLOCK_MONOTONIC, from two anchors.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Calibration {
    pub counter: CounterKind,
    /// Counter ticks per second of CLOCK_MONOTONIC_RAW.
    pub frequency_hz: f64,
    /// Half the two brackets' widths over the counter span, in parts per million.
    pub uncertainty_ppm: f64,
    /// Counter ticks per second of CLOCK_MONOTONIC (differs from the above by NTP's slew).
    pub monotonic_frequency_hz: f64,
    /// What the hardware advertises, where it does (CNTFRQ_EL0).
    pub advertised_frequency_hz: Option<u64>,
    pub start: Anchor,
    pub end: Anchor,
}

impl Calibration {
    /// The calibration between anchors `a` and `b` (taken in that order).
    #[cfg(feature = "linux")]
    pub fn from_anchors(counter: CounterKind, a: Anchor, b: Anchor) -> Calibration {
        let rate = |p: ClockPair, q: ClockPair| {
            let dc = q.counter.saturating_sub(p.counter) as f64;
            let dt = q.clock_ns.saturating_sub(p.clock_ns) as f64;
            if dt > 0.0 {
                dc * 1e9 / dt
            } else {
                1e9
            }
        };
        let span = b
            .monotonic_raw
            .counter
            .saturating_sub(a.monotonic_raw.counter)
            .max(1) as f64;
        let uncertainty =
            (a.monotonic_raw.width_ticks + b.monotonic_raw.width_ticks) as f64 / 2.0 / span;
        Calibration {
            counter,
            frequency_hz: rate(a.monotonic_raw, b.monotonic_raw),
            uncertainty_ppm: uncertainty * 1e6,
            monotonic_frequency_hz: rate(a.monotonic, b.monotonic),
            advertised_frequency_hz: sandglass_sys::counter::advertised_frequency_hz(),
            start: a,
            end: b,
        }
    }

    /// Measures the counter for `window_ns` (sleeping in between) and calibrates it.
    #[cfg(feature = "linux")]
    pub fn measure(counter: CounterKind, window_ns: u64) -> Calibration {
        let a = anchor(counter);
        let _ = sandglass_sys::clock::sleep_for(window_ns);
        let b = anchor(counter);
        Calibration::from_anchors(counter, a, b)
    }

    /// The same start anchor with a new end anchor: the calibration over a whole run.
    #[cfg(feature = "linux")]
    pub fn extended_to(&self, end: Anchor) -> Calibration {
        Calibration::from_anchors(self.counter, self.start, end)
    }

    pub fn ns_per_tick(&self) -> f64 {
        1e9 / self.frequency_hz
    }

    /// Ticks for a duration in nanoseconds, rounded to the nearest tick (at least 1 for a
    /// positive duration).
    pub fn ticks_for_ns(&self, ns: u64) -> u64 {
        let t = round_i64(ns as f64 * self.frequency_hz / 1e9).max(0) as u64;
        if ns > 0 {
            t.max(1)
        } else {
            0
        }
    }

    /// Nanoseconds for a number of ticks (a duration), rounded: [`Timebase::duration_ns`] at
    /// this calibration's rate.
    pub fn ns_for_ticks(&self, ticks: u64) -> u64 {
        self.timebase(0).duration_ns(ticks)
    }

    /// Signed nanoseconds from counter value `from` to `to`.
    pub fn ns_between(&self, from: u64, to: u64) -> i64 {
        self.timebase(0).signed_ns(to.wrapping_sub(from) as i64)
    }

    /// The conversion of a run whose time zero is counter value `zero`, at this calibration's
    /// rate.
    pub fn timebase(&self, zero: u64) -> Timebase {
        Timebase::new(zero, self.ns_per_tick())
    }

    /// The CLOCK_MONOTONIC time at counter value `c`.
    pub fn to_monotonic(&self, c: u64) -> u64 {
        let p = self.start.monotonic;
        let d = c.wrapping_sub(p.counter) as i64 as f64;
        (p.clock_ns as f64 + d * 1e9 / self.monotonic_frequency_hz).max(0.0) as u64
    }

    /// The map of a run whose time zero is counter value `zero` to CLOCK_MONOTONIC, at this
    /// calibration's two rates from its start anchor.
    pub fn clock_map(&self, zero: u64) -> ClockMap {
        ClockMap {
            frequency_hz: self.frequency_hz,
            monotonic_frequency_hz: self.monotonic_frequency_hz,
            anchor_counter: self.start.monotonic.counter,
            anchor_monotonic_ns: self.start.monotonic.clock_ns,
            run_start_counter: zero,
        }
    }

    /// The counter value at CLOCK_MONOTONIC time `mono_ns`.
    pub fn from_monotonic(&self, mono_ns: u64) -> u64 {
        let p = self.start.monotonic;
        let d = mono_ns as f64 - p.clock_ns as f64;
        (p.counter as f64 + d * self.monotonic_frequency_hz / 1e9).max(0.0) as u64
    }
}

/// The one conversion between a run's times and CLOCK_MONOTONIC, the clock of timers and of
/// tracefs's `mono` trace clock, over the run's whole calibration.
///
/// A run's times (`*_ns` from its time zero) count CLOCK_MONOTONIC_RAW: they are turned back
/// into counter ticks at `frequency_hz`, and the ticks into CLOCK_MONOTONIC from an anchor at
/// `monotonic_frequency_hz`. The two rates differ by NTP's frequency correction; taking both
/// over the whole run keeps a kernel event and a sample of a long run on one time line where
/// a run's time added to the CLOCK_MONOTONIC of its start would drift apart by that
/// correction (up to 500 ppm: 1.8 s an hour).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockMap {
    /// Counter ticks per second of CLOCK_MONOTONIC_RAW (the rate of the run's `*_ns` times).
    pub frequency_hz: f64,
    /// Counter ticks per second of CLOCK_MONOTONIC.
    pub monotonic_frequency_hz: f64,
    /// A counter value and the CLOCK_MONOTONIC time read with it.
    pub anchor_counter: u64,
    pub anchor_monotonic_ns: u64,
    /// The counter at the run's time zero.
    pub run_start_counter: u64,
}

impl ClockMap {
    /// CLOCK_MONOTONIC in ns at counter value `c`.
    pub fn counter_to_monotonic_ns(&self, c: u64) -> i64 {
        let d = c.wrapping_sub(self.anchor_counter) as i64 as f64;
        (self.anchor_monotonic_ns as f64 + d * 1e9 / self.monotonic_frequency_hz).round() as i64
    }

    /// CLOCK_MONOTONIC in ns at `t_ns` from the run's time zero.
    pub fn run_to_monotonic_ns(&self, t_ns: i64) -> i64 {
        let ticks = self.run_start_counter.wrapping_sub(self.anchor_counter) as i64 as f64
            + t_ns as f64 * self.frequency_hz / 1e9;
        (self.anchor_monotonic_ns as f64 + ticks * 1e9 / self.monotonic_frequency_hz).round() as i64
    }

    /// The run's time (ns from its time zero) at CLOCK_MONOTONIC `mono_ns`: the inverse of
    /// [`ClockMap::run_to_monotonic_ns`].
    pub fn monotonic_to_run_ns(&self, mono_ns: i64) -> i64 {
        let ticks =
            (mono_ns as f64 - self.anchor_monotonic_ns as f64) * self.monotonic_frequency_hz / 1e9
                - self.run_start_counter.wrapping_sub(self.anchor_counter) as i64 as f64;
        (ticks * 1e9 / self.frequency_hz).round() as i64
    }
}

/// The one conversion between counter ticks and nanoseconds in a run.
///
/// A duration of `t` ticks is `round(t × ns_per_tick)` nanoseconds, at the rate calibrated before
/// the run: the measuring threads record their histograms with it and the main thread converts
/// the stored samples with it, so the two agree to the nanosecond. A point in time is counted
/// from the run's time zero at the instant rate, which starts as the same rate and is refined
/// while the run goes ([`Timebase::refine`]) from the anchor taken before the run to the latest
/// one: its error stays within the anchors' own uncertainty (tens of nanoseconds) however long
/// the run, where a fixed rate measured over a tenth of a second would drift by milliseconds
/// over a day.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timebase {
    /// The counter value of the run's time zero.
    pub zero: u64,
    ns_per_tick: f64,
    instant_ns_per_tick: f64,
}

impl Timebase {
    pub fn new(zero: u64, ns_per_tick: f64) -> Timebase {
        Timebase {
            zero,
            ns_per_tick,
            instant_ns_per_tick: ns_per_tick,
        }
    }

    /// Nanoseconds per tick for durations.
    pub fn ns_per_tick(&self) -> f64 {
        self.ns_per_tick
    }

    /// A duration of `ticks`, in nanoseconds.
    #[inline(always)]
    pub fn duration_ns(&self, ticks: u64) -> u64 {
        round_i64(ticks as f64 * self.ns_per_tick).max(0) as u64
    }

    /// A signed duration of `ticks`, in nanoseconds.
    #[inline(always)]
    pub fn signed_ns(&self, ticks: i64) -> i64 {
        round_i64(ticks as f64 * self.ns_per_tick)
    }

    /// Nanoseconds from the run's time zero to counter value `tick` (negative before it).
    #[inline]
    pub fn at_ns(&self, tick: u64) -> i64 {
        round_i64(tick.wrapping_sub(self.zero) as i64 as f64 * self.instant_ns_per_tick)
    }

    /// Ticks in `ns` nanoseconds, rounded (at least one for a positive duration).
    pub fn ticks(&self, ns: u64) -> u64 {
        let t = round_i64(ns as f64 / self.ns_per_tick).max(0) as u64;
        if ns > 0 {
            t.max(1)
        } else {
            0
        }
    }

    /// Refines the instant rate with the span from anchor `first` (before the run) to `latest`.
    pub fn refine(&mut self, first: &Anchor, latest: &Anchor) {
        let dc = latest
            .monotonic_raw
            .counter
            .saturating_sub(first.monotonic_raw.counter);
        let dt = latest
            .monotonic_raw
            .clock_ns
            .saturating_sub(first.monotonic_raw.clock_ns);
        if dc > 0 && dt > 0 {
            self.instant_ns_per_tick = dt as f64 / dc as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timebase_converts_durations_and_instants() {
        let mut tb = Timebase::new(1_000, 1.0 / 3.0);
        assert_eq!(tb.duration_ns(3_000), 1_000);
        assert_eq!(tb.duration_ns(2), 1);
        assert_eq!(tb.signed_ns(-3_000), -1_000);
        assert_eq!(tb.at_ns(4_000), 1_000);
        assert_eq!(tb.at_ns(1), -333);
        assert_eq!(tb.ticks(1_000), 3_000);
        assert_eq!(tb.ticks(0), 0);
        let pair = |counter, clock_ns| ClockPair {
            counter,
            clock_ns,
            width_ticks: 10,
        };
        let a = Anchor {
            monotonic_raw: pair(0, 0),
            monotonic: pair(0, 0),
        };
        // Over the run the counter turns out to run at 2.999 ticks per ns: instants follow,
        // durations keep the rate the measuring threads used.
        let b = Anchor {
            monotonic_raw: pair(2_999_000_000, 1_000_000_000),
            monotonic: pair(2_999_000_000, 1_000_000_000),
        };
        tb.refine(&a, &b);
        assert_eq!(tb.at_ns(1_000 + 2_999_000), 1_000_000);
        assert_eq!(tb.duration_ns(3_000), 1_000);
    }

    fn flags(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn counter_selection_follows_the_flags() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let good = flags("fpu tsc constant_tsc nonstop_tsc rdtscp");
        assert_eq!(
            select_counter(CounterChoice::Auto, &good).map(|c| c.kind),
            Ok(CounterKind::Tsc)
        );
        let no_const = flags("fpu tsc nonstop_tsc");
        let c = select_counter(CounterChoice::Auto, &no_const).expect("auto falls back");
        assert_eq!(c.kind, CounterKind::MonotonicRaw);
        assert!(c.reason.contains("constant_tsc"));
        assert!(select_counter(CounterChoice::Tsc, &no_const).is_err());
        assert_eq!(
            select_counter(CounterChoice::Raw, &good).map(|c| c.kind),
            Ok(CounterKind::MonotonicRaw)
        );
    }

    #[test]
    fn arithmetic_on_exact_anchors() {
        let pair = |counter, clock_ns| ClockPair {
            counter,
            clock_ns,
            width_ticks: 20,
        };
        let a = Anchor {
            monotonic_raw: pair(1_000, 0),
            monotonic: pair(1_000, 5_000_000_000),
        };
        let b = Anchor {
            monotonic_raw: pair(3_000_001_000, 1_000_000_000),
            monotonic: pair(3_000_001_000, 6_000_000_000),
        };
        let c = Calibration::from_anchors(CounterKind::Tsc, a, b);
        assert!((c.frequency_hz - 3e9).abs() < 1e-3);
        assert!((c.uncertainty_ppm - 20.0 / 3e9 * 1e6).abs() < 1e-9);
        assert_eq!(c.ticks_for_ns(1_000), 3_000);
        assert_eq!(c.ns_for_ticks(3_000), 1_000);
        assert_eq!(c.ns_between(4_000, 1_000), -1_000);
        assert_eq!(c.to_monotonic(3_001_000), 5_001_000_000);
        assert_eq!(c.from_monotonic(5_001_000_000), 3_001_000);
    }

    /// CLOCK_MONOTONIC slewed 100 ppm slower than CLOCK_MONOTONIC_RAW: an hour into a run is
    /// 360 ms less of it, where adding the run's time to its start would be 360 ms off; the
    /// inverse map gives the run's time back, within a nanosecond.
    #[test]
    fn a_runs_times_follow_a_slewed_monotonic_clock() {
        let pair = |counter, clock_ns| ClockPair {
            counter,
            clock_ns,
            width_ticks: 0,
        };
        let hour = 3_600_000_000_000u64;
        let a = Anchor {
            monotonic_raw: pair(1_000, 0),
            monotonic: pair(1_000, 5_000_000_000),
        };
        // 3 ticks per raw ns; an hour of raw time is 0.9999 h of CLOCK_MONOTONIC.
        let b = Anchor {
            monotonic_raw: pair(1_000 + 3 * hour, hour),
            monotonic: pair(1_000 + 3 * hour, 5_000_000_000 + hour - hour / 10_000),
        };
        let c = Calibration::from_anchors(CounterKind::Tsc, a, b);
        let zero = 1_000 + 3 * 1_000_000_000; // a second after the anchor
        let m = c.clock_map(zero);
        assert_eq!(m.run_to_monotonic_ns(0), 5_000_000_000 + 999_900_000);
        let at = m.run_to_monotonic_ns((hour - 1_000_000_000) as i64);
        assert_eq!(at, 5_000_000_000 + (hour - hour / 10_000) as i64);
        assert_eq!(m.counter_to_monotonic_ns(1_000 + 3 * hour), at);
        // Within the nanosecond each direction rounds to.
        for t in [0i64, 1, 999_999_999, 3_599_000_000_000, -5_000] {
            let back = m.monotonic_to_run_ns(m.run_to_monotonic_ns(t));
            assert!(back.abs_diff(t) <= 1, "{t} came back as {back}");
        }
    }

    /// The calibrated counter agrees with CLOCK_MONOTONIC_RAW within 0.1% over one second.
    #[test]
    fn counter_frequency_agrees_with_monotonic_raw() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let fl: Vec<String> = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags") || l.starts_with("Features"))
            .map(|l| flags(l.split(':').nth(1).unwrap_or("")))
            .unwrap_or_default();
        let info = select_counter(CounterChoice::Auto, &fl).expect("a counter");
        let cal = Calibration::measure(info.kind, 100_000_000);
        let t0 = read_counter(info.kind);
        let r0 = now_ns(ClockId::MonotonicRaw);
        std::thread::sleep(std::time::Duration::from_secs(1));
        let t1 = read_counter(info.kind);
        let r1 = now_ns(ClockId::MonotonicRaw);
        let by_counter = cal.ns_for_ticks(t1 - t0) as f64;
        let by_raw = (r1 - r0) as f64;
        let rel = (by_counter - by_raw).abs() / by_raw;
        assert!(
            rel < 0.001,
            "counter says {by_counter} ns, CLOCK_MONOTONIC_RAW says {by_raw} ns ({:?})",
            info.kind
        );
        assert!(cal.uncertainty_ppm < 100.0, "{}", cal.uncertainty_ppm);
    }
}
