//! `sandglass timer`: timer wakeup latency on every chosen CPU.
//!
//! One measuring thread per CPU asks to wake at a release time, again and again, and records
//! how late it woke: cyclictest's measurement, the multimedia-timer callbacks of Jones & Regehr
//! (seed 004, Tables 1-3), Dannenberg's 100 Hz MIDI output (seed 002 §5) and Hourglass's LAT
//! threads (seed 003 §5.3).
//!
//! Two things differ from cyclictest. First, no release is ever skipped: when a thread wakes
//! more than one period late, every release that fell due before that wakeup is recorded with
//! its true lateness and counted as missed (cyclictest advances its grid past them and records
//! one sample, so a 50 ms stall at 1 ms shows as one late sample instead of fifty: coordinated
//! omission). The corrected figures are the default; the raw ones, one sample per wakeup, are
//! reported beside them. Second, the tail is kept: HDR histograms with three significant digits
//! from 1 ns to an hour, percentiles to p99.9999, the "samples later than" table of Hourglass's
//! Table 1, the interval histogram and statistics of Jones & Regehr, and one histogram per
//! second in HdrHistogram's interval-log format.
//!
//! Releases are on a fixed grid (`absolute`, cyclictest's mode: release k at start + k·interval)
//! or one interval after each wakeup (`resync`, Hourglass's self-synchronising LAT).

use crate::cpulist::CpuList;
use crate::duration;
use crate::engine::record::new_histogram;
use crate::engine::LatSample;
use crate::histo::{self, Bin, LogEntry, Percentiles};
use crate::hourglass::cmdline::{CounterChoice, HourglassSpec, ThreadSpec};
use crate::load::LoadReport;
use crate::model::{TimerKind, Workload};
use crate::policy::Policy;
use crate::runner::{self, Job, LoadPlan, Measured, Observer, RunContext, RunError};
use crate::store::{RunState, StoreError};
use crate::units::Nanos;
use crate::warning::{Warning, WarningKind};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The default policy of timer threads: SCHED_FIFO 95, cyclictest's usual priority.
pub const DEFAULT_POLICY: Policy = Policy::Fifo { priority: 95 };

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimerConfig {
    /// CPUs to measure; `None` means every CPU the process may use but the main thread's.
    pub cpus: Option<CpuList>,
    pub policy: Policy,
    pub interval_ns: Nanos,
    pub duration_ns: Nanos,
    pub timer: TimerKind,
    /// `false`: a fixed release grid (absolute); `true`: one interval after each wakeup.
    pub resync: bool,
    /// The "samples later than" thresholds.
    pub thresholds_ns: Vec<Nanos>,
    /// Width of the interval histogram's bins.
    pub interval_bin_ns: Nanos,
    pub main_cpu: Option<usize>,
    pub cpu_dma_latency_us: Option<u32>,
    pub output_dir: Option<PathBuf>,
    pub counter: CounterChoice,
    /// Loads to run around the measurement.
    #[serde(default)]
    pub loads: LoadPlan,
    /// Snapshots per second of the `/proc` counters that explain spikes (0: none).
    #[serde(default = "crate::causes::default_sample_hz")]
    pub sample_hz: u32,
    /// Record kernel events on the measured CPUs to attribute every spike (`--trace`).
    #[serde(default)]
    pub trace: Option<crate::causes::tracefs::TraceOptions>,
    /// Stop, or act, at the first delay above a threshold (`--stop-above`, `--on-threshold`).
    #[serde(default)]
    pub threshold: Option<crate::runner::Threshold>,
}

/// Hourglass Table 1's thresholds (1, 5, 10 and 50 ms) with finer ones suited to `interval`:
/// a hundredth, a twentieth, a tenth and a half of it.
pub fn default_thresholds(interval: Nanos) -> Vec<Nanos> {
    let mut v: Vec<u64> = vec![1_000_000, 5_000_000, 10_000_000, 50_000_000];
    for div in [100, 20, 10, 2] {
        let t = interval.0 / div;
        if t >= 1_000 {
            v.push(nice_round(t));
        }
    }
    v.sort_unstable();
    v.dedup();
    v.into_iter().map(Nanos).collect()
}

/// Rounds to one significant digit on a 1-2-5 series (12 µs → 10 µs, 48 µs → 50 µs).
fn nice_round(ns: u64) -> u64 {
    let mut best = 1u64;
    let mut b = 1u64;
    while b <= ns.saturating_mul(10) && b < u64::MAX / 10 {
        for m in [1, 2, 5] {
            let c = b * m;
            if c.abs_diff(ns) < best.abs_diff(ns) {
                best = c;
            }
        }
        b *= 10;
    }
    best
}

/// Checks a configuration that the command line cannot check by itself.
pub fn validate(c: &TimerConfig) -> Result<(), String> {
    if c.interval_ns.0 == 0 {
        return Err("-i 0: the interval must be longer than zero, for example -i 1ms".into());
    }
    if c.interval_ns.0 < 1_000 {
        return Err(format!(
            "-i {}: an interval below 1 us would keep the CPU in the kernel's timer path; use at least -i 1us",
            duration::format_exact(c.interval_ns)
        ));
    }
    if c.duration_ns < c.interval_ns {
        return Err(format!(
            "-d {}: the run must last at least one interval ({})",
            duration::format_exact(c.duration_ns),
            duration::format_exact(c.interval_ns)
        ));
    }
    if c.policy.is_deadline() {
        return Err("-P d:...: SCHED_DEADLINE threads cannot be pinned to one CPU; measure reservations with sandglass hourglass -rh".into());
    }
    if c.timer == TimerKind::Rtc {
        return Err("--timer rtc is available in sandglass hourglass only (-i RTC); use hr".into());
    }
    if c.interval_bin_ns.0 == 0 {
        return Err("--interval-bin must be longer than zero".into());
    }
    Ok(())
}

/// The CPUs to measure: the configured ones, or every allowed CPU but the main thread's (or all
/// of them on a one-CPU machine).
pub fn measured_cpus(c: &TimerConfig, allowed: &[usize]) -> Result<Vec<usize>, String> {
    if let Some(list) = &c.cpus {
        for cpu in list.iter() {
            if !allowed.contains(&cpu) {
                return Err(format!(
                    "-c {list}: CPU {cpu} does not exist or this process may not use it (allowed: {})",
                    CpuList::from_cpus(allowed.iter().copied())
                        .map(|l| l.to_string())
                        .unwrap_or_default()
                ));
            }
        }
        return Ok(list.to_vec());
    }
    let main = c
        .main_cpu
        .or_else(|| allowed.iter().copied().min())
        .unwrap_or(0);
    let others: Vec<usize> = allowed.iter().copied().filter(|&x| x != main).collect();
    Ok(if others.is_empty() {
        allowed.to_vec()
    } else {
        others
    })
}

/// The set of measuring threads for `c`: one timer thread pinned to each CPU.
pub fn spec(c: &TimerConfig, cpus: &[usize]) -> HourglassSpec {
    let threads = cpus
        .iter()
        .enumerate()
        .map(|(index, &cpu)| ThreadSpec {
            index,
            priority_text: c.policy.to_string(),
            policy: c.policy,
            reservation: None,
            workload: Workload::Timer {
                period_ns: c.interval_ns,
                resync: c.resync,
            },
            timer: c.timer,
            start_ns: Nanos::ZERO,
            finish_ns: c.duration_ns,
            affinity: CpuList::from_cpus([cpu]),
        })
        .collect();
    HourglassSpec {
        threads,
        duration_ns: c.duration_ns,
        raw_cycles: false,
        records: 1,
        gap_ns: None,
        gap_histogram: false,
        suppress_trace: true,
        output_dir: c.output_dir.clone(),
        main_cpu: c.main_cpu,
        allow_rt_busy: false,
        counter: c.counter,
        cpu_dma_latency_us: c.cpu_dma_latency_us,
        loads: c.loads.clone(),
        trace: None,
    }
}

/// One "samples later than" row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaterThan {
    pub threshold_ns: u64,
    /// Releases later than the threshold (corrected).
    pub count: u64,
    /// Wakeups later than the threshold (raw, one per wakeup).
    pub raw_count: u64,
}

/// Interval statistics (Jones & Regehr's table: min, max, average, standard deviation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntervalStats {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub stddev: f64,
    pub max: u64,
}

/// The interval histogram.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntervalHistogram {
    pub bin_ns: u64,
    pub bins: Vec<Bin>,
}

/// One second of one CPU's timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Second {
    pub second: u64,
    pub releases: u64,
    pub missed: u64,
    pub min_ns: i64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: i64,
}

/// What one CPU measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TimerCpu {
    pub cpu: usize,
    pub thread: usize,
    pub tid: i32,
    /// The policy the kernel applied (read back).
    pub policy: Option<String>,
    pub downgraded: Option<String>,
    /// Releases recorded: wakeups plus missed releases.
    pub count: u64,
    pub wakeups: u64,
    pub missed_releases: u64,
    /// Lateness of every release (corrected).
    pub lateness_ns: Option<Percentiles>,
    /// Lateness of the release each wakeup waited for (raw, what cyclictest reports).
    pub raw_lateness_ns: Option<Percentiles>,
    pub interval_ns: Option<IntervalStats>,
    pub interval_histogram: IntervalHistogram,
    pub later_than: Vec<LaterThan>,
    /// Releases whose wakeup the counter placed before them (calibration noise).
    pub early: u64,
    pub cpu_time_ns: Option<u64>,
    pub cpu_time_per_wakeup_ns: Option<f64>,
    /// Samples that did not fit the buffer sized for the run (histograms still hold them).
    pub samples_dropped: u64,
    pub stopped: bool,
    pub error: Option<String>,
    #[serde(skip)]
    pub samples: Vec<(i64, i64, bool)>,
    #[serde(skip)]
    pub histograms: Option<[Histogram<u64>; 3]>,
    #[serde(skip)]
    pub timeline: Vec<Second>,
}

/// The version of the `--json` output (and `summary.json`) described by
/// `docs/schema/timer.schema.json`.
pub const JSON_SCHEMA: &str = "sandglass-timer/1";

/// The whole result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TimerResult {
    /// [`JSON_SCHEMA`]; empty in summaries written before the field existed.
    #[serde(default)]
    pub schema: String,
    pub kind: String,
    pub run_id: String,
    pub run_dir: String,
    pub state: RunState,
    pub end_detail: String,
    pub interval_ns: Nanos,
    pub duration_ns: Nanos,
    pub elapsed_ns: u64,
    pub timer: TimerKind,
    pub mode: String,
    pub cpus: Vec<TimerCpu>,
    pub pm_qos_us: Option<u32>,
    pub memory_locked: bool,
    pub counter_frequency_hz: f64,
    pub warnings: Vec<Warning>,
    /// What each load achieved during the measurement.
    #[serde(default)]
    pub loads: Vec<LoadReport>,
    /// The spikes' explanation by the sampler and their periodic trains.
    #[serde(default)]
    pub causes: Option<crate::causes::Causes>,
}

/// A timer run's spikes: releases at least `max(100 µs, 10 × the largest per-CPU median
/// lateness)` late, a stall that delayed several releases counted once; with the threshold.
pub fn spikes(cpus: &[TimerCpu]) -> (u64, Vec<(usize, Vec<crate::causes::trains::Spike>)>) {
    let median = |c: &TimerCpu| {
        let mut v: Vec<i64> = c.samples.iter().map(|s| s.1).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0).max(0) as u64
    };
    let threshold = cpus
        .iter()
        .map(median)
        .max()
        .unwrap_or(0)
        .saturating_mul(10)
        .max(100_000);
    let per_cpu = cpus
        .iter()
        .map(|c| {
            let s = crate::causes::spikes_of(c.samples.iter().map(|s| (s.0, s.1)), threshold);
            (c.cpu, s)
        })
        .collect();
    (threshold, per_cpu)
}

/// The per-second timeline of samples `(release_ns, lateness_ns, missed)`.
pub fn timeline(samples: &[(i64, i64, bool)]) -> Vec<Second> {
    let mut out: Vec<Second> = Vec::new();
    let mut i = 0;
    while i < samples.len() {
        let sec = (samples[i].0.max(0) / 1_000_000_000) as u64;
        let mut j = i;
        while j < samples.len() && (samples[j].0.max(0) / 1_000_000_000) as u64 == sec {
            j += 1;
        }
        let mut lat: Vec<i64> = samples[i..j].iter().map(|s| s.1).collect();
        lat.sort_unstable();
        let q = |p| crate::stats::quantile_sorted(&lat, p).unwrap_or(0).max(0) as u64;
        out.push(Second {
            second: sec,
            releases: (j - i) as u64,
            missed: samples[i..j].iter().filter(|s| s.2).count() as u64,
            min_ns: lat[0],
            p50_ns: q(0.5),
            p99_ns: q(0.99),
            max_ns: lat[lat.len() - 1],
        });
        i = j;
    }
    out
}

/// Per-second histograms of the samples, for the interval log.
pub fn per_second_histograms(samples: &[(i64, i64, bool)]) -> Vec<(u64, Histogram<u64>)> {
    let mut out: Vec<(u64, Histogram<u64>)> = Vec::new();
    for &(release, late, _) in samples {
        let sec = (release.max(0) / 1_000_000_000) as u64;
        if out.last().map(|(s, _)| *s) != Some(sec) {
            out.push((sec, new_histogram()));
        }
        if let Some((_, h)) = out.last_mut() {
            h.saturating_record(late.max(0) as u64);
        }
    }
    out
}

/// Converts raw samples to `(release_ns, lateness_ns, missed)` from the run's start.
fn convert(samples: &[LatSample], m: &Measured) -> Vec<(i64, i64, bool)> {
    let cal = &m.calibration;
    let mut prev_wake = None;
    samples
        .iter()
        .map(|s| {
            let missed = prev_wake == Some(s.wakeup);
            prev_wake = Some(s.wakeup);
            (
                cal.ns_between(m.start_tick, s.target),
                cal.ns_between(s.target, s.wakeup),
                missed,
            )
        })
        .collect()
}

/// Runs the timer measurement and writes its run directory.
pub fn run(
    config: &TimerConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<TimerResult, RunError> {
    validate(config).map_err(RunError::Usage)?;
    let allowed = crate::system::allowed_cpus();
    let cpus = measured_cpus(config, &allowed).map_err(RunError::Usage)?;
    let spec = spec(config, &cpus);
    let job = Job {
        kind: "timer",
        spec: &spec,
        config: serde_json::to_value(config).unwrap_or_default(),
        gap_stats: false,
        memmove_bytes: 0,
        loads: &config.loads,
        sample_hz: config.sample_hz,
        trace: config.trace,
        threshold: config.threshold.clone(),
    };
    let mut m = runner::measure(&job, ctx, obs)?;
    let result = build(config, &cpus, &mut m);
    write(&m, &result).map_err(|e| {
        RunError::Failed(format!(
            "the run finished but its results could not be saved: {e}"
        ))
    })?;
    Ok(result)
}

/// Turns what the threads measured into the result.
pub fn build(config: &TimerConfig, cpus: &[usize], m: &mut Measured) -> TimerResult {
    let mut warnings = m.warnings.clone();
    let reports = std::mem::take(&mut m.reports);
    let mut out = Vec::with_capacity(reports.len());
    let mut elapsed = 0u64;
    for (i, rep) in reports.into_iter().enumerate() {
        let cpu = cpus.get(i).copied().unwrap_or(0);
        let applied = rep.applied.as_ref();
        let mut tc = TimerCpu {
            cpu,
            thread: i,
            tid: rep.tid,
            policy: applied.and_then(|a| a.effective).map(|p| p.to_string()),
            downgraded: applied.and_then(|a| a.downgraded.clone()),
            count: 0,
            wakeups: 0,
            missed_releases: 0,
            lateness_ns: None,
            raw_lateness_ns: None,
            interval_ns: None,
            interval_histogram: IntervalHistogram {
                bin_ns: config.interval_bin_ns.0,
                bins: Vec::new(),
            },
            later_than: Vec::new(),
            early: 0,
            cpu_time_ns: rep.cpu_time_ns,
            cpu_time_per_wakeup_ns: None,
            samples_dropped: 0,
            stopped: false,
            error: rep.error.clone(),
            samples: Vec::new(),
            histograms: None,
            timeline: Vec::new(),
        };
        if let Some(mut o) = rep.outcome {
            tc.stopped = o.stopped;
            tc.samples_dropped = o.latencies_dropped;
            if o.last > m.start_tick {
                elapsed = elapsed.max(m.calibration.ns_between(m.start_tick, o.last).max(0) as u64);
            }
            tc.samples = convert(&o.latencies, m);
            tc.timeline = timeline(&tc.samples);
            if let Some(t) = o.timer.take() {
                tc.count = t.releases;
                tc.wakeups = t.wakeups;
                tc.missed_releases = t.missed;
                tc.early = t.early;
                let (min, max) = if t.releases > 0 {
                    (Some(t.min_lateness_ns), Some(t.max_lateness_ns))
                } else {
                    (None, None)
                };
                tc.lateness_ns = histo::percentiles(&t.lateness, min, max);
                tc.raw_lateness_ns = histo::percentiles(&t.raw, None, None);
                if !t.interval.is_empty() {
                    tc.interval_ns = Some(IntervalStats {
                        count: t.interval.len(),
                        min: t.interval.min(),
                        mean: t.interval.mean(),
                        stddev: t.interval.stdev(),
                        max: t.interval.max(),
                    });
                }
                tc.interval_histogram.bins =
                    histo::linear_bins(&t.interval, config.interval_bin_ns.0);
                tc.later_than = config
                    .thresholds_ns
                    .iter()
                    .map(|th| LaterThan {
                        threshold_ns: th.0,
                        count: histo::count_above(&t.lateness, th.0),
                        raw_count: histo::count_above(&t.raw, th.0),
                    })
                    .collect();
                if t.wakeups > 0 {
                    tc.cpu_time_per_wakeup_ns =
                        rep.cpu_time_ns.map(|c| c as f64 / t.wakeups as f64);
                }
                tc.histograms = Some([t.lateness, t.raw, t.interval]);
            }
            if tc.samples_dropped > 0 {
                warnings.push(Warning::new(
                    WarningKind::RecordsDropped,
                    format!("CPU {cpu}: {} samples did not fit the buffer sized for the run; the histograms hold them, the per-second timeline and samples.csv do not", tc.samples_dropped),
                ));
            }
        } else {
            warnings.push(Warning::new(
                WarningKind::ThreadDidNotStop,
                format!("CPU {cpu}: the measuring thread did not stop; its figures are lost"),
            ));
        }
        out.push(tc);
    }
    let min_count = out.iter().map(|c| c.count).min().unwrap_or(0);
    if min_count > 0 && min_count < 1_000_000 && m.state == RunState::Completed {
        let top = Percentiles::supported(min_count)
            .last()
            .copied()
            .unwrap_or("p50");
        warnings.push(Warning::new(
            WarningKind::RunTooShort,
            format!(
                "{min_count} releases per CPU support percentiles up to {top}; the higher ones are the maximum in disguise. For p99.9999 run at least 1,000,000 releases (-d {} at this interval)",
                duration::format_human(Nanos(config.interval_ns.0.saturating_mul(1_000_000)))
            ),
        ));
    }
    let (threshold, per_cpu) = spikes(&out);
    let thread_of = |cpu: usize| out.iter().position(|c| c.cpu == cpu);
    let mut causes = crate::causes::analyze(
        m.sampler.as_ref(),
        config.sample_hz,
        threshold,
        &per_cpu,
        &thread_of,
    );
    causes.kernel = crate::causes::attribute_run(m, &per_cpu);
    warnings.extend(
        causes
            .kernel
            .as_ref()
            .and_then(crate::causes::kernel_warning),
    );
    TimerResult {
        schema: JSON_SCHEMA.to_string(),
        kind: "timer".to_string(),
        run_id: m.dir.id().to_string(),
        run_dir: m.dir.path().display().to_string(),
        state: m.state,
        end_detail: m.end_detail.clone(),
        interval_ns: config.interval_ns,
        duration_ns: config.duration_ns,
        elapsed_ns: elapsed,
        timer: config.timer,
        mode: if config.resync { "resync" } else { "absolute" }.to_string(),
        cpus: out,
        pm_qos_us: m.pm_qos_us,
        memory_locked: m.memory_locked,
        loads: std::mem::take(&mut m.loads),
        counter_frequency_hz: m.calibration.frequency_hz,
        warnings,
        causes: Some(causes),
    }
}

fn write(m: &Measured, r: &TimerResult) -> Result<(), StoreError> {
    let dir = &m.dir;
    let encode = |what: &str, v: &serde_json::Value| {
        serde_json::to_vec_pretty(v).map_err(|source| StoreError::Encode {
            what: what.to_string(),
            source,
        })
    };
    let mut files = Vec::new();
    let summary = serde_json::to_value(r).map_err(|source| StoreError::Encode {
        what: "summary.json".into(),
        source,
    })?;
    files.push(dir.write_file(
        "summary.json",
        &encode("summary.json", &summary)?,
        "sandglass-timer-summary/1",
        "per-CPU lateness (corrected and raw), missed releases, intervals, samples-later-than table, CPU time",
    )?);
    let mut samples = String::from("cpu,release,release_ns,lateness_ns,missed\n");
    let mut timeline = String::from("cpu,second,releases,missed,min_ns,p50_ns,p99_ns,max_ns\n");
    let mut entries_hist: Vec<(String, f64, f64, Histogram<u64>)> = Vec::new();
    for c in &r.cpus {
        for (k, (rel, late, missed)) in c.samples.iter().enumerate() {
            let _ = writeln!(samples, "{},{k},{rel},{late},{}", c.cpu, u8::from(*missed));
        }
        for s in &c.timeline {
            let _ = writeln!(
                timeline,
                "{},{},{},{},{},{},{},{}",
                c.cpu, s.second, s.releases, s.missed, s.min_ns, s.p50_ns, s.p99_ns, s.max_ns
            );
        }
        for (sec, h) in per_second_histograms(&c.samples) {
            entries_hist.push((format!("cpu{}", c.cpu), sec as f64, 1.0, h));
        }
    }
    files.push(dir.write_file(
        "samples.csv",
        samples.as_bytes(),
        "sandglass-timer-samples-csv/1",
        "every release: cpu, index, release time and lateness in ns from the run's start, 1 when it was missed",
    )?);
    files.push(dir.write_file(
        "timeline.csv",
        timeline.as_bytes(),
        "sandglass-timer-timeline-csv/1",
        "per CPU and second: releases, missed releases, lateness min, p50, p99, max",
    )?);
    if let Some(rec) = &m.sampler {
        files.push(crate::causes::write_sampler(dir, rec)?);
    }
    if let Some(k) = r.causes.as_ref().and_then(|c| c.kernel.as_ref()) {
        files.push(crate::causes::write_attribution(dir, k)?);
    }
    let mut totals: Vec<(String, &Histogram<u64>)> = Vec::new();
    for c in &r.cpus {
        if let Some([lat, raw, interval]) = &c.histograms {
            totals.push((format!("cpu{}-lateness", c.cpu), lat));
            totals.push((format!("cpu{}-raw", c.cpu), raw));
            totals.push((format!("cpu{}-interval", c.cpu), interval));
        }
    }
    let elapsed_s = r.elapsed_ns as f64 / 1e9;
    let mut entries: Vec<LogEntry<'_>> = entries_hist
        .iter()
        .map(|(tag, start, dur, h)| LogEntry {
            tag: tag.clone(),
            start_s: *start,
            duration_s: *dur,
            histogram: h,
        })
        .collect();
    for (tag, h) in &totals {
        entries.push(LogEntry {
            tag: tag.clone(),
            start_s: 0.0,
            duration_s: elapsed_s,
            histogram: h,
        });
    }
    let comments = vec![
        "sandglass timer: lateness in nanoseconds".to_string(),
        "tags cpuN: one interval histogram per second of release time (corrected lateness)"
            .to_string(),
        "tags cpuN-lateness, cpuN-raw, cpuN-interval: whole-run histograms recorded during the run"
            .to_string(),
    ];
    let log =
        histo::write_interval_log(&comments, &entries).map_err(|source| StoreError::Write {
            path: dir.path().join("histograms.hlog"),
            source,
        })?;
    files.push(dir.write_file(
        "histograms.hlog",
        &log,
        "hdrhistogram-interval-log/1.3",
        "HdrHistogram interval log (V2 compressed, values in ns): per-second lateness histograms per CPU and whole-run lateness, raw lateness and interval histograms",
    )?);
    m.finish(files, &r.warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> TimerConfig {
        TimerConfig {
            cpus: None,
            policy: DEFAULT_POLICY,
            interval_ns: Nanos::from_millis(1),
            duration_ns: Nanos::from_secs(5),
            timer: TimerKind::Hr,
            resync: false,
            thresholds_ns: default_thresholds(Nanos::from_millis(1)),
            interval_bin_ns: Nanos::from_micros(100),
            main_cpu: None,
            cpu_dma_latency_us: Some(0),
            output_dir: None,
            counter: CounterChoice::Auto,
            loads: LoadPlan::default(),
            sample_hz: 0,
            trace: None,
            threshold: None,
        }
    }

    #[test]
    fn default_thresholds_follow_hourglass_table_1() {
        let t: Vec<u64> = default_thresholds(Nanos::from_millis(1))
            .iter()
            .map(|n| n.0)
            .collect();
        assert_eq!(
            t,
            vec![10_000, 50_000, 100_000, 500_000, 1_000_000, 5_000_000, 10_000_000, 50_000_000]
        );
        let t: Vec<u64> = default_thresholds(Nanos::from_millis(10))
            .iter()
            .map(|n| n.0)
            .collect();
        assert_eq!(
            t,
            vec![100_000, 500_000, 1_000_000, 5_000_000, 10_000_000, 50_000_000]
        );
        assert_eq!(nice_round(12_000), 10_000);
        assert_eq!(nice_round(48_000), 50_000);
    }

    #[test]
    fn default_cpus_leave_the_main_cpu_free() {
        let c = config();
        assert_eq!(measured_cpus(&c, &[0, 1, 2, 3]), Ok(vec![1, 2, 3]));
        assert_eq!(measured_cpus(&c, &[0]), Ok(vec![0]));
        let mut c = config();
        c.main_cpu = Some(2);
        assert_eq!(measured_cpus(&c, &[0, 1, 2, 3]), Ok(vec![0, 1, 3]));
        c.cpus = CpuList::parse("99").ok();
        let e = measured_cpus(&c, &[0, 1]).expect_err("cpu 99");
        assert!(e.contains("CPU 99 does not exist"), "{e}");
    }

    #[test]
    fn validation_names_the_option() {
        let mut c = config();
        c.interval_ns = Nanos(0);
        assert!(validate(&c).expect_err("-i 0").starts_with("-i 0"));
        let mut c = config();
        c.duration_ns = Nanos(10);
        assert!(validate(&c).expect_err("short").starts_with("-d"));
        let mut c = config();
        c.policy = Policy::parse("d:1ms:10ms").expect("policy");
        assert!(validate(&c).expect_err("dl").contains("hourglass -rh"));
        assert!(validate(&config()).is_ok());
    }

    #[test]
    fn one_pinned_timer_thread_per_cpu() {
        let s = spec(&config(), &[1, 3]);
        assert_eq!(s.threads.len(), 2);
        assert_eq!(
            s.threads[1].affinity.as_ref().map(|c| c.to_vec()),
            Some(vec![3])
        );
        assert!(matches!(
            s.threads[0].workload,
            Workload::Timer { resync: false, .. }
        ));
        assert_eq!(s.threads[0].policy, DEFAULT_POLICY);
    }

    #[test]
    fn timeline_groups_by_release_second() {
        let samples = vec![
            (0, 10, false),
            (999_999_999, 30, false),
            (1_000_000_000, 50_000_000, false),
            (1_001_000_000, 49_000_000, true),
            (2_500_000_000, -2, false),
        ];
        let t = timeline(&samples);
        assert_eq!(t.len(), 3);
        assert_eq!((t[0].second, t[0].releases, t[0].max_ns), (0, 2, 30));
        assert_eq!(
            (t[1].releases, t[1].missed, t[1].min_ns),
            (2, 1, 49_000_000)
        );
        assert_eq!((t[2].second, t[2].min_ns), (2, -2));
        let h = per_second_histograms(&samples);
        assert_eq!(
            h.iter().map(|(s, h)| (*s, h.len())).collect::<Vec<_>>(),
            vec![(0, 2), (1, 2), (2, 1)]
        );
    }
}
