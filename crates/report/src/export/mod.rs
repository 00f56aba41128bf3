//! Exports of a finished run into formats other tools read: plain CSV tables, cyclictest's
//! histogram file and Chrome trace-event JSON for ui.perfetto.dev and chrome://tracing.
//!
//! Every export reads the run only through [`sandglass::store::RunReader`], which checks each
//! file against the manifest's size and SHA-256 before it is used: a damaged run is an error
//! that names the file, never a half-read export. Every output file is written to a temporary
//! name beside it and renamed into place, so no file is ever seen half-written. The formats are
//! documented in `docs/export.md`.

pub mod csv;
pub mod cyclictest;
pub mod perfetto;

use sandglass::store::{ReadError, RunReader};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The optional run file of kernel events, recorded on CLOCK_MONOTONIC (see `docs/export.md`).
pub const KERNEL_EVENTS_FILE: &str = "kernel_events.csv";

/// Why an export could not be made.
#[derive(Debug)]
pub enum ExportError {
    /// The run directory could not be read, or one of its files is damaged.
    Read(ReadError),
    /// A run file does not have the documented layout.
    Format {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// The export does not apply to this kind of run.
    Kind { run: PathBuf, message: String },
    /// An output file already exists; nothing was written.
    Exists(PathBuf),
    /// An output file or directory could not be written.
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Read(e) => write!(f, "{e}"),
            ExportError::Format {
                path,
                line,
                message,
            } => write!(
                f,
                "{}:{line}: {message}; the run directory is damaged or was written by another tool",
                path.display()
            ),
            ExportError::Kind { run, message } => write!(f, "{}: {message}", run.display()),
            ExportError::Exists(p) => write!(
                f,
                "{} already exists: exports never overwrite a file; remove it or choose another place",
                p.display()
            ),
            ExportError::Write { path, source } => {
                write!(f, "cannot write {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for ExportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ExportError::Read(e) => Some(e),
            ExportError::Write { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ReadError> for ExportError {
    fn from(e: ReadError) -> ExportError {
        ExportError::Read(e)
    }
}

/// A CSV file of a run, parsed by the `csv` crate (quoted fields, CRLF line ends and a byte
/// order mark are read as RFC 4180 and spreadsheets write them): the header's columns and the
/// rows.
pub(crate) struct Table {
    path: PathBuf,
    columns: Vec<String>,
    rows: Vec<(usize, Vec<String>)>,
}

impl Table {
    /// Reads `name` from the run (checked against the manifest) and parses it.
    pub(crate) fn read(run: &RunReader, name: &str) -> Result<Table, ExportError> {
        let text = run.read_text(name)?;
        Table::parse(run.path().join(name), &text)
    }

    /// Parses the CSV `text` of the file at `path` (named in errors).
    fn parse(path: PathBuf, text: &str) -> Result<Table, ExportError> {
        let format = |line: u64, e: &dyn std::fmt::Display| ExportError::Format {
            path: path.clone(),
            line: line as usize,
            message: e.to_string(),
        };
        let mut reader = ::csv::ReaderBuilder::new()
            .flexible(true)
            .trim(::csv::Trim::All)
            .from_reader(text.as_bytes());
        let columns: Vec<String> = reader
            .headers()
            .map_err(|e| format(1, &e))?
            .iter()
            .map(String::from)
            .collect();
        if columns.iter().all(String::is_empty) {
            return Err(format(1, &"the file is empty (no header row)"));
        }
        let mut rows = Vec::new();
        let mut lines = LineCounter::default();
        for record in reader.records() {
            let record = record.map_err(|e| {
                let at = e.position().map_or(0, |p| p.byte() as usize);
                format(lines.line_at(text, at) as u64, &e)
            })?;
            if record.iter().all(str::is_empty) {
                continue;
            }
            let at = record.position().map_or(0, |p| p.byte() as usize);
            rows.push((
                lines.line_at(text, at),
                record.iter().map(String::from).collect(),
            ));
        }
        Ok(Table {
            path,
            columns,
            rows,
        })
    }

    /// The index of each of `names` among the columns; extra columns are ignored.
    pub(crate) fn columns(&self, names: &[&str]) -> Result<Vec<usize>, ExportError> {
        names
            .iter()
            .map(|n| {
                self.columns
                    .iter()
                    .position(|c| c == n)
                    .ok_or_else(|| ExportError::Format {
                        path: self.path.clone(),
                        line: 1,
                        message: format!(
                            "no column '{n}' in the header ({})",
                            self.columns.join(",")
                        ),
                    })
            })
            .collect()
    }

    /// The rows with their 1-based line numbers.
    pub(crate) fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        self.rows.iter().map(move |(line, fields)| Row {
            table: self,
            line: *line,
            fields,
        })
    }
}

/// Line numbers of byte offsets met in increasing order. The `csv` crate's own line count lags
/// by one after a CRLF line end, so lines are counted here: a record starts at the first byte
/// after the line ends and blank lines at its offset.
#[derive(Default)]
struct LineCounter {
    at: usize,
    newlines: usize,
}

impl LineCounter {
    fn line_at(&mut self, text: &str, offset: usize) -> usize {
        let bytes = text.as_bytes();
        let mut end = offset.min(bytes.len());
        while end < bytes.len() && matches!(bytes[end], b'\r' | b'\n') {
            end += 1;
        }
        if end > self.at {
            self.newlines += bytes[self.at..end].iter().filter(|&&b| b == b'\n').count();
            self.at = end;
        }
        self.newlines + 1
    }
}

/// One row of a [`Table`].
pub(crate) struct Row<'a> {
    table: &'a Table,
    line: usize,
    fields: &'a [String],
}

impl Row<'_> {
    fn field(&self, col: usize) -> Result<&str, ExportError> {
        self.fields
            .get(col)
            .map(String::as_str)
            .ok_or_else(|| self.error(format!("missing column '{}'", self.table.columns[col])))
    }

    fn error(&self, message: String) -> ExportError {
        ExportError::Format {
            path: self.table.path.clone(),
            line: self.line,
            message,
        }
    }

    /// Column `col` parsed as `T`.
    pub(crate) fn get<T: std::str::FromStr>(&self, col: usize) -> Result<T, ExportError> {
        let v = self.field(col)?;
        v.parse::<T>().map_err(|_| {
            self.error(format!(
                "'{v}' in column '{}' is not a valid number",
                self.table.columns[col]
            ))
        })
    }

    /// Column `col` as text.
    pub(crate) fn text(&self, col: usize) -> Result<&str, ExportError> {
        self.field(col)
    }
}

/// The run's `summary.json`, parsed.
pub(crate) fn summary(run: &RunReader) -> Result<serde_json::Value, ExportError> {
    let data = run.read("summary.json")?;
    serde_json::from_slice(&data).map_err(|e| ExportError::Format {
        path: run.path().join("summary.json"),
        line: e.line(),
        message: format!("not valid JSON ({e})"),
    })
}

/// The measuring threads of a timer or noise run as `(cpu, thread, tid)`, from its summary.
pub(crate) fn cpu_threads(run: &RunReader) -> Result<Vec<(u64, u64, i64)>, ExportError> {
    let s = summary(run)?;
    let cpus = s
        .get("cpus")
        .and_then(|c| c.as_array())
        .ok_or_else(|| ExportError::Format {
            path: run.path().join("summary.json"),
            line: 1,
            message: "no 'cpus' array".into(),
        })?;
    Ok(cpus
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let n = |k: &str| c.get(k).and_then(|v| v.as_u64());
            (
                n("cpu").unwrap_or(i as u64),
                n("thread").unwrap_or(i as u64),
                c.get("tid").and_then(|v| v.as_i64()).unwrap_or(0),
            )
        })
        .collect())
}

/// The error for an export that does not apply to `run`'s kind.
pub(crate) fn wrong_kind(run: &RunReader, message: impl Into<String>) -> ExportError {
    ExportError::Kind {
        run: run.path().to_path_buf(),
        message: message.into(),
    }
}

/// Refuses `path` when it exists.
pub(crate) fn must_not_exist(path: &Path) -> Result<(), ExportError> {
    if path.exists() || path.symlink_metadata().is_ok() {
        return Err(ExportError::Exists(path.to_path_buf()));
    }
    Ok(())
}

/// Writes a file atomically: `write` fills a temporary file beside `path` (`.NAME.tmp`), which
/// is renamed to `path` once complete, so that no reader sees it half-written. An existing `path` is refused; on any error the
/// temporary file is removed and nothing is left behind.
pub fn write_atomic<F>(path: &Path, write: F) -> Result<(), ExportError>
where
    F: FnOnce(&mut dyn Write) -> Result<(), ExportError>,
{
    must_not_exist(path)?;
    let err = |source| ExportError::Write {
        path: path.to_path_buf(),
        source,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| {
            err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a file name",
            ))
        })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = parent.join(format!(".{name}.tmp"));
    let result = (|| {
        let f = std::fs::File::create(&tmp).map_err(err)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        write(&mut w)?;
        // Not synced: an export is made again from the run in seconds, and syncing gigabytes
        // of text would double the time it takes.
        let f = w.into_inner().map_err(|e| err(e.into_error()))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(err)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The kernel events of a run, when it has [`KERNEL_EVENTS_FILE`]: `(ts_ns on
/// CLOCK_MONOTONIC, cpu, event, dur_ns)`.
pub(crate) fn kernel_events(run: &RunReader) -> Result<Vec<(u64, u64, String, u64)>, ExportError> {
    if !run.has(KERNEL_EVENTS_FILE) {
        return Ok(Vec::new());
    }
    let t = Table::read(run, KERNEL_EVENTS_FILE)?;
    let c = t.columns(&["ts_ns", "cpu", "event", "dur_ns"])?;
    t.rows()
        .map(|r| {
            Ok((
                r.get(c[0])?,
                r.get(c[1])?,
                r.text(c[2])?.to_string(),
                r.get(c[3])?,
            ))
        })
        .collect()
}

#[doc(hidden)]
#[cfg(any(test, feature = "fixture"))]
pub mod fixture;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn fields(t: &Table) -> Vec<(usize, Vec<String>)> {
        t.rows.clone()
    }

    #[test]
    fn csv_quoting_crlf_and_byte_order_mark_are_read() {
        let text = "\u{feff}ts_ns,comm,cpu\r\n1,\"kworker/0:1, events\",0\r\n\r\n2,\"say \"\"hi\"\"\",1\r\n";
        let t = Table::parse(PathBuf::from("kernel.csv"), text).unwrap();
        assert_eq!(t.columns, ["ts_ns", "comm", "cpu"]);
        assert_eq!(t.columns(&["comm"]).unwrap(), [1]);
        assert_eq!(
            fields(&t),
            [
                (
                    2,
                    vec!["1".into(), "kworker/0:1, events".into(), "0".into()]
                ),
                (4, vec!["2".into(), "say \"hi\"".into(), "1".into()]),
            ]
        );
    }

    #[test]
    fn an_empty_file_or_a_bad_quote_names_the_line() {
        match Table::parse(PathBuf::from("e.csv"), "") {
            Err(ExportError::Format {
                line: 1, message, ..
            }) => {
                assert!(message.contains("empty"), "{message}")
            }
            _ => panic!("an empty file was read"),
        }
        let bad = "a,b\n1,2\n3,\"x\n";
        // An unterminated quote runs to the end of the file: still one record, not a panic.
        assert!(Table::parse(PathBuf::from("b.csv"), bad).is_ok());
    }
}
