//! What measuring threads record while they run, beside the trace: HDR histograms of
//! interruptions and of timer lateness, and live figures for a progress display.
//!
//! Everything here is allocated before the run. Recording into an `hdrhistogram::Histogram`
//! with fixed bounds computes an index and increments a counter: no allocation, no lock. The
//! histograms keep the tail exactly to their precision however long the run is, even when the
//! sample buffers fill up.
//!
//! Values are nanoseconds, converted from counter ticks with the calibration taken before the
//! run (`ns_per_tick`); the range is 1 ns to one hour at three significant digits, so every
//! recorded value is exact to 0.1%, and longer values are recorded as one hour (and counted).

use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest value the histograms hold: one hour in nanoseconds.
pub const HIST_MAX_NS: u64 = 3_600_000_000_000;
/// Significant decimal digits of the histograms.
pub const HIST_DIGITS: u8 = 3;

/// A histogram of nanoseconds from 1 ns to one hour at three significant digits, with every
/// counter written once so that its pages are present before a run (recording into a page
/// touched for the first time would fault inside the measurement).
pub fn new_histogram() -> Histogram<u64> {
    match Histogram::new_with_bounds(1, HIST_MAX_NS, HIST_DIGITS) {
        Ok(mut h) => {
            h.reset();
            h
        }
        // The bounds are constants that meet every requirement of the crate (low >= 1,
        // high >= 2 * low, at most five digits).
        Err(e) => unreachable!("constant histogram bounds refused: {e:?}"),
    }
}

/// Records `ns` into `h`, counting values beyond the histogram's range in `over`.
#[inline]
pub fn record(h: &mut Histogram<u64>, ns: u64, over: &mut u64) {
    if ns > HIST_MAX_NS {
        *over += 1;
    }
    h.saturating_record(ns);
}

/// Interruptions of a polling thread: the gaps it did not cause.
#[derive(Clone, Debug)]
pub struct GapStats {
    /// Gap durations in ns: the difference between the two counter reads around the gap.
    pub hist: Histogram<u64>,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Gaps longer than the histogram's range.
    pub over: u64,
}

impl Default for GapStats {
    fn default() -> Self {
        GapStats {
            hist: new_histogram(),
            count: 0,
            total_ns: 0,
            max_ns: 0,
            over: 0,
        }
    }
}

impl GapStats {
    #[inline]
    pub fn add(&mut self, ns: u64) {
        self.count += 1;
        self.total_ns += ns;
        self.max_ns = self.max_ns.max(ns);
        record(&mut self.hist, ns, &mut self.over);
    }
}

/// Lateness and intervals of a timer thread.
#[derive(Clone, Debug)]
pub struct TimerStats {
    /// Lateness of every release, missed ones included (corrected for coordinated omission).
    pub lateness: Histogram<u64>,
    /// Lateness of the release each wakeup waited for, one per wakeup (what cyclictest reports).
    pub raw: Histogram<u64>,
    /// Time between successive wakeups.
    pub interval: Histogram<u64>,
    /// Releases that were due before the wakeup that served them: the thread woke more than one
    /// period late.
    pub missed: u64,
    pub wakeups: u64,
    /// Releases served (wakeups plus missed releases).
    pub releases: u64,
    /// Signed extremes of the lateness (the histogram holds negative values as 0).
    pub min_lateness_ns: i64,
    pub max_lateness_ns: i64,
    /// Wakeups the counter placed before their release (negative lateness: calibration error
    /// between the counter and CLOCK_MONOTONIC, within nanoseconds).
    pub early: u64,
    pub over: u64,
}

impl Default for TimerStats {
    fn default() -> Self {
        TimerStats {
            lateness: new_histogram(),
            raw: new_histogram(),
            interval: new_histogram(),
            missed: 0,
            wakeups: 0,
            releases: 0,
            min_lateness_ns: i64::MAX,
            max_lateness_ns: i64::MIN,
            early: 0,
            over: 0,
        }
    }
}

impl TimerStats {
    /// Records one release served at a wakeup `late_ns` after it; `first` when it is the
    /// release the wakeup waited for.
    #[inline]
    pub fn release(&mut self, late_ns: i64, first: bool) {
        self.releases += 1;
        self.min_lateness_ns = self.min_lateness_ns.min(late_ns);
        self.max_lateness_ns = self.max_lateness_ns.max(late_ns);
        let clamped = if late_ns < 0 {
            self.early += 1;
            0
        } else {
            late_ns as u64
        };
        record(&mut self.lateness, clamped, &mut self.over);
        if first {
            record(&mut self.raw, clamped, &mut self.over);
        } else {
            self.missed += 1;
        }
    }
}

/// Figures a measuring thread publishes while it runs, for a live display on another CPU.
/// One writer, relaxed atomics: a reader sees recent values, never torn ones.
#[derive(Debug)]
pub struct Progress {
    /// Wakeups (timer threads) or interruptions (polling threads) so far.
    pub events: AtomicU64,
    /// Missed releases so far.
    pub missed: AtomicU64,
    /// Largest lateness or interruption so far, in ns.
    pub max_ns: AtomicU64,
    /// The counter value at which the thread's open execution interval began, the start of
    /// the next record it will write: 0 while it opens one, `u64::MAX` when it has none (it
    /// blocked or finished). The main thread orders records of several threads by start with
    /// it ([`super::merge`]).
    pub open_since: AtomicU64,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            events: AtomicU64::new(0),
            missed: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            open_since: AtomicU64::new(u64::MAX),
        }
    }
}

impl Progress {
    #[inline]
    pub fn publish(&self, events: u64, missed: u64, max_ns: u64) {
        self.events.store(events, Ordering::Relaxed);
        self.missed.store(missed, Ordering::Relaxed);
        self.max_ns.store(max_ns, Ordering::Relaxed);
    }

    /// (events, missed, max_ns) as last published.
    pub fn read(&self) -> (u64, u64, u64) {
        (
            self.events.load(Ordering::Relaxed),
            self.missed.load(Ordering::Relaxed),
            self.max_ns.load(Ordering::Relaxed),
        )
    }
}

/// Work a polling thread does between two counter reads.
#[derive(Clone, Debug, Default)]
pub enum Work {
    /// Nothing: the tightest loop.
    #[default]
    None,
    /// Touch one 64-byte line of this working set per read, sequentially (CPU_SCAN).
    Scan(Vec<u64>),
    /// Copy `src` over `dst` per read (oslat's memmove workload).
    Memmove { src: Vec<u8>, dst: Vec<u8> },
}

impl Work {
    /// A scanned working set of `kb` KiB, touched once so it is present before the run.
    pub fn scan_kb(kb: u64) -> Work {
        if kb == 0 {
            Work::None
        } else {
            Work::Scan(vec![1u64; (kb as usize * 1024) / 8])
        }
    }

    /// Two buffers of `bytes` for a memmove workload, touched once.
    pub fn memmove(bytes: usize) -> Work {
        if bytes == 0 {
            Work::None
        } else {
            Work::Memmove {
                src: vec![0x5a; bytes],
                dst: vec![0xa5; bytes],
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_stats_split_raw_and_missed() {
        let mut t = TimerStats::default();
        t.release(50_000_000, true);
        for k in 1..=49 {
            t.release(50_000_000 - k * 1_000_000, false);
        }
        t.release(-3, true);
        assert_eq!((t.releases, t.missed, t.early), (51, 49, 1));
        assert_eq!(t.raw.len(), 2);
        assert_eq!(t.lateness.len(), 51);
        assert_eq!((t.min_lateness_ns, t.max_lateness_ns), (-3, 50_000_000));
        assert_eq!(t.lateness.min(), 0);
    }

    #[test]
    fn values_beyond_an_hour_are_counted() {
        let mut g = GapStats::default();
        g.add(10);
        g.add(HIST_MAX_NS + 5);
        assert_eq!((g.count, g.over), (2, 1));
        assert_eq!(g.max_ns, HIST_MAX_NS + 5);
        assert!(g.hist.max() >= HIST_MAX_NS * 999 / 1000);
    }

    #[test]
    fn histogram_precision_is_three_digits() {
        let mut h = new_histogram();
        for v in [1u64, 999, 123_456, 987_654_321] {
            h.saturating_record(v);
        }
        for v in [1u64, 999, 123_456, 987_654_321] {
            assert_eq!(h.count_at(v), 1);
            let err = (h.highest_equivalent(v) - v) as f64 / v as f64;
            assert!(err <= 0.001, "{v}: {err}");
        }
    }
}
