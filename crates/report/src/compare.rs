//! `sandglass compare`: figures as rows, runs as columns, changes against the first run.

use sandglass::compare::Report;
use sandglass::Nanos;
use std::io::{self, Write};

fn value(figure: &str, v: f64) -> String {
    if figure == "missed" || figure == "count" {
        crate::text::count(v as u64)
    } else if v < 0.0 {
        format!("-{}", Nanos((-v) as u64))
    } else {
        Nanos(v as u64).to_string()
    }
}

/// A p value as people read it: `< 0.001` below a thousandth, else three decimals (`= 0.012`).
pub fn p_value(p: f64) -> String {
    if p < 0.001 {
        "< 0.001".to_string()
    } else {
        format!("= {p:.3}")
    }
}

/// Writes the comparison table, the tests and the verdict.
pub fn write(w: &mut dyn Write, r: &Report) -> io::Result<()> {
    writeln!(
        w,
        "sandglass compare: {} {} run(s); the first is the baseline",
        r.figures.len(),
        r.kind
    )?;
    for (i, f) in r.figures.iter().enumerate() {
        let letter = (b'A' + (i % 26) as u8) as char;
        if f.runs > 1 {
            writeln!(
                w,
                "  {letter}: {} runs merged, {} ({} samples, {} CPUs pooled)",
                f.runs,
                f.run,
                crate::text::count(f.samples as u64),
                f.cpus,
            )?;
            continue;
        }
        writeln!(
            w,
            "  {letter}: {} ({} samples, {} CPU{})",
            f.path,
            crate::text::count(f.samples as u64),
            f.cpus,
            if f.cpus == 1 { "" } else { "s" }
        )?;
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    let grouped = r.figures.iter().any(|f| f.runs > 1);
    let mut head = vec![if grouped {
        "figure (worst CPU; groups pooled)"
    } else {
        "figure (worst CPU)"
    }
    .to_string()];
    for i in 0..r.figures.len() {
        head.push(((b'A' + (i % 26) as u8) as char).to_string());
    }
    rows.push(head);
    if let Some(base) = r.figures.first() {
        for (k, f) in base.values.iter().enumerate() {
            let name = &f.name;
            let mut row = vec![name.clone(), value(name, f.value)];
            for c in &r.comparisons {
                let ch = &c.changes[k];
                let rel = ch
                    .relative
                    .map(|x| format!("{:+.1}%", x * 100.0))
                    .unwrap_or_else(|| "new".into());
                let mark = if ch.regression { " !" } else { "" };
                row.push(format!("{} ({rel}){mark}", value(name, ch.value)));
            }
            rows.push(row);
        }
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect();
        writeln!(w, "  {}", cells.join("  "))?;
    }
    for (i, c) in r.comparisons.iter().enumerate() {
        let letter = (b'A' + ((i + 1) % 26) as u8) as char;
        let p = c.p_value.map(p_value).unwrap_or_else(|| "= -".into());
        let ci = |x: Option<sandglass::compare::Interval>| {
            x.map(|i| format!("{}..{}", Nanos(i.low_ns as u64), Nanos(i.high_ns as u64)))
                .unwrap_or_else(|| "-".into())
        };
        writeln!(
            w,
            "  {letter} against A (every sample of all CPUs): Mann-Whitney p {p}; p99 95% interval {} against {}; {}",
            ci(c.p99_ci),
            ci(c.p99_ci_baseline),
            if c.differs {
                "the distributions differ"
            } else {
                "no significant difference"
            }
        )?;
        let unjudged = |basis: &str| {
            c.changes
                .iter()
                .filter(|ch| ch.basis == basis)
                .map(|ch| ch.figure.as_str())
                .collect::<Vec<_>>()
        };
        let mut why = Vec::new();
        let few = unjudged("too few samples");
        if !few.is_empty() {
            why.push(format!(
                "{} (too few samples for a 95% interval)",
                few.join(", ")
            ));
        }
        let one = unjudged("one sample");
        if !one.is_empty() {
            why.push(format!("{} (one sample per run)", one.join(", ")));
        }
        if !why.is_empty() {
            writeln!(
                w,
                "  {letter}: never flagged, whatever their change: {}",
                why.join("; ")
            )?;
        }
    }
    writeln!(
        w,
        "  ! marks a regression: worse by more than {:.0}% and that figure's own change significant (its 95% interval above the baseline's; a count: p < {}); max is one sample per run, never flagged",
        r.tolerance * 100.0,
        r.alpha
    )?;
    if r.crossed.is_empty() {
        writeln!(w, "{}", verdict_without_gates(r))?;
    } else {
        for x in &r.crossed {
            if x.gate == "above" {
                writeln!(
                    w,
                    "verdict: threshold crossed: {} = {} > {} in run {}",
                    x.figure,
                    value(&x.figure, x.value),
                    value(&x.figure, x.limit),
                    x.run
                )?;
            } else if x.gate == "new" {
                writeln!(
                    w,
                    "verdict: regression: {} went from 0 to {} in run {}",
                    x.figure,
                    value(&x.figure, x.value),
                    x.run
                )?;
            } else {
                writeln!(
                    w,
                    "verdict: regression: {} worse by {:+.1}% (limit {:.1}%) in run {}",
                    x.figure,
                    x.value * 100.0,
                    x.limit * 100.0,
                    x.run
                )?;
            }
        }
    }
    Ok(())
}

/// The verdict when no gate is crossed: "pass" only where nothing is flagged, and it says how
/// many figures changed within noise.
pub fn verdict_without_gates(r: &Report) -> String {
    let letter = |i: usize| (b'A' + ((i + 1) % 26) as u8) as char;
    let flagged: Vec<String> = r
        .comparisons
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            c.changes
                .iter()
                .filter(|ch| ch.regression)
                .map(move |ch| format!("{} in {}", ch.figure, letter(i)))
        })
        .collect();
    if !flagged.is_empty() {
        return format!(
            "verdict: no gate crossed (exit 0), but {} regression{} flagged: {}",
            flagged.len(),
            if flagged.len() == 1 { "" } else { "s" },
            flagged.join(", ")
        );
    }
    let noise = r
        .comparisons
        .iter()
        .flat_map(|c| &c.changes)
        .filter(|ch| {
            !ch.regression
                && ch
                    .relative
                    .map_or(ch.value > ch.baseline, |x| x > r.tolerance)
        })
        .count();
    match noise {
        0 => "verdict: pass (no significant regression)".to_string(),
        n => format!(
            "verdict: pass (no significant regression; {n} figure{} worse by more than {:.0}% without a significant change of their own)",
            if n == 1 { "" } else { "s" },
            r.tolerance * 100.0
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p_values_read_as_people_write_them() {
        assert_eq!(p_value(0.0), "< 0.001");
        assert_eq!(p_value(0.000_9), "< 0.001");
        assert_eq!(p_value(0.0123), "= 0.012");
        assert_eq!(p_value(0.5), "= 0.500");
    }
}
