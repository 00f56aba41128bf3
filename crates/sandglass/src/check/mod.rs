//! `sandglass check`: can this machine, as configured, carry a workload? A configuration scan,
//! a measurement at the workload's period and priority, predictions with their intervals and
//! validity, and a verdict with the fixes ranked by expected effect.

pub mod config;
pub mod plan;
pub mod predict;
pub mod trial;
pub mod workload;

use crate::causes::attribute::Why;
use crate::causes::Causes;
use crate::units::Nanos;
use config::{Finding, Status};
use predict::{Predictions, Verdict};
use serde::{Deserialize, Serialize};
use workload::Workload;

/// The schema name of `check --json` and of `check.json` in the run directory.
pub const SCHEMA: &str = "sandglass-check/1";

/// What held the CPU while the workload's periods were late, from the run's own attribution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Culprit {
    /// `sg-hourglass-0:214`, `IRQ 24 eth0`, `timer interrupt late, cpu idle`.
    pub name: String,
    /// `thread`, `irq`, `softirq`, `nmi`, `timer` or `unexplained`.
    pub kind: String,
    /// For a thread: why it could delay the wakeup, and its policy.
    pub why: Option<String>,
    pub policy: Option<String>,
    /// Late periods it took part in, the time it took from them, its longest share.
    pub count: u64,
    pub stolen_ns: u64,
    pub max_ns: u64,
}

/// One thing to change, ranked by its expected effect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Fix {
    /// What to change, for people.
    pub what: String,
    /// Why: the evidence (measured in this run, or the finding's documented effect).
    pub why: String,
    /// The command that does it, when there is one.
    pub command: Option<String>,
    /// `measured` (a cause named in this run's late periods) or the finding's status.
    pub basis: String,
}

/// Everything `sandglass check` found: `check --json` and `check.json` in the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckReport {
    pub schema: String,
    pub workload: Workload,
    /// Computation per period (`--work`), subtracted from the slack.
    pub work_ns: Nanos,
    pub verdict: Verdict,
    pub predictions: Predictions,
    /// The measured CPU, the policy the workload's stand-in ran at, and the loads run beside it.
    pub cpu: usize,
    pub policy: String,
    pub loads: Vec<String>,
    pub run_id: String,
    pub run_dir: String,
    /// The run's state, and why it ended early when it did.
    pub run_state: String,
    pub end_detail: String,
    /// Whether the kernel's events were recorded (the culprits are then exact).
    pub traced: bool,
    /// The hypervisor's share of the measured CPU, when sampled.
    pub steal_share: Option<f64>,
    /// Delays at least this long were attributed (half the slack): the late periods and the
    /// near misses.
    pub explained_above_ns: Nanos,
    /// What held the CPU in those delays, largest first.
    pub culprits: Vec<Culprit>,
    pub findings: Vec<Finding>,
    pub fixes: Vec<Fix>,
    /// With `--try-fixes`: each fix sandglass could test, measured with that one change
    /// (empty without it).
    #[serde(default)]
    pub trials: Vec<trial::TrialResult>,
    /// Trials that could not be measured, each with why.
    #[serde(default)]
    pub trials_skipped: Vec<String>,
    /// For a check under a load: the same measurement without it, and what the load costs
    /// (`effect` `better` means better without the load). `null` without a load or with
    /// `--no-idle`.
    #[serde(default)]
    pub without_load: Option<trial::TrialResult>,
}

/// The culprits of a run's delays on `cpu`, largest share first: the kernel's attribution
/// when the run recorded it, else the /proc sampler's explanation of its largest delays.
pub fn culprits(causes: Option<&Causes>, cpu: usize) -> Vec<Culprit> {
    let Some(c) = causes else {
        return Vec::new();
    };
    if let Some(k) = &c.kernel {
        let mut out: Vec<Culprit> = k
            .causes
            .iter()
            .filter(|x| x.cpu == cpu)
            .map(|x| Culprit {
                name: x.name.clone(),
                kind: x.kind.as_str().to_string(),
                why: x.why.map(|w| w.as_str().to_string()),
                policy: x.policy.clone(),
                count: x.count,
                stolen_ns: x.stolen_ns,
                max_ns: x.max_ns,
            })
            .collect();
        out.sort_by_key(|x| std::cmp::Reverse(x.stolen_ns));
        return out;
    }
    let mut out: Vec<Culprit> = Vec::new();
    for s in c
        .explanation
        .iter()
        .flat_map(|e| &e.spikes)
        .filter(|s| s.cpu == cpu)
    {
        let name = match (s.abnormal.first(), &s.inferred) {
            (Some(a), _) => a.text(),
            (None, Some(i)) => i.text.clone(),
            (None, None) => "nothing unusual in the sampled counters".to_string(),
        };
        match out.iter_mut().find(|x| x.name == name) {
            Some(x) => {
                x.count += 1;
                x.stolen_ns += s.size_ns;
                x.max_ns = x.max_ns.max(s.size_ns);
            }
            None => out.push(Culprit {
                name,
                kind: "sampled".to_string(),
                why: None,
                policy: None,
                count: 1,
                stolen_ns: s.size_ns,
                max_ns: s.size_ns,
            }),
        }
    }
    out.sort_by_key(|x| std::cmp::Reverse(x.stolen_ns));
    out
}

/// Interrupt vectors that every CPU takes for itself and that cannot be routed elsewhere.
const PER_CPU_VECTORS: &[&str] = &[
    "local_timer",
    "call_function",
    "call_function_single",
    "reschedule",
    "irq_work",
    "thermal_apic",
    "spurious_apic",
    "error_apic",
    "x86_platform_ipi",
];

/// What a culprit's pid is at report time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcState {
    /// A user process, still there with the same command: it can be moved.
    Alive,
    /// A kernel thread: taskset and chrt cannot move most of them, and none should be.
    Kernel,
    /// Gone (or its pid now names another command): a short-lived process.
    Gone,
}

/// PF_KTHREAD in the flags of `/proc/PID/stat`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// What `/proc/PID/stat` (or its absence) says of a process that the trace named `comm`.
pub fn proc_state_of_stat(stat: Option<&str>, comm: &str) -> ProcState {
    let Some(stat) = stat else {
        return ProcState::Gone;
    };
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return ProcState::Gone;
    };
    let now = &stat[open + 1..close];
    // The trace's command may be cut to 15 bytes, as the kernel keeps it.
    if !now.starts_with(comm) && !comm.starts_with(now) {
        return ProcState::Gone;
    }
    let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // `f` starts at field 3 (state): ppid is field 4, flags field 9.
    let ppid: i64 = f.get(1).and_then(|x| x.parse().ok()).unwrap_or(-1);
    let flags: u64 = f.get(6).and_then(|x| x.parse().ok()).unwrap_or(0);
    if flags & PF_KTHREAD != 0 || ppid == 2 || ppid == 0 {
        ProcState::Kernel
    } else {
        ProcState::Alive
    }
}

/// What `pid` (named `comm` in the trace) is now, from `/proc`.
pub fn proc_state(pid: i32, comm: &str) -> ProcState {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    proc_state_of_stat(stat.as_deref(), comm)
}

/// The fix for one culprit on `cpu`, for a workload at SCHED_FIFO `priority`; `state` says
/// what a pid is now (given its command in the trace).
fn culprit_fix(
    c: &Culprit,
    cpu: usize,
    priority: u32,
    state: &dyn Fn(i32, &str) -> ProcState,
) -> Fix {
    let other = if cpu == 0 { 1 } else { 0 };
    let took = format!(
        "took {} in {} of the delays longer than half the slack (at most {} at once)",
        Nanos(c.stolen_ns),
        c.count,
        Nanos(c.max_ns)
    );
    let pid = c.name.rsplit_once(':').map(|(_, p)| p.to_string());
    let task = c
        .name
        .rsplit_once(':')
        .and_then(|(comm, p)| Some((comm, p.parse::<i32>().ok()?)))
        .filter(|_| c.kind == "thread")
        .map(|(comm, p)| (comm, state(p, comm)));
    let (what, command) = match (c.kind.as_str(), task) {
        ("thread", Some((comm, ProcState::Gone))) => (
            format!(
                "a short-lived process ({comm}) ran on CPU {cpu} and has exited since, so there is nothing to move: start such work on another CPU (taskset -c {other} COMMAND), or find what starts it"
            ),
            None,
        ),
        ("thread", Some((comm, ProcState::Kernel))) => (
            format!(
                "kernel thread {comm} ({}) ran on CPU {cpu} (cannot be moved with taskset; an isolated CPU gets little kernel work): isolate the workload's CPU",
                c.policy.as_deref().unwrap_or("its policy")
            ),
            Some(format!("boot with isolcpus=managed_irq,domain,{cpu} nohz_full={cpu} rcu_nocbs={cpu}")),
        ),
        _ => match c.kind.as_str() {
        "thread" if c.why.as_deref() == Some(Why::NonPreemptible.as_str()) => (
            format!("{} held CPU {cpu} in a kernel section that could not be preempted: a preemptible kernel (preempt=full, PREEMPT_RT) lets the workload in, or move the task to another CPU", c.name),
            pid.map(|p| format!("taskset -a -p -c {other} {p}")),
        ),
        "thread" => (
            format!(
                "{} ({}) ran on CPU {cpu} at a priority the workload's SCHED_FIFO {priority} cannot preempt: move it to another CPU, or lower it below the workload",
                c.name,
                c.policy.as_deref().unwrap_or("its policy")
            ),
            pid.map(|p| format!("taskset -a -p -c {other} {p}   # or: chrt -a -o -p 0 {p}")),
        ),
        "irq" if PER_CPU_VECTORS.contains(&c.name.as_str()) => (
            format!("per-CPU kernel work {} (the tick, inter-processor interrupts) ran on CPU {cpu}: an isolated, tickless CPU (isolcpus, nohz_full) gets little of it", c.name),
            Some(format!("boot with isolcpus=managed_irq,domain,{cpu} nohz_full={cpu} rcu_nocbs={cpu}")),
        ),
        "irq" => (
            format!("the interrupt handler of {} ran on CPU {cpu}: route the device's interrupt to another CPU (and with threadirqs its handler becomes a thread the workload can preempt)", c.name),
            Some(format!("grep -w '{}' /proc/interrupts   # its number N, then: echo {other} > /proc/irq/N/smp_affinity_list", c.name)),
        ),
        "softirq" => (
            format!("softirq {} ran on CPU {cpu} (raised by the interrupts and timers of the CPU): with threadirqs or PREEMPT_RT it runs in a thread the workload can preempt", c.name),
            None,
        ),
        "nmi" => (
            "non-maskable interrupts (the NMI watchdog or perf) ran on the CPU".to_string(),
            Some("sysctl kernel.nmi_watchdog=0".to_string()),
        ),
        "timer" => (
            format!("the timer interrupt itself came late on CPU {cpu} ({}): on a virtual machine the host delivered it late; on bare metal, a deep idle state or firmware (SMI) held the CPU", c.name),
            Some("on the host: pin the vCPU to a dedicated core; on bare metal: hold /dev/cpu_dma_latency at 0 or disable deep idle states (cpupower idle-set -D 10)".to_string()),
        ),
        _ => (
            format!("{}: not explained by the recorded events", c.name),
            None,
        ),
        },
    };
    Fix {
        what,
        why: took,
        command,
        basis: "measured".to_string(),
    }
}

/// The fixes, ranked: first the culprits of this run's late periods (by the time they took;
/// those that never took a tenth of the slack at once are left out), then the configuration's
/// problems and advice (by their documented effect).
pub fn fixes(
    culprits: &[Culprit],
    findings: &[Finding],
    cpu: usize,
    priority: u32,
    slack: Nanos,
) -> Vec<Fix> {
    fixes_with(culprits, findings, cpu, priority, slack, &proc_state)
}

/// [`fixes`], with `state` saying what a culprit's pid is now: a suggested `taskset` or `chrt`
/// names only a user process that is still there; an exited one is "a short-lived process",
/// a kernel thread is named as such.
pub fn fixes_with(
    culprits: &[Culprit],
    findings: &[Finding],
    cpu: usize,
    priority: u32,
    slack: Nanos,
    state: &dyn Fn(i32, &str) -> ProcState,
) -> Vec<Fix> {
    // Late timer interrupts, idle or busy, have one fix; time the events do not explain
    // (the measuring thread's own running, leaving idle) has none.
    let mut merged: Vec<Culprit> = Vec::new();
    for c in culprits {
        if c.kind == "unexplained"
            || (c.kind == "sampled" && c.name == "nothing unusual in the sampled counters")
        {
            continue;
        }
        match merged
            .iter_mut()
            .find(|m| m.kind == "timer" && c.kind == "timer")
        {
            Some(m) => {
                m.name = format!("{}; {}", m.name, c.name);
                m.count += c.count;
                m.stolen_ns += c.stolen_ns;
                m.max_ns = m.max_ns.max(c.max_ns);
            }
            None => merged.push(c.clone()),
        }
    }
    merged.sort_by_key(|x| std::cmp::Reverse(x.stolen_ns));
    let mut out: Vec<Fix> = merged
        .iter()
        .filter(|c| c.max_ns * 10 >= slack.0)
        .take(5)
        .map(|c| culprit_fix(c, cpu, priority, state))
        .collect();
    for f in findings
        .iter()
        .filter(|f| matches!(f.status, Status::Problem | Status::Advice))
    {
        out.push(Fix {
            what: format!("{}: {}", f.id, f.observed),
            why: if f.effect.is_empty() {
                f.reason.clone()
            } else {
                format!("{}; {}", f.reason, f.effect)
            },
            command: f.fix.clone(),
            basis: f.status.as_str().to_string(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causes::attribute::CauseKind;

    #[test]
    fn a_fifo_task_is_named_first_with_how_to_move_it() {
        let cs = vec![
            Culprit {
                name: "timer interrupt late, cpu idle".into(),
                kind: CauseKind::Timer.as_str().into(),
                why: None,
                policy: None,
                count: 3,
                stolen_ns: 300_000,
                max_ns: 200_000,
            },
            Culprit {
                name: "sg-hourglass-0:4242".into(),
                kind: CauseKind::Thread.as_str().into(),
                why: Some(Why::Priority.as_str().into()),
                policy: Some("SCHED_FIFO 99".into()),
                count: 50,
                stolen_ns: 90_000_000,
                max_ns: 2_000_000,
            },
        ];
        let mut sorted = cs.clone();
        sorted.sort_by_key(|x| std::cmp::Reverse(x.stolen_ns));
        let f = fixes_with(&sorted, &[], 1, 90, Nanos::from_micros(500), &|_, _| {
            ProcState::Alive
        });
        assert!(
            f[0].what
                .starts_with("sg-hourglass-0:4242 (SCHED_FIFO 99) ran on CPU 1"),
            "{}",
            f[0].what
        );
        assert!(f[0]
            .command
            .as_deref()
            .is_some_and(|c| c.starts_with("taskset -a -p -c 0 4242")));
        assert!(
            f[1].what.contains("timer interrupt itself came late"),
            "{}",
            f[1].what
        );
    }

    /// A fix names only a process that is still there and movable: an exited `bash` is a
    /// short-lived process, `kdamond.0` a kernel thread that taskset cannot move; a pid that
    /// now names another command has exited too.
    #[test]
    fn fixes_name_only_live_movable_processes() {
        let culprit = |name: &str| Culprit {
            name: name.into(),
            kind: CauseKind::Thread.as_str().into(),
            why: Some(Why::Priority.as_str().into()),
            policy: Some("SCHED_OTHER nice 0".into()),
            count: 5,
            stolen_ns: 9_000_000,
            max_ns: 2_000_000,
        };
        let table = |pid: i32, _: &str| match pid {
            100 => ProcState::Gone,
            2 => ProcState::Kernel,
            _ => ProcState::Alive,
        };
        let cs = [
            culprit("bash:100"),
            culprit("kdamond.0:2"),
            culprit("load-disk-0:300"),
        ];
        let f = fixes_with(&cs, &[], 1, 90, Nanos::from_micros(500), &table);
        assert!(
            f[0].what
                .starts_with("a short-lived process (bash) ran on CPU 1"),
            "{}",
            f[0].what
        );
        assert_eq!(f[0].command, None);
        assert!(
            f[1].what.starts_with("kernel thread kdamond.0 (SCHED_OTHER nice 0) ran on CPU 1 (cannot be moved with taskset"),
            "{}",
            f[1].what
        );
        assert!(f[1]
            .command
            .as_deref()
            .is_some_and(|c| !c.contains("taskset")));
        assert!(f[2]
            .command
            .as_deref()
            .is_some_and(|c| c.starts_with("taskset -a -p -c 0 300")));
        // From /proc/PID/stat: PF_KTHREAD or a child of kthreadd is a kernel thread; another
        // command under the pid, or no file, is gone.
        let kthread = "2 (kdamond.0) S 2 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0";
        assert_eq!(
            proc_state_of_stat(Some(kthread), "kdamond.0"),
            ProcState::Kernel
        );
        let user = "300 (load-disk-0) R 1 300 300 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0";
        assert_eq!(
            proc_state_of_stat(Some(user), "load-disk-0"),
            ProcState::Alive
        );
        assert_eq!(proc_state_of_stat(Some(user), "bash"), ProcState::Gone);
        assert_eq!(proc_state_of_stat(None, "bash"), ProcState::Gone);
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        let comm = &me[me.find('(').unwrap() + 1..me.rfind(')').unwrap()];
        assert_eq!(proc_state_of_stat(Some(&me), comm), ProcState::Alive);
    }
}
