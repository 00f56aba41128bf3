//! The per-sample tables of a run (timer samples, interruptions, Hourglass trace records, LAT
//! wakeups, periodic jobs, per-second timelines) in Apache Parquet, written as the run goes.
//!
//! **Why Parquet.** A run of any length keeps every sample, and the files go where latency data
//! goes next: DuckDB, pandas, Polars, Spark and Trino read Parquet directly. Integer columns
//! are written with the `DELTA_BINARY_PACKED` encoding and Snappy compression: consecutive
//! release times differ by the period, consecutive release indexes by one, so a timer sample
//! costs about two bytes, nearly all of them in its lateness. Text columns (an
//! interval's end reason, a job's outcome) are dictionary-encoded. Every column is required
//! (no nulls); times are signed 64-bit integers in nanoseconds from the run's time zero.
//!
//! **Segments and row groups.** A table is a sequence of segments `STEM-NNNN.parquet`, each a
//! complete Parquet file, in time order: `SELECT … FROM 'RUN/samples-*.parquet'` reads them all.
//! A segment covers at most [`Limits::segment_ns`] of the run (ten minutes by default); within it,
//! rows go out in row groups of at most [`Limits::row_group_rows`] rows or
//! [`Limits::row_group_ns`] of the run, whichever comes first; the first row group of a table is
//! written once its first row has waited [`Limits::first_row_group_ns`] (250 ms), so that a run
//! killed in its first seconds keeps what it measured. Memory is the row-group buffer,
//! allocated once when the table is created, plus the footer of the open segment, which holds
//! each of its row groups' metadata (about 4.4 KB in memory for a timer samples row group) until
//! the segment closes: a segment's length bounds it (1.3 MB for ten minutes of 2 s row groups),
//! so memory does not grow with the length of the run.
//!
//! **Crashes.** A Parquet file is readable only once its footer is written. The open segment is
//! therefore written under the name `STEM-NNNN.parquet.partial`, and after each row group has
//! reached the disk the row group's metadata is appended to `STEM-NNNN.parquet.rowgroups`. If
//! the process ends without closing the segment (SIGKILL, a crash, power loss, a full disk),
//! [`recover`] cuts the partial file after its last complete row group, writes the footer that
//! the metadata describes and renames it into place: what was lost is at most the rows of the
//! row group being filled (two seconds by default, the first 250 ms of a table's rows before
//! its first row group). The next sandglass that starts does this
//! for every run it finds abandoned.
//!
//! **Run format 1.** Runs written before format 2 kept these tables as CSV files (`samples.csv`
//! and so on). [`TableReader`] reads both, so every reader streams either.

use super::{FileEntry, ReadError, RunReader, StoreError};
use parquet::basic::{Compression, Encoding, LogicalType, Repetition, Type as Physical};
use parquet::column::reader::ColumnReader;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::metadata::{
    FileMetaData, KeyValue, ParquetMetaData, ParquetMetaDataReader, ParquetMetaDataWriter,
    RowGroupMetaData,
};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{ColumnPath, SchemaDescriptor, Type};
use sha2::{Digest, Sha256};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The type of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    I32,
    I64,
    Bool,
    /// Short UTF-8 strings from a small set (dictionary-encoded).
    Text,
}

/// One column of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub kind: Kind,
}

const fn col(name: &'static str, kind: Kind) -> Column {
    Column { name, kind }
}

/// A table: its file names, format and columns.
#[derive(Debug, PartialEq, Eq)]
pub struct Table {
    /// Segment files are `STEM-NNNN.parquet`.
    pub stem: &'static str,
    /// The format recorded in the manifest for every segment.
    pub format: &'static str,
    pub description: &'static str,
    pub columns: &'static [Column],
    /// The CSV file that held this table in run format 1.
    pub legacy_csv: &'static str,
}

impl Table {
    /// The index of column `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// The file name of segment `index`.
    pub fn segment_name(&self, index: u32) -> String {
        format!("{}-{index:04}.parquet", self.stem)
    }

    /// The segment index of `name` when it is a segment of this table.
    pub fn segment_index(&self, name: &str) -> Option<u32> {
        let digits = name
            .strip_prefix(self.stem)?
            .strip_prefix('-')?
            .strip_suffix(".parquet")?;
        if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }

    fn schema(&self) -> Result<Arc<Type>, parquet::errors::ParquetError> {
        let fields = self
            .columns
            .iter()
            .map(|c| {
                let b = match c.kind {
                    Kind::I32 => Type::primitive_type_builder(c.name, Physical::INT32),
                    Kind::I64 => Type::primitive_type_builder(c.name, Physical::INT64),
                    Kind::Bool => Type::primitive_type_builder(c.name, Physical::BOOLEAN),
                    Kind::Text => Type::primitive_type_builder(c.name, Physical::BYTE_ARRAY)
                        .with_logical_type(Some(LogicalType::String)),
                };
                b.with_repetition(Repetition::REQUIRED)
                    .build()
                    .map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(
            Type::group_type_builder(self.stem)
                .with_fields(fields)
                .build()?,
        ))
    }

    fn properties(&self) -> WriterProperties {
        let mut b = WriterProperties::builder()
            .set_writer_version(WriterVersion::PARQUET_2_0)
            .set_compression(Compression::SNAPPY)
            .set_dictionary_enabled(false)
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_created_by(format!("sandglass {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(vec![KeyValue::new(
                "sandglass.format".to_string(),
                self.format.to_string(),
            )]));
        for c in self.columns {
            let path = ColumnPath::from(c.name);
            b = match c.kind {
                Kind::I32 | Kind::I64 => b.set_column_encoding(path, Encoding::DELTA_BINARY_PACKED),
                Kind::Bool => b.set_column_encoding(path, Encoding::RLE),
                Kind::Text => b.set_column_dictionary_enabled(path, true),
            };
        }
        b.build()
    }
}

/// The tables of each kind of run.
pub mod tables {
    use super::{col, Kind::*, Table};

    /// The tables a run of `kind` may have.
    pub fn of_kind(kind: &crate::RunKind) -> &'static [&'static Table] {
        use crate::RunKind;
        match kind {
            RunKind::Timer => &[&TIMER_SAMPLES, &TIMER_TIMELINE, &KERNEL],
            RunKind::Noise => &[&NOISE_INTERRUPTIONS, &NOISE_TIMELINE, &KERNEL],
            RunKind::Hourglass => &[&TRACE, &LATENCY, &JOBS, &KERNEL],
            _ => &[],
        }
    }

    /// `timer`: every release.
    pub const TIMER_SAMPLES: Table = Table {
        stem: "samples",
        format: "sandglass-timer-samples-parquet/1",
        description: "every release: cpu, index per CPU, release time and lateness in ns from the run's start, true when it was missed (the thread woke after a later release was due)",
        columns: &[
            col("cpu", I32),
            col("release", I64),
            col("release_ns", I64),
            col("lateness_ns", I64),
            col("missed", Bool),
        ],
        legacy_csv: "samples.csv",
    };

    /// The format of [`TIMER_TIMELINE`]: version 2 added the interval columns (version 1, and
    /// format-1 runs' CSV, have the first eight columns only).
    pub const TIMER_TIMELINE_FORMAT: &str = "sandglass-timer-timeline-parquet/2";

    /// `timer`: one row per CPU and second of release time.
    pub const TIMER_TIMELINE: Table = Table {
        stem: "timeline",
        format: TIMER_TIMELINE_FORMAT,
        description: "per CPU and second of release time: releases, missed releases, lateness min, p50, p99 (3 significant digits) and max in ns; the shortest and the longest interval between successive wakeups in ns (-1: none in that second)",
        columns: &[
            col("cpu", I32),
            col("second", I64),
            col("releases", I64),
            col("missed", I64),
            col("min_ns", I64),
            col("p50_ns", I64),
            col("p99_ns", I64),
            col("max_ns", I64),
            col("interval_min_ns", I64),
            col("interval_max_ns", I64),
        ],
        legacy_csv: "timeline.csv",
    };

    /// `noise`: every interruption.
    pub const NOISE_INTERRUPTIONS: Table = Table {
        stem: "interruptions",
        format: "sandglass-interruptions-parquet/1",
        description: "every interruption: cpu, start in ns from the run's start (the last read before it), duration in ns",
        columns: &[col("cpu", I32), col("start_ns", I64), col("duration_ns", I64)],
        legacy_csv: "interruptions.csv",
    };

    /// `noise`: one row per CPU and second.
    pub const NOISE_TIMELINE: Table = Table {
        stem: "timeline",
        format: "sandglass-noise-timeline-parquet/1",
        description: "per CPU and second: interruptions, noise in ns, longest interruption in ns",
        columns: &[
            col("cpu", I32),
            col("second", I64),
            col("interruptions", I64),
            col("noise_ns", I64),
            col("max_ns", I64),
        ],
        legacy_csv: "timeline.csv",
    };

    /// `hourglass`: the execution trace.
    pub const TRACE: Table = Table {
        stem: "trace",
        format: "sandglass-trace-parquet/1",
        description: "one row per interval of continuous CPU time, in order of start: thread, cpu, start_ns and end_ns from the run's start, the raw counter values, end_reason",
        columns: &[
            col("thread", I32),
            col("cpu", I32),
            col("start_ns", I64),
            col("end_ns", I64),
            col("start_counter", I64),
            col("end_counter", I64),
            col("end_reason", Text),
        ],
        legacy_csv: "trace.csv",
    };

    /// Any run with `--trace`: the kernel's events on the measured CPUs (see
    /// [`crate::causes::kernel_store`] for what each column holds per event).
    pub const KERNEL: Table = Table {
        stem: "kernel",
        format: "sandglass-kernel-parquet/1",
        description: "the kernel's events on the measured CPUs (all, or the windows around the largest delays; see causes.kernel.stored): mono_ns (CLOCK_MONOTONIC), cpu, pid (current task), event (the kernel's name), comm, id, prio, prev_comm, prev_id, prev_prio, prev_state, addr, function, value, value2 (their meaning per event in docs/causes.md)",
        columns: &[
            col("mono_ns", I64),
            col("cpu", I32),
            col("pid", I32),
            col("event", Text),
            col("comm", Text),
            col("id", I32),
            col("prio", I32),
            col("prev_comm", Text),
            col("prev_id", I32),
            col("prev_prio", I32),
            col("prev_state", I64),
            col("addr", I64),
            col("function", I64),
            col("value", I64),
            col("value2", I64),
        ],
        legacy_csv: "",
    };

    /// `hourglass`: LAT wakeups.
    pub const LATENCY: Table = Table {
        stem: "latency",
        format: "sandglass-latency-parquet/1",
        description: "one row per LAT wakeup: thread, wakeup index, lateness_ns",
        columns: &[
            col("thread", I32),
            col("wakeup", I64),
            col("lateness_ns", I64),
        ],
        legacy_csv: "latency.csv",
    };

    /// `hourglass`: PERIODIC jobs and CPU_PERIODIC windows.
    pub const JOBS: Table = Table {
        stem: "jobs",
        format: "sandglass-jobs-parquet/1",
        description: "one row per PERIODIC job or CPU_PERIODIC window: release, deadline, first run, end and CPU received in ns, outcome hit or miss",
        columns: &[
            col("thread", I32),
            col("job", I64),
            col("release_ns", I64),
            col("deadline_ns", I64),
            col("first_run_ns", I64),
            col("end_ns", I64),
            col("received_ns", I64),
            col("outcome", Text),
        ],
        legacy_csv: "jobs.csv",
    };
}

/// The values of one column.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    Text(Vec<ByteArray>),
}

impl Values {
    fn with_capacity(kind: Kind, n: usize) -> Values {
        match kind {
            Kind::I32 => Values::I32(Vec::with_capacity(n)),
            Kind::I64 => Values::I64(Vec::with_capacity(n)),
            Kind::Bool => Values::Bool(Vec::with_capacity(n)),
            Kind::Text => Values::Text(Vec::with_capacity(n)),
        }
    }

    fn clear(&mut self) {
        match self {
            Values::I32(v) => v.clear(),
            Values::I64(v) => v.clear(),
            Values::Bool(v) => v.clear(),
            Values::Text(v) => v.clear(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Values::I32(v) => v.len(),
            Values::I64(v) => v.len(),
            Values::Bool(v) => v.len(),
            Values::Text(v) => v.len(),
        }
    }

    /// Writes every element once, so that the pages behind the capacity are present.
    fn touch(&mut self) {
        let n = match self {
            Values::I32(v) => v.capacity(),
            Values::I64(v) => v.capacity(),
            Values::Bool(v) => v.capacity(),
            Values::Text(v) => v.capacity(),
        };
        match self {
            Values::I32(v) => v.resize(n, 0),
            Values::I64(v) => v.resize(n, 0),
            Values::Bool(v) => v.resize(n, false),
            Values::Text(v) => v.resize(n, ByteArray::new()),
        }
        self.clear();
    }
}

/// Rows of a table, column by column: what a writer buffers and a reader hands out.
#[derive(Clone, Debug)]
pub struct Batch {
    table: &'static Table,
    /// The columns present, as indexes into `table.columns`, with their values.
    present: Vec<usize>,
    values: Vec<Values>,
    len: usize,
}

impl Batch {
    /// An empty batch of every column of `table` with room for `capacity` rows, its memory
    /// touched.
    pub fn new(table: &'static Table, capacity: usize) -> Batch {
        Batch::of(table, (0..table.columns.len()).collect(), capacity)
    }

    fn of(table: &'static Table, present: Vec<usize>, capacity: usize) -> Batch {
        let values = present
            .iter()
            .map(|&i| {
                let mut v = Values::with_capacity(table.columns[i].kind, capacity);
                v.touch();
                v
            })
            .collect();
        Batch {
            table,
            present,
            values,
            len: 0,
        }
    }

    pub fn table(&self) -> &'static Table {
        self.table
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rows the batch holds without growing.
    pub fn capacity(&self) -> usize {
        match self.values.first() {
            Some(Values::I32(v)) => v.capacity(),
            Some(Values::I64(v)) => v.capacity(),
            Some(Values::Bool(v)) => v.capacity(),
            Some(Values::Text(v)) => v.capacity(),
            None => 0,
        }
    }

    pub fn clear(&mut self) {
        for v in &mut self.values {
            v.clear();
        }
        self.len = 0;
    }

    /// Appends to column `i` (its index in the table) of a batch of every column.
    pub fn push_i32(&mut self, i: usize, x: i32) {
        if let Some(Values::I32(v)) = self.values.get_mut(i) {
            v.push(x);
        }
    }

    pub fn push_i64(&mut self, i: usize, x: i64) {
        if let Some(Values::I64(v)) = self.values.get_mut(i) {
            v.push(x);
        }
    }

    pub fn push_bool(&mut self, i: usize, x: bool) {
        if let Some(Values::Bool(v)) = self.values.get_mut(i) {
            v.push(x);
        }
    }

    pub fn push_text(&mut self, i: usize, x: &ByteArray) {
        if let Some(Values::Text(v)) = self.values.get_mut(i) {
            v.push(x.clone());
        }
    }

    /// Ends a row whose every column was pushed once. A row with a column missing or pushed
    /// twice is a programming error, reported by [`Batch::check`] when the batch is written.
    pub fn end_row(&mut self) {
        self.len += 1;
    }

    /// True when every column holds exactly `len` values.
    fn check(&self) -> bool {
        self.values.iter().all(|v| v.len() == self.len)
    }

    fn position(&self, name: &str) -> Result<usize, ReadError> {
        self.present
            .iter()
            .position(|&i| self.table.columns[i].name == name)
            .ok_or_else(|| ReadError::Column {
                table: self.table.stem.to_string(),
                column: name.to_string(),
            })
    }

    fn values(&self, name: &str) -> Result<&Values, ReadError> {
        let p = self.position(name)?;
        Ok(&self.values[p])
    }

    fn wrong_kind(&self, name: &str) -> ReadError {
        ReadError::Column {
            table: self.table.stem.to_string(),
            column: format!("{name} (of another type)"),
        }
    }

    /// Column `name` as 32-bit integers.
    pub fn i32s(&self, name: &str) -> Result<&[i32], ReadError> {
        match self.values(name)? {
            Values::I32(v) => Ok(v),
            _ => Err(self.wrong_kind(name)),
        }
    }

    /// Column `name` as 64-bit integers.
    pub fn i64s(&self, name: &str) -> Result<&[i64], ReadError> {
        match self.values(name)? {
            Values::I64(v) => Ok(v),
            _ => Err(self.wrong_kind(name)),
        }
    }

    pub fn bools(&self, name: &str) -> Result<&[bool], ReadError> {
        match self.values(name)? {
            Values::Bool(v) => Ok(v),
            _ => Err(self.wrong_kind(name)),
        }
    }

    pub fn texts(&self, name: &str) -> Result<&[ByteArray], ReadError> {
        match self.values(name)? {
            Values::Text(v) => Ok(v),
            _ => Err(self.wrong_kind(name)),
        }
    }
}

/// When a writer ends a row group and a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Rows buffered before a row group is written (the buffer's fixed size).
    pub row_group_rows: usize,
    /// Longest stretch of the run one row group covers (from one multiple of it to the next),
    /// which is also the most a crash loses.
    pub row_group_ns: u64,
    /// Longest stretch of the run one segment covers (from one multiple of it to the next).
    pub segment_ns: u64,
    /// How long the first row group of a table waits before it is written: short, so that a
    /// run killed in its first seconds still keeps samples (250 ms by default).
    pub first_row_group_ns: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            row_group_rows: 1 << 16,
            row_group_ns: 2_000_000_000,
            segment_ns: 600_000_000_000,
            first_row_group_ns: 250_000_000,
        }
    }
}

impl Limits {
    /// For a per-second timeline, a few rows a second: row groups of a minute, since a row
    /// group's metadata, which the open segment's footer keeps in memory until the segment
    /// closes, would otherwise outweigh its rows.
    pub fn timeline() -> Limits {
        Limits {
            row_group_rows: 4096,
            row_group_ns: 60_000_000_000,
            ..Limits::default()
        }
    }
}

/// Parquet allows at most this many row groups in one file (the ordinal is 16 bits).
const MAX_ROW_GROUPS: usize = 30_000;

/// A file that hashes what is written to it.
struct HashingFile {
    file: std::fs::File,
    hasher: Sha256,
    bytes: u64,
}

impl Write for HashingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The open segment of a writer.
struct Segment {
    index: u32,
    partial: PathBuf,
    journal_path: PathBuf,
    writer: SerializedFileWriter<HashingFile>,
    journal: std::fs::File,
    /// Run time at which the segment's first row group began.
    started_ns: u64,
}

fn partial_name(table: &Table, index: u32) -> String {
    format!("{}.partial", table.segment_name(index))
}

fn journal_name(table: &Table, index: u32) -> String {
    format!("{}.rowgroups", table.segment_name(index))
}

/// Writes one table of a run, segment by segment, as rows arrive.
pub struct TableWriter {
    table: &'static Table,
    dir: PathBuf,
    props: Arc<WriterProperties>,
    schema: Arc<Type>,
    descr: Arc<SchemaDescriptor>,
    limits: Limits,
    buf: Batch,
    /// Run time of the first row in `buf`.
    buf_since_ns: Option<u64>,
    segment: Option<Segment>,
    next_index: u32,
    closed: Vec<FileEntry>,
    rows: u64,
}

impl TableWriter {
    /// A writer of `table` into the run directory `dir`; nothing is written until the first row
    /// group is full or due.
    pub fn create(
        dir: &Path,
        table: &'static Table,
        limits: Limits,
    ) -> Result<TableWriter, StoreError> {
        let schema = table.schema().map_err(|e| StoreError::Parquet {
            path: dir.join(table.segment_name(0)),
            detail: e.to_string(),
        })?;
        let descr = Arc::new(SchemaDescriptor::new(schema.clone()));
        Ok(TableWriter {
            table,
            dir: dir.to_path_buf(),
            props: Arc::new(table.properties()),
            schema,
            descr,
            limits,
            buf: Batch::new(table, limits.row_group_rows.max(1)),
            buf_since_ns: None,
            segment: None,
            next_index: 0,
            closed: Vec::new(),
            rows: 0,
        })
    }

    pub fn table(&self) -> &'static Table {
        self.table
    }

    /// Rows accepted so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The buffer to push one row into; call [`TableWriter::end_row`] after it.
    pub fn row(&mut self) -> &mut Batch {
        &mut self.buf
    }

    /// Ends the row just pushed, at run time `now_ns`; writes a row group when the buffer is full.
    pub fn end_row(&mut self, now_ns: u64) -> Result<(), StoreError> {
        self.buf.end_row();
        self.rows += 1;
        self.buf_since_ns.get_or_insert(now_ns);
        if self.buf.len() >= self.buf.capacity() {
            self.flush(now_ns)?;
        }
        Ok(())
    }

    /// Writes the buffered rows when they have waited [`Limits::row_group_ns`], and starts a new
    /// segment when the open one covers [`Limits::segment_ns`]. Call it as the run goes.
    ///
    /// Both are aligned to the run's clock: a row group closes when the run passes a multiple
    /// of [`Limits::row_group_ns`] after its first row, a segment when it passes a multiple of
    /// [`Limits::segment_ns`], so that what a crash can lose is the stretch since the last such
    /// boundary, however the calls fall.
    pub fn tick(&mut self, now_ns: u64) -> Result<(), StoreError> {
        let crossed = |since: u64, every: u64| now_ns / every.max(1) > since / every.max(1);
        if let Some(since) = self.buf_since_ns {
            let first = self.next_index == 0 && self.segment.is_none();
            let first_due = first && now_ns.saturating_sub(since) >= self.limits.first_row_group_ns;
            if first_due || crossed(since, self.limits.row_group_ns) {
                self.flush(now_ns)?;
            }
        }
        if let Some(s) = &self.segment {
            if crossed(s.started_ns, self.limits.segment_ns) {
                self.close_segment()?;
            }
        }
        Ok(())
    }

    fn err(&self, path: &Path, e: parquet::errors::ParquetError) -> StoreError {
        parquet_error(path, e)
    }

    fn io(path: &Path, source: std::io::Error) -> StoreError {
        StoreError::Write {
            path: path.to_path_buf(),
            source,
        }
    }

    fn open_segment(&mut self, now_ns: u64) -> Result<&mut Segment, StoreError> {
        if self.segment.is_none() {
            let index = self.next_index;
            let partial = self.dir.join(partial_name(self.table, index));
            let journal_path = self.dir.join(journal_name(self.table, index));
            let file = std::fs::File::create(&partial).map_err(|e| Self::io(&partial, e))?;
            let journal =
                std::fs::File::create(&journal_path).map_err(|e| Self::io(&journal_path, e))?;
            let sink = HashingFile {
                file,
                hasher: Sha256::new(),
                bytes: 0,
            };
            let writer = SerializedFileWriter::new(sink, self.schema.clone(), self.props.clone())
                .map_err(|e| self.err(&partial, e))?;
            self.next_index += 1;
            self.segment = Some(Segment {
                index,
                partial,
                journal_path,
                writer,
                journal,
                started_ns: now_ns,
            });
        }
        match self.segment.as_mut() {
            Some(s) => Ok(s),
            None => unreachable!("the segment was opened above"),
        }
    }

    /// Writes the buffered rows as one row group now, if there are any.
    pub fn flush(&mut self, now_ns: u64) -> Result<(), StoreError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if !self.buf.check() {
            return Err(StoreError::Parquet {
                path: self.dir.join(self.table.segment_name(self.next_index)),
                detail: "a row was pushed with a column missing (a bug in sandglass)".into(),
            });
        }
        let started = self.buf_since_ns.unwrap_or(now_ns);
        let descr = self.descr.clone();
        let buf = std::mem::replace(&mut self.buf, Batch::of(self.table, Vec::new(), 0));
        let result = (|| -> Result<usize, StoreError> {
            let seg = self.open_segment(started)?;
            let path = seg.partial.clone();
            let perr = |e: parquet::errors::ParquetError| parquet_error(&path, e);
            let mut rg = seg.writer.next_row_group().map_err(perr)?;
            let mut i = 0;
            while let Some(mut c) = rg.next_column().map_err(perr)? {
                match &buf.values[i] {
                    Values::I32(v) => c.typed::<Int32Type>().write_batch(v, None, None),
                    Values::I64(v) => c.typed::<Int64Type>().write_batch(v, None, None),
                    Values::Bool(v) => c.typed::<BoolType>().write_batch(v, None, None),
                    Values::Text(v) => c.typed::<ByteArrayType>().write_batch(v, None, None),
                }
                .map_err(perr)?;
                c.close().map_err(perr)?;
                i += 1;
            }
            rg.close().map_err(perr)?;
            seg.writer.flush().map_err(|e| Self::io(&path, e))?;
            seg.writer
                .inner()
                .file
                .sync_data()
                .map_err(|e| Self::io(&path, e))?;
            // The row group is on disk: record what a recovery needs to close the file.
            let end = seg.writer.bytes_written() as u64;
            let Some(last) = seg.writer.flushed_row_groups().last() else {
                return Ok(0);
            };
            let blob = row_group_blob(&descr, last).map_err(perr)?;
            let mut entry = Vec::with_capacity(blob.len() + 12);
            entry.extend_from_slice(&end.to_le_bytes());
            entry.extend_from_slice(&(blob.len() as u32).to_le_bytes());
            entry.extend_from_slice(&blob);
            let jp = seg.journal_path.clone();
            seg.journal
                .write_all(&entry)
                .and_then(|()| seg.journal.sync_data())
                .map_err(|e| Self::io(&jp, e))?;
            Ok(seg.writer.flushed_row_groups().len())
        })();
        self.buf = buf;
        self.buf.clear();
        self.buf_since_ns = None;
        let groups = result?;
        if groups >= MAX_ROW_GROUPS {
            self.close_segment()?;
        }
        Ok(())
    }

    fn close_segment(&mut self) -> Result<(), StoreError> {
        let Some(seg) = self.segment.take() else {
            return Ok(());
        };
        let name = self.table.segment_name(seg.index);
        let path = self.dir.join(&name);
        let sink = seg
            .writer
            .into_inner()
            .map_err(|e| self.err(&seg.partial, e))?;
        sink.file
            .sync_all()
            .map_err(|e| Self::io(&seg.partial, e))?;
        std::fs::rename(&seg.partial, &path).map_err(|e| Self::io(&path, e))?;
        let _ = std::fs::remove_file(&seg.journal_path);
        self.closed.push(FileEntry {
            name,
            bytes: sink.bytes,
            sha256: super::sha256_hex_of(sink.hasher),
            format: self.table.format.to_string(),
            description: self.table.description.to_string(),
        });
        Ok(())
    }

    /// Writes what is buffered, closes the open segment, and returns every segment written.
    pub fn finish(mut self, now_ns: u64) -> Result<Vec<FileEntry>, StoreError> {
        self.flush(now_ns)?;
        self.close_segment()?;
        Ok(self.closed)
    }

    /// The segments closed so far (a writer that failed leaves its open segment to
    /// [`recover`]).
    pub fn closed(&self) -> &[FileEntry] {
        &self.closed
    }
}

/// The metadata of one row group, serialised as a Parquet footer of a file holding only it.
fn row_group_blob(
    descr: &Arc<SchemaDescriptor>,
    rg: &RowGroupMetaData,
) -> Result<Vec<u8>, parquet::errors::ParquetError> {
    let md = ParquetMetaData::new(
        FileMetaData::new(2, rg.num_rows(), None, None, descr.clone(), None),
        vec![rg.clone()],
    );
    let mut out = Vec::new();
    ParquetMetaDataWriter::new(&mut out, &md)
        .with_preserve_page_index_locations(false)
        .finish()?;
    Ok(out)
}

/// What [`recover`] did with one partial segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovered {
    /// Closed after its last complete row group and renamed to `name`.
    Closed { name: String, rows: u64 },
    /// Held no complete row group and was removed.
    Empty { name: String },
}

/// Closes every partial segment in `dir` (left by a process that ended without closing it)
/// after its last complete row group, and renames it into place.
pub fn recover(dir: &Path) -> Result<Vec<Recovered>, StoreError> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|source| StoreError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut partials: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".parquet.partial"))
        .collect();
    partials.sort();
    for p in partials {
        let name = p.trim_end_matches(".partial").to_string();
        out.push(recover_one(dir, &name)?);
    }
    Ok(out)
}

fn recover_one(dir: &Path, name: &str) -> Result<Recovered, StoreError> {
    let partial = dir.join(format!("{name}.partial"));
    let journal = dir.join(format!("{name}.rowgroups"));
    let io = |path: &Path, source| StoreError::Write {
        path: path.to_path_buf(),
        source,
    };
    // Neither file is touched unless both are regular files (never a FIFO, a device or a link
    // planted beside a killed run), and the journal is read only up to its bound.
    let refused = |e: crate::bounded::BoundedError| StoreError::Write {
        path: e.path().to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    };
    crate::bounded::open(&partial, crate::bounded::Links::Refuse).map_err(refused)?;
    let bytes = match crate::bounded::read(
        &journal,
        crate::bounded::Links::Refuse,
        crate::bounded::JOURNAL_BYTES,
        "a row-group journal",
    ) {
        Ok(b) => b,
        Err(crate::bounded::BoundedError::NotFound { .. }) => Vec::new(),
        Err(e) => return Err(refused(e)),
    };
    let mut groups: Vec<RowGroupMetaData> = Vec::new();
    let mut schema: Option<Arc<SchemaDescriptor>> = None;
    let mut end = 0u64;
    let mut at = 0usize;
    // Entries: data end (u64), blob length (u32), blob; a torn last entry is ignored.
    while at + 12 <= bytes.len() {
        let mut e8 = [0u8; 8];
        e8.copy_from_slice(&bytes[at..at + 8]);
        let mut l4 = [0u8; 4];
        l4.copy_from_slice(&bytes[at + 8..at + 12]);
        let len = u32::from_le_bytes(l4) as usize;
        let Some(blob) = bytes.get(at + 12..at + 12 + len) else {
            break;
        };
        if blob.len() < 8 {
            break;
        }
        let Ok(md) = ParquetMetaDataReader::decode_metadata(&blob[..blob.len() - 8]) else {
            break;
        };
        schema.get_or_insert_with(|| md.file_metadata().schema_descr_ptr());
        groups.extend(md.row_groups().iter().cloned());
        end = u64::from_le_bytes(e8);
        at += 12 + len;
    }
    let file_len = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
    let Some(schema) = schema.filter(|_| end > 0 && end <= file_len) else {
        let _ = std::fs::remove_file(&partial);
        let _ = std::fs::remove_file(&journal);
        return Ok(Recovered::Empty {
            name: name.to_string(),
        });
    };
    let rows: i64 = groups.iter().map(|g| g.num_rows()).sum();
    let md = ParquetMetaData::new(
        FileMetaData::new(
            2,
            rows,
            Some(format!(
                "sandglass {} (recovered)",
                env!("CARGO_PKG_VERSION")
            )),
            None,
            schema,
            None,
        ),
        groups,
    );
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
    }
    let mut f = options.open(&partial).map_err(|e| io(&partial, e))?;
    if !f.metadata().map_err(|e| io(&partial, e))?.is_file() {
        return Err(io(
            &partial,
            std::io::Error::other("not a regular file; left as it is"),
        ));
    }
    f.set_len(end).map_err(|e| io(&partial, e))?;
    f.seek(SeekFrom::Start(end)).map_err(|e| io(&partial, e))?;
    let mut footer = Vec::new();
    ParquetMetaDataWriter::new(&mut footer, &md)
        .with_preserve_page_index_locations(false)
        .finish()
        .map_err(|e| parquet_error(&partial, e))?;
    f.write_all(&footer)
        .and_then(|()| f.sync_all())
        .map_err(|e| io(&partial, e))?;
    let target = dir.join(name);
    std::fs::rename(&partial, &target).map_err(|e| io(&target, e))?;
    let _ = std::fs::remove_file(&journal);
    Ok(Recovered::Closed {
        name: name.to_string(),
        rows: rows.max(0) as u64,
    })
}

/// Rows per batch handed out by a reader.
pub const READ_BATCH: usize = 1 << 16;

/// Where a table's rows are, in a run directory.
#[derive(Clone, Debug)]
enum Source {
    /// Parquet segments, in order.
    Segments(Vec<FileEntry>),
    /// A run-format-1 CSV file.
    Csv(FileEntry),
}

/// Reads one table of a run, batch by batch, whichever format the run was written in. Each file
/// is checked against its size and SHA-256 in the manifest before its rows are used.
pub struct TableReader<'r> {
    dir: &'r Path,
    table: &'static Table,
    source: Source,
}

impl<'r> TableReader<'r> {
    /// The reader of `table` in `run`, or `None` when the run does not have the table.
    pub fn open(run: &'r RunReader, table: &'static Table) -> Option<TableReader<'r>> {
        TableReader::of_files(run.path(), &run.manifest.files, table)
    }

    /// The reader of `table` among the files `files` of run directory `dir` (a run whose
    /// manifest is not written yet).
    pub fn of_files(
        dir: &'r Path,
        files: &[FileEntry],
        table: &'static Table,
    ) -> Option<TableReader<'r>> {
        let mut segments: Vec<(u32, FileEntry)> = files
            .iter()
            .filter_map(|f| table.segment_index(&f.name).map(|i| (i, f.clone())))
            .collect();
        segments.sort_by_key(|s| s.0);
        let source = if !segments.is_empty() {
            Source::Segments(segments.into_iter().map(|s| s.1).collect())
        } else {
            let csv = files
                .iter()
                .find(|f| f.name == table.legacy_csv && f.format.contains(csv_family(table)))?;
            Source::Csv(csv.clone())
        };
        Some(TableReader { dir, table, source })
    }

    pub fn table(&self) -> &'static Table {
        self.table
    }

    /// Whether every file of the table is of the table's current format (a file of an older
    /// version may lack the columns added since).
    pub fn is_current(&self) -> bool {
        self.files().iter().all(|f| f.format == self.table.format)
    }

    /// The files the table is read from.
    pub fn files(&self) -> Vec<&FileEntry> {
        match &self.source {
            Source::Segments(v) => v.iter().collect(),
            Source::Csv(f) => vec![f],
        }
    }

    /// The number of rows, from the segments' footers (or by counting a CSV file's lines).
    pub fn rows(&self) -> Result<u64, ReadError> {
        match &self.source {
            Source::Segments(v) => {
                let mut n = 0u64;
                for f in v {
                    let r = self.parquet(f)?;
                    n += r.metadata().file_metadata().num_rows().max(0) as u64;
                }
                Ok(n)
            }
            Source::Csv(_) => {
                let mut n = 0u64;
                self.scan(&[], |b| {
                    n += b.len() as u64;
                    Ok(())
                })?;
                Ok(n)
            }
        }
    }

    fn parquet(&self, f: &FileEntry) -> Result<SerializedFileReader<std::fs::File>, ReadError> {
        let file = super::verify_open(self.dir, f)?;
        let path = self.dir.join(&f.name);
        SerializedFileReader::new(file).map_err(|e| ReadError::Parquet {
            path,
            detail: e.to_string(),
        })
    }

    /// Calls `each` with successive batches of at most [`READ_BATCH`] rows holding the columns
    /// `columns` (every column when empty), in the table's order.
    pub fn scan<E: From<ReadError>>(
        &self,
        columns: &[&str],
        mut each: impl FnMut(&Batch) -> Result<(), E>,
    ) -> Result<(), E> {
        self.scan_while(columns, |b| each(b).map(|()| true))
    }

    /// [`TableReader::scan`] until `each` returns `false`.
    pub fn scan_while<E: From<ReadError>>(
        &self,
        columns: &[&str],
        mut each: impl FnMut(&Batch) -> Result<bool, E>,
    ) -> Result<(), E> {
        let wanted: Vec<usize> = if columns.is_empty() {
            (0..self.table.columns.len()).collect()
        } else {
            columns
                .iter()
                .map(|c| {
                    self.table.column_index(c).ok_or_else(|| ReadError::Column {
                        table: self.table.stem.to_string(),
                        column: c.to_string(),
                    })
                })
                .collect::<Result<_, _>>()?
        };
        match &self.source {
            Source::Segments(files) => {
                for f in files {
                    if !self.scan_parquet(f, &wanted, &mut each)? {
                        break;
                    }
                }
                Ok(())
            }
            Source::Csv(f) => self.scan_csv(f, &wanted, &mut each),
        }
    }

    /// Returns false when `each` asked to stop.
    fn scan_parquet<E: From<ReadError>>(
        &self,
        f: &FileEntry,
        wanted: &[usize],
        each: &mut impl FnMut(&Batch) -> Result<bool, E>,
    ) -> Result<bool, E> {
        let reader = self.parquet(f)?;
        let path = self.dir.join(&f.name);
        let bad = |detail: String| ReadError::Parquet {
            path: path.clone(),
            detail,
        };
        // The file's columns must be the table's, by name and type.
        let descr = reader.metadata().file_metadata().schema_descr_ptr();
        let mut file_index = Vec::with_capacity(wanted.len());
        for &w in wanted {
            let c = self.table.columns[w];
            let i = (0..descr.num_columns())
                .find(|&i| descr.column(i).name() == c.name)
                .ok_or_else(|| bad(format!("it has no column {}", c.name)))?;
            let physical = descr.column(i).physical_type();
            let ok = matches!(
                (c.kind, physical),
                (Kind::I32, Physical::INT32)
                    | (Kind::I64, Physical::INT64)
                    | (Kind::Bool, Physical::BOOLEAN)
                    | (Kind::Text, Physical::BYTE_ARRAY)
            );
            if !ok || descr.column(i).max_def_level() != 0 || descr.column(i).max_rep_level() != 0 {
                return Err(
                    bad(format!("column {} is not a required {:?}", c.name, c.kind)).into(),
                );
            }
            file_index.push(i);
        }
        let mut batch = Batch::of(self.table, wanted.to_vec(), READ_BATCH);
        for g in 0..reader.num_row_groups() {
            let rg = reader.get_row_group(g).map_err(|e| bad(e.to_string()))?;
            let mut readers = file_index
                .iter()
                .map(|&i| rg.get_column_reader(i))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(e.to_string()))?;
            let expected = rg.metadata().num_rows().max(0) as usize;
            let mut done = 0usize;
            loop {
                batch.clear();
                let mut got: Option<usize> = None;
                for (r, v) in readers.iter_mut().zip(batch.values.iter_mut()) {
                    let n = read_column(r, v, READ_BATCH).map_err(|e| bad(e.to_string()))?;
                    if got.is_some_and(|g| g != n) {
                        return Err(bad("its columns hold different numbers of rows".into()).into());
                    }
                    got = Some(n);
                }
                // With no column asked for, the row group's count alone is read.
                let n = match got {
                    Some(n) => n,
                    None => (expected - done).min(READ_BATCH),
                };
                if n == 0 {
                    break;
                }
                batch.len = n;
                done += n;
                if !each(&batch)? {
                    return Ok(false);
                }
                if done >= expected && readers.is_empty() {
                    break;
                }
            }
            if done != expected {
                return Err(bad(format!(
                    "row group {g} holds {done} rows where its metadata says {expected}"
                ))
                .into());
            }
        }
        Ok(true)
    }

    /// Scans a run-format-1 CSV table with the `csv` crate, which reads quoted fields, CRLF
    /// line ends and a byte order mark as RFC 4180 and spreadsheets write them (a run that was
    /// opened and saved in one still reads).
    fn scan_csv<E: From<ReadError>>(
        &self,
        f: &FileEntry,
        wanted: &[usize],
        each: &mut impl FnMut(&Batch) -> Result<bool, E>,
    ) -> Result<(), E> {
        let file = super::verify_open(self.dir, f)?;
        let path = self.dir.join(&f.name);
        let mut reader = csv::ReaderBuilder::new()
            .flexible(true)
            .trim(csv::Trim::All)
            .buffer_capacity(1 << 16)
            .from_reader(file);
        let csv_error = |e: csv::Error| {
            let line = e.position().map_or(1, |p| p.line()) as usize;
            let what = e.to_string();
            match e.into_kind() {
                csv::ErrorKind::Io(source) => ReadError::Io {
                    path: path.clone(),
                    source,
                },
                _ => ReadError::Data {
                    path: path.clone(),
                    line,
                    what,
                },
            }
        };
        let names = reader.headers().map_err(csv_error)?.clone();
        let mut at = Vec::with_capacity(wanted.len());
        for &w in wanted {
            let c = self.table.columns[w];
            let i = names
                .iter()
                .position(|n| n == c.name)
                .ok_or_else(|| ReadError::Data {
                    path: path.clone(),
                    line: 1,
                    what: format!("the header has no column {}", c.name),
                })?;
            at.push((i, c.kind));
        }
        let mut batch = Batch::of(self.table, wanted.to_vec(), READ_BATCH);
        let mut record = csv::StringRecord::new();
        while reader.read_record(&mut record).map_err(csv_error)? {
            if record.iter().all(str::is_empty) {
                continue;
            }
            let number = record.position().map_or(0, |p| p.line()) as usize;
            for ((i, kind), v) in at.iter().zip(batch.values.iter_mut()) {
                let field = record.get(*i).unwrap_or("");
                let bad = || ReadError::Data {
                    path: path.clone(),
                    line: number,
                    what: format!("'{field}' is not a valid {kind:?} value"),
                };
                match v {
                    Values::I32(v) => v.push(field.parse().map_err(|_| bad())?),
                    Values::I64(v) => v.push(field.parse().map_err(|_| bad())?),
                    Values::Bool(v) => v.push(match field {
                        "1" | "true" => true,
                        "0" | "false" => false,
                        _ => return Err(bad().into()),
                    }),
                    Values::Text(v) => v.push(ByteArray::from(field.as_bytes().to_vec())),
                }
            }
            batch.len += 1;
            if batch.len == READ_BATCH {
                if !each(&batch)? {
                    return Ok(());
                }
                batch.clear();
            }
        }
        if !batch.is_empty() {
            each(&batch)?;
        }
        Ok(())
    }
}

/// The part of a run-format-1 CSV format name that identifies the table's file.
fn csv_family(table: &Table) -> &'static str {
    match table.legacy_csv {
        "samples.csv" => "timer-samples-csv",
        "interruptions.csv" => "interruptions-csv",
        "trace.csv" => "trace-csv",
        "latency.csv" => "latency-csv",
        "jobs.csv" => "jobs-csv",
        _ => match table.format {
            f if f.contains("timer-timeline") => "timer-timeline-csv",
            _ => "noise-timeline-csv",
        },
    }
}

/// Reads up to `max` values of one column into `out` (cleared first); returns how many.
fn read_column(
    r: &mut ColumnReader,
    out: &mut Values,
    max: usize,
) -> Result<usize, parquet::errors::ParquetError> {
    out.clear();
    let (records, _, _) = match (r, out) {
        (ColumnReader::Int32ColumnReader(c), Values::I32(v)) => {
            c.read_records(max, None, None, v)?
        }
        (ColumnReader::Int64ColumnReader(c), Values::I64(v)) => {
            c.read_records(max, None, None, v)?
        }
        (ColumnReader::BoolColumnReader(c), Values::Bool(v)) => {
            c.read_records(max, None, None, v)?
        }
        (ColumnReader::ByteArrayColumnReader(c), Values::Text(v)) => {
            c.read_records(max, None, None, v)?
        }
        _ => {
            return Err(parquet::errors::ParquetError::General(
                "a column of an unexpected type".into(),
            ))
        }
    };
    Ok(records)
}

/// A Parquet writer's error as the store's: a failed write of the file beneath (a full disk)
/// is the plain I/O error it wraps.
fn parquet_error(path: &Path, e: parquet::errors::ParquetError) -> StoreError {
    if let parquet::errors::ParquetError::External(inner) = e {
        return match inner.downcast::<std::io::Error>() {
            Ok(source) => StoreError::Write {
                path: path.to_path_buf(),
                source: *source,
            },
            Err(other) => StoreError::Parquet {
                path: path.to_path_buf(),
                detail: other.to_string(),
            },
        };
    }
    StoreError::Parquet {
        path: path.to_path_buf(),
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::tables::*;
    use super::*;
    use crate::store::{Manifest, RunDir, RunState};

    fn limits(rows: usize) -> Limits {
        Limits {
            row_group_rows: rows,
            row_group_ns: 1_000,
            segment_ns: 10_000,
            first_row_group_ns: u64::MAX,
        }
    }

    fn push_sample(w: &mut TableWriter, k: i64, now: u64) {
        let b = w.row();
        b.push_i32(0, (k % 2) as i32);
        b.push_i64(1, k);
        b.push_i64(2, k * 1_000_000);
        b.push_i64(3, 20_000 + k % 7);
        b.push_bool(4, k % 10 == 3);
        w.end_row(now).expect("row");
    }

    /// A finished run directory listing `files`.
    fn finish_run(dir: &RunDir, files: Vec<FileEntry>) -> RunReader {
        let mut m = test_manifest(dir);
        m.files = files;
        m.state = RunState::Completed;
        dir.write_manifest(&m).expect("manifest");
        RunReader::open(dir.path()).expect("open")
    }

    fn test_manifest(dir: &RunDir) -> Manifest {
        Manifest {
            schema_version: crate::store::SCHEMA_VERSION,
            id: dir.id().into(),
            kind: crate::RunKind::Timer,
            tool: crate::store::Tool {
                name: "sandglass".into(),
                version: "0".into(),
                commit: "0".into(),
            },
            command_line: vec![],
            state: RunState::Running,
            started_at: crate::store::now_rfc3339(),
            ended_at: None,
            end_detail: None,
            system: crate::system::snapshot(),
            clock: serde_json::Value::Null,
            config: serde_json::Value::Null,
            warnings: vec![],
            files: vec![],
        }
    }

    #[test]
    fn the_first_row_group_is_written_a_quarter_second_after_its_first_row() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = RunDir::create(Some(&tmp.path().join("run")), tmp.path(), "timer").expect("dir");
        let mut w =
            TableWriter::create(dir.path(), &TIMER_SAMPLES, Limits::default()).expect("writer");
        let ms = 1_000_000u64;
        for k in 0..100i64 {
            push_sample(&mut w, k, k as u64 * ms);
        }
        w.tick(249 * ms).expect("tick");
        assert!(w.segment.is_none(), "nothing is written before 250 ms");
        w.tick(250 * ms).expect("tick");
        let journal = w.segment.as_ref().expect("segment").journal_path.clone();
        assert!(std::fs::metadata(&journal).expect("journal").len() > 0);
        assert!(w.buf.is_empty());
        // Later row groups wait for the next multiple of the normal length.
        push_sample(&mut w, 100, 300 * ms);
        w.tick(1_999 * ms).expect("tick");
        assert_eq!(w.buf.len(), 1);
        w.tick(2_000 * ms).expect("tick");
        assert!(w.buf.is_empty());
    }

    #[test]
    fn rows_round_trip_through_segments_and_row_groups() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = RunDir::create(Some(&tmp.path().join("run")), tmp.path(), "timer").expect("dir");
        let mut w = TableWriter::create(dir.path(), &TIMER_SAMPLES, limits(100)).expect("writer");
        // 1000 rows at run times 0..25 000: row groups of 100 rows or 1 000 ns, segments of
        // 10 000 ns.
        for k in 0..1000i64 {
            let now = (k * 25) as u64;
            w.tick(now).expect("tick");
            push_sample(&mut w, k, now);
        }
        let files = w.finish(25_000).expect("finish");
        assert_eq!(files.len(), 3, "{files:?}");
        assert_eq!(files[0].name, "samples-0000.parquet");
        assert!(files.iter().all(|f| f.format == TIMER_SAMPLES.format));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.contains(".partial") || n.contains(".rowgroups"))
            .collect();
        assert!(names.is_empty(), "{names:?}");
        let run = finish_run(&dir, files);
        run.verify().expect("checksums");
        let r = TableReader::open(&run, &TIMER_SAMPLES).expect("table");
        assert_eq!(r.rows().expect("rows"), 1000);
        let mut seen = Vec::new();
        r.scan::<ReadError>(&["release", "missed", "lateness_ns"], |b| {
            let rel = b.i64s("release")?;
            let missed = b.bools("missed")?;
            let late = b.i64s("lateness_ns")?;
            for i in 0..b.len() {
                seen.push((rel[i], missed[i], late[i]));
            }
            assert!(b.i32s("cpu").is_err(), "not asked for");
            Ok(())
        })
        .expect("scan");
        let expected: Vec<_> = (0..1000i64)
            .map(|k| (k, k % 10 == 3, 20_000 + k % 7))
            .collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn a_segment_left_open_is_recovered_after_its_last_row_group() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = RunDir::create(Some(&tmp.path().join("run")), tmp.path(), "timer").expect("dir");
        let big = Limits {
            row_group_rows: 100,
            row_group_ns: u64::MAX,
            segment_ns: u64::MAX,
            first_row_group_ns: u64::MAX,
        };
        let mut w = TableWriter::create(dir.path(), &TIMER_SAMPLES, big).expect("writer");
        for k in 0..350i64 {
            push_sample(&mut w, k, k as u64);
        }
        // Three row groups are on disk and 50 rows in the buffer; the process dies here, with
        // a torn write of the next row group after the data and a torn journal entry.
        let partial = dir.path().join("samples-0000.parquet.partial");
        let journal = dir.path().join("samples-0000.parquet.rowgroups");
        std::mem::forget(w);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&partial)
            .and_then(|mut f| f.write_all(b"half a row group"))
            .expect("torn data");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&journal)
            .and_then(|mut f| f.write_all(&[7u8; 20]))
            .expect("torn journal");
        let rec = recover(dir.path()).expect("recover");
        assert_eq!(
            rec,
            vec![Recovered::Closed {
                name: "samples-0000.parquet".into(),
                rows: 300
            }]
        );
        assert!(!partial.exists() && !journal.exists());
        let path = dir.path().join("samples-0000.parquet");
        let data = std::fs::read(&path).expect("read");
        let entry = FileEntry {
            name: "samples-0000.parquet".into(),
            bytes: data.len() as u64,
            sha256: crate::store::sha256_hex(&data),
            format: TIMER_SAMPLES.format.into(),
            description: String::new(),
        };
        let run = finish_run(&dir, vec![entry]);
        let r = TableReader::open(&run, &TIMER_SAMPLES).expect("table");
        let mut last = -1;
        r.scan::<ReadError>(&["release"], |b| {
            for &x in b.i64s("release")? {
                assert_eq!(x, last + 1);
                last = x;
            }
            Ok(())
        })
        .expect("scan");
        assert_eq!(last, 299);
    }

    #[test]
    fn a_segment_without_a_complete_row_group_is_removed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let p = tmp.path().join("jobs-0000.parquet.partial");
        std::fs::write(&p, b"PAR1").expect("write");
        assert_eq!(
            recover(tmp.path()).expect("recover"),
            vec![Recovered::Empty {
                name: "jobs-0000.parquet".into()
            }]
        );
        assert!(!p.exists());
    }

    #[test]
    fn text_columns_and_run_format_1_csv_read_alike() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir =
            RunDir::create(Some(&tmp.path().join("run")), tmp.path(), "hourglass").expect("dir");
        let mut w = TableWriter::create(dir.path(), &TRACE, Limits::default()).expect("writer");
        let reasons = [ByteArray::from("preempted"), ByteArray::from("yielded")];
        for k in 0..5i64 {
            let b = w.row();
            b.push_i32(0, (k % 2) as i32);
            b.push_i32(1, 3);
            b.push_i64(2, k * 10);
            b.push_i64(3, k * 10 + 5);
            b.push_i64(4, 1000 + k * 30);
            b.push_i64(5, 1015 + k * 30);
            b.push_text(6, &reasons[(k % 2) as usize]);
            w.end_row(0).expect("row");
        }
        let mut files = w.finish(0).expect("finish");
        let csv = "thread,cpu,start_ns,end_ns,start_counter,end_counter,end_reason\n0,3,0,5,1000,1015,preempted\n1,3,10,15,1030,1045,yielded\n";
        files.push(
            dir.write_file("trace.csv", csv.as_bytes(), "sandglass-trace-csv/1", "old")
                .expect("csv"),
        );
        let run = finish_run(&dir, files.clone());
        let read = |run: &RunReader| {
            let mut rows = Vec::new();
            TableReader::open(run, &TRACE)
                .expect("table")
                .scan::<ReadError>(&["thread", "end_reason", "end_ns"], |b| {
                    let t = b.i32s("thread")?;
                    let r = b.texts("end_reason")?;
                    let e = b.i64s("end_ns")?;
                    for i in 0..b.len() {
                        rows.push((t[i], r[i].as_utf8().unwrap_or("?").to_string(), e[i]));
                    }
                    Ok(())
                })
                .expect("scan");
            rows
        };
        let parquet_rows = read(&run);
        assert_eq!(parquet_rows.len(), 5);
        assert_eq!(parquet_rows[1], (1, "yielded".into(), 15));
        // The same directory with only the CSV file: the format-1 reader.
        let run1 = finish_run(&dir, files[1..].to_vec());
        assert_eq!(read(&run1), parquet_rows[..2]);
        // A malformed CSV row is named by its line.
        std::fs::write(dir.path().join("trace.csv"), "thread,cpu,start_ns,end_ns,start_counter,end_counter,end_reason\n0,3,x,5,1,2,preempted\n").expect("w");
        let data = std::fs::read(dir.path().join("trace.csv")).expect("r");
        let mut e = files[1].clone();
        e.bytes = data.len() as u64;
        e.sha256 = crate::store::sha256_hex(&data);
        let run1 = finish_run(&dir, vec![e]);
        let err = TableReader::open(&run1, &TRACE)
            .expect("table")
            .scan::<ReadError>(&["start_ns"], |_| Ok(()))
            .expect_err("bad row");
        assert!(err.to_string().contains("trace.csv:2"), "{err}");
        // Saved by a spreadsheet: a byte order mark, CRLF line ends, a quoted field, a blank
        // line; the rows read as before.
        let saved = "\u{feff}thread,cpu,start_ns,end_ns,start_counter,end_counter,end_reason\r\n0,3,0,5,1000,1015,\"preempted\"\r\n\r\n1,3,10,15,1030,1045,yielded\r\n";
        std::fs::write(dir.path().join("trace.csv"), saved).expect("w");
        let mut e = files[1].clone();
        e.bytes = saved.len() as u64;
        e.sha256 = crate::store::sha256_hex(saved.as_bytes());
        let run1 = finish_run(&dir, vec![e]);
        assert_eq!(read(&run1), parquet_rows[..2]);
    }

    #[test]
    fn a_damaged_segment_is_an_error_not_a_panic() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = RunDir::create(Some(&tmp.path().join("run")), tmp.path(), "timer").expect("dir");
        let junk = b"PAR1 this is not a parquet file PAR1";
        let f = dir
            .write_file("samples-0000.parquet", junk, TIMER_SAMPLES.format, "x")
            .expect("write");
        let run = finish_run(&dir, vec![f]);
        let r = TableReader::open(&run, &TIMER_SAMPLES).expect("table");
        let e = r.scan::<ReadError>(&[], |_| Ok(())).expect_err("damaged");
        assert!(e.to_string().contains("samples-0000.parquet"), "{e}");
    }

    #[test]
    fn segment_names() {
        assert_eq!(TIMER_SAMPLES.segment_name(12), "samples-0012.parquet");
        assert_eq!(
            TIMER_SAMPLES.segment_index("samples-0012.parquet"),
            Some(12)
        );
        assert_eq!(TIMER_SAMPLES.segment_index("samples-12.parquet"), None);
        assert_eq!(
            TIMER_SAMPLES.segment_index("samples-0012.parquet.partial"),
            None
        );
        assert_eq!(TIMER_SAMPLES.segment_index("samplesx-0012.parquet"), None);
    }
}
