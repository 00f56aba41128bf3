//! Exact summary statistics of a set of samples, computed from the sorted values.
//!
//! Percentiles use the nearest-rank definition: the p-th percentile of n sorted samples is the
//! sample at rank ⌈p·n⌉ (1-based), so every reported percentile is a value that was observed.

use serde::{Deserialize, Serialize};

/// Count, extremes, moments and tail percentiles of samples in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
