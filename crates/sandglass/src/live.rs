//! Figures of a run as it goes, for readers in other threads: the Prometheus exposition of
//! `sandglass monitor` and the table of `sandglass top`.
//!
//! The main thread records every release it drains from the measuring threads' rings (never
//! the measuring threads themselves), so the cost is a few relaxed atomic additions per sample
//! on a CPU that is not measured. A reader's snapshot of a CPU is consistent: it holds exactly
//! the first N releases of that CPU in the order the run stores them (a sequence lock around
//! each batch; the writer never waits). Every counter only grows, over the whole life of the
//! process (every segment of a monitor).
//!
//! **Buckets.** Lateness is counted in log-spaced buckets: the upper bound of bucket k is
//! `1 µs · 2^(k/8)`, k = 0..=[`BUCKETS`] − 1 (1 µs to 1.05 s), and one more for anything
//! later. A quantile estimated from these buckets by linear interpolation, as Prometheus's
//! `histogram_quantile` does, lies in the same bucket as the exact one, so its relative error
//! is at most `2^(1/8) − 1` = 9.05 % ([`RELATIVE_ERROR`]) for quantiles above 1 µs.

use std::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering, Ordering::Relaxed};
use std::sync::Mutex;

/// Buckets per doubling.
pub const PER_OCTAVE: u32 = 8;
/// Finite buckets: 1 µs to 2^20 µs.
pub const BUCKETS: usize = 161;
/// The first bucket's upper bound, in ns.
pub const LOWEST_NS: f64 = 1_000.0;
/// The largest relative error of a quantile interpolated within one bucket.
pub const RELATIVE_ERROR: f64 = 0.090_507_732_665_257_66;

/// The upper bound of bucket `k` in ns (`k` < [`BUCKETS`]).
pub fn upper_ns(k: usize) -> f64 {
    LOWEST_NS * (k as f64 / PER_OCTAVE as f64).exp2()
}

/// The bucket of `ns`: the first whose upper bound is at least `ns` ([`BUCKETS`] beyond).
pub fn bucket_of(ns: u64) -> usize {
    let v = ns as f64;
    if v <= LOWEST_NS {
        return 0;
    }
    let mut k = ((v / LOWEST_NS).log2() * PER_OCTAVE as f64).ceil() as usize;
    // The logarithm may round across a bound: settle on the exact first bound ≥ v.
    while k > 0 && k <= BUCKETS && upper_ns(k - 1) >= v {
        k -= 1;
    }
    while k < BUCKETS && upper_ns(k) < v {
        k += 1;
    }
    k.min(BUCKETS)
}

/// One measured CPU's live figures.
#[derive(Debug)]
pub struct LiveCpu {
    pub cpu: usize,
    /// Per-bucket counts (not cumulative), the last one beyond the largest bound.
    buckets: Box<[AtomicU64]>,
    releases: AtomicU64,
    missed: AtomicU64,
    /// Sum of lateness, ns (for the histogram's `_sum`).
    sum_ns: AtomicU64,
    /// The latest release's lateness, ns.
    current_ns: AtomicI64,
    /// The smallest and largest lateness so far, ns.
    min_ns: AtomicI64,
    max_ns: AtomicI64,
    /// Odd while a batch is being counted.
    seq: AtomicU64,
}

/// A batch under way ([`LiveCpu::batch`]).
pub struct BatchGuard<'a>(&'a LiveCpu);

impl Drop for BatchGuard<'_> {
    fn drop(&mut self) {
        self.0.seq.fetch_add(1, Ordering::Release);
    }
}

/// A copy of one CPU's figures at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuSnapshot {
    pub cpu: usize,
    pub buckets: Vec<u64>,
    pub releases: u64,
    pub missed: u64,
    pub sum_ns: u64,
    pub current_ns: i64,
    /// `i64::MAX` and `i64::MIN` before the first release.
    pub min_ns: i64,
    pub max_ns: i64,
}

impl CpuSnapshot {
    /// Releases certainly later than `ns`: those in buckets whose lower bound is at least
    /// `ns` (a lower bound on the exact count; the bucket holding `ns` is left out).
    pub fn certainly_above(&self, ns: u64) -> u64 {
        self.buckets
            .iter()
            .enumerate()
            .filter(|&(k, _)| k > 0 && upper_ns(k - 1) >= ns as f64)
            .map(|(_, c)| c)
            .sum()
    }
}

impl LiveCpu {
    fn new(cpu: usize) -> LiveCpu {
        LiveCpu {
            cpu,
            buckets: (0..=BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            releases: AtomicU64::new(0),
            missed: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            current_ns: AtomicI64::new(0),
            min_ns: AtomicI64::new(i64::MAX),
            max_ns: AtomicI64::new(i64::MIN),
            seq: AtomicU64::new(0),
        }
    }

    /// Starts counting a batch of releases: readers wait until the guard is dropped (however
    /// the batch ends, an error included).
    #[inline]
    pub fn batch(&self) -> BatchGuard<'_> {
        self.seq.fetch_add(1, Relaxed);
        fence(Ordering::Release);
        BatchGuard(self)
    }

    /// One release, `late_ns` late (negative: early, counted in the first bucket).
    #[inline]
    pub fn release(&self, late_ns: i64, missed: bool) {
        let ns = late_ns.max(0) as u64;
        self.buckets[bucket_of(ns)].fetch_add(1, Relaxed);
        self.releases.fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
        if missed {
            self.missed.fetch_add(1, Relaxed);
        }
        self.current_ns.store(late_ns, Relaxed);
        self.min_ns.fetch_min(late_ns, Relaxed);
        self.max_ns.fetch_max(late_ns, Relaxed);
    }

    /// The figures between two batches.
    pub fn snapshot(&self) -> CpuSnapshot {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let s = CpuSnapshot {
                cpu: self.cpu,
                buckets: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
                releases: self.releases.load(Relaxed),
                missed: self.missed.load(Relaxed),
                sum_ns: self.sum_ns.load(Relaxed),
                current_ns: self.current_ns.load(Relaxed),
                min_ns: self.min_ns.load(Relaxed),
                max_ns: self.max_ns.load(Relaxed),
            };
            fence(Ordering::Acquire);
            if self.seq.load(Relaxed) == before {
                return s;
            }
        }
    }
}

impl CpuSnapshot {
    /// Samples counted in the buckets.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The mean lateness, ns.
    pub fn mean_ns(&self) -> Option<f64> {
        (self.releases > 0).then(|| self.sum_ns as f64 / self.releases as f64)
    }

    /// The quantile `q` of the samples between this snapshot and an `earlier` one, as
    /// Prometheus's `histogram_quantile` estimates it: linear within the bucket holding the
    /// rank (from 0 in the first bucket); `None` without samples, the largest finite bound
    /// when the rank falls beyond it.
    pub fn quantile_since(&self, earlier: Option<&CpuSnapshot>, q: f64) -> Option<f64> {
        let counts: Vec<u64> = match earlier {
            Some(e) => self
                .buckets
                .iter()
                .zip(&e.buckets)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            None => self.buckets.clone(),
        };
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut below = 0u64;
        for (k, &c) in counts.iter().enumerate() {
            if c > 0 && (below + c) as f64 >= rank {
                if k == BUCKETS {
                    return Some(upper_ns(BUCKETS - 1));
                }
                let lo = if k == 0 { 0.0 } else { upper_ns(k - 1) };
                let hi = upper_ns(k);
                return Some(lo + (hi - lo) * (rank - below as f64) / c as f64);
            }
            below += c;
        }
        Some(upper_ns(BUCKETS - 1))
    }
}

/// What the monitor says about its segments, for the exposition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegmentInfo {
    /// Segments completed (catalogued) since the process started.
    pub completed: u64,
    /// The run directory of the segment under way.
    pub current: Option<String>,
    /// Interruptions the last completed segment's causes named, largest share first:
    /// (cause, delays it explained).
    pub causes: Vec<(String, u64)>,
    /// Measured share of the time (the duty cycle), 0 to 1.
    pub duty: f64,
}

/// Every measured CPU's live figures.
#[derive(Debug)]
pub struct Live {
    cpus: Vec<LiveCpu>,
    segment: Mutex<SegmentInfo>,
}

impl Live {
    /// Live figures for `cpus`, all zero.
    pub fn new(cpus: &[usize]) -> Live {
        Live {
            cpus: cpus.iter().map(|&c| LiveCpu::new(c)).collect(),
            segment: Mutex::new(SegmentInfo::default()),
        }
    }

    /// The figures of `cpu`, when it is measured.
    pub fn cpu(&self, cpu: usize) -> Option<&LiveCpu> {
        self.cpus.iter().find(|c| c.cpu == cpu)
    }

    pub fn snapshot(&self) -> Vec<CpuSnapshot> {
        self.cpus.iter().map(LiveCpu::snapshot).collect()
    }

    pub fn segment(&self) -> SegmentInfo {
        self.segment.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Changes what is known of the segments.
    pub fn update_segment(&self, f: impl FnOnce(&mut SegmentInfo)) {
        if let Ok(mut s) = self.segment.lock() {
            f(&mut s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn certainly_above_counts_only_whole_buckets_beyond() {
        let live = Live::new(&[1]);
        let c = live.cpu(1).expect("cpu");
        {
            let _b = c.batch();
            for ns in [5_000, 499_000, 501_000, 520_000, 600_000, 2_000_000] {
                c.release(ns, false);
            }
        }
        let s = c.snapshot();
        // 501 µs shares the bucket of 500 µs (469.5-512 µs): not certain.
        assert_eq!(s.certainly_above(500_000), 3);
        assert_eq!(s.certainly_above(1_000), 6);
        assert_eq!(s.certainly_above(3_000_000), 0);
    }

    #[test]
    fn bounds_double_every_eight_buckets() {
        assert_eq!(upper_ns(0), 1_000.0);
        assert!((upper_ns(8) - 2_000.0).abs() < 1e-9);
        assert!((upper_ns(160) - 1_048_576_000.0).abs() < 1e-3);
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1_000), 0);
        assert_eq!(bucket_of(1_001), 1);
        assert_eq!(bucket_of(2_000), 8);
        assert_eq!(bucket_of(2_001), 9);
        assert_eq!(bucket_of(u64::MAX), BUCKETS);
        assert!((2f64.powf(1.0 / 8.0) - 1.0 - RELATIVE_ERROR).abs() < 1e-15);
    }

    proptest! {
        /// Every value falls in the first bucket whose bound holds it.
        #[test]
        fn bucket_is_the_first_bound_at_or_above(ns in 0u64..5_000_000_000) {
            let k = bucket_of(ns);
            if k < BUCKETS {
                prop_assert!(upper_ns(k) >= ns as f64);
            }
            if k > 0 {
                prop_assert!(upper_ns(k - 1) < ns as f64);
            }
        }

        /// The interpolated quantile lies within the stated relative error of the exact
        /// nearest-rank quantile, for values from 1 µs to 1 s.
        #[test]
        fn interpolated_quantiles_are_within_the_stated_error(
            values in proptest::collection::vec(1_001u64..1_000_000_000, 1..400),
            q in prop_oneof![Just(0.5), Just(0.9), Just(0.99), Just(0.999)],
        ) {
            let live = LiveCpu::new(0);
            for &v in &values {
                live.release(v as i64, false);
            }
            let s = live.snapshot();
            let est = s.quantile_since(None, q).expect("samples");
            let mut sorted: Vec<i64> = values.iter().map(|&v| v as i64).collect();
            sorted.sort_unstable();
            let exact = crate::stats::quantile_sorted(&sorted, q).expect("samples") as f64;
            let err = (est - exact).abs() / exact;
            prop_assert!(err <= RELATIVE_ERROR + 1e-12, "q {q}: estimate {est} exact {exact}");
        }
    }

    /// A reader racing a writer sees whole batches only.
    #[test]
    fn snapshots_hold_whole_batches() {
        let live = std::sync::Arc::new(LiveCpu::new(0));
        let writer = {
            let live = live.clone();
            std::thread::spawn(move || {
                for _ in 0..2_000 {
                    let _batch = live.batch();
                    for _ in 0..10 {
                        live.release(5_000, false);
                    }
                }
            })
        };
        for _ in 0..2_000 {
            let s = live.snapshot();
            assert_eq!(s.releases % 10, 0);
            assert_eq!(s.count(), s.releases);
        }
        writer.join().expect("writer");
        assert_eq!(live.snapshot().releases, 20_000);
    }

    #[test]
    fn quantile_since_takes_only_the_new_samples() {
        let live = LiveCpu::new(3);
        for _ in 0..100 {
            live.release(5_000, false);
        }
        let before = live.snapshot();
        for _ in 0..100 {
            live.release(500_000, true);
        }
        let after = live.snapshot();
        let p50 = after.quantile_since(Some(&before), 0.5).expect("samples");
        assert!((p50 - 500_000.0).abs() / 500_000.0 <= RELATIVE_ERROR);
        assert_eq!((after.releases, after.missed), (200, 100));
        assert_eq!(after.current_ns, 500_000);
    }
}
