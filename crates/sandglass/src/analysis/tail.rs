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
//! The default threshold leaves the top 1% of the samples above it, at least 50 and at most
//! 5000 of them; at least 20 distinct excesses (counting repeats) are needed for a fit.

use super::distribution::Distribution;
use super::rng::SplitMix64;
use serde::Serialize;
use thiserror::Error;

/// Fewest samples for a tail fit.
pub const MIN_SAMPLES: u64 = 100;
/// Fewest exceedances of the threshold for a tail fit.
pub const MIN_EXCEEDANCES: u64 = 20;

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
    /// ξ.
    pub shape: f64,
    /// σ, in nanoseconds.
    pub scale_ns: f64,
    /// The estimator: `"pwm"`.
    pub method: &'static str,
}

impl GpdFit {
    /// ζ = k/n, the share of samples above the threshold.
    pub fn zeta(&self) -> f64 {
        self.exceedances as f64 / self.samples as f64
    }

    /// The level exceeded with probability `p`, for `0 < p < ζ`; `None` outside that range.
    pub fn return_level(&self, p: f64) -> Option<f64> {
        return_level(
            self.threshold_ns as f64,
            self.zeta(),
            self.shape,
            self.scale_ns,
            p,
        )
    }

    /// P(X > x) under the model, for x above the threshold.
    pub fn exceedance(&self, x: f64) -> f64 {
        let y = (x - self.threshold_ns as f64).max(0.0);
        let z = self.zeta();
        if self.shape.abs() < 1e-12 {
            z * (-y / self.scale_ns).exp()
        } else {
            let base = 1.0 + self.shape * y / self.scale_ns;
            if base <= 0.0 {
                0.0
            } else {
                z * base.powf(-1.0 / self.shape)
            }
        }
    }
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

/// The default threshold of `d`: the sample with the top 1% above it (50 to 5000 samples).
pub fn default_threshold(d: &Distribution) -> Option<i64> {
    let n = d.total();
    let k = (n / 100).clamp(50, 5000).min(n / 2);
    d.value_at_rank(n - k)
}

/// Fits the tail of `d` above `threshold_ns` (the default when `None`).
pub fn fit(d: &Distribution, threshold_ns: Option<i64>) -> Result<GpdFit, TailError> {
    let n = d.total();
    if n < MIN_SAMPLES {
        return Err(TailError::TooFewSamples(n));
    }
    let u = match threshold_ns {
        Some(u) => u,
        None => default_threshold(d).ok_or(TailError::TooFewSamples(n))?,
    };
    let k = d.count_above(u);
    if k < MIN_EXCEEDANCES {
        return Err(TailError::TooFewExceedances {
            count: k,
            threshold_ns: u,
        });
    }
    let excesses: Vec<f64> = d
        .samples_above(u)
        .into_iter()
        .map(|x| (x - u) as f64)
        .collect();
    let (shape, scale) = pwm(&excesses).ok_or(TailError::Degenerate)?;
    Ok(GpdFit {
        threshold_ns: u,
        exceedances: k,
        samples: n,
        shape,
        scale_ns: scale,
        method: "pwm",
    })
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
    let excesses: Vec<f64> = d
        .samples_above(u)
        .into_iter()
        .map(|x| (x - u) as f64)
        .collect();
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
            method: "pwm",
        };
        let x = f.return_level(1e-4).expect("in the tail");
        assert!((x - (1000.0 + 100.0 * 100f64.ln())).abs() < 1e-9);
        assert!((f.exceedance(x) - 1e-4).abs() < 1e-15);
        // ξ = 0.5, σ = 100: x_p = 1000 + 200·(√(ζ/p) − 1) = 1000 + 200·9 = 2800 at p = 1e-4.
        let g = GpdFit {
            shape: 0.5,
            ..f.clone()
        };
        assert!((g.return_level(1e-4).expect("tail") - 2800.0).abs() < 1e-9);
        assert_eq!(g.return_level(0.5), None);
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
