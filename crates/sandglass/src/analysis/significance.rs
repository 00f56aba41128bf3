//! Statistics for comparing runs: confidence intervals of a mean, Welch's and the paired t test,
//! the Mann–Whitney U test and a bootstrap interval of a percentile.
//!
//! * The t interval of a mean is `x̄ ± t_{1−α/2, n−1}·s/√n` (Student 1908); Hourglass reports
//!   its Figure 5 costs with such 95% intervals (Regehr 2002, §5.2, after Jain 1991).
//! * Welch's t test (Welch 1947, *The generalization of "Student's" problem when several
//!   different population variances are involved*, Biometrika 34) does not assume equal
//!   variances: `t = (x̄_a − x̄_b)/√(s_a²/n_a + s_b²/n_b)` with the Welch–Satterthwaite degrees of
//!   freedom. The paired test is the one-sample test of the differences. Both are two-sided, and
//!   the interval is that of the difference of means (a − b), as R's `t.test` reports them.
//! * The Mann–Whitney U test (Mann & Whitney 1947; Wilcoxon 1945) compares ranks, so it holds
//!   for the skewed, heavy-tailed distributions latencies have. U is the statistic of the first
//!   sample (the number of pairs in which it is larger, ties counting one half), R's `W`. With
//!   no ties and both samples under 50 the p value is exact, from the distribution of U counted
//!   by recursion; otherwise it is the normal approximation with the tie correction of the
//!   variance and a continuity correction of one half, as R's `wilcox.test` computes it.
//! * The bootstrap interval of a percentile (Efron & Tibshirani 1993, *An Introduction to the
//!   Bootstrap*, ch. 13) resamples the data with replacement and takes the percentiles of the
//!   replicated estimates. The generator is seeded ([`crate::analysis::rng`]) so the interval is
//!   reproducible. Percentiles are nearest-rank, as in [`crate::stats`].
//!
//! The t and normal distributions come from `statrs`.

use super::rng::SplitMix64;
use super::tail::percentile_sorted;
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};
use thiserror::Error;

/// Why a statistic cannot be computed.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum StatsError {
    /// Too few observations.
    #[error("{what} needs at least {needed} values, got {got}")]
    TooFew {
        /// Which sample.
        what: &'static str,
        /// How many are needed.
        needed: usize,
        /// How many there are.
        got: usize,
    },
    /// A value is NaN or infinite.
    #[error("the values include a NaN or an infinity")]
    NotFinite,
    /// Paired samples of different lengths.
    #[error("paired samples must have the same length: {a} and {b} values")]
    LengthMismatch {
        /// First length.
        a: usize,
        /// Second length.
        b: usize,
    },
    /// No variation at all: the statistic is undefined.
    #[error("the values do not vary, so the test statistic is undefined")]
    NoSpread,
    /// A confidence level outside (0, 1).
    #[error("confidence {0} must be between 0 and 1, such as 0.95")]
    BadConfidence(f64),
    /// A percentile outside [0, 1].
    #[error("percentile {0} must be between 0 and 1 (0.99 for p99)")]
    BadPercentile(f64),
    /// No resamples requested.
    #[error("the bootstrap needs at least one resample")]
    NoResamples,
}

fn check(xs: &[f64], what: &'static str, needed: usize) -> Result<(), StatsError> {
    if xs.len() < needed {
        return Err(StatsError::TooFew {
            what,
            needed,
            got: xs.len(),
        });
    }
    if xs.iter().any(|x| !x.is_finite()) {
        return Err(StatsError::NotFinite);
    }
    Ok(())
}

fn check_confidence(c: f64) -> Result<(), StatsError> {
    if c > 0.0 && c < 1.0 {
        Ok(())
    } else {
        Err(StatsError::BadConfidence(c))
    }
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Sample variance (n − 1 denominator), two-pass.
fn variance(xs: &[f64]) -> f64 {
    let m = mean(xs);
    xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64
}

/// The quantile of Student's t with `df` degrees of freedom.
fn t_quantile(df: f64, q: f64) -> f64 {
    match StudentsT::new(0.0, 1.0, df) {
        Ok(t) => t.inverse_cdf(q),
        Err(_) => f64::NAN,
    }
}

/// Two-sided p value of `t` under Student's t with `df` degrees of freedom.
fn t_two_sided(t: f64, df: f64) -> f64 {
    match StudentsT::new(0.0, 1.0, df) {
        Ok(d) => (2.0 * d.sf(t.abs())).min(1.0),
        Err(_) => f64::NAN,
    }
}

fn normal_cdf(z: f64) -> f64 {
    match Normal::new(0.0, 1.0) {
        Ok(n) => n.cdf(z),
        Err(_) => f64::NAN,
    }
}

/// A t confidence interval of a mean.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct MeanCi {
    /// Observations.
    pub n: usize,
    /// x̄.
    pub mean: f64,
    /// s.
    pub stddev: f64,
    /// n − 1.
    pub df: f64,
    /// Lower end.
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
    /// The confidence level.
    pub confidence: f64,
}

/// The t confidence interval of the mean of `xs` (at least two values).
pub fn mean_ci(xs: &[f64], confidence: f64) -> Result<MeanCi, StatsError> {
    check(xs, "a confidence interval of a mean", 2)?;
    check_confidence(confidence)?;
    let n = xs.len();
    let m = mean(xs);
    let s = variance(xs).sqrt();
    let df = (n - 1) as f64;
    let half = t_quantile(df, 0.5 + confidence / 2.0) * s / (n as f64).sqrt();
    Ok(MeanCi {
        n,
        mean: m,
        stddev: s,
        df,
        ci_low: m - half,
        ci_high: m + half,
        confidence,
    })
}

/// Which t test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TTestKind {
    /// Two independent samples, unequal variances.
    Welch,
    /// Paired observations.
    Paired,
}

/// The result of a two-sided t test of a − b.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TTest {
    /// Welch or paired.
    pub kind: TTestKind,
    /// Size of the first sample.
    pub n_a: usize,
    /// Size of the second sample.
    pub n_b: usize,
    /// Mean of the first sample.
    pub mean_a: f64,
    /// Mean of the second sample.
    pub mean_b: f64,
    /// mean_a − mean_b (for paired data, the mean difference).
    pub mean_difference: f64,
    /// The t statistic.
    pub t: f64,
    /// Degrees of freedom.
    pub df: f64,
    /// Two-sided p value.
    pub p: f64,
    /// Lower end of the interval of the difference.
    pub ci_low: f64,
    /// Upper end of the interval of the difference.
    pub ci_high: f64,
    /// The confidence level.
    pub confidence: f64,
}

/// Welch's two-sample t test of mean(a) − mean(b).
pub fn welch(a: &[f64], b: &[f64], confidence: f64) -> Result<TTest, StatsError> {
    check(a, "the first sample", 2)?;
    check(b, "the second sample", 2)?;
    check_confidence(confidence)?;
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (va, vb) = (variance(a) / na, variance(b) / nb);
    let se2 = va + vb;
    if se2 <= 0.0 {
        return Err(StatsError::NoSpread);
    }
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    let (ma, mb) = (mean(a), mean(b));
    let d = ma - mb;
    let se = se2.sqrt();
    let t = d / se;
    let half = t_quantile(df, 0.5 + confidence / 2.0) * se;
    Ok(TTest {
        kind: TTestKind::Welch,
        n_a: a.len(),
        n_b: b.len(),
        mean_a: ma,
        mean_b: mb,
        mean_difference: d,
        t,
        df,
        p: t_two_sided(t, df),
        ci_low: d - half,
        ci_high: d + half,
        confidence,
    })
}

/// The paired t test of the differences a_i − b_i.
pub fn paired(a: &[f64], b: &[f64], confidence: f64) -> Result<TTest, StatsError> {
    if a.len() != b.len() {
        return Err(StatsError::LengthMismatch {
            a: a.len(),
            b: b.len(),
        });
    }
    check(a, "the first sample", 2)?;
    check(b, "the second sample", 2)?;
    check_confidence(confidence)?;
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let n = d.len() as f64;
    let se = (variance(&d) / n).sqrt();
    if se <= 0.0 {
        return Err(StatsError::NoSpread);
    }
    let md = mean(&d);
    let df = n - 1.0;
    let t = md / se;
    let half = t_quantile(df, 0.5 + confidence / 2.0) * se;
    Ok(TTest {
        kind: TTestKind::Paired,
        n_a: a.len(),
        n_b: b.len(),
        mean_a: mean(a),
        mean_b: mean(b),
        mean_difference: md,
        t,
        df,
        p: t_two_sided(t, df),
        ci_low: md - half,
        ci_high: md + half,
        confidence,
    })
}

/// How the Mann–Whitney p value was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PValueMethod {
    /// The exact distribution of U.
    Exact,
    /// The normal approximation with tie and continuity corrections.
    Normal,
}

/// The result of a two-sided Mann–Whitney U test.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct MannWhitney {
    /// Size of the first sample.
    pub n_a: usize,
    /// Size of the second sample.
    pub n_b: usize,
    /// U of the first sample (R's W): pairs (a_i, b_j) with a_i > b_j, ties counting one half.
    pub u: f64,
    /// The standardised statistic of the normal approximation.
    pub z: Option<f64>,
    /// Two-sided p value.
    pub p: f64,
    /// Exact or normal.
    pub method: PValueMethod,
    /// Some values are tied.
    pub ties: bool,
}

/// The two-sided Mann–Whitney U test of `a` against `b`.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> Result<MannWhitney, StatsError> {
    check(a, "the first sample", 1)?;
    check(b, "the second sample", 1)?;
    let (m, n) = (a.len(), b.len());
    let mut all: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    // Mid-ranks, and Σ(t³ − t) over tie groups.
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let mid = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_a += all[i..=j].iter().filter(|x| x.1).count() as f64 * mid;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let (mf, nf) = (m as f64, n as f64);
    let u = rank_sum_a - mf * (mf + 1.0) / 2.0;
    let ties = tie_term > 0.0;
    if !ties && m < 50 && n < 50 {
        let p = exact_p(m, n, u.round() as usize);
        return Ok(MannWhitney {
            n_a: m,
            n_b: n,
            u,
            z: None,
            p,
            method: PValueMethod::Exact,
            ties,
        });
    }
    let total = mf + nf;
    let sigma = ((mf * nf / 12.0) * ((total + 1.0) - tie_term / (total * (total - 1.0)))).sqrt();
    let centred = u - mf * nf / 2.0;
    if sigma.is_nan() || sigma <= 0.0 {
        return Err(StatsError::NoSpread);
    }
    let z = (centred - 0.5 * centred.signum()) / sigma;
    let p = (2.0 * normal_cdf(z).min(1.0 - normal_cdf(z))).min(1.0);
    Ok(MannWhitney {
        n_a: m,
        n_b: n,
        u,
        z: Some(z),
        p,
        method: PValueMethod::Normal,
        ties,
    })
}

/// Exact two-sided p value of U = `u` for samples of `m` and `n` without ties: twice the
/// smaller tail, at most one. Counts arrangements with `c(i, j, u) = c(i−1, j, u−j) + c(i, j−1, u)`.
fn exact_p(m: usize, n: usize, u: usize) -> f64 {
    let max = m * n;
    // counts[j][v] for the current i.
    let mut prev: Vec<Vec<u128>> = (0..=n)
        .map(|_| {
            let mut v = vec![0u128; max + 1];
            v[0] = 1;
            v
        })
        .collect();
    for _i in 1..=m {
        let mut cur: Vec<Vec<u128>> = vec![vec![0u128; max + 1]; n + 1];
        cur[0][0] = 1;
        for j in 1..=n {
            for v in 0..=max {
                let from_i = if v >= j { prev[j][v - j] } else { 0 };
                cur[j][v] = from_i + cur[j - 1][v];
            }
        }
        prev = cur;
    }
    let dist = &prev[n];
    let total: u128 = dist.iter().sum();
    let tail: u128 = if 2 * u > max {
        dist[u.min(max)..].iter().sum()
    } else {
        dist[..=u.min(max)].iter().sum()
    };
    (2.0 * tail as f64 / total as f64).min(1.0)
}

/// A bootstrap confidence interval of a percentile.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PercentileCi {
    /// The percentile, as a fraction (0.99 for p99).
    pub percentile: f64,
    /// The nearest-rank percentile of the data.
    pub estimate: f64,
    /// Lower end.
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
    /// The confidence level.
    pub confidence: f64,
    /// Resamples drawn.
    pub resamples: u32,
    /// The generator's seed.
    pub seed: u64,
}

/// The percentile-bootstrap interval of the `q` percentile of `xs`.
pub fn bootstrap_percentile_ci(
    xs: &[f64],
    q: f64,
    confidence: f64,
    resamples: u32,
    seed: u64,
) -> Result<PercentileCi, StatsError> {
    check(xs, "a bootstrap interval", 1)?;
    check_confidence(confidence)?;
    if !(0.0..=1.0).contains(&q) {
        return Err(StatsError::BadPercentile(q));
    }
    if resamples == 0 {
        return Err(StatsError::NoResamples);
    }
    let n = xs.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
    let mut sorted = xs.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let estimate = sorted[rank];
    let mut rng = SplitMix64::new(seed);
    let mut sample = vec![0.0; n];
    let mut reps = Vec::with_capacity(resamples as usize);
    for _ in 0..resamples {
        for s in sample.iter_mut() {
            *s = xs[rng.below(n as u64) as usize];
        }
        let (_, v, _) = sample.select_nth_unstable_by(rank, f64::total_cmp);
        reps.push(*v);
    }
    reps.sort_unstable_by(f64::total_cmp);
    let alpha = (1.0 - confidence) / 2.0;
    Ok(PercentileCi {
        percentile: q,
        estimate,
        ci_low: percentile_sorted(&reps, alpha),
        ci_high: percentile_sorted(&reps, 1.0 - alpha),
        confidence,
        resamples,
        seed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Student's sleep data (Cushny & Peebles 1905), R's `sleep` data set.
    const SLEEP_1: [f64; 10] = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0];
    const SLEEP_2: [f64; 10] = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4];

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// R: `t.test(sleep$extra[1:10])`: mean 0.75, 95 percent confidence interval
    /// -0.5297804 2.0297804, df = 9.
    #[test]
    fn mean_interval_matches_r() {
        let c = mean_ci(&SLEEP_1, 0.95).expect("valid");
        assert!(close(c.mean, 0.75, 1e-12));
        assert!(close(c.ci_low, -0.529_780_4, 5e-8), "{c:?}");
        assert!(close(c.ci_high, 2.029_780_4, 5e-8), "{c:?}");
        assert_eq!(c.df, 9.0);
    }

    /// R: `t.test(extra ~ group, data = sleep)` (Welch): t = -1.8608, df = 17.776,
    /// p-value = 0.07939, 95 percent confidence interval -3.3654832 0.2054832.
    #[test]
    fn welch_matches_r() {
        let r = welch(&SLEEP_1, &SLEEP_2, 0.95).expect("valid");
        assert!(close(r.t, -1.8608, 5e-5), "{r:?}");
        assert!(close(r.df, 17.776, 5e-4), "{r:?}");
        assert!(close(r.p, 0.07939, 5e-6), "{r:?}");
        assert!(close(r.ci_low, -3.365_483_2, 5e-8), "{r:?}");
        assert!(close(r.ci_high, 0.205_483_2, 5e-8), "{r:?}");
        assert!(close(r.mean_difference, -1.58, 1e-12));
    }

    /// R: `t.test(sleep$extra[1:10], sleep$extra[11:20], paired = TRUE)`: t = -4.0621, df = 9,
    /// p-value = 0.002833, 95 percent confidence interval -2.4598858 -0.7001142.
    #[test]
    fn paired_matches_r() {
        let r = paired(&SLEEP_1, &SLEEP_2, 0.95).expect("valid");
        assert!(close(r.t, -4.0621, 5e-5), "{r:?}");
        assert_eq!(r.df, 9.0);
        assert!(close(r.p, 0.002833, 5e-7), "{r:?}");
        assert!(close(r.ci_low, -2.459_885_8, 5e-8), "{r:?}");
        assert!(close(r.ci_high, -0.700_114_2, 5e-8), "{r:?}");
        assert_eq!(
            paired(&SLEEP_1, &SLEEP_2[..9], 0.95),
            Err(StatsError::LengthMismatch { a: 10, b: 9 })
        );
    }

    /// R: `wilcox.test(extra ~ group, data = sleep)`: W = 25.5, p-value = 0.06933, with the
    /// warning that ties prevent an exact p value.
    #[test]
    fn mann_whitney_with_ties_matches_r() {
        let r = mann_whitney(&SLEEP_1, &SLEEP_2).expect("valid");
        assert_eq!(r.u, 25.5);
        assert!(r.ties);
        assert_eq!(r.method, PValueMethod::Normal);
        assert!(close(r.p, 0.06933, 5e-6), "{r:?}");
    }

    /// Exact distribution. {1,2,3} against {4,5,6}: U = 0, one arrangement in C(6,3) = 20 is
    /// that extreme on each side, p = 2/20 = 0.1 (R: W = 0, p-value = 0.1). R's `wilcox.test`
    /// help example (Hollander & Wolfe, permeability constants): W = 35 and one-sided
    /// p-value = 0.1272, so two-sided 0.2544.
    #[test]
    fn mann_whitney_exact() {
        let r = mann_whitney(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).expect("valid");
        assert_eq!((r.u, r.method), (0.0, PValueMethod::Exact));
        assert!(close(r.p, 0.1, 1e-15));
        let x = [0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46];
        let y = [1.15, 0.88, 0.90, 0.74, 1.21];
        let r = mann_whitney(&x, &y).expect("valid");
        assert_eq!(r.u, 35.0);
        assert!(close(r.p, 2.0 * 0.1272, 1e-4), "{r:?}");
        // U at its mean (2 of 4 pairs): P(U ≤ 2) = 4/6, doubled and capped, p = 1.
        let r = mann_whitney(&[1.0, 4.0], &[2.0, 3.0]).expect("valid");
        assert_eq!(r.u, 2.0);
        assert!(close(r.p, 1.0, 1e-15), "{r:?}");
    }

    #[test]
    fn bootstrap_is_reproducible_and_sensible() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        let a = bootstrap_percentile_ci(&xs, 0.5, 0.95, 2000, 7).expect("valid");
        let b = bootstrap_percentile_ci(&xs, 0.5, 0.95, 2000, 7).expect("valid");
        assert_eq!(a, b);
        assert_eq!(a.estimate, 50.0);
        // The exact order-statistic interval of the median of 100 is about ranks 40 to 61.
        assert!(a.ci_low >= 38.0 && a.ci_low <= 50.0, "{a:?}");
        assert!(a.ci_high >= 50.0 && a.ci_high <= 63.0, "{a:?}");
        let c = bootstrap_percentile_ci(&[5.0; 20], 0.99, 0.95, 100, 1).expect("valid");
        assert_eq!((c.estimate, c.ci_low, c.ci_high), (5.0, 5.0, 5.0));
        assert_eq!(
            bootstrap_percentile_ci(&xs, 1.5, 0.95, 10, 1),
            Err(StatsError::BadPercentile(1.5))
        );
    }

    #[test]
    fn refusals() {
        assert!(matches!(
            mean_ci(&[1.0], 0.95),
            Err(StatsError::TooFew { .. })
        ));
        assert_eq!(mean_ci(&[1.0, f64::NAN], 0.95), Err(StatsError::NotFinite));
        assert_eq!(
            mean_ci(&[1.0, 2.0], 1.0),
            Err(StatsError::BadConfidence(1.0))
        );
        assert_eq!(
            welch(&[1.0, 1.0], &[2.0, 2.0], 0.95),
            Err(StatsError::NoSpread)
        );
    }
}
