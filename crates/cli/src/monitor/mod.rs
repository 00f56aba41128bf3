//! `sandglass monitor`: timer wakeup latency without end, in catalogued segments, with a duty
//! cycle, retention, and a Prometheus endpoint (see [`sandglass::monitor`]).

mod metrics;
mod top;

use crate::common::{cpus_arg, pm_qos_arg, policy_arg, time_arg, Console, Failure, QuietFlag};
use clap::Args;
use sandglass::live::Live;
use sandglass::model::{DutyCycle, TimerKind};
use sandglass::monitor::{self, MonitorConfig, MonitorObserver, Retention};
use sandglass::runner::{LiveRow, Observer, RunContext};
use sandglass::store::RunState;
use sandglass::timer::{self, TimerConfig, TimerResult};
use sandglass::units::Nanos;
use sandglass::warning::Warning;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

/// Options of `sandglass monitor`.
#[derive(Args)]
pub struct MonitorArgs {
    /// CPUs to measure, such as 1 or 0-3,6 (default: every CPU but the main thread's)
    #[arg(short = 'c', long = "cpus", allow_hyphen_values = true)]
    pub cpus: Option<String>,
    /// Measure CPUs another sandglass is measuring (each counts the other as noise) instead of
    /// refusing
    #[arg(long)]
    pub shared_cpus: bool,
    /// Scheduling policy of the timer threads: f:PRIO, r:PRIO, o:NICE, b or i
    #[arg(
        short = 'P',
        long = "policy",
        default_value = "f:95",
        allow_hyphen_values = true
    )]
    pub policy: String,
    /// Time between releases
    #[arg(short = 'i', long, default_value = "1ms", allow_hyphen_values = true)]
    pub interval: String,
    /// Share of the time measured, such as 10% (one second in ten with --duty-period 10s); the
    /// threads sleep in between, so a production node pays little
    #[arg(long, default_value = "100%")]
    pub duty: String,
    /// The cycle of --duty: measure its first part, then pause to its end
    #[arg(long, default_value = "10s", value_name = "TIME")]
    pub duty_period: String,
    /// Length of each segment: one complete, catalogued run
    #[arg(long, default_value = "1h", value_name = "TIME")]
    pub segment: String,
    /// Remove segments that ended longer ago than this (off: keep them all)
    #[arg(long, default_value = "7d", value_name = "TIME")]
    pub keep: String,
    /// Remove the oldest segments while the monitor's segments use more than this, such as
    /// 2G (off: no limit); the newest segment is always kept
    #[arg(long, default_value = "2G", value_name = "SIZE")]
    pub max_disk: String,
    /// Stop after this many segments (default: run until SIGTERM or SIGINT)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub segments: Option<u64>,
    /// Serve /metrics (OpenMetrics text, for Prometheus) and /healthz at ADDR:PORT, such as
    /// 127.0.0.1:9474; bind a non-loopback address only on a trusted network
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// Hold /dev/cpu_dma_latency at this many µs during the segments, or off (a production
    /// node is measured as it is)
    #[arg(long, default_value = "off", allow_hyphen_values = true)]
    pub cpu_dma_latency: String,
    /// CPU for the main thread and the HTTP server (default: the lowest CPU no measuring
    /// thread uses)
    #[arg(long)]
    pub main_cpu: Option<String>,
    /// Show a per-CPU table of the live figures, redrawn every second (as `sandglass top`);
    /// q quits
    #[arg(long)]
    pub top: bool,
    /// Print each segment's result as it ends, one line of JSON (the object `timer --json`
    /// prints) on standard output
    #[arg(long, conflicts_with = "top")]
    pub json: bool,
    #[command(flatten)]
    pub quiet: QuietFlag,
}

/// `--duty`: `100%`, `10%`, `0.1`.
fn duty_share(text: &str) -> Result<f64, Failure> {
    let t = text.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    };
    match v {
        Ok(x) if x > 0.0 && x <= 1.0 => Ok(x),
        _ => Err(Failure::usage(format!(
            "--duty {text}: give a share above 0 and at most 100%, such as 10%"
        ))),
    }
}

/// `off` or a time.
fn optional_time(flag: &str, text: &str) -> Result<Option<Nanos>, Failure> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match time_arg(flag, text)? {
        Nanos(0) => Err(Failure::usage(format!(
            "{flag} {text}: give a positive time such as 7d, or off"
        ))),
        t => Ok(Some(t)),
    }
}

/// `--listen ADDR:PORT`.
pub fn listen_arg(text: &str) -> Result<SocketAddr, Failure> {
    text.trim().parse().map_err(|_| {
        Failure::usage(format!(
            "--listen {text}: give an address and port such as 127.0.0.1:9474 or [::1]:9474"
        ))
    })
}

/// The configuration `a` asks for.
pub fn config(a: &MonitorArgs) -> Result<MonitorConfig, Failure> {
    let interval = time_arg("-i", &a.interval)?;
    let segment = time_arg("--segment", &a.segment)?;
    if segment.0 < interval.0 {
        return Err(Failure::usage(format!(
            "--segment {}: a segment must last at least one interval ({interval}), such as 1h",
            a.segment
        )));
    }
    let share = duty_share(&a.duty)?;
    let period = time_arg("--duty-period", &a.duty_period)?;
    let duty = if share >= 1.0 {
        None
    } else {
        let on = Nanos((period.0 as f64 * share).round() as u64);
        if on.0 < interval.0 {
            return Err(Failure::usage(format!(
                "--duty {} of --duty-period {}: measures {on} per cycle, less than one interval ({interval}); give a longer --duty-period or a larger --duty",
                a.duty, a.duty_period
            )));
        }
        if period.0 > segment.0 {
            return Err(Failure::usage(format!(
                "--duty-period {} is longer than --segment {}: give a shorter period or a longer segment",
                a.duty_period, a.segment
            )));
        }
        Some(DutyCycle {
            on_ns: on,
            every_ns: period,
        })
    };
    let max_disk = if a.max_disk.trim().eq_ignore_ascii_case("off") {
        None
    } else {
        Some(sandglass::microbench::parse_size(&a.max_disk).map_err(|e| {
            Failure::usage(format!(
                "--max-disk {}: {e}; such as 2G, or off",
                a.max_disk
            ))
        })?)
    };
    let main_cpu = crate::common::main_cpu_arg(a.main_cpu.as_deref())?;
    let c = TimerConfig {
        cpus: a.cpus.as_deref().map(|v| cpus_arg("-c", v)).transpose()?,
        policy: policy_arg(&a.policy)?,
        interval_ns: interval,
        duration_ns: segment,
        timer: TimerKind::Hr,
        resync: false,
        duty,
        thresholds_ns: timer::default_thresholds(interval),
        interval_bin_ns: Nanos::from_micros(100),
        main_cpu,
        cpu_dma_latency_us: pm_qos_arg(&a.cpu_dma_latency)?,
        output_dir: None,
        counter: Default::default(),
        loads: Default::default(),
        sample_hz: sandglass::causes::DEFAULT_SAMPLE_HZ,
        trace: None,
        threshold: None,
        explain_above_ns: None,
    };
    timer::validate(&c).map_err(Failure::usage)?;
    Ok(MonitorConfig {
        timer: c,
        retention: Retention {
            keep: optional_time("--keep", &a.keep)?,
            max_disk,
        },
        segments: a.segments,
    })
}

/// Prints what the monitor says: warnings and notes as a run does, each text once however
/// many segments repeat it, and one line per segment. While the live table is on the screen
/// (`held` is `Some`), the lines wait there and are printed after it.
struct MonitorConsole {
    inner: Console,
    said: std::collections::HashSet<String>,
    held: Option<Vec<String>>,
    /// With `--json`: each segment's result goes to standard output, until its reader goes away.
    json: bool,
    /// Standard output could not be written: its reader went away, or it failed.
    output_closed: bool,
    /// Why writing standard output failed, when its reader had not just gone away.
    output_error: Option<String>,
}

impl MonitorConsole {
    /// Prints `line` (to standard error), or keeps it while the live table is shown.
    fn say(&mut self, line: String) {
        if crate::common::quiet() {
            return;
        }
        match &mut self.held {
            Some(h) => h.push(line),
            None => {
                self.inner.clear();
                eprintln!("{line}");
            }
        }
    }

    /// Prints the lines kept while the table was shown.
    fn release(&mut self) {
        for line in self.held.take().unwrap_or_default() {
            eprintln!("{line}");
        }
    }
}

impl Observer for MonitorConsole {
    fn warning(&mut self, w: &Warning) {
        if self.said.insert(w.message.clone()) {
            self.say(format!("sandglass: warning: {}", w.message));
        }
    }
    fn note(&mut self, text: &str) {
        if self.said.insert(text.to_string()) {
            self.say(format!("sandglass: {text}"));
        }
    }
    fn progress(&mut self, elapsed: Nanos, total: Nanos) {
        if self.held.is_none() {
            self.inner.progress(elapsed, total);
        }
    }
    fn live(&mut self, elapsed: Nanos, rows: &[LiveRow]) {
        if self.held.is_none() {
            self.inner.live(elapsed, rows);
        }
    }
}

impl MonitorObserver for MonitorConsole {
    fn more(&self) -> bool {
        !self.output_closed
    }
    fn segment(&mut self, r: &TimerResult) {
        if self.json && !self.output_closed {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let written = serde_json::to_writer(&mut out, r)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
                .and_then(|()| out.flush());
            if let Err(e) = written {
                self.output_closed = true;
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    self.output_error = Some(format!(
                        "writing the output: {e}; the monitor ended after segment {}",
                        r.run.run_id
                    ));
                }
            }
        }
        let releases: u64 = r.cpus.iter().map(|c| c.count).sum();
        let missed: u64 = r.cpus.iter().map(|c| c.missed_releases).sum();
        let worst =
            sandglass::histo::worst_cpu(r.cpus.iter().filter_map(|c| c.lateness_ns.as_ref()));
        let figures = match worst {
            Some(p) => format!("p99 {}, max {}", Nanos(p.p99), Nanos(p.max.max(0) as u64)),
            None => "no releases".to_string(),
        };
        self.say(format!(
            "sandglass: segment {} {}: {releases} releases, {figures}, {missed} missed",
            r.run.run_id,
            r.run.state.name(),
        ));
    }
    fn removed(&mut self, e: &sandglass::catalog::Entry, why: &str) {
        self.say(format!("sandglass: removed segment {} ({why})", e.id));
    }
}

/// `sandglass monitor`, or with `top` (`sandglass top`, `--top`) the live table.
pub fn monitor(a: &MonitorArgs, top: bool) -> Result<u8, Failure> {
    let top = top || a.top;
    if top && a.json {
        return Err(Failure::usage(
            "--json prints each segment for other tools; the live table is for a person: leave one out",
        ));
    }
    if top && !(sandglass_sys::tty::is_terminal(0) && sandglass_sys::tty::is_terminal(1)) {
        return Err(Failure::usage(
            "the live table needs a terminal for its input and output: run it in one, or leave --top out (and use --listen for other tools)",
        ));
    }
    let config = config(a)?;
    // The signals that end a run are blocked before any thread is created (the HTTP server,
    // the live table), so that every thread inherits the mask and they reach only this
    // thread's waits, which end the segment under way.
    let _signals = sandglass::runner::SignalHold::block()?;
    let listen = a.listen.as_deref().map(listen_arg).transpose()?;
    let ctx = RunContext {
        shared_cpus: Some(a.shared_cpus),
        ..crate::common::context()
    };
    let allowed = sandglass::system::allowed_cpus();
    let cpus = timer::measured_cpus(config.timer.cpus.as_ref(), config.timer.main_cpu, &allowed)
        .map_err(|e| Failure::usage(e.to_string()))?;
    let live = Arc::new(Live::new(&cpus));
    live.update_segment(|s| {
        s.duty = config.timer.duty.map_or(1.0, |d| d.share());
    });
    // The HTTP server runs on the CPUs that are not measured (all of them when none is free).
    let spare: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| !cpus.contains(c))
        .collect();
    let server = match listen {
        Some(addr) => Some(
            sandglass_http::Server::start(
                addr,
                Arc::new(metrics::Endpoint(Arc::new(metrics::Exposition::new(
                    live.clone(),
                )))),
                &spare,
                sandglass_http::Limits::DEFAULT,
            )
                .map_err(|e| {
                    let hint = match e.kind() {
                        std::io::ErrorKind::AddrInUse => {
                            "; another process listens there: choose another port"
                        }
                        std::io::ErrorKind::AddrNotAvailable => {
                            "; the address is not one of this machine's: give 127.0.0.1 or one of its own"
                        }
                        std::io::ErrorKind::PermissionDenied => {
                            "; ports below 1024 need privileges: choose a port such as 9474"
                        }
                        _ => "",
                    };
                    Failure::runtime(format!("--listen {addr}: {e}{hint}"))
                })?,
        ),
        None => None,
    };
    if let Some(s) = &server {
        if !crate::common::quiet() {
            eprintln!(
                "sandglass: serving http://{}/metrics (OpenMetrics) and /healthz",
                s.addr()
            );
        }
    }
    let mut console = MonitorConsole {
        inner: Console::new(),
        said: Default::default(),
        held: top.then(Vec::new),
        json: a.json,
        output_closed: false,
        output_error: None,
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let display = if top {
        let title = format!(
            "sandglass top: timer latency every {}, {}",
            config.timer.interval_ns, config.timer.policy
        );
        let (live, stop) = (live.clone(), stop.clone());
        Some(
            std::thread::Builder::new()
                .name("sg-top".into())
                .spawn(move || top::run(live, stop, title))
                .map_err(|e| Failure::runtime(format!("the live table cannot start: {e}")))?,
        )
    } else {
        None
    };
    let result = monitor::run(&config, &ctx, &mut console, live, |r| {
        crate::common::register(std::path::Path::new(&r.run.run_dir));
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(d) = display {
        // The table notices `stop` within a tenth of a second; a terminal whose output blocks
        // (nobody reads it) must not keep the monitor from ending.
        let t0 = std::time::Instant::now();
        while !d.is_finished() && t0.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        if d.is_finished() {
            let _ = d.join();
        }
    }
    console.release();
    if let Some(s) = server {
        s.stop();
    }
    let ended = result?;
    // A reader that went away is a quiet end; an output that failed is a failure.
    if let Some(e) = console.output_error.take() {
        return Err(Failure::runtime(e));
    }
    // SIGTERM and SIGINT are how a monitor is meant to end: not a failure. A segment that
    // failed (its store could not be written, a thread did not stop) ends the monitor with the
    // run's exit code, so that a service manager restarts it.
    match ended.last {
        None | Some(RunState::Completed | RunState::Interrupted) => Ok(0),
        Some(RunState::Incomplete) => Err(Failure::runtime(format!(
            "{}: {}",
            ended.last_dir, ended.last_detail
        ))),
        Some(state) => Ok(crate::common::exit_code_for(&state)),
    }
}
