//! Coarse explanations from the sampler: for each interval that holds a spike, the interrupt and
//! softirq sources that were abnormal on that CPU compared with the run's median, the steal
//! time, and the measuring thread's involuntary context switches; and the run's totals per CPU.
//!
//! **Abnormal.** For a source on a CPU, let `m` be the median of its per-interval deltas over
//! the run and `s` their median absolute deviation. A delta `x` is abnormal when
//! `x > m + max(2, 4·s)` (at least two more events than usual, and well outside the usual
//! spread). Steal time is abnormal when it is non-zero in an interval whose median is zero, or
//! above `m + max(1, 4·s)` ticks; involuntary switches likewise, with a margin of one. The
//! sampler cannot say which of several abnormal sources caused a spike, only which ones were
//! unusual while it happened; `--trace` (tracefs) gives the exact attribution.
//!
//! **Inferred.** Whether or not a counter was unusual, the measuring thread's own run-queue
//! wait in the spike's interval (`/proc/PID/task/TID/schedstat`) says which side of the
//! wakeup the time was lost on. When the thread waited runnable for at least half the part of
//! the spike inside the interval, another task held its CPU (under load this is time slicing,
//! usual and still the cause). When it waited less, the time was lost while the thread was not
//! runnable: a sleeping (timer) thread's wakeup itself came late (its timer interrupt was late:
//! interrupts were off, or the hypervisor stopped the CPU), and a polling thread lost its CPU
//! without a task switch (interrupts, or a stop of the virtual CPU). The interval's wait may
//! include waits outside the spike, so the first reading is the less certain one. The kernel
//! adds a wait to the thread's count when it switches the thread in, so the second reading is
//! given only for a spike that ends inside its interval. Both are the interval's figures (one
//! window of the sampler, usually 100 ms), and their words say so: two spikes in one window
//! share them. Where the run was traced, the trace decides (see [`super::reconcile`]).

use super::sampler::Digest;
use serde::{Deserialize, Serialize};

/// A source that was unusual in a spike's interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Abnormal {
    /// `irq`, `softirq`, `steal` (ticks of USER_HZ), `preemption` (involuntary switches of the
    /// measuring thread) or `wait_ns` (time the measuring thread waited runnable for its CPU,
    /// in ns: another thread held it).
    pub kind: String,
    pub name: String,
    /// The count in the interval.
    pub count: u64,
    /// The run's median count per interval.
    pub median: u64,
}

/// How the measuring threads of a run wait for their work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waits {
    /// A timer thread: it sleeps until each release.
    Sleeps,
    /// A polling thread (noise, Hourglass): it never sleeps.
    Polls,
}

/// What the sampler infers of a spike from the measuring thread's run-queue wait (see the
/// module's documentation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Inferred {
    /// `held_by_task` (another task held the thread's CPU), `not_runnable` (the time was
    /// lost while the thread was not runnable), `held_by_siblings` (an Hourglass thread's
    /// sibling threads held its CPU, from the run's own trace) or `process_stopped`.
    pub kind: String,
    /// What the thread waited runnable in the spike's interval (the sampler's window, not the
    /// spike alone), in ns; for `held_by_siblings`, the time the siblings ran in the gap.
    pub wait_ns: u64,
    /// The inference in words, as reports print it.
    pub text: String,
}

impl Inferred {
    /// From the thread's wait `wait_ns` in an interval of `window_ns` that holds `part_ns` of a
    /// spike. `ends_inside` says whether the spike ends inside the interval: the kernel adds a
    /// wait to the thread's count when the thread is switched in, so the wait of a spike that
    /// runs past the interval's end is counted in a later interval, and a small wait in this
    /// one says nothing (no reading is given then).
    pub fn of(
        wait_ns: u64,
        part_ns: u64,
        window_ns: u64,
        ends_inside: bool,
        waits: Waits,
    ) -> Option<Inferred> {
        let wait = crate::units::Nanos(wait_ns);
        let window = window_text(window_ns);
        if wait_ns.saturating_mul(2) >= part_ns {
            return Some(Inferred {
                kind: "held_by_task".into(),
                wait_ns,
                text: format!(
                    "another task held the CPU (the measuring thread waited runnable {wait} in the {window} window around it)"
                ),
            });
        }
        if !ends_inside {
            return None;
        }
        let text = match waits {
            Waits::Sleeps => format!(
                "the wakeup itself came late (the thread waited runnable only {wait} in the {window} window around it): its timer interrupt was late, with interrupts off or the CPU stopped by the hypervisor"
            ),
            Waits::Polls => format!(
                "the CPU was taken without a task switch (the thread waited runnable only {wait} in the {window} window around it): interrupts, or the CPU stopped by the hypervisor"
            ),
        };
        Some(Inferred {
            kind: "not_runnable".into(),
            wait_ns,
            text,
        })
    }
}

/// A sampling window's length for people: whole milliseconds from 1 ms (`100 ms`), else as
/// [`crate::units::Nanos`] gives it.
pub fn window_text(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{} ms", (ns + 500_000) / 1_000_000)
    } else {
        crate::units::Nanos(ns).to_string()
    }
}

/// One spike and what was unusual around it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpikeExplanation {
    pub cpu: usize,
    pub at_ns: u64,
    pub size_ns: u64,
    pub interval_start_ns: u64,
    pub interval_end_ns: u64,
    /// Most unusual first (by count over median).
    pub abnormal: Vec<Abnormal>,
    /// What the measuring thread's wait says, where the kernel tells it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inferred: Option<Inferred>,
    /// What the kernel trace says ran during this very delay, in words (`load-disk-0:812
    /// 3.48 ms, irq 36 (virtio1-req.0) 20 µs`), when the run was traced: it decides, and the
    /// sampler's reading stays only where it agrees (see [`super::reconcile`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced: Option<String>,
}

impl SpikeExplanation {
    /// The sampling window around the spike, for people (`100 ms`).
    pub fn window(&self) -> String {
        window_text(self.interval_end_ns.saturating_sub(self.interval_start_ns))
    }

    /// What is known of the spike, in one phrase: the trace's reading first where the run was
    /// traced, then the sampler's (its unusual sources, labelled as the window's, and its
    /// inference), else that nothing was unusual.
    pub fn text(&self) -> String {
        let mut sampler = Vec::new();
        if !self.abnormal.is_empty() {
            let parts: Vec<String> = self.abnormal.iter().map(Abnormal::text).collect();
            sampler.push(format!(
                "unusual in the {} window around it: {}",
                self.window(),
                parts.join("; ")
            ));
        }
        if let Some(i) = &self.inferred {
            sampler.push(i.text.clone());
        }
        match &self.traced {
            Some(t) if sampler.is_empty() => format!("traced: {t}"),
            Some(t) => format!("traced: {t}; the sampler: {}", sampler.join("; ")),
            None if sampler.is_empty() => "nothing unusual in the sampled counters".to_string(),
            None => sampler.join("; "),
        }
    }
}

impl Abnormal {
    /// The source in words: `irq virtio0-input.0 312 (usually 20)`, `hypervisor (steal) 3 ticks
    /// (usually 0)`.
    pub fn text(&self) -> String {
        use crate::units::Nanos;
        let n = |x: u64| crate::units::group_digits(x);
        match self.kind.as_str() {
            "steal" => format!(
                "{} {} ticks (usually {})",
                self.name,
                n(self.count),
                n(self.median)
            ),
            "wait_ns" => format!(
                "{} {} (usually {})",
                self.name,
                Nanos(self.count),
                Nanos(self.median)
            ),
            _ => format!(
                "{} {} {} (usually {})",
                self.kind,
                self.name,
                n(self.count),
                n(self.median)
            ),
        }
    }
}

/// One source's total on a CPU over the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Total {
    pub kind: String,
    pub name: String,
    pub count: u64,
}

/// A CPU's totals over the sampled part of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuTotals {
    pub cpu: usize,
    /// Interrupt and softirq sources with a non-zero total, largest first.
    pub sources: Vec<Total>,
    /// Steal time in USER_HZ ticks (usually 10 ms each).
    pub steal_ticks: u64,
    /// The hypervisor's share of this CPU over the sampled part of the run: the steal time
    /// (when the host ran something else while this virtual CPU wanted to run) over the time
    /// sampled.
    #[serde(default)]
    pub steal_share: f64,
}

/// The sampler's explanation of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Explanation {
    pub intervals: u64,
    /// From the first snapshot to the last, in ns.
    #[serde(default)]
    pub sampled_ns: u64,
    /// The hypervisor's share of the measured CPUs over the sampled part of the run (their
    /// steal time over the time sampled, all measured CPUs together): 0 on bare metal.
    #[serde(default)]
    pub steal_share: f64,
    pub totals: Vec<CpuTotals>,
    pub spikes: Vec<SpikeExplanation>,
    /// Spikes outside every sampled interval (before the first or after the last snapshot).
    pub unexplained_spikes: u64,
}

/// Explains the largest spikes of `d` (at most `max_spikes`); `thread_of` gives, for a CPU, the
/// index of the measuring thread on it (in `d.spec.tids`), if any.
pub fn explain(
    d: &Digest,
    max_spikes: usize,
    thread_of: &dyn Fn(usize) -> Option<usize>,
    waits: Waits,
) -> Explanation {
    let cpus = &d.spec.cpus;
    // Steal ticks over `n` CPUs as a share of the sampled time.
    let share = |ticks: u64, n: usize| {
        let span = d.sampled_ns as f64 * n as f64;
        if span > 0.0 {
            (ticks as f64 * d.tick_ns as f64 / span).min(1.0)
        } else {
            0.0
        }
    };
    let unusual = |x: u64, (m, s): (u64, u64), margin: u64| x > m + margin.max(4 * s);
    let mut out = Vec::new();
    for (sp, i) in d.chosen.iter().take(max_spikes) {
        let Some(c) = cpus.iter().position(|&x| x == sp.cpu) else {
            continue;
        };
        let mut abnormal = Vec::new();
        let mut inferred = None;
        for (s, name) in d.irq_names.iter().enumerate() {
            if unusual(i.irq[s][c], d.irq_centre[s][c], 2) {
                abnormal.push(Abnormal {
                    kind: "irq".into(),
                    name: name.clone(),
                    count: i.irq[s][c],
                    median: d.irq_centre[s][c].0,
                });
            }
        }
        for (s, name) in d.softirq_names.iter().enumerate() {
            if unusual(i.softirq[s][c], d.softirq_centre[s][c], 2) {
                abnormal.push(Abnormal {
                    kind: "softirq".into(),
                    name: name.clone(),
                    count: i.softirq[s][c],
                    median: d.softirq_centre[s][c].0,
                });
            }
        }
        if unusual(i.steal[c], d.steal_centre[c], 1) {
            abnormal.push(Abnormal {
                kind: "steal".into(),
                name: "hypervisor (steal)".into(),
                count: i.steal[c],
                median: d.steal_centre[c].0,
            });
        }
        if let Some(t) = thread_of(sp.cpu).filter(|&t| t < d.spec.tids.len()) {
            let wait = i.wait_ns.get(t).copied().unwrap_or(0);
            if d.wait_total.get(t).is_some_and(|&w| w > 0) {
                let part = sp.size_ns.min(i.end_ns.saturating_sub(sp.at_ns));
                let ends_inside = sp.at_ns.saturating_add(sp.size_ns) <= i.end_ns;
                inferred = Inferred::of(
                    wait,
                    part,
                    i.end_ns.saturating_sub(i.start_ns),
                    ends_inside,
                    waits,
                );
            }
            if unusual(wait, d.wait_centre[t], 100_000) {
                abnormal.push(Abnormal {
                    kind: "wait_ns".into(),
                    name: "the measuring thread waited runnable for its CPU".into(),
                    count: wait,
                    median: d.wait_centre[t].0,
                });
            }
            if unusual(i.ctxt[t].1, d.ctxt_centre[t], 1) {
                abnormal.push(Abnormal {
                    kind: "preemption".into(),
                    name: "involuntary context switches of the measuring thread".into(),
                    count: i.ctxt[t].1,
                    median: d.ctxt_centre[t].0,
                });
            }
        }
        abnormal.sort_by(|a, b| {
            let excess = |x: &Abnormal| x.count as f64 / (x.median.max(1)) as f64;
            excess(b).total_cmp(&excess(a)).then(a.name.cmp(&b.name))
        });
        out.push(SpikeExplanation {
            cpu: sp.cpu,
            at_ns: sp.at_ns,
            size_ns: sp.size_ns,
            interval_start_ns: i.start_ns,
            interval_end_ns: i.end_ns,
            abnormal,
            inferred,
            traced: None,
        });
    }
    let totals = cpus
        .iter()
        .enumerate()
        .map(|(c, &cpu)| {
            let mut sources: Vec<Total> = Vec::new();
            let kinds = [
                ("irq", &d.irq_names, &d.irq_total),
                ("softirq", &d.softirq_names, &d.softirq_total),
            ];
            for (kind, names, totals) in kinds {
                for (s, name) in names.iter().enumerate() {
                    let n = totals[s][c];
                    if n > 0 {
                        sources.push(Total {
                            kind: kind.into(),
                            name: name.clone(),
                            count: n,
                        });
                    }
                }
            }
            sources.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
            CpuTotals {
                cpu,
                sources,
                steal_ticks: d.steal_total[c],
                steal_share: share(d.steal_total[c], 1),
            }
        })
        .collect();
    Explanation {
        intervals: d.intervals,
        sampled_ns: d.sampled_ns,
        steal_share: share(d.steal_total.iter().sum(), cpus.len()),
        totals,
        spikes: out,
        unexplained_spikes: d.unexplained,
    }
}

#[cfg(test)]
mod tests {
    use super::super::sampler::{SamplerSpec, Snapshot, SpikeAt};
    use super::*;
    use crate::causes::procfs::CpuStat;

    fn digest(spikes: &[SpikeAt]) -> Digest {
        let (spec, irq, soft, snaps) = record();
        Digest::of(spec, irq, soft, &snaps, spikes)
    }

    /// Twenty 100 ms intervals on CPU 1: 25 timer interrupts and 3 eth0 interrupts each, except
    /// interval 7, where eth0 fires 300 times and the thread is preempted 5 times, and interval
    /// 12, where the hypervisor steals 4 ticks.
    fn record() -> (SamplerSpec, Vec<String>, Vec<String>, Vec<Snapshot>) {
        let mut snaps = Vec::new();
        let (mut loc, mut eth, mut steal, mut inv, mut wait) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for k in 0..=20u64 {
            snaps.push(Snapshot {
                at_ns: k * 100_000_000,
                irq: vec![vec![eth], vec![loc]],
                softirq: vec![vec![loc]],
                stat: vec![CpuStat {
                    steal,
                    ..CpuStat::default()
                }],
                ctxt: vec![(k * 100, inv)],
                wait_ns: vec![wait],
            });
            wait += if k == 7 { 2_000_000 } else { 10_000 };
            loc += 25;
            eth += if k == 7 { 300 } else { 3 };
            inv += if k == 7 { 5 } else { 0 };
            steal += if k == 12 { 4 } else { 0 };
        }
        (
            SamplerSpec {
                cpus: vec![1],
                tids: vec![99],
            },
            vec!["30 (eth0)".into(), "LOC (Local timer interrupts)".into()],
            vec!["TIMER".into()],
            snaps,
        )
    }

    #[test]
    fn the_abnormal_sources_of_each_spike() {
        let spikes = [
            SpikeAt {
                cpu: 1,
                at_ns: 750_000_000,
                size_ns: 2_000_000,
            },
            SpikeAt {
                cpu: 1,
                at_ns: 1_230_000_000,
                size_ns: 900_000,
            },
            SpikeAt {
                cpu: 1,
                at_ns: 350_000_000,
                size_ns: 100_000,
            },
            SpikeAt {
                cpu: 1,
                at_ns: 5_000_000_000,
                size_ns: 5_000_000,
            },
        ];
        let e = explain(
            &digest(&spikes),
            10,
            &|cpu| (cpu == 1).then_some(0),
            Waits::Sleeps,
        );
        assert_eq!(e.intervals, 20);
        assert_eq!(e.unexplained_spikes, 1, "the spike after the last snapshot");
        assert_eq!(e.spikes.len(), 3);
        // Largest first: the eth0 storm with the wait and the preemptions, most unusual first
        // (200 times the usual wait, 100 times the usual eth0 count).
        let s0 = &e.spikes[0];
        assert_eq!((s0.at_ns, s0.interval_start_ns), (750_000_000, 700_000_000));
        let kinds: Vec<(&str, &str, u64, u64)> = s0
            .abnormal
            .iter()
            .map(|a| (a.kind.as_str(), a.name.as_str(), a.count, a.median))
            .collect();
        assert_eq!(
            kinds,
            [
                (
                    "wait_ns",
                    "the measuring thread waited runnable for its CPU",
                    2_000_000,
                    10_000
                ),
                ("irq", "30 (eth0)", 300, 3),
                (
                    "preemption",
                    "involuntary context switches of the measuring thread",
                    5,
                    0
                )
            ]
        );
        assert_eq!(e.spikes[1].abnormal[0].kind, "steal");
        assert_eq!(e.spikes[1].abnormal[0].count, 4);
        assert!(e.spikes[2].abnormal.is_empty(), "a quiet interval");
        // The thread waited 2 ms of the 2 ms spike: another task held the CPU. In the quiet
        // interval it waited 10 µs of a 100 µs delay: the wakeup itself came late.
        let inferred = |i: usize| e.spikes[i].inferred.as_ref().map(|x| x.kind.as_str());
        assert_eq!(inferred(0), Some("held_by_task"));
        assert_eq!(inferred(1), Some("not_runnable"));
        assert_eq!(inferred(2), Some("not_runnable"));
        assert_eq!(
            e.spikes[2].text(),
            "the wakeup itself came late (the thread waited runnable only 10 µs in the 100 ms window around it): its timer interrupt was late, with interrupts off or the CPU stopped by the hypervisor"
        );
        assert!(e.spikes[0].text().starts_with(
            "unusual in the 100 ms window around it: the measuring thread waited runnable for its CPU 2 ms (usually 10 µs); irq 30 (eth0) 300 (usually 3); "
        ));
        assert!(e.spikes[0]
            .text()
            .ends_with("; another task held the CPU (the measuring thread waited runnable 2 ms in the 100 ms window around it)"));
        let t = &e.totals[0];
        assert_eq!(t.cpu, 1);
        assert_eq!(t.steal_ticks, 4);
        // The hypervisor's share: 4 ticks over the 2 s sampled (one measured CPU).
        assert_eq!(e.sampled_ns, 2_000_000_000);
        let tick = digest(&spikes).tick_ns as f64;
        assert!(
            (t.steal_share - 4.0 * tick / 2e9).abs() < 1e-12,
            "{}",
            t.steal_share
        );
        assert_eq!(e.steal_share, t.steal_share);
        assert!(e.spikes[1].abnormal[0].name.contains("steal"));
        let totals: Vec<(&str, u64)> = t
            .sources
            .iter()
            .map(|s| (s.name.as_str(), s.count))
            .collect();
        assert_eq!(
            totals,
            [
                ("LOC (Local timer interrupts)", 500),
                ("TIMER", 500),
                ("30 (eth0)", 19 * 3 + 300)
            ]
        );
    }

    /// The inference needs only the thread's wait: half the spike's part in the interval or
    /// more is another task's doing, less is the wakeup's or the CPU's; a polling thread's
    /// words differ from a sleeping one's.
    #[test]
    fn the_threads_wait_says_which_side_of_the_wakeup_the_time_was_lost() {
        let of = |wait, part, inside, waits| Inferred::of(wait, part, 100_000_000, inside, waits);
        let kind = |i: Option<Inferred>| i.map(|i| i.kind);
        assert_eq!(
            kind(of(500, 1_000, true, Waits::Sleeps)).as_deref(),
            Some("held_by_task")
        );
        assert_eq!(
            kind(of(499, 1_000, true, Waits::Sleeps)).as_deref(),
            Some("not_runnable")
        );
        let polls = of(0, 3_000_000, true, Waits::Polls).unwrap();
        assert_eq!(
            polls.text,
            "the CPU was taken without a task switch (the thread waited runnable only 0 ns in the 100 ms window around it): interrupts, or the CPU stopped by the hypervisor"
        );
        // A delay that runs past its window's end has its wait counted when the thread is
        // switched in, in a later window: a small wait in this one says nothing.
        assert_eq!(of(0, 3_000_000, false, Waits::Polls), None);
        assert_eq!(of(0, 3_000_000, false, Waits::Sleeps), None);
        assert_eq!(
            kind(of(2_000_000, 3_000_000, false, Waits::Sleeps)).as_deref(),
            Some("held_by_task")
        );
        // Where the kernel does not tell the wait (no schedstat), nothing is inferred.
        let spikes = [SpikeAt {
            cpu: 1,
            at_ns: 350_000_000,
            size_ns: 100_000,
        }];
        let mut d = digest(&spikes);
        d.wait_total = vec![0];
        let e = explain(&d, 3, &|_| Some(0), Waits::Sleeps);
        assert_eq!(e.spikes[0].inferred, None);
        assert_eq!(
            e.spikes[0].text(),
            "nothing unusual in the sampled counters"
        );
    }

    #[test]
    fn at_most_the_largest_spikes_are_explained() {
        let spikes: Vec<SpikeAt> = (0..10u64)
            .map(|k| SpikeAt {
                cpu: 1,
                at_ns: k * 150_000_000,
                size_ns: 1000 + k,
            })
            .collect();
        let e = explain(&digest(&spikes), 3, &|_| None, Waits::Polls);
        let sizes: Vec<u64> = e.spikes.iter().map(|s| s.size_ns).collect();
        assert_eq!(sizes, [1009, 1008, 1007]);
        // A CPU that was not sampled cannot be explained.
        let other = [SpikeAt {
            cpu: 0,
            at_ns: 1,
            size_ns: 1,
        }];
        assert_eq!(
            explain(&digest(&other), 3, &|_| None, Waits::Polls).unexplained_spikes,
            1
        );
    }
}
