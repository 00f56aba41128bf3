//! cyclictest's histogram file (`cyclictest -h US`), so that the plotting scripts written for
//! cyclictest read sandglass runs unchanged.
//!
//! The layout is rt-tests' (checked against `cyclictest -h` output of rt-tests 2.x): a
//! `# Histogram` line, one line per 1 µs bucket from 0 to US−1 (`%06d ` then one `%06lu` count
//! per thread, tab-separated), then `# Total:` (`%09llu`, samples inside the histogram),
//! `# Min Latencies:`, `# Avg Latencies:`, `# Max Latencies:` and `# Histogram Overflows:`
//! (each `%05lu`), `# Histogram Overflow at cycle number:` with one `# Thread N:` line listing
//! the cycle numbers of the overflows (at most US of them, then `# NNNNN others`), and an empty
//! line. Latencies are whole microseconds, truncated as cyclictest truncates them; the average
//! is the truncated sum over every sample divided by the number of samples.
//!
//! What a "sample" is depends on [`View`]: by default every release, missed ones included,
//! which is sandglass's corrected view; [`View::Raw`] keeps one sample per wakeup, which is
//! what cyclictest itself records.

use super::{cpu_threads, write_atomic, wrong_kind, ExportError};
use sandglass::store::table::{tables, TableReader};
use sandglass::store::RunReader;
use sandglass::RunKind;
use std::fmt::Write as _;
use std::path::Path;

/// cyclictest has no default histogram size; this one covers 10 ms in 1 µs buckets.
pub const DEFAULT_MAX_US: usize = 10_000;

/// Which samples go into the histogram of a timer run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// Every release, missed releases included with their own lateness (no coordinated
    /// omission).
    Corrected,
    /// One sample per wakeup: the release it waited for (cyclictest's view).
    Raw,
}

/// One column of the histogram: one measuring thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// Counts per 1 µs bucket.
    pub buckets: Vec<u64>,
    /// Samples, overflows included.
    pub cycles: u64,
    pub min_us: u64,
    pub max_us: u64,
    pub sum_us: u64,
    pub overflows: u64,
    /// Cycle numbers of the first overflows (at most as many as there are buckets).
    pub outliers: Vec<u64>,
}

impl Column {
    fn new(buckets: usize) -> Column {
        Column {
            buckets: vec![0; buckets],
            cycles: 0,
            min_us: 0,
            max_us: 0,
            sum_us: 0,
            overflows: 0,
            outliers: Vec::new(),
        }
    }

    /// Adds the sample of cycle number `cycle`, `lateness_ns` late (an early one counts as 0).
    pub fn add(&mut self, cycle: u64, lateness_ns: i64) {
        let us = (lateness_ns.max(0) / 1_000) as u64;
        if self.cycles == 0 || us < self.min_us {
            self.min_us = us;
        }
        self.max_us = self.max_us.max(us);
        self.sum_us += us;
        self.cycles += 1;
        match self.buckets.get_mut(us as usize) {
            Some(b) => *b += 1,
            None => {
                self.overflows += 1;
                if self.outliers.len() < self.buckets.len() {
                    self.outliers.push(cycle);
                }
            }
        }
    }

    /// Samples inside the histogram (cyclictest's `# Total:`).
    pub fn total(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// A histogram in cyclictest's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    pub columns: Vec<Column>,
}

impl Histogram {
    /// cyclictest's text.
    pub fn render(&self) -> String {
        let buckets = self.columns.first().map_or(0, |c| c.buckets.len());
        let mut s = String::with_capacity((buckets + 10) * (8 + 7 * self.columns.len()));
        s.push_str("# Histogram\n");
        for i in 0..buckets {
            let _ = write!(s, "{i:06} ");
            for (j, c) in self.columns.iter().enumerate() {
                if j > 0 {
                    s.push('\t');
                }
                let _ = write!(s, "{:06}", c.buckets[i]);
            }
            s.push('\n');
        }
        let line = |s: &mut String, title: &str, width: usize, f: &dyn Fn(&Column) -> u64| {
            s.push_str(title);
            for c in &self.columns {
                let _ = write!(s, " {:0width$}", f(c));
            }
            s.push('\n');
        };
        line(&mut s, "# Total:", 9, &|c| c.total());
        line(&mut s, "# Min Latencies:", 5, &|c| c.min_us);
        line(&mut s, "# Avg Latencies:", 5, &|c| {
            c.sum_us.checked_div(c.cycles).unwrap_or(0)
        });
        line(&mut s, "# Max Latencies:", 5, &|c| c.max_us);
        line(&mut s, "# Histogram Overflows:", 5, &|c| c.overflows);
        s.push_str("# Histogram Overflow at cycle number:\n");
        for (j, c) in self.columns.iter().enumerate() {
            let _ = write!(s, "# Thread {j}:");
            for o in &c.outliers {
                let _ = write!(s, " {o:05}");
            }
            if (c.outliers.len() as u64) < c.overflows {
                let _ = write!(s, " # {:05} others", c.overflows - c.outliers.len() as u64);
            }
            s.push('\n');
        }
        s.push('\n');
        s
    }
}

/// The histogram of `run` with `buckets` 1 µs buckets: a timer run (one column per CPU, in
/// the run's order) or an Hourglass run with LAT threads (one column per LAT thread).
pub fn histogram(run: &RunReader, buckets: usize, view: View) -> Result<Histogram, ExportError> {
    if buckets == 0 {
        return Err(wrong_kind(
            run,
            "the cyclictest histogram needs at least one bucket (--cyclictest-max 1 or more)",
        ));
    }
    match &run.manifest.kind {
        RunKind::Timer => timer(run, buckets, view),
        RunKind::Hourglass if TableReader::open(run, &tables::LATENCY).is_some() => lat(run, buckets),
        RunKind::Hourglass => Err(wrong_kind(
            run,
            "the cyclictest histogram needs wakeup latencies: this Hourglass run has no LAT thread (use a timer run, or -w LAT)",
        )),
        other => Err(wrong_kind(
            run,
            format!("the cyclictest histogram needs wakeup latencies from a timer run (or an Hourglass run with LAT threads); this is a {other} run"),
        )),
    }
}

fn timer(run: &RunReader, buckets: usize, view: View) -> Result<Histogram, ExportError> {
    let threads = cpu_threads(run)?;
    let mut columns: Vec<Column> = threads.iter().map(|_| Column::new(buckets)).collect();
    let mut wakeups = vec![0u64; threads.len()];
    let t = TableReader::open(run, &tables::TIMER_SAMPLES)
        .ok_or_else(|| wrong_kind(run, "the timer run has no samples table"))?;
    t.scan::<ExportError>(&["cpu", "release", "lateness_ns", "missed"], |b| {
        let (cpu, release) = (b.i32s("cpu")?, b.i64s("release")?);
        let (late, missed) = (b.i64s("lateness_ns")?, b.bools("missed")?);
        for i in 0..b.len() {
            let Some(j) = threads.iter().position(|(c, _, _)| *c == cpu[i] as u64) else {
                continue;
            };
            match view {
                View::Corrected => columns[j].add(release[i] as u64, late[i]),
                View::Raw if !missed[i] => {
                    columns[j].add(wakeups[j], late[i]);
                    wakeups[j] += 1;
                }
                View::Raw => {}
            }
        }
        Ok(())
    })?;
    Ok(Histogram { columns })
}

fn lat(run: &RunReader, buckets: usize) -> Result<Histogram, ExportError> {
    let t = TableReader::open(run, &tables::LATENCY)
        .ok_or_else(|| wrong_kind(run, "the run has no LAT wakeups"))?;
    let mut by_thread: std::collections::BTreeMap<i32, Column> = Default::default();
    t.scan::<ExportError>(&["thread", "wakeup", "lateness_ns"], |b| {
        let (th, k, late) = (b.i32s("thread")?, b.i64s("wakeup")?, b.i64s("lateness_ns")?);
        for i in 0..b.len() {
            by_thread
                .entry(th[i])
                .or_insert_with(|| Column::new(buckets))
                .add(k[i] as u64, late[i]);
        }
        Ok(())
    })?;
    Ok(Histogram {
        columns: by_thread.into_values().collect(),
    })
}

/// Writes the histogram of `run` to `path` atomically (an existing file is refused).
pub fn write(run: &RunReader, path: &Path, buckets: usize, view: View) -> Result<(), ExportError> {
    let h = histogram(run, buckets, view)?;
    write_atomic(path, |w| {
        w.write_all(h.render().as_bytes())
            .map_err(|source| ExportError::Write {
                path: path.to_path_buf(),
                source,
            })
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixture;
    use super::*;

    #[test]
    fn layout_is_cyclictests() {
        let mut a = Column::new(4);
        let mut b = Column::new(4);
        for (k, ns) in [1_500, 1_999, 3_000, 12_000, 0].iter().enumerate() {
            a.add(k as u64, *ns);
        }
        b.add(0, -20);
        let text = Histogram {
            columns: vec![a, b],
        }
        .render();
        let expected = "# Histogram\n\
            000000 000001\t000001\n\
            000001 000002\t000000\n\
            000002 000000\t000000\n\
            000003 000001\t000000\n\
            # Total: 000000004 000000001\n\
            # Min Latencies: 00000 00000\n\
            # Avg Latencies: 00003 00000\n\
            # Max Latencies: 00012 00000\n\
            # Histogram Overflows: 00001 00000\n\
            # Histogram Overflow at cycle number:\n\
            # Thread 0: 00003\n\
            # Thread 1:\n\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn outliers_beyond_the_bucket_count_are_counted_as_others() {
        let mut a = Column::new(2);
        for k in 0..5 {
            a.add(k, 7_000);
        }
        let text = Histogram { columns: vec![a] }.render();
        assert!(
            text.contains("# Thread 0: 00000 00001 # 00003 others\n"),
            "{text}"
        );
    }

    #[test]
    fn corrected_and_raw_views_of_a_timer_run() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = fixture::timer_run(&tmp.path().join("run"), &fixture::timer_samples())
            .expect("fixture");
        let r = RunReader::open(&run).expect("open");
        let h = histogram(&r, 100, View::Corrected).expect("histogram");
        assert_eq!(h.columns.len(), 2);
        assert_eq!(h.columns[0].cycles, 6);
        assert_eq!(h.columns[0].overflows, 3);
        assert_eq!(h.columns[0].outliers, vec![2, 3, 4]);
        assert_eq!(h.columns[1].buckets[12], 1);
        let raw = histogram(&r, 100, View::Raw).expect("histogram");
        assert_eq!(raw.columns[0].cycles, 4);
        assert_eq!(raw.columns[0].outliers, vec![2]);
    }

    #[test]
    fn other_kinds_are_refused_clearly() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = fixture::noise_run(&tmp.path().join("run"), &[(1, 10, 20)]).expect("fixture");
        let r = RunReader::open(&run).expect("open");
        let e = histogram(&r, 100, View::Corrected).expect_err("noise");
        assert!(e.to_string().contains("noise run"), "{e}");
    }
}
