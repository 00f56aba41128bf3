//! The kernel events of a `--trace` run, kept in the run as the Parquet table `kernel-NNNN.parquet`
//! ([`tables::KERNEL`]), one row per event, so that a report, a Perfetto export or a query
//! (DuckDB: `SELECT * FROM 'RUN/kernel-*.parquet'`) can see what the kernel did around any delay
//! long after the run.
//!
//! **What is kept.** All of the trace while it fits in `--trace-keep` (bytes of the kernel's own
//! records, 256 MiB by default). Beyond that, the windows around the delays, largest first,
//! each from [`BEFORE_NS`] before the start of the CPU's busy stretch that held it to
//! [`AFTER_NS`] after its end, as long as they fit; the windows of the [`ALWAYS_KEPT`] largest
//! delays are kept whatever their size. What was kept, and of how many, is in the run's
//! summary (`causes.kernel.stored`).
//!
//! **How.** A run keeps the kernel's pages in `RUN/kernel.tmp/` as it reads them (see
//! [`super::tracefs::Session::keep_in`]). After the run, [`write`] decodes them into this table:
//! in one pass when all of them fit, else in two, one to count the events of each delay's
//! window and one to copy the windows chosen. Each CPU's rows are in time order, one CPU after
//! the other.
//!
//! **Columns.** Every event maps to one row without loss (see [`row_of`] and [`event_of`]):
//! `mono_ns` (CLOCK_MONOTONIC, the clock of the run's timers), `cpu`, `pid` (the task current
//! when the event was recorded, −1 unknown), `event` (the kernel's event name), and per event:
//!
//! | event | `comm` | `id` | `prio` | `prev_*` | `addr` | `function` | `value` | `value2` |
//! |---|---|---|---|---|---|---|---|---|
//! | `sched_switch` | next comm | next pid | next prio | prev comm, pid, prio, state | | | | |
//! | `sched_wakeup`, `sched_waking` | comm | pid | | | | | target CPU | |
//! | `irq_handler_entry` / `_exit` | irq name (entry) | irq | | | | | | |
//! | `softirq_entry` / `_exit` / `_raise` | softirq name | vector | | | | | | |
//! | `VECTOR_entry` / `_exit` (x86) | vector name | vector | | | | | | |
//! | `nmi_handler` | | | | | handler | | duration ns | |
//! | `hrtimer_start` | | | | | hrtimer | function | softexpires | expires |
//! | `hrtimer_expire_entry` | | | | | hrtimer | function | now | |
//! | `hrtimer_expire_exit` | | | | | | | | |
//! | `workqueue_execute_start` / `_end` | | | | | | function | | |
//! | `print` (a marker) | its text | | | | | | | |
//! | `other` | | event id | | | | | | |
//!
//! Empty cells are "" for text and 0 for numbers (−1 for `id`, `prio` and `prev_*` numbers).

use super::attribute::Explained;
use super::kernel_trace::KernelTrace;
use super::tracefs_raw::{Event, Traced};
use crate::store::table::{tables, Batch, Limits, TableReader, TableWriter};
use crate::store::{FileEntry, ReadError, RunReader, StoreError};
use parquet::data_type::ByteArray;
use serde::{Deserialize, Serialize};

/// A delay's window starts this long before the busy stretch that held it (the timer's
/// arming, the interrupt that came before).
pub const BEFORE_NS: u64 = 1_000_000;
/// A delay's window ends this long after the delay.
pub const AFTER_NS: u64 = 200_000;
/// The windows of this many largest delays are kept even beyond `--trace-keep`.
pub const ALWAYS_KEPT: usize = super::MAX_LISTED_WINDOWS;

/// What of the trace a run kept.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Stored {
    /// Events written to `kernel-*.parquet`, of all the events decoded.
    pub events: u64,
    pub of: u64,
    /// The budget (`--trace-keep`), in bytes of the kernel's records; null: no limit.
    pub keep_bytes: Option<u64>,
    /// Whether every event was kept; if not, the windows of the largest delays were.
    pub complete: bool,
    /// Delays whose whole window was kept, of the delays explained.
    pub windows_kept: u64,
    pub windows: u64,
    /// The size of the kernel's records read (what `--trace-keep` counts), and of the Parquet
    /// files written.
    #[serde(default)]
    pub trace_bytes: u64,
    pub file_bytes: u64,
}

/// A delay's window on its CPU: from [`BEFORE_NS`] before its busy stretch to [`AFTER_NS`]
/// after its end, CLOCK_MONOTONIC.
fn window(d: &Explained) -> (u64, u64) {
    (
        d.from_ns.min(d.start_ns).saturating_sub(BEFORE_NS),
        d.end_ns.saturating_add(AFTER_NS),
    )
}

/// Which delays keep their windows, given the events in each window: largest first while
/// they fit in `max_events`, and the [`ALWAYS_KEPT`] largest in any case.
fn choose(delays: &[Explained], counts: &[u64], max_events: u64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..delays.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&delays[a], &delays[b]);
        (b.end_ns - b.start_ns)
            .cmp(&(a.end_ns - a.start_ns))
            .then(a.start_ns.cmp(&b.start_ns))
    });
    let mut chosen = vec![false; delays.len()];
    let mut kept = 0u64;
    for (rank, &i) in order.iter().enumerate() {
        if rank >= ALWAYS_KEPT && kept + counts[i] > max_events {
            continue;
        }
        chosen[i] = true;
        kept += counts[i];
    }
    chosen
}

/// Per CPU, sorted windows, swept by each CPU's events in time order.
struct Sweep {
    /// Per CPU: (from, to, delay index), by `from`.
    windows: std::collections::HashMap<usize, Vec<(u64, u64, usize)>>,
    /// Per CPU: the next window to open, and the open ones.
    at: std::collections::HashMap<usize, (usize, Vec<usize>)>,
}

impl Sweep {
    fn new<'a>(delays: impl Iterator<Item = (usize, &'a Explained)>) -> Sweep {
        let mut windows: std::collections::HashMap<usize, Vec<(u64, u64, usize)>> =
            Default::default();
        for (i, d) in delays {
            let (a, z) = window(d);
            windows.entry(d.cpu).or_default().push((a, z, i));
        }
        for v in windows.values_mut() {
            v.sort_unstable();
        }
        Sweep {
            windows,
            at: Default::default(),
        }
    }

    /// Calls `f` with the index of every window that holds `e`.
    fn hits(&mut self, e: &Traced, mut f: impl FnMut(usize)) {
        let Some(ws) = self.windows.get(&e.cpu) else {
            return;
        };
        let (next, open) = self.at.entry(e.cpu).or_default();
        while *next < ws.len() && ws[*next].0 <= e.ts_ns {
            open.push(*next);
            *next += 1;
        }
        open.retain(|&w| ws[w].1 >= e.ts_ns);
        for &w in open.iter() {
            f(ws[w].2);
        }
    }
}

fn read_error(dir: &std::path::Path, e: std::io::Error) -> StoreError {
    StoreError::Write {
        path: dir.join(super::kernel_trace::SPILL_DIR),
        source: e,
    }
}

/// Keeps `total` events of `k` (as [`KernelTrace::each_event`] gives them) in the run directory
/// `dir`: all of them when they fit in `--trace-keep`, else the windows of the largest `delays`
/// (CLOCK_MONOTONIC; `zero` is the run's time zero on that clock), chosen in one pass over the
/// trace and copied in another. Each CPU's rows are in time order.
pub fn write(
    dir: &std::path::Path,
    k: &KernelTrace,
    total: u64,
    delays: &[Explained],
    zero: u64,
) -> Result<(Vec<FileEntry>, Stored), StoreError> {
    let per_event = (k.bytes / total.max(1)).max(1);
    let max_events = if k.keep_bytes == u64::MAX {
        u64::MAX
    } else {
        k.keep_bytes / per_event
    };
    let mut stored = Stored {
        events: 0,
        of: total,
        keep_bytes: (k.keep_bytes != u64::MAX).then_some(k.keep_bytes),
        complete: false,
        windows_kept: 0,
        windows: delays.len() as u64,
        trace_bytes: k.bytes,
        file_bytes: 0,
    };
    let all = total <= max_events;
    let chosen = if all {
        vec![true; delays.len()]
    } else {
        let mut counts = vec![0u64; delays.len()];
        let mut sweep = Sweep::new(delays.iter().enumerate());
        k.each_event(|e| sweep.hits(&e, |i| counts[i] += 1))
            .map_err(|e| read_error(dir, e))?;
        choose(delays, &counts, max_events)
    };
    stored.windows_kept = chosen.iter().filter(|c| **c).count() as u64;
    let mut sweep = Sweep::new(delays.iter().enumerate().filter(|(i, _)| chosen[*i]));
    let mut w = TableWriter::create(dir, &tables::KERNEL, Limits::default())?;
    let mut failed: Option<StoreError> = None;
    let mut last = 0;
    k.each_event(|e| {
        let mut keep = all;
        if !keep {
            sweep.hits(&e, |_| keep = true);
        }
        if !keep || failed.is_some() {
            return;
        }
        row_of(w.row(), &e);
        last = e.ts_ns.saturating_sub(zero);
        match w.end_row(last) {
            Ok(()) => stored.events += 1,
            Err(err) => failed = Some(err),
        }
    })
    .map_err(|e| read_error(dir, e))?;
    if let Some(e) = failed {
        return Err(e);
    }
    stored.complete = all && k.spill_error.is_none() && stored.events == total;
    let files = w.finish(last)?;
    stored.file_bytes = files.iter().map(|f| f.bytes).sum();
    Ok((files, stored))
}

/// Pushes `e` as one row of [`tables::KERNEL`].
pub fn row_of(b: &mut Batch, e: &Traced) {
    let mut r = Row {
        event: String::new(),
        comm: String::new(),
        id: -1,
        prio: -1,
        prev_comm: String::new(),
        prev_id: -1,
        prev_prio: -1,
        prev_state: 0,
        addr: 0,
        function: 0,
        value: 0,
        value2: 0,
    };
    let name = |s: &str| s.to_string();
    match &e.event {
        Event::Switch {
            prev_pid,
            prev_comm,
            prev_prio,
            prev_state,
            next_pid,
            next_comm,
            next_prio,
        } => {
            r.event = name("sched_switch");
            r.comm = next_comm.clone();
            r.id = *next_pid;
            r.prio = *next_prio;
            r.prev_comm = prev_comm.clone();
            r.prev_id = *prev_pid;
            r.prev_prio = *prev_prio;
            r.prev_state = *prev_state;
        }
        Event::Wakeup {
            waking,
            pid,
            comm,
            target_cpu,
        } => {
            r.event = name(if *waking {
                "sched_waking"
            } else {
                "sched_wakeup"
            });
            r.comm = comm.clone();
            r.id = *pid;
            r.value = i64::from(*target_cpu);
        }
        Event::IrqEntry { irq, name: n } => {
            r.event = name("irq_handler_entry");
            r.comm = n.clone();
            r.id = *irq;
        }
        Event::IrqExit { irq } => {
            r.event = name("irq_handler_exit");
            r.id = *irq;
        }
        Event::SoftirqEntry { vec } | Event::SoftirqExit { vec } | Event::SoftirqRaise { vec } => {
            r.event = name(match &e.event {
                Event::SoftirqEntry { .. } => "softirq_entry",
                Event::SoftirqExit { .. } => "softirq_exit",
                _ => "softirq_raise",
            });
            r.comm = super::attribute::SOFTIRQ_NAMES
                .get(*vec as usize)
                .unwrap_or(&"")
                .to_string();
            r.id = *vec as i32;
        }
        Event::VectorEntry { name: n, vector } => {
            r.event = format!("{n}_entry");
            r.comm = n.clone();
            r.id = *vector;
        }
        Event::VectorExit { name: n, vector } => {
            r.event = format!("{n}_exit");
            r.comm = n.clone();
            r.id = *vector;
        }
        Event::Nmi { handler, delta_ns } => {
            r.event = name("nmi_handler");
            r.addr = *handler as i64;
            r.value = *delta_ns;
        }
        Event::HrtimerStart {
            hrtimer,
            function,
            expires_ns,
            softexpires_ns,
        } => {
            r.event = name("hrtimer_start");
            r.addr = *hrtimer as i64;
            r.function = *function as i64;
            r.value = *softexpires_ns;
            r.value2 = *expires_ns;
        }
        Event::HrtimerEntry {
            hrtimer,
            function,
            now_ns,
        } => {
            r.event = name("hrtimer_expire_entry");
            r.addr = *hrtimer as i64;
            r.function = *function as i64;
            r.value = *now_ns;
        }
        Event::HrtimerExit => r.event = name("hrtimer_expire_exit"),
        Event::WorkStart { function } => {
            r.event = name("workqueue_execute_start");
            r.function = *function as i64;
        }
        Event::WorkEnd { function } => {
            r.event = name("workqueue_execute_end");
            r.function = *function as i64;
        }
        Event::Marker { text } => {
            r.event = name("print");
            r.comm = text.clone();
        }
        Event::Other { id } => {
            r.event = name("other");
            r.id = i32::from(*id);
        }
    }
    b.push_i64(0, e.ts_ns as i64);
    b.push_i32(1, e.cpu as i32);
    b.push_i32(2, e.pid.unwrap_or(-1));
    b.push_text(3, &ByteArray::from(r.event.as_str()));
    b.push_text(4, &ByteArray::from(r.comm.as_str()));
    b.push_i32(5, r.id);
    b.push_i32(6, r.prio);
    b.push_text(7, &ByteArray::from(r.prev_comm.as_str()));
    b.push_i32(8, r.prev_id);
    b.push_i32(9, r.prev_prio);
    b.push_i64(10, r.prev_state);
    b.push_i64(11, r.addr);
    b.push_i64(12, r.function);
    b.push_i64(13, r.value);
    b.push_i64(14, r.value2);
}

/// One row's fields.
struct Row {
    event: String,
    comm: String,
    id: i32,
    prio: i32,
    prev_comm: String,
    prev_id: i32,
    prev_prio: i32,
    prev_state: i64,
    addr: i64,
    function: i64,
    value: i64,
    value2: i64,
}

/// The event of one row (the inverse of [`row_of`]).
fn event_of(r: &Row) -> Event {
    let vec = || r.id.max(0) as u32;
    match r.event.as_str() {
        "sched_switch" => Event::Switch {
            prev_pid: r.prev_id,
            prev_comm: r.prev_comm.clone(),
            prev_prio: r.prev_prio,
            prev_state: r.prev_state,
            next_pid: r.id,
            next_comm: r.comm.clone(),
            next_prio: r.prio,
        },
        "sched_wakeup" | "sched_waking" => Event::Wakeup {
            waking: r.event == "sched_waking",
            pid: r.id,
            comm: r.comm.clone(),
            target_cpu: r.value as i32,
        },
        "irq_handler_entry" => Event::IrqEntry {
            irq: r.id,
            name: r.comm.clone(),
        },
        "irq_handler_exit" => Event::IrqExit { irq: r.id },
        "softirq_entry" => Event::SoftirqEntry { vec: vec() },
        "softirq_exit" => Event::SoftirqExit { vec: vec() },
        "softirq_raise" => Event::SoftirqRaise { vec: vec() },
        "nmi_handler" => Event::Nmi {
            handler: r.addr as u64,
            delta_ns: r.value,
        },
        "hrtimer_start" => Event::HrtimerStart {
            hrtimer: r.addr as u64,
            function: r.function as u64,
            expires_ns: r.value2,
            softexpires_ns: r.value,
        },
        "hrtimer_expire_entry" => Event::HrtimerEntry {
            hrtimer: r.addr as u64,
            function: r.function as u64,
            now_ns: r.value,
        },
        "hrtimer_expire_exit" => Event::HrtimerExit,
        "workqueue_execute_start" => Event::WorkStart {
            function: r.function as u64,
        },
        "workqueue_execute_end" => Event::WorkEnd {
            function: r.function as u64,
        },
        "print" => Event::Marker {
            text: r.comm.clone(),
        },
        e if e.ends_with("_entry") => Event::VectorEntry {
            name: r.comm.clone(),
            vector: r.id,
        },
        e if e.ends_with("_exit") => Event::VectorExit {
            name: r.comm.clone(),
            vector: r.id,
        },
        _ => Event::Other {
            id: u16::try_from(r.id).unwrap_or(0),
        },
    }
}

/// Whether `run` kept kernel events.
pub fn has(run: &RunReader) -> bool {
    TableReader::open(run, &tables::KERNEL).is_some()
}

/// Reads the kept events of `run` (none when it has no kernel table), each CPU's in time order, calling
/// `each` with every one whose CLOCK_MONOTONIC time is in `from..=to`: a reader that streams.
pub fn scan(
    run: &RunReader,
    from: u64,
    to: u64,
    each: impl FnMut(Traced) -> Result<(), ReadError>,
) -> Result<(), ReadError> {
    scan_files(run.path(), &run.manifest.files, from, to, each)
}

/// [`scan`] over the files `files` of the run directory `dir`.
pub fn scan_files(
    dir: &std::path::Path,
    files: &[FileEntry],
    from: u64,
    to: u64,
    mut each: impl FnMut(Traced) -> Result<(), ReadError>,
) -> Result<(), ReadError> {
    let Some(t) = TableReader::of_files(dir, files, &tables::KERNEL) else {
        return Ok(());
    };
    let cols: Vec<&str> = tables::KERNEL.columns.iter().map(|c| c.name).collect();
    t.scan::<ReadError>(&cols, |b| {
        let ts = b.i64s("mono_ns")?;
        let (cpu, pid) = (b.i32s("cpu")?, b.i32s("pid")?);
        let (event, comm, prev_comm) = (b.texts("event")?, b.texts("comm")?, b.texts("prev_comm")?);
        let (id, prio, prev_id, prev_prio) = (
            b.i32s("id")?,
            b.i32s("prio")?,
            b.i32s("prev_id")?,
            b.i32s("prev_prio")?,
        );
        let (prev_state, addr, function, value, value2) = (
            b.i64s("prev_state")?,
            b.i64s("addr")?,
            b.i64s("function")?,
            b.i64s("value")?,
            b.i64s("value2")?,
        );
        let text = |v: &ByteArray| String::from_utf8_lossy(v.data()).into_owned();
        for i in 0..b.len() {
            let at = ts[i].max(0) as u64;
            if at < from || at > to {
                continue;
            }
            let r = Row {
                event: text(&event[i]),
                comm: text(&comm[i]),
                id: id[i],
                prio: prio[i],
                prev_comm: text(&prev_comm[i]),
                prev_id: prev_id[i],
                prev_prio: prev_prio[i],
                prev_state: prev_state[i],
                addr: addr[i],
                function: function[i],
                value: value[i],
                value2: value2[i],
            };
            each(Traced {
                ts_ns: at,
                cpu: cpu[i].max(0) as usize,
                pid: (pid[i] >= 0).then_some(pid[i]),
                event: event_of(&r),
            })?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts: u64, cpu: usize, event: Event) -> Traced {
        Traced {
            ts_ns: ts,
            cpu,
            pid: Some(7),
            event,
        }
    }

    fn every_kind() -> Vec<Traced> {
        let events = vec![
            Event::Switch {
                prev_pid: 1,
                prev_comm: "a b".into(),
                prev_prio: 120,
                prev_state: 2,
                next_pid: 9,
                next_comm: "sg-timer-0".into(),
                next_prio: 4,
            },
            Event::Wakeup {
                waking: false,
                pid: 9,
                comm: "sg-timer-0".into(),
                target_cpu: 1,
            },
            Event::Wakeup {
                waking: true,
                pid: 9,
                comm: "sg-timer-0".into(),
                target_cpu: 1,
            },
            Event::IrqEntry {
                irq: 24,
                name: "virtio0-input.0".into(),
            },
            Event::IrqExit { irq: 24 },
            Event::SoftirqEntry { vec: 3 },
            Event::SoftirqExit { vec: 3 },
            Event::SoftirqRaise { vec: 9 },
            Event::VectorEntry {
                name: "local_timer".into(),
                vector: 236,
            },
            Event::VectorExit {
                name: "local_timer".into(),
                vector: 236,
            },
            Event::Nmi {
                handler: 0xffff_ffff_8100_0000,
                delta_ns: 1234,
            },
            Event::HrtimerStart {
                hrtimer: 0xffff_c900_0000_1000,
                function: 0xffff_ffff_8110_0000,
                expires_ns: 5_000_050_000,
                softexpires_ns: 5_000_000_000,
            },
            Event::HrtimerEntry {
                hrtimer: 0xffff_c900_0000_1000,
                function: 0xffff_ffff_8110_0000,
                now_ns: 5_000_010_000,
            },
            Event::HrtimerExit,
            Event::WorkStart { function: 77 },
            Event::WorkEnd { function: 77 },
            Event::Marker {
                text: "sandglass: a delay".into(),
            },
            Event::Other { id: 321 },
        ];
        events
            .into_iter()
            .enumerate()
            .map(|(i, e)| ev(1_000 + i as u64 * 10, 1, e))
            .collect()
    }

    #[test]
    fn every_event_kind_survives_the_table() {
        let tmp = tempfile::tempdir().unwrap();
        let events = every_kind();
        let k = KernelTrace {
            cpus: vec![1],
            events: events.clone(),
            bytes: 40 * events.len() as u64,
            keep_bytes: u64::MAX,
            ..KernelTrace::default()
        };
        let (files, stored) = write(tmp.path(), &k, events.len() as u64, &[], 0).unwrap();
        assert!(stored.complete && stored.events == events.len() as u64);
        let mut back = Vec::new();
        scan_files(tmp.path(), &files, 0, u64::MAX, |e| {
            back.push(e);
            Ok(())
        })
        .unwrap();
        assert_eq!(back, events);
        let mut some = 0;
        scan_files(tmp.path(), &files, 1_020, 1_040, |_| {
            some += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(some, 3);
    }

    fn delay(cpu: usize, start: u64, end: u64) -> Explained {
        Explained {
            cpu,
            start_ns: start,
            end_ns: end,
            from_ns: start,
            shares: Vec::new(),
            path: None,
        }
    }

    /// The events `write` kept of `events` for `delays` within `max_events`, and how many
    /// delays kept their window.
    fn kept(events: &[Traced], delays: &[Explained], max_events: u64) -> (Vec<Traced>, u64) {
        let tmp = tempfile::tempdir().unwrap();
        let k = KernelTrace {
            cpus: vec![0, 1],
            events: events.to_vec(),
            bytes: 10 * events.len() as u64,
            keep_bytes: 10 * max_events,
            ..KernelTrace::default()
        };
        let (files, stored) = write(tmp.path(), &k, events.len() as u64, delays, 0).unwrap();
        let mut back = Vec::new();
        scan_files(tmp.path(), &files, 0, u64::MAX, |e| {
            back.push(e);
            Ok(())
        })
        .unwrap();
        assert_eq!(stored.events, back.len() as u64);
        assert_eq!(stored.complete, back.len() == events.len());
        (back, stored.windows_kept)
    }

    #[test]
    fn over_the_budget_the_largest_delays_keep_their_windows() {
        // One event every 10 µs for 100 ms on CPUs 0 and 1: 20,000 events.
        let events: Vec<Traced> = (0..2)
            .flat_map(|cpu| (0..10_000u64).map(move |i| ev(i * 10_000, cpu, Event::HrtimerExit)))
            .collect();
        let (all, whole) = kept(&events, &[delay(1, 50_000_000, 50_100_000)], 20_000);
        assert!(all.len() == events.len() && whole == 1);
        // Windows of 1.2 ms + the delay: a 5 ms delay's window holds 621 events.
        let big = delay(1, 50_000_000, 55_000_000);
        let small: Vec<Explained> = (0..30)
            .map(|i| {
                delay(
                    0,
                    1_000_000 + i * 3_000_000,
                    1_000_000 + i * 3_000_000 + 100_000,
                )
            })
            .collect();
        let mut delays = small.clone();
        delays.push(big.clone());
        let (kept, whole) = kept(&events, &delays, 700);
        // The largest is kept whole, on its CPU only.
        let on1: Vec<u64> = kept
            .iter()
            .filter(|e| e.cpu == 1)
            .map(|e| e.ts_ns)
            .collect();
        assert_eq!(on1.first(), Some(&49_000_000));
        assert_eq!(on1.last(), Some(&55_200_000));
        assert_eq!(on1.len(), 621);
        // The 20 largest are kept whatever the budget: 19 small ones beside the big one, each
        // 131 events; the rest do not fit.
        assert_eq!(whole, ALWAYS_KEPT as u64);
        assert_eq!(kept.len(), 621 + 19 * 131);
        // Among equals, the earliest come first.
        assert!(kept.iter().any(|e| e.cpu == 0 && e.ts_ns == 1_000_000));
        assert!(!kept.iter().any(|e| e.cpu == 0 && e.ts_ns == 88_000_000));
        // Each CPU's events stay in time order.
        for cpu in 0..2 {
            let ts: Vec<u64> = kept
                .iter()
                .filter(|e| e.cpu == cpu)
                .map(|e| e.ts_ns)
                .collect();
            assert!(ts.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
