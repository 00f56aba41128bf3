//! The parts every run's page shares: what ran where, why the largest delays happened, the
//! warnings, the system snapshot and the files.

use super::page::Page;
use crate::text::count;
use sandglass::causes::Causes;
use sandglass::store::RunReader;
use sandglass::system::SystemSnapshot;
use sandglass::warning::Warning;
use sandglass::Nanos;

fn seconds(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// The machine in one line.
pub fn machine(s: &SystemSnapshot) -> String {
    format!(
        "{} ({}), Linux {}, preemption {}, HZ {}, {} CPU(s) online{}",
        s.hostname,
        s.cpu_model,
        s.kernel_release,
        s.preemption.model,
        s.hz.map(|h| h.to_string())
            .unwrap_or_else(|| "unknown".into()),
        s.cpus_online,
        s.virtualization
            .as_deref()
            .map(|v| format!(", under {v}"))
            .unwrap_or_default()
    )
}

/// What ran, where and when.
pub fn header(p: &mut Page, r: &RunReader) {
    let m = &r.manifest;
    p.facts(&[
        ("run", m.id.clone()),
        ("state", m.state.name().to_string()),
        (
            "when",
            format!(
                "{} to {}",
                m.started_at,
                m.ended_at.as_deref().unwrap_or("(not finished)")
            ),
        ),
        ("machine", machine(&m.system)),
        ("command", m.command_line.join(" ")),
        ("ended", m.end_detail.clone().unwrap_or_else(|| "-".into())),
    ]);
}

/// The verdict of `sandglass check` on the run, first: the answer, the predictions that carry
/// it, and the fixes ranked by expected effect.
pub fn verdict(p: &mut Page, c: &sandglass::check::CheckReport) {
    use sandglass::check::predict::span;
    let time = |ns: u64| Nanos(ns).to_string();
    let pr = &c.predictions;
    p.section(&format!(
        "Verdict for {}: {}",
        c.workload.spec,
        c.verdict.level.as_str()
    ));
    p.text(&format!(
        "{}: {}.",
        c.workload.description, c.verdict.reason
    ));
    let interval = |v: Option<f64>, lo: Option<f64>, hi: Option<f64>| match v {
        Some(v) => match (lo, hi) {
            (Some(a), Some(b)) => format!("{} (95 %: {} to {})", span(v), span(a), span(b)),
            _ => span(v),
        },
        None => "-".to_string(),
    };
    let mtbf = match (pr.mtbf_s, pr.mtbf_needs_run_s, pr.mtbf_at_least_s) {
        (Some(_), _, _) => interval(pr.mtbf_s, pr.mtbf_low_s, pr.mtbf_high_s),
        (None, Some(need), _) => format!("needs a run of at least {}", span(need)),
        (None, None, Some(a)) => format!("at least {} (95 %, none seen)", span(a)),
        _ => "-".to_string(),
    };
    let needs = match (pr.target_slack_high_ns, pr.target_needs_run_s) {
        (Some(v), _) => time(v.max(0) as u64),
        (None, Some(need)) => format!("needs a run of at least {}", span(need)),
        _ => "-".to_string(),
    };
    let misses_key = format!("{}s", c.workload.miss);
    let mtbf_key = format!("mean time between {}s", c.workload.miss);
    let target_key = format!(
        "slack for one {} per {}",
        c.workload.miss,
        span(pr.target_s)
    );
    p.facts(&[
        ("slack", time(pr.slack_ns.max(0) as u64)),
        (
            "measured",
            format!(
                "{} periods in {} on CPU {} at {}",
                count(pr.periods),
                span(pr.measured_s),
                c.cpu,
                c.policy
            ),
        ),
        (
            &misses_key,
            format!(
                "{} ({:.4} % of periods; 95 %: {:.4} % to {:.4} %)",
                count(pr.misses),
                pr.miss_probability * 100.0,
                pr.miss_probability_low * 100.0,
                pr.miss_probability_high * 100.0
            ),
        ),
        (&mtbf_key, mtbf),
        (&target_key, needs),
    ]);
    if !c.fixes.is_empty() {
        let rows: Vec<Vec<String>> = c
            .fixes
            .iter()
            .enumerate()
            .map(|(i, f)| {
                vec![
                    (i + 1).to_string(),
                    f.basis.clone(),
                    f.what.clone(),
                    f.command.clone().unwrap_or_default(),
                ]
            })
            .collect();
        p.table(&["rank", "basis", "fix", "how"], &rows, &[1, 2, 3]);
    }
    if let Some(t) = &c.without_load {
        p.text(&format!(
            "Without the load (the same measurement again for {}): {}: under the load → without it: {}; verdict without the load: {}.",
            span(t.predictions.measured_s),
            crate::check::load_cost(t.effect),
            t.summary,
            t.verdict.level.as_str()
        ));
    }
    if !c.trials.is_empty() {
        let rows: Vec<Vec<String>> = c
            .trials
            .iter()
            .map(|t| {
                vec![
                    t.trial.change.clone(),
                    t.effect.as_str().to_string(),
                    t.summary.clone(),
                    t.trial.how.clone(),
                ]
            })
            .collect();
        p.table(
            &["fix tried (one change)", "effect", "before → after", "how"],
            &rows,
            &[0, 1, 2, 3],
        );
    }
}

/// The explanation of the largest delays: the sampler's, the kernel trace's and the trains.
pub fn causes(p: &mut Page, c: Option<&Causes>) {
    let Some(c) = c else { return };
    p.section("Why the largest delays happened");
    p.text(&format!(
        "{} delay(s) of {} or more. {}",
        count(c.spikes),
        Nanos(c.spike_threshold_ns),
        if c.sample_hz > 0 {
            format!("/proc was sampled {} times a second while the run measured; each delay is compared with the usual counts of its CPU.", c.sample_hz)
        } else {
            "/proc was not sampled: the sampler was off in this run (--sample-rate 0).".to_string()
        }
    ));
    if let Some(e) = c.explanation.as_ref().filter(|e| !e.totals.is_empty()) {
        let per_cpu: Vec<String> = e
            .totals
            .iter()
            .map(|t| format!("CPU {} {}", t.cpu, crate::causes::percent(t.steal_share)))
            .collect();
        p.text(&format!(
            "The hypervisor (steal time) took {} of the measured CPUs' time over the {} sampled ({}).",
            crate::causes::percent(e.steal_share),
            seconds(e.sampled_ns),
            per_cpu.join(", ")
        ));
    }
    if let Some(e) = &c.explanation {
        if !e.spikes.is_empty() {
            let rows: Vec<Vec<String>> = e
                .spikes
                .iter()
                .take(10)
                .map(|s| {
                    vec![
                        s.cpu.to_string(),
                        seconds(s.at_ns),
                        Nanos(s.size_ns).to_string(),
                        s.text(),
                    ]
                })
                .collect();
            p.subsection("The largest delays and what explains them");
            p.table(
                &[
                    "CPU",
                    "at",
                    "delay",
                    "the trace (when traced), then the sampler's window",
                ],
                &rows,
                &[3],
            );
        }
    }
    if !c.trains.is_empty() {
        p.subsection("Delays that recur with a period");
        let rows: Vec<Vec<String>> = c
            .trains
            .iter()
            .map(|t| {
                vec![
                    t.cpu.to_string(),
                    Nanos(t.train.typical_ns).to_string(),
                    crate::causes::period(t.train.period_ns),
                    count(t.train.count),
                    if t.train.slots == 0 {
                        "-".to_string()
                    } else {
                        count(t.train.slots)
                    },
                    seconds(t.train.first_ns),
                ]
            })
            .collect();
        p.table(
            &[
                "CPU",
                "typical size",
                "every",
                "delays",
                "of slots",
                "first at",
            ],
            &rows,
            &[],
        );
    }
    if let Some(k) = &c.kernel {
        p.subsection("Attributed from kernel events");
        p.text(&format!(
            "{} kernel events recorded, {} lost; {} delay(s) attributed, each cause's time net of what nested in it.",
            count(k.events),
            count(k.lost_events),
            count(k.windows)
        ));
        let rows: Vec<Vec<String>> = k
            .causes
            .iter()
            .take(12)
            .map(|c| {
                vec![
                    c.cpu.to_string(),
                    sandglass::causes::attribute::Why::kind_text(c.why, c.kind),
                    c.name.clone(),
                    c.policy.clone().unwrap_or_default(),
                    count(c.count),
                    Nanos(c.stolen_ns).to_string(),
                    Nanos(c.max_ns).to_string(),
                ]
            })
            .collect();
        if !rows.is_empty() {
            p.table(
                &[
                    "CPU",
                    "kind",
                    "cause",
                    "policy",
                    "delays",
                    "time taken",
                    "longest",
                ],
                &rows,
                &[2],
            );
            p.text(crate::causes::LEGEND);
        }
        let rows: Vec<Vec<String>> = k
            .largest
            .iter()
            .take(10)
            .filter_map(|e| {
                let path = e.path.as_ref()?;
                Some(vec![
                    e.cpu.to_string(),
                    seconds(e.start_ns),
                    Nanos(e.end_ns - e.start_ns).to_string(),
                    crate::causes::path_text(e.start_ns, path),
                    e.shares
                        .iter()
                        .take(3)
                        .map(|s| format!("{} {}", s.name, Nanos(s.ns)))
                        .collect::<Vec<_>>()
                        .join(", "),
                ])
            })
            .collect();
        if !rows.is_empty() {
            p.subsection("The largest late wakeups, along their path");
            p.table(
                &["CPU", "release at", "late by", "path", "what took the time"],
                &rows,
                &[3, 4],
            );
        }
        let rows: Vec<Vec<String>> = k
            .latency
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                // The softirqs are the CPU's: one row per CPU, whatever its threads.
                let cpu_seen = k.latency[..i].iter().any(|o| o.cpu == l.cpu);
                [
                    ("IRQ", &l.irq_ns),
                    ("softirq", &l.softirq_ns),
                    ("thread", &l.thread_ns),
                ]
                .into_iter()
                .filter(move |(what, _)| !(*what == "softirq" && cpu_seen))
                .filter_map(move |(what, d)| {
                    let d = d.as_ref()?;
                    Some(vec![
                        l.cpu.to_string(),
                        what.to_string(),
                        count(d.count),
                        Nanos(d.min.max(0) as u64).to_string(),
                        Nanos(d.p50).to_string(),
                        Nanos(d.p99).to_string(),
                        Nanos(d.max.max(0) as u64).to_string(),
                    ])
                })
            })
            .collect();
        if !rows.is_empty() {
            p.subsection("IRQ and thread latency of every wakeup (from the timer's expiry)");
            p.table(
                &["CPU", "latency", "count", "min", "p50", "p99", "max"],
                &rows,
                &[],
            );
            for note in k.latency.iter().filter_map(crate::causes::latency_note) {
                p.text(&note);
            }
        }
        let mut handlers: Vec<&sandglass::causes::attribute::Handler> = k.handlers.iter().collect();
        handlers.sort_by_key(|h| std::cmp::Reverse(h.max_ns));
        let rows: Vec<Vec<String>> = handlers
            .iter()
            .take(10)
            .map(|h| {
                vec![
                    h.cpu.to_string(),
                    h.kind.as_str().to_string(),
                    h.name.clone(),
                    count(h.count),
                    Nanos(h.total_ns).to_string(),
                    Nanos(h.max_ns).to_string(),
                ]
            })
            .collect();
        if !rows.is_empty() {
            p.subsection("Interrupt and softirq handlers on the measured CPUs");
            p.table(
                &["CPU", "kind", "handler", "runs", "in all", "longest"],
                &rows,
                &[2],
            );
        }
    }
}

/// The run's warnings, or a line saying there were none.
pub fn warnings(p: &mut Page, list: &[Warning]) {
    p.section("Warnings");
    if list.is_empty() {
        p.text("None.");
    } else {
        let items: Vec<String> = list.iter().map(|w| w.message.clone()).collect();
        p.list("warnings", &items);
    }
}

/// The system snapshot and the files with their checksums.
pub fn footer_sections(p: &mut Page, r: &RunReader) {
    let m = &r.manifest;
    p.section("System");
    snapshot(p, &m.system);
    p.section("Files");
    p.text("Every file below was checked against its size and SHA-256 in the manifest before this page was drawn.");
    let rows: Vec<Vec<String>> = m
        .files
        .iter()
        .map(|f| {
            vec![
                f.name.clone(),
                count(f.bytes),
                f.format.clone(),
                f.sha256.chars().take(16).collect::<String>(),
            ]
        })
        .collect();
    p.table(
        &["file", "bytes", "format", "SHA-256 (first 16)"],
        &rows,
        &[],
    );
}

/// The snapshot's main facts, and the whole of it as JSON.
pub fn snapshot(p: &mut Page, s: &SystemSnapshot) {
    p.facts(&[
        ("machine", machine(s)),
        ("kernel version", s.kernel_version.clone()),
        ("clock source", s.clocksource.clone()),
        (
            "cpuidle driver",
            s.cpuidle_driver.clone().unwrap_or_else(|| "-".into()),
        ),
        (
            "isolated CPUs",
            if s.isolated_cpus.is_empty() {
                "none".into()
            } else {
                s.isolated_cpus.clone()
            },
        ),
        (
            "nohz_full",
            if s.nohz_full.is_empty() {
                "none".into()
            } else {
                s.nohz_full.clone()
            },
        ),
        (
            "frequency governors",
            if s.cpufreq_governors.is_empty() {
                "none (no cpufreq)".into()
            } else {
                s.cpufreq_governors
                    .iter()
                    .map(|(g, c)| format!("{g} on {c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ),
        (
            "RT throttling",
            match (s.rt_runtime_us, s.rt_period_us) {
                (Some(r), _) if r < 0 => "disabled (sched_rt_runtime_us = -1)".into(),
                (Some(r), Some(p)) => format!("{r} µs per {p} µs"),
                _ => "-".into(),
            },
        ),
        ("kernel command line", s.cmdline.clone()),
    ]);
    let json = serde_json::to_string_pretty(s).unwrap_or_default();
    p.details("The whole snapshot (JSON)", &json);
}

/// The page's last line: what wrote it, from where.
pub fn footer(r: &RunReader) -> String {
    format!(
        "Drawn by sandglass {} from {}; measured by {} {} ({}).",
        env!("CARGO_PKG_VERSION"),
        r.path().display(),
        r.manifest.tool.name,
        r.manifest.tool.version,
        r.manifest.tool.commit
    )
}
