//! Renderings of the analyses of `sandglass analyze`.
//!
//! Each function writes one analysis's answer for people: the verdict first, then the numbers
//! behind it, with units on every time and the assumption that decided the verdict named
//! (a bound that does not apply, a value extrapolated beyond the data, a lower bound where no
//! sample exceeded a limit). The machine-readable form is the result type itself, serialised.

use crate::text::{count, percent, signed};
use sandglass::analysis::admission::{AdmissionReport, Verdict};
use sandglass::analysis::edf::{DemandBound, EdfReport};
use sandglass::analysis::fit::{CostFit, Point};
use sandglass::analysis::mttf::{LeastBuffering, MttfResult};
use sandglass::analysis::rta::{Preemption, PriorityOrder, RtaReport};
use sandglass::analysis::significance::{
    MannWhitney, MeanCi, PValueMethod, PercentileCi, TTest, TTestKind,
};
use sandglass::analysis::switch_cost::{SwitchCost, SwitchCostSummary, SwitchTrial};
use sandglass::analysis::two_rate::TwoRate;
use sandglass::analysis::worst_case::WorstCaseReport;
use sandglass::experiments::rta_validate::{Agreement, Validation};
use sandglass::Nanos;
use std::io::{self, Write};

/// A duration in seconds for people: `500 µs`, `12 s`, `7.5 min`, `3.2 h`, `4.1 days`.
pub fn seconds(s: f64) -> String {
    if !s.is_finite() {
        return "unbounded".into();
    }
    if s < 0.0 {
        return format!("-{}", seconds(-s));
    }
    if s >= 2.0 * 86_400.0 {
        format!("{:.1} days", s / 86_400.0)
    } else if s >= 2.0 * 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else if s >= 120.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        Nanos((s * 1e9).round() as u64).to_string()
    }
}

/// A float with `digits` significant digits, without trailing zeros: `0.07939`, `-1.8608`.
pub fn sig(x: f64, digits: usize) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i64;
    let decimals = (digits as i64 - 1 - magnitude).max(0) as usize;
    let mut s = format!("{x:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    s
}

/// A probability: `0.001`, `2.78e-4`, `0`.
fn prob(p: f64) -> String {
    if p == 0.0 {
        "0".into()
    } else if p >= 0.001 {
        sig(p, 4)
    } else {
        format!("{p:.3e}")
    }
}

fn column_width<'a>(names: impl Iterator<Item = &'a str>, header: &str) -> usize {
    names
        .map(|n| n.chars().count())
        .chain([header.len()])
        .max()
        .unwrap_or(4)
}

/// The fixed-priority response-time analysis.
pub fn write_rta(w: &mut dyn Write, r: &RtaReport) -> io::Result<()> {
    let mode = match r.preemption {
        Preemption::Preemptive => "preemptive",
        Preemption::NonPreemptive => "non-preemptive, 1 ns time unit",
    };
    let order = match r.priority_order {
        PriorityOrder::Given => "priorities as given, smaller is higher",
        PriorityOrder::DeadlineMonotonic => "deadline-monotonic priorities",
    };
    writeln!(w, "fixed-priority response-time analysis ({mode}; {order})")?;
    let width = column_width(r.tasks.iter().map(|t| t.name.as_str()), "task");
    writeln!(
        w,
        "{:<width$} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}  verdict",
        "task", "prio", "C", "T", "D", "J", "B", "R"
    )?;
    for t in &r.tasks {
        let resp = t
            .response_time_ns
            .map(|x| x.to_string())
            .unwrap_or_else(|| "unbounded".into());
        let verdict = match t.response_time_ns {
            Some(x) if t.schedulable => {
                format!("meets its deadline ({} to spare)", t.deadline_ns - x)
            }
            Some(x) => format!("MISSES: responds {} after its deadline", x - t.deadline_ns),
            None => {
                "MISSES: its busy period never ends (utilisation at its priority exceeds 1)".into()
            }
        };
        writeln!(
            w,
            "{:<width$} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}  {}",
            t.name,
            t.priority,
            t.wcet_ns.to_string(),
            t.period_ns.to_string(),
            t.deadline_ns.to_string(),
            t.jitter_ns.to_string(),
            t.blocking_ns.to_string(),
            resp,
            verdict
        )?;
        if t.jobs > 1 {
            writeln!(
                w,
                "{:<width$}   busy period {} holds {} jobs; job {} is the worst",
                "",
                t.busy_period_ns.map(|b| b.to_string()).unwrap_or_default(),
                t.jobs,
                t.worst_job.map(|j| j.to_string()).unwrap_or_default()
            )?;
        }
    }
    let bound_text = |ok: Option<bool>| {
        match ok {
        Some(true) => "proves the set schedulable",
        Some(false) => "cannot prove it (only a sufficient test)",
        None => "does not apply (it needs preemption, no jitter or blocking, distinct rate-monotonic priorities)",
    }
    };
    writeln!(
        w,
        "utilisation {:.4}; Liu & Layland bound {:.4} {}",
        r.utilization,
        r.liu_layland_bound,
        bound_text(r.liu_layland_ok)
    )?;
    writeln!(w, "hyperbolic bound {}", bound_text(r.hyperbolic_ok))?;
    writeln!(
        w,
        "schedulable: {}",
        if r.schedulable {
            "yes, every task meets every deadline"
        } else {
            "NO"
        }
    )
}

/// `analyze rta --validate`: the run of the set beside its analysis, task by task, then the
/// verdict and the reason for each disagreement.
pub fn write_rta_validation(w: &mut dyn Write, v: &Validation) -> io::Result<()> {
    writeln!(w)?;
    writeln!(
        w,
        "validation: the set ran for {} as Hourglass PERIODIC threads on CPU {} (timer {}), \
         all released together at the start; run {}",
        v.duration_ns, v.cpus, v.timer, v.run_dir
    )?;
    for n in &v.not_reproduced {
        writeln!(w, "  not reproduced: {n}")?;
    }
    if !v.not_reproduced.is_empty() {
        writeln!(
            w,
            "  so the run is held to the analysis of the set as run (no jitter, no blocking)"
        )?;
    }
    if let Some(t) = &v.throttled {
        writeln!(w, "  the kernel adds: {t}")?;
    }
    let width = column_width(v.tasks.iter().map(|t| t.name.as_str()), "task");
    writeln!(
        w,
        "{:<width$} {:>5} {:>10} {:>12} {:>7} {:>7} {:>14} {:>12}  agreement",
        "task", "fifo", "D", "predicted R", "jobs", "missed", "worst response", "worst start"
    )?;
    let opt = |x: Option<Nanos>| x.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
    for t in &v.tasks {
        let predicted = t
            .predicted_response_ns
            .map(|x| x.to_string())
            .unwrap_or_else(|| "unbounded".into());
        writeln!(
            w,
            "{:<width$} {:>5} {:>10} {:>12} {:>7} {:>7} {:>14} {:>12}  {}",
            t.name,
            t.fifo_priority,
            t.deadline_ns.to_string(),
            predicted,
            count(t.jobs),
            count(t.misses),
            opt(t.worst_response_ns),
            opt(t.worst_start_delay_ns),
            t.agreement.describe()
        )?;
    }
    if v.tasks.iter().any(|t| t.misses > 0) {
        writeln!(
            w,
            "worst response is of the jobs that completed: a missed job is dropped unfinished at its deadline (counted in missed)"
        )?;
    }
    for t in &v.tasks {
        let r = t.predicted_response_ns;
        match t.agreement {
            Agreement::Agrees => {}
            Agreement::AboveBound => writeln!(
                w,
                "{}: a job took {}, {} more than the predicted worst case, without missing: time \
                 the model does not count (interrupts, kernel work, wakeup latency); give the \
                 analysis the machine's latency with --jitter-from RUN@p99.99 (a sandglass timer \
                 run on this CPU)",
                t.name,
                opt(t.worst_response_ns),
                opt(t.worst_response_ns.zip(r).map(|(a, b)| a - b)),
            )?,
            Agreement::UnpredictedMisses => writeln!(
                w,
                "{}: missed {} of {} deadlines (the first at job {}), though the analysis says \
                 it responds within {}: {}",
                t.name,
                count(t.misses),
                count(t.jobs),
                t.first_missed_job
                    .map(|j| j.to_string())
                    .unwrap_or_default(),
                opt(r),
                if v.throttled.is_some() {
                    "RT throttling stopped it (above); a set above the real-time limit leaves \
                     no task safe"
                } else {
                    "the machine took time the model does not count; record the kernel's \
                     events with `sandglass hourglass --trace` to see what ran, and give the \
                     analysis the measured latency with --jitter-from"
                }
            )?,
            Agreement::MissNotSeen => writeln!(
                w,
                "{}: the analysis predicts a response of {} against a deadline of {}, yet none \
                 of {} jobs missed: for tasks released together on one CPU with no jitter the \
                 analysis is exact, so the run did not reproduce its worst case (threads on \
                 different CPUs, or a run stopped before the first busy period ended)",
                t.name,
                opt(r),
                t.deadline_ns,
                count(t.jobs),
            )?,
        }
    }
    let agreeing = v
        .tasks
        .iter()
        .filter(|t| t.agreement == Agreement::Agrees)
        .count();
    if v.agrees {
        writeln!(
            w,
            "the run confirms the analysis: every task {} as predicted",
            if v.as_run.schedulable {
                "met its deadlines"
            } else {
                "met or missed its deadlines"
            }
        )
    } else {
        writeln!(
            w,
            "the run DISAGREES with the analysis for {} of {} tasks",
            v.tasks.len() - agreeing,
            v.tasks.len()
        )
    }
}

/// The EDF analysis.
pub fn write_edf(w: &mut dyn Write, r: &EdfReport) -> io::Result<()> {
    writeln!(w, "preemptive EDF analysis")?;
    writeln!(
        w,
        "utilisation {:.4}, density {:.4}",
        r.utilization, r.density
    )?;
    let bound = match (r.bound, r.bound_ns) {
        (DemandBound::BusyPeriod, Some(b)) => format!("up to the synchronous busy period, {b}"),
        (DemandBound::La, Some(b)) => format!("up to the L_a bound, {b}"),
        (DemandBound::Hyperperiod, Some(b)) => {
            format!("up to one hyperperiod past the longest deadline, {b}")
        }
        _ => "until the first failure (utilisation above 1)".into(),
    };
    match (r.first_failure_ns, r.demand_at_failure_ns) {
        (Some(t), Some(d)) => writeln!(
            w,
            "processor demand: NOT feasible: in an interval of {t} the work due is {d} ({} deadlines checked)",
            count(r.points_checked)
        )?,
        _ => writeln!(
            w,
            "processor demand: feasible ({} deadlines checked {bound})",
            count(r.points_checked)
        )?,
    }
    let width = column_width(r.tasks.iter().map(|t| t.name.as_str()), "task");
    writeln!(
        w,
        "{:<width$} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}  verdict",
        "task", "C", "T", "D", "J", "B", "R"
    )?;
    for t in &r.tasks {
        let resp = t
            .response_time_ns
            .map(|x| x.to_string())
            .unwrap_or_else(|| "not bounded".into());
        let verdict = match t.response_time_ns {
            Some(_) if t.schedulable => "meets its deadline",
            Some(_) => "MISSES its deadline",
            None if t.schedulable => "meets its deadline (by the demand test)",
            None => "MISSES its deadline",
        };
        writeln!(
            w,
            "{:<width$} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}  {}",
            t.name,
            t.wcet_ns.to_string(),
            t.period_ns.to_string(),
            t.deadline_ns.to_string(),
            t.jitter_ns.to_string(),
            t.blocking_ns.to_string(),
            resp,
            verdict
        )?;
    }
    Ok(())
}

/// Bandwidth as a share of one CPU: `30.0%`.
fn bw_share(bw: u64) -> String {
    percent(bw as f64 / (1u64 << 20) as f64)
}

/// The SCHED_DEADLINE admission decisions.
pub fn write_admission(w: &mut dyn Write, r: &AdmissionReport) -> io::Result<()> {
    let c = &r.config;
    writeln!(
        w,
        "SCHED_DEADLINE admission on {} CPU(s): sched_rt_runtime_us {}, sched_rt_period_us {}",
        c.cpus, c.rt_runtime_us, c.rt_period_us
    )?;
    match (r.bw_per_cpu, r.limit_bw) {
        (Some(per), Some(limit)) => writeln!(
            w,
            "limit {limit} (= {per} per CPU, {} of each; bandwidths are runtime/period × 2^20, rounded down)",
            bw_share(per)
        )?,
        _ => writeln!(w, "no limit: sched_rt_runtime_us is -1, every valid request is admitted")?,
    }
    if let Some(f) = c.fair_server {
        writeln!(
            w,
            "fair servers ({} every {} on each CPU) hold {} of the limit",
            f.runtime_ns, f.period_ns, r.fair_server_bw
        )?;
    }
    if r.overcommitted {
        writeln!(
            w,
            "warning: the existing reservations already exceed the limit"
        )?;
    }
    let width = column_width(r.tasks.iter().map(|t| t.name.as_str()), "task");
    writeln!(
        w,
        "{:<width$} {:>10} {:>10} {:>10} {:>8} {:>7}  {:<10} {:>9}",
        "task", "runtime", "deadline", "period", "bw", "share", "decision", "total_bw"
    )?;
    for d in &r.tasks {
        let decision = match d.verdict {
            Verdict::Existing => "existing",
            Verdict::Admitted => "admitted",
            Verdict::Busy => "EBUSY",
            Verdict::Invalid => "EINVAL",
        };
        writeln!(
            w,
            "{:<width$} {:>10} {:>10} {:>10} {:>8} {:>7}  {:<10} {:>9}",
            d.name,
            d.runtime_ns.to_string(),
            d.deadline_ns.to_string(),
            d.period_ns.to_string(),
            d.bw,
            bw_share(d.bw),
            decision,
            d.total_bw_after
        )?;
        if let Some(reason) = &d.reason {
            writeln!(w, "{:<width$}   {reason}", "")?;
        }
    }
    let admitted = r.tasks.iter().filter(|d| d.admitted).count();
    match (r.limit_bw, r.free_bw) {
        (Some(limit), Some(free)) => writeln!(
            w,
            "{admitted} of {} hold a reservation; total_bw {} of {limit} ({free} left, {} of a CPU)",
            r.tasks.len(),
            r.total_bw,
            bw_share(free)
        ),
        _ => writeln!(
            w,
            "{admitted} of {} hold a reservation; total_bw {}",
            r.tasks.len(),
            r.total_bw
        ),
    }
}

fn mttf_value(r: &MttfResult) -> String {
    match (r.mttf_s, r.mttf_lower_bound_s, r.needs_run_s) {
        (Some(s), _, _) => seconds(s),
        (None, Some(b), _) => format!("at least {}", seconds(b)),
        (None, None, Some(d)) => format!("needs a run of at least {}", seconds(d)),
        _ => "unknown".into(),
    }
}

/// The MTTF's interval, `(95% interval 3.2 min to 41 min)`, or nothing.
fn mttf_interval(r: &MttfResult) -> String {
    match (r.mttf_ci_low_s, r.mttf_ci_high_s) {
        (Some(lo), Some(hi)) => format!(" (95% interval {} to {})", seconds(lo), seconds(hi)),
        (Some(lo), None) => format!(" (95% interval from {})", seconds(lo)),
        _ => String::new(),
    }
}

const VALIDITY_NOTE: &str = "a figure is given for at most 10 times the time the run measured: docs/analysis.md, \"Validity of predictions\"";

/// One mean-time-to-underrun answer.
pub fn write_mttf(w: &mut dyn Write, r: &MttfResult) -> io::Result<()> {
    writeln!(
        w,
        "{} buffers of {} ({} of buffering), {} of computation per buffer: slack {}",
        r.buffers,
        r.buffer_ns,
        r.buffering_ns,
        r.compute_ns,
        signed(r.slack_ns)
    )?;
    if r.every_cycle {
        return writeln!(
            w,
            "the slack is not positive: every cycle underruns; mean time to underrun one cycle, {}",
            seconds(r.mttf_s.unwrap_or(0.0))
        );
    }
    let samples = match (r.count_above, r.samples) {
        (Some(a), Some(n)) => format!(" ({} of {} samples)", count(a), count(n)),
        _ => String::new(),
    };
    writeln!(w, "P(latency > slack) = {}{samples}", prob(r.probability))?;
    match (r.mttf_s, r.mttf_lower_bound_s, r.samples) {
        (Some(s), _, _) => writeln!(
            w,
            "mean time to underrun: {}{}",
            seconds(s),
            mttf_interval(r)
        ),
        (None, None, _) if r.needs_run_s.is_some() => writeln!(
            w,
            "mean time to underrun: {} ({VALIDITY_NOTE})",
            mttf_value(r)
        ),
        (None, Some(b), Some(n)) => writeln!(
            w,
            "no sample exceeded the slack: mean time to underrun at least {} (rule of three: P < 3/{} with 95% confidence)",
            seconds(b),
            count(n)
        ),
        _ => writeln!(w, "mean time to underrun: unknown"),
    }
}

/// The Figure 6-7 table: one line per buffer count and size.
pub fn write_mttf_grid(w: &mut dyn Write, rows: &[MttfResult]) -> io::Result<()> {
    writeln!(
        w,
        "{:>7} {:>10} {:>10} {:>10} {:>10}  mean time to underrun",
        "buffers", "size", "buffering", "slack", "P"
    )?;
    for r in rows {
        writeln!(
            w,
            "{:>7} {:>10} {:>10} {:>10} {:>10}  {}",
            r.buffers,
            r.buffer_ns.to_string(),
            r.buffering_ns.to_string(),
            signed(r.slack_ns),
            prob(r.probability),
            mttf_value(r)
        )?;
    }
    if rows.iter().any(|r| r.needs_run_s.is_some()) {
        writeln!(w, "({VALIDITY_NOTE})")?;
    }
    Ok(())
}

/// The least buffering that reaches a target MTTF, per buffer count.
pub fn write_least_buffering(
    w: &mut dyn Write,
    rows: &[LeastBuffering],
    target_s: f64,
) -> io::Result<()> {
    writeln!(
        w,
        "least buffering for a mean time to underrun of {}:",
        seconds(target_s)
    )?;
    for row in rows {
        match &row.result {
            Some(r) => writeln!(
                w,
                "  {} buffers of {} ({} of buffering): {}",
                row.buffers,
                r.buffer_ns,
                r.buffering_ns,
                mttf_value(r)
            )?,
            None => match row.needs_run_s {
                Some(d) => writeln!(
                    w,
                    "  {} buffers: needs a run of at least {}",
                    row.buffers,
                    seconds(d)
                )?,
                None => writeln!(w, "  {} buffers: not reachable", row.buffers)?,
            },
        }
    }
    if rows.iter().any(|r| r.needs_run_s.is_some()) {
        writeln!(w, "({VALIDITY_NOTE})")?;
    }
    Ok(())
}

/// The exceedance table and the expected worst cases.
pub fn write_worst_case(w: &mut dyn Write, r: &WorstCaseReport) -> io::Result<()> {
    writeln!(
        w,
        "{} samples at {} Hz ({} of observation); largest {}",
        count(r.samples),
        sig(r.rate_hz, 6),
        seconds(r.observed_s),
        signed(r.max_ns)
    )?;
    if !r.thresholds.is_empty() {
        writeln!(
            w,
            "{:>10} {:>12} {:>11} {:>10} {:>18} {:>12}",
            "above", "samples", "per sample", "per hour", "mean time between", "P(1+/hour)"
        )?;
        for t in &r.thresholds {
            let between = match (t.mean_time_between_s, t.mean_time_between_lower_bound_s) {
                (Some(s), _) => seconds(s),
                (None, Some(b)) => format!("> {}", seconds(b)),
                _ => "-".into(),
            };
            writeln!(
                w,
                "{:>10} {:>12} {:>11} {:>10} {:>18} {:>12}",
                signed(t.threshold_ns),
                count(t.count),
                prob(t.probability),
                sig(t.per_hour, 4),
                between,
                percent(t.at_least_one_per_hour)
            )?;
        }
    }
    writeln!(
        w,
        "expected worst case ({} hours a day, {} days a week):",
        sig(r.usage.hours_per_day, 4),
        sig(r.usage.days_per_week, 4)
    )?;
    for h in &r.horizons {
        let label = format!("per {} ({} h)", h.period, sig(h.hours, 4));
        let value = match (h.worst_case_ns, h.needs_run_s) {
            (Some(v), _) => signed(v),
            (None, Some(s)) => format!(
                "needs a run of at least {} (this one: {})",
                seconds(s),
                seconds(r.observed_s)
            ),
            (None, None) => "beyond the data, and no tail model".into(),
        };
        let note = if h.extrapolated {
            match (h.ci_low_ns, h.ci_high_ns) {
                (Some(lo), Some(hi)) => format!(
                    "  extrapolated; {}% interval {} to {}",
                    sig(r.confidence * 100.0, 3),
                    signed(lo),
                    signed(hi)
                ),
                _ => "  extrapolated".into(),
            }
        } else {
            String::new()
        };
        writeln!(w, "  {label:<20} {value}{note}")?;
    }
    if r.horizons.iter().any(|h| h.needs_run_s.is_some()) {
        writeln!(
            w,
            "  (a value beyond the data is given for a period at most {} times the time observed, from a tail of at least {} samples: docs/analysis.md, \"Validity of predictions\")",
            sig(r.validity.max_horizon_ratio, 3),
            r.validity.min_exceedances
        )?;
    }
    match (&r.tail, &r.tail_error) {
        (Some(t), _) => {
            writeln!(
                w,
                "tail model: generalised Pareto above {} ({} samples), shape {:.3}, scale {}",
                signed(t.threshold_ns),
                count(t.exceedances),
                t.shape,
                Nanos(t.scale_ns.round().max(0.0) as u64)
            )?;
            let chosen = match t.threshold_rule {
                "lowest_fitting" => format!(
                    "; the lowest of {} threshold(s) tried at which it fits",
                    t.thresholds_tried
                ),
                _ => String::new(),
            };
            writeln!(
                w,
                "  fit: Anderson-Darling A² {:.3}, p {}{chosen}",
                t.anderson_darling,
                t.p_value
                    .map(|p| format!("{p:.3}"))
                    .unwrap_or_else(|| "< 0.01".into())
            )?;
            if t.extrapolation_shape != t.shape {
                writeln!(
                    w,
                    "  a bounded tail (shape < 0) is extrapolated with shape 0, the exponential of the same scale, which lies above it"
                )?;
            }
            Ok(())
        }
        (None, Some(e)) => writeln!(w, "tail model: none ({e})"),
        _ => Ok(()),
    }
}

/// The fitted transfer-cost model, with one line per point when `points` (those fitted, in the
/// same order) are given.
pub fn write_fit(w: &mut dyn Write, f: &CostFit, points: &[Point]) -> io::Result<()> {
    let rate = match f.bytes_per_s {
        Some(b) => format!("{} MB/s", sig(b / 1e6, 5)),
        None => "none (the fitted time does not grow with size)".into(),
    };
    writeln!(
        w,
        "t(N) = a + N/b over {} points: a = {} fixed, b = {rate} ({} ns per byte)",
        f.points,
        signed(f.fixed_ns.round() as i64),
        sig(f.ns_per_byte, 5)
    )?;
    writeln!(
        w,
        "SSE {} ns², R² {}",
        sig(f.sse, 6),
        f.r2.map(|r| format!("{r:.6}"))
            .unwrap_or_else(|| "undefined (all times equal)".into())
    )?;
    if let Some(why) = &f.not_physical {
        writeln!(w, "not a cost model: {why}")?;
    }
    if !points.is_empty() {
        writeln!(
            w,
            "{:>12} {:>12} {:>12} {:>12}",
            "bytes", "time", "fitted", "residual"
        )?;
        for (p, r) in points.iter().zip(&f.residuals_ns) {
            writeln!(
                w,
                "{:>12} {:>12} {:>12} {:>12}",
                p.size_bytes,
                Nanos(p.time_ns).to_string(),
                signed((p.time_ns as f64 - r).round() as i64),
                signed(r.round() as i64)
            )?;
        }
    }
    Ok(())
}

/// The clock-interrupt overhead from two tick rates.
pub fn write_two_rate(w: &mut dyn Write, r: &TwoRate) -> io::Result<()> {
    let [a, b] = r.measurements;
    writeln!(
        w,
        "clock interrupt: {} per tick; loop iteration {}",
        Nanos(r.overhead_ns.round() as u64),
        Nanos(r.iteration_ns.round() as u64)
    )?;
    writeln!(
        w,
        "from {} iterations/s at {} Hz and {} at {} Hz (model I(f) = (1 − f·o)/x)",
        sig(a.iterations_per_s, 6),
        sig(a.tick_hz, 6),
        sig(b.iterations_per_s, 6),
        sig(b.tick_hz, 6)
    )?;
    let shares: Vec<String> = [100.0, 250.0, 1000.0]
        .iter()
        .map(|&hz| format!("{} at {hz} Hz", percent(r.overhead_share(hz))))
        .collect();
    writeln!(w, "ticks take {} of the CPU", shares.join(", "))
}

/// One indirect context-switch cost, with the trial it came from.
pub fn write_switch_cost(w: &mut dyn Write, trial: &SwitchTrial, c: &SwitchCost) -> io::Result<()> {
    writeln!(
        w,
        "work: {} units with one thread, {} with many, in {}",
        sig(trial.work_one, 6),
        sig(trial.work_many, 6),
        trial.duration_ns
    )?;
    writeln!(
        w,
        "work lost to context switches: {} of the run ({}), over {} switches: {} per switch",
        percent(c.lost_fraction),
        signed(c.lost_ns.round() as i64),
        count(trial.switches),
        signed(c.cost_ns.round() as i64)
    )
}

/// Repeated trials of the indirect context-switch cost.
pub fn write_switch_cost_summary(w: &mut dyn Write, s: &SwitchCostSummary) -> io::Result<()> {
    writeln!(
        w,
        "indirect context-switch cost over {} trials: {} per switch ({}% interval {} to {}); {} of the work lost",
        s.trials,
        signed(s.cost_ns.round() as i64),
        sig(s.confidence * 100.0, 3),
        signed(s.ci_low_ns.round() as i64),
        signed(s.ci_high_ns.round() as i64),
        percent(s.lost_fraction)
    )
}

/// A t confidence interval of a mean.
pub fn write_mean_ci(w: &mut dyn Write, c: &MeanCi) -> io::Result<()> {
    writeln!(
        w,
        "mean {} (n {}, standard deviation {}); {}% interval {} to {}",
        sig(c.mean, 6),
        c.n,
        sig(c.stddev, 6),
        sig(c.confidence * 100.0, 3),
        sig(c.ci_low, 6),
        sig(c.ci_high, 6)
    )
}

/// A t test.
pub fn write_ttest(w: &mut dyn Write, t: &TTest) -> io::Result<()> {
    let kind = match t.kind {
        TTestKind::Welch => "Welch two-sample t test",
        TTestKind::Paired => "paired t test",
    };
    writeln!(w, "{kind} of a − b")?;
    writeln!(
        w,
        "mean a {} (n {}), mean b {} (n {}), difference {}",
        sig(t.mean_a, 6),
        t.n_a,
        sig(t.mean_b, 6),
        t.n_b,
        sig(t.mean_difference, 6)
    )?;
    writeln!(
        w,
        "t = {}, df = {}, p = {}",
        sig(t.t, 5),
        sig(t.df, 5),
        sig(t.p, 4)
    )?;
    writeln!(
        w,
        "{}% interval of the difference: {} to {}",
        sig(t.confidence * 100.0, 3),
        sig(t.ci_low, 6),
        sig(t.ci_high, 6)
    )
}

/// A Mann–Whitney U test.
pub fn write_mann_whitney(w: &mut dyn Write, m: &MannWhitney) -> io::Result<()> {
    let method = match m.method {
        PValueMethod::Exact => "exact".to_string(),
        PValueMethod::Normal => format!(
            "normal approximation{}, z = {}",
            if m.ties { " with tie correction" } else { "" },
            sig(m.z.unwrap_or(0.0), 4)
        ),
    };
    writeln!(
        w,
        "Mann–Whitney U test: U = {} (n {} and {}), two-sided p = {} ({method})",
        sig(m.u, 6),
        m.n_a,
        m.n_b,
        sig(m.p, 4)
    )
}

/// A bootstrap interval of a percentile.
pub fn write_percentile_ci(w: &mut dyn Write, c: &PercentileCi) -> io::Result<()> {
    writeln!(
        w,
        "p{} = {}; {}% bootstrap interval {} to {} ({} resamples, seed {})",
        sig(c.percentile * 100.0, 6),
        sig(c.estimate, 6),
        sig(c.confidence * 100.0, 3),
        sig(c.ci_low, 6),
        sig(c.ci_high, 6),
        c.resamples,
        c.seed
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandglass::analysis::admission::{self, AdmissionConfig};
    use sandglass::analysis::distribution::Distribution;
    use sandglass::analysis::taskfile::{DeadlineTask, Task};
    use sandglass::analysis::{
        edf, fit, mttf, rta, significance, switch_cost, two_rate, worst_case,
    };

    fn render(f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        f(&mut out).expect("write to memory");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn helpers() {
        assert_eq!(seconds(12.0), "12 s");
        assert_eq!(seconds(0.0005), "500 µs");
        assert_eq!(seconds(450.0), "7.5 min");
        assert_eq!(seconds(3.0 * 86_400.0), "3.0 days");
        assert_eq!(sig(0.079_391, 4), "0.07939");
        assert_eq!(sig(-1.860_81, 5), "-1.8608");
        assert_eq!(sig(17.776_47, 5), "17.776");
        assert_eq!(prob(0.000_277_8), "2.778e-4");
    }

    #[test]
    fn rta_names_the_miss() {
        let set = [
            Task::new("modem", Nanos::from_millis(3), Nanos::from_millis(8)),
            Task::new("video", Nanos::from_millis(19), Nanos::from_millis(33))
                .with_jitter(Nanos::from_millis(8)),
        ];
        let r = rta::analyze(&set, rta::Preemption::Preemptive).expect("analysis");
        let s = render(|w| write_rta(w, &r));
        assert!(s.contains("deadline-monotonic"), "{s}");
        assert!(
            s.contains("39 ms") && s.contains("MISSES: responds 6 ms after its deadline"),
            "{s}"
        );
        assert!(s.contains("busy period 124 ms holds 4 jobs"), "{s}");
        assert!(s.contains("does not apply"), "{s}");
        assert!(s.ends_with("schedulable: NO\n"), "{s}");
    }

    #[test]
    fn edf_reports_the_failure_point() {
        let set = [
            Task::new("a", Nanos(2), Nanos(4)).with_deadline(Nanos(2)),
            Task::new("b", Nanos(3), Nanos(8)).with_deadline(Nanos(4)),
        ];
        let r = edf::analyze(&set).expect("analysis");
        let s = render(|w| write_edf(w, &r));
        assert!(
            s.contains("NOT feasible: in an interval of 4 ns the work due is 5 ns"),
            "{s}"
        );
        assert!(s.contains("MISSES its deadline"), "{s}");
    }

    #[test]
    fn admission_table() {
        let t = |name: &str, rt: u64| DeadlineTask {
            name: name.into(),
            runtime_ns: Nanos::from_millis(rt),
            deadline_ns: Nanos::from_millis(100),
            period_ns: Nanos::from_millis(100),
            existing: false,
        };
        let r = admission::admit(&[t("a", 60), t("b", 60)], &AdmissionConfig::default())
            .expect("valid");
        let s = render(|w| write_admission(w, &r));
        assert!(s.contains("limit 996147"), "{s}");
        assert!(s.contains("admitted") && s.contains("EBUSY"), "{s}");
        assert!(s.contains("1 of 2 hold a reservation"), "{s}");
    }

    #[test]
    fn mttf_states_bounds_and_grids() {
        let d = Distribution::from_bins([(1_000_000, 990), (11_000_000, 9), (15_000_000, 1)]);
        let m = mttf::Exceedance::Measured(&d);
        let r = mttf::mttf(Nanos::from_millis(6), 3, Nanos::from_millis(1), &m).expect("valid");
        let s = render(|w| write_mttf(w, &r));
        assert!(
            s.contains("slack 11 ms") && s.contains("(1 of 1,000 samples)"),
            "{s}"
        );
        assert!(s.contains("mean time to underrun: 12 s"), "{s}");
        let r = mttf::mttf(Nanos::from_millis(10), 3, Nanos::from_millis(1), &m).expect("valid");
        let s = render(|w| write_mttf(w, &r));
        assert!(s.contains("at least 6.667 s (rule of three"), "{s}");
        let g = mttf::grid(&[Nanos::from_millis(2)], &[2, 3], Nanos::from_millis(1), &m)
            .expect("valid");
        let s = render(|w| write_mttf_grid(w, &g));
        assert_eq!(s.lines().count(), 3);
        let l = mttf::least_buffering(&[3], Nanos::from_millis(1), &m, 10.0).expect("valid");
        let s = render(|w| write_least_buffering(w, &l, 10.0));
        assert!(
            s.contains("3 buffers of 6 ms (12 ms of buffering): 12 s"),
            "{s}"
        );
    }

    #[test]
    fn worst_case_marks_extrapolation() {
        // One hour at 1 kHz: 1 % of it 100 µs plus an exponential of mean 50 µs (exact
        // quantiles in 1 µs bins), the rest at 100 µs.
        let above = |y: f64| (36_000.0 * (-y / 50_000.0).exp()).round() as u64;
        let mut bins = vec![(100_000i64, 3_564_000u64)];
        let mut y = 0.0;
        while above(y) > 0 {
            bins.push((101_000 + y as i64, above(y) - above(y + 1000.0)));
            y += 1000.0;
        }
        let d = Distribution::from_bins(bins);
        let usage = worst_case::preset("office").expect("preset").usage;
        let mut c = worst_case::WorstCaseConfig::new(1000.0, usage);
        c.thresholds_ns = vec![1_000_000, 2_000_000];
        c.resamples = 100;
        let r = worst_case::analyze(&d, &c).expect("valid");
        let s = render(|w| write_worst_case(w, &r));
        assert!(
            s.contains("3,600,000 samples at 1000 Hz (60.0 min of observation)"),
            "{s}"
        );
        assert!(s.contains("per hour (1 h)") && s.contains("1 ms"), "{s}");
        assert!(s.contains("> 20.0 min"), "{s}");
        assert!(s.contains("extrapolated; 95% interval"), "{s}");
        assert!(s.contains("tail model: generalised Pareto above "), "{s}");
        assert!(
            s.contains("  fit: Anderson-Darling A² ")
                && s.contains("; the lowest of 1 threshold(s) tried at which it fits"),
            "{s}"
        );

        // Four values above 100 µs: no generalised Pareto tail, and the reason.
        let coarse = Distribution::from_bins([
            (100_000, 3_599_000),
            (200_000, 900),
            (500_000, 90),
            (1_000_000, 9),
            (2_000_000, 1),
        ]);
        let r = worst_case::analyze(&coarse, &c).expect("valid");
        let s = render(|w| write_worst_case(w, &r));
        assert!(
            s.contains("tail model: none (the tail follows no generalised Pareto distribution"),
            "{s}"
        );
        assert!(!s.contains("extrapolated"), "{s}");
    }

    #[test]
    fn small_renderings() {
        let pts: Vec<Point> = [(0u64, 1000u64), (100, 2000), (1000, 11_000)]
            .iter()
            .map(|&(size_bytes, time_ns)| Point {
                size_bytes,
                time_ns,
            })
            .collect();
        let f = fit::fit_cost(&pts).expect("fit");
        let s = render(|w| write_fit(w, &f, &pts));
        assert!(
            s.contains("a = 1 µs fixed, b = 100 MB/s (10 ns per byte)"),
            "{s}"
        );
        assert!(s.contains("R² 1.000000"), "{s}");

        let r = two_rate::solve(
            "100:1530".parse().expect("valid"),
            "2000:1333.6".parse().expect("valid"),
        )
        .expect("solution");
        let s = render(|w| write_two_rate(w, &r));
        assert!(s.contains("clock interrupt: 67.108 µs per tick"), "{s}");
        assert!(s.contains("6.7% at 1000 Hz"), "{s}");

        let trial = switch_cost::SwitchTrial {
            work_one: 1000.0,
            work_many: 900.0,
            duration_ns: Nanos::from_secs(45),
            switches: 9000,
        };
        let c = switch_cost::indirect_cost(&trial).expect("valid");
        let s = render(|w| write_switch_cost(w, &trial, &c));
        assert!(
            s.contains("10.0% of the run (4.5 s), over 9,000 switches: 500 µs per switch"),
            "{s}"
        );

        let a = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0];
        let b = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4];
        let t = significance::welch(&a, &b, 0.95).expect("valid");
        let s = render(|w| write_ttest(w, &t));
        assert!(s.contains("t = -1.8608, df = 17.776, p = 0.07939"), "{s}");
        let m = significance::mann_whitney(&a, &b).expect("valid");
        let s = render(|w| write_mann_whitney(w, &m));
        assert!(s.contains("U = 25.5") && s.contains("p = 0.06933"), "{s}");
        let ci = significance::mean_ci(&a, 0.95).expect("valid");
        let s = render(|w| write_mean_ci(w, &ci));
        assert!(s.contains("interval -0.52978 to 2.02978"), "{s}");
        let pc = significance::bootstrap_percentile_ci(&a, 0.5, 0.95, 200, 3).expect("valid");
        let s = render(|w| write_percentile_ci(w, &pc));
        assert!(s.starts_with("p50 = 0; 95% bootstrap interval"), "{s}");
    }
}
