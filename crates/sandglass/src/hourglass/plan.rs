//! Where threads run, whether the run is safe, and what the user should know before it starts.
//!
//! Hourglass was written for a uniprocessor, and its experiments (priorities competing for the
//! CPU, context switches between ten threads, two periodic tasks sharing a processor in §5.5)
//! only mean what the paper says when the threads share one CPU. sandglass therefore pins every
//! thread to one measured CPU by default: the highest-numbered CPU the process may use, leaving
//! the lowest free CPU to the main (housekeeping) thread. `--affinity` places threads
//! elsewhere. SCHED_DEADLINE threads cannot be pinned (the kernel requires their affinity to
//! span the root domain) and float over every CPU.
//!
//! Safety: a real-time thread that never blocks owns its CPU. If such threads could occupy
//! every CPU the process may use, the machine could starve, so the plan is refused unless the
//! user passes `--allow-rt-busy`.

use super::cmdline::{HourglassSpec, ThreadSpec};
use crate::clock::{CounterInfo, CounterKind};
use crate::cpulist::CpuList;
use crate::model::TimerKind;
use crate::system::SystemSnapshot;
use crate::warning::{Warning, WarningKind};
use serde::{Deserialize, Serialize};

/// Where each thread and the main thread run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

/// True when `t` is real-time and never gives its CPU to lower priorities.
pub fn rt_busy(t: &ThreadSpec) -> bool {
    t.policy.is_realtime() && (t.workload.never_blocks() || t.timer == TimerKind::Busy)
}

/// Places the threads of `spec` on the CPUs in `allowed` (the process's affinity).
pub fn place(spec: &HourglassSpec, allowed: &[usize]) -> Result<Placement, String> {
    let allowed_list = CpuList::from_cpus(allowed.iter().copied())
        .ok_or_else(|| "this process may not run on any CPU".to_string())?;
    let default_cpu = allowed.iter().copied().max().unwrap_or(0);
    let mut threads = Vec::with_capacity(spec.threads.len());
    for t in &spec.threads {
        let cpus = if t.policy.is_deadline() {
            None
        } else if let Some(a) = &t.affinity {
            if !a.is_subset(&allowed_list) {
                return Err(format!(
                    "thread {}: --affinity {a} names a CPU this process may not use (allowed: {allowed_list})",
                    t.index
                ));
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

    let busy_union = spec
        .threads
        .iter()
        .zip(&threads)
        .filter(|(t, _)| rt_busy(t))
        .map(|(_, c)| c.clone().unwrap_or_else(|| allowed_list.clone()))
        .fold(None::<CpuList>, |acc, c| {
            Some(acc.map_or(c.clone(), |a| a.union(&c)))
        });
    if let Some(busy) = &busy_union {
        if allowed_list.is_subset(busy) && !spec.allow_rt_busy {
            return Err(format!(
                "real-time threads that never block would occupy every CPU this process may use ({busy}), which can starve the machine: leave a CPU free with --affinity, use a timesharing priority, or pass --allow-rt-busy to accept the risk"
            ));
        }
    }

    let main_cpu = match spec.main_cpu {
        Some(c) if !allowed_list.contains(c) => {
            return Err(format!(
                "--main-cpu {c}: this process may not use CPU {c} (allowed: {allowed_list})"
            ))
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
    spec: &HourglassSpec,
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
    let busy: Vec<usize> = spec
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
        w.push(Warning::new(
            WarningKind::SharedCpu,
            "no CPU is free of measuring threads, so the main thread shares a CPU with them; it only sleeps during the run",
        ));
    }
    let floating: Vec<String> = spec
        .threads
        .iter()
        .zip(&placement.threads)
        .filter(|(_, c)| c.is_none())
        .map(|(t, _)| t.index.to_string())
        .collect();
    if !floating.is_empty() && spec.threads.len() > 1 {
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
mod tests {
    use super::*;
    use crate::hourglass::cmdline::{parse, Command};

    fn spec(s: &str) -> HourglassSpec {
        let words: Vec<String> = s.split_whitespace().map(String::from).collect();
        match parse(&words) {
            Ok(Command::Run(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn default_is_one_shared_cpu_and_a_free_main_cpu() {
        let p = place(&spec("-n 3 -a -p NORMAL"), &[0, 1, 2, 3]).expect("place");
        assert!(p
            .threads
            .iter()
            .all(|c| c.as_ref().map(|l| l.to_vec()) == Some(vec![3])));
        assert_eq!(p.main_cpu, Some(0));
        assert_eq!(p.measured.to_vec(), vec![3]);
    }

    #[test]
    fn deadline_threads_float_and_affinity_is_checked() {
        let p = place(
            &spec("-n 2 -t 0 -w PERIODIC 3ms 8ms -rh 3.1ms 8ms"),
            &[0, 1],
        )
        .expect("place");
        assert_eq!(p.threads[0], None);
        assert_eq!(p.measured.to_vec(), vec![0, 1]);
        let e = place(&spec("-n 1 -t 0 --affinity 7"), &[0, 1]).expect_err("cpu 7");
        assert!(e.contains("allowed: 0-1"), "{e}");
        let e = place(&spec("-n 1 --main-cpu 9"), &[0, 1]).expect_err("cpu 9");
        assert!(e.contains("--main-cpu 9"), "{e}");
    }

    #[test]
    fn rt_busy_everywhere_is_refused_without_the_option() {
        let e = place(&spec("-n 2 -a -p RTHIGH --affinity 0-1"), &[0, 1]).expect_err("starves");
        assert!(e.contains("--allow-rt-busy"), "{e}");
        place(
            &spec("-n 2 -a -p RTHIGH --affinity 0-1 --allow-rt-busy"),
            &[0, 1],
        )
        .expect("allowed");
        // One CPU left free: fine.
        place(&spec("-n 2 -a -p RTHIGH"), &[0, 1]).expect("one cpu busy");
        // A single-CPU machine: a real-time busy thread needs the option.
        assert!(place(&spec("-n 1 -t 0 -p RTHIGH"), &[0]).is_err());
        // Blocking real-time threads are fine everywhere.
        place(&spec("-n 1 -t 0 -p RTHIGH -w LAT 1ms -i HR"), &[0]).expect("blocks");
        // ... unless they spin on the BUSY timer.
        assert!(place(&spec("-n 1 -t 0 -p RTHIGH -w LAT 1ms -i BUSY"), &[0]).is_err());
    }

    #[test]
    fn rt_throttling_is_reported_for_busy_real_time_threads() {
        let counter = crate::clock::CounterInfo {
            kind: CounterKind::Tsc,
            rdtscp: true,
            reason: "test".into(),
        };
        let kinds = |rt: Option<i64>, args: &str| -> Vec<WarningKind> {
            let mut sys = crate::system::snapshot();
            sys.rt_runtime_us = rt;
            sys.rt_period_us = Some(1_000_000);
            let s = spec(args);
            let p = place(&s, &[0, 1]).expect("place");
            pre_run_warnings(&s, &p, &sys, &counter)
                .into_iter()
                .map(|w| w.kind)
                .collect()
        };
        let busy = "-n 1 -t 0 -p RTHIGH";
        assert!(kinds(Some(-1), busy).contains(&WarningKind::RtThrottlingDisabled));
        assert!(kinds(Some(950_000), busy).contains(&WarningKind::RtThrottling));
        // Nothing to say without a real-time thread that never blocks.
        let k = kinds(Some(-1), "-n 1 -t 0 -p NORMAL");
        assert!(!k.contains(&WarningKind::RtThrottlingDisabled), "{k:?}");
        assert!(!k.contains(&WarningKind::RtThrottling), "{k:?}");
    }
}
