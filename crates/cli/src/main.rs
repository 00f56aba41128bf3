//! The `sandglass` command: parses arguments, runs the library, prints, and maps outcomes to
//! exit codes (0 success, 1 failure while running, 2 bad input or a command that cannot run as
//! given).

mod calibrate;
mod common;
mod hourglass;
mod sysinfo;

use clap::{Parser, Subcommand};
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
    Quick(hourglass::QuickArgs),
    /// Measure the cycle counter and the polling loop's iteration times on one CPU
    Calibrate(calibrate::CalibrateArgs),
    /// Print the system snapshot that every run records
    Sysinfo {
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Hourglass { args } => hourglass::hourglass(args),
        Command::Quick(a) => hourglass::quick(a),
        Command::Calibrate(a) => calibrate::calibrate(a),
        Command::Sysinfo { json } => sysinfo::sysinfo(*json),
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
