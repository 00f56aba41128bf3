//! The explanation section of timer and noise reports: what was unusual around the largest
//! delays, periodic trains, and the busiest interrupt sources per CPU.

use sandglass::causes::attribute::{CauseKind, Why};
use sandglass::causes::Causes;
use sandglass::units::group_digits as count;
use sandglass::Nanos;
use std::io::{self, Write};

/// Spikes shown one by one in text (JSON has up to [`sandglass::causes::MAX_EXPLAINED`]).
const SHOWN: usize = 5;
/// Sources shown per CPU in the totals.
const SOURCES: usize = 4;

fn seconds(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// A share as a percentage.
pub fn percent(share: f64) -> String {
    format!("{:.2}%", share * 100.0)
}

/// A train's period to three significant figures, in the largest unit that keeps it at or
/// above 1: `5.00 s`, `500 ms`, `4.00 ms`; the least-squares period is known that well, and
/// the figures show that it is a measured period, not a setting.
pub fn period(ns: u64) -> String {
    if ns < 1_000 {
        return format!("{ns} ns");
    }
    let step = 10u64.pow(ns.ilog10() - 2);
    let ns = (ns + step / 2) / step * step;
    let (div, unit) = if ns >= 1_000_000_000 {
        (1e9, "s")
    } else if ns >= 1_000_000 {
        (1e6, "ms")
    } else {
        (1e3, "µs")
    };
    let value = ns as f64 / div;
    let decimals = if value < 10.0 {
        2
    } else if value < 100.0 {
        1
    } else {
        0
    };
    format!("{value:.decimals$} {unit}")
}

/// A train for people: `delays of about 7 ms every 5.00 s, 9 of 10 slots, first at 2.300 s`
/// (its typical size, period, members of the slots of its grid, and phase); a run written
/// before slots were counted gives its members alone.
pub fn train(t: &sandglass::causes::trains::Train) -> String {
    let members = if t.slots == 0 {
        format!("{} of them", count(t.count))
    } else {
        format!("{} of {} slots", count(t.count), count(t.slots))
    };
    format!(
        "delays of about {} every {}, {members}, first at {}",
        Nanos(t.typical_ns),
        period(t.period_ns),
        seconds(t.first_ns)
    )
}

/// Writes the section; nothing when there were no spikes and no sampler.
pub fn write(w: &mut dyn Write, c: &Causes) -> io::Result<()> {
    let sampled = if c.sample_hz > 0 {
        format!("/proc sampled {} times a second", c.sample_hz)
    } else {
        "/proc not sampled: the sampler was off, --sample-rate 0".to_string()
    };
    writeln!(
        w,
        "why: {} delay(s) of {} or more ({sampled})",
        count(c.spikes),
        Nanos(c.spike_threshold_ns)
    )?;
    if let Some(e) = &c.explanation {
        for s in e.spikes.iter().take(SHOWN) {
            writeln!(
                w,
                "  CPU {} at {}: {}; {}",
                s.cpu,
                seconds(s.at_ns),
                Nanos(s.size_ns),
                s.text()
            )?;
        }
        if e.spikes.len() > SHOWN {
            writeln!(
                w,
                "  ... {} more explained in the JSON output",
                e.spikes.len() - SHOWN
            )?;
        }
        if !e.totals.is_empty() {
            let per_cpu: Vec<String> = e
                .totals
                .iter()
                .map(|t| format!("CPU {} {}", t.cpu, percent(t.steal_share)))
                .collect();
            writeln!(
                w,
                "  hypervisor (steal): {} of the measured CPUs' time over {} sampled ({})",
                percent(e.steal_share),
                seconds(e.sampled_ns),
                per_cpu.join(", ")
            )?;
        }
        for t in &e.totals {
            let top: Vec<String> = t
                .sources
                .iter()
                .take(SOURCES)
                .map(|s| format!("{} {}", s.name, count(s.count)))
                .collect();
            writeln!(
                w,
                "  CPU {} over {} intervals: {}; steal {} ticks",
                t.cpu,
                e.intervals,
                if top.is_empty() {
                    "no interrupts".to_string()
                } else {
                    top.join(", ")
                },
                t.steal_ticks
            )?;
        }
    }
    for t in &c.trains {
        writeln!(w, "  periodic: CPU {}: {}", t.cpu, train(&t.train))?;
    }
    if let Some(k) = &c.kernel {
        write_kernel(w, k)?;
    }
    Ok(())
}

/// Causes listed in text, per table.
const CAUSES: usize = 8;
/// Handlers listed in text.
const HANDLERS: usize = 6;

/// The traced attribution: top causes by stolen time, by count and by longest single, the
/// largest spikes one by one, and the handlers' execution times.
fn write_kernel(w: &mut dyn Write, k: &sandglass::causes::KernelCauses) -> io::Result<()> {
    writeln!(
        w,
        "traced: {} kernel events, {} lost; {} delay(s) attributed",
        count(k.events),
        count(k.lost_events),
        count(k.windows)
    )?;
    if k.causes.is_empty() {
        return Ok(());
    }
    writeln!(
        w,
        "  {:>4}  {:<13}  {:<34}  {:<18}  {:>7}  {:>10}  {:>10}",
        "CPU", "kind", "cause", "policy", "count", "stolen", "longest"
    )?;
    for c in k.causes.iter().take(CAUSES) {
        writeln!(
            w,
            "  {:>4}  {:<13}  {:<34}  {:<18}  {:>7}  {:>10}  {:>10}",
            c.cpu,
            Why::kind_text(c.why, c.kind),
            clip(&c.name, 34),
            clip(c.policy.as_deref().unwrap_or(""), 18),
            count(c.count),
            Nanos(c.stolen_ns).to_string(),
            Nanos(c.max_ns).to_string()
        )?;
    }
    let shown = &k.causes[..k.causes.len().min(CAUSES)];
    if shown
        .iter()
        .any(|c| c.why.is_some() || c.kind == CauseKind::Timer)
    {
        writeln!(w, "  {LEGEND}")?;
    }
    let named = |c: &sandglass::causes::attribute::Cause| {
        format!("{} {} on CPU {}", c.kind.as_str(), c.name, c.cpu)
    };
    if let Some(c) = k.causes.iter().max_by_key(|c| (c.count, c.stolen_ns)) {
        writeln!(w, "  most often: {} ({} delays)", named(c), count(c.count))?;
    }
    if let Some(c) = k.causes.iter().max_by_key(|c| (c.max_ns, c.stolen_ns)) {
        writeln!(w, "  longest single: {} ({})", named(c), Nanos(c.max_ns))?;
    }
    for e in k.largest.iter().take(SHOWN) {
        let parts: Vec<String> = e
            .shares
            .iter()
            .take(4)
            .map(|s| format!("{} {}", s.name, Nanos(s.ns)))
            .collect();
        writeln!(
            w,
            "  CPU {} at {}: {}: {}",
            e.cpu,
            seconds(e.start_ns),
            Nanos(e.end_ns - e.start_ns),
            parts.join(", ")
        )?;
        if let Some(p) = &e.path {
            writeln!(w, "      {}", path_text(e.start_ns, p))?;
        }
    }
    if !k.latency.is_empty() {
        writeln!(
            w,
            "  every wakeup in the trace, from the timer's expiry (as rtla timerlat):"
        )?;
        writeln!(
            w,
            "  {:>4}  {:>7}  {:>8}  {:>9}  {:>9}  {:>9}  {:>9}",
            "CPU", "", "count", "min", "p50", "p99", "max"
        )?;
        for (i, l) in k.latency.iter().enumerate() {
            // The softirqs are the CPU's: one row per CPU, whatever its threads.
            let cpu_seen = k.latency[..i].iter().any(|o| o.cpu == l.cpu);
            for (what, d) in [
                ("IRQ", &l.irq_ns),
                ("softirq", &l.softirq_ns),
                ("thread", &l.thread_ns),
            ] {
                let Some(d) = d else { continue };
                if what == "softirq" && cpu_seen {
                    continue;
                }
                writeln!(
                    w,
                    "  {:>4}  {:>7}  {:>8}  {:>9}  {:>9}  {:>9}  {:>9}",
                    l.cpu,
                    what,
                    count(d.count),
                    Nanos(d.min.max(0) as u64).to_string(),
                    Nanos(d.p50).to_string(),
                    Nanos(d.p99).to_string(),
                    Nanos(d.max.max(0) as u64).to_string()
                )?;
            }
        }
        for note in k.latency.iter().filter_map(latency_note) {
            writeln!(w, "  {note}")?;
        }
    }
    let mut handlers: Vec<&sandglass::causes::attribute::Handler> = k.handlers.iter().collect();
    handlers.sort_by_key(|h| std::cmp::Reverse(h.max_ns));
    for h in handlers.iter().take(HANDLERS) {
        writeln!(
            w,
            "  handler CPU {} {} {}: {} runs, {} in all, longest {}",
            h.cpu,
            h.kind.as_str(),
            h.name,
            count(h.count),
            Nanos(h.total_ns),
            Nanos(h.max_ns)
        )?;
    }
    Ok(())
}

/// What a thread's latency distribution leaves out, when it does: the wakeups whose switch to
/// the thread the trace does not hold.
pub fn latency_note(l: &sandglass::causes::wakeup::WakeLatency) -> Option<String> {
    let n = l.thread_ns.as_ref().map_or(0, |d| d.count);
    (n < l.activations).then(|| {
        format!(
            "CPU {}: thread latency from {} of {} wakeups; the trace has no switch to the thread for the others (the kernel does not record the switch out of the idle task on some machines), so they count in the IRQ latency only",
            l.cpu,
            count(n),
            count(l.activations)
        )
    })
}

/// What the kinds of a traced cause mean, printed under the table.
pub const LEGEND: &str = "thread:prio ran first by its higher or equal priority; thread:kernel held the CPU after the wakeup in a kernel section that could not be preempted; timer: the timer interrupt itself came late (cpu busy: interrupts off, or the hypervisor; cpu idle: the hypervisor or a deep idle state)";

/// A late wakeup's path: when the timer interrupt came, the thread woke and it was switched in,
/// from the release.
pub fn path_text(release_ns: u64, p: &sandglass::causes::wakeup::Activation) -> String {
    let after = |t: Option<u64>| {
        t.map_or("?".to_string(), |t| {
            format!("+{}", Nanos(t.saturating_sub(release_ns)))
        })
    };
    format!(
        "timer interrupt {}, woken {}, switched in {}",
        after(p.irq_ns),
        after(p.wakeup_ns),
        after(p.switch_ns)
    )
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandglass::causes::trains::Train;
    use sandglass::causes::CpuTrain;

    fn causes(trains: Vec<CpuTrain>) -> Causes {
        Causes {
            sample_hz: 0,
            spike_threshold_ns: 20_000,
            spikes: 70,
            explanation: None,
            trains,
            kernel: None,
        }
    }

    /// A train's line gives its typical size, period, members of its slots and phase; a run
    /// written before slots were counted gives its members alone. Jones and Regehr's driver
    /// (7 ms every 5 s) with one slot missed, and a 500 ms burst train.
    #[test]
    fn a_train_is_one_line_with_its_slots() {
        let train = |period_ns, count, slots, typical_ns, first_ns| CpuTrain {
            cpu: 1,
            train: Train {
                period_ns,
                count,
                slots,
                typical_ns,
                first_ns,
                chance: 1e-30,
            },
        };
        let mut out = Vec::new();
        #[allow(clippy::unwrap_used)]
        write(
            &mut out,
            &causes(vec![
                train(5_000_412_000, 9, 10, 7_000_000, 2_300_000_000),
                train(499_998_000, 1_500, 1_512, 2_201_000, 28_000_000),
                train(500_000_000, 10, 0, 1_613_000, 107_000_000),
            ]),
        )
        .unwrap();
        let text = String::from_utf8_lossy(&out);
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("periodic")).collect();
        assert_eq!(
            lines,
            [
                "  periodic: CPU 1: delays of about 7 ms every 5.00 s, 9 of 10 slots, first at 2.300 s",
                "  periodic: CPU 1: delays of about 2.201 ms every 500 ms, 1,500 of 1,512 slots, first at 0.028 s",
                "  periodic: CPU 1: delays of about 1.613 ms every 500 ms, 10 of them, first at 0.107 s",
            ],
            "{text}"
        );
    }

    #[test]
    fn a_period_has_three_significant_figures() {
        for (ns, text) in [
            (5_000_412_000, "5.00 s"),
            (4_000_000, "4.00 ms"),
            (12_345_678, "12.3 ms"),
            (499_998_000, "500 ms"),
            (999_700_000, "1.00 s"),
            (9_996_000, "10.0 ms"),
            (100_000_000, "100 ms"),
            (1_500, "1.50 µs"),
            (640, "640 ns"),
        ] {
            assert_eq!(period(ns), text, "{ns}");
        }
    }
}
