//! A measured latency distribution as exact value counts, the input of the tail predictions
//! (mean time to buffer underrun, worst case per unit of time).
//!
//! Cota-Robles & Held index "into the latency table to determine the frequency with which such
//! latencies occur" (OSDI 1999, §5): what they need of a distribution is the share of samples
//! above a value. This type keeps every distinct value with its count, sorted, with suffix sums
//! so that the count above any value is a binary search. Values are signed nanoseconds because a
//! wakeup can be early (negative lateness). Quantiles use the nearest-rank definition of
//! [`crate::stats`], so every quantile is an observed value.

use serde::Serialize;

/// Sorted distinct values with their counts; every count is positive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Distribution {
    bins: Vec<(i64, u64)>,
    /// `above[i]` = total count of `bins[i..]`.
    #[serde(skip)]
    above: Vec<u64>,
}

impl Distribution {
    /// A distribution of raw samples.
    pub fn from_samples(samples: &[i64]) -> Distribution {
        Distribution::from_bins(samples.iter().map(|&v| (v, 1)))
    }

    /// The distribution an HDR histogram holds: each bucket's count at the highest value the
    /// bucket stands for (within 0.1% above its samples at three significant digits), so that
    /// shares above a value are never understated.
    pub fn from_histogram(h: &hdrhistogram::Histogram<u64>) -> Distribution {
        Distribution::from_bins(
            h.iter_recorded()
                .map(|v| (v.value_iterated_to() as i64, v.count_at_value())),
        )
    }

    /// A distribution of `(value, count)` pairs in any order; equal values are merged and zero
    /// counts dropped. Counts that would overflow 64 bits saturate.
    pub fn from_bins(bins: impl IntoIterator<Item = (i64, u64)>) -> Distribution {
        let mut v: Vec<(i64, u64)> = bins.into_iter().filter(|b| b.1 > 0).collect();
        v.sort_unstable_by_key(|b| b.0);
        let mut merged: Vec<(i64, u64)> = Vec::with_capacity(v.len());
        for (value, count) in v {
            match merged.last_mut() {
                Some(last) if last.0 == value => last.1 = last.1.saturating_add(count),
                _ => merged.push((value, count)),
            }
        }
        let mut above = vec![0u64; merged.len()];
        let mut acc = 0u64;
        for i in (0..merged.len()).rev() {
            acc = acc.saturating_add(merged[i].1);
            above[i] = acc;
        }
        Distribution {
            bins: merged,
            above,
        }
    }

    /// The `(value, count)` pairs, sorted by value.
    pub fn bins(&self) -> &[(i64, u64)] {
        &self.bins
    }

    /// The number of samples.
    pub fn total(&self) -> u64 {
        self.above.first().copied().unwrap_or(0)
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.bins.is_empty()
    }

    /// The smallest sample.
    pub fn min(&self) -> Option<i64> {
        self.bins.first().map(|b| b.0)
    }

    /// The largest sample.
    pub fn max(&self) -> Option<i64> {
        self.bins.last().map(|b| b.0)
    }

    /// Samples strictly greater than `x`.
    pub fn count_above(&self, x: i64) -> u64 {
        let i = self.bins.partition_point(|b| b.0 <= x);
        self.above.get(i).copied().unwrap_or(0)
    }

    /// The share of samples strictly greater than `x` (0 when there are no samples).
    pub fn exceedance(&self, x: i64) -> f64 {
        let n = self.total();
        if n == 0 {
            0.0
        } else {
            self.count_above(x) as f64 / n as f64
        }
    }

    /// The sample at 1-based `rank` in sorted order.
    pub fn value_at_rank(&self, rank: u64) -> Option<i64> {
        let n = self.total();
        if rank == 0 || rank > n {
            return None;
        }
        // The bin holding `rank` is the last one whose suffix count exceeds the samples ranked
        // after it, n − rank.
        let after = n - rank;
        let i = self.above.partition_point(|&a| a > after);
        i.checked_sub(1).map(|j| self.bins[j].0)
    }

    /// The nearest-rank `q` quantile: the sample at rank ⌈q·n⌉ (at least 1).
    pub fn quantile(&self, q: f64) -> Option<i64> {
        let n = self.total();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        self.value_at_rank(rank)
    }

    /// The samples strictly above `x`, one entry per sample, ascending. The caller bounds the
    /// size by choosing `x` (see [`Distribution::count_above`]).
    pub fn samples_above(&self, x: i64) -> Vec<i64> {
        let i = self.bins.partition_point(|b| b.0 <= x);
        let mut out = Vec::with_capacity(self.above.get(i).copied().unwrap_or(0) as usize);
        for &(v, c) in &self.bins[i..] {
            out.extend(std::iter::repeat_n(v, c as usize));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats;
    use proptest::prelude::*;

    #[test]
    fn counts_and_ranks() {
        let d = Distribution::from_bins([(30, 1), (10, 2), (20, 3), (10, 1), (40, 0)]);
        assert_eq!(d.bins(), &[(10, 3), (20, 3), (30, 1)]);
        assert_eq!(d.total(), 7);
        assert_eq!(d.count_above(9), 7);
        assert_eq!(d.count_above(10), 4);
        assert_eq!(d.count_above(25), 1);
        assert_eq!(d.count_above(30), 0);
        assert_eq!(d.value_at_rank(1), Some(10));
        assert_eq!(d.value_at_rank(3), Some(10));
        assert_eq!(d.value_at_rank(4), Some(20));
        assert_eq!(d.value_at_rank(7), Some(30));
        assert_eq!(d.value_at_rank(8), None);
        assert_eq!(d.samples_above(10), vec![20, 20, 20, 30]);
        assert!((d.exceedance(20) - 1.0 / 7.0).abs() < 1e-15);
        let empty = Distribution::from_samples(&[]);
        assert_eq!(
            (empty.total(), empty.max(), empty.quantile(0.5)),
            (0, None, None)
        );
    }

    proptest! {
        #[test]
        fn agrees_with_the_sorted_vector(mut v in proptest::collection::vec(-50i64..50, 1..200), q in 0.0f64..1.0, x in -60i64..60) {
            let d = Distribution::from_samples(&v);
            v.sort_unstable();
            prop_assert_eq!(d.total(), v.len() as u64);
            prop_assert_eq!(d.quantile(q), stats::quantile_sorted(&v, q));
            prop_assert_eq!(d.count_above(x), stats::count_above(&v, x));
            for r in 1..=v.len() {
                prop_assert_eq!(d.value_at_rank(r as u64), Some(v[r - 1]));
            }
        }
    }
}
