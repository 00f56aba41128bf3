//! The counter survey behind `sandglass calibrate`: on one CPU, the counter's calibrated rate
//! and the iteration-time distributions of a bare counter loop, of the gap detector's ordered
//! read, and of a `clock_gettime(CLOCK_MONOTONIC_RAW)` loop, with the gap threshold they imply
//! and the number of iterations longer than 1, 5, 10 and 50 µs (interruptions, comparable with
//! oslat's histogram).

use crate::clock::{Calibration, CounterKind};
use crate::engine::calibrate::{self, GapChoice, LoopStats};
use crate::engine::Work;
use sandglass_sys::clock::{now_ns, ClockId};
use serde::{Deserialize, Serialize};

/// One loop's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoopRow {
    /// What the loop reads.
    pub name: String,
    pub stats: LoopStats,
    /// Iterations longer than each threshold in ns: `(threshold_ns, count)`.
    pub above_ns: Vec<(u64, u64)>,
}

/// The survey's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Survey {
    pub cpu: usize,
    pub calibration: Calibration,
    pub loops: Vec<LoopRow>,
    /// The threshold the gap detector's loop implies.
    pub threshold: Option<GapChoice>,
}

/// Thresholds for the interruption counts.
pub const ABOVE_NS: [u64; 4] = [1_000, 5_000, 10_000, 50_000];

fn run_loop(name: &str, read: &dyn Fn() -> u64, ns_per_tick: f64, duration_ns: u64) -> LoopRow {
    // Size the run from a short probe so that it lasts about `duration_ns`.
    let t0 = now_ns(ClockId::Monotonic);
    let _ = calibrate::measure(read, 1_000_000, &mut Work::None);
    let per_iteration = (now_ns(ClockId::Monotonic) - t0) as f64 / 1e6;
    let n = ((duration_ns as f64 / per_iteration.max(1.0)) as u64).clamp(1_000_000, 2_000_000_000);
    let t1 = now_ns(ClockId::Monotonic);
    let h = calibrate::measure(read, n, &mut Work::None);
    let elapsed = now_ns(ClockId::Monotonic) - t1;
    LoopRow {
        name: name.to_string(),
        stats: LoopStats::from_histogram(
            &h,
            ns_per_tick,
            elapsed as f64,
            sandglass_sys::sched::current_cpu(),
        ),
        above_ns: ABOVE_NS
            .iter()
            .map(|&ns| (ns, h.count_above((ns as f64 / ns_per_tick) as u64)))
            .collect(),
    }
}

/// Runs the survey on `cpu` (in a thread pinned there), each loop for about `duration_ns`.
pub fn run(cpu: usize, counter: CounterKind, duration_ns: u64) -> Option<Survey> {
    std::thread::spawn(move || {
        let _ = sandglass_sys::sched::set_affinity(sandglass_sys::Tid::SELF, &[cpu]);
        let calibration = Calibration::measure(counter, 200_000_000);
        let npt = calibration.ns_per_tick();
        let mut loops = Vec::new();
        let mut threshold = None;
        if counter != CounterKind::MonotonicRaw {
            loops.push(run_loop(
                "counter, no fence (rdtsc)",
                &sandglass_sys::counter::read_bare,
                npt,
                duration_ns,
            ));
            let ordered = run_loop(
                "counter, ordered (the gap detector's read)",
                &sandglass_sys::counter::read,
                npt,
                duration_ns,
            );
            threshold = Some(calibrate::choose_threshold(&ordered.stats));
            loops.push(ordered);
        }
        let raw = run_loop(
            "clock_gettime(CLOCK_MONOTONIC_RAW)",
            &|| now_ns(ClockId::MonotonicRaw),
            1.0,
            duration_ns,
        );
        if threshold.is_none() {
            threshold = Some(calibrate::choose_threshold(&raw.stats));
        }
        loops.push(raw);
        Survey {
            cpu,
            calibration,
            loops,
            threshold,
        }
    })
    .join()
    .ok()
}
