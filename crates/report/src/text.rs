//! Small formatting helpers shared by the text renderers.

use sandglass::result::RunHeader;
use sandglass::Nanos;
use std::io::{self, Write};

/// A signed duration in nanoseconds for people: `-3 µs`, `1.5 ms`.
pub fn signed(ns: i64) -> String {
    if ns < 0 {
        format!("-{}", Nanos(ns.unsigned_abs()))
    } else {
        Nanos(ns as u64).to_string()
    }
}

/// A count with thousands separators: `1,234,567`.
pub fn count(n: u64) -> String {
    sandglass::units::group_digits(n)
}

/// A share as a percentage with one decimal: `98.7%`.
pub fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// A compact histogram of the values (ns) of `h` in power-of-two bins from 1 µs, one line per
/// non-empty bin with a bar of `#` scaled to the largest bin on a log scale (so that a single
/// outlier still shows), and the count. A bucket of `h` goes to the bin of its lowest value.
pub fn log_histogram(
    w: &mut dyn std::io::Write,
    title: &str,
    h: &sandglass::histo::Histogram<u64>,
) -> std::io::Result<()> {
    const BINS: usize = 40;
    let mut counts = [0u64; BINS];
    for v in h.iter_recorded() {
        let us = h.lowest_equivalent(v.value_iterated_to()) / 1000;
        let bin = if us == 0 {
            0
        } else {
            (64 - us.leading_zeros()) as usize
        };
        counts[bin.min(BINS - 1)] += v.count_at_value();
    }
    let Some(top) = counts.iter().copied().max().filter(|&m| m > 0) else {
        return Ok(());
    };
    writeln!(w, "{title}")?;
    let width = 40.0;
    for (i, &n) in counts.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let lo = if i == 0 { 0 } else { 1u64 << (i - 1) };
        let bar = ((n as f64).ln_1p() / (top as f64).ln_1p() * width).ceil() as usize;
        writeln!(
            w,
            "  {:>10} {:<40} {}",
            format!("≥ {}", Nanos(lo * 1000)),
            "#".repeat(bar.max(1)),
            count(n)
        )?;
    }
    Ok(())
}

/// The end of a timer or noise report: the setup, the loads, the explanation of the largest
/// delays, the warnings and the run directory.
pub fn run_footer(w: &mut dyn Write, run: &RunHeader) -> io::Result<()> {
    writeln!(
        w,
        "setup: memory {}; /dev/cpu_dma_latency {}",
        if run.memory_locked {
            "locked"
        } else {
            "not locked"
        },
        run.pm_qos_us
            .map(|u| format!("held at {u} us"))
            .unwrap_or_else(|| "not held".into())
    )?;
    if !run.loads.is_empty() {
        writeln!(
            w,
            "under load; what each load achieved during the measurement:"
        )?;
        crate::load::write(w, &run.loads)?;
    }
    if let Some(c) = &run.causes {
        crate::causes::write(w, c)?;
    }
    for warn in &run.warnings {
        writeln!(w, "warning: {}", warn.message)?;
    }
    writeln!(w, "run directory: {}", run.run_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234), "1,234");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(signed(-3000), "-3 µs");
        assert_eq!(signed(1_500_000), "1.5 ms");
        assert_eq!(percent(0.987), "98.7%");
    }

    #[test]
    fn log_histogram_bins_by_powers_of_two() {
        let mut out = Vec::new();
        let h = sandglass::histo::histogram_of([500, 1_500, 1_900, 3_000, 70_000]);
        log_histogram(&mut out, "t:", &h).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "t:");
        assert_eq!(lines.len(), 5, "{text}");
        assert!(
            lines[1].contains("≥ 0 ns") && lines[1].ends_with(" 1"),
            "{text}"
        );
        assert!(
            lines[2].contains("≥ 1 µs") && lines[2].ends_with(" 2"),
            "{text}"
        );
        assert!(
            lines[3].contains("≥ 2 µs") && lines[3].ends_with(" 1"),
            "{text}"
        );
        assert!(
            lines[4].contains("≥ 64 µs") && lines[4].ends_with(" 1"),
            "{text}"
        );
        let mut empty = Vec::new();
        let h = sandglass::histo::histogram_of([]);
        log_histogram(&mut empty, "t:", &h).expect("write");
        assert!(empty.is_empty());
    }
}
