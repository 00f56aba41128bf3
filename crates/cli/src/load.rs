//! `sandglass load`: run a load profile alone and report what each load got done.
//!
//! The same loads run beside a measurement with `--load`; running them alone gives the
//! throughput they reach on an otherwise idle machine, the baseline against which a real-time
//! configuration's cost to the load is read (Hourglass, seed 003 Table 2).

use crate::common::{cpus_arg, print_json, time_arg, Failure};
use clap::Args;
use sandglass::load::{self, LoadOptions, LoadReport};
use sandglass::store::RunState;
use sandglass::Nanos;
use sandglass_sys::signal;
use serde::Serialize;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Instant;

/// Options of `sandglass load`.
#[derive(Args)]
pub struct LoadArgs {
    /// Loads joined by '+', each KIND[:INTENSITY][@CPUS] with KIND one of cpu, memory, disk,
    /// net, compile, sched, timers; stress-ng:ARGS or cmd:COMMAND last; idle for none. Examples:
    /// cpu, cpu:2+disk@1, 'cpu+cmd:make -j4'
    #[arg(value_name = "PROFILE")]
    pub profile: String,
    /// How long to run the loads
    #[arg(short = 'd', long, default_value = "10s", allow_hyphen_values = true)]
    pub duration: String,
    /// CPUs of loads without @CPUS, such as 0-3 (default: every CPU this process may use)
    #[arg(short = 'c', long = "cpus", allow_hyphen_values = true)]
    pub cpus: Option<String>,
    /// Directory of the disk load's files, on the disk to load (default: $TMPDIR, else
    /// /var/tmp)
    #[arg(long)]
    pub temp_dir: Option<PathBuf>,
    /// Print one JSON object on standard output instead of the table
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub quiet: crate::common::QuietFlag,
}

/// The version of `sandglass load --json` described by `docs/schema/load.schema.json`.
pub const JSON_SCHEMA: &str = "sandglass-load/1";

/// What `sandglass load` prints with `--json`.
#[derive(Serialize, schemars::JsonSchema)]
pub struct LoadRun<'a> {
    schema: &'static str,
    profile: String,
    /// The requested run time.
    duration_ns: Nanos,
    /// From the start of the loads to the stop.
    elapsed_ns: Nanos,
    state: RunState,
    end_detail: String,
    loads: &'a [LoadReport],
}

/// The options checked and turned into what the library takes.
struct Plan {
    specs: Vec<load::LoadSpec>,
    duration: Nanos,
    options: LoadOptions,
}

fn plan(a: &LoadArgs) -> Result<Plan, Failure> {
    let specs = load::parse_profile(&a.profile).map_err(|e| Failure::usage(e.to_string()))?;
    let duration = time_arg("-d", &a.duration)?;
    if duration.0 == 0 {
        return Err(Failure::usage(format!(
            "-d {}: the loads must run for longer than zero, such as -d 10s",
            a.duration
        )));
    }
    let allowed = sandglass::system::allowed_cpus();
    let default_cpus = match &a.cpus {
        Some(v) => {
            let list = cpus_arg("--cpus", v)?;
            if let Some(cpu) = list.iter().find(|c| !allowed.contains(c)) {
                let may = sandglass::cpulist::CpuList::from_cpus(allowed.iter().copied())
                    .map(|l| l.to_string())
                    .unwrap_or_default();
                return Err(Failure::usage(format!(
                    "--cpus {v}: CPU {cpu} is not available to this process (it may use CPUs {may}); choose CPUs from that list"
                )));
            }
            list.to_vec()
        }
        None => allowed,
    };
    let mut options = LoadOptions::new(default_cpus);
    if let Some(dir) = &a.temp_dir {
        options.temp_dir = dir.clone();
    }
    Ok(Plan {
        specs,
        duration,
        options,
    })
}

pub fn load(a: &LoadArgs) -> Result<u8, Failure> {
    let p = plan(a)?;
    let terminate = signal::TERMINATING;
    // Blocked before any load thread exists, so that every thread inherits the mask and the
    // signals reach only this thread's wait below.
    signal::block(&terminate)
        .map_err(|e| Failure::runtime(format!("cannot block SIGINT, SIGTERM and SIGHUP: {e}")))?;
    let outcome = run_blocked(&p);
    let _ = signal::unblock(&terminate);
    let (state, end_detail, elapsed, reports) = outcome?;

    let profile = load::format_profile(&p.specs);
    if a.json {
        print_json(&LoadRun {
            schema: JSON_SCHEMA,
            profile,
            duration_ns: p.duration,
            elapsed_ns: elapsed,
            state,
            end_detail,
            loads: &reports,
        })?;
    } else {
        crate::common::print_text(|out| {
            write_table(out, &profile, p.duration, state, &end_detail, &reports)
        })?;
    }
    let failed: Vec<&LoadReport> = reports.iter().filter(|r| r.error.is_some()).collect();
    for r in &failed {
        eprintln!(
            "sandglass: error: load {}: {}",
            r.spec,
            r.error.as_deref().unwrap_or_default()
        );
    }
    Ok(if failed.is_empty() { 0 } else { 1 })
}

/// Starts the loads, waits for the end or a signal, stops them.
fn run_blocked(p: &Plan) -> Result<(RunState, String, Nanos, Vec<LoadReport>), Failure> {
    let terminate = signal::TERMINATING;
    crate::common::end_leftover_loads();
    let running = load::start(&p.specs, &p.options).map_err(|e| {
        if e.is_usage() {
            Failure::usage(e.to_string())
        } else {
            Failure::runtime(e.to_string())
        }
    })?;
    let start = Instant::now();
    let total = p.duration.0;
    if !crate::common::quiet() {
        eprintln!(
            "sandglass: running {} for {}; Ctrl-C stops early and keeps what the loads did",
            load::format_profile(&p.specs),
            p.duration
        );
    }
    let mut state = RunState::Completed;
    let mut end_detail = "ran for the whole duration".to_string();
    loop {
        let elapsed = start.elapsed().as_nanos() as u64;
        if elapsed >= total {
            break;
        }
        if let Some(sig) = signal::wait_timeout(&terminate, (total - elapsed).min(1_000_000_000)) {
            state = RunState::Interrupted;
            end_detail = format!("stopped by {} after {}", signal::name(sig), Nanos(elapsed));
            break;
        }
    }
    let elapsed = Nanos(start.elapsed().as_nanos() as u64);
    let reports = running.stop();
    // A signal that came while the loads stopped ends nothing more, but the run was cut short.
    while let Some(sig) = signal::wait_timeout(&terminate, 0) {
        if state == RunState::Completed {
            state = RunState::Interrupted;
            end_detail = format!("stopped by {} at the end of the run", signal::name(sig));
        }
    }
    Ok((state, end_detail, elapsed, reports))
}

fn write_table(
    w: &mut dyn Write,
    profile: &str,
    duration: Nanos,
    state: RunState,
    end_detail: &str,
    reports: &[LoadReport],
) -> io::Result<()> {
    writeln!(
        w,
        "sandglass load {profile}: {duration} requested; {} ({end_detail})",
        state.name()
    )?;
    if reports.is_empty() {
        return writeln!(w, "no loads ran (idle)");
    }
    sandglass_report::load::write(w, reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_every_load_and_its_detail() {
        let r = LoadReport {
            spec: "disk@1".into(),
            kind: "disk".into(),
            intensity: 1,
            cpus: "1".into(),
            duration_ns: 500_000_000,
            work: 64.0 * 1024.0 * 1024.0,
            unit: "bytes".into(),
            per_s: 128.0 * 1024.0 * 1024.0,
            detail: Some("2 fsyncs (4.0/s)".into()),
            error: None,
        };
        let cmd = LoadReport {
            spec: "cmd:sleep 100".into(),
            kind: "cmd".into(),
            cpus: "0-1".into(),
            work: 0.0,
            unit: String::new(),
            per_s: 0.0,
            detail: Some("stopped with SIGINT (ended by SIGINT)".into()),
            ..r.clone()
        };
        let mut out = Vec::new();
        write_table(
            &mut out,
            "disk@1+cmd:sleep 100",
            Nanos(500_000_000),
            RunState::Completed,
            "ran for the whole duration",
            &[r, cmd],
        )
        .expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        let expected = "\
sandglass load disk@1+cmd:sleep 100: 500 ms requested; completed (ran for the whole duration)
load           CPUs  throughput    work    time
disk@1         1      128 MiB/s  64 MiB  500 ms
  2 fsyncs (4.0/s)
cmd:sleep 100  0-1            -       -  500 ms
  stopped with SIGINT (ended by SIGINT)
";
        assert_eq!(text, expected);
    }
}
