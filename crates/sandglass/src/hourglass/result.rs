//! The result of an Hourglass run, in nanoseconds from the start of the run.
//!
//! The trace, the LAT wakeups and the jobs go to the run's tables as the run goes
//! ([`super::run::HourglassSink`]), which also infers the context switches and the coverage and
//! summarises lateness and response times; building the result takes those summaries and each
//! thread's own counters.

use crate::analysis::trace::{Coverage, Switches};
use crate::clock::{Calibration, CounterInfo};
use crate::engine::calibrate::{GapChoice, LoopHistogram};
use crate::model::{TimerKind, Workload};
#[cfg(feature = "linux")]
use crate::plan::ThreadSpec;
use crate::policy::Policy;
use crate::result::RunHeader;
#[cfg(feature = "linux")]
use crate::runner::{Measured, ThreadReport};
use crate::stats::{Accumulator, Summary};
use crate::units::Nanos;
#[cfg(feature = "linux")]
use crate::warning::{Warning, WarningKind};
use serde::{Deserialize, Serialize};

/// The "samples later than" thresholds (Hourglass Table 1's 1, 5, 10 and 50 ms, with finer
/// ones suited to a modern kernel).
pub const LATER_THAN_NS: [u64; 8] = [
    10_000, 50_000, 100_000, 500_000, 1_000_000, 5_000_000, 10_000_000, 50_000_000,
];

/// A count of samples above a threshold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LaterThan {
    pub threshold_ns: u64,
    pub count: u64,
}

/// What the run learned about one thread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadResult {
    pub thread: usize,
    pub tid: i32,
    pub workload: Workload,
    pub timer: TimerKind,
    /// The priority as written, or the reservation.
    pub priority: String,
    pub policy_requested: Policy,
    /// What `sched_getattr` reported after setup.
    pub policy_effective: Option<Policy>,
    pub downgraded: Option<String>,
    /// The CPUs the thread was allowed to run on (`all` when it floated).
    pub cpus: String,
    pub timer_slack_ns: Option<u64>,
    pub start_ns: Nanos,
    pub finish_ns: Nanos,
    /// CPU time received, from the thread's own gap-free intervals.
    pub received_ns: u64,
    /// From the thread's first to its last counter read.
    pub active_ns: u64,
    pub records: u64,
    pub dropped: u64,
    pub preemptions: u64,
    pub yields: u64,
    pub iterations: u64,
    /// Mean time per polling-loop iteration over the thread's received CPU time.
    pub mean_iteration_ns: Option<f64>,
    /// PERIODIC and CPU_PERIODIC: deadlines hit and missed.
    pub hits: Option<u64>,
    pub misses: Option<u64>,
    pub jobs_dropped: u64,
    /// PERIODIC: the response time of every job, release to completion; a missed job, dropped
    /// unfinished at its deadline, counts as its deadline minus its release (a lower bound of
    /// a response it never had). Runs written before `response_counts_misses` summarise the
    /// hits only.
    pub response: Option<Summary>,
    /// True when `response` counts the missed jobs (at their deadline); false in runs that
    /// summarised the jobs that hit only.
    #[serde(default)]
    pub response_counts_misses: bool,
    /// LAT: lateness of each wakeup.
    pub lateness: Option<Summary>,
    pub later_than: Vec<LaterThan>,
    pub latencies_dropped: u64,
    /// CPU_SCAN models: complete passes over the working set.
    pub scan_passes: Option<u64>,
    /// A stop request (Ctrl-C, SIGTERM) ended the thread before its finish time.
    pub stopped: bool,
    /// False when the thread did not stop and the watchdog abandoned it.
    pub joined: bool,
    pub error: Option<String>,
}

/// Trace bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TraceSummary {
    /// Records written to the trace table.
    pub records: u64,
    /// Records the threads' rings hold together (`-e`).
    pub capacity: u64,
    /// Records lost because a ring was full when the main thread fell behind.
    pub dropped: u64,
    /// Records written after a record that starts later (see [`crate::engine::merge`]).
    #[serde(default)]
    pub out_of_order: u64,
}

/// The version of `summary.json` of Hourglass runs.
pub const JSON_SCHEMA: &str = "sandglass-hourglass/3";

/// The whole result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HourglassResult {
    #[serde(flatten)]
    pub run: RunHeader,
    pub counter: CounterInfo,
    pub calibration: Calibration,
    pub gap: GapChoice,
    pub trace: TraceSummary,
    pub threads: Vec<ThreadResult>,
    pub switches: Switches,
    pub coverage: Vec<Coverage>,
    pub main_cpu: Option<usize>,
    #[serde(skip)]
    pub loop_histogram: Option<LoopHistogram>,
}

/// What the run's sink summarised for one thread.
#[derive(Clone, Debug, Default)]
pub struct ThreadSummary {
    /// LAT: lateness of each wakeup.
    pub lateness: Option<Accumulator>,
    /// LAT: wakeups later than each of [`LATER_THAN_NS`].
    pub later_than: [u64; 8],
    /// PERIODIC: the response time of every job ([`response_ns`]).
    pub response: Option<Accumulator>,
}

/// The response time of one PERIODIC job, in ns from the start of the run: completion minus
/// release for a job that hit; for a miss, which is dropped unfinished at its deadline, the
/// deadline minus the release (the least it would have taken).
pub fn response_ns(release_ns: i64, deadline_ns: i64, end_ns: i64, hit: bool) -> i64 {
    if hit {
        end_ns - release_ns
    } else {
        deadline_ns.max(end_ns) - release_ns
    }
}

/// What the run's sink gives the result.
pub struct Streamed {
    pub threads: Vec<ThreadSummary>,
    pub switches: Switches,
    pub coverage: Vec<Coverage>,
    pub records: u64,
    pub out_of_order: u64,
}

/// Turns each thread's counters and the sink's summaries into the result.
#[cfg(feature = "linux")]
pub fn build(
    threads: &[ThreadSpec],
    duration: Nanos,
    ring_records: usize,
    m: &mut Measured,
    streamed: Streamed,
) -> HourglassResult {
    let reports = std::mem::take(&mut m.reports);
    let mut warnings = Vec::new();
    let mut out = Vec::with_capacity(threads.len());
    let mut dropped = 0u64;
    for ((t, rep), sum) in threads.iter().zip(reports).zip(streamed.threads) {
        let (tr, lost) = thread_result(t, rep, sum, m, &mut warnings);
        dropped += lost;
        out.push(tr);
    }
    if dropped > 0 {
        warnings.push(Warning::new(
            WarningKind::RecordsDropped,
            format!(
                "{dropped} trace records did not reach the store because the main thread fell behind (counted, not kept); keep the main thread's CPU free of other work, or raise -e above {ring_records}"
            ),
        ));
    }
    if streamed.out_of_order > 0 {
        warnings.push(Warning::new(
            WarningKind::RecordsDropped,
            format!(
                "{} trace records were written out of order of start: a thread ran so long without a gap that the reorder buffer filled; context switches around them may be missed",
                streamed.out_of_order
            ),
        ));
    }
    m.warnings.extend(warnings);
    HourglassResult {
        run: RunHeader::of(m, JSON_SCHEMA, duration),
        counter: m.counter.clone(),
        calibration: m.calibration,
        gap: m.gap.clone(),
        trace: TraceSummary {
            records: streamed.records,
            capacity: ring_records as u64,
            dropped,
            out_of_order: streamed.out_of_order,
        },
        threads: out,
        switches: streamed.switches,
        coverage: streamed.coverage,
        main_cpu: m.placement.main_cpu,
        loop_histogram: m.loop_histogram.clone(),
    }
}

/// One thread's result, and the trace records it lost.
#[cfg(feature = "linux")]
fn thread_result(
    t: &ThreadSpec,
    rep: ThreadReport,
    sum: ThreadSummary,
    m: &Measured,
    warnings: &mut Vec<Warning>,
) -> (ThreadResult, u64) {
    let tb = &m.timebase;
    let cpus = m.placement.threads[t.index]
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_else(|| format!("all ({})", m.placement.measured));
    let applied = rep.applied.as_ref();
    let mut tr = ThreadResult {
        thread: t.index,
        tid: rep.tid,
        workload: t.workload,
        timer: t.timer,
        priority: t.priority_text.clone(),
        policy_requested: t.policy,
        policy_effective: applied.and_then(|a| a.effective),
        downgraded: applied.and_then(|a| a.downgraded.clone()),
        cpus,
        timer_slack_ns: rep.timer_slack_ns,
        start_ns: t.start_ns,
        finish_ns: t.finish_ns,
        received_ns: 0,
        active_ns: 0,
        records: 0,
        dropped: 0,
        preemptions: 0,
        yields: 0,
        iterations: 0,
        mean_iteration_ns: None,
        hits: None,
        misses: None,
        jobs_dropped: 0,
        response: sum.response.as_ref().and_then(Accumulator::summary),
        response_counts_misses: sum.response.is_some(),
        lateness: sum.lateness.as_ref().and_then(Accumulator::summary),
        later_than: Vec::new(),
        latencies_dropped: 0,
        scan_passes: None,
        stopped: false,
        joined: rep.outcome.is_some(),
        error: rep.error.clone(),
    };
    if sum.lateness.is_some() {
        tr.later_than = LATER_THAN_NS
            .iter()
            .zip(sum.later_than)
            .map(|(&threshold_ns, count)| LaterThan {
                threshold_ns,
                count,
            })
            .collect();
    }
    let Some(o) = &rep.outcome else {
        warnings.push(Warning::new(
            WarningKind::ThreadDidNotStop,
            format!("thread {} did not stop when the run ended; its records in the trace are kept, its counters are lost", t.index),
        ));
        return (tr, 0);
    };
    tr.received_ns = tb.duration_ns(o.received);
    tr.active_ns = tb.duration_ns(o.last.saturating_sub(o.first));
    tr.records = o.records;
    tr.dropped = o.dropped;
    tr.preemptions = o.preemptions;
    tr.yields = o.yields;
    tr.iterations = o.iterations;
    if t.workload.records_trace() && o.iterations > 0 {
        tr.mean_iteration_ns = Some(tr.received_ns as f64 / o.iterations as f64);
    }
    tr.stopped = o.stopped;
    if matches!(
        t.workload,
        Workload::Periodic { .. } | Workload::CpuPeriodic { .. }
    ) {
        tr.hits = Some(o.hits);
        tr.misses = Some(o.misses);
        tr.jobs_dropped = o.jobs_dropped;
    }
    if matches!(t.workload, Workload::Lat { .. }) {
        tr.latencies_dropped = o.samples_dropped;
    }
    if t.workload.scan_kb().is_some() {
        tr.scan_passes = Some(o.scan_passes);
    }
    if o.jobs_dropped > 0 || o.samples_dropped > 0 {
        warnings.push(Warning::new(
            WarningKind::RecordsDropped,
            format!(
                "thread {}: {} job records and {} latency samples did not reach the store because the main thread fell behind; they are counted, not kept",
                t.index, o.jobs_dropped, o.samples_dropped
            ),
        ));
    }
    (tr, o.dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five jobs of a 33 ms period: three hit after 10, 20 and 30 ms, two were dropped at their
    /// deadline. Every job counts, the misses at 33 ms: max 33 ms, median 30 ms, min 10 ms.
    #[test]
    fn missed_jobs_count_at_their_deadline() {
        const MS: i64 = 1_000_000;
        let period = 33 * MS;
        // (release, end, hit): a miss ends at its deadline.
        let jobs = [
            (0, 10 * MS, true),
            (period, period + 20 * MS, true),
            (2 * period, 3 * period, false),
            (3 * period, 3 * period + 30 * MS, true),
            (4 * period, 5 * period, false),
        ];
        let mut a = Accumulator::new();
        for (release, end, hit) in jobs {
            a.add(response_ns(release, release + period, end, hit));
        }
        let s = a.summary().expect("five jobs");
        assert_eq!(s.count, 5);
        assert_eq!((s.min_ns, s.max_ns), (10 * MS, 33 * MS));
        // The median to the histogram's three significant digits.
        assert!((s.p50_ns - 30 * MS).abs() <= 30 * MS / 1000, "{s:?}");
        // A miss whose record ends before its deadline still counts the whole period.
        assert_eq!(response_ns(0, period, 5 * MS, false), period);
        assert_eq!(response_ns(0, period, 7 * MS, true), 7 * MS);
    }
}
