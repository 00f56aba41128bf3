//! The run catalog: an SQLite index of every run and study in a store.
//!
//! Run directories are the source of truth; the catalog (`<base>/catalog.sqlite`, `base` being
//! [`store::default_base`]) only indexes them, so it can always be rebuilt from them
//! ([`Catalog::rebuild`]). It holds one row per run directory and per study directory: the id,
//! the absolute path, the kind, the state, the start and end times, the host and kernel from
//! the system snapshot, the command line, the parent study of a study's cells, and a few key
//! figures per kind as a JSON object ([`crate::registry::figures`]).
//!
//! Nothing enters the catalog unverified. A run is read only through [`RunReader`], and every
//! file its manifest lists is checked against the recorded size and SHA-256 before the row is
//! written; a missing, truncated or altered file is reported by name and the run is not
//! indexed. A study directory is indexed with all of its cells in one transaction, or not at
//! all.
//!
//! Nothing is deleted that sandglass did not write: [`Catalog::remove`] deletes only a
//! directory directly inside the runs directory, not a link, owned by this user
//! ([`Place::Owned`]); a directory indexed in place elsewhere (`runs import DIR`) only loses
//! its rows. A store this process cannot or must not write ([`write_access`]: a read-only file
//! system, its permissions, or another user's store when running as root) is only read
//! ([`Catalog::open_read`]) and never written.
//!
//! The database uses write-ahead logging and a busy timeout, so that runs ending at the same
//! time in several processes can all register themselves. `docs/catalog.md` documents the
//! schema and the commands built on it.

use crate::store::access::{write_access, ReadOnly};
use crate::store::{self, ReadError, RunReader};
use crate::study::run::{self as study_run, StudyRecord};
use crate::RunKind;
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use thiserror::Error;

/// The catalog's file name inside the base directory.
pub const FILE_NAME: &str = store::access::CATALOG_FILE;

/// The version of the catalog's schema this build writes.
pub const SCHEMA_VERSION: i64 = 1;

/// How long a writer waits for another process's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The `meta` key of a new catalog not yet filled from the directories: written with the
/// schema, deleted by the first [`Catalog::rebuild`]. A catalog whose creator could not fill it
/// (a full disk, a killed process) is filled by the next open instead of staying empty.
const UNFILLED_KEY: &str = "unfilled";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id           TEXT PRIMARY KEY,
    path         TEXT NOT NULL UNIQUE,
    kind         TEXT NOT NULL,
    state        TEXT NOT NULL,
    started_at   TEXT NOT NULL,
    ended_at     TEXT,
    host         TEXT NOT NULL,
    kernel       TEXT NOT NULL,
    command      TEXT NOT NULL,
    study        TEXT,
    figures      TEXT NOT NULL,
    tool_version TEXT NOT NULL,
    indexed_at   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_started_at ON runs (started_at);
CREATE INDEX IF NOT EXISTS runs_kind ON runs (kind);
CREATE INDEX IF NOT EXISTS runs_study ON runs (study);
";

/// Why the catalog could not do what it was asked.
#[derive(Debug, Error)]
pub enum CatalogError {
    #[error("{}", sql_text(.path, .source, "cannot open the run catalog"))]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{path}: the run catalog has schema version {found}, newer than this sandglass reads ({SCHEMA_VERSION}); upgrade sandglass")]
    NewerSchema { path: PathBuf, found: i64 },
    #[error("{}", sql_text(.path, .source, "the run catalog failed"))]
    Sql {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    /// The store cannot or must not be written by this process; it is only read.
    #[error("{}: {}, so sandglass only reads it and writes nothing there; {}", .base.display(), .cause, .cause.fix())]
    ReadOnly { base: PathBuf, cause: ReadOnly },
    #[error("{0}")]
    Damaged(#[from] ReadError),
    #[error("{path}: {message}")]
    Study { path: PathBuf, message: String },
    #[error("{0}: not a run or study directory (it has neither manifest.json nor study.json)")]
    NotARun(PathBuf),
    #[error("{0}: cannot resolve the directory: {1}")]
    Path(PathBuf, String),
    #[error("{id} is already in the catalog at {existing}; remove one of them first (sandglass runs rm {id})")]
    Duplicate { id: String, existing: PathBuf },
    #[error("no run or study {0}: no such directory, and no run or study id in the runs directory or the catalog starts with it; `sandglass runs` lists them (and `sandglass runs rebuild` indexes directories added by hand)")]
    NotFound(String),
    #[error("the run is empty (an unset variable?); give a run or study directory, an id or a unique prefix of one, or STUDY/CELL (`sandglass runs` lists them)")]
    EmptyId,
    #[error(
        "run {prefix} is ambiguous: {count} runs start with it: {examples}; give more of the id"
    )]
    Ambiguous {
        prefix: String,
        count: usize,
        examples: String,
    },
    #[error("{text}: {study} is a {kind} run, not a study, so it has no cell {cell}; a study's cell is STUDY/CELL")]
    NotAStudy {
        text: String,
        study: String,
        kind: String,
        cell: String,
    },
    #[error("{text}: study {study} has no cell {cell}; its cells: {cells}")]
    NoCell {
        text: String,
        study: String,
        cell: String,
        cells: String,
    },
    #[error("{0}: the directory is not in the catalog; add it with `sandglass runs import {0}`")]
    NotIndexed(PathBuf),
    #[error("{id} is still running (a sandglass process is writing it): stop that run first, or remove it anyway with --force")]
    Running { id: String },
    #[error("{id} is a cell of study {study}; remove the whole study (sandglass runs rm {study})")]
    Cell { id: String, study: String },
    #[error("{}: owned by uid {uid}, not by this user (uid {me}); sandglass removes only directories it wrote: remove it as uid {uid}, or by hand", .path.display())]
    NotOwned { path: PathBuf, uid: u32, me: u32 },
    #[error("cannot remove {path}: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A study its process abandoned could not be marked abandoned.
    #[error(transparent)]
    MarkStudy(study_run::StudyError),
    /// A run its process abandoned could not be marked abandoned.
    #[error(transparent)]
    MarkRun(store::StoreError),
}

/// The one line of an SQLite failure on the catalog at `path`: its real cause (read-only,
/// full, cannot be opened, damaged, busy, denied, an I/O error) and a fix that works.
fn sql_text(path: &Path, source: &rusqlite::Error, what: &str) -> String {
    use rusqlite::ErrorCode as C;
    let p = path.display();
    let me = sandglass_sys::process::euid();
    match source.sqlite_error_code() {
        Some(C::ReadOnly) => match path.parent().map(write_access) {
            Some(Err(cause)) => format!(
                "{p}: {what}: the catalog cannot be written: {cause}; {}",
                cause.fix()
            ),
            _ => format!(
                "{p}: {what}: SQLite found the catalog read-only ({source}); make the file and its directory writable by uid {me}, or set SANDGLASS_RUNS_DIR to a writable directory"
            ),
        },
        Some(C::DiskFull) => format!(
            "{p}: {what}: the disk is full ({source}); free space on it, or set SANDGLASS_RUNS_DIR to another disk (the run directories already written are intact)"
        ),
        Some(C::CannotOpen) => format!(
            "{p}: {what}: cannot open the file ({source}); check that its directory exists and that uid {me} may read and write it, or set SANDGLASS_RUNS_DIR to a writable directory"
        ),
        Some(C::DatabaseCorrupt | C::NotADatabase) => format!(
            "{p}: {what}: the catalog is damaged ({source}); `sandglass runs rebuild` recreates it from the run directories"
        ),
        Some(C::DatabaseBusy | C::DatabaseLocked) => format!(
            "{p}: {what}: another process held the catalog for more than {} s ({source}); try again when it has finished",
            BUSY_TIMEOUT.as_secs()
        ),
        Some(C::PermissionDenied | C::AuthorizationForStatementDenied) => format!(
            "{p}: {what}: permission denied ({source}); make the file and its directory readable and writable by uid {me}, or set SANDGLASS_RUNS_DIR to a writable directory"
        ),
        Some(C::SystemIoFailure) => format!(
            "{p}: {what}: the disk failed to read or write the catalog ({source}); check the disk (dmesg), then `sandglass runs rebuild` recreates the catalog"
        ),
        _ => format!(
            "{p}: {what}: {source} (`sandglass runs rebuild` recreates the catalog from the run directories)"
        ),
    }
}

/// Why a date given to `--since` or `--until` was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DateError {
    #[error("{text}: not a date; give YYYY-MM-DD, a time such as 2026-11-22T10:15:00Z, or an age such as 36h or 7d")]
    NotADate { text: String },
    #[error("{text}: before 1970 or after 9999; give a date in between, or a shorter age")]
    OutOfRange { text: String },
}

impl CatalogError {
    /// True when SQLite says the file is not a database or is corrupt.
    pub fn is_damage(&self) -> bool {
        use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
        match self {
            CatalogError::Sql { source, .. } | CatalogError::Open { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(NotADatabase) | Some(DatabaseCorrupt)
            ),
            _ => false,
        }
    }
}

impl CatalogError {
    /// True when the request itself is at fault (an unknown id, a damaged directory given to
    /// import), rather than the catalog or the system.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            CatalogError::Damaged(_)
                | CatalogError::Study { .. }
                | CatalogError::NotARun(_)
                | CatalogError::Path(..)
                | CatalogError::Duplicate { .. }
                | CatalogError::NotFound(_)
                | CatalogError::Ambiguous { .. }
                | CatalogError::Running { .. }
                | CatalogError::Cell { .. }
                | CatalogError::NewerSchema { .. }
                | CatalogError::ReadOnly { .. }
                | CatalogError::NotOwned { .. }
                | CatalogError::EmptyId
                | CatalogError::NotAStudy { .. }
                | CatalogError::NoCell { .. }
                | CatalogError::NotIndexed(_)
        )
    }
}

/// One row of the catalog.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Entry {
    /// The run's id (its directory's name); a study's cells are `STUDY/CELL`.
    pub id: String,
    /// Absolute path of the directory.
    pub path: PathBuf,
    /// `timer`, `noise`, `hourglass`, `load`, `bench-…` or `study`.
    #[schemars(with = "String")]
    pub kind: crate::RunKind,
    /// The run's or study's state as its manifest or `study.json` records it.
    pub state: String,
    /// RFC 3339 UTC.
    pub started_at: String,
    pub ended_at: Option<String>,
    pub host: String,
    pub kernel: String,
    pub command_line: Vec<String>,
    /// The study a cell belongs to.
    pub study: Option<String>,
    /// The run's key figures by key, as its kind declares them.
    pub figures: Map<String, Value>,
    /// The sandglass version that wrote the run.
    pub tool_version: String,
    /// When the row was written, RFC 3339 UTC.
    pub indexed_at: String,
}

/// Which rows [`Catalog::list`] returns.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// A kind, or a kind's family: `bench` matches every `bench-…` kind.
    pub kind: Option<String>,
    pub host: Option<String>,
    /// RFC 3339 UTC lower bound on `started_at`, inclusive.
    pub since: Option<String>,
    /// RFC 3339 UTC upper bound on `started_at`, exclusive.
    pub until: Option<String>,
    /// Only the cells of this study.
    pub study: Option<String>,
    /// Include the cells of studies (always true when `study` is given).
    pub cells: bool,
}

/// A directory that [`Catalog::rebuild`] left out, and why.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: String,
}

/// What [`Catalog::rebuild`] did.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct RebuildReport {
    /// Rows written.
    pub indexed: usize,
    /// Rows whose directories no longer exist, dropped.
    pub dropped: Vec<String>,
    /// Directories left out because they are damaged or are not runs.
    pub skipped: Vec<Skipped>,
}

/// An open catalog.
pub struct Catalog {
    conn: Connection,
    path: PathBuf,
    /// The runs directory, resolved: the only place whose directories are ever deleted.
    base: PathBuf,
    created: bool,
    /// Where a damaged database was moved when this one replaced it.
    moved_aside: Option<(PathBuf, String)>,
    /// Why the store is only read ([`Catalog::open_read`]); every write is then refused.
    read_only: Option<ReadOnly>,
    /// What a read-only open has to say (the catalog was rebuilt in memory, or its newest
    /// changes were not read).
    read_note: Option<String>,
    /// The catalog file a read-only open reads through `/proc/self/fd`.
    _file: Option<std::fs::File>,
}

/// Where a catalogued directory lies, which decides whether sandglass may delete it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// Directly inside the runs directory, a directory (not a link) this user owns.
    Owned,
    /// Outside the runs directory (imported in place), or a link: only its row may go.
    External,
    /// Inside the runs directory but owned by another user.
    Foreign { uid: u32 },
    /// No longer there.
    Gone,
}

/// The catalog's path for the base directory `base`.
pub fn path_in(base: &Path) -> PathBuf {
    base.join(FILE_NAME)
}

impl Catalog {
    /// Opens the catalog of `base`, creating the directory and the database when they do not
    /// exist yet. A file that SQLite finds damaged (not a database, or corrupt) is moved aside,
    /// kept as `catalog.sqlite.damaged-SECONDS` with its journal files, and a new empty
    /// catalog takes its place ([`Catalog::created`] is then true, and [`Catalog::moved_aside`]
    /// names the kept file): the catalog is only an index of the run directories, so
    /// [`Catalog::rebuild`] loses nothing recorded.
    ///
    /// A store this process cannot or must not write ([`write_access`]) is refused with
    /// [`CatalogError::ReadOnly`]: commands that only read use [`Catalog::open_read`].
    pub fn open(base: &Path) -> Result<Catalog, CatalogError> {
        if let Err(cause) = write_access(base) {
            return Err(CatalogError::ReadOnly {
                base: base.to_path_buf(),
                cause,
            });
        }
        match Catalog::open_once(base) {
            Err(e) if e.is_damage() => {
                let path = path_in(base);
                let secs = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let aside = base.join(format!("{FILE_NAME}.damaged-{secs}"));
                std::fs::rename(&path, &aside)
                    .map_err(|io| CatalogError::Path(path.clone(), io.to_string()))?;
                for suffix in ["-wal", "-shm"] {
                    let journal = base.join(format!("{FILE_NAME}{suffix}"));
                    if journal.exists() {
                        let kept = base.join(format!("{FILE_NAME}.damaged-{secs}{suffix}"));
                        let _ = std::fs::rename(&journal, kept);
                    }
                }
                let reason = match &e {
                    CatalogError::Sql { source, .. } | CatalogError::Open { source, .. } => {
                        source.to_string()
                    }
                    other => other.to_string(),
                };
                let mut c = Catalog::open_once(base)?;
                c.created = true;
                c.moved_aside = Some((aside, reason));
                Ok(c)
            }
            r => r,
        }
    }

    /// Opens the catalog of `base` for reading: as [`Catalog::open`] when this process may
    /// write the store, else read-only without writing anything there (no journal, no lock,
    /// no run marked): the file is opened without following a link or blocking, and read by
    /// SQLite as immutable; a store without a catalog, or with a damaged one, is indexed in
    /// memory from its directories. Every write of a catalog opened read-only is refused
    /// with [`CatalogError::ReadOnly`].
    pub fn open_read(base: &Path) -> Result<Catalog, CatalogError> {
        match write_access(base) {
            Ok(()) => Catalog::open(base),
            Err(cause) => Catalog::open_read_only(base, cause),
        }
    }

    fn open_read_only(base: &Path, cause: ReadOnly) -> Result<Catalog, CatalogError> {
        use std::os::fd::AsRawFd;
        let path = path_in(base);
        let resolved = absolute(base).unwrap_or_else(|_| base.to_path_buf());
        let mut c = match crate::bounded::open(&path, crate::bounded::Links::Refuse) {
            Ok((file, _)) if Path::new("/proc/self/fd").is_dir() => {
                let uri = format!("file:/proc/self/fd/{}?immutable=1", file.as_raw_fd());
                let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_URI
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
                let conn = Connection::open_with_flags(uri, flags).map_err(|source| {
                    CatalogError::Open {
                        path: path.clone(),
                        source,
                    }
                })?;
                Catalog {
                    conn,
                    path: path.clone(),
                    base: resolved.clone(),
                    created: false,
                    moved_aside: None,
                    read_only: Some(cause.clone()),
                    read_note: None,
                    _file: Some(file),
                }
            }
            Ok(_) => return Catalog::in_memory(base, cause, "/proc is not mounted".into()),
            Err(crate::bounded::BoundedError::NotFound { .. }) => {
                return Catalog::in_memory(base, cause, "it has no catalog".into())
            }
            Err(e) => {
                return Err(CatalogError::Path(path, e.to_string()));
            }
        };
        let version: Result<Option<String>, rusqlite::Error> = c
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional();
        match version {
            Ok(v) => {
                if let Some(found) = v.and_then(|v| v.parse::<i64>().ok()) {
                    if found > SCHEMA_VERSION {
                        return Err(CatalogError::NewerSchema { path, found });
                    }
                }
            }
            Err(source) => {
                let e = CatalogError::Sql {
                    path: path.clone(),
                    source,
                };
                if e.is_damage() || is_missing_table(&e) {
                    return Catalog::in_memory(
                        base,
                        cause,
                        format!("its catalog is damaged ({e})"),
                    );
                }
                return Err(e);
            }
        }
        // Changes still in the write-ahead log (a writer is at work) are not read.
        let wal = base.join(format!("{FILE_NAME}-wal"));
        if std::fs::symlink_metadata(&wal).is_ok_and(|m| m.len() > 0) {
            c.read_note = Some(format!(
                "{} is being written by another process: the runs it catalogued last may be missing from this list",
                path.display()
            ));
        }
        Ok(c)
    }

    /// A catalog in memory, filled from the directories of `base` (read, never written).
    fn in_memory(base: &Path, cause: ReadOnly, why: String) -> Result<Catalog, CatalogError> {
        let path = path_in(base);
        let open_err = |source| CatalogError::Open {
            path: path.clone(),
            source,
        };
        let conn = Connection::open_in_memory().map_err(open_err)?;
        conn.execute_batch(SCHEMA).map_err(open_err)?;
        let mut c = Catalog {
            conn,
            path: path.clone(),
            base: absolute(base).unwrap_or_else(|_| base.to_path_buf()),
            created: false,
            moved_aside: None,
            read_only: Some(cause),
            read_note: Some(format!(
                "{why}: the runs were indexed in memory from the directories of {}",
                base.display()
            )),
            _file: None,
        };
        c.rebuild(base)?;
        Ok(c)
    }

    /// Why this catalog is only read, when it is ([`Catalog::open_read`]).
    pub fn read_only(&self) -> Option<&ReadOnly> {
        self.read_only.as_ref()
    }

    /// What a read-only open has to say: the catalog was indexed in memory, or the newest
    /// changes of its writer were not read.
    pub fn read_note(&self) -> Option<&str> {
        self.read_note.as_deref()
    }

    /// Refuses a write to a catalog opened read-only.
    fn writable(&self) -> Result<(), CatalogError> {
        match &self.read_only {
            Some(cause) => Err(CatalogError::ReadOnly {
                base: self.base.clone(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Where the directory of `e` lies: only an [`Place::Owned`] one may be deleted.
    pub fn place(&self, e: &Entry) -> Place {
        use std::os::unix::fs::MetadataExt;
        let inside = e.path.parent() == Some(self.base.as_path())
            && e.path
                .file_name()
                .is_some_and(|n| n != "." && n != ".." && !n.is_empty());
        let meta = match std::fs::symlink_metadata(&e.path) {
            Ok(m) => m,
            Err(_) => return Place::Gone,
        };
        if !inside || !meta.file_type().is_dir() {
            return Place::External;
        }
        let me = sandglass_sys::process::euid();
        if meta.uid() != me {
            return Place::Foreign { uid: meta.uid() };
        }
        Place::Owned
    }

    /// The damaged file that [`Catalog::open`] moved aside, and SQLite's reason.
    pub fn moved_aside(&self) -> Option<(&Path, &str)> {
        self.moved_aside
            .as_ref()
            .map(|(p, r)| (p.as_path(), r.as_str()))
    }

    fn open_once(base: &Path) -> Result<Catalog, CatalogError> {
        let path = path_in(base);
        let open_err = |source| CatalogError::Open {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(base).map_err(|e| {
            open_err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                Some(format!("cannot create {}: {e}", base.display())),
            ))
        })?;
        let conn = Connection::open(&path).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        // WAL lets readers go on while a run registers itself; a file system that cannot do
        // it (some network ones) keeps the default journal, which is only slower.
        let _ = conn.pragma_update(None, "journal_mode", "WAL");
        let mut c = Catalog {
            conn,
            path,
            base: absolute(base).unwrap_or_else(|_| base.to_path_buf()),
            created: false,
            moved_aside: None,
            read_only: None,
            read_note: None,
            _file: None,
        };
        c.created = c.init()?;
        Ok(c)
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> CatalogError + '_ {
        move |source| CatalogError::Sql {
            path: self.path.clone(),
            source,
        }
    }

    /// Creates the schema when missing; returns true when the catalog has not been filled from
    /// the directories yet.
    fn init(&mut self) -> Result<bool, CatalogError> {
        let path = self.path.clone();
        let sql = move |source| CatalogError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(&sql)?;
        tx.execute_batch(SCHEMA).map_err(&sql)?;
        let found: Option<String> = tx
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(&sql)?;
        match found.and_then(|v| v.parse::<i64>().ok()) {
            Some(v) if v > SCHEMA_VERSION => {
                return Err(CatalogError::NewerSchema {
                    path: self.path.clone(),
                    found: v,
                })
            }
            Some(_) => {}
            None => {
                tx.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?1)",
                    params![SCHEMA_VERSION.to_string()],
                )
                .map_err(&sql)?;
                tx.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)",
                    params![UNFILLED_KEY, store::now_rfc3339()],
                )
                .map_err(&sql)?;
            }
        }
        let unfilled: i64 = tx
            .query_row(
                "SELECT COUNT(*) FROM meta WHERE key = ?1",
                params![UNFILLED_KEY],
                |r| r.get(0),
            )
            .map_err(&sql)?;
        tx.commit().map_err(&sql)?;
        Ok(unfilled > 0)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when the database has not been filled from the directories yet: [`Catalog::open`]
    /// created it, or the process that created it could not fill it (a full disk, SIGKILL).
    /// The caller fills it with [`Catalog::rebuild`].
    pub fn created(&self) -> bool {
        self.created
    }

    /// Verifies the run or study directory `dir` and indexes it (a study with every one of its
    /// cells), all in one transaction. A damaged directory adds nothing and is reported by the
    /// name of the file at fault. Returns the ids written.
    pub fn index(&mut self, dir: &Path) -> Result<Vec<String>, CatalogError> {
        self.writable()?;
        // A run or study its process abandoned is marked before it is read.
        let _ = settle_dir(dir);
        self.index_settled(dir)
    }

    /// [`Catalog::index`] of a directory already settled.
    fn index_settled(&mut self, dir: &Path) -> Result<Vec<String>, CatalogError> {
        let entries = read_dir_entries(dir)?;
        let path = self.path.clone();
        let sql = move |source| CatalogError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(&sql)?;
        for e in &entries {
            check_duplicate(&tx, e).map_err(|err| match err {
                Dup::Sql(source) => sql(source),
                Dup::Found(existing) => CatalogError::Duplicate {
                    id: e.id.clone(),
                    existing,
                },
            })?;
        }
        if let Some(top) = entries.first().filter(|e| e.kind == RunKind::Study) {
            tx.execute("DELETE FROM runs WHERE study = ?1", params![top.id])
                .map_err(&sql)?;
        }
        for e in &entries {
            upsert(&tx, e).map_err(&sql)?;
        }
        tx.commit().map_err(&sql)?;
        Ok(entries.into_iter().map(|e| e.id).collect())
    }

    /// Marks the runs and studies whose process ended before they finished (killed, crashed,
    /// the machine stopped): every directory in `base` that the catalog does not list yet or
    /// lists as `running`, found `running` on disk with nobody holding its lock, becomes
    /// `incomplete` (a study can then be finished with `--resume`), and is indexed again. Cheap
    /// enough for every start: finished runs the catalog knows are not read. Returns the
    /// directories marked.
    pub fn settle(&mut self, base: &Path) -> Result<Vec<PathBuf>, CatalogError> {
        self.writable()?;
        let known: std::collections::BTreeMap<PathBuf, String> = {
            let mut stmt = self
                .conn
                .prepare("SELECT path, state FROM runs WHERE study IS NULL")
                .map_err(|source| CatalogError::Sql {
                    path: self.path.clone(),
                    source,
                })?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        PathBuf::from(r.get::<_, String>(0)?),
                        r.get::<_, String>(1)?,
                    ))
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|source| CatalogError::Sql {
                    path: self.path.clone(),
                    source,
                })?;
            rows.into_iter().collect()
        };
        let mut candidates: Vec<PathBuf> = known
            .iter()
            .filter(|(p, state)| state.as_str() == "running" && p.is_dir())
            .map(|(p, _)| p.clone())
            .collect();
        if let Ok(rd) = std::fs::read_dir(base) {
            for e in rd.flatten() {
                let p = absolute(&e.path()).unwrap_or_else(|_| e.path());
                if p.is_dir() && !known.contains_key(&p) {
                    candidates.push(p);
                }
            }
        }
        candidates.sort();
        candidates.dedup();
        let mut marked = Vec::new();
        for dir in candidates {
            if matches!(settle_dir(&dir), Ok(true)) {
                // Indexed again when it was listed or lies in the store; a directory the
                // catalog rejects (damaged) stays out, as it would have anyway.
                let _ = self.index_settled(&dir);
                marked.push(dir);
            }
        }
        Ok(marked)
    }

    /// The row of `id`.
    pub fn get(&self, id: &str) -> Result<Option<Entry>, CatalogError> {
        self.conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"),
                params![id],
                row_entry,
            )
            .optional()
            .map_err(self.sql())
    }

    /// The row of the run, study or cell `text` names, in any form [`resolve_run`] takes.
    pub fn resolve(&self, text: &str) -> Result<Entry, CatalogError> {
        let path = resolve_run(&self.base, Some(self), text)?;
        let path = absolute(&path).unwrap_or(path);
        self.entry_at(&path)?
            .ok_or_else(|| CatalogError::NotIndexed(path))
    }

    /// The row of the directory `path` (absolute, as the catalog records it).
    pub fn entry_at(&self, path: &Path) -> Result<Option<Entry>, CatalogError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM runs WHERE path = ?1 ORDER BY study IS NOT NULL LIMIT 1"
                ),
                params![path.to_string_lossy()],
                row_entry,
            )
            .optional()
            .map_err(self.sql())
    }

    /// The runs and studies (not cells) whose id is `text` or starts with it, as
    /// `(id, kind, path)`.
    fn top_level_starting(&self, text: &str) -> Result<Vec<Named>, CatalogError> {
        let pattern = format!("{}%", like_escape(text));
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, kind, path FROM runs WHERE study IS NULL AND id LIKE ?1 ESCAPE '\\' ORDER BY id",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map(params![pattern], |r| {
                Ok(Named {
                    id: r.get(0)?,
                    kind: Some(RunKind::named(&r.get::<_, String>(1)?)),
                    path: PathBuf::from(r.get::<_, String>(2)?),
                })
            })
            .and_then(|rows| rows.collect())
            .map_err(self.sql())?;
        Ok(rows)
    }

    /// The rows that pass `filter`, newest first.
    pub fn list(&self, filter: &Filter) -> Result<Vec<Entry>, CatalogError> {
        let mut clauses: Vec<String> = Vec::new();
        let mut values: Vec<String> = Vec::new();
        // Each clause's `?` is its own value's number.
        let mut bind = |clause: &str, value: &str| {
            values.push(value.to_string());
            clauses.push(clause.replace('?', &format!("?{}", values.len())));
        };
        if let Some(k) = &filter.kind {
            bind("(kind = ? OR kind LIKE ? || '-%')", k);
        }
        if let Some(h) = &filter.host {
            bind("host = ?", h);
        }
        if let Some(s) = &filter.since {
            bind("started_at >= ?", s);
        }
        if let Some(u) = &filter.until {
            bind("started_at < ?", u);
        }
        match &filter.study {
            Some(s) => bind("study = ?", s),
            None if !filter.cells => clauses.push("study IS NULL".into()),
            None => {}
        }
        let wher = if clauses.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", clauses.join(" AND "))
        };
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM runs{wher} ORDER BY started_at DESC, id DESC"
            ))
            .map_err(self.sql())?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(values.iter()), row_entry)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(self.sql())?;
        Ok(rows)
    }

    /// Removes the row of `id` (and of its cells, for a study) without touching any directory.
    pub fn forget(&mut self, id: &str) -> Result<usize, CatalogError> {
        self.writable()?;
        let path = self.path.clone();
        let sql = move |source| CatalogError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(&sql)?;
        let n = tx
            .execute("DELETE FROM runs WHERE id = ?1 OR study = ?1", params![id])
            .map_err(&sql)?;
        tx.commit().map_err(&sql)?;
        Ok(n)
    }

    /// Removes the run or study `id`: its directory, then its rows (a study's cells with it).
    /// A run still marked running is refused unless `force`; a study's cell is refused (it
    /// belongs to its study). Only a directory directly inside the runs directory, not a
    /// link, owned by this user ([`Place::Owned`]) is deleted: one outside it (imported in
    /// place) only loses its rows ([`Removal::Forgotten`]), one another user owns is refused.
    /// Returns the removed entry and what was done.
    pub fn remove(&mut self, id: &str, force: bool) -> Result<(Entry, Removal), CatalogError> {
        self.writable()?;
        let e = self
            .get(id)?
            .ok_or_else(|| CatalogError::NotFound(id.into()))?;
        if let Some(study) = &e.study {
            return Err(CatalogError::Cell {
                id: e.id.clone(),
                study: study.clone(),
            });
        }
        if e.state == "running" && !force {
            return Err(CatalogError::Running { id: e.id.clone() });
        }
        let removal = match self.place(&e) {
            Place::Owned => {
                std::fs::remove_dir_all(&e.path).map_err(|source| CatalogError::Remove {
                    path: e.path.clone(),
                    source,
                })?;
                Removal::Deleted
            }
            Place::External => Removal::Forgotten,
            Place::Gone => Removal::Gone,
            Place::Foreign { uid } => {
                return Err(CatalogError::NotOwned {
                    path: e.path.clone(),
                    uid,
                    me: sandglass_sys::process::euid(),
                })
            }
        };
        self.forget(&e.id)?;
        Ok((e, removal))
    }

    /// Recreates every row from the directories: each run and study directory under `base`
    /// (and each cell of a study), and every directory already indexed elsewhere (imported)
    /// that still exists. Damaged directories are reported in the result and left out; the
    /// rest is written in one transaction.
    pub fn rebuild(&mut self, base: &Path) -> Result<RebuildReport, CatalogError> {
        // A read-only store is only ever indexed in memory.
        if self._file.is_some() {
            self.writable()?;
        }
        let mut report = RebuildReport::default();
        let mut rows: Vec<Entry> = Vec::new();
        let mut seen: std::collections::BTreeSet<PathBuf> = Default::default();
        let mut dirs: Vec<PathBuf> = match std::fs::read_dir(base) {
            Ok(rd) => rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(CatalogError::Path(base.to_path_buf(), e.to_string()));
            }
        };
        dirs.sort();
        let previous = self.list(&Filter {
            cells: true,
            ..Filter::default()
        })?;
        let base_abs = absolute(base).unwrap_or_else(|_| base.to_path_buf());
        for e in &previous {
            if e.study.is_none() && !e.path.starts_with(&base_abs) {
                if e.path.is_dir() {
                    dirs.push(e.path.clone());
                } else {
                    report.dropped.push(e.id.clone());
                }
            } else if !e.path.is_dir() && e.study.is_none() {
                report.dropped.push(e.id.clone());
            }
        }
        for dir in dirs {
            let abs = absolute(&dir).unwrap_or_else(|_| dir.clone());
            if !seen.insert(abs.clone()) {
                continue;
            }
            if self.read_only.is_none() {
                let _ = settle_dir(&abs);
            }
            if abs.join(study_run::STATE_FILE).exists() {
                let (study, cells) = read_study_lenient(&abs, &mut report.skipped);
                if let Some(s) = study {
                    rows.push(s);
                    rows.extend(cells);
                }
            } else {
                match read_run(&abs, None) {
                    Ok(e) => rows.push(e),
                    Err(err) => report.skipped.push(Skipped {
                        path: abs,
                        reason: err.to_string(),
                    }),
                }
            }
        }
        let mut ids = std::collections::BTreeSet::new();
        let mut unique = Vec::new();
        for r in rows {
            if ids.insert(r.id.clone()) {
                unique.push(r);
            } else {
                report.skipped.push(Skipped {
                    reason: format!(
                        "{} is already indexed from another directory; a copy cannot share its id",
                        r.id
                    ),
                    path: r.path,
                });
            }
        }
        let path = self.path.clone();
        let sql = move |source| CatalogError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(&sql)?;
        tx.execute("DELETE FROM runs", []).map_err(&sql)?;
        for r in &unique {
            upsert(&tx, r).map_err(&sql)?;
        }
        tx.execute("DELETE FROM meta WHERE key = ?1", params![UNFILLED_KEY])
            .map_err(&sql)?;
        tx.commit().map_err(&sql)?;
        report.indexed = unique.len();
        Ok(report)
    }
}

/// What [`Catalog::remove`] did with the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// The directory (in the runs directory, this user's) was deleted.
    Deleted,
    /// The directory lies outside the runs directory (imported in place): it was left, and
    /// only its rows removed.
    Forgotten,
    /// The directory was already gone.
    Gone,
}

/// How many of the runs an ambiguous prefix matches are named.
const AMBIGUOUS_NAMED: usize = 10;

/// A candidate for a run argument: its id, its kind when known, its directory.
#[derive(Clone, Debug)]
struct Named {
    id: String,
    kind: Option<RunKind>,
    path: PathBuf,
}

impl Named {
    /// `ID (KIND)`, reading the kind from the directory when the catalog did not give it.
    fn label(&self) -> String {
        let kind = self.kind.clone().or_else(|| dir_kind(&self.path));
        match kind {
            Some(k) => format!("{} ({k})", self.id),
            None => self.id.clone(),
        }
    }
}

/// `study` for a study directory, the manifest's kind for a run directory.
fn dir_kind(dir: &Path) -> Option<RunKind> {
    if dir.join(study_run::STATE_FILE).is_file() {
        return Some(RunKind::Study);
    }
    RunReader::open_any_state(dir)
        .ok()
        .map(|r| r.manifest.kind.clone())
}

/// The one run every command that takes a run reads: `text` is
///
/// - a run or study directory (as given, relative to the working directory);
/// - a run or study id, or a unique prefix of one, among the runs directory `base`'s
///   directories and the `catalog`'s rows (runs imported from elsewhere included); a
///   prefix names runs and studies, not the cells of a study;
/// - `STUDY/CELL`: a cell of a study, where STUDY is any of the above and CELL the cell's
///   directory name or a unique prefix of it (`STUDYID/cell-001`); a prefix that matches a
///   cell and its kept earlier attempts (`CELL.attempt-N`) names the cell.
///
/// Several matches are one error naming them ([`CatalogError::Ambiguous`]); nothing is
/// written.
pub fn resolve_run(
    base: &Path,
    catalog: Option<&Catalog>,
    text: &str,
) -> Result<PathBuf, CatalogError> {
    if text.trim().is_empty() {
        return Err(CatalogError::EmptyId);
    }
    let given = Path::new(text);
    if given.is_dir() {
        return Ok(given.to_path_buf());
    }
    if let Some((study, cell)) = text.trim_end_matches('/').rsplit_once('/') {
        return resolve_cell(base, catalog, text, study, cell);
    }
    if text.ends_with('/') {
        return resolve_run(base, catalog, text.trim_end_matches('/'));
    }
    let mut found: Vec<Named> = match catalog {
        Some(c) => c.top_level_starting(text)?,
        None => Vec::new(),
    };
    if let Ok(rd) = std::fs::read_dir(base) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            let is_run =
                p.join("manifest.json").is_file() || p.join(study_run::STATE_FILE).is_file();
            if name.starts_with(text) && p.is_dir() && is_run && !found.iter().any(|n| n.id == name)
            {
                found.push(Named {
                    id: name,
                    kind: None,
                    path: p,
                });
            }
        }
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(exact) = found.iter().find(|n| n.id == text) {
        return Ok(exact.path.clone());
    }
    one_of(text, found).ok_or_else(|| CatalogError::NotFound(text.to_string()))?
}

/// The single candidate, an ambiguity naming them all, or `None` when there is none.
fn one_of(text: &str, mut found: Vec<Named>) -> Option<Result<PathBuf, CatalogError>> {
    match found.len() {
        0 => None,
        1 => Some(Ok(found.remove(0).path)),
        n => Some(Err(CatalogError::Ambiguous {
            prefix: text.to_string(),
            count: n,
            examples: found
                .iter()
                .take(AMBIGUOUS_NAMED)
                .map(Named::label)
                .collect::<Vec<_>>()
                .join(", ")
                + &if n > AMBIGUOUS_NAMED {
                    format!(" and {} more", n - AMBIGUOUS_NAMED)
                } else {
                    String::new()
                },
        })),
    }
}

/// `STUDY/CELL` ([`resolve_run`]).
fn resolve_cell(
    base: &Path,
    catalog: Option<&Catalog>,
    text: &str,
    study: &str,
    cell: &str,
) -> Result<PathBuf, CatalogError> {
    // A path that does not exist (`/no/such/run`) is no study's cell either: it is named whole.
    let dir = match resolve_run(base, catalog, study) {
        Err(CatalogError::NotFound(_) | CatalogError::EmptyId) => {
            return Err(CatalogError::NotFound(text.to_string()))
        }
        r => r?,
    };
    let study_id = || {
        study_run::read_state(&dir)
            .map(|r| r.id)
            .unwrap_or_else(|_| study.to_string())
    };
    if !dir.join(study_run::STATE_FILE).is_file() {
        // A directory that is no run either: the text was a path, not STUDY/CELL.
        let Some(kind) = dir_kind(&dir) else {
            return Err(CatalogError::NotFound(text.to_string()));
        };
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| study.to_string());
        return Err(CatalogError::NotAStudy {
            text: text.to_string(),
            study: name,
            kind: kind.to_string(),
            cell: cell.to_string(),
        });
    }
    let cells: Vec<Named> = cell_dirs(&dir)
        .into_iter()
        .map(|p| Named {
            id: p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            kind: None,
            path: p,
        })
        .collect();
    if let Some(exact) = cells.iter().find(|n| n.id == cell) {
        return Ok(exact.path.clone());
    }
    let mut found: Vec<Named> = cells
        .iter()
        .filter(|n| n.id.starts_with(cell))
        .cloned()
        .collect();
    // A cell's earlier attempts kept beside it do not make its prefix ambiguous.
    let current: Vec<Named> = found
        .iter()
        .filter(|n| !n.id.contains(".attempt-"))
        .cloned()
        .collect();
    if !current.is_empty() {
        found = current;
    }
    let id = study_id();
    for n in &mut found {
        n.id = format!("{id}/{}", n.id);
    }
    one_of(text, found).unwrap_or_else(|| {
        Err(CatalogError::NoCell {
            text: text.to_string(),
            study: id,
            cell: cell.to_string(),
            cells: if cells.is_empty() {
                "none yet".to_string()
            } else {
                cells
                    .iter()
                    .take(AMBIGUOUS_NAMED)
                    .map(|n| n.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
                    + &if cells.len() > AMBIGUOUS_NAMED {
                        format!(" and {} more", cells.len() - AMBIGUOUS_NAMED)
                    } else {
                        String::new()
                    }
            },
        })
    })
}

/// True when SQLite says a table is missing (an empty file is a database without tables).
fn is_missing_table(e: &CatalogError) -> bool {
    matches!(e, CatalogError::Sql { source: rusqlite::Error::SqliteFailure(_, Some(m)), .. } if m.contains("no such table"))
}

/// Marks the run or study in `dir` when its process abandoned it ([`store::mark_abandoned`],
/// [`study_run::mark_abandoned`]); true when it was marked.
pub fn settle_dir(dir: &Path) -> Result<bool, CatalogError> {
    if dir.join(study_run::STATE_FILE).exists() {
        study_run::mark_abandoned(dir).map_err(CatalogError::MarkStudy)
    } else if dir.join("manifest.json").exists() {
        store::mark_abandoned(dir).map_err(CatalogError::MarkRun)
    } else {
        Ok(false)
    }
}

/// The result of checking one listed file, for `runs show`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct FileStatus {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
    pub format: String,
    /// `ok`, or what is wrong with the file.
    pub status: String,
    pub ok: bool,
}

/// Checks every file of the run directory `dir` against its manifest, reporting each one
/// (rather than stopping at the first problem).
pub fn check_files(dir: &Path) -> Result<Vec<FileStatus>, ReadError> {
    let r = RunReader::open_any_state(dir)?;
    Ok(r.manifest
        .files
        .iter()
        .map(|f| {
            let result = r.verify_file(f);
            FileStatus {
                name: f.name.clone(),
                bytes: f.bytes,
                sha256: f.sha256.clone(),
                format: f.format.clone(),
                ok: result.is_ok(),
                status: match result {
                    Ok(()) => "ok".into(),
                    Err(ReadError::Missing { .. }) => "missing".into(),
                    Err(ReadError::Outside { .. }) => {
                        "lies outside the run directory (the manifest was altered)".into()
                    }
                    Err(ReadError::Size {
                        expected, actual, ..
                    }) => format!("{actual} bytes, {expected} expected (truncated or altered)"),
                    Err(ReadError::Checksum { .. }) => "SHA-256 differs (altered)".into(),
                    Err(e) => e.to_string(),
                },
            }
        })
        .collect())
}

const COLUMNS: &str = "id, path, kind, state, started_at, ended_at, host, kernel, command, \
                       study, figures, tool_version, indexed_at";

fn row_entry(r: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    let command: String = r.get(8)?;
    let figures: String = r.get(10)?;
    let path: String = r.get(1)?;
    Ok(Entry {
        id: r.get(0)?,
        path: PathBuf::from(path),
        kind: RunKind::named(&r.get::<_, String>(2)?),
        state: r.get(3)?,
        started_at: r.get(4)?,
        ended_at: r.get(5)?,
        host: r.get(6)?,
        kernel: r.get(7)?,
        command_line: serde_json::from_str(&command).unwrap_or_default(),
        study: r.get(9)?,
        figures: serde_json::from_str(&figures).unwrap_or_default(),
        tool_version: r.get(11)?,
        indexed_at: r.get(12)?,
    })
}

fn upsert(tx: &rusqlite::Transaction<'_>, e: &Entry) -> rusqlite::Result<()> {
    let path = e.path.to_string_lossy();
    tx.execute(
        "DELETE FROM runs WHERE path = ?1 AND id <> ?2",
        params![path, e.id],
    )?;
    tx.execute(
        &format!(
            "INSERT OR REPLACE INTO runs ({COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
        ),
        params![
            e.id,
            path,
            e.kind.as_str(),
            e.state,
            e.started_at,
            e.ended_at,
            e.host,
            e.kernel,
            serde_json::to_string(&e.command_line).unwrap_or_else(|_| "[]".into()),
            e.study,
            Value::Object(e.figures.clone()).to_string(),
            e.tool_version,
            e.indexed_at,
        ],
    )?;
    Ok(())
}

enum Dup {
    Sql(rusqlite::Error),
    Found(PathBuf),
}

/// Refuses a second directory under an id the catalog already has, unless the first one is
/// gone or no longer holds that id (it was moved, or replaced).
fn check_duplicate(tx: &rusqlite::Transaction<'_>, e: &Entry) -> Result<(), Dup> {
    let existing: Option<String> = tx
        .query_row("SELECT path FROM runs WHERE id = ?1", params![e.id], |r| {
            r.get(0)
        })
        .optional()
        .map_err(Dup::Sql)?;
    let Some(existing) = existing.map(PathBuf::from) else {
        return Ok(());
    };
    if existing == e.path || !existing.is_dir() {
        return Ok(());
    }
    let still_there = if e.kind == RunKind::Study {
        study_run::read_state(&existing)
            .map(|r| r.id == e.id)
            .unwrap_or(false)
    } else if e.study.is_some() {
        // A cell's id is its study's and its directory's name: the study check covers it.
        false
    } else {
        RunReader::open_any_state(&existing)
            .map(|r| r.manifest.id == e.id)
            .unwrap_or(false)
    };
    if still_there {
        Err(Dup::Found(existing))
    } else {
        Ok(())
    }
}

fn like_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn absolute(p: &Path) -> std::io::Result<PathBuf> {
    std::fs::canonicalize(p)
}

/// The rows of the directory `dir`: a run, or a study followed by its cells. Strict: any
/// damaged part fails the whole directory.
fn read_dir_entries(dir: &Path) -> Result<Vec<Entry>, CatalogError> {
    let abs = absolute(dir).map_err(|e| CatalogError::Path(dir.to_path_buf(), e.to_string()))?;
    if !abs.is_dir() {
        return Err(CatalogError::NotARun(dir.to_path_buf()));
    }
    if abs.join(study_run::STATE_FILE).exists() {
        let record = read_study_record(&abs)?;
        let mut out = vec![study_entry(&abs, &record)];
        for cell in cell_dirs(&abs) {
            out.push(read_run(&cell, Some(&record.id))?);
        }
        return Ok(out);
    }
    if !abs.join("manifest.json").exists() {
        return Err(CatalogError::NotARun(dir.to_path_buf()));
    }
    let study = parent_study(&abs);
    Ok(vec![read_run(&abs, study.as_deref())?])
}

/// The study a run directory belongs to, when its parent is a study directory.
fn parent_study(dir: &Path) -> Option<String> {
    let parent = dir.parent()?;
    if !parent.join(study_run::STATE_FILE).exists() {
        return None;
    }
    study_run::read_state(parent).ok().map(|r| r.id)
}

/// The run directories inside a study directory, sorted.
fn cell_dirs(study: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(study)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir() && p.join("manifest.json").exists())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn read_study_record(dir: &Path) -> Result<StudyRecord, CatalogError> {
    study_run::read_state(dir).map_err(|e| CatalogError::Study {
        path: dir.join(study_run::STATE_FILE),
        message: match e {
            study_run::StudyError::Usage(m) | study_run::StudyError::Failed(m) => m,
        },
    })
}

/// A study and whichever of its cells are intact; the damaged ones go to `skipped`.
fn read_study_lenient(dir: &Path, skipped: &mut Vec<Skipped>) -> (Option<Entry>, Vec<Entry>) {
    let record = match read_study_record(dir) {
        Ok(r) => r,
        Err(e) => {
            skipped.push(Skipped {
                path: dir.to_path_buf(),
                reason: e.to_string(),
            });
            return (None, Vec::new());
        }
    };
    let mut cells = Vec::new();
    for cell in cell_dirs(dir) {
        match read_run(&cell, Some(&record.id)) {
            Ok(e) => cells.push(e),
            Err(e) => skipped.push(Skipped {
                path: cell,
                reason: e.to_string(),
            }),
        }
    }
    (Some(study_entry(dir, &record)), cells)
}

fn study_entry(dir: &Path, r: &StudyRecord) -> Entry {
    use crate::study::run::{CellState, StudyState};
    let total = r.cells.len();
    let done = r.count(CellState::Completed);
    let mut figures = Map::new();
    figures.insert("name".into(), json!(r.name));
    figures.insert("cells_done".into(), json!(done));
    figures.insert("cells_total".into(), json!(total));
    let failed = r.count(CellState::Failed);
    if failed > 0 {
        figures.insert("cells_failed".into(), json!(failed));
    }
    Entry {
        id: r.id.clone(),
        path: dir.to_path_buf(),
        kind: RunKind::Study,
        state: r.state.name().into(),
        started_at: r.created_at.clone(),
        ended_at: (r.state != StudyState::Running).then(|| r.updated_at.clone()),
        host: r.system.hostname.clone(),
        kernel: r.system.kernel_release.clone(),
        command_line: r.command_lines.first().cloned().unwrap_or_default(),
        study: None,
        figures,
        tool_version: r.tool.version.clone(),
        indexed_at: store::now_rfc3339(),
    }
}

/// Verifies the run directory `dir` (every listed file's size and SHA-256) and makes its row.
fn read_run(dir: &Path, study: Option<&str>) -> Result<Entry, CatalogError> {
    let r = RunReader::open_any_state(dir)?;
    r.verify()?;
    let m = &r.manifest;
    let summary = if r.has("summary.json") {
        Some(r.read("summary.json")?)
    } else if r.has("result.json") {
        Some(r.read("result.json")?)
    } else {
        None
    };
    let summary: Value = summary
        .and_then(|s| serde_json::from_slice(&s).ok())
        .unwrap_or(Value::Null);
    let loads: Value = if r.has("loads.json") {
        serde_json::from_slice(&r.read("loads.json")?).unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| m.id.clone());
    let id = match study {
        Some(s) => format!("{s}/{name}"),
        None => m.id.clone(),
    };
    Ok(Entry {
        id,
        path: dir.to_path_buf(),
        kind: m.kind.clone(),
        state: serde_json::to_value(m.state)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_else(|| m.state.name().to_string()),
        started_at: m.started_at.clone(),
        ended_at: m.ended_at.clone(),
        host: m.system.hostname.clone(),
        kernel: m.system.kernel_release.clone(),
        command_line: m.command_line.clone(),
        study: study.map(String::from),
        figures: crate::registry::figures(&m.kind, &summary, &loads),
        tool_version: m.tool.version.clone(),
        indexed_at: store::now_rfc3339(),
    })
}

/// Parses a date given to `--since` or `--until`: `YYYY-MM-DD`, an RFC 3339 time
/// (`2026-11-22T10:15:00Z`), or an age such as `36h` or `7d` (that long before `now`). A bare
/// date given as an upper bound means the end of that day. Returns RFC 3339 UTC with seconds,
/// comparable with the catalog's `started_at`.
pub fn parse_when(text: &str, upper: bool, now: SystemTime) -> Result<String, DateError> {
    let t = text.trim();
    let bad = || DateError::NotADate {
        text: text.to_string(),
    };
    let is_date = t.len() == 10
        && t.char_indices().all(|(i, c)| {
            if i == 4 || i == 7 {
                c == '-'
            } else {
                c.is_ascii_digit()
            }
        });
    let when = if is_date {
        let day = humantime::parse_rfc3339(&format!("{t}T00:00:00Z")).map_err(|_| bad())?;
        if upper {
            day + Duration::from_secs(86_400)
        } else {
            day
        }
    } else if t.contains('-') || t.contains(':') {
        humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).map_err(|_| bad())?
    } else {
        let age = humantime::parse_duration(t).map_err(|_| bad())?;
        now.checked_sub(age).ok_or_else(bad)?
    };
    // RFC 3339 covers years 0000 to 9999 and the catalog's times start in 1970: anything
    // outside (an age older than 1970, a date past 9999 once a day is added) is refused, not
    // formatted.
    let last = SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    if when < SystemTime::UNIX_EPOCH || when > last {
        return Err(DateError::OutOfRange {
            text: text.to_string(),
        });
    }
    Ok(humantime::format_rfc3339_seconds(when).to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::store::{Manifest, RunDir, RunState, Tool};

    fn manifest(dir: &RunDir, kind: &str, state: RunState, started: &str) -> Manifest {
        Manifest {
            schema_version: store::SCHEMA_VERSION,
            id: dir.id().to_string(),
            kind: RunKind::named(kind),
            tool: Tool {
                name: "sandglass".into(),
                version: "0.1.0".into(),
                commit: "0".into(),
            },
            command_line: vec!["sandglass".into(), kind.into()],
            state,
            started_at: started.into(),
            ended_at: (state != RunState::Running).then(|| started.to_string()),
            end_detail: None,
            system: crate::system::snapshot(),
            clock: Value::Null,
            config: Value::Null,
            warnings: vec![],
            files: vec![],
        }
    }

    fn timer_summary() -> Value {
        json!({
            "kind": "timer",
            "cpus": [
                {"cpu": 0, "count": 1000, "missed_releases": 2,
                 "lateness_ns": {"p50": 20000, "p99": 50000, "p99.99": 90000, "max": 120000}},
                {"cpu": 1, "count": 1000, "missed_releases": 1,
                 "lateness_ns": {"p50": 25000, "p99": 40000, "p99.99": 95000, "max": 100000}}
            ],
            "loads": [{"spec": "cpu"}, {"spec": "disk"}]
        })
    }

    /// A finished timer run with a summary and a data file, written through `RunDir`.
    fn timer_run(dir: &Path, started: &str) -> RunDir {
        let r = RunDir::create(Some(dir), Path::new("."), "timer").unwrap();
        let mut m = manifest(&r, "timer", RunState::Completed, started);
        let summary = serde_json::to_vec_pretty(&timer_summary()).unwrap();
        m.files.push(
            r.write_file("summary.json", &summary, "sandglass-timer-summary/1", "s")
                .unwrap(),
        );
        m.files.push(
            r.write_file("samples.csv", b"cpu,release_ns\n0,1\n", "t/1", "samples")
                .unwrap(),
        );
        r.write_manifest(&m).unwrap();
        r
    }

    fn noise_run(dir: &Path, started: &str, state: RunState) -> RunDir {
        let r = RunDir::create(Some(dir), Path::new("."), "noise").unwrap();
        let mut m = manifest(&r, "noise", state, started);
        // A run lists its summary only once it has finished.
        if state != RunState::Running {
            let summary = json!({"cpus": [{"noise_share": 0.01, "interruptions_per_s": 500.0, "max_ns": 2000}]});
            m.files.push(
                r.write_file("summary.json", summary.to_string().as_bytes(), "n/1", "s")
                    .unwrap(),
            );
        }
        r.write_manifest(&m).unwrap();
        r
    }

    /// Writes the `study.json` of the built-in quick study into `sdir`, in `state`, with each
    /// cell's state from `cell_state`.
    fn quick_study(
        sdir: &Path,
        state: crate::study::run::StudyState,
        cell_state: impl Fn(usize) -> crate::study::run::CellState,
    ) -> StudyRecord {
        use crate::study::run::{CellRecord, CellState};
        let study = crate::study::load("quick").expect("built-in study");
        let cells: Vec<CellRecord> = crate::study::cells(&study.file)
            .into_iter()
            .enumerate()
            .map(|(i, cell)| CellRecord {
                labels: cell.labels(&study.file),
                dir: (cell_state(i) != CellState::Pending).then(|| cell.id.clone()),
                cell,
                state: cell_state(i),
                earlier_attempts: vec![],
                error: None,
                detail: None,
                started_at: None,
                ended_at: None,
                seconds: None,
                metrics: Default::default(),
                loads: vec![],
                warnings: vec![],
                cause: None,
            })
            .collect();
        let record = StudyRecord {
            schema: study_run::RECORD_SCHEMA.to_string(),
            schema_version: study_run::STATE_VERSION,
            kind: RunKind::Study,
            id: sdir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            name: "quick".into(),
            source: study.source.clone(),
            text: study.text.clone(),
            duration_scale: 1.0,
            tool: Tool {
                name: "sandglass".into(),
                version: "0.1.0".into(),
                commit: "0".into(),
            },
            command_lines: vec![vec!["sandglass".into(), "quick".into()]],
            created_at: "2026-11-22T09:35:12Z".into(),
            updated_at: "2026-11-22T09:36:12Z".into(),
            state,
            detail: None,
            system: crate::system::snapshot(),
            cells,
        };
        std::fs::write(
            sdir.join(study_run::STATE_FILE),
            serde_json::to_vec_pretty(&record).unwrap(),
        )
        .unwrap();
        record
    }

    #[test]
    fn runs_and_studies_left_running_by_a_dead_process_are_marked_on_the_next_start() {
        use crate::study::run::{CellState, StudyState};
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("runs");
        // A run whose process died (its directory lock is gone), one still being written
        // (this process holds its lock), and a finished one.
        let killed = noise_run(
            &base.join("20261122-100000-noise-0001"),
            "2026-11-22T10:00:00Z",
            RunState::Running,
        );
        drop(killed);
        let live = noise_run(
            &base.join("20261122-100001-noise-0002"),
            "2026-11-22T10:00:01Z",
            RunState::Running,
        );
        noise_run(
            &base.join("20261122-100002-noise-0003"),
            "2026-11-22T10:00:02Z",
            RunState::Completed,
        );
        // A study killed during its second cell, whose run says running.
        let sdir = base.join("20261122-100003-study-quick-0004");
        std::fs::create_dir_all(&sdir).unwrap();
        noise_run(
            &sdir.join("timer-idle"),
            "2026-11-22T10:00:03Z",
            RunState::Completed,
        );
        let cell_id = crate::study::cells(&crate::study::load("quick").unwrap().file)[1]
            .id
            .clone();
        drop(noise_run(
            &sdir.join(&cell_id),
            "2026-11-22T10:00:04Z",
            RunState::Running,
        ));
        quick_study(&sdir, StudyState::Running, |i| match i {
            0 => CellState::Completed,
            1 => CellState::Running,
            _ => CellState::Pending,
        });

        let mut c = Catalog::open(&base).unwrap();
        c.rebuild(&base).unwrap();
        // The rebuild marked the dead ones on its way.
        let state = |c: &Catalog, id: &str| c.get(id).unwrap().map(|e| e.state);
        assert_eq!(
            state(&c, "20261122-100000-noise-0001").as_deref(),
            Some("incomplete")
        );
        assert_eq!(
            state(&c, "20261122-100001-noise-0002").as_deref(),
            Some("running")
        );
        assert_eq!(
            state(&c, "20261122-100002-noise-0003").as_deref(),
            Some("completed")
        );
        assert_eq!(
            state(&c, "20261122-100003-study-quick-0004").as_deref(),
            Some("incomplete")
        );
        let cell = format!("20261122-100003-study-quick-0004/{cell_id}");
        assert_eq!(state(&c, &cell).as_deref(), Some("incomplete"));
        let r = study_run::read_state(&sdir).unwrap();
        assert_eq!(r.cells[1].state, CellState::Interrupted);
        assert!(r.detail.unwrap().contains("--resume"));
        assert!(matches!(
            RunReader::open(&base.join("20261122-100000-noise-0001")),
            Err(ReadError::Incomplete { .. })
        ));
        // Nothing more to mark while the live run's writer holds its lock.
        assert!(c.settle(&base).unwrap().is_empty());

        // The start path: the live run's process dies; another run was killed before it was
        // ever indexed.
        drop(live);
        drop(noise_run(
            &base.join("20261122-100005-noise-0005"),
            "2026-11-22T10:00:05Z",
            RunState::Running,
        ));
        let mut marked = c.settle(&base).unwrap();
        marked.sort();
        let names: Vec<String> = marked
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        assert_eq!(
            names,
            ["20261122-100001-noise-0002", "20261122-100005-noise-0005"]
        );
        assert_eq!(
            state(&c, "20261122-100001-noise-0002").as_deref(),
            Some("incomplete")
        );
        assert_eq!(
            state(&c, "20261122-100005-noise-0005").as_deref(),
            Some("incomplete")
        );
        let m = RunReader::open_any_state(&base.join("20261122-100005-noise-0005"))
            .unwrap()
            .manifest;
        assert_eq!(m.state, RunState::Incomplete);
        assert!(m
            .end_detail
            .unwrap()
            .contains("ended before the run finished"));
        assert!(c.settle(&base).unwrap().is_empty());
    }

    #[test]
    fn creates_a_versioned_database_in_the_base() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("runs");
        let c = Catalog::open(&base).unwrap();
        assert!(c.created());
        assert_eq!(c.path(), base.join(FILE_NAME));
        let v: String = c
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(v, "1");
        // Not filled (its creator failed or was killed): the next open fills it.
        drop(c);
        let mut c = Catalog::open(&base).unwrap();
        assert!(c.created());
        c.rebuild(&base).unwrap();
        drop(c);
        let c = Catalog::open(&base).unwrap();
        assert!(!c.created());
        c.conn
            .execute(
                "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
                [],
            )
            .unwrap();
        drop(c);
        let e = Catalog::open(&base).err().expect("newer schema refused");
        assert!(e.to_string().contains("upgrade sandglass"), "{e}");
    }

    #[test]
    fn indexes_a_run_with_its_key_figures() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("runs");
        let run = timer_run(
            &base.join("20261122-101500-timer-aaaa"),
            "2026-11-22T10:15:00Z",
        );
        let mut c = Catalog::open(&base).unwrap();
        let ids = c.index(run.path()).unwrap();
        assert_eq!(ids, ["20261122-101500-timer-aaaa"]);
        let e = c.get(&ids[0]).unwrap().expect("indexed");
        assert_eq!(e.kind, RunKind::Timer);
        assert_eq!(e.state, "completed");
        assert!(e.path.is_absolute());
        assert_eq!(e.host, crate::system::snapshot().hostname);
        assert_eq!(e.command_line, ["sandglass", "timer"]);
        assert_eq!(e.figures["count"], 2000);
        assert_eq!(e.figures["p50_ns"], 25000);
        assert_eq!(e.figures["p99_ns"], 50000);
        assert_eq!(e.figures["p99.99_ns"], 95000);
        assert_eq!(e.figures["max_ns"], 120000);
        assert_eq!(e.figures["missed"], 3);
        assert_eq!(e.figures["load"], "cpu+disk");
        // Indexing again replaces the row.
        c.index(run.path()).unwrap();
        assert_eq!(c.list(&Filter::default()).unwrap().len(), 1);
    }

    #[test]
    fn damaged_runs_are_named_and_add_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("runs");
        let mut c = Catalog::open(&base).unwrap();
        type Damage = fn(&Path);
        let cases: [(&str, Damage, &str); 4] = [
            (
                "deleted",
                |d| std::fs::remove_file(d.join("samples.csv")).unwrap(),
                "missing",
            ),
            (
                "truncated",
                |d| std::fs::write(d.join("samples.csv"), b"cpu").unwrap(),
                "truncated",
            ),
            (
                "altered",
                |d| std::fs::write(d.join("samples.csv"), b"cpu,release_ns\n0,2\n").unwrap(),
                "altered",
            ),
            (
                "manifest",
                |d| std::fs::write(d.join("manifest.json"), b"{\"schema").unwrap(),
                "damaged",
            ),
        ];
        for (what, damage, needle) in cases {
            let dir = tmp.path().join(what);
            timer_run(&dir, "2026-11-22T10:15:00Z");
            damage(&dir);
            let e = c.index(&dir).expect_err(what);
            let text = e.to_string();
            let file = if what == "manifest" {
                "manifest.json"
            } else {
                "samples.csv"
            };
            assert!(
                text.contains(file) && text.contains(needle),
                "{what}: {text}"
            );
            assert!(e.is_usage());
            assert!(
                c.list(&Filter {
                    cells: true,
                    ..Filter::default()
                })
                .unwrap()
                .is_empty(),
                "{what}"
            );
        }
    }

    #[test]
    fn studies_are_indexed_with_their_cells_or_not_at_all() {
        use crate::study::run::{CellState, StudyState};
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("runs");
        let sdir = base.join("20261122-093512-study-quick-5f0e");
        std::fs::create_dir_all(&sdir).unwrap();
        timer_run(&sdir.join("timer-idle"), "2026-11-22T09:35:13Z");
        noise_run(
            &sdir.join("noise-idle"),
            "2026-11-22T09:35:30Z",
            RunState::Completed,
        );
        let record = quick_study(&sdir, StudyState::Interrupted, |i| {
            if i < 2 {
                CellState::Completed
            } else {
                CellState::Pending
            }
        });
        let total = record.cells.len();

        let mut c = Catalog::open(&base).unwrap();
        let ids = c.index(&sdir).unwrap();
        assert_eq!(ids.len(), 3, "{ids:?}");
        let s = c.get(&record.id).unwrap().unwrap();
        assert_eq!(s.kind, RunKind::Study);
        assert_eq!(s.state, "interrupted");
        assert_eq!(s.figures["cells_done"], 2);
        assert_eq!(s.figures["cells_total"], total);
        let cell = c.resolve(&format!("{}/timer", record.id)).unwrap();
        assert_eq!(cell.study.as_deref(), Some(record.id.as_str()));
        // A prefix names the study, not its cells.
        assert_eq!(c.resolve("20261122-0935").unwrap().id, record.id);
        assert_eq!(c.list(&Filter::default()).unwrap().len(), 1);
        let only = Filter {
            study: Some(record.id.clone()),
            ..Filter::default()
        };
        assert_eq!(c.list(&only).unwrap().len(), 2);
        // A cell of a study indexed on its own still names its study.
        let cell_ids = c.index(&sdir.join("noise-idle")).unwrap();
        assert_eq!(cell_ids, [format!("{}/noise-idle", record.id)]);
        let e = c.remove(&cell_ids[0], false).expect_err("a cell");
        assert!(e.to_string().contains("remove the whole study"), "{e}");

        // One damaged cell: the study is refused as a whole.
        c.forget(&record.id).unwrap();
        std::fs::write(sdir.join("noise-idle").join("summary.json"), b"{}").unwrap();
        let e = c.index(&sdir).expect_err("damaged cell");
        assert!(
            e.to_string().contains("noise-idle") && e.to_string().contains("summary.json"),
            "{e}"
        );
        assert!(c
            .list(&Filter {
                cells: true,
                ..Filter::default()
            })
            .unwrap()
            .is_empty());
        // A rebuild keeps the study and its intact cell, and names the damaged one.
        let report = c.rebuild(&base).unwrap();
        assert_eq!(report.indexed, 2);
        assert_eq!(report.skipped.len(), 1);
        assert!(report.skipped[0].reason.contains("summary.json"));
    }

    #[test]
    fn one_resolver_takes_directories_ids_prefixes_and_study_cells() {
        use crate::study::run::{CellState, StudyState};
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("runs");
        let a = base.join("20261122-080000-timer-aaaa");
        timer_run(&a, "2026-11-22T08:00:00Z");
        let sdir = base.join("20261122-093512-study-quick-5f0e");
        for cell in [
            "cell-001-timer-idle",
            "cell-001-timer-idle.attempt-1",
            "cell-002-timer-cpu-disk",
        ] {
            noise_run(
                &sdir.join(cell),
                "2026-11-22T09:35:12Z",
                RunState::Completed,
            );
        }
        quick_study(&sdir, StudyState::Interrupted, |i| {
            if i < 2 {
                CellState::Completed
            } else {
                CellState::Pending
            }
        });
        let ext = tmp.path().join("elsewhere").join("ext-run");
        timer_run(&ext, "2026-11-22T07:00:00Z");
        let mut c = Catalog::open(&base).unwrap();
        c.index(&a).unwrap();
        c.index(&sdir).unwrap();
        c.index(&ext).unwrap();
        // Added by hand after the catalog was filled: found by its directory's name.
        let b = base.join("20261122-090000-timer-bbbb");
        timer_run(&b, "2026-11-22T09:00:00Z");
        let r = |text: &str| resolve_run(&base, Some(&c), text);

        // Ids and unique prefixes, from the catalog and from the directories.
        assert_eq!(
            r("20261122-080000-timer-aaaa").unwrap(),
            a.canonicalize().unwrap()
        );
        assert_eq!(resolve_run(&base, None, "20261122-08").unwrap(), a);
        assert_eq!(r("20261122-090").unwrap(), b);
        assert_eq!(r("ext").unwrap(), ext.canonicalize().unwrap());
        assert!(matches!(
            resolve_run(&base, None, "ext"),
            Err(CatalogError::NotFound(_))
        ));
        // A directory as given.
        assert_eq!(r(b.to_str().unwrap()).unwrap(), b);
        // An ambiguous prefix names each candidate and its kind, runs and studies only.
        let e = r("20261122-09").expect_err("ambiguous");
        assert!(matches!(e, CatalogError::Ambiguous { count: 2, .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.starts_with("run 20261122-09 is ambiguous: 2 runs start with it: 20261122-090000-timer-bbbb (timer), 20261122-093512-study-quick-5f0e (study); give more of the id"),
            "{text}"
        );
        // Cells: the study by id, prefix or directory, the cell by name or prefix.
        let cell1 = sdir.join("cell-001-timer-idle");
        for text in [
            "20261122-093512-study-quick-5f0e/cell-001-timer-idle".to_string(),
            "20261122-0935/cell-001".to_string(),
            format!("{}/cell-001", sdir.display()),
        ] {
            let got = r(&text).unwrap();
            assert_eq!(got.file_name(), cell1.file_name(), "{text}");
        }
        assert!(r("20261122-0935/cell-001-timer-idle.att")
            .unwrap()
            .ends_with("cell-001-timer-idle.attempt-1"));
        let e = r("20261122-0935/cell-0").expect_err("two cells");
        assert!(matches!(e, CatalogError::Ambiguous { count: 2, .. }), "{e}");
        assert!(e
            .to_string()
            .contains("20261122-093512-study-quick-5f0e/cell-002-timer-cpu-disk (noise)"));
        let e = r("20261122-0935/cell-9").expect_err("no such cell");
        assert!(matches!(e, CatalogError::NoCell { .. }), "{e}");
        let e = r("20261122-08/cell-001").expect_err("not a study");
        assert!(e.to_string().contains("is a timer run, not a study"), "{e}");
        for missing in ["1999", "/no/such/run", "%", "no/such"] {
            assert!(
                matches!(r(missing), Err(CatalogError::NotFound(_))),
                "{missing}"
            );
        }
        assert!(matches!(r(" "), Err(CatalogError::EmptyId)));
        // The catalog's own lookup takes the same forms and gives the row.
        let cell = c.resolve("20261122-0935/cell-002").unwrap();
        assert_eq!(
            cell.id,
            "20261122-093512-study-quick-5f0e/cell-002-timer-cpu-disk"
        );
        assert_eq!(
            c.resolve(a.to_str().unwrap()).unwrap().id,
            "20261122-080000-timer-aaaa"
        );
        let e = c.resolve("20261122-090").expect_err("not indexed");
        assert!(matches!(e, CatalogError::NotIndexed(_)), "{e}");
    }

    #[test]
    fn lists_newest_first_with_filters_and_resolves_prefixes() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("runs");
        timer_run(
            &base.join("20261120-080000-timer-aaaa"),
            "2026-11-20T08:00:00Z",
        );
        timer_run(
            &base.join("20261122-080000-timer-bbbb"),
            "2026-11-22T08:00:00Z",
        );
        noise_run(
            &base.join("20261121-080000-noise-cccc"),
            "2026-11-21T08:00:00Z",
            RunState::Completed,
        );
        // Still being written: this process holds its lock.
        let _live = noise_run(
            &base.join("20261123-080000-noise-dddd"),
            "2026-11-23T08:00:00Z",
            RunState::Running,
        );
        std::fs::create_dir_all(base.join("not-a-run")).unwrap();
        let mut c = Catalog::open(&base).unwrap();
        let report = c.rebuild(&base).unwrap();
        assert_eq!(report.indexed, 4);
        assert_eq!(report.skipped.len(), 1);
        assert!(
            report.skipped[0].reason.contains("no manifest.json"),
            "{:?}",
            report.skipped
        );
        fn ids(c: &Catalog, f: &Filter) -> Vec<String> {
            c.list(f).unwrap().into_iter().map(|e| e.id).collect()
        }
        assert_eq!(
            ids(&c, &Filter::default()),
            [
                "20261123-080000-noise-dddd",
                "20261122-080000-timer-bbbb",
                "20261121-080000-noise-cccc",
                "20261120-080000-timer-aaaa"
            ]
        );
        let kind = Filter {
            kind: Some("timer".into()),
            ..Filter::default()
        };
        assert_eq!(ids(&c, &kind).len(), 2);
        let host = Filter {
            host: Some("no-such-host".into()),
            ..Filter::default()
        };
        assert!(ids(&c, &host).is_empty());
        let now = SystemTime::now();
        let window = Filter {
            since: Some(parse_when("2026-11-21", false, now).unwrap()),
            until: Some(parse_when("2026-11-22", true, now).unwrap()),
            ..Filter::default()
        };
        assert_eq!(
            ids(&c, &window),
            ["20261122-080000-timer-bbbb", "20261121-080000-noise-cccc"]
        );

        assert_eq!(
            c.resolve("20261121").unwrap().id,
            "20261121-080000-noise-cccc"
        );
        let e = c.resolve("202611").expect_err("ambiguous");
        assert!(matches!(e, CatalogError::Ambiguous { count: 4, .. }), "{e}");
        assert!(matches!(
            c.resolve("1999").expect_err("none"),
            CatalogError::NotFound(_)
        ));
        assert!(matches!(
            c.resolve("%").expect_err("literal"),
            CatalogError::NotFound(_)
        ));

        // rm refuses a running run unless forced, and removes directory and row.
        let e = c
            .remove("20261123-080000-noise-dddd", false)
            .expect_err("running");
        assert!(e.to_string().contains("--force"), "{e}");
        let (gone, how) = c.remove("20261123-080000-noise-dddd", true).unwrap();
        assert!(!gone.path.exists());
        assert_eq!(how, Removal::Deleted);
        let (gone, _) = c.remove("20261120-080000-timer-aaaa", false).unwrap();
        assert!(!gone.path.exists());
        assert_eq!(ids(&c, &Filter::default()).len(), 2);

        // A copy elsewhere cannot take the id of a run still in place; once the original
        // is gone it can.
        let copy = tmp.path().join("copy");
        timer_run(&copy, "2026-11-22T08:00:00Z");
        let text = std::fs::read_to_string(copy.join("manifest.json"))
            .unwrap()
            .replace("\"copy\"", "\"20261122-080000-timer-bbbb\"");
        std::fs::write(copy.join("manifest.json"), text).unwrap();
        let e = c.index(&copy).expect_err("duplicate");
        assert!(matches!(e, CatalogError::Duplicate { .. }), "{e}");
        std::fs::remove_dir_all(base.join("20261122-080000-timer-bbbb")).unwrap();
        c.index(&copy).unwrap();
        let e = c.get("20261122-080000-timer-bbbb").unwrap().unwrap();
        assert_eq!(e.path, copy.canonicalize().unwrap());
        // The imported copy outside the base survives a rebuild.
        let report = c.rebuild(&base).unwrap();
        assert_eq!(report.indexed, 2, "{report:?}");
    }

    #[test]
    fn rm_deletes_only_its_own_directories_and_an_id_must_be_given_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("runs");
        for i in 0..12 {
            timer_run(
                &base.join(format!("20261122-1000{i:02}-timer-aaaa")),
                "2026-11-22T10:00:00Z",
            );
        }
        let mut c = Catalog::open(&base).unwrap();
        c.rebuild(&base).unwrap();
        for empty in ["", " ", "\t"] {
            assert!(
                matches!(c.resolve(empty), Err(CatalogError::EmptyId)),
                "{empty:?}"
            );
        }
        let e = c.resolve("2026").expect_err("ambiguous");
        let text = e.to_string();
        assert!(
            text.contains("run 2026 is ambiguous: 12 runs start with it"),
            "{text}"
        );
        assert!(text.contains("20261122-100009-timer-aaaa"), "{text}");
        assert!(text.contains("and 2 more"), "{text}");
        assert!(e.is_usage());

        // Imported in place, and through a link in the runs directory: only forgotten.
        let ext = timer_run(
            &tmp.path().join("elsewhere").join("ext"),
            "2026-11-22T11:00:00Z",
        );
        c.index(ext.path()).unwrap();
        let target = timer_run(&tmp.path().join("target"), "2026-11-22T12:00:00Z");
        std::os::unix::fs::symlink(target.path(), base.join("link")).unwrap();
        c.index(&base.join("link")).unwrap();
        for id in ["ext", "target"] {
            let e = c.get(id).unwrap().unwrap();
            assert_eq!(c.place(&e), Place::External, "{id}");
            let (_, how) = c.remove(id, false).unwrap();
            assert_eq!(how, Removal::Forgotten, "{id}");
            assert!(e.path.join("manifest.json").is_file(), "{id}");
            assert!(c.get(id).unwrap().is_none());
        }
        assert!(ext.path().is_dir() && target.path().is_dir());

        // Another user's directory in the runs directory is refused (root only can make one).
        let id = "20261122-100000-timer-aaaa";
        if sandglass_sys::process::euid() == 0 {
            let dir = base.join(id);
            std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
            let e = c.remove(id, false).expect_err("foreign");
            assert!(
                matches!(e, CatalogError::NotOwned { uid: 65534, .. }),
                "{e}"
            );
            assert!(dir.is_dir());
            std::os::unix::fs::chown(&dir, Some(0), Some(0)).unwrap();
        }
        let (e, how) = c.remove(id, false).unwrap();
        assert_eq!(how, Removal::Deleted);
        assert!(!e.path.exists());
    }

    #[test]
    fn sqlite_failures_name_their_cause_and_a_fix_that_works() {
        use rusqlite::ffi;
        let path = Path::new("/nonexistent-store/catalog.sqlite");
        let text = |code| {
            sql_text(
                path,
                &rusqlite::Error::SqliteFailure(ffi::Error::new(code), None),
                "the run catalog failed",
            )
        };
        let cases = [
            (ffi::SQLITE_READONLY, "read-only"),
            (ffi::SQLITE_FULL, "the disk is full"),
            (ffi::SQLITE_CANTOPEN, "cannot open the file"),
            (ffi::SQLITE_CORRUPT, "damaged"),
            (ffi::SQLITE_BUSY, "another process held the catalog"),
            (ffi::SQLITE_PERM, "permission denied"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (code, needle) in cases {
            let t = text(code);
            assert!(t.contains(needle), "{code}: {t}");
            assert!(t.starts_with("/nonexistent-store/catalog.sqlite: "), "{t}");
            // Only a damaged catalog is fixed by rebuilding it.
            assert_eq!(
                t.contains("runs rebuild"),
                code == ffi::SQLITE_CORRUPT,
                "{t}"
            );
            assert!(seen.insert(t));
        }
        // A store not written by root: its owner is named, with a fix that works.
        let tmp = tempfile::tempdir().unwrap();
        if sandglass_sys::process::euid() == 0 {
            std::os::unix::fs::chown(tmp.path(), Some(65534), Some(65534)).unwrap();
            let file = tmp.path().join(FILE_NAME);
            let t = sql_text(
                &file,
                &rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_READONLY), None),
                "x",
            );
            assert!(
                t.contains("owned by uid 65534") && t.contains("SANDGLASS_RUNS_DIR"),
                "{t}"
            );
            assert_eq!(
                write_access(tmp.path()),
                Err(ReadOnly::Owner { uid: 65534 })
            );
            let e = Catalog::open(tmp.path()).err().expect("refused");
            assert!(matches!(e, CatalogError::ReadOnly { .. }), "{e}");
            assert!(!file.exists(), "nothing is created in another user's store");
            // Read, in memory, without writing a thing.
            let mut c = Catalog::open_read(tmp.path()).unwrap();
            assert!(c.read_only().is_some());
            assert!(c.list(&Filter::default()).unwrap().is_empty());
            assert!(matches!(c.forget("x"), Err(CatalogError::ReadOnly { .. })));
            assert!(!file.exists());
        } else {
            assert_eq!(write_access(tmp.path()), Ok(()));
        }
    }

    #[test]
    fn parses_dates_times_and_ages() {
        let now = humantime::parse_rfc3339("2026-11-22T12:00:00Z").unwrap();
        assert_eq!(
            parse_when("2026-11-20", false, now).unwrap(),
            "2026-11-20T00:00:00Z"
        );
        assert_eq!(
            parse_when("2026-11-20", true, now).unwrap(),
            "2026-11-21T00:00:00Z"
        );
        assert_eq!(
            parse_when("2026-11-20T10:15:00Z", false, now).unwrap(),
            "2026-11-20T10:15:00Z"
        );
        assert_eq!(
            parse_when("36h", false, now).unwrap(),
            "2026-11-21T00:00:00Z"
        );
        assert_eq!(
            parse_when("2d", false, now).unwrap(),
            "2026-11-20T12:00:00Z"
        );
        for bad in ["yesterday", "2026-13-45", "2026/11/20", ""] {
            let e = parse_when(bad, false, now).expect_err(bad);
            assert!(matches!(e, DateError::NotADate { .. }), "{e}");
            assert!(e.to_string().contains("YYYY-MM-DD"), "{e}");
        }
        // Found by fuzzing: an age reaching back before 1970 made the formatter panic.
        for bad in ["2525M2m525M2m", "100years"] {
            let e = parse_when(bad, false, now).expect_err(bad);
            assert!(matches!(e, DateError::OutOfRange { .. }), "{e}");
            assert!(e.to_string().contains("before 1970"), "{e}");
        }
        assert!(matches!(
            parse_when("9999-12-31", true, now),
            Err(DateError::OutOfRange { .. })
        ));
        assert_eq!(
            parse_when("9999-12-31", false, now).unwrap(),
            "9999-12-31T00:00:00Z"
        );
    }
}
