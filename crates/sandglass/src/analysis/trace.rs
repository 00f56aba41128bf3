//! Inferences from an execution trace (Regehr 2002, §4 and §5.1).
//!
//! "If Thread 1 runs, a gap occurs, and then Thread 2 runs, one can make the non-statistical
//! inference that a context switch occurred during the gap." On a multiprocessor the inference
//! holds per CPU: consecutive records of one CPU that belong to different threads bracket a
//! context switch. The gap is the switch's direct cost plus whatever else ran in it, so the
//! shortest gaps show the fastest path through the switch code and the median of the bulk is
//! representative (§4). A switch is voluntary when the earlier record ended with the thread's
//! own yield or block, involuntary (a preemption, which on Linux comes with a clock or
//! reschedule interrupt) otherwise.

use crate::engine::EndReason;
use crate::stats::{self, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One interval of CPU time, in nanoseconds from the start of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interval {
    pub thread: u16,
    pub cpu: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub reason: EndReason,
}

/// Context switches seen in a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Switches {
    pub count: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    /// All switch gaps.
    pub all: Option<Summary>,
    pub voluntary_gaps: Option<Summary>,
    pub involuntary_gaps: Option<Summary>,
    /// Histogram of switch gaps: `(upper bound ns, count)` in power-of-two-and-a-half bins.
    pub histogram: Vec<(u64, u64)>,
    /// Switches per CPU.
    pub per_cpu: BTreeMap<u32, u64>,
}

fn by_cpu(records: &[Interval]) -> BTreeMap<u32, Vec<Interval>> {
    let mut m: BTreeMap<u32, Vec<Interval>> = BTreeMap::new();
    for r in records {
        m.entry(r.cpu).or_default().push(*r);
    }
    for v in m.values_mut() {
        v.sort_by_key(|r| (r.start_ns, r.end_ns));
    }
    m
}

/// Bin upper bounds 1, 2, 5, 10, 20, 50 ... ns (a 1-2-5 series), for readable histograms.
pub fn bin_upper(ns: u64) -> u64 {
    let mut b = 1u64;
    loop {
        for m in [1, 2, 5] {
            let edge = b.saturating_mul(m);
            if ns <= edge {
                return edge;
            }
        }
        if b > u64::MAX / 10 {
            return u64::MAX;
        }
        b *= 10;
    }
}

/// The context switches in `records`.
pub fn context_switches(records: &[Interval]) -> Switches {
    let mut all = Vec::new();
    let mut vol = Vec::new();
    let mut invol = Vec::new();
    let mut per_cpu = BTreeMap::new();
    for (cpu, recs) in by_cpu(records) {
        for w in recs.windows(2) {
            let (a, b) = (w[0], w[1]);
            if a.thread == b.thread || b.start_ns < a.end_ns {
                continue;
            }
            let gap = (b.start_ns - a.end_ns) as i64;
            all.push(gap);
            if a.reason.voluntary() {
                vol.push(gap);
            } else {
                invol.push(gap);
            }
            *per_cpu.entry(cpu).or_insert(0u64) += 1;
        }
    }
    let mut hist: BTreeMap<u64, u64> = BTreeMap::new();
    for &g in &all {
        *hist.entry(bin_upper(g.max(0) as u64)).or_insert(0) += 1;
    }
    Switches {
        count: all.len() as u64,
        voluntary: vol.len() as u64,
        involuntary: invol.len() as u64,
        all: stats::summarize(&mut all),
        voluntary_gaps: stats::summarize(&mut vol),
        involuntary_gaps: stats::summarize(&mut invol),
        histogram: hist.into_iter().collect(),
        per_cpu,
    }
}

/// How much of a CPU's time the trace accounts for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Coverage {
    pub cpu: u32,
    /// Sum of record durations on this CPU.
    pub busy_ns: u64,
    /// The window considered: from the first record's start to the last record's end.
    pub span_ns: u64,
    pub share: f64,
    /// Pairs of records on this CPU that overlap in time (should be zero).
    pub overlaps: u64,
}

/// Coverage and overlap check per CPU.
pub fn coverage(records: &[Interval]) -> Vec<Coverage> {
    by_cpu(records)
        .into_iter()
        .map(|(cpu, recs)| {
            let busy: u64 = recs.iter().map(|r| r.end_ns - r.start_ns).sum();
            let first = recs.iter().map(|r| r.start_ns).min().unwrap_or(0);
            let last = recs.iter().map(|r| r.end_ns).max().unwrap_or(0);
            let overlaps = recs
                .windows(2)
                .filter(|w| w[1].start_ns < w[0].end_ns)
                .count() as u64;
            let span = last.saturating_sub(first);
            Coverage {
                cpu,
                busy_ns: busy,
                span_ns: span,
                share: if span > 0 {
                    busy as f64 / span as f64
                } else {
                    0.0
                },
                overlaps,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(thread: u16, cpu: u32, start_ns: u64, end_ns: u64, reason: EndReason) -> Interval {
        Interval {
            thread,
            cpu,
            start_ns,
            end_ns,
            reason,
        }
    }

    /// §5.1's example lines: 0 → 1 → 9 with gaps of 2.198 µs and 2.183 µs.
    #[test]
    fn switches_from_the_paper_example() {
        let recs = [
            iv(0, 0, 442_323_192, 443_222_287, EndReason::Yielded),
            iv(1, 0, 443_224_485, 444_123_644, EndReason::Yielded),
            iv(9, 0, 444_125_827, 445_024_925, EndReason::Preempted),
            iv(9, 0, 445_030_000, 445_040_000, EndReason::Finished),
        ];
        let s = context_switches(&recs);
        assert_eq!((s.count, s.voluntary, s.involuntary), (2, 2, 0));
        let all = s.all.expect("switches");
        assert_eq!((all.min_ns, all.max_ns), (2_183, 2_198));
        assert_eq!(s.per_cpu.get(&0), Some(&2));
    }

    #[test]
    fn switches_are_per_cpu() {
        // Thread 0 on CPU 0 and thread 1 on CPU 1 interleave in time but never switch.
        let recs = [
            iv(0, 0, 0, 100, EndReason::Preempted),
            iv(1, 1, 50, 150, EndReason::Preempted),
            iv(0, 0, 110, 200, EndReason::Preempted),
            iv(1, 1, 160, 250, EndReason::Preempted),
        ];
        assert_eq!(context_switches(&recs).count, 0);
        let c = coverage(&recs);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].busy_ns, 190);
        assert_eq!(c[0].span_ns, 200);
        assert_eq!(c[0].overlaps, 0);
    }

    #[test]
    fn overlaps_are_found() {
        let recs = [
            iv(0, 0, 0, 100, EndReason::Preempted),
            iv(1, 0, 90, 150, EndReason::Preempted),
        ];
        assert_eq!(coverage(&recs)[0].overlaps, 1);
        assert_eq!(context_switches(&recs).count, 0);
    }

    #[test]
    fn bins_follow_one_two_five() {
        assert_eq!(bin_upper(0), 1);
        assert_eq!(bin_upper(3), 5);
        assert_eq!(bin_upper(7), 10);
        assert_eq!(bin_upper(1500), 2000);
        assert_eq!(bin_upper(2001), 5000);
        assert_eq!(bin_upper(u64::MAX), u64::MAX);
    }
}
