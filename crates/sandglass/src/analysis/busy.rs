//! Busy periods: the integer fixed points behind response-time analysis and the EDF demand test.
//!
//! A level-i busy period is an interval during which the processor never idles and only work of
//! priority i or higher runs (Lehoczky 1990). Its length is the least positive solution of
//! `L = B + Σ ⌈(L + J_k)/T_k⌉·C_k`; response times are least fixed points of the same shape.
//! Each is found by iterating from below, which converges to the least fixed point because the
//! right-hand side is monotone (Joseph & Pandya 1986).
//!
//! The iterations here always end: a fixed point is sought only below a horizon that is proved
//! to contain it (the analytic bound `(B + Σ C_k·(1 + J_k/T_k))/(1 − U)` when the utilisation U is
//! below one, the hyperperiod when U is exactly one and nothing is released early), and every
//! iteration is counted against a budget of [`MAX_STEPS`]. Utilisation is compared with one in
//! exact rational arithmetic where 128 bits allow it.

use thiserror::Error;

/// Fixed-point steps (and demand points) one analysis may take before it gives up. A step costs
/// one pass over the task set, so this bounds the work at a few seconds for any input.
pub const MAX_STEPS: u64 = 50_000_000;

/// Why a schedulability analysis could not give an answer.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AnalysisError {
    /// The task set is empty.
    #[error("the task set is empty: give at least one task")]
    NoTasks,
    /// A task has a zero period, so it would release infinitely many jobs.
    #[error("task '{task}' has a zero period: give it a period of at least 1 ns")]
    ZeroPeriod {
        /// The task's name.
        task: String,
    },
    /// Some tasks have a priority and others do not.
    #[error("task '{task}' has no priority but others do: give every task a priority, or none (deadline-monotonic order)")]
    MixedPriorities {
        /// The first task without a priority.
        task: String,
    },
    /// The analysis needed more steps than [`MAX_STEPS`].
    #[error("the analysis of task '{task}' needed more than {steps} steps (a busy period of very many jobs): coarsen the periods or shorten the hyperperiod")]
    StepLimit {
        /// The task being analysed when the budget ran out.
        task: String,
        /// The budget that was exhausted.
        steps: u64,
    },
    /// The interval that must be checked does not fit in 64 bits of nanoseconds.
    #[error("the interval to check is longer than 584 years (the hyperperiod of the task set overflows): choose periods with a shorter least common multiple")]
    HorizonOverflow,
}

/// How much work a task brings: C, T and the release jitter J, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Load {
    /// C: execution time per job.
    pub c: u64,
    /// T: least time between releases (positive).
    pub t: u64,
    /// J: release jitter.
    pub j: u64,
}

/// Utilisation compared with one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VsOne {
    Below,
    Equal,
    Above,
}

/// A counter of fixed-point steps against [`MAX_STEPS`].
#[derive(Debug, Default)]
pub(crate) struct Budget {
    used: u64,
}

impl Budget {
    /// Charges one step of `cost` units; `Err` once the budget is gone.
    pub fn charge(&mut self, cost: u64, task: &str) -> Result<(), AnalysisError> {
        self.used = self.used.saturating_add(cost.max(1));
        if self.used > MAX_STEPS {
            Err(AnalysisError::StepLimit {
                task: task.to_string(),
                steps: MAX_STEPS,
            })
        } else {
            Ok(())
        }
    }
}

pub(crate) fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let r = a % b;
        a = b;
        b = r;
    }
    a
}

/// ⌈a/b⌉ for b > 0.
pub(crate) fn ceil_div(a: u128, b: u128) -> u128 {
    a.div_ceil(b)
}

/// The least common multiple of the periods, when it fits in 64 bits.
pub(crate) fn hyperperiod(periods: impl IntoIterator<Item = u64>) -> Option<u64> {
    let mut l: u128 = 1;
    for t in periods {
        let t = u128::from(t);
        if t == 0 {
            return None;
        }
        l = l.checked_mul(t / gcd(l, t))?;
        if l > u128::from(u64::MAX) {
            return None;
        }
    }
    u64::try_from(l).ok()
}

/// Σ C/T compared with one: exactly when the reduced fractions fit in 128 bits, otherwise in
/// floating point with a tolerance of 1e-12 either side of one (treated as equal).
pub(crate) fn compare_with_one(loads: &[Load]) -> VsOne {
    if let Some(v) = exact_compare(loads) {
        return v;
    }
    let u: f64 = loads.iter().map(|l| l.c as f64 / l.t as f64).sum();
    if u > 1.0 + 1e-12 {
        VsOne::Above
    } else if u < 1.0 - 1e-12 {
        VsOne::Below
    } else {
        VsOne::Equal
    }
}

fn exact_compare(loads: &[Load]) -> Option<VsOne> {
    // num/den, kept reduced.
    let (mut num, mut den): (u128, u128) = (0, 1);
    for l in loads {
        let (c, t) = (u128::from(l.c), u128::from(l.t));
        let g = gcd(den, t);
        let new_den = den.checked_mul(t / g)?;
        let a = num.checked_mul(new_den / den)?;
        let b = c.checked_mul(new_den / t)?;
        num = a.checked_add(b)?;
        den = new_den;
        let r = gcd(num, den).max(1);
        num /= r;
        den /= r;
        if num > den {
            return Some(VsOne::Above);
        }
    }
    Some(match num.cmp(&den) {
        std::cmp::Ordering::Less => VsOne::Below,
        std::cmp::Ordering::Equal => VsOne::Equal,
        std::cmp::Ordering::Greater => VsOne::Above,
    })
}

/// A horizon that contains the least positive solution of `L = b + Σ ⌈(L + J)/T⌉·C`, or `None`
/// when there is no solution (the busy period does not end).
fn horizon(loads: &[Load], b: u64) -> Option<u64> {
    match compare_with_one(loads) {
        VsOne::Above => None,
        VsOne::Equal => {
            if b > 0 || loads.iter().any(|l| l.j > 0 && l.c > 0) {
                // f(L) − L ≥ b + Σ C·J/T > 0 for every L: no fixed point.
                None
            } else {
                // The synchronous busy period ends by the hyperperiod; if that overflows, the
                // iteration is bounded by the step budget instead.
                Some(hyperperiod(loads.iter().map(|l| l.t)).unwrap_or(u64::MAX))
            }
        }
        VsOne::Below => {
            let u: f64 = loads.iter().map(|l| l.c as f64 / l.t as f64).sum();
            let slack = 1.0 - u;
            if slack <= 0.0 {
                return Some(u64::MAX);
            }
            let top: f64 = b as f64
                + loads
                    .iter()
                    .map(|l| l.c as f64 * (1.0 + l.j as f64 / l.t as f64))
                    .sum::<f64>();
            // Generous padding: the bound only has to contain the fixed point, which the
            // iteration then finds exactly.
            let h = (top / slack) * (1.0 + 1e-6) + 16.0;
            Some(if h >= u64::MAX as f64 {
                u64::MAX
            } else {
                h.ceil() as u64
            })
        }
    }
}

/// The least fixed point of `w = f(w)` at or above `start`, for a monotone `f`; `Ok(None)` when
/// the iteration passes `limit`.
pub(crate) fn least_fixed_point(
    start: u128,
    limit: u64,
    budget: &mut Budget,
    task: &str,
    cost: u64,
    f: impl Fn(u128) -> u128,
) -> Result<Option<u64>, AnalysisError> {
    let mut w = start;
    loop {
        if w > u128::from(limit) {
            return Ok(None);
        }
        budget.charge(cost, task)?;
        let next = f(w);
        if next <= w {
            return Ok(Some(w as u64));
        }
        w = next;
    }
}

/// The length of the busy period `L = b + Σ ⌈(L + J)/T⌉·C` over `loads`, or `None` when it does
/// not end.
pub(crate) fn busy_period(
    loads: &[Load],
    b: u64,
    budget: &mut Budget,
    task: &str,
) -> Result<Option<u64>, AnalysisError> {
    let Some(limit) = horizon(loads, b) else {
        return Ok(None);
    };
    let start: u128 = u128::from(b) + loads.iter().map(|l| u128::from(l.c)).sum::<u128>();
    if start == 0 {
        return Ok(Some(0));
    }
    least_fixed_point(start, limit, budget, task, loads.len() as u64, |w| {
        u128::from(b)
            + loads
                .iter()
                .map(|l| ceil_div(w + u128::from(l.j), u128::from(l.t)) * u128::from(l.c))
                .sum::<u128>()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(c: u64, t: u64, j: u64) -> Load {
        Load { c, t, j }
    }

    #[test]
    fn utilisation_is_compared_exactly() {
        // 1/3 + 1/3 + 1/3 is exactly one; in floating point it is not.
        assert_eq!(
            compare_with_one(&[ld(1, 3, 0), ld(1, 3, 0), ld(1, 3, 0)]),
            VsOne::Equal
        );
        assert_eq!(compare_with_one(&[ld(1, 3, 0), ld(1, 2, 0)]), VsOne::Below);
        assert_eq!(compare_with_one(&[ld(2, 3, 0), ld(1, 2, 0)]), VsOne::Above);
    }

    #[test]
    fn hyperperiods() {
        assert_eq!(hyperperiod([4, 6, 10]), Some(60));
        assert_eq!(hyperperiod([u64::MAX, u64::MAX - 1]), None);
        assert_eq!(hyperperiod([0]), None);
    }

    #[test]
    fn busy_periods() {
        let mut b = Budget::default();
        // Lehoczky's set (26/70, 62/100): the synchronous busy period ends at 694.
        assert_eq!(
            busy_period(&[ld(26, 70, 0), ld(62, 100, 0)], 0, &mut b, "x"),
            Ok(Some(694))
        );
        // Utilisation exactly one with no jitter: ends at the hyperperiod.
        assert_eq!(
            busy_period(&[ld(1, 2, 0), ld(2, 4, 0)], 0, &mut b, "x"),
            Ok(Some(4))
        );
        // Utilisation one with blocking, or above one: never ends.
        assert_eq!(
            busy_period(&[ld(1, 2, 0), ld(2, 4, 0)], 1, &mut b, "x"),
            Ok(None)
        );
        assert_eq!(busy_period(&[ld(3, 2, 0)], 0, &mut b, "x"), Ok(None));
        assert_eq!(busy_period(&[ld(0, 2, 0)], 0, &mut b, "x"), Ok(Some(0)));
    }
}
