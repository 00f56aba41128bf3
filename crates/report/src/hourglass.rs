//! Hourglass's output (Regehr 2002, §3.4 and §5): everything after the run, as complete as
//! possible, with the lines scripts want tagged so that grep finds them.
//!
//! * Execution-trace lines `ID START END DURATION GAP`, times in milliseconds from the start of
//!   the run with six decimals (§5.1). GAP is the time from the end of the previous record on
//!   the same CPU (on a uniprocessor, the previous record; for a CPU's first record, the time
//!   since the start of the run). These are the only lines that start with a digit.
//! * `cycles: ID START END CPU` with `-c`: the same records in raw counter ticks.
//! * `latlate: <µs>` for each wakeup of a LAT thread (§5.3).
//! * `thread N: missed X deadlines, hit Y` for PERIODIC and CPU_PERIODIC threads (§5.5).
//! * `gaphist:` rows of the polling-loop histogram with `-gh`.
//! * Everything else starts with `#`: the summary, for people.

use crate::text::{count, percent, signed};
use sandglass::analysis::trace::bin_upper;
use sandglass::engine::calibrate::LoopHistogram;
use sandglass::hourglass::result::{HourglassResult, ThreadResult};
use sandglass::model::Workload;
use sandglass::stats::Summary;
use sandglass::store::table::{tables, TableReader};
use sandglass::store::{ReadError, RunReader};
use sandglass::Nanos;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// Which optional parts to print.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Print execution-trace lines (off with `-x`).
    pub trace: bool,
    /// Print `cycles:` lines (`-c`).
    pub raw_cycles: bool,
    /// Print the polling-loop histogram (`-gh`).
    pub gap_histogram: bool,
    /// Print `latlate:` lines.
    pub latlate: bool,
}

fn ms_signed(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// Writes the whole Hourglass output, the trace and the LAT wakeups read from the run's tables
/// as they stream (a run of any length prints in constant memory).
pub fn write(
    w: &mut dyn Write,
    r: &HourglassResult,
    run: &RunReader,
    o: &Options,
) -> io::Result<()> {
    if o.gap_histogram {
        if let Some(h) = &r.loop_histogram {
            write_gap_histogram(w, h, r.calibration.ns_per_tick())?;
        }
    }
    let trace = TableReader::open(run, &tables::TRACE);
    if let (true, Some(t)) = (o.trace, &trace) {
        let mut last_end: BTreeMap<i32, i64> = BTreeMap::new();
        t.scan::<Failure>(&["thread", "cpu", "start_ns", "end_ns"], |b| {
            let (thread, cpu) = (b.i32s("thread")?, b.i32s("cpu")?);
            let (start, end) = (b.i64s("start_ns")?, b.i64s("end_ns")?);
            for i in 0..b.len() {
                let prev = last_end.insert(cpu[i], end[i]).unwrap_or(0);
                writeln!(
                    w,
                    "{} {:.6} {:.6} {:.6} {:.6}",
                    thread[i],
                    ms_signed(start[i]),
                    ms_signed(end[i]),
                    ms_signed(end[i] - start[i]),
                    ms_signed(start[i] - prev)
                )?;
            }
            Ok(())
        })
        .map_err(Failure::into_io)?;
    }
    if let (true, Some(t)) = (o.raw_cycles, &trace) {
        t.scan::<Failure>(&["thread", "cpu", "start_counter", "end_counter"], |b| {
            let (thread, cpu) = (b.i32s("thread")?, b.i32s("cpu")?);
            let (start, end) = (b.i64s("start_counter")?, b.i64s("end_counter")?);
            for i in 0..b.len() {
                writeln!(
                    w,
                    "cycles: {} {} {} {}",
                    thread[i], start[i] as u64, end[i] as u64, cpu[i]
                )?;
            }
            Ok(())
        })
        .map_err(Failure::into_io)?;
    }
    if o.latlate {
        let lat = r
            .threads
            .iter()
            .filter(|t| matches!(t.workload, Workload::Lat { .. }))
            .count();
        if let Some(t) = TableReader::open(run, &tables::LATENCY) {
            t.scan::<Failure>(&["thread", "lateness_ns"], |b| {
                let (thread, late) = (b.i32s("thread")?, b.i64s("lateness_ns")?);
                for i in 0..b.len() {
                    let us = late[i] as f64 / 1e3;
                    if lat > 1 {
                        writeln!(w, "latlate: {us:.6} thread {}", thread[i])?;
                    } else {
                        writeln!(w, "latlate: {us:.6}")?;
                    }
                }
                Ok(())
            })
            .map_err(Failure::into_io)?;
        }
    }
    for t in &r.threads {
        if let (Some(h), Some(m)) = (t.hits, t.misses) {
            writeln!(w, "thread {}: missed {} deadlines, hit {}", t.thread, m, h)?;
        }
    }
    write_summary(w, r)
}

/// A write that failed, or a table that could not be read.
enum Failure {
    Io(io::Error),
    Read(ReadError),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

impl From<ReadError> for Failure {
    fn from(e: ReadError) -> Self {
        Failure::Read(e)
    }
}

impl Failure {
    fn into_io(self) -> io::Error {
        match self {
            Failure::Io(e) => e,
            Failure::Read(e) => io::Error::other(e.to_string()),
        }
    }
}

/// The polling-loop histogram with percentiles interspersed (Hourglass's calibration procedure:
/// "99.999% of the samples showed a gap smaller than X").
pub fn write_gap_histogram(
    w: &mut dyn Write,
    h: &LoopHistogram,
    ns_per_tick: f64,
) -> io::Result<()> {
    writeln!(
        w,
        "# polling-loop iteration times: {} iterations",
        count(h.count)
    )?;
    // Bins: 5 ns wide below 100 ns, then a 1-2-5 series.
    let mut bins: BTreeMap<u64, u64> = BTreeMap::new();
    for (lo, _, c) in h.buckets() {
        let ns = (lo as f64 * ns_per_tick) as u64;
        let upper = if ns < 100 {
            ns / 5 * 5 + 5
        } else {
            bin_upper(ns + 1)
        };
        *bins.entry(upper).or_insert(0) += c;
    }
    let marks: [(f64, &str); 7] = [
        (0.5, "50"),
        (0.9, "90"),
        (0.99, "99"),
        (0.999, "99.9"),
        (0.9999, "99.99"),
        (0.99999, "99.999"),
        (0.999999, "99.9999"),
    ];
    let mut next_mark = 0;
    let mut seen = 0u64;
    for (&upper, &c) in &bins {
        // The bin below a 1-2-5 edge: 100→200, 200→500, 500→1000.
        let lower = if upper <= 100 {
            upper - 5
        } else if upper.to_string().starts_with('5') {
            upper * 2 / 5
        } else {
            upper / 2
        };
        writeln!(w, "gaphist: {lower}-{upper} ns {c}")?;
        seen += c;
        while next_mark < marks.len() && seen as f64 >= marks[next_mark].0 * h.count as f64 {
            let q = h.quantile(marks[next_mark].0) as f64 * ns_per_tick;
            writeln!(
                w,
                "# {}% of the samples showed a gap of at most {:.1} ns",
                marks[next_mark].1, q
            )?;
            next_mark += 1;
        }
    }
    Ok(())
}

fn dist(s: &Summary) -> String {
    format!(
        "min {}, median {}, p90 {}, p99 {}, p99.9 {}, max {} (mean {}, stddev {})",
        signed(s.min_ns),
        signed(s.p50_ns),
        signed(s.p90_ns),
        signed(s.p99_ns),
        signed(s.p99_9_ns),
        signed(s.max_ns),
        signed(s.mean_ns.round() as i64),
        Nanos(s.stddev_ns.round() as u64)
    )
}

fn thread_lines(w: &mut dyn Write, t: &ThreadResult, r: &HourglassResult) -> io::Result<()> {
    let effective = t
        .policy_effective
        .map(|p| p.describe())
        .unwrap_or_else(|| "unknown".into());
    let timer = if t.workload.uses_timer() {
        format!(", timer {}", t.timer)
    } else {
        String::new()
    };
    writeln!(
        w,
        "# thread {} (tid {}): {}, {} ({}){}, CPUs {}",
        t.thread, t.tid, t.workload, effective, t.priority, timer, t.cpus
    )?;
    if t.downgraded.is_some() {
        writeln!(
            w,
            "#   runs below its request ({}): see the warning at the end",
            t.policy_requested.describe()
        )?;
    }
    if let Some(e) = &t.error {
        writeln!(w, "#   error: {e}")?;
    }
    if !t.joined {
        writeln!(w, "#   did not stop; counters lost")?;
        return Ok(());
    }
    if t.workload.records_trace() {
        let span = t.finish_ns.0.saturating_sub(t.start_ns.0).max(1);
        let iter = t
            .mean_iteration_ns
            .map(|m| format!(", {:.1} ns per loop iteration", m))
            .unwrap_or_default();
        writeln!(
            w,
            "#   received {} of CPU ({} of its {}), {} records, {} preemptions{}{}",
            Nanos(t.received_ns),
            percent(t.received_ns as f64 / span as f64),
            Nanos(span),
            count(t.records),
            count(t.preemptions),
            if t.yields > 0 {
                format!(", {} yields", count(t.yields))
            } else {
                String::new()
            },
            iter
        )?;
    }
    if let Some(p) = t.scan_passes {
        writeln!(w, "#   {} passes over the working set", count(p))?;
    }
    if let (Some(h), Some(m)) = (t.hits, t.misses) {
        let total = h + m;
        let share = if total > 0 {
            m as f64 / total as f64
        } else {
            0.0
        };
        writeln!(
            w,
            "#   deadlines: {} missed, {} hit ({} missed)",
            count(m),
            count(h),
            percent(share)
        )?;
        if let Some(resp) = &t.response {
            writeln!(w, "#   {}: {}", response_label(t), dist(resp))?;
        }
    }
    if let Some(l) = &t.lateness {
        writeln!(w, "#   {} wakeups, lateness {}", count(l.count), dist(l))?;
        if l.count >= 10_000 {
            writeln!(w, "#   lateness p99.99 {}", signed(l.p99_99_ns))?;
        }
        let table: Vec<String> = t
            .later_than
            .iter()
            .map(|lt| format!("{} {}", Nanos(lt.threshold_ns), count(lt.count)))
            .collect();
        writeln!(w, "#   samples later than: {}", table.join(", "))?;
    }
    if t.latencies_dropped > 0 || t.jobs_dropped > 0 {
        writeln!(
            w,
            "#   {} samples and {} job records did not fit their buffers (counted, not kept)",
            t.latencies_dropped, t.jobs_dropped
        )?;
    }
    let _ = r;
    Ok(())
}

/// What a thread's response-time figures include: every job, the missed ones at their
/// deadline, or (runs written before misses were counted) the hits alone.
pub fn response_label(t: &ThreadResult) -> String {
    let (h, m) = (t.hits.unwrap_or(0), t.misses.unwrap_or(0));
    let total = count(h + m);
    if !t.response_counts_misses {
        format!(
            "response time of the {} hits (release to completion; {} missed of {total} left out)",
            count(h),
            count(m)
        )
    } else if m == 0 {
        format!("response time of all {total} jobs (release to completion)")
    } else {
        format!(
            "response time of all {total} jobs (release to completion; missed {} of {total}, each counted at its deadline)",
            count(m)
        )
    }
}

/// The worst response of a thread as a table cell: the maximum, marked when it is a missed
/// job's deadline (a lower bound) or when the missed jobs are left out.
pub fn worst_response(t: &ThreadResult) -> String {
    let Some(r) = &t.response else {
        return "-".into();
    };
    let max = Nanos(r.max_ns.max(0) as u64);
    match t.misses.unwrap_or(0) {
        0 => max.to_string(),
        m if t.response_counts_misses => format!("≥ {max} ({m} missed)"),
        m => format!("{max} of the hits ({m} missed)"),
    }
}

/// The `#` summary block.
pub fn write_summary(w: &mut dyn Write, r: &HourglassResult) -> io::Result<()> {
    writeln!(
        w,
        "# sandglass hourglass: {} thread(s), {} requested, {} measured; {} ({})",
        r.threads.len(),
        r.run.duration_ns,
        Nanos(r.run.elapsed_ns),
        r.run.state.name(),
        r.run.end_detail
    )?;
    let c = &r.calibration;
    let gap = match r.gap.source.as_str() {
        "unused" => "no gap detection (no thread makes trace records)".to_string(),
        _ => format!(
            "gap threshold {} ns ({})",
            r.gap.threshold_ns, r.gap.explanation
        ),
    };
    writeln!(
        w,
        "# counter: {} at {:.3} MHz (uncertainty {:.3} ppm){}; {}",
        r.counter.kind,
        c.frequency_hz / 1e6,
        c.uncertainty_ppm,
        if r.counter.rdtscp {
            ", CPU from rdtscp"
        } else {
            ""
        },
        gap
    )?;
    for t in &r.threads {
        thread_lines(w, t, r)?;
    }
    let s = &r.switches;
    if s.count > 0 {
        writeln!(
            w,
            "# context switches: {} ({} voluntary, {} involuntary)",
            count(s.count),
            count(s.voluntary),
            count(s.involuntary)
        )?;
        if let Some(all) = &s.all {
            writeln!(w, "#   switch gap: {}", dist(all))?;
            writeln!(w, "#   median switch gap: {}", signed(all.p50_ns))?;
        }
        if let Some(v) = &s.voluntary_gaps {
            writeln!(
                w,
                "#   voluntary: median {}, min {}",
                signed(v.p50_ns),
                signed(v.min_ns)
            )?;
        }
        if let Some(i) = &s.involuntary_gaps {
            writeln!(
                w,
                "#   involuntary: median {}, min {}",
                signed(i.p50_ns),
                signed(i.min_ns)
            )?;
        }
        let hist: Vec<String> = s
            .histogram
            .iter()
            .map(|b| format!("<={} {}", Nanos(b.upper_ns), count(b.count)))
            .collect();
        writeln!(w, "#   histogram: {}", hist.join(", "))?;
    }
    for cov in &r.coverage {
        writeln!(
            w,
            "# CPU {}: records cover {} of {} ({} busy), {} overlapping records",
            cov.cpu,
            percent(cov.share),
            Nanos(cov.span_ns),
            Nanos(cov.busy_ns),
            cov.overlaps
        )?;
    }
    writeln!(
        w,
        "# trace: {} records (capacity {}, {} dropped)",
        count(r.trace.records),
        count(r.trace.capacity),
        count(r.trace.dropped)
    )?;
    writeln!(
        w,
        "# setup: memory {}; /dev/cpu_dma_latency {}; main thread on {}",
        if r.run.memory_locked {
            "locked"
        } else {
            "not locked"
        },
        r.run
            .pm_qos_us
            .map(|u| format!("held at {u} us"))
            .unwrap_or_else(|| "not held".into()),
        r.main_cpu
            .map(|c| format!("CPU {c}"))
            .unwrap_or_else(|| "a shared CPU".into())
    )?;
    if !r.run.loads.is_empty() {
        writeln!(
            w,
            "# under load; what each load achieved during the measurement:"
        )?;
        let mut table = Vec::new();
        crate::load::write(&mut table, &r.run.loads)?;
        for line in String::from_utf8_lossy(&table).lines() {
            writeln!(w, "#   {line}")?;
        }
    }
    if let Some(c) = &r.run.causes {
        let mut text = Vec::new();
        crate::causes::write(&mut text, c)?;
        for line in String::from_utf8_lossy(&text).lines() {
            writeln!(w, "# {line}")?;
        }
    }
    for warn in &r.run.warnings {
        writeln!(w, "# warning: {}", warn.message)?;
    }
    writeln!(w, "# run directory: {}", r.run.run_dir)?;
    Ok(())
}

#[cfg(test)]
mod response_tests {
    use super::*;

    /// The PERIODIC thread of a run of format 1 (476 hits, 24 misses), as this version would
    /// have written it or as written then.
    fn periodic(counts_misses: bool) -> ThreadResult {
        let v: serde_json::Value = serde_json::from_str(include_str!(
            "../../cli/tests/data/v1/hourglass/summary.json"
        ))
        .expect("JSON");
        let mut t = v["threads"][1].clone();
        t["response_counts_misses"] = counts_misses.into();
        serde_json::from_value(t).expect("a thread")
    }

    #[test]
    fn response_figures_say_what_they_include() {
        let t = periodic(true);
        assert_eq!(
            response_label(&t),
            "response time of all 500 jobs (release to completion; missed 24 of 500, each counted at its deadline)"
        );
        assert_eq!(worst_response(&t), "≥ 1.943 ms (24 missed)");
        let t = periodic(false);
        assert_eq!(
            response_label(&t),
            "response time of the 476 hits (release to completion; 24 missed of 500 left out)"
        );
        assert_eq!(worst_response(&t), "1.943 ms of the hits (24 missed)");
        let mut t = periodic(true);
        t.misses = Some(0);
        t.hits = Some(500);
        assert_eq!(
            response_label(&t),
            "response time of all 500 jobs (release to completion)"
        );
        assert_eq!(worst_response(&t), "1.943 ms");
    }
}
