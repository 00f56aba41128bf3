//! What `sandglass check` decides before it measures: how long, at which policy and priority,
//! with how much slack, which lateness thresholds to count, above what to explain a delay, and
//! whether to record the kernel's events. The command line only reads its flags and reports.

use super::predict;
use super::workload::Workload;
use crate::causes::kernel_trace::TraceOptions;
#[cfg(feature = "linux")]
use crate::causes::tracefs;
use crate::policy::Policy;
use crate::units::Nanos;
use thiserror::Error;

/// What the person asked for, as typed values.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    pub workload: &'a Workload,
    /// At most one miss in this long (`--target`).
    pub target: Nanos,
    /// Computation per period, taken from the slack (`--work`).
    pub work: Nanos,
    /// How long to measure (`-d`); `None` for the default.
    pub duration: Option<Nanos>,
    /// The workload's policy (`-P`); `None` for the workload kind's default.
    pub policy: Option<Policy>,
}

/// The measurement a check makes.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// How long to measure: as asked, or a tenth of the target and never less than the 10 s
    /// an early end needs.
    pub duration: Nanos,
    /// The duration is the default (a tenth of the target).
    pub duration_is_default: bool,
    /// The target in seconds.
    pub target_s: f64,
    pub policy: Policy,
    /// The real-time priority the findings judge the configuration at; 0 when the policy is
    /// not a real-time one.
    pub priority: u32,
    /// How late a period's work may start: the workload's deadline less the work.
    pub slack: Nanos,
    /// Delays above this are explained: half the slack, and at least 10 µs.
    pub explain_above: Nanos,
    /// The lateness thresholds counted: the timer's defaults for the period, and the slack.
    pub thresholds: Vec<Nanos>,
}

/// Why a check cannot be planned; each names the flag or the workload at fault.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum PlanError {
    #[error("the target is shorter than one second")]
    TargetTooShort,
    #[error("the measurement is shorter than one second")]
    DurationTooShort,
    #[error("the workload has no slack (its response time equals its deadline)")]
    NoSlack,
    #[error("the work per period is not shorter than the slack")]
    WorkTooLong,
}

/// The shortest measurement a check makes.
pub const MIN_DURATION: Nanos = Nanos::from_secs(1);

/// Plans the check that `r` asks for.
pub fn plan(r: &Request<'_>) -> Result<Plan, PlanError> {
    if r.target < Nanos::from_secs(1) {
        return Err(PlanError::TargetTooShort);
    }
    let duration = r.duration.unwrap_or_else(|| default_duration(r.target));
    if duration < MIN_DURATION {
        return Err(PlanError::DurationTooShort);
    }
    let w = r.workload;
    if w.deadline_ns == Nanos::ZERO {
        return Err(PlanError::NoSlack);
    }
    if r.work >= w.deadline_ns {
        return Err(PlanError::WorkTooLong);
    }
    let slack = Nanos(w.deadline_ns.0 - r.work.0);
    let policy = r.policy.unwrap_or(Policy::Fifo {
        priority: w.kind.default_priority(),
    });
    let mut thresholds = crate::timer::default_thresholds(w.period_ns);
    thresholds.push(slack);
    thresholds.sort();
    thresholds.dedup();
    Ok(Plan {
        duration,
        duration_is_default: r.duration.is_none(),
        target_s: r.target.as_secs_f64(),
        priority: policy.rt_priority().unwrap_or(0),
        policy,
        slack,
        explain_above: Nanos((slack.0 / 2).max(10_000)),
        thresholds,
    })
}

/// A tenth of `target`, the shortest run whose tail supports a prediction that far, and never
/// less than the 10 s an early end needs.
pub fn default_duration(target: Nanos) -> Nanos {
    Nanos(
        ((target.0 as f64 / crate::analysis::worst_case::MAX_HORIZON_RATIO) as u64)
            .max(predict::EARLY_MIN_NS),
    )
}

/// Whether a check records the kernel's events.
#[derive(Clone, Debug)]
pub enum Tracing {
    /// Recorded, to name what held the CPU.
    On(TraceOptions),
    /// Not asked for (`--no-trace`).
    Off,
    /// Asked for but not possible here, with the reason: causes come from `/proc` samples.
    Unavailable(String),
}

impl Tracing {
    /// Records the kernel's events unless `no_trace`, where this process can.
    #[cfg(feature = "linux")]
    pub fn choose(no_trace: bool) -> Tracing {
        if no_trace {
            return Tracing::Off;
        }
        match tracefs::probe() {
            Ok(()) => Tracing::On(TraceOptions::default()),
            Err(e) => Tracing::Unavailable(e.to_string()),
        }
    }

    /// The options a timer run takes.
    pub fn options(&self) -> Option<TraceOptions> {
        match self {
            Tracing::On(o) => Some(*o),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::workload;

    fn audio() -> Workload {
        workload::parse("audio:64@48000x2", &|_| unreachable!("no task file")).unwrap()
    }

    #[test]
    fn an_audio_check_is_planned_from_its_workload() {
        let w = audio();
        let p = plan(&Request {
            workload: &w,
            target: Nanos::from_secs(8 * 3600),
            work: Nanos::from_micros(300),
            duration: None,
            policy: None,
        })
        .unwrap();
        // A tenth of 8 h: 48 min.
        assert_eq!(p.duration, Nanos::from_secs(48 * 60));
        assert!(p.duration_is_default);
        assert_eq!(p.policy, Policy::Fifo { priority: 88 });
        assert_eq!(p.priority, 88);
        // One period of buffering (1.333 ms) less 300 µs.
        assert_eq!(p.slack, Nanos(w.deadline_ns.0 - 300_000));
        assert_eq!(p.explain_above, Nanos(p.slack.0 / 2));
        assert!(p.thresholds.contains(&p.slack));
        assert!(p.thresholds.windows(2).all(|t| t[0] < t[1]));
    }

    /// The priority comes from the typed policy, whatever its spelling: `RTHIGH` is FIFO 95.
    #[test]
    fn the_priority_is_the_policys_own() {
        let w = audio();
        let plan_at = |p: &str| {
            plan(&Request {
                workload: &w,
                target: Nanos::from_secs(3600),
                work: Nanos::ZERO,
                duration: Some(Nanos::from_secs(30)),
                policy: Some(Policy::parse(p).unwrap()),
            })
            .unwrap()
        };
        assert_eq!(plan_at("RTHIGH").priority, 95);
        assert_eq!(plan_at("r:40").priority, 40);
        assert_eq!(plan_at("o:0").priority, 0);
        assert!(!plan_at("r:40").duration_is_default);
    }

    #[test]
    fn impossible_checks_are_refused() {
        let w = audio();
        let req = |target: u64, work: Nanos, duration: Option<Nanos>| Request {
            workload: &w,
            target: Nanos::from_secs(target),
            work,
            duration,
            policy: None,
        };
        assert_eq!(
            plan(&req(0, Nanos::ZERO, None)),
            Err(PlanError::TargetTooShort)
        );
        assert_eq!(
            plan(&req(60, Nanos::ZERO, Some(Nanos::from_millis(500)))),
            Err(PlanError::DurationTooShort)
        );
        assert_eq!(
            plan(&req(60, w.deadline_ns, None)),
            Err(PlanError::WorkTooLong)
        );
        // A short target still measures long enough for an early end.
        assert_eq!(
            default_duration(Nanos::from_secs(10)),
            Nanos(predict::EARLY_MIN_NS)
        );
    }
}
