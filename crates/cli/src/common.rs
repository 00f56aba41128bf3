//! What every subcommand shares: errors with their exit codes, the console observer, the tool's
//! identity.

use sandglass::runner::{LiveRow, Observer, RunContext, RunError};
use sandglass::store::{self, Tool};
use sandglass::warning::Warning;
use sandglass::Nanos;
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// `-q`/`--quiet`, shared by the commands that measure.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct QuietFlag {
    /// Print nothing but errors and what --json asks for: no progress, notes, warnings or
    /// summary (the run directory keeps them all)
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,
}

/// The flags every command that records one run takes, meaning the same in each: where the run
/// goes, JSON instead of text, and quiet. Flattened into `timer`, `noise`, `check` and `bench`
/// (global there, so that they may follow the bench kind).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RunFlags {
    /// Run directory (default ./sandglass-runs/<id>)
    #[arg(short, long, global = true)]
    pub output: Option<std::path::PathBuf>,
    /// Print one JSON object on standard output instead of the text (its JSON Schema: sandglass
    /// schema KIND)
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub quiet: QuietFlag,
}

/// Whether this process prints only errors and what `--json` asks for. Set once by `main`
/// from the command's `--quiet`, before anything runs; read by every place that prints.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Sets [`quiet`] for the rest of the process.
pub fn set_quiet(on: bool) {
    QUIET.store(on, Ordering::Relaxed);
}

/// True when `--quiet` was given: progress, notes, warnings and summaries are not printed.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Writes a command's text summary to standard output, unless `--quiet` was given.
pub fn print_text(write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<(), Failure> {
    use anyhow::Context;
    if quiet() {
        return Ok(());
    }
    let mut out = text_stdout();
    write(&mut out)
        .and_then(|_| out.flush())
        .context("writing the output")?;
    Ok(())
}

/// Standard output for text (summaries, tables, Markdown, lists), buffered, with every control
/// or bidirectional-override character escaped but newlines and tabs: the text may hold names
/// from files and from the system (task, study and thread names, paths), and must show them
/// as they are, not let them drive the terminal. JSON goes out as it is (its own escaping).
pub fn text_stdout() -> io::BufWriter<sandglass::printable::EscapingWriter<io::StdoutLock<'static>>>
{
    io::BufWriter::new(sandglass::printable::EscapingWriter::new(
        io::stdout().lock(),
    ))
}

/// An error with the exit code it deserves.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// A usage error (exit code 2): the message names what was wrong and how to fix it.
    pub fn usage(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 2,
            message: message.to_string(),
        }
    }
    /// A failure while running (exit code 1).
    pub fn runtime(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 1,
            message: message.to_string(),
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
    /// Lines of the live display currently on the screen (the cursor is below them).
    shown: usize,
    /// What a live row counts (`wakeups`, `interruptions`), or `None` for no per-thread rows.
    events: Option<&'static str>,
    progress: String,
}

impl Console {
    /// A console with a progress line only.
    pub fn new() -> Console {
        Console {
            tty: io::stderr().is_terminal(),
            shown: 0,
            events: None,
            progress: String::new(),
        }
    }

    /// A console that also shows one live line per measuring thread, counting `events`.
    pub fn with_live_rows(events: &'static str) -> Console {
        Console {
            events: Some(events),
            ..Console::new()
        }
    }

    /// Erases the live display, so that the next output starts on a clean line.
    pub fn clear(&mut self) {
        if self.shown > 0 {
            // Up to the first line of the display, then clear to the end of the screen.
            eprint!("\x1b[{}F\x1b[J", self.shown);
            let _ = io::stderr().flush();
            self.shown = 0;
        }
    }

    fn draw(&mut self, lines: &[String]) {
        self.clear();
        let mut text = String::new();
        for l in lines {
            text.push_str(&sandglass::printable::escape(l));
            text.push('\n');
        }
        eprint!("{text}");
        let _ = io::stderr().flush();
        self.shown = lines.len();
    }
}

/// The console half of [`Observer`], written inside the `impl Observer` of a type whose
/// `console` field is a [`Console`]: warnings, notes, progress and the live display go to it,
/// and the type adds what it observes itself (a study's cells, a check's early end).
macro_rules! console_observer {
    () => {
        fn warning(&mut self, w: &sandglass::warning::Warning) {
            sandglass::runner::Observer::warning(&mut self.console, w);
        }
        fn note(&mut self, text: &str) {
            sandglass::runner::Observer::note(&mut self.console, text);
        }
        fn progress(&mut self, elapsed: sandglass::Nanos, total: sandglass::Nanos) {
            sandglass::runner::Observer::progress(&mut self.console, elapsed, total);
        }
        fn live(&mut self, elapsed: sandglass::Nanos, rows: &[sandglass::runner::LiveRow]) {
            sandglass::runner::Observer::live(&mut self.console, elapsed, rows);
        }
    };
}
pub(crate) use console_observer;

impl Observer for Console {
    fn warning(&mut self, w: &Warning) {
        if quiet() {
            return;
        }
        self.clear();
        eprintln!("sandglass: warning: {}", w.message);
    }
    fn note(&mut self, text: &str) {
        if quiet() {
            return;
        }
        self.clear();
        eprintln!("sandglass: {text}");
    }
    fn progress(&mut self, elapsed: Nanos, total: Nanos) {
        if !self.tty || quiet() {
            return;
        }
        self.progress = format!(
            "sandglass: {} of {} measured",
            Nanos(elapsed.0 - elapsed.0 % 1_000_000_000),
            total
        );
        if self.events.is_none() {
            let line = self.progress.clone();
            self.draw(&[line]);
        }
    }
    fn live(&mut self, _elapsed: Nanos, rows: &[LiveRow]) {
        let Some(events) = self.events else {
            return;
        };
        if !self.tty || quiet() {
            return;
        }
        let mut lines = vec![self.progress.clone()];
        for r in rows {
            let cpu = r
                .cpu
                .map(|c| format!("CPU {c}"))
                .unwrap_or_else(|| format!("thread {}", r.thread));
            let missed = if r.missed > 0 {
                format!(", {} missed", r.missed)
            } else {
                String::new()
            };
            lines.push(format!(
                "  {cpu}: {} {events}{missed}, max {}",
                r.events,
                Nanos(r.max_ns)
            ));
        }
        self.draw(&lines);
    }
}

pub fn tool() -> Tool {
    Tool {
        name: "sandglass".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("SANDGLASS_GIT_COMMIT").to_string(),
    }
}

/// The context of a run about to start. Starting is also when the runs and studies that a
/// killed or crashed process left `running` in the runs directory are marked `incomplete`
/// ([`settle_store`]).
pub fn context() -> RunContext {
    end_leftover_loads();
    end_leftover_tracing();
    settle_store();
    RunContext {
        command_line: std::env::args().collect(),
        tool: tool(),
        base_dir: store::default_base(),
        faults: sandglass::plan::Faults::parse(
            &std::env::var(sandglass::plan::FAULT_ENV).unwrap_or_default(),
        ),
        shared_cpus: Some(false),
    }
}

/// The exit code for a run that produced a result: 1 when it did not end normally. A run whose
/// store could not be written (a full disk) ends with one error line saying why, after its
/// summary: what it measured until then is kept.
pub fn exit_code_for(state: &store::RunState) -> u8 {
    match state {
        store::RunState::Watchdog | store::RunState::Failed | store::RunState::Incomplete => 1,
        _ => 0,
    }
}

/// How a command that ran a measurement ends, from the run's header.
pub fn run_outcome(run: &sandglass::result::RunHeader) -> Result<u8, Failure> {
    match run.state {
        store::RunState::Incomplete => Err(Failure::runtime(format!(
            "{}: {}",
            run.run_dir, run.end_detail
        ))),
        s => Ok(exit_code_for(&s)),
    }
}

/// A time string given to `flag`, as a usage error naming the flag when it is bad.
pub fn time_arg(flag: &str, value: &str) -> Result<Nanos, Failure> {
    sandglass::duration::parse(value).map_err(|e| Failure::usage(format!("{flag} {value}: {e}")))
}

/// A CPU list given to `flag`.
pub fn cpus_arg(flag: &str, value: &str) -> Result<sandglass::cpulist::CpuList, Failure> {
    sandglass::cpulist::CpuList::parse(value)
        .map_err(|e| Failure::usage(format!("{flag} {value}: {e}")))
}

/// A policy in rtla's syntax (or an Hourglass priority name) given to `-P`.
pub fn policy_arg(value: &str) -> Result<sandglass::policy::Policy, Failure> {
    sandglass::policy::Policy::parse(value).map_err(|e| Failure::usage(format!("-P {value}: {e}")))
}

/// A flag that takes one of a fixed set of values, or whose value the library parses (several
/// names separated by commas, or `all`; a preset's name): typed at the command line, its names
/// offered to completions and listed in help, and any other value refused with the flag's own
/// line.
#[derive(Clone)]
pub struct Parsed<T: 'static> {
    /// The names a value is made of, for completions and help.
    names: fn() -> Vec<&'static str>,
    parse: fn(&str) -> Result<T, String>,
}

impl<T: Clone + Send + Sync + 'static> clap::builder::TypedValueParser for Parsed<T> {
    type Value = T;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        (self.parse)(&value.to_string_lossy())
            .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e + "\n"))
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            (self.names)()
                .into_iter()
                .map(clap::builder::PossibleValue::new),
        ))
    }
}

/// `names`, then `all`.
fn and_all(names: impl Iterator<Item = &'static str>) -> Vec<&'static str> {
    names.chain(["all"]).collect()
}

/// `--mech pipe,tcp,...|all` of `bench ipc`.
pub const MECHANISMS: Parsed<Vec<sandglass::microbench::ipc::Mechanism>> = Parsed {
    names: || {
        and_all(
            sandglass::microbench::ipc::Mechanism::ALL
                .iter()
                .map(|m| m.name()),
        )
    },
    parse: |v| sandglass::microbench::ipc::parse_mechanisms(v).map_err(|e| e.to_string()),
};

/// `--placement same-cpu|cross-cpu` of `bench ipc`.
pub const PLACEMENT: Parsed<sandglass::microbench::Placement> = Parsed {
    names: || {
        [
            sandglass::microbench::Placement::SameCpu,
            sandglass::microbench::Placement::CrossCpu,
        ]
        .map(|p| p.name())
        .to_vec()
    },
    parse: |v| sandglass::microbench::Placement::parse(v).map_err(|e| e.to_string()),
};

/// `--methods buffered,read,...|all` of `bench file`.
pub const METHODS: Parsed<Vec<sandglass::microbench::file::Method>> = Parsed {
    names: || {
        and_all(
            sandglass::microbench::file::Method::ALL
                .iter()
                .map(|m| m.name()),
        )
    },
    parse: |v| sandglass::microbench::file::parse_methods(v).map_err(|e| e.to_string()),
};

/// `--timers hr,timerfd,...|all` of `bench timer-overhead`.
pub const OVERHEAD_TIMERS: Parsed<Vec<sandglass::model::TimerKind>> = Parsed {
    // sandglass::microbench::timer_overhead::KINDS as typed (a unit test keeps them equal).
    names: || vec!["hr", "timerfd", "posix", "native", "all"],
    parse: |v| sandglass::microbench::timer_overhead::parse_timers(v).map_err(|e| e.to_string()),
};

/// `--usage continuous|office|...` of `analyze worst-case`.
pub const USAGE: Parsed<&'static sandglass::analysis::worst_case::Preset> = Parsed {
    names: || {
        sandglass::analysis::worst_case::PRESETS
            .iter()
            .map(|p| p.name)
            .collect()
    },
    parse: |v| {
        sandglass::analysis::worst_case::preset(v).ok_or_else(|| {
            format!(
                "--usage {v}: use one of {}",
                sandglass::analysis::worst_case::PRESETS
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    },
};

/// The names of a fixed set of values.
fn names_of<T>(values: &'static [(&'static str, T)]) -> Vec<&'static str> {
    values.iter().map(|(name, _)| *name).collect()
}

/// The value named `text` (in any case) among `values`.
fn pick<T: Clone>(values: &[(&str, T)], text: &str) -> Option<T> {
    let key = text.to_ascii_lowercase();
    values
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, v)| v.clone())
}

const COUNTERS: &[(&str, sandglass::clock::CounterChoice)] = &[
    ("auto", sandglass::clock::CounterChoice::Auto),
    ("tsc", sandglass::clock::CounterChoice::Tsc),
    ("raw", sandglass::clock::CounterChoice::Raw),
];

/// `--counter auto|tsc|raw`.
pub const COUNTER: Parsed<sandglass::clock::CounterChoice> = Parsed {
    names: || names_of(COUNTERS),
    parse: |v| pick(COUNTERS, v).ok_or_else(|| format!("--counter {v}: use auto, tsc or raw")),
};

const TIMERS: &[(&str, sandglass::model::TimerKind)] = &[
    ("hr", sandglass::model::TimerKind::Hr),
    ("native", sandglass::model::TimerKind::Native),
    ("timerfd", sandglass::model::TimerKind::Timerfd),
    ("posix", sandglass::model::TimerKind::Posix),
    ("busy", sandglass::model::TimerKind::Busy),
];

/// `--timer hr|native|timerfd|posix|busy`.
pub const TIMER: Parsed<sandglass::model::TimerKind> = Parsed {
    names: || names_of(TIMERS),
    parse: |v| {
        pick(TIMERS, v).ok_or_else(|| {
            format!("--timer {v}: unknown timer; use hr, native, timerfd, posix or busy")
        })
    },
};

const MODES: &[(&str, bool)] = &[("absolute", false), ("resync", true)];

/// `--mode absolute|resync`: whether releases follow each wakeup (`resync`).
pub const MODE: Parsed<bool> = Parsed {
    names: || names_of(MODES),
    parse: |v| {
        pick(MODES, v).ok_or_else(|| {
            format!(
                "--mode {v}: use absolute (a fixed release grid) or resync (one interval after each wakeup)"
            )
        })
    },
};

/// `--cpu-dma-latency US|off`.
pub fn pm_qos_arg(value: &str) -> Result<Option<u32>, Failure> {
    sandglass::policy::parse_cpu_dma_latency(value)
        .map_err(|e| Failure::usage(format!("--cpu-dma-latency {value}: {e}")))
}

/// The failure of writing JSON to the output: none (a quiet end, exit 0) when the reader went
/// away, as for any output.
pub fn json_output(e: serde_json::Error) -> Failure {
    match e.io_error_kind() {
        Some(kind) => output_error(io::Error::from(kind)),
        None => Failure::runtime(e.to_string()),
    }
}

/// The failure of writing to the output: none (a quiet end, exit 0) when the reader went away
/// (a closed pipe, as `| head -1` closes it), else an error naming the output.
pub fn output_error(e: io::Error) -> Failure {
    Failure::from(anyhow::Error::new(e).context("writing the output"))
}

/// Prints `value` as pretty JSON on standard output.
pub fn print_json<T: serde::Serialize>(value: &T) -> Result<(), Failure> {
    use anyhow::Context;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    serde_json::to_writer_pretty(&mut out, value).map_err(json_output)?;
    writeln!(out)
        .and_then(|_| out.flush())
        .context("writing the output")?;
    Ok(())
}

/// Runs a timer or noise measurement with a live line per CPU (counting `events`), registers
/// its run in the catalog, prints its result (JSON with `json`, else the text `report`) and
/// gives the command's exit code.
pub fn measure_and_print<R: serde::Serialize>(
    events: &'static str,
    json: bool,
    shared_cpus: bool,
    run: impl FnOnce(&RunContext, &mut Console) -> Result<R, RunError>,
    header: impl Fn(&R) -> &sandglass::result::RunHeader,
    report: fn(&mut dyn Write, &R) -> io::Result<()>,
) -> Result<u8, Failure> {
    let mut console = Console::with_live_rows(events);
    let ctx = RunContext {
        shared_cpus: Some(shared_cpus),
        ..context()
    };
    let result = run(&ctx, &mut console);
    console.clear();
    let result = result?;
    register(std::path::Path::new(&header(&result).run_dir));
    if json {
        print_json(&result)?;
    } else {
        print_text(|out| report(out, &result))?;
    }
    run_outcome(header(&result))
}

/// `--trace`, `--trace-buffer`, `--stop-above` and `--on-threshold`, shared by `timer` and
/// `noise`.
#[derive(clap::Args, Clone, Debug)]
pub struct TraceFlags {
    /// Record the kernel's scheduling and interrupt events on the measured CPUs (a private
    /// tracefs instance, root) and name what ran during every spike
    #[arg(long)]
    pub trace: bool,
    /// Per-CPU kernel trace buffer in KiB, with --trace
    #[arg(long, value_name = "KB", default_value_t = sandglass::causes::tracefs::DEFAULT_BUFFER_KB, value_parser = clap::value_parser!(u64).range(64..=4_194_304))]
    pub trace_buffer: u64,
    /// With --trace, keep at most this much of the kernel's events in the run (their own
    /// record size, such as 64MiB; all: no limit); beyond it, the windows around the largest
    /// delays are kept
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub trace_keep: String,
    /// End the run at the first delay longer than this (a late wakeup; an interruption for
    /// noise), keeping everything measured and the trace
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub stop_above: Option<String>,
    /// At a delay above --stop-above: mark (a marker in the --trace trace), shell:COMMAND (run
    /// with sh -c; SANDGLASS_DELAY_NS and SANDGLASS_RUN_DIR set) or continue (keep measuring);
    /// repeatable
    #[arg(long, value_name = "ACTION", requires = "stop_above")]
    pub on_threshold: Vec<String>,
}

impl TraceFlags {
    pub fn threshold(&self) -> Result<Option<sandglass::runner::Threshold>, Failure> {
        let Some(v) = &self.stop_above else {
            return Ok(None);
        };
        let above = time_arg("--stop-above", v)?;
        if above.0 == 0 {
            return Err(Failure::usage(format!(
                "--stop-above {v}: give a positive time such as 500us"
            )));
        }
        let actions = self
            .on_threshold
            .iter()
            .map(|a| sandglass::runner::ThresholdAction::parse(a).map_err(Failure::usage))
            .collect::<Result<Vec<_>, _>>()?;
        if actions.contains(&sandglass::runner::ThresholdAction::Mark) && !self.trace {
            return Err(Failure::usage(
                "--on-threshold mark writes into the kernel trace: add --trace".to_string(),
            ));
        }
        Ok(Some(sandglass::runner::Threshold {
            above_ns: above,
            actions,
        }))
    }

    pub fn options(&self) -> Result<Option<sandglass::causes::tracefs::TraceOptions>, Failure> {
        let keep_bytes = if self.trace_keep.trim().eq_ignore_ascii_case("all") {
            u64::MAX
        } else {
            sandglass::microbench::parse_size(&self.trace_keep).map_err(|e| {
                Failure::usage(format!(
                    "--trace-keep {}: {e}; or give all",
                    self.trace_keep
                ))
            })?
        };
        Ok(self
            .trace
            .then_some(sandglass::causes::tracefs::TraceOptions {
                buffer_kb: self.trace_buffer,
                keep_bytes,
            }))
    }
}

/// `--load`, `--load-cmd` and `--settle`, shared by the measurements.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LoadFlags {
    /// Run a load profile during the measurement, such as cpu, cpu+disk, net:2@1 or
    /// stress-ng:--cpu 2 (see docs/loads.md); repeat to add loads
    #[arg(long = "load", value_name = "PROFILE", allow_hyphen_values = true)]
    pub load: Vec<String>,
    /// Run a command as a load during the measurement (sh -c); repeat to add commands
    #[arg(long = "load-cmd", value_name = "CMD", allow_hyphen_values = true)]
    pub load_cmd: Vec<String>,
    /// How long loads run before the measurement starts
    #[arg(long, value_name = "TIME", default_value = "2s")]
    pub settle: String,
}

impl LoadFlags {
    /// The load plan, refusing bad profiles with one clear line.
    pub fn plan(&self) -> Result<sandglass::plan::LoadPlan, Failure> {
        let mut specs = Vec::new();
        for p in &self.load {
            let list = sandglass::load::parse_profile(p)
                .map_err(|e| Failure::usage(format!("--load {p}: {e}")))?;
            specs.extend(list);
        }
        for c in &self.load_cmd {
            if c.trim().is_empty() {
                return Err(Failure::usage(
                    "--load-cmd: the command is empty; give one, such as --load-cmd 'make -j4'",
                ));
            }
            specs.push(sandglass::load::LoadSpec::command(c));
        }
        let settle = time_arg("--settle", &self.settle)?;
        Ok(sandglass::plan::LoadPlan {
            settle_ns: if specs.is_empty() {
                Nanos::ZERO
            } else {
                settle
            },
            specs,
        })
    }
}

/// Adds a finished run or study to the catalog when it lies directly in the runs directory
/// (`./sandglass-runs` or `$SANDGLASS_RUNS_DIR`); runs written elsewhere with `-o` are added
/// with `sandglass runs import DIR`. A catalog failure is one warning line: the run itself is
/// complete on disk either way.
pub fn register(dir: &std::path::Path) {
    let base = sandglass::store::default_base();
    let (Ok(d), Ok(b)) = (std::fs::canonicalize(dir), std::fs::canonicalize(&base)) else {
        return;
    };
    if d.parent() != Some(b.as_path()) {
        return;
    }
    // A catalog created now is filled from every directory already there, this one included.
    let indexed = sandglass::catalog::Catalog::open(&base).and_then(|mut c| {
        note_moved_aside(&c);
        if c.created() {
            c.rebuild(&base).map(|_| ())
        } else {
            c.index(&d).map(|_| ())
        }
    });
    if let (Err(e), false) = (indexed, quiet()) {
        eprintln!(
            "sandglass: warning: the run is complete but was not added to the catalog ({e}); add it later with 'sandglass runs import {}'",
            d.display()
        );
    }
}

/// Ends what the loads of a sandglass that was killed left running (`contain::sweep`), with
/// one note line each: a load is contained so that nothing it starts outlives its run, and a
/// SIGKILL gives the run no chance to end it. A record sandglass cannot trust is named and left.
pub fn end_leftover_loads() {
    for l in sandglass::contain::sweep() {
        if let Some(why) = &l.refused {
            eprintln!(
                "sandglass: warning: {} is not a load record this user's sandglass wrote ({why}): left as it is",
                l.record.display()
            );
            continue;
        }
        let what = match l.ended {
            0 => "nothing of it was still running".to_string(),
            n => format!("ended {n} process(es) it had left running"),
        };
        eprintln!(
            "sandglass: note: sandglass process {} was killed before it could stop its load ({}); {what}",
            l.owner, l.method
        );
    }
}

/// Removes the tracing instances of sandglass processes that were killed (their buffers stay
/// pinned and recording otherwise) and unmounts tracefs when a killed sandglass mounted it, with
/// one note line each (`tracefs::clean_up`).
pub fn end_leftover_tracing() {
    let c = sandglass::causes::tracefs::clean_up();
    for name in &c.instances {
        eprintln!(
            "sandglass: note: removed the tracing instance {name}, left recording by a sandglass that was killed"
        );
    }
    if let Some(at) = c.unmounted {
        eprintln!(
            "sandglass: note: unmounted tracefs from {}, mounted by a sandglass that was killed",
            at.display()
        );
    }
}

/// Says that a damaged catalog was moved aside and a new one is built from the run directories.
pub fn note_moved_aside(c: &sandglass::catalog::Catalog) {
    if let Some((aside, reason)) = c.moved_aside() {
        eprintln!(
            "sandglass: warning: the run catalog {} was damaged ({reason}); kept it as {} and rebuilt the catalog from the run directories (nothing recorded is lost)",
            c.path().display(),
            aside.display()
        );
    }
}

/// Marks the runs and studies in the runs directory whose process ended before they finished
/// (`Catalog::settle`), with one note line each. Does nothing when there is no catalog yet
/// (the first one is built from the directories, which marks them on the way); a catalog that
/// cannot be opened is left for the commands that need it to report.
pub fn settle_store() {
    let base = sandglass::store::default_base();
    if !sandglass::catalog::path_in(&base).is_file() {
        return;
    }
    let Ok(mut c) = sandglass::catalog::Catalog::open(&base) else {
        return;
    };
    note_moved_aside(&c);
    if c.moved_aside().is_some() {
        let _ = c.rebuild(&base);
        return;
    }
    if c.created() {
        // Filled (and settled on the way) by the first command that registers or lists.
        return;
    }
    if let Ok(marked) = c.settle(&base) {
        for d in marked.into_iter().filter(|_| !quiet()) {
            eprintln!(
                "sandglass: note: {} was left unfinished by a process that ended (killed, crashed or the machine stopped); marked incomplete",
                d.display()
            );
        }
    }
}

/// `--main-cpu N`: exactly one CPU, or `None` when not given.
pub fn main_cpu_arg(v: Option<&str>) -> Result<Option<usize>, Failure> {
    let Some(v) = v else { return Ok(None) };
    let l = cpus_arg("--main-cpu", v)?;
    if l.len() != 1 {
        return Err(Failure::usage(format!(
            "--main-cpu {v}: give exactly one CPU"
        )));
    }
    Ok(Some(l.first()))
}

/// The run, study or cell directory a command's run argument names: a directory, an id or a
/// unique prefix of one in the runs directory (`./sandglass-runs`, or `$SANDGLASS_RUNS_DIR`)
/// or its catalog, or `STUDY/CELL` ([`sandglass::catalog::resolve_run`]). Nothing is written:
/// a catalog is read only when there is one.
pub fn resolve_run(arg: &str) -> Result<std::path::PathBuf, String> {
    let base = sandglass::store::default_base();
    let catalog =
        if !std::path::Path::new(arg).is_dir() && sandglass::catalog::path_in(&base).is_file() {
            sandglass::catalog::Catalog::open_read(&base).ok()
        } else {
            None
        };
    sandglass::catalog::resolve_run(&base, catalog.as_ref(), arg).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::builder::TypedValueParser;

    fn parse<T: Clone + Send + Sync + 'static>(p: &Parsed<T>, text: &str) -> Result<T, String> {
        p.parse_ref(&clap::Command::new("t"), None, std::ffi::OsStr::new(text))
            .map_err(|e| e.to_string())
    }

    fn names<T: Clone + Send + Sync + 'static>(p: &Parsed<T>) -> Vec<String> {
        p.possible_values()
            .into_iter()
            .flatten()
            .map(|v| v.get_name().to_string())
            .collect()
    }

    #[test]
    fn the_timer_overhead_names_are_the_kinds_it_measures() {
        let mut kinds: Vec<String> = sandglass::microbench::timer_overhead::KINDS
            .iter()
            .map(|k| k.name().to_ascii_lowercase())
            .collect();
        kinds.push("all".into());
        assert_eq!(names(&OVERHEAD_TIMERS), kinds);
    }

    #[test]
    fn parsed_flags_offer_their_names_and_refuse_with_the_librarys_line() {
        use sandglass::microbench::ipc::Mechanism;
        assert_eq!(
            parse(&MECHANISMS, "pipe,tcp,pipe"),
            Ok(vec![Mechanism::Pipe, Mechanism::Tcp])
        );
        assert_eq!(
            parse(&MECHANISMS, "all").map(|v| v.len()),
            Ok(Mechanism::ALL.len())
        );
        let e = parse(&MECHANISMS, "pipe,smoke").unwrap_err();
        assert!(e.contains("--mech smoke: unknown mechanism"), "{e}");
        assert!(names(&MECHANISMS).contains(&"shm-futex".to_string()));
        assert_eq!(names(&PLACEMENT), ["same-cpu", "cross-cpu"]);
        assert!(parse(&PLACEMENT, "far")
            .unwrap_err()
            .contains("--placement far"));
        assert!(names(&METHODS).contains(&"direct".to_string()));
        assert!(parse(&METHODS, "mmap,slow").is_err());
        assert_eq!(parse(&OVERHEAD_TIMERS, "hr,posix").map(|v| v.len()), Ok(2));
        let e = parse(&OVERHEAD_TIMERS, "hr,busy").unwrap_err();
        assert!(e.contains("--timers hr,busy: unknown timer 'busy'"), "{e}");
        assert_eq!(parse(&USAGE, "office").map(|p| p.name), Ok("office"));
        assert!(parse(&USAGE, "gaming")
            .unwrap_err()
            .contains("--usage gaming: use one of continuous, office"));
        assert!(names(&USAGE).contains(&"games".to_string()));
    }
}
