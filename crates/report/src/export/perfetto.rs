//! A run as Chrome trace-event JSON, the format ui.perfetto.dev and chrome://tracing open.
//!
//! `{"traceEvents": [...], "displayTimeUnit": "ns"}` with `ts` and `dur` in microseconds (the
//! format's unit) as decimal numbers with nanosecond precision. Tracks:
//!
//! - process 1, the run: one thread track per Hourglass thread (`tid` = the thread's index),
//!   with an `X` (complete) event for each interval it held a CPU and an instant event for each
//!   missed deadline;
//! - process 2, `CPUs`: one track per CPU (`tid` = the CPU), with the same intervals named
//!   after their thread, a timer run's wakeups (an `X` event from the release to the wakeup,
//!   its lateness) and missed releases (instant events), a noise run's interruptions, and the
//!   kernel events of the run's optional `kernel_events.csv`.
//!
//! Every timestamp is CLOCK_MONOTONIC, the clock of timers and of tracefs's `mono` trace clock:
//! counter values are converted with the run's calibration (`start.monotonic` anchor and
//! `monotonic_frequency_hz`), and times in ns from the run's start are first turned back into
//! counter ticks at `frequency_hz`. Kernel events recorded on CLOCK_MONOTONIC therefore line up
//! with the trace without any offset (tested).

use super::{cpu_threads, kernel_events, write_atomic, wrong_kind, ExportError};
use sandglass::causes::tracefs_raw::Traced;
use sandglass::store::table::{tables, TableReader};
use sandglass::store::RunReader;
use sandglass::RunKind;
use std::io::{self, Write};
use std::path::Path;

/// The process of the run's threads.
pub const RUN_PID: u32 = 1;
/// The process whose threads are the CPUs.
pub const CPU_PID: u32 = 2;

pub use sandglass::clock::ClockMap;

/// The clock of `run`, from its manifest's `clock` section.
pub fn clock_map(run: &RunReader) -> Result<ClockMap, ExportError> {
    let c = &run.manifest.clock;
    let f = |path: &[&str]| {
        let mut v = c;
        for p in path {
            v = v.get(*p)?;
        }
        v.as_f64()
    };
    let u = |path: &[&str]| {
        let mut v = c;
        for p in path {
            v = v.get(*p)?;
        }
        v.as_u64()
    };
    let map = (|| {
        Some(ClockMap {
            frequency_hz: f(&["calibration", "frequency_hz"])?,
            monotonic_frequency_hz: f(&["calibration", "monotonic_frequency_hz"])?,
            anchor_counter: u(&["calibration", "start", "monotonic", "counter"])?,
            anchor_monotonic_ns: u(&["calibration", "start", "monotonic", "clock_ns"])?,
            run_start_counter: u(&["run_start_counter"])?,
        })
    })()
    .filter(|m| m.frequency_hz > 0.0 && m.monotonic_frequency_hz > 0.0);
    map.ok_or_else(|| ExportError::Format {
        path: run.path().join("manifest.json"),
        line: 1,
        message: "the manifest's clock section lacks the calibration (frequency_hz, monotonic_frequency_hz, start.monotonic, run_start_counter) that places the run on CLOCK_MONOTONIC".into(),
    })
}

/// Nanoseconds as the format's microseconds, exactly: `1234567` → `1234.567`.
pub fn micros(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1_000, a % 1_000)
}

/// Streams trace events as one JSON document.
struct Events<'a> {
    out: &'a mut dyn Write,
    first: bool,
}

impl Events<'_> {
    fn start<'w>(out: &'w mut dyn Write, run: &RunReader) -> io::Result<Events<'w>> {
        let other = serde_json::json!({
            "run_id": run.manifest.id,
            "kind": run.manifest.kind,
            "clock": "CLOCK_MONOTONIC",
            "exported_by": "sandglass",
        });
        writeln!(
            out,
            "{{\"displayTimeUnit\":\"ns\",\"otherData\":{other},\"traceEvents\":["
        )?;
        Ok(Events { out, first: true })
    }

    fn raw(&mut self, event: &str) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.out.write_all(event.as_bytes())
    }

    fn meta(&mut self, pid: u32, tid: u64, what: &str, args: serde_json::Value) -> io::Result<()> {
        self.raw(&format!(
            "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"ts\":0,\"name\":\"{what}\",\"args\":{args}}}"
        ))
    }

    fn process(&mut self, pid: u32, name: &str, sort: u32) -> io::Result<()> {
        self.meta(pid, 0, "process_name", serde_json::json!({ "name": name }))?;
        self.meta(
            pid,
            0,
            "process_sort_index",
            serde_json::json!({ "sort_index": sort }),
        )
    }

    fn thread(&mut self, pid: u32, tid: u64, name: &str) -> io::Result<()> {
        self.meta(pid, tid, "thread_name", serde_json::json!({ "name": name }))?;
        self.meta(
            pid,
            tid,
            "thread_sort_index",
            serde_json::json!({ "sort_index": tid }),
        )
    }

    /// A complete event from `start` to `end` (CLOCK_MONOTONIC ns).
    #[allow(clippy::too_many_arguments)]
    fn complete(
        &mut self,
        pid: u32,
        tid: u64,
        cat: &str,
        name: &str,
        start: i64,
        end: i64,
        args: serde_json::Value,
    ) -> io::Result<()> {
        let name = serde_json::Value::from(name);
        self.raw(&format!(
            "{{\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"dur\":{},\"cat\":\"{cat}\",\"name\":{name},\"args\":{args}}}",
            micros(start),
            micros((end - start).max(0))
        ))
    }

    /// An instant event on a thread track.
    fn instant(
        &mut self,
        pid: u32,
        tid: u64,
        cat: &str,
        name: &str,
        at: i64,
        args: serde_json::Value,
    ) -> io::Result<()> {
        let name = serde_json::Value::from(name);
        self.raw(&format!(
            "{{\"ph\":\"i\",\"s\":\"t\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"cat\":\"{cat}\",\"name\":{name},\"args\":{args}}}",
            micros(at)
        ))
    }

    fn finish(self) -> io::Result<()> {
        self.out.write_all(b"\n]}\n")
    }
}

/// What a run's trace begins with: its threads and CPUs. The rows themselves stream from the
/// run's tables as they are written.
enum Head {
    /// Timer and noise runs: `(cpu, thread, tid)`.
    Cpus(Vec<(u64, u64, i64)>),
    Hourglass {
        tids: Vec<(u64, i64)>,
        cpus: Vec<u64>,
    },
}

fn head(run: &RunReader) -> Result<Head, ExportError> {
    match &run.manifest.kind {
        RunKind::Timer | RunKind::Noise => Ok(Head::Cpus(cpu_threads(run)?)),
        RunKind::Hourglass => {
            let tids = super::csv::hourglass_tids(run)?;
            let s = super::summary(run)?;
            let cpus = s
                .get("coverage")
                .and_then(|c| c.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|c| c.get("cpu").and_then(|v| v.as_u64()))
                        .collect()
                })
                .unwrap_or_default();
            Ok(Head::Hourglass { tids, cpus })
        }
        other => Err(wrong_kind(
            run,
            format!(
                "the Perfetto export reads timer, noise and hourglass runs; this is a {other} run"
            ),
        )),
    }
}

fn output_error(source: io::Error) -> ExportError {
    ExportError::Write {
        path: Path::new("the Perfetto output").to_path_buf(),
        source,
    }
}

/// Refuses a run killed before its end wrote the summary and the clock's calibration, which
/// place its threads and its time.
fn needs_end(run: &RunReader) -> Result<(), ExportError> {
    if run.has("summary.json") {
        return Ok(());
    }
    Err(wrong_kind(
        run,
        "the run ended before it finished (killed or crashed), so it has neither the summary nor the clock calibration a Perfetto trace needs; export the tables it kept with --csv",
    ))
}

/// Which part of a run to export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Only this stretch, in ns from the run's start.
    pub window_ns: Option<(i64, i64)>,
    /// Only the windows around the run's `n` largest delays (late wakeups, interruptions,
    /// preemption gaps), each from [`AROUND_NS`] before to [`AROUND_NS`] after it.
    pub largest: Option<usize>,
}

/// How much of a run is exported before and after each delay of [`Options::largest`].
pub const AROUND_NS: i64 = 2_000_000;

/// The exported stretches, CLOCK_MONOTONIC ns, sorted and disjoint; `None`: all of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Spans(Option<Vec<(i64, i64)>>);

impl Spans {
    fn of(mut v: Vec<(i64, i64)>) -> Spans {
        v.sort_unstable();
        let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
        for (a, z) in v {
            match out.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(z),
                _ => out.push((a, z)),
            }
        }
        Spans(Some(out))
    }

    /// Whether `a..=z` meets an exported stretch.
    fn keeps(&self, a: i64, z: i64) -> bool {
        let Some(v) = &self.0 else {
            return true;
        };
        let i = v.partition_point(|s| s.1 < a);
        v.get(i).is_some_and(|s| s.0 <= z)
    }

    /// The first and last exported times.
    fn bounds(&self) -> (u64, u64) {
        match &self.0 {
            None => (0, u64::MAX),
            Some(v) => (
                v.first().map_or(0, |s| s.0.max(0) as u64),
                v.last().map_or(0, |s| s.1.max(0) as u64),
            ),
        }
    }
}

/// The stretches `opts` asks for.
fn spans(run: &RunReader, clock: &ClockMap, opts: &Options) -> Result<Spans, ExportError> {
    if let Some((a, z)) = opts.window_ns {
        return Ok(Spans::of(vec![(
            clock.run_to_monotonic_ns(a),
            clock.run_to_monotonic_ns(z),
        )]));
    }
    let Some(n) = opts.largest else {
        return Ok(Spans(None));
    };
    // The n largest (size, start) in run ns, smallest on top.
    let mut top: std::collections::BinaryHeap<std::cmp::Reverse<(i64, i64)>> =
        std::collections::BinaryHeap::with_capacity(n + 1);
    let mut offer = |size: i64, start: i64| {
        if n > 0 {
            top.push(std::cmp::Reverse((size, start)));
            if top.len() > n {
                top.pop();
            }
        }
    };
    match &run.manifest.kind {
        RunKind::Timer => {
            let cols = ["release_ns", "lateness_ns"];
            table(run, &tables::TIMER_SAMPLES)?.scan::<ExportError>(&cols, |b| {
                let (rel, late) = (b.i64s("release_ns")?, b.i64s("lateness_ns")?);
                for i in 0..b.len() {
                    offer(late[i], rel[i]);
                }
                Ok(())
            })?;
        }
        RunKind::Noise => {
            let cols = ["start_ns", "duration_ns"];
            table(run, &tables::NOISE_INTERRUPTIONS)?.scan::<ExportError>(&cols, |b| {
                let (start, dur) = (b.i64s("start_ns")?, b.i64s("duration_ns")?);
                for i in 0..b.len() {
                    offer(dur[i], start[i]);
                }
                Ok(())
            })?;
        }
        _ => {
            // A thread's gaps: from the end of one of its intervals to the start of its next.
            let mut last_end: Vec<Option<i64>> = Vec::new();
            let cols = ["thread", "start_ns", "end_ns"];
            table(run, &tables::TRACE)?.scan::<ExportError>(&cols, |b| {
                let (th, a, z) = (b.i32s("thread")?, b.i64s("start_ns")?, b.i64s("end_ns")?);
                for i in 0..b.len() {
                    let t = th[i].max(0) as usize;
                    if last_end.len() <= t {
                        last_end.resize(t + 1, None);
                    }
                    if let Some(end) = last_end[t] {
                        offer(a[i] - end, end);
                    }
                    last_end[t] = Some(z[i]);
                }
                Ok(())
            })?;
        }
    }
    Ok(Spans::of(
        top.into_iter()
            .map(|std::cmp::Reverse((size, start))| {
                (
                    clock.run_to_monotonic_ns(start) - AROUND_NS,
                    clock.run_to_monotonic_ns(start + size.max(0)) + AROUND_NS,
                )
            })
            .collect(),
    ))
}

/// Writes `run` as trace-event JSON to `out`.
pub fn write_to(run: &RunReader, out: &mut dyn Write) -> Result<(), ExportError> {
    write_part(run, &Options::default(), out)
}

/// Writes the part `opts` of `run` as trace-event JSON to `out`.
pub fn write_part(run: &RunReader, opts: &Options, out: &mut dyn Write) -> Result<(), ExportError> {
    needs_end(run)?;
    let clock = clock_map(run)?;
    let head = head(run)?;
    let kernel = kernel_events(run)?;
    let spans = spans(run, &clock, opts)?;
    emit(run, &clock, &head, &kernel, &spans, out)
}

/// Writes `run` as trace-event JSON to `path` atomically (an existing file is refused).
pub fn write(run: &RunReader, path: &Path, opts: &Options) -> Result<(), ExportError> {
    needs_end(run)?;
    let clock = clock_map(run)?;
    let head = head(run)?;
    let kernel = kernel_events(run)?;
    let spans = spans(run, &clock, opts)?;
    write_atomic(path, |w| emit(run, &clock, &head, &kernel, &spans, w))
}

fn table<'r>(
    run: &'r RunReader,
    t: &'static sandglass::store::table::Table,
) -> Result<TableReader<'r>, ExportError> {
    TableReader::open(run, t)
        .ok_or_else(|| wrong_kind(run, format!("the run has no {} table", t.stem)))
}

fn emit(
    run: &RunReader,
    clock: &ClockMap,
    head: &Head,
    kernel: &[(u64, u64, String, u64)],
    spans: &Spans,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    use serde_json::json;
    let mut ev = Events::start(out, run).map_err(output_error)?;
    let title = format!("sandglass {} {}", run.manifest.kind, run.manifest.id);
    let mut cpus: Vec<u64> = kernel.iter().map(|k| k.1).collect();
    let mut cpu_names: Vec<(u64, String)> = Vec::new();
    match head {
        Head::Cpus(threads) => {
            for (cpu, thread, tid) in threads {
                cpus.push(*cpu);
                cpu_names.push((*cpu, format!("CPU {cpu} (thread {thread}, tid {tid})")));
            }
        }
        Head::Hourglass { tids, cpus: c } => {
            ev.process(RUN_PID, &title, 0).map_err(output_error)?;
            for (t, tid) in tids {
                ev.thread(RUN_PID, *t, &format!("thread {t} (tid {tid})"))
                    .map_err(output_error)?;
            }
            cpus.extend(c.iter().copied());
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    ev.process(CPU_PID, "CPUs", 1).map_err(output_error)?;
    for cpu in &cpus {
        let name = cpu_names
            .iter()
            .find(|n| n.0 == *cpu)
            .map_or_else(|| format!("CPU {cpu}"), |n| n.1.clone());
        ev.thread(CPU_PID, *cpu, &name).map_err(output_error)?;
    }
    match &run.manifest.kind {
        RunKind::Timer => {
            let cols = ["cpu", "release", "release_ns", "lateness_ns", "missed"];
            table(run, &tables::TIMER_SAMPLES)?.scan::<ExportError>(&cols, |b| {
                let (cpu, release) = (b.i32s("cpu")?, b.i64s("release")?);
                let (rel_ns, late, missed) = (
                    b.i64s("release_ns")?,
                    b.i64s("lateness_ns")?,
                    b.bools("missed")?,
                );
                for i in 0..b.len() {
                    let at = clock.run_to_monotonic_ns(rel_ns[i]);
                    if !spans.keeps(at, clock.run_to_monotonic_ns(rel_ns[i] + late[i].max(0))) {
                        continue;
                    }
                    let args = json!({ "release": release[i], "lateness_ns": late[i] });
                    let cpu = cpu[i] as u64;
                    if missed[i] {
                        ev.instant(CPU_PID, cpu, "timer", "missed release", at, args)
                    } else {
                        let end = clock.run_to_monotonic_ns(rel_ns[i] + late[i]);
                        ev.complete(CPU_PID, cpu, "timer", "wakeup", at, end, args)
                    }
                    .map_err(output_error)?;
                }
                Ok(())
            })?;
        }
        RunKind::Noise => {
            let cols = ["cpu", "start_ns", "duration_ns"];
            table(run, &tables::NOISE_INTERRUPTIONS)?.scan::<ExportError>(&cols, |b| {
                let (cpu, start, dur) =
                    (b.i32s("cpu")?, b.i64s("start_ns")?, b.i64s("duration_ns")?);
                for i in 0..b.len() {
                    let a = clock.run_to_monotonic_ns(start[i]);
                    let z = clock.run_to_monotonic_ns(start[i] + dur[i]);
                    if !spans.keeps(a, z) {
                        continue;
                    }
                    let args = json!({ "duration_ns": dur[i] });
                    ev.complete(CPU_PID, cpu[i] as u64, "noise", "interruption", a, z, args)
                        .map_err(output_error)?;
                }
                Ok(())
            })?;
        }
        _ => {
            let cols = [
                "thread",
                "cpu",
                "start_counter",
                "end_counter",
                "end_reason",
            ];
            table(run, &tables::TRACE)?.scan::<ExportError>(&cols, |b| {
                let (th, cpu) = (b.i32s("thread")?, b.i32s("cpu")?);
                let (a, z, why) = (
                    b.i64s("start_counter")?,
                    b.i64s("end_counter")?,
                    b.texts("end_reason")?,
                );
                for i in 0..b.len() {
                    let (thread, cpu) = (th[i] as u64, cpu[i] as u64);
                    let (a, z) = (
                        clock.counter_to_monotonic_ns(a[i] as u64),
                        clock.counter_to_monotonic_ns(z[i] as u64),
                    );
                    if !spans.keeps(a, z) {
                        continue;
                    }
                    let why = why[i].as_utf8().unwrap_or("?");
                    let args = json!({ "cpu": cpu, "end_reason": why });
                    ev.complete(RUN_PID, thread, "trace", "running", a, z, args)
                        .map_err(output_error)?;
                    let args = json!({ "thread": thread, "end_reason": why });
                    ev.complete(
                        CPU_PID,
                        cpu,
                        "trace",
                        &format!("thread {thread}"),
                        a,
                        z,
                        args,
                    )
                    .map_err(output_error)?;
                }
                Ok(())
            })?;
            if let Some(t) = TableReader::open(run, &tables::JOBS) {
                t.scan::<ExportError>(&["thread", "job", "deadline_ns", "outcome"], |b| {
                    let (th, job, deadline) =
                        (b.i32s("thread")?, b.i64s("job")?, b.i64s("deadline_ns")?);
                    let outcome = b.texts("outcome")?;
                    for i in 0..b.len() {
                        if outcome[i].data() != b"miss" {
                            continue;
                        }
                        let at = clock.run_to_monotonic_ns(deadline[i]);
                        if !spans.keeps(at, at) {
                            continue;
                        }
                        let args = json!({ "job": job[i] });
                        ev.instant(RUN_PID, th[i] as u64, "jobs", "deadline miss", at, args)
                            .map_err(output_error)?;
                    }
                    Ok(())
                })?;
            }
        }
    }
    for (ts, cpu, event, dur) in kernel {
        let at = *ts as i64;
        if !spans.keeps(at, at + *dur as i64) {
            continue;
        }
        if *dur > 0 {
            let args = json!({ "dur_ns": dur });
            ev.complete(CPU_PID, *cpu, "kernel", event, at, at + *dur as i64, args)
        } else {
            ev.instant(CPU_PID, *cpu, "kernel", event, at, json!({}))
        }
        .map_err(output_error)?;
    }
    kernel_slices(run, spans, &mut ev)?;
    ev.finish().map_err(output_error)
}

/// One kernel slice as a trace event.
fn put_slice(ev: &mut Events<'_>, s: Slice) -> io::Result<()> {
    let tid = kernel_track(s.cpu, s.track);
    if s.instant {
        ev.instant(
            KERNEL_PID,
            tid,
            "kernel",
            &s.name,
            s.start as i64,
            serde_json::json!({}),
        )
    } else {
        ev.complete(
            KERNEL_PID,
            tid,
            "kernel",
            &s.name,
            s.start as i64,
            s.end as i64,
            serde_json::json!({ "dur_ns": s.end - s.start }),
        )
    }
}

/// The kernel tracks of a run that kept its kernel events (`kernel-*.parquet`): per CPU, who
/// ran, its interrupts and its softirqs, within `spans`.
fn kernel_slices(run: &RunReader, spans: &Spans, ev: &mut Events<'_>) -> Result<(), ExportError> {
    if !sandglass::causes::kernel_store::has(run) {
        return Ok(());
    }
    ev.process(KERNEL_PID, "kernel (tracefs)", 2)
        .map_err(output_error)?;
    let mut slicer = Slicer::default();
    // Per CPU: its tracks are declared, and its last event.
    let mut seen: Vec<Option<u64>> = Vec::new();
    let mut failed: Option<io::Error> = None;
    let (from, to) = spans.bounds();
    sandglass::causes::kernel_store::scan(run, from, to, |e| {
        if seen.len() <= e.cpu {
            seen.resize(e.cpu + 1, None);
        }
        if seen[e.cpu].is_none() {
            for (track, what) in [
                (KernelTrack::Tasks, "tasks"),
                (KernelTrack::Interrupts, "interrupts"),
                (KernelTrack::Softirqs, "softirqs"),
            ] {
                let name = format!("CPU {} {what}", e.cpu);
                if let Err(err) = ev.thread(KERNEL_PID, kernel_track(e.cpu, track), &name) {
                    failed.get_or_insert(err);
                }
            }
        }
        let at = e.ts_ns as i64;
        if !spans.keeps(at, at) {
            slicer.break_at(e.cpu);
            seen[e.cpu] = Some(e.ts_ns);
            return Ok(());
        }
        seen[e.cpu] = Some(e.ts_ns);
        slicer.push(&e, &mut |s| {
            if failed.is_none() {
                failed = put_slice(ev, s).err();
            }
        });
        Ok(())
    })?;
    let ends: Vec<(usize, u64)> = seen
        .iter()
        .enumerate()
        .filter_map(|(c, t)| Some((c, (*t)?)))
        .collect();
    slicer.finish(&ends, &mut |s| {
        if failed.is_none() {
            failed = put_slice(ev, s).err();
        }
    });
    match failed {
        Some(e) => Err(output_error(e)),
        None => Ok(()),
    }
}

/// The process of the kernel's tracks: per traced CPU, its tasks, its interrupts and its
/// softirqs.
pub const KERNEL_PID: u32 = 3;

/// The three kernel tracks of `cpu`: tasks, interrupts, softirqs.
pub fn kernel_track(cpu: usize, which: KernelTrack) -> u64 {
    cpu as u64 * 3 + which as u64
}

/// A kernel track of a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelTrack {
    /// Who ran: one slice per stretch a task held the CPU, from `sched_switch` to
    /// `sched_switch`, with wakeups as instants.
    Tasks = 0,
    /// Hard interrupts (irq handlers, x86 vectors, NMIs) and the hrtimer callbacks in them.
    Interrupts = 1,
    Softirqs = 2,
}

/// One slice (or instant, `end == start` and `instant`) of a kernel track, CLOCK_MONOTONIC ns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    pub cpu: usize,
    pub track: KernelTrack,
    pub name: String,
    pub start: u64,
    pub end: u64,
    pub instant: bool,
}

/// What is open on one CPU.
#[derive(Clone, Debug, Default)]
struct CpuState {
    /// The first event seen since the CPU's events became contiguous (a stretch's start when
    /// its beginning was not seen).
    first: Option<u64>,
    /// The task switched in, and when.
    task: Option<(String, u64)>,
    /// Open interrupts and hrtimer callbacks, innermost last: (name, start).
    irqs: Vec<(String, u64)>,
    softirq: Option<(String, u64)>,
}

/// Turns a CPU's kernel events, in time order, into the slices of its tracks.
#[derive(Debug, Default)]
pub struct Slicer {
    cpus: Vec<CpuState>,
}

fn task_name(comm: &str, pid: i32) -> String {
    if pid == 0 {
        "idle".to_string()
    } else {
        format!("{comm}:{pid}")
    }
}

impl Slicer {
    /// Forgets what is open on `cpu`: its next events do not follow the last ones (they were
    /// left out of the export).
    pub fn break_at(&mut self, cpu: usize) {
        if let Some(s) = self.cpus.get_mut(cpu) {
            *s = CpuState::default();
        }
    }

    /// Takes one event; `out` gets the slices it ends.
    pub fn push(&mut self, e: &Traced, out: &mut impl FnMut(Slice)) {
        use sandglass::causes::tracefs_raw::Event;
        if self.cpus.len() <= e.cpu {
            self.cpus.resize_with(e.cpu + 1, CpuState::default);
        }
        let s = &mut self.cpus[e.cpu];
        let ts = e.ts_ns;
        let first = *s.first.get_or_insert(ts);
        let slice = |track, name: String, start: u64| Slice {
            cpu: e.cpu,
            track,
            name,
            start,
            end: ts,
            instant: false,
        };
        match &e.event {
            Event::Switch {
                prev_pid,
                prev_comm,
                next_pid,
                next_comm,
                ..
            } => {
                let start = s.task.take().map_or(first, |t| t.1);
                out(slice(
                    KernelTrack::Tasks,
                    task_name(prev_comm, *prev_pid),
                    start,
                ));
                s.task = Some((task_name(next_comm, *next_pid), ts));
            }
            Event::Wakeup {
                waking: false,
                pid,
                comm,
                ..
            } => out(Slice {
                instant: true,
                ..slice(
                    KernelTrack::Tasks,
                    format!("wakeup {}", task_name(comm, *pid)),
                    ts,
                )
            }),
            Event::IrqEntry { name, .. } => s.irqs.push((name.clone(), ts)),
            Event::VectorEntry { name, .. } => s.irqs.push((name.clone(), ts)),
            Event::HrtimerEntry { .. } => s.irqs.push(("hrtimer callback".to_string(), ts)),
            Event::IrqExit { .. } | Event::VectorExit { .. } | Event::HrtimerExit => {
                if let Some((name, start)) = s.irqs.pop() {
                    out(slice(KernelTrack::Interrupts, name, start));
                }
            }
            Event::Nmi { delta_ns, .. } => {
                let start = ts.saturating_sub((*delta_ns).max(0) as u64);
                out(slice(KernelTrack::Interrupts, "NMI".to_string(), start));
            }
            Event::SoftirqEntry { vec } => {
                s.softirq = Some((softirq_name(*vec), ts));
            }
            Event::SoftirqExit { .. } => {
                if let Some((name, start)) = s.softirq.take() {
                    out(slice(KernelTrack::Softirqs, name, start));
                }
            }
            _ => {}
        }
    }

    /// Ends what is still open at `at` on every CPU.
    pub fn finish(&mut self, at: &[(usize, u64)], out: &mut impl FnMut(Slice)) {
        for &(cpu, end) in at {
            let Some(s) = self.cpus.get_mut(cpu) else {
                continue;
            };
            let mut close = |track, name: String, start: u64| {
                out(Slice {
                    cpu,
                    track,
                    name,
                    start,
                    end,
                    instant: false,
                })
            };
            if let Some((n, a)) = s.task.take() {
                close(KernelTrack::Tasks, n, a);
            }
            while let Some((n, a)) = s.irqs.pop() {
                close(KernelTrack::Interrupts, n, a);
            }
            if let Some((n, a)) = s.softirq.take() {
                close(KernelTrack::Softirqs, n, a);
            }
        }
    }
}

fn softirq_name(vec: u32) -> String {
    sandglass::causes::attribute::SOFTIRQ_NAMES
        .get(vec as usize)
        .map_or_else(|| format!("softirq {vec}"), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{self, *};
    use super::*;

    fn parse(run: &Path) -> serde_json::Value {
        let r = RunReader::open(run).expect("open");
        let mut out = Vec::new();
        write_to(&r, &mut out).expect("export");
        serde_json::from_slice(&out).expect("valid JSON")
    }

    fn traced(ts: u64, event: sandglass::causes::tracefs_raw::Event) -> Traced {
        Traced {
            ts_ns: ts,
            cpu: 1,
            pid: None,
            event,
        }
    }

    #[test]
    fn kernel_events_become_nested_slices_per_track() {
        use sandglass::causes::tracefs_raw::Event;
        let switch = |prev: &str, pp: i32, next: &str, np: i32| Event::Switch {
            prev_pid: pp,
            prev_comm: prev.into(),
            prev_prio: 120,
            prev_state: 0,
            next_pid: np,
            next_comm: next.into(),
            next_prio: 4,
        };
        let timer = || Event::VectorEntry {
            name: "local_timer".into(),
            vector: 236,
        };
        let events = [
            traced(100, timer()),
            traced(
                110,
                Event::HrtimerEntry {
                    hrtimer: 1,
                    function: 2,
                    now_ns: 0,
                },
            ),
            traced(
                120,
                Event::Wakeup {
                    waking: false,
                    pid: 9,
                    comm: "sg-timer-0".into(),
                    target_cpu: 1,
                },
            ),
            traced(130, Event::HrtimerExit),
            traced(
                140,
                Event::VectorExit {
                    name: "local_timer".into(),
                    vector: 236,
                },
            ),
            traced(150, Event::SoftirqEntry { vec: 7 }),
            traced(170, Event::SoftirqExit { vec: 7 }),
            traced(200, switch("spin", 5, "sg-timer-0", 9)),
            traced(260, switch("sg-timer-0", 9, "spin", 5)),
            traced(300, timer()),
        ];
        let mut slicer = Slicer::default();
        let mut got = Vec::new();
        for e in &events {
            slicer.push(e, &mut |s| got.push(s));
        }
        slicer.finish(&[(1, 320)], &mut |s| got.push(s));
        let view: Vec<(KernelTrack, &str, u64, u64, bool)> = got
            .iter()
            .map(|s| (s.track, s.name.as_str(), s.start, s.end, s.instant))
            .collect();
        use KernelTrack::*;
        assert_eq!(
            view,
            [
                (Tasks, "wakeup sg-timer-0:9", 120, 120, true),
                (Interrupts, "hrtimer callback", 110, 130, false),
                (Interrupts, "local_timer", 100, 140, false),
                (Softirqs, "SCHED", 150, 170, false),
                // The first task's start was not seen: it starts at the CPU's first event.
                (Tasks, "spin:5", 100, 200, false),
                (Tasks, "sg-timer-0:9", 200, 260, false),
                (Tasks, "spin:5", 260, 320, false),
                (Interrupts, "local_timer", 300, 320, false),
            ]
        );
        // A break forgets what was open.
        let mut slicer = Slicer::default();
        let mut got = Vec::new();
        slicer.push(&events[0], &mut |s| got.push(s));
        slicer.break_at(1);
        slicer.push(&events[4], &mut |s| got.push(s));
        assert!(got.is_empty());
        assert_eq!(kernel_track(1, Softirqs), 5);
    }

    #[test]
    fn spans_merge_and_keep_what_meets_them() {
        let s = Spans::of(vec![(50, 60), (10, 20), (15, 30)]);
        assert_eq!(s, Spans(Some(vec![(10, 30), (50, 60)])));
        assert!(s.keeps(0, 10) && s.keeps(25, 55) && s.keeps(60, 70));
        assert!(!s.keeps(31, 49) && !s.keeps(61, 100) && !s.keeps(0, 9));
        assert_eq!(s.bounds(), (10, 60));
        assert!(Spans(None).keeps(i64::MIN, i64::MIN));
    }

    #[test]
    fn micros_are_exact() {
        assert_eq!(micros(5_000_001_010_000), "5000001010.000");
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(7), "0.007");
        assert_eq!(micros(-1_500), "-1.500");
    }

    #[test]
    fn run_start_is_the_manifests_monotonic_time() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = fixture::timer_run(&tmp.path().join("run"), &fixture::timer_samples())
            .expect("fixture");
        let r = RunReader::open(&run).expect("open");
        let c = clock_map(&r).expect("clock");
        assert_eq!(
            c.counter_to_monotonic_ns(RUN_START_COUNTER),
            RUN_START_MONOTONIC_NS as i64
        );
        assert_eq!(c.run_to_monotonic_ns(0), RUN_START_MONOTONIC_NS as i64);
        // One second of the raw clock is 0.8 µs less of CLOCK_MONOTONIC here.
        assert_eq!(
            c.run_to_monotonic_ns(1_000_000_000),
            RUN_START_MONOTONIC_NS as i64 + 999_999_200
        );
    }

    #[test]
    fn timer_wakeups_and_missed_releases_on_cpu_tracks() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = fixture::timer_run(&tmp.path().join("run"), &fixture::timer_samples())
            .expect("fixture");
        let v = parse(&run);
        let events = v["traceEvents"].as_array().expect("events");
        let x: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        let i: Vec<_> = events.iter().filter(|e| e["ph"] == "i").collect();
        assert_eq!(x.len(), 6);
        assert_eq!(i.len(), 2);
        assert!(x.iter().all(|e| e["pid"] == CPU_PID));
        assert_eq!(v["displayTimeUnit"], "ns");
    }

    #[test]
    fn kernel_events_share_the_traces_clock() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // Thread 0 runs from 10 µs to 30 µs after the run's start (counter ticks at 2.5 GHz).
        let a = RUN_START_COUNTER + 25_000;
        let b = RUN_START_COUNTER + 75_000;
        let expected_start = RUN_START_MONOTONIC_NS + 10_000;
        // An interrupt recorded on CLOCK_MONOTONIC right when the record starts, and a switch
        // one second later.
        let kernel = format!(
            "ts_ns,cpu,event,dur_ns\n{expected_start},1,irq_handler_entry,2500\n{},1,sched_switch,0\n",
            RUN_START_MONOTONIC_NS + 1_000_000_000
        );
        let run = fixture::hourglass_run(
            &tmp.path().join("run"),
            &[
                (0, 1, a, b, "preempted"),
                (1, 1, b + 2_500, b + 5_000, "finished"),
            ],
            &[("kernel_events.csv", kernel)],
        )
        .expect("fixture");
        let v = parse(&run);
        let events = v["traceEvents"].as_array().expect("events");
        let ts = |pred: &dyn Fn(&serde_json::Value) -> bool| -> String {
            let e = events.iter().find(|e| pred(e)).expect("event");
            e["ts"].to_string()
        };
        let record = ts(&|e| e["ph"] == "X" && e["pid"] == RUN_PID && e["tid"] == 0);
        let irq = ts(&|e| e["name"] == "irq_handler_entry");
        assert_eq!(record, "5000001010.0");
        assert_eq!(record, irq);
        let on_cpu = ts(&|e| e["ph"] == "X" && e["pid"] == CPU_PID && e["name"] == "thread 0");
        assert_eq!(on_cpu, record);
        let switch = ts(&|e| e["name"] == "sched_switch");
        assert_eq!(switch, "5001001000.0");
    }
}
