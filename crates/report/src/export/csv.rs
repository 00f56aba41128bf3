//! Plain CSV tables of a run, one file per table with a header row, for spreadsheets, pandas
//! and R.
//!
//! Times are integer nanoseconds from the run's time zero, as in the run directory; the tables
//! add what a reader would otherwise derive (each wakeup's time, the intervals between
//! wakeups, each interval's duration). Existing files are never overwritten: when any file the
//! export would write already exists, nothing is written.

use super::{must_not_exist, summary, write_atomic, wrong_kind, ExportError};
use sandglass::store::table::{tables, Batch, TableReader};
use sandglass::store::RunReader;
use sandglass::RunKind;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A row being formatted: fields joined by commas, rows ended by a newline, integers written
/// without allocation.
struct Line {
    buf: Vec<u8>,
    fmt: itoa::Buffer,
}

/// The buffer is handed to the file when it holds this many bytes.
const FLUSH: usize = 1 << 20;

impl Line {
    fn new() -> Line {
        Line {
            buf: Vec::with_capacity(FLUSH + 4096),
            fmt: itoa::Buffer::new(),
        }
    }
    #[inline]
    fn int(&mut self, v: impl itoa::Integer) -> &mut Self {
        self.buf.extend_from_slice(self.fmt.format(v).as_bytes());
        self.buf.push(b',');
        self
    }
    /// A text field; a control or bidirectional-override character (a thread's name is what
    /// the thread set) is written escaped, as `sandglass::printable` shows it, so that the file
    /// printed on a terminal cannot drive it.
    #[inline]
    fn text(&mut self, v: &[u8]) -> &mut Self {
        match std::str::from_utf8(v) {
            Ok(s) if sandglass::printable::has_unsafe(s) => self
                .buf
                .extend_from_slice(sandglass::printable::escape(s).as_bytes()),
            _ => self.buf.extend_from_slice(v),
        }
        self.buf.push(b',');
        self
    }
    /// Ends the row (replacing the last comma).
    #[inline]
    fn end(&mut self) {
        if let Some(last) = self.buf.last_mut() {
            *last = b'\n';
        }
    }
    fn flush_if_full(&mut self, w: &mut dyn Write) -> std::io::Result<()> {
        if self.buf.len() >= FLUSH {
            w.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
    fn finish(&mut self, w: &mut dyn Write) -> std::io::Result<()> {
        w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// The files the CSV export of `run` writes: timer `samples.csv` and `intervals.csv`; noise
/// `interruptions.csv`; hourglass `trace.csv`, and `latency.csv` and `jobs.csv` when the run
/// has them; every kind `kernel_events.csv` when the run has one.
pub fn names(run: &RunReader) -> Result<Vec<&'static str>, ExportError> {
    let mut out = match &run.manifest.kind {
        RunKind::Timer => vec!["samples.csv", "intervals.csv"],
        RunKind::Noise => vec!["interruptions.csv"],
        RunKind::Hourglass => {
            let mut v = vec!["trace.csv"];
            if TableReader::open(run, &tables::LATENCY).is_some() {
                v.push("latency.csv");
            }
            if TableReader::open(run, &tables::JOBS).is_some() {
                v.push("jobs.csv");
            }
            v
        }
        other => {
            return Err(wrong_kind(
                run,
                format!("CSV export reads timer, noise and hourglass runs; this is a {other} run"),
            ))
        }
    };
    if run.has(super::KERNEL_EVENTS_FILE) {
        out.push("kernel_events.csv");
    }
    Ok(out)
}

/// Writes the tables of `run` into `dir` (created if missing), streaming them from the run's
/// store, and returns the files written. When any of them already exists, nothing is written.
pub fn write(run: &RunReader, dir: &Path) -> Result<Vec<PathBuf>, ExportError> {
    let names = names(run)?;
    if dir.exists() && !dir.is_dir() {
        return Err(ExportError::Write {
            path: dir.to_path_buf(),
            source: std::io::Error::other("it exists and is not a directory"),
        });
    }
    std::fs::create_dir_all(dir).map_err(|source| ExportError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    for n in &names {
        must_not_exist(&dir.join(n))?;
    }
    match &run.manifest.kind {
        RunKind::Timer => timer(run, dir)?,
        RunKind::Noise => noise(run, dir)?,
        _ => hourglass(run, dir, &names)?,
    }
    if names.contains(&"kernel_events.csv") {
        let ev = super::kernel_events(run)?;
        let path = dir.join("kernel_events.csv");
        write_atomic(&path, |w| {
            let mut l = Line::new();
            l.buf.extend_from_slice(b"ts_ns,cpu,event,dur_ns\n");
            for (ts, cpu, event, dur) in &ev {
                l.int(*ts).int(*cpu).text(event.as_bytes()).int(*dur).end();
                l.flush_if_full(w).map_err(io(&path))?;
            }
            l.finish(w).map_err(io(&path))
        })?;
    }
    Ok(names.iter().map(|n| dir.join(n)).collect())
}

/// The run's table `table`, which it must have.
fn table<'r>(
    run: &'r RunReader,
    table: &'static sandglass::store::table::Table,
) -> Result<TableReader<'r>, ExportError> {
    TableReader::open(run, table).ok_or_else(|| {
        wrong_kind(
            run,
            format!(
                "the run has no {} table ({}-*.parquet or {})",
                table.stem, table.stem, table.legacy_csv
            ),
        )
    })
}

fn timer(run: &RunReader, dir: &Path) -> Result<(), ExportError> {
    let t = table(run, &tables::TIMER_SAMPLES)?;
    let path = dir.join("samples.csv");
    let ipath = dir.join("intervals.csv");
    // The intervals are derived as the samples stream; both files are written side by side.
    let ifile = std::fs::File::create(dir.join(".intervals.csv.tmp")).map_err(io(&ipath))?;
    let mut iw = std::io::BufWriter::with_capacity(1 << 20, ifile);
    let mut il = Line::new();
    il.buf
        .extend_from_slice(b"cpu,wakeup,wakeup_ns,interval_ns\n");
    // Per CPU: the index and time of the last wakeup.
    let mut last: std::collections::BTreeMap<i32, (u64, i64)> = Default::default();
    let result = write_atomic(&path, |w| {
        let mut l = Line::new();
        l.buf
            .extend_from_slice(b"cpu,release,release_ns,lateness_ns,missed,wakeup_ns\n");
        t.scan::<ExportError>(&[], |b: &Batch| {
            let (cpu, release) = (b.i32s("cpu")?, b.i64s("release")?);
            let (rel_ns, late) = (b.i64s("release_ns")?, b.i64s("lateness_ns")?);
            let missed = b.bools("missed")?;
            for i in 0..b.len() {
                let wakeup = rel_ns[i] + late[i];
                l.int(cpu[i])
                    .int(release[i])
                    .int(rel_ns[i])
                    .int(late[i])
                    .int(u8::from(missed[i]))
                    .int(wakeup)
                    .end();
                // A missed release shares the wakeup of the release before it.
                if !missed[i] {
                    let k = match last.get(&cpu[i]) {
                        Some(&(k, prev)) => {
                            il.int(cpu[i])
                                .int(k + 1)
                                .int(wakeup)
                                .int(wakeup - prev)
                                .end();
                            k + 1
                        }
                        None => 0,
                    };
                    last.insert(cpu[i], (k, wakeup));
                }
            }
            l.flush_if_full(w).map_err(io(&path))?;
            il.flush_if_full(&mut iw).map_err(io(&ipath))?;
            Ok(())
        })?;
        l.finish(w).map_err(io(&path))
    });
    let finished = result.and_then(|()| {
        il.finish(&mut iw).map_err(io(&ipath))?;
        iw.into_inner().map_err(|e| io(&ipath)(e.into_error()))?;
        std::fs::rename(dir.join(".intervals.csv.tmp"), &ipath).map_err(io(&ipath))
    });
    if finished.is_err() {
        let _ = std::fs::remove_file(dir.join(".intervals.csv.tmp"));
        let _ = std::fs::remove_file(&path);
    }
    finished
}

fn noise(run: &RunReader, dir: &Path) -> Result<(), ExportError> {
    let t = table(run, &tables::NOISE_INTERRUPTIONS)?;
    let path = dir.join("interruptions.csv");
    write_atomic(&path, |w| {
        let mut l = Line::new();
        l.buf
            .extend_from_slice(b"cpu,start_ns,duration_ns,end_ns\n");
        t.scan::<ExportError>(&[], |b| {
            let (cpu, start, dur) = (b.i32s("cpu")?, b.i64s("start_ns")?, b.i64s("duration_ns")?);
            for i in 0..b.len() {
                l.int(cpu[i])
                    .int(start[i])
                    .int(dur[i])
                    .int(start[i] + dur[i])
                    .end();
            }
            l.flush_if_full(w).map_err(io(&path))
        })?;
        l.finish(w).map_err(io(&path))
    })
}

/// The kernel thread id of each Hourglass thread, from the summary; none for a run killed
/// before it wrote one (its CSV then has 0 for every thread's id).
pub(crate) fn hourglass_tids(run: &RunReader) -> Result<Vec<(u64, i64)>, ExportError> {
    if !run.has("summary.json") {
        return Ok(Vec::new());
    }
    let s = summary(run)?;
    Ok(s.get("threads")
        .and_then(|t| t.as_array())
        .map(|a| {
            a.iter()
                .enumerate()
                .map(|(i, t)| {
                    (
                        t.get("thread").and_then(|v| v.as_u64()).unwrap_or(i as u64),
                        t.get("tid").and_then(|v| v.as_i64()).unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default())
}

fn hourglass(run: &RunReader, dir: &Path, names: &[&str]) -> Result<(), ExportError> {
    let tids = hourglass_tids(run)?;
    let tid = |thread: i32| {
        tids.iter()
            .find(|(t, _)| *t == thread as u64)
            .map(|(_, tid)| *tid)
            .unwrap_or(0)
    };
    let t = table(run, &tables::TRACE)?;
    let path = dir.join("trace.csv");
    write_atomic(&path, |w| {
        let mut l = Line::new();
        l.buf
            .extend_from_slice(b"thread,tid,cpu,start_ns,end_ns,duration_ns,end_reason\n");
        t.scan::<ExportError>(
            &["thread", "cpu", "start_ns", "end_ns", "end_reason"],
            |b| {
                let (th, cpu) = (b.i32s("thread")?, b.i32s("cpu")?);
                let (a, e, why) = (
                    b.i64s("start_ns")?,
                    b.i64s("end_ns")?,
                    b.texts("end_reason")?,
                );
                for i in 0..b.len() {
                    l.int(th[i])
                        .int(tid(th[i]))
                        .int(cpu[i])
                        .int(a[i])
                        .int(e[i])
                        .int((e[i] - a[i]).max(0))
                        .text(why[i].data())
                        .end();
                }
                l.flush_if_full(w).map_err(io(&path))
            },
        )?;
        l.finish(w).map_err(io(&path))
    })?;
    if names.contains(&"latency.csv") {
        let t = table(run, &tables::LATENCY)?;
        let path = dir.join("latency.csv");
        write_atomic(&path, |w| {
            let mut l = Line::new();
            l.buf.extend_from_slice(b"thread,wakeup,lateness_ns\n");
            t.scan::<ExportError>(&[], |b| {
                let (th, k, late) = (b.i32s("thread")?, b.i64s("wakeup")?, b.i64s("lateness_ns")?);
                for i in 0..b.len() {
                    l.int(th[i]).int(k[i]).int(late[i]).end();
                }
                l.flush_if_full(w).map_err(io(&path))
            })?;
            l.finish(w).map_err(io(&path))
        })?;
    }
    if names.contains(&"jobs.csv") {
        let t = table(run, &tables::JOBS)?;
        let path = dir.join("jobs.csv");
        write_atomic(&path, |w| {
            let mut l = Line::new();
            l.buf.extend_from_slice(
                b"thread,job,release_ns,deadline_ns,first_run_ns,end_ns,received_ns,outcome\n",
            );
            t.scan::<ExportError>(&[], |b| {
                let th = b.i32s("thread")?;
                let cols = [
                    b.i64s("job")?,
                    b.i64s("release_ns")?,
                    b.i64s("deadline_ns")?,
                    b.i64s("first_run_ns")?,
                    b.i64s("end_ns")?,
                    b.i64s("received_ns")?,
                ];
                let outcome = b.texts("outcome")?;
                for i in 0..b.len() {
                    l.int(th[i]);
                    for c in &cols {
                        l.int(c[i]);
                    }
                    l.text(outcome[i].data()).end();
                }
                l.flush_if_full(w).map_err(io(&path))
            })?;
            l.finish(w).map_err(io(&path))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{self, Format};
    use super::*;

    /// Both run formats give the same CSV files.
    #[test]
    fn text_fields_are_written_with_control_characters_escaped() {
        let mut l = Line::new();
        l.int(1)
            .text("irq/9-\u{1b}[2J".as_bytes())
            .text(b"plain")
            .end();
        assert_eq!(l.buf, b"1,irq/9-\\u{1b}[2J,plain\n");
    }

    #[test]
    fn timer_tables_count_every_release_and_interval() {
        for format in [Format::V2, Format::V1] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let run =
                fixture::timer_run_as(&tmp.path().join("run"), &fixture::timer_samples(), format)
                    .expect("fixture");
            let r = RunReader::open(&run).expect("open");
            let out = tmp.path().join("csv");
            let files = write(&r, &out).expect("write");
            assert_eq!(files.len(), 2);
            let samples = std::fs::read_to_string(out.join("samples.csv")).expect("samples");
            let intervals = std::fs::read_to_string(out.join("intervals.csv")).expect("intervals");
            assert_eq!(samples.lines().count(), 9, "{samples}");
            // CPU 1: wakeups at 10, 1_020, 5_000_040 (two releases missed), 5_001_015; CPU 2: 2.
            assert_eq!(intervals.lines().count(), 1 + 3 + 1, "{intervals}");
            assert!(intervals.contains("\n1,2,5000040,4000020\n"), "{intervals}");
            assert!(
                samples.contains("\n1,3,3000000,2000040,1,5000040\n"),
                "{samples}"
            );
            let again = write(&r, &out).expect_err("no overwrite");
            assert!(
                matches!(again, ExportError::Exists(_)),
                "{again}: existing files are refused"
            );
        }
    }

    #[test]
    fn damaged_run_names_the_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = fixture::timer_run(&tmp.path().join("run"), &fixture::timer_samples())
            .expect("fixture");
        std::fs::write(run.join("samples-0000.parquet"), "PAR1 not a table PAR1").expect("damage");
        let r = RunReader::open(&run).expect("open");
        let e = write(&r, &tmp.path().join("csv")).expect_err("damaged");
        assert!(e.to_string().contains("samples-0000.parquet"), "{e}");
        assert!(
            !tmp.path().join("csv").join("samples.csv").exists(),
            "nothing half-written"
        );
    }
}
