//! The path of every timer wakeup of a measuring thread, read from the kernel's own events:
//! when its timer was due, when the timer interrupt came, when the timer's callback woke the
//! thread and when the scheduler switched it in.
//!
//! rtla timerlat splits a wakeup's latency the same way: the IRQ latency (from the timer's
//! expiry to its handler) and the thread latency (from the expiry to the thread running).
//! timerlat arms its own timer in the kernel; sandglass reads the timer the measuring thread
//! armed itself, from four events on the thread's CPU:
//!
//! 1. `timer:hrtimer_start`, recorded while the thread is current and outside any interrupt,
//!    softirq or timer callback: the timer it arms for its next release (`softexpires`,
//!    CLOCK_MONOTONIC; `hrtimer` identifies the timer). An interrupt that comes while the
//!    thread runs arms timers of its own (the tick re-arms itself from the timer interrupt)
//!    with the thread as the current task: those are not the thread's;
//! 2. `timer:hrtimer_expire_entry` for that timer: its callback starts, inside the timer
//!    interrupt, whose entry (`irq_vectors:local_timer_entry` on x86, an interrupt named
//!    `*timer*` elsewhere) is the moment the interrupt reached the CPU;
//! 3. `sched:sched_wakeup` (or `sched_waking` where the former is missing) of the thread: it is
//!    runnable;
//! 4. `sched:sched_switch` to the thread: it runs. From there it returns to user space and reads
//!    the clock, which the sample records.
//!
//! On a kernel without `hrtimer_start`, the wakeup is still found (the first wakeup of the
//! thread), without its expiry. The distributions over every activation are
//! rtla's: IRQ latency = callback − expiry, thread latency = switch-in − expiry.

use super::tracefs_raw::{Event, Traced};
use crate::engine::record::{new_histogram, record};
use crate::histo::{percentiles, Histogram, Percentiles};
use serde::{Deserialize, Serialize};

/// One wakeup of a measuring thread: its times, CLOCK_MONOTONIC ns, each when the trace had it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Activation {
    pub cpu: usize,
    pub tid: i32,
    /// When the timer was due (`hrtimer_start`'s `softexpires`).
    pub expiry_ns: Option<u64>,
    /// When the timer interrupt entered (the callback itself when no entry event encloses it).
    pub irq_ns: Option<u64>,
    /// When the timer's callback started.
    pub callback_ns: Option<u64>,
    /// When the thread became runnable.
    pub wakeup_ns: Option<u64>,
    /// When the scheduler switched it in.
    pub switch_ns: Option<u64>,
    /// Its kernel priority when switched in (0-99 real-time, 100-139 normal, -1 deadline).
    pub prio: Option<i32>,
}

impl Activation {
    /// rtla's IRQ latency: from the expiry to the timer's callback.
    pub fn irq_latency_ns(&self) -> Option<u64> {
        Some(self.callback_ns?.saturating_sub(self.expiry_ns?))
    }

    /// rtla's thread latency: from the expiry to the thread switched in.
    pub fn thread_latency_ns(&self) -> Option<u64> {
        Some(self.switch_ns?.saturating_sub(self.expiry_ns?))
    }
}

/// A thread's activation under way while its CPU's events are replayed.
#[derive(Clone, Copy, Default)]
struct Pending {
    act: Activation,
    hrtimer: u64,
    /// The wakeup time came from `sched_waking`: a later `sched_wakeup` replaces it.
    from_waking: bool,
}

/// Whether an interrupt's name says it is the timer's (the per-CPU timer of arm64 is
/// `arch_timer`; x86's is the `local_timer` vector).
fn timer_interrupt(name: &str) -> bool {
    name == "local_timer" || name.contains("timer")
}

/// The activations of the threads `tids` in one CPU's events (in time order), in time order.
pub fn activations<'a>(
    events: impl Iterator<Item = &'a Traced>,
    cpu: usize,
    tids: &[i32],
) -> Vec<Activation> {
    let mut out = Vec::new();
    let mut pending: Vec<(i32, Option<Pending>)> = tids.iter().map(|&t| (t, None)).collect();
    let mut timer_irq: Option<u64> = None;
    let mut callback: Option<(u64, u64)> = None;
    // How deep in interrupts, softirqs and timer callbacks the CPU is: a timer armed there is
    // not the current thread's. A context switch happens outside them all, which puts the
    // count right again after a lost event.
    let mut nested: u32 = 0;
    for e in events {
        let ts = e.ts_ns;
        match &e.event {
            Event::IrqEntry { .. }
            | Event::VectorEntry { .. }
            | Event::SoftirqEntry { .. }
            | Event::HrtimerEntry { .. } => nested += 1,
            Event::IrqExit { .. }
            | Event::VectorExit { .. }
            | Event::SoftirqExit { .. }
            | Event::HrtimerExit => nested = nested.saturating_sub(1),
            Event::Switch { .. } => nested = 0,
            _ => {}
        }
        match &e.event {
            Event::HrtimerStart {
                hrtimer,
                softexpires_ns,
                ..
            } => {
                if nested > 0 {
                    continue;
                }
                let Some(slot) = e
                    .pid
                    .and_then(|pid| pending.iter_mut().find(|(t, _)| *t == pid))
                else {
                    continue;
                };
                if let Some(p) = slot.1.take().filter(|p| p.act.wakeup_ns.is_some()) {
                    out.push(p.act);
                }
                slot.1 = Some(Pending {
                    act: Activation {
                        cpu,
                        tid: slot.0,
                        expiry_ns: u64::try_from(*softexpires_ns).ok(),
                        ..Activation::default()
                    },
                    hrtimer: *hrtimer,
                    from_waking: false,
                });
            }
            Event::VectorEntry { name, .. } | Event::IrqEntry { name, .. }
                if timer_interrupt(name) =>
            {
                timer_irq = Some(ts);
            }
            Event::VectorExit { name, .. } if timer_interrupt(name) => timer_irq = None,
            Event::IrqExit { .. } => timer_irq = None,
            Event::HrtimerEntry { hrtimer, .. } => {
                callback = Some((ts, *hrtimer));
                for p in pending.iter_mut().filter_map(|(_, p)| p.as_mut()) {
                    if p.hrtimer == *hrtimer && p.act.callback_ns.is_none() {
                        p.act.callback_ns = Some(ts);
                        p.act.irq_ns = Some(timer_irq.unwrap_or(ts).min(ts));
                    }
                }
            }
            Event::HrtimerExit => callback = None,
            Event::Wakeup { waking, pid, .. } => {
                let Some(slot) = pending.iter_mut().find(|(t, _)| t == pid) else {
                    continue;
                };
                if slot
                    .1
                    .is_some_and(|p| p.act.expiry_ns.is_some() && p.act.callback_ns.is_none())
                {
                    // Woken before its timer fired (a signal, a futex): not this activation.
                    continue;
                }
                let p = slot.1.get_or_insert_with(|| Pending {
                    // No hrtimer_start: the wakeup without its expiry.
                    act: Activation {
                        cpu,
                        tid: *pid,
                        callback_ns: callback.map(|c| c.0),
                        irq_ns: callback.map(|c| timer_irq.unwrap_or(c.0).min(c.0)),
                        ..Activation::default()
                    },
                    hrtimer: callback.map_or(0, |c| c.1),
                    from_waking: false,
                });
                if p.act.wakeup_ns.is_none() || (p.from_waking && !waking) {
                    p.act.wakeup_ns = Some(ts);
                    p.from_waking = *waking;
                }
            }
            Event::Switch {
                next_pid,
                next_prio,
                ..
            } => {
                let Some(slot) = pending.iter_mut().find(|(t, _)| t == next_pid) else {
                    continue;
                };
                if let Some(mut p) = slot.1.take() {
                    if p.act.wakeup_ns.is_some() {
                        p.act.switch_ns = Some(ts);
                        p.act.prio = Some(*next_prio);
                        out.push(p.act);
                    } else {
                        // Switched in before its timer fired (a signal, or a missed event):
                        // keep waiting for the timer.
                        slot.1 = Some(p);
                    }
                }
            }
            _ => {}
        }
    }
    out.extend(
        pending
            .into_iter()
            .filter_map(|(_, p)| p)
            .filter(|p| p.act.wakeup_ns.is_some())
            .map(|p| p.act),
    );
    out.sort_by_key(|a| (a.wakeup_ns, a.tid));
    out
}

/// How far a sample's release may be from the expiry the thread armed (the counter's
/// calibration against CLOCK_MONOTONIC is far closer than this).
pub const MATCH_NS: u64 = 50_000;

/// The activation of the release at `release_ns` that the thread read at `read_ns`, among one
/// thread's activations (in time order): the one whose expiry is nearest the release, within
/// [`MATCH_NS`]; without expiries, the first wakeup from the release on.
pub fn find(acts: &[Activation], release_ns: u64, read_ns: u64) -> Option<&Activation> {
    let from = release_ns.saturating_sub(MATCH_NS);
    let i = acts.partition_point(|a| a.wakeup_ns.unwrap_or(0) < from);
    let near = acts[i..]
        .iter()
        .take_while(|a| a.wakeup_ns.unwrap_or(0) <= read_ns)
        .filter_map(|a| Some((a.expiry_ns?.abs_diff(release_ns), a)))
        .filter(|(d, _)| *d <= MATCH_NS)
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a);
    near.or_else(|| {
        acts[i..]
            .iter()
            .take_while(|a| a.wakeup_ns.unwrap_or(0) <= read_ns)
            .find(|a| a.expiry_ns.is_none())
    })
}

/// The wakeup latencies of one measuring thread over the whole trace, as rtla timerlat reports
/// them per CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WakeLatency {
    pub cpu: usize,
    pub tid: i32,
    /// Wakeups found in the trace.
    pub activations: u64,
    /// From the timer's expiry to its callback (the timer interrupt's latency).
    pub irq_ns: Option<Percentiles>,
    /// From the timer's expiry to the thread switched in.
    pub thread_ns: Option<Percentiles>,
    /// Every softirq raised on the CPU, from its raise to its handler's start (the part of
    /// Cota-Robles and Held's DPC latency that Linux has).
    #[serde(default)]
    pub softirq_ns: Option<Percentiles>,
    /// The histograms behind `irq_ns`, `softirq_ns` and `thread_ns`, for the worst case per
    /// hour, day and week.
    #[serde(skip)]
    pub histograms: Option<[Histogram<u64>; 3]>,
}

/// The latency of every softirq raised in one CPU's events (in time order): from
/// `softirq_raise` to the next `softirq_entry` of the same vector. A vector raised again
/// before it ran counts once, from its first raise.
pub fn softirq_latency<'a>(events: impl Iterator<Item = &'a Traced>) -> Histogram<u64> {
    let mut h = new_histogram();
    softirq_latency_into(events, (0, u64::MAX), &mut h);
    h
}

/// [`softirq_latency`] of the softirqs that started in `from..to`, added to `h`.
pub fn softirq_latency_into<'a>(
    events: impl Iterator<Item = &'a Traced>,
    (from, to): (u64, u64),
    h: &mut Histogram<u64>,
) {
    let mut over = 0;
    let mut raised: [Option<u64>; 32] = [None; 32];
    for e in events {
        match e.event {
            Event::SoftirqRaise { vec } => {
                if let Some(r) = raised.get_mut(vec as usize) {
                    r.get_or_insert(e.ts_ns);
                }
            }
            Event::SoftirqEntry { vec } => {
                if let Some(at) = raised.get_mut(vec as usize).and_then(|r| r.take()) {
                    if (from..to).contains(&e.ts_ns) {
                        record(h, e.ts_ns.saturating_sub(at), &mut over);
                    }
                }
            }
            _ => {}
        }
    }
}

/// One thread's wakeup latencies as they are added, activation by activation.
#[derive(Clone, Debug)]
pub struct LatencySum {
    activations: u64,
    irq: Histogram<u64>,
    thread: Histogram<u64>,
    irq_range: Option<(u64, u64)>,
    thread_range: Option<(u64, u64)>,
    over: u64,
}

impl Default for LatencySum {
    fn default() -> Self {
        LatencySum {
            activations: 0,
            irq: new_histogram(),
            thread: new_histogram(),
            irq_range: None,
            thread_range: None,
            over: 0,
        }
    }
}

impl LatencySum {
    pub fn add(&mut self, a: &Activation) {
        self.activations += 1;
        let widen = |r: &mut Option<(u64, u64)>, v: u64| {
            *r = Some(r.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
        };
        if let Some(v) = a.irq_latency_ns() {
            record(&mut self.irq, v, &mut self.over);
            widen(&mut self.irq_range, v);
        }
        if let Some(v) = a.thread_latency_ns() {
            record(&mut self.thread, v, &mut self.over);
            widen(&mut self.thread_range, v);
        }
    }

    /// Adds another CPU's sums of the same thread: a thread has one row of latencies, on its
    /// own CPU.
    pub fn merge(&mut self, other: &LatencySum) {
        self.activations += other.activations;
        for (mine, theirs) in [
            (&mut self.irq, &other.irq),
            (&mut self.thread, &other.thread),
        ] {
            if mine.add(theirs).is_err() {
                self.over += theirs.len();
            }
        }
        for (mine, theirs) in [
            (&mut self.irq_range, other.irq_range),
            (&mut self.thread_range, other.thread_range),
        ] {
            if let Some((lo, hi)) = theirs {
                *mine = Some(mine.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
            }
        }
        self.over += other.over;
    }

    /// Wakeups added.
    pub fn activations(&self) -> u64 {
        self.activations
    }

    /// The distributions, with its CPU's softirqs (`softirq`, from [`softirq_latency`]).
    pub fn finish(self, cpu: usize, tid: i32, softirq: &Histogram<u64>) -> WakeLatency {
        let lo = |r: Option<(u64, u64)>| r.map(|r| r.0 as i64);
        let hi = |r: Option<(u64, u64)>| r.map(|r| r.1 as i64);
        WakeLatency {
            cpu,
            tid,
            activations: self.activations,
            irq_ns: percentiles(&self.irq, lo(self.irq_range), hi(self.irq_range)),
            thread_ns: percentiles(&self.thread, lo(self.thread_range), hi(self.thread_range)),
            softirq_ns: percentiles(softirq, None, None),
            histograms: Some([self.irq, softirq.clone(), self.thread]),
        }
    }
}

/// The distributions of one thread's activations, and of its CPU's softirqs (`softirq`, from
/// [`softirq_latency`]).
pub fn latency(cpu: usize, tid: i32, acts: &[Activation], softirq: &Histogram<u64>) -> WakeLatency {
    let mut sum = LatencySum::default();
    for a in acts.iter().filter(|a| a.tid == tid) {
        sum.add(a);
    }
    sum.finish(cpu, tid, softirq)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: i32 = 100;
    const TIMER: u64 = 0xffff_8880_0000_1000;

    fn ev(ts_ns: u64, pid: i32, event: Event) -> Traced {
        Traced {
            ts_ns,
            cpu: 1,
            pid: Some(pid),
            event,
        }
    }

    fn start(ts: u64, expiry: i64) -> Traced {
        ev(
            ts,
            ME,
            Event::HrtimerStart {
                hrtimer: TIMER,
                function: 1,
                expires_ns: expiry,
                softexpires_ns: expiry,
            },
        )
    }

    fn vector(ts: u64, entry: bool) -> Traced {
        let name = "local_timer".to_string();
        ev(
            ts,
            0,
            if entry {
                Event::VectorEntry { name, vector: 236 }
            } else {
                Event::VectorExit { name, vector: 236 }
            },
        )
    }

    fn callback(ts: u64, hrtimer: u64) -> Traced {
        ev(
            ts,
            0,
            Event::HrtimerEntry {
                hrtimer,
                function: 1,
                now_ns: ts as i64,
            },
        )
    }

    fn wake(ts: u64, waking: bool) -> Traced {
        ev(
            ts,
            0,
            Event::Wakeup {
                waking,
                pid: ME,
                comm: "sg".into(),
                target_cpu: 1,
            },
        )
    }

    fn switch_in(ts: u64, prev: i32) -> Traced {
        ev(
            ts,
            prev,
            Event::Switch {
                prev_pid: prev,
                prev_comm: "x".into(),
                prev_prio: 120,
                prev_state: 0,
                next_pid: ME,
                next_comm: "sg".into(),
                next_prio: 4,
            },
        )
    }

    /// Two activations, the second with its timer interrupt 300 µs late and another timer's
    /// callback before ours in the same interrupt.
    #[test]
    fn every_wakeup_is_found_with_its_four_times() {
        let events = vec![
            start(0, 1_000_000),
            vector(1_002_000, true),
            callback(1_003_000, TIMER),
            wake(1_004_000, true),
            wake(1_004_500, false),
            ev(1_005_000, 0, Event::HrtimerExit),
            vector(1_006_000, false),
            switch_in(1_008_000, 0),
            start(1_010_000, 2_000_000),
            vector(2_300_000, true),
            callback(2_301_000, 0xdead),
            ev(2_302_000, 0, Event::HrtimerExit),
            callback(2_303_000, TIMER),
            wake(2_304_000, false),
            vector(2_306_000, false),
            switch_in(2_310_000, 200),
        ];
        let acts = activations(events.iter(), 1, &[ME]);
        assert_eq!(
            acts,
            [
                Activation {
                    cpu: 1,
                    tid: ME,
                    expiry_ns: Some(1_000_000),
                    irq_ns: Some(1_002_000),
                    callback_ns: Some(1_003_000),
                    wakeup_ns: Some(1_004_500),
                    switch_ns: Some(1_008_000),
                    prio: Some(4),
                },
                Activation {
                    cpu: 1,
                    tid: ME,
                    expiry_ns: Some(2_000_000),
                    irq_ns: Some(2_300_000),
                    callback_ns: Some(2_303_000),
                    wakeup_ns: Some(2_304_000),
                    switch_ns: Some(2_310_000),
                    prio: Some(4),
                }
            ]
        );
        assert_eq!(acts[1].irq_latency_ns(), Some(303_000));
        assert_eq!(acts[1].thread_latency_ns(), Some(310_000));
        let l = latency(1, ME, &acts, &softirq_latency(events.iter()));
        assert_eq!(l.activations, 2);
        let irq = l.irq_ns.unwrap();
        assert_eq!((irq.count, irq.min, irq.max), (2, 3_000, 303_000));
        let thread = l.thread_ns.unwrap();
        assert_eq!((thread.min, thread.max), (8_000, 310_000));
        // The release matches its expiry; a release with no activation matches nothing.
        assert_eq!(find(&acts, 2_000_000, 2_311_000), Some(&acts[1]));
        assert_eq!(find(&acts, 5_000_000, 5_100_000), None);
    }

    /// Regression: the tick re-arms itself from the timer interrupt while the measuring thread
    /// is current (its `hrtimer_start` names the thread as the task), and was taken for the
    /// thread's own timer: the thread's next wakeup then had no path at all. A timer armed in
    /// an interrupt, softirq or callback is not the thread's.
    #[test]
    fn a_timer_armed_inside_an_interrupt_is_not_the_threads() {
        const TICK: u64 = 0xffff_8880_0000_2000;
        let events = vec![
            start(0, 1_000_000),
            // The tick fires while the thread still runs, and re-arms itself.
            vector(45_000, true),
            callback(45_800, TICK),
            ev(49_000, ME, Event::HrtimerExit),
            ev(
                49_500,
                ME,
                Event::HrtimerStart {
                    hrtimer: TICK,
                    function: 2,
                    expires_ns: 4_000_000,
                    softexpires_ns: 4_000_000,
                },
            ),
            vector(75_000, false),
            // A softirq on the way out of another interrupt arms a timer too.
            ev(80_000, ME, Event::SoftirqEntry { vec: 1 }),
            ev(
                80_500,
                ME,
                Event::HrtimerStart {
                    hrtimer: 0xbeef,
                    function: 3,
                    expires_ns: 9_000_000,
                    softexpires_ns: 9_000_000,
                },
            ),
            ev(81_000, ME, Event::SoftirqExit { vec: 1 }),
            vector(1_009_000, true),
            callback(1_009_700, TIMER),
            wake(1_011_800, false),
            ev(1_012_300, 0, Event::HrtimerExit),
            vector(1_018_700, false),
            switch_in(1_020_600, 200),
        ];
        let acts = activations(events.iter(), 1, &[ME]);
        assert_eq!(acts.len(), 1, "{acts:?}");
        assert_eq!(acts[0].expiry_ns, Some(1_000_000));
        assert_eq!(acts[0].callback_ns, Some(1_009_700));
        assert_eq!(acts[0].switch_ns, Some(1_020_600));
        assert_eq!(find(&acts, 1_000_000, 1_024_000), Some(&acts[0]));
    }

    /// A softirq's latency runs from its first raise to its entry.
    #[test]
    fn softirq_latency_runs_from_the_first_raise() {
        let events = [
            ev(1_000, 0, Event::SoftirqRaise { vec: 1 }),
            ev(2_000, 0, Event::SoftirqRaise { vec: 1 }),
            ev(2_500, 0, Event::SoftirqRaise { vec: 9 }),
            ev(5_000, 0, Event::SoftirqEntry { vec: 1 }),
            ev(6_000, 0, Event::SoftirqEntry { vec: 9 }),
            ev(7_000, 0, Event::SoftirqEntry { vec: 9 }),
        ];
        let h = softirq_latency(events.iter());
        assert_eq!(h.len(), 2);
        assert_eq!((h.min(), h.lowest_equivalent(h.max())), (3_500, 4_000));
    }

    /// Without hrtimer_start the wakeup is still found, inside its timer interrupt.
    #[test]
    fn without_hrtimer_start_the_wakeup_is_found_without_expiry() {
        let events = [
            vector(1_002_000, true),
            callback(1_003_000, TIMER),
            wake(1_004_000, false),
            ev(1_005_000, 0, Event::HrtimerExit),
            vector(1_006_000, false),
            switch_in(1_008_000, 0),
        ];
        let acts = activations(events.iter(), 1, &[ME]);
        assert_eq!(acts.len(), 1);
        assert_eq!(acts[0].expiry_ns, None);
        assert_eq!(acts[0].irq_ns, Some(1_002_000));
        assert_eq!(acts[0].wakeup_ns, Some(1_004_000));
        assert_eq!(acts[0].irq_latency_ns(), None);
        assert_eq!(find(&acts, 1_000_000, 1_010_000), Some(&acts[0]));
    }

    /// A thread switched in without a wakeup (it was preempted while running), or woken before
    /// its timer fired, is no activation.
    #[test]
    fn a_switch_in_without_wakeup_is_not_an_activation() {
        let events = [
            start(0, 1_000_000),
            switch_in(500_000, 200),
            wake(600_000, false),
            switch_in(700_000, 0),
            vector(1_000_100, true),
            callback(1_000_200, TIMER),
            wake(1_000_300, false),
            vector(1_000_400, false),
            switch_in(1_000_900, 0),
        ];
        let acts = activations(events.iter(), 1, &[ME]);
        assert_eq!(acts.len(), 1);
        assert_eq!(acts[0].switch_ns, Some(1_000_900));
    }
}
