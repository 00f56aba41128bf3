//! What every subcommand shares: errors with their exit codes, the console observer, the tool's
//! identity.

use sandglass::hourglass::run::{Observer, RunContext, RunError};
use sandglass::store::{self, Tool};
use sandglass::warning::Warning;
use sandglass::Nanos;
use std::io::{self, Write};

/// An error with the exit code it deserves.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }
    pub fn runtime(message: impl Into<String>) -> Failure {
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
pub struct Console {
    tty: bool,
    progress_shown: bool,
}

impl Console {
    pub fn new() -> Console {
        Console {
            tty: sandglass_sys::process::is_terminal(2),
            progress_shown: false,
        }
    }
    pub fn clear(&mut self) {
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

pub fn tool() -> Tool {
    Tool {
        name: "sandglass".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("SANDGLASS_GIT_COMMIT").to_string(),
    }
}

pub fn context() -> RunContext {
    RunContext {
        command_line: std::env::args().collect(),
        tool: tool(),
        base_dir: store::default_base(),
    }
}

/// The exit code for a run that produced a result: 1 when it did not end normally.
pub fn exit_code_for(state: &store::RunState) -> u8 {
    match state {
        store::RunState::Watchdog | store::RunState::Failed => 1,
        _ => 0,
    }
}
