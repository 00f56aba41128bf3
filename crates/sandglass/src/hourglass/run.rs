//! Running Hourglass: the command line's plan through the shared lifecycle of
//! [`crate::runner`], the execution trace streamed to the run's store, and the result.

use super::cmdline::HourglassSpec;
use super::result::{self, HourglassResult, Streamed, ThreadSummary, LATER_THAN_NS};
use crate::analysis::trace::{Interval, TraceInference};
use crate::causes::spikes::{self, SpikeLog};
use crate::engine::merge::Merge;
use crate::engine::{EndReason, JobRecord, LatSample, Record};
use crate::model::TimerKind;
use crate::model::Workload;
use crate::os::RtcUnusable;
use crate::runner::{self, Measured, Sink, SinkSetup, SpikeAt, Timebase};
use crate::stats::Accumulator;
use crate::store::table::{tables, Limits, TableWriter};
use crate::store::{FileEntry, RunState, StoreError};
use crate::warning::{Warning, WarningKind};
use parquet::data_type::ByteArray;

pub use crate::runner::{Observer, RunContext, RunError, Silent};

/// Preemptions of at least this long are spikes for the explanation.
pub const SPIKE_NS: u64 = 100_000;

/// Records the reorder buffer holds while a thread holds the watermark back.
const MERGE_CAPACITY: usize = 1 << 18;

/// Where the records, LAT wakeups and jobs of an Hourglass run go as it runs: the trace table
/// in order of start (with the context switches and coverage inferred on the way), the LAT and
/// job tables, the spikes per CPU, and the summaries of lateness and response times.
pub struct HourglassSink {
    trace: TableWriter,
    latency: Option<TableWriter>,
    jobs: Option<TableWriter>,
    merge: Merge,
    emitted: Emitted,
    /// Per thread: its previous record, for preemption gaps.
    previous: Vec<Option<Record>>,
    summaries: Vec<ThreadSummary>,
    next_wakeup: Vec<u64>,
    next_job: Vec<u64>,
    spikes: Vec<SpikeLog>,
    outcomes: [ByteArray; 2],
}

/// What happens to each record released in order.
struct Emitted {
    inference: TraceInference,
    rows: u64,
    reasons: [ByteArray; 4],
    tb: Timebase,
    now_ns: u64,
    error: Option<StoreError>,
    /// What the sibling threads ran in each thread's preemption gaps.
    siblings: super::siblings::Siblings,
}

impl Emitted {
    fn emit(&mut self, trace: &mut TableWriter, r: &Record) {
        if self.error.is_some() {
            return;
        }
        let iv = Interval {
            thread: r.thread,
            cpu: r.cpu,
            start_ns: self.tb.at_ns(r.start).max(0) as u64,
            end_ns: self.tb.at_ns(r.end).max(0) as u64,
            reason: r.reason,
        };
        self.inference.add(&iv);
        self.siblings.add(
            r.thread,
            r.cpu as usize,
            iv.start_ns,
            iv.end_ns,
            r.reason == EndReason::Preempted,
        );
        let reason = match r.reason {
            EndReason::Preempted => &self.reasons[0],
            EndReason::Yielded => &self.reasons[1],
            EndReason::Blocked => &self.reasons[2],
            EndReason::Finished => &self.reasons[3],
        };
        let b = trace.row();
        b.push_i32(0, i32::from(r.thread));
        b.push_i32(1, r.cpu as i32);
        b.push_i64(2, iv.start_ns as i64);
        b.push_i64(3, iv.end_ns as i64);
        b.push_i64(4, r.start as i64);
        b.push_i64(5, r.end as i64);
        b.push_text(6, reason);
        self.rows += 1;
        if let Err(e) = trace.end_row(self.now_ns) {
            self.error = Some(e);
        }
    }
}

impl HourglassSink {
    pub fn create(s: &SinkSetup<'_>, spec: &HourglassSpec) -> Result<HourglassSink, StoreError> {
        let threads = &spec.threads;
        let any = |f: fn(&Workload) -> bool| threads.iter().any(|t| f(&t.workload));
        let small = Limits {
            row_group_rows: 1 << 14,
            ..Limits::default()
        };
        let latency = any(|w| matches!(w, Workload::Lat { .. }))
            .then(|| TableWriter::create(s.dir, &tables::LATENCY, small))
            .transpose()?;
        let jobs = any(|w| matches!(w, Workload::Periodic { .. } | Workload::CpuPeriodic { .. }))
            .then(|| TableWriter::create(s.dir, &tables::JOBS, small))
            .transpose()?;
        let keep_all = s.plan.trace.is_some();
        let n = threads.len();
        Ok(HourglassSink {
            summaries: threads
                .iter()
                .map(|t| ThreadSummary {
                    lateness: matches!(t.workload, Workload::Lat { .. }).then(Accumulator::new),
                    response: matches!(t.workload, Workload::Periodic { .. })
                        .then(Accumulator::new),
                    ..ThreadSummary::default()
                })
                .collect(),
            trace: TableWriter::create(s.dir, &tables::TRACE, Limits::default())?,
            latency,
            jobs,
            merge: Merge::new(MERGE_CAPACITY),
            emitted: Emitted {
                inference: TraceInference::new(),
                rows: 0,
                reasons: [
                    EndReason::Preempted,
                    EndReason::Yielded,
                    EndReason::Blocked,
                    EndReason::Finished,
                ]
                .map(|r| ByteArray::from(r.name())),
                tb: s.timebase,
                now_ns: 0,
                error: None,
                siblings: super::siblings::Siblings::new(n, SPIKE_NS),
            },
            previous: vec![None; n],
            next_wakeup: vec![0; n],
            next_job: vec![0; n],
            spikes: s
                .placement
                .measured
                .iter()
                .map(|c| SpikeLog::new(c, SPIKE_NS, spikes::CAPACITY, keep_all))
                .collect(),
            outcomes: [ByteArray::from("hit"), ByteArray::from("miss")],
        })
    }

    /// Writes what is buffered, closes the tables, and returns the files, the spikes per CPU,
    /// what the result needs and the largest preemption gaps with what the siblings ran in them.
    pub fn finish(
        mut self,
        now_ns: u64,
    ) -> (
        Result<Vec<FileEntry>, StoreError>,
        Vec<SpikeLog>,
        Streamed,
        Vec<super::siblings::Gap>,
    ) {
        let Self {
            merge,
            emitted,
            trace,
            ..
        } = &mut self;
        merge.finish(&mut |r| emitted.emit(trace, r));
        for log in &mut self.spikes {
            log.finish();
        }
        let closed = (|| {
            if let Some(e) = self.emitted.error.take() {
                return Err(e);
            }
            let mut files = self.trace.finish(now_ns)?;
            if let Some(l) = self.latency.take() {
                files.extend(l.finish(now_ns)?);
            }
            if let Some(j) = self.jobs.take() {
                files.extend(j.finish(now_ns)?);
            }
            Ok(files)
        })();
        let streamed = Streamed {
            threads: self.summaries,
            switches: self.emitted.inference.switches(),
            coverage: self.emitted.inference.coverage(),
            records: self.emitted.rows,
            out_of_order: self.merge.out_of_order,
        };
        let siblings = std::mem::replace(
            &mut self.emitted.siblings,
            super::siblings::Siblings::new(0, 0),
        );
        (closed, self.spikes, streamed, siblings.finish())
    }

    fn spike_log(&mut self, cpu: u32) -> Option<&mut SpikeLog> {
        self.spikes.iter_mut().find(|l| l.cpu() == cpu as usize)
    }
}

impl Sink for HourglassSink {
    fn records(&mut self, i: usize, batch: &[Record], tb: &Timebase) -> Result<(), StoreError> {
        self.emitted.tb = *tb;
        for r in batch {
            // A preemption gap: the interval before ended because the thread lost its CPU.
            if let Some(prev) = self.previous[i] {
                if prev.reason == EndReason::Preempted && r.start > prev.end {
                    let at = tb.at_ns(prev.end);
                    let gap = tb.duration_ns(r.start - prev.end) as i64;
                    if let Some(log) = self.spike_log(prev.cpu) {
                        log.sample(at, gap, SPIKE_NS);
                    }
                }
            }
            self.previous[i] = Some(*r);
            let Self {
                merge,
                emitted,
                trace,
                ..
            } = &mut *self;
            merge.push(*r, &mut |x| emitted.emit(trace, x));
        }
        match self.emitted.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn lat(&mut self, i: usize, batch: &[LatSample], tb: &Timebase) -> Result<(), StoreError> {
        let Some(table) = self.latency.as_mut() else {
            return Ok(());
        };
        for s in batch {
            let late = tb.signed_ns(s.wakeup.wrapping_sub(s.target) as i64);
            let b = table.row();
            b.push_i32(0, i as i32);
            b.push_i64(1, self.next_wakeup[i] as i64);
            b.push_i64(2, late);
            table.end_row(tb.at_ns(s.wakeup).max(0) as u64)?;
            self.next_wakeup[i] += 1;
            let sum = &mut self.summaries[i];
            if let Some(a) = sum.lateness.as_mut() {
                a.add(late);
            }
            for (k, &th) in LATER_THAN_NS.iter().enumerate() {
                if late > th as i64 {
                    sum.later_than[k] += 1;
                }
            }
        }
        Ok(())
    }

    fn jobs(&mut self, i: usize, batch: &[JobRecord], tb: &Timebase) -> Result<(), StoreError> {
        let Some(table) = self.jobs.as_mut() else {
            return Ok(());
        };
        for j in batch {
            let release = tb.at_ns(j.release);
            let end = tb.at_ns(j.end);
            let b = table.row();
            b.push_i32(0, i as i32);
            b.push_i64(1, self.next_job[i] as i64);
            b.push_i64(2, release);
            b.push_i64(3, tb.at_ns(j.deadline));
            b.push_i64(4, tb.at_ns(j.first_run));
            b.push_i64(5, end);
            b.push_i64(6, tb.duration_ns(j.received) as i64);
            b.push_text(6 + 1, &self.outcomes[usize::from(!j.hit)]);
            table.end_row(end.max(0) as u64)?;
            self.next_job[i] += 1;
            if let Some(a) = self.summaries[i].response.as_mut() {
                a.add(result::response_ns(
                    release,
                    tb.at_ns(j.deadline),
                    end,
                    j.hit,
                ));
            }
        }
        Ok(())
    }

    fn tick(&mut self, now_ns: u64, watermark: u64, tb: &Timebase) -> Result<(), StoreError> {
        self.emitted.tb = *tb;
        self.emitted.now_ns = now_ns;
        let Self {
            merge,
            emitted,
            trace,
            ..
        } = &mut *self;
        merge.release(watermark, &mut |r| emitted.emit(trace, r));
        if let Some(e) = self.emitted.error.take() {
            return Err(e);
        }
        self.trace.tick(now_ns)?;
        if let Some(t) = self.latency.as_mut() {
            t.tick(now_ns)?;
        }
        if let Some(t) = self.jobs.as_mut() {
            t.tick(now_ns)?;
        }
        Ok(())
    }

    fn spikes(&mut self, out: &mut Vec<SpikeAt>) {
        for log in &mut self.spikes {
            log.take_fresh(out);
        }
    }
}

/// Runs `spec` and writes its run directory.
pub fn run(
    spec: &HourglassSpec,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<HourglassResult, RunError> {
    let fallback = rtc_fallback(spec, crate::os::rtc_usable())?;
    let spec = &fallback
        .as_ref()
        .map_or_else(|| spec.clone(), |(s, _)| s.clone());
    if let Some((_, w)) = &fallback {
        obs.warning(w);
    }
    let plan = spec.plan();
    let (mut m, sink) = runner::measure(&plan, ctx, obs, |s| HourglassSink::create(s, spec))?;
    if let Some((_, w)) = fallback {
        m.warnings.insert(0, w);
    }
    let (closed, spikes, streamed, gaps) = sink.finish(m.elapsed_ns());
    let mut files = crate::result::close_store(&mut m, closed);
    let mut result = result::build(
        &spec.threads,
        spec.duration_ns,
        spec.records,
        &mut m,
        streamed,
    );
    let c = causes(&m, &spikes, &gaps, &spec.threads);
    if let Some(k) = &c.kernel {
        result
            .run
            .warnings
            .extend(crate::causes::kernel_warnings(k));
    }
    result.run.causes = Some(c);
    if m.state != RunState::Incomplete {
        match write_calibration(&m, &result) {
            Ok(f) => files.push(f),
            Err(e) => files = crate::result::close_store(&mut m, Err(e)),
        }
    }
    result.run.state = m.state;
    result.run.end_detail = m.end_detail.clone();
    crate::result::save(
        &m,
        &result,
        "sandglass-hourglass-summary/3",
        "per-thread results, context switches, coverage, gap threshold and warnings",
        result.run.causes.as_ref(),
        &result.run.warnings,
        files,
    )
    .map_err(|e| {
        RunError::Failed(format!(
            "the run finished but its results could not be saved: {e}"
        ))
    })?;
    Ok(result)
}

/// The paper's `-i RTC` where `/dev/rtc` cannot give periodic interrupts (`usable` is why not,
/// or `Ok`): most virtual machines and many servers have no RTC driver, and rates above 64 Hz
/// need root. The threads that ask for it then use HR (clock_nanosleep, absolute), the
/// documented substitute, and the warning returned says so and is recorded in the run;
/// `--require-rtc` refuses instead. `None` when nothing changes.
pub fn rtc_fallback(
    spec: &HourglassSpec,
    usable: Result<(), RtcUnusable>,
) -> Result<Option<(HourglassSpec, Warning)>, RunError> {
    let asking: Vec<usize> = spec
        .threads
        .iter()
        .enumerate()
        .filter(|(_, t)| t.timer == TimerKind::Rtc)
        .map(|(i, _)| i)
        .collect();
    let Err(why) = usable else {
        return Ok(None);
    };
    if asking.is_empty() {
        return Ok(None);
    }
    if spec.require_rtc {
        return Err(RunError::Usage(format!(
            "-i RTC with --require-rtc: {why}; leave out --require-rtc to run such threads with HR and a warning"
        )));
    }
    let mut changed = spec.clone();
    for &i in &asking {
        changed.threads[i].timer = TimerKind::Hr;
    }
    let which = asking
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let threads = if asking.len() == 1 {
        format!("thread {which} waits")
    } else {
        format!("threads {which} wait")
    };
    let warning = Warning::new(
        WarningKind::TimerFallback,
        format!(
            "-i RTC: {why}, so {threads} with HR (clock_nanosleep, absolute), the documented substitute; add --require-rtc to refuse instead"
        ),
    );
    Ok(Some((changed, warning)))
}

/// The explanation of the run's preemption gaps on each CPU.
fn causes(
    m: &Measured,
    spikes: &[SpikeLog],
    gaps: &[super::siblings::Gap],
    threads: &[crate::plan::ThreadSpec],
) -> crate::causes::Causes {
    // The first thread pinned to a CPU stands for it (threads that share a CPU share its counts).
    let thread_of = |cpu: usize| {
        m.placement
            .threads
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.iter().any(|x| x == cpu)))
    };
    let mut causes = crate::causes::analyze(
        m.sampler.as_ref(),
        crate::causes::DEFAULT_SAMPLE_HZ,
        SPIKE_NS,
        spikes,
        &thread_of,
        crate::causes::explain::Waits::Polls,
    );
    crate::stops::name_in_causes(&mut causes, &m.stops);
    if let Some(e) = causes.explanation.as_mut() {
        let label = |t: u16| match threads.get(t as usize) {
            Some(s) => format!("{t} ({})", s.priority_text),
            None => t.to_string(),
        };
        super::siblings::explain(e, gaps, &label);
    }
    if m.kernel.is_some() {
        // With the kernel's events, every preemption gap is explained, not only the spikes.
        let all: Vec<crate::causes::CpuSpikes> = spikes
            .iter()
            .map(|l| crate::causes::CpuSpikes {
                cpu: l.cpu(),
                tid: None,
                spikes: l.all().unwrap_or_default(),
            })
            .collect();
        causes.kernel = m.attribute(&all);
        crate::causes::reconcile(&mut causes);
    }
    causes
}

/// `calibration.json`: the counter, its calibration, the gap threshold and the polling-loop
/// histogram.
fn write_calibration(m: &Measured, r: &HourglassResult) -> Result<FileEntry, StoreError> {
    let t0 = m.start_tick;
    let cal = serde_json::json!({
        "counter": r.counter,
        "calibration": r.calibration,
        "run_start_counter": t0,
        "run_start_monotonic_ns": r.calibration.to_monotonic(t0),
        "gap": r.gap,
        "loop_histogram_ticks": r.loop_histogram.as_ref().map(|h| h.buckets()),
    });
    let text = serde_json::to_vec_pretty(&cal).map_err(|source| StoreError::Encode {
        what: "calibration.json".into(),
        source,
    })?;
    m.dir.write_file(
        "calibration.json",
        &text,
        "sandglass-calibration/1",
        "counter calibration against CLOCK_MONOTONIC_RAW and CLOCK_MONOTONIC, the gap threshold and the polling-loop histogram",
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::hourglass::cmdline::{parse, Command};

    fn spec(s: &str) -> HourglassSpec {
        let words: Vec<String> = s.split_whitespace().map(String::from).collect();
        match parse(&words) {
            Ok(Command::Run(spec)) => spec,
            other => panic!("{s}: {other:?}"),
        }
    }

    const PAPER_5_3: &str = "-d 6m -n 2 -t 0 -p RTHIGH -w LAT 5.3ms -i RTC -t 1 -w CPU";

    #[test]
    fn a_usable_rtc_changes_nothing() {
        assert!(rtc_fallback(&spec(PAPER_5_3), Ok(())).unwrap().is_none());
    }

    #[test]
    fn no_thread_asking_for_the_rtc_changes_nothing() {
        let s = spec("-n 1 -t 0 -w LAT 5.3ms -i HR");
        assert!(rtc_fallback(&s, Err(RtcUnusable::Missing))
            .unwrap()
            .is_none());
    }

    #[test]
    fn threads_asking_for_a_missing_rtc_use_hr_with_a_warning() {
        let s = spec(PAPER_5_3);
        let (changed, w) = rtc_fallback(&s, Err(RtcUnusable::Missing))
            .unwrap()
            .expect("a fallback");
        assert_eq!(changed.threads[0].timer, TimerKind::Hr);
        // Thread 1 did not ask for the RTC and keeps its timer.
        assert_eq!(changed.threads[1].timer, s.threads[1].timer);
        assert_eq!(w.kind, WarningKind::TimerFallback);
        assert!(w.message.contains("no /dev/rtc"), "{}", w.message);
        assert!(
            w.message.contains("thread 0 waits with HR"),
            "{}",
            w.message
        );
        assert!(w.message.contains("--require-rtc"), "{}", w.message);
        let two = spec("-n 2 -a -w LAT 5.3ms -i RTC");
        let (_, w) = rtc_fallback(&two, Err(RtcUnusable::Missing))
            .unwrap()
            .expect("a fallback");
        assert!(
            w.message.contains("threads 0, 1 wait with HR"),
            "{}",
            w.message
        );
    }

    #[test]
    fn require_rtc_refuses_instead() {
        let s = spec(&format!("{PAPER_5_3} --require-rtc"));
        assert!(s.require_rtc);
        match rtc_fallback(&s, Err(RtcUnusable::Missing)) {
            Err(RunError::Usage(m)) => {
                assert!(m.contains("--require-rtc") && m.contains("HR"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
}
