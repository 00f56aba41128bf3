//! The execution trace's records: one interval of continuous CPU time each (Hourglass §3.1).
//!
//! Hourglass kept its trace in one buffer allocated before the run ("about 5 MB") and printed it
//! afterwards. sandglass keeps every record of a run of any length: each measuring thread pushes
//! its records into its own preallocated ring ([`super::ring`]), three words a record, and the
//! main thread streams them to the run's store in order of start ([`super::merge`]). A record
//! that does not fit a full ring is counted by the thread that made it, never lost silently.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why an interval of continuous CPU time ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// A gap the thread did not cause: preemption, an interrupt, the hypervisor.
    Preempted,
    /// The thread called `sched_yield` and lost the CPU.
    Yielded,
    /// The thread blocked on its timer (or spun on it with the BUSY timer).
    Blocked,
    /// The thread reached its finish time or was stopped.
    Finished,
}

impl EndReason {
    fn code(self) -> u64 {
        match self {
            EndReason::Preempted => 0,
            EndReason::Yielded => 1,
            EndReason::Blocked => 2,
            EndReason::Finished => 3,
        }
    }
    fn from_code(c: u64) -> EndReason {
        match c {
            1 => EndReason::Yielded,
            2 => EndReason::Blocked,
            3 => EndReason::Finished,
            _ => EndReason::Preempted,
        }
    }
    /// The name used in trace files.
    pub fn name(self) -> &'static str {
        match self {
            EndReason::Preempted => "preempted",
            EndReason::Yielded => "yielded",
            EndReason::Blocked => "blocked",
            EndReason::Finished => "finished",
        }
    }
    /// Parses [`EndReason::name`].
    pub fn from_name(s: &str) -> Option<EndReason> {
        Some(match s {
            "preempted" => EndReason::Preempted,
            "yielded" => EndReason::Yielded,
            "blocked" => EndReason::Blocked,
            "finished" => EndReason::Finished,
            _ => return None,
        })
    }
    /// True when the thread gave up the CPU itself.
    pub fn voluntary(self) -> bool {
        matches!(self, EndReason::Yielded | EndReason::Blocked)
    }
}

/// One interval of continuous CPU time: `[start, end]` in counter ticks on `cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub thread: u16,
    pub cpu: u32,
    pub start: u64,
    pub end: u64,
    pub reason: EndReason,
}

impl Record {
    /// `reason` bits 48..56 | `cpu` bits 16..48 | `thread` bits 0..16.
    fn meta(&self) -> u64 {
        (self.reason.code() << 48)
            | ((u64::from(self.cpu) & 0xffff_ffff) << 16)
            | u64::from(self.thread)
    }

    fn from_words(start: u64, end: u64, meta: u64) -> Record {
        Record {
            thread: (meta & 0xffff) as u16,
            cpu: ((meta >> 16) & 0xffff_ffff) as u32,
            start,
            end,
            reason: EndReason::from_code((meta >> 48) & 0xff),
        }
    }
}

impl super::ring::Item for Record {
    const WORDS: usize = 3;
    #[inline(always)]
    fn store(&self, s: &[AtomicU64]) {
        s[0].store(self.start, Ordering::Relaxed);
        s[1].store(self.end, Ordering::Relaxed);
        s[2].store(self.meta(), Ordering::Relaxed);
    }
    fn load(s: &[AtomicU64]) -> Self {
        Record::from_words(
            s[0].load(Ordering::Relaxed),
            s[1].load(Ordering::Relaxed),
            s[2].load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::ring::{ring, Item};
    use super::*;

    #[test]
    fn records_round_trip_through_a_ring() {
        let (mut p, mut c) = ring::<Record>(4);
        let r = Record {
            thread: 1023,
            cpu: 4_000_000,
            start: 10,
            end: u64::MAX - 1,
            reason: EndReason::Blocked,
        };
        assert!(p.push(&r));
        let mut out = Vec::new();
        c.drain(&mut out, 8);
        assert_eq!(out, vec![r]);
        assert_eq!(Record::WORDS, 3);
    }

    #[test]
    fn reason_names_round_trip() {
        for r in [
            EndReason::Preempted,
            EndReason::Yielded,
            EndReason::Blocked,
            EndReason::Finished,
        ] {
            assert_eq!(EndReason::from_name(r.name()), Some(r));
            assert_eq!(EndReason::from_code(r.code()), r);
        }
    }
}
