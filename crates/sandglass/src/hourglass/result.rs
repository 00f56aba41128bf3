//! The result of an Hourglass run, in nanoseconds from the start of the run, and the run
//! directory's data files.
//!
//! Building the result is pure: counter values become nanoseconds through the calibration taken
//! around the whole run, records are sorted by start time, and the inferences of
//! [`crate::analysis::trace`] are applied.

use super::cmdline::HourglassSpec;
use super::plan::Placement;
use crate::analysis::trace::{self, Coverage, Interval, Switches};
use crate::clock::{Calibration, CounterInfo};
use crate::engine::calibrate::{GapChoice, LoopHistogram};
use crate::engine::Record;
use crate::model::{TimerKind, Workload};
use crate::policy::Policy;
pub use crate::runner::ThreadReport;
use crate::stats::{self, Summary};
use crate::store::RunState;
use crate::units::Nanos;
use crate::warning::{Warning, WarningKind};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The "samples later than" thresholds (Hourglass Table 1's 1, 5, 10 and 50 ms, with finer
/// ones suited to a modern kernel).
pub const LATER_THAN_NS: [u64; 8] = [
    10_000, 50_000, 100_000, 500_000, 1_000_000, 5_000_000, 10_000_000, 50_000_000,
];

/// A count of samples above a threshold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaterThan {
    pub threshold_ns: u64,
    pub count: u64,
}

/// One job (PERIODIC) or frame window (CPU_PERIODIC), in ns from the start of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobNs {
    pub release_ns: i64,
    pub deadline_ns: i64,
    pub first_run_ns: i64,
    pub end_ns: i64,
    pub received_ns: u64,
    pub hit: bool,
}

/// One trace record with both its times and its raw counter values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRow {
    pub interval: Interval,
    pub start_counter: u64,
    pub end_counter: u64,
}

/// What the run learned about one thread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// PERIODIC: completion minus release of jobs that hit.
    pub response: Option<Summary>,
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
    #[serde(skip)]
    pub lateness_ns: Vec<i64>,
    #[serde(skip)]
    pub jobs: Vec<JobNs>,
}

/// Trace bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceSummary {
    pub records: u64,
    pub capacity: u64,
    pub dropped: u64,
}

/// The whole result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HourglassResult {
    pub run_id: String,
    pub run_dir: String,
    pub state: RunState,
    pub end_detail: String,
    pub duration_ns: Nanos,
    /// From the run's start to the last counter read of any thread.
    pub elapsed_ns: u64,
    pub counter: CounterInfo,
    pub calibration: Calibration,
    pub gap: GapChoice,
    pub trace: TraceSummary,
    pub threads: Vec<ThreadResult>,
    pub switches: Switches,
    pub coverage: Vec<Coverage>,
    pub main_cpu: Option<usize>,
    pub pm_qos_us: Option<u32>,
    pub memory_locked: bool,
    pub warnings: Vec<Warning>,
    /// What each load achieved during the measurement.
    #[serde(default)]
    pub loads: Vec<crate::load::LoadReport>,
    /// The explanation of the longest preemptions by the sampler, and their periodic trains.
    #[serde(default)]
    pub causes: Option<crate::causes::Causes>,
    #[serde(skip)]
    pub rows: Vec<TraceRow>,
    #[serde(skip)]
    pub loop_histogram: Option<LoopHistogram>,
}

/// Everything [`build`] needs.
pub struct RawRun<'a> {
    pub spec: &'a HourglassSpec,
    pub placement: &'a Placement,
    pub counter: CounterInfo,
    pub calibration: Calibration,
    pub gap: GapChoice,
    pub start_tick: u64,
    pub records: Vec<Record>,
    pub trace_capacity: usize,
    pub reports: Vec<ThreadReport>,
    pub state: RunState,
    pub end_detail: String,
    pub warnings: Vec<Warning>,
    pub loop_histogram: Option<LoopHistogram>,
    pub run_id: String,
    pub run_dir: String,
    pub pm_qos_us: Option<u32>,
    pub memory_locked: bool,
    pub loads: Vec<crate::load::LoadReport>,
}

/// Turns counters into nanoseconds and applies the trace inferences.
pub fn build(raw: RawRun<'_>) -> HourglassResult {
    let cal = raw.calibration;
    let t0 = raw.start_tick;
    let rel = |c: u64| cal.ns_between(t0, c);
    let rel_u = |c: u64| rel(c).max(0) as u64;

    let mut rows: Vec<TraceRow> = raw
        .records
        .iter()
        .map(|r| TraceRow {
            interval: Interval {
                thread: r.thread,
                cpu: r.cpu,
                start_ns: rel_u(r.start),
                end_ns: rel_u(r.end),
                reason: r.reason,
            },
            start_counter: r.start,
            end_counter: r.end,
        })
        .collect();
    rows.sort_by_key(|r| (r.interval.start_ns, r.interval.thread));
    let intervals: Vec<Interval> = rows.iter().map(|r| r.interval).collect();

    let mut warnings = raw.warnings;
    let mut threads = Vec::with_capacity(raw.spec.threads.len());
    let mut elapsed = 0u64;
    let mut total_dropped = 0u64;
    for (t, rep) in raw.spec.threads.iter().zip(raw.reports) {
        let cpus = raw.placement.threads[t.index]
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_else(|| format!("all ({})", raw.placement.measured));
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
            response: None,
            lateness: None,
            later_than: Vec::new(),
            latencies_dropped: 0,
            scan_passes: None,
            stopped: false,
            joined: rep.outcome.is_some(),
            error: rep.error.clone(),
            lateness_ns: Vec::new(),
            jobs: Vec::new(),
        };
        if let Some(o) = &rep.outcome {
            tr.received_ns = cal.ns_for_ticks(o.received);
            tr.active_ns = cal.ns_for_ticks(o.last.saturating_sub(o.first));
            tr.records = o.records;
            tr.dropped = o.dropped;
            total_dropped += o.dropped;
            tr.preemptions = o.preemptions;
            tr.yields = o.yields;
            tr.iterations = o.iterations;
            if t.workload.records_trace() && o.iterations > 0 {
                tr.mean_iteration_ns = Some(tr.received_ns as f64 / o.iterations as f64);
            }
            if o.last > t0 {
                elapsed = elapsed.max(rel_u(o.last));
            }
            tr.stopped = o.stopped;
            if matches!(
                t.workload,
                Workload::Periodic { .. } | Workload::CpuPeriodic { .. }
            ) {
                tr.hits = Some(o.hits);
                tr.misses = Some(o.misses);
                tr.jobs_dropped = o.jobs_dropped;
                tr.jobs = o
                    .jobs
                    .iter()
                    .map(|j| JobNs {
                        release_ns: rel(j.release),
                        deadline_ns: rel(j.deadline),
                        first_run_ns: rel(j.first_run),
                        end_ns: rel(j.end),
                        received_ns: cal.ns_for_ticks(j.received),
                        hit: j.hit,
                    })
                    .collect();
                if matches!(t.workload, Workload::Periodic { .. }) {
                    let mut resp: Vec<i64> = tr
                        .jobs
                        .iter()
                        .filter(|j| j.hit)
                        .map(|j| j.end_ns - j.release_ns)
                        .collect();
                    tr.response = stats::summarize(&mut resp);
                }
            }
            if matches!(t.workload, Workload::Lat { .. }) {
                tr.lateness_ns = o
                    .latencies
                    .iter()
                    .map(|s| cal.ns_between(s.target, s.wakeup))
                    .collect();
                tr.latencies_dropped = o.latencies_dropped;
                let mut sorted = tr.lateness_ns.clone();
                tr.lateness = stats::summarize(&mut sorted);
                tr.later_than = LATER_THAN_NS
                    .iter()
                    .map(|&th| LaterThan {
                        threshold_ns: th,
                        count: stats::count_above(&sorted, th as i64),
                    })
                    .collect();
            }
            if t.workload.scan_kb().is_some() {
                tr.scan_passes = Some(o.scan_passes);
            }
            if o.jobs_dropped > 0 || o.latencies_dropped > 0 {
                warnings.push(Warning::new(
                    WarningKind::RecordsDropped,
                    format!(
                        "thread {}: {} job records and {} latency samples did not fit the buffers sized for the run and were counted but not kept",
                        t.index, o.jobs_dropped, o.latencies_dropped
                    ),
                ));
            }
        } else {
            warnings.push(Warning::new(
                WarningKind::ThreadDidNotStop,
                format!("thread {} did not stop when the run ended; its records in the trace are kept, its counters are lost", t.index),
            ));
        }
        threads.push(tr);
    }
    if total_dropped > 0 {
        warnings.push(Warning::new(
            WarningKind::RecordsDropped,
            format!(
                "the trace buffer filled up: {total_dropped} records were dropped (counted, not kept); raise -e above {} or shorten the run",
                raw.trace_capacity
            ),
        ));
    }
    HourglassResult {
        run_id: raw.run_id,
        run_dir: raw.run_dir,
        state: raw.state,
        end_detail: raw.end_detail,
        duration_ns: raw.spec.duration_ns,
        elapsed_ns: elapsed,
        counter: raw.counter,
        calibration: cal,
        gap: raw.gap,
        trace: TraceSummary {
            records: rows.len() as u64,
            capacity: raw.trace_capacity as u64,
            dropped: total_dropped,
        },
        threads,
        switches: trace::context_switches(&intervals),
        coverage: trace::coverage(&intervals),
        main_cpu: raw.placement.main_cpu,
        pm_qos_us: raw.pm_qos_us,
        memory_locked: raw.memory_locked,
        loads: raw.loads,
        causes: None,
        warnings,
        rows,
        loop_histogram: raw.loop_histogram,
    }
}

impl HourglassResult {
    /// `trace.csv`: one row per interval of continuous CPU time.
    pub fn trace_csv(&self) -> String {
        let mut s = String::with_capacity(64 * (self.rows.len() + 1));
        s.push_str("thread,cpu,start_ns,end_ns,start_counter,end_counter,end_reason\n");
        for r in &self.rows {
            let i = r.interval;
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{}",
                i.thread,
                i.cpu,
                i.start_ns,
                i.end_ns,
                r.start_counter,
                r.end_counter,
                i.reason.name()
            );
        }
        s
    }

    /// `latency.csv`: one row per LAT wakeup.
    pub fn latency_csv(&self) -> Option<String> {
        let lat: Vec<&ThreadResult> = self
            .threads
            .iter()
            .filter(|t| matches!(t.workload, Workload::Lat { .. }))
            .collect();
        if lat.is_empty() {
            return None;
        }
        let mut s = String::from("thread,wakeup,lateness_ns\n");
        for t in lat {
            for (i, l) in t.lateness_ns.iter().enumerate() {
                let _ = writeln!(s, "{},{},{}", t.thread, i, l);
            }
        }
        Some(s)
    }

    /// `jobs.csv`: one row per PERIODIC job or CPU_PERIODIC window.
    pub fn jobs_csv(&self) -> Option<String> {
        let per: Vec<&ThreadResult> = self.threads.iter().filter(|t| t.hits.is_some()).collect();
        if per.is_empty() {
            return None;
        }
        let mut s = String::from(
            "thread,job,release_ns,deadline_ns,first_run_ns,end_ns,received_ns,outcome\n",
        );
        for t in per {
            for (k, j) in t.jobs.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{}",
                    t.thread,
                    k,
                    j.release_ns,
                    j.deadline_ns,
                    j.first_run_ns,
                    j.end_ns,
                    j.received_ns,
                    if j.hit { "hit" } else { "miss" }
                );
            }
        }
        Some(s)
    }
}
