//! Markdown renderings of a run's key figures, for pasting into issues and pull requests.

use sandglass::noise::NoiseResult;
use sandglass::timer::TimerResult;
use sandglass::Nanos;
use std::io::{self, Write};

fn time(ns: u64) -> String {
    Nanos(ns).to_string()
}

fn causes(w: &mut dyn Write, c: Option<&sandglass::causes::Causes>) -> io::Result<()> {
    let Some(c) = c else { return Ok(()) };
    if let Some(e) = &c.explanation {
        if !e.totals.is_empty() {
            writeln!(
                w,
                "- hypervisor (steal): {} of the measured CPUs' time over {:.3} s sampled",
                crate::causes::percent(e.steal_share),
                e.sampled_ns as f64 / 1e9
            )?;
        }
        for s in e.spikes.iter().take(5) {
            writeln!(
                w,
                "- CPU {} at {:.3} s, {}: {}",
                s.cpu,
                s.at_ns as f64 / 1e9,
                time(s.size_ns),
                s.text()
            )?;
        }
    }
    for t in &c.trains {
        writeln!(
            w,
            "- periodic on CPU {}: {}",
            t.cpu,
            crate::causes::train(&t.train)
        )?;
    }
    Ok(())
}

fn warnings(w: &mut dyn Write, list: &[sandglass::warning::Warning]) -> io::Result<()> {
    for x in list {
        writeln!(w, "- warning: {}", x.message)?;
    }
    Ok(())
}

/// A timer run: one table row per CPU, then the largest delays explained and the warnings.
pub fn timer(w: &mut dyn Write, r: &TimerResult) -> io::Result<()> {
    writeln!(
        w,
        "**sandglass timer** `{}`: interval {}, {} timer, {} releases, {} measured, {}\n",
        r.run.run_id,
        r.interval_ns,
        r.timer,
        r.mode,
        time(r.run.elapsed_ns),
        r.run.state.name()
    )?;
    writeln!(
        w,
        "| CPU | policy | releases | missed | p50 | p99 | p99.9 | max |\n|---:|---|---:|---:|---:|---:|---:|---:|"
    )?;
    for c in &r.cpus {
        let l = c.lateness_ns.as_ref();
        let p = |f: fn(&sandglass::histo::Percentiles) -> u64| {
            l.map(|l| time(f(l))).unwrap_or_else(|| "-".into())
        };
        writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            c.cpu,
            c.policy.as_deref().unwrap_or("-"),
            c.count,
            c.missed_releases,
            p(|l| l.p50),
            p(|l| l.p99),
            p(|l| l.p99_9),
            l.map(|l| time(l.max.max(0) as u64))
                .unwrap_or_else(|| "-".into())
        )?;
    }
    writeln!(w)?;
    causes(w, r.run.causes.as_ref())?;
    warnings(w, &r.run.warnings)
}

/// A noise run: one table row per CPU, then the largest interruptions explained and the
/// warnings.
pub fn noise(w: &mut dyn Write, r: &NoiseResult) -> io::Result<()> {
    writeln!(
        w,
        "**sandglass noise** `{}`: {} measured, {}\n",
        r.run.run_id,
        r.run.duration_ns,
        r.run.state.name()
    )?;
    writeln!(
        w,
        "| CPU | noise | interruptions/s | p99 | max |\n|---:|---:|---:|---:|---:|"
    )?;
    for c in &r.cpus {
        writeln!(
            w,
            "| {} | {:.3}% | {:.1} | {} | {} |",
            c.cpu,
            c.noise_share * 100.0,
            c.interruptions_per_s,
            c.percentiles_ns
                .as_ref()
                .map(|p| time(p.p99))
                .unwrap_or_else(|| "-".into()),
            time(c.max_ns)
        )?;
    }
    writeln!(w)?;
    causes(w, r.run.causes.as_ref())?;
    warnings(w, &r.run.warnings)
}

/// An Hourglass run: one table row per thread, then the largest preemptions explained and
/// the warnings.
pub fn hourglass(
    w: &mut dyn Write,
    r: &sandglass::hourglass::result::HourglassResult,
) -> io::Result<()> {
    writeln!(
        w,
        "**sandglass hourglass** `{}`: {} thread(s), {} measured, gap threshold {}, {}\n",
        r.run.run_id,
        r.threads.len(),
        r.run.duration_ns,
        Nanos(r.gap.threshold_ns),
        r.run.state.name()
    )?;
    writeln!(
        w,
        "| thread | workload | priority | CPU share | preemptions | hits / misses | worst response |\n|---:|---|---|---:|---:|---:|---:|"
    )?;
    for t in &r.threads {
        let share = if t.active_ns > 0 {
            t.received_ns as f64 / t.active_ns as f64
        } else {
            0.0
        };
        writeln!(
            w,
            "| {} | {} | {} | {:.1}% | {} | {} | {} |",
            t.thread,
            cell(&t.workload.to_string()),
            cell(&t.priority),
            share * 100.0,
            t.preemptions,
            match (t.hits, t.misses) {
                (Some(h), Some(m)) => format!("{h} / {m}"),
                _ => "-".into(),
            },
            cell(&crate::hourglass::worst_response(t))
        )?;
    }
    writeln!(w)?;
    causes(w, r.run.causes.as_ref())?;
    warnings(w, &r.run.warnings)
}

/// A study: each table as a Markdown table, then the cells that did not complete.
pub fn study(w: &mut dyn Write, o: &sandglass::study::run::StudyOutcome) -> io::Result<()> {
    let r = &o.record;
    writeln!(
        w,
        "**sandglass study** `{}` ({}): {} of {} cells completed, {}",
        r.name,
        r.source,
        r.count(sandglass::study::run::CellState::Completed),
        r.cells.len(),
        r.state.name()
    )?;
    for t in &o.tables {
        writeln!(w, "\n{}\n", cell(&t.title))?;
        if t.rows.is_empty() {
            writeln!(w, "(no finished cell has these figures yet)")?;
            continue;
        }
        write!(w, "| {} |", cell(&t.corner))?;
        for c in &t.columns {
            write!(w, " {} |", cell(c))?;
        }
        write!(w, "\n|---|")?;
        for _ in &t.columns {
            write!(w, "---:|")?;
        }
        writeln!(w)?;
        for row in &t.rows {
            write!(w, "| {} |", cell(&row.label))?;
            for (v, c) in row.values.iter().zip(&t.columns) {
                write!(w, " {} |", crate::study::cell_value(c, *v))?;
            }
            writeln!(w)?;
        }
        if let Some(n) = &t.note {
            writeln!(w, "\n{}", cell(n))?;
        }
    }
    let causes = crate::study::cell_causes(r);
    if !causes.is_empty() {
        writeln!(w, "\n{}\n", crate::study::CAUSES_TITLE)?;
        writeln!(w, "| cell | largest delay and its cause |\n|---|---|")?;
        for (label, cause) in &causes {
            writeln!(w, "| {} | {} |", cell(label), cell(cause))?;
        }
    }
    for c in &r.cells {
        if !matches!(c.state, sandglass::study::run::CellState::Completed) {
            writeln!(
                w,
                "\n- {} {}: {}",
                c.cell.id,
                c.state.name(),
                c.error.as_deref().or(c.detail.as_deref()).unwrap_or("-")
            )?;
        }
    }
    Ok(())
}

/// Text for a table cell: a `|` would end the cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}
