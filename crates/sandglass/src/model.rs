//! Hourglass's thread execution models (Regehr 2002, §3.2) and the timer sources a thread can
//! block on (§3.3).

use crate::duration::format_exact;
use crate::units::Nanos;
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// What a thread does with the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "model", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Workload {
    /// Runs whenever it can.
    Cpu,
    /// CPU-bound, and touches an array of `size_kb` KiB sequentially, one cache line per poll,
    /// modelling a task with a working set in the data caches.
    CpuScan { size_kb: u64 },
    /// CPU-bound, but yields the processor each time it has received `amount_ns` of CPU time.
    CpuYield { amount_ns: Nanos },
    /// Scanning and yielding combined.
    CpuScanYield { size_kb: u64, amount_ns: Nanos },
    /// In every period, runs until it has received `amount_ns` of CPU time, then blocks on its
    /// timer until the next release. Releases are absolute (`start + k·period`), so a late job
    /// never shifts later ones. A job that has not received its amount by the end of its period
    /// is a deadline miss; it is dropped and the next job starts at its release (each period is
    /// counted exactly once, whether the thread ran in it or not).
    Periodic { amount_ns: Nanos, period_ns: Nanos },
    /// Never blocks: each time it has received `amount_ns`, a frame is complete (a hit) and a
    /// new period starts at that moment. Each `period_ns` that elapses without a completed frame
    /// is a miss (§3.2's game that must produce 20 frames per second).
    CpuPeriodic { amount_ns: Nanos, period_ns: Nanos },
    /// Latency test: records the time, sleeps until one period after it, and records how late
    /// the wakeup was. Self-synchronising: the next wakeup is one period after the actual one.
    /// Makes no execution-trace records.
    Lat { period_ns: Nanos },
    /// A timer-latency thread (`sandglass timer`): a release every `period_ns`, on a fixed grid
    /// or, with `resync`, one period after each wakeup. Every release is recorded with its
    /// lateness, and releases that fell due before the wakeup that served them are counted as
    /// missed. With a `duty` cycle, releases fall only in the first `on_ns` of every
    /// `every_ns` (`sandglass monitor --duty`). Not part of Hourglass's command line.
    Timer {
        period_ns: Nanos,
        resync: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duty: Option<DutyCycle>,
    },
}

/// Measure `on_ns` of every `every_ns`: the windows start at the run's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DutyCycle {
    pub on_ns: Nanos,
    pub every_ns: Nanos,
}

impl DutyCycle {
    /// The share of the time measured, 0 to 1.
    pub fn share(&self) -> f64 {
        self.on_ns.0 as f64 / self.every_ns.0.max(1) as f64
    }
}

impl Workload {
    /// The scanned working set in KiB, if any.
    pub fn scan_kb(&self) -> Option<u64> {
        match *self {
            Workload::CpuScan { size_kb } | Workload::CpuScanYield { size_kb, .. } => Some(size_kb),
            _ => None,
        }
    }

    /// True when the thread never blocks voluntarily: at a real-time priority it keeps its CPU
    /// busy until the run ends (a yield does not let lower priorities run).
    pub fn never_blocks(&self) -> bool {
        matches!(
            self,
            Workload::Cpu
                | Workload::CpuScan { .. }
                | Workload::CpuYield { .. }
                | Workload::CpuScanYield { .. }
                | Workload::CpuPeriodic { .. }
        )
    }

    /// True when the thread makes execution-trace records (every model but LAT).
    pub fn records_trace(&self) -> bool {
        !matches!(self, Workload::Lat { .. } | Workload::Timer { .. })
    }

    /// True for the models that block on a timer (PERIODIC and LAT).
    pub fn uses_timer(&self) -> bool {
        matches!(
            self,
            Workload::Periodic { .. } | Workload::Lat { .. } | Workload::Timer { .. }
        )
    }

    /// The Appendix A name.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Cpu => "CPU",
            Workload::CpuScan { .. } => "CPU_SCAN",
            Workload::CpuYield { .. } => "CPU_YIELD",
            Workload::CpuScanYield { .. } => "CPU_SCAN_YIELD",
            Workload::Periodic { .. } => "PERIODIC",
            Workload::CpuPeriodic { .. } => "CPU_PERIODIC",
            Workload::Lat { .. } => "LAT",
            Workload::Timer { .. } => "TIMER",
        }
    }
}

/// Prints the Appendix A form: `PERIODIC 4ms 5ms`, `CPU_SCAN 64`.
impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Workload::Cpu => write!(f, "CPU"),
            Workload::CpuScan { size_kb } => write!(f, "CPU_SCAN {size_kb}"),
            Workload::CpuYield { amount_ns } => write!(f, "CPU_YIELD {}", format_exact(amount_ns)),
            Workload::CpuScanYield { size_kb, amount_ns } => {
                write!(f, "CPU_SCAN_YIELD {size_kb} {}", format_exact(amount_ns))
            }
            Workload::Periodic {
                amount_ns,
                period_ns,
            } => write!(
                f,
                "PERIODIC {} {}",
                format_exact(amount_ns),
                format_exact(period_ns)
            ),
            Workload::CpuPeriodic {
                amount_ns,
                period_ns,
            } => write!(
                f,
                "CPU_PERIODIC {} {}",
                format_exact(amount_ns),
                format_exact(period_ns)
            ),
            Workload::Lat { period_ns } => write!(f, "LAT {}", format_exact(period_ns)),
            Workload::Timer {
                period_ns,
                resync,
                duty,
            } => {
                write!(
                    f,
                    "TIMER {} {}",
                    format_exact(period_ns),
                    if resync { "resync" } else { "absolute" }
                )?;
                match duty {
                    Some(d) => write!(
                        f,
                        " duty {}/{}",
                        format_exact(d.on_ns),
                        format_exact(d.every_ns)
                    ),
                    None => Ok(()),
                }
            }
        }
    }
}

/// How a thread waits for a point in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TimerKind {
    /// A relative `nanosleep` for the time left (Hourglass's native Unix timer).
    Native,
    /// `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`: high-resolution timers, which every
    /// Linux kernel since 2.6.21 has without a patch.
    Hr,
    /// A `timerfd` armed with an absolute expiry, then `read`.
    Timerfd,
    /// A POSIX per-thread timer (`timer_create` with `SIGEV_THREAD_ID`) and `sigwaitinfo`.
    Posix,
    /// Spin on the cycle counter until the time: no kernel timer at all.
    Busy,
    /// The `/dev/rtc` periodic interrupt at 1024 Hz, read until the time has come.
    Rtc,
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TimerError {
    #[error("-i MM: Windows multimedia timers do not exist on Linux; use -i HR (clock_nanosleep on CLOCK_MONOTONIC), the Linux equivalent")]
    Multimedia,
    #[error("unknown timer '{0}': use NATIVE, HR, TIMERFD, POSIX, BUSY or RTC")]
    Unknown(String),
}

impl TimerKind {
    /// Parses a timer name, case-insensitively.
    pub fn parse(text: &str) -> Result<TimerKind, TimerError> {
        Ok(match text.trim().to_ascii_uppercase().as_str() {
            "NATIVE" => TimerKind::Native,
            "HR" => TimerKind::Hr,
            "TIMERFD" => TimerKind::Timerfd,
            "POSIX" => TimerKind::Posix,
            "BUSY" => TimerKind::Busy,
            "RTC" => TimerKind::Rtc,
            "MM" => return Err(TimerError::Multimedia),
            _ => return Err(TimerError::Unknown(text.to_string())),
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            TimerKind::Native => "NATIVE",
            TimerKind::Hr => "HR",
            TimerKind::Timerfd => "TIMERFD",
            TimerKind::Posix => "POSIX",
            TimerKind::Busy => "BUSY",
            TimerKind::Rtc => "RTC",
        }
    }
}

impl fmt::Display for TimerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_parse() {
        assert_eq!(TimerKind::parse("hr"), Ok(TimerKind::Hr));
        assert_eq!(TimerKind::parse("NATIVE"), Ok(TimerKind::Native));
        assert_eq!(TimerKind::parse("MM"), Err(TimerError::Multimedia));
        assert!(TimerError::Multimedia.to_string().contains("HR"));
        assert!(matches!(
            TimerKind::parse("bogus"),
            Err(TimerError::Unknown(_))
        ));
    }

    #[test]
    fn workload_display_is_appendix_a() {
        let w = Workload::Periodic {
            amount_ns: Nanos::from_millis(4),
            period_ns: Nanos::from_millis(5),
        };
        assert_eq!(w.to_string(), "PERIODIC 4ms 5ms");
        assert_eq!(Workload::CpuScan { size_kb: 64 }.to_string(), "CPU_SCAN 64");
        assert!(Workload::Cpu.never_blocks());
        assert!(!w.never_blocks());
        assert!(!Workload::Lat {
            period_ns: Nanos(1)
        }
        .records_trace());
    }
}
