//! Running a study: cells one after another, each into its own run directory under the study
//! directory, with the study's state in `study.json` after every step.
//!
//! SIGINT, SIGTERM and SIGHUP stay blocked for the whole study. A signal during a cell stops that
//! cell's measurement as it would stop a single run (the results measured so far are kept);
//! the study then stops before the next cell and can be resumed: [`resume`] runs every cell
//! that is not completed, moving the remains of an interrupted or failed attempt aside rather
//! than deleting them.

#[cfg(feature = "linux")]
use super::cells;
#[cfg(feature = "linux")]
use super::file::Measure;
#[cfg(feature = "linux")]
use super::metrics;
use super::metrics::Metrics;
use super::{Cell, Labels, Source, Study};
#[cfg(feature = "linux")]
use crate::analysis::worst_case;
#[cfg(feature = "linux")]
use crate::causes::kernel_trace::TraceOptions;
#[cfg(feature = "linux")]
use crate::cpulist::CpuList;
use crate::duration;
#[cfg(feature = "linux")]
use crate::load;
use crate::load::LoadReport;
#[cfg(feature = "linux")]
use crate::model::TimerKind;
#[cfg(feature = "linux")]
use crate::noise::{self, NoiseConfig};
#[cfg(feature = "linux")]
use crate::plan::LoadPlan;
#[cfg(feature = "linux")]
use crate::policy::Policy;
use crate::runner::Observer;
#[cfg(feature = "linux")]
use crate::runner::{LiveRow, RunContext, RunError};
#[cfg(feature = "linux")]
use crate::store::RunDir;
use crate::store::Tool;
#[cfg(feature = "linux")]
use crate::store::{self, RunState};
use crate::system;
#[cfg(feature = "linux")]
use crate::timer::{self, TimerConfig};
use crate::units::Nanos;
#[cfg(feature = "linux")]
use crate::warning::Warning;
use crate::RunKind;
#[cfg(feature = "linux")]
use sandglass_sys::signal;
use serde::{Deserialize, Serialize};
#[cfg(feature = "linux")]
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
#[cfg(feature = "linux")]
use std::time::Instant;

/// The study's state file, in the study directory.
pub const STATE_FILE: &str = "study.json";
/// The version of `study.json`.
pub const STATE_VERSION: u32 = 1;
/// How long loads run before a measurement starts, unless the study says otherwise.
pub const DEFAULT_SETTLE: Nanos = Nanos(2_000_000_000);

/// How far a cell got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CellState {
    Pending,
    Running,
    Completed,
    Interrupted,
    Failed,
}

impl CellState {
    pub fn name(self) -> &'static str {
        match self {
            CellState::Pending => "pending",
            CellState::Running => "running",
            CellState::Completed => "completed",
            CellState::Interrupted => "interrupted",
            CellState::Failed => "failed",
        }
    }
}

/// One cell in `study.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CellRecord {
    pub cell: Cell,
    pub labels: Labels,
    pub state: CellState,
    /// The run directory, relative to the study directory, once the cell has started.
    pub dir: Option<String>,
    /// Earlier attempts moved aside on resume, relative to the study directory.
    #[serde(default)]
    pub earlier_attempts: Vec<String>,
    pub error: Option<String>,
    /// How the run ended, for people.
    pub detail: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    /// Wall-clock seconds the cell took, setup and loads included.
    pub seconds: Option<f64>,
    pub metrics: Metrics,
    #[serde(default)]
    pub loads: Vec<LoadReport>,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The cell's largest delay and what caused it ([`crate::causes::largest_cause`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// How far the study got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StudyState {
    Running,
    /// Every cell ran to its end.
    Completed,
    /// Did not finish: every cell was attempted and at least one failed, or the study's
    /// process ended before the end (killed, crashed, the machine stopped; marked so by the
    /// next start). `--resume` reruns the cells not completed.
    Incomplete,
    /// Stopped by a signal; `--resume` continues.
    Interrupted,
}

impl StudyState {
    pub fn name(self) -> &'static str {
        match self {
            StudyState::Running => "running",
            StudyState::Completed => "completed",
            StudyState::Incomplete => "incomplete",
            StudyState::Interrupted => "interrupted",
        }
    }
}

/// `study.json`: the study's manifest and the state of every cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StudyRecord {
    /// [`RECORD_SCHEMA`]; empty in files written before the field existed.
    #[serde(default)]
    pub schema: String,
    /// The study format's number ([`STATE_VERSION`]), which `--resume` checks; kept beside
    /// `schema` for the sandglass versions that read only this.
    pub schema_version: u32,
    #[schemars(with = "String")]
    pub kind: RunKind,
    pub id: String,
    pub name: String,
    pub source: Source,
    /// The study file's text, so that a resume needs nothing but the directory.
    pub text: String,
    pub duration_scale: f64,
    pub tool: Tool,
    /// Every command line that worked on the study (the first run and each resume).
    pub command_lines: Vec<Vec<String>>,
    pub created_at: String,
    pub updated_at: String,
    pub state: StudyState,
    pub detail: Option<String>,
    pub system: system::SystemSnapshot,
    pub cells: Vec<CellRecord>,
}

impl StudyRecord {
    /// Finished cells with their figures, for the tables.
    pub fn done(&self) -> Vec<(&Cell, &Metrics)> {
        self.cells
            .iter()
            .filter(|c| c.state == CellState::Completed || !c.metrics.is_empty())
            .map(|c| (&c.cell, &c.metrics))
            .collect()
    }

    pub fn count(&self, state: CellState) -> usize {
        self.cells.iter().filter(|c| c.state == state).count()
    }
}

/// What [`run`] and [`resume`] are told.
#[derive(Clone, Debug)]
pub struct StudyOptions {
    /// Multiplies every cell's duration (and the settle time of loads).
    pub duration_scale: f64,
    /// The study directory (default: a new one under the run context's base directory).
    pub output: Option<PathBuf>,
}

/// What the study has to say while it runs, besides what each run says.
pub trait StudyObserver: Observer {
    /// A cell is about to start. `elapsed` is the study's time so far, `eta` the estimated time
    /// left including this cell.
    fn cell_started(&mut self, _record: &CellRecord, _total: usize, _elapsed: Nanos, _eta: Nanos) {}
    /// A cell ended in any way.
    fn cell_ended(&mut self, _record: &CellRecord, _total: usize) {}
}

/// The version of `study.json`, a study's record, described by
/// `docs/schema/study-record.schema.json`.
pub const RECORD_SCHEMA: &str = "sandglass-study-record/1";

/// The version of `sandglass study --json` described by `docs/schema/study.schema.json`.
pub const JSON_SCHEMA: &str = "sandglass-study/1";

/// What a finished (or stopped) study returns.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct StudyOutcome {
    /// [`JSON_SCHEMA`].
    pub schema: &'static str,
    pub dir: PathBuf,
    pub record: StudyRecord,
    pub tables: Vec<super::table::Table>,
}

/// Why a study could not run.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    /// Fix the command line or the study (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// Something failed while running (exit code 1).
    #[error("{0}")]
    Failed(String),
}

fn scaled(d: Nanos, scale: f64) -> Nanos {
    Nanos((d.0 as f64 * scale).round().max(1.0) as u64)
}

fn parse_duration(text: &str) -> Nanos {
    duration::parse(text).unwrap_or(Nanos::ZERO)
}

/// The settle time of loads in this study, scaled.
fn settle(study: &Study, scale: f64) -> Nanos {
    let base = study
        .file
        .study
        .settle
        .as_deref()
        .map(parse_duration)
        .unwrap_or(DEFAULT_SETTLE);
    if base.0 == 0 {
        return base;
    }
    // A shortened study settles for at least half a second.
    Nanos(
        scaled(base, scale)
            .0
            .max(500_000_000)
            .min(base.0.max(500_000_000)),
    )
}

/// The planned wall-clock time of a cell, for the estimate of the time left.
pub fn planned(study: &Study, cell: &Cell, scale: f64) -> Nanos {
    let m = &study.file.measure[cell.measure];
    let d = scaled(parse_duration(m.duration.get_ref()), scale);
    let settle = if cell.load.is_some() {
        settle(study, scale).0
    } else {
        0
    };
    // Calibration, setup and writing take about a second.
    Nanos(d.0 + settle + 1_000_000_000)
}

#[cfg(feature = "linux")]
fn check_scale(scale: f64) -> Result<(), StudyError> {
    if !(scale.is_finite() && scale > 0.0 && scale <= 1000.0) {
        return Err(StudyError::Usage(format!(
            "--duration-scale {scale}: give a factor above 0 and at most 1000, such as 0.5 or 2"
        )));
    }
    Ok(())
}

/// Writes `study.json`; a study in a final state first frees the space its directory held back
/// for its last files ([`store::RESERVE_FILE`]), as a run's final manifest does.
#[cfg(feature = "linux")]
fn write_state(dir: &Path, record: &StudyRecord) -> Result<(), StudyError> {
    if record.state != StudyState::Running {
        store::release_reserve(dir);
    }
    let text = serde_json::to_vec_pretty(record)
        .map_err(|e| StudyError::Failed(format!("cannot encode {STATE_FILE}: {e}")))?;
    let tmp = dir.join(format!("{STATE_FILE}.tmp"));
    std::fs::write(&tmp, &text)
        .and_then(|_| std::fs::rename(&tmp, dir.join(STATE_FILE)))
        .map_err(|e| {
            StudyError::Failed(format!(
                "cannot write {}: {e}",
                dir.join(STATE_FILE).display()
            ))
        })
}

/// Reads a study directory's state.
pub fn read_state(dir: &Path) -> Result<StudyRecord, StudyError> {
    let path = dir.join(STATE_FILE);
    let text = crate::bounded::read(
        &path,
        crate::bounded::Links::Refuse,
        crate::bounded::MANIFEST_BYTES,
        "a study state",
    )
    .map_err(|e| match e {
        crate::bounded::BoundedError::NotFound { .. } => StudyError::Usage(format!(
            "{}: not a study directory (it has no {STATE_FILE}); give the directory a study printed when it stopped",
            dir.display()
        )),
        e => StudyError::Usage(e.to_string()),
    })?;
    let record: StudyRecord = serde_json::from_slice(&text).map_err(|e| {
        StudyError::Usage(format!(
            "{}: the study state is corrupted ({e}); the cells' run directories are intact, but the study cannot be resumed",
            path.display()
        ))
    })?;
    if record.schema_version != STATE_VERSION {
        return Err(StudyError::Usage(format!(
            "{}: written by a sandglass with study format {}, this one reads {STATE_VERSION}",
            path.display(),
            record.schema_version
        )));
    }
    Ok(record)
}

/// Marks the study in `dir` `incomplete` when `study.json` says `running` and no process holds
/// the directory's lock (the study's process was killed or crashed, or the machine stopped):
/// the cell it was running becomes `interrupted`, that cell's run `incomplete`
/// ([`store::mark_abandoned`]), and `--resume` continues from there. Returns true when it was
/// marked; false when the study is not running, is still being run, or the file system has no
/// locks.
#[cfg(feature = "linux")]
pub fn mark_abandoned(dir: &Path) -> Result<bool, StudyError> {
    match read_state(dir) {
        Ok(r) if r.state == StudyState::Running => {}
        _ => return Ok(false),
    }
    let lock = match store::DirLock::try_acquire(dir) {
        Ok(Some(l)) => l,
        Ok(None) | Err(_) => return Ok(false),
    };
    // Read again under the lock: the study may have ended in between.
    let mut record = read_state(dir)?;
    if record.state != StudyState::Running {
        return Ok(false);
    }
    mark_locked(dir, &mut record)?;
    drop(lock);
    Ok(true)
}

/// Marks a study whose lock this process holds and whose state says running.
#[cfg(feature = "linux")]
fn mark_locked(dir: &Path, record: &mut StudyRecord) -> Result<(), StudyError> {
    let now = store::now_rfc3339();
    let total = record.cells.len();
    let mut at = None;
    for (i, c) in record.cells.iter_mut().enumerate() {
        if c.state != CellState::Running {
            continue;
        }
        at = Some(i + 1);
        if let Some(d) = &c.dir {
            store::mark_abandoned(&dir.join(d)).map_err(|e| StudyError::Failed(e.to_string()))?;
        }
        c.state = CellState::Interrupted;
        c.detail = Some(
            "the study's process ended during this cell (killed, crashed or the machine stopped)"
                .into(),
        );
        c.ended_at = Some(now.clone());
    }
    record.state = StudyState::Incomplete;
    record.detail = Some(match at {
        Some(i) => format!(
            "the study's process ended in cell {i} of {total} without finishing (killed, crashed or the machine stopped); marked at {now}; --resume continues"
        ),
        None => format!(
            "the study's process ended without finishing (killed, crashed or the machine stopped); marked at {now}; --resume continues"
        ),
    });
    record.updated_at = now;
    write_state(dir, record)
}

/// A study as it stands in its directory, with its tables, without running anything: for
/// reports of finished (or stopped) studies.
pub fn outcome(dir: &Path) -> Result<StudyOutcome, StudyError> {
    let record = read_state(dir)?;
    let study = super::parse(&record.text, record.source.clone()).map_err(|e| {
        StudyError::Usage(format!(
            "{}: the study text stored in {STATE_FILE} no longer parses ({e})",
            dir.display()
        ))
    })?;
    let tables = study
        .file
        .table
        .iter()
        .map(|t| super::table::build(t, &study.file, &record.done()))
        .collect();
    Ok(StudyOutcome {
        schema: JSON_SCHEMA,
        dir: dir.to_path_buf(),
        record,
        tables,
    })
}

/// The most recent study directory under `base` that is not completed, for `--resume` without
/// a directory.
#[cfg(feature = "linux")]
pub fn latest_unfinished(base: &Path) -> Result<PathBuf, StudyError> {
    let entries = std::fs::read_dir(base).map_err(|e| {
        StudyError::Usage(format!(
            "--resume: cannot read {} ({e}); give the study directory: --resume DIR",
            base.display()
        ))
    })?;
    let mut best: Option<(String, PathBuf)> = None;
    for e in entries.flatten() {
        let path = e.path();
        let Ok(r) = read_state(&path) else { continue };
        if r.state == StudyState::Completed {
            continue;
        }
        if best.as_ref().is_none_or(|(t, _)| r.updated_at > *t) {
            best = Some((r.updated_at.clone(), path));
        }
    }
    best.map(|b| b.1).ok_or_else(|| {
        StudyError::Usage(format!(
            "--resume: no unfinished study under {}; give the study directory: --resume DIR",
            base.display()
        ))
    })
}

/// Runs `study` from its first cell.
#[cfg(feature = "linux")]
pub fn run(
    study: &Study,
    options: &StudyOptions,
    ctx: &RunContext,
    obs: &mut dyn StudyObserver,
) -> Result<StudyOutcome, StudyError> {
    check_scale(options.duration_scale)?;
    let name = study.file.study.name.clone();
    let dir = RunDir::create(
        options.output.as_deref(),
        &ctx.base_dir,
        &format!("study-{}", super::slug(&name)),
    )
    .map_err(|e| StudyError::Usage(e.to_string()))?;
    let now = store::now_rfc3339();
    let record = StudyRecord {
        schema: RECORD_SCHEMA.to_string(),
        schema_version: STATE_VERSION,
        kind: RunKind::Study,
        id: dir.id().to_string(),
        name,
        source: study.source.clone(),
        text: study.text.clone(),
        duration_scale: options.duration_scale,
        tool: ctx.tool.clone(),
        command_lines: vec![ctx.command_line.clone()],
        created_at: now.clone(),
        updated_at: now,
        state: StudyState::Running,
        detail: None,
        system: system::snapshot(),
        cells: cells(&study.file)
            .into_iter()
            .map(|cell| CellRecord {
                labels: cell.labels(&study.file),
                cell,
                state: CellState::Pending,
                dir: None,
                earlier_attempts: Vec::new(),
                error: None,
                detail: None,
                started_at: None,
                ended_at: None,
                seconds: None,
                metrics: Metrics::new(),
                loads: Vec::new(),
                warnings: Vec::new(),
                cause: None,
            })
            .collect(),
    };
    write_state(dir.path(), &record)?;
    drive(study, dir.path().to_path_buf(), record, ctx, obs)
}

/// Continues the study in `dir` with every cell that is not completed. `scale`, when given,
/// must match the scale the study started with.
#[cfg(feature = "linux")]
pub fn resume(
    dir: &Path,
    scale: Option<f64>,
    ctx: &RunContext,
    obs: &mut dyn StudyObserver,
) -> Result<StudyOutcome, StudyError> {
    // Root writes the cells' runs (and the lock) only into a directory of its own.
    if let Some(what) = store::foreign_to_root(dir) {
        return Err(StudyError::Usage(format!(
            "--resume {}: {what}: root resumes only a study in a directory of its own (another user could plant links in it while its cells write); resume it as that user, or run the study afresh",
            dir.display()
        )));
    }
    // Held until the study stops: a second process cannot resume it at the same time, and a
    // process that dies leaves it to be marked by the next start.
    let lock = match store::DirLock::try_acquire(dir) {
        Ok(Some(l)) => Some(l),
        Ok(None) => {
            return Err(StudyError::Usage(format!(
                "{}: another sandglass process is running this study; wait for it to end",
                dir.display()
            )))
        }
        Err(_) => None,
    };
    let mut record = read_state(dir)?;
    if record.state == StudyState::Running && lock.is_some() {
        // Nobody else holds the lock, so the process that ran it has ended.
        mark_locked(dir, &mut record)?;
    }
    if let Some(s) = scale {
        check_scale(s)?;
        if (s - record.duration_scale).abs() > 1e-12 {
            return Err(StudyError::Usage(format!(
                "--duration-scale {s}: the study in {} started with {}, and a resumed study keeps it; leave the option out",
                dir.display(),
                record.duration_scale
            )));
        }
    }
    let study = super::parse(&record.text, record.source.clone()).map_err(|e| {
        StudyError::Usage(format!(
            "{}: the study text stored in {STATE_FILE} no longer parses ({e})",
            dir.display()
        ))
    })?;
    let expected: Vec<String> = cells(&study.file).into_iter().map(|c| c.id).collect();
    let stored: Vec<String> = record.cells.iter().map(|c| c.cell.id.clone()).collect();
    if expected != stored {
        return Err(StudyError::Usage(format!(
            "{}: the cells in {STATE_FILE} do not match its study; it was edited or is corrupted",
            dir.display()
        )));
    }
    if record.state == StudyState::Completed {
        return Err(StudyError::Usage(format!(
            "{}: every cell of this study is completed; there is nothing to resume",
            dir.display()
        )));
    }
    record.command_lines.push(ctx.command_line.clone());
    record.state = StudyState::Running;
    record.detail = None;
    drive(&study, dir.to_path_buf(), record, ctx, obs)
}

/// Forwards a cell's warnings once per study, and collects them for the cell's record.
#[cfg(feature = "linux")]
struct CellObserver<'a> {
    inner: &'a mut dyn StudyObserver,
    seen: &'a mut BTreeSet<String>,
    warnings: Vec<String>,
}

#[cfg(feature = "linux")]
impl Observer for CellObserver<'_> {
    fn warning(&mut self, w: &Warning) {
        self.warnings.push(w.message.clone());
        if self.seen.insert(w.message.clone()) {
            self.inner.warning(w);
        }
    }
    fn note(&mut self, _text: &str) {
        // Each run's notes (the gap threshold, the measuring line) repeat for every cell;
        // the study's own progress line replaces them.
    }
    fn progress(&mut self, elapsed: Nanos, total: Nanos) {
        self.inner.progress(elapsed, total);
    }
    fn live(&mut self, elapsed: Nanos, rows: &[LiveRow]) {
        self.inner.live(elapsed, rows);
    }
}

#[cfg(feature = "linux")]
fn pending_signal() -> bool {
    signal::wait_timeout(&signal::TERMINATING, 0).is_some()
}

#[cfg(feature = "linux")]
fn drive(
    study: &Study,
    dir: PathBuf,
    mut record: StudyRecord,
    ctx: &RunContext,
    obs: &mut dyn StudyObserver,
) -> Result<StudyOutcome, StudyError> {
    let terminate = signal::TERMINATING;
    let already_blocked = signal::terminating_blocked();
    signal::block(&terminate)
        .map_err(|e| StudyError::Failed(format!("cannot block signals: {e}")))?;
    let result = drive_blocked(study, &dir, &mut record, ctx, obs);
    if !already_blocked {
        // A second signal may be pending (SIGTERM after SIGINT): the study is stopping
        // already, so it is taken here rather than left to end the process when unblocked.
        while signal::wait_timeout(&terminate, 0).is_some() {}
        let _ = signal::unblock(&terminate);
    }
    result?;
    let tables = study
        .file
        .table
        .iter()
        .map(|t| super::table::build(t, &study.file, &record.done()))
        .collect();
    Ok(StudyOutcome {
        schema: JSON_SCHEMA,
        dir,
        record,
        tables,
    })
}

#[cfg(feature = "linux")]
fn drive_blocked(
    study: &Study,
    dir: &Path,
    record: &mut StudyRecord,
    ctx: &RunContext,
    obs: &mut dyn StudyObserver,
) -> Result<(), StudyError> {
    let scale = record.duration_scale;
    let total = record.cells.len();
    let trace = cell_trace(study, obs);
    let started = Instant::now();
    let mut seen = BTreeSet::new();
    // Planned against actual time of the cells run so far, for the estimate.
    let (mut planned_done, mut actual_done) = (0u64, 0u64);
    for i in 0..total {
        if record.cells[i].state == CellState::Completed {
            continue;
        }
        if pending_signal() {
            record.state = StudyState::Interrupted;
            record.detail = Some(format!(
                "stopped by a signal before cell {} of {total}",
                i + 1
            ));
            record.updated_at = store::now_rfc3339();
            write_state(dir, record)?;
            return Ok(());
        }
        let remaining: u64 = record.cells[i..]
            .iter()
            .filter(|c| c.state != CellState::Completed)
            .map(|c| planned(study, &c.cell, scale).0)
            .sum();
        let ratio = if planned_done > 0 {
            actual_done as f64 / planned_done as f64
        } else {
            1.0
        };
        let eta = Nanos((remaining as f64 * ratio) as u64);
        // Keep what an earlier attempt left: move it aside.
        let cell_dir = dir.join(&record.cells[i].cell.id);
        if cell_dir.exists() {
            let mut n = 1;
            let aside = loop {
                let name = format!("{}.attempt-{n}", record.cells[i].cell.id);
                if !dir.join(&name).exists() {
                    break name;
                }
                n += 1;
            };
            std::fs::rename(&cell_dir, dir.join(&aside)).map_err(|e| {
                StudyError::Failed(format!(
                    "cannot move the earlier attempt {} aside: {e}",
                    cell_dir.display()
                ))
            })?;
            record.cells[i].earlier_attempts.push(aside);
        }
        {
            let c = &mut record.cells[i];
            c.state = CellState::Running;
            c.dir = Some(c.cell.id.clone());
            c.error = None;
            c.detail = None;
            c.metrics.clear();
            c.loads.clear();
            c.warnings.clear();
            c.started_at = Some(store::now_rfc3339());
            c.ended_at = None;
        }
        record.updated_at = store::now_rfc3339();
        write_state(dir, record)?;
        obs.cell_started(
            &record.cells[i],
            total,
            Nanos(started.elapsed().as_nanos() as u64),
            eta,
        );
        let t = Instant::now();
        let cell = record.cells[i].cell.clone();
        let mut cell_obs = CellObserver {
            inner: obs,
            seen: &mut seen,
            warnings: Vec::new(),
        };
        let outcome = run_cell(study, &cell, scale, &cell_dir, trace, ctx, &mut cell_obs);
        let warnings = std::mem::take(&mut cell_obs.warnings);
        let seconds = t.elapsed().as_secs_f64();
        planned_done += planned(study, &cell, scale).0;
        actual_done += (seconds * 1e9) as u64;
        let c = &mut record.cells[i];
        c.seconds = Some(seconds);
        c.ended_at = Some(store::now_rfc3339());
        c.warnings = warnings;
        let mut stop = false;
        match outcome {
            Ok(o) => {
                c.metrics = o.metrics;
                c.loads = o.loads;
                c.cause = o.cause;
                c.detail = Some(o.detail);
                c.state = match o.state {
                    RunState::Completed => CellState::Completed,
                    RunState::Interrupted => {
                        stop = true;
                        CellState::Interrupted
                    }
                    _ => CellState::Failed,
                };
                if c.state == CellState::Failed {
                    c.error = c.detail.clone();
                }
            }
            Err(e) => {
                c.state = CellState::Failed;
                c.error = Some(e.to_string());
            }
        }
        record.updated_at = store::now_rfc3339();
        write_state(dir, record)?;
        obs.cell_ended(&record.cells[i], total);
        if stop {
            record.state = StudyState::Interrupted;
            record.detail = Some(format!("stopped by a signal in cell {} of {total}", i + 1));
            record.updated_at = store::now_rfc3339();
            write_state(dir, record)?;
            return Ok(());
        }
    }
    record.state = if record.count(CellState::Completed) == total {
        StudyState::Completed
    } else {
        StudyState::Incomplete
    };
    record.detail = Some(format!(
        "{} of {total} cells completed",
        record.count(CellState::Completed)
    ));
    record.updated_at = store::now_rfc3339();
    write_state(dir, record)
}

/// What one cell produced.
#[cfg(feature = "linux")]
struct CellOutcome {
    state: RunState,
    detail: String,
    metrics: Metrics,
    loads: Vec<LoadReport>,
    cause: Option<String>,
}

/// The CPUs a measure names: `all` for every CPU this process may use.
#[cfg(feature = "linux")]
fn measure_cpus(m: &Measure) -> Option<CpuList> {
    match m.cpus.as_deref() {
        None => None,
        Some("all") => CpuList::from_cpus(system::allowed_cpus()),
        Some(list) => CpuList::parse(list).ok(),
    }
}

/// The load plan of a cell.
#[cfg(feature = "linux")]
fn load_plan(study: &Study, cell: &Cell, scale: f64) -> Result<LoadPlan, load::LoadError> {
    match cell.load {
        None => Ok(LoadPlan::default()),
        Some(l) => {
            let specs = load::parse_profile(study.file.load[l].profile.get_ref())?;
            Ok(LoadPlan {
                settle_ns: if specs.is_empty() {
                    Nanos::ZERO
                } else {
                    settle(study, scale)
                },
                specs,
            })
        }
    }
}

#[cfg(feature = "linux")]
fn usage_pattern(study: &Study) -> worst_case::UsagePattern {
    study
        .file
        .study
        .usage
        .as_deref()
        .and_then(worst_case::preset)
        .map(|p| p.usage)
        .unwrap_or(worst_case::UsagePattern {
            hours_per_day: 24.0,
            days_per_week: 7.0,
        })
}

/// Per-CPU buffer of a cell's kernel events: a cell that measures every CPU reads them after
/// its run, so the buffer holds the whole cell.
#[cfg(feature = "linux")]
const CELL_TRACE_BUFFER_KB: u64 = 32_768;

/// Whether timer and noise cells record kernel events: `[study] trace` (`auto` unless `off`)
/// and whether this process can. Says which, and why not.
#[cfg(feature = "linux")]
fn cell_trace(study: &Study, obs: &mut dyn StudyObserver) -> Option<TraceOptions> {
    if study.file.study.trace.as_deref() == Some("off") {
        obs.note("kernel events: not recorded ([study] trace = \"off\")");
        return None;
    }
    match crate::causes::tracefs::probe() {
        Ok(()) => {
            obs.note("kernel events: recorded in every timer and noise cell (interrupt-level latency, and the cause of each delay)");
            Some(TraceOptions {
                buffer_kb: CELL_TRACE_BUFFER_KB,
                ..TraceOptions::default()
            })
        }
        Err(e) => {
            let why = e.to_string();
            let why = why.strip_prefix("--trace: ").unwrap_or(&why).to_string();
            obs.note(&format!(
                "kernel events: not recorded, so the interrupt-level columns stay empty: {why}"
            ));
            None
        }
    }
}

#[cfg(feature = "linux")]
#[allow(clippy::too_many_arguments)]
fn run_cell(
    study: &Study,
    cell: &Cell,
    scale: f64,
    cell_dir: &Path,
    trace: Option<TraceOptions>,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<CellOutcome, RunError> {
    let m = &study.file.measure[cell.measure];
    let setting = cell.setting.map(|s| &study.file.setting[s]);
    let d = scaled(parse_duration(m.duration.get_ref()), scale);
    let loads = load_plan(study, cell, scale).map_err(|e| RunError::Usage(e.to_string()))?;
    let policy_text = setting
        .and_then(|s| s.policy.as_ref().map(|p| p.get_ref().clone()))
        .or_else(|| m.policy.clone());
    let policy = |default: Policy| -> Result<Policy, RunError> {
        policy_text
            .as_deref()
            .map(|p| Policy::parse(p).map_err(|e| RunError::Usage(e.to_string())))
            .transpose()
            .map(|p| p.unwrap_or(default))
    };
    match m.kind.get_ref() {
        RunKind::Timer => {
            let interval = setting
                .and_then(|s| s.interval.as_ref().map(|i| i.get_ref().clone()))
                .or_else(|| m.interval.clone())
                .map(|i| parse_duration(&i))
                .unwrap_or(Nanos(1_000_000));
            let kind = setting
                .and_then(|s| s.timer.as_ref().map(|t| t.get_ref().clone()))
                .or_else(|| m.timer.clone())
                .map(|t| TimerKind::parse(&t).map_err(|e| RunError::Usage(e.to_string())))
                .transpose()?
                .unwrap_or(TimerKind::Hr);
            let config = TimerConfig {
                cpus: measure_cpus(m),
                policy: policy(timer::DEFAULT_POLICY)?,
                interval_ns: interval,
                duration_ns: Nanos(d.0.max(interval.0)),
                timer: kind,
                resync: m.mode.as_deref() == Some("resync"),
                duty: None,
                thresholds_ns: timer::default_thresholds(interval),
                interval_bin_ns: Nanos(100_000),
                main_cpu: None,
                cpu_dma_latency_us: Some(0),
                output_dir: Some(cell_dir.to_path_buf()),
                counter: Default::default(),
                loads,
                sample_hz: crate::causes::DEFAULT_SAMPLE_HZ,
                trace,
                threshold: None,
                explain_above_ns: None,
            };
            let r = timer::run(&config, ctx, obs)?;
            let mut metrics = metrics::timer(&r, usage_pattern(study));
            metrics.extend(metrics::loads(&r.run.loads));
            Ok(CellOutcome {
                state: r.run.state,
                detail: r.run.end_detail.clone(),
                cause: r.run.causes.as_ref().and_then(crate::causes::largest_cause),
                metrics,
                loads: r.run.loads,
            })
        }
        RunKind::Noise => {
            let config = NoiseConfig {
                cpus: measure_cpus(m),
                policy: policy(Policy::Other { nice: 0 })?,
                duration_ns: d,
                threshold_ns: m.threshold.as_deref().map(parse_duration),
                memmove_bytes: m
                    .workload
                    .as_deref()
                    .map(noise::parse_workload)
                    .transpose()
                    .map_err(|e| RunError::Usage(e.to_string()))?
                    .unwrap_or(0),
                records: None,
                main_cpu: None,
                allow_rt_busy: false,
                cpu_dma_latency_us: Some(0),
                output_dir: Some(cell_dir.to_path_buf()),
                counter: Default::default(),
                loads,
                sample_hz: crate::causes::DEFAULT_SAMPLE_HZ,
                trace,
                threshold: None,
            };
            let r = noise::run(&config, ctx, obs)?;
            let mut metrics = metrics::noise(&r);
            metrics.extend(metrics::loads(&r.run.loads));
            Ok(CellOutcome {
                state: r.run.state,
                detail: r.run.end_detail.clone(),
                cause: r.run.causes.as_ref().and_then(crate::causes::largest_cause),
                metrics,
                loads: r.run.loads,
            })
        }
        RunKind::Hourglass => {
            let mut words: Vec<String> = m
                .args
                .as_ref()
                .map(|a| a.get_ref().split_whitespace().map(String::from).collect())
                .unwrap_or_default();
            words.push("-d".into());
            words.push(duration::format_exact(d));
            let mut spec = match crate::hourglass::cmdline::parse(&words) {
                Ok(crate::hourglass::cmdline::Command::Run(spec)) => spec,
                Ok(crate::hourglass::cmdline::Command::Help) => {
                    return Err(RunError::Usage(
                        "args: -h asks for help; give a command line to run".into(),
                    ))
                }
                Err(e) => return Err(RunError::Usage(format!("args: {e}"))),
            };
            spec.output_dir = Some(cell_dir.to_path_buf());
            spec.loads = loads;
            let r = crate::hourglass::run::run(&spec, ctx, obs)?;
            let mut metrics = metrics::hourglass(&r);
            metrics.extend(metrics::loads(&r.run.loads));
            Ok(CellOutcome {
                state: r.run.state,
                detail: r.run.end_detail.clone(),
                cause: r.run.causes.as_ref().and_then(crate::causes::largest_cause),
                metrics,
                loads: r.run.loads.clone(),
            })
        }
        _ => run_load_alone(cell_dir, &loads, d, ctx, obs),
    }
}

/// A `load` cell: the loads alone for the duration, their throughput recorded in a run
/// directory of kind `load` (a control for what a measurement costs the load).
#[cfg(feature = "linux")]
fn run_load_alone(
    cell_dir: &Path,
    plan: &LoadPlan,
    d: Nanos,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<CellOutcome, RunError> {
    let dir = RunDir::create(Some(cell_dir), &ctx.base_dir, RunKind::Load.as_str())
        .map_err(|e| RunError::Usage(e.to_string()))?;
    let mut manifest = ctx.manifest(
        &dir,
        &RunKind::Load,
        system::snapshot(),
        serde_json::Value::Null,
        serde_json::json!({ "loads": plan, "duration_ns": d }),
    );
    dir.write_manifest(&manifest)
        .map_err(|e| RunError::Usage(e.to_string()))?;
    let (state, detail, reports) = crate::runner::run_loads_alone(plan, d, obs)?;
    let json = serde_json::to_vec_pretty(&reports).unwrap_or_default();
    let file = dir
        .write_file(
            "loads.json",
            &json,
            "sandglass-loads-json/1",
            "each load's work and throughput",
        )
        .map_err(|e| RunError::Failed(e.to_string()))?;
    manifest.state = state;
    manifest.ended_at = Some(store::now_rfc3339());
    manifest.end_detail = Some(detail.clone());
    manifest.files = vec![file];
    dir.write_manifest(&manifest)
        .map_err(|e| RunError::Failed(e.to_string()))?;
    Ok(CellOutcome {
        state,
        detail,
        metrics: metrics::loads(&reports),
        loads: reports,
        cause: None,
    })
}
