//! The text summary of `sandglass timer`: one row per CPU with corrected lateness percentiles
//! and missed releases, the raw figures cyclictest would report beside them, Jones & Regehr's
//! interval statistics and histogram, and Hourglass's "samples later than" table.

use crate::text::{count, percent, signed};
use sandglass::histo::{self, Percentiles};
use sandglass::timer::{TimerCpu, TimerResult};
use sandglass::Nanos;
use std::io::{self, Write};

fn ns(v: u64) -> String {
    Nanos(v).to_string()
}

/// One row of percentiles; those `samples` cannot support print as `-`.
fn row(w: &mut dyn Write, label: &str, p: &Percentiles, samples: u64) -> io::Result<()> {
    let supported = Percentiles::supported(samples);
    let cell = |name: &str| -> String {
        if supported.contains(&name) {
            p.get(name).map(ns).unwrap_or_default()
        } else {
            "-".to_string()
        }
    };
    writeln!(
        w,
        "  {:<9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        label,
        signed(p.min),
        cell("p50"),
        cell("p90"),
        cell("p99"),
        cell("p99.9"),
        cell("p99.99"),
        cell("p99.9999"),
        signed(p.max)
    )
}

fn cpu_block(w: &mut dyn Write, c: &TimerCpu, r: &TimerResult) -> io::Result<()> {
    writeln!(
        w,
        "CPU {} (thread {}, tid {}, {}): {} releases, {} wakeups, {} missed releases ({})",
        c.cpu,
        c.thread,
        c.tid,
        c.policy.as_deref().unwrap_or("policy unknown"),
        count(c.count),
        count(c.wakeups),
        count(c.missed_releases),
        percent(if c.count > 0 {
            c.missed_releases as f64 / c.count as f64
        } else {
            0.0
        })
    )?;
    if let Some(e) = &c.error {
        writeln!(w, "  error: {e}")?;
    }
    writeln!(
        w,
        "  {:<9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "lateness", "min", "p50", "p90", "p99", "p99.9", "p99.99", "p99.9999", "max"
    )?;
    if let Some(p) = &c.lateness_ns {
        row(w, "corrected", p, p.count)?;
    }
    if let Some(p) = &c.raw_lateness_ns {
        row(w, "raw", p, p.count)?;
    }
    if let Some(i) = &c.interval_ns {
        writeln!(
            w,
            "  interval between wakeups: min {}, average {}, stddev {}, max {} (interval {})",
            ns(i.min),
            ns(i.mean.round() as u64),
            ns(i.stddev.round() as u64),
            ns(i.max),
            r.interval_ns
        )?;
    }
    let bins: Vec<String> = c
        .interval_histogram
        .bins
        .iter()
        .map(|b| {
            format!(
                "{} {}",
                sandglass::duration::format_human_range(Nanos(b.from_ns), Nanos(b.to_ns)),
                count(b.count)
            )
        })
        .collect();
    if !bins.is_empty() {
        let shown = 12;
        let more = bins.len().saturating_sub(shown);
        writeln!(
            w,
            "  interval histogram ({} bins): {}{}",
            ns(c.interval_histogram.bin_ns),
            bins[..bins.len().min(shown)].join(", "),
            if more > 0 {
                format!(", ... ({more} more bins in summary.json)")
            } else {
                String::new()
            }
        )?;
    }
    let later: Vec<String> = c
        .later_than
        .iter()
        .map(|l| {
            if l.count == l.raw_count {
                format!("{} {}", ns(l.threshold_ns), count(l.count))
            } else {
                format!(
                    "{} {} (raw {})",
                    ns(l.threshold_ns),
                    count(l.count),
                    count(l.raw_count)
                )
            }
        })
        .collect();
    writeln!(w, "  samples later than: {}", later.join(", "))?;
    if let (Some(t), Some(per)) = (c.cpu_time_ns, c.cpu_time_per_wakeup_ns) {
        writeln!(
            w,
            "  CPU time: {} in all, {} per wakeup",
            ns(t),
            ns(per.round() as u64)
        )?;
    }
    if c.early > 0 {
        writeln!(
            w,
            "  {} wakeups read slightly before their release (counter calibration noise; counted as 0)",
            count(c.early)
        )?;
    }
    Ok(())
}

/// With several CPUs, the run's figures: the worst CPU's, figure by figure, as study tables,
/// `runs` and `compare` give them (a percentile prints where every CPU has the samples for it).
fn worst_block(w: &mut dyn Write, r: &TimerResult) -> io::Result<()> {
    if r.cpus.len() < 2 {
        return Ok(());
    }
    let fewest = r.cpus.iter().map(|c| c.count).min().unwrap_or(0);
    writeln!(
        w,
        "all {} CPUs: {} releases, {} missed; each figure the worst CPU's",
        r.cpus.len(),
        count(r.cpus.iter().map(|c| c.count).sum()),
        count(r.cpus.iter().map(|c| c.missed_releases).sum()),
    )?;
    if let Some(p) = histo::worst_cpu(r.cpus.iter().filter_map(|c| c.lateness_ns.as_ref())) {
        writeln!(
            w,
            "  {:<9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "lateness", "min", "p50", "p90", "p99", "p99.9", "p99.99", "p99.9999", "max"
        )?;
        row(w, "corrected", &p, fewest)?;
    }
    if let Some(p) = histo::worst_cpu(r.cpus.iter().filter_map(|c| c.raw_lateness_ns.as_ref())) {
        // The raw figures are the wakeups' (missed releases have none): a percentile prints
        // where every CPU has the wakeups for it, as in each CPU's own raw row.
        let fewest_raw = r
            .cpus
            .iter()
            .map(|c| c.raw_lateness_ns.as_ref().map_or(0, |p| p.count))
            .min()
            .unwrap_or(0);
        row(w, "raw", &p, fewest_raw)?;
    }
    Ok(())
}

/// Writes the summary.
pub fn write(w: &mut dyn Write, r: &TimerResult) -> io::Result<()> {
    writeln!(
        w,
        "sandglass timer: {} CPU(s), interval {}, {} timer, {} releases, {} requested, {} measured; {} ({})",
        r.cpus.len(),
        r.interval_ns,
        r.timer,
        r.mode,
        r.run.duration_ns,
        Nanos(r.run.elapsed_ns),
        r.run.state.name(),
        r.run.end_detail
    )?;
    for c in &r.cpus {
        cpu_block(w, c, r)?;
    }
    worst_block(w, r)?;
    crate::text::run_footer(w, &r.run)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The golden run's summary (two CPUs of 42,000 releases).
    fn golden() -> TimerResult {
        let snap = include_str!("../../cli/tests/it/snapshots/it__golden__timer_json.snap");
        let json = snap.splitn(3, "---\n").nth(2).unwrap();
        serde_json::from_str(json).unwrap()
    }

    /// The worst-CPU block's raw row prints a percentile only where every CPU has the wakeups
    /// for it, as each CPU's raw row does: a CPU with 5,000 wakeups supports p99.9 and not
    /// p99.99, whatever the releases (missed releases have no raw figure).
    #[test]
    fn the_worst_raw_row_needs_every_cpus_own_wakeups() {
        let mut r = golden();
        if let Some(p) = r.cpus[1].raw_lateness_ns.as_mut() {
            p.count = 5_000;
        }
        let mut out = Vec::new();
        worst_block(&mut out, &r).unwrap();
        let text = String::from_utf8(out).unwrap();
        let raw: Vec<&str> = text
            .lines()
            .find(|l| l.trim_start().starts_with("raw"))
            .unwrap()
            .split_whitespace()
            .collect();
        // raw, min, p50, p90, p99, p99.9, p99.99, p99.9999, max (two words each but the label).
        assert_eq!(raw.len(), 1 + 2 * 8 - 2, "{text}");
        assert_eq!(&raw[raw.len() - 4..raw.len() - 2], ["-", "-"], "{text}");
        let corrected = text
            .lines()
            .find(|l| l.trim_start().starts_with("corrected"))
            .unwrap();
        assert!(corrected.contains("1.5 ms"), "{text}");
    }
}
