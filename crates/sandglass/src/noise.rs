//! `sandglass noise`: OS noise on every chosen CPU.
//!
//! One polling thread per CPU runs Hourglass's gap detector (the CPU model, seed 003 §3.1) and
//! records every interruption: when it began, how long it lasted and on which CPU. This is what
//! oslat, sysjitter and rtla osnoise measure, with two differences: every interruption is kept
//! in order (oslat keeps only a histogram; sysjitter keeps a list but no histogram), and the
//! totals (noise time, count, longest, the HDR histogram of durations) are recorded as the loop
//! runs, so they stay exact even if the main thread falls behind and a ring drops interruptions.
//!
//! Per CPU: the share of the runtime lost to noise, interruptions per second, the longest one,
//! percentiles and a histogram of durations, and a per-second timeline. An optional workload
//! between polls (oslat's memmove) models a polling application that touches memory.

use crate::causes::spikes::SpikeLog;
use crate::clock::CounterChoice;
use crate::cpulist::CpuList;
use crate::engine::Record;
#[cfg(feature = "linux")]
use crate::histo;
use crate::histo::{Bin, Percentiles};
use crate::kind::{fig, KeyFigure, OverCpus, Unit, LOAD};
use crate::model::{TimerKind, Workload};
use crate::plan::{LoadPlan, RunPlan, Threshold};
use crate::policy::Policy;
use crate::probe::{array, num, Figures, Probe};
use crate::result::{self, RunHeader};
use crate::runner::streams::Streams;
#[cfg(feature = "linux")]
use crate::runner::{self, Measured, Observer, RunContext, RunError};
use crate::runner::{Sink, SinkSetup, SpikeAt, Timebase};
use crate::store::table::tables;
use crate::store::{FileEntry, StoreError};
use crate::timer::ConfigError;
use crate::units::Nanos;
#[cfg(feature = "linux")]
use crate::warning::{Warning, WarningKind};
use crate::RunKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NoiseConfig {
    /// CPUs to measure; `None` means every CPU the process may use but the main thread's.
    pub cpus: Option<CpuList>,
    pub policy: Policy,
    pub duration_ns: Nanos,
    /// The gap threshold; `None` calibrates it as Hourglass does.
    pub threshold_ns: Option<Nanos>,
    /// Bytes copied between polls (oslat's memmove workload), 0 for none.
    pub memmove_bytes: usize,
    /// Interruptions in flight to the main thread, shared among the CPUs' rings; `None` sizes
    /// it from the run.
    pub records: Option<usize>,
    pub main_cpu: Option<usize>,
    pub allow_rt_busy: bool,
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
    pub trace: Option<crate::causes::kernel_trace::TraceOptions>,
    /// Stop, or act, at the first delay above a threshold (`--stop-above`, `--on-threshold`).
    #[serde(default)]
    pub threshold: Option<Threshold>,
}

/// A noise configuration or workload that cannot run, named by its option with the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoiseError {
    #[error("--workload {0}: use memmove:SIZE, for example memmove:4K or memmove:1M (or none)")]
    Workload(String),
    #[error("--workload {0}: the size must be from 1 byte to 1G")]
    WorkloadSize(String),
    #[error("-d must be longer than zero")]
    ZeroDuration,
    #[error("-P d:...: SCHED_DEADLINE threads cannot be pinned to one CPU")]
    Deadline,
    #[error("-T must be longer than zero")]
    ZeroThreshold,
    #[error(transparent)]
    Cpus(#[from] ConfigError),
}

/// Parses `memmove:SIZE` (SIZE in bytes, or with K, M suffixes as oslat's `-m`).
pub fn parse_workload(text: &str) -> Result<usize, NoiseError> {
    let err = || NoiseError::Workload(text.to_string());
    if text == "none" {
        return Ok(0);
    }
    let size = text.strip_prefix("memmove:").ok_or_else(err)?;
    let (digits, mult) = match size.chars().last() {
        Some('K' | 'k') => (&size[..size.len() - 1], 1024),
        Some('M' | 'm') => (&size[..size.len() - 1], 1024 * 1024),
        Some('G' | 'g') => (&size[..size.len() - 1], 1024 * 1024 * 1024),
        _ => (size, 1),
    };
    let n: usize = digits.parse().map_err(|_| err())?;
    let bytes = n.checked_mul(mult).ok_or_else(err)?;
    if bytes == 0 || bytes > 1 << 30 {
        return Err(NoiseError::WorkloadSize(text.to_string()));
    }
    Ok(bytes)
}

/// Checks a configuration that the command line cannot check by itself.
pub fn validate(c: &NoiseConfig) -> Result<(), NoiseError> {
    if c.duration_ns.0 == 0 {
        return Err(NoiseError::ZeroDuration);
    }
    if c.policy.is_deadline() {
        return Err(NoiseError::Deadline);
    }
    if c.threshold_ns.is_some_and(|t| t.0 == 0) {
        return Err(NoiseError::ZeroThreshold);
    }
    Ok(())
}

/// Records the polling threads' rings hold together unless told otherwise: two seconds of
/// 5 000 interruptions per second per CPU, at least 100 000.
fn default_records(cpus: usize) -> usize {
    (10_000 * cpus).max(100_000)
}

/// The run plan of `c`: one CPU-bound polling thread pinned to each CPU of `cpus`.
pub fn plan(c: &NoiseConfig, cpus: &[usize]) -> RunPlan {
    RunPlan {
        kind: NoiseProbe::KIND,
        threads: crate::timer::pinned_threads(
            cpus,
            c.policy,
            Workload::Cpu,
            TimerKind::Hr,
            c.duration_ns,
        ),
        duration_ns: c.duration_ns,
        gap_ns: c.threshold_ns,
        gap_histogram: false,
        gap_stats: true,
        memmove_bytes: c.memmove_bytes,
        ring_records: c.records.unwrap_or_else(|| default_records(cpus.len())),
        counter: c.counter,
        main_cpu: c.main_cpu,
        allow_rt_busy: c.allow_rt_busy,
        cpu_dma_latency_us: c.cpu_dma_latency_us,
        loads: c.loads.clone(),
        sample_hz: c.sample_hz,
        trace: c.trace,
        threshold: c.threshold.clone(),
        output_dir: c.output_dir.clone(),
        config: serde_json::to_value(c).unwrap_or_default(),
    }
}

/// What one CPU measured.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NoiseCpu {
    pub cpu: usize,
    pub thread: usize,
    pub tid: i32,
    pub policy: Option<String>,
    pub downgraded: Option<String>,
    /// From the thread's first to its last read.
    pub runtime_ns: u64,
    /// Runtime not spent in the polling loop.
    pub noise_ns: u64,
    pub noise_share: f64,
    pub interruptions: u64,
    pub interruptions_per_s: f64,
    pub max_ns: u64,
    pub percentiles_ns: Option<Percentiles>,
    /// Interruption durations on a 1-2-5 series.
    pub histogram: Vec<Bin>,
    /// Interruptions written to the store (`interruptions-*.parquet`).
    #[serde(default)]
    pub stored: u64,
    /// Interruptions the store missed because the main thread fell behind; the totals include
    /// them.
    pub list_dropped: u64,
    pub loop_iterations: u64,
    pub mean_iteration_ns: Option<f64>,
    pub stopped: bool,
    /// Noise while the process itself was stopped (Ctrl-Z, SIGSTOP, a debugger: the run's
    /// `stops`), in ns: part of `noise_ns`, not the machine's.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub process_stopped_ns: u64,
    pub error: Option<String>,
    /// The whole-run histogram of interruption durations.
    #[serde(skip)]
    pub hist: Option<hdrhistogram::Histogram<u64>>,
}

/// The version of the `--json` output (and `summary.json`) described by
/// `docs/schema/noise.schema.json`.
pub const JSON_SCHEMA: &str = "sandglass-noise/2";

/// The whole result.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NoiseResult {
    #[serde(flatten)]
    pub run: RunHeader,
    pub threshold_ns: u64,
    pub threshold_source: String,
    pub threshold_explanation: String,
    pub memmove_bytes: usize,
    pub cpus: Vec<NoiseCpu>,
}

/// Interruptions of at least this long are spikes for the explanation.
pub const SPIKE_NS: u64 = 20_000;

/// One CPU's second under way.
#[derive(Clone, Copy, Default)]
struct Second {
    second: u64,
    interruptions: u64,
    noise_ns: u64,
    max_ns: u64,
}

/// Where a noise run's interruptions go as the run goes: every interruption (the gap between
/// two consecutive records of a polling thread) into `interruptions-*.parquet`, one row per CPU
/// and second into `timeline-*.parquet`, one histogram per CPU and second into
/// `histograms.hlog`, and the spikes into a bounded log per CPU.
pub struct NoiseSink {
    cpus: Vec<usize>,
    streams: Streams,
    /// Per thread: the end of its last record (counter value).
    last_end: Vec<Option<u64>>,
    seconds: Vec<Option<Second>>,
    /// Per thread: the histogram of the second under way.
    hists: Vec<hdrhistogram::Histogram<u64>>,
    /// Per thread: every interruption stored.
    stored: Vec<hdrhistogram::Histogram<u64>>,
    rows: Vec<u64>,
}

impl NoiseSink {
    pub fn create(s: &SinkSetup<'_>, cpus: &[usize]) -> Result<NoiseSink, StoreError> {
        let comments = vec![
            "sandglass noise: interruption durations in nanoseconds".to_string(),
            "tags cpuN: one histogram per CPU and second of interruption start".to_string(),
        ];
        Ok(NoiseSink {
            cpus: cpus.to_vec(),
            streams: Streams::create(
                s,
                cpus,
                &tables::NOISE_INTERRUPTIONS,
                &tables::NOISE_TIMELINE,
                &comments,
                SPIKE_NS,
            )?,
            last_end: vec![None; cpus.len()],
            seconds: vec![None; cpus.len()],
            hists: cpus
                .iter()
                .map(|_| crate::engine::record::new_histogram())
                .collect(),
            stored: cpus
                .iter()
                .map(|_| crate::engine::record::new_histogram())
                .collect(),
            rows: vec![0; cpus.len()],
        })
    }

    fn close_second(&mut self, i: usize, now_ns: u64) -> Result<(), StoreError> {
        let Some(s) = self.seconds[i].take() else {
            return Ok(());
        };
        let b = self.streams.timeline.row();
        b.push_i32(0, self.cpus[i] as i32);
        b.push_i64(1, s.second as i64);
        b.push_i64(2, s.interruptions as i64);
        b.push_i64(3, s.noise_ns as i64);
        b.push_i64(4, s.max_ns as i64);
        self.streams.timeline.end_row(now_ns)?;
        let tag = format!("cpu{}", self.cpus[i]);
        self.streams
            .hlog
            .write(&tag, s.second as f64, 1.0, &self.hists[i])?;
        self.hists[i].reset();
        Ok(())
    }

    /// One interruption of thread `i`.
    fn interruption(
        &mut self,
        i: usize,
        start_ns: i64,
        duration_ns: u64,
    ) -> Result<(), StoreError> {
        let now = start_ns.max(0) as u64;
        let b = self.streams.table.row();
        b.push_i32(0, self.cpus[i] as i32);
        b.push_i64(1, start_ns);
        b.push_i64(2, duration_ns as i64);
        self.streams.table.end_row(now)?;
        self.rows[i] += 1;
        let second = now / 1_000_000_000;
        if self.seconds[i].is_some_and(|s| s.second != second) {
            self.close_second(i, now)?;
        }
        let s = self.seconds[i].get_or_insert(Second {
            second,
            ..Second::default()
        });
        s.interruptions += 1;
        s.noise_ns += duration_ns;
        s.max_ns = s.max_ns.max(duration_ns);
        self.hists[i].saturating_record(duration_ns);
        self.stored[i].saturating_record(duration_ns);
        self.streams.spikes[i].sample(start_ns, duration_ns as i64, SPIKE_NS);
        Ok(())
    }

    /// Closes every second, the tables and the log; returns the files, the spikes, the rows
    /// stored per CPU and their histograms.
    #[allow(clippy::type_complexity)]
    pub fn finish(
        mut self,
        now_ns: u64,
    ) -> (
        Result<Vec<FileEntry>, StoreError>,
        Vec<SpikeLog>,
        Vec<u64>,
        Vec<hdrhistogram::Histogram<u64>>,
    ) {
        let spikes = self.streams.take_spike_logs();
        let rows = self.rows.clone();
        let stored = std::mem::take(&mut self.stored);
        let seconds = (0..self.seconds.len()).try_for_each(|i| self.close_second(i, now_ns));
        let closed = seconds.and_then(|()| self.streams.finish(now_ns));
        (closed, spikes, rows, stored)
    }
}

impl Sink for NoiseSink {
    fn records(&mut self, i: usize, batch: &[Record], tb: &Timebase) -> Result<(), StoreError> {
        for r in batch {
            if let Some(prev) = self.last_end[i] {
                let d = tb.duration_ns(r.start.saturating_sub(prev));
                self.interruption(i, tb.at_ns(prev), d)?;
            }
            self.last_end[i] = Some(r.end);
        }
        Ok(())
    }

    fn tick(&mut self, now_ns: u64, _watermark: u64, _tb: &Timebase) -> Result<(), StoreError> {
        self.streams.tick(now_ns)
    }

    fn spikes(&mut self, out: &mut Vec<SpikeAt>) {
        self.streams.take_fresh_spikes(out);
    }
}

/// Runs the noise measurement and writes its run directory.
#[cfg(feature = "linux")]
pub fn run(
    config: &NoiseConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<NoiseResult, RunError> {
    validate(config).map_err(|e| RunError::Usage(e.to_string()))?;
    let allowed = crate::system::allowed_cpus();
    let cpus = crate::timer::measured_cpus(config.cpus.as_ref(), config.main_cpu, &allowed)
        .map_err(|e| RunError::Usage(e.to_string()))?;
    let plan = plan(config, &cpus);
    let (mut m, sink) = runner::measure(&plan, ctx, obs, |s| NoiseSink::create(s, &cpus))?;
    let (closed, spikes, rows, stored) = sink.finish(m.elapsed_ns());
    let files = result::close_store(&mut m, closed);
    let mut result = build(config, &cpus, &mut m, &spikes, &rows);
    result::conclude(
        &mut m,
        files,
        &mut result,
        |dir, files, r: &mut NoiseResult| exact_percentiles(dir, files, &stored, &mut r.cpus),
        write_totals,
        &result::Ending {
            stored: "interruptions",
            summary_format: "sandglass-noise-summary/2",
            summary_description: "per-CPU noise share, interruptions per second, longest interruption, percentiles and histogram",
        },
    )?;
    Ok(result)
}

impl result::WithHeader for NoiseResult {
    fn header(&self) -> &RunHeader {
        &self.run
    }
    fn header_mut(&mut self) -> &mut RunHeader {
        &mut self.run
    }
}

/// Writes `totals.hlog`: each CPU's whole-run histogram of interruption durations.
#[cfg(feature = "linux")]
fn write_totals(m: &Measured, r: &NoiseResult) -> Result<FileEntry, StoreError> {
    let entries: Vec<(String, &hdrhistogram::Histogram<u64>)> = r
        .cpus
        .iter()
        .filter_map(|c| Some((format!("cpu{}-interruptions", c.cpu), c.hist.as_ref()?)))
        .collect();
    let comments = vec![
        "sandglass noise: whole-run histograms of interruption durations, values in ns".to_string(),
    ];
    result::write_totals(m, &comments, &entries)
}

/// Replaces the percentiles the threads kept at three significant digits by exact ones for each
/// CPU whose every interruption reached the store, in one pass over the interruptions table.
#[cfg(feature = "linux")]
fn exact_percentiles(
    dir: &std::path::Path,
    files: &[FileEntry],
    stored: &[hdrhistogram::Histogram<u64>],
    cpus: &mut [NoiseCpu],
) -> Result<(), crate::store::ReadError> {
    use crate::store::table::TableReader;
    let complete: Vec<bool> = cpus
        .iter()
        .zip(stored)
        .map(|(c, s)| c.list_dropped == 0 && c.interruptions > 0 && s.len() == c.interruptions)
        .collect();
    if !complete.iter().any(|&c| c) {
        return Ok(());
    }
    let Some(table) = TableReader::of_files(dir, files, &tables::NOISE_INTERRUPTIONS) else {
        return Ok(());
    };
    let qs: Vec<f64> = histo::QUANTILES.iter().map(|q| q.0).collect();
    let hists: Vec<&hdrhistogram::Histogram<u64>> = stored.iter().collect();
    let mut quantiles = crate::stats::ExactQuantiles::new(&hists, &qs);
    let mut moments: Vec<(u64, f64, f64)> = vec![(0, 0.0, 0.0); cpus.len()];
    let index: std::collections::BTreeMap<i32, usize> = cpus
        .iter()
        .enumerate()
        .map(|(i, c)| (c.cpu as i32, i))
        .collect();
    table.scan::<crate::store::ReadError>(&["cpu", "duration_ns"], |b| {
        let (cpu, dur) = (b.i32s("cpu")?, b.i64s("duration_ns")?);
        for k in 0..b.len() {
            let Some(&i) = index.get(&cpu[k]) else {
                continue;
            };
            quantiles.add(i, dur[k]);
            let (n, mean, m2) = &mut moments[i];
            *n += 1;
            let d = dur[k] as f64 - *mean;
            *mean += d / *n as f64;
            *m2 += d * (dur[k] as f64 - *mean);
        }
        Ok(())
    })?;
    let q = quantiles.finish();
    for (i, c) in cpus.iter_mut().enumerate() {
        let (n, mean, m2) = moments[i];
        if !complete[i] || n != c.interruptions {
            continue;
        }
        let at = |k: usize| q[i].get(k).copied().flatten().unwrap_or(0).max(0) as u64;
        if let Some(p) = c.percentiles_ns.as_mut() {
            p.mean = mean;
            p.stddev = if n > 1 {
                (m2 / (n - 1) as f64).sqrt()
            } else {
                0.0
            };
            p.p50 = at(0);
            p.p90 = at(1);
            p.p99 = at(2);
            p.p99_9 = at(3);
            p.p99_99 = at(4);
            p.p99_999 = at(5);
            p.p99_9999 = at(6);
        }
    }
    Ok(())
}

/// One CPU's figures from its thread's report.
#[cfg(feature = "linux")]
fn cpu_result(
    m: &Measured,
    cpu: usize,
    i: usize,
    stored: u64,
    rep: crate::runner::ThreadReport,
    warnings: &mut Vec<Warning>,
) -> NoiseCpu {
    let applied = rep.applied.as_ref();
    let mut nc = NoiseCpu {
        cpu,
        thread: i,
        tid: rep.tid,
        policy: applied.and_then(|a| a.effective).map(|p| p.to_string()),
        downgraded: applied.and_then(|a| a.downgraded.clone()),
        runtime_ns: 0,
        noise_ns: 0,
        noise_share: 0.0,
        interruptions: 0,
        interruptions_per_s: 0.0,
        max_ns: 0,
        percentiles_ns: None,
        histogram: Vec::new(),
        stored,
        list_dropped: 0,
        loop_iterations: 0,
        mean_iteration_ns: None,
        stopped: false,
        process_stopped_ns: 0,
        error: rep.error.clone(),
        hist: None,
    };
    let Some(mut o) = rep.outcome else {
        warnings.push(Warning::new(
            WarningKind::ThreadDidNotStop,
            format!("CPU {cpu}: the polling thread did not stop; its figures are lost"),
        ));
        return nc;
    };
    let tb = &m.timebase;
    nc.stopped = o.stopped;
    nc.runtime_ns = tb.duration_ns(o.last.saturating_sub(o.first));
    let received = tb.duration_ns(o.received);
    nc.noise_ns = nc.runtime_ns.saturating_sub(received);
    if nc.runtime_ns > 0 {
        nc.noise_share = nc.noise_ns as f64 / nc.runtime_ns as f64;
    }
    nc.loop_iterations = o.iterations;
    if o.iterations > 0 {
        nc.mean_iteration_ns = Some(received as f64 / o.iterations as f64);
    }
    if let Some(g) = o.gaps.take() {
        nc.interruptions = g.count;
        nc.max_ns = g.max_ns;
        nc.percentiles_ns = histo::percentiles(&g.hist, None, Some(g.max_ns as i64));
        nc.histogram = histo::log_bins(&g.hist);
        nc.hist = Some(g.hist);
    }
    if nc.runtime_ns > 0 {
        nc.interruptions_per_s = nc.interruptions as f64 * 1e9 / nc.runtime_ns as f64;
    }
    nc.list_dropped = nc.interruptions.saturating_sub(nc.stored);
    if o.dropped > 0 {
        warnings.push(Warning::new(
            WarningKind::RecordsDropped,
            format!("CPU {cpu}: {} execution records did not reach the store because the main thread fell behind (keep its CPU free of other work, or raise -e); the totals, percentiles and histogram include the interruptions, interruptions-*.parquet and the timeline miss {}", o.dropped, nc.list_dropped),
        ));
    }
    nc
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Turns what the threads measured into the result.
#[cfg(feature = "linux")]
pub fn build(
    config: &NoiseConfig,
    cpus: &[usize],
    m: &mut Measured,
    spikes: &[SpikeLog],
    rows: &[u64],
) -> NoiseResult {
    let mut warnings = m.warnings.clone();
    let reports = std::mem::take(&mut m.reports);
    let out: Vec<NoiseCpu> = reports
        .into_iter()
        .enumerate()
        .map(|(i, rep)| {
            let cpu = cpus.get(i).copied().unwrap_or(0);
            let stored = rows.get(i).copied().unwrap_or(0);
            let mut c = cpu_result(m, cpu, i, stored, rep, &mut warnings);
            // The interruptions a stop of the process made: the kept spikes that overlap it.
            if !m.stops.is_empty() {
                c.process_stopped_ns = spikes
                    .iter()
                    .filter(|l| l.cpu() == cpu)
                    .flat_map(|l| l.kept(0))
                    .filter(|sp| {
                        crate::stops::overlapping(&m.stops, sp.at_ns, sp.size_ns)
                            .next()
                            .is_some()
                    })
                    .map(|sp| sp.size_ns)
                    .sum();
            }
            c
        })
        .collect();
    let thread_of = |cpu: usize| out.iter().position(|c| c.cpu == cpu);
    let mut causes = crate::causes::analyze(
        m.sampler.as_ref(),
        config.sample_hz,
        SPIKE_NS,
        spikes,
        &thread_of,
        crate::causes::explain::Waits::Polls,
    );
    crate::stops::name_in_causes(&mut causes, &m.stops);
    if m.kernel.is_some() {
        // With the kernel's events, every interruption is explained, not only the spikes.
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
        warnings.extend(
            causes
                .kernel
                .as_ref()
                .map(crate::causes::kernel_warnings)
                .unwrap_or_default(),
        );
    }
    m.warnings = warnings;
    let mut run = RunHeader::of(m, JSON_SCHEMA, config.duration_ns);
    run.causes = Some(causes);
    NoiseResult {
        run,
        threshold_ns: m.gap.threshold_ns,
        threshold_source: m.gap.source.clone(),
        threshold_explanation: m.gap.explanation.clone(),
        memmove_bytes: config.memmove_bytes,
        cpus: out,
    }
}

/// The noise probe: a polling loop on each measured CPU, and the time taken from it.
pub struct NoiseProbe;

impl Probe for NoiseProbe {
    const KIND: RunKind = RunKind::Noise;
    type Config = NoiseConfig;
    type Result = NoiseResult;

    /// Its key figures, in the order people read them.
    const FIGURES: &'static [KeyFigure] = &[
        fig("cpus", "cpus", Unit::Count, OverCpus::Run),
        fig("p50_ns", "p50", Unit::Nanos, OverCpus::Worst),
        fig("p99_ns", "p99", Unit::Nanos, OverCpus::Worst),
        fig("p99.9_ns", "p99.9", Unit::Nanos, OverCpus::Worst),
        fig("max_ns", "max", Unit::Nanos, OverCpus::Worst),
        fig("noise_share", "noise share", Unit::Share, OverCpus::Worst),
        fig(
            "interruptions_per_s",
            "interruptions per s",
            Unit::PerSecond,
            OverCpus::Worst,
        ),
        LOAD,
    ];

    #[cfg(feature = "linux")]
    fn run(
        c: &NoiseConfig,
        ctx: &RunContext,
        obs: &mut dyn Observer,
    ) -> Result<NoiseResult, RunError> {
        run(c, ctx, obs)
    }

    fn figures(s: &Value, f: &mut Figures) {
        let cpus = array(&s["cpus"]);
        f.add("cpus", Some(cpus.len() as f64));
        for c in cpus {
            f.add("noise_share", num(&c["noise_share"]));
            f.add("interruptions_per_s", num(&c["interruptions_per_s"]));
            for (key, p) in [("p50_ns", "p50"), ("p99_ns", "p99"), ("p99.9_ns", "p99.9")] {
                f.add(key, num(&c["percentiles_ns"][p]));
            }
            f.add("max_ns", num(&c["max_ns"]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EndReason;
    use crate::store::RunState;

    #[test]
    fn workload_spec() {
        assert_eq!(parse_workload("memmove:4K"), Ok(4096));
        assert_eq!(parse_workload("memmove:1M"), Ok(1 << 20));
        assert_eq!(parse_workload("memmove:100"), Ok(100));
        assert_eq!(parse_workload("none"), Ok(0));
        assert!(parse_workload("memcpy:4K").is_err());
        assert!(parse_workload("memmove:").is_err());
        assert!(parse_workload("memmove:0").is_err());
        assert!(parse_workload("memmove:99999999999999999999").is_err());
    }

    /// The sink turns consecutive records of each thread into interruptions, per CPU.
    #[test]
    fn interruptions_are_the_gaps_between_a_threads_records() {
        use crate::store::table::TableReader;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = crate::store::RunDir::create(Some(&tmp.path().join("run")), tmp.path(), "noise")
            .expect("dir");
        let c = config();
        let p = plan(&c, &[1, 2]);
        let placement = crate::plan::place(&p, &[0, 1, 2]).expect("place");
        let tb = Timebase::new(0, 1.0);
        let setup = SinkSetup {
            dir: dir.path(),
            plan: &p,
            placement: &placement,
            timebase: tb,
            started: std::time::SystemTime::UNIX_EPOCH,
        };
        let mut sink = NoiseSink::create(&setup, &[1, 2]).expect("sink");
        let rec = |thread, start, end| Record {
            thread,
            cpu: 1,
            start,
            end,
            reason: EndReason::Preempted,
        };
        sink.records(0, &[rec(0, 0, 100), rec(0, 110, 1_000_000_200)], &tb)
            .expect("records");
        sink.records(1, &[rec(1, 0, 50)], &tb).expect("records");
        sink.records(0, &[rec(0, 1_000_000_700, 1_000_000_900)], &tb)
            .expect("records");
        let (closed, spikes, rows, stored) = sink.finish(2_000_000_000);
        assert_eq!(rows, vec![2, 0]);
        assert_eq!(stored[0].len(), 2);
        assert_eq!(spikes.len(), 2);
        let files = closed.expect("files");
        assert!(
            crate::store::RunReader::open_any_state(dir.path()).is_err(),
            "no manifest yet"
        );
        let manifest = crate::store::Manifest {
            schema_version: crate::store::SCHEMA_VERSION,
            id: "run".into(),
            kind: crate::RunKind::Noise,
            tool: crate::store::Tool {
                name: "sandglass".into(),
                version: "0".into(),
                commit: "0".into(),
            },
            command_line: vec![],
            state: RunState::Completed,
            started_at: crate::store::now_rfc3339(),
            ended_at: None,
            end_detail: None,
            system: crate::system::snapshot(),
            clock: serde_json::Value::Null,
            config: serde_json::Value::Null,
            warnings: vec![],
            files,
        };
        dir.write_manifest(&manifest).expect("manifest");
        let run = crate::store::RunReader::open(dir.path()).expect("open");
        let mut list = Vec::new();
        TableReader::open(&run, &tables::NOISE_INTERRUPTIONS)
            .expect("table")
            .scan::<crate::store::ReadError>(&[], |b| {
                for i in 0..b.len() {
                    list.push((
                        b.i32s("cpu")?[i],
                        b.i64s("start_ns")?[i],
                        b.i64s("duration_ns")?[i],
                    ));
                }
                Ok(())
            })
            .expect("scan");
        assert_eq!(list, [(1, 100, 10), (1, 1_000_000_200, 500)]);
        let mut timeline = Vec::new();
        TableReader::open(&run, &tables::NOISE_TIMELINE)
            .expect("timeline")
            .scan::<crate::store::ReadError>(&["second", "noise_ns", "max_ns"], |b| {
                for i in 0..b.len() {
                    timeline.push((
                        b.i64s("second")?[i],
                        b.i64s("noise_ns")?[i],
                        b.i64s("max_ns")?[i],
                    ));
                }
                Ok(())
            })
            .expect("scan");
        assert_eq!(timeline, [(0, 10, 10), (1, 500, 500)]);
    }

    fn config() -> NoiseConfig {
        NoiseConfig {
            cpus: None,
            policy: Policy::Other { nice: 0 },
            duration_ns: Nanos::from_secs(60),
            threshold_ns: None,
            memmove_bytes: 0,
            records: None,
            main_cpu: None,
            allow_rt_busy: false,
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
    fn rings_are_sized_from_the_cpus() {
        let c = config();
        let p = plan(&c, &[1, 2]);
        assert_eq!(p.ring_records, 100_000);
        assert_eq!(plan(&c, &(0..64).collect::<Vec<_>>()).ring_records, 640_000);
        assert!(p.threads.iter().all(|t| t.workload == Workload::Cpu));
        assert!(p.gap_stats);
        assert!(validate(&c).is_ok());
    }
}
