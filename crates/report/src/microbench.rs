//! Renderings of the cost microbenchmarks of `sandglass bench`: one table per kind, in the
//! shape of the tables of Dannenberg et al. (Mach testbed, 1993) where they have one, with the
//! distributions (p50, p99, max) beside every figure the seed gave as a single number.

use crate::analysis::sig;
use crate::text::{count, percent, signed};
use sandglass::microbench::budget::BudgetResult;
use sandglass::microbench::copy::{CopyResult, Variant};
use sandglass::microbench::ctxsw::CtxswResult;
use sandglass::microbench::file::{CacheState, FileResult};
use sandglass::microbench::ipc::IpcResult;
use sandglass::microbench::timer_overhead::TimerOverheadResult;
use sandglass::microbench::{format_size, Header};
use sandglass::stats::Summary;
use sandglass::Nanos;
use std::io::{self, Write};

fn ns(v: i64) -> String {
    signed(v)
}

fn ns_f(v: f64) -> String {
    signed(v.round() as i64)
}

/// Bytes per second as MB/s (10⁶ bytes), four significant digits.
fn mbps(v: Option<f64>) -> String {
    v.map(|b| sig(b / 1e6, 4)).unwrap_or_else(|| "-".into())
}

fn dist(s: Option<&Summary>, f: fn(&Summary) -> i64) -> String {
    s.map(|s| ns(f(s))).unwrap_or_else(|| "-".into())
}

fn header_line(w: &mut dyn Write, what: &str, h: &Header) -> io::Result<()> {
    writeln!(
        w,
        "sandglass bench {what}: {} in {} ({})",
        h.state.name(),
        Nanos(h.elapsed_ns),
        h.end_detail
    )
}

fn footer(w: &mut dyn Write, h: &Header) -> io::Result<()> {
    for warn in &h.warnings {
        writeln!(w, "warning: {}", warn.message)?;
    }
    writeln!(w, "run directory: {}", h.run_dir)
}

/// `sandglass bench copy`: bandwidth by size and alignment, with the cache boundaries marked.
pub fn write_copy(w: &mut dyn Write, r: &CopyResult) -> io::Result<()> {
    header_line(w, "copy", &r.header)?;
    let caches: Vec<String> = r
        .caches
        .iter()
        .map(|c| format!("{} {}", c.name(), format_size(c.size_bytes)))
        .collect();
    writeln!(
        w,
        "CPU {}; caches {}",
        r.cpu,
        if caches.is_empty() {
            "unknown".to_string()
        } else {
            caches.join(", ")
        }
    )?;
    writeln!(
        w,
        "MB/s at the median sample, and at the p99 sample (the slow tail); a block fits a cache when the source and the destination (2 × size) do"
    )?;
    writeln!(
        w,
        "{:>10} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "size", "fits", "aligned", "p99", "odd-size", "p99", "odd-offset", "p99"
    )?;
    let mut sizes: Vec<u64> = r.cells.iter().map(|c| c.size_bytes).collect();
    sizes.dedup();
    let mut last_fit: Option<String> = None;
    for size in sizes {
        let row: Vec<_> = r.cells.iter().filter(|c| c.size_bytes == size).collect();
        let fits = row.first().map(|c| c.fits.clone()).unwrap_or_default();
        if let Some(prev) = &last_fit {
            if *prev != fits {
                let cap = r
                    .caches
                    .iter()
                    .find(|c| c.name() == *prev)
                    .map(|c| format!(" ({})", format_size(c.size_bytes)))
                    .unwrap_or_default();
                writeln!(w, "{:-^90}", format!(" past {prev}{cap} "))?;
            }
        }
        last_fit = Some(fits.clone());
        let cell = |v: Variant| row.iter().find(|c| c.variant == v);
        let mut line = format!("{:>10} {:>7}", format_size(size), fits);
        for v in Variant::ALL {
            let c = cell(v);
            line.push_str(&format!(
                " {:>10} {:>10}",
                mbps(c.and_then(|c| c.p50_bytes_per_s)),
                mbps(c.and_then(|c| c.p99_bytes_per_s))
            ));
        }
        writeln!(w, "{line}")?;
    }
    writeln!(
        w,
        "odd-size copies one byte less than the size; odd-offset copies from source + 1 to destination + 3 (Dannenberg et al. §8: copies that were not multiples of 4 bytes ran 3 to 4 times slower)"
    )?;
    footer(w, &r.header)
}

/// `sandglass bench ipc`: per mechanism the one-way latency distribution and throughput by
/// size with the fitted model, then the comparison across mechanisms (the seed's Figure 3).
pub fn write_ipc(w: &mut dyn Write, r: &IpcResult) -> io::Result<()> {
    header_line(w, "ipc", &r.header)?;
    writeln!(
        w,
        "{}: client on CPU {}, server on CPU {}; one-way latency = round trip / 2",
        r.placement.name(),
        r.client_cpu,
        r.server_cpu
    )?;
    for m in &r.mechanisms {
        let policy = m
            .client
            .as_ref()
            .and_then(|c| c.policy.clone())
            .unwrap_or_else(|| "policy unknown".into());
        let pieces = m
            .max_piece_bytes
            .map(|p| format!("; messages above {} travel in pieces", format_size(p)))
            .unwrap_or_default();
        writeln!(
            w,
            "\n{} ({policy}; placement {}{pieces})",
            m.mechanism.name(),
            if m.placement_verified {
                "verified"
            } else {
                "NOT verified"
            }
        )?;
        writeln!(
            w,
            "{:>10} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11}",
            "size", "trips", "min", "p50", "p99", "max", "MB/s", "residual"
        )?;
        for c in &m.cells {
            let s = c.one_way_ns.as_ref();
            let residual = m.model.as_ref().and_then(|f| {
                m.model_points
                    .iter()
                    .position(|p| p.size_bytes == c.size_bytes)
                    .and_then(|i| f.residuals_ns.get(i))
                    .map(|&r| ns_f(r))
            });
            writeln!(
                w,
                "{:>10} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11}",
                format_size(c.size_bytes),
                count(c.round_trips),
                dist(s, |s| s.min_ns),
                dist(s, |s| s.p50_ns),
                dist(s, |s| s.p99_ns),
                dist(s, |s| s.max_ns),
                mbps(c.throughput_bytes_per_s),
                residual.unwrap_or_else(|| "-".into())
            )?;
            if let Some(e) = &c.error {
                writeln!(w, "{:>10} error: {e}", "")?;
            }
        }
        match (&m.model, &m.model_error) {
            (Some(f), _) if f.not_physical.is_some() => writeln!(
                w,
                "  no model: t(N) = a + N/b fitted to the medians is not physical: {}",
                f.not_physical.as_deref().unwrap_or_default()
            )?,
            (Some(f), _) => writeln!(
                w,
                "  t(N) = a + N/b fitted to the medians: a = {}, b = {} MB/s, R² {}",
                ns_f(f.fixed_ns),
                mbps(f.bytes_per_s),
                f.r2.map(|r| format!("{r:.4}"))
                    .unwrap_or_else(|| "-".into())
            )?,
            (None, Some(e)) => writeln!(w, "  no model: {e}")?,
            (None, None) => {}
        }
    }
    if r.mechanisms.len() > 1 {
        writeln!(w, "\nmedian one-way latency by mechanism")?;
        let mut line = format!("{:>10}", "size");
        for m in &r.mechanisms {
            line.push_str(&format!(" {:>11}", m.mechanism.name()));
        }
        writeln!(w, "{line}")?;
        for &size in &r.sizes {
            let mut line = format!("{:>10}", format_size(size));
            for m in &r.mechanisms {
                let v = m
                    .cells
                    .iter()
                    .find(|c| c.size_bytes == size)
                    .and_then(|c| c.one_way_ns.as_ref());
                line.push_str(&format!(" {:>11}", dist(v, |s| s.p50_ns)));
            }
            writeln!(w, "{line}")?;
        }
        let mut a = format!("{:>10}", "a");
        let mut b = format!("{:>10}", "b MB/s");
        for m in &r.mechanisms {
            // Only a physical model's parameters are costs.
            let model = m.model.as_ref().filter(|f| f.not_physical.is_none());
            a.push_str(&format!(
                " {:>11}",
                model
                    .map(|f| ns_f(f.fixed_ns))
                    .unwrap_or_else(|| "-".into())
            ));
            b.push_str(&format!(" {:>11}", mbps(model.and_then(|f| f.bytes_per_s))));
        }
        writeln!(w, "{a}\n{b}")?;
    }
    footer(w, &r.header)
}

/// `sandglass bench ctxsw`: direct and indirect switch costs by working set.
pub fn write_ctxsw(w: &mut dyn Write, r: &CtxswResult) -> io::Result<()> {
    header_line(w, "ctxsw", &r.header)?;
    let policy = r
        .members
        .first()
        .and_then(|m| m.policy.clone())
        .unwrap_or_else(|| "policy unknown".into());
    writeln!(
        w,
        "a ring of {} threads on CPU {} ({policy}) passing a token through {}s; switch = trip / {} − overhead (one thread passing the token to itself)",
        r.ring, r.cpu, r.token, r.ring
    )?;
    writeln!(
        w,
        "{:>12} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "working set", "trips", "overhead", "hop", "switch min", "p50", "p99", "max", "indirect"
    )?;
    for c in &r.cells {
        let s = c.switch_ns.as_ref();
        // A switch or indirect cost that is not physical is left out: its reason is below.
        let switch_p50 = match (s, c.switch_p50_cost()) {
            (Some(_), None) => "-".to_string(),
            _ => dist(s, |s| s.p50_ns),
        };
        let indirect = c.indirect_cost().map(ns).unwrap_or_else(|| "-".into());
        writeln!(
            w,
            "{:>12} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            if c.working_set_bytes == 0 {
                "0".to_string()
            } else {
                format_size(c.working_set_bytes)
            },
            count(c.trips),
            dist(c.overhead_ns.as_ref(), |s| s.p50_ns),
            dist(c.hop_ns.as_ref(), |s| s.p50_ns),
            dist(s, |s| s.min_ns),
            switch_p50,
            dist(s, |s| s.p99_ns),
            dist(s, |s| s.max_ns),
            indirect
        )?;
        if let Some(e) = &c.error {
            writeln!(w, "{:>12} error: {e}", "")?;
        }
        if let Some(why) = &c.not_physical {
            writeln!(w, "{:>12} not physical: {why}", "")?;
        }
        if !c.placement_verified {
            writeln!(
                w,
                "{:>12} placement NOT verified: the members ran on CPUs {:?}",
                "", c.cpus_seen
            )?;
        }
    }
    writeln!(
        w,
        "overhead and hop are medians; indirect = median switch − median switch with no working set (the cost of refilling the cache)"
    )?;
    footer(w, &r.header)
}

/// `sandglass bench file`: throughput and CPU use per method, cold and warm (the seed's
/// Table 2).
pub fn write_file(w: &mut dyn Write, r: &FileResult) -> io::Result<()> {
    header_line(w, "file", &r.header)?;
    writeln!(
        w,
        "{} file on {}{}, read on CPU {}; cold = pages dropped by {}",
        format_size(r.file.size_bytes),
        r.file
            .filesystem
            .as_deref()
            .unwrap_or("an unknown filesystem"),
        r.file
            .device
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default(),
        r.cpu,
        r.cold_method
    )?;
    writeln!(
        w,
        "{:<9} {:>8} {:>8} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "method",
        "block",
        "cache",
        "MB/s",
        "per p50",
        "p99",
        "max",
        "CPU rusage",
        "freetime",
        "blocks in"
    )?;
    for p in &r.passes {
        let s = p.sample_ns.as_ref();
        let cache = match p.cache {
            CacheState::Cold => "cold",
            CacheState::Warm => "warm",
            CacheState::Uncached => "uncached",
        };
        let block = if p.block_bytes == 0 {
            "-".to_string()
        } else {
            format_size(p.block_bytes)
        };
        if let Some(e) = &p.error {
            writeln!(
                w,
                "{:<9} {:>8} {:>8} error: {e}",
                p.method.name(),
                block,
                cache
            )?;
            continue;
        }
        writeln!(
            w,
            "{:<9} {:>8} {:>8} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}",
            p.method.name(),
            block,
            cache,
            mbps(p.throughput_bytes_per_s),
            dist(s, |s| s.p50_ns),
            dist(s, |s| s.p99_ns),
            dist(s, |s| s.max_ns),
            percent(p.usage.cpu_share),
            p.freetime_busy_cpus
                .map(percent)
                .unwrap_or_else(|| "-".into()),
            count(p.usage.blocks_in)
        )?;
    }
    writeln!(
        w,
        "per p50/p99/max: the time of one read call (read, direct) or of each {} consumed (buffered, mmap); CPU rusage: the reading thread's user + system time over the pass; freetime: CPUs kept busy, from idle counters (100% = one CPU)",
        format_size(sandglass::microbench::file::CHUNK_BYTES as u64)
    )?;
    if r.freetime.is_some() {
        writeln!(w, "caveat: {}", r.freetime_caveat)?;
    }
    writeln!(
        w,
        "temporary file {}: {}",
        r.file.dir,
        if r.file.removed {
            "removed"
        } else {
            "NOT removed"
        }
    )?;
    footer(w, &r.header)
}

/// `sandglass bench timer-overhead`: the two-rate method per timer kind (the seed's §6).
pub fn write_timer_overhead(w: &mut dyn Write, r: &TimerOverheadResult) -> io::Result<()> {
    header_line(w, "timer-overhead", &r.header)?;
    writeln!(
        w,
        "a background loop ({} working set) and a timer thread on CPU {}, {} pairs of {} phases at {} Hz and {} Hz; model I(f) = (1 − f·o)/x",
        format_size(r.working_set_bytes),
        r.cpu,
        r.repeat,
        r.phase_ns,
        sig(r.rates_hz[0], 6),
        sig(r.rates_hz[1], 6)
    )?;
    writeln!(
        w,
        "{:<8} {:>10} {:>12} {:>10} {:>12} {:>12} {:>9}  per repetition",
        "timer", "f1 Hz", "iter/s", "f2 Hz", "iter/s", "per wakeup", "at 1 kHz"
    )?;
    for k in &r.kinds {
        let m = &k.analysis.medians;
        let (f1, i1, f2, i2) = match m.as_slice() {
            [a, b] => (
                sig(a.tick_hz, 6),
                sig(a.iterations_per_s, 7),
                sig(b.tick_hz, 6),
                sig(b.iterations_per_s, 7),
            ),
            _ => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let reps: Vec<String> = k
            .analysis
            .per_repetition_overhead_ns
            .iter()
            .map(|o| o.map(ns_f).unwrap_or_else(|| "-".into()))
            .collect();
        writeln!(
            w,
            "{:<8} {:>10} {:>12} {:>10} {:>12} {:>12} {:>9}  {}",
            k.timer.name().to_ascii_lowercase(),
            f1,
            i1,
            f2,
            i2,
            k.analysis
                .solution
                .as_ref()
                .map(|s| ns_f(s.overhead_ns))
                .unwrap_or_else(|| "-".into()),
            k.analysis
                .share_at_1khz
                .map(percent)
                .unwrap_or_else(|| "-".into()),
            reps.join(", ")
        )?;
        if let Some(e) = k.error.as_ref().or(k.analysis.error.as_ref()) {
            writeln!(w, "{:<8} {e}", "")?;
        }
    }
    writeln!(
        w,
        "f: the wakeup rates achieved (medians); per wakeup: o, what one wakeup costs the loop (interrupt, wakeup, two switches, the timer's system calls, refilled cache); at 1 kHz: 1000·o, the CPU share of a 1 kHz timer (Dannenberg et al.: 67 µs and 6.7% on a 33 MHz i486)"
    )?;
    footer(w, &r.header)
}

/// `sandglass bench budget`: the seed's §11 table, predicted and measured.
pub fn write_budget(w: &mut dyn Write, r: &BudgetResult) -> io::Result<()> {
    header_line(w, "budget", &r.header)?;
    let policy = r
        .frame_thread
        .as_ref()
        .and_then(|t| t.policy.clone())
        .unwrap_or_else(|| "policy unknown".into());
    writeln!(
        w,
        "{}: a frame every {} on CPU {} ({policy}); receivers on CPU {}",
        r.file, r.period_ns, r.cpu, r.peer_cpu
    )?;
    writeln!(
        w,
        "{:<34} {:>10} {:>10} {:>10}   {:>10} {:>10} {:>10}",
        "step", "alone p50", "p99", "max", "in frames", "p99", "max"
    )?;
    for s in &r.steps {
        let p = s.predicted_ns.as_ref();
        let m = s.measured_ns.as_ref();
        writeln!(
            w,
            "{:<34} {:>10} {:>10} {:>10}   {:>10} {:>10} {:>10}",
            s.step.name,
            dist(p, |s| s.p50_ns),
            dist(p, |s| s.p99_ns),
            dist(p, |s| s.max_ns),
            dist(m, |s| s.p50_ns),
            dist(m, |s| s.p99_ns),
            dist(m, |s| s.max_ns)
        )?;
    }
    let pr = &r.prediction;
    let me = &r.measured;
    writeln!(
        w,
        "{:<34} {:>10} {:>10} {:>10}   {:>10} {:>10} {:>10}",
        "total",
        ns(pr.sum_p50_ns),
        ns(pr.sum_p99_ns),
        "",
        dist(me.execution_ns.as_ref(), |s| s.p50_ns),
        dist(me.execution_ns.as_ref(), |s| s.p99_ns),
        dist(me.execution_ns.as_ref(), |s| s.max_ns)
    )?;
    writeln!(
        w,
        "headroom: {} of {} ({}) at the sum of the medians",
        ns(pr.headroom_ns),
        r.period_ns,
        percent(pr.headroom_share)
    )?;
    writeln!(
        w,
        "predicted: frame time p50 {}, p99 {}, max {} over {} resampled frames; P(frame > period) = {}: {} of {} frames",
        dist(pr.frame_ns.as_ref(), |s| s.p50_ns),
        dist(pr.frame_ns.as_ref(), |s| s.p99_ns),
        dist(pr.frame_ns.as_ref(), |s| s.max_ns),
        count(pr.draws),
        sig(pr.miss_probability, 3),
        sig(pr.expected_misses, 3),
        count(me.frames)
    )?;
    writeln!(
        w,
        "measured: {} frames, {} missed ({}), longest run of misses {}; response p50 {}, p99 {}, max {}; start lateness p99 {}",
        count(me.frames),
        count(me.missed),
        percent(me.miss_share),
        me.longest_miss_run,
        dist(me.response_ns.as_ref(), |s| s.p50_ns),
        dist(me.response_ns.as_ref(), |s| s.p99_ns),
        dist(me.response_ns.as_ref(), |s| s.max_ns),
        dist(me.start_lateness_ns.as_ref(), |s| s.p99_ns)
    )?;
    if let Some(a) = &r.agreement {
        writeln!(
            w,
            "measured against predicted: {:.2}x at the median, {:.2}x at the p99{}",
            a.ratio_p50,
            a.ratio_p99,
            if a.disagrees {
                format!(
                    " (beyond {}x: the prediction does not hold)",
                    sandglass::microbench::budget::DISAGREEMENT
                )
            } else {
                String::new()
            }
        )?;
        if a.disagrees {
            writeln!(
                w,
                "  {:<38} {:>10} {:>10} {:>10}",
                "the median frame, part by part", "predicted", "measured", "excess"
            )?;
            for p in &a.parts {
                writeln!(
                    w,
                    "  {:<38} {:>10} {:>10} {:>10}",
                    p.name,
                    ns(p.predicted_ns),
                    ns(p.measured_ns),
                    ns(p.excess_ns)
                )?;
            }
        }
    }
    if !r.loads.is_empty() {
        writeln!(w, "frames under load; what each load achieved during them:")?;
        crate::load::write(w, &r.loads)?;
    }
    footer(w, &r.header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_print_in_mb_per_s() {
        // At least four significant digits; whole megabytes are never rounded away.
        assert_eq!(mbps(Some(12_345_678_000.0)), "12346");
        assert_eq!(mbps(Some(1_500_000.0)), "1.5");
        assert_eq!(mbps(None), "-");
    }
}
