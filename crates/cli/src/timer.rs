//! `sandglass timer`: timer wakeup latency on every chosen CPU.

use crate::common::{cpus_arg, pm_qos_arg, policy_arg, time_arg, Failure, LoadFlags, TraceFlags};
use clap::Args;
use sandglass::model::TimerKind;
use sandglass::timer::{self, TimerConfig};
use sandglass::units::Nanos;

/// Options of `sandglass timer`.
#[derive(Args)]
pub struct TimerArgs {
    /// CPUs to measure, such as 1 or 0-3,6 (default: every CPU but the main thread's)
    #[arg(short = 'c', long = "cpus", allow_hyphen_values = true)]
    pub cpus: Option<String>,
    /// Measure CPUs another sandglass is measuring (each counts the other as noise; the run
    /// records it with a warning) instead of refusing
    #[arg(long)]
    pub shared_cpus: bool,
    /// Scheduling policy: f:PRIO, r:PRIO, o:NICE, b or i; SCHED_OTHER with a warning when
    /// real-time priorities are not permitted
    #[arg(
        short = 'P',
        long = "policy",
        default_value = "f:95",
        allow_hyphen_values = true
    )]
    pub policy: String,
    /// Time between releases
    #[arg(short = 'i', long, default_value = "1ms", allow_hyphen_values = true)]
    pub interval: String,
    /// How long to measure
    #[arg(short = 'd', long, default_value = "10s", allow_hyphen_values = true)]
    pub duration: String,
    /// How to wait: hr (clock_nanosleep, absolute), native (relative nanosleep), timerfd,
    /// posix (timer_create) or busy (spin)
    #[arg(long, default_value = "hr", value_parser = crate::common::TIMER)]
    pub timer: TimerKind,
    /// absolute: releases on a fixed grid, as cyclictest; resync: one interval after each
    /// wakeup, as Hourglass's LAT
    #[arg(
        long = "mode",
        value_name = "MODE",
        default_value = "absolute",
        value_parser = crate::common::MODE,
        action = clap::ArgAction::Set
    )]
    pub resync: bool,
    /// Thresholds of the "samples later than" table, such as 100us,1ms (default: 1, 5, 10 and
    /// 50 ms plus a hundredth, a twentieth, a tenth and a half of the interval)
    #[arg(long, value_delimiter = ',')]
    pub thresholds: Option<Vec<String>>,
    /// Bin width of the interval histogram
    #[arg(long, default_value = "100us")]
    pub interval_bin: String,
    /// Hold /dev/cpu_dma_latency at this many µs during the run, or off
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    pub cpu_dma_latency: String,
    /// CPU for the main thread (default: the lowest CPU no measuring thread uses)
    #[arg(long)]
    pub main_cpu: Option<String>,
    #[command(flatten)]
    pub run: crate::common::RunFlags,
    /// What the engine reads for time: auto, tsc or raw
    #[arg(long, default_value = "auto", value_parser = crate::common::COUNTER)]
    pub counter: sandglass::clock::CounterChoice,
    #[command(flatten)]
    pub loads: LoadFlags,
    /// Snapshots per second of /proc/interrupts, softirqs, stat and the threads' context
    /// switches, which explain spikes (0: none)
    #[arg(long, value_name = "HZ", default_value_t = sandglass::causes::DEFAULT_SAMPLE_HZ, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub sample_rate: u32,
    #[command(flatten)]
    pub trace: TraceFlags,
    /// Explain every release at least this late, such as 30us (default: 100 µs or ten times
    /// the median lateness, whichever is larger)
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub explain_above: Option<String>,
}

/// Turns the options into a configuration, refusing bad values with one clear line.
pub fn config(a: &TimerArgs) -> Result<TimerConfig, Failure> {
    let interval = time_arg("-i", &a.interval)?;
    let (kind, resync) = (a.timer, a.resync);
    let thresholds = match &a.thresholds {
        Some(list) => list
            .iter()
            .map(|t| time_arg("--thresholds", t))
            .collect::<Result<Vec<_>, _>>()?,
        None => timer::default_thresholds(interval),
    };
    let main_cpu = crate::common::main_cpu_arg(a.main_cpu.as_deref())?;
    let c = TimerConfig {
        cpus: a.cpus.as_deref().map(|v| cpus_arg("-c", v)).transpose()?,
        policy: policy_arg(&a.policy)?,
        interval_ns: interval,
        duration_ns: time_arg("-d", &a.duration)?,
        timer: kind,
        resync,
        duty: None,
        thresholds_ns: thresholds,
        interval_bin_ns: time_arg("--interval-bin", &a.interval_bin)?,
        main_cpu,
        cpu_dma_latency_us: pm_qos_arg(&a.cpu_dma_latency)?,
        output_dir: a.run.output.clone(),
        counter: a.counter,
        loads: a.loads.plan()?,
        sample_hz: a.sample_rate,
        trace: a.trace.options()?,
        threshold: a.trace.threshold()?,
        explain_above_ns: a
            .explain_above
            .as_deref()
            .map(|v| match time_arg("--explain-above", v)? {
                Nanos(0) => Err(Failure::usage(format!(
                    "--explain-above {v}: give a positive time such as 30us"
                ))),
                n => Ok(n),
            })
            .transpose()?,
    };
    timer::validate(&c).map_err(Failure::usage)?;
    Ok(c)
}

pub fn timer(a: &TimerArgs) -> Result<u8, Failure> {
    let c = config(a)?;
    crate::common::measure_and_print(
        "wakeups",
        a.run.json,
        a.shared_cpus,
        |ctx, console| timer::run(&c, ctx, console),
        |r| &r.run,
        sandglass_report::timer::write,
    )
}
