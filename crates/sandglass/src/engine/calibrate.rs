//! Calibration of the gap threshold from the polling loop's own iteration times.
//!
//! Hourglass (§3.1): "the value of the GAP constant needs to be chosen to be longer than the
//! typical iteration time of the loop in Figure 2, but shorter than the length of the shortest
//! actual gap in execution that a thread experiences ... Setting GAP to twice this value appears
//! to avoid detecting spurious gaps while still detecting even fast interrupt handlers."
//!
//! sandglass measures the distribution of iteration times of the same loop (counter read,
//! difference, store, and the working-set access of scanning models) on the CPU the threads
//! will use, and chooses `max(4 × p99.9, 500 ns)`, rounded up to 10 ns.
//!
//! Why these numbers. The 99.9th percentile is the "typical" iteration including the loop's own
//! cache and TLB misses; four times it leaves room for the occasional slow iteration, as
//! Hourglass's factor of two did for a loop whose cost was dominated by the counter read. A
//! higher percentile is not stable: on a virtual machine the loop also sees pauses of 0.1 to
//! 1 µs about once per 10 000 iterations (host activity the guest cannot see), so the 99.99th
//! percentile lands inside that cluster and moves between runs by a factor of four. The 500 ns
//! floor sits above that cluster's bulk and below the shortest interrupt handler a guest or a
//! bare-metal kernel can run (entry and exit alone cost more), which is also the smallest
//! threshold at which an idle CPU of such a machine shows no spurious gaps.

use super::record::Work;
use serde::{Deserialize, Serialize};

/// Iteration times below this many ticks are counted exactly.
pub const FINE_TICKS: usize = 4096;
const COARSE: usize = 52;

/// The floor of the calibrated threshold.
pub const MIN_THRESHOLD_NS: f64 = 500.0;
/// The multiple of the 99.9th percentile iteration time.
pub const THRESHOLD_FACTOR: f64 = 4.0;

/// A histogram of loop iteration times in counter ticks: exact below [`FINE_TICKS`], then in
/// power-of-two buckets. Allocated before the loop; recording never allocates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoopHistogram {
    pub fine: Vec<u64>,
    /// `coarse[k]` counts iterations in `[FINE_TICKS·2^k, FINE_TICKS·2^(k+1))`.
    pub coarse: Vec<u64>,
    pub count: u64,
    pub max: u64,
}

impl Default for LoopHistogram {
    fn default() -> Self {
        LoopHistogram {
            fine: vec![0; FINE_TICKS],
            coarse: vec![0; COARSE],
            count: 0,
            max: 0,
        }
    }
}

impl LoopHistogram {
    #[inline(always)]
    pub fn record(&mut self, ticks: u64) {
        if let Some(c) = self.fine.get_mut(ticks as usize) {
            *c += 1;
        } else {
            let k = (ticks / FINE_TICKS as u64).ilog2() as usize;
            if let Some(c) = self.coarse.get_mut(k) {
                *c += 1;
            }
        }
        self.count += 1;
        if ticks > self.max {
            self.max = ticks;
        }
    }

    /// The smallest value `v` (in ticks) such that at least a fraction `q` of the iterations
    /// took at most `v` (for coarse buckets, the bucket's upper bound).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let need = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (t, &c) in self.fine.iter().enumerate() {
            seen += c;
            if seen >= need {
                return t as u64;
            }
        }
        for (k, &c) in self.coarse.iter().enumerate() {
            seen += c;
            if seen >= need {
                let upper = (FINE_TICKS as u64) << (k + 1);
                return (upper - 1).min(self.max);
            }
        }
        self.max
    }

    /// Iterations that took more than `ticks`.
    pub fn count_above(&self, ticks: u64) -> u64 {
        let mut n = 0;
        for (t, &c) in self.fine.iter().enumerate() {
            if t as u64 > ticks {
                n += c;
            }
        }
        for (k, &c) in self.coarse.iter().enumerate() {
            let lower = (FINE_TICKS as u64) << k;
            if lower > ticks {
                n += c;
            }
        }
        n
    }

    /// Non-empty buckets as `(lowest ticks, highest ticks, count)`.
    pub fn buckets(&self) -> Vec<(u64, u64, u64)> {
        let mut v: Vec<(u64, u64, u64)> = self
            .fine
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(t, &c)| (t as u64, t as u64, c))
            .collect();
        for (k, &c) in self.coarse.iter().enumerate() {
            if c > 0 {
                let lo = (FINE_TICKS as u64) << k;
                v.push((lo, (lo << 1) - 1, c));
            }
        }
        v
    }
}

/// Runs `iterations` of the polling loop with counter `read` and the same `work` between reads
/// as the measuring threads will do, and returns the iteration-time histogram.
pub fn measure<F: Fn() -> u64>(read: F, iterations: u64, work: &mut Work) -> LoopHistogram {
    match work {
        Work::None => measure_with(read, iterations, || {}),
        Work::Scan(ws) => {
            let mut si = 0usize;
            measure_with(read, iterations, || {
                if let Some(x) = ws.get_mut(si) {
                    *x = x.wrapping_add(1);
                }
                si += 8;
                if si >= ws.len() {
                    si = 0;
                }
            })
        }
        Work::Memmove { src, dst } => {
            let len = src.len().min(dst.len());
            measure_with(read, iterations, || {
                dst[..len].copy_from_slice(&src[..len]);
                std::hint::black_box(&mut *dst);
            })
        }
    }
}

fn measure_with<F: Fn() -> u64, W: FnMut()>(
    read: F,
    iterations: u64,
    mut work: W,
) -> LoopHistogram {
    let mut h = LoopHistogram::default();
    let mut last = read();
    for _ in 0..iterations {
        let now = read();
        h.record(now.wrapping_sub(last));
        last = now;
        work();
    }
    h
}

/// The threshold the engine uses and how it was obtained.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GapChoice {
    pub threshold_ns: u64,
    /// `"given"` (from `-g`) or `"calibrated"`.
    pub source: String,
    /// The rule or reason, for people.
    pub explanation: String,
    /// The loop measurement, when calibrated.
    pub loop_stats: Option<LoopStats>,
}

/// Percentiles of a loop-iteration histogram, in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoopStats {
    pub iterations: u64,
    pub cpu: Option<u32>,
    pub p50_ns: f64,
    pub p99_ns: f64,
    pub p99_9_ns: f64,
    pub p99_99_ns: f64,
    pub p99_999_ns: f64,
    pub max_ns: f64,
    pub mean_ns: f64,
}

impl LoopStats {
    /// Summarises `h`, with `ns_per_tick` from the counter calibration and `elapsed_ns` the
    /// loop's wall time (for the mean).
    pub fn from_histogram(
        h: &LoopHistogram,
        ns_per_tick: f64,
        elapsed_ns: f64,
        cpu: Option<u32>,
    ) -> LoopStats {
        let q = |x: f64| h.quantile(x) as f64 * ns_per_tick;
        LoopStats {
            iterations: h.count,
            cpu,
            p50_ns: q(0.5),
            p99_ns: q(0.99),
            p99_9_ns: q(0.999),
            p99_99_ns: q(0.9999),
            p99_999_ns: q(0.99999),
            max_ns: h.max as f64 * ns_per_tick,
            mean_ns: if h.count > 0 {
                elapsed_ns / h.count as f64
            } else {
                0.0
            },
        }
    }
}

/// Chooses the threshold from a measured loop: `max(4 × p99.9, 500 ns)`, rounded up to 10 ns.
pub fn choose_threshold(stats: &LoopStats) -> GapChoice {
    let raw = (THRESHOLD_FACTOR * stats.p99_9_ns).max(MIN_THRESHOLD_NS);
    let threshold_ns = ((raw / 10.0).ceil() * 10.0) as u64;
    let explanation = format!(
        "calibrated: the polling loop took {:.1} ns at the median and 99.9% of {} iterations took at most {:.0} ns{}; threshold = max({} x {:.0} ns, {:.0} ns) = {} ns",
        stats.p50_ns,
        stats.iterations,
        stats.p99_9_ns,
        stats.cpu.map(|c| format!(" on CPU {c}")).unwrap_or_default(),
        THRESHOLD_FACTOR,
        stats.p99_9_ns,
        MIN_THRESHOLD_NS,
        threshold_ns
    );
    GapChoice {
        threshold_ns,
        source: "calibrated".to_string(),
        explanation,
        loop_stats: Some(stats.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quantiles_are_exact_in_the_fine_range() {
        let mut h = LoopHistogram::default();
        for t in 1..=100u64 {
            h.record(t);
        }
        assert_eq!(h.quantile(0.5), 50);
        assert_eq!(h.quantile(0.99), 99);
        assert_eq!(h.quantile(1.0), 100);
        assert_eq!(h.count_above(90), 10);
        h.record(1_000_000);
        assert_eq!(h.max, 1_000_000);
        assert_eq!(h.quantile(1.0), 1_000_000);
        assert_eq!(h.count_above(5000), 1);
        assert_eq!(h.buckets().last().map(|b| b.2), Some(1));
    }

    #[test]
    fn threshold_rule() {
        let stats = |p999: f64| LoopStats {
            iterations: 1_000_000,
            cpu: Some(1),
            p50_ns: 20.0,
            p99_ns: 30.0,
            p99_9_ns: p999,
            p99_99_ns: 400.0,
            p99_999_ns: 5000.0,
            max_ns: 40000.0,
            mean_ns: 21.0,
        };
        // A fast loop: the floor decides, whatever the sub-µs cluster above p99.9 does.
        assert_eq!(choose_threshold(&stats(30.0)).threshold_ns, 500);
        // A slow loop (a scan that misses the caches): four times its p99.9, rounded up.
        assert_eq!(choose_threshold(&stats(221.3)).threshold_ns, 890);
        let c = choose_threshold(&stats(125.0));
        assert_eq!(c.threshold_ns, 500);
        assert!(c.explanation.contains("CPU 1"), "{}", c.explanation);
    }

    #[test]
    fn measuring_a_counter_records_every_iteration() {
        let counter = std::cell::Cell::new(0u64);
        let h = measure(
            || {
                counter.set(counter.get() + 3);
                counter.get()
            },
            1000,
            &mut Work::None,
        );
        assert_eq!(h.count, 1000);
        assert_eq!(h.fine[3], 1000);
    }

    proptest! {
        /// The histogram's quantile equals the exact sorted-vector quantile in the fine range.
        #[test]
        fn quantile_matches_sorted_oracle(mut xs in proptest::collection::vec(0u64..4000, 1..500), q in 0.01f64..1.0) {
            let mut h = LoopHistogram::default();
            for &x in &xs { h.record(x); }
            xs.sort_unstable();
            let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
            prop_assert_eq!(h.quantile(q), xs[rank - 1]);
        }
    }
}
