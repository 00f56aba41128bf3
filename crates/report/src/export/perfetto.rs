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

use super::{cpu_threads, kernel_events, write_atomic, wrong_kind, ExportError, Table};
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

/// The kinds of rows a run contributes, read (and checked) before anything is written.
enum Body {
    Timer {
        threads: Vec<(u64, u64, i64)>,
        /// `(cpu, release, release_ns, lateness_ns, missed)`.
        samples: Vec<(u64, u64, i64, i64, bool)>,
    },
    Noise {
        threads: Vec<(u64, u64, i64)>,
        /// `(cpu, start_ns, duration_ns)`.
        list: Vec<(u64, i64, i64)>,
    },
    Hourglass {
        tids: Vec<(u64, i64)>,
        /// `(thread, cpu, start_counter, end_counter, end_reason)`.
        records: Vec<(u64, u64, u64, u64, String)>,
        /// `(thread, job, deadline_ns)` of missed deadlines.
        misses: Vec<(u64, u64, i64)>,
    },
}

fn read_body(run: &RunReader) -> Result<Body, ExportError> {
    match run.manifest.kind.as_str() {
        "timer" => {
            let threads = cpu_threads(run)?;
            let t = Table::read(run, "samples.csv")?;
            let c = t.columns(&["cpu", "release", "release_ns", "lateness_ns", "missed"])?;
            let samples = t
                .rows()
                .map(|r| {
                    Ok((
                        r.get(c[0])?,
                        r.get(c[1])?,
                        r.get(c[2])?,
                        r.get(c[3])?,
                        r.get::<u8>(c[4])? != 0,
                    ))
                })
                .collect::<Result<_, ExportError>>()?;
            Ok(Body::Timer { threads, samples })
        }
        "noise" => {
            let threads = cpu_threads(run)?;
            let t = Table::read(run, "interruptions.csv")?;
            let c = t.columns(&["cpu", "start_ns", "duration_ns"])?;
            let list = t
                .rows()
                .map(|r| Ok((r.get(c[0])?, r.get(c[1])?, r.get(c[2])?)))
                .collect::<Result<_, ExportError>>()?;
            Ok(Body::Noise { threads, list })
        }
        "hourglass" => {
            let tids = super::csv::hourglass_tids(run)?;
            let t = Table::read(run, "trace.csv")?;
            let c = t.columns(&[
                "thread",
                "cpu",
                "start_counter",
                "end_counter",
                "end_reason",
            ])?;
            let records = t
                .rows()
                .map(|r| {
                    Ok((
                        r.get(c[0])?,
                        r.get(c[1])?,
                        r.get(c[2])?,
                        r.get(c[3])?,
                        r.text(c[4])?.to_string(),
                    ))
                })
                .collect::<Result<_, ExportError>>()?;
            let mut misses = Vec::new();
            if run.has("jobs.csv") {
                let t = Table::read(run, "jobs.csv")?;
                let c = t.columns(&["thread", "job", "deadline_ns", "outcome"])?;
                for r in t.rows() {
                    if r.text(c[3])? == "miss" {
                        misses.push((r.get(c[0])?, r.get(c[1])?, r.get(c[2])?));
                    }
                }
            }
            Ok(Body::Hourglass {
                tids,
                records,
                misses,
            })
        }
        other => Err(wrong_kind(
            run,
            format!(
                "the Perfetto export reads timer, noise and hourglass runs; this is a {other} run"
            ),
        )),
    }
}

/// Writes `run` as trace-event JSON to `out`.
pub fn write_to(run: &RunReader, out: &mut dyn Write) -> Result<(), ExportError> {
    let clock = ClockMap::of(run)?;
    let body = read_body(run)?;
    let kernel = kernel_events(run)?;
    emit(run, &clock, &body, &kernel, out).map_err(|source| ExportError::Write {
        path: Path::new("the Perfetto output").to_path_buf(),
        source,
    })
}

/// Writes `run` as trace-event JSON to `path` atomically (an existing file is refused).
pub fn write(run: &RunReader, path: &Path) -> Result<(), ExportError> {
    let clock = ClockMap::of(run)?;
    let body = read_body(run)?;
    let kernel = kernel_events(run)?;
    write_atomic(path, |w| emit(run, &clock, &body, &kernel, w))
}

fn emit(
    run: &RunReader,
    clock: &ClockMap,
    body: &Body,
    kernel: &[(u64, u64, String, u64)],
    out: &mut dyn Write,
) -> io::Result<()> {
    use serde_json::json;
    let mut ev = Events::start(out, run)?;
    let title = format!("sandglass {} {}", run.manifest.kind, run.manifest.id);
    let mut cpus: Vec<u64> = kernel.iter().map(|k| k.1).collect();
    let mut cpu_names: Vec<(u64, String)> = Vec::new();
    match body {
        Body::Timer { threads, .. } | Body::Noise { threads, .. } => {
            for (cpu, thread, tid) in threads {
                cpus.push(*cpu);
                cpu_names.push((*cpu, format!("CPU {cpu} (thread {thread}, tid {tid})")));
            }
        }
        Body::Hourglass { tids, records, .. } => {
            ev.process(RUN_PID, &title, 0)?;
            let mut threads: Vec<u64> = tids.iter().map(|t| t.0).collect();
            threads.extend(records.iter().map(|r| r.0));
            threads.sort_unstable();
            threads.dedup();
            for t in threads {
                let tid = tids.iter().find(|x| x.0 == t).map_or(0, |x| x.1);
                ev.thread(RUN_PID, t, &format!("thread {t} (tid {tid})"))?;
            }
            cpus.extend(records.iter().map(|r| r.1));
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    ev.process(CPU_PID, "CPUs", 1)?;
    for cpu in &cpus {
        let name = cpu_names
            .iter()
            .find(|n| n.0 == *cpu)
            .map_or_else(|| format!("CPU {cpu}"), |n| n.1.clone());
        ev.thread(CPU_PID, *cpu, &name)?;
    }
    match body {
        Body::Timer { samples, .. } => {
            for (cpu, release, rel_ns, late, missed) in samples {
                let at = clock.run_to_monotonic_ns(*rel_ns);
                let args = json!({ "release": release, "lateness_ns": late });
                if *missed {
                    ev.instant(CPU_PID, *cpu, "timer", "missed release", at, args)?;
                } else {
                    let end = clock.run_to_monotonic_ns(rel_ns + late);
                    ev.complete(CPU_PID, *cpu, "timer", "wakeup", at, end, args)?;
                }
            }
        }
        Body::Noise { list, .. } => {
            for (cpu, start, dur) in list {
                let a = clock.run_to_monotonic_ns(*start);
                let b = clock.run_to_monotonic_ns(start + dur);
                let args = json!({ "duration_ns": dur });
                ev.complete(CPU_PID, *cpu, "noise", "interruption", a, b, args)?;
            }
        }
        Body::Hourglass {
            records, misses, ..
        } => {
            for (thread, cpu, a, b, why) in records {
                let (a, b) = (
                    clock.counter_to_monotonic_ns(*a),
                    clock.counter_to_monotonic_ns(*b),
                );
                let args = json!({ "cpu": cpu, "end_reason": why });
                ev.complete(RUN_PID, *thread, "trace", "running", a, b, args)?;
                let args = json!({ "thread": thread, "end_reason": why });
                ev.complete(
                    CPU_PID,
                    *cpu,
                    "trace",
                    &format!("thread {thread}"),
                    a,
                    b,
                    args,
                )?;
            }
            for (thread, job, deadline) in misses {
                let at = clock.run_to_monotonic_ns(*deadline);
                let args = json!({ "job": job });
                ev.instant(RUN_PID, *thread, "jobs", "deadline miss", at, args)?;
            }
        }
    }
    for (ts, cpu, event, dur) in kernel {
        let at = *ts as i64;
        if *dur > 0 {
            let args = json!({ "dur_ns": dur });
            ev.complete(CPU_PID, *cpu, "kernel", event, at, at + *dur as i64, args)?;
        } else {
            ev.instant(CPU_PID, *cpu, "kernel", event, at, json!({}))?;
        }
    }
    ev.finish()
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
