//! The `sandglass` command: parses arguments, runs the library, prints, and maps outcomes to
//! exit codes (0 success, 1 failure while running, 2 bad input or a command that cannot run as
//! given).

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use sandglass::hourglass::cmdline::{self, Command as HgCommand};
use sandglass::hourglass::run::{self, Observer, RunContext, RunError};
use sandglass::store::{self, Tool};
use sandglass::warning::Warning;
use sandglass::Nanos;
use sandglass_report::hourglass as hg_report;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SANDGLASS_GIT_COMMIT"),
    ")"
);

/// Measure, explain and predict the timing service Linux gives to time-critical work.
#[derive(Parser)]
#[command(name = "sandglass", version = VERSION, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Hourglass (Regehr, USENIX 2002): threads with execution models record exactly when each
    /// held a CPU; accepts the paper's command lines verbatim (see `sandglass hourglass --help`)
    #[command(disable_help_flag = true)]
    Hourglass {
        /// Hourglass options, as in the paper's Appendix A
        #[arg(allow_hyphen_values = true, trailing_var_arg = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// The default measurement: dispatch latency of a 1 ms real-time timer thread and every
    /// interruption of a CPU-bound thread sharing its CPU
    Quick(QuickArgs),
    /// Measure the cycle counter and the polling loop's iteration times on one CPU
    Calibrate(CalibrateArgs),
    /// Print the system snapshot that every run records
    Sysinfo {
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct QuickArgs {
    /// How long to measure (self-describing time: 10s, 1m, 500ms)
    #[arg(short, long, default_value = "10s")]
    duration: String,
    /// Run directory (default ./sandglass-runs/<id>)
    #[arg(short, long)]
    output: Option<PathBuf>,
}

#[derive(Args)]
struct CalibrateArgs {
    /// CPU to measure on (default: the highest-numbered CPU this process may use)
    #[arg(long)]
    cpu: Option<usize>,
    /// How long to run each loop
    #[arg(short, long, default_value = "2s")]
    duration: String,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

/// An error with the exit code it deserves.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }
    fn runtime(message: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<RunError> for Failure {
    fn from(e: RunError) -> Failure {
        match e {
            RunError::Usage(m) => Failure::usage(m),
            RunError::Failed(m) => Failure::runtime(m),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        // Output that cannot be written because the reader went away is not an error.
        if e.chain().any(|c| {
            c.downcast_ref::<io::Error>()
                .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
        }) {
            return Failure {
                code: 0,
                message: String::new(),
            };
        }
        Failure::runtime(format!("{e:#}"))
    }
}

/// Prints what a run has to say on standard error: warnings and notes always, a progress line
/// only on a terminal.
struct Console {
    tty: bool,
    progress_shown: bool,
}

impl Console {
    fn new() -> Console {
        Console {
            tty: sandglass_sys::process::is_terminal(2),
            progress_shown: false,
        }
    }
    fn clear(&mut self) {
        if self.progress_shown {
            eprint!("\r\x1b[K");
            self.progress_shown = false;
        }
    }
}

impl Observer for Console {
    fn warning(&mut self, w: &Warning) {
        self.clear();
        eprintln!("sandglass: warning: {}", w.message);
    }
    fn note(&mut self, text: &str) {
        self.clear();
        eprintln!("sandglass: {text}");
    }
    fn progress(&mut self, elapsed: Nanos, total: Nanos) {
        if self.tty {
            eprint!(
                "\rsandglass: {} of {} measured",
                Nanos(elapsed.0 - elapsed.0 % 1_000_000_000),
                total
            );
            let _ = io::stderr().flush();
            self.progress_shown = true;
        }
    }
}

fn tool() -> Tool {
    Tool {
        name: "sandglass".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("SANDGLASS_GIT_COMMIT").to_string(),
    }
}

fn context() -> RunContext {
    RunContext {
        command_line: std::env::args().collect(),
        tool: tool(),
        base_dir: store::default_base(),
    }
}

fn hourglass(args: &[String]) -> Result<u8, Failure> {
    let spec = match cmdline::parse(args) {
        Ok(HgCommand::Help) => {
            print!("{}", cmdline::HELP);
            return Ok(0);
        }
        Ok(HgCommand::Run(spec)) => spec,
        Err(e) => return Err(Failure::usage(e.to_string())),
    };
    let mut console = Console::new();
    let result = run::run(&spec, &context(), &mut console);
    console.clear();
    let result = result?;
    let opts = hg_report::Options {
        trace: !spec.suppress_trace,
        raw_cycles: spec.raw_cycles,
        gap_histogram: spec.gap_histogram,
        latlate: true,
    };
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    hg_report::write(&mut out, &result, &opts)
        .and_then(|_| out.flush())
        .context("writing the output")?;
    Ok(exit_code_for(&result.state))
}

fn exit_code_for(state: &store::RunState) -> u8 {
    match state {
        store::RunState::Watchdog | store::RunState::Failed => 1,
        _ => 0,
    }
}

/// The words of the quick measurement, as an Hourglass command line.
fn quick_words(duration: &str, output: Option<&PathBuf>) -> Vec<String> {
    let mut w: Vec<String> = [
        "-n", "2", "-d", duration, "-x", "-t", "0", "-p", "RTHIGH", "-w", "LAT", "1ms", "-i", "HR",
        "-t", "1", "-p", "NORMAL", "-w", "CPU",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(o) = output {
        w.push("-o".into());
        w.push(o.display().to_string());
    }
    w
}

fn quick(a: &QuickArgs) -> Result<u8, Failure> {
    let words = quick_words(&a.duration, a.output.as_ref());
    let spec = match cmdline::parse(&words) {
        Ok(HgCommand::Run(spec)) => spec,
        Ok(HgCommand::Help) => return Ok(0),
        Err(e) => return Err(Failure::usage(e.to_string())),
    };
    eprintln!(
        "sandglass: quick measurement, the same as: sandglass hourglass {}",
        words.join(" ")
    );
    let mut console = Console::new();
    let result = run::run(&spec, &context(), &mut console);
    console.clear();
    let result = result?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    hg_report::write_summary(&mut out, &result)
        .and_then(|_| out.flush())
        .context("writing the output")?;
    Ok(exit_code_for(&result.state))
}

fn calibrate_cmd(a: &CalibrateArgs) -> Result<u8, Failure> {
    let d = sandglass::duration::parse(&a.duration)
        .map_err(|e| Failure::usage(format!("--duration {}: {e}", a.duration)))?;
    if d.0 == 0 {
        return Err(Failure::usage("--duration must be longer than zero"));
    }
    let allowed = sandglass::system::allowed_cpus();
    let cpu = a
        .cpu
        .unwrap_or_else(|| allowed.iter().copied().max().unwrap_or(0));
    if !allowed.contains(&cpu) {
        return Err(Failure::usage(format!(
            "--cpu {cpu}: this process may not use CPU {cpu} (allowed: {:?})",
            allowed
        )));
    }
    let sys = sandglass::system::snapshot();
    let counter = sandglass::clock::select_counter(Default::default(), &sys.cpu_flags)
        .map_err(|e| Failure::usage(e.to_string()))?;
    let survey = sandglass::survey::run(cpu, counter.kind, d.0)
        .ok_or_else(|| Failure::runtime("the calibration thread failed"))?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    if a.json {
        let v = serde_json::json!({
            "cpu": cpu,
            "counter": counter,
            "calibration": survey.calibration,
            "loops": survey.loops.iter().map(|l| serde_json::json!({
                "loop": l.name,
                "stats": l.stats,
                "above_ns": l.above_ns
                    .iter()
                    .map(|(ns, c)| (ns.to_string(), serde_json::Value::from(*c)))
                    .collect::<serde_json::Map<String, serde_json::Value>>(),
            })).collect::<Vec<_>>(),
            "gap_threshold": survey.threshold,
        });
        serde_json::to_writer_pretty(&mut out, &v).map_err(|e| Failure::runtime(e.to_string()))?;
        writeln!(out).context("writing the output")?;
    } else {
        writeln!(
            out,
            "counter: {:?} at {:.3} MHz (uncertainty {:.3} ppm); {}",
            counter.kind,
            survey.calibration.frequency_hz / 1e6,
            survey.calibration.uncertainty_ppm,
            counter.reason
        )
        .context("writing the output")?;
        writeln!(
            out,
            "{:<44} {:>12} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10}",
            format!("loop on CPU {cpu}"),
            "iterations",
            "mean",
            "p50",
            "p99",
            "p99.9",
            "p99.99",
            "p99.999",
            "max"
        )
        .context("writing the output")?;
        for l in &survey.loops {
            let s = &l.stats;
            writeln!(
                out,
                "{:<44} {:>12} {:>7.1}n {:>7.1}n {:>7.1}n {:>7.1}n {:>8.1}n {:>8.1}n {:>10}",
                l.name,
                s.iterations,
                s.mean_ns,
                s.p50_ns,
                s.p99_ns,
                s.p99_9_ns,
                s.p99_99_ns,
                s.p99_999_ns,
                Nanos(s.max_ns as u64).to_string()
            )
            .context("writing the output")?;
        }
        if let Some(c) = &survey.threshold {
            writeln!(
                out,
                "gap threshold: {} ns ({})",
                c.threshold_ns, c.explanation
            )
            .context("writing the output")?;
        }
    }
    out.flush().context("writing the output")?;
    Ok(0)
}

fn sysinfo(json: bool) -> Result<u8, Failure> {
    let s = sandglass::system::snapshot();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    if json {
        serde_json::to_writer_pretty(&mut out, &s).map_err(|e| Failure::runtime(e.to_string()))?;
        writeln!(out).context("writing the output")?;
    } else {
        let v = serde_json::to_value(&s).map_err(|e| Failure::runtime(e.to_string()))?;
        if let serde_json::Value::Object(m) = v {
            for (k, v) in m {
                let text = match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                writeln!(out, "{k:<20} {text}").context("writing the output")?;
            }
        }
    }
    out.flush().context("writing the output")?;
    Ok(0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Hourglass { args } => hourglass(args),
        Command::Quick(a) => quick(a),
        Command::Calibrate(a) => calibrate_cmd(a),
        Command::Sysinfo { json } => sysinfo(*json),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if !f.message.is_empty() {
                eprintln!("sandglass: error: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_is_a_valid_hourglass_command_line() {
        let words = quick_words("10s", None);
        assert!(matches!(cmdline::parse(&words), Ok(HgCommand::Run(_))));
    }
}
