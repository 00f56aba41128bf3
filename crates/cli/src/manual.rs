//! What `--help` prints after the options and what `sandglass man` prints as EXAMPLES and EXIT
//! STATUS, from one table per command, so that the help and the man pages never disagree. Every
//! example is also in README.md or docs/, where the documentation test runs it.

use clap::{Arg, Command};
use roff::{bold, italic, roman, Inline, Roff};

/// One example: the command line and what it does.
pub struct Example {
    pub line: &'static str,
    pub what: &'static str,
}

macro_rules! ex {
    ($line:expr, $what:expr) => {
        Example {
            line: $line,
            what: $what,
        }
    };
}

/// The examples of a top-level command (nested commands show those of their parent that run
/// them).
fn examples_of(top: &str) -> &'static [Example] {
    match top {
        "" => &[
            ex!("sandglass study quick", "the main job: timer latency and OS noise on every CPU, idle and under load"),
            ex!("sandglass check audio:64@48000x2 -d 30s", "can this machine carry 64 frames at 48 kHz with two periods of buffering?"),
            ex!("sandglass timer -c 1 -i 1ms -d 60s", "cyclictest -p95 -i1000 -a1 -D60, every missed release counted"),
            ex!("sandglass noise -c 1 -d 60s", "oslat -c 1 -D 60, every interruption kept"),
            ex!("sandglass compare BASELINE NEW --fail-above p99.99=200us --fail-regression 20%", "a gate for CI"),
        ],
        "hourglass" => &[
            ex!("sandglass hourglass -n 3 -d 5s -t 0 -p LOW -t 1 -p NORMAL -t 2 -p HIGH", "the paper's §3.1 execution trace"),
            ex!("sandglass hourglass -d 6m -n 1 -t 0 -p RTHIGH -w LAT 5.3ms -i HR", "§5.3: the latency of a real-time thread's timer"),
            ex!("sandglass hourglass -n 2 -t 0 -w PERIODIC 3ms 8ms -rh 3.1ms 8ms -t 1 -w PERIODIC 17ms 33ms -rh 17.1ms 33ms", "§5.6: two SCHED_DEADLINE reservations"),
        ],
        "timer" => &[
            ex!("sandglass timer -c 1 -i 1ms -d 60s", "cyclictest -p95 -i1000 -a1 -D60, every missed release counted"),
            ex!("sandglass timer -c 1 -d 60s --load compile+disk", "the same under a load"),
            ex!("sandglass timer --mode resync --timer timerfd -d 10s --json > latency.json", "Hourglass's LAT model on a timerfd, as JSON"),
            ex!("sandglass timer -c 1 -d 10s --trace", "as root: name the thread, interrupt or softirq behind every late wakeup"),
        ],
        "noise" => &[
            ex!("sandglass noise -c 1 -d 60s", "oslat -c 1 -D 60, every interruption kept"),
            ex!("sandglass noise -c 1 -d 60s --workload memmove:4K -P f:95", "a polling thread that copies memory, at SCHED_FIFO 95"),
        ],
        "check" => &[
            ex!("sandglass check audio:64@48000x2 -d 30s", "64 frames at 48 kHz, two periods of buffering"),
            ex!("sandglass check control:1ms:500us -c 1 -d 60s", "a 1 kHz loop that must finish within 500 µs"),
            ex!("sandglass check video:60 -d 20s --try-fixes", "then measure the fixes it can test without changing the machine"),
        ],
        "analyze" => &[
            ex!("sandglass analyze rta examples/tasks.toml", "response times, Liu & Layland, hyperbolic bound"),
            ex!("sandglass analyze rta examples/tasks.toml --jitter-from RUN@p99.99", "with the release jitter a timer run measured"),
            ex!("sandglass analyze admission examples/reservations.toml --cpus 2", "will the kernel accept these SCHED_DEADLINE reservations?"),
            ex!("sandglass analyze mttf --run RUN --compute 1ms --target 1h", "mean time to a buffer underrun, and the buffering a target needs"),
            ex!("sandglass analyze worst-case --run RUN --usage office", "the expected worst delay per hour, day and week"),
            ex!("sandglass analyze two-rate --rate 100:1530 --rate 2000:1333.6", "the cost of one clock tick from two rates (67 µs)"),
        ],
        "bench" => &[
            ex!("sandglass bench copy", "memory copy bandwidth by block size and alignment"),
            ex!("sandglass bench ipc --mech pipe,shm-futex --placement cross-cpu", "one-way latency, fitted t(N) = a + N/b"),
            ex!("sandglass bench ctxsw", "context-switch cost, direct and with working sets"),
            ex!("sandglass bench budget examples/frame.toml --load disk", "a per-frame pipeline, predicted and then run"),
        ],
        "load" => &[ex!("sandglass load net+cpu:2 -d 10s", "a load alone, and what it achieved")],
        "study" => &[
            ex!("sandglass study --list", "the built-in studies"),
            ex!("sandglass study --print mach > my.toml", "start a study of one's own from a built-in one"),
            ex!("sandglass study my.toml --dry-run", "its cells and planned time"),
            ex!("sandglass study --resume", "continue the last study stopped by Ctrl-C"),
        ],
        "quick" => &[ex!("sandglass quick", "the main job, as `sandglass study quick`")],
        "report" => &[
            ex!("sandglass report RUN|STUDY --html report.html", "one self-contained page with plots"),
            ex!("sandglass report RUN|STUDY --markdown", "its key figures as Markdown, for an issue"),
            ex!("sandglass report RUN --csv out/ --cyclictest hist.txt --perfetto trace.json", "exports for other tools"),
        ],
        "monitor" => &[ex!("sandglass monitor -c 1 --segment 10s --segments 1", "one 10 s segment, then exit")],
        "top" => &[ex!("sandglass top -c 1", "a live per-CPU table, as rtla timerlat top")],
        "runs" => &[
            ex!("sandglass runs --kind timer --since 7d", "the runs of the last week, newest first"),
            ex!("sandglass runs show 20261122-1015", "one run: manifest, files checked, figures"),
            ex!("sandglass runs import DIR", "verify and index a run directory copied from elsewhere"),
            ex!("sandglass runs export --parquet fleet/", "the catalog and the runs' histograms as Parquet"),
        ],
        "compare" => &[
            ex!("sandglass compare BASELINE NEW", "figures side by side, regressions marked"),
            ex!("sandglass compare BASELINE NEW --fail-above p99.99=200us --fail-regression 20%", "a gate for CI"),
        ],
        "calibrate" => &[ex!("sandglass calibrate -c 1 -d 2s", "the counter and the polling loop on CPU 1")],
        "schema" => &[ex!("sandglass schema timer", "the JSON Schema of `timer --json`")],
        "sysinfo" => &[ex!("sandglass sysinfo --json", "the system snapshot every run records")],
        "man" => &[
            ex!("sandglass man timer", "the page of `sandglass timer`"),
            ex!("sandglass man --all /usr/local/share/man/man1", "every page, for `man sandglass-timer`"),
        ],
        "completions" => &[ex!("sandglass completions bash > sandglass.bash", "bash completions")],
        _ => &[],
    }
}

/// The examples of the command at `path` (`["analyze", "rta"]`).
pub fn examples(path: &[&str]) -> Vec<&'static Example> {
    let Some(top) = path.first() else {
        return examples_of("").iter().collect();
    };
    let prefix = format!("sandglass {} ", path.join(" "));
    examples_of(top)
        .iter()
        .filter(|e| path.len() == 1 || e.line.starts_with(&prefix))
        .collect()
}

/// What the exit codes of the command at `path` mean.
pub fn exit_status(path: &[&str]) -> &'static str {
    match path.first().copied().unwrap_or("") {
        "timer" | "noise" | "hourglass" | "load" | "calibrate" => concat!(
            "0: the run completed. 1: the run failed (the watchdog ended it, or it could not go on; ",
            "the error line says why). 2: bad input, or a command that cannot run as given (the ",
            "message says what to change). ",
            "130, 143 or 129: Ctrl-C (SIGINT), SIGTERM or SIGHUP cut the run short; it still ",
            "printed its report and kept everything it measured, marked interrupted."
        ),
        "check" => concat!(
            "0: a verdict was given, whatever it is (scripts read verdict.level of --json). 1: the ",
            "run failed. 2: bad input. 130, 143 or 129: Ctrl-C, SIGTERM or SIGHUP cut the run ",
            "short; the verdict is still printed, from what was measured."
        ),
        "study" | "quick" => concat!(
            "0: every cell completed. 1: a cell failed (the others still ran). 2: a bad command ",
            "line or study file. 130, 143 or 129: Ctrl-C, SIGTERM or SIGHUP stopped the study; ",
            "what was measured is kept and --resume continues it."
        ),
        "bench" => concat!(
            "0: everything was measured. 1: something could not be measured (each is named in an ",
            "error line and in the result) or the run failed. 2: bad input. 130, 143 or 129: ",
            "Ctrl-C, SIGTERM or SIGHUP cut the run short."
        ),
        "analyze" => concat!(
            "0: the analysis ran, whatever it concluded (an unschedulable task set is a result, ",
            "not an error). 1: a failure (a run that could not be read or a validation that ",
            "could not run). 2: bad input (a task file's problem is named with its line). 130, ",
            "143 or 129: a validation run cut short."
        ),
        "compare" => concat!(
            "0: no gate was crossed (the verdict line says whether any regression was flagged). ",
            "2: a gate was crossed. 1: an error, bad input included (as rtla's exit codes)."
        ),
        "monitor" | "top" => concat!(
            "0: ended by SIGINT, SIGTERM, SIGHUP or q, the normal end. 1: a segment failed (a ",
            "service manager restarts it). 2: bad input (for top also input or output that is ",
            "not a terminal)."
        ),
        "runs" | "report" => concat!(
            "0: success. 2: bad input (an unknown or ambiguous run, a damaged run directory, a ",
            "bad date). 1: a failure of the catalog or the file system."
        ),
        _ => "0: success. 2: bad input. 1: the output could not be written.",
    }
}

/// The text `--help` prints after the options: the examples and the exit status.
fn after_help(path: &[&str]) -> String {
    let mut text = String::new();
    let list = examples(path);
    if !list.is_empty() {
        text.push_str("Examples:\n");
        for e in list {
            text.push_str(&format!("  {}\n      {}\n", e.line, e.what));
        }
        text.push('\n');
    }
    text.push_str("Exit status:\n  ");
    text.push_str(exit_status(path));
    text
}

/// Gives every command of `cmd` (at `path`) its examples and exit status in `--help`.
pub fn with_help_sections(cmd: Command) -> Command {
    fn walk(cmd: Command, path: &mut Vec<String>) -> Command {
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .filter(|n| n != "help")
            .collect();
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        let mut cmd = cmd.after_long_help(after_help(&p));
        for name in names {
            path.push(name.clone());
            cmd = cmd.mut_subcommand(&name, |sub| walk(sub, path));
            path.pop();
        }
        cmd
    }
    walk(cmd, &mut Vec::new())
}

/// The man page of `cmd` (built, at `path`): clap_mangen's sections, a SYNOPSIS that names every
/// option's value, EXAMPLES and EXIT STATUS.
pub fn page(cmd: &Command, path: &[&str], out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone())
        .date("")
        .source(concat!("sandglass ", env!("CARGO_PKG_VERSION")));
    man.render_title(out)?;
    man.render_name_section(out)?;
    let mut roff = Roff::new();
    roff.control("SH", ["SYNOPSIS"]);
    roff.text(synopsis(cmd));
    roff.to_writer(out)?;
    man.render_description_section(out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(out)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(out)?;
    }
    let mut roff = Roff::new();
    let list = examples(path);
    if !list.is_empty() {
        roff.control("SH", ["EXAMPLES"]);
        for e in list {
            roff.control("TP", []);
            roff.text([bold(e.line)]);
            roff.text([roman(e.what)]);
        }
    }
    roff.control("SH", ["EXIT STATUS"]);
    roff.text([roman(exit_status(path))]);
    roff.to_writer(out)?;
    if cmd.get_version().is_some() {
        man.render_version_section(out)?;
    }
    Ok(())
}

/// `sandglass timer [-c|--cpus CPUS] [--json] ...`: every visible option with its value's name.
fn synopsis(cmd: &Command) -> Vec<Inline> {
    let name = cmd
        .get_bin_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string();
    let mut line = vec![bold(name)];
    let value = |a: &Arg| -> Option<String> {
        let takes =
            a.get_num_args().is_some_and(|n| n.takes_values()) || a.get_action().takes_values();
        if !takes {
            return None;
        }
        Some(match a.get_value_names() {
            Some(v) => v
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            None => a.get_id().as_str().to_uppercase(),
        })
    };
    for a in cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
    {
        let (open, close) = if a.is_required_set() {
            ("", "")
        } else {
            ("[", "]")
        };
        line.push(roman(format!(" {open}")));
        match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) => {
                line.push(bold(format!("-{s}")));
                line.push(roman("|"));
                line.push(bold(format!("--{l}")));
            }
            (Some(s), None) => line.push(bold(format!("-{s}"))),
            (None, Some(l)) => line.push(bold(format!("--{l}"))),
            (None, None) => {}
        }
        if let Some(v) = value(a) {
            line.push(roman(" "));
            line.push(italic(v));
        }
        line.push(roman(close));
    }
    for a in cmd.get_positionals().filter(|a| !a.is_hide_set()) {
        let v = value(a).unwrap_or_else(|| a.get_id().as_str().to_uppercase());
        let many = a.get_num_args().is_some_and(|n| n.max_values() > 1);
        let dots = if many { "..." } else { "" };
        if a.is_required_set() {
            line.push(roman(" "));
            line.push(italic(format!("{v}{dots}")));
        } else {
            line.push(roman(" ["));
            line.push(italic(v));
            line.push(roman(format!("]{dots}")));
        }
    }
    if cmd.has_subcommands() {
        line.push(roman(" "));
        line.push(italic("COMMAND"));
    }
    line
}
