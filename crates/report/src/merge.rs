//! `sandglass report --merge`: runs from many hosts, each on a row, and all their samples as one
//! distribution.

use sandglass::histo::Percentiles;
use sandglass::merge::Merged;
use sandglass::{Nanos, RunKind};
use std::io::{self, Write};

fn row(
    w: &mut dyn Write,
    name: &str,
    host: &str,
    p: &Percentiles,
    missed: Option<u64>,
) -> io::Result<()> {
    let missed = missed.map_or("-".to_string(), crate::text::count);
    writeln!(
        w,
        "{name:<28} {host:<16} {:>12} {:>11} {:>11} {:>11} {:>11} {:>11} {:>8}",
        crate::text::count(p.count),
        Nanos(p.p50).to_string(),
        Nanos(p.p99).to_string(),
        Nanos(p.p99_9).to_string(),
        Nanos(p.p99_99).to_string(),
        Nanos(p.max.max(0) as u64).to_string(),
        missed,
    )
}

/// Writes each run's pooled figures and the merged ones.
pub fn write(w: &mut dyn Write, m: &Merged) -> io::Result<()> {
    writeln!(
        w,
        "sandglass report --merge: {} {} run(s) from {} host(s); every figure pools {} ({})",
        m.runs.len(),
        m.kind,
        m.hosts.len(),
        m.pooling,
        if m.kind == RunKind::Noise {
            "interruption durations"
        } else {
            "lateness of every release"
        }
    )?;
    writeln!(
        w,
        "{:<28} {:<16} {:>12} {:>11} {:>11} {:>11} {:>11} {:>11} {:>8}",
        "RUN", "HOST", "SAMPLES", "P50", "P99", "P99.9", "P99.99", "MAX", "MISSED"
    )?;
    let timer = m.kind == RunKind::Timer;
    for r in &m.runs {
        row(w, &r.id, &r.host, &r.pooled, timer.then_some(r.missed))?;
    }
    row(
        w,
        "merged",
        &format!("{} host(s)", m.hosts.len()),
        &m.merged,
        timer.then_some(m.missed),
    )?;
    writeln!(
        w,
        "The merged row is the histogram of every sample of every run (HDR histograms add without loss; three significant digits)."
    )
}
