//! Timer runs measured by the real engine on a scripted clock: the same threads' code, rings,
//! store, result and summary as a run on the machine, with lateness drawn from a seeded
//! generator instead of the kernel. A replay of a given specification writes the same samples
//! and the same figures on every machine, in as much time as the store takes to write them,
//! so that the output formats have golden files and the readers can be tried on runs of any
//! size (`bench/make_run`) without waiting hours for one.
//!
//! The scripted thread wakes `base + exponential` late, with a rare heavy tail, and stalls for
//! a few milliseconds at fixed times (releases due during a stall are missed releases, as on a
//! machine). A scripted thread that would run ahead of the store waits for it instead of
//! dropping samples, since no time is being measured.

use crate::analysis::rng::SplitMix64;
use crate::clock::CounterChoice;
use crate::clock::{Anchor, Calibration, ClockPair, CounterInfo, CounterKind, Timebase};
use crate::cpulist::CpuList;
use crate::engine::calibrate::GapChoice;
use crate::engine::ring::ring;
use crate::engine::thread::{run_thread, Model, Outputs, Release, ThreadOutcome, ThreadPlan};
use crate::engine::{Clock, Progress, ThreadOps, Work};
use crate::model::TimerKind;
use crate::policy::Policy;
use crate::runner::{Measured, RunError, SignalHold, Sink, SinkSetup, ThreadReport};
use crate::store::{Manifest, RunDir, RunState, StoreError, Tool};
use crate::timer::{self, TimerConfig, TimerResult, TimerSink};
use crate::units::Nanos;
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use thiserror::Error;

/// The counter's rate in a replay: 2.5 GHz, so that ticks and nanoseconds differ.
pub const FREQUENCY_HZ: f64 = 2_500_000_000.0;

/// The counter value at a replay's time zero.
const ZERO_TICK: u64 = 1_000_000_000_000;

/// A replay's time zero: 2026-01-01T00:00:00Z.
const STARTED_UNIX_S: u64 = 1_767_225_600;

/// Releases moved from one thread's ring to the store at a time.
const BLOCK: usize = 1024;

/// What to replay.
#[derive(Clone, Debug)]
pub struct TimerReplay {
    /// The CPUs "measured" (thread i on `cpus[i]`); nothing runs on them.
    pub cpus: Vec<usize>,
    pub interval: Nanos,
    pub duration: Nanos,
    pub seed: u64,
    /// Every this long a thread stalls for [`TimerReplay::stall`] (0: never).
    pub stall_every: Nanos,
    pub stall: Nanos,
}

impl TimerReplay {
    /// A replay of `duration` at `interval` on `cpus`, with a 2.5 ms stall every 10 s.
    pub fn new(cpus: &[usize], interval: Nanos, duration: Nanos, seed: u64) -> TimerReplay {
        TimerReplay {
            cpus: cpus.to_vec(),
            interval,
            duration,
            seed,
            stall_every: Nanos::from_secs(10),
            stall: Nanos(2_500_000),
        }
    }
}

/// Why a replay could not be written.
#[derive(Debug, Error)]
pub enum ReplayError {
    #[error("a replay needs at least one CPU, an interval of at least 1 us and a duration of at least one interval")]
    Spec,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Run(#[from] RunError),
}

/// The lateness, in ns, of successive wakeups of one scripted thread.
struct Lateness {
    rng: SplitMix64,
    stall_every: u64,
    stall: u64,
    next_stall: u64,
}

impl Lateness {
    fn new(seed: u64, spec: &TimerReplay) -> Lateness {
        Lateness {
            rng: SplitMix64::new(seed),
            stall_every: spec.stall_every.0,
            stall: spec.stall.0,
            next_stall: spec.stall_every.0,
        }
    }

    fn uniform(&mut self) -> f64 {
        // 53 random bits in (0, 1].
        ((self.rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// How late a wakeup for a release due at `due_ns` comes.
    fn next(&mut self, due_ns: u64) -> u64 {
        if self.stall_every > 0 && due_ns >= self.next_stall {
            self.next_stall += self.stall_every;
            return self.stall;
        }
        let base = 2_000.0 - 1_500.0 * self.uniform().ln();
        let tail = if self.rng.below(1000) == 0 {
            // Pareto with α = 1.5 from 20 µs, at most 2 ms.
            (20_000.0 * self.uniform().powf(-1.0 / 1.5)).min(2_000_000.0)
        } else {
            0.0
        };
        (base + tail) as u64
    }
}

/// The scripted counter of one thread: the time its last wakeup was scripted for.
struct ScriptedClock(Rc<Cell<u64>>);

impl Clock for ScriptedClock {
    fn now(&self) -> u64 {
        self.0.get()
    }
    fn now_with_cpu(&self) -> (u64, u32) {
        (self.0.get(), 0)
    }
}

/// The scripted operating system of one thread: each sleep ends at its target plus the next
/// lateness; a thread far ahead of the store waits for it first.
struct ScriptedOps {
    now: Rc<Cell<u64>>,
    lateness: Lateness,
    tb: Timebase,
    wakeups: u64,
    stored: Arc<AtomicU64>,
    ahead: u64,
    stop: Arc<AtomicBool>,
}

impl ThreadOps for ScriptedOps {
    fn sleep_until(&mut self, target: u64) -> bool {
        while self
            .wakeups
            .saturating_sub(self.stored.load(Ordering::Acquire))
            > self.ahead
        {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let due_ns = self.tb.at_ns(target).max(0) as u64;
        let late = self.tb.ticks(self.lateness.next(due_ns));
        self.now.set(self.now.get().max(target) + late);
        self.wakeups += 1;
        true
    }
    fn yield_cpu(&mut self) {}
    fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The calibration of a replay's counter over `duration`.
fn calibration(duration: Nanos) -> Calibration {
    let pair = |counter, clock_ns| ClockPair {
        counter,
        clock_ns,
        width_ticks: 40,
    };
    let ticks = (duration.0 as f64 * FREQUENCY_HZ / 1e9) as u64;
    let at = |counter: u64, ns: u64| Anchor {
        monotonic_raw: pair(counter, 1_000_000_000_000 + ns),
        monotonic: pair(counter, 2_000_000_000_000 + ns),
    };
    Calibration {
        counter: CounterKind::Tsc,
        frequency_hz: FREQUENCY_HZ,
        uncertainty_ppm: 0.0,
        monotonic_frequency_hz: FREQUENCY_HZ,
        advertised_frequency_hz: None,
        start: at(ZERO_TICK, 0),
        end: at(ZERO_TICK + ticks, duration.0),
    }
}

/// The configuration a replay's summary records: what `sandglass timer -c CPUS -i INTERVAL
/// -d DURATION` would be given.
pub fn timer_config(spec: &TimerReplay) -> TimerConfig {
    TimerConfig {
        cpus: CpuList::from_cpus(spec.cpus.iter().copied()),
        policy: Policy::Fifo { priority: 95 },
        interval_ns: spec.interval,
        duration_ns: spec.duration,
        timer: TimerKind::Hr,
        resync: false,
        duty: None,
        thresholds_ns: timer::default_thresholds(spec.interval),
        interval_bin_ns: Nanos::from_micros(100),
        main_cpu: None,
        cpu_dma_latency_us: None,
        output_dir: None,
        counter: CounterChoice::Auto,
        loads: Default::default(),
        sample_hz: 0,
        trace: None,
        threshold: None,
        explain_above_ns: None,
    }
}

/// Writes a timer run replayed from `spec` into `dir` (which must not exist, or be empty) and
/// returns its result, as `sandglass timer` would have. `tool` is recorded as the writer.
pub fn timer(dir: &Path, spec: &TimerReplay, tool: Tool) -> Result<TimerResult, ReplayError> {
    if spec.cpus.is_empty() || spec.interval.0 < 1_000 || spec.duration.0 < spec.interval.0 {
        return Err(ReplayError::Spec);
    }
    let config = timer_config(spec);
    let plan = timer::plan(&config, &spec.cpus);
    let placement =
        crate::plan::place(&plan, &spec.cpus).map_err(|e| RunError::Usage(e.to_string()))?;
    let cal = calibration(spec.duration);
    let tb = Timebase::new(ZERO_TICK, 1e9 / FREQUENCY_HZ);
    let started = SystemTime::UNIX_EPOCH + Duration::from_secs(STARTED_UNIX_S);
    let run = RunDir::create(Some(dir), Path::new("."), crate::RunKind::Timer.as_str())?;
    let system = crate::system::snapshot();
    let counter = CounterInfo {
        kind: CounterKind::Tsc,
        rdtscp: false,
        reason: "a replay: the counter is scripted".to_string(),
    };
    let manifest = Manifest {
        schema_version: crate::store::SCHEMA_VERSION,
        id: run.id().to_string(),
        kind: crate::RunKind::Timer,
        tool,
        command_line: vec![
            "sandglass".into(),
            "timer".into(),
            "-c".into(),
            placement.measured.to_string(),
            "-i".into(),
            spec.interval.to_string(),
            "-d".into(),
            spec.duration.to_string(),
        ],
        state: RunState::Running,
        started_at: "2026-01-01T00:00:00Z".to_string(),
        ended_at: None,
        end_detail: None,
        system: system.clone(),
        clock: serde_json::json!({ "counter": counter }),
        config: serde_json::json!({
            "kind": plan.config,
            "threads": plan.threads,
            "placement": placement,
            "replay": { "seed": spec.seed, "stall_every_ns": spec.stall_every, "stall_ns": spec.stall },
        }),
        warnings: Vec::new(),
        files: Vec::new(),
    };
    run.write_manifest(&manifest)?;
    let setup = SinkSetup {
        dir: run.path(),
        plan: &plan,
        placement: &placement,
        timebase: tb,
        started,
    };
    let mut sink = TimerSink::create(&setup, &spec.cpus, timer::SPIKE_FLOOR_NS)?;
    let (outcomes, store_error) = drive(spec, &tb, &mut sink);
    let elapsed_ns = outcomes
        .iter()
        .map(|o| tb.at_ns(o.last).max(0) as u64)
        .max()
        .unwrap_or(0);
    let m = Measured {
        dir: run,
        manifest,
        system,
        placement,
        counter,
        calibration: cal,
        timebase: tb,
        gap: GapChoice {
            threshold_ns: 0,
            source: "given".to_string(),
            explanation: "a replay has no gaps".to_string(),
            loop_stats: None,
        },
        loop_histogram: None,
        start_tick: ZERO_TICK,
        reports: outcomes
            .into_iter()
            .map(|o| ThreadReport {
                tid: 0,
                applied: None,
                timer_slack_ns: None,
                cpu_time_ns: None,
                outcome: Some(o),
                error: None,
            })
            .collect(),
        state: RunState::Completed,
        end_detail: "ran for the whole duration".to_string(),
        signal: None,
        stops: Vec::new(),
        warnings: Vec::new(),
        pm_qos_us: None,
        memory_locked: false,
        loads: Vec::new(),
        sampler: None,
        kernel: None,
        tids: vec![0; spec.cpus.len()],
        store_error,
        started,
        elapsed_ns,
        signals: SignalHold::none(),
    };
    Ok(timer::conclude(&config, &spec.cpus, m, sink)?)
}

/// Runs one engine thread per CPU on its scripted clock and moves what they release into
/// `sink`, as the runner's main thread does.
fn drive(
    spec: &TimerReplay,
    tb: &Timebase,
    sink: &mut TimerSink,
) -> (Vec<ThreadOutcome>, Option<StoreError>) {
    let n = spec.cpus.len();
    let period = tb.ticks(spec.interval.0);
    let releases = spec.duration.0.div_ceil(spec.interval.0);
    // Each wakeup sends its release and the ones it missed: at most this many per wakeup (the
    // longest lateness is a stall or the tail's 2 ms). A thread may run BLOCK wakeups ahead
    // of the store, so that a block is always there to take, and its ring holds them all.
    let per_wakeup = 2 + spec.stall.0.max(2_000_000) / spec.interval.0;
    let ahead = BLOCK as u64;
    let capacity = (2 * BLOCK * per_wakeup as usize).next_power_of_two();
    let stop = Arc::new(AtomicBool::new(false));
    let stored: Vec<Arc<AtomicU64>> = (0..n).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let mut consumers = Vec::with_capacity(n);
    let mut producers = Vec::with_capacity(n);
    for _ in 0..n {
        let (p, c) = ring::<Release>(capacity);
        producers.push(p);
        consumers.push(c);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = producers
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let stored = stored[i].clone();
                let stop = stop.clone();
                let tb = *tb;
                let seed = spec
                    .seed
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .wrapping_add(i as u64);
                let lateness = Lateness::new(seed, spec);
                s.spawn(move || {
                    let now = Rc::new(Cell::new(ZERO_TICK));
                    let clock = ScriptedClock(now.clone());
                    let mut ops = ScriptedOps {
                        now,
                        lateness,
                        tb,
                        wakeups: 0,
                        stored,
                        ahead,
                        stop,
                    };
                    let plan = ThreadPlan {
                        thread: i as u16,
                        model: Model::Release {
                            period,
                            resync: false,
                            duty: None,
                        },
                        start: ZERO_TICK,
                        finish: ZERO_TICK + releases * period,
                        gap: u64::MAX,
                        check_interval: u64::MAX,
                        timebase: tb,
                    };
                    let mut out = ThreadOutcome::new(Outputs {
                        releases: Some(p),
                        ..Outputs::default()
                    });
                    run_thread(
                        &plan,
                        &clock,
                        &mut ops,
                        &mut Work::None,
                        &mut out,
                        &Progress::default(),
                    );
                    out
                })
            })
            .collect();
        // Blocks of BLOCK releases, CPU after CPU: the same interleaving on every machine.
        let mut batch: Vec<Release> = Vec::with_capacity(BLOCK);
        let mut error = None;
        let mut now_ns = 0u64;
        let mut done = vec![false; n];
        while done.iter().any(|d| !d) {
            for i in 0..n {
                if done[i] {
                    continue;
                }
                let finished = loop {
                    let finished = handles[i].is_finished();
                    if finished || consumers[i].len() >= BLOCK {
                        break finished;
                    }
                    std::thread::sleep(Duration::from_micros(50));
                };
                batch.clear();
                consumers[i].drain(&mut batch, BLOCK);
                if batch.is_empty() && finished {
                    done[i] = true;
                    continue;
                }
                if error.is_some() {
                    continue;
                }
                let woke = batch.iter().filter(|r| !r.missed).count() as u64;
                if let Some(last) = batch.last() {
                    now_ns = now_ns.max(tb.at_ns(last.target).max(0) as u64);
                }
                let moved = sink
                    .releases(i, &batch, tb)
                    .and_then(|()| sink.tick(now_ns, u64::MAX, tb));
                if let Err(e) = moved {
                    error = Some(e);
                    stop.store(true, Ordering::Relaxed);
                }
                stored[i].fetch_add(woke, Ordering::Release);
            }
        }
        let outcomes = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect();
        (outcomes, error)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::table::{tables, TableReader};
    use crate::store::RunReader;

    fn tool() -> Tool {
        Tool {
            name: "sandglass".into(),
            version: "0".into(),
            commit: "test".into(),
        }
    }

    /// The replay keeps every release, counts as the engine does, and writes the same samples
    /// twice over.
    #[test]
    fn a_replay_is_complete_and_deterministic() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = TimerReplay::new(&[1, 2], Nanos::from_micros(500), Nanos::from_secs(21), 7);
        let a = timer(&tmp.path().join("a"), &spec, tool()).unwrap();
        let b = timer(&tmp.path().join("b"), &spec, tool()).unwrap();
        assert_eq!(a.run.state, RunState::Completed);
        assert_eq!(a.cpus.len(), 2);
        for c in &a.cpus {
            // 21 s at 500 µs: 42,000 releases; the two stalls of 2.5 ms miss 4 or 5 each, and
            // the tail's rare wakeups of more than 500 µs some more.
            assert_eq!(c.count, 42_000, "CPU {}", c.cpu);
            assert_eq!(c.samples_dropped, 0);
            assert_eq!(c.samples_stored, c.count);
            assert!(
                (8..=30).contains(&c.missed_releases),
                "CPU {}: {} missed",
                c.cpu,
                c.missed_releases
            );
            assert_eq!(c.wakeups + c.missed_releases, c.count);
        }
        let sa = serde_json::to_value(&a.cpus).unwrap();
        let sb = serde_json::to_value(&b.cpus).unwrap();
        assert_eq!(sa, sb);
        let rows = |d: &Path| {
            let r = RunReader::open(d).unwrap();
            let t = TableReader::open(&r, &tables::TIMER_SAMPLES).unwrap();
            let mut v = Vec::new();
            t.scan::<crate::store::ReadError>(&["lateness_ns"], |b| {
                v.extend_from_slice(b.i64s("lateness_ns")?);
                Ok(())
            })
            .unwrap();
            v
        };
        let ra = rows(&tmp.path().join("a"));
        assert_eq!(ra.len(), 84_000);
        assert_eq!(ra, rows(&tmp.path().join("b")));
        // The files themselves are the same, byte for byte.
        let files = |d: &str| {
            let m = RunReader::open(&tmp.path().join(d)).unwrap().manifest;
            m.files
                .into_iter()
                .filter(|f| f.name.ends_with(".parquet") || f.name.ends_with(".hlog"))
                .map(|f| (f.name, f.sha256))
                .collect::<Vec<_>>()
        };
        assert_eq!(files("a"), files("b"));
        assert!(files("a").len() >= 4);
    }

    #[test]
    fn a_bad_specification_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = TimerReplay::new(&[], Nanos::from_micros(500), Nanos::from_secs(1), 7);
        assert!(matches!(
            timer(&tmp.path().join("a"), &spec, tool()),
            Err(ReplayError::Spec)
        ));
    }
}
