//! A study's tables: pivots of its cells' figures.
//!
//! Rows and columns are each split by one or more dimensions (load, setting, measure,
//! repetition, metric). Cells that fall on the same table entry (repetitions, when the
//! repetition is not a dimension) are summarised by their median.

use super::file::{dimensions, StudyFile, TableSpec};
use super::metrics::Metrics;
use super::{Cell, Labels};
use serde::Serialize;
use std::collections::BTreeMap;

/// A table ready to print.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Table {
    pub title: String,
    /// What the first column holds, such as `measure / load`.
    pub corner: String,
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    pub note: Option<String>,
    /// How many cells fed the table.
    pub cells: usize,
    /// Entries summarising more than one cell (the median is shown).
    pub medians: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Row {
    pub label: String,
    pub values: Vec<Option<f64>>,
}

/// The order of a metric name among names sharing its prefix: `ihist_900us` before
/// `ihist_1000us`, `later_1ms` before `later_10ms`, `p99_us` before `p99_9_us`.
pub fn metric_order(name: &str) -> (String, u64, String) {
    // A trailing number with a unit: the prefix, the value in ns.
    let units = [
        ("ns", 1u64),
        ("us", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
    ];
    for (u, scale) in units {
        if let Some(head) = name.strip_suffix(u) {
            let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            if digits > 0 {
                let (prefix, number) = head.split_at(head.len() - digits);
                if prefix.ends_with('_') {
                    if let Ok(v) = number.parse::<u64>() {
                        return (prefix.to_string(), v.saturating_mul(scale), String::new());
                    }
                }
            }
        }
    }
    (name.to_string(), 0, String::new())
}

/// The metric names `values` selects among `available`, in order: exact names as given, and
/// for each `prefix*` every available name with that prefix in [`metric_order`].
pub fn select_metrics<'a>(
    values: &[String],
    available: impl Iterator<Item = &'a String>,
) -> Vec<String> {
    let available: Vec<&String> = available.collect();
    let mut out: Vec<String> = Vec::new();
    for v in values {
        if let Some(prefix) = v.strip_suffix('*') {
            let mut matched: Vec<String> = available
                .iter()
                .filter(|n| n.starts_with(prefix))
                .map(|n| n.to_string())
                .collect();
            matched.sort_by_key(|n| metric_order(n));
            matched.dedup();
            for m in matched {
                if !out.contains(&m) {
                    out.push(m);
                }
            }
        } else if !out.contains(v) {
            out.push(v.clone());
        }
    }
    out
}

/// For the expected worst cases a table asks for (`worst_hour_us`, `irq_worst_day_us`, ...)
/// that some cells are too short to support (docs/analysis.md, "Validity of predictions"): a
/// sentence saying how long the cells measured and how long a cell would have to be.
fn unsupported_worst_cases(metrics: &[String], selected: &[(&Cell, &Metrics)]) -> Option<String> {
    let mut parts = Vec::new();
    let mut observed: Option<(f64, f64)> = None;
    for name in metrics {
        let Some(stem) = name.strip_suffix("_us") else {
            continue;
        };
        let Some(at) = stem.find("worst_") else {
            continue;
        };
        let needs_key = format!("{stem}_needs_s");
        let observed_key = format!("{}worst_observed_s", &stem[..at]);
        let mut needs: Option<f64> = None;
        let mut empty = 0usize;
        for (_, m) in selected {
            if m.contains_key(name) {
                continue;
            }
            if let Some(&n) = m.get(&needs_key) {
                needs = Some(needs.map_or(n, |x: f64| x.max(n)));
                empty += 1;
                if let Some(&o) = m.get(&observed_key) {
                    observed = Some(observed.map_or((o, o), |(lo, hi)| (lo.min(o), hi.max(o))));
                }
            }
        }
        if let Some(n) = needs {
            parts.push(format!(
                "{name} is left out of {empty} cell(s): it needs at least {} of measurement per cell",
                crate::duration::format_coarse(n.ceil() as u64)
            ));
        }
    }
    if parts.is_empty() {
        return None;
    }
    let measured = match observed {
        Some((lo, hi)) if (hi - lo).abs() < 0.5 => format!(
            "These cells measured {} each",
            crate::duration::format_coarse(lo.round() as u64)
        ),
        Some((lo, hi)) => format!(
            "These cells measured {} to {}",
            crate::duration::format_coarse(lo.round() as u64),
            crate::duration::format_coarse(hi.round() as u64)
        ),
        None => "Some cells were too short".to_string(),
    };
    Some(format!(
        "{measured}; an expected worst case is given only for a period at most ten times a cell's measurement (docs/analysis.md, \"Validity of predictions\"): {} (raise --duration-scale).",
        parts.join("; ")
    ))
}

/// One dimension's value for a cell and metric, with its sort position.
fn coordinate(
    dim: &str,
    cell: &Cell,
    labels: &Labels,
    metric: &str,
    metric_index: usize,
) -> (usize, String) {
    match dim {
        "load" => (cell.load.map(|l| l + 1).unwrap_or(0), labels.load.clone()),
        "setting" => (
            cell.setting.map(|s| s + 1).unwrap_or(0),
            labels.setting.clone(),
        ),
        "measure" => (cell.measure, labels.measure.clone()),
        "repetition" => (cell.repetition as usize, labels.repetition.clone()),
        _ => (metric_index, metric.to_string()),
    }
}

/// Builds the table `spec` from the finished cells and their figures.
pub fn build(spec: &TableSpec, study: &StudyFile, done: &[(&Cell, &Metrics)]) -> Table {
    let selected: Vec<(&Cell, &Metrics)> = done
        .iter()
        .copied()
        .filter(|(c, _)| match &spec.measure {
            Some(name) => {
                let m = &study.measure[c.measure];
                &m.label() == name || m.kind.get_ref().as_str() == name
            }
            None => true,
        })
        .filter(|(c, _)| {
            let l = c.labels(study);
            spec.loads.as_ref().is_none_or(|v| v.contains(&l.load))
                && spec
                    .settings
                    .as_ref()
                    .is_none_or(|v| v.contains(&l.setting))
        })
        .collect();
    let metrics = select_metrics(&spec.values, selected.iter().flat_map(|(_, m)| m.keys()));
    let row_dims = dimensions(spec.rows.get_ref());
    let col_dims = dimensions(spec.columns.get_ref());
    type Key = (Vec<usize>, String);
    let mut entries: BTreeMap<(Key, Key), Vec<f64>> = BTreeMap::new();
    let mut contributing = std::collections::BTreeSet::new();
    for (cell, m) in &selected {
        let labels = cell.labels(study);
        for (mi, name) in metrics.iter().enumerate() {
            let Some(&v) = m.get(name) else { continue };
            if !v.is_finite() {
                continue;
            }
            let key = |dims: &[&str]| -> Key {
                let parts: Vec<(usize, String)> = dims
                    .iter()
                    .map(|d| coordinate(d, cell, &labels, name, mi))
                    .collect();
                (
                    parts.iter().map(|p| p.0).collect(),
                    parts
                        .iter()
                        .map(|p| p.1.as_str())
                        .collect::<Vec<_>>()
                        .join(" / "),
                )
            };
            entries
                .entry((key(&row_dims), key(&col_dims)))
                .or_default()
                .push(v);
            contributing.insert(cell.index);
        }
    }
    let mut row_keys: Vec<Key> = entries.keys().map(|(r, _)| r.clone()).collect();
    row_keys.sort();
    row_keys.dedup();
    let mut col_keys: Vec<Key> = entries.keys().map(|(_, c)| c.clone()).collect();
    col_keys.sort();
    col_keys.dedup();
    let mut medians = 0;
    let rows = row_keys
        .iter()
        .map(|r| Row {
            label: r.1.clone(),
            values: col_keys
                .iter()
                .map(|c| {
                    entries.get(&(r.clone(), c.clone())).map(|v| {
                        if v.len() > 1 {
                            medians += 1;
                        }
                        crate::stats::median_f64(&mut v.clone()).unwrap_or(f64::NAN)
                    })
                })
                .collect(),
        })
        .collect();
    let unsupported = unsupported_worst_cases(&metrics, &selected);
    let note = match (&spec.note, unsupported) {
        (Some(n), Some(u)) => Some(format!("{n} {u}")),
        (n, u) => n.clone().or(u),
    };
    Table {
        title: spec.title.clone(),
        corner: row_dims.join(" / "),
        columns: col_keys.into_iter().map(|c| c.1).collect(),
        rows,
        note,
        cells: contributing.len(),
        medians,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::file;
    use std::path::Path;

    const STUDY: &str = r#"
[study]
name = "t"
repetitions = 3

[[measure]]
kind = "timer"
duration = "1s"

[[load]]
name = "idle"
profile = "idle"

[[load]]
name = "net"
profile = "net"

[[table]]
title = "latency"
rows = "load"
columns = "metric"
values = ["p99_us", "later_*"]

[[table]]
title = "by repetition"
rows = "repetition"
columns = "load"
values = ["p99_us"]
"#;

    fn fixture() -> (StudyFile, Vec<Cell>, Vec<Metrics>) {
        let s = file::parse(Path::new("t.toml"), STUDY, &|_| Ok(())).expect("parses");
        let cells = crate::study::cells(&s);
        let metrics = cells
            .iter()
            .map(|c| {
                let mut m = Metrics::new();
                let base = if c.load == Some(1) { 100.0 } else { 10.0 };
                m.insert("p99_us".into(), base + c.repetition as f64);
                m.insert("later_10ms".into(), 1.0);
                m.insert("later_1ms".into(), 5.0);
                m.insert("later_500us".into(), 9.0);
                m
            })
            .collect();
        (s, cells, metrics)
    }

    /// A worst case too far beyond a cell's measurement is left out, and the note says what
    /// the cells measured and how long they would have to be.
    #[test]
    fn unsupported_worst_cases_are_named_in_the_note() {
        let (s, cells, mut metrics) = fixture();
        for m in &mut metrics {
            m.insert("worst_observed_s".into(), 15.0);
            m.insert("worst_hour_needs_s".into(), 360.0);
            m.insert("worst_day_us".into(), 1_000.0);
        }
        let done: Vec<_> = cells.iter().zip(&metrics).collect();
        let mut spec = s.table[0].clone();
        spec.values = vec![
            "p99_us".into(),
            "worst_hour_us".into(),
            "worst_day_us".into(),
        ];
        spec.note = Some("Given.".into());
        let t = build(&spec, &s, &done);
        assert_eq!(t.columns, ["p99_us", "worst_day_us"]);
        let note = t.note.expect("note");
        assert!(
            note.starts_with("Given. These cells measured 15s each;"),
            "{note}"
        );
        assert!(
            note.contains(&format!(
                "worst_hour_us is left out of {} cell(s): it needs at least 6m of measurement per cell",
                cells.len()
            )),
            "{note}"
        );
        assert!(!note.contains("worst_day_us is"), "{note}");
        // Every figure supported: no sentence.
        spec.values = vec!["p99_us".into(), "worst_day_us".into()];
        spec.note = None;
        assert_eq!(build(&spec, &s, &done).note, None);
    }

    #[test]
    fn repetitions_collapse_to_their_median() {
        let (s, cells, metrics) = fixture();
        let done: Vec<_> = cells.iter().zip(&metrics).collect();
        let t = build(&s.table[0], &s, &done);
        assert_eq!(
            t.columns,
            ["p99_us", "later_500us", "later_1ms", "later_10ms"]
        );
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0].label, "idle");
        assert_eq!(t.rows[0].values[0], Some(12.0), "median of 11, 12, 13");
        assert_eq!(t.rows[1].values[0], Some(102.0));
        assert_eq!(t.cells, 6);
        assert_eq!(t.medians, 8);
    }

    #[test]
    fn any_dimension_can_be_rows_or_columns() {
        let (s, cells, metrics) = fixture();
        let done: Vec<_> = cells.iter().zip(&metrics).collect();
        let t = build(&s.table[1], &s, &done);
        assert_eq!(t.corner, "repetition");
        assert_eq!(t.columns, ["idle", "net"]);
        let labels: Vec<_> = t.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["1", "2", "3"]);
        assert_eq!(t.rows[2].values, [Some(13.0), Some(103.0)]);
        assert_eq!(t.medians, 0);
    }

    #[test]
    fn unfinished_cells_leave_gaps() {
        let (s, cells, metrics) = fixture();
        // Only the first repetition's idle cell is done.
        let done: Vec<_> = cells.iter().zip(&metrics).take(1).collect();
        let t = build(&s.table[1], &s, &done);
        assert_eq!(t.columns, ["idle"]);
        assert_eq!(t.rows.len(), 1);
        let t = build(&s.table[0], &s, &[]);
        assert!(t.rows.is_empty() && t.cells == 0);
    }

    #[test]
    fn metric_names_sort_by_their_threshold() {
        let mut v = vec!["ihist_1000us", "ihist_900us", "ihist_0ns", "ihist_18100us"];
        v.sort_by_key(|n| metric_order(n));
        assert_eq!(
            v,
            ["ihist_0ns", "ihist_900us", "ihist_1000us", "ihist_18100us"]
        );
        assert_eq!(metric_order("p99_us").1, 0);
    }
}
