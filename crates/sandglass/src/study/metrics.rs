//! The key figures of a cell, by name, for a study's tables and for resuming without re-reading
//! runs.
//!
//! A measurement on several CPUs gives each figure for its worst CPU (the highest latency, the
//! most noise), and counts summed over CPUs; the names say the unit (`_us`, `_ms`, `_pct`,
//! `_per_s`).

use crate::analysis::distribution::Distribution;
use crate::analysis::worst_case::{self, UsagePattern, WorstCaseConfig};
use crate::hourglass::result::HourglassResult;
use crate::load::LoadReport;
use crate::model::Workload;
use crate::noise::NoiseResult;
use crate::timer::TimerResult;
use std::collections::BTreeMap;

/// Named figures of one cell.
pub type Metrics = BTreeMap<String, f64>;

fn keep_max(m: &mut Metrics, key: &str, v: f64) {
    let e = m.entry(key.to_string()).or_insert(v);
    if v > *e {
        *e = v;
    }
}

fn keep_min(m: &mut Metrics, key: &str, v: f64) {
    let e = m.entry(key.to_string()).or_insert(v);
    if v < *e {
        *e = v;
    }
}

fn add(m: &mut Metrics, key: &str, v: f64) {
    *m.entry(key.to_string()).or_insert(0.0) += v;
}

/// A threshold as a metric suffix: 10000 → `10us`, 1000000 → `1ms`.
pub fn threshold_name(ns: u64) -> String {
    if ns >= 1_000_000 && ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns >= 1_000 && ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

/// The figures of a timer run; `usage` is the usage pattern for the worst case per hour, day
/// and week.
pub fn timer(r: &TimerResult, usage: UsagePattern) -> Metrics {
    let mut m = Metrics::new();
    let us = |ns: f64| ns / 1e3;
    for c in &r.cpus {
        add(&mut m, "count", c.count as f64);
        add(&mut m, "missed", c.missed_releases as f64);
        if let Some(p) = &c.lateness_ns {
            keep_max(&mut m, "p50_us", us(p.p50 as f64));
            keep_max(&mut m, "p90_us", us(p.p90 as f64));
            keep_max(&mut m, "p99_us", us(p.p99 as f64));
            keep_max(&mut m, "p99_9_us", us(p.p99_9 as f64));
            keep_max(&mut m, "p99_99_us", us(p.p99_99 as f64));
            keep_max(&mut m, "max_us", us(p.max as f64));
            keep_max(&mut m, "mean_us", us(p.mean));
        }
        if let Some(p) = &c.raw_lateness_ns {
            keep_max(&mut m, "raw_p99_us", us(p.p99 as f64));
        }
        if let Some(i) = &c.interval_ns {
            keep_min(&mut m, "interval_min_ms", i.min as f64 / 1e6);
            keep_max(&mut m, "interval_max_ms", i.max as f64 / 1e6);
            keep_max(&mut m, "interval_mean_ms", i.mean / 1e6);
            keep_max(&mut m, "interval_stddev_ms", i.stddev / 1e6);
            keep_min(&mut m, "interval_min_us", us(i.min as f64));
            keep_max(&mut m, "interval_max_us", us(i.max as f64));
            keep_max(&mut m, "interval_mean_us", us(i.mean));
            keep_max(&mut m, "interval_stddev_us", us(i.stddev));
        }
        for b in &c.interval_histogram.bins {
            add(
                &mut m,
                &format!("ihist_{}", threshold_name(b.from_ns)),
                b.count as f64,
            );
        }
        for l in &c.later_than {
            add(
                &mut m,
                &format!("later_{}", threshold_name(l.threshold_ns)),
                l.count as f64,
            );
        }
        if let Some(x) = c.cpu_time_per_wakeup_ns {
            keep_max(&mut m, "cpu_per_wakeup_us", us(x));
        }
        // The whole-run histogram of corrected lateness (three significant digits).
        let Some([late, _, _]) = &c.histograms else {
            continue;
        };
        if !late.is_empty() && r.interval_ns.0 > 0 {
            let d = Distribution::from_histogram(late);
            let config = WorstCaseConfig::new(1e9 / r.interval_ns.0 as f64, usage);
            if let Ok(w) = worst_case::analyze(&d, &config) {
                for h in &w.horizons {
                    if let Some(v) = h.worst_case_ns {
                        keep_max(&mut m, &format!("worst_{}_us", h.period), us(v as f64));
                    }
                    // Beyond what the cell supports: the run it would take, for the tables'
                    // notes (docs/analysis.md, "Validity of predictions").
                    if let Some(s) = h.needs_run_s {
                        keep_max(&mut m, &format!("worst_{}_needs_s", h.period), s);
                    }
                }
                keep_max(&mut m, "worst_observed_s", w.observed_s);
            }
        }
        for v in late.iter_recorded() {
            let ns = late.lowest_equivalent(v.value_iterated_to()) as i64;
            add(&mut m, &log_bin_name(ns), v.count_at_value() as f64);
        }
    }
    // With kernel events: the interrupt-level rows of Cota-Robles & Held's Table 3, the timer
    // interrupt (their ISR), softirqs (their DPC) and the thread switched in.
    let kernel = r.run.causes.as_ref().and_then(|c| c.kernel.as_ref());
    for l in kernel.map(|k| k.latency.as_slice()).unwrap_or_default() {
        let Some(hs) = &l.histograms else { continue };
        for (level, h) in ["irq", "softirq", "switch"].into_iter().zip(hs) {
            if h.is_empty() {
                continue;
            }
            let d = Distribution::from_histogram(h);
            keep_max(
                &mut m,
                &format!("{level}_p99_us"),
                us(h.value_at_quantile(0.99) as f64),
            );
            keep_max(&mut m, &format!("{level}_max_us"), us(h.max() as f64));
            if r.interval_ns.0 == 0 {
                continue;
            }
            // Softirqs are raised at their own rate: their count over the run's length.
            let per_s = match level {
                "softirq" => h.len() as f64 * 1e9 / r.run.elapsed_ns.max(1) as f64,
                _ => 1e9 / r.interval_ns.0 as f64,
            };
            let config = WorstCaseConfig::new(per_s, usage);
            if let Ok(w) = worst_case::analyze(&d, &config) {
                for hz in &w.horizons {
                    if let Some(v) = hz.worst_case_ns {
                        keep_max(
                            &mut m,
                            &format!("{level}_worst_{}_us", hz.period),
                            us(v as f64),
                        );
                    }
                    if let Some(s) = hz.needs_run_s {
                        keep_max(&mut m, &format!("{level}_worst_{}_needs_s", hz.period), s);
                    }
                }
                keep_max(&mut m, &format!("{level}_worst_observed_s"), w.observed_s);
            }
        }
    }
    if let Some(max) = m.get("interval_max_ms").copied() {
        m.insert(
            "interval_excess_ms".into(),
            max - r.interval_ns.0 as f64 / 1e6,
        );
    }
    m
}

/// The bin of a log-binned latency histogram that `ns` falls in: `lhist_0us` below 1 µs, then
/// `lhist_1us` for [1, 2) µs, `lhist_2us` for [2, 4) µs and so on by powers of two, the
/// histogram that Cota-Robles & Held plot on log-log axes.
pub fn log_bin_name(ns: i64) -> String {
    let us = ns.max(0) as u64 / 1_000;
    if us == 0 {
        return "lhist_0us".into();
    }
    let lower = 1u64 << (63 - us.leading_zeros());
    format!("lhist_{}", threshold_name(lower * 1_000))
}

/// The figures of the loads that ran during a cell: `load_<kind>_mb_per_s` for loads that move
/// bytes (10^6 bytes per second), `load_<kind>_per_s` for the others (work per second in the
/// load's own unit), each summed over loads of one kind, and `net_mbps` (Mbit/s) for the net
/// load.
pub fn loads(reports: &[LoadReport]) -> Metrics {
    let mut m = Metrics::new();
    for r in reports {
        if r.unit.is_empty() {
            continue;
        }
        if r.unit == "bytes" {
            add(&mut m, &format!("load_{}_mb_per_s", r.kind), r.per_s / 1e6);
        } else {
            add(&mut m, &format!("load_{}_per_s", r.kind), r.per_s);
        }
        if r.kind == "net" && r.unit == "bytes" {
            add(&mut m, "net_mbps", r.per_s * 8.0 / 1e6);
        }
    }
    m
}

/// The figures of a noise run.
pub fn noise(r: &NoiseResult) -> Metrics {
    let mut m = Metrics::new();
    for c in &r.cpus {
        keep_max(&mut m, "noise_pct", c.noise_share * 100.0);
        keep_max(&mut m, "interruptions_per_s", c.interruptions_per_s);
        keep_max(&mut m, "int_max_us", c.max_ns as f64 / 1e3);
        if let Some(p) = &c.percentiles_ns {
            keep_max(&mut m, "int_p50_us", p.p50 as f64 / 1e3);
            keep_max(&mut m, "int_p99_us", p.p99 as f64 / 1e3);
            keep_max(&mut m, "int_p99_9_us", p.p99_9 as f64 / 1e3);
            keep_max(&mut m, "int_p99_99_us", p.p99_99 as f64 / 1e3);
        }
        add(&mut m, "interruptions", c.interruptions as f64);
    }
    m
}

/// The figures of an hourglass run: deadlines of its periodic threads, the latency of its
/// first LAT thread, and its context switches.
pub fn hourglass(r: &HourglassResult) -> Metrics {
    let mut m = Metrics::new();
    let (mut hits, mut misses) = (0u64, 0u64);
    let mut periodic = false;
    for t in &r.threads {
        if let (Some(h), Some(x)) = (t.hits, t.misses) {
            periodic = true;
            hits += h;
            misses += x;
            let total = (h + x).max(1) as f64;
            m.insert(
                format!("missed_pct_t{}", t.thread),
                x as f64 * 100.0 / total,
            );
        }
    }
    if periodic {
        m.insert("hits".into(), hits as f64);
        m.insert("misses".into(), misses as f64);
        m.insert(
            "missed_pct".into(),
            misses as f64 * 100.0 / (hits + misses).max(1) as f64,
        );
    }
    if let Some(t) = r
        .threads
        .iter()
        .find(|t| matches!(t.workload, Workload::Lat { .. }))
    {
        if let Some(l) = &t.lateness {
            m.insert("lat_count".into(), l.count as f64);
            m.insert("lat_p50_us".into(), l.p50_ns as f64 / 1e3);
            m.insert("lat_p99_us".into(), l.p99_ns as f64 / 1e3);
            m.insert("lat_max_us".into(), l.max_ns as f64 / 1e3);
        }
        for lt in &t.later_than {
            m.insert(
                format!("lat_later_{}", threshold_name(lt.threshold_ns)),
                lt.count as f64,
            );
        }
    }
    m.insert("ctxsw".into(), r.switches.count as f64);
    if let Some(a) = &r.switches.all {
        m.insert("ctxsw_median_us".into(), a.p50_ns as f64 / 1e3);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_names() {
        assert_eq!(threshold_name(10_000), "10us");
        assert_eq!(threshold_name(1_000_000), "1ms");
        assert_eq!(threshold_name(50_000_000), "50ms");
        assert_eq!(threshold_name(1_500), "1500ns");
        assert_eq!(threshold_name(0), "0ns");
    }

    #[test]
    fn log_bins_double() {
        assert_eq!(log_bin_name(-5), "lhist_0us");
        assert_eq!(log_bin_name(999), "lhist_0us");
        assert_eq!(log_bin_name(1_000), "lhist_1us");
        assert_eq!(log_bin_name(3_999), "lhist_2us");
        assert_eq!(log_bin_name(4_000), "lhist_4us");
        assert_eq!(log_bin_name(1_500_000), "lhist_1024us");
        assert_eq!(log_bin_name(2_048_000), "lhist_2048us");
    }

    #[test]
    fn extremes_and_sums() {
        let mut m = Metrics::new();
        keep_max(&mut m, "a", 1.0);
        keep_max(&mut m, "a", 3.0);
        keep_max(&mut m, "a", 2.0);
        keep_min(&mut m, "b", 5.0);
        keep_min(&mut m, "b", 4.0);
        add(&mut m, "c", 1.0);
        add(&mut m, "c", 2.0);
        assert_eq!((m["a"], m["b"], m["c"]), (3.0, 4.0, 3.0));
    }
}
