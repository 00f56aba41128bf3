//! Preemptive earliest-deadline-first scheduling on one processor: utilisation, density, the
//! exact processor-demand test and worst-case response times.
//!
//! **Demand test.** A set of sporadic tasks is EDF-feasible if and only if, for every interval
//! length t, the work that must both arrive and be due within the interval fits in it:
//! `dbf(t) = Σ_i max(0, ⌊(t − D'_i)/T_i⌋ + 1)·C_i ≤ t` (Baruah, Rosier & Howell 1990, *Algorithms
//! and complexity concerning the preemptive scheduling of periodic, real-time tasks on one
//! processor*, Real-Time Systems 2(4)). Release jitter shortens the effective deadline to
//! `D'_i = D_i − J_i` (Spuri 1996, *Analysis of deadline scheduled real-time systems*, INRIA
//! RR-2772). Blocking is added as `B(t) = max{B_i : D'_i ≤ t}`, the longest blocking any job due
//! in the interval can suffer, once per interval as under the Stack Resource Policy (Baker 1991).
//! dbf only changes at absolute deadlines `D'_i + k·T_i`, so the test checks every such point up
//! to a bound beyond which it cannot fail:
//!
//! * U < 1: the smaller of the synchronous busy period `L = B + Σ ⌈(L + J_i)/T_i⌉·C_i` (Spuri
//!   1996) and `L_a = max(max_i D'_i, (Σ (T_i − D'_i)·U_i + B)/(1 − U))` (George, Rivierre &
//!   Spuri 1996; Zhang & Burns 2009);
//! * U = 1: the busy period when nothing is released early or blocked, otherwise one hyperperiod
//!   past the longest deadline, `H + max D'_i` (dbf(t + H) − (t + H) = dbf(t) − t beyond it);
//! * U > 1: no bound is needed, since dbf(t) − t grows without limit; the scan stops at the first
//!   failing point.
//!
//! The first deadline at which the demand exceeds the interval is reported.
//!
//! **Response times** follow Spuri (1996): the worst case for task i arises in a busy period in
//! which every other task is released at its start and then as often as it may, while task i's
//! job is released at an offset a. Only a in `{k·T_j + D'_j − D'_i} ∩ [0, L + J_i)` (and 0) need be
//! examined; for each, the completion time is the least solution of
//! `w = B(d) + (1 + ⌊a/T_i⌋)·C_i + Σ_{j≠i, D'_j ≤ d} min(⌈(w + J_j)/T_j⌉, 1 + ⌊(d − D'_j)/T_j⌋)·C_j`
//! with `d = a + D'_i`, and `R_i = max_a max(C_i + J_i, w − a + J_i)`, jitter counted from the
//! nominal arrival as in [`crate::analysis::rta`]. Jobs with equal deadlines are counted as
//! interfering, the worst tie-break.

use super::busy::{self, AnalysisError, Budget, Load, VsOne};
use super::rta;
use super::taskfile::Task;
use crate::units::Nanos;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Which bound limited the demand test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DemandBound {
    /// The synchronous busy period.
    BusyPeriod,
    /// The L_a bound of George, Rivierre & Spuri.
    La,
    /// One hyperperiod past the longest deadline (utilisation exactly one).
    Hyperperiod,
    /// Utilisation above one: scanned until the first failure.
    Overload,
}

/// EDF response time of one task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct EdfTaskResponse {
    /// The task's name.
    pub name: String,
    /// C.
    pub wcet_ns: Nanos,
    /// T.
    pub period_ns: Nanos,
    /// D.
    pub deadline_ns: Nanos,
    /// J.
    pub jitter_ns: Nanos,
    /// B.
    pub blocking_ns: Nanos,
    /// The worst-case response time; `None` when the busy period does not end.
    pub response_time_ns: Option<Nanos>,
    /// `response_time_ns ≤ deadline_ns`; when no response time could be computed, the verdict
    /// of the (exact) demand test.
    pub schedulable: bool,
}

/// The answer of the EDF analysis for a task set.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct EdfReport {
    /// Σ C/T.
    pub utilization: f64,
    /// Σ C/min(D, T); at most one is sufficient for feasibility without jitter or blocking.
    pub density: f64,
    /// The processor-demand test passed at every point.
    pub feasible: bool,
    /// The first absolute deadline at which demand exceeds supply; `None` when feasible.
    pub first_failure_ns: Option<Nanos>,
    /// The demand (with blocking) at that point.
    pub demand_at_failure_ns: Option<Nanos>,
    /// Which bound limited the scan.
    pub bound: DemandBound,
    /// The last interval length that needed checking; `None` under overload.
    pub bound_ns: Option<Nanos>,
    /// Distinct deadlines checked.
    pub points_checked: u64,
    /// The synchronous busy period, when it ends.
    pub busy_period_ns: Option<Nanos>,
    /// One result per task, in the order given.
    pub tasks: Vec<EdfTaskResponse>,
}

/// One task in the form the computations use: D' = D − J may be negative.
#[derive(Clone, Copy, Debug)]
struct Param {
    c: u64,
    t: u64,
    j: u64,
    b: u64,
    d: i128,
}

fn prepare(tasks: &[Task]) -> Vec<Param> {
    tasks
        .iter()
        .map(|x| Param {
            c: x.wcet_ns.0,
            t: x.period_ns.0,
            j: x.jitter_ns.0,
            b: x.blocking_ns.0,
            d: i128::from(x.deadline_ns.0) - i128::from(x.jitter_ns.0),
        })
        .collect()
}

fn floor_div(a: i128, b: i128) -> i128 {
    a.div_euclid(b)
}

/// Analyses `tasks` under preemptive EDF.
pub fn analyze(tasks: &[Task]) -> Result<EdfReport, AnalysisError> {
    rta::validate(tasks)?;
    let ts = prepare(tasks);
    let loads: Vec<Load> = ts
        .iter()
        .map(|x| Load {
            c: x.c,
            t: x.t,
            j: x.j,
        })
        .collect();
    let utilization: f64 = ts.iter().map(|x| x.c as f64 / x.t as f64).sum();
    let density: f64 = tasks
        .iter()
        .map(|x| x.wcet_ns.0 as f64 / x.deadline_ns.min(x.period_ns).0.max(1) as f64)
        .sum();
    let bmax = ts.iter().map(|x| x.b).max().unwrap_or(0);
    let mut budget = Budget::default();
    let busy = busy::busy_period(&loads, bmax, &mut budget, "the task set")?;
    let (bound, limit) = demand_bound(&ts, &loads, utilization, busy)?;
    let scan = scan_demand(&ts, limit, &mut budget)?;
    let feasible = scan.failure.is_none();
    let mut results = Vec::with_capacity(tasks.len());
    for (i, task) in tasks.iter().enumerate() {
        let r = match busy {
            Some(l) => response_time(&ts, i, l, &mut budget, &task.name)?,
            None => None,
        };
        results.push(EdfTaskResponse {
            name: task.name.clone(),
            wcet_ns: task.wcet_ns,
            period_ns: task.period_ns,
            deadline_ns: task.deadline_ns,
            jitter_ns: task.jitter_ns,
            blocking_ns: task.blocking_ns,
            response_time_ns: r.map(Nanos),
            schedulable: r.map_or(feasible, |r| r <= task.deadline_ns.0),
        });
    }
    Ok(EdfReport {
        utilization,
        density,
        feasible,
        first_failure_ns: scan.failure.map(|f| Nanos(f.0)),
        demand_at_failure_ns: scan.failure.map(|f| Nanos(f.1)),
        bound,
        bound_ns: limit.map(Nanos),
        points_checked: scan.points,
        busy_period_ns: busy.map(Nanos),
        tasks: results,
    })
}

fn demand_bound(
    ts: &[Param],
    loads: &[Load],
    utilization: f64,
    busy: Option<u64>,
) -> Result<(DemandBound, Option<u64>), AnalysisError> {
    let dmax = ts.iter().map(|x| x.d).max().unwrap_or(0).max(0);
    let bmax = ts.iter().map(|x| x.b).max().unwrap_or(0);
    Ok(match busy::compare_with_one(loads) {
        VsOne::Above => (DemandBound::Overload, None),
        VsOne::Equal => match busy {
            Some(l) => (DemandBound::BusyPeriod, Some(l)),
            None => {
                let h = busy::hyperperiod(ts.iter().map(|x| x.t))
                    .ok_or(AnalysisError::HorizonOverflow)?;
                let limit = u64::try_from(dmax)
                    .ok()
                    .and_then(|d| d.checked_add(h))
                    .ok_or(AnalysisError::HorizonOverflow)?;
                (DemandBound::Hyperperiod, Some(limit))
            }
        },
        VsOne::Below => {
            let slack = 1.0 - utilization;
            let la = if slack > 0.0 {
                let top: f64 = ts
                    .iter()
                    .map(|x| (x.t as f64 - x.d as f64) * (x.c as f64 / x.t as f64))
                    .sum::<f64>()
                    + bmax as f64;
                let v = (top / slack).max(dmax as f64) * (1.0 + 1e-9) + 2.0;
                if v < u64::MAX as f64 {
                    Some(v.ceil() as u64)
                } else {
                    None
                }
            } else {
                None
            };
            match (busy, la) {
                (Some(l), Some(a)) if a < l => (DemandBound::La, Some(a)),
                (Some(l), _) => (DemandBound::BusyPeriod, Some(l)),
                (None, Some(a)) => (DemandBound::La, Some(a)),
                (None, None) => return Err(AnalysisError::HorizonOverflow),
            }
        }
    })
}

struct Scan {
    /// (interval length, demand) of the first failure.
    failure: Option<(u64, u64)>,
    points: u64,
}

/// Walks the absolute deadlines in order, accumulating demand, until the first failure or past
/// `limit` (no limit under overload, where a failure must come).
fn scan_demand(
    ts: &[Param],
    limit: Option<u64>,
    budget: &mut Budget,
) -> Result<Scan, AnalysisError> {
    let mut heap: BinaryHeap<Reverse<(i128, usize)>> = ts
        .iter()
        .enumerate()
        .filter(|(_, x)| x.c > 0)
        .map(|(i, x)| Reverse((x.d, i)))
        .collect();
    let mut seen = vec![false; ts.len()];
    let mut demand: u128 = 0;
    let mut blocking: u64 = 0;
    let mut points = 0u64;
    while let Some(&Reverse((t, _))) = heap.peek() {
        if let Some(l) = limit {
            if t > i128::from(l) {
                break;
            }
        }
        budget.charge(1, "the demand test")?;
        while let Some(&Reverse((u, i))) = heap.peek() {
            if u != t {
                break;
            }
            heap.pop();
            let x = ts[i];
            demand += u128::from(x.c);
            if !seen[i] {
                seen[i] = true;
                blocking = blocking.max(x.b);
            }
            heap.push(Reverse((u + i128::from(x.t), i)));
        }
        points += 1;
        let at = t.max(0) as u128;
        let need = demand + u128::from(blocking);
        if need > at {
            let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
            return Ok(Scan {
                failure: Some((clamp(at), clamp(need))),
                points,
            });
        }
    }
    Ok(Scan {
        failure: None,
        points,
    })
}

/// Spuri's worst-case response time of task `i`, given the busy period `l`.
fn response_time(
    ts: &[Param],
    i: usize,
    l: u64,
    budget: &mut Budget,
    name: &str,
) -> Result<Option<u64>, AnalysisError> {
    let me = ts[i];
    // a is the latest release of the analysed job (arrival + J); arrivals in the busy period
    // lie in [−J, L), so a lies in [0, L + J).
    let end = i128::from(l) + i128::from(me.j);
    let mut offsets: Vec<i128> = vec![0];
    for x in ts {
        // a = k·T_j + D'_j − D'_i for k ≥ 0, in [0, L).
        let first = x.d - me.d;
        let step = i128::from(x.t);
        let k0 = if first >= 0 {
            0
        } else {
            (-first + step - 1) / step
        };
        let mut a = first + k0 * step;
        while a < end {
            budget.charge(1, name)?;
            offsets.push(a);
            a += step;
        }
    }
    offsets.sort_unstable();
    offsets.dedup();
    let cost = ts.len() as u64;
    let mut worst: Option<u64> = None;
    for a in offsets {
        let d = a + me.d;
        let own = (1 + floor_div(a, i128::from(me.t))) as u128 * u128::from(me.c);
        let block = ts
            .iter()
            .filter(|x| x.c > 0 && x.d <= d)
            .map(|x| x.b)
            .max()
            .unwrap_or(0);
        let base = own + u128::from(block);
        let others: Vec<(Param, u128)> = ts
            .iter()
            .enumerate()
            .filter(|&(j, x)| j != i && x.d <= d)
            .map(|(_, x)| (*x, (floor_div(d - x.d, i128::from(x.t)) + 1) as u128))
            .collect();
        let w = busy::least_fixed_point(base, l, budget, name, cost, |w| {
            base + others
                .iter()
                .map(|(x, due)| {
                    busy::ceil_div(w + u128::from(x.j), u128::from(x.t)).min(*due) * u128::from(x.c)
                })
                .sum::<u128>()
        })?;
        let Some(w) = w else {
            return Ok(None);
        };
        let r = (i128::from(w) - a + i128::from(me.j)).max(i128::from(me.c) + i128::from(me.j));
        let r = u64::try_from(r).unwrap_or(u64::MAX);
        worst = Some(worst.map_or(r, |v| v.max(r)));
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(v: u64) -> Nanos {
        Nanos(v)
    }

    /// By hand: τ1 (C=2, T=D=4), τ2 (C=3, T=D=6), U = 1. The busy period is 12. Spuri's offsets
    /// for τ1 are {0, 2, 4, 8}: w(8) = 3·2 + 2·3 = 12, so R1 = 12 − 8 = 4. For τ2, {0, 2, 6, 10}:
    /// w(6) = 2·3 + 3·2 = 12, R2 = 12 − 6 = 6. Both meet their deadlines exactly; the schedule
    /// (τ1 [0,2) τ2 [2,5) τ1 [5,7) τ2 [7,8) τ2 [8,10) τ1 [10,12), ties against τ1) shows both.
    #[test]
    fn two_tasks_at_full_utilisation() {
        let set = [Task::new("a", n(2), n(4)), Task::new("b", n(3), n(6))];
        let r = analyze(&set).expect("analysis");
        assert!(r.feasible);
        assert_eq!(r.first_failure_ns, None);
        assert_eq!(r.bound, DemandBound::BusyPeriod);
        assert_eq!(r.bound_ns, Some(n(12)));
        assert_eq!(r.busy_period_ns, Some(n(12)));
        // Deadlines ≤ 12: 4, 6, 8, 12 (12 is shared).
        assert_eq!(r.points_checked, 4);
        let rt: Vec<_> = r.tasks.iter().map(|t| t.response_time_ns).collect();
        assert_eq!(rt, vec![Some(n(4)), Some(n(6))]);
        assert!(r.tasks.iter().all(|t| t.schedulable));
        assert!((r.utilization - 1.0).abs() < 1e-12);
    }

    /// By hand, constrained deadlines: τ1 (C=2, T=4, D=2), τ2 (C=3, T=8, D=4). U = 0.875 but
    /// dbf(2) = 2 and dbf(4) = 2 + 3 = 5 > 4: infeasible, first failure at 4 with demand 5.
    #[test]
    fn constrained_deadlines_fail_below_full_utilisation() {
        let set = [
            Task::new("a", n(2), n(4)).with_deadline(n(2)),
            Task::new("b", n(3), n(8)).with_deadline(n(4)),
        ];
        let r = analyze(&set).expect("analysis");
        assert!(!r.feasible);
        assert_eq!(r.first_failure_ns, Some(n(4)));
        assert_eq!(r.demand_at_failure_ns, Some(n(5)));
        assert!((r.density - (1.0 + 0.75)).abs() < 1e-12);
        // Response times agree. τ2 released at 0 runs after τ1 in [2, 4) and, its deadline 4
        // being earlier than τ1's next (6), finishes at 5: R2 = 5 > 4. τ1 released at 4 behind
        // a τ2 job due at 6 (released at 2, the worst tie) finishes at 7: R1 = 3 > 2.
        let rt: Vec<_> = r.tasks.iter().map(|t| t.response_time_ns).collect();
        assert_eq!(rt, vec![Some(n(3)), Some(n(5))]);
        assert!(r.tasks.iter().all(|t| !t.schedulable));
    }

    /// By hand: (C, D, T) = (2, 4, 6), (2, 5, 8), (3, 7, 9): U = 0.917, busy period 16,
    /// L_a = (2/3 + 3/4 + 2/3)/(1/12) = 25. Deadlines up to 16 are 4, 5, 7, 10, 13, 16 with
    /// demand 2, 4, 7, 9, 11, 16: tight at 7 and 16, feasible.
    #[test]
    fn demand_is_checked_up_to_the_busy_period() {
        let set = [
            Task::new("a", n(2), n(6)).with_deadline(n(4)),
            Task::new("b", n(2), n(8)).with_deadline(n(5)),
            Task::new("c", n(3), n(9)).with_deadline(n(7)),
        ];
        let r = analyze(&set).expect("analysis");
        assert!(r.feasible);
        assert_eq!(
            (r.bound, r.bound_ns),
            (DemandBound::BusyPeriod, Some(n(16)))
        );
        assert_eq!(r.points_checked, 6);
        // One more unit of work for c overflows at 7.
        let mut heavier = set.clone();
        heavier[2].wcet_ns = n(4);
        let r = analyze(&heavier).expect("analysis");
        assert_eq!(r.first_failure_ns, Some(n(7)));
        assert_eq!(r.bound, DemandBound::Overload);
        assert!(r.tasks.iter().all(|t| t.response_time_ns.is_none()));
    }

    #[test]
    fn jitter_shortens_the_deadline_and_blocking_adds_demand() {
        // D' = 10 − 9 = 1 < C = 2: fails at the first deadline, 1.
        let set = [Task::new("a", n(2), n(10)).with_jitter(n(9))];
        let r = analyze(&set).expect("analysis");
        assert_eq!(r.first_failure_ns, Some(n(1)));
        assert_eq!(r.tasks[0].response_time_ns, Some(n(11)));
        // Jitter beyond the deadline fails at time 0.
        let set = [Task::new("a", n(2), n(10)).with_jitter(n(10))];
        assert_eq!(
            analyze(&set).expect("analysis").first_failure_ns,
            Some(n(0))
        );
        // Blocking: 3 + 2 > 4 at the first deadline.
        let set = [Task::new("a", n(3), n(4)).with_blocking(n(2))];
        let r = analyze(&set).expect("analysis");
        assert_eq!(
            (r.first_failure_ns, r.demand_at_failure_ns),
            (Some(n(4)), Some(n(5)))
        );
        assert_eq!(r.tasks[0].response_time_ns, Some(n(5)));
    }

    #[test]
    fn full_utilisation_with_jitter_uses_the_hyperperiod() {
        let set = [
            Task::new("a", n(1), n(2))
                .with_jitter(n(1))
                .with_deadline(n(2)),
            Task::new("b", n(2), n(4)),
        ];
        let r = analyze(&set).expect("analysis");
        assert_eq!(r.bound, DemandBound::Hyperperiod);
        // H = 4, max D' = 4.
        assert_eq!(r.bound_ns, Some(n(8)));
        assert_eq!(r.busy_period_ns, None);
        assert!(r.tasks.iter().all(|t| t.response_time_ns.is_none()));
        // dbf(1) = 1, dbf(3) = 2, dbf(4) = 4, dbf(5) = 5, dbf(7) = 6, dbf(8) = 8: feasible, so
        // every task meets its deadlines although no response time can be computed.
        assert!(r.feasible);
        assert!(r.tasks.iter().all(|t| t.schedulable));
    }

    /// Preemptive EDF simulation in unit time: every task but `i` released at 0 and then
    /// periodically, task `i` from `phase`; ties go against task `i`. Returns the longest
    /// response of task `i`.
    fn simulate(tasks: &[(u64, u64, u64)], i: usize, phase: u64, horizon: u64) -> u64 {
        let mut jobs: Vec<(u64, u64, usize, u64)> = Vec::new(); // (deadline, release, task, left)
        let mut worst = 0;
        for now in 0..horizon * 2 + 200 {
            for (k, &(c, t, d)) in tasks.iter().enumerate() {
                let start = if k == i { phase } else { 0 };
                if now < horizon && now >= start && (now - start) % t == 0 {
                    jobs.push((now + d, now, k, c));
                }
            }
            let pick = jobs
                .iter()
                .enumerate()
                .min_by_key(|(_, j)| (j.0, j.2 == i, j.1, j.2))
                .map(|(x, _)| x);
            if let Some(x) = pick {
                jobs[x].3 -= 1;
                if jobs[x].3 == 0 {
                    let j = jobs.swap_remove(x);
                    if j.2 == i {
                        worst = worst.max(now + 1 - j.1);
                    }
                }
            }
        }
        worst
    }

    fn set() -> impl Strategy<Value = Vec<(u64, u64, u64)>> {
        proptest::collection::vec((1u64..5, 3u64..12, 0u64..12), 1..4).prop_map(|v| {
            v.into_iter()
                .map(|(c, t, d)| {
                    let c = c.min(t);
                    (c, t, d.clamp(c, t + 4))
                })
                .collect()
        })
    }

    fn to_tasks(v: &[(u64, u64, u64)]) -> Vec<Task> {
        v.iter()
            .enumerate()
            .map(|(k, &(c, t, d))| Task::new(format!("t{k}"), n(c), n(t)).with_deadline(n(d)))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Liu & Layland 1973: with implicit deadlines EDF is feasible if and only if U ≤ 1.
        #[test]
        fn implicit_deadlines_feasible_iff_u_at_most_one(raw in proptest::collection::vec((1u64..20, 1u64..40), 1..5)) {
            let tasks: Vec<Task> = raw.iter().enumerate()
                .map(|(k, &(c, t))| Task::new(format!("t{k}"), n(c.min(t)), n(t)))
                .collect();
            let r = analyze(&tasks).expect("analysis");
            let loads: Vec<Load> = tasks.iter().map(|t| Load { c: t.wcet_ns.0, t: t.period_ns.0, j: 0 }).collect();
            let within = busy::compare_with_one(&loads) != VsOne::Above;
            prop_assert_eq!(r.feasible, within);
        }

        /// The demand test and Spuri's response times are both exact: they must agree.
        #[test]
        fn demand_test_agrees_with_response_times(v in set()) {
            let r = analyze(&to_tasks(&v)).expect("analysis");
            let all_meet = r.tasks.iter().all(|t| t.schedulable);
            prop_assert_eq!(r.feasible, all_meet, "{:?}", r);
        }

        /// Safety against simulation: no simulated schedule responds later than the analysis.
        #[test]
        fn response_bounds_every_simulated_phase(v in set()) {
            let r = analyze(&to_tasks(&v)).expect("analysis");
            let h = busy::hyperperiod(v.iter().map(|t| t.1)).expect("small");
            for (i, res) in r.tasks.iter().enumerate() {
                let Some(rt) = res.response_time_ns else { continue };
                prop_assert!(rt.0 >= v[i].0);
                let mut sim = 0;
                for phase in 0..v[i].1 {
                    sim = sim.max(simulate(&v, i, phase, 2 * h + v[i].1));
                }
                prop_assert!(rt.0 >= sim, "task {} analysis {} simulation {}", i, rt.0, sim);
            }
        }

        #[test]
        fn response_is_at_least_c_plus_j(v in set(), jit in proptest::collection::vec(0u64..4, 4)) {
            let tasks: Vec<Task> = to_tasks(&v).into_iter().enumerate()
                .map(|(k, t)| t.with_jitter(n(jit[k])))
                .collect();
            let r = analyze(&tasks).expect("analysis");
            for (t, res) in tasks.iter().zip(&r.tasks) {
                if let Some(rt) = res.response_time_ns {
                    prop_assert!(rt.0 >= t.wcet_ns.0 + t.jitter_ns.0);
                }
            }
        }
    }
}
