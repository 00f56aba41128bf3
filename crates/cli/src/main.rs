//! The `sandglass` command: parses arguments, runs the library, prints, and maps outcomes to
//! exit codes (0 success, 1 failure while running, 2 bad input or a command that cannot run as
//! given).

/// Standard output and standard error printed without ever panicking, and lines printed
/// safely. The standard library's `println!` and `eprintln!` panic when the stream cannot be
/// written: a pipe whose reader has gone (`sandglass runs list | head -1`), a terminal that
/// hung up. These replace them in every module of the command (a `macro_rules!` defined before
/// the modules shadows the prelude's): the line is lost, the run and its files are not. A line
/// is printed with its control and bidirectional-override characters escaped (it may name a
/// file, a task or a thread; see `sandglass::printable`); `print!` and `eprint!` write as given
/// (the live display's cursor moves). Output whose loss matters (a report, JSON) is written
/// with `write!` and its error handled, a closed pipe as a quiet end.
macro_rules! println {
    () => {
        println!("")
    };
    ($($arg:tt)+) => {{
        use std::io::Write as _;
        let line = format!($($arg)+);
        let _ = writeln!(std::io::stdout(), "{}", sandglass::printable::PrintableText(&line));
    }};
}
macro_rules! print {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}
macro_rules! eprintln {
    () => {
        eprintln!("")
    };
    ($($arg:tt)+) => {{
        use std::io::Write as _;
        let line = format!($($arg)+);
        let _ = writeln!(std::io::stderr(), "{}", sandglass::printable::PrintableText(&line));
    }};
}
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod analyze;
mod bench;
mod calibrate;
mod check;
mod common;
mod compare;
mod discover;
mod export;
mod hourglass;
mod load;
mod manual;
mod monitor;
mod noise;
mod report;
mod runs;
mod schema;
mod study;
mod sysinfo;
mod timer;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SANDGLASS_GIT_COMMIT"),
    ")"
);

/// Measure, explain and predict the timing service Linux gives to time-critical work.
#[derive(Parser)]
#[command(
    name = "sandglass",
    version = VERSION,
    arg_required_else_help = true,
    max_term_width = 100
)]
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
        /// Hourglass options, as in the paper's Appendix A; -q or --quiet prints nothing but
        /// errors (the run directory keeps everything)
        #[arg(allow_hyphen_values = true, trailing_var_arg = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Timer wakeup latency on every chosen CPU, every missed release counted (cyclictest's
    /// measurement without coordinated omission)
    Timer(timer::TimerArgs),
    /// OS noise on every chosen CPU: every interruption of a polling thread (oslat, sysjitter)
    Noise(noise::NoiseArgs),
    /// Can this machine carry a workload (audio:64@48000x2, control:1ms:500us, video:60, a task
    /// file)? Configuration scan, a measurement at its period and priority, the miss
    /// probability and mean time between misses with intervals, a verdict and ranked fixes
    Check(check::CheckArgs),
    /// Schedulability, tail prediction, buffer underrun, cost models and statistics, fed by
    /// published examples or by measured runs
    Analyze(analyze::AnalyzeArgs),
    /// Cost microbenchmarks: memory copy, IPC, context switches, file reads, timer overhead,
    /// per-frame budgets
    Bench(bench::BenchArgs),
    /// Run a load profile alone and report its throughput
    Load(load::LoadArgs),
    /// Run a study: a matrix of measurements × loads × settings × repetitions, printed as
    /// tables (built-in: quick, mach, wdm, hourglass, timers)
    Study(study::StudyArgs),
    /// The main job, the same as `sandglass study quick`: timer latency and OS noise on every
    /// CPU, idle and under cpu+disk load, in about a minute
    Quick(study::QuickArgs),
    /// A finished run or study again: its summary, Markdown, an HTML page with plots, or
    /// exports for other tools (CSV, a cyclictest histogram, a Perfetto trace)
    Report(report::ReportArgs),
    /// Timer latency without end, in catalogued hourly segments with a duty cycle and
    /// retention, served to Prometheus at /metrics (ends cleanly on SIGTERM or Ctrl-C)
    Monitor(monitor::MonitorArgs),
    /// A live per-CPU table of timer latency, redrawn every second like `rtla timerlat top`
    /// (current, min, mean, max, p99 of the last 10 s, missed releases); the same as `sandglass
    /// monitor --top`, so every sample is kept as segments; q quits
    Top(monitor::MonitorArgs),
    /// The catalog of runs and studies: list, show, rm, import, rebuild
    Runs(runs::RunsArgs),
    /// Key figures of timer or noise runs side by side, regressions flagged, and gates for CI
    /// (exit 0 no gate crossed, 2 a gate crossed, 1 an error)
    Compare(compare::CompareArgs),
    /// Measure the cycle counter and the polling loop's iteration times on one CPU
    Calibrate(calibrate::CalibrateArgs),
    /// Print the JSON Schema of a `--json` output (timer, check, noise, hourglass, study, load,
    /// bench-KIND, compare, runs, sysinfo), as committed in docs/schema/
    Schema {
        /// The output's kind, as in its `schema` field (`sandglass-KIND/N`)
        kind: String,
    },
    /// Print the system snapshot that every run records
    Sysinfo {
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Print a man page in roff: sandglass's own, or a command's (such as `sandglass man
    /// timer > sandglass-timer.1`), or write every page into a directory with --all
    Man {
        /// The command whose page to print, such as timer or analyze rta (default: the top
        /// page)
        #[arg(value_name = "COMMAND", conflicts_with = "all")]
        command: Vec<String>,
        /// Write the page of sandglass and of every command into DIR (sandglass.1,
        /// sandglass-timer.1, sandglass-analyze-rta.1, ...), such as /usr/local/share/man/man1
        #[arg(long, value_name = "DIR")]
        all: Option<std::path::PathBuf>,
    },
    /// Print shell completions, such as `sandglass completions bash >
    /// /etc/bash_completion.d/sandglass`
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
}

/// Parses the command line. Help and version go to standard output as clap prints them; any
/// other problem becomes one `sandglass: error:` line and exit code 2.
fn parse() -> Result<Cli, ExitCode> {
    use clap::error::ErrorKind;
    use clap::FromArgMatches;
    let parsed = manual::with_help_sections(Cli::command())
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => Ok(cli),
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                let _ = e.print();
                Err(ExitCode::SUCCESS)
            }
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                let _ = e.print();
                Err(ExitCode::from(2))
            }
            _ => {
                let text = e.render().to_string();
                let first = text
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("bad command line")
                    .trim_start_matches("error: ")
                    .to_string();
                // "the following required arguments were not provided:" names them below.
                let first = match (
                    first.ends_with(':'),
                    text.lines().skip(1).find(|l| !l.trim().is_empty()),
                ) {
                    (true, Some(next)) => format!("{first} {}", next.trim()),
                    _ => first,
                };
                let tip = text
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("tip: "))
                    .map(|t| format!("; {t}"))
                    .unwrap_or_default();
                eprintln!("sandglass: error: {first}{tip} (see 'sandglass --help')");
                // compare keeps 2 for a crossed gate, as rtla does: any error there is 1.
                let compare = std::env::args().nth(1).as_deref() == Some("compare");
                Err(ExitCode::from(if compare { 1 } else { 2 }))
            }
        },
    }
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    common::set_quiet(match &cli.command {
        Command::Timer(a) => a.run.quiet.quiet,
        Command::Noise(a) => a.run.quiet.quiet,
        Command::Check(a) => a.run.quiet.quiet,
        Command::Study(a) => a.quiet.quiet,
        Command::Quick(a) => a.quiet.quiet,
        Command::Bench(a) => a.run.quiet.quiet,
        Command::Load(a) => a.quiet.quiet,
        Command::Monitor(a) | Command::Top(a) => a.quiet.quiet,
        Command::Hourglass { args } => hourglass::quiet(args),
        _ => false,
    });
    let result = match &cli.command {
        Command::Hourglass { args } => hourglass::hourglass(args),
        Command::Quick(a) => study::quick(a),
        Command::Study(a) => study::study(a),
        Command::Timer(a) => timer::timer(a),
        Command::Analyze(a) => analyze::analyze(a),
        Command::Bench(a) => bench::bench(a),
        Command::Load(a) => load::load(a),
        Command::Noise(a) => noise::noise(a),
        Command::Check(a) => check::check(a),
        Command::Compare(a) => compare::compare(a),
        Command::Monitor(a) => monitor::monitor(a, false),
        Command::Top(a) => monitor::monitor(a, true),
        Command::Runs(a) => runs::runs(a),
        Command::Report(a) => report::report(a),
        Command::Calibrate(a) => calibrate::calibrate(a),
        Command::Schema { kind } => schema::schema(kind),
        Command::Sysinfo { json } => sysinfo::sysinfo(*json),
        Command::Man { command, all } => match all {
            Some(dir) => discover::man_all(Cli::command(), dir),
            None => discover::man(Cli::command(), command),
        },
        Command::Completions { shell } => discover::completions(Cli::command(), *shell),
    };
    // SIGTERM, SIGHUP and Ctrl-C are how a monitor ends: its exit code says only whether it
    // failed.
    let ends_on_signal = matches!(cli.command, Command::Monitor(_) | Command::Top(_));
    match result {
        Ok(0) if ends_on_signal => ExitCode::SUCCESS,
        // A run that SIGINT, SIGTERM or SIGHUP ended early has printed and kept what it
        // measured, and says it was cut short as a shell would: 130 after Ctrl-C, 143 after
        // SIGTERM, 129 after a hang-up.
        Ok(0) => match sandglass_sys::signal::termination() {
            Some(sig) => ExitCode::from(u8::try_from(128 + sig).unwrap_or(1)),
            None => ExitCode::SUCCESS,
        },
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if !f.message.is_empty() {
                // A message may quote a name from a file (a task, a path): `eprintln!` escapes it.
                eprintln!("sandglass: error: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}
