//! Scheduling policies, written either with Hourglass's priority names or in rtla's compact
//! syntax.
//!
//! Hourglass (Appendix A) names five timesharing priorities and three real-time ones. On Linux
//! they map to policies and values as follows; the mapping is fixed and documented in
//! `docs/hourglass.md`:
//!
//! | Hourglass | Linux                      | rtla syntax |
//! |-----------|----------------------------|-------------|
//! | IDLE      | SCHED_IDLE                 | `i`         |
//! | LOW       | SCHED_OTHER, nice 10       | `o:10`      |
//! | NORMAL    | SCHED_OTHER, nice 0        | `o:0`       |
//! | HIGH      | SCHED_OTHER, nice −10      | `o:-10`     |
//! | HIGHEST   | SCHED_OTHER, nice −20      | `o:-20`     |
//! | RTLOW     | SCHED_FIFO, priority 10    | `f:10`      |
//! | RTMED     | SCHED_FIFO, priority 50    | `f:50`      |
//! | RTHIGH    | SCHED_FIFO, priority 95    | `f:95`      |
//!
//! RTHIGH is 95, the priority cyclictest is most often run at, so the two tools compare
//! directly; 96-99 stay free for the watchdog and for kernel threads that must preempt a
//! measurement.
//!
//! The explicit syntax follows rtla (`tools/tracing/rtla`, `-P`): `o:NICE`, `b[:NICE]`, `i`,
//! `f:PRIO`, `r:PRIO`, and `d:RUNTIME:PERIOD` or `d:RUNTIME:DEADLINE:PERIOD` for SCHED_DEADLINE.

use crate::duration::{self, DurationError};
use crate::units::Nanos;
#[cfg(feature = "linux")]
use sandglass_sys::sched::{self as ksched, SchedAttr};
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// A Linux scheduling policy with its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "policy", rename_all = "snake_case")]
pub enum Policy {
    /// SCHED_OTHER (the fair class) with a nice value.
    Other { nice: i32 },
    /// SCHED_BATCH with a nice value.
    Batch { nice: i32 },
    /// SCHED_IDLE.
    Idle,
    /// SCHED_FIFO at a priority from 1 to 99.
    Fifo { priority: u32 },
    /// SCHED_RR at a priority from 1 to 99.
    #[serde(rename = "rr")]
    RoundRobin { priority: u32 },
    /// SCHED_DEADLINE: `runtime` of CPU in every `period`, due `deadline` after release;
    /// `reclaim` sets SCHED_FLAG_RECLAIM (a soft reservation that may use spare bandwidth).
    Deadline {
        runtime_ns: Nanos,
        deadline_ns: Nanos,
        period_ns: Nanos,
        reclaim: bool,
    },
}

/// The smallest runtime SCHED_DEADLINE accepts (2^DL_SCALE ns, `__checkparam_dl`).
pub const DEADLINE_MIN_RUNTIME: Nanos = Nanos(1 << 10);

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PolicyError {
    #[error("unknown priority or policy '{0}': use IDLE, LOW, NORMAL, HIGH, HIGHEST, RTLOW, RTMED, RTHIGH, or o:NICE, b, i, f:PRIO, r:PRIO, d:RUNTIME:PERIOD")]
    Unknown(String),
    #[error("nice value in '{0}' must be an integer from -20 to 19")]
    Nice(String),
    #[error("real-time priority in '{0}' must be an integer from 1 to 99")]
    Priority(String),
    #[error("deadline policy '{spec}': {source}")]
    Time {
        spec: String,
        #[source]
        source: DurationError,
    },
    #[error("deadline policy '{0}' needs d:RUNTIME:PERIOD or d:RUNTIME:DEADLINE:PERIOD, for example d:3ms:8ms")]
    DeadlineShape(String),
    #[error("SCHED_DEADLINE needs runtime <= deadline <= period, and a runtime of at least 1.024 us; '{0}' breaks that")]
    DeadlineOrder(String),
}

impl Policy {
    /// Parses an Hourglass priority name (case-insensitive) or an rtla-style policy spec.
    pub fn parse(spec: &str) -> Result<Policy, PolicyError> {
        let s = spec.trim();
        match s.to_ascii_uppercase().as_str() {
            "IDLE" => return Ok(Policy::Idle),
            "LOW" => return Ok(Policy::Other { nice: 10 }),
            "NORMAL" => return Ok(Policy::Other { nice: 0 }),
            "HIGH" => return Ok(Policy::Other { nice: -10 }),
            "HIGHEST" => return Ok(Policy::Other { nice: -20 }),
            "RTLOW" => return Ok(Policy::Fifo { priority: 10 }),
            "RTMED" => return Ok(Policy::Fifo { priority: 50 }),
            "RTHIGH" => return Ok(Policy::Fifo { priority: 95 }),
            _ => {}
        }
        let mut parts = s.split(':');
        let kind = parts.next().unwrap_or("");
        let rest: Vec<&str> = parts.collect();
        let nice = |v: Option<&&str>| -> Result<i32, PolicyError> {
            match v {
                None => Ok(0),
                Some(t) => match t.parse::<i32>() {
                    Ok(n) if (-20..=19).contains(&n) => Ok(n),
                    _ => Err(PolicyError::Nice(s.to_string())),
                },
            }
        };
        let prio = |v: Option<&&str>| -> Result<u32, PolicyError> {
            match v.and_then(|t| t.parse::<u32>().ok()) {
                Some(p) if (1..=99).contains(&p) => Ok(p),
                _ => Err(PolicyError::Priority(s.to_string())),
            }
        };
        let policy = match (kind, rest.len()) {
            ("o", 0 | 1) => Policy::Other {
                nice: nice(rest.first())?,
            },
            ("b", 0 | 1) => Policy::Batch {
                nice: nice(rest.first())?,
            },
            ("i", 0) => Policy::Idle,
            ("f", 1) => Policy::Fifo {
                priority: prio(rest.first())?,
            },
            ("r", 1) => Policy::RoundRobin {
                priority: prio(rest.first())?,
            },
            ("f" | "r", _) => return Err(PolicyError::Priority(s.to_string())),
            ("d", 2 | 3) => {
                let t = |x: &str| {
                    duration::parse(x).map_err(|source| PolicyError::Time {
                        spec: s.to_string(),
                        source,
                    })
                };
                let runtime = t(rest[0])?;
                let (deadline, period) = if rest.len() == 2 {
                    let p = t(rest[1])?;
                    (p, p)
                } else {
                    (t(rest[1])?, t(rest[2])?)
                };
                Policy::deadline(runtime, deadline, period, false)
                    .ok_or_else(|| PolicyError::DeadlineOrder(s.to_string()))?
            }
            ("d", _) => return Err(PolicyError::DeadlineShape(s.to_string())),
            _ => return Err(PolicyError::Unknown(s.to_string())),
        };
        Ok(policy)
    }

    /// A SCHED_DEADLINE policy, or `None` when the parameters break the kernel's ordering rule
    /// (runtime ≥ 1.024 µs, runtime ≤ deadline ≤ period).
    pub fn deadline(
        runtime: Nanos,
        deadline: Nanos,
        period: Nanos,
        reclaim: bool,
    ) -> Option<Policy> {
        (runtime >= DEADLINE_MIN_RUNTIME && runtime <= deadline && deadline <= period).then_some(
            Policy::Deadline {
                runtime_ns: runtime,
                deadline_ns: deadline,
                period_ns: period,
                reclaim,
            },
        )
    }

    /// SCHED_FIFO or SCHED_RR: a thread that can starve everything below it if it never blocks.
    pub fn is_realtime(&self) -> bool {
        matches!(self, Policy::Fifo { .. } | Policy::RoundRobin { .. })
    }

    pub fn is_deadline(&self) -> bool {
        matches!(self, Policy::Deadline { .. })
    }

    /// True when setting this policy needs a privilege (CAP_SYS_NICE, or RLIMIT_RTPRIO /
    /// RLIMIT_NICE large enough).
    pub fn needs_privilege(&self) -> bool {
        match self {
            Policy::Other { nice } | Policy::Batch { nice } => *nice < 0,
            Policy::Idle => false,
            _ => true,
        }
    }

    /// The real-time priority, for FIFO and RR.
    pub fn rt_priority(&self) -> Option<u32> {
        match self {
            Policy::Fifo { priority } | Policy::RoundRobin { priority } => Some(*priority),
            _ => None,
        }
    }

    /// The kernel attributes for `sched_setattr`.
    #[cfg(feature = "linux")]
    pub fn to_attr(&self) -> SchedAttr {
        match *self {
            Policy::Other { nice } => SchedAttr {
                policy: ksched::SCHED_OTHER,
                nice,
                ..SchedAttr::default()
            },
            Policy::Batch { nice } => SchedAttr {
                policy: ksched::SCHED_BATCH,
                nice,
                ..SchedAttr::default()
            },
            Policy::Idle => SchedAttr {
                policy: ksched::SCHED_IDLE,
                ..SchedAttr::default()
            },
            Policy::Fifo { priority } => SchedAttr {
                policy: ksched::SCHED_FIFO,
                priority,
                ..SchedAttr::default()
            },
            Policy::RoundRobin { priority } => SchedAttr {
                policy: ksched::SCHED_RR,
                priority,
                ..SchedAttr::default()
            },
            Policy::Deadline {
                runtime_ns,
                deadline_ns,
                period_ns,
                reclaim,
            } => SchedAttr {
                policy: ksched::SCHED_DEADLINE,
                flags: if reclaim {
                    ksched::SCHED_FLAG_RECLAIM
                } else {
                    0
                },
                runtime_ns: runtime_ns.0,
                deadline_ns: deadline_ns.0,
                period_ns: period_ns.0,
                ..SchedAttr::default()
            },
        }
    }

    /// The policy the kernel reports in `sched_getattr`, or `None` for a policy number sandglass
    /// does not know.
    #[cfg(feature = "linux")]
    pub fn from_attr(a: &SchedAttr) -> Option<Policy> {
        Some(match a.policy {
            ksched::SCHED_OTHER => Policy::Other { nice: a.nice },
            ksched::SCHED_BATCH => Policy::Batch { nice: a.nice },
            ksched::SCHED_IDLE => Policy::Idle,
            ksched::SCHED_FIFO => Policy::Fifo {
                priority: a.priority,
            },
            ksched::SCHED_RR => Policy::RoundRobin {
                priority: a.priority,
            },
            ksched::SCHED_DEADLINE => Policy::Deadline {
                runtime_ns: Nanos(a.runtime_ns),
                deadline_ns: Nanos(a.deadline_ns),
                period_ns: Nanos(a.period_ns),
                reclaim: a.flags & ksched::SCHED_FLAG_RECLAIM != 0,
            },
            _ => return None,
        })
    }

    /// A description for people: `SCHED_FIFO 95`, `SCHED_OTHER nice -10`,
    /// `SCHED_DEADLINE 3 ms/8 ms (soft)`.
    pub fn describe(&self) -> String {
        match *self {
            Policy::Other { nice } => format!("SCHED_OTHER nice {nice}"),
            Policy::Batch { nice } => format!("SCHED_BATCH nice {nice}"),
            Policy::Idle => "SCHED_IDLE".to_string(),
            Policy::Fifo { priority } => format!("SCHED_FIFO {priority}"),
            Policy::RoundRobin { priority } => format!("SCHED_RR {priority}"),
            Policy::Deadline {
                runtime_ns,
                deadline_ns,
                period_ns,
                reclaim,
            } => {
                let dl = if deadline_ns == period_ns {
                    String::new()
                } else {
                    format!(" deadline {deadline_ns}")
                };
                let soft = if reclaim { " (soft, reclaiming)" } else { "" };
                format!("SCHED_DEADLINE {runtime_ns}/{period_ns}{dl}{soft}")
            }
        }
    }
}

/// Prints the rtla syntax that [`Policy::parse`] reads back (a soft reservation prints the same
/// as a hard one; the reclaim flag is not part of rtla's syntax).
impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Policy::Other { nice } => write!(f, "o:{nice}"),
            Policy::Batch { nice } => write!(f, "b:{nice}"),
            Policy::Idle => write!(f, "i"),
            Policy::Fifo { priority } => write!(f, "f:{priority}"),
            Policy::RoundRobin { priority } => write!(f, "r:{priority}"),
            Policy::Deadline {
                runtime_ns,
                deadline_ns,
                period_ns,
                ..
            } => write!(
                f,
                "d:{}:{}:{}",
                duration::format_exact(runtime_ns),
                duration::format_exact(deadline_ns),
                duration::format_exact(period_ns)
            ),
        }
    }
}

/// The largest `--cpu-dma-latency` accepted, in µs (the kernel's own limit is 2,000 s).
pub const MAX_CPU_DMA_LATENCY_US: u32 = 2_000_000_000;

/// Parses `--cpu-dma-latency`: a whole number of microseconds, or `off` (`None`). The error
/// says what is wrong with the value and what to give instead.
pub fn parse_cpu_dma_latency(text: &str) -> Result<Option<u32>, String> {
    const FIX: &str =
        "give a whole number of microseconds (0 keeps CPUs out of deep idle states) or off";
    let t = text.trim();
    if t == "off" {
        return Ok(None);
    }
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if t.strip_prefix('-').is_some_and(digits) {
        return Err(format!("the value is negative: {FIX}"));
    }
    if digits(t) {
        return match t.parse::<u32>() {
            Ok(v) if v <= MAX_CPU_DMA_LATENCY_US => Ok(Some(v)),
            _ => Err(format!(
                "the value is too large: the limit is {MAX_CPU_DMA_LATENCY_US} µs; {FIX}"
            )),
        };
    }
    Err(FIX.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_dma_latency_values() {
        assert_eq!(parse_cpu_dma_latency("0"), Ok(Some(0)));
        assert_eq!(parse_cpu_dma_latency("off"), Ok(None));
        assert_eq!(
            parse_cpu_dma_latency("2000000000"),
            Ok(Some(MAX_CPU_DMA_LATENCY_US))
        );
        for (text, says) in [
            ("-1", "negative"),
            ("-20", "negative"),
            ("2000000001", "too large"),
            ("99999999999", "too large"),
            ("soon", "whole number"),
            ("", "whole number"),
            ("-", "whole number"),
            ("1.5", "whole number"),
        ] {
            let e = parse_cpu_dma_latency(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn hourglass_names_map_as_documented() {
        let cases = [
            ("IDLE", Policy::Idle),
            ("LOW", Policy::Other { nice: 10 }),
            ("NORMAL", Policy::Other { nice: 0 }),
            ("HIGH", Policy::Other { nice: -10 }),
            ("HIGHEST", Policy::Other { nice: -20 }),
            ("RTLOW", Policy::Fifo { priority: 10 }),
            ("RTMED", Policy::Fifo { priority: 50 }),
            ("RTHIGH", Policy::Fifo { priority: 95 }),
            ("rthigh", Policy::Fifo { priority: 95 }),
        ];
        for (name, want) in cases {
            assert_eq!(Policy::parse(name), Ok(want), "{name}");
        }
    }

    #[test]
    fn rtla_syntax() {
        assert_eq!(Policy::parse("o:5"), Ok(Policy::Other { nice: 5 }));
        assert_eq!(Policy::parse("o"), Ok(Policy::Other { nice: 0 }));
        assert_eq!(Policy::parse("b"), Ok(Policy::Batch { nice: 0 }));
        assert_eq!(Policy::parse("i"), Ok(Policy::Idle));
        assert_eq!(Policy::parse("f:95"), Ok(Policy::Fifo { priority: 95 }));
        assert_eq!(Policy::parse("r:1"), Ok(Policy::RoundRobin { priority: 1 }));
        assert_eq!(
            Policy::parse("d:100us:1ms"),
            Ok(Policy::Deadline {
                runtime_ns: Nanos(100_000),
                deadline_ns: Nanos(1_000_000),
                period_ns: Nanos(1_000_000),
                reclaim: false
            })
        );
        assert_eq!(
            Policy::parse("d:3ms:5ms:8ms"),
            Ok(Policy::Deadline {
                runtime_ns: Nanos(3_000_000),
                deadline_ns: Nanos(5_000_000),
                period_ns: Nanos(8_000_000),
                reclaim: false
            })
        );
    }

    #[test]
    fn bad_specs() {
        assert!(matches!(
            Policy::parse("f:200"),
            Err(PolicyError::Priority(_))
        ));
        assert!(matches!(
            Policy::parse("f:0"),
            Err(PolicyError::Priority(_))
        ));
        assert!(matches!(Policy::parse("f"), Err(PolicyError::Priority(_))));
        assert!(matches!(Policy::parse("o:-21"), Err(PolicyError::Nice(_))));
        assert!(matches!(
            Policy::parse("SUPER"),
            Err(PolicyError::Unknown(_))
        ));
        assert!(matches!(
            Policy::parse("d:1ms"),
            Err(PolicyError::DeadlineShape(_))
        ));
        assert!(matches!(
            Policy::parse("d:9ms:8ms"),
            Err(PolicyError::DeadlineOrder(_))
        ));
        assert!(matches!(
            Policy::parse("d:1ns:8ms"),
            Err(PolicyError::DeadlineOrder(_))
        ));
        assert!(matches!(
            Policy::parse("d:1:8ms"),
            Err(PolicyError::Time { .. })
        ));
    }

    #[test]
    fn display_round_trips_and_attr_round_trips() {
        for spec in [
            "o:-5",
            "b:3",
            "i",
            "f:95",
            "r:20",
            "d:3ms:8ms:8ms",
            "d:100us:500us:1ms",
        ] {
            let p = Policy::parse(spec).expect("parse");
            assert_eq!(Policy::parse(&p.to_string()), Ok(p), "{spec}");
            assert_eq!(Policy::from_attr(&p.to_attr()), Some(p), "{spec}");
        }
        let soft = Policy::deadline(Nanos(3), Nanos(8), Nanos(8), true);
        assert_eq!(soft, None, "runtime below the kernel minimum");
        let soft = Policy::deadline(Nanos(3_000_000), Nanos(8_000_000), Nanos(8_000_000), true)
            .expect("valid");
        assert_eq!(Policy::from_attr(&soft.to_attr()), Some(soft));
        assert!(soft.describe().contains("soft"));
    }
}
