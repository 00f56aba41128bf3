//! Summary statistics: the one place where sandglass computes quantiles and medians.
//!
//! Percentiles use the nearest-rank definition: the p-th percentile of n sorted samples is the
//! sample at rank ⌈p·n⌉ (1-based), so every reported percentile is a value that was observed.
//! [`summarize`] computes them exactly from samples held in memory. A run of any length cannot
//! hold its samples, so [`Accumulator`] takes them one at a time into an HDR histogram with
//! three significant digits ([`crate::histo`]): its count, minimum, maximum, mean and standard
//! deviation are exact (Welford's method), and each percentile is the highest value of the
//! bucket holding the sample of rank ⌈p·n⌉, within 0.1% above the exact one and never above
//! the exact maximum.
//!
//! Medians of small sets (repetitions of a study, per-interval counts) have one definition each
//! way they are used: [`median_f64`] is the conventional median (the mean of the two middle
//! values for an even count) for figures reported to people; [`median_upper`] is the upper
//! middle value, an observed value, for counts.

use crate::engine::record::{new_histogram, record};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Count, extremes, moments and tail percentiles of samples in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    pub count: u64,
    pub min_ns: i64,
    pub max_ns: i64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
    pub p50_ns: i64,
    pub p90_ns: i64,
    pub p99_ns: i64,
    #[serde(rename = "p99.9_ns")]
    pub p99_9_ns: i64,
    #[serde(rename = "p99.99_ns")]
    pub p99_99_ns: i64,
}

/// The nearest-rank `q` quantile of sorted samples.
pub fn quantile_sorted(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Samples strictly greater than `threshold` in sorted samples.
pub fn count_above(sorted: &[i64], threshold: i64) -> u64 {
    (sorted.len() - sorted.partition_point(|&x| x <= threshold)) as u64
}

/// Summarises `samples`, sorting them in place; `None` when there are none.
pub fn summarize(samples: &mut [i64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let n = samples.len() as f64;
    let mean = samples.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = if samples.len() > 1 {
        samples
            .iter()
            .map(|&x| (x as f64 - mean).powi(2))
            .sum::<f64>()
            / (n - 1.0)
    } else {
        0.0
    };
    let q = |p| quantile_sorted(samples, p).unwrap_or(0);
    Some(Summary {
        count: samples.len() as u64,
        min_ns: samples[0],
        max_ns: samples[samples.len() - 1],
        mean_ns: mean,
        stddev_ns: var.sqrt(),
        p50_ns: q(0.5),
        p90_ns: q(0.9),
        p99_ns: q(0.99),
        p99_9_ns: q(0.999),
        p99_99_ns: q(0.9999),
    })
}

/// The conventional median of `v` (the mean of the two middle values for an even count);
/// `None` for no values.
pub fn median_f64(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The upper middle value of `v` (the sample at 0-based rank ⌊n/2⌋ in sorted order); 0 for no
/// values.
pub fn median_upper(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let mid = v.len() / 2;
    let (_, &mut m, _) = v.select_nth_unstable(mid);
    m
}

/// A distribution summarised as its samples arrive, in fixed memory (see the module's text).
#[derive(Clone, Debug)]
pub struct Accumulator {
    hist: Histogram<u64>,
    count: u64,
    min: i64,
    max: i64,
    mean: f64,
    m2: f64,
    /// Values beyond the histogram's range (recorded as its largest value).
    over: u64,
}

impl Default for Accumulator {
    fn default() -> Self {
        Accumulator::new()
    }
}

impl Accumulator {
    /// An empty accumulator; its histogram is allocated and touched now.
    pub fn new() -> Accumulator {
        Accumulator {
            hist: new_histogram(),
            count: 0,
            min: i64::MAX,
            max: i64::MIN,
            mean: 0.0,
            m2: 0.0,
            over: 0,
        }
    }

    /// Adds one sample (negative samples count as 0 in the histogram, exactly in the rest).
    #[inline]
    pub fn add(&mut self, v: i64) {
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        let d = v as f64 - self.mean;
        self.mean += d / self.count as f64;
        self.m2 += d * (v as f64 - self.mean);
        record(&mut self.hist, v.max(0) as u64, &mut self.over);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The exact extremes, when there are samples.
    pub fn min(&self) -> Option<i64> {
        (self.count > 0).then_some(self.min)
    }
    pub fn max(&self) -> Option<i64> {
        (self.count > 0).then_some(self.max)
    }

    /// The nearest-rank `q` quantile, to three significant digits, at most the exact maximum.
    pub fn quantile(&self, q: f64) -> Option<i64> {
        (self.count > 0).then(|| {
            (self.hist.value_at_quantile(q) as i64)
                .min(self.max)
                .max(self.min.min(0))
        })
    }

    /// Samples strictly greater than `threshold`, to the histogram's precision.
    pub fn count_above(&self, threshold: i64) -> u64 {
        if self.count == 0 || threshold >= self.max {
            return 0;
        }
        if threshold < 0 {
            return self.hist.len();
        }
        self.hist.len() - self.hist.count_between(0, threshold as u64)
    }

    /// The summary: exact count, extremes, mean and standard deviation; percentiles to three
    /// significant digits.
    pub fn summary(&self) -> Option<Summary> {
        if self.count == 0 {
            return None;
        }
        let q = |p| self.quantile(p).unwrap_or(0);
        Some(Summary {
            count: self.count,
            min_ns: self.min,
            max_ns: self.max,
            mean_ns: self.mean,
            stddev_ns: if self.count > 1 {
                (self.m2 / (self.count - 1) as f64).sqrt()
            } else {
                0.0
            },
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p99_9_ns: q(0.999),
            p99_99_ns: q(0.9999),
        })
    }
}

/// Exact nearest-rank quantiles of values that streamed once into HDR histograms and stream
/// once more: the histograms name the bucket that holds each wanted rank (and how many values
/// lie below it); the second pass counts the exact values that fall in those buckets only, so
/// memory is bounded by the buckets' widths (at three significant digits, a thousandth of the
/// value), not by the number of values. Values at or below zero share the histogram's zero
/// bucket and are ranked exactly within it.
pub struct ExactQuantiles {
    /// Per group: `(quantile index, lowest, highest, rank within the bucket)`.
    targets: Vec<Vec<(usize, u64, u64, u64)>>,
    seen: Vec<Vec<BTreeMap<i64, u64>>>,
    quantiles: usize,
}

use std::collections::BTreeMap;

impl ExactQuantiles {
    /// The quantiles `qs` of each group, whose values the histogram `hists[g]` holds.
    pub fn new(hists: &[&Histogram<u64>], qs: &[f64]) -> ExactQuantiles {
        let targets: Vec<Vec<(usize, u64, u64, u64)>> = hists
            .iter()
            .map(|h| {
                let n = h.len();
                let mut out = Vec::new();
                if n == 0 {
                    return out;
                }
                for (qi, &q) in qs.iter().enumerate() {
                    let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
                    let mut below = 0u64;
                    for v in h.iter_recorded() {
                        let c = v.count_at_value();
                        if below + c >= rank {
                            let hi = v.value_iterated_to();
                            let lo = h.lowest_equivalent(hi);
                            out.push((qi, lo, hi, rank - below));
                            break;
                        }
                        below += c;
                    }
                }
                out
            })
            .collect();
        let seen = targets
            .iter()
            .map(|t| t.iter().map(|_| BTreeMap::new()).collect())
            .collect();
        ExactQuantiles {
            targets,
            seen,
            quantiles: qs.len(),
        }
    }

    /// One value of group `g`, in the second pass.
    #[inline]
    pub fn add(&mut self, g: usize, v: i64) {
        let Some(ts) = self.targets.get(g) else {
            return;
        };
        let c = v.max(0) as u64;
        for (k, &(_, lo, hi, _)) in ts.iter().enumerate() {
            if lo <= c && c <= hi {
                *self.seen[g][k].entry(v).or_insert(0) += 1;
            }
        }
    }

    /// Per group, each quantile's exact value (`None` for a group without values, or when the
    /// second pass saw fewer values than the histogram holds).
    pub fn finish(self) -> Vec<Vec<Option<i64>>> {
        self.targets
            .iter()
            .zip(self.seen)
            .map(|(ts, seen)| {
                let mut out = vec![None; self.quantiles];
                for (&(qi, _, _, k), counts) in ts.iter().zip(seen) {
                    let mut acc = 0u64;
                    for (v, c) in counts {
                        acc += c;
                        if acc >= k {
                            out[qi] = Some(v);
                            break;
                        }
                    }
                }
                out
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The two-pass quantiles equal the nearest-rank quantiles of the sorted values.
        #[test]
        fn two_passes_give_the_exact_quantiles(
            xs in proptest::collection::vec(-5_000i64..50_000_000, 1..3000)
        ) {
            let qs = [0.0, 0.5, 0.9, 0.99, 0.999, 1.0];
            let mut h = new_histogram();
            for &x in &xs {
                h.saturating_record(x.max(0) as u64);
            }
            let mut e = ExactQuantiles::new(&[&h], &qs);
            for &x in &xs {
                e.add(0, x);
            }
            let got = e.finish();
            let mut sorted = xs.clone();
            sorted.sort_unstable();
            for (i, &q) in qs.iter().enumerate() {
                prop_assert_eq!(got[0][i], quantile_sorted(&sorted, q.max(1e-12)));
            }
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median_f64(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_f64(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median_f64(&mut []), None);
        assert_eq!(median_upper(&mut [4, 1, 2, 3]), 3);
        assert_eq!(median_upper(&mut []), 0);
    }

    #[test]
    fn an_accumulator_agrees_with_the_exact_summary() {
        let samples: Vec<i64> = (1..=10_000).map(|k| (k * 7919) % 100_003 + 1000).collect();
        let mut a = Accumulator::new();
        for &s in &samples {
            a.add(s);
        }
        let exact = summarize(&mut samples.clone()).expect("exact");
        let approx = a.summary().expect("approx");
        assert_eq!(
            (approx.count, approx.min_ns, approx.max_ns),
            (exact.count, exact.min_ns, exact.max_ns)
        );
        assert!((approx.mean_ns - exact.mean_ns).abs() < 1e-6);
        assert!((approx.stddev_ns - exact.stddev_ns).abs() < 1e-6 * exact.stddev_ns);
        for (x, e) in [
            (approx.p50_ns, exact.p50_ns),
            (approx.p99_ns, exact.p99_ns),
            (approx.p99_99_ns, exact.p99_99_ns),
        ] {
            assert!(x >= e && (x - e) as f64 <= e as f64 * 0.001, "{x} vs {e}");
        }
        assert_eq!(a.count_above(exact.max_ns), 0);
    }

    #[test]
    fn worked_example() {
        let mut v = vec![5, 1, 4, 2, 3];
        let s = summarize(&mut v).expect("summary");
        assert_eq!((s.count, s.min_ns, s.max_ns, s.p50_ns), (5, 1, 5, 3));
        assert!((s.mean_ns - 3.0).abs() < 1e-12);
        assert!((s.stddev_ns - 2.5f64.sqrt()).abs() < 1e-12);
        assert_eq!(s.p90_ns, 5);
        assert_eq!(count_above(&v, 3), 2);
        assert_eq!(summarize(&mut []), None);
    }

    proptest! {
        #[test]
        fn percentiles_are_monotone_and_observed(mut v in proptest::collection::vec(-1000i64..1000, 1..300)) {
            let s = summarize(&mut v).expect("non-empty");
            prop_assert!(s.min_ns <= s.p50_ns && s.p50_ns <= s.p90_ns && s.p90_ns <= s.p99_ns);
            prop_assert!(s.p99_ns <= s.p99_9_ns && s.p99_9_ns <= s.p99_99_ns && s.p99_99_ns <= s.max_ns);
            prop_assert!(v.contains(&s.p50_ns) && v.contains(&s.p99_ns));
            let above = count_above(&v, s.p50_ns) as usize;
            prop_assert!(above <= v.len() / 2 + 1);
        }
    }
}
