//! What loads achieved, as text: one line per load with its CPUs, throughput, work and time.

use sandglass::load::LoadReport;
use sandglass::Nanos;
use std::io::{self, Write};

/// `value` with an SI prefix (binary for bytes) and the unit: `412.3 M iterations`,
/// `1.21 GiB`.
pub fn quantity(value: f64, unit: &str) -> String {
    if unit == "bytes" {
        let mut v = value;
        for prefix in ["B", "KiB", "MiB", "GiB", "TiB"] {
            if v < 1024.0 || prefix == "TiB" {
                return format!("{} {prefix}", three_digits(v));
            }
            v /= 1024.0;
        }
    }
    let (scaled, prefix) = match value {
        v if v >= 1e12 => (v / 1e12, "T "),
        v if v >= 1e9 => (v / 1e9, "G "),
        v if v >= 1e6 => (v / 1e6, "M "),
        v if v >= 1e3 => (v / 1e3, "k "),
        v => (v, ""),
    };
    format!("{} {prefix}{unit}", three_digits(scaled))
        .trim_end()
        .to_string()
}

/// At least three significant digits, as a rate is worth reading.
fn three_digits(v: f64) -> String {
    if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A table of `reports`: load, CPUs, throughput, work and time, each load's detail and error
/// under its line.
pub fn write(w: &mut dyn Write, reports: &[LoadReport]) -> io::Result<()> {
    let rows: Vec<[String; 5]> = reports
        .iter()
        .map(|r| {
            let (rate, work) = if r.unit.is_empty() {
                ("-".to_string(), "-".to_string())
            } else {
                (
                    format!("{}/s", quantity(r.per_s, &r.unit)),
                    quantity(r.work, &r.unit),
                )
            };
            [
                r.spec.clone(),
                r.cpus.clone(),
                rate,
                work,
                Nanos(r.duration_ns).to_string(),
            ]
        })
        .collect();
    let head = ["load", "CPUs", "throughput", "work", "time"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..head.len()).map(width).collect();
    let line = |cells: [&str; 5]| {
        format!(
            "{:<a$}  {:<b$}  {:>c$}  {:>d$}  {:>e$}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            a = widths[0],
            b = widths[1],
            c = widths[2],
            d = widths[3],
            e = widths[4]
        )
    };
    writeln!(w, "{}", line(head).trim_end())?;
    for (r, row) in reports.iter().zip(&rows) {
        writeln!(
            w,
            "{}",
            line([&row[0], &row[1], &row[2], &row[3], &row[4]]).trim_end()
        )?;
        if let Some(d) = &r.detail {
            writeln!(w, "  {d}")?;
        }
        if let Some(e) = &r.error {
            writeln!(w, "  failed: {e}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_well() {
        assert_eq!(quantity(412_345_678.0, "iterations"), "412 M iterations");
        assert_eq!(quantity(1234.0, "processes"), "1.23 k processes");
        assert_eq!(quantity(12.0, "wakeups"), "12 wakeups");
        assert_eq!(
            quantity(3.0 * 1024.0 * 1024.0 * 1024.0 / 2.0, "bytes"),
            "1.50 GiB"
        );
        assert_eq!(quantity(512.0, "bytes"), "512 B");
    }
}
