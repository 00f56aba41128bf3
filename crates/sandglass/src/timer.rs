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

use crate::causes::spikes::SpikeLog;
use crate::clock::CounterChoice;
use crate::cpulist::CpuList;
use crate::duration;
use crate::engine::record::new_histogram;
use crate::engine::Release;
#[cfg(feature = "linux")]
use crate::histo;
use crate::histo::{Bin, Percentiles};
use crate::kind::{fig, KeyFigure, OverCpus, Unit, LOAD};
use crate::model::{TimerKind, Workload};
use crate::plan::{LoadPlan, RunPlan, ThreadSpec, Threshold};
use crate::policy::Policy;
use crate::probe::{array, num, Figures, Probe};
use crate::result::{self, RunHeader};
use crate::runner::streams::Streams;
#[cfg(feature = "linux")]
use crate::runner::{self, Measured, Observer, RunContext, RunError};
use crate::runner::{Sink, SinkSetup, SpikeAt, Timebase};
use crate::store::table::tables;
#[cfg(feature = "linux")]
use crate::store::RunState;
use crate::store::{FileEntry, StoreError};
use crate::units::Nanos;
#[cfg(feature = "linux")]
use crate::warning::{Warning, WarningKind};
use crate::RunKind;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// The default policy of timer threads: SCHED_FIFO 95, cyclictest's usual priority.
pub const DEFAULT_POLICY: Policy = Policy::Fifo { priority: 95 };

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimerConfig {
    /// CPUs to measure; `None` means every CPU the process may use but the main thread's.
    pub cpus: Option<CpuList>,
    pub policy: Policy,
    pub interval_ns: Nanos,
    pub duration_ns: Nanos,
    pub timer: TimerKind,
    /// `false`: a fixed release grid (absolute); `true`: one interval after each wakeup.
    pub resync: bool,
    /// Measure only part of the time (`sandglass monitor --duty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duty: Option<crate::model::DutyCycle>,
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
    pub trace: Option<crate::causes::kernel_trace::TraceOptions>,
    /// Stop, or act, at the first delay above a threshold (`--stop-above`, `--on-threshold`).
    #[serde(default)]
    pub threshold: Option<Threshold>,
    /// Explain every release at least this late (`--explain-above`); `None`: the spike
    /// threshold of [`spike_threshold`].
    #[serde(default)]
    pub explain_above_ns: Option<Nanos>,
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

/// A timer configuration that cannot run, named by its option with the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("-i 0: the interval must be longer than zero, for example -i 1ms")]
    ZeroInterval,
    #[error("-i {0}: an interval below 1 us would keep the CPU in the kernel's timer path; use at least -i 1us")]
    IntervalTooShort(String),
    #[error("-d {duration}: the run must last at least one interval ({interval})")]
    ShorterThanInterval { duration: String, interval: String },
    #[error("-P d:...: SCHED_DEADLINE threads cannot be pinned to one CPU; measure reservations with sandglass hourglass -rh")]
    Deadline,
    #[error("--timer rtc is available in sandglass hourglass only (-i RTC); use hr")]
    Rtc,
    #[error("--interval-bin must be longer than zero")]
    ZeroBin,
    #[error("--duty: a window of {on} holds {releases} releases of -i {interval}, {window}, which does not fit in --duty-period {every}; give a longer --duty-period, a smaller --duty or a shorter -i")]
    DutyWindow {
        on: String,
        releases: u64,
        interval: String,
        window: String,
        every: String,
    },
    #[error(
        "-c {list}: CPU {cpu} does not exist or this process may not use it (allowed: {allowed})"
    )]
    Cpu {
        list: CpuList,
        cpu: usize,
        allowed: String,
    },
}

/// Checks a configuration that the command line cannot check by itself.
pub fn validate(c: &TimerConfig) -> Result<(), ConfigError> {
    if c.interval_ns.0 == 0 {
        return Err(ConfigError::ZeroInterval);
    }
    if c.interval_ns.0 < 1_000 {
        return Err(ConfigError::IntervalTooShort(duration::format_exact(
            c.interval_ns,
        )));
    }
    if c.duration_ns < c.interval_ns {
        return Err(ConfigError::ShorterThanInterval {
            duration: duration::format_exact(c.duration_ns),
            interval: duration::format_exact(c.interval_ns),
        });
    }
    if c.policy.is_deadline() {
        return Err(ConfigError::Deadline);
    }
    if c.timer == TimerKind::Rtc {
        return Err(ConfigError::Rtc);
    }
    if c.interval_bin_ns.0 == 0 {
        return Err(ConfigError::ZeroBin);
    }
    if let Some(d) = c.duty {
        // A window holds whole releases (⌈on / interval⌉ of them), and must end before the next
        // cycle begins.
        let releases = d.on_ns.0.max(1).div_ceil(c.interval_ns.0);
        let window = releases.saturating_mul(c.interval_ns.0);
        if window > d.every_ns.0 {
            return Err(ConfigError::DutyWindow {
                on: duration::format_exact(d.on_ns),
                releases,
                interval: duration::format_exact(c.interval_ns),
                window: duration::format_exact(Nanos(window)),
                every: duration::format_exact(d.every_ns),
            });
        }
    }
    Ok(())
}

/// The CPUs to measure: `cpus` when given, or every allowed CPU but the main thread's (or all
/// of them on a one-CPU machine). Shared by the timer and the noise probe.
pub fn measured_cpus(
    cpus: Option<&CpuList>,
    main_cpu: Option<usize>,
    allowed: &[usize],
) -> Result<Vec<usize>, ConfigError> {
    if let Some(list) = cpus {
        for cpu in list.iter() {
            if !allowed.contains(&cpu) {
                return Err(ConfigError::Cpu {
                    list: list.clone(),
                    cpu,
                    allowed: CpuList::from_cpus(allowed.iter().copied())
                        .map(|l| l.to_string())
                        .unwrap_or_default(),
                });
            }
        }
        return Ok(list.to_vec());
    }
    let main = main_cpu
        .or_else(|| allowed.iter().copied().min())
        .unwrap_or(0);
    let others: Vec<usize> = allowed.iter().copied().filter(|&x| x != main).collect();
    Ok(if others.is_empty() {
        allowed.to_vec()
    } else {
        others
    })
}

/// One thread per CPU of `cpus`, pinned to it, with `policy` and `workload`, for `duration`:
/// the threads of the timer and the noise probe.
pub fn pinned_threads(
    cpus: &[usize],
    policy: Policy,
    workload: Workload,
    timer: TimerKind,
    duration: Nanos,
) -> Vec<ThreadSpec> {
    cpus.iter()
        .enumerate()
        .map(|(index, &cpu)| ThreadSpec {
            index,
            priority_text: policy.to_string(),
            policy,
            reservation: None,
            workload,
            timer,
            start_ns: Nanos::ZERO,
            finish_ns: duration,
            affinity: CpuList::from_cpus([cpu]),
        })
        .collect()
}

/// The run plan of `c`: one timer thread pinned to each CPU of `cpus`.
pub fn plan(c: &TimerConfig, cpus: &[usize]) -> RunPlan {
    let workload = Workload::Timer {
        period_ns: c.interval_ns,
        resync: c.resync,
        duty: c.duty,
    };
    RunPlan {
        kind: TimerProbe::KIND,
        threads: pinned_threads(cpus, c.policy, workload, c.timer, c.duration_ns),
        duration_ns: c.duration_ns,
        gap_ns: None,
        gap_histogram: false,
        gap_stats: false,
        memmove_bytes: 0,
        ring_records: 0,
        counter: c.counter,
        main_cpu: c.main_cpu,
        allow_rt_busy: false,
        cpu_dma_latency_us: c.cpu_dma_latency_us,
        loads: c.loads.clone(),
        sample_hz: c.sample_hz,
        trace: c.trace,
        threshold: c.threshold.clone(),
        output_dir: c.output_dir.clone(),
        config: serde_json::to_value(c).unwrap_or_default(),
    }
}

/// One "samples later than" row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LaterThan {
    pub threshold_ns: u64,
    /// Releases later than the threshold (corrected).
    pub count: u64,
    /// Wakeups later than the threshold (raw, one per wakeup).
    pub raw_count: u64,
}

/// Interval statistics (Jones & Regehr's table: min, max, average, standard deviation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IntervalStats {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub stddev: f64,
    pub max: u64,
}

/// The interval histogram.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IntervalHistogram {
    pub bin_ns: u64,
    pub bins: Vec<Bin>,
}

/// What one CPU measured.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Releases written to the store (`samples-*.parquet`).
    #[serde(default)]
    pub samples_stored: u64,
    /// Releases the store missed because the main thread fell behind (the histograms hold them).
    pub samples_dropped: u64,
    pub stopped: bool,
    pub error: Option<String>,
    /// The whole-run histograms: corrected lateness, raw lateness, interval.
    #[serde(skip)]
    pub histograms: Option<[Histogram<u64>; 3]>,
}

/// The version of the `--json` output (and `summary.json`) described by
/// `docs/schema/timer.schema.json`.
pub const JSON_SCHEMA: &str = "sandglass-timer/2";

/// The whole result.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimerResult {
    #[serde(flatten)]
    pub run: RunHeader,
    pub interval_ns: Nanos,
    pub timer: TimerKind,
    pub mode: String,
    pub cpus: Vec<TimerCpu>,
    pub counter_frequency_hz: f64,
}

/// Releases at least this late may be spikes; the threshold at the end of the run is
/// `max(SPIKE_FLOOR_NS, 10 × the largest per-CPU median lateness)`.
pub const SPIKE_FLOOR_NS: u64 = 100_000;

/// The spike threshold of a timer run: `max(100 µs, 10 × the largest per-CPU median lateness)`.
pub fn spike_threshold(cpus: &[TimerCpu]) -> u64 {
    cpus.iter()
        .filter_map(|c| c.lateness_ns.as_ref().map(|p| p.p50))
        .max()
        .unwrap_or(0)
        .saturating_mul(10)
        .max(SPIKE_FLOOR_NS)
}

/// The lateness from which a run logs its releases as spikes: `--explain-above` when given,
/// else [`SPIKE_FLOOR_NS`].
pub fn spike_floor(config: &TimerConfig) -> u64 {
    config.explain_above_ns.map_or(SPIKE_FLOOR_NS, |n| n.0)
}

/// One CPU's second under way.
struct Second {
    second: u64,
    releases: u64,
    missed: u64,
    min_ns: i64,
    max_ns: i64,
    /// The shortest and the longest interval between successive wakeups (`i64::MAX`,
    /// `i64::MIN`: none yet).
    interval_min_ns: i64,
    interval_max_ns: i64,
    hist: Histogram<u64>,
}

impl Second {
    fn new(second: u64, hist: Histogram<u64>) -> Second {
        Second {
            second,
            releases: 0,
            missed: 0,
            min_ns: i64::MAX,
            max_ns: i64::MIN,
            interval_min_ns: i64::MAX,
            interval_max_ns: i64::MIN,
            hist,
        }
    }
}

/// Where a timer run's releases go as the run goes: every release into `samples-*.parquet`,
/// one row per CPU and second into `timeline-*.parquet` and one histogram per CPU and second
/// into `histograms.hlog` as each second closes, and the spikes into a bounded log per CPU.
pub struct TimerSink {
    cpus: Vec<usize>,
    /// Releases at least this late go into the spike logs.
    floor_ns: u64,
    /// Per thread: the corrected and the raw lateness of the releases stored.
    stored: Vec<[Histogram<u64>; 2]>,
    streams: Streams,
    next: Vec<u64>,
    /// Per thread: the time of its last wakeup, in ns from the run's start.
    last_wakeup: Vec<Option<i64>>,
    seconds: Vec<Option<Second>>,
    /// With a duty cycle, its period in ns: no interval is taken across a pause.
    window_ns: Option<u64>,
    /// Live figures for readers in other threads (`sandglass monitor`).
    live: Option<std::sync::Arc<crate::live::Live>>,
}

impl TimerSink {
    /// The store of a run measuring `cpus` (thread i on `cpus[i]`), logging as spikes the
    /// releases at least `floor_ns` late.
    pub fn create(
        s: &SinkSetup<'_>,
        cpus: &[usize],
        floor_ns: u64,
    ) -> Result<TimerSink, StoreError> {
        let comments = vec![
            "sandglass timer: lateness in nanoseconds".to_string(),
            "tags cpuN: one histogram per CPU and second of release time (corrected lateness)"
                .to_string(),
        ];
        Ok(TimerSink {
            cpus: cpus.to_vec(),
            floor_ns,
            stored: cpus
                .iter()
                .map(|_| [new_histogram(), new_histogram()])
                .collect(),
            streams: Streams::create(
                s,
                cpus,
                &tables::TIMER_SAMPLES,
                &tables::TIMER_TIMELINE,
                &comments,
                floor_ns,
            )?,
            next: vec![0; cpus.len()],
            last_wakeup: vec![None; cpus.len()],
            seconds: cpus.iter().map(|_| None).collect(),
            window_ns: s.plan.threads.iter().find_map(|t| match t.workload {
                Workload::Timer { duty: Some(d), .. } => Some(d.every_ns.0.max(1)),
                _ => None,
            }),
            live: None,
        })
    }

    /// Also counts every release into `live` as it is stored.
    pub fn with_live(mut self, live: Option<std::sync::Arc<crate::live::Live>>) -> TimerSink {
        self.live = live;
        self
    }

    /// Writes the timeline row and the interval-log entry of thread `i`'s second under way.
    fn close_second(&mut self, i: usize, now_ns: u64) -> Result<(), StoreError> {
        let Some(s) = self.seconds[i].take() else {
            return Ok(());
        };
        let cap = |v: u64| (v as i64).min(s.max_ns).max(0);
        let b = self.streams.timeline.row();
        b.push_i32(0, self.cpus[i] as i32);
        b.push_i64(1, s.second as i64);
        b.push_i64(2, s.releases as i64);
        b.push_i64(3, s.missed as i64);
        b.push_i64(4, s.min_ns);
        b.push_i64(5, cap(s.hist.value_at_quantile(0.5)));
        b.push_i64(6, cap(s.hist.value_at_quantile(0.99)));
        b.push_i64(7, s.max_ns);
        let none = |v: i64, empty: i64| if v == empty { -1 } else { v };
        b.push_i64(8, none(s.interval_min_ns, i64::MAX));
        b.push_i64(9, none(s.interval_max_ns, i64::MIN));
        self.streams.timeline.end_row(now_ns)?;
        let tag = format!("cpu{}", self.cpus[i]);
        self.streams
            .hlog
            .write(&tag, s.second as f64, 1.0, &s.hist)?;
        // The histogram is reused for the next second.
        let mut hist = s.hist;
        hist.reset();
        self.seconds[i] = Some(Second::new(u64::MAX, hist));
        Ok(())
    }

    /// Closes every second, the tables and the log; returns the files written, the spikes and
    /// the histograms of what was stored.
    pub fn finish(mut self, now_ns: u64) -> (Result<Vec<FileEntry>, StoreError>, Stored) {
        let stored = Stored {
            spikes: self.streams.take_spike_logs(),
            lateness: std::mem::take(&mut self.stored),
        };
        let seconds = (0..self.seconds.len()).try_for_each(|i| {
            if self.seconds[i].as_ref().is_some_and(|s| s.releases > 0) {
                self.close_second(i, now_ns)?;
            }
            Ok(())
        });
        (seconds.and_then(|()| self.streams.finish(now_ns)), stored)
    }
}

/// What a timer run's store kept beside its files.
pub struct Stored {
    pub spikes: Vec<SpikeLog>,
    /// Per thread: the corrected and the raw lateness of the releases stored.
    pub lateness: Vec<[Histogram<u64>; 2]>,
}

impl Sink for TimerSink {
    fn releases(&mut self, i: usize, batch: &[Release], tb: &Timebase) -> Result<(), StoreError> {
        let cpu = self.cpus[i] as i32;
        let live = self.live.clone();
        let live = live.as_deref().and_then(|l| l.cpu(self.cpus[i]));
        let _batch = live.map(|l| l.batch());
        for r in batch {
            let at = tb.at_ns(r.target);
            let late = tb.signed_ns(r.wakeup.wrapping_sub(r.target) as i64);
            let now = at.max(0) as u64;
            let b = self.streams.table.row();
            b.push_i32(0, cpu);
            b.push_i64(1, self.next[i] as i64);
            b.push_i64(2, at);
            b.push_i64(3, late);
            b.push_bool(4, r.missed);
            self.streams.table.end_row(now)?;
            self.next[i] += 1;
            let second = now / 1_000_000_000;
            if self.seconds[i]
                .as_ref()
                .is_some_and(|s| s.second != second && s.releases > 0)
            {
                self.close_second(i, now)?;
            }
            let s = self.seconds[i].get_or_insert_with(|| Second::new(second, new_histogram()));
            s.second = second;
            // A missed release shares the wakeup of the release before it.
            if !r.missed {
                let wakeup = at + late;
                let window = |t: i64| self.window_ns.map(|w| t.max(0) as u64 / w);
                if self.last_wakeup[i].is_some_and(|p| window(p) != window(at)) {
                    // A duty cycle's pause is not an interval between wakeups.
                    self.last_wakeup[i] = None;
                }
                if let Some(prev) = self.last_wakeup[i].replace(wakeup) {
                    let d = wakeup - prev;
                    s.interval_min_ns = s.interval_min_ns.min(d);
                    s.interval_max_ns = s.interval_max_ns.max(d);
                }
            }
            s.releases += 1;
            s.missed += u64::from(r.missed);
            s.min_ns = s.min_ns.min(late);
            s.max_ns = s.max_ns.max(late);
            s.hist.saturating_record(late.max(0) as u64);
            if let Some(l) = live {
                l.release(late, r.missed);
            }
            let [all, raw] = &mut self.stored[i];
            all.saturating_record(late.max(0) as u64);
            if !r.missed {
                raw.saturating_record(late.max(0) as u64);
            }
            self.streams.spikes[i].sample(at, late, self.floor_ns);
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

/// Runs the timer measurement and writes its run directory.
#[cfg(feature = "linux")]
pub fn run(
    config: &TimerConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<TimerResult, RunError> {
    run_live(config, ctx, obs, None)
}

/// [`run`], also counting every release into `live` as the main thread stores it.
#[cfg(feature = "linux")]
pub fn run_live(
    config: &TimerConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
    live: Option<std::sync::Arc<crate::live::Live>>,
) -> Result<TimerResult, RunError> {
    validate(config).map_err(|e| RunError::Usage(e.to_string()))?;
    let allowed = crate::system::allowed_cpus();
    let cpus = measured_cpus(config.cpus.as_ref(), config.main_cpu, &allowed)
        .map_err(|e| RunError::Usage(e.to_string()))?;
    let plan = plan(config, &cpus);
    let (m, sink) = runner::measure(&plan, ctx, obs, |s| {
        TimerSink::create(s, &cpus, spike_floor(config)).map(|t| t.with_live(live))
    })?;
    conclude(config, &cpus, m, sink)
}

/// Closes the store of what `m` measured on `cpus`, builds the result and writes the run's
/// last files: what [`run`] does once the threads are done (and a replay does too).
#[cfg(feature = "linux")]
pub fn conclude(
    config: &TimerConfig,
    cpus: &[usize],
    mut m: Measured,
    sink: TimerSink,
) -> Result<TimerResult, RunError> {
    let now = m.elapsed_ns();
    let (closed, stored) = sink.finish(now);
    let files = result::close_store(&mut m, closed);
    let mut result = build(config, cpus, &mut m, &stored.spikes);
    result::conclude(
        &mut m,
        files,
        &mut result,
        |dir, files, r: &mut TimerResult| {
            exact_figures(config, dir, files, &stored.lateness, &mut r.cpus)
        },
        write_totals,
        &result::Ending {
            stored: "samples",
            summary_format: "sandglass-timer-summary/2",
            summary_description: "per-CPU lateness (corrected and raw), missed releases, intervals, samples-later-than table, CPU time",
        },
    )?;
    Ok(result)
}

impl result::WithHeader for TimerResult {
    fn header(&self) -> &RunHeader {
        &self.run
    }
    fn header_mut(&mut self) -> &mut RunHeader {
        &mut self.run
    }
}

/// One CPU's figures from its thread's report.
#[cfg(feature = "linux")]
fn cpu_result(
    config: &TimerConfig,
    cpu: usize,
    i: usize,
    rep: crate::runner::ThreadReport,
    warnings: &mut Vec<Warning>,
) -> TimerCpu {
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
        samples_stored: 0,
        samples_dropped: 0,
        stopped: false,
        error: rep.error.clone(),
        histograms: None,
    };
    let Some(mut o) = rep.outcome else {
        warnings.push(Warning::new(
            WarningKind::ThreadDidNotStop,
            format!("CPU {cpu}: the measuring thread did not stop; its figures are lost"),
        ));
        return tc;
    };
    tc.stopped = o.stopped;
    tc.samples_stored = o.samples;
    tc.samples_dropped = o.samples_dropped;
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
        tc.interval_histogram.bins = histo::linear_bins(&t.interval, config.interval_bin_ns.0);
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
            tc.cpu_time_per_wakeup_ns = rep.cpu_time_ns.map(|c| c as f64 / t.wakeups as f64);
        }
        tc.histograms = Some([t.lateness, t.raw, t.interval]);
    }
    if tc.samples_dropped > 0 {
        warnings.push(Warning::new(
            WarningKind::RecordsDropped,
            format!("CPU {cpu}: {} releases did not reach the store because the main thread fell behind (keep its CPU free of other work); the histograms, percentiles and counts include them, samples-*.parquet does not", tc.samples_dropped),
        ));
    }
    tc
}

/// Turns what the threads measured into the result; `spikes` are the CPUs' spike logs.
#[cfg(feature = "linux")]
pub fn build(
    config: &TimerConfig,
    cpus: &[usize],
    m: &mut Measured,
    spikes: &[SpikeLog],
) -> TimerResult {
    let mut warnings = m.warnings.clone();
    let reports = std::mem::take(&mut m.reports);
    let out: Vec<TimerCpu> = reports
        .into_iter()
        .enumerate()
        .map(|(i, rep)| {
            cpu_result(
                config,
                cpus.get(i).copied().unwrap_or(0),
                i,
                rep,
                &mut warnings,
            )
        })
        .collect();
    let min_count = out.iter().map(|c| c.count).min().unwrap_or(0);
    if min_count > 0 && min_count < 1_000_000 && m.state == RunState::Completed {
        let top = Percentiles::supported(min_count)
            .last()
            .copied()
            .unwrap_or("p50");
        let span = Nanos(config.interval_ns.0.saturating_mul(1_000_000));
        // With a duty cycle only its windows hold releases: the run lasts 1 / share as long.
        let how = match config.duty {
            Some(d) => format!(
                "--segment {} at this interval and duty cycle",
                duration::format_human(Nanos(
                    (span.0 as f64 / d.share().clamp(1e-9, 1.0)).ceil() as u64
                ))
            ),
            None => format!("-d {} at this interval", duration::format_human(span)),
        };
        warnings.push(Warning::new(
            WarningKind::RunTooShort,
            format!(
                "{min_count} releases per CPU support percentiles up to {top}; the higher ones are the maximum in disguise. For p99.9999 run at least 1,000,000 releases ({how})"
            ),
        ));
    }
    let threshold = config
        .explain_above_ns
        .map_or_else(|| spike_threshold(&out), |n| n.0);
    let thread_of = |cpu: usize| out.iter().position(|c| c.cpu == cpu);
    let mut causes = crate::causes::analyze(
        m.sampler.as_ref(),
        config.sample_hz,
        threshold,
        spikes,
        &thread_of,
        crate::causes::explain::Waits::Sleeps,
    );
    crate::stops::name_in_causes(&mut causes, &m.stops);
    if m.kernel.is_some() {
        let all: Vec<(usize, Vec<crate::causes::trains::Spike>)> = spikes
            .iter()
            .map(|l| {
                let v = l
                    .all()
                    .unwrap_or_default()
                    .iter()
                    .filter(|s| s.size_ns >= threshold)
                    .copied()
                    .collect();
                (l.cpu(), v)
            })
            .collect();
        // Each spike runs from a release to the thread's read of the clock: a late wakeup.
        let refs: Vec<crate::causes::CpuSpikes> = all
            .iter()
            .map(|(c, v)| crate::causes::CpuSpikes {
                cpu: *c,
                tid: out.iter().find(|x| x.cpu == *c).map(|x| x.tid),
                spikes: v.as_slice(),
            })
            .collect();
        causes.kernel = m.attribute(&refs);
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
    TimerResult {
        run,
        interval_ns: config.interval_ns,
        timer: config.timer,
        mode: if config.resync { "resync" } else { "absolute" }.to_string(),
        cpus: out,
        counter_frequency_hz: m.calibration.frequency_hz,
    }
}

/// Per group: the exact count, extremes, mean and standard deviation, and the count above each
/// threshold.
#[cfg(feature = "linux")]
struct Exact {
    count: u64,
    min: i64,
    max: i64,
    mean: f64,
    m2: f64,
    above: Vec<u64>,
}

#[cfg(feature = "linux")]
impl Exact {
    fn new(thresholds: usize) -> Exact {
        Exact {
            count: 0,
            min: i64::MAX,
            max: i64::MIN,
            mean: 0.0,
            m2: 0.0,
            above: vec![0; thresholds],
        }
    }

    fn add(&mut self, v: i64, thresholds: &[Nanos]) {
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        let d = v as f64 - self.mean;
        self.mean += d / self.count as f64;
        self.m2 += d * (v as f64 - self.mean);
        for (n, th) in self.above.iter_mut().zip(thresholds) {
            if v > th.0 as i64 {
                *n += 1;
            }
        }
    }

    fn percentiles(&self, q: &[Option<i64>]) -> Option<Percentiles> {
        let at = |i: usize| q.get(i).copied().flatten().unwrap_or(0).max(0) as u64;
        (self.count > 0).then(|| Percentiles {
            count: self.count,
            min: self.min,
            mean: self.mean,
            stddev: if self.count > 1 {
                (self.m2 / (self.count - 1) as f64).sqrt()
            } else {
                0.0
            },
            p50: at(0),
            p90: at(1),
            p99: at(2),
            p99_9: at(3),
            p99_99: at(4),
            p99_999: at(5),
            p99_9999: at(6),
            max: self.max,
        })
    }
}

/// Replaces the figures the measuring threads kept at three significant digits by exact ones,
/// for each CPU whose every release reached the store: one pass over the samples table, with
/// the histograms of what was stored naming the bucket of each percentile
/// ([`crate::stats::ExactQuantiles`]).
#[cfg(feature = "linux")]
fn exact_figures(
    config: &TimerConfig,
    dir: &std::path::Path,
    files: &[FileEntry],
    stored: &[[Histogram<u64>; 2]],
    cpus: &mut [TimerCpu],
) -> Result<(), crate::store::ReadError> {
    use crate::store::table::TableReader;
    let complete: Vec<bool> = cpus
        .iter()
        .zip(stored)
        .map(|(c, s)| c.samples_dropped == 0 && c.count > 0 && s[0].len() == c.count)
        .collect();
    if !complete.iter().any(|&c| c) {
        return Ok(());
    }
    let Some(table) = TableReader::of_files(dir, files, &tables::TIMER_SAMPLES) else {
        return Ok(());
    };
    let qs: Vec<f64> = histo::QUANTILES.iter().map(|q| q.0).collect();
    let hists: Vec<&Histogram<u64>> = stored.iter().flat_map(|s| [&s[0], &s[1]]).collect();
    let mut quantiles = crate::stats::ExactQuantiles::new(&hists, &qs);
    let th = &config.thresholds_ns;
    let mut exact: Vec<Exact> = hists.iter().map(|_| Exact::new(th.len())).collect();
    let index: std::collections::BTreeMap<i32, usize> = cpus
        .iter()
        .enumerate()
        .map(|(i, c)| (c.cpu as i32, i))
        .collect();
    table.scan::<crate::store::ReadError>(&["cpu", "lateness_ns", "missed"], |b| {
        let (cpu, late, missed) = (b.i32s("cpu")?, b.i64s("lateness_ns")?, b.bools("missed")?);
        for k in 0..b.len() {
            let Some(&i) = index.get(&cpu[k]) else {
                continue;
            };
            quantiles.add(2 * i, late[k]);
            exact[2 * i].add(late[k], th);
            if !missed[k] {
                quantiles.add(2 * i + 1, late[k]);
                exact[2 * i + 1].add(late[k], th);
            }
        }
        Ok(())
    })?;
    let q = quantiles.finish();
    for (i, c) in cpus.iter_mut().enumerate() {
        if !complete[i] || exact[2 * i].count != c.count {
            continue;
        }
        c.lateness_ns = exact[2 * i].percentiles(&q[2 * i]);
        c.raw_lateness_ns = exact[2 * i + 1].percentiles(&q[2 * i + 1]);
        for (k, l) in c.later_than.iter_mut().enumerate() {
            l.count = exact[2 * i].above[k];
            l.raw_count = exact[2 * i + 1].above[k];
        }
    }
    Ok(())
}

/// `totals.hlog`: each CPU's whole-run histograms.
#[cfg(feature = "linux")]
fn write_totals(m: &Measured, r: &TimerResult) -> Result<FileEntry, StoreError> {
    let mut entries = Vec::new();
    for c in &r.cpus {
        if let Some([lat, raw, interval]) = &c.histograms {
            for (what, h) in [("lateness", lat), ("raw", raw), ("interval", interval)] {
                entries.push((format!("cpu{}-{what}", c.cpu), h));
            }
        }
    }
    let comments = vec![
        "sandglass timer: whole-run histograms recorded by the measuring threads, values in ns"
            .to_string(),
        "tags cpuN-lateness (every release, corrected), cpuN-raw (one per wakeup), cpuN-interval (between wakeups)".to_string(),
    ];
    result::write_totals(m, &comments, &entries)
}

/// The timer probe: periodic timer wakeups on each measured CPU, and how late each came.
pub struct TimerProbe;

impl Probe for TimerProbe {
    const KIND: RunKind = RunKind::Timer;
    type Config = TimerConfig;
    type Result = TimerResult;

    /// Its key figures, in the order people read them.
    const FIGURES: &'static [KeyFigure] = &[
        fig("cpus", "cpus", Unit::Count, OverCpus::Run),
        fig("count", "count", Unit::Count, OverCpus::Sum),
        fig("p50_ns", "p50", Unit::Nanos, OverCpus::Worst),
        fig("p90_ns", "p90", Unit::Nanos, OverCpus::Worst),
        fig("p99_ns", "p99", Unit::Nanos, OverCpus::Worst),
        fig("p99.9_ns", "p99.9", Unit::Nanos, OverCpus::Worst),
        fig("p99.99_ns", "p99.99", Unit::Nanos, OverCpus::Worst),
        fig("max_ns", "max", Unit::Nanos, OverCpus::Worst),
        fig("missed", "missed", Unit::Count, OverCpus::Sum),
        fig("irq_p99_ns", "irq p99", Unit::Nanos, OverCpus::Worst),
        fig("irq_max_ns", "irq max", Unit::Nanos, OverCpus::Worst),
        fig("thread_p99_ns", "thread p99", Unit::Nanos, OverCpus::Worst),
        fig("thread_max_ns", "thread max", Unit::Nanos, OverCpus::Worst),
        LOAD,
    ];

    #[cfg(feature = "linux")]
    fn run(
        c: &TimerConfig,
        ctx: &RunContext,
        obs: &mut dyn Observer,
    ) -> Result<TimerResult, RunError> {
        run(c, ctx, obs)
    }

    fn figures(s: &Value, f: &mut Figures) {
        let cpus = array(&s["cpus"]);
        f.add("cpus", Some(cpus.len() as f64));
        for c in cpus {
            f.add("count", num(&c["count"]));
            for (key, p) in [
                ("p50_ns", "p50"),
                ("p90_ns", "p90"),
                ("p99_ns", "p99"),
                ("p99.9_ns", "p99.9"),
                ("p99.99_ns", "p99.99"),
                ("max_ns", "max"),
            ] {
                f.add(key, num(&c["lateness_ns"][p]));
            }
            f.add("missed", num(&c["missed_releases"]));
        }
        // With --trace: every wakeup's IRQ and thread latency (rtla timerlat's figures).
        for l in array(&s["causes"]["kernel"]["latency"]) {
            f.add("irq_p99_ns", num(&l["irq_ns"]["p99"]));
            f.add("irq_max_ns", num(&l["irq_ns"]["max"]));
            f.add("thread_p99_ns", num(&l["thread_ns"]["p99"]));
            f.add("thread_max_ns", num(&l["thread_ns"]["max"]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DutyCycle;

    fn with_duty(interval_ms: u64, on_ms: u64, every_ms: u64) -> TimerConfig {
        let mut c = crate::replay::timer_config(&crate::replay::TimerReplay::new(
            &[1],
            Nanos::from_millis(interval_ms),
            Nanos::from_secs(60),
            0,
        ));
        c.duty = Some(DutyCycle {
            on_ns: Nanos::from_millis(on_ms),
            every_ns: Nanos::from_millis(every_ms),
        });
        c
    }

    /// A duty window holds whole releases and must fit in its cycle.
    #[test]
    fn a_duty_window_must_fit_in_its_cycle() {
        assert_eq!(validate(&with_duty(1, 1_000, 10_000)), Ok(()));
        // 3 releases of 3 ms (9 ms) fit in 10 ms; 2 of 7 ms (14 ms) do not.
        assert_eq!(validate(&with_duty(3, 8, 10)), Ok(()));
        let e = validate(&with_duty(7, 9, 10)).unwrap_err();
        assert!(
            matches!(e, ConfigError::DutyWindow { releases: 2, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("14ms"), "{e}");
        // A cycle shorter than one interval holds no window at all.
        assert!(validate(&with_duty(5, 1, 4)).is_err());
    }
}
