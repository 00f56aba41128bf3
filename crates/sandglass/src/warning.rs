//! Measurement-quality warnings: conditions that do not stop a run but change what its figures
//! mean. Each carries a kind (for programs) and a message that says what is wrong and how to fix
//! it (for people), in the spirit of hyperfine's warnings.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// A thread runs at a lower policy than requested because a privilege was missing.
    PolicyDowngraded,
    /// Memory could not be locked; buffers were prefaulted instead.
    MemoryNotLocked,
    /// RT throttling will take CPU time from real-time threads that never block.
    RtThrottling,
    /// RT throttling is disabled: a real-time busy loop can starve its CPU.
    RtThrottlingDisabled,
    /// The machine is virtualised: the hypervisor causes gaps the guest cannot see.
    Virtualized,
    /// A CPU frequency governor other than `performance`.
    FrequencyScaling,
    /// An SMT sibling of a measured CPU is in use.
    SmtSibling,
    /// The cycle counter is not usable; CLOCK_MONOTONIC_RAW is polled instead.
    CounterFallback,
    /// `/dev/cpu_dma_latency` could not be held.
    PmQosUnavailable,
    /// The main thread shares a CPU with measuring threads.
    SharedCpu,
    /// SCHED_DEADLINE threads cannot be pinned and float over every CPU.
    DeadlineFloats,
    /// The trace buffer or a sample buffer filled up; records were dropped and counted.
    RecordsDropped,
    /// The run is too short for the figures it reports.
    RunTooShort,
    /// A thread did not stop when asked and the watchdog ended the run.
    ThreadDidNotStop,
    /// A load failed or stopped early; the measurement ran under less load than asked.
    LoadFailed,
    /// Another sandglass was measuring a CPU of this run (`--shared-cpus`): each counts the
    /// other as noise.
    CpusShared,
    /// A timer the command line asked for is not available here; a documented substitute ran
    /// instead (Hourglass's `-i RTC` without `/dev/rtc` uses HR).
    TimerFallback,
    /// The measuring process was stopped (Ctrl-Z, SIGSTOP, a debugger): its delays then are the
    /// stop, not the machine's.
    ProcessStopped,
    /// A prediction and the run that checks it differ by more than the stated factor
    /// (`bench budget`); the message names the part that explains least.
    PredictionDisagrees,
}

/// One warning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Warning {
    pub kind: WarningKind,
    pub message: String,
}

impl Warning {
    pub fn new(kind: WarningKind, message: impl Into<String>) -> Warning {
        Warning {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
