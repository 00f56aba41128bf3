//! Running Hourglass: the shared lifecycle of [`crate::runner`] with Hourglass's result and
//! files.

use super::cmdline::HourglassSpec;
use super::result::{self, HourglassResult, RawRun};
use crate::runner::{self, Job, Measured};
use crate::store::{self, RunDir};

pub use crate::runner::{Observer, RunContext, RunError, Silent, FAULT_ENV};

/// Runs `spec` and writes its run directory.
pub fn run(
    spec: &HourglassSpec,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<HourglassResult, RunError> {
    let job = Job {
        kind: "hourglass",
        spec,
        config: serde_json::Value::Null,
        gap_stats: true,
        memmove_bytes: 0,
        loads: &spec.loads,
        sample_hz: crate::causes::DEFAULT_SAMPLE_HZ,
        trace: spec.trace,
        threshold: None,
    };
    let mut m = runner::measure(&job, ctx, obs)?;
    let reports = std::mem::take(&mut m.reports);
    let records = std::mem::take(&mut m.records);
    let mut result = result::build(RawRun {
        spec,
        placement: &m.placement,
        counter: m.counter.clone(),
        calibration: m.calibration,
        gap: m.gap.clone(),
        start_tick: m.start_tick,
        records,
        trace_capacity: m.trace_capacity,
        reports,
        state: m.state,
        end_detail: m.end_detail.clone(),
        warnings: m.warnings.clone(),
        loop_histogram: m.loop_histogram.clone(),
        run_id: m.dir.id().to_string(),
        run_dir: m.dir.path().display().to_string(),
        pm_qos_us: m.pm_qos_us,
        memory_locked: m.memory_locked,
        loads: std::mem::take(&mut m.loads),
    });
    result.causes = Some(causes(&result, &m));
    write_run(&m, &result).map_err(|e| {
        RunError::Failed(format!(
            "the run finished but its results could not be saved: {e}"
        ))
    })?;
    Ok(result)
}

/// Preemptions of at least this long are spikes for the explanation.
pub const SPIKE_NS: u64 = 100_000;

/// The explanation of the run's gaps: every interval that ended because the thread lost its
/// CPU (not because it yielded or blocked) and whose gap to the thread's next interval is at
/// least [`SPIKE_NS`] is a spike on the CPU the interval ran on.
fn causes(result: &HourglassResult, m: &Measured) -> crate::causes::Causes {
    let per_cpu = preemption_gaps(result, SPIKE_NS);
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
        &per_cpu,
        &thread_of,
    );
    if m.kernel.is_some() {
        // With the kernel's events, every preemption gap is explained, not only the spikes.
        causes.kernel = crate::causes::attribute_run(m, &preemption_gaps(result, 0));
    }
    causes
}

/// Per CPU, the gaps of at least `min_ns` after intervals that ended because the thread lost its
/// CPU, as spikes in time order.
fn preemption_gaps(
    result: &HourglassResult,
    min_ns: u64,
) -> Vec<(usize, Vec<crate::causes::trains::Spike>)> {
    use crate::causes::trains::Spike;
    use crate::engine::trace::EndReason;
    let mut per_cpu: Vec<(usize, Vec<Spike>)> = Vec::new();
    for t in 0..result.threads.len() {
        let rows: Vec<_> = result
            .rows
            .iter()
            .filter(|r| usize::from(r.interval.thread) == t)
            .map(|r| r.interval)
            .collect();
        for w in rows.windows(2) {
            let gap = w[1].start_ns.saturating_sub(w[0].end_ns);
            if w[0].reason != EndReason::Preempted || gap < min_ns.max(1) {
                continue;
            }
            let cpu = w[0].cpu as usize;
            let spike = Spike {
                at_ns: w[0].end_ns,
                size_ns: gap,
            };
            match per_cpu.iter_mut().find(|(c, _)| *c == cpu) {
                Some((_, v)) => v.push(spike),
                None => per_cpu.push((cpu, vec![spike])),
            }
        }
    }
    for (_, v) in &mut per_cpu {
        v.sort_by_key(|s| s.at_ns);
    }
    per_cpu
}

fn write_run(m: &Measured, result: &HourglassResult) -> Result<(), store::StoreError> {
    let dir: &RunDir = &m.dir;
    let t0 = m.start_tick;
    let mut files = Vec::new();
    files.push(dir.write_file(
        "trace.csv",
        result.trace_csv().as_bytes(),
        "sandglass-trace-csv/1",
        "one row per interval of continuous CPU time: thread, cpu, start_ns, end_ns (from the start of the run), raw counter values, end_reason",
    )?);
    if let Some(rec) = &m.sampler {
        files.push(crate::causes::write_sampler(dir, rec)?);
    }
    if let Some(k) = result.causes.as_ref().and_then(|c| c.kernel.as_ref()) {
        files.push(crate::causes::write_attribution(dir, k)?);
    }
    if let Some(lat) = result.latency_csv() {
        files.push(dir.write_file(
            "latency.csv",
            lat.as_bytes(),
            "sandglass-latency-csv/1",
            "one row per LAT wakeup: thread, wakeup index, lateness_ns",
        )?);
    }
    if let Some(jobs) = result.jobs_csv() {
        files.push(dir.write_file(
            "jobs.csv",
            jobs.as_bytes(),
            "sandglass-jobs-csv/1",
            "one row per PERIODIC job or CPU_PERIODIC window: release, deadline, first run, end, CPU received, hit or miss",
        )?);
    }
    let encode = |what: &str, v: &serde_json::Value| {
        serde_json::to_vec_pretty(v).map_err(|source| store::StoreError::Encode {
            what: what.to_string(),
            source,
        })
    };
    let summary = serde_json::to_value(result).map_err(|source| store::StoreError::Encode {
        what: "summary.json".into(),
        source,
    })?;
    files.push(dir.write_file(
        "summary.json",
        &encode("summary.json", &summary)?,
        "sandglass-hourglass-summary/1",
        "per-thread results, context switches, coverage, gap threshold and warnings",
    )?);
    let cal = serde_json::json!({
        "counter": result.counter,
        "calibration": result.calibration,
        "run_start_counter": t0,
        "run_start_monotonic_ns": result.calibration.to_monotonic(t0),
        "gap": result.gap,
        "loop_histogram_ticks": result.loop_histogram.as_ref().map(|h| h.buckets()),
    });
    files.push(dir.write_file(
        "calibration.json",
        &encode("calibration.json", &cal)?,
        "sandglass-calibration/1",
        "counter calibration against CLOCK_MONOTONIC_RAW and CLOCK_MONOTONIC, the gap threshold and the polling-loop histogram",
    )?);
    m.finish(files, &result.warnings)
}
