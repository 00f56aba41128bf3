//! Explaining long delays (capability C4): what ran on a CPU while a measured thread waited.
//!
//! Built so far: the parsers of the `/proc` files that the unprivileged sampler reads
//! ([`procfs`]), the sampler and its per-interval deltas ([`sampler`]), the coarse explanation
//! of spikes by the sources that were abnormal around them ([`explain`]), and the detector of
//! periodic trains of delays ([`trains`]).

pub mod attribute;
pub mod explain;
pub mod kernel_store;
pub mod kernel_trace;
pub mod procfs;
pub mod sampler;
pub mod spikes;
#[cfg(feature = "linux")]
pub mod tracefs;
pub mod tracefs_raw;
pub mod trains;
pub mod wakeup;

/// Snapshots per second taken by the sampler unless told otherwise.
pub const DEFAULT_SAMPLE_HZ: u32 = 10;

/// [`DEFAULT_SAMPLE_HZ`], for serde defaults.
pub fn default_sample_hz() -> u32 {
    DEFAULT_SAMPLE_HZ
}

use explain::{explain, Explanation};
use sampler::Digest;
pub use sampler::SpikeAt;
use serde::{Deserialize, Serialize};
use trains::{find_trains, Spike, Train, TrainConfig};

/// A periodic train on one CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuTrain {
    pub cpu: usize,
    #[serde(flatten)]
    pub train: Train,
}

/// What a run says about its own spikes: the sampler's explanation and the periodic trains.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Causes {
    /// Snapshots per second (0 when the sampler did not run).
    pub sample_hz: u32,
    /// Delays at least this long are spikes.
    pub spike_threshold_ns: u64,
    /// Spikes found, all CPUs.
    pub spikes: u64,
    /// The sampler's explanation of the largest spikes, when it ran.
    pub explanation: Option<Explanation>,
    /// Periodic trains of spikes.
    pub trains: Vec<CpuTrain>,
    /// The exact attribution of every spike from kernel events, with `--trace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelCauses>,
}

/// The run's largest delay and what caused it, in one line for a study's cells: from the
/// kernel's events when the run recorded them (`1.97 ms on CPU 1: sg-hourglass-0:214
/// (SCHED_FIFO 99, higher or equal priority) 1.87 ms`), else from the /proc sampler (`2.1 ms
/// on CPU 0: steal 10 (usually 0)`); `None` without a delay to explain.
pub fn largest_cause(c: &Causes) -> Option<String> {
    use crate::units::Nanos;
    if let Some(w) = c.kernel.as_ref().and_then(|k| k.largest.first()) {
        let size = Nanos(w.end_ns.saturating_sub(w.start_ns));
        let Some(sh) = w.shares.first() else {
            return Some(format!("{size} on CPU {}: nothing recorded", w.cpu));
        };
        let detail: Vec<&str> = [sh.policy.as_deref(), sh.why.map(|y| y.as_str())]
            .into_iter()
            .flatten()
            .collect();
        let detail = if detail.is_empty() {
            format!(" ({})", sh.kind.as_str())
        } else {
            format!(" ({})", detail.join(", "))
        };
        return Some(format!(
            "{size} on CPU {}: {}{detail} {}",
            w.cpu,
            sh.name,
            Nanos(sh.ns)
        ));
    }
    let s = c.explanation.as_ref()?.spikes.first()?;
    let size = Nanos(s.size_ns);
    Some(match (s.abnormal.first(), &s.inferred) {
        (Some(a), _) => format!("{size} on CPU {}: {}", s.cpu, a.text()),
        (None, Some(i)) => format!("{size} on CPU {}: {}", s.cpu, i.text),
        (None, None) => format!(
            "{size} on CPU {}: nothing unusual in the sampled counters",
            s.cpu
        ),
    })
}

/// The largest windows listed one by one in a result.
pub const MAX_LISTED_WINDOWS: usize = 20;

/// The tracefs backend's attribution of a run's spikes (times in ns from the run's start).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KernelCauses {
    /// Kernel events decoded on the measured CPUs.
    pub events: u64,
    /// Events the kernel's buffer lost (raise `--trace-buffer`), and records not decoded.
    pub lost_events: u64,
    pub undecoded: u64,
    pub buffer_kb: u64,
    /// The main thread's time spent reading and decoding the trace.
    pub read_ns: u64,
    /// A marker written at a known CLOCK_MONOTONIC time came back this far off (trace minus
    /// clock), within `clock_uncertainty_ns`: the check that the trace and the run share a clock.
    pub clock_offset_ns: Option<i64>,
    pub clock_uncertainty_ns: Option<u64>,
    /// Spikes attributed.
    pub windows: u64,
    /// What took the CPU during the spikes, by stolen time, largest first.
    pub causes: Vec<attribute::Cause>,
    /// Every handler invocation on the measured CPUs over the run, net of nesting.
    pub handlers: Vec<attribute::Handler>,
    /// Per timer thread, over every wakeup in the trace: the IRQ latency (expiry to the timer's
    /// callback) and the thread latency (expiry to the switch-in), as rtla timerlat gives them.
    #[serde(default)]
    pub latency: Vec<wakeup::WakeLatency>,
    /// The largest spikes, each with what ran during it.
    pub largest: Vec<attribute::Explained>,
    /// Every spike with what ran during it (written to `attribution.csv`).
    #[serde(skip)]
    pub all: Vec<attribute::Explained>,
    /// What of the trace the run kept in `kernel-*.parquet`; none when it could not be
    /// written (a warning says why) or in runs from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<kernel_store::Stored>,
    /// The files of `kernel-*.parquet`, for the manifest.
    #[serde(skip)]
    pub files: Vec<crate::store::FileEntry>,
    /// Why the events could not be kept, if they could not.
    #[serde(skip)]
    pub store_error: Option<String>,
}

/// The events of one CPU a piece of the attribution holds (about 10 s of a CPU with a 1 kHz
/// timer thread and a busy competitor; tens of MB).
pub const PIECE_EVENTS: usize = 131_072;

/// The spikes of one CPU to attribute: for a timer run, `tid` is the thread whose wakeups
/// they delayed (each spike runs from a release to the thread's read of the clock); None for
/// gaps of a polling thread.
pub struct CpuSpikes<'a> {
    pub cpu: usize,
    pub tid: Option<i32>,
    pub spikes: &'a [Spike],
}

/// The exact attribution of `spikes` (per CPU, times from the run's start) from the kernel
/// trace `k` of the run in `dir` whose measuring threads are `tids`. The trace's times are
/// CLOCK_MONOTONIC, the run's CLOCK_MONOTONIC_RAW from its start: `map` (the run's whole
/// calibration) turns each into the other.
pub fn attribute_run(
    dir: &std::path::Path,
    k: &kernel_trace::KernelTrace,
    map: crate::clock::ClockMap,
    tids: &[i32],
    spikes: &[CpuSpikes],
) -> Option<KernelCauses> {
    let mono = |t_ns: u64| map.run_to_monotonic_ns(t_ns as i64).max(0) as u64;
    let zero = mono(0);
    let windows: Vec<attribute::Window> = spikes
        .iter()
        .flat_map(|c| {
            c.spikes.iter().map(move |s| attribute::Window {
                cpu: c.cpu,
                start_ns: mono(s.at_ns),
                end_ns: mono(s.at_ns + s.size_ns),
                tid: c.tid,
            })
        })
        .collect();
    // The trace is read once, in pieces of bounded size, however long the run.
    let mut pieces = attribute::Chunked::new(&k.cpus, tids, &windows, PIECE_EVENTS);
    let read = k.each_event(|e| pieces.push(e));
    let a = pieces.finish();
    let policies = policies(&a.causes);
    let run_ns = |t: u64| map.monotonic_to_run_ns(t as i64).max(0) as u64;
    let relative = |mut e: attribute::Explained| {
        e.start_ns = run_ns(e.start_ns);
        e.end_ns = run_ns(e.end_ns);
        e.from_ns = run_ns(e.from_ns);
        if let Some(p) = e.path.as_mut() {
            for t in [
                &mut p.expiry_ns,
                &mut p.irq_ns,
                &mut p.callback_ns,
                &mut p.wakeup_ns,
                &mut p.switch_ns,
            ] {
                *t = t.map(run_ns);
            }
        }
        for sh in &mut e.shares {
            if let Some(p) = policies.get(&sh.name) {
                sh.policy = Some(p.clone());
            }
        }
        e
    };
    let mut causes = a.causes;
    for c in &mut causes {
        if let Some(p) = policies.get(&c.name) {
            c.policy = Some(p.clone());
        }
    }
    let (written, decoded) = match read {
        Ok(n) => (kernel_store::write(dir, k, n.events, &a.explained, zero), n),
        Err(e) => (
            Err(crate::store::StoreError::Write {
                path: dir.join(kernel_trace::SPILL_DIR),
                source: e,
            }),
            kernel_trace::Decoded::default(),
        ),
    };
    k.remove_spill();
    let (stored, files, mut store_error) = match written {
        Ok((files, stored)) => (Some(stored), files, None),
        Err(e) => (None, Vec::new(), Some(e.to_string())),
    };
    if let Some(e) = &k.spill_error {
        store_error.get_or_insert_with(|| {
            format!(
                "the kernel's pages could not all be kept for after the run ({e}): what came after is neither attributed nor kept"
            )
        });
    }
    let all: Vec<attribute::Explained> = a.explained.into_iter().map(relative).collect();
    let mut largest = all.clone();
    largest.sort_by(|x, y| {
        (y.end_ns - y.start_ns)
            .cmp(&(x.end_ns - x.start_ns))
            .then(x.start_ns.cmp(&y.start_ns))
    });
    largest.truncate(MAX_LISTED_WINDOWS);
    Some(KernelCauses {
        events: decoded.events,
        lost_events: k.lost_total(),
        undecoded: decoded.undecoded,
        buffer_kb: k.buffer_kb,
        read_ns: k.read_ns,
        clock_offset_ns: k.clock_offset_ns,
        clock_uncertainty_ns: k.clock_uncertainty_ns,
        windows: a.windows,
        causes,
        handlers: a.handlers,
        latency: a.latency,
        largest,
        all,
        stored,
        files,
        store_error,
    })
}

/// One explanation per delay: each delay the sampler explains that the kernel trace also
/// attributed takes the trace's reading ([`explain::SpikeExplanation::traced`]), and the
/// sampler's inference stays beside it only where it agrees with the trace: "another task held
/// the CPU" where a task took most of the delay, "the wakeup came late" or "the CPU was taken
/// without a task switch" where an interrupt, a softirq or the late timer interrupt did. The
/// sampler's unusual counts stay, labelled as its window's. Without a trace, nothing changes.
pub fn reconcile(c: &mut Causes) {
    let (Some(k), Some(e)) = (c.kernel.as_ref(), c.explanation.as_mut()) else {
        return;
    };
    for s in &mut e.spikes {
        let (from, to) = (s.at_ns, s.at_ns.saturating_add(s.size_ns));
        let overlap =
            |w: &attribute::Explained| w.end_ns.min(to).saturating_sub(w.start_ns.max(from));
        let Some(w) = k
            .all
            .iter()
            .chain(k.largest.iter())
            .filter(|w| w.cpu == s.cpu && overlap(w) > 0)
            .max_by_key(|w| overlap(w))
        else {
            continue;
        };
        let Some(top) = w.shares.first() else {
            continue;
        };
        let parts: Vec<String> = w
            .shares
            .iter()
            .take(3)
            .map(|sh| format!("{} {}", sh.name, crate::units::Nanos(sh.ns)))
            .collect();
        s.traced = Some(parts.join(", "));
        let agrees = match s.inferred.as_ref().map(|i| i.kind.as_str()) {
            Some("held_by_task") => top.kind == attribute::CauseKind::Thread,
            Some("not_runnable") => matches!(
                top.kind,
                attribute::CauseKind::Irq
                    | attribute::CauseKind::Softirq
                    | attribute::CauseKind::Nmi
                    | attribute::CauseKind::Timer
            ),
            Some("held_by_siblings") => {
                top.kind == attribute::CauseKind::Thread || top.name == attribute::MEASURED
            }
            _ => true,
        };
        if !agrees {
            s.inferred = None;
        }
    }
}

/// The policies of the threads among `causes` that still exist, as `/proc` tells them
/// (`SCHED_FIFO 99`, `SCHED_OTHER nice 0`), by cause name (`comm:pid`). The trace gives only a
/// kernel priority, which does not tell FIFO from RR nor OTHER from BATCH.
fn policies(causes: &[attribute::Cause]) -> std::collections::HashMap<String, String> {
    causes
        .iter()
        .filter(|c| c.kind == attribute::CauseKind::Thread)
        .filter_map(|c| {
            let pid: i32 = c.name.rsplit_once(':')?.1.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((c.name.clone(), policy_of_stat(&stat)?))
        })
        .collect()
}

/// The policy and priority in a `/proc/PID/stat` line (fields 19 nice, 40 rt_priority, 41
/// policy, counted from 1; the command in field 2 may hold spaces and parentheses).
fn policy_of_stat(stat: &str) -> Option<String> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3.
    let nice: i64 = f.get(19 - 3)?.parse().ok()?;
    let rt: u64 = f.get(40 - 3)?.parse().ok()?;
    let policy: u64 = f.get(41 - 3)?.parse().ok()?;
    Some(match policy {
        0 => format!("SCHED_OTHER nice {nice}"),
        1 => format!("SCHED_FIFO {rt}"),
        2 => format!("SCHED_RR {rt}"),
        3 => format!("SCHED_BATCH nice {nice}"),
        5 => "SCHED_IDLE".to_string(),
        6 => "SCHED_DEADLINE".to_string(),
        p => format!("policy {p}"),
    })
}

/// The warnings of a kernel trace: events lost, events not kept in the run.
pub fn kernel_warnings(k: &KernelCauses) -> Vec<crate::warning::Warning> {
    use crate::warning::{Warning, WarningKind};
    let mut out = Vec::new();
    if k.lost_events > 0 {
        out.push(Warning::new(
            WarningKind::RecordsDropped,
            format!(
                "the kernel trace lost {} events (its buffer filled): spikes in those stretches are explained in part; raise --trace-buffer (now {} KiB per CPU)",
                k.lost_events, k.buffer_kb
            ),
        ));
    }
    if let Some(e) = &k.store_error {
        out.push(Warning::new(
            WarningKind::RecordsDropped,
            format!("the kernel events could not be kept in the run ({e}); the attribution above is complete, but report --perfetto has no kernel slices"),
        ));
    }
    if let Some(s) = k.stored.as_ref().filter(|s| !s.complete) {
        out.push(Warning::new(
            WarningKind::RecordsDropped,
            format!(
                "the run kept {} of {} kernel events, the windows around the {} largest of {} delays, within --trace-keep {} MiB; raise --trace-keep (or give all) to keep every event",
                s.events,
                s.of,
                s.windows_kept,
                s.windows,
                s.keep_bytes.unwrap_or(0) >> 20
            ),
        ));
    }
    out
}

/// Writes `attribution.csv`: every spike's shares, times in ns from the run's start; a late
/// wakeup's path (timer interrupt, wakeup, switch-in) where the trace holds it.
#[cfg(feature = "linux")]
pub fn write_attribution(
    dir: &crate::store::RunDir,
    k: &KernelCauses,
) -> Result<crate::store::FileEntry, crate::store::StoreError> {
    use std::fmt::Write;
    let mut out = String::from(
        "cpu,start_ns,end_ns,from_ns,kind,name,ns,why,policy,irq_ns,wakeup_ns,switch_ns\n",
    );
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for e in &k.all {
        let path = e.path.unwrap_or_default();
        for sh in &e.shares {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{},{}",
                e.cpu,
                e.start_ns,
                e.end_ns,
                e.from_ns,
                sh.kind.as_str(),
                csv_quote(&sh.name),
                sh.ns,
                sh.why.map(|w| w.as_str()).unwrap_or_default(),
                csv_quote(sh.policy.as_deref().unwrap_or_default()),
                opt(path.irq_ns),
                opt(path.wakeup_ns),
                opt(path.switch_ns),
            );
        }
    }
    dir.write_file(
        "attribution.csv",
        out.as_bytes(),
        "sandglass-attribution-csv/2",
        "per spike (ns from the run's start; from_ns: where the CPU's busy stretch began) and what ran on its CPU then, net of nesting; for a late wakeup, why a thread could delay it, its policy, and when the timer interrupt came, the thread woke and was switched in",
    )
}

/// A CSV field in double quotes, its own quotes doubled.
#[cfg(feature = "linux")]
fn csv_quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The most spikes explained one by one.
pub const MAX_EXPLAINED: usize = 20;

/// Merges a CPU's late samples `(time_ns, delay_ns)` (in time order) into spikes: a sample that
/// starts while the previous spike is still under way (a stall that delayed several releases)
/// belongs to it, and the spike keeps the largest delay. Only delays of at least `threshold_ns`
/// count.
pub fn spikes_of(samples: impl Iterator<Item = (i64, i64)>, threshold_ns: u64) -> Vec<Spike> {
    let mut out: Vec<Spike> = Vec::new();
    let mut busy_until = i64::MIN;
    for (at, delay) in samples {
        if delay < threshold_ns as i64 || at < 0 {
            continue;
        }
        match out.last_mut() {
            Some(last) if at < busy_until => {
                last.size_ns = last.size_ns.max(delay as u64);
                busy_until = busy_until.max(at + delay);
            }
            _ => {
                out.push(Spike {
                    at_ns: at as u64,
                    size_ns: delay as u64,
                });
                busy_until = at + delay;
            }
        }
    }
    out
}

/// The causes of a run from its spike logs: spikes of at least `threshold_ns` are counted and
/// searched for periodic trains, and the sampler's digest (when it ran) explains the largest;
/// `thread_of` maps a CPU to the index of its measuring thread.
pub fn analyze(
    digest: Option<&Digest>,
    sample_hz: u32,
    threshold_ns: u64,
    logs: &[spikes::SpikeLog],
    thread_of: &dyn Fn(usize) -> Option<usize>,
    waits: explain::Waits,
) -> Causes {
    let trains = logs
        .iter()
        .flat_map(|log| {
            let cpu = log.cpu();
            find_trains(&log.kept(threshold_ns), &TrainConfig::default())
                .into_iter()
                .map(move |train| CpuTrain { cpu, train })
        })
        .collect();
    let explanation = digest.map(|d| {
        let mut e = explain(d, MAX_EXPLAINED, thread_of, waits);
        e.spikes.retain(|s| s.size_ns >= threshold_ns);
        e
    });
    Causes {
        sample_hz: if digest.is_some() { sample_hz } else { 0 },
        spike_threshold_ns: threshold_ns,
        spikes: logs.iter().map(|l| l.count_at_least(threshold_ns)).sum(),
        explanation,
        trains,
        kernel: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_delay_is_named_from_the_kernel_then_from_proc() {
        let mut c: Causes = serde_json::from_value(serde_json::json!({
            "sample_hz": 10, "spike_threshold_ns": 100000, "spikes": 0,
            "explanation": null, "trains": []
        }))
        .unwrap();
        assert_eq!(largest_cause(&c), None);
        c.explanation = Some(
            serde_json::from_value(serde_json::json!({
                "intervals": 10, "totals": [], "unexplained_spikes": 0,
                "spikes": [{"cpu": 1, "at_ns": 5, "size_ns": 2_100_000,
                    "interval_start_ns": 0, "interval_end_ns": 100_000_000,
                    "abnormal": [{"kind": "steal", "name": "hypervisor (steal)", "count": 10, "median": 0}]}]
            }))
            .unwrap(),
        );
        assert_eq!(
            largest_cause(&c).as_deref(),
            Some("2.1 ms on CPU 1: hypervisor (steal) 10 ticks (usually 0)")
        );
        c.kernel = Some(
            serde_json::from_value(serde_json::json!({
                "events": 1, "lost_events": 0, "undecoded": 0, "buffer_kb": 64, "read_ns": 0,
                "clock_offset_ns": null, "clock_uncertainty_ns": null, "windows": 1,
                "causes": [], "handlers": [],
                "largest": [{"cpu": 1, "start_ns": 1_000_000, "end_ns": 2_970_000, "from_ns": 1_000_000,
                    "shares": [{"kind": "thread", "name": "burst:42", "ns": 1_870_000,
                        "why": "priority", "policy": "SCHED_FIFO 99"}]}]
            }))
            .unwrap(),
        );
        assert_eq!(
            largest_cause(&c).as_deref(),
            Some("1.97 ms on CPU 1: burst:42 (SCHED_FIFO 99, higher or equal priority) 1.87 ms")
        );
    }

    /// A traced timer delay that both readings cover: the sampler's window says the thread
    /// waited runnable only 947 µs (so "the wakeup came late"), the trace names the disk load's
    /// thread for 3.48 of 3.55 ms. The trace decides; the sampler's contradicting sentence goes,
    /// its unusual counts stay as the window's. A delay whose sampler reading agrees with the
    /// trace keeps it beside the trace.
    #[test]
    fn the_trace_decides_and_the_sampler_never_contradicts_it() {
        let mut c: Causes = serde_json::from_value(serde_json::json!({
            "sample_hz": 10, "spike_threshold_ns": 100000, "spikes": 2, "trains": [],
            "explanation": {
                "intervals": 10, "totals": [], "unexplained_spikes": 0,
                "spikes": [
                    {"cpu": 1, "at_ns": 2_345_000_000u64, "size_ns": 3_550_000,
                     "interval_start_ns": 2_300_000_000u64, "interval_end_ns": 2_400_000_000u64,
                     "abnormal": [{"kind": "irq", "name": "36 (virtio1-req.0)", "count": 40, "median": 3}],
                     "inferred": {"kind": "not_runnable", "wait_ns": 947_391,
                        "text": "the wakeup itself came late (the thread waited runnable only 947.391 µs in the 100 ms window around it): its timer interrupt was late, with interrupts off or the CPU stopped by the hypervisor"}},
                    {"cpu": 1, "at_ns": 2_360_000_000u64, "size_ns": 800_000,
                     "interval_start_ns": 2_300_000_000u64, "interval_end_ns": 2_400_000_000u64,
                     "abnormal": [],
                     "inferred": {"kind": "not_runnable", "wait_ns": 947_391,
                        "text": "the wakeup itself came late (the thread waited runnable only 947.391 µs in the 100 ms window around it): its timer interrupt was late, with interrupts off or the CPU stopped by the hypervisor"}}
                ]
            }
        }))
        .unwrap();
        let window = |start: u64, end: u64, kind: &str, name: &str, ns: u64| {
            serde_json::json!({"cpu": 1, "start_ns": start, "end_ns": end, "from_ns": start,
                "shares": [{"kind": kind, "name": name, "ns": ns}]})
        };
        let k: KernelCauses = serde_json::from_value(serde_json::json!({
            "events": 1, "lost_events": 0, "undecoded": 0, "buffer_kb": 64, "read_ns": 0,
            "clock_offset_ns": null, "clock_uncertainty_ns": null, "windows": 2,
            "causes": [], "handlers": [],
            "largest": [
                window(2_345_000_003, 2_348_550_003, "thread", "load-disk-0:812", 3_480_000),
                window(2_360_000_001, 2_360_800_001, "timer", attribute::TIMER_LATE_BUSY, 790_000)
            ]
        }))
        .unwrap();
        c.kernel = Some(KernelCauses {
            all: k.largest.clone(),
            ..k
        });
        reconcile(&mut c);
        let e = c.explanation.as_ref().unwrap();
        let first = e.spikes[0].text();
        assert_eq!(
            first,
            "traced: load-disk-0:812 3.48 ms; the sampler: unusual in the 100 ms window around it: irq 36 (virtio1-req.0) 40 (usually 3)"
        );
        assert_eq!(e.spikes[0].inferred, None);
        let second = e.spikes[1].text();
        assert!(
            second.starts_with(&format!(
                "traced: {} 790 µs; the sampler: the wakeup itself came late",
                attribute::TIMER_LATE_BUSY
            )),
            "{second}"
        );
        // Without a trace, the sampler's reading is all there is.
        let mut bare = c.clone();
        bare.kernel = None;
        for s in &mut bare.explanation.as_mut().unwrap().spikes {
            s.traced = None;
        }
        let before = bare.clone();
        reconcile(&mut bare);
        assert_eq!(bare, before);
    }

    #[test]
    fn policies_are_read_from_stat() {
        let fifo = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 -51 0 1 0 1000 1000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 50 1 0 0 0";
        assert_eq!(policy_of_stat(fifo).as_deref(), Some("SCHED_FIFO 50"));
        let other = "7 (stress-ng-cpu) R 1 7 7 0 -1 0 0 0 0 0 5 3 0 0 20 0 1 0 1 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(policy_of_stat(other).as_deref(), Some("SCHED_OTHER nice 0"));
        assert_eq!(policy_of_stat("garbage"), None);
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(policy_of_stat(&me).is_some(), "{me}");
    }

    #[test]
    fn a_stall_that_delays_several_releases_is_one_spike() {
        // 1 ms releases; a 2.5 ms stall from 10 ms makes releases at 10, 11 and 12 ms late by
        // 2.5, 1.5 and 0.5 ms; a separate 300 µs delay at 50 ms.
        let samples = [
            (9_000_000, 20_000),
            (10_000_000, 2_500_000),
            (11_000_000, 1_500_000),
            (12_000_000, 500_000),
            (13_000_000, 20_000),
            (50_000_000, 300_000),
        ];
        let s = spikes_of(samples.into_iter(), 100_000);
        assert_eq!(
            s,
            [
                Spike {
                    at_ns: 10_000_000,
                    size_ns: 2_500_000
                },
                Spike {
                    at_ns: 50_000_000,
                    size_ns: 300_000
                }
            ]
        );
    }
}
