//! The run plan: what every measurement asks of the runner, whichever front end it came from.
//!
//! A plan is a set of measuring threads (each with its workload model, scheduling policy, timer,
//! start and finish, and CPUs), the run's length, how the gap threshold is chosen, the settings
//! the run holds (PM QoS, the counter, the main thread's CPU), the loads that run beside it,
//! kernel tracing, the threshold actions and what to sample. Hourglass's command line, `timer`,
//! `noise` and studies each translate into one; the runner ([`crate::runner`]) knows plans only.
//!
//! This module also places the threads on CPUs and refuses plans that could starve the machine
//! ([`place`]), and lists the measurement-quality warnings known before a run
//! ([`pre_run_warnings`]).

use crate::causes::kernel_trace::TraceOptions;
use crate::clock::{CounterChoice, CounterInfo, CounterKind};
use crate::cpulist::CpuList;
use crate::load::LoadSpec;
use crate::model::{TimerKind, Workload};
use crate::policy::Policy;
use crate::system::SystemSnapshot;
use crate::units::Nanos;
use crate::warning::{Warning, WarningKind};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use thiserror::Error;

/// A CPU reservation (Hourglass's `-rh`, hard, or `-rs`, soft), applied as SCHED_DEADLINE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Reservation {
    pub amount_ns: Nanos,
    pub period_ns: Nanos,
    pub soft: bool,
}

/// One measuring thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadSpec {
    pub index: usize,
    /// The priority or policy as written (`RTHIGH`, `f:80`), or `NORMAL` by default.
    pub priority_text: String,
    /// The policy to apply: the priority's policy, or SCHED_DEADLINE for a reservation.
    pub policy: Policy,
    pub reservation: Option<Reservation>,
    pub workload: Workload,
    pub timer: TimerKind,
    /// When the thread starts, from the start of the run.
    pub start_ns: Nanos,
    /// When the thread finishes, from the start of the run.
    pub finish_ns: Nanos,
    /// CPUs the thread may run on; `None` means the default placement.
    pub affinity: Option<CpuList>,
}

/// How long loads settle before a measurement unless told otherwise.
pub const DEFAULT_SETTLE: Nanos = Nanos(2_000_000_000);

/// Loads to run during a measurement: they start after the threads' setup, run `settle_ns`
/// before the measurement starts, and stop as soon as it ends, however it ends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoadPlan {
    #[serde(default)]
    pub specs: Vec<LoadSpec>,
    #[serde(default)]
    pub settle_ns: Nanos,
}

impl LoadPlan {
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }
}

/// An action at a delay above the threshold, as rtla's `--on-threshold`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ThresholdAction {
    /// Write a marker into the kernel trace (with `--trace`).
    Mark,
    /// Run a command with `sh -c`; it gets SANDGLASS_DELAY_NS and SANDGLASS_RUN_DIR.
    Shell(String),
    /// Keep measuring instead of stopping.
    Continue,
}

/// A threshold action that is not one.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("--on-threshold {0}: use mark (a marker in the --trace trace), shell:COMMAND (run it with sh -c) or continue (keep measuring)")]
pub struct ThresholdActionError(pub String);

impl ThresholdAction {
    /// Parses `mark`, `shell:CMD` or `continue`.
    pub fn parse(text: &str) -> Result<ThresholdAction, ThresholdActionError> {
        match text {
            "mark" => Ok(ThresholdAction::Mark),
            "continue" => Ok(ThresholdAction::Continue),
            _ => match text.strip_prefix("shell:") {
                Some(cmd) if !cmd.trim().is_empty() => Ok(ThresholdAction::Shell(cmd.to_string())),
                _ => Err(ThresholdActionError(text.to_string())),
            },
        }
    }
}

/// A delay threshold and what to do when a measuring thread reports a delay above it (a late
/// wakeup for timer threads, an interruption for polling threads). Without `Continue` among
/// the actions, the run stops there and keeps everything measured, the trace included.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Threshold {
    pub above_ns: Nanos,
    #[serde(default)]
    pub actions: Vec<ThresholdAction>,
}

/// The environment variable the command reads [`Faults`] from.
pub const FAULT_ENV: &str = "SANDGLASS_FAULT";

/// Failures injected on purpose, to test the failure paths end to end (the command reads
/// them from `SANDGLASS_FAULT`; the library takes them as a value).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Faults {
    /// This thread ignores every stop request once its measurement is over, as a thread stuck
    /// in the kernel would, so that only the watchdog can end the run.
    pub stuck_thread: Option<usize>,
    /// The run fails once kernel tracing has started, to test that tracing is undone.
    pub fail_after_trace_start: bool,
}

impl Faults {
    /// The faults named by the text of `SANDGLASS_FAULT`: `stuck-thread=N` or
    /// `fail-after-trace-start`; anything else injects none.
    pub fn parse(text: &str) -> Faults {
        Faults {
            stuck_thread: text
                .strip_prefix("stuck-thread=")
                .and_then(|n| n.parse().ok()),
            fail_after_trace_start: text == "fail-after-trace-start",
        }
    }
}

/// The most records a run's rings may be asked to hold together ([`RunPlan::ring_records`]);
/// each polling thread's share is further clamped to what one ring holds (4,194,304 records).
pub const MAX_RING_RECORDS: usize = 1 << 27;

/// A measurement the runner can carry out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunPlan {
    /// The run's kind: `timer`, `noise` or `hourglass`.
    #[schemars(with = "String")]
    pub kind: crate::RunKind,
    pub threads: Vec<ThreadSpec>,
    pub duration_ns: Nanos,
    /// The gap threshold; `None` calibrates it when some thread polls the counter.
    pub gap_ns: Option<Nanos>,
    /// Keep the polling loop's iteration histogram from the calibration.
    pub gap_histogram: bool,
    /// Count every interruption of polling threads (histogram, total, longest).
    pub gap_stats: bool,
    /// Bytes copied between two polls by CPU-bound threads (oslat's memmove workload).
    pub memmove_bytes: usize,
    /// Records the rings of the polling threads hold together: how far the main thread may fall
    /// behind before records are lost (Hourglass's `-e`, noise's `-e`), at most
    /// [`MAX_RING_RECORDS`].
    pub ring_records: usize,
    pub counter: CounterChoice,
    /// Where the main (housekeeping) thread runs; `None` picks a CPU no thread uses.
    pub main_cpu: Option<usize>,
    /// Permit real-time threads that never block on every CPU.
    pub allow_rt_busy: bool,
    /// Hold `/dev/cpu_dma_latency` at this many µs during the run.
    pub cpu_dma_latency_us: Option<u32>,
    pub loads: LoadPlan,
    /// Snapshots per second of the `/proc` counters on the measured CPUs (0: none).
    pub sample_hz: u32,
    /// Record kernel events on the measured CPUs.
    pub trace: Option<TraceOptions>,
    /// What to do at the first delay above a threshold.
    pub threshold: Option<Threshold>,
    /// The run directory; `None` makes a new one under the context's base directory.
    pub output_dir: Option<PathBuf>,
    /// The kind's own configuration, stored in the manifest beside the threads.
    pub config: serde_json::Value,
}

/// Where each thread and the main thread run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Placement {
    /// Per thread: the CPUs it is pinned to, or `None` when it floats over every allowed CPU.
    pub threads: Vec<Option<CpuList>>,
    /// The CPU threads share by default.
    pub default_cpu: usize,
    /// The CPU the main thread is pinned to, if any is free of measuring threads.
    pub main_cpu: Option<usize>,
    /// Every CPU a measuring thread may use.
    pub measured: CpuList,
}

/// Why a plan cannot be placed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlacementError {
    #[error("this process may not run on any CPU")]
    NoCpu,
    #[error("thread {thread}: --affinity {cpus} names a CPU this process may not use (allowed: {allowed})")]
    Affinity {
        thread: usize,
        cpus: CpuList,
        allowed: CpuList,
    },
    #[error("real-time threads that never block would occupy every CPU this process may use ({busy}), which can starve the machine: leave a CPU free with --affinity, use a timesharing priority, or pass --allow-rt-busy to accept the risk")]
    Starves { busy: CpuList },
    #[error("--main-cpu {cpu}: this process may not use CPU {cpu} (allowed: {allowed})")]
    MainCpu { cpu: usize, allowed: CpuList },
}

/// True when `t` is real-time and never gives its CPU to lower priorities.
pub fn rt_busy(t: &ThreadSpec) -> bool {
    t.policy.is_realtime() && (t.workload.never_blocks() || t.timer == TimerKind::Busy)
}

/// Places the threads of `plan` on the CPUs in `allowed` (the process's affinity).
///
/// A thread without an affinity runs on the default CPU: the highest-numbered CPU the process
/// may use, shared by every such thread, as on Hourglass's uniprocessor, leaving the lowest free
/// CPU to the main thread. SCHED_DEADLINE threads cannot be pinned (the kernel requires their
/// affinity to span the root domain) and float over every CPU. A real-time thread that never
/// blocks owns its CPU: if such threads could occupy every CPU the process may use, the machine
/// could starve, so the plan is refused unless it allows that.
pub fn place(plan: &RunPlan, allowed: &[usize]) -> Result<Placement, PlacementError> {
    let allowed_list = CpuList::from_cpus(allowed.iter().copied()).ok_or(PlacementError::NoCpu)?;
    let default_cpu = allowed.iter().copied().max().unwrap_or(0);
    let mut threads = Vec::with_capacity(plan.threads.len());
    for t in &plan.threads {
        let cpus = if t.policy.is_deadline() {
            None
        } else if let Some(a) = &t.affinity {
            if !a.is_subset(&allowed_list) {
                return Err(PlacementError::Affinity {
                    thread: t.index,
                    cpus: a.clone(),
                    allowed: allowed_list,
                });
            }
            Some(a.clone())
        } else {
            CpuList::from_cpus([default_cpu])
        };
        threads.push(cpus);
    }
    let pinned_union = threads.iter().flatten().fold(None::<CpuList>, |acc, c| {
        Some(acc.map_or(c.clone(), |a| a.union(c)))
    });
    let floats = threads.iter().any(Option::is_none);
    let measured = if floats {
        allowed_list.clone()
    } else {
        pinned_union.clone().unwrap_or_else(|| allowed_list.clone())
    };

    let busy_union = plan
        .threads
        .iter()
        .zip(&threads)
        .filter(|(t, _)| rt_busy(t))
        .map(|(_, c)| c.clone().unwrap_or_else(|| allowed_list.clone()))
        .fold(None::<CpuList>, |acc, c| {
            Some(acc.map_or(c.clone(), |a| a.union(&c)))
        });
    if let Some(busy) = busy_union {
        if allowed_list.is_subset(&busy) && !plan.allow_rt_busy {
            return Err(PlacementError::Starves { busy });
        }
    }

    let main_cpu = match plan.main_cpu {
        Some(c) if !allowed_list.contains(c) => {
            return Err(PlacementError::MainCpu {
                cpu: c,
                allowed: allowed_list,
            })
        }
        Some(c) => Some(c),
        None => allowed
            .iter()
            .copied()
            .find(|&c| !pinned_union.as_ref().is_some_and(|u| u.contains(c))),
    };
    Ok(Placement {
        threads,
        default_cpu,
        main_cpu,
        measured,
    })
}

/// The SMT siblings of the measured CPUs that no measuring thread uses: work on them during
/// the run slows the measured threads (see [`crate::system::CpuTimes`]).
#[cfg(feature = "linux")]
pub fn idle_siblings(placement: &Placement) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for cpu in placement.measured.iter() {
        if let Some(sib) = crate::system::smt_siblings(cpu) {
            for other in sib.iter() {
                if other != cpu && !placement.measured.contains(other) {
                    v.push((cpu, other));
                }
            }
        }
    }
    v
}

/// Warnings known before the run starts.
pub fn pre_run_warnings(
    plan: &RunPlan,
    placement: &Placement,
    sys: &SystemSnapshot,
    counter: &CounterInfo,
) -> Vec<Warning> {
    let mut w = Vec::new();
    if let Some(h) = &sys.virtualization {
        w.push(Warning::new(
            WarningKind::Virtualized,
            format!("this machine runs under a hypervisor ({h}): the host can stop a virtual CPU at any moment, and such stops appear as gaps that no guest code caused; compare runs on the same machine, and repeat them"),
        ));
    }
    if counter.kind == CounterKind::MonotonicRaw {
        w.push(Warning::new(
            WarningKind::CounterFallback,
            format!("polling CLOCK_MONOTONIC_RAW, not the cycle counter ({}): each read costs more, so the smallest detectable gap is larger", counter.reason),
        ));
    }
    let busy: Vec<usize> = plan
        .threads
        .iter()
        .filter(|t| rt_busy(t))
        .map(|t| t.index)
        .collect();
    if !busy.is_empty() {
        let list = busy
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        match (sys.rt_runtime_us, sys.rt_period_us) {
            (Some(-1), _) => w.push(Warning::new(
                WarningKind::RtThrottlingDisabled,
                format!("RT throttling is disabled (sched_rt_runtime_us = -1): real-time thread(s) {list} never block and will own their CPU until the run ends; the watchdog still stops them"),
            )),
            (Some(rt), Some(period)) if rt < period => w.push(Warning::new(
                WarningKind::RtThrottling,
                format!("RT throttling (sched_rt_runtime_us = {rt} of {period}) will stop real-time thread(s) {list}, which never block, for {} ms of every {} ms: those gaps are the kernel's limit, not interference", (period - rt) / 1000, period / 1000),
            )),
            _ => {}
        }
    }
    if placement.main_cpu.is_none() {
        let sampler = if plan.sample_hz > 0 {
            format!(
                " and take the /proc sampler's {} snapshots a second (at 10 a second they take about 0.15% of one CPU; docs/causes.md)",
                plan.sample_hz
            )
        } else {
            String::new()
        };
        w.push(Warning::new(
            WarningKind::SharedCpu,
            format!("no CPU is free of measuring threads, so the main thread shares a CPU with them; it sleeps between short turns that stream the samples to the store{sampler}"),
        ));
    }
    let floating: Vec<String> = plan
        .threads
        .iter()
        .zip(&placement.threads)
        .filter(|(_, c)| c.is_none())
        .map(|(t, _)| t.index.to_string())
        .collect();
    if !floating.is_empty() && plan.threads.len() > 1 {
        w.push(Warning::new(
            WarningKind::DeadlineFloats,
            format!("SCHED_DEADLINE thread(s) {} run on every CPU ({}), not on one shared CPU: the kernel requires a deadline task's affinity to span its root domain", floating.join(", "), placement.measured),
        ));
    }
    let governors: Vec<String> = sys
        .cpufreq_governors
        .iter()
        .filter(|(g, _)| g.as_str() != "performance")
        .map(|(g, c)| format!("{g} on CPU {c}"))
        .collect();
    if !governors.is_empty() {
        w.push(Warning::new(
            WarningKind::FrequencyScaling,
            format!("CPU frequency governor {}: the counter ticks at a constant rate but the work per tick varies; set the governor to performance (cpupower frequency-set -g performance)", governors.join(", ")),
        ));
    }
    w
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A plan of threads described as `(policy, workload, timer, affinity)`.
    pub(crate) fn plan_of(threads: &[(&str, Workload, TimerKind, Option<&str>)]) -> RunPlan {
        RunPlan {
            kind: crate::RunKind::Unknown("test".into()),
            threads: threads
                .iter()
                .enumerate()
                .map(|(index, (p, w, timer, aff))| ThreadSpec {
                    index,
                    priority_text: p.to_string(),
                    policy: Policy::parse(p).expect("policy"),
                    reservation: None,
                    workload: *w,
                    timer: *timer,
                    start_ns: Nanos::ZERO,
                    finish_ns: Nanos::from_millis(100),
                    affinity: aff.map(|a| CpuList::parse(a).expect("cpus")),
                })
                .collect(),
            duration_ns: Nanos::from_millis(100),
            gap_ns: None,
            gap_histogram: false,
            gap_stats: false,
            memmove_bytes: 0,
            ring_records: 4096,
            counter: CounterChoice::Auto,
            main_cpu: None,
            allow_rt_busy: false,
            cpu_dma_latency_us: None,
            loads: LoadPlan::default(),
            sample_hz: 0,
            trace: None,
            threshold: None,
            output_dir: None,
            config: serde_json::Value::Null,
        }
    }

    const CPU: Workload = Workload::Cpu;
    const HR: TimerKind = TimerKind::Hr;

    #[test]
    fn default_is_one_shared_cpu_and_a_free_main_cpu() {
        let p = place(
            &plan_of(&[("o:0", CPU, HR, None), ("o:0", CPU, HR, None)]),
            &[0, 1, 2, 3],
        )
        .expect("place");
        assert!(p
            .threads
            .iter()
            .all(|c| c.as_ref().map(|l| l.to_vec()) == Some(vec![3])));
        assert_eq!(p.main_cpu, Some(0));
        assert_eq!(p.measured.to_vec(), vec![3]);
    }

    #[test]
    fn deadline_threads_float_and_affinity_is_checked() {
        let periodic = Workload::Periodic {
            amount_ns: Nanos::from_millis(3),
            period_ns: Nanos::from_millis(8),
        };
        let p = place(&plan_of(&[("d:3100us:8ms", periodic, HR, None)]), &[0, 1]).expect("place");
        assert_eq!(p.threads[0], None);
        assert_eq!(p.measured.to_vec(), vec![0, 1]);
        let e = place(&plan_of(&[("o:0", CPU, HR, Some("7"))]), &[0, 1]).expect_err("cpu 7");
        assert!(e.to_string().contains("allowed: 0-1"), "{e}");
        let mut p = plan_of(&[("o:0", CPU, HR, None)]);
        p.main_cpu = Some(9);
        let e = place(&p, &[0, 1]).expect_err("cpu 9");
        assert!(e.to_string().contains("--main-cpu 9"), "{e}");
    }

    #[test]
    fn rt_busy_everywhere_is_refused_without_the_option() {
        let both = plan_of(&[
            ("f:95", CPU, HR, Some("0-1")),
            ("f:95", CPU, HR, Some("0-1")),
        ]);
        let e = place(&both, &[0, 1]).expect_err("starves");
        assert!(e.to_string().contains("--allow-rt-busy"), "{e}");
        let mut allowed = both.clone();
        allowed.allow_rt_busy = true;
        place(&allowed, &[0, 1]).expect("allowed");
        // One CPU left free: fine.
        place(&plan_of(&[("f:95", CPU, HR, None)]), &[0, 1]).expect("one cpu busy");
        // A single-CPU machine: a real-time busy thread needs the option.
        assert!(place(&plan_of(&[("f:95", CPU, HR, None)]), &[0]).is_err());
        // Blocking real-time threads are fine everywhere...
        let lat = Workload::Lat {
            period_ns: Nanos::from_millis(1),
        };
        place(&plan_of(&[("f:95", lat, HR, None)]), &[0]).expect("blocks");
        // ... unless they spin on the BUSY timer.
        assert!(place(&plan_of(&[("f:95", lat, TimerKind::Busy, None)]), &[0]).is_err());
    }

    #[test]
    fn rt_throttling_is_reported_for_busy_real_time_threads() {
        let counter = CounterInfo {
            kind: CounterKind::Tsc,
            rdtscp: true,
            reason: "test".into(),
        };
        let kinds = |rt: Option<i64>, policy: &str| -> Vec<WarningKind> {
            let mut sys = crate::system::snapshot();
            sys.rt_runtime_us = rt;
            sys.rt_period_us = Some(1_000_000);
            let p = plan_of(&[(policy, CPU, HR, None)]);
            let placed = place(&p, &[0, 1]).expect("place");
            pre_run_warnings(&p, &placed, &sys, &counter)
                .into_iter()
                .map(|w| w.kind)
                .collect()
        };
        assert!(kinds(Some(-1), "f:95").contains(&WarningKind::RtThrottlingDisabled));
        assert!(kinds(Some(950_000), "f:95").contains(&WarningKind::RtThrottling));
        let k = kinds(Some(-1), "o:0");
        assert!(!k.contains(&WarningKind::RtThrottlingDisabled), "{k:?}");
        assert!(!k.contains(&WarningKind::RtThrottling), "{k:?}");
    }

    #[test]
    fn faults_are_parsed_from_their_text() {
        assert_eq!(Faults::parse("stuck-thread=2").stuck_thread, Some(2));
        assert!(Faults::parse("fail-after-trace-start").fail_after_trace_start);
        assert_eq!(Faults::parse("nonsense"), Faults::default());
    }

    #[test]
    fn threshold_actions() {
        assert_eq!(ThresholdAction::parse("mark"), Ok(ThresholdAction::Mark));
        assert_eq!(
            ThresholdAction::parse("shell:echo hi"),
            Ok(ThresholdAction::Shell("echo hi".into()))
        );
        let e = ThresholdAction::parse("shell: ").expect_err("empty");
        assert!(e.to_string().contains("shell:COMMAND"), "{e}");
    }
}
