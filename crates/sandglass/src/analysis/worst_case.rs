//! Latency exceedance per unit of time, and the expected worst case per hour, day and week.
//!
//! Cota-Robles & Held (OSDI 1999) turn latency histograms into rates: "with the virus scanner on
//! we would expect a 16 millisecond thread latency about every 1000 times that our thread does a
//! WaitForSingleObject ... or roughly every 16 seconds for an audio thread with a 16 millisecond
//! period" (§4.3), and characterise each distribution by "three expected worst case values:
//! hourly, daily and weekly" (Table 3), where "the hourly value is for continuous usage, whereas
//! the daily and weekly values ... represent expected average daily and weekly use by a heavy
//! user".
//!
//! With n samples taken at r per second and `count` of them above a threshold x:
//!
//! * probability per sample `p = count/n`;
//! * expected events per hour `p·r·3600`, mean time between them `1/(p·r)`;
//! * chance of at least one in an hour `1 − (1 − p)^(r·3600)`;
//! * when no sample exceeds x, the rule of three bounds p by 3/n at 95% confidence, so the mean
//!   time between events is at least `n/(3·r)`, stated as a bound.
//!
//! The expected worst case over a period of N samples is the level exceeded on average once in
//! it, P(X > x_N) = 1/N: empirically the least observed value with at most n/N samples above it.
//! A period has `r·3600·hours` samples, with one hour for the hourly value, `hours_per_day` for
//! the daily and `hours_per_day·days_per_week` for the weekly one. When N exceeds n the data
//! cannot show it; the value then comes from the generalised Pareto tail of
//! [`crate::analysis::tail`] where one fits, with a bootstrap confidence interval, and is marked
//! extrapolated;
//! it is never less than the observed maximum, a level already reached in a shorter time.
//!
//! Usage presets follow the seed's §3.1 and §4.3, taking the upper end of each range (the
//! heavier use gives the larger, safer worst case).

use super::distribution::Distribution;
use super::tail::{self, GpdFit};
use serde::Serialize;
use thiserror::Error;

/// How long a system is used: hours per day and days per week.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct UsagePattern {
    /// Hours of use per day.
    pub hours_per_day: f64,
    /// Days of use per week.
    pub days_per_week: f64,
}

/// A named usage pattern with its source.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Preset {
    /// The name to select it by.
    pub name: &'static str,
    /// The pattern.
    pub usage: UsagePattern,
    /// Where it comes from.
    pub source: &'static str,
}

/// The usage presets of Cota-Robles & Held (1999).
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "continuous",
        usage: UsagePattern {
            hours_per_day: 24.0,
            days_per_week: 7.0,
        },
        source: "round the clock",
    },
    Preset {
        name: "office",
        usage: UsagePattern {
            hours_per_day: 8.0,
            days_per_week: 5.0,
        },
        source: "§3.1.1 and §4.3: a 40-hour work week, a day of 6 to 8 hours, 5 days",
    },
    Preset {
        name: "workstation",
        usage: UsagePattern {
            hours_per_day: 6.0,
            days_per_week: 5.0,
        },
        source: "§3.1.2: one work week of 30 hours",
    },
    Preset {
        name: "games",
        usage: UsagePattern {
            hours_per_day: 3.0,
            days_per_week: 6.0,
        },
        source: "§3.1.3: 2 to 3 hours per day, 4 to 6 days per week",
    },
    Preset {
        name: "web",
        usage: UsagePattern {
            hours_per_day: 4.0,
            days_per_week: 7.0,
        },
        source: "§3.1.3: 3 to 4 hours per day, 7 days per week",
    },
    Preset {
        name: "consumer",
        usage: UsagePattern {
            hours_per_day: 4.0,
            days_per_week: 7.0,
        },
        source: "§4.3: games and web browsing, a day of 3 to 4 hours, a week of 7 days",
    },
];

/// The preset called `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// What to compute.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct WorstCaseConfig {
    /// Thresholds for the exceedance table.
    pub thresholds_ns: Vec<i64>,
    /// Samples per second.
    pub rate_hz: f64,
    /// Hours per day and days per week.
    pub usage: UsagePattern,
    /// Confidence of the intervals of extrapolated values.
    pub confidence: f64,
    /// Bootstrap resamples for those intervals.
    pub resamples: u32,
    /// Seed of the bootstrap.
    pub seed: u64,
    /// Threshold of the tail model; the default when `None`.
    pub tail_threshold_ns: Option<i64>,
    /// When an extrapolated value is given at all.
    pub validity: Validity,
}

/// When a value from the tail model stands (docs/analysis.md, "Validity of predictions"): the
/// period it speaks of is at most `max_horizon_ratio` times the time observed, and the fitted
/// tail rests on at least `min_exceedances` samples. Outside it the value is not given: the
/// report says how long a run would support it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Validity {
    pub max_horizon_ratio: f64,
    pub min_exceedances: u64,
}

impl Default for Validity {
    fn default() -> Validity {
        Validity {
            max_horizon_ratio: MAX_HORIZON_RATIO,
            min_exceedances: MIN_TAIL_EXCEEDANCES,
        }
    }
}

/// An extrapolated period is at most this many times the time observed.
pub const MAX_HORIZON_RATIO: f64 = 10.0;

/// An extrapolation's tail model rests on at least this many samples above its threshold.
pub const MIN_TAIL_EXCEEDANCES: u64 = 50;

impl Validity {
    /// The run length that supports a value `horizon_s` ahead from `observed_s` with
    /// `exceedances` samples above the tail threshold (`None`: no model), in seconds, or
    /// `None` when this run already does.
    pub fn needs_run_s(
        &self,
        horizon_s: f64,
        observed_s: f64,
        exceedances: Option<u64>,
    ) -> Option<f64> {
        let by_horizon = horizon_s / self.max_horizon_ratio.max(1.0);
        // At a fixed threshold the samples above it grow with the run's length.
        let by_tail = match exceedances {
            Some(k) if k >= self.min_exceedances => 0.0,
            Some(k) if k > 0 => observed_s * self.min_exceedances as f64 / k as f64,
            _ => by_horizon.max(observed_s * 2.0),
        };
        let needed = by_horizon.max(by_tail);
        (needed > observed_s * (1.0 + 1e-9)).then_some(needed)
    }
}

impl WorstCaseConfig {
    /// Defaults for everything but the rate and the usage: no thresholds, 95% intervals from
    /// 1000 resamples, seed 1, default tail threshold.
    pub fn new(rate_hz: f64, usage: UsagePattern) -> WorstCaseConfig {
        WorstCaseConfig {
            thresholds_ns: Vec::new(),
            rate_hz,
            usage,
            confidence: 0.95,
            resamples: 1000,
            seed: 1,
            tail_threshold_ns: None,
            validity: Validity::default(),
        }
    }
}

/// Why the analysis cannot run.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum WorstCaseError {
    /// The distribution is empty.
    #[error("the latency distribution has no samples")]
    NoSamples,
    /// The sample rate is not positive.
    #[error("the sample rate {0} Hz must be positive: give the rate at which samples were taken, such as --rate 1000")]
    BadRate(f64),
    /// Hours per day or days per week out of range.
    #[error("usage of {hours_per_day} hours per day and {days_per_week} days per week is impossible: use (0, 24] hours and (0, 7] days")]
    BadUsage {
        /// Hours per day given.
        hours_per_day: f64,
        /// Days per week given.
        days_per_week: f64,
    },
    /// Confidence outside (0, 1).
    #[error("confidence {0} must be between 0 and 1, such as 0.95")]
    BadConfidence(f64),
}

/// One row of the exceedance table.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ThresholdRow {
    /// The threshold.
    pub threshold_ns: i64,
    /// Samples strictly above it.
    pub count: u64,
    /// count/n.
    pub probability: f64,
    /// Expected events per hour of continuous use.
    pub per_hour: f64,
    /// Mean time between events; `None` when none was seen.
    pub mean_time_between_s: Option<f64>,
    /// When none was seen: the rule-of-three lower bound n/(3·r).
    pub mean_time_between_lower_bound_s: Option<f64>,
    /// Chance of at least one event in an hour of continuous use.
    pub at_least_one_per_hour: f64,
}

/// The expected worst case over one period.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Horizon {
    /// `hour`, `day` or `week`.
    pub period: &'static str,
    /// Hours of use in the period.
    pub hours: f64,
    /// Samples in the period, r·3600·hours.
    pub samples: f64,
    /// The expected worst case: empirical when the data cover the period, otherwise the model
    /// within [`Validity`]; `None` beyond it (see `needs_run_s`).
    pub worst_case_ns: Option<i64>,
    /// True when the value comes from the tail model beyond the observed range.
    pub extrapolated: bool,
    /// The empirical value, when the data cover the period.
    pub empirical_ns: Option<i64>,
    /// The tail model's value, within [`Validity`].
    pub model_ns: Option<i64>,
    /// Beyond the data and beyond [`Validity`]: the length of run, in seconds, that would
    /// support a value for this period.
    pub needs_run_s: Option<f64>,
    /// Lower end of the model value's confidence interval.
    pub ci_low_ns: Option<i64>,
    /// Upper end of the model value's confidence interval.
    pub ci_high_ns: Option<i64>,
}

/// Exceedance table and expected worst cases.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct WorstCaseReport {
    /// n.
    pub samples: u64,
    /// r.
    pub rate_hz: f64,
    /// n/r: the observation time the samples represent.
    pub observed_s: f64,
    /// The largest sample.
    pub max_ns: i64,
    /// One row per threshold, in the order given.
    pub thresholds: Vec<ThresholdRow>,
    /// The usage pattern of the daily and weekly values.
    pub usage: UsagePattern,
    /// Hour, day and week.
    pub horizons: Vec<Horizon>,
    /// The tail model, when one could be fitted.
    pub tail: Option<GpdFit>,
    /// Why there is no tail model.
    pub tail_error: Option<String>,
    /// Confidence of the intervals.
    pub confidence: f64,
    /// The rule that decides which extrapolated values are given.
    pub validity: Validity,
}

/// The row of the exceedance table for `threshold_ns`.
pub fn threshold_row(d: &Distribution, rate_hz: f64, threshold_ns: i64) -> ThresholdRow {
    let n = d.total();
    let count = d.count_above(threshold_ns);
    let p = if n == 0 { 0.0 } else { count as f64 / n as f64 };
    let per_hour_samples = rate_hz * 3600.0;
    ThresholdRow {
        threshold_ns,
        count,
        probability: p,
        per_hour: p * per_hour_samples,
        mean_time_between_s: (count > 0).then(|| 1.0 / (p * rate_hz)),
        mean_time_between_lower_bound_s: (count == 0 && n > 0).then(|| n as f64 / (3.0 * rate_hz)),
        at_least_one_per_hour: if count == 0 {
            0.0
        } else {
            -(per_hour_samples * (-p).ln_1p()).exp_m1()
        },
    }
}

/// The least observed value with at most n/N samples above it, when N ≤ n.
pub fn empirical_worst(d: &Distribution, period_samples: f64) -> Option<i64> {
    let n = d.total() as f64;
    if d.is_empty() || period_samples.is_nan() || period_samples <= 0.0 || period_samples > n {
        return None;
    }
    let bins = d.bins();
    let i = bins.partition_point(|b| d.count_above(b.0) as f64 * period_samples > n);
    bins.get(i).map(|b| b.0)
}

/// Computes the exceedance table and the expected worst cases.
pub fn analyze(
    d: &Distribution,
    config: &WorstCaseConfig,
) -> Result<WorstCaseReport, WorstCaseError> {
    let Some(max) = d.max() else {
        return Err(WorstCaseError::NoSamples);
    };
    if !(config.rate_hz.is_finite() && config.rate_hz > 0.0) {
        return Err(WorstCaseError::BadRate(config.rate_hz));
    }
    let u = config.usage;
    if !(u.hours_per_day > 0.0
        && u.hours_per_day <= 24.0
        && u.days_per_week > 0.0
        && u.days_per_week <= 7.0)
    {
        return Err(WorstCaseError::BadUsage {
            hours_per_day: u.hours_per_day,
            days_per_week: u.days_per_week,
        });
    }
    if !(config.confidence > 0.0 && config.confidence < 1.0) {
        return Err(WorstCaseError::BadConfidence(config.confidence));
    }
    let thresholds = config
        .thresholds_ns
        .iter()
        .map(|&x| threshold_row(d, config.rate_hz, x))
        .collect();
    let (tail, tail_error) = match tail::fit(d, config.tail_threshold_ns) {
        Ok(f) => (Some(f), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let periods = [
        ("hour", 1.0),
        ("day", u.hours_per_day),
        ("week", u.hours_per_day * u.days_per_week),
    ];
    let observed_s = d.total() as f64 / config.rate_hz;
    let horizons = periods
        .iter()
        .map(|&(period, hours)| {
            let samples = config.rate_hz * 3600.0 * hours;
            let empirical_ns = empirical_worst(d, samples);
            let needs_run_s = match empirical_ns {
                Some(_) => None,
                None => config.validity.needs_run_s(
                    hours * 3600.0,
                    observed_s,
                    tail.as_ref().map(|f| f.exceedances),
                ),
            };
            let p = 1.0 / samples;
            let model = tail
                .as_ref()
                .filter(|_| needs_run_s.is_none())
                .and_then(|f| f.return_level(p));
            let ci = match (&tail, model) {
                (Some(f), Some(_)) => {
                    tail::return_level_ci(d, f, p, config.confidence, config.resamples, config.seed)
                }
                _ => None,
            };
            let round = |x: f64| x.round() as i64;
            let model_ns = model.map(round);
            Horizon {
                period,
                hours,
                samples,
                // A level the run reached in less time than the period is not less likely
                // over the whole period: an extrapolation never falls below the observed
                // maximum (a fitted tail with a finite end point can put it there).
                worst_case_ns: empirical_ns.or(model_ns.map(|m| m.max(max))),
                extrapolated: empirical_ns.is_none() && model_ns.is_some(),
                empirical_ns,
                model_ns,
                needs_run_s,
                ci_low_ns: ci.map(|c| round(c.0)),
                ci_high_ns: ci.map(|c| round(c.1)),
            }
        })
        .collect();
    Ok(WorstCaseReport {
        samples: d.total(),
        rate_hz: config.rate_hz,
        observed_s,
        max_ns: max,
        thresholds,
        usage: u,
        horizons,
        tail,
        tail_error,
        confidence: config.confidence,
        validity: config.validity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One hour of a 1 kHz timer: 3,600,000 samples, of which 1000 exceed 100 µs, 100 exceed
    /// 200 µs, 10 exceed 500 µs, 1 exceeds 1 ms and none exceeds 2 ms.
    fn hour_at_1khz() -> Distribution {
        Distribution::from_bins([
            (100_000, 3_599_000),
            (200_000, 900),
            (500_000, 90),
            (1_000_000, 9),
            (2_000_000, 1),
        ])
    }

    #[test]
    fn exceedance_table_by_hand() {
        let d = hour_at_1khz();
        let mut c = WorstCaseConfig::new(1000.0, preset("office").expect("preset").usage);
        c.thresholds_ns = vec![100_000, 200_000, 500_000, 1_000_000, 2_000_000];
        c.resamples = 200;
        let r = analyze(&d, &c).expect("valid");
        assert_eq!(r.samples, 3_600_000);
        assert!((r.observed_s - 3600.0).abs() < 1e-9);
        let counts: Vec<u64> = r.thresholds.iter().map(|t| t.count).collect();
        assert_eq!(counts, vec![1000, 100, 10, 1, 0]);
        // The data are exactly one hour, so events per hour equal the counts, and the mean
        // time between them is 3600 s / count.
        for row in &r.thresholds[..4] {
            assert!((row.per_hour - row.count as f64).abs() < 1e-6);
            let mtb = row.mean_time_between_s.expect("seen");
            assert!((mtb - 3600.0 / row.count as f64).abs() < 1e-6);
        }
        // One event per hour on average: P(at least one) = 1 − (1 − 1/3.6e6)^3.6e6 ≈ 1 − 1/e.
        assert!((r.thresholds[3].at_least_one_per_hour - (1.0 - (-1f64).exp())).abs() < 1e-6);
        // Nothing above 2 ms: the rule of three bounds the mean time between by 3600/3 s.
        let last = &r.thresholds[4];
        assert_eq!((last.mean_time_between_s, last.probability), (None, 0.0));
        assert!((last.mean_time_between_lower_bound_s.expect("bound") - 1200.0).abs() < 1e-9);
        assert_eq!(last.at_least_one_per_hour, 0.0);
    }

    /// `n` samples: `n − tail` at 20 µs, `tail` at 20 µs plus an exponential of mean `mean_ns`,
    /// each at its exact quantile, in 1 µs bins labelled by their upper end.
    fn exponential_tail(n: u64, tail: u64, mean_ns: f64) -> Distribution {
        let above = |y: f64| (tail as f64 * (-y / mean_ns).exp()).round() as u64;
        let mut bins = vec![(20_000i64, n - tail)];
        let mut y = 0.0;
        while above(y) > 0 {
            let c = above(y) - above(y + 1000.0);
            if c > 0 {
                bins.push((21_000 + y as i64, c));
            }
            y += 1000.0;
        }
        Distribution::from_bins(bins)
    }

    #[test]
    fn hourly_worst_case_is_empirical_and_longer_periods_extrapolate() {
        // One hour at 1 kHz, 1% of it in an exponential tail of mean 20 µs.
        let d = exponential_tail(3_600_000, 36_000, 20_000.0);
        let mut c = WorstCaseConfig::new(1000.0, preset("office").expect("preset").usage);
        c.resamples = 200;
        let r = analyze(&d, &c).expect("valid");
        // An hour is 3.6e6 samples = n: the least value with at most one sample above it.
        let hour = &r.horizons[0];
        assert_eq!((hour.period, hour.extrapolated), ("hour", false));
        assert_eq!(hour.worst_case_ns, empirical_worst(&d, 3.6e6));
        // A day of office use is 8 hours: beyond the data, so from the tail model, fitted at
        // the first threshold tried (the top 5000 samples), where it fits.
        let day = &r.horizons[1];
        assert_eq!(day.hours, 8.0);
        assert_eq!(day.empirical_ns, None);
        assert!(day.extrapolated, "{r:?}");
        let tail = r.tail.as_ref().expect("fitted");
        assert_eq!(
            (tail.thresholds_tried, tail.threshold_rule),
            (1, "lowest_fitting")
        );
        assert!(tail.fits() && tail.shape.abs() < 0.1, "{tail:?}");
        assert_eq!(tail.threshold_ns, default_threshold_of(&d));
        let (lo, hi) = (day.ci_low_ns.expect("ci"), day.ci_high_ns.expect("ci"));
        let m = day.model_ns.expect("model");
        assert!(lo <= m && m <= hi, "{lo} {m} {hi}");
        // The level exceeded once in 8 h: 20 µs + 20 µs·ln(36,000·8) ≈ 271 µs, never less than
        // the maximum the hour reached.
        assert!((m - 271_000).abs() < 10_000, "{m}");
        let v = day.worst_case_ns.expect("worst case");
        assert_eq!(v, m.max(r.max_ns));
        assert!(v >= hour.worst_case_ns.expect("hour"));
        // A week (40 hours) is 40 times the hour observed: beyond the validity rule's ten, so
        // no value, and a run of 4 hours would support one.
        let week = &r.horizons[2];
        assert_eq!(week.hours, 40.0);
        assert_eq!(
            (week.worst_case_ns, week.model_ns, week.extrapolated),
            (None, None, false)
        );
        assert!((week.needs_run_s.expect("needs") - 4.0 * 3600.0).abs() < 1e-6);
        assert_eq!(day.needs_run_s, None);
        // Reproducible.
        assert_eq!(analyze(&d, &c).expect("valid"), r);
    }

    fn default_threshold_of(d: &Distribution) -> i64 {
        tail::default_threshold(d).expect("threshold")
    }

    /// Where no tail model fits, nothing is extrapolated and the report says why.
    #[test]
    fn no_extrapolation_without_a_fitting_tail() {
        // The coarse table of `hour_at_1khz`: four values above 100 µs, no GPD.
        let d = hour_at_1khz();
        let mut c = WorstCaseConfig::new(1000.0, preset("office").expect("preset").usage);
        c.resamples = 50;
        let r = analyze(&d, &c).expect("valid");
        assert!(r.tail.is_none());
        let e = r.tail_error.as_deref().expect("why");
        assert!(e.contains("no generalised Pareto"), "{e}");
        let day = &r.horizons[1];
        assert_eq!((day.worst_case_ns, day.extrapolated), (None, false));
        assert!(day.needs_run_s.is_some());
    }

    /// Ten seconds of a 1 kHz timer say nothing about a week, and say how long a run would;
    /// the same distribution observed for 17 hours (the same shape, 6,000 times the samples)
    /// gives the week of continuous use (168 h) its value and interval.
    #[test]
    fn a_week_needs_a_run_of_a_tenth_of_it() {
        // 2% of the samples in an exponential tail of mean 100 µs.
        let shape = |scale: u64| exponential_tail(10_000 * scale, 200 * scale, 100_000.0);
        let usage = preset("continuous").expect("preset").usage;
        let mut c = WorstCaseConfig::new(1000.0, usage);
        c.resamples = 100;
        let short = analyze(&shape(1), &c).expect("valid");
        assert!((short.observed_s - 10.0).abs() < 1e-9);
        let week = &short.horizons[2];
        assert_eq!(
            (week.period, week.worst_case_ns, week.model_ns),
            ("week", None, None)
        );
        assert!((week.needs_run_s.expect("needs") - 16.8 * 3600.0).abs() < 1e-6);
        // An hour is 360 times ten seconds: no value either.
        assert!((short.horizons[0].needs_run_s.expect("needs") - 360.0).abs() < 1e-6);
        let long = analyze(&shape(6_048), &c).expect("valid");
        assert!(long.observed_s >= 16.8 * 3600.0, "{}", long.observed_s);
        let week = &long.horizons[2];
        assert_eq!(week.needs_run_s, None);
        assert!(
            week.extrapolated && week.worst_case_ns.is_some(),
            "{week:?}"
        );
        assert!(
            week.ci_low_ns.is_some() && week.ci_high_ns.is_some(),
            "{week:?}"
        );
        // The hour lies within the data: empirical, no rule needed.
        assert!(!long.horizons[0].extrapolated);
    }

    /// A tail model on too few samples above its threshold is not used, whatever the horizon:
    /// a run long enough to hold the rule's 50 is asked for.
    #[test]
    fn a_thin_tail_needs_a_longer_run() {
        let v = Validity::default();
        // 25 samples above the threshold in 100 s: twice as long gives 50.
        assert_eq!(v.needs_run_s(200.0, 100.0, Some(25)), Some(200.0));
        assert_eq!(v.needs_run_s(500.0, 100.0, Some(50)), None);
        assert_eq!(v.needs_run_s(2000.0, 100.0, Some(50)), Some(200.0));
    }

    #[test]
    fn empirical_worst_by_hand() {
        let d = Distribution::from_samples(&(1..=1000).collect::<Vec<i64>>());
        // 100 samples per period: P(X > x) = 1% → 10 samples above → 990.
        assert_eq!(empirical_worst(&d, 100.0), Some(990));
        assert_eq!(empirical_worst(&d, 1000.0), Some(999));
        assert_eq!(empirical_worst(&d, 1.0), Some(1));
        assert_eq!(empirical_worst(&d, 1001.0), None);
    }

    #[test]
    fn refuses_bad_settings_and_tiny_data() {
        let d = hour_at_1khz();
        let usage = UsagePattern {
            hours_per_day: 25.0,
            days_per_week: 5.0,
        };
        assert!(matches!(
            analyze(&d, &WorstCaseConfig::new(1000.0, usage)),
            Err(WorstCaseError::BadUsage { .. })
        ));
        let ok = preset("games").expect("preset").usage;
        assert!(matches!(
            analyze(&d, &WorstCaseConfig::new(0.0, ok)),
            Err(WorstCaseError::BadRate(_))
        ));
        assert_eq!(
            analyze(
                &Distribution::from_samples(&[]),
                &WorstCaseConfig::new(1.0, ok)
            ),
            Err(WorstCaseError::NoSamples)
        );
        // Ten samples: no tail model, and nothing beyond the data.
        let small = Distribution::from_samples(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        let r = analyze(&small, &WorstCaseConfig::new(0.001, ok)).expect("valid");
        assert!(r.tail.is_none() && r.tail_error.is_some());
        // 0.001 Hz: an hour is 3.6 samples, within the 10 observed.
        assert_eq!(r.horizons[0].worst_case_ns, Some(8));
        assert_eq!(r.horizons[2].worst_case_ns, None);
    }

    #[test]
    fn presets_follow_the_seed() {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            vec![
                "continuous",
                "office",
                "workstation",
                "games",
                "web",
                "consumer"
            ]
        );
        let w = preset("workstation").expect("preset").usage;
        assert_eq!(w.hours_per_day * w.days_per_week, 30.0);
        assert!(preset("nope").is_none());
    }
}
