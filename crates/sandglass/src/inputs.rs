//! Measured inputs for the analyses, read from run directories: the latency distribution of a
//! timer run or of an Hourglass LAT thread, and the execution times of an Hourglass PERIODIC
//! thread. This is how a schedulability analysis is "fed by measured numbers": Cota-Robles &
//! Held's pseudo worst case (seed 000 §5.2) takes a latency at a chosen percentile as release
//! jitter, and a measured execution time as a task's C.

use crate::analysis::distribution::Distribution;
use crate::engine::record::new_histogram;
use crate::store::table::{tables, TableReader};
use crate::store::{ReadError, RunReader};
use crate::units::Nanos;
use hdrhistogram::Histogram;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A latency distribution with the rate at which it was sampled.
#[derive(Clone, Debug)]
pub struct Latency {
    pub distribution: Distribution,
    /// Samples per second of one stream (one CPU or one thread).
    pub rate_hz: f64,
    /// What the samples are, for people: `CPU 1 of timer run X`.
    pub description: String,
}

/// Why a `RUN@PERCENTILE` argument or a percentile name cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    #[error("'{0}' is not a percentile: write p50, p99, p99.99 or max")]
    Percentile(String),
    #[error("'{0}': write RUN@PERCENTILE, such as runs/x@p99.99")]
    NoPercentile(String),
    #[error("'{0}': after ':' give the CPU or thread number, such as @p99.99:1")]
    Select(String),
}

/// A percentile name (`p50`, `p99.99`, `max`) as a quantile.
pub fn parse_quantile(name: &str) -> Result<f64, SpecError> {
    if name == "max" {
        return Ok(1.0);
    }
    let bad = || SpecError::Percentile(name.to_string());
    let digits = name.strip_prefix('p').ok_or_else(bad)?;
    match digits.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p / 100.0),
        _ => Err(bad()),
    }
}

/// `RUN@p99.99`, optionally `RUN@p99.99:N` to choose CPU or thread N.
pub fn parse_run_at(spec: &str) -> Result<(PathBuf, f64, Option<usize>), SpecError> {
    let (run, rest) = spec
        .rsplit_once('@')
        .ok_or_else(|| SpecError::NoPercentile(spec.to_string()))?;
    let (pct, select) = match rest.split_once(':') {
        Some((p, n)) => (
            p,
            Some(
                n.parse::<usize>()
                    .map_err(|_| SpecError::Select(spec.to_string()))?,
            ),
        ),
        None => (rest, None),
    };
    Ok((PathBuf::from(run), parse_quantile(pct)?, select))
}

/// Chooses the CPU or thread `select` among those a run has (the only one when it has one).
fn choose(
    available: &[usize],
    select: Option<usize>,
    what: &'static str,
    run: &Path,
) -> Result<usize, InputError> {
    let run = run.to_path_buf();
    match (select, available) {
        (Some(s), _) if available.contains(&s) => Ok(s),
        (Some(s), _) => Err(InputError::Absent {
            run,
            what,
            wanted: s,
            available: list(available),
        }),
        (None, [one]) => Ok(*one),
        (None, []) => Err(InputError::NoSamples { run }),
        (None, many) => Err(InputError::Ambiguous {
            run,
            what,
            available: list(many),
        }),
    }
}

fn list(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A run's data that cannot serve as an analysis input.
#[derive(Debug, Error)]
pub enum InputError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{0}")]
    Unusable(String),
    #[error("{}: no {what} {wanted} in this run (it has {what} {available})", .run.display())]
    Absent {
        run: PathBuf,
        what: &'static str,
        wanted: usize,
        available: String,
    },
    #[error("{}: the run has no samples", .run.display())]
    NoSamples { run: PathBuf },
    #[error("{}: the run measured {what}s {available}; choose one with :N (RUN@p99:N) or --cpu N", .run.display())]
    Ambiguous {
        run: PathBuf,
        what: &'static str,
        available: String,
    },
}

fn unusable(s: String) -> InputError {
    InputError::Unusable(s)
}

/// The latency distribution of a run: the corrected lateness of one CPU of a `timer` run (its
/// whole-run histogram, three significant digits), or the lateness of one LAT thread of an
/// `hourglass` run. `select` chooses the CPU or thread when the run has several.
pub fn latency_from_run(path: &Path, select: Option<usize>) -> Result<Latency, InputError> {
    let r = RunReader::open(path)?;
    let summary: serde_json::Value =
        serde_json::from_slice(&r.read("summary.json")?).map_err(|e| {
            unusable(format!(
                "{}: summary.json is not valid JSON: {e}",
                path.display()
            ))
        })?;
    match r.manifest.kind.as_str() {
        "timer" => {
            let totals = crate::store::data::totals(&r)?;
            let cpus: Vec<usize> = totals.cpus.keys().copied().collect();
            let cpu = choose(&cpus, select, "CPU", path)?;
            let h = &totals.cpus[&cpu].main;
            let interval = summary["interval_ns"].as_u64().unwrap_or(0);
            if interval == 0 {
                return Err(unusable(format!(
                    "{}: summary.json has no interval_ns",
                    path.display()
                )));
            }
            Ok(Latency {
                distribution: Distribution::from_histogram(h),
                rate_hz: 1e9 / interval as f64,
                description: format!(
                    "corrected lateness of CPU {cpu} in timer run {} ({} releases, three significant digits)",
                    r.manifest.id,
                    h.len()
                ),
            })
        }
        "hourglass" => {
            let Some(t) = TableReader::open(&r, &tables::LATENCY) else {
                return Err(unusable(format!(
                    "{}: this hourglass run has no LAT thread, so no latency samples",
                    path.display()
                )));
            };
            let mut per: std::collections::BTreeMap<usize, Histogram<u64>> = Default::default();
            t.scan::<ReadError>(&["thread", "lateness_ns"], |b| {
                let (th, late) = (b.i32s("thread")?, b.i64s("lateness_ns")?);
                for i in 0..b.len() {
                    per.entry(th[i] as usize)
                        .or_insert_with(new_histogram)
                        .saturating_record(late[i].max(0) as u64);
                }
                Ok(())
            })?;
            let threads: Vec<usize> = per.keys().copied().collect();
            let th = choose(&threads, select, "thread", path)?;
            let h = &per[&th];
            let active = summary["threads"][th]["active_ns"].as_u64().unwrap_or(0);
            if active == 0 {
                return Err(unusable(format!(
                    "{}: summary.json has no active time for thread {th}",
                    path.display()
                )));
            }
            Ok(Latency {
                rate_hz: h.len() as f64 * 1e9 / active as f64,
                distribution: Distribution::from_histogram(h),
                description: format!(
                    "lateness of LAT thread {th} in hourglass run {} ({} wakeups, three significant digits)",
                    r.manifest.id,
                    h.len()
                ),
            })
        }
        other => Err(unusable(format!(
            "{}: a {other} run has no latency samples; give a timer run or an hourglass run with a LAT thread",
            path.display()
        ))),
    }
}

/// The execution time of the jobs of PERIODIC thread `thread` of an hourglass run at quantile
/// `q`: from each job's first run to its completion, over the jobs that completed (a pseudo
/// worst-case C), exact (the jobs stream twice).
pub fn execution_time_from_run(
    path: &Path,
    thread: Option<usize>,
    q: f64,
) -> Result<(Nanos, String), InputError> {
    let r = RunReader::open(path)?;
    let t = match (
        r.manifest.kind.as_str(),
        TableReader::open(&r, &tables::JOBS),
    ) {
        ("hourglass", Some(t)) => t,
        _ => {
            return Err(unusable(format!(
                "{}: execution times come from an hourglass run with a PERIODIC thread (its jobs)",
                path.display()
            )))
        }
    };
    let cols = ["thread", "first_run_ns", "end_ns", "outcome"];
    let mut per: std::collections::BTreeMap<usize, Histogram<u64>> = Default::default();
    let each =
        |b: &crate::store::table::Batch, f: &mut dyn FnMut(usize, i64)| -> Result<(), ReadError> {
            let (th, first, end) = (
                b.i32s("thread")?,
                b.i64s("first_run_ns")?,
                b.i64s("end_ns")?,
            );
            let outcome = b.texts("outcome")?;
            for i in 0..b.len() {
                if outcome[i].data() == b"hit" {
                    f(th[i] as usize, (end[i] - first[i]).max(0));
                }
            }
            Ok(())
        };
    t.scan::<ReadError>(&cols, |b| {
        each(b, &mut |th, v| {
            per.entry(th)
                .or_insert_with(new_histogram)
                .saturating_record(v as u64)
        })
    })?;
    let mut threads: Vec<usize> = per.keys().copied().collect();
    if threads.is_empty() {
        // Jobs that all missed: the thread exists but completed nothing.
        t.scan::<ReadError>(&["thread"], |b| {
            threads.extend(b.i32s("thread")?.iter().map(|&x| x as usize));
            Ok(())
        })?;
        threads.sort_unstable();
        threads.dedup();
    }
    let th = choose(&threads, thread, "thread", path)?;
    let Some(h) = per.get(&th) else {
        return Err(unusable(format!(
            "{}: thread {th} completed no job, so it has no execution time",
            path.display()
        )));
    };
    let mut exact = crate::stats::ExactQuantiles::new(&[h], &[q]);
    t.scan::<ReadError>(&cols, |b| {
        each(b, &mut |x, v| {
            if x == th {
                exact.add(0, v)
            }
        })
    })?;
    let v = exact.finish()[0][0].unwrap_or(h.value_at_quantile(q) as i64);
    Ok((
        Nanos(v.max(0) as u64),
        format!(
            "execution time of PERIODIC thread {th} in hourglass run {} ({} completed jobs)",
            r.manifest.id,
            h.len()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_run_specs() {
        assert_eq!(parse_quantile("p50"), Ok(0.5));
        assert!((parse_quantile("p99.99").expect("q") - 0.9999).abs() < 1e-12);
        assert_eq!(parse_quantile("max"), Ok(1.0));
        assert!(parse_quantile("99").is_err());
        assert!(parse_quantile("p0").is_err());
        assert!(parse_quantile("p101").is_err());
        let (run, q, sel) = parse_run_at("runs/a@b@p99:1").expect("spec");
        assert_eq!((run, q, sel), (PathBuf::from("runs/a@b"), 0.99, Some(1)));
        assert!(parse_run_at("runs/x").is_err());
        assert!(parse_run_at("runs/x@p99:z").is_err());
    }

    #[test]
    fn choosing_a_stream() {
        let p = Path::new("r");
        assert_eq!(choose(&[1], None, "CPU", p).expect("one"), 1);
        assert_eq!(choose(&[0, 1], Some(0), "CPU", p).expect("chosen"), 0);
        assert!(choose(&[0, 1], None, "CPU", p)
            .expect_err("many")
            .to_string()
            .contains("choose one"));
        assert!(choose(&[0, 1], Some(5), "CPU", p)
            .expect_err("absent")
            .to_string()
            .contains("no CPU 5"));
    }
}
