//! A generalised Pareto model of the latency tail, for predictions beyond the observed range.
//!
//! Peaks over threshold (Pickands 1975; Davison & Smith 1990, *Models for exceedances over high
//! thresholds*, JRSS B 52(3)): above a high threshold u, the excesses y = x − u of almost any
//! distribution are approximately generalised Pareto,
//! `P(Y > y) = (1 + ξ·y/σ)^(−1/ξ)` (`exp(−y/σ)` for ξ = 0), with shape ξ (ξ > 0 heavy tail,
//! ξ < 0 bounded) and scale σ. With ζ = P(X > u), estimated as k/n, the level exceeded with
//! probability p < ζ is
//!
//! `x_p = u + (σ/ξ)·((ζ/p)^ξ − 1)` (`u + σ·ln(ζ/p)` for ξ = 0).
//!
//! The parameters are estimated by probability-weighted moments (Hosking & Wallis 1987,
//! *Parameter and quantile estimation for the generalized Pareto distribution*, Technometrics
//! 29(3)): with the sorted excesses and plotting positions `p_j = (j − 0.35)/k`,
//! `a0 = mean(y)`, `a1 = mean((1 − p_j)·y_(j))`, `ξ = 2 − a0/(a0 − 2·a1)` and
//! `σ = 2·a0·a1/(a0 − 2·a1)`. PWM is closed-form, robust in small samples and needs ξ < 1,
//! which latency tails satisfy in practice. The confidence interval of a predicted level is a
//! percentile bootstrap over the excesses (Efron & Tibshirani 1993), seeded so that it is
//! reproducible.
//!
//! **Threshold.** The threshold is the lowest at which the model fits (Choulakian & Stephens
//! 2001, *Goodness-of-fit tests for the generalized Pareto distribution*, Technometrics 43(4),
//! §5: test thresholds in increasing order and take the first at which the GPD is not
//! rejected). The first tried leaves the top 1% of the samples above it (at least 50, at most
//! 5000); each next one leaves 1/1.25 as many, down to 50. At each, the Anderson–Darling
//! statistic A² of the excesses against the fitted distribution is computed, and its p-value by
//! parametric bootstrap: 199 samples of the same size drawn from the fitted distribution, each
//! refitted by PWM and tested the same way (seeded, so reproducible; the simulation accounts for
//! the parameters being estimated, by the same estimator, which tables made for maximum
//! likelihood do not). The model fits where p ≥ 0.05. Where A² > 10 with ξ ≥ 0 the fit is
//! rejected without simulation: in 1000 simulated fits each for ξ from 0 to 0.9 and 50 to 500
//! excesses, fewer than 1% reached it (a test below checks it). Where no tried threshold fits,
//! there is no model (a latency distribution can be two populations, such as a quiet bulk and
//! millisecond host stalls, which one GPD above the p99 does not describe: fitted there it
//! predicted a worst hour nine times what the hour reached). Tied samples (binned data, such as
//! a histogram with 1 µs bins) are spread evenly across their bin for the test, so that binning
//! alone does not reject a fit.
//!
//! **Bounded tails.** An estimate ξ < 0 puts an end point on the tail: the run has not seen a
//! larger value, which it cannot show to be impossible. Predictions then use ξ = 0, the
//! exponential of the same scale, which agrees with the fitted tail at the threshold and lies
//! above it everywhere beyond (measurement-based timing analysis fits exponential-tailed Gumbel
//! models for the same reason: Cucu-Grosjean et al., *Measurement-based probabilistic timing
//! analysis for multi-path programs*, ECRTS 2012). `shape` keeps the estimate,
//! `extrapolation_shape` the value used.
//!
//! At least 100 samples and 20 exceedances are needed for a fit.

use super::distribution::Distribution;
use super::rng::SplitMix64;
use serde::Serialize;
use thiserror::Error;

/// Fewest samples for a tail fit.
pub const MIN_SAMPLES: u64 = 100;
/// Fewest exceedances of the threshold for a tail fit.
pub const MIN_EXCEEDANCES: u64 = 20;
/// Fewest exceedances of a threshold chosen by the goodness-of-fit test.
pub const MIN_CHOSEN_EXCEEDANCES: u64 = 50;
/// The test's level: the model fits where its p-value is at least this.
pub const FIT_LEVEL: f64 = 0.05;
/// Simulated samples behind the test's p-value.
pub const FIT_REPLICATES: u32 = 199;
/// A² above which a fit with ξ ≥ 0 is rejected without simulation.
pub const FIT_REJECT_A2: f64 = 10.0;
/// Ratio of the exceedances of one tried threshold to those of the next.
const THRESHOLD_STEP: f64 = 1.25;
/// Seed of the test's simulations.
const FIT_SEED: u64 = 0x5eed_7a11;

/// Why no tail model could be fitted.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum TailError {
    /// Not enough samples overall.
    #[error("{0} samples are too few for a tail model: at least 100 are needed")]
    TooFewSamples(u64),
    /// Not enough samples above the threshold.
    #[error("only {count} samples lie above the threshold {threshold_ns} ns: at least 20 are needed (lower the threshold, or use finer histogram bins)")]
    TooFewExceedances {
        /// Samples above the threshold.
        count: u64,
        /// The threshold.
        threshold_ns: i64,
    },
    /// The moments give no valid generalised Pareto distribution.
    #[error("the excesses do not fit a generalised Pareto distribution with finite mean (the estimated shape is 1 or more)")]
    Degenerate,
    /// No tried threshold gives a model that fits.
    #[error("the tail follows no generalised Pareto distribution above any of the {tried} threshold(s) tried, {lowest_ns} ns to {highest_ns} ns (Anderson-Darling test at 5 %): the delays may come from several causes of different sizes; a longer run may fit")]
    NoFit {
        /// Thresholds tried.
        tried: u32,
        /// The lowest.
        lowest_ns: i64,
        /// The highest.
        highest_ns: i64,
    },
    /// The model does not fit above the threshold given.
    #[error("the tail above {threshold_ns} ns does not follow a generalised Pareto distribution (Anderson-Darling A² = {anderson_darling:.3}, p {p}): give a higher threshold, or none to let sandglass find one", p = p_value.map(|p| format!("= {p:.3}")).unwrap_or_else(|| "< 0.01".into()))]
    DoesNotFit {
        /// The threshold given.
        threshold_ns: i64,
        /// A² there.
        anderson_darling: f64,
        /// Its p-value (`None`: rejected without simulation).
        p_value: Option<f64>,
    },
}

/// A fitted generalised Pareto tail.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct GpdFit {
    /// u.
    pub threshold_ns: i64,
    /// k: samples above u.
    pub exceedances: u64,
    /// n: all samples.
    pub samples: u64,
    /// ξ as estimated.
    pub shape: f64,
    /// σ, in nanoseconds.
    pub scale_ns: f64,
    /// The ξ predictions use: ξ, or 0 where ξ < 0 (a bounded tail is extrapolated as the
    /// exponential of the same scale, which lies above it).
    pub extrapolation_shape: f64,
    /// The estimator: `"pwm"`.
    pub method: &'static str,
    /// Anderson–Darling A² of the excesses against the fitted distribution.
    pub anderson_darling: f64,
    /// The p-value of A², by parametric bootstrap; `null` where A² was so large that the fit was
    /// rejected without simulation.
    pub p_value: Option<f64>,
    /// How the threshold was chosen: `lowest_fitting` (the lowest tried at which the model is
    /// not rejected at 5 %) or `given`.
    pub threshold_rule: &'static str,
    /// Thresholds tested, this one included.
    pub thresholds_tried: u32,
}

impl GpdFit {
    /// Whether the model fits the excesses (p ≥ 0.05).
    pub fn fits(&self) -> bool {
        self.p_value.is_some_and(|p| p >= FIT_LEVEL)
    }

    /// ζ = k/n, the share of samples above the threshold.
    pub fn zeta(&self) -> f64 {
        self.exceedances as f64 / self.samples as f64
    }

    /// The level exceeded with probability `p`, for `0 < p < ζ`; `None` outside that range.
    pub fn return_level(&self, p: f64) -> Option<f64> {
        return_level(
            self.threshold_ns as f64,
            self.zeta(),
            self.extrapolation_shape,
            self.scale_ns,
            p,
        )
    }

    /// P(X > x) under the model, for x above the threshold.
    pub fn exceedance(&self, x: f64) -> f64 {
        let y = (x - self.threshold_ns as f64).max(0.0);
        self.zeta() * (1.0 - gpd_cdf(y, self.extrapolation_shape, self.scale_ns))
    }
}

/// The ξ predictions use for an estimate `shape` (see the module's "Bounded tails").
fn extrapolation_shape(shape: f64) -> f64 {
    shape.max(0.0)
}

/// P(Y ≤ y) for a GPD(ξ, σ).
fn gpd_cdf(y: f64, shape: f64, scale: f64) -> f64 {
    if y <= 0.0 {
        return 0.0;
    }
    if shape.abs() < 1e-12 {
        -(-y / scale).exp_m1()
    } else {
        let base = 1.0 + shape * y / scale;
        if base <= 0.0 {
            1.0
        } else {
            1.0 - base.powf(-1.0 / shape)
        }
    }
}

/// The `q` quantile of a GPD(ξ, σ), 0 < q < 1.
fn gpd_quantile(q: f64, shape: f64, scale: f64) -> f64 {
    if shape.abs() < 1e-12 {
        -scale * (-q).ln_1p()
    } else {
        scale / shape * ((1.0 - q).powf(-shape) - 1.0)
    }
}

/// The Anderson–Darling statistic A² of `sorted` (ascending) against a GPD(ξ, σ):
/// `−m − (1/m)·Σ (2j − 1)·(ln z_j + ln(1 − z_(m+1−j)))` with `z_j = F(y_(j))`.
pub fn anderson_darling(sorted: &[f64], shape: f64, scale: f64) -> f64 {
    let m = sorted.len();
    if m == 0 {
        return f64::NAN;
    }
    let z = |y: f64| gpd_cdf(y, shape, scale).clamp(1e-12, 1.0 - 1e-12);
    let sum: f64 = (0..m)
        .map(|j| (2 * j + 1) as f64 * (z(sorted[j]).ln() + (1.0 - z(sorted[m - 1 - j])).ln()))
        .sum();
    -(m as f64) - sum / m as f64
}

/// The p-value of `a2` for `m` excesses fitted as GPD(ξ, σ): the share of samples drawn from
/// that distribution whose own fit and A² reach it (parametric bootstrap, seeded).
fn fit_p_value(a2: f64, m: usize, shape: f64, scale: f64) -> f64 {
    let mut rng = SplitMix64::new(FIT_SEED);
    let mut y = vec![0.0; m];
    let mut reached = 0u32;
    for _ in 0..FIT_REPLICATES {
        for v in y.iter_mut() {
            *v = gpd_quantile(rng.unit(), shape, scale);
        }
        y.sort_unstable_by(f64::total_cmp);
        let stat = pwm(&y).map_or(f64::INFINITY, |(s, c)| anderson_darling(&y, s, c));
        if stat >= a2 {
            reached += 1;
        }
    }
    f64::from(reached + 1) / f64::from(FIT_REPLICATES + 1)
}

/// Excesses `sorted` ascending (all positive) with each run of equal values spread evenly
/// across the bin below it, (v − w, v], w the gap to the previous distinct value (0 for the
/// first) but at most the finest such gap (the data's resolution). A histogram's value stands
/// for its bin; spread this way, the first bin above the threshold starts at an excess of 0 as
/// the model does, whether the bins are labelled by their lower end (cyclictest) or their upper
/// one (HdrHistogram's equivalent values).
fn untied(sorted: &[f64]) -> Vec<f64> {
    let gaps = |i: usize| sorted[i] - if i == 0 { 0.0 } else { sorted[i - 1] };
    let resolution = (0..sorted.len())
        .map(gaps)
        .filter(|&g| g > 0.0)
        .fold(f64::INFINITY, f64::min);
    let mut out = Vec::with_capacity(sorted.len());
    let mut i = 0;
    while i < sorted.len() {
        let v = sorted[i];
        let c = sorted[i..].iter().take_while(|&&x| x == v).count();
        let width = gaps(i).min(resolution);
        if c == 1 || !(width > 0.0 && width.is_finite()) {
            out.extend(std::iter::repeat_n(v, c));
        } else {
            out.extend(
                (0..c).map(|j| v - (c - j) as f64 / c as f64 * width + width / (2 * c) as f64),
            );
        }
        i += c;
    }
    out
}

fn return_level(u: f64, zeta: f64, shape: f64, scale: f64, p: f64) -> Option<f64> {
    if !(p > 0.0 && p < zeta) {
        return None;
    }
    let r = zeta / p;
    Some(if shape.abs() < 1e-12 {
        u + scale * r.ln()
    } else {
        u + scale / shape * (r.powf(shape) - 1.0)
    })
}

/// PWM estimates (ξ, σ) from excesses sorted ascending.
pub fn pwm(sorted_excesses: &[f64]) -> Option<(f64, f64)> {
    let k = sorted_excesses.len();
    if k < 2 {
        return None;
    }
    let kf = k as f64;
    let a0 = sorted_excesses.iter().sum::<f64>() / kf;
    let a1 = sorted_excesses
        .iter()
        .enumerate()
        .map(|(j, y)| (1.0 - ((j + 1) as f64 - 0.35) / kf) * y)
        .sum::<f64>()
        / kf;
    let denom = a0 - 2.0 * a1;
    if !(denom > 0.0 && a0 > 0.0) {
        return None;
    }
    let shape = 2.0 - a0 / denom;
    let scale = 2.0 * a0 * a1 / denom;
    if shape < 1.0 && scale > 0.0 && shape.is_finite() && scale.is_finite() {
        Some((shape, scale))
    } else {
        None
    }
}

/// The exceedances the first tried threshold leaves: the top 1% (50 to 5000, at most half).
fn first_exceedances(n: u64) -> u64 {
    (n / 100).clamp(MIN_CHOSEN_EXCEEDANCES, 5000).min(n / 2)
}

/// The first threshold tried for `d`: the sample with the top 1% above it (50 to 5000 samples).
pub fn default_threshold(d: &Distribution) -> Option<i64> {
    let n = d.total();
    d.value_at_rank(n - first_exceedances(n))
}

/// The excesses of `d` over `u`, ascending, ties spread across their bins ([`untied`]).
fn excesses(d: &Distribution, u: i64) -> Vec<f64> {
    let raw: Vec<f64> = d
        .samples_above(u)
        .into_iter()
        .map(|x| (x - u) as f64)
        .collect();
    untied(&raw)
}

/// The model of the tail above `u`, with its goodness of fit.
fn fit_above(
    d: &Distribution,
    u: i64,
    threshold_rule: &'static str,
    thresholds_tried: u32,
) -> Result<GpdFit, TailError> {
    let k = d.count_above(u);
    if k < MIN_EXCEEDANCES {
        return Err(TailError::TooFewExceedances {
            count: k,
            threshold_ns: u,
        });
    }
    let y = excesses(d, u);
    let (shape, scale) = pwm(&y).ok_or(TailError::Degenerate)?;
    let anderson_darling = anderson_darling(&y, shape, scale);
    let p_value = (shape < 0.0 || anderson_darling <= FIT_REJECT_A2)
        .then(|| fit_p_value(anderson_darling, y.len(), shape, scale));
    Ok(GpdFit {
        threshold_ns: u,
        exceedances: k,
        samples: d.total(),
        shape,
        scale_ns: scale,
        extrapolation_shape: extrapolation_shape(shape),
        method: "pwm",
        anderson_darling,
        p_value,
        threshold_rule,
        thresholds_tried,
    })
}

/// Fits the tail of `d` above `threshold_ns`, or above the lowest threshold at which the model
/// fits when `None` (see the module's "Threshold").
pub fn fit(d: &Distribution, threshold_ns: Option<i64>) -> Result<GpdFit, TailError> {
    let n = d.total();
    if n < MIN_SAMPLES {
        return Err(TailError::TooFewSamples(n));
    }
    if let Some(u) = threshold_ns {
        let f = fit_above(d, u, "given", 1)?;
        return if f.fits() {
            Ok(f)
        } else {
            Err(TailError::DoesNotFit {
                threshold_ns: u,
                anderson_darling: f.anderson_darling,
                p_value: f.p_value,
            })
        };
    }
    let first = first_exceedances(n);
    let floor = MIN_CHOSEN_EXCEEDANCES.min(first);
    let mut k = first as f64;
    let mut tried = 0u32;
    let mut range: Option<(i64, i64)> = None;
    let mut first_error = None;
    let mut previous = None;
    while k.round() as u64 >= floor {
        let u = d
            .value_at_rank(n - k.round() as u64)
            .ok_or(TailError::TooFewSamples(n))?;
        k /= THRESHOLD_STEP;
        if previous == Some(u) {
            continue;
        }
        previous = Some(u);
        match fit_above(d, u, "lowest_fitting", tried + 1) {
            Ok(f) => {
                tried += 1;
                if f.fits() {
                    return Ok(f);
                }
                range = Some((range.map_or(u, |r| r.0), u));
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match range {
        Some((lowest_ns, highest_ns)) => Err(TailError::NoFit {
            tried,
            lowest_ns,
            highest_ns,
        }),
        None => Err(first_error.unwrap_or(TailError::TooFewSamples(n))),
    }
}

/// A percentile-bootstrap confidence interval of the level exceeded with probability `p`:
/// the excesses are resampled `resamples` times with a generator seeded by `seed`, and refitted.
/// `None` when `p` is not in the tail or fewer than half of the refits are valid.
pub fn return_level_ci(
    d: &Distribution,
    fit: &GpdFit,
    p: f64,
    confidence: f64,
    resamples: u32,
    seed: u64,
) -> Option<(f64, f64)> {
    let in_tail = p > 0.0 && p < fit.zeta();
    let valid_confidence = confidence > 0.0 && confidence < 1.0;
    if !in_tail || !valid_confidence || resamples == 0 {
        return None;
    }
    let u = fit.threshold_ns;
    let excesses = excesses(d, u);
    let k = excesses.len() as u64;
    let mut rng = SplitMix64::new(seed);
    let mut levels = Vec::with_capacity(resamples as usize);
    let mut sample = vec![0.0; excesses.len()];
    for _ in 0..resamples {
        for s in sample.iter_mut() {
            *s = excesses[rng.below(k) as usize];
        }
        sample.sort_unstable_by(f64::total_cmp);
        if let Some((shape, scale)) = pwm(&sample) {
            let shape = extrapolation_shape(shape);
            if let Some(x) = return_level(u as f64, fit.zeta(), shape, scale, p) {
                levels.push(x);
            }
        }
    }
    if (levels.len() as u64) * 2 < u64::from(resamples) {
        return None;
    }
    levels.sort_unstable_by(f64::total_cmp);
    let alpha = (1.0 - confidence) / 2.0;
    Some((
        percentile_sorted(&levels, alpha),
        percentile_sorted(&levels, 1.0 - alpha),
    ))
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact quantiles of a GPD(ξ, σ) at (j − 0.5)/k: a sample with no sampling noise.
    fn gpd_quantiles(shape: f64, scale: f64, k: usize) -> Vec<f64> {
        (1..=k)
            .map(|j| {
                let f = (j as f64 - 0.5) / k as f64;
                if shape == 0.0 {
                    -scale * (1.0 - f).ln()
                } else {
                    scale / shape * ((1.0 - f).powf(-shape) - 1.0)
                }
            })
            .collect()
    }

    #[test]
    fn pwm_recovers_known_parameters() {
        for (shape, scale) in [(0.0, 1000.0), (0.3, 1000.0), (-0.2, 500.0)] {
            let y = gpd_quantiles(shape, scale, 20_000);
            let (xi, sigma) = pwm(&y).expect("valid");
            assert!((xi - shape).abs() < 0.02, "shape {shape}: {xi}");
            assert!((sigma / scale - 1.0).abs() < 0.03, "scale {scale}: {sigma}");
        }
        assert_eq!(pwm(&[1.0]), None);
    }

    #[test]
    fn return_levels_by_hand() {
        // Exponential tail (ξ = 0), σ = 100, u = 1000, ζ = 0.01: x_p = 1000 + 100·ln(0.01/p).
        let f = GpdFit {
            threshold_ns: 1000,
            exceedances: 10,
            samples: 1000,
            shape: 0.0,
            scale_ns: 100.0,
            extrapolation_shape: 0.0,
            method: "pwm",
            anderson_darling: 0.2,
            p_value: Some(0.9),
            threshold_rule: "given",
            thresholds_tried: 1,
        };
        let x = f.return_level(1e-4).expect("in the tail");
        assert!((x - (1000.0 + 100.0 * 100f64.ln())).abs() < 1e-9);
        assert!((f.exceedance(x) - 1e-4).abs() < 1e-15);
        // ξ = 0.5, σ = 100: x_p = 1000 + 200·(√(ζ/p) − 1) = 1000 + 200·9 = 2800 at p = 1e-4.
        let g = GpdFit {
            shape: 0.5,
            extrapolation_shape: 0.5,
            ..f.clone()
        };
        assert!((g.return_level(1e-4).expect("tail") - 2800.0).abs() < 1e-9);
        assert_eq!(g.return_level(0.5), None);
        // A bounded estimate (ξ = −0.4, end point at u + σ/0.4 = 1250) is extrapolated as the
        // exponential of the same scale.
        let b = GpdFit {
            shape: -0.4,
            ..f.clone()
        };
        assert_eq!(b.return_level(1e-4), f.return_level(1e-4));
        assert!(b.exceedance(1300.0) > 0.0);
    }

    /// `bulk` samples of a quiet distribution (2 µs plus an exponential of mean 5 µs) and
    /// `stalls` of another (1 ms plus an exponential of mean 3 ms), from exact quantiles.
    fn two_populations(bulk: usize, stalls: usize) -> Distribution {
        let mut v: Vec<i64> = gpd_quantiles(0.0, 5_000.0, bulk)
            .into_iter()
            .map(|x| 2_000 + x.round() as i64)
            .collect();
        v.extend(
            gpd_quantiles(0.0, 3_000_000.0, stalls)
                .into_iter()
                .map(|x| 1_000_000 + x.round() as i64),
        );
        Distribution::from_samples(&v)
    }

    #[test]
    fn the_threshold_is_the_lowest_at_which_the_model_fits() {
        // The top 1% is 900 quiet samples and 100 stalls: no GPD describes both.
        let d = two_populations(99_900, 100);
        let p99 = default_threshold(&d).expect("threshold");
        assert!(p99 < 100_000, "{p99}");
        match fit(&d, Some(p99)) {
            Err(TailError::DoesNotFit {
                threshold_ns,
                anderson_darling,
                p_value,
            }) => {
                assert_eq!(threshold_ns, p99);
                assert!(anderson_darling > FIT_REJECT_A2 && p_value.is_none());
            }
            other => panic!("{other:?}"),
        }
        // Tried upwards, the first threshold that fits lies among the stalls.
        let f = fit(&d, None).expect("fit");
        assert_eq!(f.threshold_rule, "lowest_fitting");
        assert!(f.threshold_ns >= 1_000_000, "{f:?}");
        assert!(f.thresholds_tried > 5 && f.fits(), "{f:?}");
        assert!(f.exceedances >= MIN_CHOSEN_EXCEEDANCES && f.exceedances <= 100);
        // The stalls' tail: above u, an exponential of mean 3 ms.
        assert!(
            f.shape.abs() < 0.15 && (f.scale_ns / 3e6 - 1.0).abs() < 0.25,
            "{f:?}"
        );
        // The same data give the same answer.
        assert_eq!(fit(&d, None), Ok(f));
    }

    #[test]
    fn no_model_where_no_threshold_fits() {
        // 40 stalls: too few for a chosen threshold (50) once the quiet samples are left below.
        let d = two_populations(99_960, 40);
        match fit(&d, None) {
            Err(
                e @ TailError::NoFit {
                    tried,
                    lowest_ns,
                    highest_ns,
                },
            ) => {
                assert!(tried > 5 && lowest_ns < highest_ns, "{e}");
                assert!(e.to_string().contains("no generalised Pareto"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn binned_data_are_not_rejected_for_their_bins() {
        // A histogram with 1 µs bins, as cyclictest writes: 2 µs plus an exponential of mean
        // 4 µs, floored to whole microseconds. The top 1% (1000 samples) has ties in every bin.
        let v: Vec<i64> = gpd_quantiles(0.0, 4_000.0, 100_000)
            .into_iter()
            .map(|x| (2_000 + x as i64) / 1_000 * 1_000)
            .collect();
        let f = fit(&Distribution::from_samples(&v), None).expect("fit");
        assert_eq!(f.thresholds_tried, 1, "{f:?}");
    }

    #[test]
    fn large_a2_is_rejected_without_simulation_only_where_simulation_would() {
        // Fewer than 1% of fits to samples drawn from the model itself reach FIT_REJECT_A2.
        let mut rng = SplitMix64::new(7);
        for shape in [0.0, 0.5, 0.9] {
            for m in [50, 500] {
                let mut over = 0;
                for _ in 0..1000 {
                    let mut y: Vec<f64> = (0..m)
                        .map(|_| gpd_quantile(rng.unit(), shape, 1.0))
                        .collect();
                    y.sort_unstable_by(f64::total_cmp);
                    if pwm(&y).is_some_and(|(s, c)| anderson_darling(&y, s, c) > FIT_REJECT_A2) {
                        over += 1;
                    }
                }
                assert!(over < 10, "shape {shape}, {m} excesses: {over} of 1000");
            }
        }
    }

    #[test]
    fn anderson_darling_by_hand() {
        // Two points at the exponential's quartiles: z = 1/4, 3/4;
        // A² = −2 − (1/2)·[1·(ln ¼ + ln ¼) + 3·(ln ¾ + ln ¾)].
        let y = [-(0.75f64).ln(), -(0.25f64).ln()];
        let want = -2.0 - 0.5 * (2.0 * 0.25f64.ln() + 6.0 * 0.75f64.ln());
        assert!((anderson_darling(&y, 0.0, 1.0) - want).abs() < 1e-12);
        assert_eq!(untied(&[1.0, 2.0, 2.0, 4.0]), vec![1.0, 1.25, 1.75, 4.0]);
        assert_eq!(untied(&[3.0, 3.0]), vec![0.75, 2.25]);
    }

    #[test]
    fn fits_a_measured_tail_with_a_reproducible_interval() {
        // 10^5 samples: 99% at 60 µs and an exponential tail of mean 20 µs above it.
        let y = gpd_quantiles(0.0, 20_000.0, 1000);
        let mut bins: Vec<(i64, u64)> = vec![(60_000, 99_000)];
        bins.extend(y.iter().map(|v| (60_000 + v.round() as i64, 1)));
        let d = Distribution::from_bins(bins);
        let f = fit(&d, None).expect("fit");
        assert_eq!(f.threshold_ns, 60_000);
        assert_eq!(f.exceedances, 1000);
        assert!(
            f.shape.abs() < 0.05 && (f.scale_ns / 20_000.0 - 1.0).abs() < 0.05,
            "{f:?}"
        );
        // The level exceeded once in 10^7 samples: 60 µs + 20 µs·ln(0.01·10^7) ≈ 290 µs.
        let p = 1e-7;
        let x = f.return_level(p).expect("tail");
        assert!(
            (x - (60_000.0 + 20_000.0 * 1e5f64.ln())).abs() < 30_000.0,
            "{x}"
        );
        let ci = return_level_ci(&d, &f, p, 0.95, 400, 42).expect("interval");
        assert!(ci.0 <= x && x <= ci.1, "{ci:?} {x}");
        assert_eq!(return_level_ci(&d, &f, p, 0.95, 400, 42), Some(ci));
        assert!(return_level_ci(&d, &f, 0.5, 0.95, 400, 42).is_none());
    }

    #[test]
    fn refuses_thin_data() {
        let d = Distribution::from_samples(&[1, 2, 3]);
        assert_eq!(fit(&d, None), Err(TailError::TooFewSamples(3)));
        let d = Distribution::from_bins([(10, 995), (20, 5)]);
        assert!(matches!(
            fit(&d, None),
            Err(TailError::TooFewExceedances { count: 5, .. })
        ));
    }
}
