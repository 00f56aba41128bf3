//! `check --try-fixes`: the fixes sandglass can test itself, each measured once with one change
//! and set against the check's own measurement.
//!
//! Three changes need nothing on the machine to be altered, so nothing needs restoring:
//!
//! - `pm_qos`: hold `/dev/cpu_dma_latency` at 0 µs while measuring (the request ends when the
//!   file is closed, at the end of the trial), which keeps the CPUs out of idle states with
//!   any exit latency;
//! - `other_cpu`: run the workload's stand-in on another CPU (the highest-numbered other one
//!   this process may use: lower CPUs usually carry more of the machine's housekeeping);
//! - `priority`: run it at SCHED_FIFO [`TRIAL_PRIORITY`] instead of its own priority, above
//!   ordinary real-time applications and below sandglass's own watchdog.
//!
//! A trial is judged by its stalls, the runs of consecutive late periods (one stall can make
//! several periods late, so late periods are not independent): **better** when its stall rate
//! is at most half the check's and the upper end of its 95 % interval lies below the lower end
//! of the check's, **worse** in the opposite case, and **no clear change** otherwise (then the
//! largest delays are shown beside each other, with no claim drawn from them).

use super::predict::{Predictions, Verdict};
use crate::units::Nanos;
use serde::{Deserialize, Serialize};

/// The SCHED_FIFO priority of the `priority` trial: the top of the range users give real-time
/// applications, below sandglass's main thread and watchdog (99) and the kernel's threads
/// that run above applications by convention (96 to 98 on tuned systems).
pub const TRIAL_PRIORITY: u32 = 95;

/// One change a trial makes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Trial {
    /// `pm_qos`, `other_cpu` or `priority`.
    pub id: String,
    /// The change, for people: `CPU 0 instead of CPU 1`.
    pub change: String,
    /// How to make it permanent.
    pub how: String,
    /// Where and how the trial measures.
    pub cpu: usize,
    pub policy: String,
    /// `/dev/cpu_dma_latency` held during the trial, in µs.
    pub pm_qos_us: Option<u32>,
    /// The trial runs without the check's loads (what the loads cost, rather than a fix).
    #[serde(default)]
    pub without_load: bool,
}

/// Whether a trial's change helped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The trial's miss rate is below the check's (disjoint 95 % intervals).
    Better,
    /// The trial's miss rate is above the check's (disjoint 95 % intervals).
    Worse,
    /// The intervals overlap.
    NoClearChange,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Better => "better",
            Effect::Worse => "worse",
            Effect::NoClearChange => "no clear change",
        }
    }
}

/// A trial and what it measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TrialResult {
    pub trial: Trial,
    pub run_id: String,
    pub run_dir: String,
    /// The run's state (`completed`, `interrupted`, ...).
    pub run_state: String,
    pub predictions: Predictions,
    /// The trial's late periods and stalls, and the check's, which the effect compares.
    pub stalls: Stalls,
    pub stalls_before: Stalls,
    pub verdict: Verdict,
    pub effect: Effect,
    /// Before and after in one sentence.
    pub summary: String,
}

/// The trials for a check measured on `cpu` at `policy` (`f:88`), with `allowed` the CPUs
/// this process may use. A trial that would change nothing is left out: `other_cpu` with one
/// CPU, `priority` for a workload already at [`TRIAL_PRIORITY`] or above.
pub fn trials(cpu: usize, allowed: &[usize], policy: &str) -> Vec<Trial> {
    let mut out = vec![Trial {
        id: "pm_qos".into(),
        change: "/dev/cpu_dma_latency held at 0 µs".into(),
        how: "keep /dev/cpu_dma_latency open with a 32-bit 0 written to it while the workload \
              runs (as cyclictest does), or disable the deep idle states: cpupower idle-set -D 10"
            .into(),
        cpu,
        policy: policy.to_string(),
        pm_qos_us: Some(0),
        without_load: false,
    }];
    if let Some(&other) = allowed.iter().rev().find(|&&c| c != cpu) {
        out.push(Trial {
            id: "other_cpu".into(),
            change: format!("CPU {other} instead of CPU {cpu}"),
            how: format!(
                "start the workload with taskset -c {other}, or move it: taskset -a -p -c {other} PID"
            ),
            cpu: other,
            policy: policy.to_string(),
            pm_qos_us: None,
            without_load: false,
        });
    }
    let current = rt_priority(policy);
    if current.is_none_or(|p| p < TRIAL_PRIORITY) {
        out.push(Trial {
            id: "priority".into(),
            change: format!(
                "SCHED_FIFO {TRIAL_PRIORITY} instead of {}",
                describe(policy)
            ),
            how: format!(
                "chrt -f -a -p {TRIAL_PRIORITY} PID, or the workload's own priority setting"
            ),
            cpu,
            policy: format!("f:{TRIAL_PRIORITY}"),
            pm_qos_us: None,
            without_load: false,
        });
    }
    out
}

/// The measurement a check under `loads` (`cpu+disk`) repeats without them, to show what the
/// loads cost.
pub fn without_load(cpu: usize, policy: &str, loads: &str) -> Trial {
    Trial {
        id: "without_load".into(),
        change: format!("no load (the check ran under {loads})"),
        how: String::new(),
        cpu,
        policy: policy.to_string(),
        pm_qos_us: None,
        without_load: true,
    }
}

/// The real-time priority of an rtla-style policy (`f:88`, `r:50`); `None` for the others.
fn rt_priority(policy: &str) -> Option<u32> {
    policy
        .strip_prefix("f:")
        .or_else(|| policy.strip_prefix("r:"))
        .and_then(|p| p.parse().ok())
}

/// `f:88` → `SCHED_FIFO 88`, `r:50` → `SCHED_RR 50`, anything else as written.
fn describe(policy: &str) -> String {
    match (policy.split_once(':'), rt_priority(policy)) {
        (Some(("f", _)), Some(p)) => format!("SCHED_FIFO {p}"),
        (Some(("r", _)), Some(p)) => format!("SCHED_RR {p}"),
        _ => policy.to_string(),
    }
}

/// The factor by which a trial's stall rate must differ from the check's to count as a change:
/// the host and the machine's other work vary from one run to the next by more than Poisson
/// intervals say, and a fix worth making changes the rate by more than that.
pub const MIN_FACTOR: f64 = 2.0;

/// What a run's late periods come to: periods measured, periods late, and stalls, the runs of
/// consecutive late periods ([`crate::inputs::stalls_of_run`]).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Stalls {
    pub periods: u64,
    pub late: u64,
    pub stalls: u64,
}

impl Stalls {
    /// Stalls per period with the exact (Garwood) 95 % interval.
    pub fn rate(&self) -> (f64, f64, f64) {
        if self.periods == 0 {
            return (0.0, 0.0, 1.0);
        }
        let n = self.periods as f64;
        let (lo, hi) = crate::analysis::mttf::poisson_interval(self.stalls, 0.95);
        (self.stalls as f64 / n, lo / n, hi / n)
    }
}

/// Judges a trial against the check's own measurement by their stalls: one stall makes several
/// consecutive periods late (a 2 ms burst lates one or two 1 ms periods depending on where it
/// falls), so late periods are not independent, and two runs of an unchanged machine can differ
/// twofold in them; stalls are closer to independent events. Better (worse) when the trial's
/// stall rate is at most half (at least twice) the check's and the two 95 % intervals do not
/// overlap.
pub fn effect(before: &Stalls, after: &Stalls) -> Effect {
    if after.periods == 0 || before.periods == 0 {
        return Effect::NoClearChange;
    }
    let ((b, b_lo, b_hi), (a, a_lo, a_hi)) = (before.rate(), after.rate());
    if a_hi < b_lo && a * MIN_FACTOR <= b {
        Effect::Better
    } else if a_lo > b_hi && a >= b * MIN_FACTOR {
        Effect::Worse
    } else {
        Effect::NoClearChange
    }
}

/// Before and after in one sentence: late periods, stalls, the largest delay.
pub fn summary(
    before: (&Stalls, &Predictions),
    after: (&Stalls, &Predictions),
    miss: &str,
) -> String {
    let late = |ns: i64| Nanos(ns.max(0) as u64);
    let per_s = |s: &Stalls, p: &Predictions| {
        if p.measured_s > 0.0 {
            format!("{:.3}", s.stalls as f64 / p.measured_s)
        } else {
            "-".to_string()
        }
    };
    format!(
        "{miss}s {} of {} periods → {} of {}; stalls {} → {} ({}/s → {}/s); largest delay {} → {}",
        before.0.late,
        before.0.periods,
        after.0.late,
        after.0.periods,
        before.0.stalls,
        after.0.stalls,
        per_s(before.0, before.1),
        per_s(after.0, after.1),
        late(before.1.max_ns),
        late(after.1.max_ns),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn predictions(measured_s: f64, max_ns: i64) -> Predictions {
        Predictions {
            slack_ns: 500_000,
            periods: (measured_s * 1e3) as u64,
            measured_s,
            misses: 0,
            max_ns,
            miss_probability: 0.0,
            miss_probability_low: 0.0,
            miss_probability_high: 0.0,
            model_probability: None,
            mtbf_s: None,
            mtbf_low_s: None,
            mtbf_high_s: None,
            mtbf_at_least_s: None,
            mtbf_from_model: false,
            mtbf_needs_run_s: None,
            worst_hour: None,
            target_s: 8.0 * 3600.0,
            target_slack_ns: None,
            target_slack_high_ns: None,
            target_needs_run_s: None,
        }
    }

    fn stalls(late: u64, stalls: u64, periods: u64) -> Stalls {
        Stalls {
            periods,
            late,
            stalls,
        }
    }

    #[test]
    fn the_trials_change_one_thing_each() {
        let t = trials(1, &[0, 1], "f:88");
        let ids: Vec<&str> = t.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["pm_qos", "other_cpu", "priority"]);
        assert_eq!(
            (t[0].cpu, t[0].policy.as_str(), t[0].pm_qos_us),
            (1, "f:88", Some(0))
        );
        assert_eq!(
            (t[1].cpu, t[1].policy.as_str(), t[1].pm_qos_us),
            (0, "f:88", None)
        );
        assert_eq!(t[1].change, "CPU 0 instead of CPU 1");
        assert_eq!(
            (t[2].cpu, t[2].policy.as_str(), t[2].pm_qos_us),
            (1, "f:95", None)
        );
        assert_eq!(t[2].change, "SCHED_FIFO 95 instead of SCHED_FIFO 88");
    }

    #[test]
    fn the_same_check_without_its_load() {
        let t = without_load(1, "f:88", "cpu+disk");
        assert!(t.without_load);
        assert_eq!((t.cpu, t.policy.as_str(), t.pm_qos_us), (1, "f:88", None));
        assert_eq!(t.change, "no load (the check ran under cpu+disk)");
        assert!(trials(1, &[0, 1], "f:88").iter().all(|t| !t.without_load));
    }

    #[test]
    fn a_trial_that_would_change_nothing_is_left_out() {
        let ids = |t: Vec<Trial>| t.into_iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(ids(trials(0, &[0], "f:99")), ["pm_qos"]);
        assert_eq!(
            ids(trials(3, &[0, 1, 2, 3], "o:0")),
            ["pm_qos", "other_cpu", "priority"]
        );
        // The other CPU is the highest-numbered one left.
        assert_eq!(trials(3, &[0, 1, 2, 3], "o:0")[1].cpu, 2);
        assert_eq!(trials(0, &[0, 1, 2, 3], "o:0")[1].cpu, 3);
        assert_eq!(
            trials(0, &[0, 1], "o:0")[2].change,
            "SCHED_FIFO 95 instead of o:0"
        );
    }

    #[test]
    fn effects_count_stalls_and_need_a_factor_of_two() {
        let before = stalls(2_046, 1_020, 10_200);
        // A burst that lates two periods where it used to late one: as many stalls.
        assert_eq!(
            effect(&stalls(1_040, 1_020, 10_200), &before),
            Effect::NoClearChange
        );
        assert_eq!(effect(&before, &stalls(17, 9, 10_200)), Effect::Better);
        assert_eq!(effect(&stalls(17, 9, 10_200), &before), Effect::Worse);
        // Disjoint intervals, less than a factor of two.
        assert_eq!(
            effect(&before, &stalls(1_500, 700, 10_200)),
            Effect::NoClearChange
        );
        assert_eq!(
            effect(&stalls(0, 0, 7_500), &stalls(0, 0, 7_500)),
            Effect::NoClearChange
        );
        assert_eq!(effect(&before, &stalls(0, 0, 0)), Effect::NoClearChange);
    }

    #[test]
    fn the_summary_says_before_and_after() {
        let p = predictions(10.0, 8_479_000);
        let q = predictions(10.0, 2_669_000);
        let s = summary(
            (&stalls(2_046, 1_020, 10_200), &p),
            (&stalls(3, 2, 10_200), &q),
            "missed deadline",
        );
        assert_eq!(
            s,
            "missed deadlines 2046 of 10200 periods → 3 of 10200; stalls 1020 → 2 \
             (102.000/s → 0.200/s); largest delay 8.479 ms → 2.669 ms"
        );
    }
}
