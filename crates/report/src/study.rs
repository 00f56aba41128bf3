//! A study as text: its tables, then what happened to its cells.

use sandglass::study::run::{CellState, StudyOutcome, StudyState};
use sandglass::study::table::Table;
use std::io::{self, Write};

/// A figure for a table: integers as integers, other values to three significant digits.
pub fn figure(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        let sign = if v < 0.0 { "-" } else { "" };
        return format!("{sign}{}", crate::text::count(v.abs() as u64));
    }
    let a = v.abs();
    // The thresholds are those of the rounded value: 999.97 prints as 1,000, not 1000.0.
    if a >= 999.5 {
        let sign = if v < 0.0 { "-" } else { "" };
        return format!("{sign}{}", crate::text::count(a.round() as u64));
    }
    let decimals = if a >= 99.95 {
        0
    } else if a >= 9.995 {
        1
    } else if a >= 0.9995 {
        2
    } else if a >= 0.09995 {
        3
    } else if a >= 0.009995 {
        4
    } else {
        5
    };
    format!("{v:.decimals$}")
}

/// A time in microseconds to the nanosecond (`37.055`, `1,500.000`), so that a table's figure
/// reads the same as the run's summary, `runs`, `compare` and `report` give it.
pub fn micros(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let ns = (v * 1e3).round();
    let sign = if ns < 0.0 { "-" } else { "" };
    let ns = ns.abs() as u64;
    format!("{sign}{}.{:03}", crate::text::count(ns / 1000), ns % 1000)
}

/// A table entry of `column`: times in microseconds (`_us`) to the nanosecond, other figures
/// to three significant digits, `-` for none.
pub fn cell_value(column: &str, v: Option<f64>) -> String {
    match v {
        Some(v) if column.ends_with("_us") => micros(v),
        Some(v) => figure(v),
        None => "-".into(),
    }
}

/// Writes one table, its columns right-aligned under their headings; times in microseconds
/// (columns ending `_us`) to the nanosecond, other figures to three significant digits.
pub fn write_table(out: &mut dyn Write, t: &Table) -> io::Result<()> {
    writeln!(out, "{}", t.title)?;
    if t.rows.is_empty() {
        writeln!(out, "  (no finished cell has these figures yet)")?;
        return Ok(());
    }
    let cells: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| {
            r.values
                .iter()
                .zip(&t.columns)
                .map(|(v, c)| cell_value(c, *v))
                .collect()
        })
        .collect();
    let first = t
        .rows
        .iter()
        .map(|r| r.label.chars().count())
        .chain([t.corner.chars().count()])
        .max()
        .unwrap_or(0);
    let widths: Vec<usize> = t
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain([c.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    write!(out, "  {:<first$}", t.corner)?;
    for (c, w) in t.columns.iter().zip(&widths) {
        write!(out, "  {c:>w$}")?;
    }
    writeln!(out)?;
    for (r, values) in t.rows.iter().zip(&cells) {
        write!(out, "  {:<first$}", r.label)?;
        for (v, w) in values.iter().zip(&widths) {
            write!(out, "  {v:>w$}")?;
        }
        writeln!(out)?;
    }
    if t.medians > 0 {
        writeln!(out, "  (entries over several cells show their median)")?;
    }
    if let Some(n) = &t.note {
        writeln!(out, "  {n}")?;
    }
    Ok(())
}

/// The title of the study section that names the cause of each cell's largest delay.
pub const CAUSES_TITLE: &str = "What caused each cell's largest delay";

/// Each cell that explained its largest delay: its labels (measure, load, and the setting and
/// repetition when the study has several) and the delay with its cause.
pub fn cell_causes(r: &sandglass::study::run::StudyRecord) -> Vec<(String, String)> {
    let settings = r.cells.iter().any(|c| c.cell.setting.is_some());
    let reps = r.cells.iter().any(|c| c.cell.repetition > 1);
    r.cells
        .iter()
        .filter_map(|c| {
            let cause = c.cause.clone()?;
            let l = &c.labels;
            let mut parts = vec![l.measure.clone(), l.load.clone()];
            if settings {
                parts.push(l.setting.clone());
            }
            if reps {
                parts.push(format!("r{}", l.repetition));
            }
            Some((parts.join(", "), cause))
        })
        .collect()
}

/// Writes every table of a study, then the state of its cells.
pub fn write(out: &mut dyn Write, o: &StudyOutcome) -> io::Result<()> {
    let r = &o.record;
    writeln!(out, "study {} ({})", r.name, r.source)?;
    for t in &o.tables {
        writeln!(out)?;
        write_table(out, t)?;
    }
    let causes = cell_causes(r);
    if !causes.is_empty() {
        writeln!(out, "\n{CAUSES_TITLE}")?;
        let w = causes
            .iter()
            .map(|c| c.0.chars().count())
            .max()
            .unwrap_or(0);
        for (label, cause) in &causes {
            writeln!(out, "  {label:<w$}  {cause}")?;
        }
    }
    writeln!(out)?;
    let total = r.cells.len();
    let done = r.count(CellState::Completed);
    writeln!(
        out,
        "{done} of {total} cells completed; study {}: {}",
        r.state.name(),
        o.dir.display()
    )?;
    for c in &r.cells {
        if matches!(c.state, CellState::Failed | CellState::Interrupted) {
            let why = c
                .error
                .as_deref()
                .or(c.detail.as_deref())
                .unwrap_or("no detail");
            writeln!(out, "  {} {}: {why}", c.cell.id, c.state.name())?;
        }
    }
    if matches!(r.state, StudyState::Interrupted | StudyState::Incomplete) {
        writeln!(
            out,
            "resume with: sandglass study --resume {}",
            o.dir.display()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandglass::study::table::Row;

    #[test]
    fn figures_keep_three_significant_digits() {
        assert_eq!(figure(12.0), "12");
        assert_eq!(figure(1234.0), "1,234");
        assert_eq!(figure(-3.0), "-3");
        assert_eq!(figure(12.345), "12.3");
        assert_eq!(figure(1.2345), "1.23");
        assert_eq!(figure(0.012345), "0.0123");
        assert_eq!(figure(456.7), "457");
        assert_eq!(figure(583075144.4), "583,075,144");
        assert_eq!(figure(f64::NAN), "-");
        assert_eq!(figure(999.97), "1,000");
        assert_eq!(figure(99.97), "100");
        assert_eq!(figure(9.999), "10.0");
    }

    #[test]
    fn tables_align() {
        let t = Table {
            title: "T".into(),
            corner: "load".into(),
            columns: vec!["p99_us".into(), "max_us".into()],
            rows: vec![
                Row {
                    label: "idle".into(),
                    values: vec![Some(12.5), None],
                },
                Row {
                    label: "cpu+disk".into(),
                    values: vec![Some(1500.0), Some(2.0)],
                },
            ],
            note: Some("n".into()),
            cells: 2,
            medians: 0,
        };
        let mut v = Vec::new();
        write_table(&mut v, &t).expect("writes");
        let text = String::from_utf8(v).expect("utf-8");
        assert_eq!(
            text,
            "T\n  load         p99_us  max_us\n  idle         12.500       -\n  cpu+disk  1,500.000   2.000\n  n\n"
        );
    }

    #[test]
    fn times_print_to_the_nanosecond() {
        assert_eq!(micros(37.055), "37.055");
        assert_eq!(micros(105.2149999), "105.215");
        assert_eq!(micros(1500.0), "1,500.000");
        assert_eq!(micros(0.001), "0.001");
        assert_eq!(micros(-2.5), "-2.500");
        assert_eq!(micros(f64::NAN), "-");
    }
}
