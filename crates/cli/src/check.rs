//! `sandglass check WORKLOAD`: can this machine, as configured, carry the workload? Scans the
//! configuration, measures timer wakeups at the workload's period and priority (with the
//! kernel's events where it can, to name causes), predicts, and gives a verdict with the fixes
//! ranked by expected effect. The run is an ordinary timer run, kept and catalogued, with
//! `check.json` beside its results.

use crate::common::{cpus_arg, policy_arg, time_arg, Console, Failure, LoadFlags};
use clap::Args;
use sandglass::check::plan::PlanError;
use sandglass::check::{self, predict, workload, CheckReport};
use sandglass::live::Live;
use sandglass::model::TimerKind;
use sandglass::runner::Observer;
use sandglass::timer::{self, TimerConfig};
use sandglass::Nanos;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Options of `sandglass check`.
#[derive(Args)]
pub struct CheckArgs {
    /// The workload: audio:FRAMES@RATE[xPERIODS] (audio:64@48000x2), control:PERIOD[:DEADLINE]
    /// (control:1ms:500us), video:FPS (video:60), or a task file as for `analyze rta`
    #[arg(value_name = "WORKLOAD", allow_hyphen_values = true)]
    pub workload: String,
    /// How long to measure (default: a tenth of --target, the shortest run that supports a
    /// prediction that far; the run ends earlier once the answer is certain)
    #[arg(short = 'd', long, allow_hyphen_values = true)]
    pub duration: Option<String>,
    /// The target: at most one miss in this long
    #[arg(long, default_value = "8h", allow_hyphen_values = true)]
    pub target: String,
    /// Computation per period, taken from the slack (such as 300us)
    #[arg(long, default_value = "0s", allow_hyphen_values = true)]
    pub work: String,
    /// The CPU the workload runs on, one (default: the last CPU this process may use);
    /// `-c`/`--cpus` names the measured CPUs in every measuring command
    #[arg(
        short = 'c',
        long = "cpus",
        visible_alias = "cpu",
        value_name = "CPU",
        allow_hyphen_values = true
    )]
    pub cpu: Option<String>,
    /// Scheduling policy of the workload: f:PRIO, r:PRIO or o:NICE (default: f:88 for audio,
    /// f:90 for control and task sets, f:50 for video)
    #[arg(short = 'P', long = "policy", allow_hyphen_values = true)]
    pub policy: Option<String>,
    /// Do not record kernel events (by default they are recorded where this process can, to
    /// name what held the CPU)
    #[arg(long)]
    pub no_trace: bool,
    /// Measure a CPU another sandglass is measuring, instead of refusing
    #[arg(long)]
    pub shared_cpus: bool,
    /// Then measure each fix sandglass can test itself, one change at a time, for as long as
    /// the check measured: /dev/cpu_dma_latency held at 0, another CPU, SCHED_FIFO 95; and
    /// show before and after (nothing on the machine is changed)
    #[arg(long)]
    pub try_fixes: bool,
    /// With --load or --load-cmd: do not also measure without the load (by default the check
    /// measures under it, then as long again without it, to show what the load costs)
    #[arg(long)]
    pub no_idle: bool,
    #[command(flatten)]
    pub run: crate::common::RunFlags,
    #[command(flatten)]
    pub loads: LoadFlags,
}

/// The console, and the early end: once the misses counted so far show, at 99.9 %, that the
/// workload misses more often than the target, the run has answered.
struct CheckObserver {
    console: Console,
    live: Arc<Live>,
    cpu: usize,
    slack_ns: u64,
    period: Nanos,
    target_s: f64,
    miss: String,
}

impl Observer for CheckObserver {
    crate::common::console_observer!();
    fn end_early(&mut self, elapsed: Nanos) -> Option<String> {
        if elapsed.0 < predict::EARLY_MIN_NS {
            return None;
        }
        let s = self.live.cpu(self.cpu)?.snapshot();
        let misses = s.certainly_above(self.slack_ns);
        predict::certainly_not_suitable(misses, s.releases, self.period, self.target_s).then(|| {
            format!(
                "{misses} {}s in {} periods already show, at 99.9 %, more than one per {}",
                self.miss,
                s.releases,
                predict::span(self.target_s)
            )
        })
    }
}

fn choose_cpu(a: &CheckArgs) -> Result<usize, Failure> {
    let allowed = sandglass::system::allowed_cpus();
    match &a.cpu {
        Some(v) => {
            let list = cpus_arg("-c", v)?;
            if list.len() != 1 {
                return Err(Failure::usage(format!(
                    "-c {v}: give one CPU, the one the workload runs on, such as -c {}",
                    list.first()
                )));
            }
            let cpu = list.first();
            if !allowed.contains(&cpu) {
                return Err(Failure::usage(format!(
                    "-c {v}: this process may not run on CPU {cpu}; choose one of {}",
                    sandglass::cpulist::CpuList::from_cpus(allowed.iter().copied())
                        .map(|l| l.to_string())
                        .unwrap_or_default()
                )));
            }
            Ok(cpu)
        }
        None => timer::measured_cpus(None, None, &allowed)
            .ok()
            .and_then(|c| c.last().copied())
            .ok_or_else(|| Failure::runtime("no CPU to measure on")),
    }
}

pub fn check(a: &CheckArgs) -> Result<u8, Failure> {
    let w = workload::parse(&a.workload, &|p: &Path| {
        sandglass::bounded::read_input(p, "a task file")
            .map_err(|e| std::io::Error::other(e.to_string()))
    })
    .map_err(Failure::usage)?;
    let target = time_arg("--target", &a.target)?;
    let work = time_arg("--work", &a.work)?;
    let duration = a
        .duration
        .as_deref()
        .map(|d| time_arg("-d", d))
        .transpose()?;
    let policy = a.policy.as_deref().map(policy_arg).transpose()?;
    let cpu = choose_cpu(a)?;
    let plan = check::plan::plan(&check::plan::Request {
        workload: &w,
        target,
        work,
        duration,
        policy,
    })
    .map_err(|e| {
        Failure::usage(match e {
            PlanError::TargetTooShort => {
                format!("--target {}: give at least one second, such as 8h", a.target)
            }
            PlanError::DurationTooShort => format!(
                "-d {}: measure at least 1s (30s gives a first answer; the default, a tenth of --target, supports a prediction as far as the target)",
                a.duration.as_deref().unwrap_or_default()
            ),
            PlanError::NoSlack => format!(
                "{}: {} has no slack (its response time equals its deadline): any delay makes it miss",
                w.spec,
                w.task.as_deref().unwrap_or("the workload")
            ),
            PlanError::WorkTooLong => format!(
                "--work {}: the work per period is not shorter than the slack of {} ({}): nothing can make it fit",
                a.work, w.deadline_ns, w.spec
            ),
        })
    })?;
    let (duration, target_s, priority) = (plan.duration, plan.target_s, plan.priority);
    // The policy as the person wrote it, or the workload's default.
    let policy_text = a.policy.clone().unwrap_or_else(|| plan.policy.to_string());
    let snapshot = sandglass::system::snapshot();
    let facts = check::config::gather(Path::new("/"), cpu, &snapshot);
    let findings = check::config::findings(&facts, plan.slack, priority);
    let tracing = check::plan::Tracing::choose(a.no_trace);
    if let check::plan::Tracing::Unavailable(e) = &tracing {
        if !crate::common::quiet() {
            eprintln!(
                "sandglass: kernel events not recorded ({e}); causes come from /proc samples"
            );
        }
    }
    let trace = tracing.options();
    let traced = trace.is_some();
    let explain_above = plan.explain_above;
    let thresholds = plan.thresholds.clone();
    let config = TimerConfig {
        cpus: Some(
            sandglass::cpulist::CpuList::from_cpus([cpu])
                .ok_or_else(|| Failure::runtime("no CPU"))?,
        ),
        policy: plan.policy,
        interval_ns: w.period_ns,
        duration_ns: duration,
        timer: TimerKind::Hr,
        resync: false,
        duty: None,
        thresholds_ns: thresholds,
        interval_bin_ns: Nanos::from_micros(100),
        main_cpu: None,
        cpu_dma_latency_us: None,
        output_dir: a.run.output.clone(),
        counter: sandglass::clock::CounterChoice::Auto,
        loads: a.loads.plan()?,
        sample_hz: sandglass::causes::DEFAULT_SAMPLE_HZ,
        trace,
        threshold: None,
        explain_above_ns: Some(explain_above),
    };
    timer::validate(&config).map_err(Failure::usage)?;
    if !crate::common::quiet() {
        eprintln!(
            "sandglass: checking {} on CPU {cpu} at {policy_text}: a release every {} for {} (up to {} periods), ending early once the answer is certain",
            w.spec,
            w.period_ns,
            predict::span(duration.as_secs_f64()),
            duration.0 / w.period_ns.0.max(1)
        );
        if plan.duration_is_default {
            eprintln!(
                "sandglass: {} is a tenth of the target of one {} per {}, the shortest run whose tail supports a prediction that far (docs/analysis.md); -d sets another length",
                predict::span(duration.as_secs_f64()),
                w.miss,
                predict::span(target_s)
            );
        }
    }
    let live = Arc::new(Live::new(&[cpu]));
    let mut obs = CheckObserver {
        console: Console::with_live_rows("wakeups"),
        live: live.clone(),
        cpu,
        slack_ns: plan.slack.0,
        period: w.period_ns,
        target_s,
        miss: w.miss.clone(),
    };
    let ctx = sandglass::runner::RunContext {
        shared_cpus: Some(a.shared_cpus),
        ..crate::common::context()
    };
    let result = timer::run_live(&config, &ctx, &mut obs, Some(live));
    obs.console.clear();
    let result = result?;
    let run_dir = PathBuf::from(&result.run.run_dir);
    // Catalogued at once: what follows may fail, and the run is kept whatever happens.
    crate::common::register(&run_dir);
    let (predictions, verdict) = predict_run(&run_dir, cpu, (&w, work, target_s))?;
    let culprits = check::culprits(result.run.causes.as_ref(), cpu);
    let fixes = check::fixes(&culprits, &findings, cpu, priority, plan.slack);
    let steal_share = result
        .run
        .causes
        .as_ref()
        .and_then(|c| c.explanation.as_ref())
        .map(|e| e.steal_share);
    let mut outcome = result.run.clone();
    let mut plan = Vec::new();
    let loads: Vec<String> = a
        .loads
        .load
        .iter()
        .chain(&a.loads.load_cmd)
        .cloned()
        .collect();
    let loads_text = loads.join(", ");
    if !config.loads.is_empty() && !a.no_idle {
        plan.push(check::trial::without_load(cpu, &policy_text, &loads_text));
    }
    if a.try_fixes {
        plan.extend(check::trial::trials(
            cpu,
            &sandglass::system::allowed_cpus(),
            &policy_text,
        ));
    }
    let (mut trials, trials_skipped) = if !plan.is_empty() && result.run.signal.is_none() {
        let t = run_trials(
            &config,
            &ctx,
            (&w, work, target_s),
            (&run_dir, &predictions),
            plan,
        )?;
        if let Some(h) = t.interrupted {
            outcome = h;
        }
        (t.measured, t.skipped)
    } else {
        (Vec::new(), Vec::new())
    };
    let without_load = trials
        .iter()
        .position(|t| t.trial.without_load)
        .map(|i| trials.remove(i));
    let report = CheckReport {
        schema: check::SCHEMA.to_string(),
        workload: w,
        work_ns: work,
        verdict,
        predictions,
        cpu,
        policy: result
            .cpus
            .first()
            .and_then(|c| c.policy.clone())
            .unwrap_or_else(|| policy_text.clone()),
        loads,
        run_id: result.run.run_id.clone(),
        run_dir: result.run.run_dir.clone(),
        run_state: result.run.state.name().to_string(),
        end_detail: result.run.end_detail.clone(),
        traced,
        steal_share,
        explained_above_ns: explain_above,
        culprits,
        findings,
        fixes,
        trials,
        trials_skipped,
        without_load,
    };
    let text =
        serde_json::to_string_pretty(&report).map_err(|e| Failure::runtime(e.to_string()))?;
    if let Err(e) = std::fs::write(run_dir.join("check.json"), text + "\n") {
        eprintln!(
            "sandglass: warning: {}: cannot write check.json: {e}",
            run_dir.display()
        );
    }
    if a.run.json {
        crate::common::print_json(&report)?;
    } else {
        crate::common::print_text(|out| sandglass_report::check::write(out, &report))?;
    }
    crate::common::run_outcome(&outcome)
}

/// The predictions and verdict for the workload from CPU `cpu` of a finished timer run: its
/// whole-run histogram, read as `analyze mttf --run` reads it, so the figures agree.
fn predict_run(
    dir: &Path,
    cpu: usize,
    (w, work, target_s): (&workload::Workload, Nanos, f64),
) -> Result<(predict::Predictions, predict::Verdict), Failure> {
    let latency = sandglass::inputs::latency_from_run(dir, Some(cpu), sandglass::inputs::WORST_BY)
        .map_err(|e| Failure::runtime(format!("{}: {e}", dir.display())))?;
    let p = predict::predict(w, work, &latency.distribution, target_s);
    let v = predict::verdict(w, &p);
    Ok((p, v))
}

/// What the trials measured.
struct Tried {
    measured: Vec<check::trial::TrialResult>,
    /// Trials that could not run, each with why.
    skipped: Vec<String>,
    /// The run a signal cut short, which ends the trials (and sets the exit code).
    interrupted: Option<sandglass::result::RunHeader>,
}

/// Measures each trial of `plan` (the check without its load, the fixes of `--try-fixes`), one
/// change at a time, with the check's own configuration otherwise, for as long as the check
/// measured, and sets each against the check's run by stalls. A trial that cannot run (its CPU
/// held by another sandglass) is skipped with its reason; a signal ends the trials, keeping
/// what they measured.
fn run_trials(
    config: &TimerConfig,
    ctx: &sandglass::runner::RunContext,
    (w, work, target_s): (&workload::Workload, Nanos, f64),
    (before_run, before): (&Path, &predict::Predictions),
    plan: Vec<check::trial::Trial>,
) -> Result<Tried, Failure> {
    let cpu = config.cpus.as_ref().map(|c| c.first()).unwrap_or(0);
    let slack = before.slack_ns;
    let stalls = |dir: &Path, cpu: usize| {
        sandglass::inputs::stalls_of_run(dir, cpu, slack)
            .map_err(|e| Failure::runtime(format!("{}: {e}", dir.display())))
    };
    let stalls_before = stalls(before_run, cpu)?;
    // As long as the check measured (it may have ended early), so that counts compare.
    let length = Nanos(((before.measured_s * 1e9).round() as u64).max(1_000_000_000));
    let quiet = crate::common::quiet();
    if !quiet {
        eprintln!(
            "sandglass: measuring {} more time(s), one change at a time, {} each: {}",
            plan.len(),
            predict::span(length.as_secs_f64()),
            plan.iter()
                .map(|t| t.change.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let mut tried = Tried {
        measured: Vec::new(),
        skipped: Vec::new(),
        interrupted: None,
    };
    let total = plan.len();
    for (i, t) in plan.into_iter().enumerate() {
        let mut c = config.clone();
        c.cpus = sandglass::cpulist::CpuList::from_cpus([t.cpu]);
        c.policy = policy_arg(&t.policy)?;
        c.cpu_dma_latency_us = t.pm_qos_us;
        c.duration_ns = length;
        c.output_dir = None;
        if t.without_load {
            c.loads = Default::default();
        }
        if !quiet {
            eprintln!("sandglass: {} of {total}: {}", i + 1, t.change);
        }
        let mut console = Console::with_live_rows("wakeups");
        let run = timer::run_live(&c, ctx, &mut console, None);
        console.clear();
        let r = match run {
            Ok(r) => r,
            Err(e) => {
                let why = format!("{}: {e}", t.change);
                if !quiet {
                    eprintln!("sandglass: warning: not measured: {why}");
                }
                tried.skipped.push(why);
                continue;
            }
        };
        let dir = PathBuf::from(&r.run.run_dir);
        crate::common::register(&dir);
        let (p, verdict) = predict_run(&dir, t.cpu, (w, work, target_s))?;
        let after = stalls(&dir, t.cpu)?;
        tried.measured.push(check::trial::TrialResult {
            run_id: r.run.run_id.clone(),
            run_dir: r.run.run_dir.clone(),
            run_state: r.run.state.name().to_string(),
            verdict,
            effect: check::trial::effect(&stalls_before, &after),
            summary: check::trial::summary((&stalls_before, before), (&after, &p), &w.miss),
            predictions: p,
            stalls: after,
            stalls_before,
            trial: t,
        });
        if r.run.signal.is_some() {
            tried.interrupted = Some(r.run);
            break;
        }
    }
    Ok(tried)
}
