//! From one measured lateness distribution to the answers `sandglass check` gives: the
//! probability that a period misses, the mean time between misses with its interval, the
//! worst case per hour, the slack a target needs, and the verdict.
//!
//! The rule (docs/check.md, "How the verdict is reached"), with k periods late beyond the slack
//! among n measured, T the period and M the target (one miss per M):
//!
//! - **not suitable** when the exact (Garwood) 95 % interval of the miss rate lies wholly above
//!   one per M: the machine misses more often than the target, and more data would not change
//!   that;
//! - **suitable** when the miss rate is shown to be below one per M: either directly (no miss,
//!   and the upper end of the rate's 95 % interval, 3.689/(n·T), already below it, which takes
//!   a run 3.7 times M), or
//!   by the tail model where its validity rule holds for M (docs/analysis.md, "Validity of
//!   predictions": a run of at least M/10 and 50 samples in the fitted tail) and the upper end of
//!   the 95 % interval of the delay exceeded once per M is below the slack;
//! - **marginal** otherwise, saying which: misses near the target, a prediction whose interval
//!   reaches the slack, or a run too short to speak of M, with the run that would decide.

use super::workload::Workload;
use crate::analysis::distribution::Distribution;
use crate::analysis::mttf::poisson_interval;
use crate::analysis::tail;
use crate::analysis::worst_case::{self, Horizon, MAX_HORIZON_RATIO, MIN_TAIL_EXCEEDANCES};
use crate::units::Nanos;
use serde::{Deserialize, Serialize};

/// The default target: one miss per 8 hours (a working day, a concert, a shift).
pub const DEFAULT_TARGET_S: f64 = 8.0 * 3600.0;

/// The confidence of an early end: looked at every second, the answer must hold at 99.9 % so
/// that many looks do not make a chance result.
pub const EARLY_CONFIDENCE: f64 = 0.999;

/// A run never ends early before this, so that causes have data to be named from.
pub const EARLY_MIN_NS: u64 = 10_000_000_000;

/// The verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Suitable,
    Marginal,
    NotSuitable,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Suitable => "suitable",
            Level::Marginal => "marginal",
            Level::NotSuitable => "not suitable",
        }
    }
}

/// What one measurement predicts for the workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Predictions {
    /// The lateness a period survives: the workload's slack less `--work`.
    pub slack_ns: i64,
    /// Periods measured (one release each, missed releases included) and the time they cover.
    pub periods: u64,
    pub measured_s: f64,
    /// Periods later than the slack.
    pub misses: u64,
    pub max_ns: i64,
    /// The probability that one period misses: measured k/n, with its 95 % interval.
    pub miss_probability: f64,
    pub miss_probability_low: f64,
    pub miss_probability_high: f64,
    /// From the tail model where few periods missed and the model is valid: P(lateness >
    /// slack) under the fitted generalised Pareto tail.
    pub model_probability: Option<f64>,
    /// The mean time between misses, measured (k ≥ 1) or from the model, with its interval;
    /// withheld beyond ten times the measured time (`mtbf_needs_run_s` says what run would
    /// support it).
    pub mtbf_s: Option<f64>,
    pub mtbf_low_s: Option<f64>,
    pub mtbf_high_s: Option<f64>,
    /// With no miss: the lower end of the two-sided 95 % interval of the mean time between
    /// misses, a one-sided 97.5 % lower bound (n·T/3.689, Garwood's upper rate for k = 0).
    pub mtbf_at_least_s: Option<f64>,
    pub mtbf_from_model: bool,
    pub mtbf_needs_run_s: Option<f64>,
    /// The worst case per hour (`analyze worst-case`), with its validity.
    #[serde(skip_deserializing)]
    pub worst_hour: Option<Horizon>,
    /// The target, and the slack it needs: the delay exceeded once per target (upper end of
    /// its 95 % interval), or the run that would support it.
    pub target_s: f64,
    pub target_slack_ns: Option<i64>,
    pub target_slack_high_ns: Option<i64>,
    pub target_needs_run_s: Option<f64>,
}

/// The verdict with its evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    pub level: Level,
    /// One sentence: why.
    pub reason: String,
    /// For a marginal verdict that more data would decide: the run that would.
    pub decide_with_run_s: Option<f64>,
}

/// A time span in seconds for people: `5 ms` and `30 s` below a minute, else its two largest
/// units (`48 min`, `7 h 12 min`, `3 d 4 h`).
pub fn span(secs: f64) -> String {
    if !secs.is_finite() {
        return "forever".to_string();
    }
    if secs < 59.5 {
        // Three significant digits: 316 ms, 1.33 ms, 42.5 s.
        let ns = (secs * 1e9).max(0.0);
        let keep = 10f64.powi(ns.log10().floor() as i32 - 2).max(1.0);
        return Nanos(((ns / keep).round() * keep) as u64).to_string();
    }
    let m = (secs / 60.0).round() as u64;
    let parts = [(m / 1440, "d"), (m / 60 % 24, "h"), (m % 60, "min")];
    let first = parts.iter().position(|p| p.0 > 0).unwrap_or(2);
    parts[first..(first + 2).min(3)]
        .iter()
        .enumerate()
        .filter(|(i, p)| *i == 0 || p.0 > 0)
        .map(|(_, (n, u))| format!("{n} {u}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn rate_interval(k: u64, n: u64, confidence: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (lo, hi) = poisson_interval(k, confidence);
    ((lo / n as f64).min(1.0), (hi / n as f64).min(1.0))
}

/// Whether `misses` among `periods` already show, at [`EARLY_CONFIDENCE`], that the workload
/// misses more often than once per `target_s`: the condition on which a run ends early.
pub fn certainly_not_suitable(misses: u64, periods: u64, period: Nanos, target_s: f64) -> bool {
    if misses == 0 || periods == 0 {
        return false;
    }
    let (low, _) = rate_interval(misses, periods, EARLY_CONFIDENCE);
    low * target_s > period.as_secs_f64()
}

/// The predictions for `w` from `d` (one lateness sample per period, in ns), with `work` of
/// computation per period.
pub fn predict(w: &Workload, work: Nanos, d: &Distribution, target_s: f64) -> Predictions {
    let period_s = w.period_ns.as_secs_f64();
    let slack = i64::try_from(w.deadline_ns.0).unwrap_or(i64::MAX) - work.0 as i64;
    let n = d.total();
    let k = if slack <= 0 { n } else { d.count_above(slack) };
    let measured_s = n as f64 * period_s;
    let (lo, hi) = rate_interval(k, n, 0.95);
    let p = if n == 0 { 0.0 } else { k as f64 / n as f64 };
    let fit = tail::fit(d, None).ok();
    let valid_fit = fit
        .as_ref()
        .filter(|f| f.exceedances >= MIN_TAIL_EXCEEDANCES);
    let model_probability = (k < MIN_TAIL_EXCEEDANCES && slack > 0)
        .then(|| valid_fit.map(|f| f.exceedance(slack as f64)))
        .flatten();
    let mut out = Predictions {
        slack_ns: slack,
        periods: n,
        measured_s,
        misses: k,
        max_ns: d.max().unwrap_or(0),
        miss_probability: p,
        miss_probability_low: lo,
        miss_probability_high: hi,
        model_probability,
        mtbf_s: None,
        mtbf_low_s: None,
        mtbf_high_s: None,
        mtbf_at_least_s: None,
        mtbf_from_model: false,
        mtbf_needs_run_s: None,
        worst_hour: None,
        target_s,
        target_slack_ns: None,
        target_slack_high_ns: None,
        target_needs_run_s: None,
    };
    let limit = measured_s * MAX_HORIZON_RATIO;
    if k > 0 {
        out.mtbf_s = Some(period_s / p);
        out.mtbf_low_s = Some(period_s / hi);
        out.mtbf_high_s = (lo > 0.0).then(|| period_s / lo);
    } else if n > 0 {
        out.mtbf_at_least_s = Some(period_s / hi);
        if let Some(pm) = model_probability.filter(|&pm| pm > 0.0) {
            let m = period_s / pm;
            out.mtbf_from_model = true;
            if m <= limit {
                out.mtbf_s = Some(m);
            } else {
                out.mtbf_needs_run_s = Some(m / MAX_HORIZON_RATIO);
            }
        }
    }
    if n > 0 {
        let mut config = worst_case::WorstCaseConfig::new(
            1.0 / period_s,
            worst_case::UsagePattern {
                hours_per_day: 24.0,
                days_per_week: 7.0,
            },
        );
        // The threshold just chosen: the same model, without searching for it again.
        config.tail_threshold_ns = fit.as_ref().map(|f| f.threshold_ns);
        out.worst_hour = worst_case::analyze(d, &config)
            .ok()
            .and_then(|r| r.horizons.into_iter().next());
        // The slack the target needs: the delay exceeded once per target.
        let pt = period_s / target_s;
        if target_s > limit {
            out.target_needs_run_s = Some(target_s / MAX_HORIZON_RATIO);
        } else if pt * n as f64 >= 1.0 {
            out.target_slack_ns = worst_case::empirical_worst(d, target_s / period_s);
            out.target_slack_high_ns = out.target_slack_ns;
        } else if let Some(f) = valid_fit {
            out.target_slack_ns = f.return_level(pt).map(|x| x.round() as i64);
            out.target_slack_high_ns =
                tail::return_level_ci(d, f, pt, 0.95, 1000, 1).map(|c| c.1.round() as i64);
        } else {
            out.target_needs_run_s = worst_case::Validity::default().needs_run_s(
                target_s,
                measured_s,
                fit.as_ref().map(|f| f.exceedances),
            );
        }
    }
    out
}

/// The verdict from the predictions (see the module's rule).
pub fn verdict(w: &Workload, p: &Predictions) -> Verdict {
    let target = span(p.target_s);
    let measured = span(p.measured_s);
    let slack = Nanos(p.slack_ns.max(0) as u64);
    let miss = &w.miss;
    let period_s = w.period_ns.as_secs_f64();
    if p.slack_ns <= 0 {
        return Verdict {
            level: Level::NotSuitable,
            reason: format!(
                "the work per period does not fit in the slack of {}: every period is {}",
                w.deadline_ns,
                w.a_miss()
            ),
            decide_with_run_s: None,
        };
    }
    if p.periods == 0 {
        return Verdict {
            level: Level::Marginal,
            reason: "nothing was measured".to_string(),
            decide_with_run_s: None,
        };
    }
    let wanted = period_s / p.target_s;
    if p.misses > 0 && p.miss_probability_low > wanted {
        let every = p.mtbf_s.map(span).unwrap_or_default();
        let range = match (p.mtbf_low_s, p.mtbf_high_s) {
            (Some(a), Some(b)) => format!(" (95 %: {} to {})", span(a), span(b)),
            _ => String::new(),
        };
        return Verdict {
            level: Level::NotSuitable,
            reason: format!(
                "{} periods of {} were later than the slack of {slack}: one {miss} every {every}{range}, more often than the target of one per {target}",
                p.misses, p.periods
            ),
            decide_with_run_s: None,
        };
    }
    if p.misses == 0 && p.miss_probability_high <= wanted {
        return Verdict {
            level: Level::Suitable,
            reason: format!(
                "no {miss} in {measured}: at 95 % fewer than one per {}, within the target of one per {target}",
                span(p.mtbf_at_least_s.unwrap_or(0.0))
            ),
            decide_with_run_s: None,
        };
    }
    // Misses the run saw, scaled to the target: a model that predicts fewer is not believed.
    let seen_in_target = p.misses as f64 * p.target_s / p.measured_s;
    let model = p.target_slack_ns.zip(p.target_slack_high_ns);
    if let Some((level, high)) = model.filter(|_| seen_in_target < 1.0) {
        let (verdict, bound, relation) = if high < p.slack_ns {
            (Level::Suitable, "at most", "below")
        } else {
            (Level::Marginal, "up to", "against")
        };
        return Verdict {
            level: verdict,
            reason: format!(
                "the delay exceeded once per {target} is predicted at {} (95 %: {bound} {}), {relation} the slack of {slack}",
                Nanos(level.max(0) as u64),
                Nanos(high.max(0) as u64)
            ),
            decide_with_run_s: None,
        };
    }
    let need = p
        .target_needs_run_s
        .unwrap_or(p.target_s / MAX_HORIZON_RATIO);
    let seen = if p.misses > 0 {
        format!(
            "{} {miss}(s) in {measured} (one every {}), which does not yet show whether it is more or less often than one per {target}",
            p.misses,
            span(p.mtbf_s.unwrap_or(0.0))
        )
    } else {
        format!(
            "no {miss} in {measured} (largest delay {} of a slack of {slack}), too short a run to speak of one per {target}",
            Nanos(p.max_ns.max(0) as u64)
        )
    };
    Verdict {
        level: Level::Marginal,
        reason: format!("{seen}: a run of at least {} would decide", span(need)),
        decide_with_run_s: Some(need),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::workload;

    fn control(period: &str, deadline: &str) -> Workload {
        workload::parse(&format!("control:{period}:{deadline}"), &|_| {
            Err(std::io::Error::from(std::io::ErrorKind::NotFound))
        })
        .expect("valid")
    }

    /// A 1 kHz loop with a 500 µs deadline, 10 s measured, 20 % of periods at 2 ms (a FIFO
    /// burst on its CPU): not suitable, and certain well before the run ends.
    #[test]
    fn a_burst_that_misses_every_fifth_period_is_not_suitable() {
        let w = control("1ms", "500us");
        let d = Distribution::from_bins([(5_000, 8_000), (2_000_000, 2_000)]);
        let p = predict(&w, Nanos::ZERO, &d, DEFAULT_TARGET_S);
        assert_eq!(p.misses, 2_000);
        assert!((p.miss_probability - 0.2).abs() < 1e-12);
        assert!(p.miss_probability_low < 0.2 && p.miss_probability_high > 0.2);
        assert!((p.mtbf_s.expect("mtbf") - 0.005).abs() < 1e-9);
        let v = verdict(&w, &p);
        assert_eq!(v.level, Level::NotSuitable, "{v:?}");
        assert!(v.reason.contains("2000 periods of 10000"), "{}", v.reason);
        assert!(certainly_not_suitable(
            3,
            1_000,
            Nanos::from_millis(1),
            DEFAULT_TARGET_S
        ));
        // One miss in one second is not yet certain at 99.9 %... but it is: the lower end of
        // one event's interval is 0.0005 events, a rate of one per 2000 s, above one per 8 h.
        assert!(certainly_not_suitable(
            1,
            1_000,
            Nanos::from_millis(1),
            DEFAULT_TARGET_S
        ));
        // One miss in 8 hours of a 1 kHz loop is not.
        assert!(!certainly_not_suitable(
            1,
            28_800_000,
            Nanos::from_millis(1),
            DEFAULT_TARGET_S
        ));
        assert!(!certainly_not_suitable(
            0,
            1_000,
            Nanos::from_millis(1),
            DEFAULT_TARGET_S
        ));
    }

    /// No miss in 30 s: marginal, naming the run that would decide (48 min, a tenth of 8 h).
    #[test]
    fn a_short_clean_run_is_marginal_with_the_run_that_would_decide() {
        let w = control("1ms", "500us");
        let d = Distribution::from_bins([(5_000, 29_900), (40_000, 100)]);
        let p = predict(&w, Nanos::ZERO, &d, DEFAULT_TARGET_S);
        assert_eq!(p.misses, 0);
        assert!((p.mtbf_at_least_s.expect("bound") - 30.0 / 3.689).abs() < 0.01);
        assert_eq!(p.target_needs_run_s, Some(2880.0));
        let v = verdict(&w, &p);
        assert_eq!(v.level, Level::Marginal);
        assert_eq!(v.decide_with_run_s, Some(2880.0));
        assert!(
            v.reason.contains("no missed deadline in 30 s"),
            "{}",
            v.reason
        );
        assert!(
            v.reason
                .contains("one per 8 h: a run of at least 48 min would decide"),
            "{}",
            v.reason
        );
        assert_eq!(
            (span(0.005), span(0.31625), span(90_000.0), span(26_000.0)),
            (
                "5 ms".into(),
                "316 ms".into(),
                "1 d 1 h".into(),
                "7 h 13 min".into()
            )
        );
    }

    /// A long clean run whose tail is far below the slack is suitable by the model; the same
    /// run with a slack inside the predicted interval is marginal.
    #[test]
    fn a_long_run_decides_by_the_tail_model() {
        // 1 h at 1 kHz: an exponential-looking tail from 10 µs to about 100 µs.
        let mut bins = vec![(5_000i64, 3_000_000u64)];
        let mut count = 600_000u64;
        let mut x = 10_000i64;
        while count > 0 {
            bins.push((x, count));
            count /= 2;
            x += 5_000;
        }
        let d = Distribution::from_bins(bins);
        let w = control("1ms", "2ms");
        let p = predict(&w, Nanos::ZERO, &d, DEFAULT_TARGET_S);
        assert!(p.measured_s > 2880.0);
        assert_eq!(p.misses, 0);
        let v = verdict(&w, &p);
        assert_eq!(v.level, Level::Suitable, "{v:?} {p:?}");
        let tight = control("1ms", "100us");
        let p = predict(&tight, Nanos::ZERO, &d, DEFAULT_TARGET_S);
        assert_eq!(verdict(&tight, &p).level, Level::Marginal, "{p:?}");
    }

    #[test]
    fn work_longer_than_the_slack_misses_every_period() {
        let w = control("1ms", "500us");
        let d = Distribution::from_bins([(5_000, 100)]);
        let p = predict(&w, Nanos::from_micros(600), &d, DEFAULT_TARGET_S);
        assert_eq!(p.misses, 100);
        assert_eq!(verdict(&w, &p).level, Level::NotSuitable);
    }
}
