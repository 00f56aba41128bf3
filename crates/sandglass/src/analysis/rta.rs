//! Fixed-priority response-time analysis on one processor.
//!
//! For each task i the worst-case response time is found by busy-period analysis over the jobs
//! of i's level-i busy period (Lehoczky 1990, *Fixed priority scheduling of periodic task sets
//! with arbitrary deadlines*, RTSS), with release jitter and blocking as Tindell, Burns &
//! Wellings add them (1994, *An extendible approach for analysing fixed priority hard real-time
//! tasks*, Real-Time Systems 6(2)):
//!
//! * the level-i busy period `L = B_i + Σ_{k∈hep(i)} ⌈(L + J_k)/T_k⌉·C_k` holds
//!   `Q = ⌈(L + J_i)/T_i⌉` jobs of task i;
//! * job q (from 0) completes at the least solution of
//!   `w = B_i + (q+1)·C_i + Σ_{k∈hp(i)} ⌈(w + J_k)/T_k⌉·C_k`;
//! * its response time, measured from its nominal arrival `q·T_i − J_i`, is
//!   `R_i(q) = J_i + w − q·T_i`, and `R_i = max_q R_i(q)`.
//!
//! Without jitter, when the first job completes within its period, Q is 1 and this is the
//! classic `R_i = C_i + B_i + Σ ⌈R_i/T_k⌉·C_k` (Joseph & Pandya 1986). Jitter is counted from
//! the nominal arrival: a job that arrives at time a may become ready as late as a + J, and its
//! response time and deadline are measured from a (so R ≥ C + J).
//!
//! Fully non-preemptive scheduling is analysed in discrete time with a time unit of 1 ns, after
//! George, Rivierre & Spuri (1996, INRIA RR-2966) and Davis, Burns, Bril & Lukkien (2007,
//! *Controller Area Network schedulability analysis: refuted, revisited and revised*, Real-Time
//! Systems 35(3)): a lower-priority job that started one unit before the critical instant blocks
//! task i for its C minus one unit, so `B_i = max(B, max_{k∈lp(i)} C_k − 1)`; job q starts at the
//! least solution of `s = B_i + q·C_i + Σ_{k∈hp(i)} (⌊(s + J_k)/T_k⌋ + 1)·C_k` (a higher-priority
//! job released at the very instant s is chosen first) and `R_i(q) = J_i + s + C_i − q·T_i`.
//!
//! Priorities come from the tasks (a smaller number is higher; tasks of equal priority are
//! assumed to interfere with each other, which is safe for SCHED_FIFO) or, when no task has one,
//! in deadline-monotonic order with ties broken by position (Leung & Whitehead 1982).
//!
//! The set also gets the utilisation and two sufficient utilisation tests: the Liu & Layland
//! bound `U ≤ n(2^{1/n} − 1)` (J. ACM 20(1), 1973) and the hyperbolic bound `Π(U_i + 1) ≤ 2`
//! (Bini, Buttazzo & Buttazzo, IEEE TC 52(7), 2003). They are stated only where they are sound:
//! preemptive scheduling, no jitter, no blocking, distinct priorities in rate/deadline-monotonic
//! order; with deadlines shorter than periods they are applied to `C_i/min(D_i, T_i)`.

use super::busy::{self, AnalysisError, Budget, Load};
use super::taskfile::Task;
use crate::units::Nanos;
use serde::Serialize;

/// Whether a running job can be preempted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Preemption {
    /// A higher-priority job preempts a lower-priority one at once (SCHED_FIFO, SCHED_RR).
    #[default]
    Preemptive,
    /// A job runs to completion once started.
    NonPreemptive,
}

/// Where the priorities came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PriorityOrder {
    /// Every task gave a priority.
    Given,
    /// Deadline-monotonic: shorter deadline first, ties by position in the set.
    DeadlineMonotonic,
}

/// The response time of one task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TaskResponse {
    /// The task's name.
    pub name: String,
    /// The effective priority: the given one, or the deadline-monotonic rank (0 is highest).
    pub priority: i64,
    /// C.
    pub wcet_ns: Nanos,
    /// T.
    pub period_ns: Nanos,
    /// D.
    pub deadline_ns: Nanos,
    /// J.
    pub jitter_ns: Nanos,
    /// The blocking used: the task's B, or under non-preemptive scheduling
    /// `max(B, longest lower-priority C − 1 ns)`.
    pub blocking_ns: Nanos,
    /// The worst-case response time; `None` when the level-i busy period does not end
    /// (utilisation of this task and those above it exceeds one).
    pub response_time_ns: Option<Nanos>,
    /// The length of the level-i busy period, when it ends.
    pub busy_period_ns: Option<Nanos>,
    /// Jobs of this task in the busy period (all were examined).
    pub jobs: u64,
    /// The job (0 is the first) with the longest response time.
    pub worst_job: Option<u64>,
    /// `response_time_ns ≤ deadline_ns`.
    pub schedulable: bool,
}

/// The answer of the fixed-priority analysis for a task set.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RtaReport {
    /// Preemptive or not.
    pub preemption: Preemption,
    /// Where the priorities came from.
    pub priority_order: PriorityOrder,
    /// One result per task, in the order given.
    pub tasks: Vec<TaskResponse>,
    /// Σ C/T.
    pub utilization: f64,
    /// n(2^{1/n} − 1) for n tasks.
    pub liu_layland_bound: f64,
    /// Whether the Liu & Layland test proves the set schedulable; `None` when it does not apply.
    pub liu_layland_ok: Option<bool>,
    /// Whether the hyperbolic test proves the set schedulable; `None` when it does not apply.
    pub hyperbolic_ok: Option<bool>,
    /// Every task meets its deadline.
    pub schedulable: bool,
}

/// n(2^{1/n} − 1): the least upper bound on the utilisation of task sets that rate-monotonic
/// scheduling always schedules (Liu & Layland 1973). 1 for n ≤ 1.
pub fn liu_layland_bound(n: usize) -> f64 {
    if n <= 1 {
        return 1.0;
    }
    let n = n as f64;
    n * (2f64.powf(1.0 / n) - 1.0)
}

/// Effective priorities (smaller is higher) and where they came from.
fn priorities(tasks: &[Task]) -> Result<(Vec<i64>, PriorityOrder), AnalysisError> {
    let given = tasks.iter().filter(|t| t.priority.is_some()).count();
    if given == tasks.len() {
        return Ok((
            tasks.iter().map(|t| t.priority.unwrap_or(0)).collect(),
            PriorityOrder::Given,
        ));
    }
    if given > 0 {
        let task = tasks
            .iter()
            .find(|t| t.priority.is_none())
            .map(|t| t.name.clone())
            .unwrap_or_default();
        return Err(AnalysisError::MixedPriorities { task });
    }
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    order.sort_by_key(|&i| (tasks[i].deadline_ns, i));
    let mut rank = vec![0i64; tasks.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r as i64;
    }
    Ok((rank, PriorityOrder::DeadlineMonotonic))
}

/// Refuses an empty set or a zero period, which no analysis can handle.
pub(crate) fn validate(tasks: &[Task]) -> Result<(), AnalysisError> {
    if tasks.is_empty() {
        return Err(AnalysisError::NoTasks);
    }
    if let Some(t) = tasks.iter().find(|t| t.period_ns == Nanos::ZERO) {
        return Err(AnalysisError::ZeroPeriod {
            task: t.name.clone(),
        });
    }
    Ok(())
}

fn load(t: &Task) -> Load {
    Load {
        c: t.wcet_ns.0,
        t: t.period_ns.0,
        j: t.jitter_ns.0,
    }
}

/// Analyses `tasks` under fixed-priority scheduling.
pub fn analyze(tasks: &[Task], preemption: Preemption) -> Result<RtaReport, AnalysisError> {
    validate(tasks)?;
    let (prio, order) = priorities(tasks)?;
    let mut budget = Budget::default();
    let mut results = Vec::with_capacity(tasks.len());
    for i in 0..tasks.len() {
        results.push(analyze_task(tasks, &prio, i, preemption, &mut budget)?);
    }
    let utilization: f64 = tasks
        .iter()
        .map(|t| t.wcet_ns.0 as f64 / t.period_ns.0 as f64)
        .sum();
    let bound = liu_layland_bound(tasks.len());
    let (ll, hyper) = if bounds_apply(tasks, &prio, preemption) {
        let shares: Vec<f64> = tasks
            .iter()
            .map(|t| t.wcet_ns.0 as f64 / t.deadline_ns.min(t.period_ns).0.max(1) as f64)
            .collect();
        let u: f64 = shares.iter().sum();
        let product: f64 = shares.iter().map(|s| s + 1.0).product();
        (Some(u <= bound), Some(product <= 2.0))
    } else {
        (None, None)
    };
    Ok(RtaReport {
        preemption,
        priority_order: order,
        schedulable: results.iter().all(|r| r.schedulable),
        tasks: results,
        utilization,
        liu_layland_bound: bound,
        liu_layland_ok: ll,
        hyperbolic_ok: hyper,
    })
}

/// The utilisation bounds hold for preemptive scheduling without jitter or blocking, with
/// distinct priorities ordered by min(D, T).
fn bounds_apply(tasks: &[Task], prio: &[i64], preemption: Preemption) -> bool {
    if preemption != Preemption::Preemptive {
        return false;
    }
    if tasks
        .iter()
        .any(|t| t.jitter_ns > Nanos::ZERO || t.blocking_ns > Nanos::ZERO)
    {
        return false;
    }
    let key = |t: &Task| t.deadline_ns.min(t.period_ns);
    for a in 0..tasks.len() {
        for b in 0..tasks.len() {
            if a != b
                && (prio[a] == prio[b] || (prio[a] < prio[b] && key(&tasks[a]) > key(&tasks[b])))
            {
                return false;
            }
        }
    }
    true
}

fn analyze_task(
    tasks: &[Task],
    prio: &[i64],
    i: usize,
    preemption: Preemption,
    budget: &mut Budget,
) -> Result<TaskResponse, AnalysisError> {
    let task = &tasks[i];
    let name = task.name.as_str();
    let hp: Vec<Load> = (0..tasks.len())
        .filter(|&k| k != i && prio[k] <= prio[i])
        .map(|k| load(&tasks[k]))
        .collect();
    let blocking = match preemption {
        Preemption::Preemptive => task.blocking_ns.0,
        Preemption::NonPreemptive => (0..tasks.len())
            .filter(|&k| prio[k] > prio[i])
            .map(|k| tasks[k].wcet_ns.0.saturating_sub(1))
            .fold(task.blocking_ns.0, u64::max),
    };
    let own = load(task);
    let mut hep = hp.clone();
    hep.push(own);
    let mut out = TaskResponse {
        name: task.name.clone(),
        priority: prio[i],
        wcet_ns: task.wcet_ns,
        period_ns: task.period_ns,
        deadline_ns: task.deadline_ns,
        jitter_ns: task.jitter_ns,
        blocking_ns: Nanos(blocking),
        response_time_ns: None,
        busy_period_ns: None,
        jobs: 0,
        worst_job: None,
        schedulable: false,
    };
    let Some(busy) = busy::busy_period(&hep, blocking, budget, name)? else {
        return Ok(out);
    };
    out.busy_period_ns = Some(Nanos(busy));
    let (c, t, j, b) = (
        u128::from(own.c),
        u128::from(own.t),
        u128::from(own.j),
        u128::from(blocking),
    );
    let jobs = busy::ceil_div(u128::from(busy) + j, t).max(1);
    let hp_sum: u128 = hp.iter().map(|l| u128::from(l.c)).sum();
    let cost = hp.len() as u64;
    // Where the previous job completed (preemptive) or started (non-preemptive): job q's
    // fixed point is at least that plus C.
    let mut prev: Option<u128> = None;
    let mut worst: Option<(i128, u64)> = None;
    let mut q: u128 = 0;
    while q < jobs {
        let at = match preemption {
            Preemption::Preemptive => {
                let base = b + (q + 1) * c;
                let start = (base + hp_sum).max(prev.map_or(0, |p| p + c));
                busy::least_fixed_point(start, busy, budget, name, cost, |w| {
                    base + hp
                        .iter()
                        .map(|l| {
                            busy::ceil_div(w + u128::from(l.j), u128::from(l.t)) * u128::from(l.c)
                        })
                        .sum::<u128>()
                })?
            }
            Preemption::NonPreemptive => {
                let base = b + q * c;
                let start = (base + hp_sum).max(prev.map_or(0, |p| p + c));
                busy::least_fixed_point(start, busy, budget, name, cost, |s| {
                    base + hp
                        .iter()
                        .map(|l| ((s + u128::from(l.j)) / u128::from(l.t) + 1) * u128::from(l.c))
                        .sum::<u128>()
                })?
            }
        };
        let Some(at) = at else {
            // Cannot happen: every job of the busy period completes inside it.
            return Ok(out);
        };
        let at = u128::from(at);
        prev = Some(at);
        let finish = match preemption {
            Preemption::Preemptive => at,
            Preemption::NonPreemptive => at + c,
        };
        let r = j as i128 + finish as i128 - (q * t) as i128;
        match worst {
            Some((w, _)) if w >= r => {}
            _ => worst = Some((r, q as u64)),
        }
        q += 1;
    }
    out.jobs = jobs as u64;
    if let Some((r, job)) = worst {
        let r = u64::try_from(r.max(0)).unwrap_or(u64::MAX);
        out.response_time_ns = Some(Nanos(r));
        out.worst_job = Some(job);
        out.schedulable = r <= task.deadline_ns.0;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(v: u64) -> Nanos {
        Nanos::from_millis(v)
    }

    fn rt(report: &RtaReport) -> Vec<Option<u64>> {
        report
            .tasks
            .iter()
            .map(|t| t.response_time_ns.map(|r| r.0))
            .collect()
    }

    /// A wcet above the deadline is analysed like any other task: its response time (by hand,
    /// w = 5 + ⌈w/4⌉·1: 5 → 7 → 7) and its miss. A wcet above the period makes the busy period
    /// endless: no bound, a miss; the tasks above it are unaffected.
    #[test]
    fn wcet_above_deadline_or_period_gets_its_response_time_and_its_miss() {
        let mut late = Task::new("late", ms(5), ms(10));
        late.deadline_ns = ms(4);
        let set = [Task::new("fast", ms(1), ms(4)), late];
        let r = analyze(&set, Preemption::Preemptive).expect("analysis");
        assert_eq!(rt(&r), vec![Some(1_000_000), Some(7_000_000)]);
        assert!(r.tasks[0].schedulable && !r.tasks[1].schedulable);
        assert!(!r.schedulable);
        let set = [
            Task::new("fast", ms(1), ms(4)),
            Task::new("hog", ms(12), ms(10)),
        ];
        for p in [Preemption::Preemptive, Preemption::NonPreemptive] {
            let r = analyze(&set, p).expect("analysis");
            assert_eq!(r.tasks[1].response_time_ns, None, "{p:?}");
            assert!(!r.tasks[1].schedulable && !r.schedulable, "{p:?}");
        }
    }

    /// Regehr 2002 (Hourglass), §5.5: C=3 ms, T=8 ms and C=17 ms, T=33 ms, rate-monotonic.
    /// "The response time of Task 0 is 3 ms, and Task 1 is 29 ms."
    /// By hand: w = 17 + ⌈w/8⌉·3: 17 → 26 → 29 → 29.
    #[test]
    fn hourglass_5_5_two_tasks() {
        let set = [
            Task::new("task0", ms(3), ms(8)),
            Task::new("task1", ms(17), ms(33)),
        ];
        let r = analyze(&set, Preemption::Preemptive).expect("analysis");
        assert_eq!(rt(&r), vec![Some(3_000_000), Some(29_000_000)]);
        assert!(r.schedulable);
        // U = 3/8 + 17/33 = 0.8902 > 2(√2 − 1) = 0.8284: the bound cannot prove it, RTA can.
        assert!((r.utilization - (3.0 / 8.0 + 17.0 / 33.0)).abs() < 1e-12);
        assert!((r.liu_layland_bound - 0.828_427_124_746_19).abs() < 1e-12);
        assert_eq!(r.liu_layland_ok, Some(false));
        // (1 + 3/8)(1 + 17/33) = 2.083 > 2.
        assert_eq!(r.hyperbolic_ok, Some(false));
        assert_eq!(r.priority_order, PriorityOrder::DeadlineMonotonic);
    }

    /// Regehr 2002, §5.5: "Re-running the analysis for Task 1 with 8 ms of release jitter and a
    /// 19 ms worst-case compute time shows that its worst-case response time is 39 ms."
    /// By hand: w = 19 + ⌈w/8⌉·3: 19 → 28 → 31 → 31; R = J + w = 8 + 31 = 39 > 33, a miss. The
    /// busy period is 124 ms long and holds ⌈(124 + 8)/33⌉ = 4 jobs, which complete at 31, 62,
    /// 93 and 124 ms: R = 39, 37, 35 and 33 ms.
    #[test]
    fn hourglass_5_5_with_jitter_misses() {
        let set = [
            Task::new("task0", ms(3), ms(8)),
            Task::new("task1", ms(19), ms(33)).with_jitter(ms(8)),
        ];
        let r = analyze(&set, Preemption::Preemptive).expect("analysis");
        assert_eq!(rt(&r), vec![Some(3_000_000), Some(39_000_000)]);
        assert!(!r.tasks[1].schedulable && !r.schedulable);
        assert_eq!(r.tasks[1].busy_period_ns, Some(ms(124)));
        assert_eq!(r.tasks[1].jobs, 4);
        assert_eq!(r.tasks[1].worst_job, Some(0));
        // Jitter makes the utilisation bounds inapplicable.
        assert_eq!((r.liu_layland_ok, r.hyperbolic_ok), (None, None));
    }

    /// The two-task set with arbitrary deadlines attributed to Lehoczky (1990): C1=26, T1=70;
    /// C2=62, T2=100 (U = 0.991). The first job of task 2 responds in 114, but the busy period
    /// (694) holds seven of its jobs and the fifth is the worst, at 118. By hand, job q completes
    /// at w(q) = 62(q+1) + ⌈w/70⌉·26: 114, 202, 316, 404, 518, 606, 694, so
    /// R(q) = w(q) − 100q = 114, 102, 116, 104, 118, 106, 94.
    #[test]
    fn lehoczky_1990_worst_job_is_not_the_first() {
        let set = |d2: u64| {
            [
                Task::new("t1", Nanos(26), Nanos(70)),
                Task::new("t2", Nanos(62), Nanos(100)).with_deadline(Nanos(d2)),
            ]
        };
        let r = analyze(&set(118), Preemption::Preemptive).expect("analysis");
        assert_eq!(rt(&r), vec![Some(26), Some(118)]);
        let t2 = &r.tasks[1];
        assert_eq!(
            (t2.busy_period_ns, t2.jobs, t2.worst_job),
            (Some(Nanos(694)), 7, Some(4))
        );
        assert!(r.schedulable);
        // A deadline of 117 is met by the first job (114) but not by the fifth.
        let r = analyze(&set(117), Preemption::Preemptive).expect("analysis");
        assert!(!r.tasks[1].schedulable);
    }

    /// Burns & Wellings, *Real-Time Systems and Programming Languages*, response-time analysis
    /// example ("task set D"): T = 7, 12, 20 and C = 3, 3, 5 give R = 3, 6, 20. U = 0.929 is
    /// above the three-task bound 0.780, yet every deadline is met. By hand for the third task:
    /// w = 5 + ⌈w/7⌉·3 + ⌈w/12⌉·3: 5 → 11 → 14 → 17 → 20 → 20.
    #[test]
    fn burns_wellings_task_set_d() {
        let set = [
            Task::new("a", Nanos(3), Nanos(7)),
            Task::new("b", Nanos(3), Nanos(12)),
            Task::new("c", Nanos(5), Nanos(20)),
        ];
        let r = analyze(&set, Preemption::Preemptive).expect("analysis");
        assert_eq!(rt(&r), vec![Some(3), Some(6), Some(20)]);
        assert!(r.schedulable);
        assert_eq!(r.liu_layland_ok, Some(false));
    }

    /// Burns & Wellings' harmonic "task set C" (T = 80, 40, 20; C = 40, 10, 5) has U = 1 exactly
    /// and is schedulable: R = 80, 15, 5. Its busy period ends at the hyperperiod, 80.
    #[test]
    fn utilisation_of_exactly_one() {
        let set = [
            Task::new("a", Nanos(40), Nanos(80)),
            Task::new("b", Nanos(10), Nanos(40)),
            Task::new("c", Nanos(5), Nanos(20)),
        ];
        let r = analyze(&set, Preemption::Preemptive).expect("analysis");
        assert_eq!(rt(&r), vec![Some(80), Some(15), Some(5)]);
        assert!(r.schedulable);
        // With 1 ns of blocking the lowest task's busy period never ends.
        let mut blocked = set.clone();
        blocked[0] = blocked[0].clone().with_blocking(Nanos(1));
        let r = analyze(&blocked, Preemption::Preemptive).expect("analysis");
        assert_eq!(r.tasks[0].response_time_ns, None);
        assert!(!r.schedulable);
    }

    #[test]
    fn overload_gives_no_response_time_and_stops() {
        let set = [
            Task::new("a", Nanos(6), Nanos(10)),
            Task::new("b", Nanos(6), Nanos(10)),
        ];
        let r = analyze(&set, Preemption::Preemptive).expect("analysis");
        assert_eq!(r.tasks[0].response_time_ns, Some(Nanos(6)));
        assert_eq!(r.tasks[1].response_time_ns, None);
        assert_eq!(r.tasks[1].busy_period_ns, None);
        assert!(!r.schedulable);
    }

    /// The message set of Davis, Burns, Bril & Lukkien (2007), §3: A (C=1, T=2.5), B (1, 3.5),
    /// C (1, 3.5) ms, non-preemptive, priorities A > B > C. The first instance of C responds in
    /// 3 ms, but its level-3 busy period (7 ms) holds a second instance that starts at 6 ms
    /// (after A at 2.5 and 5, and B at 3.5) and completes at 7 ms: R = 7 − 3.5 = 3.5 ms. A is
    /// blocked by a lower-priority frame for 1 ms − 1 ns: R = 2 ms − 1 ns; B likewise:
    /// s = 1 ms − 1 ns + 1 ms, R = 3 ms − 1 ns.
    #[test]
    fn davis_2007_non_preemptive_second_instance() {
        let set = [
            Task::new("A", ms(1), Nanos(2_500_000)),
            Task::new("B", ms(1), Nanos(3_500_000)),
            Task::new("C", ms(1), Nanos(3_500_000)),
        ];
        let r = analyze(&set, Preemption::NonPreemptive).expect("analysis");
        assert_eq!(
            rt(&r),
            vec![Some(1_999_999), Some(2_999_999), Some(3_500_000)]
        );
        assert_eq!(r.tasks[0].blocking_ns, Nanos(999_999));
        assert_eq!(r.tasks[2].blocking_ns, Nanos::ZERO);
        assert_eq!((r.tasks[2].jobs, r.tasks[2].worst_job), (2, Some(1)));
        assert!(r.schedulable);
        assert_eq!(r.liu_layland_ok, None);
    }

    /// Regression: the first job's start time was pushed back by its own C, so a lone
    /// non-preemptive task with C = D = 1 was reported to miss.
    #[test]
    fn non_preemptive_first_job_starts_without_delay() {
        for mode in [Preemption::Preemptive, Preemption::NonPreemptive] {
            let lone = [Task::new("t", Nanos(1), Nanos(4)).with_deadline(Nanos(1))];
            let r = analyze(&lone, mode).expect("analysis");
            assert_eq!(r.tasks[0].response_time_ns, Some(Nanos(1)));
            assert!(r.schedulable);
        }
    }

    #[test]
    fn given_priorities_and_ties() {
        // Priorities reverse the deadline-monotonic order.
        let set = [
            Task::new("short", Nanos(1), Nanos(4)).with_priority(2),
            Task::new("long", Nanos(3), Nanos(10)).with_priority(1),
        ];
        let r = analyze(&set, Preemption::Preemptive).expect("analysis");
        assert_eq!(r.priority_order, PriorityOrder::Given);
        assert_eq!(rt(&r), vec![Some(4), Some(3)]);
        assert_eq!(r.liu_layland_ok, None);
        // Equal priorities interfere with each other.
        let set = [
            Task::new("x", Nanos(2), Nanos(10)).with_priority(1),
            Task::new("y", Nanos(3), Nanos(10)).with_priority(1),
        ];
        let r = analyze(&set, Preemption::Preemptive).expect("analysis");
        assert_eq!(rt(&r), vec![Some(5), Some(5)]);
        let mixed = [
            Task::new("x", Nanos(2), Nanos(10)).with_priority(1),
            Task::new("y", Nanos(3), Nanos(10)),
        ];
        assert_eq!(
            analyze(&mixed, Preemption::Preemptive),
            Err(AnalysisError::MixedPriorities { task: "y".into() })
        );
    }

    #[test]
    fn invalid_sets() {
        assert_eq!(
            analyze(&[], Preemption::Preemptive),
            Err(AnalysisError::NoTasks)
        );
        assert_eq!(
            analyze(
                &[Task::new("z", Nanos(1), Nanos(0))],
                Preemption::Preemptive
            ),
            Err(AnalysisError::ZeroPeriod { task: "z".into() })
        );
    }

    #[test]
    fn liu_layland_bounds() {
        assert_eq!(liu_layland_bound(1), 1.0);
        assert!((liu_layland_bound(3) - 0.779_763_149_684_619_5).abs() < 1e-12);
        assert!((liu_layland_bound(1000) - std::f64::consts::LN_2).abs() < 1e-3);
    }

    /// Discrete-time simulation from the critical instant: the blocking job (if any) starts at
    /// −1, every task of priority ≥ i is released at 0 and then periodically. Returns the
    /// longest response of task `i` over its jobs released before `horizon`.
    fn simulate_fp(tasks: &[(u64, u64, u64)], i: usize, preemptive: bool, horizon: u64) -> u64 {
        // Tasks are in priority order (index 0 highest); (C, T, D).
        let hep: Vec<usize> = (0..=i).collect();
        let blocker = if preemptive {
            0
        } else {
            tasks[i + 1..].iter().map(|t| t.0).max().unwrap_or(0)
        };
        // Pending work per task: queue of (release, remaining).
        let mut queues: Vec<std::collections::VecDeque<(u64, u64)>> =
            vec![Default::default(); tasks.len()];
        let mut worst = 0u64;
        let mut running: Option<usize> = None;
        // The blocking job occupies [−1, blocker − 1).
        let mut blocked_until = blocker.saturating_sub(1);
        let end = horizon * 2 + 1000;
        for now in 0..end {
            for &k in &hep {
                if now < horizon && now % tasks[k].1 == 0 {
                    queues[k].push_back((now, tasks[k].0));
                }
            }
            if now < blocked_until {
                continue;
            }
            let pick = if preemptive {
                hep.iter().copied().find(|&k| !queues[k].is_empty())
            } else {
                match running {
                    Some(k) if !queues[k].is_empty() => Some(k),
                    _ => hep.iter().copied().find(|&k| !queues[k].is_empty()),
                }
            };
            running = pick;
            if let Some(k) = pick {
                let front = queues[k].front_mut().expect("non-empty");
                front.1 -= 1;
                if front.1 == 0 {
                    let (release, _) = queues[k].pop_front().expect("non-empty");
                    if k == i {
                        worst = worst.max(now + 1 - release);
                    }
                    running = None;
                }
            }
            blocked_until = 0;
        }
        worst
    }

    fn task_set() -> impl Strategy<Value = Vec<(u64, u64, u64)>> {
        proptest::collection::vec((1u64..6, 4u64..16, 0u64..8), 1..4).prop_map(|v| {
            // (C, T, D) with C ≤ D, deadline in [C, T + 7].
            v.into_iter()
                .map(|(c, t, extra)| {
                    let c = c.min(t);
                    (c, t, (c + extra).max(c).min(t + 7))
                })
                .collect()
        })
    }

    fn to_tasks(v: &[(u64, u64, u64)]) -> Vec<Task> {
        v.iter()
            .enumerate()
            .map(|(k, &(c, t, d))| {
                Task::new(format!("t{k}"), Nanos(c), Nanos(t))
                    .with_deadline(Nanos(d))
                    .with_priority(k as i64)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Exact oracle: without jitter or blocking, the synchronous release is the critical
        /// instant, so simulating it gives the worst response time exactly (preemptive and,
        /// with the longest lower-priority job started one unit early, non-preemptive).
        #[test]
        fn matches_simulation_from_the_critical_instant(v in task_set(), preemptive in any::<bool>()) {
            let tasks = to_tasks(&v);
            let mode = if preemptive { Preemption::Preemptive } else { Preemption::NonPreemptive };
            let r = analyze(&tasks, mode).expect("analysis");
            let h = busy::hyperperiod(v.iter().map(|t| t.1)).expect("small");
            for i in 0..v.len() {
                let busy = r.tasks[i].busy_period_ns.map(|b| b.0).unwrap_or(0);
                let horizon = 2 * h.max(busy) + 10;
                let u: f64 = v[..=i].iter().map(|t| t.0 as f64 / t.1 as f64).sum();
                if u > 1.0 {
                    prop_assert_eq!(r.tasks[i].response_time_ns, None);
                    continue;
                }
                if let Some(rt) = r.tasks[i].response_time_ns {
                    prop_assert_eq!(rt.0, simulate_fp(&v, i, preemptive, horizon), "task {}", i);
                } else {
                    // Only possible at U = 1 with blocking (non-preemptive).
                    prop_assert!(!preemptive);
                }
            }
        }

        #[test]
        fn response_is_at_least_c_plus_j(v in task_set(), jit in proptest::collection::vec(0u64..5, 4), blk in proptest::collection::vec(0u64..3, 4), preemptive in any::<bool>()) {
            let tasks: Vec<Task> = to_tasks(&v).into_iter().enumerate()
                .map(|(k, t)| t.with_jitter(Nanos(jit[k])).with_blocking(Nanos(blk[k])))
                .collect();
            let mode = if preemptive { Preemption::Preemptive } else { Preemption::NonPreemptive };
            let r = analyze(&tasks, mode).expect("analysis");
            for (t, res) in tasks.iter().zip(&r.tasks) {
                if let Some(rt) = res.response_time_ns {
                    prop_assert!(rt.0 >= t.wcet_ns.0 + t.jitter_ns.0);
                    prop_assert!(rt.0 >= t.wcet_ns.0 + t.jitter_ns.0 + res.blocking_ns.0);
                }
            }
        }

        #[test]
        fn response_does_not_decrease_when_a_wcet_grows(v in task_set(), which in 0usize..4, grow in 1u64..3, jit in proptest::collection::vec(0u64..4, 4), preemptive in any::<bool>()) {
            let base: Vec<Task> = to_tasks(&v).into_iter().enumerate()
                .map(|(k, t)| t.with_jitter(Nanos(jit[k])))
                .collect();
            let k = which % base.len();
            let mut bigger = base.clone();
            bigger[k].wcet_ns = Nanos(bigger[k].wcet_ns.0 + grow);
            let mode = if preemptive { Preemption::Preemptive } else { Preemption::NonPreemptive };
            let a = analyze(&base, mode).expect("analysis");
            let b = analyze(&bigger, mode).expect("analysis");
            for (x, y) in a.tasks.iter().zip(&b.tasks) {
                match (x.response_time_ns, y.response_time_ns) {
                    (Some(rx), Some(ry)) => prop_assert!(ry >= rx, "{} {:?} {:?}", x.name, rx, ry),
                    (Some(_), None) | (None, None) => {}
                    (None, Some(_)) => prop_assert!(false, "a larger C ended a busy period"),
                }
            }
        }

        /// Liu & Layland 1973: an implicit-deadline set under rate-monotonic priorities whose
        /// utilisation is within n(2^{1/n} − 1) is schedulable, and RTA must agree.
        #[test]
        fn within_liu_layland_is_schedulable(raw in proptest::collection::vec((1u64..1000, 1_000u64..100_000), 1..6)) {
            let n = raw.len();
            let bound = liu_layland_bound(n);
            let u: f64 = raw.iter().map(|(c, t)| *c as f64 / *t as f64).sum();
            let scale = if u > bound { bound / u } else { 1.0 };
            let tasks: Vec<Task> = raw.iter().enumerate()
                .map(|(k, &(c, t))| {
                    let c = ((c as f64 * scale).floor() as u64).max(1);
                    Task::new(format!("t{k}"), Nanos(c), Nanos(t))
                })
                .collect();
            let r = analyze(&tasks, Preemption::Preemptive).expect("analysis");
            if r.utilization <= bound {
                prop_assert_eq!(r.liu_layland_ok, Some(true));
                prop_assert!(r.schedulable, "{:?}", r);
            }
            if r.hyperbolic_ok == Some(true) {
                prop_assert!(r.schedulable);
            }
        }
    }
}
