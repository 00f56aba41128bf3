//! A scripted world for one thread, so that engine runs are exact and deterministic.
//!
//! The [`MockClock`] advances by a fixed step on every read. Scripted intervals in which the
//! thread does not hold the CPU make the read that would fall inside them happen at their end
//! instead, which is exactly what a preemption looks like to the gap detector. Sleeps wake at
//! their target plus a scripted latency; yields can lose the CPU for scripted times; the CPU
//! number changes at scripted times; a stop can be requested at a scripted time.

use super::{Clock, ThreadOps};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// The script. Build it with the methods, then call [`Script::into_pair`].
#[derive(Clone, Debug, Default)]
pub struct Script {
    now: u64,
    step: u64,
    unavailable: Vec<(u64, u64)>,
    cpus: Vec<(u64, u32)>,
    wake_latencies: VecDeque<u64>,
    default_wake_latency: u64,
    yield_gaps: VecDeque<u64>,
    stop_at: Option<u64>,
    /// Every sleep: (target, time woken).
    pub sleeps: Vec<(u64, u64)>,
}

impl Script {
    /// A clock at 0 that advances `step` ticks per read.
    pub fn new(step: u64) -> Script {
        Script {
            step,
            cpus: vec![(0, 0)],
            ..Script::default()
        }
    }

    /// Intervals `[from, to)` during which the thread does not run.
    pub fn unavailable(mut self, spans: &[(u64, u64)]) -> Script {
        self.unavailable = spans.to_vec();
        self.unavailable.sort_unstable();
        self
    }

    /// From tick `t`, the thread runs on CPU `cpu`.
    pub fn cpu_from(mut self, changes: &[(u64, u32)]) -> Script {
        self.cpus = changes.to_vec();
        self.cpus.sort_unstable();
        self
    }

    /// Latencies of successive wakeups (the first applies to the sleep until the thread's
    /// start), then `default` for every later one.
    pub fn wake_latency(mut self, latencies: &[u64], default: u64) -> Script {
        self.wake_latencies = latencies.iter().copied().collect();
        self.default_wake_latency = default;
        self
    }

    /// How long successive `sched_yield` calls keep the thread off the CPU (0: returns at once).
    pub fn yield_gaps(mut self, gaps: &[u64]) -> Script {
        self.yield_gaps = gaps.iter().copied().collect();
        self
    }

    /// A stop is requested when the clock reaches `t`.
    pub fn stop_at(mut self, t: u64) -> Script {
        self.stop_at = Some(t);
        self
    }

    /// The clock and the operations, sharing this script.
    pub fn into_pair(self) -> (MockClock, MockOps) {
        let s = Rc::new(RefCell::new(self));
        (MockClock(s.clone()), MockOps(s))
    }

    fn skip_unavailable(&mut self) {
        for &(a, b) in &self.unavailable {
            if self.now >= a && self.now < b {
                self.now = b;
            }
        }
    }

    fn cpu(&self) -> u32 {
        self.cpus
            .iter()
            .rev()
            .find(|&&(t, _)| self.now >= t)
            .map_or(0, |&(_, c)| c)
    }

    fn stop_due(&self) -> bool {
        self.stop_at.is_some_and(|t| self.now >= t)
    }
}

/// The scripted counter.
pub struct MockClock(Rc<RefCell<Script>>);

impl Clock for MockClock {
    fn now(&self) -> u64 {
        let mut s = self.0.borrow_mut();
        s.now += s.step;
        s.skip_unavailable();
        s.now
    }

    fn now_with_cpu(&self) -> (u64, u32) {
        let t = self.now();
        (t, self.0.borrow().cpu())
    }
}

/// The scripted operating system.
pub struct MockOps(Rc<RefCell<Script>>);

impl MockOps {
    /// The sleeps so far: (target, time woken).
    pub fn sleeps(&self) -> Vec<(u64, u64)> {
        self.0.borrow().sleeps.clone()
    }
}

impl ThreadOps for MockOps {
    fn sleep_until(&mut self, target: u64) -> bool {
        let mut s = self.0.borrow_mut();
        if let Some(stop) = s.stop_at {
            if stop <= target && s.now.max(stop) < target {
                s.now = s.now.max(stop);
                return false;
            }
        }
        let latency = s
            .wake_latencies
            .pop_front()
            .unwrap_or(s.default_wake_latency);
        s.now = s.now.max(target) + latency;
        s.skip_unavailable();
        let woke = s.now;
        s.sleeps.push((target, woke));
        true
    }

    fn yield_cpu(&mut self) {
        let mut s = self.0.borrow_mut();
        let g = s.yield_gaps.pop_front().unwrap_or(0);
        s.now += g;
        s.skip_unavailable();
    }

    fn stop_requested(&self) -> bool {
        self.0.borrow().stop_due()
    }
}
