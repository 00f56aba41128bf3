//! The text summary of `sandglass noise`, in the spirit of sysjitter's per-core rows: noise
//! share, interruptions per second, percentiles and the longest interruption, then a compact
//! histogram per CPU.

use crate::text::{count, percent};
use sandglass::histo::{self, Percentiles};
use sandglass::noise::NoiseResult;
use sandglass::Nanos;
use std::io::{self, Write};

fn ns(v: u64) -> String {
    Nanos(v).to_string()
}

/// Writes the summary.
pub fn write(w: &mut dyn Write, r: &NoiseResult) -> io::Result<()> {
    writeln!(
        w,
        "sandglass noise: {} CPU(s), {} requested; {} ({})",
        r.cpus.len(),
        r.run.duration_ns,
        r.run.state.name(),
        r.run.end_detail
    )?;
    let threshold = if r.threshold_source == "calibrated" {
        format!("{} ns ({})", r.threshold_ns, r.threshold_explanation)
    } else {
        format!("{} ns ({})", r.threshold_ns, r.threshold_source)
    };
    writeln!(w, "gap threshold: {threshold}")?;
    if r.memmove_bytes > 0 {
        writeln!(
            w,
            "workload between polls: memmove of {} bytes",
            r.memmove_bytes
        )?;
    }
    writeln!(
        w,
        "{:>4} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "CPU", "noise", "int/s", "p50", "p99", "p99.9", "p99.99", "max", "runtime"
    )?;
    for c in &r.cpus {
        let p = c.percentiles_ns.as_ref();
        let supported = Percentiles::supported(c.interruptions);
        let cell = |name: &str| -> String {
            match p {
                Some(p) if supported.contains(&name) => p.get(name).map(ns).unwrap_or_default(),
                _ => "-".into(),
            }
        };
        writeln!(
            w,
            "{:>4} {:>9} {:>10.1} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
            c.cpu,
            percent(c.noise_share),
            c.interruptions_per_s,
            cell("p50"),
            cell("p99"),
            cell("p99.9"),
            cell("p99.99"),
            ns(c.max_ns),
            ns(c.runtime_ns)
        )?;
    }
    if r.cpus.len() > 1 {
        // The run's figures: the worst CPU's, figure by figure (as `runs` and `compare` give
        // them); a percentile prints where every CPU has the interruptions for it.
        let fewest = r.cpus.iter().map(|c| c.interruptions).min().unwrap_or(0);
        let supported = Percentiles::supported(fewest);
        let p = histo::worst_cpu(r.cpus.iter().filter_map(|c| c.percentiles_ns.as_ref()));
        let cell = |name: &str| -> String {
            match &p {
                Some(p) if supported.contains(&name) => p.get(name).map(ns).unwrap_or_default(),
                _ => "-".into(),
            }
        };
        writeln!(
            w,
            "{:>4} {:>9} {:>10.1} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
            "worst",
            percent(r.cpus.iter().map(|c| c.noise_share).fold(0.0, f64::max)),
            r.cpus
                .iter()
                .map(|c| c.interruptions_per_s)
                .fold(0.0, f64::max),
            cell("p50"),
            cell("p99"),
            cell("p99.9"),
            cell("p99.99"),
            ns(r.cpus.iter().map(|c| c.max_ns).max().unwrap_or(0)),
            ns(r.cpus.iter().map(|c| c.runtime_ns).max().unwrap_or(0))
        )?;
    }
    for c in &r.cpus {
        writeln!(
            w,
            "CPU {} ({}, tid {}): {} interruptions, {} of noise in {}, loop {:.1} ns per iteration",
            c.cpu,
            c.policy.as_deref().unwrap_or("policy unknown"),
            c.tid,
            count(c.interruptions),
            ns(c.noise_ns),
            ns(c.runtime_ns),
            c.mean_iteration_ns.unwrap_or(0.0)
        )?;
        if c.process_stopped_ns > 0 {
            writeln!(
                w,
                "  of which {} while the process was stopped ({}): not the machine's noise",
                ns(c.process_stopped_ns),
                r.run
                    .stops
                    .iter()
                    .map(|s| s.by.text())
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        if let Some(e) = &c.error {
            writeln!(w, "  error: {e}")?;
        }
        let bins: Vec<String> = c
            .histogram
            .iter()
            .map(|b| format!("<={} {}", ns(b.to_ns), count(b.count)))
            .collect();
        writeln!(w, "  durations: {}", bins.join(", "))?;
    }
    crate::text::run_footer(w, &r.run)
}
