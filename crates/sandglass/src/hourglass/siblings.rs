//! What held a CPU while an Hourglass thread waited: its sibling threads (the run's other
//! threads on the same CPU) are in the run's own trace, so the time each of them ran during a
//! thread's preemption gap is known exactly, without a kernel trace. A gap that the siblings
//! held for at least half its length is explained by them ("thread 0 (LOW) waited behind its
//! sibling threads 2 (HIGH), 1 (NORMAL): 416 ms"), not by interrupts or the hypervisor.

use crate::causes::explain::{Explanation, Inferred};
use std::collections::BTreeMap;

/// Gaps kept, the largest (the explanation covers at most the 20 largest spikes per run).
const KEPT: usize = 256;

/// One thread's preemption gap and the time its siblings ran in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    pub cpu: usize,
    pub thread: u16,
    pub at_ns: u64,
    pub size_ns: u64,
    /// Per sibling thread, the time it ran in the gap; largest first.
    pub held: Vec<(u16, u64)>,
}

/// A thread's gap under way: its CPU, its start, and what the siblings ran in it so far.
type Open = (usize, u64, BTreeMap<u16, u64>);

/// Follows the run's records in order of start and keeps the largest gaps.
pub struct Siblings {
    open: Vec<Option<Open>>,
    gaps: Vec<Gap>,
    floor_ns: u64,
}

impl Siblings {
    /// For `threads` threads; gaps shorter than `floor_ns` are not kept.
    pub fn new(threads: usize, floor_ns: u64) -> Siblings {
        Siblings {
            open: vec![None; threads],
            gaps: Vec::new(),
            floor_ns,
        }
    }

    /// A record of `thread` on `cpu` from `start_ns` to `end_ns` (records come in order of
    /// start); `preempted` when it ended because the thread lost its CPU.
    pub fn add(&mut self, thread: u16, cpu: usize, start_ns: u64, end_ns: u64, preempted: bool) {
        let t = thread as usize;
        if t >= self.open.len() {
            return;
        }
        for (k, o) in self.open.iter_mut().enumerate() {
            let Some((c, from, held)) = o.as_mut() else {
                continue;
            };
            if k != t && *c == cpu && end_ns > *from {
                *held.entry(thread).or_default() += end_ns - start_ns.max(*from);
            }
        }
        if let Some((c, from, held)) = self.open[t].take() {
            let size_ns = start_ns.saturating_sub(from);
            if c == cpu && size_ns >= self.floor_ns {
                let mut held: Vec<(u16, u64)> = held
                    .into_iter()
                    .map(|(k, ns)| (k, ns.min(size_ns)))
                    .collect();
                held.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                self.gaps.push(Gap {
                    cpu,
                    thread,
                    at_ns: from,
                    size_ns,
                    held,
                });
                if self.gaps.len() >= 2 * KEPT {
                    self.keep_largest();
                }
            }
        }
        if preempted {
            self.open[t] = Some((cpu, end_ns, BTreeMap::new()));
        }
    }

    fn keep_largest(&mut self) {
        self.gaps
            .sort_by(|a, b| b.size_ns.cmp(&a.size_ns).then(a.at_ns.cmp(&b.at_ns)));
        self.gaps.truncate(KEPT);
    }

    /// The largest gaps, largest first.
    pub fn finish(mut self) -> Vec<Gap> {
        self.keep_largest();
        self.gaps
    }
}

/// Names the sibling threads as the cause of each explained spike that is a thread's gap they
/// held for at least half its length; `label` names a thread (`1 (NORMAL)`).
pub fn explain(e: &mut Explanation, gaps: &[Gap], label: &dyn Fn(u16) -> String) {
    for s in &mut e.spikes {
        // The spike is the thread's gap that covers most of it: the gap itself, or (where the
        // CPU's spike log merged overlapping gaps of several threads, or cut one at another
        // boundary) the gap that overlaps it longest, when that covers at least half of it.
        let end = s.at_ns.saturating_add(s.size_ns);
        let overlap = |g: &Gap| {
            end.min(g.at_ns + g.size_ns)
                .saturating_sub(s.at_ns.max(g.at_ns))
        };
        let Some(g) = gaps
            .iter()
            .filter(|g| g.cpu == s.cpu)
            .max_by_key(|g| (overlap(g), std::cmp::Reverse(g.at_ns)))
            .filter(|g| overlap(g).saturating_mul(2) >= s.size_ns.max(1))
        else {
            continue;
        };
        if s.inferred
            .as_ref()
            .is_some_and(|i| i.kind == "process_stopped")
        {
            continue;
        }
        let held: u64 = g.held.iter().map(|h| h.1).sum();
        if held.saturating_mul(2) < g.size_ns {
            continue;
        }
        let names: Vec<String> = g.held.iter().map(|h| label(h.0)).collect();
        let which = if names.len() == 1 {
            "thread"
        } else {
            "threads"
        };
        s.inferred = Some(Inferred {
            kind: "held_by_siblings".into(),
            wait_ns: held,
            text: format!(
                "thread {} waited behind its sibling {which} {}: {}",
                label(g.thread),
                names.join(", "),
                crate::units::Nanos(held)
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causes::explain::SpikeExplanation;

    const MS: u64 = 1_000_000;

    /// The paper's §3.1 on one CPU: HIGH (2), NORMAL (1) and LOW (0) share it; LOW runs 4 ms,
    /// then waits 416 ms while HIGH and NORMAL take turns. The gap is LOW's, and its siblings
    /// held all of it; the sampler's reading ("the CPU was taken without a task switch") gives
    /// way to them.
    #[test]
    fn a_gap_held_by_siblings_names_them() {
        let mut s = Siblings::new(3, 100_000);
        s.add(0, 1, 0, 4 * MS, true);
        let mut t = 4 * MS;
        for k in 0..47u64 {
            s.add(2, 1, t, t + 8 * MS, true);
            t += 8 * MS;
            if k < 10 {
                s.add(1, 1, t, t + 4 * MS, true);
                t += 4 * MS;
            }
        }
        assert_eq!(t, 420 * MS);
        s.add(0, 1, t, t + 4 * MS, true);
        let gaps = s.finish();
        let g = gaps.iter().find(|g| g.thread == 0).unwrap();
        assert_eq!((g.cpu, g.at_ns, g.size_ns), (1, 4 * MS, 416 * MS));
        assert_eq!(g.held, [(2, 376 * MS), (1, 40 * MS)]);
        let mut e: Explanation = serde_json::from_value(serde_json::json!({
            "intervals": 10, "totals": [], "unexplained_spikes": 0, "spikes": []
        }))
        .unwrap();
        e.spikes.push(SpikeExplanation {
            cpu: 1,
            at_ns: 4 * MS,
            size_ns: 416 * MS,
            interval_start_ns: 0,
            interval_end_ns: 100 * MS,
            abnormal: Vec::new(),
            inferred: Some(Inferred {
                kind: "not_runnable".into(),
                wait_ns: 0,
                text: "the CPU was taken without a task switch (the thread waited runnable only 0 ns in the 100 ms window around it): interrupts, or the CPU stopped by the hypervisor".into(),
            }),
            traced: None,
        });
        let names = ["0 (LOW)", "1 (NORMAL)", "2 (HIGH)"];
        explain(&mut e, &gaps, &|t| names[t as usize].to_string());
        assert_eq!(
            e.spikes[0].text(),
            "thread 0 (LOW) waited behind its sibling threads 2 (HIGH), 1 (NORMAL): 416 ms"
        );
        // A gap its siblings did not hold keeps the sampler's reading.
        let mut s = Siblings::new(2, 100_000);
        s.add(0, 1, 0, MS, true);
        s.add(1, 1, MS, 2 * MS, true);
        s.add(0, 1, 10 * MS, 11 * MS, true);
        let gaps = s.finish();
        let g = gaps.iter().find(|g| g.thread == 0).unwrap();
        assert_eq!((g.size_ns, g.held.clone()), (9 * MS, vec![(1, MS)]));
        e.spikes[0].at_ns = MS;
        e.spikes[0].inferred = None;
        explain(&mut e, &gaps, &|t| names[t as usize].to_string());
        assert_eq!(e.spikes[0].inferred, None);
    }
}
