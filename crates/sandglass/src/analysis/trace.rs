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
use crate::stats::{Accumulator, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One interval of CPU time, in nanoseconds from the start of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Interval {
    pub thread: u16,
    pub cpu: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub reason: EndReason,
}

/// Context switches seen in a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Switches {
    pub count: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    /// All switch gaps.
    pub all: Option<Summary>,
    pub voluntary_gaps: Option<Summary>,
    pub involuntary_gaps: Option<Summary>,
    /// Histogram of switch gaps in 1-2-5 bins.
    pub histogram: Vec<GapBin>,
    /// Switches per CPU.
    pub per_cpu: BTreeMap<u32, u64>,
}

/// One bin of the switch-gap histogram: the gaps up to `upper_ns` and above the bin below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(from = "GapBinRepr")]
pub struct GapBin {
    pub upper_ns: u64,
    pub count: u64,
}

/// A bin as summaries write it now, or as `[upper_ns, count]` as those of
/// `sandglass-hourglass/2` did.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum GapBinRepr {
    Object { upper_ns: u64, count: u64 },
    Pair(u64, u64),
}

impl From<GapBinRepr> for GapBin {
    fn from(r: GapBinRepr) -> GapBin {
        let (upper_ns, count) = match r {
            GapBinRepr::Object { upper_ns, count } | GapBinRepr::Pair(upper_ns, count) => {
                (upper_ns, count)
            }
        };
        GapBin { upper_ns, count }
    }
}

/// How much of a CPU's time the trace accounts for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Coverage {
    pub cpu: u32,
    /// Sum of record durations on this CPU.
    pub busy_ns: u64,
    /// The window considered: from the first record's start to the last record's end.
    pub span_ns: u64,
    pub share: f64,
    /// Pairs of consecutive records on this CPU that overlap in time (should be zero).
    pub overlaps: u64,
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

/// What is known of one CPU so far.
#[derive(Clone, Copy, Default)]
struct CpuState {
    /// The previous interval: thread, end, reason.
    last: Option<(u16, u64, EndReason)>,
    first_start: u64,
    last_end: u64,
    busy: u64,
    overlaps: u64,
    switches: u64,
}

/// Context switches and coverage, inferred as intervals arrive in order of start (per CPU), so
/// that the trace never needs to be in memory. Switch gaps are summarised by [`Accumulator`]:
/// count, extremes and mean exactly, percentiles to three significant digits.
pub struct TraceInference {
    cpus: BTreeMap<u32, CpuState>,
    all: Accumulator,
    voluntary: Accumulator,
    involuntary: Accumulator,
    bins: BTreeMap<u64, u64>,
}

impl Default for TraceInference {
    fn default() -> Self {
        TraceInference::new()
    }
}

impl TraceInference {
    pub fn new() -> TraceInference {
        TraceInference {
            cpus: BTreeMap::new(),
            all: Accumulator::new(),
            voluntary: Accumulator::new(),
            involuntary: Accumulator::new(),
            bins: BTreeMap::new(),
        }
    }

    /// The next interval of its CPU in order of start.
    pub fn add(&mut self, r: &Interval) {
        let c = self.cpus.entry(r.cpu).or_default();
        match c.last {
            None => c.first_start = r.start_ns,
            Some((thread, end, reason)) => {
                if r.start_ns < end {
                    c.overlaps += 1;
                } else if thread != r.thread {
                    let gap = (r.start_ns - end) as i64;
                    self.all.add(gap);
                    if reason.voluntary() {
                        self.voluntary.add(gap);
                    } else {
                        self.involuntary.add(gap);
                    }
                    *self.bins.entry(bin_upper(gap as u64)).or_insert(0) += 1;
                    c.switches += 1;
                }
            }
        }
        c.busy += r.end_ns.saturating_sub(r.start_ns);
        c.last_end = c.last_end.max(r.end_ns);
        c.last = Some((r.thread, r.end_ns, r.reason));
    }

    /// The context switches seen.
    pub fn switches(&self) -> Switches {
        Switches {
            count: self.all.count(),
            voluntary: self.voluntary.count(),
            involuntary: self.involuntary.count(),
            all: self.all.summary(),
            voluntary_gaps: self.voluntary.summary(),
            involuntary_gaps: self.involuntary.summary(),
            histogram: self
                .bins
                .iter()
                .map(|(&upper_ns, &count)| GapBin { upper_ns, count })
                .collect(),
            per_cpu: self
                .cpus
                .iter()
                .filter(|(_, c)| c.switches > 0)
                .map(|(&cpu, c)| (cpu, c.switches))
                .collect(),
        }
    }

    /// Coverage and overlaps per CPU.
    pub fn coverage(&self) -> Vec<Coverage> {
        self.cpus
            .iter()
            .map(|(&cpu, c)| {
                let span = c.last_end.saturating_sub(c.first_start);
                Coverage {
                    cpu,
                    busy_ns: c.busy,
                    span_ns: span,
                    share: if span > 0 {
                        c.busy as f64 / span as f64
                    } else {
                        0.0
                    },
                    overlaps: c.overlaps,
                }
            })
            .collect()
    }
}

/// The intervals of `records` in order of start per CPU (then end).
fn sorted(records: &[Interval]) -> Vec<Interval> {
    let mut v = records.to_vec();
    v.sort_by_key(|r| (r.cpu, r.start_ns, r.end_ns));
    v
}

/// The context switches in `records` (any order).
pub fn context_switches(records: &[Interval]) -> Switches {
    let mut t = TraceInference::new();
    for r in sorted(records) {
        t.add(&r);
    }
    t.switches()
}

/// Coverage and overlap check per CPU of `records` (any order).
pub fn coverage(records: &[Interval]) -> Vec<Coverage> {
    let mut t = TraceInference::new();
    for r in sorted(records) {
        t.add(&r);
    }
    t.coverage()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_bins_read_as_objects_and_as_the_pairs_of_version_2() {
        let bins: Vec<GapBin> =
            serde_json::from_str(r#"[{"upper_ns": 5, "count": 2}, [10, 3]]"#).expect("reads");
        assert_eq!(
            bins,
            [
                GapBin {
                    upper_ns: 5,
                    count: 2
                },
                GapBin {
                    upper_ns: 10,
                    count: 3
                }
            ]
        );
        let written = serde_json::to_value(bins[1]).expect("writes");
        assert_eq!(written, serde_json::json!({"upper_ns": 10, "count": 3}));
    }

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
