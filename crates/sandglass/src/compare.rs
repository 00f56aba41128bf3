//! Comparing runs: key figures side by side, relative change, a test of whether the
//! distributions differ, and the gates a CI job acts on.
//!
//! The first run is the baseline. For a timer run the distribution is every release's corrected
//! lateness; for a noise run, every interruption's duration. Figures: the worst CPU's exact
//! nearest-rank percentiles and maximum, as the run's summary gives them
//! ([`crate::histo::worst_cpu`]: each figure the largest over the CPUs, the same number that
//! study tables, `runs` and `report` show), and the kind's counts summed over CPUs. Every
//! figure is one where larger is worse. The test of whether two runs differ takes the samples of
//! all CPUs together.
//!
//! **Regression.** A candidate's figure is a regression when it is worse than the baseline's by
//! more than the tolerance (default 5%) *and* that figure's own change is significant
//! ([`significant`]): for a percentile, its distribution-free 95% interval ([`quantile_ci`],
//! order statistics of every sample of all CPUs) lies wholly above the baseline's; for a count,
//! the exact conditional test of two Poisson rates ([`count_p`]) gives p < alpha (default
//! 0.01). A maximum is one sample per run and never significant on its own. The Mann–Whitney
//! test and the bootstrap intervals of p99 say whether the distributions differ as a whole;
//! they flag nothing. Samples beyond 20,000 per run are thinned deterministically (every k-th,
//! in time order) for the test and the bootstrap; the percentile intervals take their ranks
//! among every sample, from the run's largest 20,000 exactly where the ranks lie among them.
//!
//! **Gates.** `fail_above` thresholds apply to every candidate (or to the only run when one is
//! given); `fail_regression` fails when a flagged regression exceeds the given share. Exit
//! codes (the command's): 0 pass, 2 a gate crossed, 1 an error.

use crate::analysis::significance::{bootstrap_percentile_ci, mann_whitney};
use crate::histo::{self, Percentiles};
pub use crate::merge::CompareError;
use crate::store::table::{tables, TableReader};
use crate::store::{ReadError, RunReader};
use crate::RunKind;
use serde::Serialize;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Most samples per run in the test and the bootstrap.
pub const TEST_SAMPLES: usize = 20_000;

/// One run's data: its figures and a thinned sample for the tests.
#[derive(Clone, Debug)]
pub struct RunData {
    pub path: PathBuf,
    pub id: String,
    pub kind: RunKind,
    /// Samples of the figures: releases (timer) or interruptions (noise) of the worst CPU for
    /// one run, of every CPU of every run for a group.
    pub count: u64,
    /// Samples in the run's table, every CPU: what [`RunData::thinned`] was taken from, and the
    /// weight of this run in a group's test sample.
    pub scanned: u64,
    /// CPUs measured.
    pub cpus: usize,
    /// The worst CPU's exact nearest-rank values of [`PERCENTILES`], in ns, in that order.
    pub quantiles: Vec<f64>,
    /// Missed releases (timer).
    pub missed: u64,
    /// Every k-th sample in time order, at most [`TEST_SAMPLES`] of them.
    pub thinned: Vec<f64>,
    /// The largest [`TEST_SAMPLES`] of all `scanned` samples, exactly, largest first.
    pub top: Vec<f64>,
    /// What `missed` or `count` is counted over: the releases of every CPU (timer), the
    /// measured time in ns of the CPUs counted (noise).
    pub exposure: f64,
    /// Runs merged into this one ([`load_group`]); 1 for a single run, whose times are its
    /// worst CPU's, where a group's pool every CPU of every run.
    pub runs: usize,
}

impl RunData {
    /// The data of `samples` (in time order), for tests and callers with samples in memory.
    pub fn from_samples(path: &Path, kind: RunKind, samples: &[i64], missed: u64) -> RunData {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let k = samples.len().div_ceil(TEST_SAMPLES).max(1);
        let top = s
            .iter()
            .rev()
            .take(TEST_SAMPLES)
            .map(|&x| x as f64)
            .collect();
        RunData {
            path: path.to_path_buf(),
            id: path.display().to_string(),
            kind,
            count: samples.len() as u64,
            scanned: samples.len() as u64,
            cpus: 1,
            quantiles: PERCENTILES
                .iter()
                .map(|&(_, q)| crate::stats::quantile_sorted(&s, q).unwrap_or(0) as f64)
                .collect(),
            missed,
            thinned: samples.iter().step_by(k).map(|&x| x as f64).collect(),
            top,
            exposure: samples.len() as f64,
            runs: 1,
        }
    }
}

/// Reads a timer or noise run, verifying every file it uses: the figures come from its summary
/// (the worst CPU's), and one pass over its samples gives the thinned sample for the test
/// (memory does not grow with the run).
pub fn load(path: &Path) -> Result<RunData, CompareError> {
    let r = RunReader::open(path)?;
    let kind = r.manifest.kind.clone();
    let (table, column, field) = match kind {
        RunKind::Timer => (&tables::TIMER_SAMPLES, "lateness_ns", "lateness_ns"),
        RunKind::Noise => (
            &tables::NOISE_INTERRUPTIONS,
            "duration_ns",
            "percentiles_ns",
        ),
        _ => {
            return Err(CompareError::Kind {
                run: path.to_path_buf(),
                kind: kind.to_string(),
            })
        }
    };
    let summary: serde_json::Value =
        serde_json::from_slice(&r.read("summary.json")?).map_err(|e| CompareError::Data {
            path: path.join("summary.json"),
            line: 1,
            what: format!("not valid JSON ({e})"),
        })?;
    let cpus = summary["cpus"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let per_cpu: Vec<Percentiles> = cpus
        .iter()
        .filter_map(|c| serde_json::from_value(c[field].clone()).ok())
        .collect();
    // A summary without per-CPU figures (an older run) gives each CPU's whole-run histogram.
    let per_cpu = if per_cpu.is_empty() {
        crate::store::data::totals(&r)?
            .cpus
            .values()
            .filter_map(|c| histo::percentiles(&c.main, None, None))
            .collect()
    } else {
        per_cpu
    };
    let Some(worst) = histo::worst_cpu(&per_cpu) else {
        return Err(CompareError::Empty {
            run: path.to_path_buf(),
        });
    };
    let n = worst.count;
    // Every CPU's samples are in the table: thin them all to at most TEST_SAMPLES.
    let all: u64 = per_cpu.iter().map(|p| p.count).sum();
    let k = (all as usize).div_ceil(TEST_SAMPLES).max(1);
    let mut thinned = Vec::with_capacity(TEST_SAMPLES + 1);
    let mut top = TopK::new(TEST_SAMPLES);
    let mut seen = 0usize;
    let t = TableReader::open(&r, table).ok_or_else(|| CompareError::Empty {
        run: path.to_path_buf(),
    })?;
    t.scan::<ReadError>(&[column], |b| {
        for &x in b.i64s(column)? {
            if seen.is_multiple_of(k) {
                thinned.push(x as f64);
            }
            top.add(x);
            seen += 1;
        }
        Ok(())
    })?;
    // Missed releases are counted in the summary (the samples' flags say the same).
    let missed = cpus
        .iter()
        .filter_map(|c| c["missed_releases"].as_u64())
        .sum();
    let quantiles = PERCENTILES
        .iter()
        .map(|(name, _)| worst.get(name).unwrap_or(0) as f64)
        .collect();
    // Missed releases are counted over every CPU's releases; interruptions are the worst
    // CPU's, over the run's measured time.
    let exposure = if kind == RunKind::Timer {
        seen as f64
    } else {
        summary["elapsed_ns"].as_f64().unwrap_or(0.0)
    };
    Ok(RunData {
        path: path.to_path_buf(),
        id: r.manifest.id.clone(),
        kind,
        count: n,
        scanned: seen as u64,
        cpus: per_cpu.len(),
        quantiles,
        missed,
        thinned,
        top: top.into_sorted(),
        exposure,
        runs: 1,
    })
}

/// The largest `k` values seen, in bounded memory.
struct TopK {
    k: usize,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<i64>>,
}

impl TopK {
    fn new(k: usize) -> TopK {
        TopK {
            k,
            heap: std::collections::BinaryHeap::with_capacity(k + 1),
        }
    }

    fn add(&mut self, x: i64) {
        if self.heap.len() < self.k {
            self.heap.push(std::cmp::Reverse(x));
        } else if self.heap.peek().is_some_and(|m| x > m.0) {
            self.heap.pop();
            self.heap.push(std::cmp::Reverse(x));
        }
    }

    /// Largest first.
    fn into_sorted(self) -> Vec<f64> {
        // `into_sorted_vec` of `Reverse` is ascending in Reverse: descending in the values.
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|r| r.0 as f64)
            .collect()
    }
}

/// Several runs as one side of a comparison (`sandglass compare A+B+C …`), from many hosts as
/// well as one: the times are the percentiles of every sample of every run, all CPUs pooled,
/// from their histograms added without loss ([`crate::merge`]); the missed releases and the
/// samples add up; the sample for the tests takes from each run in proportion to its samples.
/// One path is [`load`] of it.
pub fn load_group(paths: &[PathBuf]) -> Result<RunData, CompareError> {
    match paths {
        [] => Err(CompareError::Empty {
            run: PathBuf::from("(no runs)"),
        }),
        [one] => load(one),
        _ => {
            let merged = crate::merge::merge(paths)?;
            let parts = load_all(paths)?;
            Ok(pool(&parts, &merged))
        }
    }
}

/// The group of `parts` whose histograms `merged` added.
fn pool(parts: &[RunData], merged: &crate::merge::Merged) -> RunData {
    let total: u64 = parts.iter().map(|p| p.scanned).sum::<u64>().max(1);
    let mut thinned = Vec::with_capacity(TEST_SAMPLES + parts.len());
    for p in parts {
        // This run's share of the test sample, taken evenly from its own thinned sample
        // (which holds at least that many: min(count, TEST_SAMPLES)).
        let want = ((TEST_SAMPLES as u128 * u128::from(p.scanned)).div_ceil(u128::from(total))
            as usize)
            .min(p.thinned.len());
        if want == 0 {
            continue;
        }
        let step = p.thinned.len() as f64 / want as f64;
        thinned.extend((0..want).map(|i| p.thinned[(i as f64 * step) as usize]));
    }
    let m = &merged.merged;
    let mut top: Vec<f64> = parts.iter().flat_map(|p| p.top.iter().copied()).collect();
    top.sort_unstable_by(|a, b| b.total_cmp(a));
    top.truncate(TEST_SAMPLES);
    // A group's count pools every CPU of every run: its exposure is each run's over all its
    // CPUs (a run's own is its worst CPU's for a noise run).
    let exposure = parts
        .iter()
        .map(|p| {
            if p.kind == RunKind::Timer {
                p.exposure
            } else {
                p.exposure * p.cpus as f64
            }
        })
        .sum();
    RunData {
        path: parts.first().map(|p| p.path.clone()).unwrap_or_default(),
        id: parts
            .iter()
            .map(|p| p.id.as_str())
            .collect::<Vec<_>>()
            .join("+"),
        kind: merged.kind.clone(),
        count: m.count,
        scanned: parts.iter().map(|p| p.scanned).sum(),
        cpus: merged.runs.iter().map(|r| r.cpus).sum(),
        quantiles: PERCENTILES
            .iter()
            .map(|(name, _)| m.get(name).unwrap_or(0) as f64)
            .collect(),
        missed: merged.missed,
        thinned,
        top,
        exposure,
        runs: parts.len(),
    }
}

/// [`load`] of every run of `paths`, in order, as many at once as there are CPUs to read them.
pub fn load_all(paths: &[PathBuf]) -> Result<Vec<RunData>, CompareError> {
    let width = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = Vec::with_capacity(paths.len());
    for chunk in paths.chunks(width) {
        let loaded: Vec<Result<RunData, CompareError>> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk.iter().map(|p| s.spawn(move || load(p))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        for r in loaded {
            out.push(r?);
        }
    }
    Ok(out)
}

/// The figures compared, in order: name and nearest-rank quantile (`None`: the maximum).
pub const PERCENTILES: [(&str, f64); 6] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("p99.99", 0.9999),
    ("max", 1.0),
];

/// A run's figures.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Figures {
    /// The run's id; for a group, its runs' ids joined by `+`.
    pub run: String,
    /// The run's directory; for a group, its first run's.
    pub path: String,
    pub samples: usize,
    /// CPUs measured; the times are the worst CPU's (of a group: every CPU pooled).
    pub cpus: usize,
    /// Runs merged into this column: 1, or a group's size (`compare A+B …`).
    pub runs: usize,
    /// The figures in [`PERCENTILES`] order, then `missed` (timer) or `count` (noise).
    pub values: Vec<Figure>,
}

/// One named figure of a run: times in ns, counts as they are.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Figure {
    /// `p50` ... `max`, `missed` or `count`.
    pub name: String,
    pub value: f64,
}

/// A confidence interval of a time, in ns.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Interval {
    pub low_ns: f64,
    pub high_ns: f64,
}

fn figures(d: &RunData) -> Figures {
    let figure = |name: &str, value: f64| Figure {
        name: name.to_string(),
        value,
    };
    let mut values: Vec<Figure> = PERCENTILES
        .iter()
        .zip(&d.quantiles)
        .map(|(&(name, _), &v)| figure(name, v))
        .collect();
    if d.kind == RunKind::Timer {
        values.push(figure("missed", d.missed as f64));
    } else {
        values.push(figure("count", d.count as f64));
    }
    Figures {
        run: d.id.clone(),
        path: d.path.display().to_string(),
        samples: d.count as usize,
        cpus: d.cpus,
        runs: d.runs,
        values,
    }
}

/// One figure of one candidate against the baseline.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Change {
    pub figure: String,
    pub baseline: f64,
    pub value: f64,
    /// (value − baseline) / baseline; `None` when the baseline is 0.
    pub relative: Option<f64>,
    /// A percentile's distribution-free 95% interval in the baseline and in this run (ns);
    /// null for the maximum and the counts, or when the samples cannot bound it.
    pub ci_baseline: Option<Interval>,
    pub ci: Option<Interval>,
    /// A count's p value: the exact conditional test of two Poisson rates.
    pub p_value: Option<f64>,
    /// This figure's own change is significant: the intervals are disjoint (a percentile) or
    /// p < alpha (a count). Never for the maximum, which is one sample per run.
    pub significant: bool,
    /// How the change was judged: `interval`, `count`, `one sample` (the maximum) or `too few
    /// samples` (no interval can be had at this percentile).
    pub basis: String,
    /// Worse by more than the tolerance and significant.
    pub regression: bool,
}

/// A candidate run against the baseline.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Comparison {
    pub run: String,
    pub changes: Vec<Change>,
    /// Two-sided Mann–Whitney p value of the (thinned) samples.
    pub p_value: Option<f64>,
    /// Bootstrap 95% intervals of p99: baseline's and this run's.
    pub p99_ci_baseline: Option<Interval>,
    pub p99_ci: Option<Interval>,
    /// The distributions differ as a whole (p < alpha, or the p99 bootstrap intervals do not
    /// overlap); it flags no figure by itself.
    pub differs: bool,
}

/// A gate: `figure` must not exceed `limit`.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Gate {
    pub figure: String,
    pub limit: f64,
}

/// How to compare.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub alpha: f64,
    /// A worse figure counts as a regression beyond this share (0.05: 5%).
    pub tolerance: f64,
    pub fail_above: Vec<Gate>,
    /// Fail when a regression exceeds this share.
    pub fail_regression: Option<f64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            alpha: 0.01,
            tolerance: 0.05,
            fail_above: Vec::new(),
            fail_regression: None,
        }
    }
}

/// A crossed gate.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Crossed {
    pub run: String,
    pub figure: String,
    pub value: f64,
    pub limit: f64,
    /// `above` (a `fail_above` threshold; `value` the figure), `regression` (`value` the
    /// relative change) or `new` (a regression from a baseline of 0; `value` the figure).
    pub gate: String,
}

/// The version of `sandglass compare --json`.
pub const JSON_SCHEMA: &str = "sandglass-compare/1";

/// The whole comparison.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// [`JSON_SCHEMA`].
    pub schema: &'static str,
    #[schemars(with = "String")]
    pub kind: RunKind,
    pub figures: Vec<Figures>,
    pub comparisons: Vec<Comparison>,
    pub crossed: Vec<Crossed>,
    pub alpha: f64,
    pub tolerance: f64,
    /// 0 pass, 2 a gate crossed.
    pub exit_code: u8,
}

fn ci99(v: &[f64]) -> Option<Interval> {
    bootstrap_percentile_ci(v, 0.99, 0.95, 200, 0x5a4d)
        .ok()
        .map(|c| Interval {
            low_ns: c.ci_low,
            high_ns: c.ci_high,
        })
}

/// z of a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

/// The ranks (1-based, ascending) of the distribution-free 95% interval of the `q` quantile
/// among `n` samples: the number of samples below the true quantile is Binomial(n, q), so
/// `[x_(l), x_(u)]` with `l = ⌊nq − z·√(nq(1−q))⌋` and `u = ⌈nq + z·√(nq(1−q))⌉ + 1` holds it
/// with about 95% probability (the normal approximation of the binomial). `None` when either
/// rank falls outside 1..=n: the samples cannot bound that quantile.
pub fn quantile_ci_ranks(n: u64, q: f64) -> Option<(u64, u64)> {
    if n == 0 {
        return None;
    }
    let nq = n as f64 * q;
    let half = Z95 * (nq * (1.0 - q)).sqrt();
    let l = (nq - half).floor();
    let u = (nq + half).ceil() + 1.0;
    (l >= 1.0 && u <= n as f64).then_some((l as u64, u as u64))
}

/// The 95% interval of the `q` quantile of a run's samples (every CPU's): ranked among all
/// `scanned` samples where both ranks lie among the exact largest ones (`top`), otherwise
/// among the thinned sample.
pub fn quantile_ci(d: &RunData, q: f64) -> Option<Interval> {
    let n = d.scanned;
    if let Some((l, u)) = quantile_ci_ranks(n, q) {
        let from_top = |rank: u64| d.top.get((n - rank) as usize).copied();
        if let (Some(low), Some(high)) = (from_top(l), from_top(u)) {
            return Some(Interval {
                low_ns: low,
                high_ns: high,
            });
        }
    }
    let mut s = d.thinned.clone();
    s.sort_unstable_by(f64::total_cmp);
    let (l, u) = quantile_ci_ranks(s.len() as u64, q)?;
    Some(Interval {
        low_ns: s[(l - 1) as usize],
        high_ns: s[(u - 1) as usize],
    })
}

/// One-sided p value that a count `b` over `exposure_b` is higher than `a` over `exposure_a`,
/// as two Poisson rates: given the total, `b` is Binomial(a + b, eb / (ea + eb)) when the
/// rates are equal, and p = P(X ≥ b), exactly. 1 when there is nothing to judge (b is 0, or
/// an exposure is unknown).
pub fn count_p(a: u64, exposure_a: f64, b: u64, exposure_b: f64) -> f64 {
    use statrs::distribution::{Binomial, DiscreteCDF};
    if !(exposure_a > 0.0 && exposure_b > 0.0) || b == 0 {
        return 1.0;
    }
    let p = exposure_b / (exposure_a + exposure_b);
    Binomial::new(p, a + b).map_or(1.0, |d| d.sf(b - 1).clamp(0.0, 1.0))
}

/// How one figure's change was judged.
struct Judged {
    ci_baseline: Option<Interval>,
    ci: Option<Interval>,
    p_value: Option<f64>,
    significant: bool,
    basis: &'static str,
}

/// Whether the change of `figure` from `base` to `cand` is significant, and on what basis.
fn judge(figure: &str, base: &RunData, cand: &RunData, alpha: f64) -> Judged {
    let none = |basis| Judged {
        ci_baseline: None,
        ci: None,
        p_value: None,
        significant: false,
        basis,
    };
    if figure == "missed" || figure == "count" {
        let (a, b) = if figure == "missed" {
            (base.missed, cand.missed)
        } else {
            (base.count, cand.count)
        };
        let p = count_p(a, base.exposure, b, cand.exposure);
        return Judged {
            p_value: Some(p),
            significant: p < alpha,
            ..none("count")
        };
    }
    let Some(&(_, q)) = PERCENTILES.iter().find(|(n, _)| *n == figure) else {
        return none("one sample");
    };
    if q >= 1.0 {
        return none("one sample");
    }
    let (cb, cc) = (quantile_ci(base, q), quantile_ci(cand, q));
    match (cb, cc) {
        (Some(b), Some(c)) => Judged {
            ci_baseline: cb,
            ci: cc,
            p_value: None,
            significant: significant(b, c),
            basis: "interval",
        },
        _ => Judged {
            ci_baseline: cb,
            ci: cc,
            ..none("too few samples")
        },
    }
}

/// Two 95% intervals of one figure are apart: the change is significant.
pub fn significant(base: Interval, cand: Interval) -> bool {
    cand.low_ns > base.high_ns || cand.high_ns < base.low_ns
}

/// Compares `runs` (the first is the baseline) under `o`.
pub fn compare(runs: &[RunData], o: &Options) -> Result<Report, CompareError> {
    let kind = runs.first().map(|r| r.kind.clone()).unwrap_or_default();
    if let Some(other) = runs.iter().find(|r| r.kind != kind) {
        return Err(CompareError::Mixed {
            a: runs[0].path.clone(),
            ka: kind.to_string(),
            b: other.path.clone(),
            kb: other.kind.to_string(),
        });
    }
    let figures: Vec<Figures> = runs.iter().map(figures).collect();
    let mut comparisons = Vec::new();
    if runs.len() > 1 {
        let base = &runs[0].thinned;
        let base_ci = ci99(base);
        for (r, f) in runs.iter().zip(&figures).skip(1) {
            let cand = &r.thinned;
            let p = mann_whitney(cand, base).ok().map(|m| m.p);
            let ci = ci99(cand);
            let apart = matches!((base_ci, ci), (Some(b), Some(c)) if c.low_ns > b.high_ns);
            let differs = p.is_some_and(|p| p < o.alpha) || apart;
            let changes = f
                .values
                .iter()
                .zip(&figures[0].values)
                .map(|(v, b)| {
                    let (name, v, b) = (&v.name, &v.value, &b.value);
                    let relative = if *b != 0.0 {
                        Some((v - b) / b)
                    } else {
                        (*v == 0.0).then_some(0.0)
                    };
                    let worse = match relative {
                        Some(rel) => rel > o.tolerance,
                        None => *v > 0.0,
                    };
                    let j = judge(name, &runs[0], r, o.alpha);
                    Change {
                        figure: name.clone(),
                        baseline: *b,
                        value: *v,
                        relative,
                        ci_baseline: j.ci_baseline,
                        ci: j.ci,
                        p_value: j.p_value,
                        significant: j.significant,
                        basis: j.basis.into(),
                        regression: worse && j.significant && *v > *b,
                    }
                })
                .collect();
            comparisons.push(Comparison {
                run: f.run.clone(),
                changes,
                p_value: p,
                p99_ci_baseline: base_ci,
                p99_ci: ci,
                differs,
            });
        }
    }
    let mut crossed = Vec::new();
    let gated: Vec<&Figures> = if figures.len() > 1 {
        figures[1..].iter().collect()
    } else {
        figures.iter().collect()
    };
    for f in gated {
        for g in &o.fail_above {
            if let Some(v) = f
                .values
                .iter()
                .find(|v| v.name == g.figure)
                .map(|v| &v.value)
            {
                if *v > g.limit {
                    crossed.push(Crossed {
                        run: f.run.clone(),
                        figure: g.figure.clone(),
                        value: *v,
                        limit: g.limit,
                        gate: "above".into(),
                    });
                }
            }
        }
    }
    if let Some(limit) = o.fail_regression {
        for c in &comparisons {
            for ch in &c.changes {
                let beyond = ch.relative.map_or(ch.value > 0.0, |r| r > limit);
                if ch.regression && beyond {
                    // From 0 there is no relative change: the gate is `new`, its value the
                    // figure itself.
                    crossed.push(Crossed {
                        run: c.run.clone(),
                        figure: ch.figure.clone(),
                        value: ch.relative.unwrap_or(ch.value),
                        limit,
                        gate: if ch.relative.is_some() {
                            "regression"
                        } else {
                            "new"
                        }
                        .into(),
                    });
                }
            }
        }
    }
    Ok(Report {
        schema: JSON_SCHEMA,
        kind,
        exit_code: if crossed.is_empty() { 0 } else { 2 },
        figures,
        comparisons,
        crossed,
        alpha: o.alpha,
        tolerance: o.tolerance,
    })
}

/// The figures a gate may name.
pub fn known_figure(name: &str) -> bool {
    PERCENTILES.iter().any(|(n, _)| *n == name) || name == "missed" || name == "count"
}

/// Why a gate list or a share cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GateError {
    #[error("'{0}' is not FIGURE=VALUE, such as p99.99=100us")]
    NotAssignment(String),
    #[error("'{0}' is not a figure; use p50, p90, p99, p99.9, p99.99, max, missed or count")]
    Figure(String),
    #[error("'{value}' is not a count for {figure}")]
    Count { figure: String, value: String },
    #[error("{figure}={value}: {source}")]
    Time {
        figure: String,
        value: String,
        source: crate::duration::DurationError,
    },
    #[error("no gate given; use FIGURE=VALUE, such as p99.99=100us")]
    Empty,
    #[error("'{0}' is not a share; use a percentage such as 10%")]
    NotShare(String),
    #[error("'{0}' must be a share of at least 0%")]
    NegativeShare(String),
}

/// Parses `p99.99=100us,max=1ms,missed=0`: times take units (a bare number is ns); `missed`
/// and `count` are counts.
pub fn parse_gates(text: &str) -> Result<Vec<Gate>, GateError> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| GateError::NotAssignment(part.to_string()))?;
        let name = name.trim();
        if !known_figure(name) {
            return Err(GateError::Figure(name.to_string()));
        }
        let value = value.trim();
        let limit = if name == "missed" || name == "count" {
            value.parse::<u64>().map_err(|_| GateError::Count {
                figure: name.to_string(),
                value: value.to_string(),
            })? as f64
        } else {
            crate::duration::parse_or_ns(value)
                .map_err(|source| GateError::Time {
                    figure: name.to_string(),
                    value: value.to_string(),
                    source,
                })?
                .0 as f64
        };
        out.push(Gate {
            figure: name.to_string(),
            limit,
        });
    }
    if out.is_empty() {
        return Err(GateError::Empty);
    }
    Ok(out)
}

/// Parses a share: `10%` or `0.1`.
pub fn parse_share(text: &str) -> Result<f64, GateError> {
    let t = text.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| GateError::NotShare(text.to_string()))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(GateError::NegativeShare(text.to_string()));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::rng::SplitMix64;

    /// Lateness with a Pareto tail: at least 20 µs, p99 about 200 µs, all multiplied by
    /// `scale` (2.0: every percentile twice as late).
    fn run(seed: u64, n: usize, scale: f64) -> RunData {
        let mut r = SplitMix64::new(seed);
        let samples: Vec<i64> = (0..n)
            .map(|_| {
                let u = (r.below(1_000_000) as f64 + 0.5) / 1e6;
                (20_000.0 * (1.0 / (1.0 - u)).powf(0.5) * scale) as i64
            })
            .collect();
        RunData::from_samples(
            Path::new(&format!("run{seed}")),
            RunKind::Timer,
            &samples,
            0,
        )
    }

    fn change<'a>(c: &'a Comparison, f: &str) -> &'a Change {
        c.changes.iter().find(|x| x.figure == f).expect("figure")
    }

    #[test]
    fn a_doubled_tail_is_a_regression() {
        let base = run(1, 10_000, 1.0);
        let worse = run(2, 10_000, 2.0);
        let r = compare(&[base, worse], &Options::default()).expect("compares");
        let c = &r.comparisons[0];
        let p99 = change(c, "p99");
        assert!(p99.relative.expect("rel") > 0.7, "{p99:?}");
        assert!(p99.regression, "{c:?}");
        assert!(c.differs);
        assert_eq!(r.exit_code, 0, "no gate asked for");
    }

    #[test]
    fn the_same_distribution_is_not_a_regression() {
        let a = run(3, 10_000, 1.0);
        let b = run(4, 10_000, 1.0);
        let r = compare(&[a, b], &Options::default()).expect("compares");
        let c = &r.comparisons[0];
        assert!(!c.differs, "{c:?}");
        assert!(c.changes.iter().all(|x| !x.regression), "{c:?}");
    }

    #[test]
    fn gates() {
        let base = run(1, 10_000, 1.0);
        let worse = run(2, 10_000, 2.0);
        let o = Options {
            fail_regression: Some(0.10),
            ..Options::default()
        };
        let r = compare(&[base.clone(), worse.clone()], &o).expect("compares");
        assert_eq!(r.exit_code, 2);
        assert!(r
            .crossed
            .iter()
            .any(|x| x.figure == "p99" && x.gate == "regression"));
        // A threshold that the candidate's max crosses and the baseline's is not checked against.
        let max = r.figures[1]
            .values
            .iter()
            .find(|v| v.name == "max")
            .expect("max")
            .value;
        let o = Options {
            fail_above: vec![Gate {
                figure: "max".into(),
                limit: max - 1.0,
            }],
            ..Options::default()
        };
        let r = compare(&[base.clone(), worse], &o).expect("compares");
        assert_eq!((r.exit_code, r.crossed.len()), (2, 1));
        // One run alone: the gate applies to it.
        let o = Options {
            fail_above: vec![Gate {
                figure: "p50".into(),
                limit: 1e9,
            }],
            ..Options::default()
        };
        let r = compare(&[base], &o).expect("compares");
        assert_eq!(r.exit_code, 0);
    }

    /// The interval's ranks by hand: n = 100, q = 0.5: 50 ± 1.96·5 = 40.2..59.8, so ranks 40
    /// and 61; p99.99 of 20,000 samples cannot be bounded above (2 ± 2.8 from the top).
    #[test]
    fn quantile_interval_ranks() {
        assert_eq!(quantile_ci_ranks(100, 0.5), Some((40, 61)));
        assert_eq!(quantile_ci_ranks(20_000, 0.9999), None);
        assert_eq!(quantile_ci_ranks(0, 0.5), None);
        // 1,000 samples of the values 1..=1000: p99 is 990 ± 1.96·√9.9 = 983.8..996.2.
        let samples: Vec<i64> = (1..=1000).collect();
        let d = RunData::from_samples(Path::new("r"), RunKind::Timer, &samples, 0);
        assert_eq!(
            quantile_ci(&d, 0.99),
            Some(Interval {
                low_ns: 983.0,
                high_ns: 998.0
            })
        );
        assert!(significant(
            Interval {
                low_ns: 1.0,
                high_ns: 2.0
            },
            Interval {
                low_ns: 2.5,
                high_ns: 3.0
            }
        ));
        assert!(!significant(
            Interval {
                low_ns: 1.0,
                high_ns: 2.0
            },
            Interval {
                low_ns: 2.0,
                high_ns: 3.0
            }
        ));
    }

    /// Exact binomial tails: 0 against 5 over equal exposure is 2^-5; 3 against 3 is 42/64.
    #[test]
    fn count_tests_are_exact() {
        assert!((count_p(0, 1.0, 5, 1.0) - 1.0 / 32.0).abs() < 1e-9);
        assert!((count_p(3, 1.0, 3, 1.0) - 42.0 / 64.0).abs() < 1e-9);
        assert_eq!(count_p(4, 1.0, 0, 1.0), 1.0);
        // Twice the exposure: 0 against 5 at p = 2/3 each.
        assert!((count_p(0, 1.0, 5, 2.0) - (2.0f64 / 3.0).powi(5)).abs() < 1e-9);
    }

    /// A maximum is one sample per run: ten times the baseline's, it is shown, never flagged;
    /// the same samples with one outlier change no percentile significantly.
    #[test]
    fn a_maximum_alone_is_never_a_regression() {
        let base: Vec<i64> = (1..=1000).collect();
        let mut cand = base.clone();
        cand[999] = 10_000;
        let r = compare(
            &[
                RunData::from_samples(Path::new("a"), RunKind::Timer, &base, 0),
                RunData::from_samples(Path::new("b"), RunKind::Timer, &cand, 0),
            ],
            &Options {
                fail_regression: Some(0.0),
                ..Options::default()
            },
        )
        .expect("compares");
        let c = &r.comparisons[0];
        let max = change(c, "max");
        assert_eq!(max.relative, Some(9.0));
        assert_eq!((max.regression, max.significant), (false, false));
        assert_eq!(max.basis, "one sample");
        assert!(c.changes.iter().all(|x| !x.regression), "{c:?}");
        assert_eq!(r.exit_code, 0);
    }

    /// Missed releases: 0 to 5 of equal counts of releases is p = 1/32, not significant at
    /// 0.01; 0 to 10 is 1/1024, a regression.
    #[test]
    fn missed_releases_are_judged_by_their_own_test() {
        let s: Vec<i64> = (1..=1000).collect();
        let run = |missed| RunData::from_samples(Path::new("r"), RunKind::Timer, &s, missed);
        let r = compare(&[run(0), run(5)], &Options::default()).expect("compares");
        let m = change(&r.comparisons[0], "missed");
        assert_eq!((m.significant, m.regression), (false, false));
        assert!((m.p_value.expect("p") - 1.0 / 32.0).abs() < 1e-9);
        let r = compare(&[run(0), run(10)], &Options::default()).expect("compares");
        let m = change(&r.comparisons[0], "missed");
        assert_eq!((m.significant, m.regression), (true, true));
    }

    #[test]
    fn gate_syntax() {
        let g = parse_gates("p99.99=100us, max=1ms,missed=0").expect("valid");
        assert_eq!(g.len(), 3);
        assert_eq!((g[0].figure.as_str(), g[0].limit), ("p99.99", 100_000.0));
        assert_eq!(g[1].limit, 1_000_000.0);
        assert_eq!(g[2].limit, 0.0);
        assert!(parse_gates("p98=1ms")
            .unwrap_err()
            .to_string()
            .contains("not a figure"));
        assert!(parse_gates("p99")
            .unwrap_err()
            .to_string()
            .contains("FIGURE=VALUE"));
        assert!(parse_gates("max=soon").is_err());
        assert!(parse_gates("").is_err());
        assert_eq!(parse_share("10%").expect("valid"), 0.1);
        assert_eq!(parse_share("0.25").expect("valid"), 0.25);
        assert!(parse_share("-3%").is_err());
        assert!(parse_share("ten").is_err());
    }

    #[test]
    fn kinds_must_match() {
        let a = run(1, 100, 1.0);
        let mut b = run(2, 100, 1.0);
        b.kind = RunKind::Noise;
        assert!(matches!(
            compare(&[a, b], &Options::default()),
            Err(CompareError::Mixed { .. })
        ));
    }
}
