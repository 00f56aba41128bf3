//! The catalog as Parquet for fleet engines (DuckDB, Spark, Trino): `sandglass runs export
//! --parquet DIR` writes two files.
//!
//! - `runs.parquet`: one row per run (or study): its id, kind, state, times (timestamps in
//!   microseconds, UTC), host, kernel, tool version and command line, the key figures as typed
//!   columns (nanoseconds as INT64, shares as DOUBLE; null where the kind has none), and every
//!   figure as a JSON string.
//! - `histograms.parquet`: one row per run, CPU and histogram bucket of the timer and noise
//!   runs: the run's id, host, kernel and start, the CPU, the bucket's highest value in
//!   nanoseconds and its count. The buckets are those of the runs' HDR histograms (three
//!   significant digits): summing counts by bucket across runs gives the merged histogram of
//!   any selection of runs, so a fleet's exact percentiles come from SQL (docs/fleet.md).
//!
//! Memory holds one run's histograms at a time; both files are written through a temporary
//! name and renamed, so a reader never sees half a file.

use crate::catalog::Entry;
use crate::store::RunReader;
use parquet::basic::{LogicalType, Repetition, TimeUnit, Type as Physical};
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;

/// The format recorded in `runs.parquet`'s metadata.
pub const RUNS_FORMAT: &str = "sandglass-fleet-runs-parquet/1";
/// The format recorded in `histograms.parquet`'s metadata.
pub const HISTOGRAMS_FORMAT: &str = "sandglass-fleet-histograms-parquet/1";

/// Why the export failed.
#[derive(Debug, Error)]
pub enum ExportError {
    #[error("{path}: {detail}")]
    Parquet { path: PathBuf, detail: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exported {
    pub runs: usize,
    pub histogram_rows: usize,
    /// Runs whose histograms could not be read (damaged files), with the reason; their
    /// `runs.parquet` row is written all the same.
    pub skipped: Vec<(String, String)>,
}

#[derive(Clone, Copy)]
enum Col {
    Text,
    OptText,
    Time,
    OptTime,
    I32,
    OptI64,
    I64,
    OptF64,
}

fn schema(name: &str, cols: &[(&str, Col)]) -> Result<Arc<Type>, parquet::errors::ParquetError> {
    let fields = cols
        .iter()
        .map(|&(n, c)| {
            let (physical, logical, rep) = match c {
                Col::Text => (
                    Physical::BYTE_ARRAY,
                    Some(LogicalType::String),
                    Repetition::REQUIRED,
                ),
                Col::OptText => (
                    Physical::BYTE_ARRAY,
                    Some(LogicalType::String),
                    Repetition::OPTIONAL,
                ),
                Col::Time | Col::OptTime => (
                    Physical::INT64,
                    Some(LogicalType::timestamp(true, TimeUnit::MICROS)),
                    if matches!(c, Col::Time) {
                        Repetition::REQUIRED
                    } else {
                        Repetition::OPTIONAL
                    },
                ),
                Col::I32 => (Physical::INT32, None, Repetition::REQUIRED),
                Col::I64 => (Physical::INT64, None, Repetition::REQUIRED),
                Col::OptI64 => (Physical::INT64, None, Repetition::OPTIONAL),
                Col::OptF64 => (Physical::DOUBLE, None, Repetition::OPTIONAL),
            };
            Type::primitive_type_builder(n, physical)
                .with_logical_type(logical)
                .with_repetition(rep)
                .build()
                .map(Arc::new)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(
        Type::group_type_builder(name).with_fields(fields).build()?,
    ))
}

/// One column's values for a row group.
enum Values {
    Text(Vec<ByteArray>, Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>, Vec<i16>),
    F64(Vec<f64>, Vec<i16>),
}

impl Values {
    fn for_col(c: Col) -> Values {
        match c {
            Col::Text | Col::OptText => Values::Text(Vec::new(), Vec::new()),
            Col::I32 => Values::I32(Vec::new()),
            Col::Time | Col::OptTime | Col::I64 | Col::OptI64 => {
                Values::I64(Vec::new(), Vec::new())
            }
            Col::OptF64 => Values::F64(Vec::new(), Vec::new()),
        }
    }
}

/// A Parquet file written row group by row group.
struct Writer {
    path: PathBuf,
    tmp: PathBuf,
    cols: Vec<Col>,
    values: Vec<Values>,
    rows: usize,
    w: SerializedFileWriter<std::fs::File>,
}

const GROUP_ROWS: usize = 64 * 1024;

impl Writer {
    fn create(
        path: &Path,
        name: &str,
        format: &str,
        cols: &[(&str, Col)],
    ) -> Result<Writer, ExportError> {
        let err = |e: parquet::errors::ParquetError| ExportError::Parquet {
            path: path.to_path_buf(),
            detail: e.to_string(),
        };
        let tmp = path.with_extension("parquet.partial");
        let file = std::fs::File::create(&tmp).map_err(|source| ExportError::Io {
            path: tmp.clone(),
            source,
        })?;
        let props = WriterProperties::builder()
            .set_compression(parquet::basic::Compression::SNAPPY)
            .set_created_by(format!("sandglass {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(vec![KeyValue::new(
                "sandglass.format".to_string(),
                format.to_string(),
            )]))
            .build();
        let w = SerializedFileWriter::new(file, schema(name, cols).map_err(err)?, Arc::new(props))
            .map_err(err)?;
        Ok(Writer {
            path: path.to_path_buf(),
            tmp,
            cols: cols.iter().map(|c| c.1).collect(),
            values: cols.iter().map(|c| Values::for_col(c.1)).collect(),
            rows: 0,
            w,
        })
    }

    fn text(&mut self, i: usize, v: Option<&str>) {
        if let Values::Text(vals, defs) = &mut self.values[i] {
            defs.push(i16::from(v.is_some()));
            if let Some(v) = v {
                vals.push(ByteArray::from(v));
            }
        }
    }

    fn i32(&mut self, i: usize, v: i32) {
        if let Values::I32(vals) = &mut self.values[i] {
            vals.push(v);
        }
    }

    fn i64(&mut self, i: usize, v: Option<i64>) {
        if let Values::I64(vals, defs) = &mut self.values[i] {
            defs.push(i16::from(v.is_some()));
            if let Some(v) = v {
                vals.push(v);
            }
        }
    }

    fn f64(&mut self, i: usize, v: Option<f64>) {
        if let Values::F64(vals, defs) = &mut self.values[i] {
            defs.push(i16::from(v.is_some()));
            if let Some(v) = v {
                vals.push(v);
            }
        }
    }

    fn end_row(&mut self) -> Result<(), ExportError> {
        self.rows += 1;
        if self.rows.is_multiple_of(GROUP_ROWS) {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ExportError> {
        let path = self.path.clone();
        let err = |e: parquet::errors::ParquetError| ExportError::Parquet {
            path: path.clone(),
            detail: e.to_string(),
        };
        let pending = match &self.values.first() {
            Some(Values::Text(_, d)) | Some(Values::I64(_, d)) | Some(Values::F64(_, d)) => d.len(),
            Some(Values::I32(v)) => v.len(),
            None => 0,
        };
        if pending == 0 {
            return Ok(());
        }
        let mut rg = self.w.next_row_group().map_err(err)?;
        for (c, v) in self.cols.iter().zip(self.values.iter_mut()) {
            let Some(mut col) = rg.next_column().map_err(err)? else {
                break;
            };
            let optional = matches!(c, Col::OptText | Col::OptTime | Col::OptI64 | Col::OptF64);
            match v {
                Values::Text(vals, defs) => {
                    col.typed::<ByteArrayType>()
                        .write_batch(vals, optional.then_some(defs.as_slice()), None)
                        .map_err(err)?;
                    vals.clear();
                    defs.clear();
                }
                Values::I32(vals) => {
                    col.typed::<Int32Type>()
                        .write_batch(vals, None, None)
                        .map_err(err)?;
                    vals.clear();
                }
                Values::I64(vals, defs) => {
                    col.typed::<Int64Type>()
                        .write_batch(vals, optional.then_some(defs.as_slice()), None)
                        .map_err(err)?;
                    vals.clear();
                    defs.clear();
                }
                Values::F64(vals, defs) => {
                    col.typed::<DoubleType>()
                        .write_batch(vals, optional.then_some(defs.as_slice()), None)
                        .map_err(err)?;
                    vals.clear();
                    defs.clear();
                }
            }
            col.close().map_err(err)?;
        }
        rg.close().map_err(err)?;
        Ok(())
    }

    fn finish(mut self) -> Result<usize, ExportError> {
        self.flush()?;
        let path = self.path.clone();
        self.w.close().map_err(|e| ExportError::Parquet {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        std::fs::rename(&self.tmp, &self.path).map_err(|source| ExportError::Io {
            path: self.path.clone(),
            source,
        })?;
        Ok(self.rows)
    }
}

/// An RFC 3339 time in microseconds since the Unix epoch.
fn micros(t: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_micros()).ok()
}

const RUN_COLUMNS: [(&str, Col); 24] = [
    ("id", Col::Text),
    ("kind", Col::Text),
    ("state", Col::Text),
    ("started_at", Col::Time),
    ("ended_at", Col::OptTime),
    ("host", Col::Text),
    ("kernel", Col::Text),
    ("tool_version", Col::Text),
    ("study", Col::OptText),
    ("path", Col::Text),
    ("command", Col::Text),
    ("cpus", Col::OptI64),
    ("count", Col::OptI64),
    ("missed", Col::OptI64),
    ("p50_ns", Col::OptI64),
    ("p90_ns", Col::OptI64),
    ("p99_ns", Col::OptI64),
    ("p99_9_ns", Col::OptI64),
    ("p99_99_ns", Col::OptI64),
    ("max_ns", Col::OptI64),
    ("noise_share", Col::OptF64),
    ("interruptions_per_s", Col::OptF64),
    ("duration_s", Col::OptF64),
    ("figures", Col::Text),
];

const HISTOGRAM_COLUMNS: [(&str, Col); 8] = [
    ("run_id", Col::Text),
    ("kind", Col::Text),
    ("host", Col::Text),
    ("kernel", Col::Text),
    ("started_at", Col::Time),
    ("cpu", Col::I32),
    ("value_ns", Col::I64),
    ("count", Col::I64),
];

/// Writes `runs.parquet` and `histograms.parquet` of `entries` into `dir` (created if needed).
pub fn export(entries: &[Entry], dir: &Path) -> Result<Exported, ExportError> {
    std::fs::create_dir_all(dir).map_err(|source| ExportError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut out = Exported::default();
    let mut runs = Writer::create(&dir.join("runs.parquet"), "runs", RUNS_FORMAT, &RUN_COLUMNS)?;
    let mut hist = Writer::create(
        &dir.join("histograms.parquet"),
        "histograms",
        HISTOGRAMS_FORMAT,
        &HISTOGRAM_COLUMNS,
    )?;
    for e in entries {
        let started = micros(&e.started_at).unwrap_or(0);
        let f = &e.figures;
        let int = |k: &str| f.get(k).and_then(|v| v.as_f64()).map(|x| x.round() as i64);
        let float = |k: &str| f.get(k).and_then(|v| v.as_f64());
        runs.text(0, Some(&e.id));
        runs.text(1, Some(e.kind.as_str()));
        runs.text(2, Some(&e.state));
        runs.i64(3, Some(started));
        runs.i64(4, e.ended_at.as_deref().and_then(micros));
        runs.text(5, Some(&e.host));
        runs.text(6, Some(&e.kernel));
        runs.text(7, Some(&e.tool_version));
        runs.text(8, e.study.as_deref());
        runs.text(9, Some(&e.path.display().to_string()));
        runs.text(10, Some(&e.command_line.join(" ")));
        for (i, k) in [
            "cpus",
            "count",
            "missed",
            "p50_ns",
            "p90_ns",
            "p99_ns",
            "p99.9_ns",
            "p99.99_ns",
            "max_ns",
        ]
        .iter()
        .enumerate()
        {
            runs.i64(11 + i, int(k));
        }
        runs.f64(20, float("noise_share"));
        runs.f64(21, float("interruptions_per_s"));
        let duration = match (
            micros(&e.started_at),
            e.ended_at.as_deref().and_then(micros),
        ) {
            (Some(a), Some(b)) if b >= a => Some((b - a) as f64 / 1e6),
            _ => None,
        };
        runs.f64(22, duration);
        let figures = serde_json::to_string(&e.figures).unwrap_or_else(|_| "{}".into());
        runs.text(23, Some(&figures));
        runs.end_row()?;
        out.runs += 1;
        if !matches!(e.kind, crate::RunKind::Timer | crate::RunKind::Noise) {
            continue;
        }
        let totals = RunReader::open_kept(&e.path)
            .map_err(|err| err.to_string())
            .and_then(|r| crate::store::data::totals(&r).map_err(|err| err.to_string()));
        let totals = match totals {
            Ok(t) => t,
            Err(why) => {
                out.skipped.push((e.id.clone(), why));
                continue;
            }
        };
        for (cpu, t) in &totals.cpus {
            for v in t.main.iter_recorded() {
                hist.text(0, Some(&e.id));
                hist.text(1, Some(e.kind.as_str()));
                hist.text(2, Some(&e.host));
                hist.text(3, Some(&e.kernel));
                hist.i64(4, Some(started));
                hist.i32(5, *cpu as i32);
                let value = t.main.highest_equivalent(v.value_iterated_to());
                hist.i64(6, Some(value.min(i64::MAX as u64) as i64));
                hist.i64(7, Some(v.count_at_value() as i64));
                hist.end_row()?;
                out.histogram_rows += 1;
            }
        }
    }
    runs.finish()?;
    hist.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_become_microseconds() {
        assert_eq!(micros("1970-01-01T00:00:01Z"), Some(1_000_000));
        assert_eq!(micros("2026-11-27T06:10:58Z"), Some(1_795_759_858_000_000));
        assert_eq!(micros("yesterday"), None);
    }
}
