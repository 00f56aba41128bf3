//! `sandglass study`: a matrix of measurements × loads × settings × repetitions.

use crate::common::{context, print_json, Console, Failure};
use anyhow::Context;
use clap::Args;
use sandglass::runner::Observer;
use sandglass::study::run::{
    self, CellRecord, StudyError, StudyObserver, StudyOptions, StudyState,
};
use sandglass::study::{self, cells, LoadError};
use sandglass::Nanos;
use std::io::{self, Write};
use std::path::PathBuf;

/// Options of `sandglass study`.
#[derive(Args)]
pub struct StudyArgs {
    /// A built-in study (quick, mach, wdm, hourglass, timers; see --list) or a study file
    pub study: Option<String>,
    /// Continue an interrupted study with the cells not yet completed: the study directory,
    /// or nothing for the most recent unfinished study under ./sandglass-runs
    #[arg(long, value_name = "DIR", num_args = 0..=1)]
    pub resume: Option<Option<PathBuf>>,
    /// Multiply every cell's duration by this factor, such as 0.25 for a quick look
    #[arg(long, value_name = "X", allow_hyphen_values = true)]
    pub duration_scale: Option<String>,
    /// Study directory (default ./sandglass-runs/<id>); each cell is a run directory inside
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// List the built-in studies
    #[arg(long)]
    pub list: bool,
    /// Print a built-in study's file, to copy and edit
    #[arg(long)]
    pub print: bool,
    /// Check the study and list its cells and planned time without running anything
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON object (the study's state and tables) instead of the tables
    #[arg(long)]
    pub json: bool,
    /// Measure CPUs another sandglass is measuring (each counts the other as noise; every
    /// cell records it with a warning) instead of failing the cells that would
    #[arg(long)]
    pub shared_cpus: bool,
    #[command(flatten)]
    pub quiet: crate::common::QuietFlag,
}

/// Options of `sandglass quick`.
#[derive(Args)]
pub struct QuickArgs {
    /// Multiply every cell's duration by this factor, such as 0.25 for a quick look
    #[arg(long, value_name = "X", allow_hyphen_values = true)]
    pub duration_scale: Option<String>,
    /// Study directory (default ./sandglass-runs/<id>)
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Print one JSON object instead of the tables
    #[arg(long)]
    pub json: bool,
    /// Measure CPUs another sandglass is measuring (each counts the other as noise; every
    /// cell records it with a warning) instead of failing the cells that would
    #[arg(long)]
    pub shared_cpus: bool,
    #[command(flatten)]
    pub quiet: crate::common::QuietFlag,
}

/// `sandglass quick`: `sandglass study quick`.
pub fn quick(a: &QuickArgs) -> Result<u8, Failure> {
    study(&StudyArgs {
        study: Some("quick".into()),
        resume: None,
        duration_scale: a.duration_scale.clone(),
        output: a.output.clone(),
        list: false,
        print: false,
        dry_run: false,
        json: a.json,
        shared_cpus: a.shared_cpus,
        quiet: a.quiet,
    })
}

/// The console of a study: each cell's line, then what its run shows.
struct StudyConsole {
    console: Console,
}

fn clock(n: Nanos) -> String {
    let s = n.0 / 1_000_000_000;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

impl Observer for StudyConsole {
    crate::common::console_observer!();
}

impl StudyObserver for StudyConsole {
    fn cell_started(&mut self, r: &CellRecord, total: usize, elapsed: Nanos, eta: Nanos) {
        let l = &r.labels;
        let mut what = format!("{}, {}", l.measure, l.load);
        if r.cell.setting.is_some() {
            what.push_str(&format!(", {}", l.setting));
        }
        if r.cell.repetition > 1 {
            what.push_str(&format!(", repetition {}", r.cell.repetition));
        }
        self.console.note(&format!(
            "cell {} of {total}: {what} (elapsed {}, about {} left)",
            r.cell.index + 1,
            clock(elapsed),
            clock(eta)
        ));
    }
    fn cell_ended(&mut self, r: &CellRecord, _total: usize) {
        self.console.clear();
        if r.state != run::CellState::Completed {
            let why = r.error.as_deref().or(r.detail.as_deref()).unwrap_or("");
            eprintln!(
                "sandglass: cell {} {}: {why}",
                r.cell.index + 1,
                r.state.name()
            );
        }
    }
}

fn scale_arg(text: &str) -> Result<f64, Failure> {
    text.parse::<f64>().map_err(|_| {
        Failure::usage(format!(
            "--duration-scale {text}: not a number; give a factor such as 0.5 or 2"
        ))
    })
}

fn load_study(name: &str) -> Result<study::Study, Failure> {
    study::load(name).map_err(|e| match e {
        LoadError::Read { .. } | LoadError::Unknown(..) | LoadError::Invalid(_) => {
            Failure::usage(e.to_string())
        }
    })
}

impl From<StudyError> for Failure {
    fn from(e: StudyError) -> Failure {
        match e {
            StudyError::Usage(m) => Failure::usage(m),
            StudyError::Failed(m) => Failure::runtime(m),
        }
    }
}

/// What `study` was asked to do, read before anything runs.
enum Plan {
    Resume(std::path::PathBuf),
    New(Box<study::Study>),
}

pub fn study(a: &StudyArgs) -> Result<u8, Failure> {
    let stdout = io::stdout();
    if a.list {
        let mut out = io::BufWriter::new(stdout.lock());
        for b in study::BUILTIN {
            writeln!(out, "{:<10} {}", b.name, b.summary).context("writing the output")?;
        }
        out.flush().context("writing the output")?;
        return Ok(0);
    }
    if a.print {
        let name = a.study.as_deref().ok_or_else(|| {
            Failure::usage(format!(
                "--print needs a built-in study: one of {}",
                study::builtin_names()
            ))
        })?;
        let b = study::BUILTIN
            .iter()
            .find(|b| b.name == name)
            .ok_or_else(|| {
                Failure::usage(format!(
                    "--print {name}: not a built-in study; use one of {}",
                    study::builtin_names()
                ))
            })?;
        let mut out = stdout.lock();
        out.write_all(b.text.as_bytes())
            .and_then(|_| out.flush())
            .context("writing the output")?;
        return Ok(0);
    }
    let scale = a.duration_scale.as_deref().map(scale_arg).transpose()?;
    // The input is read first, with SIGINT, SIGTERM and SIGHUP as they are: a study file that
    // never ends (a FIFO) cannot hold the process.
    let plan = if let Some(dir) = &a.resume {
        if a.output.is_some() {
            return Err(Failure::usage(
                "--resume continues in the study's own directory; leave out -o",
            ));
        }
        let dir = match dir {
            Some(d) => d.clone(),
            None => run::latest_unfinished(&sandglass::store::default_base())?,
        };
        if let Some(name) = &a.study {
            let record = run::read_state(&dir)?;
            if &record.name != name
                && !matches!(&record.source, study::Source::File(p) if p == name)
            {
                return Err(Failure::usage(format!(
                    "--resume {}: that directory holds study '{}', not '{name}'; leave the study name out to resume it",
                    dir.display(),
                    record.name
                )));
            }
        }
        Plan::Resume(dir)
    } else {
        let name = a.study.as_deref().ok_or_else(|| {
            Failure::usage(format!(
                "name a study: one of {}, or a study file (sandglass study --list)",
                study::builtin_names()
            ))
        })?;
        let s = load_study(name)?;
        if a.dry_run {
            return dry_run(&s, scale.unwrap_or(1.0));
        }
        Plan::New(Box::new(s))
    };
    // From here SIGINT, SIGTERM and SIGHUP stay blocked until the study is printed and
    // catalogued: the cells take them as a request to stop, and a second signal (SIGTERM after
    // Ctrl-C) must not end the process before the study is recorded.
    let _signals = sandglass::runner::SignalHold::block()?;
    let mut ctx = context();
    ctx.shared_cpus = Some(a.shared_cpus);
    let mut console = StudyConsole {
        console: Console::with_live_rows("wakeups"),
    };
    let outcome = match plan {
        Plan::Resume(dir) => run::resume(&dir, scale, &ctx, &mut console)?,
        Plan::New(s) => {
            let options = StudyOptions {
                duration_scale: scale.unwrap_or(1.0),
                output: a.output.clone(),
            };
            run::run(&s, &options, &ctx, &mut console)?
        }
    };
    console.console.clear();
    crate::common::register(&outcome.dir);
    if a.json {
        print_json(&outcome)?;
    } else {
        crate::common::print_text(|out| sandglass_report::study::write(out, &outcome))?;
    }
    Ok(match outcome.record.state {
        StudyState::Completed | StudyState::Interrupted => 0,
        StudyState::Incomplete | StudyState::Running => 1,
    })
}

fn dry_run(s: &study::Study, scale: f64) -> Result<u8, Failure> {
    if !(scale.is_finite() && scale > 0.0 && scale <= 1000.0) {
        return Err(Failure::usage(format!(
            "--duration-scale {scale}: give a factor above 0 and at most 1000, such as 0.5 or 2"
        )));
    }
    let list = cells(&s.file);
    let total: u64 = list.iter().map(|c| run::planned(s, c, scale).0).sum();
    let mut out = crate::common::text_stdout();
    writeln!(
        out,
        "study {} ({}): {} cells, about {} at scale {scale}",
        s.file.study.name,
        s.source,
        list.len(),
        clock(Nanos(total))
    )
    .context("writing the output")?;
    for c in &list {
        let l = c.labels(&s.file);
        writeln!(
            out,
            "  {:<40} {} / {} / {} / repetition {} ({})",
            c.id,
            l.measure,
            l.load,
            l.setting,
            l.repetition,
            clock(run::planned(s, c, scale))
        )
        .context("writing the output")?;
    }
    out.flush().context("writing the output")?;
    Ok(0)
}
