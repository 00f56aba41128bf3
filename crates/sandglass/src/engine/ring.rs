//! The channel from a measuring thread to the main thread: a single-producer, single-consumer
//! ring of fixed-size items, allocated and written once before the run.
//!
//! A measuring thread pushes each sample (a release, an execution interval, a LAT wakeup, a
//! job) into its own ring: a few relaxed stores and one release store of the head index, no
//! allocation, no lock, no system call. The main thread drains every ring about ten times
//! a second on its own CPU and streams what it took to the run's store, so memory does not grow
//! with the length of the run. A push into a full ring (the main thread fell seconds behind)
//! is refused and counted by the producer: the sample stays in the thread's histograms but not
//! in the store, and the run says how many were lost.
//!
//! Items are stored as 64-bit words in atomics, so the ring needs no `unsafe`: a slot is written
//! by the producer before the head moves past it (release) and read by the consumer after it
//! saw the head (acquire), and the consumer frees slots by moving the tail the same way.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// An item a ring carries, as `WORDS` 64-bit words.
pub trait Item: Copy {
    const WORDS: usize;
    fn store(&self, slot: &[AtomicU64]);
    fn load(slot: &[AtomicU64]) -> Self;
}

/// An index on a cache line of its own, so that the producer's and the consumer's writes do
/// not share one.
#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicUsize);

struct Ring<T> {
    slots: Box<[AtomicU64]>,
    mask: usize,
    /// Items pushed so far (the producer's index).
    head: Padded,
    /// Items taken so far (the consumer's index).
    tail: Padded,
    _item: PhantomData<T>,
}

/// The measuring thread's end.
pub struct Producer<T> {
    ring: Arc<Ring<T>>,
    head: usize,
    /// The tail as last read: the producer reads the shared tail only when this says full.
    tail: usize,
    /// Items refused because the ring was full.
    pub dropped: u64,
}

/// The main thread's end.
pub struct Consumer<T> {
    ring: Arc<Ring<T>>,
    tail: usize,
}

/// A ring with room for at least `capacity` items (rounded up to a power of two), every word
/// written once so that its pages are present before the run.
pub fn ring<T: Item>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let cap = capacity.max(2).next_power_of_two();
    let slots: Box<[AtomicU64]> = (0..cap * T::WORDS).map(|_| AtomicU64::new(0)).collect();
    for w in slots.iter() {
        w.store(0, Ordering::Relaxed);
    }
    let ring = Arc::new(Ring {
        slots,
        mask: cap - 1,
        head: Padded::default(),
        tail: Padded::default(),
        _item: PhantomData,
    });
    (
        Producer {
            ring: ring.clone(),
            head: 0,
            tail: 0,
            dropped: 0,
        },
        Consumer { ring, tail: 0 },
    )
}

impl<T: Item> Ring<T> {
    #[inline(always)]
    fn slot(&self, index: usize) -> &[AtomicU64] {
        let at = (index & self.mask) * T::WORDS;
        &self.slots[at..at + T::WORDS]
    }

    fn capacity(&self) -> usize {
        self.mask + 1
    }
}

impl<T: Item> Producer<T> {
    /// Appends `item`; returns false, counting it in `dropped`, when the ring is full.
    #[inline]
    pub fn push(&mut self, item: &T) -> bool {
        let cap = self.ring.capacity();
        if self.head.wrapping_sub(self.tail) >= cap {
            self.tail = self.ring.tail.0.load(Ordering::Acquire);
            if self.head.wrapping_sub(self.tail) >= cap {
                self.dropped += 1;
                return false;
            }
        }
        item.store(self.ring.slot(self.head));
        self.head = self.head.wrapping_add(1);
        self.ring.head.0.store(self.head, Ordering::Release);
        true
    }

    /// The ring's capacity in items.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }
}

impl<T: Item> Consumer<T> {
    /// Moves at most `max` waiting items into `out` (appended, in order) and returns how many.
    pub fn drain(&mut self, out: &mut Vec<T>, max: usize) -> usize {
        let head = self.ring.head.0.load(Ordering::Acquire);
        let n = head.wrapping_sub(self.tail).min(max);
        for k in 0..n {
            out.push(T::load(self.ring.slot(self.tail.wrapping_add(k))));
        }
        self.tail = self.tail.wrapping_add(n);
        self.ring.tail.0.store(self.tail, Ordering::Release);
        n
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.ring
            .head
            .0
            .load(Ordering::Acquire)
            .wrapping_sub(self.tail)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ring's capacity in items.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Pair(u64, u64);

    impl Item for Pair {
        const WORDS: usize = 2;
        fn store(&self, s: &[AtomicU64]) {
            s[0].store(self.0, Ordering::Relaxed);
            s[1].store(self.1, Ordering::Relaxed);
        }
        fn load(s: &[AtomicU64]) -> Self {
            Pair(s[0].load(Ordering::Relaxed), s[1].load(Ordering::Relaxed))
        }
    }

    #[test]
    fn a_full_ring_refuses_and_counts() {
        let (mut p, mut c) = ring::<Pair>(3);
        assert_eq!(p.capacity(), 4);
        for k in 0..6 {
            p.push(&Pair(k, k * 10));
        }
        assert_eq!(p.dropped, 2);
        let mut out = Vec::new();
        assert_eq!(c.drain(&mut out, 3), 3);
        assert_eq!(c.drain(&mut out, 10), 1);
        assert_eq!(out, (0..4).map(|k| Pair(k, k * 10)).collect::<Vec<_>>());
        // Room again after the drain.
        assert!(p.push(&Pair(9, 9)));
        out.clear();
        c.drain(&mut out, 10);
        assert_eq!(out, vec![Pair(9, 9)]);
        assert!(c.is_empty());
    }

    /// A producer thread and a consumer thread: every item arrives once, in order, whatever
    /// the interleaving; what did not fit is counted.
    #[test]
    fn concurrent_items_arrive_in_order_or_are_counted() {
        let (mut p, mut c) = ring::<Pair>(1024);
        let n = 200_000u64;
        let h = std::thread::spawn(move || {
            for k in 0..n {
                p.push(&Pair(k, !k));
            }
            p.dropped
        });
        let mut got = Vec::with_capacity(4096);
        let mut last: Option<u64> = None;
        let mut received = 0u64;
        loop {
            got.clear();
            let done = h.is_finished();
            c.drain(&mut got, 4096);
            for x in &got {
                assert_eq!(x.1, !x.0, "torn item");
                assert!(last.is_none_or(|l| x.0 > l), "out of order");
                last = Some(x.0);
                received += 1;
            }
            if done && c.is_empty() {
                break;
            }
        }
        let dropped = h.join().expect("producer");
        assert_eq!(received + dropped, n);
    }
}
