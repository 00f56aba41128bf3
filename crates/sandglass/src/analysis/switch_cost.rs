//! The indirect cost of a context switch: work lost to cold caches.
//!
//! Regehr (Hourglass, USENIX 2002, §5.2) measures it by progress rather than by gaps: one thread
//! scanning a working set does W₁ passes in T; ten such threads together do W₁₀ passes in the
//! same T while being switched N₁₀ times. "With all other factors being equal, any lost work
//! for the ten-thread case must be caused by context switch overhead":
//!
//! `C = ((W₁ − W₁₀)/W₁)·T/N₁₀`,
//!
//! the lost fraction of the run, times its length, shared among the switches. Figure 5 repeats
//! this 15 times per working-set size and reports 95% t confidence intervals, which
//! [`summarize`] computes over repeated trials. A negative cost (W₁₀ > W₁) is noise and is kept,
//! not clipped, so that intervals stay honest.

use super::significance::{self, StatsError};
use crate::units::Nanos;
use serde::Serialize;
use thiserror::Error;

/// One trial: work with one thread and with many, the run length and the switches counted.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SwitchTrial {
    /// W₁: work units (passes over the working set) done by one thread alone.
    pub work_one: f64,
    /// W₁₀: work units done by all the threads together.
    pub work_many: f64,
    /// T: the length of each run.
    pub duration_ns: Nanos,
    /// N₁₀: context switches during the many-thread run.
    pub switches: u64,
}

/// Why the cost cannot be computed.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SwitchCostError {
    /// W₁ is not positive.
    #[error("the one-thread work must be positive, got {0}")]
    NoWork(f64),
    /// A negative or non-finite work count.
    #[error("work counts must be finite and not negative")]
    BadWork,
    /// No switches were counted.
    #[error("no context switches were counted in the many-thread run, so the cost per switch is undefined")]
    NoSwitches,
    /// Too few trials or another statistical problem.
    #[error(transparent)]
    Stats(#[from] StatsError),
}

/// The cost of one trial.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SwitchCost {
    /// (W₁ − W₁₀)/W₁.
    pub lost_fraction: f64,
    /// lost_fraction·T: the time lost over the run.
    pub lost_ns: f64,
    /// C: the time lost per switch.
    pub cost_ns: f64,
}

/// C for one trial.
pub fn indirect_cost(trial: &SwitchTrial) -> Result<SwitchCost, SwitchCostError> {
    if !(trial.work_one.is_finite() && trial.work_many.is_finite()) || trial.work_many < 0.0 {
        return Err(SwitchCostError::BadWork);
    }
    if trial.work_one <= 0.0 {
        return Err(SwitchCostError::NoWork(trial.work_one));
    }
    if trial.switches == 0 {
        return Err(SwitchCostError::NoSwitches);
    }
    let lost_fraction = (trial.work_one - trial.work_many) / trial.work_one;
    let lost_ns = lost_fraction * trial.duration_ns.0 as f64;
    Ok(SwitchCost {
        lost_fraction,
        lost_ns,
        cost_ns: lost_ns / trial.switches as f64,
    })
}

/// Repeated trials of one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SwitchCostSummary {
    /// Trials.
    pub trials: usize,
    /// Mean C.
    pub cost_ns: f64,
    /// Lower end of the t interval of C.
    pub ci_low_ns: f64,
    /// Upper end of the t interval of C.
    pub ci_high_ns: f64,
    /// Mean lost fraction.
    pub lost_fraction: f64,
    /// The confidence level.
    pub confidence: f64,
    /// Each trial's cost.
    pub per_trial: Vec<SwitchCost>,
}

/// The mean cost of `trials` with its t confidence interval (at least two trials).
pub fn summarize(
    trials: &[SwitchTrial],
    confidence: f64,
) -> Result<SwitchCostSummary, SwitchCostError> {
    let per_trial = trials
        .iter()
        .map(indirect_cost)
        .collect::<Result<Vec<_>, _>>()?;
    let costs: Vec<f64> = per_trial.iter().map(|c| c.cost_ns).collect();
    let ci = significance::mean_ci(&costs, confidence)?;
    let lost = per_trial.iter().map(|c| c.lost_fraction).sum::<f64>() / per_trial.len() as f64;
    Ok(SwitchCostSummary {
        trials: trials.len(),
        cost_ns: ci.mean,
        ci_low_ns: ci.ci_low,
        ci_high_ns: ci.ci_high,
        lost_fraction: lost,
        confidence,
        per_trial,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(w1: f64, w10: f64, secs: u64, n: u64) -> SwitchTrial {
        SwitchTrial {
            work_one: w1,
            work_many: w10,
            duration_ns: Nanos::from_secs(secs),
            switches: n,
        }
    }

    /// By hand, a 45 s run as in Regehr's Figure 5: W₁ = 1000, W₁₀ = 900, N₁₀ = 9000:
    /// 10% of 45 s is 4.5 s, over 9000 switches 500 µs each.
    #[test]
    fn cost_by_hand() {
        let c = indirect_cost(&trial(1000.0, 900.0, 45, 9000)).expect("valid");
        assert!((c.lost_fraction - 0.1).abs() < 1e-15);
        assert!((c.lost_ns - 4.5e9).abs() < 1e-3);
        assert!((c.cost_ns - 500_000.0).abs() < 1e-6);
        // More work with ten threads than one: a negative cost, kept.
        let c = indirect_cost(&trial(1000.0, 1010.0, 45, 9000)).expect("valid");
        assert!(c.cost_ns < 0.0);
    }

    #[test]
    fn trials_get_a_t_interval() {
        // Costs 400, 500 and 600 µs: mean 500 µs, s = 100 µs, t(0.975, 2) = 4.302653:
        // half-width 4.302653·100/√3 = 248.41 µs.
        let trials = [
            trial(1000.0, 920.0, 45, 9000),
            trial(1000.0, 900.0, 45, 9000),
            trial(1000.0, 880.0, 45, 9000),
        ];
        let s = summarize(&trials, 0.95).expect("valid");
        assert!((s.cost_ns - 500_000.0).abs() < 1e-6);
        let half = 4.302_652_729_911 * 100_000.0 / 3f64.sqrt();
        assert!((s.ci_high_ns - (500_000.0 + half)).abs() < 1.0, "{s:?}");
        assert!((s.ci_low_ns - (500_000.0 - half)).abs() < 1.0, "{s:?}");
        assert!((s.lost_fraction - 0.1).abs() < 1e-12);
    }

    #[test]
    fn refusals() {
        assert_eq!(
            indirect_cost(&trial(0.0, 1.0, 1, 1)),
            Err(SwitchCostError::NoWork(0.0))
        );
        assert_eq!(
            indirect_cost(&trial(1.0, 1.0, 1, 0)),
            Err(SwitchCostError::NoSwitches)
        );
        assert!(matches!(
            summarize(&[trial(1.0, 0.5, 1, 1)], 0.95),
            Err(SwitchCostError::Stats(_))
        ));
    }
}
