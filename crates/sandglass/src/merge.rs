//! Runs from many hosts as one distribution: `sandglass report --merge RUN…`.
//!
//! Each run's whole-run histograms (one per CPU, [`crate::store::data::totals`]) are added
//! together. HDR histograms add without loss: the merged histogram is exactly the histogram of
//! all the runs' samples together (the property test below checks it through the files the
//! runs write), so its percentiles are those of the pooled samples, at the histograms' three
//! significant digits. The merged figures pool every CPU of every run — a fleet's distribution
//! — where a single run's summary gives its worst CPU (docs/json.md); the output says so.

use crate::engine::record::new_histogram;
use crate::histo::{self, Histogram, Percentiles};
use crate::store::{ReadError, RunReader};
use crate::RunKind;
use serde::Serialize;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why runs cannot be compared or merged.
#[derive(Debug, Error)]
pub enum CompareError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{run}: a {kind} run; compare reads timer and noise runs")]
    Kind { run: PathBuf, kind: String },
    #[error("{a} is a {ka} run and {b} a {kb} run: compare runs of one kind")]
    Mixed {
        a: PathBuf,
        ka: String,
        b: PathBuf,
        kb: String,
    },
    #[error("{path}: line {line}: {what}")]
    Data {
        path: PathBuf,
        line: usize,
        what: String,
    },
    #[error("{run}: no samples to compare")]
    Empty { run: PathBuf },
}

/// The version of `report --merge --json`.
pub const JSON_SCHEMA: &str = "sandglass-merge/1";

/// One run's part of the merge.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct MergedRun {
    pub id: String,
    pub path: PathBuf,
    pub host: String,
    pub kernel: String,
    pub started_at: String,
    /// CPUs measured.
    pub cpus: usize,
    /// Missed releases (timer runs), all CPUs.
    pub missed: u64,
    /// The run's samples, all CPUs pooled.
    pub pooled: Percentiles,
}

/// The merge of several runs of one kind.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Merged {
    /// `sandglass-merge/1`.
    pub schema: &'static str,
    /// `timer` (lateness) or `noise` (interruption durations).
    #[schemars(with = "String")]
    pub kind: RunKind,
    /// What every figure is: all CPUs of all runs pooled.
    pub pooling: &'static str,
    pub runs: Vec<MergedRun>,
    /// Hosts, in the order first seen.
    pub hosts: Vec<String>,
    pub missed: u64,
    /// Every sample of every run.
    pub merged: Percentiles,
    #[serde(skip)]
    #[schemars(skip)]
    pub histogram: Histogram<u64>,
}

/// Adds `from` into `into`, sample for sample.
pub fn add(into: &mut Histogram<u64>, from: &Histogram<u64>) -> Result<(), String> {
    into.add(from)
        .map_err(|e| format!("the histograms cannot be added ({e:?})"))
}

fn one(path: &Path) -> Result<(MergedRun, Histogram<u64>, RunKind), CompareError> {
    let r = RunReader::open(path)?;
    let kind = r.manifest.kind.clone();
    if !matches!(kind, RunKind::Timer | RunKind::Noise) {
        return Err(CompareError::Kind {
            run: path.to_path_buf(),
            kind: kind.to_string(),
        });
    }
    let totals = crate::store::data::totals(&r)?;
    let pooled = totals.pooled();
    let missed = if kind == RunKind::Timer {
        r.read("summary.json")
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .map(|s| {
                s["cpus"]
                    .as_array()
                    .map(|c| c.iter().filter_map(|c| c["missed_releases"].as_u64()).sum())
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    } else {
        0
    };
    let Some(p) = histo::percentiles(&pooled, None, None) else {
        return Err(CompareError::Empty {
            run: path.to_path_buf(),
        });
    };
    let m = &r.manifest;
    Ok((
        MergedRun {
            id: m.id.clone(),
            path: path.to_path_buf(),
            host: m.system.hostname.clone(),
            kernel: m.system.kernel_release.clone(),
            started_at: m.started_at.clone(),
            cpus: totals.cpus.len(),
            missed,
            pooled: p,
        },
        pooled,
        kind,
    ))
}

/// Merges the runs at `paths` (timer or noise runs, all of one kind), verifying every file it
/// reads.
pub fn merge(paths: &[PathBuf]) -> Result<Merged, CompareError> {
    let mut total = new_histogram();
    let mut runs = Vec::with_capacity(paths.len());
    let mut kind: Option<(RunKind, PathBuf)> = None;
    for p in paths {
        let (run, h, k) = one(p)?;
        match &kind {
            Some((first, at)) if *first != k => {
                return Err(CompareError::Mixed {
                    a: at.clone(),
                    ka: first.to_string(),
                    b: p.clone(),
                    kb: k.to_string(),
                })
            }
            Some(_) => {}
            None => kind = Some((k, p.clone())),
        }
        add(&mut total, &h).map_err(|what| CompareError::Data {
            path: p.clone(),
            line: 0,
            what,
        })?;
        runs.push(run);
    }
    let Some((kind, first)) = kind else {
        return Err(CompareError::Empty {
            run: PathBuf::from("(no runs)"),
        });
    };
    let merged =
        histo::percentiles(&total, None, None).ok_or(CompareError::Empty { run: first })?;
    let mut hosts: Vec<String> = Vec::new();
    for r in &runs {
        if !hosts.contains(&r.host) {
            hosts.push(r.host.clone());
        }
    }
    Ok(Merged {
        schema: JSON_SCHEMA,
        kind,
        pooling: "every CPU of every run",
        missed: runs.iter().map(|r| r.missed).sum(),
        runs,
        hosts,
        merged,
        histogram: total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histo::{read_interval_log, write_interval_log, LogEntry};
    use proptest::prelude::*;

    /// A histogram written as a run writes `totals.hlog` and read back as the readers do.
    fn through_a_log(samples: &[u64]) -> Histogram<u64> {
        let mut h = new_histogram();
        for &s in samples {
            h.saturating_record(s);
        }
        let bytes = write_interval_log(
            &["test".to_string()],
            None,
            &[LogEntry {
                tag: "cpu0-lateness".to_string(),
                start_s: 0.0,
                duration_s: 1.0,
                histogram: &h,
            }],
        )
        .expect("write");
        let mut e = read_interval_log(&bytes, |_| true).expect("read");
        e.remove(0).histogram
    }

    proptest! {
        /// Merging two runs' histograms gives the histogram of their samples together: every
        /// bucket's count, so every percentile, the count, minimum and maximum.
        #[test]
        fn merged_histogram_is_the_histogram_of_all_samples(
            a in proptest::collection::vec(0u64..5_000_000_000, 1..300),
            b in proptest::collection::vec(0u64..5_000_000_000, 1..300),
        ) {
            let mut merged = through_a_log(&a);
            add(&mut merged, &through_a_log(&b)).expect("add");
            let mut all = new_histogram();
            for &s in a.iter().chain(&b) {
                all.saturating_record(s);
            }
            prop_assert_eq!(merged.len(), (a.len() + b.len()) as u64);
            let buckets = |h: &Histogram<u64>| -> Vec<(u64, u64)> {
                h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect()
            };
            prop_assert_eq!(buckets(&merged), buckets(&all));
            prop_assert_eq!(
                histo::percentiles(&merged, None, None),
                histo::percentiles(&all, None, None)
            );
        }
    }
}
