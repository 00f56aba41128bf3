//! The execution trace: a fixed-size buffer of records that every measuring thread appends to.
//!
//! As in Hourglass (§3.1) the buffer is allocated once before the run ("about 5 MB" for the
//! default 300 000 records) and never grows. A thread claims a slot with one atomic increment
//! of a shared cursor and fills it with relaxed stores; the metadata word is stored last with
//! release ordering and marks the slot complete, so a reader never sees half a record even if a
//! thread was still running when the buffer was read. When the cursor passes the end, the
//! record is counted as dropped by the thread that made it: the run continues and the loss is
//! reported, never silent.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Why an interval of continuous CPU time ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

const VALID: u64 = 1 << 63;

#[derive(Default)]
struct Slot {
    start: AtomicU64,
    end: AtomicU64,
    /// valid bit 63 | reason bits 48..56 | cpu bits 16..48 | thread bits 0..16
    meta: AtomicU64,
}

/// The shared, preallocated trace buffer.
pub struct TraceBuffer {
    slots: Box<[Slot]>,
    cursor: AtomicUsize,
}

impl TraceBuffer {
    /// Allocates `capacity` records and writes every one of them, so that all pages are
    /// faulted in before the run (and locked, when the process is locked).
    pub fn new(capacity: usize) -> TraceBuffer {
        let slots: Box<[Slot]> = (0..capacity).map(|_| Slot::default()).collect();
        for s in slots.iter() {
            s.meta.store(0, Ordering::Relaxed);
        }
        TraceBuffer {
            slots,
            cursor: AtomicUsize::new(0),
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Appends a record; returns `false` when the buffer is full (the caller counts the drop).
    #[inline]
    pub fn push(&self, r: Record) -> bool {
        let i = self.cursor.fetch_add(1, Ordering::Relaxed);
        match self.slots.get(i) {
            Some(slot) => {
                slot.start.store(r.start, Ordering::Relaxed);
                slot.end.store(r.end, Ordering::Relaxed);
                let meta = VALID
                    | (r.reason.code() << 48)
                    | ((u64::from(r.cpu) & 0xffff_ffff) << 16)
                    | u64::from(r.thread);
                slot.meta.store(meta, Ordering::Release);
                true
            }
            None => {
                // Keep the cursor from ever wrapping, however long the run.
                self.cursor.store(self.slots.len(), Ordering::Relaxed);
                false
            }
        }
    }

    /// Every complete record, in the order slots were claimed.
    pub fn records(&self) -> Vec<Record> {
        let n = self.cursor.load(Ordering::Acquire).min(self.slots.len());
        self.slots[..n]
            .iter()
            .filter_map(|s| {
                let meta = s.meta.load(Ordering::Acquire);
                (meta & VALID != 0).then(|| Record {
                    thread: (meta & 0xffff) as u16,
                    cpu: ((meta >> 16) & 0xffff_ffff) as u32,
                    start: s.start.load(Ordering::Relaxed),
                    end: s.end.load(Ordering::Relaxed),
                    reason: EndReason::from_code((meta >> 48) & 0xff),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(thread: u16, start: u64) -> Record {
        Record {
            thread,
            cpu: 3,
            start,
            end: start + 5,
            reason: EndReason::Yielded,
        }
    }

    #[test]
    fn push_and_read_back() {
        let t = TraceBuffer::new(3);
        assert!(t.push(rec(1, 10)));
        assert!(t.push(rec(2, 20)));
        assert_eq!(t.records(), vec![rec(1, 10), rec(2, 20)]);
    }

    #[test]
    fn overflow_is_reported_and_keeps_what_fit() {
        let t = TraceBuffer::new(2);
        assert!(t.push(rec(0, 1)));
        assert!(t.push(rec(0, 2)));
        assert!(!t.push(rec(0, 3)));
        assert!(!t.push(rec(0, 4)));
        assert_eq!(t.records().len(), 2);
    }

    #[test]
    fn concurrent_pushes_lose_nothing() {
        let t = std::sync::Arc::new(TraceBuffer::new(40_000));
        let hs: Vec<_> = (0..4u16)
            .map(|th| {
                let t = t.clone();
                std::thread::spawn(move || {
                    let mut dropped = 0;
                    for i in 0..12_000 {
                        if !t.push(rec(th, i)) {
                            dropped += 1;
                        }
                    }
                    dropped
                })
            })
            .collect();
        let dropped: u64 = hs.into_iter().map(|h| h.join().expect("join")).sum();
        assert_eq!(dropped, 48_000 - 40_000);
        assert_eq!(t.records().len(), 40_000);
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
