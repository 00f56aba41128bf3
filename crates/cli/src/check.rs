//! `sandglass check WORKLOAD`: can this machine, as configured, carry the workload? Scans the
//! configuration, measures timer wakeups at the workload's period and priority (with the
//! kernel's events where it can, to name causes), predicts, and gives a verdict with the fixes
//! ranked by expected effect. The run is an ordinary timer run, kept and catalogued, with
//! `check.json` beside its results.

use crate::common::{cpus_arg, policy_arg, time_arg, Console, Failure, LoadFlags};
use clap::Args;
use sandglass::check::{self, predict, workload, CheckReport};
use sandglass::live::Live;
use sandglass::model::TimerKind;
use sandglass::runner::{LiveRow, Observer};
use sandglass::timer::{self, TimerConfig};
use sandglass::warning::Warning;
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
    /// The CPU the workload runs on (default: the last CPU this process may use)
    #[arg(short = 'c', long = "cpu", allow_hyphen_values = true)]
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
    /// Run directory (default ./sandglass-runs/<id>)
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Print one JSON object (schema sandglass-check/1) instead of the text
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub quiet: crate::common::QuietFlag,
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
    fn warning(&mut self, w: &Warning) {
        self.console.warning(w);
    }
    fn note(&mut self, text: &str) {
        self.console.note(text);
    }
    fn progress(&mut self, elapsed: Nanos, total: Nanos) {
        self.console.progress(elapsed, total);
    }
    fn live(&mut self, elapsed: Nanos, rows: &[LiveRow]) {
        self.console.live(elapsed, rows);
    }
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
    let w = workload::parse(&a.workload, &|p: &Path| std::fs::read_to_string(p))
        .map_err(Failure::usage)?;
    let target = time_arg("--target", &a.target)?;
    if target < Nanos::from_secs(1) {
        return Err(Failure::usage(format!(
            "--target {}: give at least one second, such as 8h",
            a.target
        )));
    }
    let target_s = target.as_secs_f64();
    let work = time_arg("--work", &a.work)?;
    let duration = match &a.duration {
        Some(d) => time_arg("-d", d)?,
        // A tenth of the target, and never less than the 10 s an early end needs.
        None => Nanos(
            ((target.0 as f64 / sandglass::analysis::worst_case::MAX_HORIZON_RATIO) as u64)
                .max(predict::EARLY_MIN_NS),
        ),
    };
    if duration < Nanos::from_secs(1) {
        return Err(Failure::usage(format!(
            "-d {}: measure at least 1s (30s gives a first answer; the default, a tenth of --target, supports a prediction as far as the target)",
            a.duration.as_deref().unwrap_or_default()
        )));
    }
    let policy_text = a
        .policy
        .clone()
        .unwrap_or_else(|| format!("f:{}", w.kind.default_priority()));
    let policy = policy_arg(&policy_text)?;
    let priority = policy_text
        .strip_prefix("f:")
        .or_else(|| policy_text.strip_prefix("r:"))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let cpu = choose_cpu(a)?;
    let slack = w.deadline_ns.0 as i64 - work.0 as i64;
    if w.deadline_ns == Nanos::ZERO {
        return Err(Failure::usage(format!(
            "{}: {} has no slack (its response time equals its deadline): any delay makes it miss",
            w.spec,
            w.task.as_deref().unwrap_or("the workload")
        )));
    }
    if slack <= 0 {
        return Err(Failure::usage(format!(
            "--work {}: the work per period is not shorter than the slack of {} ({}): nothing can make it fit",
            a.work, w.deadline_ns, w.spec
        )));
    }
    let snapshot = sandglass::system::snapshot();
    let facts = check::config::gather(Path::new("/"), cpu, &snapshot);
    let findings = check::config::findings(&facts, Nanos(slack as u64), priority);
    let trace = if a.no_trace {
        None
    } else {
        match sandglass::causes::tracefs::probe() {
            Ok(()) => Some(sandglass::causes::tracefs::TraceOptions::default()),
            Err(e) => {
                if !crate::common::quiet() {
                    eprintln!(
                        "sandglass: kernel events not recorded ({e}); causes come from /proc samples"
                    );
                }
                None
            }
        }
    };
    let traced = trace.is_some();
    let explain_above = Nanos((slack as u64 / 2).max(10_000));
    let mut thresholds = timer::default_thresholds(w.period_ns);
    thresholds.push(Nanos(slack as u64));
    thresholds.sort();
    thresholds.dedup();
    let config = TimerConfig {
        cpus: Some(
            sandglass::cpulist::CpuList::from_cpus([cpu])
                .ok_or_else(|| Failure::runtime("no CPU"))?,
        ),
        policy,
        interval_ns: w.period_ns,
        duration_ns: duration,
        timer: TimerKind::Hr,
        resync: false,
        duty: None,
        thresholds_ns: thresholds,
        interval_bin_ns: Nanos::from_micros(100),
        main_cpu: None,
        cpu_dma_latency_us: None,
        output_dir: a.output.clone(),
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
        if a.duration.is_none() {
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
        slack_ns: slack as u64,
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
    let latency =
        sandglass::inputs::latency_from_run(&run_dir, Some(cpu), sandglass::inputs::WORST_BY)
            .map_err(|e| Failure::runtime(format!("{}: {e}", run_dir.display())))?;
    let predictions = predict::predict(&w, work, &latency.distribution, target_s);
    let verdict = predict::verdict(&w, &predictions);
    let culprits = check::culprits(result.run.causes.as_ref(), cpu);
    let fixes = check::fixes(&culprits, &findings, cpu, priority, Nanos(slack as u64));
    let steal_share = result
        .run
        .causes
        .as_ref()
        .and_then(|c| c.explanation.as_ref())
        .map(|e| e.steal_share);
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
            .unwrap_or(policy_text),
        loads: a
            .loads
            .load
            .iter()
            .chain(&a.loads.load_cmd)
            .cloned()
            .collect(),
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
    };
    let text =
        serde_json::to_string_pretty(&report).map_err(|e| Failure::runtime(e.to_string()))?;
    if let Err(e) = std::fs::write(run_dir.join("check.json"), text + "\n") {
        eprintln!(
            "sandglass: warning: {}: cannot write check.json: {e}",
            run_dir.display()
        );
    }
    crate::common::register(&run_dir);
    if a.json {
        crate::common::print_json(&report)?;
    } else {
        crate::common::print_text(|out| sandglass_report::check::write(out, &report))?;
    }
    crate::common::run_outcome(&result.run)
}
