//! Stops of the measuring process itself: the terminal's Ctrl-Z (SIGTSTP), `kill -STOP`
//! (SIGSTOP) and a debugger. While the process is stopped nothing of it runs, so every
//! measuring thread sees the stop as one long delay; a run that did not say so would report it
//! as the machine's latency or noise.
//!
//! The main thread keeps SIGTSTP and SIGCONT blocked (as it does SIGINT, SIGTERM and SIGHUP)
//! and takes them in its wait. A SIGTSTP is noted with its time, then the process stops itself,
//! as the default action would: the start is exact. SIGSTOP cannot be caught; its SIGCONT can,
//! so the stop's end is exact and its start is bounded by the last time the main thread was
//! seen running before it (at most one of its waits, a tenth of a second, earlier than the
//! stop).
//! A debugger's stop sends no SIGCONT: a wait of the main thread that lasts far beyond its
//! timeout while a tracer is attached (`TracerPid`) is recorded as one.
//!
//! Each stop is kept in the run's header (`stops`), announced by a `process_stopped` warning,
//! and the delays that overlap it are named as the stop in the causes (see
//! [`name_in_causes`]).

use crate::causes::explain::Inferred;
use crate::causes::Causes;
use crate::units::Nanos;
use serde::{Deserialize, Serialize};

/// What stopped the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StoppedBy {
    /// The terminal's stop, Ctrl-Z (SIGTSTP).
    Sigtstp,
    /// `kill -STOP` (SIGSTOP), continued by SIGCONT.
    Sigstop,
    /// A debugger or another tracer (ptrace).
    Debugger,
}

impl StoppedBy {
    pub fn text(self) -> &'static str {
        match self {
            StoppedBy::Sigtstp => "SIGTSTP (Ctrl-Z)",
            StoppedBy::Sigstop => "SIGSTOP",
            StoppedBy::Debugger => "a debugger",
        }
    }
}

/// One stop of the process, in run time (ns from the run's start).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProcessStop {
    pub by: StoppedBy,
    /// When the process stopped: exact for SIGTSTP; otherwise the last time the main thread was
    /// seen running before the stop, which began at most `from_uncertainty_ns` later.
    pub from_ns: u64,
    /// How much later than `from_ns` the stop may have begun (0 when exact).
    pub from_uncertainty_ns: u64,
    /// When the process ran again.
    pub to_ns: u64,
    /// The tracer's process id, for a debugger's stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracer_pid: Option<i32>,
}

impl ProcessStop {
    /// The longest the stop can have lasted.
    pub fn length_ns(&self) -> u64 {
        self.to_ns.saturating_sub(self.from_ns)
    }

    /// `the process was stopped by SIGSTOP for 52.1 ms (at most; from 1.2 s to 1.252 s)`.
    pub fn text(&self) -> String {
        let at_most = if self.from_uncertainty_ns > 0 {
            " at most"
        } else {
            ""
        };
        let tracer = self
            .tracer_pid
            .map(|p| format!(" (tracer pid {p})"))
            .unwrap_or_default();
        format!(
            "the process was stopped by {}{tracer} for{at_most} {}, from {} to {} of the run",
            self.by.text(),
            Nanos(self.length_ns()),
            seconds(self.from_ns),
            seconds(self.to_ns)
        )
    }

    /// The warning a run gives for the stop.
    pub fn warning(&self) -> crate::warning::Warning {
        crate::warning::Warning::new(
            crate::warning::WarningKind::ProcessStopped,
            format!(
                "{}: the delays of that time are the stop, not the machine (they are named so in the causes)",
                self.text()
            ),
        )
    }

    /// True when a delay of `size_ns` at run time `at_ns` overlaps the stop (with `slack_ns`
    /// either side for the wakeup and the main thread's own reaction).
    fn overlaps(&self, at_ns: u64, size_ns: u64, slack_ns: u64) -> bool {
        at_ns <= self.to_ns + slack_ns && at_ns + size_ns + slack_ns >= self.from_ns && size_ns > 0
    }
}

/// Seconds with three decimals, as the causes print times of the run.
fn seconds(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// How far a delay may lie from a stop and still be its: the threads run again within
/// milliseconds of SIGCONT.
const SLACK_NS: u64 = 10_000_000;

/// Names the stops in a run's causes: every explained delay that overlaps a stop says so
/// first (its other readings stay beside it), so no report presents the stop as the
/// machine's latency or noise.
pub fn name_in_causes(causes: &mut Causes, stops: &[ProcessStop]) {
    if stops.is_empty() {
        return;
    }
    if let Some(e) = causes.explanation.as_mut() {
        for s in &mut e.spikes {
            if let Some(stop) = stops
                .iter()
                .find(|p| p.overlaps(s.at_ns, s.size_ns, SLACK_NS))
            {
                s.inferred = Some(Inferred {
                    kind: "process_stopped".into(),
                    wait_ns: s.inferred.as_ref().map(|i| i.wait_ns).unwrap_or(0),
                    text: format!("not the machine: {}", stop.text()),
                });
                s.abnormal.clear();
            }
        }
    }
}

/// The stops that overlap a delay of `size_ns` at `at_ns` (run time).
pub fn overlapping(
    stops: &[ProcessStop],
    at_ns: u64,
    size_ns: u64,
) -> impl Iterator<Item = &ProcessStop> {
    stops
        .iter()
        .filter(move |p| p.overlaps(at_ns, size_ns, SLACK_NS))
}

/// What the main thread's supervision sees of job control, as the signals arrive.
#[derive(Debug, Default)]
pub struct Tracker {
    /// SIGCONTs still to come for terminal stops already recorded.
    owed_conts: u32,
    /// The main thread's previous wait: when it began and ended.
    last_wait: Option<(u64, u64)>,
    pub stops: Vec<ProcessStop>,
}

impl Tracker {
    /// The process stopped itself for a SIGTSTP at run time `from_ns` and ran again at
    /// `to_ns` (the main thread stops inside the call that stops the process, so both are
    /// exact). The SIGCONT that ended it is still to be taken. Returns the stop.
    pub fn terminal_stop(&mut self, from_ns: u64, to_ns: u64) -> &ProcessStop {
        self.owed_conts += 1;
        let i = self.stops.len();
        self.stops.push(ProcessStop {
            by: StoppedBy::Sigtstp,
            from_ns,
            from_uncertainty_ns: 0,
            to_ns: to_ns.max(from_ns),
            tracer_pid: None,
        });
        &self.stops[i]
    }

    /// A wait of the main thread from `seen_ns` to `now_ns` that took no job-control signal.
    pub fn waited(&mut self, seen_ns: u64, now_ns: u64) {
        self.last_wait = Some((seen_ns, now_ns));
    }

    /// SIGCONT taken at `now_ns` by a wait that began at `seen_ns` with a timeout of
    /// `wait_ns`. Returns the stop it ended: none for the SIGCONT of a terminal stop already
    /// recorded, else a SIGSTOP's.
    ///
    /// The stop began in the longest stretch the main thread was not seen running: its
    /// previous wait (which the stop cuts short, see signal(7)), the work between that wait
    /// and this one, or this wait. Its start is that stretch's beginning, uncertain by the
    /// stretch's length up to one wait.
    pub fn continued(&mut self, now_ns: u64, seen_ns: u64, wait_ns: u64) -> Option<&ProcessStop> {
        let prev = self.last_wait.replace((seen_ns, now_ns));
        if self.owed_conts > 0 {
            self.owed_conts -= 1;
            return None;
        }
        let stretches = [
            prev,
            prev.map(|(_, end)| (end, seen_ns)),
            Some((seen_ns, now_ns)),
        ];
        let (from, until) = stretches
            .into_iter()
            .flatten()
            .max_by_key(|(a, b)| b.saturating_sub(*a))
            .unwrap_or((seen_ns, now_ns));
        self.stops.push(ProcessStop {
            by: StoppedBy::Sigstop,
            from_ns: from,
            from_uncertainty_ns: wait_ns.min(until.saturating_sub(from)),
            to_ns: now_ns.max(from),
            tracer_pid: None,
        });
        self.stops.last()
    }

    /// A wait of `wait_ns` that began at `seen_ns` ended at `now_ns` with no signal. Where it
    /// overran its timeout by more than `DEBUGGER_OVERRUN_NS` and `tracer` is attached, the
    /// process was held by it; returns that stop.
    pub fn woke(
        &mut self,
        now_ns: u64,
        seen_ns: u64,
        wait_ns: u64,
        tracer: impl FnOnce() -> Option<i32>,
    ) -> Option<&ProcessStop> {
        self.last_wait = Some((seen_ns, now_ns));
        if now_ns.saturating_sub(seen_ns) <= wait_ns + DEBUGGER_OVERRUN_NS {
            return None;
        }
        let pid = tracer()?;
        self.stops.push(ProcessStop {
            by: StoppedBy::Debugger,
            from_ns: seen_ns,
            from_uncertainty_ns: wait_ns,
            to_ns: now_ns,
            tracer_pid: Some(pid),
        });
        self.stops.last()
    }
}

/// How much longer than its timeout the main thread's wait must last, with a tracer attached,
/// to count as a debugger's stop: a virtual CPU stopped by its host can hold the main thread
/// for tens of milliseconds, a person at a debugger for seconds.
pub const DEBUGGER_OVERRUN_NS: u64 = 500_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_stop_is_exact_and_sigstop_is_bounded() {
        let mut t = Tracker::default();
        let s = t.terminal_stop(1_000_000_000, 3_500_000_000).clone();
        assert_eq!(s.by, StoppedBy::Sigtstp);
        assert_eq!(
            (s.from_ns, s.to_ns, s.from_uncertainty_ns),
            (1_000_000_000, 3_500_000_000, 0)
        );
        assert_eq!(
            s.text(),
            "the process was stopped by SIGTSTP (Ctrl-Z) for 2.5 s, from 1.000 s to 3.500 s of the run"
        );
        // Its SIGCONT ends nothing more.
        assert!(t
            .continued(3_500_100_000, 3_500_000_000, 100_000_000)
            .is_none());
        t.waited(4_800_000_000, 4_900_000_000);
        let s = t
            .continued(5_000_000_000, 4_900_000_000, 100_000_000)
            .unwrap()
            .clone();
        assert_eq!(s.by, StoppedBy::Sigstop);
        assert_eq!(
            (s.from_ns, s.from_uncertainty_ns),
            (4_900_000_000, 100_000_000)
        );
        assert!(s.text().contains("for at most 100 ms"), "{}", s.text());
        assert_eq!(t.stops.len(), 2);
    }

    /// SIGSTOP cuts the main thread's wait short (EINTR after SIGCONT) and the next wait
    /// takes SIGCONT at once: the stop is placed in the cut wait, not in the short one.
    #[test]
    fn a_sigstop_that_cut_a_wait_short_is_placed_in_it() {
        let mut t = Tracker::default();
        t.waited(1_000_000_000, 1_100_000_000);
        // Stopped at 1.15 s for 300 ms: the wait from 1.1 s returns at 1.45 s without a signal.
        assert!(t
            .woke(1_450_000_000, 1_100_000_000, 100_000_000, || None)
            .is_none());
        let s = t
            .continued(1_450_010_000, 1_450_005_000, 100_000_000)
            .unwrap()
            .clone();
        assert_eq!(
            (s.from_ns, s.from_uncertainty_ns, s.to_ns),
            (1_100_000_000, 100_000_000, 1_450_010_000)
        );
    }

    #[test]
    fn a_long_wait_is_a_debuggers_stop_only_with_a_tracer() {
        let mut t = Tracker::default();
        assert!(t.woke(200_000_000, 0, 100_000_000, || Some(7)).is_none());
        assert!(t.woke(2_000_000_000, 0, 100_000_000, || None).is_none());
        let s = t.woke(2_000_000_000, 0, 100_000_000, || Some(7)).unwrap();
        assert_eq!((s.by, s.tracer_pid), (StoppedBy::Debugger, Some(7)));
        assert!(s.text().contains("a debugger (tracer pid 7)"));
    }

    #[test]
    fn delays_overlapping_a_stop_are_named_as_it() {
        let mut c: Causes = serde_json::from_value(serde_json::json!({
            "sample_hz": 10, "spike_threshold_ns": 100000, "spikes": 2, "trains": [],
            "explanation": {
                "intervals": 10, "totals": [], "unexplained_spikes": 0,
                "spikes": [
                    {"cpu": 1, "at_ns": 1_210_000_000u64, "size_ns": 50_000_000u64,
                     "interval_start_ns": 1_200_000_000u64, "interval_end_ns": 1_300_000_000u64,
                     "abnormal": [{"kind": "steal", "name": "hypervisor (steal)", "count": 5, "median": 0}]},
                    {"cpu": 1, "at_ns": 2_500_000_000u64, "size_ns": 300_000u64,
                     "interval_start_ns": 2_500_000_000u64, "interval_end_ns": 2_600_000_000u64,
                     "abnormal": []}
                ]
            }
        }))
        .unwrap();
        let stop = ProcessStop {
            by: StoppedBy::Sigstop,
            from_ns: 1_150_000_000,
            from_uncertainty_ns: 100_000_000,
            to_ns: 1_260_000_000,
            tracer_pid: None,
        };
        name_in_causes(&mut c, std::slice::from_ref(&stop));
        let e = c.explanation.unwrap();
        let first = e.spikes[0].inferred.as_ref().unwrap();
        assert_eq!(first.kind, "process_stopped");
        assert!(e.spikes[0]
            .text()
            .starts_with("not the machine: the process was stopped by SIGSTOP"));
        assert!(
            e.spikes[1].inferred.is_none(),
            "a delay after the stop keeps its own reading"
        );
        assert_eq!(overlapping(&[stop], 1_210_000_000, 50_000_000).count(), 1);
    }
}
