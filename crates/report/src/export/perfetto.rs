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
use sandglass::store::table::{tables, TableReader};
use sandglass::store::RunReader;
use std::io::{self, Write};
use std::path::Path;

/// The process of the run's threads.
pub const RUN_PID: u32 = 1;
/// The process whose threads are the CPUs.
pub const CPU_PID: u32 = 2;

/// The run's clock: counter values and run times to CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockMap {
    /// Counter ticks per second of CLOCK_MONOTONIC_RAW (the rate of the run's `*_ns` times).
    pub frequency_hz: f64,
    /// Counter ticks per second of CLOCK_MONOTONIC.
    pub monotonic_frequency_hz: f64,
    /// A counter value and the CLOCK_MONOTONIC time read with it.
    pub anchor_counter: u64,
    pub anchor_monotonic_ns: u64,
    /// The counter at the run's time zero.
    pub run_start_counter: u64,
}

impl ClockMap {
    /// The clock of `run`, from its manifest's `clock` section.
    pub fn of(run: &RunReader) -> Result<ClockMap, ExportError> {
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

    /// CLOCK_MONOTONIC in ns at counter value `c`.
    pub fn counter_to_monotonic_ns(&self, c: u64) -> i64 {
        let d = c.wrapping_sub(self.anchor_counter) as i64 as f64;
        (self.anchor_monotonic_ns as f64 + d * 1e9 / self.monotonic_frequency_hz).round() as i64
    }

    /// CLOCK_MONOTONIC in ns at `t_ns` from the run's time zero.
    pub fn run_to_monotonic_ns(&self, t_ns: i64) -> i64 {
        let ticks = (self.run_start_counter.wrapping_sub(self.anchor_counter) as i64) as f64
            + t_ns as f64 * self.frequency_hz / 1e9;
        (self.anchor_monotonic_ns as f64 + ticks * 1e9 / self.monotonic_frequency_hz).round() as i64
    }
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
    match run.manifest.kind.as_str() {
        "timer" | "noise" => Ok(Head::Cpus(cpu_threads(run)?)),
        "hourglass" => {
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

/// Writes `run` as trace-event JSON to `out`.
pub fn write_to(run: &RunReader, out: &mut dyn Write) -> Result<(), ExportError> {
    needs_end(run)?;
    let clock = ClockMap::of(run)?;
    let head = head(run)?;
    let kernel = kernel_events(run)?;
    emit(run, &clock, &head, &kernel, out)
}

/// Writes `run` as trace-event JSON to `path` atomically (an existing file is refused).
pub fn write(run: &RunReader, path: &Path) -> Result<(), ExportError> {
    needs_end(run)?;
    let clock = ClockMap::of(run)?;
    let head = head(run)?;
    let kernel = kernel_events(run)?;
    write_atomic(path, |w| emit(run, &clock, &head, &kernel, w))
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
    match run.manifest.kind.as_str() {
        "timer" => {
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
        "noise" => {
            let cols = ["cpu", "start_ns", "duration_ns"];
            table(run, &tables::NOISE_INTERRUPTIONS)?.scan::<ExportError>(&cols, |b| {
                let (cpu, start, dur) =
                    (b.i32s("cpu")?, b.i64s("start_ns")?, b.i64s("duration_ns")?);
                for i in 0..b.len() {
                    let a = clock.run_to_monotonic_ns(start[i]);
                    let z = clock.run_to_monotonic_ns(start[i] + dur[i]);
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
        if *dur > 0 {
            let args = json!({ "dur_ns": dur });
            ev.complete(CPU_PID, *cpu, "kernel", event, at, at + *dur as i64, args)
        } else {
            ev.instant(CPU_PID, *cpu, "kernel", event, at, json!({}))
        }
        .map_err(output_error)?;
    }
    ev.finish().map_err(output_error)
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
        let c = ClockMap::of(&r).expect("clock");
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
