//! External loads: `stress-ng:ARGS` and `cmd:COMMAND`, each a child process in its own process
//! group, watched by a supervising thread.
//!
//! The supervisor spawns the child with [`sandglass_sys::child::isolate`] (it lives as long as
//! the child, which matters because the parent-death signal belongs to the spawning thread),
//! reports its process group, and polls it every 10 ms. To stop it, it sends SIGINT to the
//! group, which stress-ng answers by stopping its stressors and printing its metrics, then
//! SIGKILL after two seconds. The group is signalled by its number only while its leader has
//! not been waited for (until then no other process can take that number); the rest of the
//! load, in the group or out of it, is reached through its [`crate::contain::Jail`]. The
//! child's affinity and policy are the supervisor's: the load's CPUs, SCHED_OTHER, nice 0.
//!
//! stress-ng's output goes to a file that is unlinked as soon as it is created, read after the
//! child has ended: a pipe would need a reader thread that a descendant holding the pipe could
//! block forever. A command's standard output is discarded and its standard error is kept the
//! same way, for the error message when it fails.

use super::{
    find_program, io_reason, split_args, ExternalEnd, LoadError, LoadKind, LoadOptions, LoadSpec,
    Shared, StartError, Starter, ThreadEnd, ThreadError, ThreadPlan, STEP,
};
use sandglass_sys::child;
use sandglass_sys::signal::SIGINT;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a group has between SIGINT and SIGKILL.
const KILL_AFTER: Duration = Duration::from_secs(2);
/// How long a group has to vanish after SIGKILL before the supervisor reports it and leaves.
const GIVE_UP_AFTER: Duration = Duration::from_secs(2);
/// How often a load whose command has ended is checked for processes it left running.
const LINGER_STEP: Duration = Duration::from_millis(100);
/// How much of the end of the captured output is read.
const OUTPUT_TAIL: u64 = 256 << 10;

/// Which external load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    StressNg,
    Command,
}

/// The supervising thread of an external load.
pub(crate) fn plan(
    spec: &LoadSpec,
    cpus: &[usize],
    opts: &LoadOptions,
) -> Result<(Vec<ThreadPlan>, Option<String>), LoadError> {
    let text = spec.to_string();
    let (which, program, args) = match &spec.kind {
        LoadKind::StressNg(a) => {
            let program = find_program("stress-ng", std::env::var_os("PATH").as_deref())
                .ok_or_else(|| LoadError::StressNgMissing { spec: text.clone() })?;
            let mut args = split_args(a).map_err(|source| LoadError::BadArgs {
                text: text.clone(),
                source,
            })?;
            args.push("--metrics-brief".into());
            (Which::StressNg, program, args)
        }
        LoadKind::Command(c) => (
            Which::Command,
            PathBuf::from("/bin/sh"),
            vec!["-c".to_string(), c.clone()],
        ),
        _ => {
            return Err(LoadError::Start {
                spec: text,
                source: StartError::NotExternal,
            })
        }
    };
    super::check_temp_dir(&text, &opts.temp_dir)?;
    let dir = opts.temp_dir.clone();
    let name = match which {
        Which::StressNg => "load-stress-ng",
        Which::Command => "load-cmd",
    };
    let plan = ThreadPlan {
        name: name.into(),
        cpus: cpus.to_vec(),
        body: Box::new(move |shared, starter, _counters| {
            supervise(shared, starter, which, &program, &args, &dir)
        }),
    };
    Ok((vec![plan], None))
}

fn supervise(
    shared: &Shared,
    starter: &Starter,
    which: Which,
    program: &Path,
    args: &[String],
    dir: &Path,
) -> ThreadEnd {
    let fail = |e: ThreadError| {
        let reason = e.to_string();
        starter.ready(Err(e));
        ThreadEnd::failed(reason)
    };
    let capture = |f: &File| f.try_clone().map(Stdio::from);
    let output = match super::anonymous_file(dir) {
        Ok(f) => f,
        Err(source) => {
            return fail(ThreadError::OutputFile {
                dir: dir.to_path_buf(),
                source,
            })
        }
    };
    let (stdout, stderr) = match which {
        Which::StressNg => (capture(&output), capture(&output)),
        Which::Command => (Ok(Stdio::null()), capture(&output)),
    };
    let (stdout, stderr) = match (stdout, stderr) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => return fail(ThreadError::PassOutput(e)),
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    let mut jail = crate::contain::Jail::new();
    if let Err(e) = jail.prepare(&mut cmd) {
        return fail(ThreadError::Run {
            program: program.to_path_buf(),
            source: std::io::Error::from_raw_os_error(e.0),
        });
    }
    let mut proc = match cmd.spawn() {
        Ok(p) => p,
        Err(source) => {
            return fail(ThreadError::Run {
                program: program.to_path_buf(),
                source,
            })
        }
    };
    drop(cmd);
    let spawned = Instant::now();
    let group = proc.id() as i32;
    jail.started(group);
    starter.ready(Ok(Some(group)));

    let mut status: Option<ExitStatus> = None;
    let mut exited_at = None;
    let mut wait_error = None;
    let mut interrupted_at: Option<Instant> = None;
    let mut killed_at: Option<Instant> = None;
    let mut stuck = false;
    loop {
        if status.is_none() && wait_error.is_none() {
            match proc.try_wait() {
                Ok(Some(s)) => {
                    status = Some(s);
                    exited_at = Some(Instant::now());
                }
                Ok(None) => {}
                Err(e) => wait_error = Some(io_reason(&e)),
            }
        }
        let leader_done = status.is_some() || wait_error.is_some();
        jail.poll();
        // The guardian ends the rest of the group once the leader has gone; what left the
        // group runs on in the jail until the loads stop, checked every 100 ms (a subreaper
        // jail walks /proc to check), and is ended by `Jail::close`. Once the leader has been
        // waited for, the group's number is free for another process to take (pids wrap at
        // 32768 on many systems): from then on only the jail, which checks start times, names
        // what is ours.
        if leader_done {
            if !jail.alive() {
                break;
            }
            if !shared.stopped() {
                std::thread::sleep(LINGER_STEP);
            }
        }
        if shared.stopped() {
            let now = Instant::now();
            match (interrupted_at, killed_at) {
                (None, _) => {
                    if !leader_done {
                        let _ = child::signal_group(group, SIGINT);
                    }
                    jail.signal(SIGINT);
                    interrupted_at = Some(now);
                }
                (Some(t), None) if now - t >= KILL_AFTER => {
                    if !leader_done {
                        let _ = child::signal_group(group, child::SIGKILL);
                    }
                    jail.signal(child::SIGKILL);
                    killed_at = Some(now);
                }
                (_, Some(t)) if now - t >= GIVE_UP_AFTER => {
                    stuck = true;
                    break;
                }
                _ => {}
            }
        }
        std::thread::sleep(STEP);
    }
    let ended = exited_at.unwrap_or_else(Instant::now);
    let ran = ended.saturating_duration_since(spawned);
    let contained = jail.close();
    let text = read_tail(output);
    let stopped = interrupted_at.is_some_and(|t| exited_at.is_none_or_after(t));
    let how = how_it_ended(status, stopped, killed_at.is_some(), ran);
    let mut error = None;
    if stuck {
        error = Some(format!(
            "process group {group} did not end within {} s of SIGKILL",
            GIVE_UP_AFTER.as_secs()
        ));
    } else if let Err(e) = &contained {
        error = Some(e.clone());
    } else if let Some(e) = wait_error {
        error = Some(format!("cannot wait for process {group}: {e}"));
    } else if !stopped && !status.is_some_and(|s| s.success()) {
        let last = last_line(&text, which);
        error = Some(match last {
            Some(l) => format!("{how}: {l}"),
            None => how.clone(),
        });
    }
    let external = match which {
        Which::StressNg => stress_ng_end(&text, &how),
        Which::Command => ExternalEnd {
            work: 0.0,
            unit: String::new(),
            per_s: Some(0.0),
            detail: how,
        },
    };
    ThreadEnd {
        tally: Default::default(),
        ended: Some(ended),
        error,
        external: Some(external),
    }
}

/// `Option<Instant>::is_none_or(|e| e >= t)`, for Rust before 1.82.
trait AfterOrNone {
    fn is_none_or_after(&self, t: Instant) -> bool;
}

impl AfterOrNone for Option<Instant> {
    fn is_none_or_after(&self, t: Instant) -> bool {
        match self {
            Some(e) => *e >= t,
            None => true,
        }
    }
}

/// How the child ended, in words: `stopped with SIGINT`, `exited with status 2 after 1.2 s`.
fn how_it_ended(status: Option<ExitStatus>, stopped: bool, killed: bool, ran: Duration) -> String {
    let after = format!("after {:.2} s", ran.as_secs_f64());
    let Some(s) = status else {
        return format!("still running {after}");
    };
    let what = match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("ended by {}", signal_name(sig)),
        _ => format!("ended ({s})"),
    };
    match (stopped, killed) {
        (true, true) => format!("ignored SIGINT for {} s; {what}", KILL_AFTER.as_secs()),
        (true, false) => format!("stopped with SIGINT ({what})"),
        (false, _) => format!("{what} {after}, before the loads were stopped"),
    }
}

fn signal_name(sig: i32) -> String {
    match sig {
        s if s == SIGINT => "SIGINT".into(),
        s if s == child::SIGKILL => "SIGKILL".into(),
        s if s == sandglass_sys::signal::SIGTERM => "SIGTERM".into(),
        s => format!("signal {s}"),
    }
}

/// The last `OUTPUT_TAIL` bytes of the captured output.
fn read_tail(mut f: File) -> String {
    let len = f.seek(SeekFrom::End(0)).unwrap_or(0);
    let mut bytes = Vec::new();
    if f.seek(SeekFrom::Start(len.saturating_sub(OUTPUT_TAIL)))
        .is_ok()
    {
        let _ = f.take(OUTPUT_TAIL).read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The line of the output that best explains a failure: stress-ng's last `error:` line, or the
/// last line that is not empty, cut to 200 characters.
fn last_line(text: &str, which: Which) -> Option<String> {
    let mut lines = text.lines().rev().map(str::trim).filter(|l| !l.is_empty());
    let line = match which {
        Which::StressNg => lines
            .clone()
            .find(|l| l.contains("error:"))
            .or_else(|| lines.next()),
        Which::Command => lines.next(),
    }?;
    Some(line.chars().take(200).collect())
}

/// One row of stress-ng's `--metrics-brief` table.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StressMetric {
    pub stressor: String,
    pub bogo_ops: f64,
    /// Bogo ops per second of real time.
    pub per_s: f64,
}

/// Reads the `--metrics-brief` table: after the header naming `bogo ops`, each row is a
/// stressor name followed by bogo ops, real, user and system seconds, and bogo ops per second of
/// real time (later versions add columns on the right; older ones print `info:` where newer
/// ones print `metrc:`).
pub(crate) fn parse_stress_ng_metrics(text: &str) -> Vec<StressMetric> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let Some(pos) = line.find("] ") else {
            continue;
        };
        let rest = line[pos + 2..].trim();
        if rest.starts_with("stressor") && rest.contains("bogo ops") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() < 6 || fields[0].parse::<f64>().is_ok() {
            continue;
        }
        let numbers: Option<Vec<f64>> = fields[1..6].iter().map(|f| f.parse().ok()).collect();
        if let Some(n) = numbers {
            rows.push(StressMetric {
                stressor: fields[0].to_string(),
                bogo_ops: n[0],
                per_s: n[4],
            });
        }
    }
    rows
}

/// stress-ng's throughput: its bogo ops and rate when it ran one stressor, every rate in the
/// detail.
fn stress_ng_end(text: &str, how: &str) -> ExternalEnd {
    let rows = parse_stress_ng_metrics(text);
    let rates = rows
        .iter()
        .map(|r| format!("{} {:.2} bogo ops/s", r.stressor, r.per_s))
        .collect::<Vec<_>>()
        .join(", ");
    match rows.as_slice() {
        [] => ExternalEnd {
            work: 0.0,
            unit: String::new(),
            per_s: Some(0.0),
            detail: format!("{how}; stress-ng printed no metrics"),
        },
        [one] => ExternalEnd {
            work: one.bogo_ops,
            unit: "bogo ops".into(),
            per_s: Some(one.per_s),
            detail: format!("{rates} (stress-ng, real time); {how}"),
        },
        _ => ExternalEnd {
            work: 0.0,
            unit: String::new(),
            per_s: Some(0.0),
            detail: format!(
                "{rates} (stress-ng, real time; stressors' bogo ops do not add up); {how}"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V0_15: &str = "\
stress-ng: info:  [26247] defaulting to a 86400 second (1 day, 0.00 secs) run per stressor
stress-ng: info:  [26247] dispatching hogs: 1 cpu, 1 vm
stress-ng: metrc: [26247] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s
stress-ng: metrc: [26247]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)
stress-ng: metrc: [26247] cpu                1924      1.00      1.00      0.00      1927.68        1930.81
stress-ng: metrc: [26247] vm                81424      1.00      0.72      0.27     81469.80       82015.83
stress-ng: info:  [26247] successful run completed in 1.00s
";

    const OLD: &str = "\
stress-ng: info:  [1200] dispatching hogs: 2 cpu
stress-ng: info:  [1200] stressor       bogo ops real time  usr time  sys time   bogo ops/s   bogo ops/s
stress-ng: info:  [1200]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)
stress-ng: info:  [1200] cpu                 2300     10.00     19.95      0.00       230.00       115.29
stress-ng: info:  [1200] successful run completed in 10.00s
";

    const V0_17: &str = "\
stress-ng: metrc: [77] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s CPU used per       RSS Max
stress-ng: metrc: [77]                           (secs)    (secs)    (secs)   (real time) (usr+sys time) instance (%)          (KB)
stress-ng: metrc: [77] hdd                 5120      2.00      0.10      1.20      2559.40        3938.46        32.50          3072
stress-ng: metrc: [77] miscellaneous metrics:
stress-ng: metrc: [77] hdd                 120.50 MB/sec read rate (harmonic mean of 1 instance)
";

    #[test]
    fn metrics_of_every_stress_ng_layout() {
        let rows = parse_stress_ng_metrics(V0_15);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].stressor, "cpu");
        assert_eq!(rows[0].bogo_ops, 1924.0);
        assert_eq!(rows[0].per_s, 1927.68);
        assert_eq!(rows[1].stressor, "vm");
        assert_eq!(rows[1].per_s, 81469.80);
        let rows = parse_stress_ng_metrics(OLD);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].per_s, 230.0);
        let rows = parse_stress_ng_metrics(V0_17);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].stressor, "hdd");
        assert_eq!(rows[0].bogo_ops, 5120.0);
        assert!(parse_stress_ng_metrics("stress-ng: error: [1] no stressors").is_empty());
    }

    #[test]
    fn throughput_fits_one_stressor_only() {
        let one = stress_ng_end(OLD, "stopped with SIGINT");
        assert_eq!(one.work, 2300.0);
        assert_eq!(one.unit, "bogo ops");
        assert_eq!(one.per_s, Some(230.0));
        assert!(
            one.detail.contains("cpu 230.00 bogo ops/s"),
            "{}",
            one.detail
        );
        let two = stress_ng_end(V0_15, "stopped with SIGINT");
        assert_eq!(two.work, 0.0);
        assert_eq!(two.unit, "");
        assert!(two
            .detail
            .contains("cpu 1927.68 bogo ops/s, vm 81469.80 bogo ops/s"));
        let none = stress_ng_end("", "exited with status 1");
        assert!(none.detail.contains("no metrics"));
    }

    #[test]
    fn failures_quote_the_telling_line() {
        let text = "stress-ng: info: [1] setting to a 1 second run\nstress-ng: error: [1] unrecognized option '--bogus'\nusage ...\n";
        assert_eq!(
            last_line(text, Which::StressNg).as_deref(),
            Some("stress-ng: error: [1] unrecognized option '--bogus'")
        );
        assert_eq!(
            last_line("sh: 1: nosuch: not found\n\n", Which::Command).as_deref(),
            Some("sh: 1: nosuch: not found")
        );
        assert_eq!(last_line("", Which::Command), None);
    }

    #[test]
    fn endings_in_words() {
        let code = |c: i32| ExitStatus::from_raw(c << 8);
        let sig = ExitStatus::from_raw;
        let t = Duration::from_millis(1500);
        assert_eq!(
            how_it_ended(Some(sig(SIGINT)), true, false, t),
            "stopped with SIGINT (ended by SIGINT)"
        );
        assert_eq!(
            how_it_ended(Some(code(2)), false, false, t),
            "exited with status 2 after 1.50 s, before the loads were stopped"
        );
        assert!(
            how_it_ended(Some(sig(child::SIGKILL)), true, true, t).starts_with("ignored SIGINT")
        );
    }
}
