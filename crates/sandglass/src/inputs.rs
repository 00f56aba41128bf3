//! Measured inputs for the analyses, read from run directories: the latency distribution of a
//! timer run or of an Hourglass LAT thread, and the execution times of an Hourglass PERIODIC
//! thread. This is how a schedulability analysis is "fed by measured numbers": Cota-Robles &
//! Held's pseudo worst case (seed 000 §5.2) takes a latency at a chosen percentile as release
//! jitter, and a measured execution time as a task's C.

use crate::analysis::distribution::Distribution;
use crate::store::RunReader;
use crate::units::Nanos;
use std::path::{Path, PathBuf};

/// A latency distribution with the rate at which it was sampled.
#[derive(Clone, Debug)]
pub struct Latency {
    pub distribution: Distribution,
    /// Samples per second of one stream (one CPU or one thread).
    pub rate_hz: f64,
    /// What the samples are, for people: `CPU 1 of timer run X`.
    pub description: String,
}

/// A percentile name (`p50`, `p99.99`, `max`) as a quantile.
pub fn parse_quantile(name: &str) -> Result<f64, String> {
    if name == "max" {
        return Ok(1.0);
    }
    let digits = name
        .strip_prefix('p')
        .ok_or_else(|| format!("'{name}' is not a percentile: write p50, p99, p99.99 or max"))?;
    match digits.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p / 100.0),
        _ => Err(format!(
            "'{name}' is not a percentile: write p50, p99, p99.99 or max"
        )),
    }
}

/// `RUN@p99.99`, optionally `RUN@p99.99:N` to choose CPU or thread N.
pub fn parse_run_at(spec: &str) -> Result<(PathBuf, f64, Option<usize>), String> {
    let (run, rest) = spec
        .rsplit_once('@')
        .ok_or_else(|| format!("'{spec}': write RUN@PERCENTILE, such as runs/x@p99.99"))?;
    let (pct, select) = match rest.split_once(':') {
        Some((p, n)) => (
            p,
            Some(n.parse::<usize>().map_err(|_| {
                format!("'{spec}': after ':' give the CPU or thread number, such as @p99.99:1")
            })?),
        ),
        None => (rest, None),
    };
    Ok((PathBuf::from(run), parse_quantile(pct)?, select))
}

fn csv_rows(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines()
        .enumerate()
        .skip(1)
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.split(',').collect()))
}

fn field<T: std::str::FromStr>(
    row: &[&str],
    i: usize,
    file: &Path,
    line: usize,
) -> Result<T, String> {
    row.get(i)
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("{}:{line}: malformed row", file.display()))
}

fn choose(
    available: &[usize],
    select: Option<usize>,
    what: &str,
    run: &Path,
) -> Result<usize, String> {
    match (select, available) {
        (Some(s), _) if available.contains(&s) => Ok(s),
        (Some(s), _) => Err(format!(
            "{}: no {what} {s} in this run (it has {what} {})",
            run.display(),
            list(available)
        )),
        (None, [one]) => Ok(*one),
        (None, []) => Err(format!("{}: the run has no samples", run.display())),
        (None, many) => Err(format!(
            "{}: the run measured {what}s {}; choose one with :N (RUN@p99:N) or --cpu N",
            run.display(),
            list(many)
        )),
    }
}

fn list(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The latency distribution of a run: the corrected lateness of one CPU of a `timer` run, or
/// the lateness of one LAT thread of an `hourglass` run. `select` chooses the CPU or thread
/// when the run has several.
pub fn latency_from_run(path: &Path, select: Option<usize>) -> Result<Latency, String> {
    let r = RunReader::open(path).map_err(|e| e.to_string())?;
    let summary: serde_json::Value =
        r.read("summary.json")
            .map_err(|e| e.to_string())
            .and_then(|b| {
                serde_json::from_slice(&b)
                    .map_err(|e| format!("{}: summary.json is not valid JSON: {e}", path.display()))
            })?;
    match r.manifest.kind.as_str() {
        "timer" => {
            let text = r.read_text("samples.csv").map_err(|e| e.to_string())?;
            let file = path.join("samples.csv");
            let mut rows = Vec::new();
            for (line, row) in csv_rows(&text) {
                let cpu: usize = field(&row, 0, &file, line)?;
                let late: i64 = field(&row, 3, &file, line)?;
                rows.push((cpu, late));
            }
            let mut cpus: Vec<usize> = rows.iter().map(|r| r.0).collect();
            cpus.sort_unstable();
            cpus.dedup();
            let cpu = choose(&cpus, select, "CPU", path)?;
            let samples: Vec<i64> = rows.iter().filter(|r| r.0 == cpu).map(|r| r.1).collect();
            let interval = summary["interval_ns"].as_u64().unwrap_or(0);
            if interval == 0 {
                return Err(format!("{}: summary.json has no interval_ns", path.display()));
            }
            Ok(Latency {
                distribution: Distribution::from_samples(&samples),
                rate_hz: 1e9 / interval as f64,
                description: format!(
                    "corrected lateness of CPU {cpu} in timer run {} ({} releases)",
                    r.manifest.id,
                    samples.len()
                ),
            })
        }
        "hourglass" => {
            if !r.has("latency.csv") {
                return Err(format!(
                    "{}: this hourglass run has no LAT thread, so no latency samples",
                    path.display()
                ));
            }
            let text = r.read_text("latency.csv").map_err(|e| e.to_string())?;
            let file = path.join("latency.csv");
            let mut rows = Vec::new();
            for (line, row) in csv_rows(&text) {
                let thread: usize = field(&row, 0, &file, line)?;
                let late: i64 = field(&row, 2, &file, line)?;
                rows.push((thread, late));
            }
            let mut threads: Vec<usize> = rows.iter().map(|r| r.0).collect();
            threads.sort_unstable();
            threads.dedup();
            let t = choose(&threads, select, "thread", path)?;
            let samples: Vec<i64> = rows.iter().filter(|r| r.0 == t).map(|r| r.1).collect();
            let active = summary["threads"][t]["active_ns"].as_u64().unwrap_or(0);
            if active == 0 {
                return Err(format!("{}: summary.json has no active time for thread {t}", path.display()));
            }
            Ok(Latency {
                rate_hz: samples.len() as f64 * 1e9 / active as f64,
                distribution: Distribution::from_samples(&samples),
                description: format!(
                    "lateness of LAT thread {t} in hourglass run {} ({} wakeups)",
                    r.manifest.id,
                    samples.len()
                ),
            })
        }
        other => Err(format!(
            "{}: a {other} run has no latency samples; give a timer run or an hourglass run with a LAT thread",
            path.display()
        )),
    }
}

/// The execution time of the jobs of PERIODIC thread `thread` of an hourglass run at quantile
/// `q`: from each job's first run to its completion, over the jobs that completed (a pseudo
/// worst-case C).
pub fn execution_time_from_run(
    path: &Path,
    thread: Option<usize>,
    q: f64,
) -> Result<(Nanos, String), String> {
    let r = RunReader::open(path).map_err(|e| e.to_string())?;
    if r.manifest.kind != "hourglass" || !r.has("jobs.csv") {
        return Err(format!(
            "{}: execution times come from an hourglass run with a PERIODIC thread (its jobs.csv)",
            path.display()
        ));
    }
    let text = r.read_text("jobs.csv").map_err(|e| e.to_string())?;
    let file = path.join("jobs.csv");
    let mut rows = Vec::new();
    for (line, row) in csv_rows(&text) {
        let t: usize = field(&row, 0, &file, line)?;
        let first: i64 = field(&row, 4, &file, line)?;
        let end: i64 = field(&row, 5, &file, line)?;
        let hit = row.get(7).map(|s| s.trim() == "hit").unwrap_or(false);
        rows.push((t, end - first, hit));
    }
    let mut threads: Vec<usize> = rows.iter().map(|r| r.0).collect();
    threads.sort_unstable();
    threads.dedup();
    let t = choose(&threads, thread, "thread", path)?;
    let mut times: Vec<i64> = rows
        .iter()
        .filter(|r| r.0 == t && r.2)
        .map(|r| r.1.max(0))
        .collect();
    times.sort_unstable();
    let v = crate::stats::quantile_sorted(&times, q).ok_or_else(|| {
        format!(
            "{}: thread {t} completed no job, so it has no execution time",
            path.display()
        )
    })?;
    Ok((
        Nanos(v as u64),
        format!(
            "execution time of PERIODIC thread {t} in hourglass run {} ({} completed jobs)",
            r.manifest.id,
            times.len()
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
        assert_eq!(choose(&[1], None, "CPU", p), Ok(1));
        assert_eq!(choose(&[0, 1], Some(0), "CPU", p), Ok(0));
        assert!(choose(&[0, 1], None, "CPU", p)
            .expect_err("many")
            .contains("choose one"));
        assert!(choose(&[0, 1], Some(5), "CPU", p)
            .expect_err("absent")
            .contains("no CPU 5"));
    }
}
