//! `sandglass analyze`: schedulability, tail prediction, buffer underrun, cost models and
//! statistics, each with a readable answer and `--json`.

use crate::common::{print_json, time_arg, Failure};
use anyhow::Context;
use clap::{Args, Subcommand};
use sandglass::analysis::distribution::Distribution;
use sandglass::analysis::mttf::{self, Exceedance};
use sandglass::analysis::taskfile::Task;
use sandglass::analysis::{
    admission, datafile, edf, fit, rta, significance, switch_cost, taskfile, trace, two_rate,
    worst_case,
};
use sandglass::bounded;
use sandglass::experiments::rta_validate;
use sandglass::inputs;
use sandglass::units::Nanos;
use sandglass::RunKind;
use sandglass_report::analysis as render;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The version of every `analyze KIND --json` output: its `schema` is
/// `sandglass-analyze-KIND/` and this number (docs/json.md).
pub const JSON_VERSION: u32 = 1;

/// An analysis's JSON: its version, then the analysis's own fields.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct Analysis<T> {
    /// `sandglass-analyze-KIND/1`, such as `sandglass-analyze-rta/1`.
    pub schema: String,
    #[serde(flatten)]
    pub result: T,
}

/// An analysis that answers with a list: one row per case.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct Rows<T> {
    pub rows: Vec<T>,
}

/// `analyze ttest --json`: the test's figures first, then the whole test and, for two
/// independent samples, the Mann-Whitney U test beside it.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct Ttest {
    pub t: f64,
    pub df: f64,
    pub p: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    pub test: significance::TTest,
    pub mann_whitney: Option<significance::MannWhitney>,
}

/// Options of `sandglass analyze`.
#[derive(Args)]
pub struct AnalyzeArgs {
    #[command(subcommand)]
    pub kind: Kind,
}

#[derive(Subcommand)]
pub enum Kind {
    /// Fixed-priority response-time analysis of a TOML task set (Tindell, Burns & Wellings;
    /// arbitrary deadlines by busy periods, Lehoczky)
    Rta(SetArgs),
    /// Preemptive EDF: utilisation, density, the processor-demand test, response times (Spuri)
    Edf(SetArgs),
    /// SCHED_DEADLINE admission exactly as the kernel computes it
    Admission(AdmissionArgs),
    /// Mean time to buffer underrun, and the buffering a target needs (Cota-Robles & Held §5)
    Mttf(MttfArgs),
    /// Exceedance per unit of time and the expected worst case per hour, day and week
    WorstCase(WorstCaseArgs),
    /// Least-squares fit of t(N) = a + N/b to lines `SIZE_BYTES TIME` (Dannenberg §8)
    Fit(FileArgs),
    /// Clock-interrupt overhead from iteration rates at two tick rates (Dannenberg §6)
    TwoRate(TwoRateArgs),
    /// Indirect context-switch cost C = ((W1 - W10)/W1)·T/N10 (Hourglass §5.2)
    SwitchCost(SwitchCostArgs),
    /// Context switches inferred from an hourglass run's trace (Hourglass §5.1)
    Ctxsw(CtxswArgs),
    /// Run Hourglass §5.2's experiment: one CPU_SCAN thread against ten, per working-set size,
    /// and give the indirect context-switch cost with a t interval (the paper's Figure 5)
    CacheCost(CacheCostArgs),
    /// Welch's (or the paired) t test and Mann-Whitney U on two files of numbers
    Ttest(TtestArgs),
}

#[derive(Args)]
pub struct SetArgs {
    /// TOML task file: [[task]] tables with name, wcet, period, deadline, jitter, blocking,
    /// priority
    pub file: PathBuf,
    /// Fully non-preemptive scheduling (rta only)
    #[arg(long)]
    pub non_preemptive: bool,
    /// Release jitter of every task from a measured run: RUN@p99.99, the worst CPU's (or
    /// thread's) figure at that percentile, or RUN@p99.99:N for CPU or thread N; the pseudo
    /// worst case of Cota-Robles & Held §5.2
    #[arg(long)]
    pub jitter_from: Option<String>,
    /// A task's C from a measured run's execution times: TASK=RUN@p99 (or RUN@p99:THREAD)
    #[arg(long)]
    pub wcet_from: Vec<String>,
    /// Run the set on this machine as Hourglass PERIODIC threads, SCHED_FIFO in the analysed
    /// order on one CPU, and set predicted against observed misses and response times (rta
    /// only; needs root or CAP_SYS_NICE)
    #[arg(long)]
    pub validate: bool,
    /// How long --validate runs the set [default: 10s]
    #[arg(short = 'd', long, value_name = "TIME")]
    pub duration: Option<String>,
    /// The CPU --validate runs the set on, one [default: the highest CPU]; `-c`/`--cpus`
    /// names the measured CPUs in every measuring command
    #[arg(short = 'c', long = "cpus", visible_alias = "cpu", value_name = "CPU")]
    pub cpu: Option<usize>,
    /// The timer the --validate threads wait with [default: HR]
    #[arg(long, value_name = "TIMER", value_parser = ["HR", "NATIVE", "TIMERFD", "POSIX"], ignore_case = true)]
    pub timer: Option<String>,
    /// The run directory of --validate [default: a new one under the runs directory]
    #[arg(short = 'o', long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Let --validate run on a CPU another sandglass is measuring, with a warning
    #[arg(long)]
    pub shared_cpus: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

impl SetArgs {
    /// The first option given that only --validate uses.
    fn validate_option(&self) -> Option<&'static str> {
        [
            (self.duration.is_some(), "--duration"),
            (self.cpu.is_some(), "--cpus"),
            (self.timer.is_some(), "--timer"),
            (self.output.is_some(), "--output"),
            (self.shared_cpus, "--shared-cpus"),
        ]
        .into_iter()
        .find(|(given, _)| *given)
        .map(|(_, name)| name)
    }
}

/// `analyze rta --validate --json`: the analysis of the file's set, then its run.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct RtaValidated {
    /// The analysis of the set as the file gives it (with any measured inputs).
    pub analysis: rta::RtaReport,
    /// The run of the set and each task's predicted against observed behaviour.
    pub validation: rta_validate::Validation,
}

#[derive(Args)]
pub struct AdmissionArgs {
    /// TOML file: [[task]] tables with name, runtime, period, optional deadline and existing
    pub file: PathBuf,
    /// CPUs in the root domain
    #[arg(long, default_value_t = 1)]
    pub cpus: u32,
    /// kernel.sched_rt_runtime_us (-1 disables the limit)
    #[arg(long, default_value_t = 950_000, allow_hyphen_values = true)]
    pub rt_runtime_us: i64,
    /// kernel.sched_rt_period_us
    #[arg(long, default_value_t = 1_000_000)]
    pub rt_period_us: u64,
    /// Count the per-CPU fair-server reservation (50 ms every 1 s) against the limit
    #[arg(long)]
    pub fair_server: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// Where a latency distribution comes from.
#[derive(Args)]
pub struct LatencyArgs {
    /// Latency distribution from a timer run or an hourglass LAT thread: a run directory, a
    /// run id or unique prefix of one, or STUDY/CELL
    #[arg(long, value_name = "RUN")]
    pub run: Option<String>,
    /// CPU (timer run) or thread (hourglass run) when the run has several [default: the worst,
    /// by p99.9]
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Latency distribution from a file of lines `VALUE COUNT`
    #[arg(long)]
    pub histogram: Option<PathBuf>,
}

#[derive(Args)]
pub struct MttfArgs {
    /// t: the length of one buffer
    #[arg(long)]
    pub buffer: Option<String>,
    /// n: the number of buffers
    #[arg(long)]
    pub buffers: Option<u32>,
    /// c: the computation per buffer
    #[arg(long, default_value = "0ns")]
    pub compute: String,
    #[command(flatten)]
    pub latency: LatencyArgs,
    /// P(latency > slack) given directly
    #[arg(long)]
    pub exceedance: Option<f64>,
    /// How many samples the --exceedance came from (for a bound when it is 0)
    #[arg(long)]
    pub samples: Option<u64>,
    /// Print the table over buffer sizes and counts (Cota-Robles & Held Figs. 6-7)
    #[arg(long)]
    pub grid: bool,
    /// The least buffering that reaches this MTTF, such as 1h
    #[arg(long)]
    pub target: Option<String>,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct WorstCaseArgs {
    #[command(flatten)]
    pub latency: LatencyArgs,
    /// Samples per second of the histogram's stream
    #[arg(long)]
    pub rate: Option<f64>,
    /// Thresholds of the exceedance table, such as 100us,1ms,10ms
    #[arg(long, value_delimiter = ',')]
    pub thresholds: Option<Vec<String>>,
    /// Usage pattern preset: continuous, office, workstation, games, web, consumer
    #[arg(long, default_value = "continuous", value_parser = crate::common::USAGE)]
    pub usage: &'static sandglass::analysis::worst_case::Preset,
    /// Hours of use per day (overrides the preset)
    #[arg(long)]
    pub hours_per_day: Option<f64>,
    /// Days of use per week (overrides the preset)
    #[arg(long)]
    pub days_per_week: Option<f64>,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct FileArgs {
    pub file: PathBuf,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct TwoRateArgs {
    /// TICK_HZ:ITERATIONS_PER_S, twice, such as --rate 100:1530 --rate 2000:1333.6
    #[arg(long, num_args = 1)]
    pub rate: Vec<String>,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct SwitchCostArgs {
    /// W1: work done by one thread alone
    #[arg(long)]
    pub work_one: f64,
    /// W10: work done by all the threads together
    #[arg(long)]
    pub work_many: f64,
    /// T: the length of each run
    #[arg(long)]
    pub duration: String,
    /// N10: context switches during the many-thread run
    #[arg(long)]
    pub switches: u64,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct CtxswArgs {
    /// An hourglass run: a directory, a run id or unique prefix of one, or STUDY/CELL
    pub run: String,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct CacheCostArgs {
    /// Working-set sizes in KiB
    #[arg(long, value_delimiter = ',', default_value = "4,16,64,256,1024,4096")]
    pub sizes: Vec<u64>,
    /// Trials per size
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Length of each run (the paper used 45 s)
    #[arg(long, default_value = "2s")]
    pub duration: String,
    /// Threads in the many-thread run
    #[arg(long, default_value_t = 10)]
    pub threads: usize,
    /// CPU the runs share (default: the measured CPU of sandglass hourglass)
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct TtestArgs {
    /// File of numbers (one or more per line)
    pub a: PathBuf,
    /// File of numbers
    pub b: PathBuf,
    /// Paired test (the files hold matched pairs)
    #[arg(long)]
    pub paired: bool,
    /// Confidence of the interval
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// A task file (at most [`bounded::INPUT_BYTES`]).
fn read_file(path: &Path) -> Result<String, Failure> {
    bounded::read_input(path, "a task file").map_err(|e| Failure::usage(e.to_string()))
}

/// A data file: a histogram, points or numbers (at most [`bounded::DATA_BYTES`]).
fn read_data(path: &Path, role: &'static str) -> Result<String, Failure> {
    bounded::read_to_string(path, bounded::Links::Follow, bounded::DATA_BYTES, role)
        .map_err(|e| Failure::usage(e.to_string()))
}

/// Writes `text` output, or prints `value` as the JSON of analysis `kind` (`rta`), with its
/// `schema`.
fn emit<T: serde::Serialize>(
    json: bool,
    kind: &str,
    value: &T,
    text: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<u8, Failure> {
    if json {
        print_json(&Analysis {
            schema: format!("sandglass-analyze-{kind}/{JSON_VERSION}"),
            result: value,
        })?;
    } else {
        let mut out = crate::common::text_stdout();
        text(&mut out)
            .and_then(|_| out.flush())
            .context("writing the output")?;
    }
    Ok(0)
}

/// A quantile as the percentile name people wrote: 0.9999 → `p99.99`, 1 → `max`.
fn pct(q: f64) -> String {
    if q >= 1.0 {
        return "max".to_string();
    }
    let text = format!("{:.6}", q * 100.0);
    format!("p{}", text.trim_end_matches('0').trim_end_matches('.'))
}

/// The task set of `a`, with measured jitter and execution times applied.
fn task_set(a: &SetArgs) -> Result<(Vec<Task>, Vec<String>), Failure> {
    let text = read_file(&a.file)?;
    let mut tasks =
        taskfile::parse_task_file(&a.file, &text).map_err(|e| Failure::usage(e.to_string()))?;
    let mut notes = Vec::new();
    if let Some(spec) = &a.jitter_from {
        let (run, q, select) =
            inputs::parse_run_at(spec).map_err(|e| Failure::usage(format!("--jitter-from {e}")))?;
        let run = run_dir("--jitter-from", &run)?;
        let lat = inputs::latency_from_run(&run, select, q)
            .map_err(|e| Failure::usage(format!("--jitter-from: {e}")))?;
        let j = lat.value_at(q).unwrap_or(0).max(0) as u64;
        for t in &mut tasks {
            t.jitter_ns = Nanos(j);
        }
        notes.push(format!(
            "release jitter of every task: {} = {} of the {}",
            Nanos(j),
            pct(q),
            lat.description
        ));
    }
    for spec in &a.wcet_from {
        let (name, at) = spec.split_once('=').ok_or_else(|| {
            Failure::usage(format!("--wcet-from {spec}: write TASK=RUN@PERCENTILE"))
        })?;
        let (run, q, select) =
            inputs::parse_run_at(at).map_err(|e| Failure::usage(format!("--wcet-from {e}")))?;
        let run = run_dir("--wcet-from", &run)?;
        let (c, what) = inputs::execution_time_from_run(&run, select, q)
            .map_err(|e| Failure::usage(format!("--wcet-from: {e}")))?;
        let task = tasks.iter_mut().find(|t| t.name == name).ok_or_else(|| {
            Failure::usage(format!(
                "--wcet-from {spec}: {} has no task {name}",
                a.file.display()
            ))
        })?;
        task.wcet_ns = c;
        notes.push(format!("C of {name}: {c} = {} of the {what}", pct(q)));
    }
    Ok((tasks, notes))
}

/// The directory of the run `run` names (as the flag `flag` gave it): a directory, an id, a
/// unique prefix of one, or STUDY/CELL (`common::resolve_run`).
fn run_dir(flag: &str, run: &Path) -> Result<PathBuf, Failure> {
    crate::common::resolve_run(&run.to_string_lossy())
        .map_err(|e| Failure::usage(format!("{flag}: {e}")))
}

/// A latency distribution and its rate from `--run` or `--histogram`.
fn latency(l: &LatencyArgs) -> Result<Option<(Distribution, Option<f64>, String)>, Failure> {
    let cpu = l.cpu;
    match (&l.run, &l.histogram) {
        (Some(_), Some(_)) => Err(Failure::usage("give --run or --histogram, not both")),
        (Some(r), None) => {
            let r = run_dir("--run", Path::new(r))?;
            let l = inputs::latency_from_run(&r, cpu, inputs::WORST_BY).map_err(Failure::usage)?;
            Ok(Some((l.distribution, Some(l.rate_hz), l.description)))
        }
        (None, Some(h)) => {
            let text = read_data(h, "a histogram")?;
            let d =
                datafile::parse_histogram(h, &text).map_err(|e| Failure::usage(e.to_string()))?;
            Ok(Some((d, None, format!("histogram {}", h.display()))))
        }
        (None, None) => Ok(None),
    }
}

pub fn analyze(a: &AnalyzeArgs) -> Result<u8, Failure> {
    match &a.kind {
        Kind::Rta(s) => {
            let (tasks, notes) = task_set(s)?;
            let p = if s.non_preemptive {
                rta::Preemption::NonPreemptive
            } else {
                rta::Preemption::Preemptive
            };
            let r = rta::analyze(&tasks, p)
                .map_err(|e| Failure::usage(format!("{}: {e}", s.file.display())))?;
            if s.validate {
                return rta_validate_cmd(s, &tasks, &notes, r);
            }
            if let Some(o) = s.validate_option() {
                return Err(Failure::usage(format!(
                    "{o} applies to --validate only: add --validate to run the set"
                )));
            }
            emit(s.json, "rta", &r, |w| {
                for n in &notes {
                    writeln!(w, "input: {n}")?;
                }
                render::write_rta(w, &r)
            })
        }
        Kind::Edf(s) => {
            if s.non_preemptive {
                return Err(Failure::usage("--non-preemptive applies to rta only"));
            }
            if s.validate {
                return Err(Failure::usage("--validate applies to rta only"));
            }
            if let Some(o) = s.validate_option() {
                return Err(Failure::usage(format!(
                    "{o} applies to rta --validate only"
                )));
            }
            let (tasks, notes) = task_set(s)?;
            let r = edf::analyze(&tasks)
                .map_err(|e| Failure::usage(format!("{}: {e}", s.file.display())))?;
            emit(s.json, "edf", &r, |w| {
                for n in &notes {
                    writeln!(w, "input: {n}")?;
                }
                render::write_edf(w, &r)
            })
        }
        Kind::Admission(s) => {
            let text = read_file(&s.file)?;
            let tasks = taskfile::parse_admission_file(&s.file, &text)
                .map_err(|e| Failure::usage(e.to_string()))?;
            let config = admission::AdmissionConfig {
                cpus: s.cpus,
                rt_runtime_us: s.rt_runtime_us,
                rt_period_us: s.rt_period_us,
                fair_server: s.fair_server.then_some(admission::FairServer::DEFAULT),
                ..admission::AdmissionConfig::default()
            };
            let r = admission::admit(&tasks, &config).map_err(|e| Failure::usage(e.to_string()))?;
            emit(s.json, "admission", &r, |w| render::write_admission(w, &r))
        }
        Kind::Mttf(s) => mttf_cmd(s),
        Kind::WorstCase(s) => worst_case_cmd(s),
        Kind::Fit(s) => {
            let text = read_data(&s.file, "a file of points")?;
            let points = datafile::parse_points(&s.file, &text)
                .map_err(|e| Failure::usage(e.to_string()))?;
            let f = fit::fit_cost(&points)
                .map_err(|e| Failure::usage(format!("{}: {e}", s.file.display())))?;
            emit(s.json, "fit", &f, |w| render::write_fit(w, &f, &points))
        }
        Kind::TwoRate(s) => {
            if s.rate.len() != 2 {
                return Err(Failure::usage(
                    "give --rate twice, such as --rate 100:1530 --rate 2000:1333.6",
                ));
            }
            let parse = |v: &String| {
                v.parse::<two_rate::RateMeasurement>()
                    .map_err(|e| Failure::usage(format!("--rate {v}: {e}")))
            };
            let r = two_rate::solve(parse(&s.rate[0])?, parse(&s.rate[1])?)
                .map_err(|e| Failure::usage(e.to_string()))?;
            emit(s.json, "two-rate", &r, |w| render::write_two_rate(w, &r))
        }
        Kind::SwitchCost(s) => {
            let trial = switch_cost::SwitchTrial {
                work_one: s.work_one,
                work_many: s.work_many,
                duration_ns: time_arg("--duration", &s.duration)?,
                switches: s.switches,
            };
            let c =
                switch_cost::indirect_cost(&trial).map_err(|e| Failure::usage(e.to_string()))?;
            emit(s.json, "switch-cost", &c, |w| {
                render::write_switch_cost(w, &trial, &c)
            })
        }
        Kind::Ctxsw(s) => ctxsw_cmd(s),
        Kind::CacheCost(s) => cache_cost_cmd(s),
        Kind::Ttest(s) => {
            let read = |p: &PathBuf| -> Result<Vec<f64>, Failure> {
                let text = read_data(p, "a file of numbers")?;
                datafile::parse_numbers(p, &text).map_err(|e| Failure::usage(e.to_string()))
            };
            let (x, y) = (read(&s.a)?, read(&s.b)?);
            let t = if s.paired {
                significance::paired(&x, &y, s.confidence)
            } else {
                significance::welch(&x, &y, s.confidence)
            }
            .map_err(|e| Failure::usage(e.to_string()))?;
            let mw = if s.paired {
                None
            } else {
                Some(
                    significance::mann_whitney(&x, &y)
                        .map_err(|e| Failure::usage(e.to_string()))?,
                )
            };
            let value = Ttest {
                t: t.t,
                df: t.df,
                p: t.p,
                ci_low: t.ci_low,
                ci_high: t.ci_high,
                test: t.clone(),
                mann_whitney: mw.clone(),
            };
            emit(s.json, "ttest", &value, |w| {
                render::write_ttest(w, &t)?;
                if let Some(m) = &mw {
                    render::write_mann_whitney(w, m)?;
                }
                Ok(())
            })
        }
    }
}

fn mttf_cmd(s: &MttfArgs) -> Result<u8, Failure> {
    let compute = time_arg("--compute", &s.compute)?;
    let measured = latency(&s.latency)?;
    let exceed = match (&measured, s.exceedance) {
        (Some(_), Some(_)) => {
            return Err(Failure::usage(
                "give the latency as --run, --histogram or --exceedance, only one",
            ))
        }
        (Some((d, _, _)), None) => Exceedance::Measured(d),
        (None, Some(p)) => Exceedance::Given {
            probability: p,
            samples: s.samples,
        },
        (None, None) => {
            return Err(Failure::usage(
                "give the latency distribution: --run RUN, --histogram FILE or --exceedance P",
            ))
        }
    };
    let source = measured.as_ref().map(|m| m.2.clone());
    // The time the measured samples took, where the run says (a histogram alone does not):
    // what the validity rule compares each figure with.
    let observed_s = measured
        .as_ref()
        .and_then(|(d, rate, _)| rate.filter(|r| *r > 0.0).map(|r| d.total() as f64 / r));
    let ratio = sandglass::analysis::worst_case::MAX_HORIZON_RATIO;
    let within = |r: &mut mttf::MttfResult| {
        if let Some(o) = observed_s {
            mttf::within_run(r, o, ratio);
        }
    };
    if let Some(target) = &s.target {
        let target_s = time_arg("--target", target)?.as_secs_f64();
        let counts: Vec<u32> = match s.buffers {
            Some(n) => vec![n],
            None => (2..=8).collect(),
        };
        let mut rows = mttf::least_buffering(&counts, compute, &exceed, target_s)
            .map_err(|e| Failure::usage(e.to_string()))?;
        if let Some(o) = observed_s {
            mttf::target_within_run(&mut rows, target_s, o, ratio);
        }
        let rows = Rows { rows };
        return emit(s.json, "mttf-target", &rows, |w| {
            if let Some(src) = &source {
                writeln!(w, "latency: {src}")?;
            }
            render::write_least_buffering(w, &rows.rows, target_s)
        });
    }
    if s.grid {
        let sizes: Vec<Nanos> = match &s.buffer {
            Some(b) => vec![time_arg("--buffer", b)?],
            None => [1u64, 2, 4, 8, 16, 32, 64]
                .iter()
                .map(|&ms| Nanos::from_millis(ms))
                .collect(),
        };
        let counts: Vec<u32> = match s.buffers {
            Some(n) => vec![n],
            None => (2..=6).collect(),
        };
        let mut rows = mttf::grid(&sizes, &counts, compute, &exceed)
            .map_err(|e| Failure::usage(e.to_string()))?;
        rows.iter_mut().for_each(within);
        let rows = Rows { rows };
        return emit(s.json, "mttf-grid", &rows, |w| {
            if let Some(src) = &source {
                writeln!(w, "latency: {src}")?;
            }
            render::write_mttf_grid(w, &rows.rows)
        });
    }
    let buffer = time_arg(
        "--buffer",
        s.buffer
            .as_deref()
            .ok_or_else(|| Failure::usage("give --buffer t (or --grid or --target)"))?,
    )?;
    let buffers = s
        .buffers
        .ok_or_else(|| Failure::usage("give --buffers n (or --grid or --target)"))?;
    let mut r =
        mttf::mttf(buffer, buffers, compute, &exceed).map_err(|e| Failure::usage(e.to_string()))?;
    within(&mut r);
    emit(s.json, "mttf", &r, |w| {
        if let Some(src) = &source {
            writeln!(w, "latency: {src}")?;
        }
        render::write_mttf(w, &r)
    })
}

fn worst_case_cmd(s: &WorstCaseArgs) -> Result<u8, Failure> {
    let (d, run_rate, source) = latency(&s.latency)?.ok_or_else(|| {
        Failure::usage("give the latency distribution: --run RUN or --histogram FILE --rate HZ")
    })?;
    let rate = match (s.rate, run_rate) {
        (Some(r), _) => r,
        (None, Some(r)) => r,
        (None, None) => {
            return Err(Failure::usage(
                "--histogram needs --rate HZ: how many samples per second the stream has",
            ))
        }
    };
    let preset = s.usage;
    let mut usage = preset.usage;
    if let Some(h) = s.hours_per_day {
        usage.hours_per_day = h;
    }
    if let Some(dw) = s.days_per_week {
        usage.days_per_week = dw;
    }
    let mut config = worst_case::WorstCaseConfig::new(rate, usage);
    config.thresholds_ns = match &s.thresholds {
        Some(list) => list
            .iter()
            .map(|t| time_arg("--thresholds", t).map(|n| n.0 as i64))
            .collect::<Result<Vec<_>, _>>()?,
        None => [
            100_000i64, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000,
        ]
        .to_vec(),
    };
    let r = worst_case::analyze(&d, &config).map_err(|e| Failure::usage(e.to_string()))?;
    emit(s.json, "worst-case", &r, |w| {
        writeln!(w, "latency: {source}, {rate:.1} samples per second")?;
        render::write_worst_case(w, &r)
    })
}

/// `analyze rta --validate`: runs the set as Hourglass PERIODIC threads and prints the
/// analysis, then the run against it.
fn rta_validate_cmd(
    s: &SetArgs,
    tasks: &[Task],
    notes: &[String],
    analysis: rta::RtaReport,
) -> Result<u8, Failure> {
    if s.non_preemptive {
        return Err(Failure::usage(
            "--validate runs SCHED_FIFO threads, which preempt one another: it cannot validate \
             --non-preemptive",
        ));
    }
    let config = rta_validate::ValidateConfig {
        duration_ns: time_arg("--duration", s.duration.as_deref().unwrap_or("10s"))?,
        cpu: s.cpu,
        timer: s.timer.as_deref().unwrap_or("HR").to_ascii_uppercase(),
        output: s.output.clone(),
        rt_bandwidth_us: sandglass::system::rt_runtime_us()
            .zip(sandglass::system::rt_period_us())
            .and_then(|(r, p)| Some((u64::try_from(r).ok()?, u64::try_from(p).ok()?))),
    };
    let plan = rta_validate::plan(tasks, &config)?;
    let mut console = crate::common::Console::new();
    let mut ctx = crate::common::context();
    ctx.shared_cpus = Some(s.shared_cpus);
    if !crate::common::quiet() {
        eprintln!(
            "sandglass: running the set for {} as Hourglass PERIODIC threads: {}",
            config.duration_ns,
            plan.set
                .iter()
                .zip(&plan.priorities)
                .map(|(t, p)| format!("{} at SCHED_FIFO {p}", t.name))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let result = sandglass::hourglass::run::run(&plan.spec, &ctx, &mut console);
    console.clear();
    let result = result?;
    crate::common::register(Path::new(&result.run.run_dir));
    let validation = rta_validate::judge_run(plan, &result)?;
    let value = RtaValidated {
        analysis,
        validation,
    };
    emit(s.json, "rta-validate", &value, |w| {
        for n in notes {
            writeln!(w, "input: {n}")?;
        }
        render::write_rta(w, &value.analysis)?;
        render::write_rta_validation(w, &value.validation)
    })?;
    crate::common::run_outcome(&result.run)
}

fn cache_cost_cmd(s: &CacheCostArgs) -> Result<u8, Failure> {
    let config = sandglass::experiments::CacheCostConfig {
        sizes_kb: s.sizes.clone(),
        reps: s.reps,
        duration_ns: time_arg("--duration", &s.duration)?,
        threads: s.threads,
        cpu: s.cpu,
        confidence: 0.95,
    };
    if config.sizes_kb.contains(&0) {
        return Err(Failure::usage("--sizes: every size must be at least 1 KiB"));
    }
    // Every trial is a run of its own; keep them together in one directory.
    let stamp: String = sandglass::store::now_rfc3339()
        .chars()
        .filter(|c| c.is_ascii_digit())
        .collect();
    let mut ctx = crate::common::context();
    ctx.base_dir = ctx.base_dir.join(format!("cache-cost-{stamp}"));
    let runs = ctx.base_dir.display().to_string();
    let mut quiet = sandglass::runner::Silent;
    let rows = sandglass::experiments::cache_cost(&config, &ctx, &mut quiet, &mut |kb, i, n| {
        eprintln!(
            "sandglass: cache-cost trial {i} of {n}: {kb} KiB, one thread then {}",
            s.threads
        );
    })?;
    let rows = Rows { rows };
    emit(s.json, "cache-cost", &rows, |w| {
        writeln!(
            w,
            "indirect context-switch cost (Hourglass §5.2): one CPU_SCAN thread against {}, {} per run, {} trials per size",
            s.threads,
            Nanos(config.duration_ns.0),
            s.reps
        )?;
        for r in &rows.rows {
            write!(w, "{:>6} KiB: ", r.size_kb)?;
            match (&r.summary, &r.error) {
                (Some(sum), _) => render::write_switch_cost_summary(w, sum)?,
                (None, Some(e)) => writeln!(w, "{e}")?,
                (None, None) => writeln!(w)?,
            }
        }
        writeln!(w, "runs: {runs}")
    })
}

fn ctxsw_cmd(s: &CtxswArgs) -> Result<u8, Failure> {
    let run = run_dir("ctxsw", Path::new(&s.run))?;
    let r = sandglass::store::RunReader::open(&run).map_err(|e| Failure::usage(e.to_string()))?;
    if r.manifest.kind != RunKind::Hourglass {
        return Err(Failure::usage(format!(
            "{}: a {} run has no execution trace; give an hourglass run",
            run.display(),
            r.manifest.kind
        )));
    }
    let table =
        sandglass::store::table::TableReader::open(&r, &sandglass::store::table::tables::TRACE)
            .ok_or_else(|| Failure::usage(format!("{}: the run has no trace", run.display())))?;
    // The trace streams in order of start: the switches are inferred as it goes.
    let mut inference = trace::TraceInference::new();
    let cols = ["thread", "cpu", "start_ns", "end_ns", "end_reason"];
    table
        .scan::<sandglass::store::ReadError>(&cols, |b| {
            let (th, cpu) = (b.i32s("thread")?, b.i32s("cpu")?);
            let (a, e, why) = (
                b.i64s("start_ns")?,
                b.i64s("end_ns")?,
                b.texts("end_reason")?,
            );
            for i in 0..b.len() {
                let reason = why[i]
                    .as_utf8()
                    .ok()
                    .and_then(sandglass::engine::EndReason::from_name)
                    .ok_or_else(|| sandglass::store::ReadError::Column {
                        table: "trace".into(),
                        column: format!("end_reason (unknown value in row {})", i + 1),
                    })?;
                inference.add(&trace::Interval {
                    thread: th[i] as u16,
                    cpu: cpu[i] as u32,
                    start_ns: a[i].max(0) as u64,
                    end_ns: e[i].max(0) as u64,
                    reason,
                });
            }
            Ok(())
        })
        .map_err(|e| Failure::usage(e.to_string()))?;
    let sw = inference.switches();
    emit(s.json, "ctxsw", &sw, |w| {
        writeln!(
            w,
            "context switches in {}: {} ({} voluntary, {} involuntary)",
            run.display(),
            sw.count,
            sw.voluntary,
            sw.involuntary
        )?;
        for (label, d) in [
            ("all", &sw.all),
            ("voluntary", &sw.voluntary_gaps),
            ("involuntary", &sw.involuntary_gaps),
        ] {
            if let Some(d) = d {
                writeln!(
                    w,
                    "  {label:<12} min {}, median {}, p90 {}, p99 {}, max {}",
                    Nanos(d.min_ns.max(0) as u64),
                    Nanos(d.p50_ns.max(0) as u64),
                    Nanos(d.p90_ns.max(0) as u64),
                    Nanos(d.p99_ns.max(0) as u64),
                    Nanos(d.max_ns.max(0) as u64)
                )?;
            }
        }
        let hist: Vec<String> = sw
            .histogram
            .iter()
            .map(|b| format!("<={} {}", Nanos(b.upper_ns), b.count))
            .collect();
        writeln!(w, "  histogram: {}", hist.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::pct;

    #[test]
    fn percentile_names() {
        assert_eq!(pct(0.9999), "p99.99");
        assert_eq!(pct(0.5), "p50");
        assert_eq!(pct(0.999999), "p99.9999");
        assert_eq!(pct(1.0), "max");
    }
}
