//! The configuration scan of `sandglass check`: what rtcqs checks for live audio and what
//! tuned's `realtime` and `latency-performance` profiles set, each finding with its reason, its
//! effect on the workload and the exact command that changes it (docs/check.md lists every
//! check with its source).
//!
//! [`gather`] reads the machine into [`Facts`]; [`findings`] is a pure function of the facts,
//! the measured CPU and the workload's slack, tested on hand-made facts.

use crate::cpulist::CpuList;
use crate::units::Nanos;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One idle state of the measured CPU (`/sys/devices/system/cpu/cpuN/cpuidle/stateK`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IdleState {
    pub name: String,
    /// Exit latency, µs.
    pub latency_us: u64,
    pub disabled: bool,
}

/// What the scan reads from the machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Facts {
    /// The measured CPU.
    pub cpu: usize,
    /// `none`, `voluntary`, `full`, `lazy`, `rt` or `unknown`, and whether it can be changed
    /// at boot (`preempt=`).
    pub preemption: String,
    pub preempt_dynamic: bool,
    pub cmdline: String,
    /// The measured CPU's cpufreq governor, when it has cpufreq.
    pub governor: Option<String>,
    /// Turbo/boost enabled (`cpufreq/boost` or `intel_pstate/no_turbo`).
    pub boost: Option<bool>,
    pub idle_states: Vec<IdleState>,
    pub smt_active: Option<bool>,
    /// `/sys/devices/system/cpu/isolated` and `nohz_full`.
    pub isolated: String,
    pub nohz_full: String,
    /// `sched_rt_runtime_us` and `sched_rt_period_us`.
    pub rt_runtime_us: Option<i64>,
    pub rt_period_us: Option<i64>,
    pub euid: u32,
    pub cap_sys_nice: bool,
    /// RLIMIT_RTPRIO and RLIMIT_MEMLOCK soft limits (`None`: unlimited).
    pub rlimit_rtprio: Option<u64>,
    pub rlimit_memlock_bytes: Option<u64>,
    pub swappiness: Option<u64>,
    /// The active transparent huge page mode (`always`, `madvise`, `never`).
    pub thp: Option<String>,
    pub irqbalance_running: bool,
    /// Device interrupts that fired on the measured CPU since boot: (number, name, count).
    pub irqs_on_cpu: Vec<(String, String, u64)>,
    pub timer_migration: Option<bool>,
    /// The hypervisor, when under one.
    pub virtualization: Option<String>,
}

/// How a finding bears on the workload.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Can by itself cost more than a tenth of the workload's slack.
    Problem,
    /// Recommended for real-time work; a smaller or indirect effect.
    Advice,
    /// Not readable here.
    Unknown,
    /// As recommended.
    Ok,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Problem => "problem",
            Status::Advice => "advice",
            Status::Unknown => "unknown",
            Status::Ok => "ok",
        }
    }
}

/// One configuration check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// A stable name: `preemption`, `threadirqs`, `governor`, ...
    pub id: String,
    pub status: Status,
    /// What was read: `none (CONFIG_PREEMPT_DYNAMIC: preempt= can change it)`.
    pub observed: String,
    /// Why it matters for timing.
    pub reason: String,
    /// Its effect: measured where sandglass measured it, else as documented.
    pub effect: String,
    /// The largest delay it can add, where known (for ranking).
    pub effect_ns: Option<u64>,
    /// The command (or boot parameter) that changes it.
    pub fix: Option<String>,
    /// Where the recommendation comes from.
    pub source: String,
}

fn read(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel.trim_start_matches('/')))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The active mode in text such as `always [madvise] never`.
pub fn bracketed(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_string())
}

/// Device interrupts (numbered lines) of `/proc/interrupts` text that fired on `cpu`:
/// (number, name, count), largest count first.
pub fn parse_irqs_on(text: &str, cpu: usize) -> Vec<(String, String, u64)> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let Some(col) = header
        .split_whitespace()
        .position(|c| c == format!("CPU{cpu}"))
    else {
        return Vec::new();
    };
    let ncpus = header.split_whitespace().count();
    let mut out = Vec::new();
    for l in lines {
        let Some((num, rest)) = l.trim_start().split_once(':') else {
            continue;
        };
        if num.parse::<u32>().is_err() {
            continue;
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let Some(count) = fields.get(col).and_then(|c| c.parse::<u64>().ok()) else {
            continue;
        };
        if count == 0 {
            continue;
        }
        let name = fields.get(ncpus..).map(|f| f.join(" ")).unwrap_or_default();
        out.push((num.to_string(), name, count));
    }
    out.sort_by_key(|x| std::cmp::Reverse(x.2));
    out
}

/// Whether a process named `name` runs, from `/proc/*/comm` under `root`.
fn running(root: &Path, name: &str) -> bool {
    let Ok(dir) = std::fs::read_dir(root.join("proc")) else {
        return false;
    };
    dir.flatten().any(|e| {
        e.file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
            && std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name)
    })
}

/// Reads the facts of `cpu` from the machine (`root` is `/` but for tests).
pub fn gather(root: &Path, cpu: usize, snapshot: &crate::system::SystemSnapshot) -> Facts {
    let cpudir = format!("sys/devices/system/cpu/cpu{cpu}");
    let mut idle_states = Vec::new();
    for k in 0..32 {
        let base = format!("{cpudir}/cpuidle/state{k}");
        let Some(name) = read(root, &format!("{base}/name")) else {
            break;
        };
        idle_states.push(IdleState {
            name,
            latency_us: read(root, &format!("{base}/latency"))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            disabled: read(root, &format!("{base}/disable")).as_deref() == Some("1"),
        });
    }
    let boost = read(root, "sys/devices/system/cpu/cpufreq/boost")
        .map(|v| v == "1")
        .or_else(|| read(root, "sys/devices/system/cpu/intel_pstate/no_turbo").map(|v| v == "0"));
    Facts {
        cpu,
        preemption: snapshot.preemption.model.clone(),
        preempt_dynamic: snapshot.preemption.dynamic,
        cmdline: snapshot.cmdline.clone(),
        governor: read(root, &format!("{cpudir}/cpufreq/scaling_governor")),
        boost,
        idle_states,
        smt_active: snapshot.smt_active,
        isolated: snapshot.isolated_cpus.clone(),
        nohz_full: snapshot.nohz_full.clone(),
        rt_runtime_us: snapshot.rt_runtime_us,
        rt_period_us: snapshot.rt_period_us,
        euid: snapshot.privileges.euid,
        cap_sys_nice: snapshot.privileges.cap_sys_nice,
        rlimit_rtprio: snapshot.privileges.rlimit_rtprio,
        rlimit_memlock_bytes: snapshot.privileges.rlimit_memlock_bytes,
        swappiness: read(root, "proc/sys/vm/swappiness").and_then(|v| v.parse().ok()),
        thp: read(root, "sys/kernel/mm/transparent_hugepage/enabled").and_then(|t| bracketed(&t)),
        irqbalance_running: running(root, "irqbalance"),
        irqs_on_cpu: read(root, "proc/interrupts")
            .map(|t| parse_irqs_on(&t, cpu))
            .unwrap_or_default(),
        timer_migration: read(root, "proc/sys/kernel/timer_migration").map(|v| v == "1"),
        virtualization: snapshot.virtualization.clone(),
    }
}

fn cmdline_has(cmdline: &str, key: &str) -> Option<String> {
    cmdline.split_whitespace().find_map(|w| {
        if w == key {
            Some(String::new())
        } else {
            w.strip_prefix(key)
                .and_then(|r| r.strip_prefix('='))
                .map(String::from)
        }
    })
}

/// Whether `cpu` is in a CPU list given as a boot parameter or a sysfs list (`isolcpus=`
/// may carry flags before the list: `managed_irq,domain,2-3`).
fn cpu_in(list: &str, cpu: usize) -> bool {
    let list = list
        .split(',')
        .filter(|p| p.starts_with(|c: char| c.is_ascii_digit()))
        .collect::<Vec<_>>()
        .join(",");
    CpuList::parse(&list).is_ok_and(|l| l.contains(cpu))
}

#[allow(clippy::too_many_arguments)]
fn finding(
    id: &str,
    status: Status,
    observed: impl Into<String>,
    reason: &str,
    effect: impl Into<String>,
    effect_ns: Option<u64>,
    fix: Option<String>,
    source: &str,
) -> Finding {
    Finding {
        id: id.to_string(),
        status,
        observed: observed.into(),
        reason: reason.to_string(),
        effect: effect.into(),
        effect_ns,
        fix,
        source: source.to_string(),
    }
}

/// Idle states that exit within this many µs are harmless (tuned's latency-performance
/// profile keeps states up to this exit latency).
const SHALLOW_IDLE_US: u64 = 10;

const RTCQS: &str = "rtcqs (linux audio real-time configuration checker)";
const TUNED_RT: &str = "tuned realtime profile";
const TUNED_LAT: &str = "tuned latency-performance profile";

/// Every check on `f`, for a workload whose slack is `slack` and that runs at SCHED_FIFO
/// `priority`: problems first, then advice, unknowns and what is as recommended.
pub fn findings(f: &Facts, slack: Nanos, priority: u32) -> Vec<Finding> {
    let tenth = slack.0 / 10;
    let severity = |effect_ns: u64| {
        if effect_ns > tenth {
            Status::Problem
        } else {
            Status::Advice
        }
    };
    let cpu = f.cpu;
    let mut out = Vec::new();

    // Preemption model.
    let preempt_fix = if f.preempt_dynamic {
        "add preempt=full to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot), or boot a PREEMPT_RT kernel (linux-image-rt-amd64 on Debian)".to_string()
    } else {
        "boot a kernel built with CONFIG_PREEMPT or PREEMPT_RT (linux-image-rt-amd64 on Debian, linux-realtime on Ubuntu Pro)".to_string()
    };
    let reason = "without preemption a task waking on a CPU waits until the kernel code running there returns to user space or yields";
    match f.preemption.as_str() {
        "rt" => out.push(finding("preemption", Status::Ok, "PREEMPT_RT", reason, "kernel code is preemptible nearly everywhere; interrupt handlers run as threads", None, None, RTCQS)),
        "full" | "lazy" => out.push(finding("preemption", Status::Ok, f.preemption.clone(), reason, "kernel code is preemptible outside of spinlocks and interrupt-disabled regions: latencies of tens of µs", None, None, RTCQS)),
        "none" | "voluntary" => {
            let effect = 2_000_000;
            out.push(finding(
                "preemption",
                severity(effect),
                format!("{}{}", f.preemption, if f.preempt_dynamic { " (CONFIG_PREEMPT_DYNAMIC: preempt= can change it)" } else { "" }),
                reason,
                "a long system call, page reclaim or file-system work on the CPU delays the wakeup until it ends: milliseconds, as the Hourglass paper measured on non-preemptive kernels",
                Some(effect),
                Some(preempt_fix),
                RTCQS,
            ));
        }
        other => out.push(finding("preemption", Status::Unknown, other, reason, "", None, None, RTCQS)),
    }

    // Threaded interrupts.
    let threaded = f.preemption == "rt" || cmdline_has(&f.cmdline, "threadirqs").is_some();
    out.push(finding(
        "threadirqs",
        if threaded { Status::Ok } else { Status::Advice },
        if threaded { "interrupt handlers run as threads" } else { "threadirqs is not on the kernel command line" },
        "with threaded interrupts, a device's handler runs as a SCHED_FIFO 50 thread that a higher-priority task preempts; without, it runs before anything else",
        "a slow device handler delays the wakeup by its whole length (see the handler table of `sandglass timer --trace`)",
        Some(100_000),
        (!threaded).then(|| "add threadirqs to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot)".to_string()),
        RTCQS,
    ));

    // Frequency governor and boost.
    match &f.governor {
        Some(g) if g == "performance" => out.push(finding("governor", Status::Ok, "performance", "a CPU that lowers its clock takes longer to serve the wakeup and to ramp back", "", None, None, RTCQS)),
        Some(g) => out.push(finding(
            "governor",
            Status::Advice,
            g.clone(),
            "a CPU that lowers its clock takes longer to serve the wakeup and to ramp back",
            "a frequency change stalls the CPU for tens of µs, and work after a wakeup runs slower until the clock rises",
            Some(50_000),
            Some(format!("cpupower -c {cpu} frequency-set -g performance (or: echo performance > /sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor)")),
            RTCQS,
        )),
        None => out.push(finding("governor", Status::Unknown, "no cpufreq (a virtual machine, or frequency set by firmware)", "a CPU that lowers its clock takes longer to serve the wakeup", "", None, None, RTCQS)),
    }
    if f.boost == Some(true) {
        out.push(finding(
            "boost",
            Status::Advice,
            "turbo/boost on",
            "boost clocks depend on temperature and on the other cores' load, so the same work takes varying time",
            "jitter in execution time rather than in wakeups; turn it off to measure or to run at a steady clock",
            None,
            Some("echo 0 > /sys/devices/system/cpu/cpufreq/boost (intel_pstate: echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo)".to_string()),
            TUNED_RT,
        ));
    }

    // Idle states.
    let deepest = f
        .idle_states
        .iter()
        .filter(|s| !s.disabled)
        .max_by_key(|s| s.latency_us);
    match deepest {
        Some(s) if s.latency_us > SHALLOW_IDLE_US => {
            let effect = s.latency_us * 1000;
            out.push(finding(
                "idle_states",
                if effect > tenth { Status::Problem } else { Status::Advice },
                format!("deepest enabled idle state of CPU {cpu}: {} with an exit latency of {} µs", s.name, s.latency_us),
                "a CPU waking from a deep idle state first restores its caches and clocks",
                format!("up to {} µs added to a wakeup that finds the CPU idle; a PM QoS request (/dev/cpu_dma_latency, as `sandglass timer --cpu-dma-latency 0` holds during its runs) keeps the CPU out of deep states", s.latency_us),
                Some(effect),
                Some(format!("cpupower -c {cpu} idle-set -D {SHALLOW_IDLE_US} (or hold /dev/cpu_dma_latency open at 0 in the application, or boot with processor.max_cstate=1 intel_idle.max_cstate=0)")),
                TUNED_LAT,
            ));
        }
        Some(s) => out.push(finding("idle_states", Status::Ok, format!("CPU {cpu}: the deepest enabled idle state, {}, exits within {} µs", s.name, s.latency_us), "a CPU waking from a deep idle state first restores its caches and clocks", "", None, None, TUNED_LAT)),
        None => out.push(finding("idle_states", Status::Unknown, format!("CPU {cpu} has no cpuidle states listed (a virtual machine idles by halting, and the host decides)"), "a CPU waking from a deep idle state first restores its caches and clocks", "", None, None, TUNED_LAT)),
    }

    // SMT.
    match f.smt_active {
        Some(true) => out.push(finding(
            "smt",
            Status::Advice,
            "SMT (hyper-threading) active",
            "two hardware threads of a core share its execution units and caches",
            "work on the sibling slows the workload's thread, by up to half; a measurement with a load on the sibling shows how much",
            Some(20_000),
            Some("echo off > /sys/devices/system/cpu/smt/control (or boot with nosmt), or keep the sibling of the workload's CPU idle".to_string()),
            TUNED_RT,
        )),
        Some(false) => out.push(finding("smt", Status::Ok, "SMT off or absent", "two hardware threads of a core share its execution units", "", None, None, TUNED_RT)),
        None => {}
    }

    // Isolation.
    let isolated = cpu_in(&f.isolated, cpu)
        || cmdline_has(&f.cmdline, "isolcpus").is_some_and(|l| cpu_in(&l, cpu));
    let nohz = cpu_in(&f.nohz_full, cpu)
        || cmdline_has(&f.cmdline, "nohz_full").is_some_and(|l| cpu_in(&l, cpu));
    let nocb = cmdline_has(&f.cmdline, "rcu_nocbs").is_some_and(|l| cpu_in(&l, cpu));
    let missing: Vec<&str> = [
        ("isolcpus", isolated),
        ("nohz_full", nohz),
        ("rcu_nocbs", nocb),
    ]
    .iter()
    .filter(|(_, on)| !on)
    .map(|(n, _)| *n)
    .collect();
    out.push(finding(
        "isolation",
        if missing.is_empty() { Status::Ok } else { Status::Advice },
        if missing.is_empty() {
            format!("CPU {cpu} is isolated, tickless and without RCU callbacks")
        } else {
            format!("CPU {cpu} is not in {}", missing.join(", "))
        },
        "an isolated CPU runs only what is placed on it: no other task, fewer timer ticks and no RCU callback work",
        "other tasks, the tick and RCU callbacks interrupt the workload; the noise measurement (`sandglass noise`) shows how much",
        Some(20_000),
        (!missing.is_empty()).then(|| format!("boot with isolcpus=managed_irq,domain,{cpu} nohz_full={cpu} rcu_nocbs={cpu} and run the workload on CPU {cpu} (tuned: isolated_cores={cpu} in /etc/tuned/realtime-variables.conf, then tuned-adm profile realtime)")),
        TUNED_RT,
    ));

    // RT throttling.
    match (f.rt_runtime_us, f.rt_period_us) {
        (Some(-1), _) => out.push(finding("rt_throttling", Status::Advice, "off (sched_rt_runtime_us = -1)", "RT throttling keeps a runaway real-time task from freezing the machine", "off, a busy-looping SCHED_FIFO task can starve everything on its CPU, including the kernel threads the machine needs", None, Some("sysctl kernel.sched_rt_runtime_us=950000".to_string()), "kernel documentation, sched-rt-group")),
        (Some(run), Some(per)) => out.push(finding("rt_throttling", Status::Ok, format!("real-time tasks may use {run} µs of every {per} µs"), "RT throttling keeps a runaway real-time task from freezing the machine", "a workload using less than that share is never throttled", None, None, "kernel documentation, sched-rt-group")),
        _ => out.push(finding("rt_throttling", Status::Unknown, "not readable", "RT throttling keeps a runaway real-time task from freezing the machine", "", None, None, "kernel documentation, sched-rt-group")),
    }

    // Limits of the caller.
    let rtprio_ok =
        f.euid == 0 || f.cap_sys_nice || f.rlimit_rtprio.is_none_or(|l| l >= u64::from(priority));
    out.push(finding(
        "rtprio_limit",
        if rtprio_ok { Status::Ok } else { Status::Problem },
        match f.rlimit_rtprio {
            None => "unlimited".to_string(),
            Some(l) => format!("{l}{}", if f.euid == 0 { " (root: not enforced)" } else { "" }),
        },
        "a user without a real-time priority limit runs the workload at SCHED_OTHER, behind every other task",
        format!("the workload needs SCHED_FIFO {priority}"),
        (!rtprio_ok).then_some(slack.0),
        (!rtprio_ok).then(|| "add the user to the audio group with '@audio - rtprio 95' in /etc/security/limits.d/audio.conf (then log in again)".to_string()),
        RTCQS,
    ));
    let memlock_ok = f.euid == 0 || f.rlimit_memlock_bytes.is_none();
    out.push(finding(
        "memlock_limit",
        if memlock_ok { Status::Ok } else { Status::Advice },
        match f.rlimit_memlock_bytes {
            None => "unlimited".to_string(),
            Some(b) => format!("{} KiB{}", b / 1024, if f.euid == 0 { " (root: not enforced)" } else { "" }),
        },
        "memory that cannot be locked can be paged out, and a page fault in the workload's path waits for the disk",
        "a major page fault costs milliseconds",
        None,
        (!memlock_ok).then(|| "'@audio - memlock unlimited' in /etc/security/limits.d/audio.conf (then log in again)".to_string()),
        RTCQS,
    ));

    // Memory.
    match f.swappiness {
        Some(s) if s > 10 => out.push(finding(
            "swappiness",
            Status::Advice,
            s.to_string(),
            "a high swappiness pages out application memory early",
            "a page fault on swapped-out memory waits for the disk: milliseconds",
            None,
            Some("sysctl vm.swappiness=10".to_string()),
            RTCQS,
        )),
        Some(s) => out.push(finding(
            "swappiness",
            Status::Ok,
            s.to_string(),
            "a high swappiness pages out application memory early",
            "",
            None,
            None,
            RTCQS,
        )),
        None => {}
    }
    match f.thp.as_deref() {
        Some("always") => out.push(finding("thp", Status::Advice, "always", "transparent huge pages make the kernel compact memory and collapse pages behind the application's back", "compaction and khugepaged stall page faults and take CPU time on any CPU", None, Some("echo never > /sys/kernel/mm/transparent_hugepage/enabled (or boot with transparent_hugepage=never)".to_string()), TUNED_RT)),
        Some(m) => out.push(finding("thp", Status::Ok, m, "transparent huge pages make the kernel compact memory behind the application's back", "", None, None, TUNED_RT)),
        None => {}
    }

    // Interrupts.
    let devices: Vec<String> = f
        .irqs_on_cpu
        .iter()
        .take(3)
        .map(|(n, name, c)| format!("IRQ {n} {name} ({c})"))
        .collect();
    if f.irqs_on_cpu.is_empty() {
        out.push(finding(
            "irq_affinity",
            Status::Ok,
            format!("no device interrupt has fired on CPU {cpu}"),
            "a device interrupt runs its handler on the CPU it is routed to, before any task",
            "",
            None,
            None,
            TUNED_RT,
        ));
    } else {
        let first = &f.irqs_on_cpu[0].0;
        out.push(finding(
            "irq_affinity",
            Status::Advice,
            format!("{} device interrupt(s) fire on CPU {cpu}: {}", f.irqs_on_cpu.len(), devices.join(", ")),
            "a device interrupt runs its handler on the CPU it is routed to, before any task",
            "each takes microseconds, longer for network and storage under load",
            Some(10_000),
            Some(format!("route them elsewhere: echo {} > /proc/irq/{first}/smp_affinity_list (likewise for each), and stop irqbalance from moving them back", other_cpus(cpu))),
            TUNED_RT,
        ));
    }
    if f.irqbalance_running {
        out.push(finding(
            "irqbalance",
            Status::Advice,
            "irqbalance is running",
            "irqbalance moves device interrupts between CPUs every 10 s, onto the workload's CPU too",
            "interrupts that were routed away come back",
            None,
            Some(format!("IRQBALANCE_BANNED_CPULIST={cpu} in /etc/default/irqbalance (then systemctl restart irqbalance), or systemctl disable --now irqbalance")),
            TUNED_RT,
        ));
    }
    match f.timer_migration {
        Some(true) => out.push(finding("timer_migration", Status::Advice, "on", "with timer migration, timers of idle CPUs move to busy ones, the workload's among them", "other tasks' timers expire on the workload's CPU", None, Some("sysctl kernel.timer_migration=0".to_string()), TUNED_RT)),
        Some(false) => out.push(finding("timer_migration", Status::Ok, "off", "with timer migration, timers of idle CPUs move to busy ones", "", None, None, TUNED_RT)),
        None => {}
    }

    // Virtualisation.
    if let Some(h) = &f.virtualization {
        out.push(finding(
            "virtualization",
            Status::Problem,
            format!("running under {h}"),
            "the hypervisor schedules this machine's CPUs and delivers its timer interrupts; it can stop a CPU (steal) or deliver a timer late, and nothing inside the guest sees why",
            "what this run measured of it is under the culprits: late timer interrupts and steal",
            Some(slack.0),
            Some("run on bare metal, or pin each vCPU to a dedicated host core with the host's idle polling (KVM: vcpupin, isolcpus on the host, halt_poll_ns)".to_string()),
            "rtla and cyclictest documentation on virtual machines",
        ));
    }

    out.sort_by(|a, b| {
        a.status
            .cmp(&b.status)
            .then(b.effect_ns.unwrap_or(0).cmp(&a.effect_ns.unwrap_or(0)))
    });
    out
}

fn other_cpus(cpu: usize) -> String {
    if cpu == 0 {
        "1".to_string()
    } else {
        "0".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuned() -> Facts {
        Facts {
            cpu: 3,
            preemption: "rt".into(),
            cmdline:
                "BOOT_IMAGE=/vmlinuz isolcpus=managed_irq,domain,2-3 nohz_full=2-3 rcu_nocbs=2-3"
                    .into(),
            governor: Some("performance".into()),
            boost: Some(false),
            idle_states: vec![
                IdleState {
                    name: "POLL".into(),
                    latency_us: 0,
                    disabled: false,
                },
                IdleState {
                    name: "C6".into(),
                    latency_us: 133,
                    disabled: true,
                },
            ],
            smt_active: Some(false),
            isolated: "2-3".into(),
            nohz_full: "2-3".into(),
            rt_runtime_us: Some(950_000),
            rt_period_us: Some(1_000_000),
            euid: 1000,
            rlimit_rtprio: Some(95),
            rlimit_memlock_bytes: None,
            swappiness: Some(10),
            thp: Some("madvise".into()),
            timer_migration: Some(false),
            ..Facts::default()
        }
    }

    #[test]
    fn a_tuned_machine_has_nothing_to_fix() {
        let f = findings(&tuned(), Nanos::from_millis(1), 88);
        let not_ok: Vec<_> = f
            .iter()
            .filter(|x| x.status != Status::Ok && x.status != Status::Unknown)
            .collect();
        assert!(not_ok.is_empty(), "{not_ok:#?}");
    }

    #[test]
    fn each_departure_is_found_with_its_fix() {
        let f = Facts {
            preemption: "none".into(),
            preempt_dynamic: true,
            cmdline: "BOOT_IMAGE=/vmlinuz".into(),
            governor: Some("powersave".into()),
            boost: Some(true),
            idle_states: vec![IdleState {
                name: "C6".into(),
                latency_us: 133,
                disabled: false,
            }],
            smt_active: Some(true),
            isolated: String::new(),
            nohz_full: String::new(),
            rlimit_rtprio: Some(0),
            swappiness: Some(60),
            thp: Some("always".into()),
            irqs_on_cpu: vec![("24".into(), "PCI-MSI eth0".into(), 1200)],
            irqbalance_running: true,
            timer_migration: Some(true),
            virtualization: Some("kvm".into()),
            ..tuned()
        };
        let all = findings(&f, Nanos::from_micros(500), 90);
        let get = |id: &str| {
            all.iter()
                .find(|x| x.id == id)
                .unwrap_or_else(|| panic!("{id}"))
        };
        assert_eq!(get("preemption").status, Status::Problem);
        assert!(get("preemption")
            .fix
            .as_deref()
            .is_some_and(|x| x.contains("preempt=full")));
        assert_eq!(
            get("idle_states").status,
            Status::Problem,
            "133 µs > a tenth of 500 µs"
        );
        assert!(get("idle_states")
            .fix
            .as_deref()
            .is_some_and(|x| x.contains("idle-set -D 10")));
        assert_eq!(get("rtprio_limit").status, Status::Problem);
        for id in [
            "threadirqs",
            "governor",
            "boost",
            "smt",
            "isolation",
            "swappiness",
            "thp",
            "irq_affinity",
            "irqbalance",
            "timer_migration",
        ] {
            assert_eq!(get(id).status, Status::Advice, "{id}");
            assert!(get(id).fix.is_some(), "{id}");
        }
        assert!(get("irq_affinity")
            .fix
            .as_deref()
            .is_some_and(|x| x.contains("/proc/irq/24/smp_affinity_list")));
        assert!(get("isolation")
            .observed
            .contains("isolcpus, nohz_full, rcu_nocbs"));
        // Problems first, the largest effect first among them.
        assert_eq!(all[0].status, Status::Problem);
        let firsts: Vec<&str> = all
            .iter()
            .take_while(|x| x.status == Status::Problem)
            .map(|x| x.id.as_str())
            .collect();
        assert_eq!(
            firsts,
            [
                "preemption",
                "rtprio_limit",
                "virtualization",
                "idle_states"
            ]
        );
    }

    #[test]
    fn interrupts_on_a_cpu_are_read_from_proc_interrupts() {
        let text = "           CPU0       CPU1       \n  0:         40          0   IO-APIC   2-edge      timer\n 24:          0       1200   PCI-MSI 65536-edge      eth0\n 25:          7          3   PCI-MSI 1-edge      nvme0q1\nLOC:     100000     200000   Local timer interrupts\n";
        let on1 = parse_irqs_on(text, 1);
        assert_eq!(on1.len(), 2);
        assert_eq!(on1[0].0, "24");
        assert_eq!(on1[0].2, 1200);
        assert!(on1[0].1.ends_with("eth0"), "{:?}", on1[0]);
        assert_eq!(parse_irqs_on(text, 0).len(), 2);
        assert!(parse_irqs_on(text, 5).is_empty());
        assert_eq!(
            bracketed("always [madvise] never").as_deref(),
            Some("madvise")
        );
    }

    #[test]
    fn isolcpus_flags_are_skipped() {
        assert!(cpu_in("managed_irq,domain,2-3", 3));
        assert!(!cpu_in("managed_irq,domain,2-3", 1));
        assert!(!cpu_in("", 0));
    }
}
