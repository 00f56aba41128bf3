//! One measuring thread: the gap-detecting poll loop and the thread models, in counter ticks.
//!
//! The loop is Figure 2 of the Hourglass paper, with two refinements. First, when a gap is
//! detected the next interval is opened with a fresh `(counter, cpu)` pair read by one
//! instruction, so every record names the CPU it ran on (Hourglass was uniprocessor; on SMP a
//! migration can only happen inside a gap). Second, an interval that ends because the thread
//! itself yielded or blocked is marked so, which is what tells a voluntary context switch from
//! an involuntary one (§5.1) without guessing from the workload.
//!
//! Models keep a "mark": the CPU time received when the current job, frame or yield window
//! began. Because received time only grows while the thread runs, the moment a job will be
//! complete is known in advance (`exec_start + mark + amount − closed`), and the loop only
//! compares the counter with the earliest pending event.

use super::record::{GapStats, Progress, TimerStats, Work};
use super::ring::{Item, Producer};
use super::trace::{EndReason, Record};
use super::{Clock, ThreadOps};
use crate::clock::Timebase;
use std::sync::atomic::{AtomicU64, Ordering};

/// A thread model in counter ticks (see [`crate::model::Workload`] for the semantics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// CPU-bound (scanning or not).
    Cpu,
    /// Yields each time it has received `amount`.
    Yield { amount: u64 },
    /// Needs `amount` in every `period`; absolute releases; a late job is dropped.
    Periodic { amount: u64, period: u64 },
    /// Never blocks; a frame each `amount`; a miss per `period` without a frame.
    CpuPeriodic { amount: u64, period: u64 },
    /// Dispatch-latency test with a self-synchronising `period`.
    Lat { period: u64 },
    /// A timer thread: a release every `period`, on a fixed grid (`resync` false, cyclictest's
    /// absolute mode) or one period after each wakeup (`resync` true, Hourglass's LAT). Every
    /// release is recorded with its lateness; releases that fell due before the wakeup that
    /// served them are counted as missed, each with its own true lateness. With a `duty`
    /// cycle, releases fall only in the first `on` ticks of every `every` ticks from the start:
    /// the grid starts afresh at each window, and nothing is released (or missed) between.
    Release {
        period: u64,
        resync: bool,
        duty: Option<Duty>,
    },
}

/// A duty cycle: measure `on` ticks of every `every` ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Duty {
    pub on: u64,
    pub every: u64,
}

impl Duty {
    /// The end of the window that holds or follows `t`, for windows from `start`.
    #[inline]
    fn window_end(self, start: u64, t: u64) -> u64 {
        let k = t.saturating_sub(start) / self.every.max(1);
        start + k * self.every + self.on
    }
}

/// Everything one thread needs to run, in counter ticks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThreadPlan {
    pub thread: u16,
    pub model: Model,
    /// Absolute counter value at which the thread starts (its first release).
    pub start: u64,
    /// Absolute counter value at which the thread stops.
    pub finish: u64,
    /// Reads more than this far apart are a gap.
    pub gap: u64,
    /// Longest time between two checks of the stop flag while polling.
    pub check_interval: u64,
    /// Ticks to nanoseconds, for the histograms (the rate calibrated before the run).
    pub timebase: Timebase,
}

/// One job of a PERIODIC thread, or one frame window of a CPU_PERIODIC thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobRecord {
    /// When the job was released (PERIODIC) or its window began (CPU_PERIODIC).
    pub release: u64,
    /// The end of its period.
    pub deadline: u64,
    /// The first counter read of the job.
    pub first_run: u64,
    /// When it completed (a hit) or its deadline (a miss).
    pub end: u64,
    /// CPU time it received, in ticks.
    pub received: u64,
    pub hit: bool,
}

/// One wakeup of a LAT thread: when it asked to wake and when it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatSample {
    pub target: u64,
    pub wakeup: u64,
}

/// One release of a timer thread: when it was due, when the thread woke for it, and whether a
/// later release was already due at that wakeup (a missed release, recorded with its true
/// lateness rather than skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    pub target: u64,
    pub wakeup: u64,
    pub missed: bool,
}

const FLAG: u64 = 1 << 63;

impl Item for Release {
    const WORDS: usize = 2;
    #[inline(always)]
    fn store(&self, s: &[AtomicU64]) {
        s[0].store(self.target, Ordering::Relaxed);
        s[1].store(
            (self.wakeup & !FLAG) | if self.missed { FLAG } else { 0 },
            Ordering::Relaxed,
        );
    }
    fn load(s: &[AtomicU64]) -> Self {
        let w = s[1].load(Ordering::Relaxed);
        Release {
            target: s[0].load(Ordering::Relaxed),
            wakeup: w & !FLAG,
            missed: w & FLAG != 0,
        }
    }
}

impl Item for LatSample {
    const WORDS: usize = 2;
    #[inline(always)]
    fn store(&self, s: &[AtomicU64]) {
        s[0].store(self.target, Ordering::Relaxed);
        s[1].store(self.wakeup, Ordering::Relaxed);
    }
    fn load(s: &[AtomicU64]) -> Self {
        LatSample {
            target: s[0].load(Ordering::Relaxed),
            wakeup: s[1].load(Ordering::Relaxed),
        }
    }
}

impl Item for JobRecord {
    const WORDS: usize = 6;
    fn store(&self, s: &[AtomicU64]) {
        s[0].store(self.release, Ordering::Relaxed);
        s[1].store(self.deadline, Ordering::Relaxed);
        s[2].store(self.first_run, Ordering::Relaxed);
        s[3].store(self.end, Ordering::Relaxed);
        s[4].store(self.received, Ordering::Relaxed);
        s[5].store(u64::from(self.hit), Ordering::Relaxed);
    }
    fn load(s: &[AtomicU64]) -> Self {
        JobRecord {
            release: s[0].load(Ordering::Relaxed),
            deadline: s[1].load(Ordering::Relaxed),
            first_run: s[2].load(Ordering::Relaxed),
            end: s[3].load(Ordering::Relaxed),
            received: s[4].load(Ordering::Relaxed),
            hit: s[5].load(Ordering::Relaxed) != 0,
        }
    }
}

/// Where a thread sends what it records, one ring per kind of item ([`super::ring`]); a kind
/// the thread does not make has none.
#[derive(Default)]
pub struct Outputs {
    /// Execution intervals (polling models).
    pub records: Option<Producer<Record>>,
    /// Releases (timer threads).
    pub releases: Option<Producer<Release>>,
    /// Wakeups (LAT threads).
    pub lat: Option<Producer<LatSample>>,
    /// Jobs and frame windows (PERIODIC, CPU_PERIODIC).
    pub jobs: Option<Producer<JobRecord>>,
}

/// What one thread measured, beside what it sent to its rings.
#[derive(Default)]
pub struct ThreadOutcome {
    /// Poll-loop iterations (counter reads).
    pub iterations: u64,
    /// Records sent, and records lost because the ring was full.
    pub records: u64,
    pub dropped: u64,
    /// CPU time received, from the thread's own gap-free intervals.
    pub received: u64,
    /// First and last counter value the thread read while running.
    pub first: u64,
    pub last: u64,
    /// Gaps the thread did not cause itself.
    pub preemptions: u64,
    /// `sched_yield` calls.
    pub yields: u64,
    pub hits: u64,
    pub misses: u64,
    /// Jobs sent and jobs lost to a full ring.
    pub jobs: u64,
    pub jobs_dropped: u64,
    /// Releases or LAT wakeups sent, and those lost to a full ring.
    pub samples: u64,
    pub samples_dropped: u64,
    /// Complete passes over the scanned working set (Hourglass §5.2's unit of work).
    pub scan_passes: u64,
    /// True when a stop request, not the finish time, ended the thread.
    pub stopped: bool,
    /// Interruptions (gaps the thread did not cause), when the caller asked for them.
    pub gaps: Option<Box<GapStats>>,
    /// Lateness and intervals of a `Release` thread.
    pub timer: Option<Box<TimerStats>>,
    /// The rings the thread writes to.
    pub outputs: Outputs,
}

impl ThreadOutcome {
    /// An outcome that sends to `outputs`.
    pub fn new(outputs: Outputs) -> ThreadOutcome {
        ThreadOutcome {
            outputs,
            ..ThreadOutcome::default()
        }
    }

    #[inline]
    fn log_job(&mut self, j: JobRecord) {
        if let Some(p) = self.outputs.jobs.as_mut() {
            if p.push(&j) {
                self.jobs += 1;
            } else {
                self.jobs_dropped += 1;
            }
        }
    }

    #[inline]
    fn log_sample<T: Item>(
        ring: Option<&mut Producer<T>>,
        item: &T,
        sent: &mut u64,
        lost: &mut u64,
    ) {
        if let Some(p) = ring {
            if p.push(item) {
                *sent += 1;
            } else {
                *lost += 1;
            }
        }
    }
}

/// Runs one thread from its start to its finish (or a stop request), sending what it records
/// to the rings in `out.outputs` and counting the rest in `out`. `work` is what a polling thread
/// does between reads, already allocated and touched; `progress` receives live figures for a
/// display.
pub fn run_thread<C: Clock, O: ThreadOps>(
    plan: &ThreadPlan,
    clock: &C,
    ops: &mut O,
    work: &mut Work,
    out: &mut ThreadOutcome,
    progress: &Progress,
) {
    match (plan.model, work) {
        (Model::Lat { period }, _) => run_lat(plan, period, clock, ops, out),
        (
            Model::Release {
                period,
                resync,
                duty,
            },
            _,
        ) => run_release(plan, period, resync, duty, clock, ops, out, progress),
        (_, Work::None) => {
            let mut p = Poll::new(plan, progress);
            poll::<C, O, 0>(plan, clock, ops, &mut p, &mut [], None, out)
        }
        (_, Work::Scan(ws)) => {
            let mut p = Poll::new(plan, progress);
            poll::<C, O, 1>(plan, clock, ops, &mut p, ws, None, out)
        }
        (_, Work::Memmove { src, dst }) => {
            let len = src.len().min(dst.len());
            let mut p = Poll::new(plan, progress);
            let copy = Some((&src[..len], &mut dst[..len]));
            poll::<C, O, 2>(plan, clock, ops, &mut p, &mut [], copy, out)
        }
    }
    progress.open_since.store(u64::MAX, Ordering::Release);
}

/// The state of the gap detector.
struct Poll<'a> {
    thread: u16,
    gap: u64,
    exec_start: u64,
    last: u64,
    cpu: u32,
    /// CPU time in intervals already closed.
    closed: u64,
    open: bool,
    /// What the next detected gap will be attributed to.
    pending: EndReason,
    /// When the stop flag is next checked. It moves only when a check runs, so that gaps,
    /// however frequent, cannot postpone it.
    check_at: u64,
    timebase: Timebase,
    progress: &'a Progress,
}

impl<'a> Poll<'a> {
    fn new(plan: &ThreadPlan, progress: &'a Progress) -> Poll<'a> {
        Poll {
            thread: plan.thread,
            gap: plan.gap,
            exec_start: 0,
            last: 0,
            cpu: 0,
            closed: 0,
            open: false,
            pending: EndReason::Preempted,
            check_at: 0,
            timebase: plan.timebase,
            progress,
        }
    }

    /// CPU time received up to `now`, which must lie in the open interval.
    #[inline]
    fn received(&self, now: u64) -> u64 {
        self.closed + (now - self.exec_start)
    }

    /// The counter value at which received time reaches `target`, if the thread keeps running.
    #[inline]
    fn completion_at(&self, target: u64) -> u64 {
        (self.exec_start + target).saturating_sub(self.closed)
    }

    /// Ends the open interval at `self.last`.
    #[cold]
    fn close(&mut self, reason: EndReason, out: &mut ThreadOutcome) {
        self.closed += self.last - self.exec_start;
        self.open = false;
        let r = Record {
            thread: self.thread,
            cpu: self.cpu,
            start: self.exec_start,
            end: self.last,
            reason,
        };
        if let Some(ring) = out.outputs.records.as_mut() {
            if ring.push(&r) {
                out.records += 1;
            } else {
                out.dropped += 1;
            }
        }
        self.progress.open_since.store(u64::MAX, Ordering::Release);
    }

    /// Opens a new interval now, on the CPU the thread is running on. While it does, its start
    /// is published as 0 with a full barrier before the counter is read, so that the main
    /// thread never takes a record's start for later than it is ([`super::merge`]).
    #[inline]
    fn open_now<C: Clock>(&mut self, clock: &C) {
        self.progress.open_since.store(0, Ordering::SeqCst);
        let (t, cpu) = clock.now_with_cpu();
        self.progress.open_since.store(t, Ordering::Release);
        self.exec_start = t;
        self.last = t;
        self.cpu = cpu;
        self.open = true;
        self.pending = EndReason::Preempted;
    }

    #[cold]
    #[inline(never)]
    fn on_gap<C: Clock>(&mut self, clock: &C, out: &mut ThreadOutcome) {
        let before = self.last;
        let preempted = self.pending == EndReason::Preempted;
        self.close(self.pending, out);
        self.open_now(clock);
        if preempted {
            out.preemptions += 1;
            if let Some(g) = out.gaps.as_deref_mut() {
                // The interruption lasted from the end of one record to the start of the next,
                // exactly what the stored trace says.
                let ns = self
                    .timebase
                    .duration_ns(self.exec_start.wrapping_sub(before));
                g.add(ns);
                self.progress.publish(g.count, 0, g.max_ns);
            }
        }
    }

    /// Takes a counter reading: either extends the open interval or detects a gap.
    #[inline(always)]
    fn step<C: Clock>(&mut self, now: u64, clock: &C, out: &mut ThreadOutcome) -> bool {
        if now.wrapping_sub(self.last) > self.gap {
            self.on_gap(clock, out);
            true
        } else {
            self.last = now;
            false
        }
    }
}

/// The current job of a PERIODIC thread or frame window of a CPU_PERIODIC thread.
#[derive(Clone, Copy)]
struct Job {
    /// Release (PERIODIC) or window start (CPU_PERIODIC).
    release: u64,
    deadline: u64,
    /// CPU time received when the job began.
    mark: u64,
    first_run: u64,
}

impl Job {
    /// When the job received `amount`, if that happened by its deadline and within the run.
    fn completed(&self, p: &Poll<'_>, amount: u64, finish: u64) -> Option<u64> {
        let target = self.mark + amount;
        let done_at = p.completion_at(target);
        (p.received(p.last) >= target && done_at <= self.deadline && done_at <= finish)
            .then_some(done_at)
    }

    /// True when the deadline has passed, within the run, without completion.
    fn missed(&self, now: u64, finish: u64) -> bool {
        now >= self.deadline && self.deadline <= finish
    }

    /// Counts the job as a hit or a miss and logs it.
    fn account(&self, end: u64, received: u64, hit: bool, out: &mut ThreadOutcome) {
        if hit {
            out.hits += 1;
        } else {
            out.misses += 1;
        }
        out.log_job(JobRecord {
            release: self.release,
            deadline: self.deadline,
            first_run: self.first_run,
            end,
            received,
            hit,
        });
    }
}

/// Per-model state.
enum State {
    Cpu,
    Yield { amount: u64, mark: u64 },
    Periodic { amount: u64, period: u64, job: Job },
    CpuPeriodic { amount: u64, period: u64, job: Job },
}

impl State {
    fn new(model: Model, plan: &ThreadPlan, p: &Poll<'_>) -> State {
        // The first job is released at the thread's start.
        let first = |period: u64| Job {
            release: plan.start,
            deadline: plan.start + period,
            mark: 0,
            first_run: p.exec_start,
        };
        match model {
            Model::Cpu | Model::Lat { .. } | Model::Release { .. } => State::Cpu,
            Model::Yield { amount } => State::Yield { amount, mark: 0 },
            Model::Periodic { amount, period } => State::Periodic {
                amount,
                period,
                job: first(period),
            },
            Model::CpuPeriodic { amount, period } => State::CpuPeriodic {
                amount,
                period,
                job: first(period),
            },
        }
    }

    /// The earliest counter value at which [`State::handle`] has something to do.
    #[inline]
    fn next_event(&self, plan: &ThreadPlan, p: &Poll<'_>) -> u64 {
        let base = plan.finish.min(p.check_at);
        match *self {
            State::Cpu => base,
            State::Yield { amount, mark } => base.min(p.completion_at(mark + amount)),
            State::Periodic { amount, job, .. } | State::CpuPeriodic { amount, job, .. } => base
                .min(job.deadline)
                .min(p.completion_at(job.mark + amount)),
        }
    }

    /// Handles everything due at `p.last`; returns `false` when the thread is done.
    #[cold]
    #[inline(never)]
    fn handle<C: Clock, O: ThreadOps>(
        &mut self,
        plan: &ThreadPlan,
        p: &mut Poll<'_>,
        clock: &C,
        ops: &mut O,
        out: &mut ThreadOutcome,
    ) -> bool {
        if p.last >= p.check_at {
            if ops.stop_requested() {
                out.stopped = true;
                return false;
            }
            p.check_at = p.last.saturating_add(plan.check_interval);
        }
        // A period counts when it ends within the run, so deadlines are checked even at the
        // finish time; a job still running at the finish with a later deadline is not counted.
        let finish = plan.finish;
        let at_finish = p.last >= finish;
        match self {
            State::Cpu => !at_finish,
            State::Yield { amount, mark } => {
                if at_finish {
                    return false;
                }
                if p.received(p.last) >= *mark + *amount {
                    out.yields += 1;
                    p.pending = EndReason::Yielded;
                    ops.yield_cpu();
                    let now = clock.now();
                    if !p.step(now, clock, out) {
                        p.pending = EndReason::Preempted;
                    }
                    *mark = p.received(p.last);
                }
                true
            }
            State::Periodic {
                amount,
                period,
                job,
            } => loop {
                let now = p.last;
                if let Some(done_at) = job.completed(p, *amount, finish) {
                    job.account(done_at, *amount, true, out);
                    let next = job.release + *period;
                    if next >= finish {
                        return false;
                    }
                    p.close(EndReason::Blocked, out);
                    if !ops.sleep_until(next) {
                        out.stopped = true;
                        return false;
                    }
                    p.open_now(clock);
                    *job = Job {
                        release: next,
                        deadline: next + *period,
                        mark: p.closed,
                        first_run: p.exec_start,
                    };
                } else if job.missed(now, finish) {
                    job.account(job.deadline, p.received(now) - job.mark, false, out);
                    // The late job is dropped; the next one was released at this deadline.
                    *job = Job {
                        release: job.release + *period,
                        deadline: job.deadline + *period,
                        mark: p.received(now),
                        first_run: now,
                    };
                    if job.release >= finish {
                        return false;
                    }
                } else {
                    return !at_finish;
                }
            },
            State::CpuPeriodic {
                amount,
                period,
                job,
            } => loop {
                let now = p.last;
                if let Some(done_at) = job.completed(p, *amount, finish) {
                    job.account(done_at, *amount, true, out);
                    // A frame is done: the next period starts now.
                    *job = Job {
                        release: done_at,
                        deadline: done_at + *period,
                        mark: job.mark + *amount,
                        first_run: done_at,
                    };
                } else if job.missed(now, finish) {
                    job.account(job.deadline, p.received(now) - job.mark, false, out);
                    // The frame goes on into the next window.
                    job.release = job.deadline;
                    job.deadline += *period;
                } else {
                    return !at_finish;
                }
            },
        }
    }
}

/// The polling loop. `W` selects the work between reads at compile time: 0 none, 1 scan one
/// cache line of `scan`, 2 copy `copy.0` over `copy.1`.
#[allow(clippy::too_many_arguments)]
fn poll<C: Clock, O: ThreadOps, const W: u8>(
    plan: &ThreadPlan,
    clock: &C,
    ops: &mut O,
    p: &mut Poll<'_>,
    scan: &mut [u64],
    mut copy: Option<(&[u8], &mut [u8])>,
    out: &mut ThreadOutcome,
) {
    if !ops.sleep_until(plan.start) {
        out.stopped = true;
        return;
    }
    p.open_now(clock);
    p.check_at = p.last.saturating_add(plan.check_interval);
    out.first = p.exec_start;
    let mut state = State::new(plan.model, plan, p);
    let mut next = state.next_event(plan, p);
    let mut iterations: u64 = 0;
    let mut passes: u64 = 0;
    let mut si: usize = 0;
    let scan_len = scan.len();
    loop {
        let now = clock.now();
        iterations += 1;
        if p.step(now, clock, out) {
            next = state.next_event(plan, p);
        }
        if W == 1 {
            // One read-modify-write per 64-byte cache line, sequentially (§3.2 CPU_SCAN).
            if let Some(x) = scan.get_mut(si) {
                *x = x.wrapping_add(1);
            }
            si += 8;
            if si >= scan_len {
                si = 0;
                passes += 1;
            }
        } else if W == 2 {
            if let Some((src, dst)) = copy.as_mut() {
                dst.copy_from_slice(src);
                std::hint::black_box(&mut **dst);
                passes += 1;
            }
        }
        if p.last >= next {
            if !state.handle(plan, p, clock, ops, out) {
                break;
            }
            next = state.next_event(plan, p);
        }
    }
    if p.open {
        p.close(EndReason::Finished, out);
    }
    out.iterations = iterations;
    out.scan_passes = passes;
    out.received = p.closed;
    out.last = p.last;
}

/// Releases and intervals waiting to be recorded into the histograms. Recording them in batches
/// keeps the histograms' cache lines warm: per wakeup the thread only appends to this small
/// array (and to the sample buffer), which costs about half of recording three histograms
/// directly on a virtual machine, where each cold cache line and TLB entry is expensive.
struct Pending {
    /// `(lateness_ns, first release of its wakeup)`.
    releases: [(i64, bool); PENDING],
    n_releases: usize,
    intervals: [u64; PENDING],
    n_intervals: usize,
}

const PENDING: usize = 64;

impl Pending {
    fn new() -> Pending {
        Pending {
            releases: [(0, false); PENDING],
            n_releases: 0,
            intervals: [0; PENDING],
            n_intervals: 0,
        }
    }

    #[cold]
    fn flush(&mut self, stats: &mut TimerStats, over: &mut u64) {
        for &(late, first) in &self.releases[..self.n_releases] {
            stats.release(late, first);
        }
        for &i in &self.intervals[..self.n_intervals] {
            super::record::record(&mut stats.interval, i, over);
        }
        self.n_releases = 0;
        self.n_intervals = 0;
    }

    #[inline]
    fn release(&mut self, late: i64, first: bool, stats: &mut TimerStats, over: &mut u64) {
        if self.n_releases == PENDING {
            self.flush(stats, over);
        }
        self.releases[self.n_releases] = (late, first);
        self.n_releases += 1;
    }

    #[inline]
    fn interval(&mut self, ns: u64, stats: &mut TimerStats, over: &mut u64) {
        if self.n_intervals == PENDING {
            self.flush(stats, over);
        }
        self.intervals[self.n_intervals] = ns;
        self.n_intervals += 1;
    }
}

/// A timer thread: sleeps until each release, records how late it woke, and counts every
/// release that fell due before the wakeup that served it. With a duty cycle, releases stop at
/// each window's end and start again on a fresh grid at the next window's start.
#[allow(clippy::too_many_arguments)]
fn run_release<C: Clock, O: ThreadOps>(
    plan: &ThreadPlan,
    period: u64,
    resync: bool,
    duty: Option<Duty>,
    clock: &C,
    ops: &mut O,
    out: &mut ThreadOutcome,
    progress: &Progress,
) {
    let tb = plan.timebase;
    let ns = |ticks: i64| tb.signed_ns(ticks);
    let mut stats = out.timer.take().unwrap_or_default();
    let mut pending = Pending::new();
    let mut release = plan.start;
    let mut prev_wake: Option<u64> = None;
    let mut over = 0u64;
    let mut started = false;
    let mut wakeups = 0u64;
    let mut missed = 0u64;
    let mut max_late = 0i64;
    // Releases of the window under way fall before this.
    let mut window_end = duty.map_or(u64::MAX, |d| d.window_end(plan.start, plan.start));
    loop {
        if ops.stop_requested() {
            out.stopped = true;
            break;
        }
        if release >= window_end {
            if let Some(d) = duty {
                // The next window: a fresh grid from its start, no interval across the pause.
                let next = window_end - d.on + d.every;
                release = next;
                window_end = next + d.on;
                prev_wake = None;
            }
        }
        if release >= plan.finish {
            break;
        }
        if !ops.sleep_until(release) {
            out.stopped = true;
            break;
        }
        let wake = clock.now();
        if !started {
            out.first = wake;
            started = true;
        }
        out.last = wake;
        wakeups += 1;
        if let Some(prev) = prev_wake {
            let interval = ns(wake.wrapping_sub(prev) as i64).max(0) as u64;
            pending.interval(interval, &mut stats, &mut over);
        }
        prev_wake = Some(wake);
        // The release this wakeup waited for, then every later release already due.
        let mut r = release;
        let mut first = true;
        while r <= wake.max(release) && r < plan.finish && r < window_end {
            let late = ns(wake.wrapping_sub(r) as i64);
            max_late = max_late.max(late);
            if !first {
                missed += 1;
            }
            pending.release(late, first, &mut stats, &mut over);
            let rel = Release {
                target: r,
                wakeup: wake,
                missed: !first,
            };
            ThreadOutcome::log_sample(
                out.outputs.releases.as_mut(),
                &rel,
                &mut out.samples,
                &mut out.samples_dropped,
            );
            first = false;
            r += period;
        }
        release = if resync { wake + period } else { r };
        progress.publish(wakeups, missed, max_late.max(0) as u64);
    }
    pending.flush(&mut stats, &mut over);
    stats.wakeups = wakeups;
    stats.over += over;
    out.iterations = wakeups;
    out.timer = Some(stats);
}

fn run_lat<C: Clock, O: ThreadOps>(
    plan: &ThreadPlan,
    period: u64,
    clock: &C,
    ops: &mut O,
    out: &mut ThreadOutcome,
) {
    if !ops.sleep_until(plan.start) {
        out.stopped = true;
        return;
    }
    let mut now = clock.now();
    out.first = now;
    loop {
        if ops.stop_requested() {
            out.stopped = true;
            break;
        }
        let target = now + period;
        if target > plan.finish {
            break;
        }
        if !ops.sleep_until(target) {
            out.stopped = true;
            break;
        }
        now = clock.now();
        let s = LatSample {
            target,
            wakeup: now,
        };
        ThreadOutcome::log_sample(
            out.outputs.lat.as_mut(),
            &s,
            &mut out.samples,
            &mut out.samples_dropped,
        );
        out.iterations += 1;
    }
    out.last = now;
}

#[cfg(test)]
mod tests {
    use super::super::mock::Script;
    use super::super::record::{Progress, TimerStats, Work};
    use super::super::ring::{ring, Consumer};
    use super::*;

    /// What a test run produced: the outcome and everything the thread sent to its rings.
    struct Ran {
        o: ThreadOutcome,
        jobs: Vec<JobRecord>,
        latencies: Vec<LatSample>,
        releases: Vec<Release>,
        timer: Option<Box<TimerStats>>,
        gaps: Option<Box<GapStats>>,
    }

    impl std::ops::Deref for Ran {
        type Target = ThreadOutcome;
        fn deref(&self) -> &ThreadOutcome {
            &self.o
        }
    }

    struct Consumers {
        records: Consumer<Record>,
        releases: Consumer<Release>,
        lat: Consumer<LatSample>,
        jobs: Consumer<JobRecord>,
    }

    /// Rings of `records` records and `samples` of everything else.
    fn capture(records: usize, samples: usize) -> (Outputs, Consumers) {
        let (rp, rc) = ring(records);
        let (tp, tc) = ring(samples);
        let (lp, lc) = ring(samples);
        let (jp, jc) = ring(samples);
        (
            Outputs {
                records: Some(rp),
                releases: Some(tp),
                lat: Some(lp),
                jobs: Some(jp),
            },
            Consumers {
                records: rc,
                releases: tc,
                lat: lc,
                jobs: jc,
            },
        )
    }

    fn finish(mut o: ThreadOutcome, mut c: Consumers) -> (Ran, Vec<Record>) {
        let mut recs = Vec::new();
        c.records.drain(&mut recs, usize::MAX);
        let mut jobs = Vec::new();
        c.jobs.drain(&mut jobs, usize::MAX);
        let mut latencies = Vec::new();
        c.lat.drain(&mut latencies, usize::MAX);
        let mut releases = Vec::new();
        c.releases.drain(&mut releases, usize::MAX);
        latencies.extend(releases.iter().map(|r| LatSample {
            target: r.target,
            wakeup: r.wakeup,
        }));
        let ran = Ran {
            timer: o.timer.take(),
            gaps: o.gaps.take(),
            o,
            jobs,
            latencies,
            releases,
        };
        (ran, recs)
    }

    fn plan(model: Model, finish: u64, gap: u64) -> ThreadPlan {
        ThreadPlan {
            thread: 0,
            model,
            start: 0,
            finish,
            gap,
            check_interval: 1_000_000,
            timebase: Timebase::new(0, 1.0),
        }
    }

    fn run(plan: &ThreadPlan, script: Script, capacity: usize) -> (Ran, Vec<Record>) {
        let (clock, mut ops) = script.into_pair();
        let (outputs, consumers) = capture(capacity, 64);
        let mut out = ThreadOutcome::new(outputs);
        run_thread(
            plan,
            &clock,
            &mut ops,
            &mut Work::None,
            &mut out,
            &Progress::default(),
        );
        finish(out, consumers)
    }

    /// PERIODIC 100 ticks in every 400 over ten periods, gap threshold 50.
    fn periodic_100_in_400(script: Script) -> (Ran, Vec<Record>) {
        let m = Model::Periodic {
            amount: 100,
            period: 400,
        };
        run(&plan(m, 4000, 50), script, 64)
    }

    fn rec(start: u64, end: u64, reason: EndReason) -> Record {
        Record {
            thread: 0,
            cpu: 0,
            start,
            end,
            reason,
        }
    }

    /// Figure 2 on a scripted clock: reads every 10 ticks, the thread loses the CPU during
    /// [300, 400) and [700, 750); the trace holds exactly the three intervals between.
    #[test]
    fn scripted_gaps_give_the_exact_trace() {
        let script = Script::new(10).unavailable(&[(300, 400), (700, 750)]);
        let (out, recs) = run(&plan(Model::Cpu, 1000, 50), script, 16);
        assert_eq!(
            recs,
            vec![
                rec(10, 290, EndReason::Preempted),
                rec(410, 690, EndReason::Preempted),
                rec(760, 1000, EndReason::Finished),
            ]
        );
        assert_eq!(out.received, 280 + 280 + 240);
        assert_eq!(out.preemptions, 2);
        assert_eq!((out.records, out.dropped), (3, 0));
        assert!(!out.stopped);
    }

    /// A difference equal to the threshold is not a gap; one tick more is.
    #[test]
    fn threshold_is_exclusive() {
        let script = Script::new(10).unavailable(&[(300, 340), (600, 641)]);
        let (_, recs) = run(&plan(Model::Cpu, 1000, 50), script, 16);
        assert_eq!(
            recs,
            vec![
                rec(10, 590, EndReason::Preempted),
                rec(651, 1001, EndReason::Finished)
            ]
        );
    }

    #[test]
    fn records_carry_the_cpu_after_a_migration() {
        let script = Script::new(10)
            .unavailable(&[(300, 400)])
            .cpu_from(&[(0, 2), (400, 5)]);
        let (_, recs) = run(&plan(Model::Cpu, 600, 50), script, 16);
        assert_eq!(recs.iter().map(|r| r.cpu).collect::<Vec<_>>(), vec![2, 5]);
    }

    #[test]
    fn overflow_is_counted_not_silent() {
        let script = Script::new(10).unavailable(&[(100, 200), (300, 400), (500, 600), (700, 800)]);
        let (out, recs) = run(&plan(Model::Cpu, 1000, 50), script, 2);
        assert_eq!(recs.len(), 2);
        assert_eq!((out.records, out.dropped), (2, 3));
    }

    /// PERIODIC 100 in 400 over ten periods; the CPU is taken away for most of job 3's period,
    /// so job 3 misses and every other job hits. Each period is counted once.
    #[test]
    fn periodic_hits_and_misses_are_exact() {
        let (out, recs) = run(
            &plan(
                Model::Periodic {
                    amount: 100,
                    period: 400,
                },
                4000,
                50,
            ),
            Script::new(10),
            64,
        );
        assert_eq!((out.hits, out.misses), (10, 0));
        assert!(recs.iter().all(|r| r.end - r.start == 100));
        assert_eq!(recs[0].reason, EndReason::Blocked);

        let script = Script::new(10).unavailable(&[(1250, 1590)]);
        let (out, _) = periodic_100_in_400(script);
        assert_eq!((out.hits, out.misses), (9, 1));
        let missed: Vec<_> = out.jobs.iter().filter(|j| !j.hit).collect();
        assert_eq!(missed.len(), 1);
        assert_eq!((missed[0].release, missed[0].deadline), (1200, 1600));
        assert_eq!(missed[0].received, 30);
        // The job released at the missed deadline ran at once and hit.
        let next = out.jobs.iter().find(|j| j.release == 1600).expect("job 4");
        assert!(next.hit);
        assert_eq!(next.end, 1700);
    }

    /// A thread starved for several whole periods misses each of them: no coordinated omission.
    #[test]
    fn periodic_counts_every_starved_period() {
        let script = Script::new(10).unavailable(&[(150, 1750)]);
        let (out, _) = run(
            &plan(
                Model::Periodic {
                    amount: 200,
                    period: 400,
                },
                4000,
                50,
            ),
            script,
            64,
        );
        // Periods [0,400) .. [1200,1600) all pass without 200 ticks of CPU: four misses.
        // The job released at 1600 starts at 1760 and needs until 1960: a hit. Then five more.
        assert_eq!(out.misses, 4);
        assert_eq!(out.hits + out.misses, 10);
    }

    /// Late wakeups: each wake is 350 ticks late, so only 50 ticks remain before the deadline
    /// and a job released by the timer misses; the job released at that missed deadline starts
    /// at once (no sleep) and hits.
    #[test]
    fn periodic_wakeup_latency_causes_misses() {
        let script = Script::new(10).wake_latency(&[0], 350);
        let (out, _) = run(
            &plan(
                Model::Periodic {
                    amount: 100,
                    period: 400,
                },
                2000,
                50,
            ),
            script,
            64,
        );
        assert_eq!((out.hits, out.misses), (3, 2));
        let pattern: Vec<bool> = out.jobs.iter().map(|j| j.hit).collect();
        assert_eq!(pattern, vec![true, false, true, false, true]);
    }

    /// CPU_PERIODIC 100 every 300: a frame completes every 100 ticks while the CPU is free;
    /// starved from 200 to 900, two windows pass without a frame.
    #[test]
    fn cpu_periodic_hits_and_misses_are_exact() {
        let m = Model::CpuPeriodic {
            amount: 100,
            period: 300,
        };
        let (out, _) = run(&plan(m, 1000, 50), Script::new(10), 16);
        // Frames complete at 110, 210, ..., 910.
        assert_eq!((out.hits, out.misses), (9, 0));

        let (out, _) = run(
            &plan(m, 1000, 50),
            Script::new(10).unavailable(&[(200, 900)]),
            16,
        );
        // Frame 1 at 110 (window 110..410); 180 ticks by 190, then nothing until 910:
        // windows 110..410 and 410..710 miss; the frame completes at 930 in window 710..1010.
        assert_eq!((out.hits, out.misses), (2, 2));
        let ends: Vec<(u64, bool)> = out.jobs.iter().map(|j| (j.end, j.hit)).collect();
        assert_eq!(
            ends,
            vec![(110, true), (410, false), (710, false), (930, true)]
        );
    }

    /// LAT: each wakeup's lateness is exactly the scripted wake latency, and the next period is
    /// measured from the actual wakeup (self-synchronising).
    #[test]
    fn lat_lateness_is_exact() {
        let lat = [0u64, 5, 7, 0, 30, 2];
        let script = Script::new(1).wake_latency(&lat, 0);
        let (out, recs) = run(&plan(Model::Lat { period: 100 }, 1000, 50), script, 16);
        assert!(recs.is_empty(), "LAT threads make no trace records");
        let late: Vec<u64> = out.latencies.iter().map(|s| s.wakeup - s.target).collect();
        // The read after each wake costs one tick of the scripted clock.
        assert_eq!(late[..5], [6, 8, 1, 31, 3]);
        let targets: Vec<u64> = out.latencies.iter().map(|s| s.target).collect();
        assert_eq!(targets[..3], [101, 207, 315]);
        assert!(out.latencies.iter().all(|s| s.target <= 1000));
    }

    #[test]
    fn yield_closes_a_record_only_when_the_cpu_was_lost() {
        // The first yield loses the CPU for 100 ticks; the second returns at once.
        let script = Script::new(10).yield_gaps(&[100, 0]);
        let (out, recs) = run(&plan(Model::Yield { amount: 50 }, 400, 50), script, 16);
        assert_eq!(recs[0].reason, EndReason::Yielded);
        assert_eq!(recs[0].end - recs[0].start, 50);
        assert!(out.yields >= 2);
        assert_eq!(out.preemptions, 0);
        assert_eq!(
            recs.iter()
                .filter(|r| r.reason == EndReason::Yielded)
                .count(),
            1
        );
    }

    #[test]
    fn stop_request_ends_the_run_and_keeps_the_trace() {
        let script = Script::new(10).stop_at(500);
        let mut p = plan(Model::Cpu, 10_000, 50);
        p.check_interval = 100;
        let (out, recs) = run(&p, script, 16);
        assert!(out.stopped);
        assert_eq!(recs.len(), 1);
        assert!(recs[0].end >= 500 && recs[0].end < 700, "{:?}", recs[0]);

        let script = Script::new(10).stop_at(250);
        let (out, _) = run(
            &plan(
                Model::Periodic {
                    amount: 100,
                    period: 400,
                },
                4000,
                50,
            ),
            script,
            16,
        );
        assert!(out.stopped);
        assert_eq!((out.hits, out.misses), (1, 0));
    }

    /// Regression: the period that ends exactly at the finish time was not counted when its job
    /// missed, because the finish check came before the deadline check.
    #[test]
    fn the_last_period_is_counted_even_when_it_misses() {
        let script = Script::new(10).unavailable(&[(3650, 4100)]);
        let (out, _) = periodic_100_in_400(script);
        assert_eq!((out.hits, out.misses), (9, 1));
        let last = out.jobs.last().expect("jobs");
        assert_eq!((last.release, last.deadline, last.hit), (3600, 4000, false));
        // A CPU_PERIODIC window ending at the finish is counted too.
        let script = Script::new(10).unavailable(&[(50, 5000)]);
        let m = Model::CpuPeriodic {
            amount: 100,
            period: 500,
        };
        let (out, _) = run(&plan(m, 1000, 50), script, 16);
        assert_eq!((out.hits, out.misses), (0, 2));
    }

    /// Regression: gaps more frequent than the stop-check interval used to push the check
    /// forward on every gap, so a CPU-bound thread never saw a stop request.
    #[test]
    fn stop_is_seen_when_gaps_are_more_frequent_than_the_check_interval() {
        let gaps: Vec<(u64, u64)> = (1..400).map(|k| (k * 50, k * 50 + 20)).collect();
        let script = Script::new(1).unavailable(&gaps).stop_at(1000);
        let mut p = plan(Model::Cpu, 20_000, 10);
        p.check_interval = 100;
        let (out, recs) = run(&p, script, 1000);
        assert!(out.stopped);
        let end = recs.last().map(|r| r.end).unwrap_or(0);
        assert!((1000..1200).contains(&end), "stopped at {end}");
    }

    /// Runs `plan` with `work` and the given outcome (rings of `samples` samples), returning it
    /// with the trace.
    fn run_with(
        plan: &ThreadPlan,
        script: Script,
        work: &mut Work,
        mut out: ThreadOutcome,
        samples: usize,
    ) -> (Ran, Vec<Record>) {
        let (clock, mut ops) = script.into_pair();
        let (outputs, consumers) = capture(64, samples);
        out.outputs = outputs;
        let progress = Progress::default();
        run_thread(plan, &clock, &mut ops, work, &mut out, &progress);
        finish(out, consumers)
    }

    #[test]
    fn scanning_counts_passes() {
        let mut work = Work::Scan(vec![0u64; 64]); // 8 cache lines
        let (out, _) = run_with(
            &plan(Model::Cpu, 1000, 50),
            Script::new(10),
            &mut work,
            ThreadOutcome::default(),
            64,
        );
        assert_eq!(out.scan_passes, out.iterations / 8);
        let Work::Scan(ws) = work else {
            unreachable!("the work stays a scan")
        };
        assert!(ws.iter().step_by(8).all(|&x| x > 0));
    }

    #[test]
    fn memmove_copies_once_per_read() {
        let mut work = Work::memmove(256);
        let (out, _) = run_with(
            &plan(Model::Cpu, 1000, 50),
            Script::new(10),
            &mut work,
            ThreadOutcome::default(),
            64,
        );
        assert_eq!(out.scan_passes, out.iterations);
        let Work::Memmove { src, dst } = work else {
            unreachable!("the work stays a memmove")
        };
        assert_eq!(src, dst);
    }

    /// Interruptions: the two scripted gaps, measured from the end of the record before them to
    /// the start of the record after (the read that found the gap, then the read that opened
    /// the next record: 120 and 70 ticks).
    #[test]
    fn gap_statistics_record_every_interruption() {
        let out = ThreadOutcome {
            gaps: Some(Box::default()),
            ..ThreadOutcome::default()
        };
        let script = Script::new(10).unavailable(&[(300, 400), (700, 750)]);
        let (out, _) = run_with(
            &plan(Model::Cpu, 1000, 50),
            script,
            &mut Work::None,
            out,
            64,
        );
        let g = out.gaps.expect("gap statistics");
        assert_eq!((g.count, g.total_ns, g.max_ns), (2, 190, 120));
        assert_eq!(g.hist.len(), 2);
        assert_eq!(g.hist.max(), 120);
    }

    fn timer_outcome() -> ThreadOutcome {
        ThreadOutcome {
            timer: Some(Box::<TimerStats>::default()),
            ..ThreadOutcome::default()
        }
    }

    /// Absolute mode: a release every 1000 ticks for 100 periods; each wakeup is 9 ticks late
    /// plus one tick for the read, except release 20, whose wakeup comes 50 000 ticks late. That
    /// wakeup serves release 20 and the 50 releases due before it (21 to 70), each with its own
    /// lateness; the grid continues at release 71. The raw view keeps one sample per wakeup, as
    /// cyclictest does.
    #[test]
    fn absolute_timer_counts_every_missed_release() {
        let mut lat = vec![9u64; 21];
        lat[20] = 50_000 - 1;
        let script = Script::new(1).wake_latency(&lat, 9);
        let m = Model::Release {
            period: 1000,
            resync: false,
            duty: None,
        };
        let (out, recs) = run_with(
            &plan(m, 100_000, 50),
            script,
            &mut Work::None,
            timer_outcome(),
            200,
        );
        assert!(recs.is_empty());
        let t = out.timer.expect("timer statistics");
        assert_eq!((t.releases, t.missed, t.wakeups), (100, 50, 50));
        assert_eq!(t.max_lateness_ns, 50_000);
        assert_eq!(
            t.min_lateness_ns, 0,
            "release 70 fell due exactly at the late wakeup"
        );
        assert_eq!(t.raw.len(), 50);
        assert_eq!(t.lateness.len(), 100);
        let late: Vec<i64> = out
            .latencies
            .iter()
            .map(|s| s.wakeup as i64 - s.target as i64)
            .collect();
        assert_eq!(late[20], 50_000);
        assert_eq!(late[21], 49_000);
        assert_eq!(late[70], 0);
        assert_eq!(late[71], 10);
        let missed: Vec<bool> = out.releases.iter().map(|r| r.missed).collect();
        assert_eq!(missed.iter().filter(|&&m| m).count(), 50);
        assert!(missed[21..71].iter().all(|&m| m) && !missed[20] && !missed[71]);
        let targets: Vec<u64> = out.latencies.iter().map(|s| s.target).collect();
        assert_eq!(targets, (0..100).map(|k| k * 1000).collect::<Vec<u64>>());
        // Intervals between wakeups: 1000 except around the stall.
        assert_eq!(t.interval.len(), 49);
        assert_eq!(t.interval.value_at_quantile(0.5), 1000);
    }

    /// Resync mode (Hourglass's LAT): the next release is one period after the wakeup.
    #[test]
    fn resync_timer_follows_the_wakeup() {
        let script = Script::new(1).wake_latency(&[], 9);
        let m = Model::Release {
            period: 1000,
            resync: true,
            duty: None,
        };
        let (out, _) = run_with(
            &plan(m, 10_000, 50),
            script,
            &mut Work::None,
            timer_outcome(),
            64,
        );
        let targets: Vec<u64> = out.latencies.iter().map(|s| s.target).collect();
        assert_eq!(targets, (0..10).map(|k| k * 1010).collect::<Vec<u64>>());
        let t = out.timer.expect("timer statistics");
        assert_eq!((t.releases, t.missed, t.wakeups), (10, 0, 10));
        assert_eq!(t.interval.value_at_quantile(1.0), 1010);
    }

    /// A stall longer than a period in resync mode also counts the releases it swallowed.
    #[test]
    fn resync_timer_counts_missed_releases_too() {
        let mut lat = vec![9u64; 4];
        lat[3] = 5_499;
        let script = Script::new(1).wake_latency(&lat, 9);
        let m = Model::Release {
            period: 1000,
            resync: true,
            duty: None,
        };
        let (out, _) = run_with(
            &plan(m, 20_000, 50),
            script,
            &mut Work::None,
            timer_outcome(),
            64,
        );
        let t = out.timer.expect("timer statistics");
        assert_eq!(t.missed, 5);
        assert_eq!(t.max_lateness_ns, 5_500);
    }

    /// The sample buffer never grows: what does not fit is counted.
    #[test]
    fn timer_samples_beyond_capacity_are_counted() {
        let script = Script::new(1).wake_latency(&[], 9);
        let m = Model::Release {
            period: 100,
            resync: false,
            duty: None,
        };
        let (out, _) = run_with(
            &plan(m, 10_000, 50),
            script,
            &mut Work::None,
            timer_outcome(),
            10,
        );
        assert_eq!(out.latencies.len(), 16);
        assert_eq!(out.samples_dropped, 84);
        assert_eq!(out.samples, 16);
        assert_eq!(out.timer.expect("stats").releases, 100);
    }

    /// A duty cycle of 3 periods in every 10: releases 0, 1 and 2 of each window of 10 000
    /// ticks, on a fresh grid; a wakeup late past its window's end counts only the releases
    /// of that window, and no interval spans a pause.
    #[test]
    fn duty_cycle_releases_only_in_its_windows() {
        let mut lat = vec![9u64; 10];
        // The third release of the second window wakes 2 500 ticks late (past its window).
        lat[5] = 2_500 - 1;
        let script = Script::new(1).wake_latency(&lat, 9);
        let m = Model::Release {
            period: 1000,
            resync: false,
            duty: Some(Duty {
                on: 3000,
                every: 10_000,
            }),
        };
        let (out, _) = run_with(
            &plan(m, 30_000, 50),
            script,
            &mut Work::None,
            timer_outcome(),
            64,
        );
        let targets: Vec<u64> = out.latencies.iter().map(|s| s.target).collect();
        assert_eq!(
            targets,
            vec![0, 1000, 2000, 10_000, 11_000, 12_000, 20_000, 21_000, 22_000]
        );
        let t = out.timer.expect("timer statistics");
        assert_eq!((t.releases, t.missed, t.wakeups), (9, 0, 9));
        assert_eq!(t.max_lateness_ns, 2_500);
        // Two intervals per window of three wakeups, none across a pause.
        assert_eq!(t.interval.len(), 6);
        assert!(t.interval.max() < 5_000, "{}", t.interval.max());
    }

    /// A stall that runs into the next window counts that window's releases due by the wakeup
    /// as missed, each with its own lateness.
    #[test]
    fn duty_cycle_stall_into_the_next_window_counts_its_releases() {
        let mut lat = vec![9u64; 3];
        // The last release of the first window (2000) wakes at 11 500.
        lat[2] = 9_500 - 1;
        let script = Script::new(1).wake_latency(&lat, 9);
        let m = Model::Release {
            period: 1000,
            resync: false,
            duty: Some(Duty {
                on: 3000,
                every: 10_000,
            }),
        };
        let (out, _) = run_with(
            &plan(m, 20_000, 50),
            script,
            &mut Work::None,
            timer_outcome(),
            64,
        );
        let t = out.timer.expect("timer statistics");
        let targets: Vec<(u64, bool)> = out.releases.iter().map(|r| (r.target, r.missed)).collect();
        assert_eq!(
            targets,
            vec![
                (0, false),
                (1000, false),
                (2000, false),
                (10_000, false),
                (11_000, true),
                (12_000, false)
            ]
        );
        assert_eq!((t.releases, t.missed), (6, 1));
    }
}
