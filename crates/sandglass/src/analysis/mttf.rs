//! Mean time to buffer underrun, and the least buffering that reaches a target.
//!
//! Cota-Robles & Held (*A comparison of Windows Driver Model latency performance on Windows NT
//! and Windows 98*, OSDI 1999, §5) forecast the quality of service of a soft modem from a
//! latency table. A datapump with n buffers of t each, that needs c of computation per buffer,
//! tolerates a scheduling latency up to the slack
//!
//! `slack = (n − 1)·t − c`;
//!
//! a latency above it empties the buffers. With `P = P(latency > slack)` per buffer cycle and
//! the cycle approximated, as they do, by `(n − 1)·t` (exact for double buffering, close for
//! small n), the mean time to failure is
//!
//! `MTTF = (n − 1)·t / P`.
//!
//! Conventions: a latency equal to the slack still makes it (P counts samples strictly above);
//! with a slack of zero or less every cycle fails, so the MTTF is one cycle. When no sample
//! exceeds the slack the estimate is never "infinite": with N samples and none above, the
//! one-sided 95% upper confidence bound on P is about 3/N (the "rule of three", Hanley &
//! Lippman-Hand, JAMA 249(13), 1983), which gives a lower bound `(n − 1)·t·N/3` on the MTTF,
//! reported as such. With a single buffer there is no slack to speak of and the model does not
//! apply.

use super::distribution::Distribution;
use crate::units::Nanos;
use serde::Serialize;
use thiserror::Error;

/// Where P(latency > slack) comes from.
#[derive(Clone, Copy, Debug)]
pub enum Exceedance<'a> {
    /// A measured latency distribution, one sample per buffer cycle.
    Measured(&'a Distribution),
    /// The probability given directly; `samples` (how many observations it came from) allows
    /// a lower bound when it is zero.
    Given {
        /// P(latency > slack), the same for every slack above zero.
        probability: f64,
        /// The number of samples behind it, if known.
        samples: Option<u64>,
    },
}

/// Why an MTTF cannot be computed.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum MttfError {
    /// Fewer than two buffers.
    #[error("{0} buffer(s): the model needs at least 2 (with one buffer there is no slack)")]
    TooFewBuffers(u32),
    /// A buffer size of zero.
    #[error("the buffer size is zero: give a buffer period such as 4ms")]
    ZeroBuffer,
    /// A probability outside [0, 1].
    #[error("exceedance probability {0} is not in [0, 1]")]
    BadProbability(f64),
    /// The distribution has no samples.
    #[error("the latency distribution has no samples")]
    NoSamples,
    /// P = 0 with no sample count: no bound is possible.
    #[error("the exceedance probability is 0 and the number of samples is unknown: give the sample count so that a lower bound can be stated")]
    ZeroWithoutSamples,
    /// (n − 1)·t does not fit in 64 bits of nanoseconds.
    #[error("(n − 1) × buffer is longer than 584 years")]
    Overflow,
    /// The target is not positive and finite.
    #[error("target MTTF {0} s must be positive and finite")]
    BadTarget(f64),
}

/// The MTTF of one buffering configuration.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct MttfResult {
    /// t.
    pub buffer_ns: Nanos,
    /// n.
    pub buffers: u32,
    /// c.
    pub compute_ns: Nanos,
    /// (n − 1)·t: the buffering, and the approximate cycle time.
    pub buffering_ns: Nanos,
    /// (n − 1)·t − c.
    pub slack_ns: i64,
    /// P(latency > slack); 1 when the slack is not positive. Under a zero-probability lower
    /// bound, still 0 (what was observed).
    pub probability: f64,
    /// Samples above the slack, for a measured distribution.
    pub count_above: Option<u64>,
    /// Samples in the distribution, when known.
    pub samples: Option<u64>,
    /// The mean time to underrun; `None` when no sample exceeded the slack.
    pub mttf_s: Option<f64>,
    /// When no sample exceeded the slack: the rule-of-three lower bound (n − 1)·t·N/3.
    pub mttf_lower_bound_s: Option<f64>,
    /// The slack is zero or less: every cycle underruns.
    pub every_cycle: bool,
    /// The exact (Garwood) 95% interval of the MTTF from the Poisson count of samples above
    /// the slack, when some were; the upper end is `None` when unbounded.
    pub mttf_ci_low_s: Option<f64>,
    pub mttf_ci_high_s: Option<f64>,
    /// Set by [`within_run`]: the MTTF speaks of a stretch longer than the rule allows for the
    /// time observed (docs/analysis.md, "Validity of predictions"), so `mttf_s`, its bound and
    /// its interval are withheld, and this is the run, in seconds, that would support them.
    pub needs_run_s: Option<f64>,
}

impl MttfResult {
    /// The MTTF, or its lower bound when only a bound is known.
    pub fn at_least_s(&self) -> f64 {
        self.mttf_s.or(self.mttf_lower_bound_s).unwrap_or(0.0)
    }
}

/// The MTTF of `buffers` buffers of `buffer` each with `compute` of work per buffer.
pub fn mttf(
    buffer: Nanos,
    buffers: u32,
    compute: Nanos,
    latency: &Exceedance<'_>,
) -> Result<MttfResult, MttfError> {
    if buffers < 2 {
        return Err(MttfError::TooFewBuffers(buffers));
    }
    if buffer == Nanos::ZERO {
        return Err(MttfError::ZeroBuffer);
    }
    let buffering = buffer
        .0
        .checked_mul(u64::from(buffers - 1))
        .ok_or(MttfError::Overflow)?;
    let slack = i128::from(buffering) - i128::from(compute.0);
    let slack = i64::try_from(slack).map_err(|_| MttfError::Overflow)?;
    let (samples, count_above, probability) = match *latency {
        Exceedance::Measured(d) => {
            if d.is_empty() {
                return Err(MttfError::NoSamples);
            }
            let above = d.count_above(slack);
            (
                Some(d.total()),
                Some(above),
                above as f64 / d.total() as f64,
            )
        }
        Exceedance::Given {
            probability,
            samples,
        } => {
            if !(0.0..=1.0).contains(&probability) {
                return Err(MttfError::BadProbability(probability));
            }
            (samples, None, probability)
        }
    };
    let cycle_ns = buffering as f64;
    let mut out = MttfResult {
        buffer_ns: buffer,
        buffers,
        compute_ns: compute,
        buffering_ns: Nanos(buffering),
        slack_ns: slack,
        probability,
        count_above,
        samples,
        mttf_s: None,
        mttf_lower_bound_s: None,
        every_cycle: slack <= 0,
        mttf_ci_low_s: None,
        mttf_ci_high_s: None,
        needs_run_s: None,
    };
    if slack <= 0 {
        out.probability = 1.0;
        out.mttf_s = Some(cycle_ns / 1e9);
    } else if probability > 0.0 {
        out.mttf_s = Some(cycle_ns / probability / 1e9);
        if let (Some(k), Some(n)) = (count_above, samples) {
            let (lo, hi) = poisson_interval(k, 0.95);
            // P's interval [lo/n, hi/n] gives the MTTF's, reversed.
            out.mttf_ci_low_s = Some(cycle_ns * n as f64 / hi / 1e9);
            out.mttf_ci_high_s = (lo > 0.0).then(|| cycle_ns * n as f64 / lo / 1e9);
        }
    } else {
        let n = samples
            .filter(|&n| n > 0)
            .ok_or(MttfError::ZeroWithoutSamples)?;
        out.mttf_lower_bound_s = Some(cycle_ns * n as f64 / 3.0 / 1e9);
    }
    Ok(out)
}

/// The exact (Garwood 1936) interval of a Poisson mean from `k` events at `confidence`:
/// `[χ²(α/2; 2k)/2, χ²(1 − α/2; 2k + 2)/2]`, the lower end 0 for k = 0.
pub fn poisson_interval(k: u64, confidence: f64) -> (f64, f64) {
    use statrs::distribution::{ChiSquared, ContinuousCDF};
    let alpha = 1.0 - confidence;
    let q = |p: f64, dof: f64| ChiSquared::new(dof).map_or(f64::NAN, |c| c.inverse_cdf(p)) / 2.0;
    let lo = if k == 0 {
        0.0
    } else {
        q(alpha / 2.0, 2.0 * k as f64)
    };
    (lo, q(1.0 - alpha / 2.0, 2.0 * k as f64 + 2.0))
}

/// Applies the validity rule to `r`, from a latency distribution that took `observed_s` to
/// measure: an MTTF (or its bound) more than `max_ratio` times `observed_s` is withheld and
/// `needs_run_s` says how long a run would support it.
pub fn within_run(r: &mut MttfResult, observed_s: f64, max_ratio: f64) {
    if r.every_cycle || observed_s.is_nan() || observed_s <= 0.0 {
        return;
    }
    let figure = r.mttf_s.or(r.mttf_lower_bound_s).unwrap_or(0.0);
    if figure > observed_s * max_ratio {
        r.needs_run_s = Some(figure / max_ratio);
        r.mttf_s = None;
        r.mttf_lower_bound_s = None;
        r.mttf_ci_low_s = None;
        r.mttf_ci_high_s = None;
    }
}

/// The MTTF for every buffer size and count (seed 000, Figures 6 and 7), sizes varying
/// fastest.
pub fn grid(
    sizes: &[Nanos],
    counts: &[u32],
    compute: Nanos,
    latency: &Exceedance<'_>,
) -> Result<Vec<MttfResult>, MttfError> {
    let mut out = Vec::with_capacity(sizes.len() * counts.len());
    for &n in counts {
        for &t in sizes {
            out.push(mttf(t, n, compute, latency)?);
        }
    }
    Ok(out)
}

/// The configuration of a grid with the least buffering (n − 1)·t whose MTTF (or its lower
/// bound) reaches `target_s`; ties go to fewer buffers.
pub fn least_in_grid(results: &[MttfResult], target_s: f64) -> Option<&MttfResult> {
    results
        .iter()
        .filter(|r| r.at_least_s() >= target_s)
        .min_by_key(|r| (r.buffering_ns, r.buffers))
}

/// The least buffer size for a given buffer count.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct LeastBuffering {
    /// n.
    pub buffers: u32,
    /// The MTTF at the least buffer size t that reaches the target (1 ns resolution); `None`
    /// when no size that fits in 64 bits does, or when the target is beyond what the run
    /// supports (`needs_run_s`).
    pub result: Option<MttfResult>,
    /// Set by [`target_within_run`]: the target is longer than the validity rule allows for
    /// the time observed; the run, in seconds, that would support an answer.
    pub needs_run_s: Option<f64>,
}

/// Applies the validity rule to a search for `target_s`: a target more than `max_ratio`
/// times `observed_s` gets no answer, only the run that would support one.
pub fn target_within_run(
    rows: &mut [LeastBuffering],
    target_s: f64,
    observed_s: f64,
    max_ratio: f64,
) {
    if observed_s > 0.0 && target_s > observed_s * max_ratio {
        for r in rows {
            r.result = None;
            r.needs_run_s = Some(target_s / max_ratio);
        }
    }
}

/// The least t in `[lo, hi]` with `pred(t)`, given `pred` monotone there and true at `hi`.
fn bisect(
    mut lo: u64,
    mut hi: u64,
    pred: &mut dyn FnMut(u64) -> Result<bool, MttfError>,
) -> Result<u64, MttfError> {
    if pred(lo)? {
        return Ok(lo);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}

/// The least t ≥ `lo` with `pred(t)`, given `pred` monotone on `[lo, ∞)`; `None` when it is
/// false up to `u64::MAX`.
fn search_up(
    lo: u64,
    pred: &mut dyn FnMut(u64) -> Result<bool, MttfError>,
) -> Result<Option<u64>, MttfError> {
    if pred(lo)? {
        return Ok(Some(lo));
    }
    let (mut below, mut step) = (lo, 1u64);
    loop {
        let Some(hi) = lo.checked_add(step) else {
            return Ok(None);
        };
        if pred(hi)? {
            return bisect(below, hi, pred).map(Some);
        }
        below = hi;
        step = match step.checked_mul(2) {
            Some(s) => s,
            None => return Ok(None),
        };
    }
}

/// For each buffer count, the least buffer size (to the nanosecond) whose MTTF, or its lower
/// bound where no sample exceeds the slack, reaches `target_s`.
///
/// Each regime is monotone in t: while some sample exceeds the slack, (n − 1)·t grows and P
/// cannot; once none does (the slack passed the largest sample), the rule-of-three bound grows
/// with t. The two do not join up (the bound is usually below the last estimate), so each regime
/// is searched on its own and the least answer kept.
pub fn least_buffering(
    counts: &[u32],
    compute: Nanos,
    latency: &Exceedance<'_>,
    target_s: f64,
) -> Result<Vec<LeastBuffering>, MttfError> {
    if !(target_s.is_finite() && target_s > 0.0) {
        return Err(MttfError::BadTarget(target_s));
    }
    let mut out = Vec::with_capacity(counts.len());
    for &n in counts {
        // Validate the count and the distribution once.
        mttf(Nanos(1), n, compute, latency)?;
        let eval = |t: u64| -> Result<Option<MttfResult>, MttfError> {
            match mttf(Nanos(t), n, compute, latency) {
                Ok(r) => Ok(Some(r)),
                Err(MttfError::Overflow) => Ok(None),
                Err(e) => Err(e),
            }
        };
        // In the lower-bound regime (or past 64 bits, which ends the search too).
        let mut bounded = |t: u64| -> Result<bool, MttfError> {
            Ok(eval(t)?.is_none_or(|r| r.mttf_lower_bound_s.is_some()))
        };
        let mut meets = |t: u64| -> Result<bool, MttfError> {
            Ok(eval(t)?.is_some_and(|r| r.at_least_s() >= target_s))
        };
        let bound_from = search_up(1, &mut bounded)?;
        let answer = match bound_from {
            Some(b) if b > 1 && meets(b - 1)? => Some(bisect(1, b - 1, &mut meets)?),
            Some(b) => search_up(b, &mut meets)?,
            None => search_up(1, &mut meets)?,
        };
        out.push(LeastBuffering {
            buffers: n,
            result: match answer {
                Some(t) => eval(t)?,
                None => None,
            },
            needs_run_s: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Nanos {
        Nanos::from_millis(v)
    }

    /// 1000 samples: 990 at 1 ms, 9 at 11 ms, 1 at 15 ms.
    fn table() -> Distribution {
        Distribution::from_bins([(1_000_000, 990), (11_000_000, 9), (15_000_000, 1)])
    }

    /// Garwood's interval against the published table (Ulm 1990, 95%): k = 0: 0 to 3.689;
    /// k = 1: 0.0253 to 5.572; k = 10: 4.795 to 18.39.
    #[test]
    fn poisson_interval_matches_the_table() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-3 * b.max(1.0);
        for (k, lo, hi) in [(0, 0.0, 3.689), (1, 0.0253, 5.572), (10, 4.795, 18.39)] {
            let (l, h) = poisson_interval(k, 0.95);
            assert!(close(l, lo) && close(h, hi), "{k}: {l} {h}");
        }
    }

    /// An MTTF comes with its interval; one more than ten times the time measured is withheld
    /// with the run it would need, and so is a target that far out.
    #[test]
    fn figures_beyond_the_run_are_withheld() {
        let d = table();
        // 10 of 1000 samples above a slack of 10 ms: MTTF 10 ms · 1000/10 = 1 s.
        let mut r = mttf(ms(10), 2, Nanos::ZERO, &Exceedance::Measured(&d)).expect("valid");
        assert!((r.mttf_s.expect("mttf") - 1.0).abs() < 1e-9);
        let (lo, hi) = (r.mttf_ci_low_s.expect("ci"), r.mttf_ci_high_s.expect("ci"));
        assert!(
            (lo - 1.0 / 1.839).abs() < 1e-3 && (hi - 1.0 / 0.4795).abs() < 1e-2,
            "{lo} {hi}"
        );
        // Measured in 1 s (1000 samples at 1 kHz): 1 s is within ten times that.
        let kept = r.clone();
        within_run(&mut r, 1.0, 10.0);
        assert_eq!(r, kept);
        // Measured in 50 ms: 1 s is 20 times that, so a run of 100 ms is needed.
        within_run(&mut r, 0.05, 10.0);
        assert_eq!(
            (r.mttf_s, r.mttf_ci_low_s, r.mttf_ci_high_s),
            (None, None, None)
        );
        assert!((r.needs_run_s.expect("needs") - 0.1).abs() < 1e-12);
        // The rule-of-three bound is withheld the same way.
        let mut b = mttf(ms(20), 2, Nanos::ZERO, &Exceedance::Measured(&d)).expect("valid");
        assert!(b.mttf_lower_bound_s.is_some());
        within_run(&mut b, 0.1, 10.0);
        assert_eq!(b.mttf_lower_bound_s, None);
        assert!(b.needs_run_s.is_some());
        // A target of an hour from ten seconds of data: no answer, a run of six minutes.
        let mut rows =
            least_buffering(&[2, 3], Nanos::ZERO, &Exceedance::Measured(&d), 3600.0).expect("ok");
        assert!(rows.iter().all(|r| r.result.is_some()));
        target_within_run(&mut rows, 3600.0, 10.0, 10.0);
        for r in &rows {
            assert_eq!((r.result.is_none(), r.needs_run_s), (true, Some(360.0)));
        }
    }

    #[test]
    fn seed_minimum_modem_slack() {
        // Seed 000, §5.1: "the minimum modem slack time of 3 milliseconds (= cycle time of 4 ms.
        // - 1 ms. of computation)": double buffering, 4 ms buffers, 1 ms of work.
        let r = mttf(
            ms(4),
            2,
            ms(1),
            &Exceedance::Given {
                probability: 1e-4,
                samples: None,
            },
        )
        .expect("valid");
        assert_eq!(r.slack_ns, 3_000_000);
        // 4 ms / 1e-4 = 40 s.
        assert!((r.mttf_s.expect("finite") - 40.0).abs() < 1e-9);
    }

    #[test]
    fn measured_table_by_hand() {
        let d = table();
        // Triple buffering of 6 ms with 1 ms of work: slack 11 ms. A latency of exactly 11 ms
        // still makes it, so only the 15 ms sample counts: P = 1/1000, MTTF = 12 ms / 0.001.
        let r = mttf(ms(6), 3, ms(1), &Exceedance::Measured(&d)).expect("valid");
        assert_eq!(r.slack_ns, 11_000_000);
        assert_eq!(r.buffering_ns, ms(12));
        assert_eq!((r.count_above, r.samples), (Some(1), Some(1000)));
        assert!((r.probability - 0.001).abs() < 1e-15);
        assert!((r.mttf_s.expect("finite") - 12.0).abs() < 1e-9);
        // One nanosecond less of buffer: slack just under 11 ms, P = 10/1000, MTTF ≈ 1.2 s.
        let r = mttf(Nanos(5_999_999), 3, ms(1), &Exceedance::Measured(&d)).expect("valid");
        assert_eq!(r.count_above, Some(10));
        assert!((r.mttf_s.expect("finite") - 0.011_999_998 / 0.01).abs() < 1e-9);
    }

    #[test]
    fn no_slack_fails_every_cycle() {
        let d = table();
        // 2 × 1 ms buffers with 2 ms of work: slack −1 ms, MTTF one cycle, 1 ms.
        let r = mttf(ms(1), 2, ms(2), &Exceedance::Measured(&d)).expect("valid");
        assert_eq!(r.slack_ns, -1_000_000);
        assert!(r.every_cycle);
        assert_eq!(r.probability, 1.0);
        assert!((r.mttf_s.expect("finite") - 0.001).abs() < 1e-15);
        // Zero slack also fails every cycle.
        let r = mttf(ms(2), 2, ms(2), &Exceedance::Measured(&d)).expect("valid");
        assert!(r.every_cycle && r.slack_ns == 0);
    }

    #[test]
    fn zero_exceedance_gives_a_rule_of_three_bound() {
        let d = table();
        // 3 × 10 ms, 1 ms of work: slack 19 ms > 15 ms, nothing above. Bound: 20 ms × 1000 / 3.
        let r = mttf(ms(10), 3, ms(1), &Exceedance::Measured(&d)).expect("valid");
        assert_eq!(r.mttf_s, None);
        assert_eq!(r.probability, 0.0);
        assert!((r.mttf_lower_bound_s.expect("bound") - 20.0 / 3.0).abs() < 1e-12);
        let given = Exceedance::Given {
            probability: 0.0,
            samples: Some(3_000),
        };
        let r = mttf(ms(10), 3, ms(1), &given).expect("valid");
        assert!((r.mttf_lower_bound_s.expect("bound") - 20.0).abs() < 1e-12);
        let unknown = Exceedance::Given {
            probability: 0.0,
            samples: None,
        };
        assert_eq!(
            mttf(ms(10), 3, ms(1), &unknown),
            Err(MttfError::ZeroWithoutSamples)
        );
    }

    #[test]
    fn invalid_inputs() {
        let d = table();
        let m = Exceedance::Measured(&d);
        assert_eq!(mttf(ms(1), 1, ms(0), &m), Err(MttfError::TooFewBuffers(1)));
        assert_eq!(mttf(Nanos(0), 2, ms(0), &m), Err(MttfError::ZeroBuffer));
        let bad = Exceedance::Given {
            probability: 1.5,
            samples: None,
        };
        assert!(matches!(
            mttf(ms(1), 2, ms(0), &bad),
            Err(MttfError::BadProbability(_))
        ));
        let empty = Distribution::from_samples(&[]);
        assert_eq!(
            mttf(ms(1), 2, ms(0), &Exceedance::Measured(&empty)),
            Err(MttfError::NoSamples)
        );
        assert_eq!(
            mttf(Nanos(u64::MAX), 3, ms(0), &m),
            Err(MttfError::Overflow)
        );
    }

    #[test]
    fn grid_and_least_buffering() {
        let d = table();
        let m = Exceedance::Measured(&d);
        let g = grid(&[ms(2), ms(4), ms(6), ms(8)], &[2, 3], ms(1), &m).expect("valid");
        assert_eq!(g.len(), 8);
        // n = 2, t = 2 ms: slack 1 ms; 10 samples above: 2 ms / 0.01 = 0.2 s.
        assert!((g[0].mttf_s.expect("finite") - 0.2).abs() < 1e-12);
        // n = 3, t = 6 ms is the 12 s point above; n = 3, t = 8 ms has slack 15 ms: a bound.
        assert!((g[6].mttf_s.expect("finite") - 12.0).abs() < 1e-9);
        assert!(g[7].mttf_s.is_none() && g[7].mttf_lower_bound_s.is_some());
        // Target 10 s: n = 3, t = 6 ms (12 ms of buffering) is the least in the grid.
        let best = least_in_grid(&g, 10.0).expect("reachable");
        assert_eq!((best.buffers, best.buffer_ns), (3, ms(6)));
        // To the nanosecond: for n = 3, exactly 6 ms (one ns less gives 1.2 s).
        let l = least_buffering(&[3], ms(1), &m, 10.0).expect("valid");
        assert_eq!(l[0].result.as_ref().map(|r| r.buffer_ns), Some(ms(6)));
        // Target 60 s: P = 0.001 gives at most 16 ms/0.001 = 16 s before the slack passes
        // 15 ms; beyond, only the bound (2t)·1000/3 counts, which reaches 60 s at t = 90 ms.
        let l = least_buffering(&[3], ms(1), &m, 60.0).expect("valid");
        let r = l[0].result.as_ref().expect("reachable");
        assert_eq!(r.buffer_ns, ms(90));
        assert!(r.mttf_s.is_none());
        assert!(matches!(
            least_buffering(&[3], ms(1), &m, 0.0),
            Err(MttfError::BadTarget(_))
        ));
    }
}
