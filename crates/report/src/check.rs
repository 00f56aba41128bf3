//! The text of `sandglass check`: the verdict first, then the evidence (what was measured and
//! predicted, what held the CPU), the fixes ranked by expected effect, and the configuration
//! scan.

use crate::text::count;
use sandglass::check::predict::span;
use sandglass::check::trial::Effect;
use sandglass::check::workload::WorkloadKind;
use sandglass::check::CheckReport;
use sandglass::Nanos;
use std::io::{self, Write};

fn ns(v: i64) -> String {
    Nanos(v.max(0) as u64).to_string()
}

/// A probability in a form that reads at any size: `20 %`, `0.13 %`, `1.3e-7`.
fn prob(p: f64) -> String {
    if p >= 0.001 {
        let t = format!("{:.3}", p * 100.0);
        format!("{} %", t.trim_end_matches('0').trim_end_matches('.'))
    } else if p == 0.0 {
        "0".to_string()
    } else {
        format!("{p:.2e}")
    }
}

/// `f:88` as `SCHED_FIFO 88`, `r:` as SCHED_RR, `o:N` as SCHED_OTHER nice N.
fn policy_name(p: &str) -> String {
    match p.split_once(':') {
        Some(("f", n)) => format!("SCHED_FIFO {n}"),
        Some(("r", n)) => format!("SCHED_RR {n}"),
        Some(("o", n)) => format!("SCHED_OTHER nice {n}"),
        _ => p.to_string(),
    }
}

/// The number of periods of buffering that give `need` of slack after `work`.
fn periods_for(need: i64, work: u64, period: u64) -> u64 {
    let need = need.max(0) as u64 + work;
    need.div_ceil(period.max(1)) + 1
}

/// What a check's measurement without its load says of the load (`Effect::Better`: better
/// without it).
pub fn load_cost(e: Effect) -> &'static str {
    match e {
        Effect::Better => "the load makes it worse",
        Effect::NoClearChange => "no clear difference",
        // Seen on virtual machines: an idle vCPU halts, and the host wakes it late.
        Effect::Worse => {
            "it was better under the load (an idle CPU may sleep deeper, or on a virtual \
             machine be woken late by its host; repeat to see whether that holds)"
        }
    }
}

pub fn write(w: &mut dyn Write, r: &CheckReport) -> io::Result<()> {
    let p = &r.predictions;
    let miss = &r.workload.miss;
    writeln!(
        w,
        "sandglass check {}: {}",
        r.workload.spec, r.workload.description
    )?;
    writeln!(w)?;
    writeln!(w, "VERDICT: {}", r.verdict.level.as_str().to_uppercase())?;
    writeln!(w, "  {}", r.verdict.reason)?;
    writeln!(w)?;
    let load = if r.loads.is_empty() {
        "no load of its own".to_string()
    } else {
        format!("beside {}", r.loads.join(", "))
    };
    writeln!(
        w,
        "Measured: CPU {}, {}, a release every {} for {} ({} periods), {load}; {}",
        r.cpu,
        policy_name(&r.policy),
        r.workload.period_ns,
        span(p.measured_s),
        count(p.periods),
        if r.traced {
            "kernel events recorded"
        } else {
            "kernel events not recorded (causes from /proc samples)"
        }
    )?;
    if r.end_detail.starts_with("ended early") {
        writeln!(w, "  {}", r.end_detail)?;
    }
    writeln!(w, "  run: {}", r.run_dir)?;
    writeln!(w)?;
    let target = span(p.target_s);
    writeln!(
        w,
        "Predictions (slack {}{}; target: at most one {miss} per {target})",
        ns(p.slack_ns),
        if r.work_ns.0 > 0 {
            format!(" after {} of work", r.work_ns)
        } else {
            String::new()
        }
    )?;
    let line = |w: &mut dyn Write, label: &str, value: String| writeln!(w, "  {label:<45} {value}");
    line(
        w,
        &format!("{miss}s seen"),
        format!(
            "{} of {} periods; largest delay {}",
            count(p.misses),
            count(p.periods),
            ns(p.max_ns)
        ),
    )?;
    let mut probability = format!(
        "{} (95 %: {} to {})",
        prob(p.miss_probability),
        prob(p.miss_probability_low),
        prob(p.miss_probability_high)
    );
    if let Some(m) = p.model_probability {
        probability.push_str(&format!("; tail model: {}", prob(m)));
    }
    line(
        w,
        &format!("probability of {} per period", r.workload.a_miss()),
        probability,
    )?;
    let mtbf = match (p.mtbf_s, p.mtbf_needs_run_s, p.mtbf_at_least_s) {
        (Some(m), _, _) => {
            let range = match (p.mtbf_low_s, p.mtbf_high_s) {
                (Some(a), Some(b)) => format!(" (95 %: {} to {})", span(a), span(b)),
                (Some(a), None) => format!(" (95 %: at least {})", span(a)),
                _ => String::new(),
            };
            format!(
                "{}{range}{}",
                span(m),
                if p.mtbf_from_model {
                    ", from the tail model"
                } else {
                    ""
                }
            )
        }
        (None, Some(need), at_least) => format!(
            "{}the tail model's figure needs a run of at least {} (this one: {})",
            at_least
                .map(|a| format!("at least {} (95 %); ", span(a)))
                .unwrap_or_default(),
            span(need),
            span(p.measured_s)
        ),
        (None, None, Some(a)) => format!("at least {} (95 %, none seen)", span(a)),
        _ => "-".to_string(),
    };
    line(w, &format!("mean time between {miss}s"), mtbf)?;
    let worst = match &p.worst_hour {
        Some(h) => match (h.worst_case_ns, h.needs_run_s) {
            (Some(v), _) => match (h.extrapolated, h.ci_low_ns, h.ci_high_ns) {
                (true, Some(a), Some(b)) => format!(
                    "{} (95 %: {} to {}), from the tail model",
                    ns(v),
                    ns(a),
                    ns(b)
                ),
                _ => ns(v),
            },
            (None, Some(need)) => format!(
                "needs a run of at least {} (this one: {})",
                span(need),
                span(p.measured_s)
            ),
            _ => "-".to_string(),
        },
        None => "-".to_string(),
    };
    line(w, "expected worst delay per hour", worst)?;
    let needs = match (
        p.target_slack_ns,
        p.target_slack_high_ns,
        p.target_needs_run_s,
    ) {
        (Some(v), Some(hi), _) => {
            let base = format!("{} (95 %: up to {})", ns(v), ns(hi));
            match r.workload.kind {
                WorkloadKind::Audio => format!(
                    "{base}: {} periods of buffering",
                    periods_for(hi, r.work_ns.0, r.workload.period_ns.0)
                ),
                WorkloadKind::Control | WorkloadKind::Tasks => {
                    format!(
                        "{base}: a deadline of at least {}",
                        ns(hi + r.work_ns.0 as i64)
                    )
                }
                WorkloadKind::Video => base,
            }
        }
        (_, _, Some(need)) => format!(
            "needs a run of at least {} (this one: {})",
            span(need),
            span(p.measured_s)
        ),
        _ => "-".to_string(),
    };
    line(w, &format!("slack for one {miss} per {target}"), needs)?;
    writeln!(w)?;

    if !r.culprits.is_empty() || r.steal_share.is_some_and(|s| s > 0.0) {
        writeln!(
            w,
            "What held CPU {} in its delays above {} (largest share first)",
            r.cpu, r.explained_above_ns
        )?;
        for c in r.culprits.iter().take(6) {
            let detail: Vec<&str> = [c.policy.as_deref(), c.why.as_deref()]
                .into_iter()
                .flatten()
                .collect();
            let detail = if detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", detail.join(", "))
            };
            writeln!(
                w,
                "  {}{detail}: {} in {} delay(s), at most {}",
                c.name,
                Nanos(c.stolen_ns),
                count(c.count),
                Nanos(c.max_ns)
            )?;
        }
        if let Some(s) = r.steal_share.filter(|s| *s > 0.0) {
            writeln!(
                w,
                "  the hypervisor took {} of CPU {}'s time (steal)",
                prob(s),
                r.cpu
            )?;
        }
        writeln!(w)?;
    }

    if !r.fixes.is_empty() {
        writeln!(w, "Fixes, by expected effect")?;
        for (i, f) in r.fixes.iter().enumerate() {
            writeln!(w, "  {}. [{}] {}", i + 1, f.basis, f.what)?;
            writeln!(w, "     why: {}", f.why)?;
            if let Some(c) = &f.command {
                writeln!(w, "     how: {c}")?;
            }
        }
        writeln!(w)?;
    }

    if let Some(t) = &r.without_load {
        let cost = load_cost(t.effect);
        writeln!(
            w,
            "Without the load (the same measurement again for {}, with no load)",
            span(t.predictions.measured_s)
        )?;
        writeln!(w, "  {cost}: under the load → without it: {}", t.summary)?;
        writeln!(
            w,
            "  verdict without the load: {}",
            t.verdict.level.as_str()
        )?;
        writeln!(w, "  run: {}", t.run_dir)?;
        writeln!(w)?;
    }

    if !r.trials.is_empty() || !r.trials_skipped.is_empty() {
        let each = r
            .trials
            .first()
            .map(|t| span(t.predictions.measured_s))
            .unwrap_or_default();
        writeln!(
            w,
            "Fixes tried (one change at a time, {each} each; nothing on the machine was changed)"
        )?;
        for t in &r.trials {
            writeln!(
                w,
                "  {:<16} {}: {}",
                t.effect.as_str(),
                t.trial.change,
                t.summary
            )?;
            writeln!(
                w,
                "  {:<16} verdict with it: {}",
                "",
                t.verdict.level.as_str()
            )?;
            writeln!(w, "  {:<16} how: {}", "", t.trial.how)?;
            writeln!(w, "  {:<16} run: {}", "", t.run_dir)?;
        }
        for s in &r.trials_skipped {
            writeln!(w, "  {:<16} {s}", "not measured")?;
        }
        writeln!(w)?;
    }

    writeln!(w, "Configuration (CPU {})", r.cpu)?;
    for f in &r.findings {
        writeln!(w, "  {:<8} {:<16} {}", f.status.as_str(), f.id, f.observed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_and_buffering_read_well() {
        assert_eq!(prob(0.2), "20 %");
        assert_eq!(prob(0.00134), "0.134 %");
        assert_eq!(prob(1.3e-7), "1.30e-7");
        assert_eq!(prob(0.0), "0");
        // 2.5 ms of slack at 1.333 ms periods: (n − 1) periods ≥ 2.5 ms → n = 3.
        assert_eq!(periods_for(2_500_000, 0, 1_333_333), 3);
        assert_eq!(periods_for(1_333_333, 0, 1_333_333), 2);
    }
}
