//! The records of several threads in order of start, as the run goes.
//!
//! Each thread sends its records in its own time order, but a record reaches its ring only when
//! its interval ends, which for a preempted thread is when it runs again: a thread that waits
//! ten seconds for its CPU sends the record of the interval before the wait ten seconds late.
//! Hourglass sorted its trace after the run; sandglass keeps runs of any length, so it orders
//! records with a bounded buffer and a watermark instead.
//!
//! Every thread publishes the start of the record it will send next ([`Progress::open_since`]:
//! the counter value at which its open interval began, 0 while it opens one, `u64::MAX` when it
//! has none). No record sent later can start before the smallest of those values, nor before
//! the counter value the main thread read just before looking at them; records that start
//! before this watermark are released in order. The buffer holds at most `capacity` records:
//! when one thread holds the watermark back so long that it fills (a thread that runs for
//! minutes without a gap while others switch), the oldest records are released anyway, and a
//! record that then arrives with an earlier start is written out of order and counted.
//!
//! [`Progress::open_since`]: super::record::Progress::open_since

use super::record::Progress;
use super::trace::Record;
use super::Clock;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{fence, Ordering};

/// The ordering key of a record: start, then thread, then end.
fn key(r: &Record) -> (u64, u16, u64) {
    (r.start, r.thread, r.end)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Keyed(Record);

impl Ord for Keyed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        key(&self.0).cmp(&key(&other.0))
    }
}

impl PartialOrd for Keyed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The reorder buffer.
pub struct Merge {
    pending: BinaryHeap<Reverse<Keyed>>,
    capacity: usize,
    /// The start of the last record released.
    last_start: u64,
    /// Records released after a record with a later start.
    pub out_of_order: u64,
}

/// The watermark: the counter value read now, or the smallest start any thread will still send
/// if that is earlier.
pub fn watermark<C: Clock>(clock: &C, threads: &[&Progress]) -> u64 {
    let now = clock.now();
    // The counter read must not pass the loads below (see `open_now` in the thread).
    fence(Ordering::SeqCst);
    threads
        .iter()
        .map(|p| p.open_since.load(Ordering::Acquire))
        .fold(now, u64::min)
}

impl Merge {
    /// A buffer of at most `capacity` records, allocated now.
    pub fn new(capacity: usize) -> Merge {
        Merge {
            pending: BinaryHeap::with_capacity(capacity + 1),
            capacity: capacity.max(1),
            last_start: 0,
            out_of_order: 0,
        }
    }

    /// Records waiting for the watermark.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Takes `r`, releasing the oldest record when the buffer is full.
    pub fn push(&mut self, r: Record, emit: &mut impl FnMut(&Record)) {
        if self.pending.len() >= self.capacity {
            self.pop(emit);
        }
        self.pending.push(Reverse(Keyed(r)));
    }

    fn pop(&mut self, emit: &mut impl FnMut(&Record)) {
        if let Some(Reverse(Keyed(r))) = self.pending.pop() {
            if r.start < self.last_start {
                self.out_of_order += 1;
            }
            self.last_start = self.last_start.max(r.start);
            emit(&r);
        }
    }

    /// Releases, in order, every record that starts before `watermark`.
    pub fn release(&mut self, watermark: u64, emit: &mut impl FnMut(&Record)) {
        while self
            .pending
            .peek()
            .is_some_and(|Reverse(Keyed(r))| r.start < watermark)
        {
            self.pop(emit);
        }
    }

    /// Releases every record left, in order (the threads have stopped).
    pub fn finish(&mut self, emit: &mut impl FnMut(&Record)) {
        while !self.pending.is_empty() {
            self.pop(emit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::trace::EndReason;
    use super::*;

    fn rec(thread: u16, start: u64, end: u64) -> Record {
        Record {
            thread,
            cpu: 0,
            start,
            end,
            reason: EndReason::Preempted,
        }
    }

    struct Fixed(u64);
    impl Clock for Fixed {
        fn now(&self) -> u64 {
            self.0
        }
        fn now_with_cpu(&self) -> (u64, u32) {
            (self.0, 0)
        }
    }

    /// Thread 0 is preempted at 100 and sends its record [0, 100] only when it runs again at
    /// 300; thread 1's record [110, 290] arrives first. Until thread 0 runs again its open
    /// interval holds the watermark at 0, so nothing is released out of order.
    #[test]
    fn a_late_record_is_still_released_in_order() {
        let p0 = Progress::default();
        let p1 = Progress::default();
        p0.open_since.store(0, Ordering::SeqCst);
        let mut m = Merge::new(16);
        let mut out = Vec::new();
        let mut emit = |r: &Record| out.push(*r);
        m.push(rec(1, 110, 290), &mut emit);
        let w = watermark(&Fixed(295), &[&p0, &p1]);
        assert_eq!(w, 0);
        m.release(w, &mut emit);
        // Thread 0 runs again: its record arrives, its next interval opens at 300.
        m.push(rec(0, 0, 100), &mut emit);
        p0.open_since.store(300, Ordering::SeqCst);
        let w = watermark(&Fixed(305), &[&p0, &p1]);
        assert_eq!(w, 300);
        m.release(w, &mut emit);
        m.finish(&mut emit);
        assert_eq!(out, vec![rec(0, 0, 100), rec(1, 110, 290)]);
        assert_eq!(m.out_of_order, 0);
    }

    /// A full buffer releases its oldest record; a record that then arrives earlier is counted.
    #[test]
    fn a_full_buffer_releases_the_oldest_and_counts_what_comes_late() {
        let mut m = Merge::new(2);
        let mut out = Vec::new();
        let mut emit = |r: &Record| out.push(r.start);
        m.push(rec(1, 10, 11), &mut emit);
        m.push(rec(1, 20, 21), &mut emit);
        m.push(rec(1, 30, 31), &mut emit);
        m.push(rec(0, 5, 6), &mut emit);
        m.finish(&mut emit);
        assert_eq!(out, vec![10, 20, 5, 30]);
        assert_eq!(m.out_of_order, 1);
    }
}
