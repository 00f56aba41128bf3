//! The execution-trace engine: Hourglass's gap detector and thread models (Regehr 2002, §3).
//!
//! A measuring thread polls a counter in a tight loop. When two successive reads differ by more
//! than the gap threshold, the thread concludes that it did not hold the CPU in between, and it
//! writes one record for the interval of continuous CPU time that just ended (§3.1, Figure 2).
//! The CPU time a thread has received is the sum of its own gap-free intervals, which is how the
//! models (§3.2) decide when to yield, when a periodic job is complete and when it missed its
//! deadline.
//!
//! The engine is generic over a [`Clock`] (the counter) and [`ThreadOps`] (sleeping and
//! yielding), so that whole runs are deterministic under the [`mock`] implementations; the real
//! implementations live in [`crate::os`]. It works in counter ticks throughout; conversion to
//! nanoseconds happens after the run, with the calibration taken around it.
//!
//! What the hot loop does per iteration: one counter read, one subtraction and comparison for
//! the gap, one comparison against the next model event, and for scanning models one
//! read-modify-write of the working set. It allocates nothing, formats nothing and takes no
//! lock; a trace record costs three relaxed stores and one release store into the thread's own
//! ring ([`ring`]), which the main thread drains as the run goes.

pub mod calibrate;
pub mod merge;
pub mod mock;
pub mod record;
pub mod ring;
pub mod thread;
pub mod trace;

pub use record::{GapStats, Progress, TimerStats, Work};
pub use thread::{
    run_thread, Duty, JobRecord, LatSample, Model, Outputs, Release, ThreadOutcome, ThreadPlan,
};
pub use trace::{EndReason, Record};

/// A monotonic counter that the gap detector polls, in ticks.
pub trait Clock {
    /// The current counter value.
    fn now(&self) -> u64;
    /// The counter together with the CPU the thread is running on, read so that no migration
    /// can fall between the two (`rdtscp` on x86_64). Called only after a gap.
    fn now_with_cpu(&self) -> (u64, u32);
}

/// What a measuring thread asks of the operating system.
pub trait ThreadOps {
    /// Blocks until the counter reaches `target` (absolute, in ticks) using the thread's timer.
    /// Returns `false` when it returned early because a stop was requested.
    fn sleep_until(&mut self, target: u64) -> bool;
    /// Gives up the CPU (`sched_yield`).
    fn yield_cpu(&mut self);
    /// True once the run has been asked to stop (Ctrl-C, SIGTERM, the watchdog).
    fn stop_requested(&self) -> bool;
}
