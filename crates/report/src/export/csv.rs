//! Plain CSV tables of a run, one file per table with a header row, for spreadsheets, pandas
//! and R.
//!
//! Times are integer nanoseconds from the run's time zero, as in the run directory; the tables
//! add what a reader would otherwise derive (each wakeup's time, the intervals between
//! wakeups, each interval's duration). Existing files are never overwritten: when any file the
//! export would write already exists, nothing is written.

use super::{must_not_exist, summary, write_atomic, wrong_kind, ExportError, Table};
use sandglass::store::RunReader;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One output table: its file name and contents.
pub struct CsvTable {
    pub name: &'static str,
    pub text: String,
    /// Data rows (the header excluded).
    pub rows: usize,
}

/// The tables of `run`, by kind: timer `samples.csv` and `intervals.csv`; noise
/// `interruptions.csv`; hourglass `trace.csv`, and `latency.csv` and `jobs.csv` when the run
/// has them; every kind `kernel_events.csv` when the run has one.
pub fn tables(run: &RunReader) -> Result<Vec<CsvTable>, ExportError> {
    let mut out = match run.manifest.kind.as_str() {
        "timer" => timer(run)?,
        "noise" => noise(run)?,
        "hourglass" => hourglass(run)?,
        other => {
            return Err(wrong_kind(
                run,
                format!("CSV export reads timer, noise and hourglass runs; this is a {other} run"),
            ))
        }
    };
    if run.has(super::KERNEL_EVENTS_FILE) {
        let ev = super::kernel_events(run)?;
        let mut s = String::from("ts_ns,cpu,event,dur_ns\n");
        for (ts, cpu, event, dur) in &ev {
            let _ = writeln!(s, "{ts},{cpu},{event},{dur}");
        }
        out.push(CsvTable {
            name: "kernel_events.csv",
            text: s,
            rows: ev.len(),
        });
    }
    Ok(out)
}

/// Writes the tables of `run` into `dir` (created if missing) and returns the files written.
/// When any of them already exists, nothing is written.
pub fn write(run: &RunReader, dir: &Path) -> Result<Vec<PathBuf>, ExportError> {
    let tables = tables(run)?;
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
    for t in &tables {
        must_not_exist(&dir.join(t.name))?;
    }
    let mut written = Vec::with_capacity(tables.len());
    for t in &tables {
        let path = dir.join(t.name);
        write_atomic(&path, |w| w.write_all(t.text.as_bytes()))?;
        written.push(path);
    }
    Ok(written)
}

fn timer(run: &RunReader) -> Result<Vec<CsvTable>, ExportError> {
    let t = Table::read(run, "samples.csv")?;
    let c = t.columns(&["cpu", "release", "release_ns", "lateness_ns", "missed"])?;
    let mut samples = String::with_capacity(48 * (t.len() + 1));
    samples.push_str("cpu,release,release_ns,lateness_ns,missed,wakeup_ns\n");
    let mut intervals = String::from("cpu,wakeup,wakeup_ns,interval_ns\n");
    let (mut n_samples, mut n_intervals) = (0, 0);
    // Per CPU: the index and time of the last wakeup.
    let mut last: std::collections::BTreeMap<u64, (u64, i64)> = Default::default();
    for r in t.rows() {
        let cpu: u64 = r.get(c[0])?;
        let release: u64 = r.get(c[1])?;
        let release_ns: i64 = r.get(c[2])?;
        let lateness_ns: i64 = r.get(c[3])?;
        let missed: u8 = r.get(c[4])?;
        let wakeup_ns = release_ns + lateness_ns;
        let _ = writeln!(
            samples,
            "{cpu},{release},{release_ns},{lateness_ns},{missed},{wakeup_ns}"
        );
        n_samples += 1;
        // A missed release shares the wakeup of the release before it.
        if missed == 0 {
            let k = match last.get(&cpu) {
                Some(&(k, prev)) => {
                    let _ = writeln!(
                        intervals,
                        "{cpu},{},{wakeup_ns},{}",
                        k + 1,
                        wakeup_ns - prev
                    );
                    n_intervals += 1;
                    k + 1
                }
                None => 0,
            };
            last.insert(cpu, (k, wakeup_ns));
        }
    }
    Ok(vec![
        CsvTable {
            name: "samples.csv",
            text: samples,
            rows: n_samples,
        },
        CsvTable {
            name: "intervals.csv",
            text: intervals,
            rows: n_intervals,
        },
    ])
}

fn noise(run: &RunReader) -> Result<Vec<CsvTable>, ExportError> {
    let t = Table::read(run, "interruptions.csv")?;
    let c = t.columns(&["cpu", "start_ns", "duration_ns"])?;
    let mut s = String::with_capacity(40 * (t.len() + 1));
    s.push_str("cpu,start_ns,duration_ns,end_ns\n");
    for r in t.rows() {
        let cpu: u64 = r.get(c[0])?;
        let start: u64 = r.get(c[1])?;
        let dur: u64 = r.get(c[2])?;
        let _ = writeln!(s, "{cpu},{start},{dur},{}", start + dur);
    }
    Ok(vec![CsvTable {
        name: "interruptions.csv",
        text: s,
        rows: t.len(),
    }])
}

/// The kernel thread id of each Hourglass thread, from the summary.
pub(crate) fn hourglass_tids(run: &RunReader) -> Result<Vec<(u64, i64)>, ExportError> {
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

fn hourglass(run: &RunReader) -> Result<Vec<CsvTable>, ExportError> {
    let tids = hourglass_tids(run)?;
    let tid = |thread: u64| {
        tids.iter()
            .find(|(t, _)| *t == thread)
            .map(|(_, tid)| *tid)
            .unwrap_or(0)
    };
    let t = Table::read(run, "trace.csv")?;
    let c = t.columns(&["thread", "cpu", "start_ns", "end_ns", "end_reason"])?;
    let mut s = String::with_capacity(56 * (t.len() + 1));
    s.push_str("thread,tid,cpu,start_ns,end_ns,duration_ns,end_reason\n");
    for r in t.rows() {
        let thread: u64 = r.get(c[0])?;
        let cpu: u64 = r.get(c[1])?;
        let start: u64 = r.get(c[2])?;
        let end: u64 = r.get(c[3])?;
        let _ = writeln!(
            s,
            "{thread},{},{cpu},{start},{end},{},{}",
            tid(thread),
            end.saturating_sub(start),
            r.text(c[4])?
        );
    }
    let mut out = vec![CsvTable {
        name: "trace.csv",
        text: s,
        rows: t.len(),
    }];
    if run.has("latency.csv") {
        let t = Table::read(run, "latency.csv")?;
        let c = t.columns(&["thread", "wakeup", "lateness_ns"])?;
        let mut s = String::from("thread,wakeup,lateness_ns\n");
        for r in t.rows() {
            let thread: u64 = r.get(c[0])?;
            let wakeup: u64 = r.get(c[1])?;
            let late: i64 = r.get(c[2])?;
            let _ = writeln!(s, "{thread},{wakeup},{late}");
        }
        out.push(CsvTable {
            name: "latency.csv",
            text: s,
            rows: t.len(),
        });
    }
    if run.has("jobs.csv") {
        let t = Table::read(run, "jobs.csv")?;
        let names = [
            "thread",
            "job",
            "release_ns",
            "deadline_ns",
            "first_run_ns",
            "end_ns",
            "received_ns",
            "outcome",
        ];
        let c = t.columns(&names)?;
        let mut s = names.join(",");
        s.push('\n');
        for r in t.rows() {
            let mut fields = Vec::with_capacity(names.len());
            for &i in &c[..7] {
                // first_run_ns may be empty for a job that never ran.
                let v = r.text(i)?;
                if !v.is_empty() {
                    r.get::<i64>(i)?;
                }
                fields.push(v.to_string());
            }
            fields.push(r.text(c[7])?.to_string());
            s.push_str(&fields.join(","));
            s.push('\n');
        }
        out.push(CsvTable {
            name: "jobs.csv",
            text: s,
            rows: t.len(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::fixture;
    use super::*;

    #[test]
    fn timer_tables_count_every_release_and_interval() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = fixture::timer_run(&tmp.path().join("run"), &fixture::timer_samples())
            .expect("fixture");
        let r = RunReader::open(&run).expect("open");
        let t = tables(&r).expect("tables");
        assert_eq!(t[0].name, "samples.csv");
        assert_eq!(t[0].rows, 8);
        assert_eq!(t[0].text.lines().count(), 9);
        // CPU 1: wakeups at 10, 1_020, 5_000_040 (two releases missed), 5_001_015; CPU 2: 2.
        assert_eq!(t[1].rows, 3 + 1);
        assert!(
            t[1].text.contains("\n1,2,5000040,4000020\n"),
            "{}",
            t[1].text
        );
        assert!(t[0].text.contains("\n1,3,3000000,2000040,1,5000040\n"));

        let out = tmp.path().join("csv");
        let files = write(&r, &out).expect("write");
        assert_eq!(files.len(), 2);
        let again = write(&r, &out).expect_err("no overwrite");
        assert!(
            matches!(again, ExportError::Exists(_)),
            "{again}: existing files are refused"
        );
    }

    #[test]
    fn damaged_run_names_the_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = fixture::timer_run(&tmp.path().join("run"), &fixture::timer_samples())
            .expect("fixture");
        std::fs::write(run.join("samples.csv"), "cpu,release\n").expect("damage");
        let r = RunReader::open(&run).expect("open");
        let e = tables(&r).err().expect("damaged");
        assert!(e.to_string().contains("samples.csv"), "{e}");
    }
}
