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
        for s in e.spikes.iter().take(5) {
            let what: Vec<String> = s.abnormal.iter().map(crate::causes::abnormal).collect();
            writeln!(
                w,
                "- CPU {} at {:.3} s, {}: {}",
                s.cpu,
                s.at_ns as f64 / 1e9,
                time(s.size_ns),
                if what.is_empty() {
                    "nothing unusual in the sampled counters".to_string()
                } else {
                    what.join("; ")
                }
            )?;
        }
    }
    for t in &c.trains {
        writeln!(
            w,
            "- periodic on CPU {}: {} delays of about {} every {}",
            t.cpu,
            t.train.count,
            time(t.train.typical_ns),
            time(t.train.period_ns)
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
        r.run_id,
        r.interval_ns,
        r.timer,
        r.mode,
        time(r.elapsed_ns),
        r.state.name()
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
    causes(w, r.causes.as_ref())?;
    warnings(w, &r.warnings)
}

/// A noise run: one table row per CPU, then the largest interruptions explained and the
/// warnings.
pub fn noise(w: &mut dyn Write, r: &NoiseResult) -> io::Result<()> {
    writeln!(
        w,
        "**sandglass noise** `{}`: {} measured, {}\n",
        r.run_id,
        r.duration_ns,
        r.state.name()
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
    causes(w, r.causes.as_ref())?;
    warnings(w, &r.warnings)
}
