//! The run directory: every run is a self-describing directory.
//!
//! ```text
//! sandglass-runs/20261122-101500-hourglass-3f2a/
//!   manifest.json     schema version, tool, command line, state, times, system snapshot,
//!                     clock calibration, resolved configuration, warnings, and every other
//!                     file with its size and SHA-256
//!   ...               the kind's data files (for hourglass: trace.csv, latency.csv, jobs.csv,
//!                     summary.json, calibration.json)
//! ```
//!
//! The manifest is written twice: with state `running` before the measurement starts (which
//! also proves the directory is writable before anything is measured) and with the final state
//! after every data file has been written. Each write goes to a temporary name first and is
//! renamed into place, so no file is ever seen half-written under its final name.
//!
//! The writing process holds an advisory lock on the directory ([`DirLock`]) until it ends.
//! A directory whose manifest says `running` while nobody holds the lock was left by a process
//! that was killed or crashed (or a machine that stopped): the next start marks it
//! `incomplete` ([`mark_abandoned`]), so it is never taken for a run still in progress.
//!
//! The format is versioned by `schema_version`; later versions add fields and files, never
//! change the meaning of existing ones. `docs/run-format.md` documents it.

pub mod access;
pub mod append;
pub mod data;
pub mod pack;
pub mod table;

use crate::system::SystemSnapshot;
use crate::warning::Warning;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
#[cfg(feature = "linux")]
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use thiserror::Error;

/// The version of the run-directory format this build writes. Version 2 keeps the per-sample
/// tables in Parquet segments written as the run goes; version 1 kept them as CSV files written
/// at the end. Both are read.
pub const SCHEMA_VERSION: u32 = 2;

/// The default parent directory of runs, relative to the working directory.
pub const DEFAULT_BASE: &str = "sandglass-runs";

/// The environment variable that overrides [`DEFAULT_BASE`].
pub const BASE_ENV: &str = "SANDGLASS_RUNS_DIR";

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("run directory {0} already exists and is not empty: give another -o or remove it")]
    NotEmpty(PathBuf),
    #[error("cannot create run directory {path}: {source} (choose a writable place with -o DIR)")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} is being written by another sandglass process: give another -o, or wait for that run to end")]
    Busy(PathBuf),
    /// Root's `-o` names a link or a directory another user owns: they could have planted it,
    /// and could plant links inside it while the run writes.
    #[error("{}: {what}: root writes a run only into a directory of its own; give -o a path that does not exist yet, in a directory other users cannot write", .path.display())]
    Planted { path: PathBuf, what: String },
    /// The runs directory cannot or must not be written by this process.
    #[error("cannot write a run into {}: {cause}; {}", .base.display(), .cause.fix())]
    Store {
        base: PathBuf,
        cause: access::ReadOnly,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode {what}: {source}")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write {path}: {detail}")]
    Parquet { path: PathBuf, detail: String },
}

/// Who wrote a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tool {
    pub name: String,
    pub version: String,
    pub commit: String,
}

/// How far a run got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// The measurement started and the final manifest was never written.
    Running,
    /// Ran for its whole duration.
    Completed,
    /// Stopped early by SIGINT, SIGTERM or SIGHUP; every result measured until then is kept.
    Interrupted,
    /// A thread failed to stop and the watchdog ended the run.
    Watchdog,
    /// Setup failed before or during the measurement.
    Failed,
    /// The process ended before the run finished (SIGKILL, a crash, the machine stopped):
    /// found `running` with nobody writing it, and marked so by the next start.
    Incomplete,
}

impl RunState {
    pub fn name(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Completed => "completed",
            RunState::Interrupted => "interrupted",
            RunState::Watchdog => "ended by the watchdog",
            RunState::Failed => "failed",
            RunState::Incomplete => "incomplete",
        }
    }
}

/// One data file of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileEntry {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
    /// The file's format and its version, such as `sandglass-trace-csv/1`.
    pub format: String,
    pub description: String,
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Manifest {
    pub schema_version: u32,
    pub id: String,
    /// The probe that made the run: `timer`, `noise`, `hourglass`, `bench-copy`, ...
    #[schemars(with = "String")]
    pub kind: crate::RunKind,
    pub tool: Tool,
    pub command_line: Vec<String>,
    pub state: RunState,
    /// RFC 3339 UTC.
    pub started_at: String,
    pub ended_at: Option<String>,
    /// Why the run ended, for people.
    pub end_detail: Option<String>,
    pub system: SystemSnapshot,
    /// The counter and its calibration.
    pub clock: serde_json::Value,
    /// The resolved configuration of the run's kind.
    pub config: serde_json::Value,
    pub warnings: Vec<Warning>,
    pub files: Vec<FileEntry>,
}

/// The current time as RFC 3339 UTC with seconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

#[cfg(feature = "linux")]
fn run_id(label: &str, attempt: u32) -> String {
    let stamp: String = now_rfc3339()
        .chars()
        .filter(|c| c.is_ascii_digit())
        .collect();
    let (date, time) = stamp.split_at(8.min(stamp.len()));
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mix = (nanos ^ (sandglass_sys::process::pid() as u32).rotate_left(16))
        .wrapping_add(attempt.wrapping_mul(0x9e37_79b9));
    format!("{date}-{time}-{label}-{:04x}", (mix ^ (mix >> 16)) & 0xffff)
}

/// The parent directory of runs: `$SANDGLASS_RUNS_DIR` or `./sandglass-runs`.
pub fn default_base() -> PathBuf {
    std::env::var_os(BASE_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BASE))
}

/// A file of [`RESERVE_BYTES`] that a new run directory holds from its start to the end of its
/// measuring, so that a run that fills its disk can still close its tables and write its
/// summary, its manifest and the catalog's row once the file is removed.
pub const RESERVE_FILE: &str = ".reserve";

/// The space held back for a run's last files: a summary, a manifest and a catalog update take
/// far less.
pub const RESERVE_BYTES: usize = 512 * 1024;

/// Holds [`RESERVE_BYTES`] in `dir` (written, not sparse, so that the blocks are taken). On a
/// disk that has not even that much free the run goes on without it.
#[cfg(feature = "linux")]
fn reserve(dir: &Path) {
    let path = dir.join(RESERVE_FILE);
    let written = std::fs::File::create(&path).and_then(|mut f| {
        use std::io::Write;
        let zeros = vec![0u8; 64 * 1024];
        for _ in 0..RESERVE_BYTES / zeros.len() {
            f.write_all(&zeros)?;
        }
        f.sync_all()
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&path);
    }
}

/// Removes the reserve of the run directory `dir`, if it has one: only a regular file with one
/// link that this user owns, as [`reserve`] wrote it. A link or another user's file in its
/// place is left as it is (a study resumed as root may be in a directory another user wrote).
#[cfg(feature = "linux")]
pub fn release_reserve(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join(RESERVE_FILE);
    if let Ok(m) = path.symlink_metadata() {
        if m.is_file() && m.nlink() == 1 && m.uid() == sandglass_sys::process::euid() {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// An open run directory, locked against other writers for as long as any clone of it lives.
#[cfg(feature = "linux")]
#[derive(Clone, Debug)]
pub struct RunDir {
    path: PathBuf,
    id: String,
    _lock: Option<std::sync::Arc<DirLock>>,
}

/// An exclusive advisory lock (`flock`) on a run or study directory, held by the process that
/// writes it. The kernel drops it when the process ends, however it ends, so a directory that
/// says `running` and is not locked was abandoned.
#[cfg(feature = "linux")]
#[derive(Debug)]
pub struct DirLock {
    _file: std::fs::File,
}

#[cfg(feature = "linux")]
impl DirLock {
    /// Takes the lock on `dir`: `Ok(Some)` when taken, `Ok(None)` when another process holds
    /// it. A file system without locks (some network file systems) is an `Err`; callers then
    /// go on unlocked.
    pub fn try_acquire(dir: &Path) -> std::io::Result<Option<DirLock>> {
        let file = std::fs::File::open(dir)?;
        match sandglass_sys::process::try_lock_exclusive(&file) {
            Ok(true) => Ok(Some(DirLock { _file: file })),
            Ok(false) => Ok(None),
            Err(e) => Err(std::io::Error::from_raw_os_error(e.0)),
        }
    }
}

/// Takes the lock of a directory this process has just created. Another holder means another
/// process writes there; a file system without locks leaves the directory unlocked.
#[cfg(feature = "linux")]
fn lock_new(path: &Path) -> Result<Option<std::sync::Arc<DirLock>>, StoreError> {
    match DirLock::try_acquire(path) {
        Ok(Some(l)) => Ok(Some(std::sync::Arc::new(l))),
        Ok(None) => Err(StoreError::Busy(path.to_path_buf())),
        Err(_) => Ok(None),
    }
}

/// As root, refuses a run directory that is a link or owned by another user (checked after
/// it was made or found: another user may have made it first, in /tmp for example).
#[cfg(feature = "linux")]
fn planted(p: &Path) -> Result<(), StoreError> {
    if sandglass_sys::process::euid() != 0 {
        return Ok(());
    }
    let m = std::fs::symlink_metadata(p).map_err(|source| StoreError::Create {
        path: p.to_path_buf(),
        source,
    })?;
    match foreign(&m) {
        Some(what) => Err(StoreError::Planted {
            path: p.to_path_buf(),
            what,
        }),
        None => Ok(()),
    }
}

/// As root, what makes the directory `p` unsafe to write into: it is a symbolic link, or
/// another user owns it (they could plant links in it while root writes). `None` for a process
/// that is not root, for root's own directory, and when `p` cannot be read (opening it then
/// says why).
#[cfg(feature = "linux")]
pub fn foreign_to_root(p: &Path) -> Option<String> {
    if sandglass_sys::process::euid() != 0 {
        return None;
    }
    foreign(&std::fs::symlink_metadata(p).ok()?)
}

#[cfg(feature = "linux")]
fn foreign(m: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    if m.file_type().is_symlink() {
        Some("is a symbolic link".into())
    } else if m.uid() != 0 {
        Some(format!("is owned by uid {}", m.uid()))
    } else {
        None
    }
}

#[cfg(feature = "linux")]
impl RunDir {
    /// Creates the run directory: `explicit` when given (it must not exist or be empty),
    /// otherwise a new uniquely named directory under `base`, its name carrying `label` (the
    /// run's kind, or `study-NAME`).
    pub fn create(explicit: Option<&Path>, base: &Path, label: &str) -> Result<RunDir, StoreError> {
        let create = |p: &Path| {
            std::fs::create_dir_all(p).map_err(|source| StoreError::Create {
                path: p.to_path_buf(),
                source,
            })
        };
        if let Some(p) = explicit {
            if p.exists() {
                let empty = std::fs::read_dir(p)
                    .map_err(|source| StoreError::Create {
                        path: p.to_path_buf(),
                        source,
                    })?
                    .next()
                    .is_none();
                if !empty {
                    return Err(StoreError::NotEmpty(p.to_path_buf()));
                }
            } else {
                create(p)?;
            }
            planted(p)?;
            let id = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| run_id(label, 0));
            let lock = lock_new(p)?;
            reserve(p);
            return Ok(RunDir {
                _lock: lock,
                path: p.to_path_buf(),
                id,
            });
        }
        // Root writes no run into a runs directory another user owns (they could have planted
        // it), and nobody into a read-only one.
        if let Err(cause) = access::write_access(base) {
            return Err(StoreError::Store {
                base: base.to_path_buf(),
                cause,
            });
        }
        create(base)?;
        for attempt in 0..100 {
            let id = run_id(label, attempt);
            let path = base.join(&id);
            match std::fs::create_dir(&path) {
                Ok(()) => {
                    let lock = lock_new(&path)?;
                    reserve(&path);
                    return Ok(RunDir {
                        _lock: lock,
                        path,
                        id,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(StoreError::Create { path, source }),
            }
        }
        Err(StoreError::Create {
            path: base.to_path_buf(),
            source: std::io::Error::other("could not find a free run name"),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Frees the space held back for the run's last files ([`RESERVE_FILE`]): the measuring
    /// is over, or the disk is full. Idempotent.
    pub fn release_reserve(&self) {
        release_reserve(&self.path);
    }

    /// Writes `data` to `name` atomically and returns its manifest entry.
    pub fn write_file(
        &self,
        name: &str,
        data: &[u8],
        format: &str,
        description: &str,
    ) -> Result<FileEntry, StoreError> {
        self.write_atomic(name, data)?;
        Ok(FileEntry {
            name: name.to_string(),
            bytes: data.len() as u64,
            sha256: sha256_hex(data),
            format: format.to_string(),
            description: description.to_string(),
        })
    }

    /// Writes the manifest atomically; a manifest with a final state first frees the reserve.
    pub fn write_manifest(&self, m: &Manifest) -> Result<(), StoreError> {
        if m.state != RunState::Running {
            self.release_reserve();
        }
        let mut text = serde_json::to_vec_pretty(m).map_err(|source| StoreError::Encode {
            what: "manifest.json".into(),
            source,
        })?;
        text.push(b'\n');
        self.write_atomic("manifest.json", &text)
    }

    fn write_atomic(&self, name: &str, data: &[u8]) -> Result<(), StoreError> {
        write_atomic(&self.path, name, data)
    }
}

#[cfg(feature = "linux")]
fn write_atomic(dir: &Path, name: &str, data: &[u8]) -> Result<(), StoreError> {
    let final_path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let err = |source| StoreError::Write {
        path: final_path.clone(),
        source,
    };
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(data)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, &final_path));
    if written.is_err() {
        // A full disk or a failing device: leave no partial file behind, and give its space
        // back (the rest of the run may still fit).
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(err)
}

/// The files a run of `kind` writes as it goes, with their formats and descriptions: the
/// tables' segments and the appended files. A run that ends without listing its files (a full
/// disk, a killed process) gets them listed from this.
#[cfg(feature = "linux")]
fn streamed_file(kind: &crate::RunKind, name: &str) -> Option<(String, String)> {
    for t in table::tables::of_kind(kind) {
        if t.segment_index(name).is_some() {
            return Some((t.format.to_string(), t.description.to_string()));
        }
    }
    let (format, description) = match name {
        "histograms.hlog" => (HLOG_FORMAT, HLOG_DESCRIPTION),
        TOTALS_LOG => (HLOG_FORMAT, TOTALS_DESCRIPTION),
        "sampler.csv" => (SAMPLER_FORMAT, SAMPLER_DESCRIPTION),
        _ => return None,
    };
    Some((format.to_string(), description.to_string()))
}

/// The format of per-second interval logs.
pub const HLOG_FORMAT: &str = "hdrhistogram-interval-log/1.3";
/// What `histograms.hlog` holds.
pub const HLOG_DESCRIPTION: &str = "HdrHistogram interval log (V2 compressed, values in ns, StartTime and BaseTime the run's time zero): one histogram per CPU and second, written as each second closed";

/// The format of `sampler.csv`, the cause sampler's counts.
pub const SAMPLER_FORMAT: &str = "sandglass-sampler-csv/1";
/// What `sampler.csv` holds.
pub const SAMPLER_DESCRIPTION: &str = "per sampler interval (ns from the run's start) and measured CPU: interrupt and softirq counts, steal ticks; per measuring thread: context switches";

/// The file of whole-run histograms.
pub const TOTALS_LOG: &str = "totals.hlog";
/// What `totals.hlog` holds.
pub const TOTALS_DESCRIPTION: &str = "HdrHistogram interval log (V2 compressed, values in ns): per CPU, the whole-run histograms recorded by the measuring threads";

/// Makes what a run wrote readable after it ended without closing its files: closes its
/// partial Parquet segments after their last complete row group ([`table::recover`]) and lists
/// every data file it streamed, with its size and SHA-256 as it is now.
#[cfg(feature = "linux")]
pub fn recover_run(dir: &Path) -> Result<Vec<FileEntry>, StoreError> {
    release_reserve(dir);
    table::recover(dir)?;
    let kind = RunReader::open_any_state(dir)
        .map(|r| r.manifest.kind)
        .unwrap_or_default();
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| StoreError::Write {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut files = Vec::new();
    for name in names {
        let Some((format, description)) = streamed_file(&kind, &name) else {
            continue;
        };
        let path = dir.join(&name);
        let (bytes, sha256) = hash_file(&path).map_err(|source| StoreError::Write {
            path: path.clone(),
            source,
        })?;
        files.push(FileEntry {
            name,
            bytes,
            sha256,
            format,
            description,
        });
    }
    Ok(files)
}

/// The size and SHA-256 of the file at `path`, read in pieces.
#[cfg(feature = "linux")]
fn hash_file(path: &Path) -> std::io::Result<(u64, String)> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                hasher.update(&buf[..k]);
                n += k as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok((n, sha256_hex_of(hasher)))
}

/// Marks the run directory `dir` `incomplete` when its manifest says `running` and no process
/// holds its lock (its writer was killed or crashed, or the machine stopped). Returns true when
/// it was marked; false when the run is finished, still being written, or on a file system
/// without locks (where a live run cannot be told from a dead one). Whatever the directory
/// holds is kept as it is; the files the manifest lists stay listed.
#[cfg(feature = "linux")]
pub fn mark_abandoned(dir: &Path) -> Result<bool, StoreError> {
    let write_err = |source| StoreError::Write {
        path: dir.join("manifest.json"),
        source,
    };
    let Ok(r) = RunReader::open_any_state(dir) else {
        return Ok(false);
    };
    if r.manifest.state != RunState::Running {
        return Ok(false);
    }
    let lock = match DirLock::try_acquire(dir) {
        Ok(Some(l)) => l,
        Ok(None) | Err(_) => return Ok(false),
    };
    // Read again under the lock: the writer may have finished in between.
    let mut m = RunReader::open_any_state(dir)
        .map_err(|e| write_err(std::io::Error::other(e.to_string())))?
        .manifest;
    if m.state != RunState::Running {
        return Ok(false);
    }
    m.state = RunState::Incomplete;
    m.end_detail = Some(format!(
        "the process writing this run ended before the run finished (killed, crashed or the machine stopped); marked incomplete at {}",
        now_rfc3339()
    ));
    // What it streamed before it ended stays readable.
    if let Ok(recovered) = recover_run(dir) {
        for f in recovered {
            if !m.files.iter().any(|x| x.name == f.name) {
                m.files.push(f);
            }
        }
    }
    let mut text = serde_json::to_vec_pretty(&m).map_err(|source| StoreError::Encode {
        what: "manifest.json".into(),
        source,
    })?;
    text.push(b'\n');
    write_atomic(dir, "manifest.json", &text)?;
    drop(lock);
    Ok(true)
}

/// Lower-case hexadecimal SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(data);
    sha256_hex_of(h)
}

/// The lower-case hexadecimal digest of what `hasher` was given.
pub fn sha256_hex_of(hasher: Sha256) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(64);
    for b in hasher.finalize().iter() {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Why a run directory could not be read.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("{0} is not a sandglass run directory: it has no manifest.json")]
    NoManifest(PathBuf),
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a valid manifest ({source}); the run directory is damaged")]
    BadManifest {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: schema version {found} is newer than this sandglass reads ({SCHEMA_VERSION}); upgrade sandglass")]
    NewerSchema { path: PathBuf, found: u32 },
    #[error(
        "{run}: the run has not finished: its manifest says running (it is still being measured, or its process was killed and no sandglass has started since to mark it incomplete)"
    )]
    Unfinished { run: PathBuf },
    #[error(
        "{run}: the run is incomplete: its process ended before it finished (killed, crashed or the machine stopped), so it has no summary; {}",
        incomplete_advice(run, *samples)
    )]
    Incomplete { run: PathBuf, samples: bool },
    #[error("{run}: the manifest lists no file {name}; this run has {available}")]
    NotListed {
        run: PathBuf,
        name: String,
        available: String,
    },
    #[error("{path}: missing, though the manifest lists it")]
    Missing { path: PathBuf },
    #[error("{run}: the manifest lists '{name}', which lies outside the run directory; the manifest was altered: remove the run or restore its manifest")]
    Outside { run: PathBuf, name: String },
    #[error("{0}")]
    Refused(crate::bounded::BoundedError),
    #[error("{path}: {actual} bytes where the manifest records {expected}: the file was truncated or altered")]
    Size {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    #[error("{path}: its SHA-256 differs from the manifest's: the file was altered")]
    Checksum { path: PathBuf },
    #[error("{path}: not a readable Parquet file ({detail}); the run directory is damaged")]
    Parquet { path: PathBuf, detail: String },
    #[error("the {table} table has no column {column}")]
    Column { table: String, column: String },
    #[error("{path}:{line}: {what}")]
    Data {
        path: PathBuf,
        line: usize,
        what: String,
    },
}

/// What an incomplete run still offers: its samples when it kept any.
fn incomplete_advice(run: &Path, samples: bool) -> String {
    if samples {
        format!(
            "the samples it kept export with `sandglass report {} --csv DIR`, and its .parquet tables can be read directly (DuckDB, pandas)",
            run.display()
        )
    } else {
        "it ended before it kept any samples, so there is nothing to report or export; measure again".into()
    }
}

/// A run directory opened for reading: every file is checked against the manifest's size and
/// SHA-256 before it is used, so a truncated or altered file is reported by name, never
/// half-read.
#[derive(Clone, Debug)]
pub struct RunReader {
    path: PathBuf,
    pub manifest: Manifest,
}

impl RunReader {
    /// Opens the run directory at `path` and reads its manifest: a finished run, or an
    /// incomplete one that still wrote its summary (its store failed, and the summary covers
    /// what was kept). A run whose manifest still says `running` is refused
    /// ([`ReadError::Unfinished`]), and so is an incomplete run without a summary
    /// ([`ReadError::Incomplete`]: its process was killed; [`RunReader::open_kept`] reads its
    /// tables).
    pub fn open(path: &Path) -> Result<RunReader, ReadError> {
        let r = RunReader::open_kept(path)?;
        if r.manifest.state == RunState::Incomplete && !r.has("summary.json") {
            return Err(ReadError::Incomplete {
                run: path.to_path_buf(),
                samples: r
                    .manifest
                    .files
                    .iter()
                    .any(|f| f.name.ends_with(".parquet") || f.name.ends_with(".csv")),
            });
        }
        Ok(r)
    }

    /// Opens the run directory at `path` for what it kept: any run but one still `running`,
    /// a killed run included (the tables it streamed before it ended, as the next start
    /// recovered them). The exports read runs this way.
    pub fn open_kept(path: &Path) -> Result<RunReader, ReadError> {
        let r = RunReader::open_any_state(path)?;
        if r.manifest.state == RunState::Running {
            return Err(ReadError::Unfinished {
                run: path.to_path_buf(),
            });
        }
        Ok(r)
    }

    /// Opens the run directory at `path` whatever its state, an unfinished run included (the
    /// catalog lists those as `running`).
    pub fn open_any_state(path: &Path) -> Result<RunReader, ReadError> {
        let mpath = path.join("manifest.json");
        let text = crate::bounded::read(
            &mpath,
            crate::bounded::Links::Refuse,
            crate::bounded::MANIFEST_BYTES,
            "a manifest",
        )
        .map_err(|e| match e {
            crate::bounded::BoundedError::NotFound { .. } if path.is_dir() => {
                ReadError::NoManifest(path.to_path_buf())
            }
            crate::bounded::BoundedError::NotFound { .. } => match std::fs::metadata(path) {
                Err(source) if source.kind() != std::io::ErrorKind::NotFound => ReadError::Io {
                    path: path.to_path_buf(),
                    source,
                },
                _ => ReadError::NoManifest(path.to_path_buf()),
            },
            e => ReadError::Refused(e),
        })?;
        let version: Option<u32> = serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("schema_version")?.as_u64())
            .and_then(|v| u32::try_from(v).ok());
        if let Some(found) = version.filter(|&v| v > SCHEMA_VERSION) {
            return Err(ReadError::NewerSchema { path: mpath, found });
        }
        let manifest: Manifest =
            serde_json::from_slice(&text).map_err(|source| ReadError::BadManifest {
                path: mpath.clone(),
                source,
            })?;
        Ok(RunReader {
            path: path.to_path_buf(),
            manifest,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when the manifest lists `name`.
    pub fn has(&self, name: &str) -> bool {
        self.manifest.files.iter().any(|f| f.name == name)
    }

    /// The contents of `name`, after checking its size and SHA-256 against the manifest.
    pub fn read(&self, name: &str) -> Result<Vec<u8>, ReadError> {
        let entry = self
            .manifest
            .files
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| ReadError::NotListed {
                run: self.path.clone(),
                name: name.to_string(),
                available: self
                    .manifest
                    .files
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let (file, path) = open_entry(&self.path, entry)?;
        // JSON and TOML files have a size limit of their own; every file is read for at most
        // the size the manifest records (the histogram logs of a long run are large, and were
        // written so by sandglass).
        let text_file = name.ends_with(".json") || name.ends_with(".toml");
        if text_file && entry.bytes > crate::bounded::RUN_FILE_BYTES {
            return Err(ReadError::Refused(crate::bounded::BoundedError::TooLarge {
                path,
                size: entry.bytes,
                limit: crate::bounded::RUN_FILE_BYTES,
                role: "a JSON or TOML file of a run directory",
            }));
        }
        let mut data = Vec::with_capacity(entry.bytes as usize);
        std::io::Read::read_to_end(&mut std::io::Read::take(&file, entry.bytes + 1), &mut data)
            .map_err(|source| ReadError::Io {
                path: path.clone(),
                source,
            })?;
        if data.len() as u64 != entry.bytes {
            return Err(ReadError::Size {
                path,
                expected: entry.bytes,
                actual: data.len() as u64,
            });
        }
        if sha256_hex(&data) != entry.sha256 {
            return Err(ReadError::Checksum { path });
        }
        Ok(data)
    }

    /// Checks one listed file against its size and SHA-256 without keeping its contents (the
    /// file is hashed as it is read, so a large file costs no memory).
    pub fn verify_file(&self, entry: &FileEntry) -> Result<(), ReadError> {
        verify_entry(&self.path, entry)
    }

    /// Checks every file the manifest lists, in its order, and returns the first problem.
    pub fn verify(&self) -> Result<(), ReadError> {
        self.manifest
            .files
            .iter()
            .try_for_each(|f| self.verify_file(f))
    }

    /// `name` as text.
    pub fn read_text(&self, name: &str) -> Result<String, ReadError> {
        let data = self.read(name)?;
        Ok(String::from_utf8_lossy(&data).into_owned())
    }
}

/// Checks file `entry` of run directory `dir` against its size and SHA-256 without keeping its
/// contents (the file is hashed as it is read, so a large file costs no memory).
pub fn verify_entry(dir: &Path, entry: &FileEntry) -> Result<(), ReadError> {
    verify_open(dir, entry).map(|_| ())
}

/// Opens file `entry` of run directory `dir` after checking that its name stays inside the
/// directory, that it is a regular file and not a link, and that its size is the manifest's;
/// nothing is read.
fn open_entry(dir: &Path, entry: &FileEntry) -> Result<(std::fs::File, PathBuf), ReadError> {
    let name = entry.name.as_str();
    let path = dir.join(name);
    if name.is_empty()
        || name.contains('/')
        || name.contains('\\')
        || name.starts_with('.')
        || name.contains('\0')
    {
        return Err(ReadError::Outside {
            run: dir.to_path_buf(),
            name: name.to_string(),
        });
    }
    let (file, meta) =
        crate::bounded::open(&path, crate::bounded::Links::Refuse).map_err(|e| match e {
            crate::bounded::BoundedError::NotFound { path } => ReadError::Missing { path },
            e => ReadError::Refused(e),
        })?;
    if meta.len() != entry.bytes {
        return Err(ReadError::Size {
            path,
            expected: entry.bytes,
            actual: meta.len(),
        });
    }
    Ok((file, path))
}

/// [`verify_entry`], returning the file opened and checked, read back to its start.
pub fn verify_open(dir: &Path, entry: &FileEntry) -> Result<std::fs::File, ReadError> {
    use std::io::{Read, Seek};
    let (mut f, path) = open_entry(dir, entry)?;
    // At most one byte more than recorded: a file that grows is reported, never read on.
    let mut limited = (&f).take(entry.bytes + 1);
    let io = |source: std::io::Error| ReadError::Io {
        path: path.clone(),
        source,
    };
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut actual = 0u64;
    loop {
        let n = match limited.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        hasher.update(&buf[..n]);
        actual += n as u64;
    }
    if actual != entry.bytes {
        return Err(ReadError::Size {
            path,
            expected: entry.bytes,
            actual,
        });
    }
    let digest: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if digest != entry.sha256 {
        return Err(ReadError::Checksum { path });
    }
    f.rewind().map_err(io)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_unique_directories_and_writes_atomically() {
        let base = tempfile::tempdir().expect("tempdir");
        let a = RunDir::create(None, base.path(), "hourglass").expect("create");
        let b = RunDir::create(None, base.path(), "hourglass").expect("create");
        assert_ne!(a.path(), b.path());
        assert!(a.id().contains("-hourglass-"));
        let e = a
            .write_file("x.csv", b"a,b\n", "test/1", "test")
            .expect("write");
        assert_eq!(e.bytes, 4);
        assert_eq!(e.sha256, sha256_hex(b"a,b\n"));
        assert_eq!(
            std::fs::read(a.path().join("x.csv")).expect("read"),
            b"a,b\n"
        );
        assert!(!a.path().join(".x.csv.tmp").exists());
    }

    #[test]
    fn a_directory_another_writer_holds_is_refused() {
        let base = tempfile::tempdir().expect("tempdir");
        let dir = base.path().join("run");
        std::fs::create_dir(&dir).expect("mkdir");
        let held = DirLock::try_acquire(&dir).expect("lock").expect("free");
        let e = RunDir::create(Some(&dir), base.path(), "test").expect_err("held");
        assert!(matches!(e, StoreError::Busy(_)), "{e}");
        assert!(e.to_string().contains("another sandglass process"), "{e}");
        drop(held);
        let r = RunDir::create(Some(&dir), base.path(), "test").expect("free again");
        // The run holds it now: nobody else can take it, and its running manifest is not
        // taken for an abandoned one.
        assert!(DirLock::try_acquire(&dir).expect("lock").is_none());
        r.write_manifest(&test_manifest(r.id(), RunState::Running, vec![]))
            .expect("manifest");
        assert!(!mark_abandoned(&dir).expect("mark"));
        drop(r);
        assert!(mark_abandoned(&dir).expect("mark"));
        assert!(!mark_abandoned(&dir).expect("marked once"));
        let e = RunReader::open(&dir).expect_err("incomplete");
        assert!(e.to_string().contains("incomplete"), "{e}");
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let base = tempfile::tempdir().expect("tempdir");
        let r =
            RunDir::create(Some(&base.path().join("run")), base.path(), "test").expect("create");
        // A non-empty directory in the way makes the rename fail after the data was written.
        std::fs::create_dir(r.path().join("x.csv")).expect("mkdir");
        std::fs::write(r.path().join("x.csv").join("inside"), "x").expect("write");
        let e = r
            .write_file("x.csv", b"a,b\n", "test/1", "test")
            .expect_err("the rename fails");
        assert!(e.to_string().contains("cannot write"), "{e}");
        assert!(!r.path().join(".x.csv.tmp").exists());
    }

    #[test]
    fn sha256_of_known_input() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn explicit_directory_must_be_new_or_empty() {
        let base = tempfile::tempdir().expect("tempdir");
        let p = base.path().join("run1");
        let r = RunDir::create(Some(&p), base.path(), "hourglass").expect("create");
        assert_eq!(r.id(), "run1");
        std::fs::write(p.join("keep.txt"), "measured").expect("write");
        let e = RunDir::create(Some(&p), base.path(), "hourglass").expect_err("not empty");
        assert!(e.to_string().contains("not empty"));
        assert_eq!(
            std::fs::read_to_string(p.join("keep.txt")).expect("kept"),
            "measured"
        );
    }

    #[test]
    fn unwritable_place_is_a_clear_error() {
        let e = RunDir::create(Some(Path::new("/proc/sandglass-test")), Path::new("."), "x")
            .expect_err("cannot create under /proc");
        assert!(e.to_string().contains("cannot create run directory"), "{e}");
    }

    fn finished_run(dir: &Path) -> RunDir {
        let r = RunDir::create(Some(dir), Path::new("."), "test").expect("create");
        let f = r
            .write_file("data.csv", b"a,b\n1,2\n", "test/1", "test data")
            .expect("write");
        r.write_manifest(&test_manifest("run", RunState::Completed, vec![f]))
            .expect("manifest");
        r
    }

    /// A manifest of kind `test` with `files`; ended now unless `state` is running.
    fn test_manifest(id: &str, state: RunState, files: Vec<FileEntry>) -> Manifest {
        Manifest {
            schema_version: SCHEMA_VERSION,
            id: id.into(),
            kind: crate::RunKind::Unknown("test".into()),
            tool: Tool {
                name: "sandglass".into(),
                version: "0".into(),
                commit: "0".into(),
            },
            command_line: vec![],
            state,
            started_at: now_rfc3339(),
            ended_at: (state != RunState::Running).then(now_rfc3339),
            end_detail: None,
            system: crate::system::snapshot(),
            clock: serde_json::Value::Null,
            config: serde_json::Value::Null,
            warnings: vec![],
            files,
        }
    }

    #[test]
    fn reader_checks_every_file_against_the_manifest() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("run");
        finished_run(&dir);
        let r = RunReader::open(&dir).expect("open");
        assert_eq!(r.read("data.csv").expect("read"), b"a,b\n1,2\n");
        let e = r.read("other.csv").expect_err("not listed");
        assert!(e.to_string().contains("this run has data.csv"), "{e}");

        std::fs::write(dir.join("data.csv"), b"a,b\n1,").expect("truncate");
        let e = r.read("data.csv").expect_err("truncated");
        assert!(matches!(e, ReadError::Size { .. }));
        assert!(
            e.to_string().contains("data.csv") && e.to_string().contains("truncated"),
            "{e}"
        );

        std::fs::write(dir.join("data.csv"), b"a,b\n1,3\n").expect("alter");
        let e = r.read("data.csv").expect_err("altered");
        assert!(matches!(e, ReadError::Checksum { .. }), "{e}");

        std::fs::remove_file(dir.join("data.csv")).expect("delete");
        let e = r.read("data.csv").expect_err("deleted");
        assert!(matches!(e, ReadError::Missing { .. }), "{e}");
    }

    #[test]
    fn reader_refuses_damaged_or_unfinished_runs() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let e = RunReader::open(tmp.path()).expect_err("empty");
        assert!(matches!(e, ReadError::NoManifest(_)));
        std::fs::write(tmp.path().join("manifest.json"), "{not json").expect("write");
        let e = RunReader::open(tmp.path()).expect_err("garbage");
        assert!(e.to_string().contains("manifest.json"), "{e}");

        let dir = tmp.path().join("run");
        finished_run(&dir);
        let text = std::fs::read_to_string(dir.join("manifest.json")).expect("read");
        std::fs::write(
            dir.join("manifest.json"),
            text.replace("\"completed\"", "\"running\""),
        )
        .expect("write");
        assert!(matches!(
            RunReader::open(&dir),
            Err(ReadError::Unfinished { .. })
        ));
        std::fs::write(
            dir.join("manifest.json"),
            text.replace("\"data.csv\"", "\"../escape.csv\""),
        )
        .expect("write");
        let r = RunReader::open(&dir).expect("open");
        let e = r.read("../escape.csv").expect_err("outside");
        assert!(matches!(e, ReadError::Outside { .. }), "{e}");
        assert!(e.to_string().contains("outside the run directory"), "{e}");
    }

    /// Only the reserve this user wrote is removed: a link in its place (and what it points
    /// to) and, as root, another user's file are left.
    #[test]
    fn only_the_users_own_reserve_is_released() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        reserve(dir);
        assert!(dir.join(RESERVE_FILE).is_file());
        release_reserve(dir);
        assert!(!dir.join(RESERVE_FILE).exists());
        let target = dir.join("precious");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.join(RESERVE_FILE)).unwrap();
        release_reserve(dir);
        assert!(
            dir.join(RESERVE_FILE).symlink_metadata().is_ok(),
            "the link was removed"
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        std::fs::remove_file(dir.join(RESERVE_FILE)).unwrap();
        std::fs::hard_link(&target, dir.join(RESERVE_FILE)).unwrap();
        release_reserve(dir);
        assert!(dir.join(RESERVE_FILE).exists(), "a second link was removed");
        std::fs::remove_file(dir.join(RESERVE_FILE)).unwrap();
        if sandglass_sys::process::euid() == 0 {
            std::fs::write(dir.join(RESERVE_FILE), b"theirs").unwrap();
            std::os::unix::fs::chown(dir.join(RESERVE_FILE), Some(65534), Some(65534)).unwrap();
            release_reserve(dir);
            assert!(
                dir.join(RESERVE_FILE).exists(),
                "another user's file was removed"
            );
        }
    }
}
