//! `sandglass noise`: OS noise on every chosen CPU.

use crate::common::{cpus_arg, pm_qos_arg, policy_arg, time_arg, Failure, LoadFlags, TraceFlags};
use clap::Args;
use sandglass::noise::{self, NoiseConfig};

/// Options of `sandglass noise`.
#[derive(Args)]
pub struct NoiseArgs {
    /// CPUs to measure, such as 1 or 0-3,6 (default: every CPU but the main thread's)
    #[arg(short = 'c', long = "cpus", allow_hyphen_values = true)]
    pub cpus: Option<String>,
    /// Measure CPUs another sandglass is measuring (each counts the other as noise; the run
    /// records it with a warning) instead of refusing
    #[arg(long)]
    pub shared_cpus: bool,
    /// Scheduling policy of the polling threads: o:NICE (default o:0, as oslat), f:PRIO, r:PRIO,
    /// b or i
    #[arg(
        short = 'P',
        long = "policy",
        default_value = "o:0",
        allow_hyphen_values = true
    )]
    pub policy: String,
    /// How long to measure
    #[arg(short = 'd', long, default_value = "10s", allow_hyphen_values = true)]
    pub duration: String,
    /// Gap threshold: reads further apart are an interruption (default: calibrated)
    #[arg(short = 'T', long, allow_hyphen_values = true)]
    pub threshold: Option<String>,
    /// Work between polls: memmove:SIZE (such as memmove:4K, as oslat's -w memmove -m 4K) or none
    #[arg(long, default_value = "none")]
    pub workload: String,
    /// Interruptions in flight to the main thread, which writes every one, shared among the CPUs' rings; raise it if some are dropped (default: sized from the run)
    #[arg(short = 'e', long)]
    pub records: Option<String>,
    /// Hold /dev/cpu_dma_latency at this many µs during the run, or off
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    pub cpu_dma_latency: String,
    /// CPU for the main thread (default: the lowest CPU no measuring thread uses)
    #[arg(long)]
    pub main_cpu: Option<String>,
    /// Allow real-time polling threads on every CPU (they could starve the machine)
    #[arg(long)]
    pub allow_rt_busy: bool,
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
}

/// Turns the options into a configuration, refusing bad values with one clear line.
pub fn config(a: &NoiseArgs) -> Result<NoiseConfig, Failure> {
    let main_cpu = crate::common::main_cpu_arg(a.main_cpu.as_deref())?;
    let records = match &a.records {
        Some(v) => Some(match v.parse::<usize>() {
            Ok(n) if (1..=sandglass::plan::MAX_RING_RECORDS).contains(&n) => n,
            _ => {
                return Err(Failure::usage(format!(
                    "-e {v}: give a whole number of records from 1 to {}",
                    sandglass::plan::MAX_RING_RECORDS
                )))
            }
        }),
        None => None,
    };
    let c = NoiseConfig {
        cpus: a.cpus.as_deref().map(|v| cpus_arg("-c", v)).transpose()?,
        policy: policy_arg(&a.policy)?,
        duration_ns: time_arg("-d", &a.duration)?,
        threshold_ns: a
            .threshold
            .as_deref()
            .map(|v| time_arg("-T", v))
            .transpose()?,
        memmove_bytes: noise::parse_workload(&a.workload).map_err(Failure::usage)?,
        records,
        main_cpu,
        allow_rt_busy: a.allow_rt_busy,
        cpu_dma_latency_us: pm_qos_arg(&a.cpu_dma_latency)?,
        output_dir: a.run.output.clone(),
        counter: a.counter,
        loads: a.loads.plan()?,
        sample_hz: a.sample_rate,
        trace: a.trace.options()?,
        threshold: a.trace.threshold()?,
    };
    noise::validate(&c).map_err(Failure::usage)?;
    Ok(c)
}

pub fn noise(a: &NoiseArgs) -> Result<u8, Failure> {
    let c = config(a)?;
    crate::common::measure_and_print(
        "interruptions",
        a.run.json,
        a.shared_cpus,
        |ctx, console| noise::run(&c, ctx, console),
        |r| &r.run,
        sandglass_report::noise::write,
    )
}
