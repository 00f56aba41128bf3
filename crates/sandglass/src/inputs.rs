//! Measured inputs for the analyses, read from run directories: the latency distribution of a
//! timer run or of an Hourglass LAT thread, and the execution times of an Hourglass PERIODIC
//! thread. This is how a schedulability analysis is "fed by measured numbers": Cota-Robles &
//! Held's pseudo worst case (seed 000 §5.2) takes a latency at a chosen percentile as release
//! jitter, and a measured execution time as a task's C.
//!
//! A run of several CPUs (or LAT threads) gives its worst one unless one is chosen: the CPU
//! whose figure at the requested percentile is the largest (p99.9 when the analysis takes the
//! whole distribution), and that figure is the one its summary, study tables, `runs` and
//! `compare` give (docs/json.md, "One figure, one name").

use crate::analysis::distribution::Distribution;
use crate::engine::record::new_histogram;
use crate::histo::{Percentiles, QUANTILES};
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
    /// The summary's figures of the chosen CPU (timer runs), which [`Latency::value_at`] gives
    /// so that a percentile reads the same here as in every other output.
    pub figures: Option<Percentiles>,
}

/// The percentile by which a run's worst CPU or thread is chosen when the analysis takes the
/// whole distribution (`analyze worst-case --run`, `analyze mttf --run`).
pub const WORST_BY: f64 = 0.999;

impl Latency {
    /// The value at quantile `q` (1 for the maximum): the summary's figure where it has one,
    /// else the nearest-rank value of the distribution.
    pub fn value_at(&self, q: f64) -> Option<i64> {
        let named = self
            .figures
            .as_ref()
            .and_then(|f| f.get(percentile_name(q)?).map(|v| v as i64));
        named.or_else(|| self.distribution.quantile(q))
    }
}

/// The name of one of [`QUANTILES`] (`p99.9`), or `max` for 1.
pub fn percentile_name(q: f64) -> Option<&'static str> {
    if q >= 1.0 {
        return Some("max");
    }
    QUANTILES
        .iter()
        .find(|(x, _)| (x - q).abs() < 1e-12)
        .map(|(_, n)| *n)
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
    if let Some((q, _)) = QUANTILES.iter().find(|(_, n)| *n == name) {
        return Ok(*q);
    }
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

/// Chooses among `candidates` (number and figure): `select` when given, else the only one, else
/// the one with the largest figure (the lowest number among equals). Returns the number and
/// whether it was picked as the worst of several.
fn pick(
    candidates: &[(usize, i64)],
    select: Option<usize>,
    what: &'static str,
    run: &Path,
) -> Result<(usize, bool), InputError> {
    let ids: Vec<usize> = candidates.iter().map(|c| c.0).collect();
    if select.is_some() || ids.len() < 2 {
        return choose(&ids, select, what, run).map(|n| (n, false));
    }
    let worst = candidates
        .iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|c| c.0)
        .unwrap_or(0);
    Ok((worst, true))
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

/// Table `table` of run `r` when the run is of kind `kind`; otherwise the error says that
/// `what` come from such a run.
fn table_of<'r>(
    r: &'r RunReader,
    kind: crate::RunKind,
    table: &'static crate::store::table::Table,
    path: &Path,
    what: &str,
) -> Result<TableReader<'r>, InputError> {
    TableReader::open(r, table)
        .filter(|_| r.manifest.kind == kind)
        .ok_or_else(|| unusable(format!("{}: {what}", path.display())))
}

/// The latency distribution of a run: the corrected lateness of one CPU of a `timer` run (its
/// whole-run histogram, three significant digits, with the summary's exact figures), or the
/// lateness of one LAT thread of an `hourglass` run. `select` chooses the CPU or thread; without
/// it a run of several gives the one whose figure at quantile `by` is the largest.
pub fn latency_from_run(
    path: &Path,
    select: Option<usize>,
    by: f64,
) -> Result<Latency, InputError> {
    let r = RunReader::open(path)?;
    let summary: serde_json::Value =
        serde_json::from_slice(&r.read("summary.json")?).map_err(|e| {
            unusable(format!(
                "{}: summary.json is not valid JSON: {e}",
                path.display()
            ))
        })?;
    let by_name = percentile_name(by).map_or_else(|| format!("q = {by}"), str::to_string);
    match r.manifest.kind {
        crate::RunKind::Timer => {
            let totals = crate::store::data::totals(&r)?;
            let figures: std::collections::BTreeMap<usize, Percentiles> = summary["cpus"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
                .iter()
                .filter_map(|c| {
                    let cpu = c["cpu"].as_u64()? as usize;
                    Some((cpu, serde_json::from_value(c["lateness_ns"].clone()).ok()?))
                })
                .collect();
            let interval = summary["interval_ns"].as_u64().unwrap_or(0);
            if interval == 0 {
                return Err(unusable(format!(
                    "{}: summary.json has no interval_ns",
                    path.display()
                )));
            }
            // Each CPU's distribution once: the chosen one is returned as it is.
            let mut each: std::collections::BTreeMap<usize, Latency> = totals
                .cpus
                .iter()
                .map(|(&cpu, t)| {
                    let l = Latency {
                        distribution: Distribution::from_histogram(&t.main),
                        rate_hz: 1e9 / interval as f64,
                        description: String::new(),
                        figures: figures.get(&cpu).cloned(),
                    };
                    (cpu, l)
                })
                .collect();
            let candidates: Vec<(usize, i64)> = each
                .iter()
                .map(|(&cpu, l)| (cpu, l.value_at(by).unwrap_or(0)))
                .collect();
            let (cpu, worst) = pick(&candidates, select, "CPU", path)?;
            let which = if worst {
                format!("CPU {cpu} (the worst of {} by {by_name})", candidates.len())
            } else {
                format!("CPU {cpu}")
            };
            let mut l = each.remove(&cpu).ok_or_else(|| InputError::NoSamples {
                run: path.to_path_buf(),
            })?;
            l.description = format!(
                "corrected lateness of {which} in timer run {} ({} releases)",
                r.manifest.id,
                totals.cpus[&cpu].main.len()
            );
            Ok(l)
        }
        crate::RunKind::Hourglass => {
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
            let candidates: Vec<(usize, i64)> = per
                .iter()
                .map(|(&th, h)| {
                    let d = Distribution::from_histogram(h);
                    (th, d.quantile(by).unwrap_or(0))
                })
                .collect();
            let (th, worst) = pick(&candidates, select, "thread", path)?;
            let h = &per[&th];
            let active = summary["threads"][th]["active_ns"].as_u64().unwrap_or(0);
            if active == 0 {
                return Err(unusable(format!(
                    "{}: summary.json has no active time for thread {th}",
                    path.display()
                )));
            }
            let which = if worst {
                format!(
                    "LAT thread {th} (the worst of {} by {by_name})",
                    candidates.len()
                )
            } else {
                format!("LAT thread {th}")
            };
            Ok(Latency {
                rate_hz: h.len() as f64 * 1e9 / active as f64,
                distribution: Distribution::from_histogram(h),
                description: format!(
                    "lateness of {which} in hourglass run {} ({} wakeups, three significant digits)",
                    r.manifest.id,
                    h.len()
                ),
                figures: None,
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
    let t = table_of(
        &r,
        crate::RunKind::Hourglass,
        &tables::JOBS,
        path,
        "execution times come from an hourglass run with a PERIODIC thread (its jobs)",
    )?;
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

/// What one PERIODIC thread's jobs did, against a deadline ([`jobs_of_run`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobsObserved {
    /// Jobs whose period ended within the run.
    pub jobs: u64,
    /// Jobs not done by the end of their period, or done later than the deadline given.
    pub misses: u64,
    /// The first job that missed (0 is the first job, released at the thread's start).
    pub first_missed_job: Option<u64>,
    /// The longest completion minus release of a job that completed.
    pub worst_response_ns: Option<Nanos>,
    /// The longest first run minus release of a job that completed.
    pub worst_start_delay_ns: Option<Nanos>,
}

/// The jobs of each PERIODIC thread of an hourglass run, thread `i` held to `deadlines[i]`
/// (a job that completes after it is a miss too; Hourglass itself holds every job to the end of
/// its period). One pass over the run's `jobs` table; its memory does not grow with the run.
pub fn jobs_of_run(path: &Path, deadlines: &[Nanos]) -> Result<Vec<JobsObserved>, InputError> {
    let r = RunReader::open_any_state(path)?;
    let t = table_of(
        &r,
        crate::RunKind::Hourglass,
        &tables::JOBS,
        path,
        "jobs come from an hourglass run with a PERIODIC thread",
    )?;
    let mut out = vec![JobsObserved::default(); deadlines.len()];
    let cols = [
        "thread",
        "job",
        "release_ns",
        "first_run_ns",
        "end_ns",
        "outcome",
    ];
    t.scan::<ReadError>(&cols, |b| {
        let (th, job, release, first, end) = (
            b.i32s("thread")?,
            b.i64s("job")?,
            b.i64s("release_ns")?,
            b.i64s("first_run_ns")?,
            b.i64s("end_ns")?,
        );
        let outcome = b.texts("outcome")?;
        for i in 0..b.len() {
            let Some((o, d)) = usize::try_from(th[i])
                .ok()
                .and_then(|x| out.get_mut(x).zip(deadlines.get(x)))
            else {
                continue;
            };
            let d = d.0 as i64;
            o.jobs += 1;
            let response = end[i] - release[i];
            let hit = outcome[i].data() == b"hit";
            if hit {
                let at = |v: i64| Some(Nanos(v.max(0) as u64));
                o.worst_response_ns = o.worst_response_ns.max(at(response));
                o.worst_start_delay_ns = o.worst_start_delay_ns.max(at(first[i] - release[i]));
            }
            if !hit || response > d {
                o.misses += 1;
                let j = job[i].max(0) as u64;
                o.first_missed_job = Some(o.first_missed_job.map_or(j, |f| f.min(j)));
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// The late periods of CPU `cpu` of a timer run, and its stalls: the runs of consecutive
/// releases later than `slack_ns` (one stall of the CPU makes every release that falls due in
/// it late). One pass over the run's samples, in release order; memory does not grow with
/// the run.
pub fn stalls_of_run(
    path: &Path,
    cpu: usize,
    slack_ns: i64,
) -> Result<crate::check::trial::Stalls, InputError> {
    let r = RunReader::open_any_state(path)?;
    let t = table_of(
        &r,
        crate::RunKind::Timer,
        &tables::TIMER_SAMPLES,
        path,
        "stalls come from a timer run's samples",
    )?;
    let mut out = crate::check::trial::Stalls::default();
    // The index of the last late release seen, to join consecutive ones into one stall.
    let mut last_late: Option<i64> = None;
    t.scan::<ReadError>(&["cpu", "release", "lateness_ns"], |b| {
        let (c, release, late) = (b.i32s("cpu")?, b.i64s("release")?, b.i64s("lateness_ns")?);
        for i in 0..b.len() {
            if usize::try_from(c[i]).ok() != Some(cpu) {
                continue;
            }
            out.periods += 1;
            if late[i] > slack_ns {
                out.late += 1;
                if last_late != Some(release[i] - 1) {
                    out.stalls += 1;
                }
                last_late = Some(release[i]);
            }
        }
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_run_specs() {
        assert_eq!(parse_quantile("p50"), Ok(0.5));
        assert!((parse_quantile("p99.99").expect("q") - 0.9999).abs() < 1e-12);
        // The named percentiles are the constants every output uses, bit for bit.
        assert_eq!(parse_quantile("p99.9"), Ok(0.999));
        assert_eq!(percentile_name(0.999), Some("p99.9"));
        assert_eq!(percentile_name(1.0), Some("max"));
        assert_eq!(percentile_name(0.995), None);
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
    fn several_streams_give_the_worst() {
        let p = Path::new("r");
        assert_eq!(
            pick(&[(0, 5), (1, 9)], None, "CPU", p).expect("worst"),
            (1, true)
        );
        // Equal figures: the lowest number.
        assert_eq!(
            pick(&[(0, 9), (1, 9)], None, "CPU", p).expect("tie"),
            (0, true)
        );
        assert_eq!(
            pick(&[(0, 5), (1, 9)], Some(0), "CPU", p).expect("chosen"),
            (0, false)
        );
        assert_eq!(pick(&[(3, 5)], None, "CPU", p).expect("one"), (3, false));
        assert!(pick(&[(0, 5)], Some(2), "CPU", p).is_err());
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
