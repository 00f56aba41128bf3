//! The page of a study: its tables, and for each measure the distributions of every load and
//! setting side by side, from the cells' own run directories.

use super::figures::{self, Named};
use super::page::{Page, Plot};
use super::sections;
use crate::export::ExportError;
use sandglass::analysis::distribution::Distribution;
use sandglass::engine::record::new_histogram;
use sandglass::store::RunReader;
use sandglass::study::run::{CellState, StudyOutcome};
use sandglass::RunKind;
use std::collections::BTreeMap;

/// One measure's completed cells, grouped by load and setting (CPUs and repetitions pooled:
/// HDR histograms add without loss).
struct Group {
    name: String,
    dist: Distribution,
    /// The time the group's samples took, each run's samples over its rate (timer runs).
    observed_s: Option<f64>,
}

/// The whole-run distributions of every completed cell of measure `measure`; `None` when the
/// measure's runs are not of `kind`.
fn groups(
    o: &StudyOutcome,
    measure: usize,
    kind: RunKind,
    with_setting: bool,
) -> Result<Option<Vec<Group>>, ExportError> {
    let mut by: BTreeMap<(String, String), sandglass::histo::Histogram<u64>> = BTreeMap::new();
    let mut observed: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut order: Vec<(String, String)> = Vec::new();
    for c in &o.record.cells {
        if c.cell.measure != measure || c.state != CellState::Completed {
            continue;
        }
        let Some(dir) = &c.dir else { continue };
        let r = RunReader::open(&o.dir.join(dir))?;
        if r.manifest.kind != kind {
            return Ok(None);
        }
        let key = (c.labels.load.clone(), c.labels.setting.clone());
        if !by.contains_key(&key) {
            order.push(key.clone());
        }
        let pooled = sandglass::store::data::totals(&r)?.pooled();
        let interval = r
            .read("summary.json")
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["interval_ns"].as_u64())
            .filter(|&i| i > 0);
        if let Some(interval) = interval {
            *observed.entry(key.clone()).or_default() +=
                pooled.len() as f64 * interval as f64 / 1e9;
        }
        let _ = by.entry(key).or_insert_with(new_histogram).add(&pooled);
    }
    Ok(Some(
        order
            .into_iter()
            .map(|k| {
                let dist = by
                    .remove(&k)
                    .map(|h| Distribution::from_histogram(&h))
                    .unwrap_or_else(|| Distribution::from_samples(&[]));
                let observed_s = observed.get(&k).copied();
                let name = if with_setting {
                    format!("{}, {}", k.0, k.1)
                } else {
                    k.0
                };
                Group {
                    name,
                    dist,
                    observed_s,
                }
            })
            .collect(),
    ))
}

/// The page of a study.
pub fn page(o: &StudyOutcome) -> Result<String, ExportError> {
    let r = &o.record;
    // Every completed cell's files are checked before anything is drawn from them.
    for c in &r.cells {
        if let (CellState::Completed, Some(dir)) = (c.state, &c.dir) {
            RunReader::open(&o.dir.join(dir))?.verify()?;
        }
    }
    let done = r.count(CellState::Completed);
    let mut p = Page::new(
        RunKind::Study,
        &format!("Study {}", r.name),
        &format!(
            "{}; {done} of {} cells completed; {}",
            r.source,
            r.cells.len(),
            r.state.name()
        ),
    );
    p.facts(&[
        ("study", r.id.clone()),
        ("when", format!("{} to {}", r.created_at, r.updated_at)),
        ("machine", sections::machine(&r.system)),
        ("duration scale", format!("{}", r.duration_scale)),
        (
            "commands",
            r.command_lines
                .iter()
                .map(|c| c.join(" "))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    ]);
    p.section("Tables");
    for t in &o.tables {
        p.subsection(&t.title);
        if t.rows.is_empty() {
            p.text("No finished cell has these figures yet.");
            continue;
        }
        let mut head: Vec<&str> = vec![t.corner.as_str()];
        head.extend(t.columns.iter().map(String::as_str));
        let rows: Vec<Vec<String>> = t
            .rows
            .iter()
            .map(|row| {
                let mut v = vec![row.label.clone()];
                v.extend(
                    row.values
                        .iter()
                        .zip(&t.columns)
                        .map(|(x, c)| crate::study::cell_value(c, *x)),
                );
                v
            })
            .collect();
        p.table(&head, &rows, &[]);
        if t.medians > 0 {
            p.text("Entries over several cells show their median.");
        }
        if let Some(n) = &t.note {
            p.text(n);
        }
    }

    let causes = crate::study::cell_causes(r);
    if !causes.is_empty() {
        p.subsection(crate::study::CAUSES_TITLE);
        let rows: Vec<Vec<String>> = causes.into_iter().map(|(l, c)| vec![l, c]).collect();
        p.table(&["cell", "largest delay and its cause"], &rows, &[]);
    }

    // Settings matter to the series' names only when the study has some.
    let with_setting = r.cells.iter().any(|c| c.cell.setting.is_some());
    let mut measures: Vec<(usize, String)> = Vec::new();
    for c in &r.cells {
        if !measures.iter().any(|m| m.0 == c.cell.measure) {
            measures.push((c.cell.measure, c.labels.measure.clone()));
        }
    }
    let mut drew = false;
    for (m, label) in &measures {
        if let Some(gs) = groups(o, *m, RunKind::Timer, with_setting)? {
            if gs.is_empty() {
                continue;
            }
            drew = true;
            p.section(&format!("{label}: timer wakeup latency"));
            let series: Vec<Named> = gs
                .iter()
                .map(|g| Named {
                    name: g.name.clone(),
                    dist: g.dist.clone(),
                })
                .collect();
            p.figure(
                "latency-histogram",
                &format!(
                    "Lateness of every release, log-log, {} bins per decade: one outline per load{}, every CPU and repetition pooled.",
                    figures::BINS_PER_DECADE,
                    if with_setting { " and setting" } else { "" }
                ),
                Plot::Chart(figures::histogram(
                    &series,
                    1e3,
                    "lateness (µs)",
                    "releases per bin (count)",
                )),
            );
            p.figure(
                "exceedance",
                "Probability that a release is later than x, per load: the further right a curve reaches at a given height, the worse the service.",
                Plot::Chart(figures::exceedance(
                    &series,
                    1e3,
                    "lateness x (µs)",
                    "P(lateness > x) (per release)",
                    Vec::new(),
                )),
            );
            let curves: Vec<(String, &Distribution, u32, Option<f64>)> = gs
                .iter()
                .filter(|g| !g.dist.is_empty())
                .map(|g| (g.name.clone(), &g.dist, 2, g.observed_s))
                .collect();
            p.figure(
                "mttf",
                "Mean time to buffer underrun against the buffer size for a double-buffered stream woken like this timer, per load (Cota-Robles & Held, §5). Hollow dots are lower bounds where no release was that late. Times beyond ten times what the cells measured are not drawn (docs/analysis.md, \"Validity of predictions\").",
                Plot::Chart(figures::mttf_curves(&curves)),
            );
        } else if let Some(gs) = groups(o, *m, RunKind::Noise, with_setting)? {
            if gs.is_empty() {
                continue;
            }
            drew = true;
            p.section(&format!("{label}: OS noise"));
            let series: Vec<Named> = gs
                .iter()
                .map(|g| Named {
                    name: g.name.clone(),
                    dist: g.dist.clone(),
                })
                .collect();
            p.figure(
                "noise-histogram",
                &format!(
                    "Duration of every interruption, log-log, {} bins per decade: one outline per load, every CPU and repetition pooled.",
                    figures::BINS_PER_DECADE
                ),
                Plot::Chart(figures::histogram(
                    &series,
                    1e3,
                    "interruption duration (µs)",
                    "interruptions per bin (count)",
                )),
            );
        }
    }
    if !drew {
        p.text("No completed timer or noise cell to draw.");
    }

    p.section("Cells");
    let rows: Vec<Vec<String>> = r
        .cells
        .iter()
        .map(|c| {
            vec![
                c.cell.id.clone(),
                c.state.name().to_string(),
                c.seconds
                    .map(|s| format!("{s:.1} s"))
                    .unwrap_or_else(|| "-".into()),
                c.error
                    .clone()
                    .or_else(|| c.detail.clone())
                    .unwrap_or_default(),
            ]
        })
        .collect();
    p.table(&["cell", "state", "took", "detail"], &rows, &[3]);
    let warnings: Vec<String> = {
        let mut w: Vec<String> = r.cells.iter().flat_map(|c| c.warnings.clone()).collect();
        w.sort();
        w.dedup();
        w
    };
    p.section("Warnings");
    if warnings.is_empty() {
        p.text("None.");
    } else {
        p.list("warnings", &warnings);
    }
    p.section("System");
    sections::snapshot(&mut p, &r.system);
    Ok(p.finish(&format!(
        "Drawn by sandglass {} from {}; every cell's files were checked against their checksums first.",
        env!("CARGO_PKG_VERSION"),
        o.dir.display()
    )))
}
