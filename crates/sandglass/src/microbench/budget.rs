//! A per-frame timing budget: predicted from measured step costs, then run for real.
//!
//! Dannenberg et al. (§11) composed their video player's budget from the costs they had
//! measured: "Disk read 20ms, Send data (client to Tactus) 9ms, Copy data within Tactus 2ms,
//! Send and display data (Tactus to X11) 20ms, Total 51ms" against 100 ms per frame, and
//! remarked that "although these numbers indicate a fair amount of headroom, this application
//! barely keeps up with real time". This module makes the comparison they could not: a budget
//! file describes the steps of one frame and the frame period,
//!
//! ```toml
//! period = "100ms"          # one frame per period
//! frames = 100              # frames to run for real (default: 10 s worth, 10 to 1000)
//! policy = "f:80"           # the frame thread's policy (default f:80; SCHED_OTHER where not permitted)
//! placement = "same-cpu"    # where the receivers of send steps run: same-cpu or cross-cpu
//!
//! [[step]]
//! name = "disk read"        # optional
//! kind = "read"             # read N bytes from a file, sequentially
//! bytes = "20000"
//! cache = "cold"            # warm (default) or cold: no read-ahead, pages dropped before each read
//!
//! [[step]]
//! kind = "send"             # send N bytes to a receiver thread and wait for its 1-byte ack
//! bytes = 19200
//! mech = "shm-futex"        # any mechanism of `sandglass bench ipc`
//!
//! [[step]]
//! kind = "copy"             # copy N bytes from one buffer to another
//! bytes = 19200
//!
//! [[step]]
//! kind = "compute"          # a fixed amount of CPU work that takes this long unpreempted
//! time = "2ms"
//! ```
//!
//! **Prediction.** Each step is run alone, repeatedly, on the frame thread's CPU and policy,
//! resting after each run as long as it ran (so that a real-time thread never meets RT
//! throttling), and its time distribution measured (up to 200 runs or one second per step). The seed's table is the sum of the per-step medians
//! against the period; the headroom is what is left. Steps are not independent of their
//! neighbours (caches, the scheduler), and the sum of medians says nothing about how often a
//! frame will be late, so the distribution of the frame time is also estimated by adding one
//! randomly drawn sample of every step, 20 000 times (a resampling of the measured
//! distributions, [`crate::analysis::rng`]); the share of sums above the period is the
//! predicted probability of a missed frame.
//!
//! **Measurement.** A periodic thread (SCHED_FIFO where permitted) runs the frames with absolute
//! releases `release_k = start + k·period` (`clock_nanosleep(TIMER_ABSTIME)`). Every frame is
//! run and counted: a frame that starts late because the previous one overran is still run,
//! and is missed when it completes after its deadline, `release_k + period`. No release is
//! skipped to catch up, so a long stall shows as every frame it delayed (no coordinated
//! omission). The predicted and the measured misses are reported side by side.
//!
//! **Under load.** With `--load`, the loads start after the prediction (which measures the
//! steps on a quiet machine, as the seed's cost table did), settle, and run through the frames
//! only; they stop as soon as the last frame ends, and what each achieved is reported.

use super::ipc::Mechanism;
#[cfg(feature = "linux")]
use super::ipc::{self, End};
#[cfg(feature = "linux")]
use super::{now, setup_thread, Session};
use super::{BenchError, Header, Placement, ThreadSetup};
use crate::analysis::rng::SplitMix64;
use crate::duration;
use crate::kind::{fig, KeyFigure, OverCpus, Unit, LOAD};
#[cfg(feature = "linux")]
use crate::load;
use crate::load::LoadReport;
use crate::plan::LoadPlan;
use crate::policy::Policy;
use crate::probe::{num, Figures, Probe};
#[cfg(feature = "linux")]
use crate::runner::host::{Loads, RealHost};
#[cfg(feature = "linux")]
use crate::runner::{self, Observer, RunContext, RunError};
use crate::stats::Summary;
use crate::units::Nanos;
#[cfg(feature = "linux")]
use crate::warning::Warning;
use crate::RunKind;
#[cfg(feature = "linux")]
use sandglass_sys::clock::{sleep_until, ClockId};
#[cfg(feature = "linux")]
use sandglass_sys::Errno;
use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "linux")]
use std::fs::File;
#[cfg(feature = "linux")]
use std::os::unix::fs::FileExt;
#[cfg(feature = "linux")]
use std::path::Path;
use std::path::PathBuf;
#[cfg(feature = "linux")]
use std::sync::atomic::{AtomicBool, Ordering};
use thiserror::Error;
use toml::Spanned;

/// What one step does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum StepKind {
    Read { bytes: u64, cold: bool },
    Send { bytes: u64, mechanism: Mechanism },
    Copy { bytes: u64 },
    Compute { time_ns: Nanos },
}

/// One step of a frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Step {
    pub name: String,
    #[serde(flatten)]
    pub kind: StepKind,
}

/// A parsed budget file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BudgetSpec {
    pub period_ns: Nanos,
    pub frames: Option<u64>,
    pub policy: Policy,
    pub cpu: Option<usize>,
    pub placement: Placement,
    pub steps: Vec<Step>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    period: Spanned<String>,
    frames: Option<Spanned<i64>>,
    policy: Option<Spanned<String>>,
    cpu: Option<Spanned<i64>>,
    placement: Option<Spanned<String>>,
    #[serde(default)]
    step: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    kind: Spanned<String>,
    name: Option<String>,
    bytes: Option<Spanned<toml::Value>>,
    time: Option<Spanned<String>>,
    mech: Option<Spanned<String>>,
    cache: Option<Spanned<String>>,
}

/// Why a budget file or its options were refused, or its run failed. A refusal names the file
/// and line or the flag, and says how to fix it; a failure names the step, file or call.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BudgetError {
    /// A line of the budget file, with what is wrong there and the fix.
    #[error("{file}:{line}: {detail}")]
    Parse {
        file: String,
        line: usize,
        detail: String,
    },
    #[error(
        "{file}: the budget has no [[step]]: add at least one (kind = read, send, copy or compute)"
    )]
    NoSteps { file: String },
    #[error("--frames must be at least 1")]
    ZeroFrames,
    #[error("--predict-samples must be at least 1")]
    ZeroPredictSamples,
    #[error("placement = \"cross-cpu\" needs two CPUs, but this process may use only CPU {cpu}: use placement = \"same-cpu\"")]
    PeerCpu { cpu: usize },
    /// The frame thread or a receiver could not be pinned or scheduled.
    #[error(transparent)]
    Setup(#[from] BenchError),
    #[error("no directory for the read step's file")]
    NoDirectory,
    #[error("cannot create {}: {reason}", .path.display())]
    CreateFile { path: PathBuf, reason: String },
    #[error("cannot write {}: {reason}", .path.display())]
    WriteFile { path: PathBuf, reason: String },
    #[error("cannot write {} back: {reason}", .path.display())]
    SyncFile { path: PathBuf, reason: String },
    #[error("cannot open {}: {reason}", .path.display())]
    OpenFile { path: PathBuf, reason: String },
    #[cfg(feature = "linux")]
    #[error("posix_fadvise(RANDOM): {0}")]
    FadviseRandom(Errno),
    #[error("step {step} ({name}): cannot create the channel: {reason}")]
    Channel {
        step: usize,
        name: String,
        reason: String,
    },
    #[error("cannot create a receiver thread: {reason}")]
    ReceiverThread { reason: String },
    #[error("the receiver could not ack: {reason}")]
    ReceiverAck { reason: String },
    #[error("the receiver could not receive: {reason}")]
    ReceiverReceive { reason: String },
    #[error("a receiver thread panicked")]
    ReceiverPanicked,
    /// A step failed while it was measured alone.
    #[error("step {step}: {error}")]
    Step { step: usize, error: StepError },
    /// A step failed inside a frame of the real run.
    #[error("frame {frame}, step {step}: {error}")]
    Frame {
        frame: u64,
        step: usize,
        error: StepError,
    },
    /// Dropping a cold step's pages between runs failed.
    #[error(transparent)]
    Prepare(#[from] StepError),
    #[error("cannot start the load: cannot create a thread: {reason}")]
    LoadThread { reason: String },
    #[error("cannot start the load: the thread starting the loads panicked")]
    LoadThreadPanicked,
    #[error("cannot start the load: {reason}")]
    LoadStart { reason: String },
}

/// Why one run of a step failed, named by its system call.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum StepError {
    #[cfg(feature = "linux")]
    #[error("posix_fadvise(DONTNEED): {0}")]
    DropPages(Errno),
    #[error("read: {reason}")]
    Read { reason: String },
    #[error("send: {reason}")]
    Send { reason: String },
    #[error("the receiver closed the channel")]
    ReceiverClosed,
    #[error("waiting for the receiver's ack: {reason}")]
    Ack { reason: String },
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Parses a budget file; every error names the file and line and says how to fix it.
pub fn parse_budget(text: &str, file: &str) -> Result<BudgetSpec, BudgetError> {
    let raw: RawBudget = toml::from_str(text).map_err(|e| BudgetError::Parse {
        file: file.to_string(),
        line: e.span().map(|r| line_of(text, r.start)).unwrap_or(1),
        detail: e.message().trim().to_string(),
    })?;
    let at = |span: std::ops::Range<usize>, detail: String| BudgetError::Parse {
        file: file.to_string(),
        line: line_of(text, span.start),
        detail,
    };
    let period = duration::parse(raw.period.get_ref())
        .map_err(|e| at(raw.period.span(), format!("period: {e}")))?;
    if period.0 == 0 {
        return Err(at(
            raw.period.span(),
            "period must be longer than zero".into(),
        ));
    }
    let frames = match &raw.frames {
        Some(f) if !(1..=1_000_000).contains(f.get_ref()) => {
            return Err(at(f.span(), "frames must be from 1 to 1000000".into()))
        }
        Some(f) => Some(*f.get_ref() as u64),
        None => None,
    };
    let policy = match &raw.policy {
        Some(p) => {
            let pol =
                Policy::parse(p.get_ref()).map_err(|e| at(p.span(), format!("policy: {e}")))?;
            if pol.is_deadline() {
                return Err(at(
                    p.span(),
                    "policy: SCHED_DEADLINE is not offered here; use f:PRIO, r:PRIO or o:NICE"
                        .into(),
                ));
            }
            pol
        }
        None => Policy::Fifo { priority: 80 },
    };
    let cpu = match &raw.cpu {
        Some(c) if *c.get_ref() < 0 => return Err(at(c.span(), "cpu must be a CPU number".into())),
        Some(c) => Some(*c.get_ref() as usize),
        None => None,
    };
    let placement = match &raw.placement {
        Some(p) => Placement::parse(p.get_ref())
            .map_err(|e| at(p.span(), e.to_string().replace("--placement", "placement")))?,
        None => Placement::SameCpu,
    };
    if raw.step.is_empty() {
        return Err(BudgetError::NoSteps {
            file: file.to_string(),
        });
    }
    let mut steps = Vec::new();
    for (i, s) in raw.step.iter().enumerate() {
        let kind = s.kind.get_ref().as_str();
        let here = |span: std::ops::Range<usize>, msg: String| {
            at(span, format!("step {} ({kind}): {msg}", i + 1))
        };
        let bytes = || -> Result<u64, BudgetError> {
            let b = s.bytes.as_ref().ok_or_else(|| {
                here(
                    s.kind.span(),
                    "needs bytes, such as bytes = 19200 or bytes = \"64KiB\"".into(),
                )
            })?;
            let v = match b.get_ref() {
                toml::Value::Integer(n) if *n > 0 => *n as u64,
                toml::Value::Integer(_) => {
                    return Err(here(
                        b.span(),
                        "bytes: a size of 0 bytes moves nothing; give at least 1".into(),
                    ))
                }
                toml::Value::String(t) => {
                    super::parse_size(t).map_err(|e| here(b.span(), format!("bytes: {e}")))?
                }
                _ => {
                    return Err(here(
                        b.span(),
                        "bytes: give a number or a size string such as \"64KiB\"".into(),
                    ))
                }
            };
            if v > 256 << 20 {
                return Err(here(b.span(), "bytes: at most 256 MiB per step".into()));
            }
            Ok(v)
        };
        // A key given where it does not belong, at its own place in the file.
        let unexpected = |what: &str, span: Option<std::ops::Range<usize>>| match span {
            Some(span) => Err(here(
                span,
                format!("{what} does not apply to a {kind} step"),
            )),
            None => Ok(()),
        };
        let k = match kind {
            "read" => {
                unexpected("time", s.time.as_ref().map(|t| t.span()))?;
                unexpected("mech", s.mech.as_ref().map(|t| t.span()))?;
                let cold = match s.cache.as_ref().map(|c| (c.get_ref().as_str(), c.span())) {
                    None | Some(("warm", _)) => false,
                    Some(("cold", _)) => true,
                    Some((other, span)) => {
                        return Err(here(span, format!("cache '{other}': use warm or cold")))
                    }
                };
                StepKind::Read {
                    bytes: bytes()?,
                    cold,
                }
            }
            "send" => {
                unexpected("time", s.time.as_ref().map(|t| t.span()))?;
                unexpected("cache", s.cache.as_ref().map(|t| t.span()))?;
                let m = s.mech.as_ref().ok_or_else(|| {
                    here(s.kind.span(), "needs mech, such as mech = \"pipe\"".into())
                })?;
                let mechanism = Mechanism::parse(m.get_ref())
                    .map_err(|e| here(m.span(), e.to_string().replace("--mech", "mech")))?;
                StepKind::Send {
                    bytes: bytes()?,
                    mechanism,
                }
            }
            "copy" => {
                unexpected("time", s.time.as_ref().map(|t| t.span()))?;
                unexpected("mech", s.mech.as_ref().map(|t| t.span()))?;
                unexpected("cache", s.cache.as_ref().map(|t| t.span()))?;
                StepKind::Copy { bytes: bytes()? }
            }
            "compute" => {
                unexpected("bytes", s.bytes.as_ref().map(|t| t.span()))?;
                unexpected("mech", s.mech.as_ref().map(|t| t.span()))?;
                unexpected("cache", s.cache.as_ref().map(|t| t.span()))?;
                let t = s.time.as_ref().ok_or_else(|| {
                    here(s.kind.span(), "needs time, such as time = \"2ms\"".into())
                })?;
                let time_ns = duration::parse(t.get_ref())
                    .map_err(|e| here(t.span(), format!("time: {e}")))?;
                if time_ns.0 == 0 {
                    return Err(here(t.span(), "time must be longer than zero".into()));
                }
                StepKind::Compute { time_ns }
            }
            other => {
                return Err(at(
                    s.kind.span(),
                    format!(
                        "step {}: unknown kind '{other}': use read, send, copy or compute",
                        i + 1
                    ),
                ))
            }
        };
        let name = s.name.clone().unwrap_or_else(|| default_name(&k));
        steps.push(Step { name, kind: k });
    }
    Ok(BudgetSpec {
        period_ns: period,
        frames,
        policy,
        cpu,
        placement,
        steps,
    })
}

fn default_name(k: &StepKind) -> String {
    match k {
        StepKind::Read { bytes, cold } => format!(
            "read {} from a file{}",
            super::format_size(*bytes),
            if *cold { " (cold)" } else { "" }
        ),
        StepKind::Send { bytes, mechanism } => {
            format!(
                "send {} by {}",
                super::format_size(*bytes),
                mechanism.name()
            )
        }
        StepKind::Copy { bytes } => format!("copy {}", super::format_size(*bytes)),
        StepKind::Compute { time_ns } => format!("compute {time_ns}"),
    }
}

/// The default number of frames: 10 s worth, from 10 to 1000.
pub fn default_frames(period: Nanos) -> u64 {
    (10_000_000_000 / period.0.max(1)).clamp(10, 1000)
}

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BudgetConfig {
    pub spec: BudgetSpec,
    /// The budget file, as given.
    pub file: String,
    /// Where the files of read steps are created.
    pub dir: PathBuf,
    /// Overrides the file's `frames`.
    pub frames: Option<u64>,
    /// Samples of each step in the prediction (at most, and at most one second per step).
    pub predict_samples: usize,
    pub output_dir: Option<PathBuf>,
    /// Loads run through the frames of the real run (not the prediction).
    #[serde(default)]
    pub loads: LoadPlan,
}

/// Sums drawn for the predicted frame-time distribution.
pub const DRAWS: usize = 20_000;
/// The seed of the resampling, fixed so that a run's prediction can be recomputed.
const SEED: u64 = 0x6275_6467_6574;

/// One step's predicted and measured times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepResult {
    #[serde(flatten)]
    pub step: Step,
    /// Run alone, repeatedly.
    pub predicted_ns: Option<Summary>,
    /// Inside the frames of the real run.
    pub measured_ns: Option<Summary>,
}

/// The prediction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Prediction {
    /// Σ step medians: the seed's "Total".
    pub sum_p50_ns: i64,
    /// Σ step p99s: a pessimistic total.
    pub sum_p99_ns: i64,
    /// period − Σ medians.
    pub headroom_ns: i64,
    /// The headroom as a share of the period.
    pub headroom_share: f64,
    /// The frame time from resampled step times.
    pub frame_ns: Option<Summary>,
    pub draws: u64,
    /// The share of resampled frames longer than the period.
    pub miss_probability: f64,
    /// miss_probability × frames.
    pub expected_misses: f64,
}

/// The real run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FramesMeasured {
    /// Frames run (all of them unless the run was stopped).
    pub frames: u64,
    /// Frames completed after their deadline (release + period).
    pub missed: u64,
    pub miss_share: f64,
    /// The longest run of consecutive missed frames.
    pub longest_miss_run: u64,
    /// Completion − release.
    pub response_ns: Option<Summary>,
    /// Completion − start: the frame's own time.
    pub execution_ns: Option<Summary>,
    /// Start − release: how late each frame began (a late wakeup or an overrunning predecessor).
    pub start_lateness_ns: Option<Summary>,
}

/// The result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BudgetResult {
    #[serde(flatten)]
    pub header: Header,
    pub file: String,
    pub period_ns: Nanos,
    pub cpu: usize,
    /// Where the receivers of send steps ran.
    pub peer_cpu: usize,
    pub frame_thread: Option<ThreadSetup>,
    pub steps: Vec<StepResult>,
    pub prediction: Prediction,
    pub measured: FramesMeasured,
    /// What each load achieved during the frames (empty without `--load`).
    #[serde(default)]
    pub loads: Vec<LoadReport>,
    /// The prediction against the frames measured (absent in runs written before it).
    #[serde(default)]
    pub agreement: Option<Agreement>,
}

/// A prediction and its own run disagree when the measured response differs from the
/// predicted frame time by more than this factor, either way, at the median or the p99.
pub const DISAGREEMENT: f64 = 2.0;

/// The prediction against the frames the run measured, with where the time went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Agreement {
    /// Measured response (release to completion) ÷ predicted frame time, at the median.
    pub ratio_p50: f64,
    /// The same at the p99.
    pub ratio_p99: f64,
    /// Either ratio is beyond [`DISAGREEMENT`] (or below its inverse).
    pub disagrees: bool,
    /// The median frame's time, part by part, predicted against measured, the part furthest
    /// above its prediction first: the wakeup (how late the frame began), each step inside the
    /// frames against the step alone, and the time between steps that no step accounts for.
    pub parts: Vec<Part>,
}

/// One part of a frame's time at the median.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Part {
    pub name: String,
    pub predicted_ns: i64,
    pub measured_ns: i64,
    /// measured − predicted.
    pub excess_ns: i64,
}

/// The name of the part that is how late each frame began.
pub const WAKEUP_PART: &str = "wakeup (frame start after its release)";
/// The name of the part no step accounts for.
pub const BETWEEN_PART: &str = "between steps (not in any step)";

/// What a disagreement says, for people: the ratios and the part furthest above its prediction.
pub fn disagreement_text(a: &Agreement) -> String {
    let mut t = format!(
        "the prediction disagrees with its own run by more than {DISAGREEMENT}x: the measured response is {:.1}x the predicted frame time at the median and {:.1}x at the p99",
        a.ratio_p50, a.ratio_p99
    );
    if let Some(p) = a.parts.first().filter(|p| p.excess_ns > 0) {
        t.push_str(&format!(
            "; the largest unexplained part is {}: {} at the median against {} predicted",
            p.name,
            Nanos(p.measured_ns.max(0) as u64),
            Nanos(p.predicted_ns.max(0) as u64)
        ));
    }
    t
}

/// Compares `prediction` with the frames measured: the ratios, and the median frame split
/// into its parts. `None` without a predicted or a measured frame.
pub fn agreement(
    prediction: &Prediction,
    steps: &[StepResult],
    measured: &FramesMeasured,
) -> Option<Agreement> {
    let frame = prediction.frame_ns.as_ref()?;
    let response = measured.response_ns.as_ref()?;
    let ratio = |m: i64, p: i64| m as f64 / p.max(1) as f64;
    let (ratio_p50, ratio_p99) = (
        ratio(response.p50_ns, frame.p50_ns),
        ratio(response.p99_ns, frame.p99_ns),
    );
    let off = |r: f64| !(1.0 / DISAGREEMENT..=DISAGREEMENT).contains(&r);
    let part = |name: &str, predicted_ns: i64, measured_ns: i64| Part {
        name: name.to_string(),
        predicted_ns,
        measured_ns,
        excess_ns: measured_ns - predicted_ns,
    };
    let mut parts = Vec::with_capacity(steps.len() + 2);
    let p50 = |s: &Option<Summary>| s.as_ref().map_or(0, |s| s.p50_ns);
    parts.push(part(WAKEUP_PART, 0, p50(&measured.start_lateness_ns)));
    let mut in_steps = 0;
    for s in steps {
        in_steps += p50(&s.measured_ns);
        parts.push(part(
            &s.step.name,
            p50(&s.predicted_ns),
            p50(&s.measured_ns),
        ));
    }
    parts.push(part(
        BETWEEN_PART,
        0,
        (p50(&measured.execution_ns) - in_steps).max(0),
    ));
    parts.sort_by_key(|p| std::cmp::Reverse(p.excess_ns));
    Some(Agreement {
        ratio_p50,
        ratio_p99,
        disagrees: off(ratio_p50) || off(ratio_p99),
        parts,
    })
}

/// A step ready to run.
#[cfg(feature = "linux")]
enum Runner {
    Read {
        file: File,
        buf: Vec<u8>,
        size: u64,
        pos: u64,
        cold: bool,
    },
    Send {
        end: End,
        msg: Vec<u8>,
        ack: [u8; 1],
    },
    Copy {
        src: Vec<u8>,
        dst: Vec<u8>,
    },
    Compute {
        iterations: u64,
    },
}

/// A fixed amount of work: `iterations` dependent multiply-adds.
#[cfg(feature = "linux")]
#[inline(never)]
fn spin(iterations: u64) -> u64 {
    let mut x = 1u64;
    for _ in 0..iterations {
        x = std::hint::black_box(
            x.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        );
    }
    x
}

/// Nanoseconds per [`spin`] iteration on this CPU: the fastest of five runs.
#[cfg(feature = "linux")]
fn calibrate_spin() -> f64 {
    let n = 200_000;
    (0..5)
        .map(|_| {
            let t = now();
            std::hint::black_box(spin(n));
            (now() - t) as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
        .max(1e-3)
}

#[cfg(feature = "linux")]
impl Runner {
    /// Work done between frames, outside the timed steps: a cold read drops the pages it will
    /// read next.
    #[cfg(feature = "linux")]
    fn prepare(&mut self) -> Result<(), StepError> {
        if let Runner::Read {
            file, cold: true, ..
        } = self
        {
            // The whole file, not the range about to be read: DONTNEED drops only whole pages,
            // and the page cache may hold the file in large folios that a smaller range would
            // leave alone. Only the pages read since the last drop are cached, so this is cheap.
            sandglass_sys::ipc::fadvise_dontneed(file, 0, 0).map_err(StepError::DropPages)?;
        }
        Ok(())
    }

    #[cfg(feature = "linux")]
    fn run(&mut self) -> Result<(), StepError> {
        match self {
            Runner::Read {
                file,
                buf,
                size,
                pos,
                ..
            } => {
                if *pos + buf.len() as u64 > *size {
                    *pos = 0;
                }
                file.read_exact_at(buf, *pos).map_err(|e| StepError::Read {
                    reason: e.to_string(),
                })?;
                *pos += buf.len() as u64;
                Ok(())
            }
            Runner::Send { end, msg, ack } => {
                end.send(msg).map_err(|e| StepError::Send {
                    reason: e.to_string(),
                })?;
                match end.recv_exact(ack) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(StepError::ReceiverClosed),
                    Err(e) => Err(StepError::Ack {
                        reason: e.to_string(),
                    }),
                }
            }
            Runner::Copy { src, dst } => {
                dst.copy_from_slice(src);
                std::hint::black_box(dst);
                Ok(())
            }
            Runner::Compute { iterations } => {
                std::hint::black_box(spin(*iterations));
                Ok(())
            }
        }
    }
}

/// The receiver of a send step: takes each message whole and acknowledges it with one byte.
#[cfg(feature = "linux")]
fn receiver(
    mut end: End,
    bytes: usize,
    cpu: usize,
    policy: Policy,
    privileged: bool,
) -> Option<BudgetError> {
    if let Err(e) = setup_thread(cpu, &policy, privileged) {
        return Some(e.into());
    }
    let mut buf = vec![0u8; bytes];
    loop {
        match end.recv_exact(&mut buf) {
            Ok(true) => {
                if let Err(e) = end.send(&[1]) {
                    return Some(BudgetError::ReceiverAck {
                        reason: e.to_string(),
                    });
                }
            }
            Ok(false) => return None,
            Err(e) => {
                return Some(BudgetError::ReceiverReceive {
                    reason: e.to_string(),
                })
            }
        }
    }
}

/// The file a read step reads: at least enough for every frame and prediction sample once, at
/// most 64 MiB (then it is read round and round).
#[cfg(feature = "linux")]
fn read_file(dir: &Path, index: usize, bytes: u64, reads: u64) -> Result<(File, u64), BudgetError> {
    let size = bytes
        .saturating_mul(reads)
        .clamp(bytes, (64u64 << 20).max(bytes));
    let path = dir.join(format!("step{index}"));
    let mut rng = SplitMix64::new(index as u64 + 1);
    let mut data = vec![0u8; (1 << 20).min(size as usize)];
    {
        use std::io::Write;
        let mut f = File::create(&path).map_err(|e| BudgetError::CreateFile {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let mut left = size;
        while left > 0 {
            for w in data.chunks_mut(8) {
                let v = rng.next_u64().to_le_bytes();
                w.copy_from_slice(&v[..w.len()]);
            }
            let n = left.min(data.len() as u64) as usize;
            f.write_all(&data[..n])
                .map_err(|e| BudgetError::WriteFile {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            left -= n as u64;
        }
        f.sync_all().map_err(|e| BudgetError::SyncFile {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    }
    let f = File::open(&path).map_err(|e| BudgetError::OpenFile {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok((f, size))
}

/// The CPU of the receivers of send steps.
pub fn peer_cpu(placement: Placement, cpu: usize, allowed: &[usize]) -> Result<usize, BudgetError> {
    match placement {
        Placement::SameCpu => Ok(cpu),
        Placement::CrossCpu => allowed
            .iter()
            .rev()
            .copied()
            .find(|&c| c != cpu)
            .ok_or(BudgetError::PeerCpu { cpu }),
    }
}

/// Adds one random sample of every step, `draws` times: the frame-time distribution if the
/// steps were independent. `samples` must each be non-empty.
pub fn resample_frames(samples: &[Vec<i64>], draws: usize, seed: u64) -> Vec<i64> {
    let mut rng = SplitMix64::new(seed);
    (0..draws)
        .map(|_| {
            samples
                .iter()
                .map(|s| s[rng.below(s.len() as u64) as usize])
                .sum()
        })
        .collect()
}

/// The prediction from each step's samples, against `period` and `frames`.
pub fn predict(samples: &[Vec<i64>], period: Nanos, frames: u64) -> Prediction {
    let summaries: Vec<Option<Summary>> = samples
        .iter()
        .map(|s| super::summarize(&mut s.clone()))
        .collect();
    let sum = |f: fn(&Summary) -> i64| summaries.iter().flatten().map(f).sum::<i64>();
    let sum_p50 = sum(|s| s.p50_ns);
    let complete = samples.iter().all(|s| !s.is_empty());
    let mut draws = if complete && !samples.is_empty() {
        resample_frames(samples, DRAWS, SEED)
    } else {
        Vec::new()
    };
    let late = draws.iter().filter(|&&d| d > period.0 as i64).count();
    let p = if draws.is_empty() {
        0.0
    } else {
        late as f64 / draws.len() as f64
    };
    let n = draws.len() as u64;
    Prediction {
        sum_p50_ns: sum_p50,
        sum_p99_ns: sum(|s| s.p99_ns),
        headroom_ns: period.0 as i64 - sum_p50,
        headroom_share: (period.0 as i64 - sum_p50) as f64 / period.0.max(1) as f64,
        frame_ns: super::summarize(&mut draws),
        draws: n,
        miss_probability: p,
        expected_misses: p * frames as f64,
    }
}

/// One frame of the real run, in nanoseconds from the first release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    pub release_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Counts and summarises the frames against `period` (deadline = release + period).
pub fn frames_measured(frames: &[Frame], period: Nanos) -> FramesMeasured {
    let missed_flags: Vec<bool> = frames
        .iter()
        .map(|f| f.end_ns - f.release_ns > period.0)
        .collect();
    let missed = missed_flags.iter().filter(|&&m| m).count() as u64;
    let mut longest = 0u64;
    let mut run = 0u64;
    for &m in &missed_flags {
        run = if m { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let mut response: Vec<i64> = frames
        .iter()
        .map(|f| (f.end_ns - f.release_ns) as i64)
        .collect();
    let mut execution: Vec<i64> = frames
        .iter()
        .map(|f| (f.end_ns - f.start_ns) as i64)
        .collect();
    let mut late: Vec<i64> = frames
        .iter()
        .map(|f| (f.start_ns - f.release_ns) as i64)
        .collect();
    FramesMeasured {
        frames: frames.len() as u64,
        missed,
        miss_share: if frames.is_empty() {
            0.0
        } else {
            missed as f64 / frames.len() as f64
        },
        longest_miss_run: longest,
        response_ns: super::summarize(&mut response),
        execution_ns: super::summarize(&mut execution),
        start_lateness_ns: super::summarize(&mut late),
    }
}

/// Checks the configuration; the error names the file or flag.
pub fn validate(config: &BudgetConfig) -> Result<(), BudgetError> {
    if config.frames == Some(0) {
        return Err(BudgetError::ZeroFrames);
    }
    if config.predict_samples == 0 {
        return Err(BudgetError::ZeroPredictSamples);
    }
    Ok(())
}

#[cfg(feature = "linux")]
struct Outcome {
    setup: ThreadSetup,
    step_samples: Vec<Vec<i64>>,
    step_in_frames: Vec<Vec<i64>>,
    frames: Vec<Frame>,
    loads: Vec<LoadReport>,
}

/// Starts the loads of `plan` on `cpus` (by default; a load may name its own) with the runner's
/// load starter and lets them settle, checking `stop` every 10 ms. The counted window starts
/// when the settle time is over.
#[cfg(feature = "linux")]
fn start_loads(
    plan: &LoadPlan,
    cpus: &[usize],
    stop: &AtomicBool,
) -> Result<Option<Box<dyn Loads>>, BudgetError> {
    if plan.is_empty() {
        return Ok(None);
    }
    let settle = |ns: u64| {
        let until = now() + ns;
        while now() < until && !stop.load(Ordering::Relaxed) {
            let _ = sleep_until(ClockId::Monotonic, (now() + 10_000_000).min(until));
        }
        None::<()>
    };
    // The frame thread is pinned and real-time, and threads inherit both: the loads are started
    // (and settle) from a thread of their own, on the loads' CPUs at SCHED_OTHER.
    let started = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("sg-load-start".to_string())
            .spawn_scoped(s, || {
                let failed = |reason: String| BudgetError::LoadStart { reason };
                load::enter_load_thread(cpus).map_err(|e| failed(e.to_string()))?;
                runner::host::start_loads(&RealHost, plan, cpus, settle)
                    .map_err(|e| failed(e.to_string()))
            })
            .map_err(|e| BudgetError::LoadThread {
                reason: e.to_string(),
            })?
            .join()
            .map_err(|_| BudgetError::LoadThreadPanicked)?
    });
    let running = started?.map(|s| s.loads);
    if let Some(r) = &running {
        r.mark();
    }
    Ok(running)
}

#[cfg(feature = "linux")]
#[allow(clippy::too_many_arguments)]
fn run_frames(
    config: &BudgetConfig,
    frames: u64,
    cpu: usize,
    peer: usize,
    dir: Option<&Path>,
    privileged: bool,
    load_cpus: &[usize],
    stop: &AtomicBool,
) -> Result<Outcome, BudgetError> {
    let spec = &config.spec;
    let setup = setup_thread(cpu, &spec.policy, privileged)?;
    let per_step_reads = frames + config.predict_samples as u64 + 4;
    let ns_per_spin = if spec
        .steps
        .iter()
        .any(|s| matches!(s.kind, StepKind::Compute { .. }))
    {
        calibrate_spin()
    } else {
        1.0
    };
    std::thread::scope(|s| -> Result<Outcome, BudgetError> {
        let mut runners = Vec::with_capacity(spec.steps.len());
        let mut receivers = Vec::new();
        for (i, step) in spec.steps.iter().enumerate() {
            runners.push(match step.kind {
                StepKind::Read { bytes, cold } => {
                    let dir = dir.ok_or(BudgetError::NoDirectory)?;
                    let (file, size) = read_file(dir, i, bytes, per_step_reads)?;
                    if cold {
                        // Read-ahead would bring the next frame's pages in early.
                        sandglass_sys::ipc::fadvise_random(&file)
                            .map_err(BudgetError::FadviseRandom)?;
                    }
                    Runner::Read {
                        file,
                        buf: vec![1u8; bytes as usize],
                        size,
                        pos: 0,
                        cold,
                    }
                }
                StepKind::Send { bytes, mechanism } => {
                    let ch = ipc::channel(mechanism, bytes as usize).map_err(|e| {
                        BudgetError::Channel {
                            step: i + 1,
                            name: step.name.clone(),
                            reason: e.to_string(),
                        }
                    })?;
                    let policy = spec.policy;
                    let b = ch.b;
                    let h = std::thread::Builder::new()
                        .name(format!("sg-budget-rx{i}"))
                        .spawn_scoped(s, move || {
                            receiver(b, bytes as usize, peer, policy, privileged)
                        })
                        .map_err(|e| BudgetError::ReceiverThread {
                            reason: e.to_string(),
                        })?;
                    receivers.push(h);
                    Runner::Send {
                        end: ch.a,
                        msg: (0..bytes as usize)
                            .map(|k| super::pattern(1, bytes, k))
                            .collect(),
                        ack: [0],
                    }
                }
                StepKind::Copy { bytes } => Runner::Copy {
                    src: vec![3u8; bytes as usize],
                    dst: vec![5u8; bytes as usize],
                },
                StepKind::Compute { time_ns } => Runner::Compute {
                    iterations: (time_ns.0 as f64 / ns_per_spin).round().max(1.0) as u64,
                },
            });
        }
        let result = (|| -> Result<Outcome, BudgetError> {
            // The prediction: each step alone.
            let mut step_samples = Vec::with_capacity(runners.len());
            for (i, r) in runners.iter_mut().enumerate() {
                let mut v = Vec::with_capacity(config.predict_samples);
                let end = now() + 1_000_000_000;
                // One untimed run warms the path (first page faults, first wakeup of the receiver).
                r.prepare()?;
                r.run()
                    .map_err(|error| BudgetError::Step { step: i + 1, error })?;
                while v.len() < config.predict_samples && !stop.load(Ordering::Relaxed) {
                    r.prepare()?;
                    let t = now();
                    r.run()
                        .map_err(|error| BudgetError::Step { step: i + 1, error })?;
                    let e = now();
                    v.push((e - t) as i64);
                    if v.len() >= 20 && e >= end {
                        break;
                    }
                    // Rest as long as the step ran: a real-time thread that ran back to back
                    // for a second would meet RT throttling (95% by default) and measure it.
                    let _ = sleep_until(ClockId::Monotonic, e + (e - t));
                }
                step_samples.push(v);
            }
            // The real run, under the loads when there are any. They stop when it ends, on
            // every path (dropping them stops them too).
            let running = start_loads(&config.loads, load_cpus, stop)?;
            let mut in_frames: Vec<Vec<i64>> = runners
                .iter()
                .map(|_| Vec::with_capacity(frames as usize))
                .collect();
            let mut out = Vec::with_capacity(frames as usize);
            let period = spec.period_ns.0;
            let t0 = now() + 10_000_000;
            let mut failed = None;
            for k in 0..frames {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let release = t0 + k * period;
                while now() < release {
                    let _ = sleep_until(ClockId::Monotonic, release);
                }
                let start = now();
                let mut t = start;
                for (i, r) in runners.iter_mut().enumerate() {
                    if let Err(e) = r.run() {
                        failed = Some(BudgetError::Frame {
                            frame: k,
                            step: i + 1,
                            error: e,
                        });
                        break;
                    }
                    let e = now();
                    in_frames[i].push((e - t) as i64);
                    t = e;
                }
                if failed.is_some() {
                    break;
                }
                out.push(Frame {
                    release_ns: release - t0,
                    start_ns: start - t0,
                    end_ns: t - t0,
                });
                if let Some(e) = runners.iter_mut().find_map(|r| r.prepare().err()) {
                    failed = Some(e.into());
                    break;
                }
            }
            let loads = running.map(|r| r.stop()).unwrap_or_default();
            if let Some(e) = failed {
                return Err(e);
            }
            Ok(Outcome {
                setup: setup.clone(),
                step_samples,
                step_in_frames: in_frames,
                frames: out,
                loads,
            })
        })();
        // Closing the senders ends the receivers.
        for r in runners {
            if let Runner::Send { end, .. } = r {
                end.close();
            }
        }
        let mut rx_error = None;
        for h in receivers {
            match h.join() {
                Ok(Some(e)) => rx_error = rx_error.or(Some(e)),
                Ok(None) => {}
                Err(_) => rx_error = rx_error.or(Some(BudgetError::ReceiverPanicked)),
            }
        }
        let out = result?;
        match rx_error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    })
}

/// Predicts the budget, runs it for real and writes the run directory.
#[cfg(feature = "linux")]
pub fn run(
    config: &BudgetConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<BudgetResult, RunError> {
    validate(config).map_err(super::usage)?;
    let spec = &config.spec;
    let allowed = crate::system::allowed_cpus();
    let cpu = super::choose_cpu(&allowed, spec.cpu).map_err(|e| {
        RunError::Usage(format!(
            "{}: {}",
            config.file,
            e.to_string().replace("--cpu", "cpu")
        ))
    })?;
    let peer = peer_cpu(spec.placement, cpu, &allowed)
        .map_err(|e| RunError::Usage(format!("{}: {e}", config.file)))?;
    let frames = config
        .frames
        .or(spec.frames)
        .unwrap_or_else(|| default_frames(spec.period_ns));
    let needs_dir = spec
        .steps
        .iter()
        .any(|s| matches!(s.kind, StepKind::Read { .. }));
    let tmp = if needs_dir {
        Some(super::file::temp_dir(&config.dir).map_err(super::usage)?)
    } else {
        None
    };
    let session = Session::open(
        BudgetProbe::KIND,
        config.output_dir.as_deref(),
        ctx,
        serde_json::json!({ "budget": config, "frames": frames, "cpu": cpu, "peer_cpu": peer }),
    )?;
    obs.note(&format!(
        "{} step(s) against a period of {}: measuring each step alone, then {frames} frames on CPU {cpu} (about {})",
        spec.steps.len(),
        spec.period_ns,
        Nanos(spec.period_ns.0.saturating_mul(frames))
    ));
    if !config.loads.is_empty() {
        obs.note(&format!(
            "the frames run under {} after {} of settling; the prediction runs without it",
            config
                .loads
                .specs
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(" + "),
            config.loads.settle_ns
        ));
    }
    let privileged = super::privileged();
    let stop = AtomicBool::new(false);
    let dir = tmp.as_ref().map(|t| t.path().to_path_buf());
    let supervised = super::supervise(&stop, || {
        run_frames(
            config,
            frames,
            cpu,
            peer,
            dir.as_deref(),
            privileged,
            &allowed,
            &stop,
        )
    });
    drop(tmp);
    let (outcome, ended) = match supervised {
        Ok(v) => v,
        Err(e) => return Err(session.fail(e.to_string())),
    };
    let o = match outcome {
        Ok(o) => o,
        Err(e) => return Err(session.fail(e.to_string())),
    };
    let prediction = predict(&o.step_samples, spec.period_ns, frames);
    let measured = frames_measured(&o.frames, spec.period_ns);
    let steps: Vec<StepResult> = spec
        .steps
        .iter()
        .zip(o.step_samples.iter().zip(&o.step_in_frames))
        .map(|(s, (p, m))| StepResult {
            step: s.clone(),
            predicted_ns: super::summarize(&mut p.clone()),
            measured_ns: super::summarize(&mut m.clone()),
        })
        .collect();
    let mut warnings: Vec<Warning> = Vec::new();
    super::downgrade_warnings(&[&o.setup], &mut warnings);
    for r in &o.loads {
        if let Some(e) = &r.error {
            warnings.push(Warning::new(
                crate::warning::WarningKind::LoadFailed,
                format!("load {} did not run as asked: {e}", r.spec),
            ));
        }
    }
    let agreement = agreement(&prediction, &steps, &measured);
    if let Some(a) = agreement.as_ref().filter(|a| a.disagrees) {
        warnings.push(Warning::new(
            crate::warning::WarningKind::PredictionDisagrees,
            disagreement_text(a),
        ));
    }
    let header = session.header(ended.state, &ended.detail, &warnings);
    let result = BudgetResult {
        header,
        file: config.file.clone(),
        period_ns: spec.period_ns,
        cpu,
        peer_cpu: peer,
        frame_thread: Some(o.setup),
        steps,
        agreement,
        prediction,
        measured,
        loads: o.loads,
    };
    let mut csv =
        String::from("frame,release_ns,start_lateness_ns,execution_ns,response_ns,missed\n");
    for (k, f) in o.frames.iter().enumerate() {
        csv.push_str(&format!(
            "{k},{},{},{},{},{}\n",
            f.release_ns,
            f.start_ns - f.release_ns,
            f.end_ns - f.start_ns,
            f.end_ns - f.release_ns,
            f.end_ns - f.release_ns > spec.period_ns.0
        ));
    }
    let files = vec![session.write(
        "frames.csv",
        csv.as_bytes(),
        "sandglass-bench-budget-frames-csv/1",
        "one row per frame of the real run, times from its release",
    )?];
    session.finish(&result, &result.header, files)?;
    Ok(result)
}

/// The frame-budget probe (`bench budget`): an audio or video pipeline's frames against their
/// deadline, under the steps and loads a budget file names.
pub struct BudgetProbe;

impl Probe for BudgetProbe {
    const KIND: RunKind = RunKind::BenchBudget;
    type Config = BudgetConfig;
    type Result = BudgetResult;

    /// Its key figures, in the order people read them.
    const FIGURES: &'static [KeyFigure] = &[
        fig("missed", "missed", Unit::Count, OverCpus::Run),
        fig("frames", "frames", Unit::Count, OverCpus::Run),
        fig(
            "response_p99_ns",
            "response p99",
            Unit::Nanos,
            OverCpus::Run,
        ),
        LOAD,
    ];

    #[cfg(feature = "linux")]
    fn run(
        c: &BudgetConfig,
        ctx: &RunContext,
        obs: &mut dyn Observer,
    ) -> Result<BudgetResult, RunError> {
        run(c, ctx, obs)
    }

    fn figures(s: &Value, f: &mut Figures) {
        f.add("frames", num(&s["measured"]["frames"]));
        f.add("missed", num(&s["measured"]["missed"]));
        f.add(
            "response_p99_ns",
            num(&s["measured"]["response_ns"]["p99_ns"]),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_BUDGET: &str = r#"
# Dannenberg et al. 1993, section 11, at 10 frames per second.
period = "100ms"
frames = 5
policy = "o:0"

[[step]]
name = "disk read"
kind = "read"
bytes = "20000"

[[step]]
name = "send data (client to Tactus)"
kind = "send"
bytes = 19200
mech = "pipe"

[[step]]
kind = "copy"
bytes = "19200"

[[step]]
kind = "compute"
time = "1ms"
"#;

    /// A prediction of 15 µs frames against frames that took 180 µs from their release: a
    /// disagreement, and the part furthest above its prediction is the wakeup (the frames began
    /// 120 µs late), before the copy that took 40 µs in the frames against 10 µs alone.
    #[test]
    fn a_disagreement_names_the_largest_unexplained_part() {
        let spec = parse_budget(SEED_BUDGET, "seed.toml").expect("valid");
        let alone = [
            vec![3_000i64; 50],
            vec![1_000; 50],
            vec![10_000; 50],
            vec![1_000; 50],
        ];
        let prediction = predict(&alone, spec.period_ns, 5);
        assert_eq!(prediction.frame_ns.as_ref().expect("frame").p50_ns, 15_000);
        let in_frames = [3_000i64, 1_000, 40_000, 1_000];
        let steps: Vec<StepResult> = spec
            .steps
            .iter()
            .zip(alone.iter().zip(in_frames))
            .map(|(st, (a, m))| StepResult {
                step: st.clone(),
                predicted_ns: super::super::summarize(&mut a.clone()),
                measured_ns: super::super::summarize(&mut [m; 5]),
            })
            .collect();
        // Each frame: released at k·100 ms, begun 120 µs late, 60 µs of work (45 in steps).
        // Five frames a period apart, each begun `late` after its release and ended at `end`.
        let frames_at = |late: u64, end: u64| -> Vec<Frame> {
            (0..5u64)
                .map(|k| Frame {
                    release_ns: k * 100_000_000,
                    start_ns: k * 100_000_000 + late,
                    end_ns: k * 100_000_000 + end,
                })
                .collect()
        };
        let frames = frames_at(120_000, 180_000);
        let measured = frames_measured(&frames, spec.period_ns);
        let a = agreement(&prediction, &steps, &measured).expect("both");
        assert!((a.ratio_p50 - 12.0).abs() < 1e-9, "{a:?}");
        assert!(a.disagrees);
        let names: Vec<(&str, i64)> = a
            .parts
            .iter()
            .map(|p| (p.name.as_str(), p.excess_ns))
            .collect();
        assert_eq!(names[0], (WAKEUP_PART, 120_000));
        assert_eq!(names[1], ("copy 19200 B", 30_000));
        assert_eq!(names[2], (BETWEEN_PART, 15_000));
        let text = disagreement_text(&a);
        assert!(
            text.contains("12.0x the predicted frame time at the median"),
            "{text}"
        );
        assert!(
            text.contains("largest unexplained part is wakeup"),
            "{text}"
        );
        // Frames that take what was predicted agree.
        let on_time = frames_at(2_000, 20_000);
        let a = agreement(
            &prediction,
            &steps,
            &frames_measured(&on_time, spec.period_ns),
        )
        .expect("both");
        assert!(!a.disagrees, "{a:?}");
    }

    #[test]
    fn the_seed_budget_parses() {
        let b = parse_budget(SEED_BUDGET, "seed.toml").expect("valid");
        assert_eq!(b.period_ns, Nanos::from_millis(100));
        assert_eq!(b.frames, Some(5));
        assert_eq!(b.steps.len(), 4);
        assert_eq!(b.steps[0].name, "disk read");
        assert_eq!(
            b.steps[1].kind,
            StepKind::Send {
                bytes: 19200,
                mechanism: Mechanism::Pipe
            }
        );
        assert_eq!(b.steps[2].name, "copy 19200 B");
        assert_eq!(
            b.steps[3].kind,
            StepKind::Compute {
                time_ns: Nanos::from_millis(1)
            }
        );
        assert_eq!(b.policy, Policy::Other { nice: 0 });
    }

    #[test]
    fn bad_budgets_name_the_line_and_the_fix() {
        let cases = [
            (
                "period = \"100\"\n[[step]]\nkind = \"copy\"\nbytes = 1\n",
                "b.toml:1: period: time '100' has no unit",
            ),
            ("period = \"1ms\"\n", "has no [[step]]"),
            (
                "period = \"1ms\"\n[[step]]\nkind = \"copy\"\nbytes = 0\n",
                "b.toml:4: step 1 (copy): bytes: a size of 0 bytes",
            ),
            (
                "period = \"1ms\"\n[[step]]\nkind = \"send\"\nbytes = 8\nmech = \"bogus\"\n",
                "b.toml:5: step 1 (send): mech bogus: unknown mechanism",
            ),
            (
                "period = \"1ms\"\n[[step]]\nkind = \"send\"\nbytes = 8\n",
                "needs mech",
            ),
            (
                "period = \"1ms\"\n[[step]]\nkind = \"sleep\"\n",
                "unknown kind 'sleep'",
            ),
            (
                "period = \"1ms\"\n[[step]]\nkind = \"compute\"\ntime = \"1ms\"\nbytes = 3\n",
                "bytes does not apply to a compute step",
            ),
            (
                "period = \"1ms\"\n[[step]]\nkind = \"read\"\nbytes = 3\ncache = \"hot\"\n",
                "cache 'hot': use warm or cold",
            ),
            (
                "period = \"1ms\"\nperiode = 3\n[[step]]\nkind = \"copy\"\nbytes = 1\n",
                "b.toml:2",
            ),
            (
                "period = \"1ms\"\nplacement = \"far\"\n[[step]]\nkind = \"copy\"\nbytes = 1\n",
                "placement far",
            ),
        ];
        for (text, want) in cases {
            let e = parse_budget(text, "b.toml").expect_err(text).to_string();
            assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
        }
    }

    /// Exact arithmetic: two steps that always take 30 and 50 ms predict 80 ms per frame, 20 ms
    /// of headroom in 100 ms and no misses; against 70 ms every resampled frame misses.
    #[test]
    fn prediction_on_exact_samples() {
        let s = vec![vec![30_000_000; 10], vec![50_000_000; 7]];
        let p = predict(&s, Nanos::from_millis(100), 50);
        assert_eq!(p.sum_p50_ns, 80_000_000);
        assert_eq!(p.headroom_ns, 20_000_000);
        assert!((p.headroom_share - 0.2).abs() < 1e-12);
        assert_eq!(p.miss_probability, 0.0);
        assert_eq!(p.draws, DRAWS as u64);
        let f = p.frame_ns.expect("frames");
        assert_eq!((f.min_ns, f.max_ns), (80_000_000, 80_000_000));
        let p = predict(&s, Nanos::from_millis(70), 50);
        assert_eq!(p.miss_probability, 1.0);
        assert_eq!(p.expected_misses, 50.0);
        // One step that misses half the time: about half the draws are late.
        let p = predict(&[vec![1, 200]], Nanos(100), 10);
        assert!(
            (p.miss_probability - 0.5).abs() < 0.02,
            "{}",
            p.miss_probability
        );
    }

    #[test]
    fn every_late_frame_is_counted() {
        let period = Nanos(100);
        // Frame 1 overruns into frame 2's period; frame 2 starts late and misses too.
        let frames = [
            Frame {
                release_ns: 0,
                start_ns: 0,
                end_ns: 50,
            },
            Frame {
                release_ns: 100,
                start_ns: 101,
                end_ns: 260,
            },
            Frame {
                release_ns: 200,
                start_ns: 260,
                end_ns: 310,
            },
            Frame {
                release_ns: 300,
                start_ns: 310,
                end_ns: 350,
            },
        ];
        let m = frames_measured(&frames, period);
        assert_eq!(m.frames, 4);
        assert_eq!(m.missed, 2);
        assert_eq!(m.longest_miss_run, 2);
        assert_eq!(m.start_lateness_ns.expect("lateness").max_ns, 60);
        assert_eq!(m.response_ns.expect("response").max_ns, 160);
    }

    #[test]
    fn cross_cpu_receivers_need_two_cpus() {
        assert_eq!(peer_cpu(Placement::SameCpu, 0, &[0]), Ok(0));
        assert_eq!(peer_cpu(Placement::CrossCpu, 1, &[0, 1]), Ok(0));
        assert!(peer_cpu(Placement::CrossCpu, 0, &[0])
            .expect_err("one CPU")
            .to_string()
            .contains("needs two CPUs"));
    }

    #[test]
    fn short_run_of_the_seed_budget() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = tempfile::tempdir().expect("tempdir");
        let ctx = super::super::test_context(base.path());
        let mut spec = parse_budget(SEED_BUDGET, "seed.toml").expect("valid");
        spec.period_ns = Nanos::from_millis(10);
        let config = BudgetConfig {
            spec,
            file: "seed.toml".into(),
            dir: dir.path().to_path_buf(),
            frames: Some(8),
            predict_samples: 25,
            output_dir: None,
            loads: LoadPlan::default(),
        };
        let r = run(&config, &ctx, &mut crate::runner::Silent).expect("run");
        assert_eq!(r.header.kind, crate::RunKind::BenchBudget);
        assert_eq!(r.measured.frames, 8);
        assert_eq!(r.steps.len(), 4);
        for s in &r.steps {
            assert!(s.predicted_ns.as_ref().expect("predicted").count >= 20);
            assert_eq!(s.measured_ns.as_ref().expect("measured").count, 8);
        }
        assert_eq!(r.prediction.draws, DRAWS as u64);
        assert!(r.prediction.sum_p50_ns > 0);
        assert!(r.measured.execution_ns.is_some());
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("list").count(),
            0,
            "the step files are removed"
        );
        let reader = crate::store::RunReader::open(Path::new(&r.header.run_dir)).expect("finished");
        let frames = reader.read_text("frames.csv").expect("frames");
        assert_eq!(frames.lines().count(), 9);
    }

    #[test]
    fn refusals_and_failures_keep_their_wording() {
        let path = || PathBuf::from("/tmp/d/step0");
        let r = || "r".to_string();
        let step = || StepError::Read { reason: r() };
        let cases = [
            (
                BudgetError::Parse { file: "b.toml".into(), line: 3, detail: "what and the fix".into() },
                "b.toml:3: what and the fix".to_string(),
            ),
            (
                BudgetError::NoSteps { file: "b.toml".into() },
                "b.toml: the budget has no [[step]]: add at least one (kind = read, send, copy or compute)".into(),
            ),
            (BudgetError::ZeroFrames, "--frames must be at least 1".into()),
            (BudgetError::ZeroPredictSamples, "--predict-samples must be at least 1".into()),
            (
                BudgetError::PeerCpu { cpu: 0 },
                "placement = \"cross-cpu\" needs two CPUs, but this process may use only CPU 0: use placement = \"same-cpu\"".into(),
            ),
            (BudgetError::NoDirectory, "no directory for the read step's file".into()),
            (
                BudgetError::CreateFile { path: path(), reason: r() },
                "cannot create /tmp/d/step0: r".into(),
            ),
            (
                BudgetError::WriteFile { path: path(), reason: r() },
                "cannot write /tmp/d/step0: r".into(),
            ),
            (
                BudgetError::SyncFile { path: path(), reason: r() },
                "cannot write /tmp/d/step0 back: r".into(),
            ),
            (
                BudgetError::OpenFile { path: path(), reason: r() },
                "cannot open /tmp/d/step0: r".into(),
            ),
            (
                BudgetError::FadviseRandom(Errno::EINVAL),
                format!("posix_fadvise(RANDOM): {}", Errno::EINVAL),
            ),
            (
                BudgetError::Channel { step: 2, name: "send".into(), reason: r() },
                "step 2 (send): cannot create the channel: r".into(),
            ),
            (
                BudgetError::ReceiverThread { reason: r() },
                "cannot create a receiver thread: r".into(),
            ),
            (BudgetError::ReceiverAck { reason: r() }, "the receiver could not ack: r".into()),
            (
                BudgetError::ReceiverReceive { reason: r() },
                "the receiver could not receive: r".into(),
            ),
            (BudgetError::ReceiverPanicked, "a receiver thread panicked".into()),
            (BudgetError::Step { step: 1, error: step() }, "step 1: read: r".into()),
            (
                BudgetError::Frame { frame: 4, step: 2, error: StepError::ReceiverClosed },
                "frame 4, step 2: the receiver closed the channel".into(),
            ),
            (
                StepError::DropPages(Errno::EINVAL).into(),
                format!("posix_fadvise(DONTNEED): {}", Errno::EINVAL),
            ),
            (
                BudgetError::Step { step: 1, error: StepError::Send { reason: r() } },
                "step 1: send: r".into(),
            ),
            (
                BudgetError::Step { step: 1, error: StepError::Ack { reason: r() } },
                "step 1: waiting for the receiver's ack: r".into(),
            ),
            (
                BudgetError::LoadThread { reason: r() },
                "cannot start the load: cannot create a thread: r".into(),
            ),
            (
                BudgetError::LoadThreadPanicked,
                "cannot start the load: the thread starting the loads panicked".into(),
            ),
            (BudgetError::LoadStart { reason: r() }, "cannot start the load: r".into()),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
