//! Workloads as their users think of them, turned into what a measurement needs: the period at
//! which the work is released and the lateness each period survives.
//!
//! - `audio:FRAMES@RATE[xPERIODS]`: a sound card period of FRAMES frames at RATE Hz, with
//!   PERIODS periods of buffering (2 unless given, as JACK's `-n 2`). The callback must deliver
//!   the next period before the card has played the PERIODS − 1 periods it holds: a wakeup
//!   later than (PERIODS − 1) × period, less the work it does, is an xrun (Cota-Robles & Held's
//!   slack, seed 000 §5).
//! - `control:PERIOD[:DEADLINE]`: a control loop released every PERIOD that must finish within
//!   DEADLINE of its release (the period unless given).
//! - `video:FPS`: a frame every 1/FPS s, due at the next refresh: one frame of slack.
//! - a task file (`analyze rta`'s format): the task with the least slack (its deadline less
//!   its response time with no release jitter) decides; the measurement runs at its period.

use crate::analysis::rta;
use crate::analysis::taskfile::{self, Task};
use crate::units::Nanos;
use serde::{Deserialize, Serialize};
use std::path::Path;
use thiserror::Error;

/// The kind of workload, for people and for the default priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    Audio,
    Control,
    Video,
    Tasks,
}

/// What a workload asks of the machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Workload {
    /// As given: `audio:64@48000x2`.
    pub spec: String,
    pub kind: WorkloadKind,
    /// For people: `audio, 64 frames at 48000 Hz (1.333 ms), 2 periods of buffering`.
    pub description: String,
    /// The time between releases, which the measurement uses as its interval.
    pub period_ns: Nanos,
    /// How late past its release a period's work may start and still make it (before
    /// subtracting `--work`): (PERIODS − 1) × period for audio, the deadline for control, the
    /// period for video, the least slack for a task set.
    pub deadline_ns: Nanos,
    /// What one miss is called: `xrun`, `missed deadline`, `dropped frame`.
    pub miss: String,
    /// For a task file: the task whose slack decides, and its response time with no jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_ns: Option<Nanos>,
}

impl Workload {
    /// One miss with its article: `an xrun`, `a missed deadline`.
    pub fn a_miss(&self) -> String {
        let an = self.miss.starts_with(['a', 'e', 'i', 'o', 'u', 'x']);
        format!("{} {}", if an { "an" } else { "a" }, self.miss)
    }
}

impl WorkloadKind {
    /// The SCHED_FIFO priority the workload runs at unless told otherwise: PipeWire's default
    /// for its audio threads (module-rt `rt.prio = 88`), 90 for a control loop or a task set's
    /// most urgent task (the range rt-tests measures at), and 50 for a video pipeline (the
    /// priority of threaded interrupt handlers, which a frame should not starve).
    pub fn default_priority(self) -> u32 {
        match self {
            WorkloadKind::Audio => 88,
            WorkloadKind::Control | WorkloadKind::Tasks => 90,
            WorkloadKind::Video => 50,
        }
    }
}

/// Why a workload string cannot be read; each says what to write instead.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum WorkloadError {
    #[error("'{0}' is not a workload: write audio:FRAMES@RATE[xPERIODS] (audio:64@48000x2), control:PERIOD[:DEADLINE] (control:1ms:500us), video:FPS (video:60) or the path of a task file")]
    Unknown(String),
    #[error("'{spec}': {what}; for example {example}")]
    Bad {
        spec: String,
        what: String,
        example: &'static str,
    },
    #[error("{0}")]
    TaskFile(String),
}

fn bad(spec: &str, what: impl Into<String>, example: &'static str) -> WorkloadError {
    WorkloadError::Bad {
        spec: spec.to_string(),
        what: what.into(),
        example,
    }
}

const AUDIO_EXAMPLE: &str = "audio:64@48000x2 (64 frames at 48 kHz, two periods of buffering)";
const CONTROL_EXAMPLE: &str = "control:1ms:500us (every 1 ms, done within 500 µs)";
const VIDEO_EXAMPLE: &str = "video:60 or video:59.94";

/// Reads a workload string. A string without a known `KIND:` prefix is a task file's path,
/// read with `read` (the file system in the command; a closure in tests).
pub fn parse(
    spec: &str,
    read: &dyn Fn(&Path) -> std::io::Result<String>,
) -> Result<Workload, WorkloadError> {
    let s = spec.trim();
    if let Some(rest) = s.strip_prefix("audio:") {
        return audio(s, rest);
    }
    if let Some(rest) = s.strip_prefix("control:") {
        return control(s, rest);
    }
    if let Some(rest) = s.strip_prefix("video:") {
        return video(s, rest);
    }
    if s.is_empty() || (s.contains(':') && !s.contains('/') && !s.contains('.')) {
        return Err(WorkloadError::Unknown(s.to_string()));
    }
    let path = Path::new(s);
    let text = read(path).map_err(|e| {
        WorkloadError::TaskFile(format!(
            "{s}: cannot read it as a task file ({e}); a workload is audio:FRAMES@RATE[xPERIODS], control:PERIOD[:DEADLINE], video:FPS or a task file"
        ))
    })?;
    let tasks = taskfile::parse_task_file(path, &text)
        .map_err(|e| WorkloadError::TaskFile(e.to_string()))?;
    task_set(s, &tasks)
}

fn audio(spec: &str, rest: &str) -> Result<Workload, WorkloadError> {
    let (frames, rest) = rest.split_once('@').ok_or_else(|| {
        bad(
            spec,
            "write the frames and the rate as FRAMES@RATE",
            AUDIO_EXAMPLE,
        )
    })?;
    let (rate, periods) = match rest.split_once(['x', 'X']) {
        Some((r, p)) => (r, Some(p)),
        None => (rest, None),
    };
    let frames: u64 = match frames.trim().parse() {
        Ok(f) if (1..=1 << 20).contains(&f) => f,
        _ => {
            return Err(bad(
                spec,
                format!("'{frames}' frames: give a whole number of frames from 1 to 1048576"),
                AUDIO_EXAMPLE,
            ))
        }
    };
    let rate: u64 = match rate.trim().parse() {
        Ok(r) if (1000..=10_000_000).contains(&r) => r,
        _ => {
            return Err(bad(
                spec,
                format!("'{rate}' Hz: give the sample rate in Hz, from 1000 to 10000000"),
                AUDIO_EXAMPLE,
            ))
        }
    };
    let periods: u64 = match periods.map(|p| p.trim().parse::<u64>()) {
        None => 2,
        Some(Ok(p)) if (2..=64).contains(&p) => p,
        Some(Ok(1)) => {
            return Err(bad(
                spec,
                "one period of buffering leaves no time at all to refill it: give at least 2",
                AUDIO_EXAMPLE,
            ))
        }
        Some(_) => {
            return Err(bad(
                spec,
                "after x give the number of periods of buffering, from 2 to 64",
                AUDIO_EXAMPLE,
            ))
        }
    };
    // frames / rate seconds, to the nearest nanosecond.
    let period = (u128::from(frames) * 1_000_000_000 + u128::from(rate) / 2) / u128::from(rate);
    let period = Nanos(period as u64);
    if period < Nanos::from_micros(10) {
        return Err(bad(
            spec,
            format!("a period of {period} is shorter than any timer can serve (10 µs at least)"),
            AUDIO_EXAMPLE,
        ));
    }
    Ok(Workload {
        spec: spec.to_string(),
        kind: WorkloadKind::Audio,
        description: format!(
            "audio, {frames} frames at {rate} Hz ({period} per period), {periods} periods of buffering"
        ),
        period_ns: period,
        deadline_ns: Nanos(period.0 * (periods - 1)),
        miss: "xrun".to_string(),
        task: None,
        response_ns: None,
    })
}

fn time(spec: &str, what: &str, v: &str, example: &'static str) -> Result<Nanos, WorkloadError> {
    match crate::duration::parse(v) {
        Ok(n) if n >= Nanos::from_micros(10) && n <= Nanos::from_secs(10) => Ok(n),
        Ok(n) => Err(bad(
            spec,
            format!("a {what} of {n}: give one from 10us to 10s"),
            example,
        )),
        Err(e) => Err(bad(spec, format!("the {what} '{v}': {e}"), example)),
    }
}

fn control(spec: &str, rest: &str) -> Result<Workload, WorkloadError> {
    let (period, deadline) = match rest.split_once(':') {
        Some((p, d)) => (p, Some(d)),
        None => (rest, None),
    };
    let period = time(spec, "period", period, CONTROL_EXAMPLE)?;
    let deadline = match deadline {
        Some(d) => time(spec, "deadline", d, CONTROL_EXAMPLE)?,
        None => period,
    };
    Ok(Workload {
        spec: spec.to_string(),
        kind: WorkloadKind::Control,
        description: format!("control loop, every {period}, done within {deadline}"),
        period_ns: period,
        deadline_ns: deadline,
        miss: "missed deadline".to_string(),
        task: None,
        response_ns: None,
    })
}

fn video(spec: &str, rest: &str) -> Result<Workload, WorkloadError> {
    let fps: f64 = match rest.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && (1.0..=1000.0).contains(&f) => f,
        _ => {
            return Err(bad(
                spec,
                format!("'{rest}' frames per second: give a rate from 1 to 1000"),
                VIDEO_EXAMPLE,
            ))
        }
    };
    let period = Nanos((1e9 / fps).round() as u64);
    Ok(Workload {
        spec: spec.to_string(),
        kind: WorkloadKind::Video,
        description: format!("video, {fps} frames per second ({period} per frame)"),
        period_ns: period,
        deadline_ns: period,
        miss: "dropped frame".to_string(),
        task: None,
        response_ns: None,
    })
}

/// The task with the least slack decides: a release later than its deadline less its response
/// time (computed with no release jitter) makes it miss.
fn task_set(spec: &str, tasks: &[Task]) -> Result<Workload, WorkloadError> {
    let report = rta::analyze(tasks, rta::Preemption::Preemptive)
        .map_err(|e| WorkloadError::TaskFile(format!("{spec}: {e}")))?;
    let mut least: Option<(&rta::TaskResponse, i128)> = None;
    for t in &report.tasks {
        let slack = match t.response_time_ns {
            Some(r) => i128::from(t.deadline_ns.0) - i128::from(r.0),
            None => i128::MIN,
        };
        if least.is_none_or(|(_, s)| slack < s) {
            least = Some((t, slack));
        }
    }
    let Some((task, slack)) = least else {
        return Err(WorkloadError::TaskFile(format!(
            "{spec}: the file has no task"
        )));
    };
    if slack < 0 {
        return Err(WorkloadError::TaskFile(format!(
            "{spec}: task {} misses its deadline on an ideal machine (its response time exceeds it; see `sandglass analyze rta {spec}`): no measurement can make it suitable",
            task.name
        )));
    }
    Ok(Workload {
        spec: spec.to_string(),
        kind: WorkloadKind::Tasks,
        description: format!(
            "task set of {} tasks; {} (every {}) has the least slack: {} after a response time of {}",
            tasks.len(),
            task.name,
            task.period_ns,
            Nanos(slack as u64),
            task.response_time_ns.unwrap_or_default()
        ),
        period_ns: task.period_ns,
        deadline_ns: Nanos(slack as u64),
        miss: "missed deadline".to_string(),
        task: Some(task.name.clone()),
        response_ns: task.response_time_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_file(_: &Path) -> std::io::Result<String> {
        Err(std::io::Error::from(std::io::ErrorKind::NotFound))
    }

    fn p(s: &str) -> Result<Workload, WorkloadError> {
        parse(s, &no_file)
    }

    #[test]
    fn audio_periods_and_slack() {
        let w = p("audio:64@48000x2").expect("valid");
        assert_eq!(w.period_ns, Nanos(1_333_333));
        assert_eq!(w.deadline_ns, Nanos(1_333_333));
        let w = p("audio:256@44100x3").expect("valid");
        assert_eq!(w.period_ns, Nanos(5_804_989));
        assert_eq!(w.deadline_ns, Nanos(2 * 5_804_989));
        assert_eq!(
            p("audio:128@48000").expect("valid").deadline_ns,
            Nanos(2_666_667)
        );
    }

    #[test]
    fn control_and_video() {
        let w = p("control:1ms:500us").expect("valid");
        assert_eq!(
            (w.period_ns, w.deadline_ns),
            (Nanos(1_000_000), Nanos(500_000))
        );
        let w = p("control:2ms").expect("valid");
        assert_eq!(w.deadline_ns, Nanos(2_000_000));
        let w = p("video:60").expect("valid");
        assert_eq!(w.period_ns, Nanos(16_666_667));
        assert_eq!(
            p("video:59.94").expect("valid").period_ns,
            Nanos(16_683_350)
        );
    }

    #[test]
    fn bad_workloads_say_what_to_write() {
        for (s, says) in [
            ("audio:64@48000x1", "at least 2"),
            ("audio:64", "FRAMES@RATE"),
            ("audio:0@48000", "frames"),
            ("audio:64@48", "sample rate"),
            ("audio:64@48000x", "number of periods"),
            ("audio:1@1000000", "shorter than any timer"),
            ("control:", "period"),
            ("control:1ms:0us", "from 10us"),
            ("control:1 ms:abc", "deadline"),
            ("video:0", "from 1 to 1000"),
            ("video:nan", "from 1 to 1000"),
            ("midi:1", "not a workload"),
            ("", "not a workload"),
            ("tasks.toml", "cannot read it as a task file"),
        ] {
            let e = p(s).expect_err(s).to_string();
            assert!(e.contains(says), "{s}: {e}");
        }
    }

    #[test]
    fn a_task_file_gives_the_least_slack() {
        let text = "[[task]]\nname = \"fast\"\nwcet = \"200us\"\nperiod = \"1ms\"\n\n[[task]]\nname = \"slow\"\nwcet = \"3ms\"\nperiod = \"10ms\"\ndeadline = \"4ms\"\n";
        let read = |_: &Path| Ok(text.to_string());
        let w = parse("set.toml", &read).expect("valid");
        // slow: 3 ms + 200 µs for each of the four fast releases in its busy period = 3.8 ms
        // response, 200 µs of slack; fast: 800 µs of slack.
        assert_eq!(w.task.as_deref(), Some("slow"));
        assert_eq!(w.response_ns, Some(Nanos(3_800_000)));
        assert_eq!(w.deadline_ns, Nanos(200_000));
        assert_eq!(w.period_ns, Nanos(10_000_000));
        let late =
            "[[task]]\nname = \"x\"\nwcet = \"3ms\"\nperiod = \"10ms\"\ndeadline = \"2ms\"\n";
        let read = |_: &Path| Ok(late.to_string());
        let e = parse("late.toml", &read).expect_err("misses").to_string();
        assert!(
            e.contains("task x misses its deadline on an ideal machine"),
            "{e}"
        );
    }
}
