//! What readers need of a run, in memory that does not grow with the run: each CPU's whole-run
//! histograms, whichever way the run stored them.
//!
//! A run of format 2 keeps them in `totals.hlog`, written at its end. A run that ended without
//! writing it (killed, or its disk filled) still has its per-second histograms in
//! `histograms.hlog`, whose sum per CPU is the same histogram (HDR histograms add without loss).
//! A timer run of format 1 kept its whole-run histograms in `histograms.hlog`; a noise run of
//! format 1 had none, so its interruptions are counted from its table. Values are nanoseconds
//! at three significant digits.

use super::table::{tables, TableReader};
use super::{ReadError, RunReader};
use crate::engine::record::new_histogram;
use crate::histo;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;

/// One CPU's whole-run histograms.
#[derive(Clone, Debug)]
pub struct CpuTotals {
    /// Corrected lateness (timer) or interruption durations (noise).
    pub main: Histogram<u64>,
    /// Raw lateness, one per wakeup (timer runs that kept it).
    pub raw: Option<Histogram<u64>>,
    /// Intervals between wakeups (timer runs that kept it).
    pub interval: Option<Histogram<u64>>,
}

/// The whole-run histograms of a timer or noise run, by CPU.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    pub cpus: BTreeMap<usize, CpuTotals>,
}

impl Totals {
    /// Every CPU's main histogram added together.
    pub fn pooled(&self) -> Histogram<u64> {
        let mut h = new_histogram();
        for c in self.cpus.values() {
            let _ = h.add(&c.main);
        }
        h
    }
}

/// `cpuN` or `cpuN-what` as `(N, what)`.
fn split_tag(tag: &str) -> Option<(usize, &str)> {
    let rest = tag.strip_prefix("cpu")?;
    let (n, what) = rest.split_once('-').unwrap_or((rest, ""));
    Some((n.parse().ok()?, what))
}

fn log_error(run: &RunReader, name: &str, e: histo::LogError) -> ReadError {
    ReadError::Data {
        path: run.path().join(name),
        line: 0,
        what: e.to_string(),
    }
}

/// The whole-run histograms of `run` (a timer or noise run).
pub fn totals(run: &RunReader) -> Result<Totals, ReadError> {
    let noise = run.manifest.kind == crate::RunKind::Noise;
    let main_tag = if noise { "interruptions" } else { "lateness" };
    let mut out = Totals::default();
    let whole = |name: &str, out: &mut Totals| -> Result<bool, ReadError> {
        let bytes = run.read(name)?;
        let entries = histo::read_interval_log(&bytes, |t| {
            t.and_then(split_tag).is_some_and(|(_, w)| !w.is_empty())
        })
        .map_err(|e| log_error(run, name, e))?;
        for e in entries {
            let Some((cpu, what)) = e.tag.as_deref().and_then(split_tag) else {
                continue;
            };
            let slot = out.cpus.entry(cpu).or_insert_with(|| CpuTotals {
                main: new_histogram(),
                raw: None,
                interval: None,
            });
            match what {
                w if w == main_tag => slot.main = e.histogram,
                "raw" => slot.raw = Some(e.histogram),
                "interval" => slot.interval = Some(e.histogram),
                _ => {}
            }
        }
        Ok(!out.cpus.is_empty())
    };
    if run.has(super::TOTALS_LOG) && whole(super::TOTALS_LOG, &mut out)? {
        return Ok(out);
    }
    if run.has("histograms.hlog") {
        // Format 1 timer runs appended the whole-run histograms to the per-second log.
        if run.manifest.schema_version < 2 && whole("histograms.hlog", &mut out)? {
            return Ok(out);
        }
        let bytes = run.read("histograms.hlog")?;
        let entries = histo::read_interval_log(&bytes, |t| {
            t.and_then(split_tag).is_some_and(|(_, w)| w.is_empty())
        })
        .map_err(|e| log_error(run, "histograms.hlog", e))?;
        for e in entries {
            let Some((cpu, _)) = e.tag.as_deref().and_then(split_tag) else {
                continue;
            };
            let slot = out.cpus.entry(cpu).or_insert_with(|| CpuTotals {
                main: new_histogram(),
                raw: None,
                interval: None,
            });
            let _ = slot.main.add(&e.histogram);
        }
        if !out.cpus.is_empty() {
            return Ok(out);
        }
    }
    // No histograms: count the table (format 1 noise runs).
    let (table, column) = if noise {
        (&tables::NOISE_INTERRUPTIONS, "duration_ns")
    } else {
        (&tables::TIMER_SAMPLES, "lateness_ns")
    };
    if let Some(r) = TableReader::open(run, table) {
        r.scan::<ReadError>(&["cpu", column], |b| {
            let cpus = b.i32s("cpu")?;
            let v = b.i64s(column)?;
            for (c, &x) in cpus.iter().zip(v) {
                let slot = out.cpus.entry(*c as usize).or_insert_with(|| CpuTotals {
                    main: new_histogram(),
                    raw: None,
                    interval: None,
                });
                slot.main.saturating_record(x.max(0) as u64);
            }
            Ok(())
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags() {
        assert_eq!(split_tag("cpu12-raw"), Some((12, "raw")));
        assert_eq!(split_tag("cpu3"), Some((3, "")));
        assert_eq!(split_tag("x3"), None);
    }
}
