//! Exact attribution of delays from kernel events: what ran on a CPU while a measured thread
//! was kept from it, with net durations.
//!
//! The events of one CPU are replayed in time order to cut its time into segments, each
//! charged to exactly one context: a task (the idle task, a measuring thread, any other thread),
//! or an interrupt, system vector, softirq or NMI nested on top of it. Time between two events
//! goes to the innermost context open at the time, so a handler's time excludes everything that
//! interrupted it: the osnoise rule of net durations.
//!
//! A delay is a window on one CPU: a late wakeup from its release to the moment the thread read
//! the clock, or a gap of a polling thread. When the CPU was busy at the window's start, the
//! window reaches back to the start of that busy stretch (at most to when a measuring thread or
//! the idle task last ran): a higher-priority thread that started before the release delayed the
//! wakeup by its whole run, and is charged all of it. Inside a window, a thread is named
//! `comm:pid`, an interrupt by its handler's name, a system vector by its event name
//! (`local_timer`, `reschedule`, ...), a softirq by its vector; time in the idle task or in the
//! measuring thread itself, and time outside the trace, is unexplained: on a virtual machine,
//! that is where the host's steal shows.

use super::tracefs_raw::{Event, Traced};
use super::wakeup::{self, Activation, WakeLatency};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What a cause is.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum CauseKind {
    Nmi,
    Irq,
    Softirq,
    Thread,
    /// The timer interrupt came late (see [`TIMER_LATE_IDLE`] and [`TIMER_LATE_BUSY`]).
    Timer,
    Unexplained,
}

impl CauseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CauseKind::Nmi => "nmi",
            CauseKind::Irq => "irq",
            CauseKind::Softirq => "softirq",
            CauseKind::Thread => "thread",
            CauseKind::Timer => "timer",
            CauseKind::Unexplained => "unexplained",
        }
    }
}

/// The softirq vectors' names, by number.
pub const SOFTIRQ_NAMES: [&str; 10] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

/// Unexplained time in the idle task: the CPU had nothing to run, yet the wakeup had not come
/// (the timer interrupt came late: timer hardware, or on a virtual machine the host).
pub const IDLE: &str = "cpu idle while due";
/// Unexplained time in a measuring thread: the kernel saw it running (for a polling thread,
/// time taken without the kernel knowing: hypervisor steal, SMI; for a timer thread, its own
/// way back from the kernel).
pub const MEASURED: &str = "measuring thread running";
/// Unexplained time outside the trace (before its first or after its last event).
pub const NOT_TRACED: &str = "not traced";
/// The timer interrupt of a wakeup came late while the CPU was idle: nothing on the CPU held
/// it back. On a virtual machine the host delivered it late; on bare metal the CPU was waking
/// from a deep idle state.
pub const TIMER_LATE_IDLE: &str = "timer interrupt late, cpu idle";
/// The timer interrupt of a wakeup came late while a task ran: interrupts were off in the
/// kernel, or on a virtual machine the host delivered it late. The task is not charged: a
/// thread cannot delay an interrupt except by turning interrupts off.
pub const TIMER_LATE_BUSY: &str = "timer interrupt late, cpu busy";
/// The measuring thread's way from the switch-in back to user space, where it read the clock.
pub const RETURN: &str = "return to user space";
/// The woken thread waited for the CPU to leave the idle task.
pub const IDLE_EXIT: &str = "leaving idle";

/// Why a thread that ran after the measuring thread woke held the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Its priority was higher than, or equal to, the measuring thread's: the scheduler rightly
    /// ran it first.
    Priority,
    /// Its priority was lower: it held the CPU in a kernel section that could not be preempted
    /// (with `preempt=none` or `voluntary`, any system call until its next preemption point).
    NonPreemptible,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Priority => "higher or equal priority",
            Why::NonPreemptible => "non-preemptible kernel section",
        }
    }

    /// A cause's kind with this reason, in a table's narrow column: `thread:prio`,
    /// `thread:kernel`.
    pub fn kind_text(why: Option<Why>, kind: CauseKind) -> String {
        match why {
            Some(Why::Priority) => "thread:prio".to_string(),
            Some(Why::NonPreemptible) => "thread:kernel".to_string(),
            None => kind.as_str().to_string(),
        }
    }
}

/// A kernel priority as a policy and priority: `rt 99` (SCHED_FIFO or SCHED_RR), `nice 0`
/// (SCHED_OTHER, BATCH or IDLE), `deadline`.
pub fn prio_text(prio: i32) -> String {
    match prio {
        p if p < 0 => "deadline".to_string(),
        p if p < 100 => format!("rt {}", 99 - p),
        p => format!("nice {}", p - 120),
    }
}

/// Who a CPU's time was charged to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Ctx {
    /// Before the first context switch, until it says which task ran.
    Unknown,
    Idle,
    Measured,
    Thread {
        pid: i32,
        comm: String,
    },
    Irq(String),
    Vector(String),
    Softirq(u32),
    Nmi,
}

impl Ctx {
    fn task(pid: i32, comm: &str, measured: &[i32]) -> Ctx {
        if pid == 0 {
            Ctx::Idle
        } else if measured.contains(&pid) {
            Ctx::Measured
        } else {
            Ctx::Thread {
                pid,
                comm: comm.to_string(),
            }
        }
    }

    fn quiet(&self) -> bool {
        matches!(self, Ctx::Idle | Ctx::Measured)
    }

    fn cause(&self) -> (CauseKind, String) {
        match self {
            Ctx::Unknown => (CauseKind::Unexplained, NOT_TRACED.to_string()),
            Ctx::Idle => (CauseKind::Unexplained, IDLE.to_string()),
            Ctx::Measured => (CauseKind::Unexplained, MEASURED.to_string()),
            Ctx::Thread { pid, comm } => (CauseKind::Thread, format!("{comm}:{pid}")),
            Ctx::Irq(name) | Ctx::Vector(name) => (CauseKind::Irq, name.clone()),
            Ctx::Softirq(v) => (
                CauseKind::Softirq,
                SOFTIRQ_NAMES
                    .get(*v as usize)
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| format!("vector {v}")),
            ),
            Ctx::Nmi => (CauseKind::Nmi, "NMI".to_string()),
        }
    }

    fn handler(&self) -> bool {
        matches!(
            self,
            Ctx::Irq(_) | Ctx::Vector(_) | Ctx::Softirq(_) | Ctx::Nmi
        )
    }
}

/// A stretch of a CPU's time charged to one context; `instance` tells one handler invocation
/// (or one stay of a task on the CPU) from the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    start: u64,
    end: u64,
    ctx: usize,
    instance: u64,
}

/// One CPU's time, cut into segments.
struct Timeline {
    segments: Vec<Segment>,
    /// Each task's kernel priority, as its last switch showed it.
    prio: HashMap<i32, i32>,
    /// Each task's command, as its last switch or wakeup showed it.
    comms: HashMap<i32, String>,
}

/// Interned contexts.
#[derive(Default)]
struct Contexts {
    all: Vec<Ctx>,
    index: HashMap<Ctx, usize>,
}

impl Contexts {
    fn id(&mut self, c: Ctx) -> usize {
        if let Some(&i) = self.index.get(&c) {
            return i;
        }
        self.all.push(c.clone());
        self.index.insert(c, self.all.len() - 1);
        self.all.len() - 1
    }
}

/// Replays one CPU's events (in time order) into segments; `known` holds the priorities and
/// commands learnt from earlier events of the CPU, if any.
fn timeline<'a>(
    events: impl Iterator<Item = &'a Traced>,
    measured: &[i32],
    ctxs: &mut Contexts,
    known: Known,
) -> Timeline {
    let mut segments: Vec<Segment> = Vec::new();
    let mut next_instance = 0u64;
    let mut new_instance = || {
        next_instance += 1;
        next_instance
    };
    let unknown = ctxs.id(Ctx::Unknown);
    let mut task = (unknown, new_instance());
    let mut stack: Vec<(usize, u64)> = Vec::new();
    let mut last: Option<u64> = None;
    let mut seen_switch = false;
    let mut task_pid: Option<i32> = None;
    let Known {
        mut comms,
        mut prio,
    } = known;
    for e in events {
        let ts = e.ts_ns;
        if let Some(prev) = last {
            if ts > prev {
                let (ctx, instance) = stack.last().copied().unwrap_or(task);
                match segments.last_mut() {
                    Some(s) if s.end == prev && s.ctx == ctx && s.instance == instance => {
                        s.end = ts
                    }
                    _ => segments.push(Segment {
                        start: prev,
                        end: ts,
                        ctx,
                        instance,
                    }),
                }
            }
        }
        last = Some(last.map_or(ts, |p| p.max(ts)));
        // A switch the trace missed (the kernel drops events while RCU does not watch, as
        // around idle): the record names the task that is current. The task changed after the
        // last handler or switch: the task time since then is the new task's.
        if let (Some(pid), Some(known)) = (e.pid, task_pid) {
            if pid != known && seen_switch {
                let comm = comms.get(&pid).cloned().unwrap_or_default();
                let new = (ctxs.id(Ctx::task(pid, &comm, measured)), new_instance());
                for s in segments.iter_mut().rev() {
                    if s.ctx != task.0 || s.instance != task.1 {
                        break;
                    }
                    s.ctx = new.0;
                    s.instance = new.1;
                }
                task = new;
                task_pid = Some(pid);
            }
        }
        match &e.event {
            Event::Wakeup { pid, comm, .. } => {
                comms.insert(*pid, comm.clone());
            }
            Event::Switch {
                prev_pid,
                prev_comm,
                prev_prio,
                next_pid,
                next_comm,
                next_prio,
                ..
            } => {
                prio.insert(*prev_pid, *prev_prio);
                prio.insert(*next_pid, *next_prio);
                comms.insert(*prev_pid, prev_comm.clone());
                comms.insert(*next_pid, next_comm.clone());
                task_pid = Some(*next_pid);
                if !seen_switch {
                    // What ran before the first switch is its prev task.
                    seen_switch = true;
                    let before = ctxs.id(Ctx::task(*prev_pid, prev_comm, measured));
                    for s in segments.iter_mut().filter(|s| s.ctx == unknown) {
                        s.ctx = before;
                    }
                }
                // A switch happens in task context: anything still open lost its exit.
                stack.clear();
                task = (
                    ctxs.id(Ctx::task(*next_pid, next_comm, measured)),
                    new_instance(),
                );
            }
            Event::IrqEntry { name, .. } => {
                stack.push((ctxs.id(Ctx::Irq(name.clone())), new_instance()));
            }
            Event::IrqExit { .. } => close(&mut stack, ctxs, &|c| matches!(c, Ctx::Irq(_))),
            Event::VectorEntry { name, .. } => {
                stack.push((ctxs.id(Ctx::Vector(name.clone())), new_instance()));
            }
            Event::VectorExit { name, .. } => close(
                &mut stack,
                ctxs,
                &|c| matches!(c, Ctx::Vector(n) if n == name),
            ),
            Event::SoftirqEntry { vec } => {
                stack.push((ctxs.id(Ctx::Softirq(*vec)), new_instance()));
            }
            Event::SoftirqExit { vec } => close(
                &mut stack,
                ctxs,
                &|c| matches!(c, Ctx::Softirq(v) if v == vec),
            ),
            Event::Nmi { delta_ns, .. } => {
                // One event at the NMI's end: carve its duration out of what it interrupted.
                let d = (*delta_ns).max(0) as u64;
                let nmi = ctxs.id(Ctx::Nmi);
                if let Some(s) = segments.last_mut().filter(|s| s.end == ts && d > 0) {
                    let taken = d.min(s.end - s.start);
                    s.end -= taken;
                    let empty = s.end == s.start;
                    let seg = Segment {
                        start: ts - taken,
                        end: ts,
                        ctx: nmi,
                        instance: new_instance(),
                    };
                    if empty {
                        *s = seg;
                    } else {
                        segments.push(seg);
                    }
                }
            }
            _ => {}
        }
    }
    Timeline {
        segments,
        prio,
        comms,
    }
}

/// What the events of a CPU told so far about its tasks.
#[derive(Default)]
struct Known {
    comms: HashMap<i32, String>,
    prio: HashMap<i32, i32>,
}

/// Pops `stack` down to the innermost entry that `f` matches; an exit without one (its entry
/// was lost) changes nothing.
fn close(stack: &mut Vec<(usize, u64)>, ctxs: &Contexts, f: &dyn Fn(&Ctx) -> bool) {
    if let Some(pos) = stack.iter().rposition(|(c, _)| f(&ctxs.all[*c])) {
        stack.truncate(pos);
    }
}

/// A delay to explain: on `cpu`, from `start_ns` to `end_ns` (CLOCK_MONOTONIC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub cpu: usize,
    pub start_ns: u64,
    pub end_ns: u64,
    /// For a late wakeup: the thread that slept until the release at `start_ns` and read the
    /// clock at `end_ns`. Its window is cut along the wakeup's path. None for a gap of a polling
    /// thread.
    pub tid: Option<i32>,
}

/// How far back a window may reach to the start of a busy stretch.
pub const MAX_REACH_BACK_NS: u64 = 1_000_000_000;

/// One cause over a run: in how many windows it took time, how much in all, and the most in one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cause {
    pub cpu: usize,
    pub kind: CauseKind,
    pub name: String,
    /// For a thread that delayed a wakeup: why it could, and its policy and priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<Why>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    pub count: u64,
    pub stolen_ns: u64,
    pub max_ns: u64,
}

/// Upper bounds of the handler-duration buckets, in ns (the last bucket is open).
pub const HANDLER_BUCKETS_NS: [u64; 11] = [
    1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 512_000, 1_024_000,
];

/// Every invocation of one interrupt, vector, softirq or NMI on a CPU over the whole trace, net of
/// what interrupted it (LatencyMon's ISR and DPC table).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Handler {
    pub cpu: usize,
    pub kind: CauseKind,
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Invocations per bucket: below 1 µs, 1-2 µs, ..., 512 µs-1.024 ms, and longer.
    pub buckets: Vec<u64>,
}

/// What took time in one window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Share {
    pub kind: CauseKind,
    pub name: String,
    pub ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<Why>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// One explained window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Explained {
    pub cpu: usize,
    /// The window as given, and where it starts after reaching back to its busy stretch.
    pub start_ns: u64,
    pub end_ns: u64,
    pub from_ns: u64,
    /// Largest first.
    pub shares: Vec<Share>,
    /// For a late wakeup: its path through the kernel, when the trace holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<Activation>,
}

/// The attribution of a run's windows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Attribution {
    pub windows: u64,
    /// By stolen time, largest first.
    pub causes: Vec<Cause>,
    pub handlers: Vec<Handler>,
    /// Per measuring thread that sleeps on a timer: its wakeups' IRQ and thread latency.
    pub latency: Vec<WakeLatency>,
    /// Every window, in the order given.
    #[serde(skip)]
    pub explained: Vec<Explained>,
}

/// Attributes `windows` with the trace `events` (each CPU's in time order; CPUs may be
/// interleaved). `measured` are the measuring threads' ids. Handler statistics cover `cpus`.
pub fn attribute(
    events: &[Traced],
    cpus: &[usize],
    measured: &[i32],
    windows: &[Window],
) -> Attribution {
    let mut a = Attributor::new(measured);
    for &cpu in cpus {
        let mine: Vec<Traced> = events.iter().filter(|e| e.cpu == cpu).cloned().collect();
        let ws: Vec<(usize, Window)> = windows
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, w)| w.cpu == cpu)
            .collect();
        a.add(cpu, &mine, &ws, (0, u64::MAX));
    }
    a.finish()
}

/// An attribution built part by part: each call of [`Attributor::add`] replays a stretch of one
/// CPU's events and counts what happened from one time to the next, so that a run's trace can
/// be read once, in pieces of bounded size (see [`Chunked`]). Over a whole trace in one piece
/// per CPU it is [`attribute`].
pub struct Attributor {
    measured: Vec<i32>,
    ctxs: Contexts,
    totals: HashMap<(usize, CauseKind, String), Cause>,
    handlers: HashMap<(usize, CauseKind, String), Handler>,
    latency: std::collections::BTreeMap<(usize, i32), wakeup::LatencySum>,
    softirq: HashMap<usize, crate::histo::Histogram<u64>>,
    known: HashMap<usize, Known>,
    explained: Vec<(usize, Explained)>,
}

impl Attributor {
    pub fn new(measured: &[i32]) -> Attributor {
        Attributor {
            measured: measured.to_vec(),
            ctxs: Contexts::default(),
            totals: HashMap::new(),
            handlers: HashMap::new(),
            latency: std::collections::BTreeMap::new(),
            softirq: HashMap::new(),
            known: HashMap::new(),
            explained: Vec::new(),
        }
    }

    /// Replays `events` (all on `cpu`, in time order) and counts the handler invocations,
    /// wakeups and softirqs that started in `count` (from..to); explains `windows` (each with
    /// its index among the run's windows), whose events must all be in `events`.
    pub fn add(
        &mut self,
        cpu: usize,
        events: &[Traced],
        windows: &[(usize, Window)],
        (from, to): (u64, u64),
    ) {
        let known = self.known.remove(&cpu).unwrap_or_default();
        let tl = timeline(events.iter(), &self.measured, &mut self.ctxs, known);
        let ctxs = &self.ctxs;
        let segs = &tl.segments;
        // Handlers: net time per invocation, counted where it started.
        let mut per_instance: HashMap<u64, (usize, u64, u64)> = HashMap::new();
        for s in segs.iter().filter(|s| ctxs.all[s.ctx].handler()) {
            let e = per_instance
                .entry(s.instance)
                .or_insert((s.ctx, s.start, 0));
            e.1 = e.1.min(s.start);
            e.2 += s.end - s.start;
        }
        for (ctx, start, ns) in per_instance.into_values() {
            if !(from..to).contains(&start) {
                continue;
            }
            let (kind, name) = ctxs.all[ctx].cause();
            let h = self
                .handlers
                .entry((cpu, kind, name.clone()))
                .or_insert_with(|| Handler {
                    cpu,
                    kind,
                    name,
                    count: 0,
                    total_ns: 0,
                    max_ns: 0,
                    buckets: vec![0; HANDLER_BUCKETS_NS.len() + 1],
                });
            h.count += 1;
            h.total_ns += ns;
            h.max_ns = h.max_ns.max(ns);
            let b = HANDLER_BUCKETS_NS.partition_point(|&ub| ub <= ns);
            h.buckets[b] += 1;
        }
        let acts = wakeup::activations(events.iter(), cpu, &self.measured);
        for a in &acts {
            if a.wakeup_ns.is_some_and(|t| (from..to).contains(&t)) {
                self.latency.entry((cpu, a.tid)).or_default().add(a);
            }
        }
        wakeup::softirq_latency_into(
            events.iter(),
            (from, to),
            self.softirq
                .entry(cpu)
                .or_insert_with(crate::engine::record::new_histogram),
        );
        for (wi, w) in windows {
            let e = match w.tid {
                Some(tid) => {
                    let mine: Vec<Activation> =
                        acts.iter().filter(|a| a.tid == tid).copied().collect();
                    explain_wakeup(&tl, ctxs, w, tid, &mine)
                }
                None => explain_gap(&tl, ctxs, w),
            };
            for sh in &e.shares {
                let c = self
                    .totals
                    .entry((cpu, sh.kind, sh.name.clone()))
                    .or_insert_with(|| Cause {
                        cpu,
                        kind: sh.kind,
                        name: sh.name.clone(),
                        why: sh.why,
                        policy: sh.policy.clone(),
                        count: 0,
                        stolen_ns: 0,
                        max_ns: 0,
                    });
                c.count += 1;
                c.stolen_ns += sh.ns;
                c.max_ns = c.max_ns.max(sh.ns);
            }
            self.explained.push((*wi, e));
        }
        self.known.insert(
            cpu,
            Known {
                comms: tl.comms,
                prio: tl.prio,
            },
        );
    }

    pub fn finish(self) -> Attribution {
        let mut causes: Vec<Cause> = self.totals.into_values().collect();
        causes.sort_by(|a, b| {
            b.stolen_ns
                .cmp(&a.stolen_ns)
                .then(a.cpu.cmp(&b.cpu))
                .then(a.name.cmp(&b.name))
        });
        let mut handlers: Vec<Handler> = self.handlers.into_values().collect();
        handlers.sort_by(|a, b| {
            a.cpu
                .cmp(&b.cpu)
                .then(b.total_ns.cmp(&a.total_ns))
                .then(a.name.cmp(&b.name))
        });
        let empty = crate::engine::record::new_histogram();
        // One row per thread, on the CPU that holds most of its wakeups (a thread that woke
        // elsewhere, before it was pinned or while it migrated, would otherwise give a second
        // row under another CPU, with that CPU's softirqs again), in CPU order.
        let mut by_tid: std::collections::BTreeMap<i32, Vec<(usize, wakeup::LatencySum)>> =
            std::collections::BTreeMap::new();
        for ((cpu, tid), sum) in self.latency {
            by_tid.entry(tid).or_default().push((cpu, sum));
        }
        let mut latency: Vec<WakeLatency> = by_tid
            .into_iter()
            .filter_map(|(tid, mut sums)| {
                sums.sort_by(|a, b| {
                    b.1.activations()
                        .cmp(&a.1.activations())
                        .then(a.0.cmp(&b.0))
                });
                let mut it = sums.into_iter();
                let (cpu, mut sum) = it.next()?;
                for (_, other) in it {
                    sum.merge(&other);
                }
                Some(sum.finish(cpu, tid, self.softirq.get(&cpu).unwrap_or(&empty)))
            })
            .collect();
        latency.sort_by_key(|l| (l.cpu, l.tid));
        let mut explained = self.explained;
        explained.sort_by_key(|(wi, _)| *wi);
        Attribution {
            windows: explained.len() as u64,
            causes,
            handlers,
            latency,
            explained: explained.into_iter().map(|(_, e)| e).collect(),
        }
    }
}

/// How far before the first time it counts a piece of [`Chunked`] replays a CPU's events: a
/// window reaches back at most [`MAX_REACH_BACK_NS`] to its busy stretch.
pub const LEAD_NS: u64 = MAX_REACH_BACK_NS + 10_000_000;
/// How far past the last time it counts a piece replays: what started before then (a handler, a
/// wakeup on its way to the CPU) ends within it.
pub const MARGIN_NS: u64 = 100_000_000;

/// A run's trace attributed as it is read, event by event, in pieces of about `chunk` events
/// per CPU: memory holds one piece per CPU, whatever the run's length.
///
/// A CPU's piece is replayed from [`LEAD_NS`] before the first time it counts (with the last
/// context switch and each measuring thread's last `hrtimer_start` before that, which say what
/// ran and what was armed) to [`MARGIN_NS`] after the last; a window is explained in the piece
/// that holds all of it.
pub struct Chunked {
    attributor: Attributor,
    chunk: usize,
    cpus: Vec<CpuPiece>,
}

struct CpuPiece {
    cpu: usize,
    events: Vec<Traced>,
    /// The first time not yet counted.
    from: u64,
    /// This CPU's windows by start, and how many have been explained.
    windows: Vec<(usize, Window)>,
    done: usize,
}

impl Chunked {
    /// For the run's `windows` on `cpus`, in pieces of `chunk` events per CPU.
    pub fn new(cpus: &[usize], measured: &[i32], windows: &[Window], chunk: usize) -> Chunked {
        let cpus = cpus
            .iter()
            .map(|&cpu| {
                let mut ws: Vec<(usize, Window)> = windows
                    .iter()
                    .copied()
                    .enumerate()
                    .filter(|(_, w)| w.cpu == cpu)
                    .collect();
                ws.sort_by_key(|(i, w)| (w.start_ns, *i));
                CpuPiece {
                    cpu,
                    events: Vec::new(),
                    from: 0,
                    windows: ws,
                    done: 0,
                }
            })
            .collect();
        Chunked {
            attributor: Attributor::new(measured),
            chunk: chunk.max(1),
            cpus,
        }
    }

    /// The next event; each CPU's must come in time order. Events of CPUs not traced are ignored.
    pub fn push(&mut self, e: Traced) {
        let Some(i) = self.cpus.iter().position(|c| c.cpu == e.cpu) else {
            return;
        };
        self.cpus[i].events.push(e);
        let p = &self.cpus[i];
        if p.events.len() >= self.chunk {
            let span = p.events.last().map_or(0, |l| l.ts_ns) - p.events[0].ts_ns;
            // A piece spans enough time to make progress, or has grown far beyond its size.
            if span >= 2 * (LEAD_NS + MARGIN_NS) || p.events.len() >= 16 * self.chunk {
                self.piece(i, false);
            }
        }
    }

    /// Counts a piece of CPU `i`'s events: all that is left when `last`.
    fn piece(&mut self, i: usize, last: bool) {
        let p = &mut self.cpus[i];
        let Some(data_end) = p.events.last().map(|e| e.ts_ns) else {
            return;
        };
        let mut to = if last {
            u64::MAX
        } else {
            data_end.saturating_sub(MARGIN_NS)
        };
        // A window not whole in this piece waits for the next, and what comes after it.
        let mut end = p.done;
        while end < p.windows.len() && p.windows[end].1.start_ns < to {
            let w = &p.windows[end].1;
            if !last && w.end_ns.max(w.start_ns).saturating_add(MARGIN_NS) > data_end {
                to = w.start_ns;
                break;
            }
            end += 1;
        }
        if to <= p.from {
            if p.events.len() < 16 * self.chunk {
                return;
            }
            // A window longer than the piece can hold: explained with what the piece has.
            to = data_end.saturating_sub(MARGIN_NS).max(p.from + 1);
            while end < p.windows.len() && p.windows[end].1.start_ns < to {
                end += 1;
            }
        }
        self.attributor
            .add(p.cpu, &p.events, &p.windows[p.done..end], (p.from, to));
        p.done = end;
        p.from = to;
        if last {
            p.events = Vec::new();
            return;
        }
        // Keep the lead of the next piece, and what says what ran and what was armed then.
        let cut = to.saturating_sub(LEAD_NS);
        let keep_from = p.events.partition_point(|e| e.ts_ns < cut);
        let mut carried: Vec<Traced> = Vec::new();
        let mut armed: Vec<i32> = Vec::new();
        let mut switched = false;
        for e in p.events[..keep_from].iter().rev() {
            match &e.event {
                Event::Switch { .. } if !switched => {
                    switched = true;
                    carried.push(e.clone());
                }
                Event::HrtimerStart { .. } => {
                    if let Some(pid) = e.pid.filter(|pid| {
                        self.attributor.measured.contains(pid) && !armed.contains(pid)
                    }) {
                        armed.push(pid);
                        carried.push(e.clone());
                    }
                }
                _ => {}
            }
            if switched && armed.len() == self.attributor.measured.len() {
                break;
            }
        }
        carried.reverse();
        p.events.drain(..keep_from);
        carried.append(&mut p.events);
        p.events = carried;
    }

    /// Counts what is left and returns the attribution.
    pub fn finish(mut self) -> Attribution {
        for i in 0..self.cpus.len() {
            self.piece(i, true);
        }
        self.attributor.finish()
    }
}

/// A share of a window before its time is known: what a context is charged as.
fn label(ctx: &Ctx, prio: &HashMap<i32, i32>) -> Share {
    let (kind, name) = ctx.cause();
    let policy = match ctx {
        Ctx::Thread { pid, .. } => prio.get(pid).map(|&p| prio_text(p)),
        _ => None,
    };
    Share {
        kind,
        name,
        ns: 0,
        why: None,
        policy,
    }
}

/// Adds what ran on the CPU from `from` to `to` to `out`, each context charged as `label` says;
/// returns the time the segments covered.
fn charge(
    segs: &[Segment],
    ctxs: &Contexts,
    (from, to): (u64, u64),
    label: &dyn Fn(&Ctx) -> Share,
    out: &mut Vec<Share>,
) -> u64 {
    if to <= from {
        return 0;
    }
    let first = segs.partition_point(|s| s.end <= from);
    let mut covered = 0;
    for s in segs[first..].iter().take_while(|s| s.start < to) {
        let ns = s.end.min(to).saturating_sub(s.start.max(from));
        if ns == 0 {
            continue;
        }
        covered += ns;
        let sh = label(&ctxs.all[s.ctx]);
        match out
            .iter_mut()
            .find(|x| x.kind == sh.kind && x.name == sh.name && x.why == sh.why)
        {
            Some(x) => x.ns += ns,
            None => out.push(Share { ns, ..sh }),
        }
    }
    covered
}

/// The window's shares, largest first, with the time no segment covered as [`NOT_TRACED`].
fn finish(w: &Window, from: u64, mut out: Vec<Share>, covered: u64) -> Vec<Share> {
    let missing = (w.end_ns.max(w.start_ns) - from).saturating_sub(covered);
    if missing > 0 {
        match out.iter_mut().find(|s| s.name == NOT_TRACED) {
            Some(s) => s.ns += missing,
            None => out.push(Share {
                kind: CauseKind::Unexplained,
                name: NOT_TRACED.to_string(),
                ns: missing,
                why: None,
                policy: None,
            }),
        }
    }
    out.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.name.cmp(&b.name)));
    out
}

/// What ran during one gap window: when the CPU was busy at its start, the window reaches back
/// to the start of that busy stretch.
fn explain_gap(tl: &Timeline, ctxs: &Contexts, w: &Window) -> Explained {
    let segs = &tl.segments;
    let end = w.end_ns.max(w.start_ns);
    // The first segment that ends after the window starts.
    let mut first = segs.partition_point(|s| s.end <= w.start_ns);
    let mut from = w.start_ns;
    if first < segs.len() && segs[first].start <= w.start_ns && !ctxs.all[segs[first].ctx].quiet() {
        // Busy at the start: reach back over contiguous busy segments, a bounded way.
        let limit = w.start_ns.saturating_sub(MAX_REACH_BACK_NS);
        while first > 0 {
            let prev = &segs[first - 1];
            if prev.end != segs[first].start || ctxs.all[prev.ctx].quiet() || prev.end <= limit {
                break;
            }
            first -= 1;
        }
        from = segs[first].start.max(limit).min(w.start_ns);
    }
    let mut out = Vec::new();
    let covered = charge(segs, ctxs, (from, end), &|c| label(c, &tl.prio), &mut out);
    Explained {
        cpu: w.cpu,
        start_ns: w.start_ns,
        end_ns: w.end_ns,
        from_ns: from,
        shares: finish(w, from, out, covered),
        path: None,
    }
}

/// What delayed one wakeup, cut along its path (see the module's documentation): nothing before
/// the wakeup is charged to a thread.
fn explain_wakeup(
    tl: &Timeline,
    ctxs: &Contexts,
    w: &Window,
    tid: i32,
    acts: &[Activation],
) -> Explained {
    let segs = &tl.segments;
    let (release, read) = (w.start_ns, w.end_ns.max(w.start_ns));
    let path = wakeup::find(acts, release, read).copied();
    let clamp = |t: Option<u64>| t.map(|t| t.clamp(release, read));
    let wakeup_at = path.and_then(|a| clamp(a.wakeup_ns));
    let irq_at = path
        .and_then(|a| clamp(a.irq_ns.or(a.callback_ns)))
        .or(wakeup_at);
    let switch_at = path.and_then(|a| clamp(a.switch_ns));
    let mine = path
        .and_then(|a| a.prio)
        .or_else(|| tl.prio.get(&tid).copied());
    // After the wakeup: a thread that held the CPU did so by priority or in a section that
    // could not be preempted.
    let runnable = |c: &Ctx| -> Share {
        let mut sh = label(c, &tl.prio);
        match c {
            Ctx::Thread { pid, .. } => {
                let theirs = tl.prio.get(pid).copied();
                sh.why = Some(match (theirs, mine) {
                    (Some(t), Some(m)) if t > m => Why::NonPreemptible,
                    _ => Why::Priority,
                });
            }
            Ctx::Idle => sh.name = IDLE_EXIT.to_string(),
            _ => {}
        }
        sh
    };
    let mut out = Vec::new();
    let mut covered = 0;
    match (irq_at, wakeup_at) {
        (Some(irq), Some(woken)) => {
            // The interrupt entry precedes the wakeup it causes; keep the stretches disjoint
            // however the events came.
            let irq = irq.min(woken);
            // Before the timer interrupt: only a handler (interrupts off) or NMI held it back.
            let late = |c: &Ctx| -> Share {
                match c {
                    Ctx::Irq(_) | Ctx::Vector(_) | Ctx::Nmi | Ctx::Unknown => label(c, &tl.prio),
                    Ctx::Idle => timer_late(TIMER_LATE_IDLE),
                    _ => timer_late(TIMER_LATE_BUSY),
                }
            };
            covered += charge(segs, ctxs, (release, irq), &late, &mut out);
            covered += charge(segs, ctxs, (irq, woken), &|c| label(c, &tl.prio), &mut out);
            let on = switch_at.unwrap_or(read).max(woken);
            covered += charge(segs, ctxs, (woken, on), &runnable, &mut out);
            let back = |c: &Ctx| -> Share {
                let mut sh = label(c, &tl.prio);
                if matches!(c, Ctx::Measured) {
                    sh.name = RETURN.to_string();
                }
                sh
            };
            covered += charge(segs, ctxs, (on, read), &back, &mut out);
        }
        _ => {
            // No wakeup in the trace: the thread did not sleep (its previous activation ran
            // past this release) and was runnable from the release on.
            covered += charge(segs, ctxs, (release, read), &runnable, &mut out);
        }
    }
    Explained {
        cpu: w.cpu,
        start_ns: w.start_ns,
        end_ns: w.end_ns,
        from_ns: release,
        shares: finish(w, release, out, covered),
        path,
    }
}

/// A share of a late timer interrupt.
fn timer_late(name: &str) -> Share {
    Share {
        kind: CauseKind::Timer,
        name: name.to_string(),
        ns: 0,
        why: None,
        policy: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread with wakeups on two CPUs (it woke once on CPU 0 before it was pinned to its
    /// CPU 1) has one row of latencies, on CPU 1 where most of them were, with every wakeup in it;
    /// the rows come in CPU order. Two rows under CPU 0 once printed its softirqs twice and
    /// labelled the CPU 1 thread's note "CPU 0".
    #[test]
    fn a_thread_has_one_latency_row_on_its_own_cpu() {
        let act = |cpu: usize, tid: i32, expiry: u64| Activation {
            cpu,
            tid,
            expiry_ns: Some(expiry),
            irq_ns: Some(expiry + 1_000),
            callback_ns: Some(expiry + 2_000),
            wakeup_ns: Some(expiry + 3_000),
            switch_ns: Some(expiry + 5_000),
            prio: Some(49),
        };
        let mut a = Attributor::new(&[10, 11]);
        for k in 0..5u64 {
            a.latency
                .entry((1, 11))
                .or_default()
                .add(&act(1, 11, 1_000_000 * k));
            a.latency
                .entry((0, 10))
                .or_default()
                .add(&act(0, 10, 1_000_000 * k));
        }
        a.latency.entry((0, 11)).or_default().add(&act(0, 11, 7));
        let l = a.finish().latency;
        let rows: Vec<(usize, i32, u64)> =
            l.iter().map(|l| (l.cpu, l.tid, l.activations)).collect();
        assert_eq!(rows, [(0, 10, 5), (1, 11, 6)]);
        assert_eq!(l[1].thread_ns.as_ref().map(|p| p.count), Some(6));
    }

    fn ev(ts_ns: u64, event: Event) -> Traced {
        Traced {
            ts_ns,
            cpu: 1,
            pid: None,
            event,
        }
    }

    fn switch(ts: u64, prev: (i32, &str), next: (i32, &str)) -> Traced {
        ev(
            ts,
            Event::Switch {
                prev_pid: prev.0,
                prev_comm: prev.1.to_string(),
                prev_prio: 120,
                prev_state: 0,
                next_pid: next.0,
                next_comm: next.1.to_string(),
                next_prio: 120,
            },
        )
    }

    fn share(e: &Explained, name: &str) -> u64 {
        e.shares
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.ns)
            .sum()
    }

    const ME: (i32, &str) = (100, "sg-timer-0");
    const IDLE_TASK: (i32, &str) = (0, "swapper/1");
    const HOG: (i32, &str) = (200, "hog");

    /// A thread with an interrupt nested in it, a softirq after the interrupt, and a timer
    /// vector that interrupts the softirq: every context gets its net time, and the window's
    /// shares add up to its length.
    #[test]
    fn nested_handlers_get_net_time() {
        let events = vec![
            switch(0, ME, IDLE_TASK),
            switch(1_000, IDLE_TASK, HOG),
            ev(
                2_000,
                Event::IrqEntry {
                    irq: 27,
                    name: "eth0".into(),
                },
            ),
            ev(5_000, Event::IrqExit { irq: 27 }),
            ev(5_000, Event::SoftirqEntry { vec: 3 }),
            ev(
                6_000,
                Event::VectorEntry {
                    name: "local_timer".into(),
                    vector: 236,
                },
            ),
            ev(
                7_500,
                Event::VectorExit {
                    name: "local_timer".into(),
                    vector: 236,
                },
            ),
            ev(9_000, Event::SoftirqExit { vec: 3 }),
            switch(12_000, HOG, ME),
        ];
        let w = Window {
            cpu: 1,
            start_ns: 1_500,
            end_ns: 12_500,
            tid: None,
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        // Busy with the hog at 1.5 µs: the window reaches back to the hog's start at 1 µs.
        assert_eq!(e.from_ns, 1_000);
        assert_eq!(share(e, "eth0"), 3_000);
        assert_eq!(share(e, "NET_RX"), 2_500);
        assert_eq!(share(e, "local_timer"), 1_500);
        assert_eq!(share(e, "hog:200"), 1_000 + 3_000);
        // After 12 µs the measuring thread ran; the trace ends there.
        assert_eq!(share(e, NOT_TRACED), 500);
        let total: u64 = e.shares.iter().map(|s| s.ns).sum();
        assert_eq!(total, 12_500 - 1_000);
        assert_eq!(a.causes[0].name, "hog:200");
        assert_eq!(a.causes[0].kind, CauseKind::Thread);
        let irq = a.handlers.iter().find(|h| h.name == "eth0").unwrap();
        assert_eq!((irq.count, irq.total_ns, irq.max_ns), (1, 3_000, 3_000));
        // 3 µs falls in the 2-4 µs bucket.
        assert_eq!(irq.buckets[2], 1);
    }

    /// The window of a late wakeup on an idle CPU starts at the release: idle time before it is
    /// not charged, idle time after it is unexplained, and the timer interrupt is an irq.
    #[test]
    fn idle_cpu_window_starts_at_the_release() {
        let events = vec![
            switch(0, ME, IDLE_TASK),
            ev(
                50_000,
                Event::VectorEntry {
                    name: "local_timer".into(),
                    vector: 236,
                },
            ),
            ev(
                53_000,
                Event::VectorExit {
                    name: "local_timer".into(),
                    vector: 236,
                },
            ),
            switch(55_000, IDLE_TASK, ME),
            switch(60_000, ME, IDLE_TASK),
        ];
        let w = Window {
            cpu: 1,
            start_ns: 40_000,
            end_ns: 56_000,
            tid: None,
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        assert_eq!(e.from_ns, 40_000);
        assert_eq!(share(e, IDLE), 10_000 + 2_000);
        assert_eq!(share(e, "local_timer"), 3_000);
        assert_eq!(share(e, MEASURED), 1_000);
    }

    /// A competing thread that starts while the measuring thread sleeps and runs past two
    /// releases is charged its whole run, once, across the one window of the wakeup it delayed.
    #[test]
    fn a_competitor_is_charged_its_whole_run() {
        // Period 1 ms; the competitor runs from 300 µs to 2.3 ms.
        let events = vec![
            switch(10_000, ME, IDLE_TASK),
            switch(300_000, IDLE_TASK, HOG),
            switch(2_300_000, HOG, ME),
            switch(2_310_000, ME, IDLE_TASK),
        ];
        let w = Window {
            cpu: 1,
            start_ns: 1_000_000,
            end_ns: 2_305_000,
            tid: None,
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        assert_eq!(a.causes[0].name, "hog:200");
        assert_eq!(a.causes[0].stolen_ns, 2_000_000);
        assert_eq!(a.causes[0].count, 1);
    }

    /// Reaching back stops at the last quiet moment and at MAX_REACH_BACK_NS.
    #[test]
    fn reaching_back_is_bounded() {
        let events = vec![switch(0, IDLE_TASK, HOG), switch(3_000_000_000, HOG, ME)];
        let w = Window {
            cpu: 1,
            start_ns: 2_500_000_000,
            end_ns: 2_600_000_000,
            tid: None,
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        assert_eq!(e.from_ns, 2_500_000_000 - MAX_REACH_BACK_NS);
        assert_eq!(share(e, "hog:200"), 100_000_000 + MAX_REACH_BACK_NS);
    }

    /// An exit whose entry was lost, and an entry whose exit was lost, do not corrupt what follows.
    #[test]
    fn lost_events_do_not_corrupt_the_timeline() {
        let events = vec![
            switch(0, ME, HOG),
            ev(1_000, Event::IrqExit { irq: 5 }),
            ev(2_000, Event::SoftirqEntry { vec: 9 }),
            // The softirq's exit was lost; the next switch closes it.
            switch(4_000, HOG, IDLE_TASK),
            switch(10_000, IDLE_TASK, ME),
        ];
        let w = Window {
            cpu: 1,
            start_ns: 0,
            end_ns: 10_000,
            tid: None,
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        assert_eq!(share(e, "hog:200"), 2_000);
        assert_eq!(share(e, "RCU"), 2_000);
        assert_eq!(share(e, IDLE), 6_000);
    }

    /// An NMI's duration is carved out of the context it interrupted.
    #[test]
    fn nmi_time_is_taken_from_what_it_interrupted() {
        let events = vec![
            switch(0, ME, HOG),
            ev(
                5_000,
                Event::Nmi {
                    handler: 0,
                    delta_ns: 1_500,
                },
            ),
            switch(8_000, HOG, ME),
        ];
        let w = Window {
            cpu: 1,
            start_ns: 0,
            end_ns: 8_000,
            tid: None,
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        assert_eq!(share(e, "NMI"), 1_500);
        assert_eq!(share(e, "hog:200"), 6_500);
    }

    /// The kernel drops the switch from the idle task to a woken thread on some machines; the
    /// next records, which name the current task, put the thread's time right.
    #[test]
    fn a_switch_the_trace_missed_is_inferred_from_the_current_task() {
        let with_pid = |t: Traced, pid: i32| Traced {
            pid: Some(pid),
            ..t
        };
        let timer = |ts, entry: bool| {
            let name = "local_timer".to_string();
            ev(
                ts,
                if entry {
                    Event::VectorEntry { name, vector: 236 }
                } else {
                    Event::VectorExit { name, vector: 236 }
                },
            )
        };
        let events = vec![
            with_pid(switch(0, ME, IDLE_TASK), ME.0),
            // The hog's timer fires on the idle CPU and wakes it.
            with_pid(timer(100_000, true), 0),
            with_pid(
                ev(
                    101_000,
                    Event::Wakeup {
                        waking: true,
                        pid: HOG.0,
                        comm: HOG.1.into(),
                        target_cpu: 1,
                    },
                ),
                0,
            ),
            with_pid(timer(102_000, false), 0),
            // (The switch from idle to the hog at 103 µs is missing.) A tick interrupts the hog.
            with_pid(timer(1_000_000, true), HOG.0),
            with_pid(timer(1_005_000, false), HOG.0),
            with_pid(switch(2_102_000, HOG, ME), HOG.0),
        ];
        let w = Window {
            cpu: 1,
            start_ns: 500_000,
            end_ns: 2_103_000,
            tid: None,
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        // Reaches back to the timer interrupt that woke the hog.
        assert_eq!(e.from_ns, 100_000);
        assert_eq!(share(e, "hog:200"), 2_102_000 - 102_000 - 5_000);
        assert_eq!(share(e, "local_timer"), 2_000 + 5_000);
        assert_eq!(share(e, IDLE), 0);
    }

    /// What ran before the first switch on a CPU is the first switch's previous task.
    #[test]
    fn time_before_the_first_switch_belongs_to_its_prev_task() {
        let events = vec![
            ev(
                0,
                Event::IrqEntry {
                    irq: 1,
                    name: "i8042".into(),
                },
            ),
            ev(1_000, Event::IrqExit { irq: 1 }),
            switch(5_000, HOG, ME),
        ];
        let w = Window {
            cpu: 1,
            start_ns: 0,
            end_ns: 5_000,
            tid: None,
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        assert_eq!(share(e, "hog:200"), 4_000);
        assert_eq!(share(e, "i8042"), 1_000);
    }

    fn switch_p(ts: u64, prev: (i32, &str, i32), next: (i32, &str, i32)) -> Traced {
        ev(
            ts,
            Event::Switch {
                prev_pid: prev.0,
                prev_comm: prev.1.to_string(),
                prev_prio: prev.2,
                prev_state: 0,
                next_pid: next.0,
                next_comm: next.1.to_string(),
                next_prio: next.2,
            },
        )
    }

    const TIMER: u64 = 0xffff_8880_0000_1000;

    /// The events of one wakeup of ME (FIFO 95, kernel prio 4): it arms its timer for
    /// `release`, the timer interrupt enters at `irq`, wakes it 2 µs later and leaves 1 µs
    /// after that.
    fn wakeup_events(release: u64, irq: u64) -> Vec<Traced> {
        let mut arm = ev(
            release - 900_000,
            Event::HrtimerStart {
                hrtimer: TIMER,
                function: 1,
                expires_ns: release as i64,
                softexpires_ns: release as i64,
            },
        );
        arm.pid = Some(ME.0);
        vec![
            arm,
            ev(
                irq,
                Event::VectorEntry {
                    name: "local_timer".into(),
                    vector: 236,
                },
            ),
            ev(
                irq + 1_000,
                Event::HrtimerEntry {
                    hrtimer: TIMER,
                    function: 1,
                    now_ns: (irq + 1_000) as i64,
                },
            ),
            ev(
                irq + 2_000,
                Event::Wakeup {
                    waking: false,
                    pid: ME.0,
                    comm: ME.1.into(),
                    target_cpu: 1,
                },
            ),
            ev(
                irq + 3_000,
                Event::VectorExit {
                    name: "local_timer".into(),
                    vector: 236,
                },
            ),
        ]
    }

    fn by_time(mut v: Vec<Traced>) -> Vec<Traced> {
        v.sort_by_key(|e| e.ts_ns);
        v
    }

    /// A SCHED_OTHER spinner runs when the timer interrupt comes 300 µs late: the lateness is
    /// the timer's, and the spinner is charged only what it held after the wakeup.
    #[test]
    fn a_late_timer_is_its_own_cause_not_the_spinner() {
        let (release, irq) = (1_000_000u64, 1_300_000u64);
        let mut events = vec![
            switch_p(150_000, (ME.0, ME.1, 4), (HOG.0, HOG.1, 120)),
            switch_p(1_305_000, (HOG.0, HOG.1, 120), (ME.0, ME.1, 4)),
            switch_p(1_310_000, (ME.0, ME.1, 4), (HOG.0, HOG.1, 120)),
        ];
        events.extend(wakeup_events(release, irq));
        let events = by_time(events);
        let w = Window {
            cpu: 1,
            start_ns: release,
            end_ns: 1_307_000,
            tid: Some(ME.0),
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        assert_eq!(e.from_ns, release);
        assert_eq!(share(e, TIMER_LATE_BUSY), 300_000);
        assert_eq!(share(e, "local_timer"), 3_000);
        // From the interrupt's exit to the switch: the spinner, in the kernel's way out.
        let hog = e.shares.iter().find(|s| s.name == "hog:200").unwrap();
        assert_eq!(hog.ns, 2_000);
        assert_eq!(hog.why, Some(Why::NonPreemptible));
        assert_eq!(hog.policy.as_deref(), Some("nice 0"));
        assert_eq!(share(e, RETURN), 2_000);
        let total: u64 = e.shares.iter().map(|s| s.ns).sum();
        assert_eq!(total, 307_000);
        let p = e.path.unwrap();
        assert_eq!(
            (p.expiry_ns, p.irq_ns, p.wakeup_ns, p.switch_ns),
            (Some(release), Some(irq), Some(irq + 2_000), Some(1_305_000))
        );
        assert_eq!(a.causes[0].name, TIMER_LATE_BUSY);
        assert_eq!(a.causes[0].kind, CauseKind::Timer);
        assert_eq!(a.latency.len(), 1);
        assert_eq!(a.latency[0].irq_ns.as_ref().unwrap().max, 301_000);
    }

    /// A FIFO 99 burst that began before the release holds the CPU after the wakeup: it is
    /// charged from the wakeup to the switch-in, by priority.
    #[test]
    fn a_higher_priority_burst_is_charged_from_the_wakeup() {
        let release = 1_000_000u64;
        let burst = (300, "burst", 0);
        let mut events = vec![
            switch_p(150_000, (ME.0, ME.1, 4), (0, "swapper/1", 120)),
            switch_p(200_000, (0, "swapper/1", 120), burst),
            switch_p(2_200_000, burst, (ME.0, ME.1, 4)),
        ];
        events.extend(wakeup_events(release, release + 2_000));
        let events = by_time(events);
        let w = Window {
            cpu: 1,
            start_ns: release,
            end_ns: 2_201_000,
            tid: Some(ME.0),
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        let b = e.shares.iter().find(|s| s.name == "burst:300").unwrap();
        // From the interrupt's exit (release + 5 µs) to the switch-in.
        assert_eq!(b.ns, 2_200_000 - (release + 5_000));
        assert_eq!(b.why, Some(Why::Priority));
        assert_eq!(b.policy.as_deref(), Some("rt 99"));
        // The 2 µs before the interrupt: the burst ran, so the timer was (a little) late.
        assert_eq!(share(e, TIMER_LATE_BUSY), 2_000);
        assert_eq!(a.causes[0].name, "burst:300");
    }

    /// On an idle CPU a late timer interrupt is the idle kind.
    #[test]
    fn a_late_timer_on_an_idle_cpu() {
        let release = 1_000_000u64;
        let mut events = vec![
            switch_p(150_000, (ME.0, ME.1, 4), (0, "swapper/1", 120)),
            switch_p(1_206_000, (0, "swapper/1", 120), (ME.0, ME.1, 4)),
            switch_p(1_210_000, (ME.0, ME.1, 4), (0, "swapper/1", 120)),
        ];
        events.extend(wakeup_events(release, release + 200_000));
        let events = by_time(events);
        let w = Window {
            cpu: 1,
            start_ns: release,
            end_ns: 1_208_000,
            tid: Some(ME.0),
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        assert_eq!(share(e, TIMER_LATE_IDLE), 200_000);
        assert_eq!(share(e, IDLE_EXIT), 3_000);
        assert_eq!(share(e, RETURN), 2_000);
    }

    /// A release the thread did not sleep for (its previous activation ran past it): what ran
    /// from the release on held it back.
    #[test]
    fn a_release_without_wakeup_is_charged_from_the_release() {
        let events = vec![
            switch_p(0, (0, "swapper/1", 120), (ME.0, ME.1, 4)),
            switch_p(900_000, (ME.0, ME.1, 4), (HOG.0, HOG.1, 0)),
            switch_p(1_400_000, (HOG.0, HOG.1, 0), (ME.0, ME.1, 4)),
            switch_p(1_500_000, (ME.0, ME.1, 4), (0, "swapper/1", 120)),
        ];
        let w = Window {
            cpu: 1,
            start_ns: 1_000_000,
            end_ns: 1_401_000,
            tid: Some(ME.0),
        };
        let a = attribute(&events, &[1], &[ME.0], &[w]);
        let e = &a.explained[0];
        assert_eq!(e.path, None);
        let hog = e.shares.iter().find(|s| s.name == "hog:200").unwrap();
        assert_eq!((hog.ns, hog.why), (400_000, Some(Why::Priority)));
        assert_eq!(share(e, MEASURED), 1_000);
    }

    /// Twenty seconds of a 1 kHz timer thread beside a spinner, then the idle task, with a
    /// network interrupt and softirqs, on two CPUs: read in pieces, the attribution is the
    /// attribution of the whole trace, whatever the size of the pieces.
    #[test]
    fn pieces_give_the_attribution_of_the_whole() {
        let mut events: Vec<Traced> = Vec::new();
        let mut windows: Vec<Window> = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let at = |cpu: usize, ts: u64, pid: i32, event: Event| Traced {
            ts_ns: ts,
            cpu,
            pid: Some(pid),
            event,
        };
        for cpu in [0usize, 1] {
            for k in 1..20_000u64 {
                let release = 1_000_000_000 + k * 1_000_000;
                let other = if (k / 3_000) % 2 == 0 { HOG } else { IDLE_TASK };
                let late = if rnd(97) == 0 {
                    200_000 + rnd(300_000)
                } else {
                    1_500 + rnd(2_000)
                };
                let irq = release + late;
                let run = 3_000 + rnd(4_000);
                let timer = |name: &str| name.to_string();
                events.extend([
                    at(
                        cpu,
                        irq,
                        other.0,
                        Event::VectorEntry {
                            name: timer("local_timer"),
                            vector: 236,
                        },
                    ),
                    at(
                        cpu,
                        irq + 800,
                        other.0,
                        Event::HrtimerEntry {
                            hrtimer: TIMER,
                            function: 1,
                            now_ns: (irq + 800) as i64,
                        },
                    ),
                    at(cpu, irq + 1_000, other.0, Event::SoftirqRaise { vec: 1 }),
                    at(
                        cpu,
                        irq + 1_500,
                        other.0,
                        Event::Wakeup {
                            waking: false,
                            pid: ME.0,
                            comm: ME.1.into(),
                            target_cpu: cpu as i32,
                        },
                    ),
                    at(cpu, irq + 2_000, other.0, Event::HrtimerExit),
                    at(
                        cpu,
                        irq + 2_500,
                        other.0,
                        Event::VectorExit {
                            name: timer("local_timer"),
                            vector: 236,
                        },
                    ),
                    at(cpu, irq + 2_600, other.0, Event::SoftirqEntry { vec: 1 }),
                    at(cpu, irq + 4_000, other.0, Event::SoftirqExit { vec: 1 }),
                    at(
                        cpu,
                        irq + 4_500,
                        other.0,
                        Event::Switch {
                            prev_pid: other.0,
                            prev_comm: other.1.into(),
                            prev_prio: 120,
                            prev_state: 0,
                            next_pid: ME.0,
                            next_comm: ME.1.into(),
                            next_prio: 4,
                        },
                    ),
                    at(
                        cpu,
                        irq + 4_500 + run,
                        ME.0,
                        Event::HrtimerStart {
                            hrtimer: TIMER,
                            function: 1,
                            expires_ns: (release + 1_000_000) as i64,
                            softexpires_ns: (release + 1_000_000) as i64,
                        },
                    ),
                    at(
                        cpu,
                        irq + 5_000 + run,
                        ME.0,
                        Event::Switch {
                            prev_pid: ME.0,
                            prev_comm: ME.1.into(),
                            prev_prio: 4,
                            prev_state: 1,
                            next_pid: other.0,
                            next_comm: other.1.into(),
                            next_prio: 120,
                        },
                    ),
                ]);
                if late > 100_000 {
                    windows.push(Window {
                        cpu,
                        start_ns: release,
                        end_ns: irq + 5_200,
                        tid: Some(ME.0),
                    });
                }
                if rnd(5) == 0 {
                    let t = release + 600_000 + rnd(100_000);
                    let len = 2_000 + rnd(20_000);
                    events.extend([
                        at(
                            cpu,
                            t,
                            other.0,
                            Event::IrqEntry {
                                irq: 24,
                                name: "eth0".into(),
                            },
                        ),
                        at(cpu, t + len / 2, other.0, Event::IrqExit { irq: 24 }),
                        at(
                            cpu,
                            t + len / 2 + 100,
                            other.0,
                            Event::SoftirqRaise { vec: 3 },
                        ),
                        at(
                            cpu,
                            t + len / 2 + 200,
                            other.0,
                            Event::SoftirqEntry { vec: 3 },
                        ),
                        at(cpu, t + len, other.0, Event::SoftirqExit { vec: 3 }),
                    ]);
                    if rnd(4) == 0 {
                        windows.push(Window {
                            cpu,
                            start_ns: t - 1_000,
                            end_ns: t + len + 1_000,
                            tid: None,
                        });
                    }
                }
            }
        }
        // Time order on each CPU, the CPUs interleaved as a run's reads are.
        events.sort_by_key(|e| (e.ts_ns / 50_000_000, e.cpu, e.ts_ns));
        let cpus = [0, 1];
        let measured = [ME.0];
        let whole = attribute(&events, &cpus, &measured, &windows);
        assert!(whole.windows > 300, "{} windows", whole.windows);
        assert!(whole.latency.iter().all(|l| l.activations > 19_000));
        assert!(!whole.handlers.is_empty());
        for chunk in [1_000, 50_000, usize::MAX] {
            let mut c = Chunked::new(&cpus, &measured, &windows, chunk);
            for e in &events {
                c.push(e.clone());
            }
            let pieces = c.finish();
            assert_eq!(pieces, whole, "in pieces of {chunk} events");
        }
    }
}
