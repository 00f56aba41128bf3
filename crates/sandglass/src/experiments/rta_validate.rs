//! `analyze rta --validate`: a fixed-priority task set run on the machine as Hourglass
//! PERIODIC threads, one per task, at SCHED_FIFO priorities in the analysed order, sharing one
//! CPU, and the analysis's predictions set against what the threads did (Regehr 2002, §5.5:
//! "This corroborates the initial response time analysis").
//!
//! The run reproduces the model as far as a real machine can:
//!
//! * every task is a PERIODIC thread that must receive its C of CPU time in each period T, its
//!   releases absolute (`start + k·T`); every thread starts at the same instant, which is the
//!   critical instant of the analysis (all tasks released together), so the worst case of a
//!   set without jitter happens in the run's first busy period;
//! * priorities are SCHED_FIFO, [`TOP_FIFO`] for the highest analysed priority and one less
//!   for each lower one (equal analysed priorities share a level, as the analysis assumes they
//!   interfere both ways);
//! * all threads share one CPU, the uniprocessor of the analysis.
//!
//! What it cannot reproduce is said, not hidden: release jitter and blocking written in the
//! file do not happen in the run (it has the machine's own, which is what it measures), so the
//! predictions it is judged against are those of the set *as run*: the file's C, T, D and
//! priorities with no jitter and no blocking. The file's own analysis is shown beside.
//!
//! A job that has not received C by the end of its period is a miss and is dropped (Hourglass's
//! PERIODIC model); with a deadline shorter than the period, a job that completes after its
//! deadline is a miss too. A deadline beyond the period cannot be run this way and is refused.
//!
//! The judgement per task ([`Agreement`]): a task predicted to meet its deadlines agrees when
//! it missed none and no job took longer than the predicted worst-case response time; a task
//! predicted to miss agrees when it missed. A response above the bound without a miss, misses
//! the analysis did not predict, or a predicted miss that did not happen are disagreements, each
//! with its likely reason.

use crate::analysis::rta::{self, Preemption, RtaReport};
use crate::analysis::taskfile::Task;
use crate::hourglass::cmdline::{self, Command, HourglassSpec};
use crate::hourglass::result::HourglassResult;
use crate::runner::RunError;
use crate::units::Nanos;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The SCHED_FIFO priority of the task the analysis puts highest. It stays below the priorities
/// of sandglass's own main thread and watchdog (99) and of kernel threads that are usually run
/// above applications, and above the priorities users give ordinary real-time applications by
/// default (SCHED_FIFO 1 to 50).
pub const TOP_FIFO: u32 = 80;

/// The lowest SCHED_FIFO priority a task may get: a set with more distinct priorities than
/// `TOP_FIFO - LOWEST_FIFO + 1` is refused.
pub const LOWEST_FIFO: u32 = 1;

/// How the set is run.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidateConfig {
    /// The length of the run.
    pub duration_ns: Nanos,
    /// The CPU the threads share (default: Hourglass's measured CPU, the highest one).
    pub cpu: Option<usize>,
    /// The Hourglass timer the threads wait with (`HR`, `NATIVE`, `TIMERFD`, `POSIX`).
    pub timer: String,
    /// The run directory (default: a new one under the runs directory).
    pub output: Option<PathBuf>,
    /// The kernel's real-time bandwidth: `sched_rt_runtime_us` and `sched_rt_period_us`
    /// (`None` when unlimited or unknown).
    pub rt_bandwidth_us: Option<(u64, u64)>,
}

/// Whether a task's run agrees with its analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Agreement {
    /// Predicted to meet every deadline and did, every job within the predicted response time;
    /// or predicted to miss, and missed.
    Agrees,
    /// Met every deadline, but some job took longer than the predicted worst-case response
    /// time: the machine took time the model does not count (interrupts, the kernel, wakeup
    /// latency).
    AboveBound,
    /// Missed deadlines the analysis said it would meet.
    UnpredictedMisses,
    /// The analysis predicted a miss that did not happen in the run.
    MissNotSeen,
}

impl Agreement {
    /// Judges one task: its predicted worst-case response time and verdict against the misses
    /// and worst response time observed.
    pub fn judge(
        predicted_response: Option<Nanos>,
        predicted_schedulable: bool,
        misses: u64,
        worst_response: Option<Nanos>,
    ) -> Agreement {
        match (predicted_schedulable, misses > 0) {
            (true, true) => Agreement::UnpredictedMisses,
            (false, true) => Agreement::Agrees,
            (false, false) => Agreement::MissNotSeen,
            (true, false) => match (predicted_response, worst_response) {
                (Some(r), Some(w)) if w > r => Agreement::AboveBound,
                _ => Agreement::Agrees,
            },
        }
    }

    /// The judgement in words, for people.
    pub fn describe(self) -> &'static str {
        match self {
            Agreement::Agrees => "agrees",
            Agreement::AboveBound => "responded later than the bound (no miss)",
            Agreement::UnpredictedMisses => "MISSED, not predicted",
            Agreement::MissNotSeen => "predicted miss not seen",
        }
    }
}

/// What one task's thread did, against its prediction.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TaskValidation {
    /// The task's name.
    pub name: String,
    /// The Hourglass thread that ran it (the task's position in the file, from 0).
    pub thread: usize,
    /// The SCHED_FIFO priority it ran at.
    pub fifo_priority: u32,
    /// The predicted worst-case response time of the set as run (no jitter, no blocking);
    /// `null` when its busy period never ends.
    pub predicted_response_ns: Option<Nanos>,
    /// The analysis of the set as run says the task meets every deadline.
    pub predicted_schedulable: bool,
    /// The relative deadline the jobs were held to.
    pub deadline_ns: Nanos,
    /// Jobs whose period ended within the run.
    pub jobs: u64,
    /// Jobs that missed: not done by the end of their period, or done after a deadline
    /// shorter than the period.
    pub misses: u64,
    /// The first job that missed (0 is the first, released with every other task's first
    /// job: the critical instant); `null` without a miss.
    pub first_missed_job: Option<u64>,
    /// The longest response time (completion minus release) of a job that completed.
    pub worst_response_ns: Option<Nanos>,
    /// The longest time from a release to the job's first run: wakeup latency, and for a task
    /// below others the time they ran first.
    pub worst_start_delay_ns: Option<Nanos>,
    /// The judgement.
    pub agreement: Agreement,
}

/// `analyze rta --validate`: the analysis of the set as run, the run, and each task's
/// predicted against observed behaviour.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Validation {
    /// The analysis of the set as the run reproduces it: the file's C, T, D and priorities
    /// with no release jitter and no blocking.
    pub as_run: RtaReport,
    /// What the file holds that the run does not reproduce (release jitter, blocking), one
    /// sentence each; empty when the set as run is the file's set.
    pub not_reproduced: Vec<String>,
    /// When the set needs more of the CPU than the kernel lets real-time threads have
    /// (`sched_rt_runtime_us` of `sched_rt_period_us`): RT throttling then stops every one of
    /// them for the rest of each period, which the analysis does not model. `null` otherwise.
    pub throttled: Option<String>,
    /// The run directory (an Hourglass run, with every job in its `jobs` table).
    pub run_dir: String,
    /// The run's id.
    pub run_id: String,
    /// How long the set ran.
    pub duration_ns: Nanos,
    /// The CPUs the threads were pinned to.
    pub cpus: String,
    /// The timer the threads waited with.
    pub timer: String,
    /// One entry per task, in file order.
    pub tasks: Vec<TaskValidation>,
    /// Every task agrees.
    pub agrees: bool,
}

/// The SCHED_FIFO priority of each task (file order): [`TOP_FIFO`] for the highest analysed
/// priority (the smallest number), one less for each lower distinct priority.
pub fn fifo_priorities(report: &RtaReport) -> Result<Vec<u32>, RunError> {
    let mut levels: Vec<i64> = report.tasks.iter().map(|t| t.priority).collect();
    levels.sort_unstable();
    levels.dedup();
    let room = (TOP_FIFO - LOWEST_FIFO + 1) as usize;
    if levels.len() > room {
        return Err(RunError::Usage(format!(
            "--validate runs each priority level at its own SCHED_FIFO priority, {TOP_FIFO} down to \
             {LOWEST_FIFO}: the set has {} levels, give it at most {room}",
            levels.len()
        )));
    }
    Ok(report
        .tasks
        .iter()
        .map(|t| {
            let rank = levels.binary_search(&t.priority).unwrap_or(0) as u32;
            TOP_FIFO - rank
        })
        .collect())
}

/// The set as the run reproduces it (no jitter, no blocking) and the sentences that say what
/// was left out. Refuses what a PERIODIC thread cannot run.
pub fn as_run(tasks: &[Task]) -> Result<(Vec<Task>, Vec<String>), RunError> {
    let mut notes = Vec::new();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        if t.deadline_ns > t.period_ns {
            return Err(RunError::Usage(format!(
                "--validate: task {}: its deadline ({}) is beyond its period ({}); a PERIODIC \
                 thread's job ends with its period, so give a deadline no longer than the period",
                t.name, t.deadline_ns, t.period_ns
            )));
        }
        if t.wcet_ns > t.period_ns {
            return Err(RunError::Usage(format!(
                "--validate: task {}: C ({}) exceeds its period ({}), so every job misses and \
                 there is nothing to run; the analysis alone says so",
                t.name, t.wcet_ns, t.period_ns
            )));
        }
        if t.jitter_ns > Nanos::ZERO {
            notes.push(format!(
                "task {}: the file's release jitter of {} is not reproduced (the run has the \
                 machine's own)",
                t.name, t.jitter_ns
            ));
        }
        if t.blocking_ns > Nanos::ZERO {
            notes.push(format!(
                "task {}: the file's blocking of {} is not reproduced (no lower-priority job \
                 holds a resource in the run)",
                t.name, t.blocking_ns
            ));
        }
        let mut r = t.clone();
        r.jitter_ns = Nanos::ZERO;
        r.blocking_ns = Nanos::ZERO;
        out.push(r);
    }
    Ok((out, notes))
}

/// The Hourglass command line that runs `tasks` at `priorities`.
pub fn hourglass_args(tasks: &[Task], priorities: &[u32], c: &ValidateConfig) -> Vec<String> {
    let t = crate::duration::format_exact;
    let mut words = vec![
        "-n".to_string(),
        tasks.len().to_string(),
        "-d".to_string(),
        t(c.duration_ns),
        "-x".to_string(),
    ];
    if let Some(dir) = &c.output {
        words.push("-o".to_string());
        words.push(dir.display().to_string());
    }
    for (i, (task, prio)) in tasks.iter().zip(priorities).enumerate() {
        words.extend([
            "-t".to_string(),
            i.to_string(),
            "-p".to_string(),
            format!("f:{prio}"),
            "-w".to_string(),
            "PERIODIC".to_string(),
            t(task.wcet_ns),
            t(task.period_ns),
            "-i".to_string(),
            c.timer.clone(),
        ]);
        if let Some(cpu) = c.cpu {
            words.extend(["--affinity".to_string(), cpu.to_string()]);
        }
    }
    words
}

/// A set ready to run: its analysis as run, its priorities and the Hourglass run that
/// reproduces it ([`plan`]).
#[derive(Clone, Debug)]
pub struct Plan {
    /// The set as run (no jitter, no blocking).
    pub set: Vec<Task>,
    /// Its analysis.
    pub as_run: RtaReport,
    /// Each task's SCHED_FIFO priority.
    pub priorities: Vec<u32>,
    /// What the file holds that the run does not reproduce.
    pub not_reproduced: Vec<String>,
    /// Why RT throttling will stop the threads, when it will.
    pub throttled: Option<String>,
    /// The Hourglass run.
    pub spec: HourglassSpec,
    /// How it runs.
    pub config: ValidateConfig,
}

/// Plans the run of `tasks` (the file's set, with any measured inputs applied), refusing what
/// the run cannot reproduce.
pub fn plan(tasks: &[Task], c: &ValidateConfig) -> Result<Plan, RunError> {
    let (set, not_reproduced) = as_run(tasks)?;
    let longest = set.iter().map(|t| t.period_ns).max().unwrap_or(Nanos::ZERO);
    if c.duration_ns < longest {
        return Err(RunError::Usage(format!(
            "--duration {}: shorter than the longest period ({longest}), so that task would \
             complete no job; give at least {longest}",
            c.duration_ns
        )));
    }
    let as_run = rta::analyze(&set, Preemption::Preemptive)
        .map_err(|e| RunError::Usage(format!("--validate: {e}")))?;
    let priorities = fifo_priorities(&as_run)?;
    let throttled = throttling(as_run.utilization, c.rt_bandwidth_us);
    let words = hourglass_args(&set, &priorities, c);
    let spec = match cmdline::parse(&words) {
        Ok(Command::Run(spec)) => spec,
        Ok(Command::Help) => return Err(RunError::Usage("unexpected help request".into())),
        Err(e) => return Err(RunError::Usage(format!("--validate: {e}"))),
    };
    Ok(Plan {
        set,
        as_run,
        priorities,
        not_reproduced,
        throttled,
        spec,
        config: c.clone(),
    })
}

/// The sentence that says RT throttling will stop the set's threads, when its utilisation
/// exceeds the kernel's real-time bandwidth `(runtime, period)` in µs.
pub fn throttling(utilization: f64, bandwidth_us: Option<(u64, u64)>) -> Option<String> {
    let (runtime, period) = bandwidth_us.filter(|&(_, p)| p > 0)?;
    let limit = runtime as f64 / period as f64;
    (utilization > limit).then(|| {
        format!(
            "the set needs {:.1} % of its CPU, more than the {:.1} % the kernel lets real-time \
             threads have (sched_rt_runtime_us = {runtime} of {period}): RT throttling stops all \
             of them for {} ms of every {} ms, which the analysis does not model",
            utilization * 100.0,
            limit * 100.0,
            period.saturating_sub(runtime) / 1000,
            period / 1000
        )
    })
}

/// Judges a finished run of a planned set (`hourglass::run::run(&plan.spec, ...)`; the caller
/// runs it, so that the run directory is kept and catalogued whatever follows): reads its jobs
/// and puts each task's prediction beside what its thread did.
pub fn judge_run(plan: Plan, result: &HourglassResult) -> Result<Validation, RunError> {
    refuse_downgraded(result, &plan.set)?;
    let deadlines: Vec<Nanos> = plan.set.iter().map(|t| t.deadline_ns).collect();
    let observed = crate::inputs::jobs_of_run(Path::new(&result.run.run_dir), &deadlines)
        .map_err(|e| RunError::Failed(e.to_string()))?;
    Ok(judge(plan, &observed, result))
}

/// A run whose threads could not have their SCHED_FIFO priorities validates nothing.
fn refuse_downgraded(result: &HourglassResult, set: &[Task]) -> Result<(), RunError> {
    if let Some(t) = result.threads.iter().find(|t| t.downgraded.is_some()) {
        let name = set.get(t.thread).map(|x| x.name.as_str()).unwrap_or("?");
        return Err(RunError::Failed(format!(
            "cannot validate: task {name} (thread {}) did not get its SCHED_FIFO priority ({}); \
             run as root or with CAP_SYS_NICE (the run is kept in {})",
            t.thread,
            t.downgraded.as_deref().unwrap_or_default(),
            result.run.run_dir
        )));
    }
    Ok(())
}

/// Puts each task's prediction beside what its thread did.
fn judge(
    plan: Plan,
    observed: &[crate::inputs::JobsObserved],
    result: &HourglassResult,
) -> Validation {
    let Plan {
        set,
        as_run,
        priorities,
        not_reproduced,
        throttled,
        config,
        ..
    } = plan;
    let tasks: Vec<TaskValidation> = set
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let p = &as_run.tasks[i];
            let o = observed.get(i).cloned().unwrap_or_default();
            TaskValidation {
                name: t.name.clone(),
                thread: i,
                fifo_priority: priorities[i],
                predicted_response_ns: p.response_time_ns,
                predicted_schedulable: p.schedulable,
                deadline_ns: t.deadline_ns,
                jobs: o.jobs,
                misses: o.misses,
                first_missed_job: o.first_missed_job,
                worst_response_ns: o.worst_response_ns,
                worst_start_delay_ns: o.worst_start_delay_ns,
                agreement: Agreement::judge(
                    p.response_time_ns,
                    p.schedulable,
                    o.misses,
                    o.worst_response_ns,
                ),
            }
        })
        .collect();
    let cpus = result
        .threads
        .first()
        .map(|t| t.cpus.clone())
        .unwrap_or_default();
    Validation {
        agrees: tasks.iter().all(|t| t.agreement == Agreement::Agrees),
        as_run,
        not_reproduced,
        throttled,
        run_dir: result.run.run_dir.clone(),
        run_id: result.run.run_id.clone(),
        duration_ns: result.run.duration_ns,
        cpus,
        timer: config.timer,
        tasks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Nanos {
        Nanos(x * 1_000_000)
    }

    /// Hourglass §5.5: the modem above the video task, as rate-monotonic order puts them.
    fn five_five(video_c: u64) -> Vec<Task> {
        vec![
            Task::new("modem", ms(3), ms(8)),
            Task::new("video", ms(video_c), ms(33)),
        ]
    }

    #[test]
    fn priorities_follow_the_analysed_order_from_the_top() {
        let mut set = five_five(17);
        set.push(Task::new("audio", Nanos(400_000), Nanos(1_333_000)));
        let r = rta::analyze(&set, Preemption::Preemptive).unwrap();
        // Deadline-monotonic: audio (1.333 ms) first, then the modem, then the video task.
        assert_eq!(fifo_priorities(&r).unwrap(), vec![79, 78, 80]);
    }

    #[test]
    fn equal_given_priorities_share_a_level() {
        let mut set = five_five(17);
        set[0].priority = Some(5);
        set[1].priority = Some(5);
        set.push(Task {
            priority: Some(1),
            ..Task::new("audio", Nanos(400_000), Nanos(1_333_000))
        });
        let r = rta::analyze(&set, Preemption::Preemptive).unwrap();
        assert_eq!(fifo_priorities(&r).unwrap(), vec![79, 79, 80]);
    }

    #[test]
    fn too_many_levels_are_refused() {
        let set: Vec<Task> = (0..81)
            .map(|i| Task::new(format!("t{i}"), Nanos(1_000), ms(10 + i)))
            .collect();
        let r = rta::analyze(&set, Preemption::Preemptive).unwrap();
        let e = fifo_priorities(&r).unwrap_err().to_string();
        assert!(e.contains("81 levels"), "{e}");
    }

    #[test]
    fn jitter_and_blocking_are_named_and_left_out_of_the_set_as_run() {
        let mut set = five_five(19);
        set[1].jitter_ns = ms(8);
        set[0].blocking_ns = ms(1);
        let (run, notes) = as_run(&set).unwrap();
        assert!(run
            .iter()
            .all(|t| t.jitter_ns == Nanos::ZERO && t.blocking_ns == Nanos::ZERO));
        assert_eq!(notes.len(), 2);
        assert!(notes[0].contains("modem") && notes[0].contains("blocking"));
        assert!(notes[1].contains("video") && notes[1].contains("jitter of 8 ms"));
        // As run the set is feasible (R = 19 + 4·3 = 31 ms), though the file's is not (39 ms).
        let r = rta::analyze(&run, Preemption::Preemptive).unwrap();
        assert_eq!(r.tasks[1].response_time_ns, Some(ms(31)));
        assert!(r.schedulable);
    }

    #[test]
    fn what_a_periodic_thread_cannot_run_is_refused() {
        let mut set = five_five(17);
        set[1].deadline_ns = ms(40);
        let e = as_run(&set).unwrap_err().to_string();
        assert!(
            e.contains("video") && e.contains("beyond its period"),
            "{e}"
        );
        let set = vec![Task::new("x", ms(9), ms(8))];
        let e = as_run(&set).unwrap_err().to_string();
        assert!(e.contains("exceeds its period"), "{e}");
    }

    #[test]
    fn the_command_line_is_the_papers_with_fifo_priorities() {
        let set = five_five(17);
        let c = ValidateConfig {
            duration_ns: Nanos(10_000_000_000),
            cpu: Some(1),
            timer: "HR".into(),
            output: None,
            rt_bandwidth_us: Some((950_000, 1_000_000)),
        };
        let words = hourglass_args(&set, &[80, 79], &c).join(" ");
        assert_eq!(
            words,
            "-n 2 -d 10s -x -t 0 -p f:80 -w PERIODIC 3ms 8ms -i HR --affinity 1 \
             -t 1 -p f:79 -w PERIODIC 17ms 33ms -i HR --affinity 1"
        );
        assert!(matches!(
            cmdline::parse(&words.split(' ').map(String::from).collect::<Vec<_>>()),
            Ok(Command::Run(_))
        ));
    }

    #[test]
    fn a_set_above_the_real_time_limit_is_said_to_be_throttled() {
        let limit = Some((950_000, 1_000_000));
        assert_eq!(throttling(0.95, limit), None);
        assert_eq!(throttling(0.99, None), None);
        let t = throttling(0.996, limit).expect("throttled");
        assert!(
            t.starts_with("the set needs 99.6 % of its CPU, more than the 95.0 %"),
            "{t}"
        );
        assert!(t.contains("for 50 ms of every 1000 ms"), "{t}");
    }

    #[test]
    fn each_judgement() {
        use Agreement::*;
        let r = Some(ms(29));
        assert_eq!(Agreement::judge(r, true, 0, Some(ms(28))), Agrees);
        assert_eq!(Agreement::judge(r, true, 0, Some(ms(29))), Agrees);
        assert_eq!(Agreement::judge(r, true, 0, Some(ms(30))), AboveBound);
        assert_eq!(
            Agreement::judge(r, true, 3, Some(ms(28))),
            UnpredictedMisses
        );
        assert_eq!(Agreement::judge(Some(ms(37)), false, 1, None), Agrees);
        assert_eq!(Agreement::judge(None, false, 0, Some(ms(30))), MissNotSeen);
        assert_eq!(Agreement::judge(r, true, 0, None), Agrees);
    }
}
