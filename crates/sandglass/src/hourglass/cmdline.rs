//! The Hourglass command line (Regehr 2002, Appendix A), accepted verbatim, plus a few
//! extensions for multiprocessors and for sandglass's run directory.
//!
//! Appendix A's options are positional: `-t N` selects the thread that the following per-thread
//! options (`-p`, `-rh`, `-rs`, `-w`, `-i`, `-s`, `-f`) affect, and `-a` makes them affect every
//! thread until the next `-t`. Options are applied in the order given, so `-a -p LOW -t 0 -p HIGH`
//! leaves thread 0 at HIGH and the others at LOW. `-n` may appear anywhere.
//!
//! Parsing is pure: it turns words into an [`HourglassSpec`] or one [`CmdlineError`] whose
//! message names the option and the fix.

pub use crate::clock::CounterChoice;
use crate::cpulist::{CpuList, CpuListError};
use crate::duration::{self, DurationError};
use crate::model::{TimerError, TimerKind, Workload};
use crate::plan::{LoadPlan, RunPlan, DEFAULT_SETTLE};
pub use crate::plan::{Reservation, ThreadSpec};
use crate::policy::{Policy, PolicyError, DEADLINE_MIN_RUNTIME};
use crate::units::Nanos;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use thiserror::Error;

/// Appendix A's default run length.
pub const DEFAULT_DURATION: Nanos = Nanos::from_secs(10);
/// Appendix A's default trace size ("about 5 MB").
pub const DEFAULT_RECORDS: usize = 300_000;
/// The most threads one run may create.
pub const MAX_THREADS: usize = 1024;

/// A parsed Hourglass command line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HourglassSpec {
    pub threads: Vec<ThreadSpec>,
    pub duration_ns: Nanos,
    /// `-c`: also print the raw trace in counter ticks.
    pub raw_cycles: bool,
    /// `-e`: trace capacity in records.
    pub records: usize,
    /// `-g`: the gap threshold; `None` means calibrate.
    pub gap_ns: Option<Nanos>,
    /// `-gh`: print the polling-loop iteration histogram.
    pub gap_histogram: bool,
    /// `-x`: do not print execution intervals.
    pub suppress_trace: bool,
    /// `-o DIR`: the run directory.
    pub output_dir: Option<PathBuf>,
    /// `--main-cpu N`: where the main (housekeeping) thread runs.
    pub main_cpu: Option<usize>,
    /// `--allow-rt-busy`: permit real-time threads that never block on every CPU.
    pub allow_rt_busy: bool,
    /// `--require-rtc`: refuse `-i RTC` without a usable `/dev/rtc` instead of falling back
    /// to HR.
    #[serde(default)]
    pub require_rtc: bool,
    /// `--counter`: which clock the gap detector polls.
    pub counter: CounterChoice,
    /// `--cpu-dma-latency`: hold `/dev/cpu_dma_latency` at this many µs during the run
    /// (default 0, as cyclictest does); `None` (`off`) leaves the idle states alone.
    pub cpu_dma_latency_us: Option<u32>,
    /// `--load`, `--load-cmd`, `--settle`: loads to run around the measurement.
    #[serde(default)]
    pub loads: LoadPlan,
    /// `--trace`: record kernel events on the measured CPUs and attribute every preemption gap.
    #[serde(default)]
    pub trace: Option<crate::causes::kernel_trace::TraceOptions>,
}

impl HourglassSpec {
    /// The run plan: the threads as given, the trace's records shared by the polling threads'
    /// rings, the `/proc` sampler at its default rate.
    pub fn plan(&self) -> RunPlan {
        RunPlan {
            kind: <super::HourglassProbe as crate::probe::Probe>::KIND,
            threads: self.threads.clone(),
            duration_ns: self.duration_ns,
            gap_ns: self.gap_ns,
            gap_histogram: self.gap_histogram,
            gap_stats: true,
            memmove_bytes: 0,
            ring_records: self.records,
            counter: self.counter,
            main_cpu: self.main_cpu,
            allow_rt_busy: self.allow_rt_busy,
            cpu_dma_latency_us: self.cpu_dma_latency_us,
            loads: self.loads.clone(),
            sample_hz: crate::causes::DEFAULT_SAMPLE_HZ,
            trace: self.trace,
            threshold: None,
            output_dir: self.output_dir.clone(),
            config: serde_json::json!({
                "raw_cycles": self.raw_cycles,
                "records": self.records,
                "suppress_trace": self.suppress_trace,
            }),
        }
    }
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Run(HourglassSpec),
    Help,
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CmdlineError {
    #[error("-n is required: give the number of threads to create, for example -n 1")]
    MissingThreadCount,
    #[error("-n {0}: the number of threads must be from 1 to {MAX_THREADS}")]
    ThreadCount(String),
    #[error("{option} needs {what}")]
    MissingValue { option: String, what: String },
    #[error("unknown option '{0}': see 'sandglass hourglass --help'")]
    UnknownOption(String),
    #[error("unexpected '{0}': every value follows an option (see 'sandglass hourglass --help')")]
    Unexpected(String),
    #[error("{option} {value}: {source}")]
    Time {
        option: String,
        value: String,
        #[source]
        source: DurationError,
    },
    #[error("{option} {value}: {detail}")]
    Invalid {
        option: String,
        value: String,
        detail: String,
    },
    #[error("-p {value}: {source}")]
    Policy {
        value: String,
        #[source]
        source: PolicyError,
    },
    #[error("{0}")]
    Timer(#[from] TimerError),
    #[error("{option} {value}: {source}")]
    Cpus {
        option: String,
        value: String,
        #[source]
        source: CpuListError,
    },
    #[error("{option} applies to a thread: put -t N (one thread) or -a (all threads) before it")]
    NoThreadSelected { option: String },
    #[error("-t {index} is out of range: -n {n} creates threads 0 to {}", n - 1)]
    ThreadOutOfRange { index: usize, n: usize },
    #[error("unknown workload '{0}': use CPU, CPU_SCAN, CPU_YIELD, CPU_SCAN_YIELD, PERIODIC, CPU_PERIODIC or LAT")]
    UnknownWorkload(String),
    #[error("-w {workload} needs {args}, for example -w {example}")]
    WorkloadArgs {
        workload: String,
        args: String,
        example: String,
    },
    #[error("thread {thread}: {detail}")]
    Thread { thread: usize, detail: String },
}

/// A per-thread option, recorded in order and applied once `-n` is known.
#[derive(Clone, Debug)]
enum ThreadOpt {
    Priority(String, Policy),
    Reservation(Reservation),
    Workload(Workload),
    Timer(TimerKind),
    Start(Nanos),
    Finish(Nanos),
    Affinity(CpuList),
}

#[derive(Clone, Copy, Debug)]
enum Target {
    One(usize),
    All,
}

/// The help text printed by `sandglass hourglass --help`.
pub const HELP: &str = "\
usage: sandglass hourglass <options>

Runs Hourglass (Regehr, USENIX 2002): threads that poll the cycle counter and record exactly
when each of them held a CPU. The options are those of Hourglass 0.5 (Appendix A).

global options:
    -n <number of threads to create> -- the only mandatory option
    -d <duration of experiment> (default is 10s)
    -c -- also print the raw execution trace (counter ticks, not based at zero)
    -t <thread number for subsequent options to affect, 0..n-1>
    -a -- subsequent per-thread options apply to all threads, until the next -t
    -e <records in flight> (default 300000) -- shared among the polling threads' rings to
                     the main thread, which writes every record; raise it if records are dropped
    -g <time> -- gap threshold (default: calibrated and printed)
    -gh -- print the histogram of polling-loop iteration times with percentiles
    -x -- do not print execution intervals

per-thread options:
    -p <priority> -- IDLE, LOW, NORMAL, HIGH, HIGHEST (timesharing, default NORMAL),
                     RTLOW, RTMED, RTHIGH (SCHED_FIFO 10, 50, 95), or o:NICE, b, i,
                     f:PRIO, r:PRIO, d:RUNTIME:PERIOD, d:RUNTIME:DEADLINE:PERIOD
    -rh <amount> <period> -- hard CPU reservation (SCHED_DEADLINE)
    -rs <amount> <period> -- soft CPU reservation (SCHED_DEADLINE with reclaiming)
    -w <workload>
        CPU -- cpu-bound execution trace (default)
        CPU_SCAN <size> -- cpu-bound and also scans an array that is size KB long
        CPU_YIELD <amount> -- yield the processor after getting <amount> of CPU time
        CPU_SCAN_YIELD <size> <amount> -- combine scanning and yielding behaviours
        PERIODIC <amount> <period> -- periodic task, make execution trace
        CPU_PERIODIC <amount> <period> -- cpu-bound periodic: a new period starts
            each time <amount> is received; a miss for each period without one
        LAT <period> -- dispatch latency test
    -i <timer> -- NATIVE (relative nanosleep, default), HR (clock_nanosleep,
                  absolute), TIMERFD, POSIX (timer_create), BUSY (spin), RTC (/dev/rtc)
    -s <time> -- start running this thread <time> into the run
    -f <time> -- terminate this thread <time> into the run
    --affinity <cpus> -- CPUs this thread may run on (default: one measured CPU
                         shared by all threads, as on the paper's uniprocessor)

sandglass options:
    -o, --output <dir> -- run directory (default ./sandglass-runs/<id>)
    --main-cpu <cpu> -- CPU for the main thread (default: one no thread uses)
    --allow-rt-busy -- allow real-time threads that never block on every CPU
    --require-rtc -- refuse to run when -i RTC cannot have /dev/rtc's periodic
                     interrupts (default: such threads use HR, with a warning
                     recorded in the run)
    -q, --quiet -- print nothing but errors (the run directory keeps everything)
    --json -- print the result as one JSON object (the run's summary.json) instead
              of the paper's formats
    --shared-cpus -- measure CPUs another sandglass is measuring (each counts the other
        as noise; the run records it with a warning) instead of refusing
    --counter auto|tsc|raw -- clock the gap detector polls (default auto)
    --cpu-dma-latency <us>|off -- hold /dev/cpu_dma_latency during the run
                                  (default 0, as cyclictest does)
    --load <profile> -- run a load during the run: cpu, cpu+disk, net:2@1,
                        stress-ng:ARGS, ... (see docs/loads.md); repeatable
    --load-cmd <command> -- run a command (sh -c) as a load; repeatable
    --settle <time> -- how long loads run before the measurement (default 2s)
    --trace -- record kernel events on the measured CPUs (root) and name what ran
               during every preemption gap (see docs/causes.md)
    -h, --help -- this text

Times are self-describing; valid examples are: 3m, 1.5s, 1020ms, 87.0us, 250ns.

Output, after the run: execution-trace lines 'ID START END DURATION GAP' in ms,
'cycles:' lines with -c, 'latlate: <us>' for LAT threads, 'thread N: missed X
deadlines, hit Y' for periodic threads, and a summary whose lines start with '#'.
";

struct Words<'a> {
    words: &'a [String],
    pos: usize,
}

impl<'a> Words<'a> {
    fn next(&mut self) -> Option<&'a str> {
        let w = self.words.get(self.pos).map(String::as_str);
        self.pos += 1;
        w
    }
    fn value(&mut self, option: &str, what: &str) -> Result<&'a str, CmdlineError> {
        match self.words.get(self.pos) {
            Some(w) if !looks_like_option(w) => {
                self.pos += 1;
                Ok(w.as_str())
            }
            _ => Err(CmdlineError::MissingValue {
                option: option.to_string(),
                what: what.to_string(),
            }),
        }
    }
}

/// True for `-x`, `--long` words (but not for negative numbers such as `-1s`, which reach the
/// value parser and get its clearer message).
fn looks_like_option(w: &str) -> bool {
    let mut c = w.chars();
    c.next() == Some('-')
        && c.next()
            .is_some_and(|ch| ch.is_ascii_alphabetic() || ch == '-')
}

fn time(option: &str, value: &str) -> Result<Nanos, CmdlineError> {
    duration::parse(value).map_err(|source| CmdlineError::Time {
        option: option.to_string(),
        value: value.to_string(),
        source,
    })
}

fn positive_time(option: &str, value: &str) -> Result<Nanos, CmdlineError> {
    let t = time(option, value)?;
    if t == Nanos::ZERO {
        return Err(CmdlineError::Invalid {
            option: option.to_string(),
            value: value.to_string(),
            detail: "must be longer than zero".to_string(),
        });
    }
    Ok(t)
}

fn count(option: &str, value: &str, max: usize) -> Result<usize, CmdlineError> {
    match value.parse::<usize>() {
        Ok(v) if (1..=max).contains(&v) => Ok(v),
        _ => Err(CmdlineError::Invalid {
            option: option.to_string(),
            value: value.to_string(),
            detail: format!("must be a whole number from 1 to {max}"),
        }),
    }
}

fn parse_workload(w: &mut Words<'_>) -> Result<Workload, CmdlineError> {
    let name = w.value(
        "-w",
        "a workload: CPU, CPU_SCAN, CPU_YIELD, CPU_SCAN_YIELD, PERIODIC, CPU_PERIODIC or LAT",
    )?;
    let upper = name.to_ascii_uppercase();
    let args_err = |args: &str, example: &str| CmdlineError::WorkloadArgs {
        workload: upper.clone(),
        args: args.to_string(),
        example: example.to_string(),
    };
    let kb = |w: &mut Words<'_>, args: &str, example: &str| -> Result<u64, CmdlineError> {
        let v = w.value("-w", args).map_err(|_| args_err(args, example))?;
        match v.parse::<u64>() {
            Ok(k) if (1..=64 * 1024 * 1024).contains(&k) => Ok(k),
            _ => Err(CmdlineError::Invalid {
                option: format!("-w {upper}"),
                value: v.to_string(),
                detail: "the size is a whole number of KB from 1 to 67108864 (64 GiB)".to_string(),
            }),
        }
    };
    let t = |w: &mut Words<'_>, args: &str, example: &str| -> Result<Nanos, CmdlineError> {
        let v = w.value("-w", args).map_err(|_| args_err(args, example))?;
        positive_time(&format!("-w {upper}"), v)
    };
    let amount_period = |w: &mut Words<'_>,
                         example: &str|
     -> Result<(Nanos, Nanos), CmdlineError> {
        let a = t(w, "<amount> <period>", example)?;
        let p = t(w, "<amount> <period>", example)?;
        if a > p {
            return Err(CmdlineError::Invalid {
                option: format!("-w {upper}"),
                value: format!("{} {}", duration::format_exact(a), duration::format_exact(p)),
                detail: "the amount exceeds the period, so every period would be a miss; give an amount no larger than the period".to_string(),
            });
        }
        Ok((a, p))
    };
    Ok(match upper.as_str() {
        "CPU" => Workload::Cpu,
        "CPU_SCAN" => Workload::CpuScan {
            size_kb: kb(w, "<size in KB>", "CPU_SCAN 64")?,
        },
        "CPU_YIELD" => Workload::CpuYield {
            amount_ns: t(w, "<amount>", "CPU_YIELD 0.9ms")?,
        },
        "CPU_SCAN_YIELD" => {
            let size_kb = kb(w, "<size in KB> <amount>", "CPU_SCAN_YIELD 64 0.9ms")?;
            let amount_ns = t(w, "<size in KB> <amount>", "CPU_SCAN_YIELD 64 0.9ms")?;
            Workload::CpuScanYield { size_kb, amount_ns }
        }
        "PERIODIC" => {
            let (amount_ns, period_ns) = amount_period(w, "PERIODIC 4ms 5ms")?;
            Workload::Periodic {
                amount_ns,
                period_ns,
            }
        }
        "CPU_PERIODIC" => {
            let (amount_ns, period_ns) = amount_period(w, "CPU_PERIODIC 10ms 50ms")?;
            Workload::CpuPeriodic {
                amount_ns,
                period_ns,
            }
        }
        "LAT" => Workload::Lat {
            period_ns: t(w, "<period>", "LAT 1ms")?,
        },
        _ => return Err(CmdlineError::UnknownWorkload(name.to_string())),
    })
}

fn parse_reservation(w: &mut Words<'_>, option: &str) -> Result<Reservation, CmdlineError> {
    let what = "<amount> <period>, for example 3.1ms 8ms";
    let a = w.value(option, what)?;
    let p = w.value(option, what)?;
    let amount = positive_time(option, a)?;
    let period = positive_time(option, p)?;
    let invalid = |detail: String| CmdlineError::Invalid {
        option: option.to_string(),
        value: format!("{a} {p}"),
        detail,
    };
    if amount > period {
        return Err(invalid(
            "the amount exceeds the period: a reservation cannot give more than 100% of a CPU"
                .to_string(),
        ));
    }
    if amount < DEADLINE_MIN_RUNTIME {
        return Err(invalid(
            "SCHED_DEADLINE needs an amount of at least 1.024us".to_string(),
        ));
    }
    Ok(Reservation {
        amount_ns: amount,
        period_ns: period,
        soft: option == "-rs",
    })
}

/// Parses the words after `sandglass hourglass`.
pub fn parse(args: &[String]) -> Result<Command, CmdlineError> {
    let mut w = Words {
        words: args,
        pos: 0,
    };
    let mut n: Option<usize> = None;
    let mut duration = DEFAULT_DURATION;
    let mut raw_cycles = false;
    let mut records = DEFAULT_RECORDS;
    let mut gap = None;
    let mut gap_histogram = false;
    let mut suppress_trace = false;
    let mut output_dir = None;
    let mut main_cpu = None;
    let mut allow_rt_busy = false;
    let mut require_rtc = false;
    let mut trace = None;
    let mut counter = CounterChoice::Auto;
    let mut cpu_dma_latency_us = Some(0u32);
    let mut load_specs = Vec::new();
    let mut settle = None;
    let mut target: Option<Target> = None;
    let mut ops: Vec<(Target, ThreadOpt)> = Vec::new();
    let mut selected: Vec<usize> = Vec::new();

    while let Some(word) = w.next() {
        let mut per_thread = |opt: ThreadOpt, name: &str| -> Result<(), CmdlineError> {
            match target {
                Some(t) => {
                    ops.push((t, opt));
                    Ok(())
                }
                None => Err(CmdlineError::NoThreadSelected {
                    option: name.to_string(),
                }),
            }
        };
        match word {
            "-h" | "--help" | "-help" => return Ok(Command::Help),
            "-n" => {
                let v = w.value("-n", "the number of threads, for example -n 1")?;
                n = Some(
                    count("-n", v, MAX_THREADS)
                        .map_err(|_| CmdlineError::ThreadCount(v.to_string()))?,
                );
            }
            "-d" => {
                let v = w.value("-d", "a duration, for example -d 10s")?;
                duration = positive_time("-d", v)?;
            }
            "-c" => raw_cycles = true,
            "-t" => {
                let v = w.value("-t", "a thread number, for example -t 0")?;
                let i = v.parse::<usize>().map_err(|_| CmdlineError::Invalid {
                    option: "-t".into(),
                    value: v.into(),
                    detail: "the thread number must be a whole number from 0 to n-1".into(),
                })?;
                selected.push(i);
                target = Some(Target::One(i));
            }
            "-a" => target = Some(Target::All),
            "-e" => {
                let v = w.value("-e", "a number of records, for example -e 300000")?;
                records = count("-e", v, crate::plan::MAX_RING_RECORDS)?;
            }
            "-g" => {
                let v = w.value("-g", "a gap threshold, for example -g 500ns")?;
                gap = Some(positive_time("-g", v)?);
            }
            "-gh" => gap_histogram = true,
            "-x" => suppress_trace = true,
            "-p" => {
                let v = w.value(
                    "-p",
                    "a priority such as NORMAL or RTHIGH, or a policy such as f:95",
                )?;
                let p = Policy::parse(v).map_err(|source| CmdlineError::Policy {
                    value: v.to_string(),
                    source,
                })?;
                per_thread(ThreadOpt::Priority(v.to_string(), p), "-p")?;
            }
            "-rh" | "-rs" => {
                let r = parse_reservation(&mut w, word)?;
                per_thread(ThreadOpt::Reservation(r), word)?;
            }
            "-w" => {
                let wl = parse_workload(&mut w)?;
                per_thread(ThreadOpt::Workload(wl), "-w")?;
            }
            "-i" => {
                let v = w.value("-i", "a timer: NATIVE, HR, TIMERFD, POSIX, BUSY or RTC")?;
                per_thread(ThreadOpt::Timer(TimerKind::parse(v)?), "-i")?;
            }
            "-s" => {
                let v = w.value("-s", "a start time, for example -s 1s")?;
                per_thread(ThreadOpt::Start(time("-s", v)?), "-s")?;
            }
            "-f" => {
                let v = w.value("-f", "a finish time, for example -f 5s")?;
                per_thread(ThreadOpt::Finish(positive_time("-f", v)?), "-f")?;
            }
            "--affinity" => {
                let v = w.value(
                    "--affinity",
                    "a CPU list, for example --affinity 1 or 0-3,6",
                )?;
                let c = CpuList::parse(v).map_err(|source| CmdlineError::Cpus {
                    option: "--affinity".into(),
                    value: v.into(),
                    source,
                })?;
                per_thread(ThreadOpt::Affinity(c), "--affinity")?;
            }
            "-o" | "--output" => {
                let v = w.value(word, "a directory for the run")?;
                output_dir = Some(PathBuf::from(v));
            }
            "--main-cpu" => {
                let v = w.value("--main-cpu", "a CPU number, for example --main-cpu 0")?;
                let c = CpuList::parse(v).map_err(|source| CmdlineError::Cpus {
                    option: "--main-cpu".into(),
                    value: v.into(),
                    source,
                })?;
                if c.len() != 1 {
                    return Err(CmdlineError::Invalid {
                        option: "--main-cpu".into(),
                        value: v.into(),
                        detail: "give exactly one CPU".into(),
                    });
                }
                main_cpu = Some(c.first());
            }
            "--allow-rt-busy" => allow_rt_busy = true,
            "--require-rtc" => require_rtc = true,
            "--trace" => trace = Some(crate::causes::kernel_trace::TraceOptions::default()),
            "--load" => {
                let v = w.value("--load", "a load profile, for example --load cpu+disk")?;
                let specs = crate::load::parse_profile(v).map_err(|e| CmdlineError::Invalid {
                    option: "--load".into(),
                    value: v.into(),
                    detail: e.to_string(),
                })?;
                load_specs.extend(specs);
            }
            "--load-cmd" => {
                let v = w.value("--load-cmd", "a command, for example --load-cmd 'make -j4'")?;
                load_specs.push(crate::load::LoadSpec::command(v));
            }
            "--settle" => {
                let v = w.value("--settle", "a time, for example --settle 2s")?;
                settle = Some(duration::parse(v).map_err(|source| CmdlineError::Invalid {
                    option: "--settle".into(),
                    value: v.into(),
                    detail: source.to_string(),
                })?);
            }
            "--cpu-dma-latency" => {
                let v = w.value("--cpu-dma-latency", "a latency in microseconds, or off")?;
                cpu_dma_latency_us = crate::policy::parse_cpu_dma_latency(v).map_err(|detail| {
                    CmdlineError::Invalid {
                        option: "--cpu-dma-latency".into(),
                        value: v.into(),
                        detail,
                    }
                })?;
            }
            "--counter" => {
                let v = w.value("--counter", "auto, tsc or raw")?;
                counter = match v {
                    "auto" => CounterChoice::Auto,
                    "tsc" => CounterChoice::Tsc,
                    "raw" => CounterChoice::Raw,
                    _ => {
                        return Err(CmdlineError::Invalid {
                            option: "--counter".into(),
                            value: v.into(),
                            detail: "use auto, tsc or raw".into(),
                        })
                    }
                };
            }
            other if looks_like_option(other) => {
                return Err(CmdlineError::UnknownOption(other.to_string()))
            }
            other => return Err(CmdlineError::Unexpected(other.to_string())),
        }
    }

    let n = n.ok_or(CmdlineError::MissingThreadCount)?;
    if let Some(&index) = selected.iter().find(|&&i| i >= n) {
        return Err(CmdlineError::ThreadOutOfRange { index, n });
    }

    struct Draft {
        priority: Option<(String, Policy)>,
        reservation: Option<Reservation>,
        workload: Workload,
        timer: TimerKind,
        start: Nanos,
        finish: Option<Nanos>,
        affinity: Option<CpuList>,
    }
    let mut drafts: Vec<Draft> = (0..n)
        .map(|_| Draft {
            priority: None,
            reservation: None,
            workload: Workload::Cpu,
            timer: TimerKind::Native,
            start: Nanos::ZERO,
            finish: None,
            affinity: None,
        })
        .collect();
    for (t, opt) in ops {
        let idx: Vec<usize> = match t {
            Target::One(i) => vec![i],
            Target::All => (0..n).collect(),
        };
        for i in idx {
            let d = &mut drafts[i];
            match &opt {
                ThreadOpt::Priority(text, p) => d.priority = Some((text.clone(), *p)),
                ThreadOpt::Reservation(r) => d.reservation = Some(*r),
                ThreadOpt::Workload(wl) => d.workload = *wl,
                ThreadOpt::Timer(k) => d.timer = *k,
                ThreadOpt::Start(s) => d.start = *s,
                ThreadOpt::Finish(f) => d.finish = Some(*f),
                ThreadOpt::Affinity(c) => d.affinity = Some(c.clone()),
            }
        }
    }

    let mut threads = Vec::with_capacity(n);
    for (index, d) in drafts.into_iter().enumerate() {
        let terr = |detail: String| CmdlineError::Thread {
            thread: index,
            detail,
        };
        let finish = d.finish.unwrap_or(duration);
        if finish > duration {
            return Err(terr(format!(
                "-f {} is after the end of the run (-d {}); give -f no later than -d",
                duration::format_exact(finish),
                duration::format_exact(duration)
            )));
        }
        if d.start >= finish {
            return Err(terr(format!(
                "-s {} is not before its finish at {}; the thread would never run",
                duration::format_exact(d.start),
                duration::format_exact(finish)
            )));
        }
        let (priority_text, policy) = match (&d.priority, d.reservation) {
            (Some((text, _)), Some(_)) => {
                return Err(terr(format!(
                    "-p {text} and a reservation (-rh/-rs) both set the scheduling policy; on Linux a thread has one policy: keep one of them"
                )))
            }
            (_, Some(r)) => {
                let p = Policy::deadline(r.amount_ns, r.period_ns, r.period_ns, r.soft)
                    .ok_or_else(|| terr("the reservation breaks SCHED_DEADLINE's rules".into()))?;
                (
                    format!(
                        "{} {} {}",
                        if r.soft { "-rs" } else { "-rh" },
                        duration::format_exact(r.amount_ns),
                        duration::format_exact(r.period_ns)
                    ),
                    p,
                )
            }
            (Some((text, p)), None) => (text.clone(), *p),
            (None, None) => ("NORMAL".to_string(), Policy::Other { nice: 0 }),
        };
        if policy.is_deadline() && d.affinity.is_some() {
            return Err(terr("SCHED_DEADLINE threads cannot be pinned with --affinity: the kernel requires their affinity to span the whole root domain (it answers EPERM otherwise)".into()));
        }
        threads.push(ThreadSpec {
            index,
            priority_text,
            policy,
            reservation: d.reservation,
            workload: d.workload,
            timer: d.timer,
            start_ns: d.start,
            finish_ns: finish,
            affinity: d.affinity,
        });
    }

    Ok(Command::Run(HourglassSpec {
        threads,
        duration_ns: duration,
        raw_cycles,
        records,
        gap_ns: gap,
        gap_histogram,
        suppress_trace,
        output_dir,
        main_cpu,
        allow_rt_busy,
        require_rtc,
        trace,
        counter,
        cpu_dma_latency_us,
        loads: LoadPlan {
            settle_ns: if load_specs.is_empty() {
                Nanos::ZERO
            } else {
                settle.unwrap_or(DEFAULT_SETTLE)
            },
            specs: load_specs,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn spec(s: &str) -> HourglassSpec {
        match parse(&words(s)) {
            Ok(Command::Run(spec)) => spec,
            other => panic!("{s}: {other:?}"),
        }
    }

    fn err(s: &str) -> String {
        match parse(&words(s)) {
            Err(e) => e.to_string(),
            other => panic!("{s} should fail: {other:?}"),
        }
    }

    /// Every command line printed in the Hourglass paper parses as written.
    #[test]
    fn paper_command_lines() {
        let s = spec("-n 3 -d 5s -t 0 -p LOW -t 1 -p NORMAL -t 2 -p HIGH");
        assert_eq!(s.threads.len(), 3);
        assert_eq!(s.duration_ns, Nanos::from_secs(5));
        assert_eq!(s.threads[0].policy, Policy::Other { nice: 10 });
        assert_eq!(s.threads[2].policy, Policy::Other { nice: -10 });
        assert_eq!(s.threads[1].workload, Workload::Cpu);

        let s = spec("-d 60s -n 10 -a -p NORMAL -w CPU");
        assert!(s.threads.iter().all(|t| t.workload == Workload::Cpu));

        let s = spec("-d 60s -n 10 -a -p NORMAL -w CPU_YIELD 0.9ms");
        assert!(s.threads.iter().all(|t| t.workload
            == Workload::CpuYield {
                amount_ns: Nanos(900_000)
            }));

        let s = spec("-d 6m -n 1 -t 0 -p RTHIGH -w LAT 5.3ms -i RTC");
        assert_eq!(s.duration_ns, Nanos::from_secs(360));
        assert_eq!(s.threads[0].timer, TimerKind::Rtc);
        assert_eq!(
            s.threads[0].workload,
            Workload::Lat {
                period_ns: Nanos(5_300_000)
            }
        );

        let s = spec("-d 20s -n 1 -t 0 -p RTHIGH -w PERIODIC 4ms 5ms -i RTC");
        assert_eq!(s.threads[0].policy, Policy::Fifo { priority: 95 });

        let s = spec(
            "-n 2 -t 0 -p RTMED -w PERIODIC 3ms 8ms -i HR -t 1 -p RTLOW -w PERIODIC 17ms 33ms -i NATIVE",
        );
        assert_eq!(s.duration_ns, DEFAULT_DURATION);
        assert_eq!(s.threads[0].timer, TimerKind::Hr);
        assert_eq!(s.threads[1].timer, TimerKind::Native);
        assert_eq!(s.threads[1].policy, Policy::Fifo { priority: 10 });

        spec("-n 2 -t 0 -p RTMED -w PERIODIC 3ms 8ms -i HR -t 1 -p RTLOW -w PERIODIC 17ms 33ms -i HR");
        spec("-n 2 -t 0 -p RTMED -w PERIODIC 3ms 8ms -i HR -t 1 -p RTLOW -w PERIODIC 12ms 33ms -i NATIVE");

        let s = spec(
            "-n 2 -t 0 -w PERIODIC 3ms 8ms -rh 3ms 8ms -t 1 -w PERIODIC 17ms 33ms -rh 17ms 33ms",
        );
        assert!(s.threads.iter().all(|t| t.policy.is_deadline()));
        let s = spec("-n 2 -t 0 -w PERIODIC 3ms 8ms -rh 3.1ms 8ms -t 1 -w PERIODIC 17ms 33ms -rh 17.1ms 33ms");
        assert_eq!(
            s.threads[0].reservation,
            Some(Reservation {
                amount_ns: Nanos(3_100_000),
                period_ns: Nanos(8_000_000),
                soft: false
            })
        );
        let s = spec("-n 1 -t 0 -w PERIODIC 3ms 8ms -rs 3.1ms 8ms");
        assert!(matches!(
            s.threads[0].policy,
            Policy::Deadline { reclaim: true, .. }
        ));
    }

    #[test]
    fn options_apply_in_order() {
        let s = spec("-n 3 -a -p LOW -t 0 -p HIGH -a -i HR");
        assert_eq!(s.threads[0].policy, Policy::Other { nice: -10 });
        assert_eq!(s.threads[1].policy, Policy::Other { nice: 10 });
        assert!(s.threads.iter().all(|t| t.timer == TimerKind::Hr));
        let s =
            spec("-t 1 -w LAT 1ms -n 2 -c -x -gh -g 1us -e 1000 -o out --main-cpu 0 --counter raw");
        assert_eq!(s.records, 1000);
        assert_eq!(s.gap_ns, Some(Nanos(1000)));
        assert!(s.raw_cycles && s.suppress_trace && s.gap_histogram);
        assert_eq!(s.counter, CounterChoice::Raw);
        assert_eq!(s.main_cpu, Some(0));
        assert_eq!(s.cpu_dma_latency_us, Some(0));
        assert_eq!(spec("-n 1 --cpu-dma-latency off").cpu_dma_latency_us, None);
        assert_eq!(
            spec("-n 1 --cpu-dma-latency 10").cpu_dma_latency_us,
            Some(10)
        );
        let s = spec("-n 1 -t 0 -s 1s -f 2s --affinity 0-1");
        assert_eq!(s.threads[0].start_ns, Nanos::from_secs(1));
        assert_eq!(s.threads[0].finish_ns, Nanos::from_secs(2));
        assert_eq!(s.threads[0].affinity.as_ref().map(|c| c.len()), Some(2));
        assert_eq!(parse(&words("--help")), Ok(Command::Help));
        assert_eq!(parse(&words("-n 1 -h")), Ok(Command::Help));
    }

    /// The acceptance list's bad inputs each get one clear message.
    #[test]
    fn bad_input() {
        assert!(err("-n 1 -t 0 -w SPIN").contains("unknown workload 'SPIN'"));
        assert!(err("-n 1 -t 0 -w PERIODIC 4ms").contains("needs <amount> <period>"));
        assert!(err("-n 1 -t 0 -w PERIODIC 4ms -i HR").contains("needs <amount> <period>"));
        assert!(err("-n 1 -t 0 -w LAT").contains("needs <period>"));
        assert!(err("-n 1 -d 10").contains("has no unit"));
        assert!(err("-n 1 -d 10parsecs").contains("unknown unit"));
        assert!(err("-n 1 -d -1s").contains("negative"));
        assert!(
            err("-n 2 -t 2 -p LOW").contains("-t 2 is out of range: -n 2 creates threads 0 to 1")
        );
        assert!(err("-n 0").contains("from 1 to"));
        assert!(err("-n 1 -t 0 -rh 9ms 8ms").contains("amount exceeds the period"));
        assert!(err("-n 1 -t 0 -i MM").contains("use -i HR"));
        assert!(err("-d 1s").contains("-n is required"));
        assert!(err("-n 1 -p HIGH").contains("put -t N"));
        assert!(err("-n 1 -z").contains("unknown option '-z'"));
        assert!(err("-n 1 banana").contains("unexpected 'banana'"));
        assert!(err("-n 1 -t 0 -p RTHIGH -rh 3ms 8ms").contains("one policy"));
        assert!(err("-n 1 -t 0 -f 20s").contains("after the end of the run"));
        assert!(err("-n 1 -t 0 -s 10s").contains("never run"));
        assert!(err("-n 1 -t 0 -w PERIODIC 6ms 5ms").contains("exceeds the period"));
        assert!(err("-n 1 -t 0 -w CPU_SCAN x").contains("whole number of KB"));
        assert!(err("-n 1 -t 0 -w CPU_YIELD 0ms").contains("longer than zero"));
        assert!(err("-n 1 -t 0 -p f:200").contains("from 1 to 99"));
        assert!(err("-n 1 -e 0").contains("from 1 to"));
        assert!(err("-n 1 -t 0 -rh 3ms 8ms --affinity 1").contains("root domain"));
        assert!(err("-n 1 --counter fast").contains("auto, tsc or raw"));
        assert!(err("-n 1 -t 0 -rh 1ns 8ms").contains("1.024us"));
        assert!(err("-n 1 --cpu-dma-latency soon").contains("microseconds"));
    }

    proptest! {
        #[test]
        fn never_panics(ws in proptest::collection::vec(
            prop_oneof![
                Just("-n".to_string()), Just("-t".to_string()), Just("-a".to_string()),
                Just("-w".to_string()), Just("-p".to_string()), Just("-rh".to_string()),
                Just("-i".to_string()), Just("-s".to_string()), Just("-f".to_string()),
                Just("-d".to_string()), Just("PERIODIC".to_string()), Just("LAT".to_string()),
                Just("CPU_SCAN".to_string()), Just("HR".to_string()), Just("RTHIGH".to_string()),
                "[0-9]{1,3}(ms|us|s|)", "[-a-z0-9:.]{0,6}",
            ], 0..14)) {
            let _ = parse(&ws);
        }
    }
}
