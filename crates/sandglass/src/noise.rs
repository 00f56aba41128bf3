//! `sandglass noise`: OS noise on every chosen CPU.
//!
//! One polling thread per CPU runs Hourglass's gap detector (the CPU model, seed 003 §3.1) and
//! records every interruption: when it began, how long it lasted and on which CPU. This is what
//! oslat, sysjitter and rtla osnoise measure, with two differences: every interruption is kept
//! in order (oslat keeps only a histogram; sysjitter keeps a list but no histogram), and the
//! totals (noise time, count, longest, the HDR histogram of durations) are recorded as the loop
//! runs, so they stay exact even if the interruption list fills its buffer.
//!
//! Per CPU: the share of the runtime lost to noise, interruptions per second, the longest one,
//! percentiles and a histogram of durations, and a per-second timeline. An optional workload
//! between polls (oslat's memmove) models a polling application that touches memory.

use crate::analysis::trace::Interval;
use crate::cpulist::CpuList;
use crate::histo::{self, Bin, Percentiles};
use crate::hourglass::cmdline::{CounterChoice, HourglassSpec, ThreadSpec};
use crate::load::LoadReport;
use crate::model::{TimerKind, Workload};
use crate::policy::Policy;
use crate::runner::{self, Job, LoadPlan, Measured, Observer, RunContext, RunError};
use crate::store::{RunState, StoreError};
use crate::units::Nanos;
use crate::warning::{Warning, WarningKind};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NoiseConfig {
    /// CPUs to measure; `None` means every CPU the process may use but the main thread's.
    pub cpus: Option<CpuList>,
    pub policy: Policy,
    pub duration_ns: Nanos,
    /// The gap threshold; `None` calibrates it as Hourglass does.
    pub threshold_ns: Option<Nanos>,
    /// Bytes copied between polls (oslat's memmove workload), 0 for none.
    pub memmove_bytes: usize,
    /// Capacity of the interruption list, all CPUs together; `None` sizes it from the run.
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
    pub trace: Option<crate::causes::tracefs::TraceOptions>,
    /// Stop, or act, at the first delay above a threshold (`--stop-above`, `--on-threshold`).
    #[serde(default)]
    pub threshold: Option<crate::runner::Threshold>,
}

/// Parses `memmove:SIZE` (SIZE in bytes, or with K, M suffixes as oslat's `-m`).
pub fn parse_workload(text: &str) -> Result<usize, String> {
    let err = || {
        format!(
            "--workload {text}: use memmove:SIZE, for example memmove:4K or memmove:1M (or none)"
        )
    };
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
        return Err(format!(
            "--workload {text}: the size must be from 1 byte to 1G"
        ));
    }
    Ok(bytes)
}

/// Checks a configuration that the command line cannot check by itself.
pub fn validate(c: &NoiseConfig) -> Result<(), String> {
    if c.duration_ns.0 == 0 {
        return Err("-d must be longer than zero".into());
    }
    if c.policy.is_deadline() {
        return Err("-P d:...: SCHED_DEADLINE threads cannot be pinned to one CPU".into());
    }
    if let Some(t) = c.threshold_ns {
        if t.0 == 0 {
            return Err("-T must be longer than zero".into());
        }
    }
    Ok(())
}

/// The CPUs to measure (as for the timer).
pub fn measured_cpus(c: &NoiseConfig, allowed: &[usize]) -> Result<Vec<usize>, String> {
    let t = crate::timer::TimerConfig {
        cpus: c.cpus.clone(),
        policy: c.policy,
        interval_ns: Nanos(1),
        duration_ns: c.duration_ns,
        timer: TimerKind::Hr,
        resync: false,
        thresholds_ns: Vec::new(),
        interval_bin_ns: Nanos(1),
        main_cpu: c.main_cpu,
        cpu_dma_latency_us: None,
        output_dir: None,
        counter: c.counter,
        loads: LoadPlan::default(),
        sample_hz: 0,
        trace: None,
        threshold: None,
    };
    crate::timer::measured_cpus(&t, allowed)
}

/// The set of measuring threads: one CPU-bound polling thread pinned to each CPU.
pub fn spec(c: &NoiseConfig, cpus: &[usize]) -> HourglassSpec {
    let threads = cpus
        .iter()
        .enumerate()
        .map(|(index, &cpu)| ThreadSpec {
            index,
            priority_text: c.policy.to_string(),
            policy: c.policy,
            reservation: None,
            workload: Workload::Cpu,
            timer: TimerKind::Hr,
            start_ns: Nanos::ZERO,
            finish_ns: c.duration_ns,
            affinity: CpuList::from_cpus([cpu]),
        })
        .collect();
    // Room for 5 000 interruptions per second per CPU, between 100 000 and 8 M records.
    let records = c.records.unwrap_or_else(|| {
        let per_s = 5_000u64 * cpus.len() as u64;
        ((c.duration_ns.0 / 1_000_000_000 + 1) * per_s).clamp(100_000, 8_000_000) as usize
    });
    HourglassSpec {
        threads,
        duration_ns: c.duration_ns,
        raw_cycles: false,
        records,
        gap_ns: c.threshold_ns,
        gap_histogram: false,
        suppress_trace: true,
        output_dir: c.output_dir.clone(),
        main_cpu: c.main_cpu,
        allow_rt_busy: c.allow_rt_busy,
        counter: c.counter,
        cpu_dma_latency_us: c.cpu_dma_latency_us,
        loads: c.loads.clone(),
        trace: None,
    }
}

/// One second of one CPU's noise timeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoiseSecond {
    pub second: u64,
    pub interruptions: u64,
    pub noise_ns: u64,
    pub max_ns: u64,
}

/// One interruption.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interruption {
    /// When it began, in ns from the run's start (the last read before it).
    pub start_ns: u64,
    /// How long the thread did not run (from the last read before to the first read after).
    pub duration_ns: u64,
}

/// What one CPU measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    /// Interruptions not kept in the list (its buffer was full); the totals include them.
    pub list_dropped: u64,
    pub loop_iterations: u64,
    pub mean_iteration_ns: Option<f64>,
    pub stopped: bool,
    pub error: Option<String>,
    #[serde(skip)]
    pub list: Vec<Interruption>,
    #[serde(skip)]
    pub timeline: Vec<NoiseSecond>,
}

/// The version of the `--json` output (and `summary.json`) described by
/// `docs/schema/noise.schema.json`.
pub const JSON_SCHEMA: &str = "sandglass-noise/1";

/// The whole result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NoiseResult {
    /// [`JSON_SCHEMA`]; empty in summaries written before the field existed.
    #[serde(default)]
    pub schema: String,
    pub kind: String,
    pub run_id: String,
    pub run_dir: String,
    pub state: RunState,
    pub end_detail: String,
    pub duration_ns: Nanos,
    pub threshold_ns: u64,
    pub threshold_source: String,
    pub threshold_explanation: String,
    pub memmove_bytes: usize,
    pub cpus: Vec<NoiseCpu>,
    pub pm_qos_us: Option<u32>,
    pub memory_locked: bool,
    pub warnings: Vec<Warning>,
    /// What each load achieved during the measurement.
    #[serde(default)]
    pub loads: Vec<LoadReport>,
    /// The spikes' explanation by the sampler and their periodic trains.
    #[serde(default)]
    pub causes: Option<crate::causes::Causes>,
}

/// Interruptions of at least this long are spikes for the explanation.
pub const SPIKE_NS: u64 = 20_000;

/// The interruptions of one thread from its records: the gaps between consecutive records.
pub fn interruptions(records: &[Interval], thread: u16) -> Vec<Interruption> {
    let mut mine: Vec<&Interval> = records.iter().filter(|r| r.thread == thread).collect();
    mine.sort_by_key(|r| r.start_ns);
    mine.windows(2)
        .map(|w| Interruption {
            start_ns: w[0].end_ns,
            duration_ns: w[1].start_ns.saturating_sub(w[0].end_ns),
        })
        .collect()
}

/// The per-second timeline of a list of interruptions.
pub fn noise_timeline(list: &[Interruption]) -> Vec<NoiseSecond> {
    let mut out: Vec<NoiseSecond> = Vec::new();
    for i in list {
        let sec = i.start_ns / 1_000_000_000;
        if out.last().map(|s| s.second) != Some(sec) {
            out.push(NoiseSecond {
                second: sec,
                interruptions: 0,
                noise_ns: 0,
                max_ns: 0,
            });
        }
        if let Some(s) = out.last_mut() {
            s.interruptions += 1;
            s.noise_ns += i.duration_ns;
            s.max_ns = s.max_ns.max(i.duration_ns);
        }
    }
    out
}

/// Runs the noise measurement and writes its run directory.
pub fn run(
    config: &NoiseConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<NoiseResult, RunError> {
    validate(config).map_err(RunError::Usage)?;
    let allowed = crate::system::allowed_cpus();
    let cpus = measured_cpus(config, &allowed).map_err(RunError::Usage)?;
    let spec = spec(config, &cpus);
    let job = Job {
        kind: "noise",
        spec: &spec,
        config: serde_json::to_value(config).unwrap_or_default(),
        gap_stats: true,
        memmove_bytes: config.memmove_bytes,
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
pub fn build(config: &NoiseConfig, cpus: &[usize], m: &mut Measured) -> NoiseResult {
    let cal = m.calibration;
    let t0 = m.start_tick;
    let rel = |c: u64| cal.ns_between(t0, c).max(0) as u64;
    let intervals: Vec<Interval> = m
        .records
        .iter()
        .map(|r| Interval {
            thread: r.thread,
            cpu: r.cpu,
            start_ns: rel(r.start),
            end_ns: rel(r.end),
            reason: r.reason,
        })
        .collect();
    let mut warnings = m.warnings.clone();
    let reports = std::mem::take(&mut m.reports);
    let mut out = Vec::with_capacity(reports.len());
    for (i, rep) in reports.into_iter().enumerate() {
        let cpu = cpus.get(i).copied().unwrap_or(0);
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
            list_dropped: 0,
            loop_iterations: 0,
            mean_iteration_ns: None,
            stopped: false,
            error: rep.error.clone(),
            list: Vec::new(),
            timeline: Vec::new(),
        };
        if let Some(o) = rep.outcome {
            nc.stopped = o.stopped;
            nc.runtime_ns = cal.ns_for_ticks(o.last.saturating_sub(o.first));
            let received = cal.ns_for_ticks(o.received);
            nc.noise_ns = nc.runtime_ns.saturating_sub(received);
            if nc.runtime_ns > 0 {
                nc.noise_share = nc.noise_ns as f64 / nc.runtime_ns as f64;
            }
            nc.loop_iterations = o.iterations;
            if o.iterations > 0 {
                nc.mean_iteration_ns = Some(received as f64 / o.iterations as f64);
            }
            if let Some(g) = &o.gaps {
                nc.interruptions = g.count;
                nc.max_ns = g.max_ns;
                nc.percentiles_ns = histo::percentiles(&g.hist, None, Some(g.max_ns as i64));
                nc.histogram = histo::log_bins(&g.hist);
            }
            if nc.runtime_ns > 0 {
                nc.interruptions_per_s = nc.interruptions as f64 * 1e9 / nc.runtime_ns as f64;
            }
            nc.list = interruptions(&intervals, i as u16);
            nc.list_dropped = nc.interruptions.saturating_sub(nc.list.len() as u64);
            nc.timeline = noise_timeline(&nc.list);
            if nc.list_dropped > 0 {
                warnings.push(Warning::new(
                    WarningKind::RecordsDropped,
                    format!("CPU {cpu}: {} interruptions did not fit the list (raise -e); the totals, percentiles and histogram include them, interruptions.csv and the timeline do not", nc.list_dropped),
                ));
            }
        } else {
            warnings.push(Warning::new(
                WarningKind::ThreadDidNotStop,
                format!("CPU {cpu}: the polling thread did not stop; its figures are lost"),
            ));
        }
        out.push(nc);
    }
    // Each CPU's interruptions of at least `threshold` ns, as spikes.
    let spikes_above = |threshold: u64| -> Vec<(usize, Vec<crate::causes::trains::Spike>)> {
        out.iter()
            .map(|c| {
                let gaps = c
                    .list
                    .iter()
                    .map(|i| (i.start_ns as i64, i.duration_ns as i64));
                (c.cpu, crate::causes::spikes_of(gaps, threshold))
            })
            .collect()
    };
    let per_cpu = spikes_above(SPIKE_NS);
    let thread_of = |cpu: usize| out.iter().position(|c| c.cpu == cpu);
    let mut causes = crate::causes::analyze(
        m.sampler.as_ref(),
        config.sample_hz,
        SPIKE_NS,
        &per_cpu,
        &thread_of,
    );
    if m.kernel.is_some() {
        // With the kernel's events, every interruption is explained, not only the spikes.
        causes.kernel = crate::causes::attribute_run(m, &spikes_above(0));
        warnings.extend(
            causes
                .kernel
                .as_ref()
                .and_then(crate::causes::kernel_warning),
        );
    }
    NoiseResult {
        schema: JSON_SCHEMA.to_string(),
        kind: "noise".to_string(),
        run_id: m.dir.id().to_string(),
        run_dir: m.dir.path().display().to_string(),
        state: m.state,
        end_detail: m.end_detail.clone(),
        duration_ns: config.duration_ns,
        threshold_ns: m.gap.threshold_ns,
        threshold_source: m.gap.source.clone(),
        threshold_explanation: m.gap.explanation.clone(),
        memmove_bytes: config.memmove_bytes,
        cpus: out,
        pm_qos_us: m.pm_qos_us,
        memory_locked: m.memory_locked,
        loads: std::mem::take(&mut m.loads),
        warnings,
        causes: Some(causes),
    }
}

fn write(m: &Measured, r: &NoiseResult) -> Result<(), StoreError> {
    let dir = &m.dir;
    let mut files = Vec::new();
    let summary = serde_json::to_vec_pretty(r).map_err(|source| StoreError::Encode {
        what: "summary.json".into(),
        source,
    })?;
    files.push(dir.write_file(
        "summary.json",
        &summary,
        "sandglass-noise-summary/1",
        "per-CPU noise share, interruptions per second, longest interruption, percentiles and histogram",
    )?);
    let mut list = String::from("cpu,start_ns,duration_ns\n");
    let mut timeline = String::from("cpu,second,interruptions,noise_ns,max_ns\n");
    for c in &r.cpus {
        for i in &c.list {
            let _ = writeln!(list, "{},{},{}", c.cpu, i.start_ns, i.duration_ns);
        }
        for s in &c.timeline {
            let _ = writeln!(
                timeline,
                "{},{},{},{},{}",
                c.cpu, s.second, s.interruptions, s.noise_ns, s.max_ns
            );
        }
    }
    files.push(dir.write_file(
        "interruptions.csv",
        list.as_bytes(),
        "sandglass-interruptions-csv/1",
        "every interruption: cpu, start in ns from the run's start, duration in ns",
    )?);
    files.push(dir.write_file(
        "timeline.csv",
        timeline.as_bytes(),
        "sandglass-noise-timeline-csv/1",
        "per CPU and second: interruptions, noise in ns, longest interruption in ns",
    )?);
    if let Some(rec) = &m.sampler {
        files.push(crate::causes::write_sampler(dir, rec)?);
    }
    if let Some(k) = r.causes.as_ref().and_then(|c| c.kernel.as_ref()) {
        files.push(crate::causes::write_attribution(dir, k)?);
    }
    m.finish(files, &r.warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EndReason;

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

    #[test]
    fn interruptions_are_the_gaps_between_a_threads_records() {
        let iv = |thread, start_ns, end_ns| Interval {
            thread,
            cpu: 1,
            start_ns,
            end_ns,
            reason: EndReason::Preempted,
        };
        let recs = [
            iv(0, 0, 100),
            iv(1, 0, 50),
            iv(0, 110, 1_000_000_200),
            iv(0, 1_000_000_700, 1_000_000_900),
        ];
        let l = interruptions(&recs, 0);
        assert_eq!(
            l,
            vec![
                Interruption {
                    start_ns: 100,
                    duration_ns: 10
                },
                Interruption {
                    start_ns: 1_000_000_200,
                    duration_ns: 500
                }
            ]
        );
        let t = noise_timeline(&l);
        assert_eq!(t.len(), 2);
        assert_eq!((t[1].second, t[1].noise_ns, t[1].max_ns), (1, 500, 500));
    }

    #[test]
    fn records_are_sized_from_the_run() {
        let c = NoiseConfig {
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
        };
        let s = spec(&c, &[1, 2]);
        assert_eq!(s.records, 61 * 10_000);
        assert!(s.threads.iter().all(|t| t.workload == Workload::Cpu));
        assert!(validate(&c).is_ok());
    }
}
