//! Stage 6: the main thread while the threads measure. It sleeps on its own CPU, waking ten
//! times a second to take signals, enforce the end of the run, act on thresholds, move what
//! the threads recorded into the store, sample `/proc` (in every run, beside the measuring
//! threads when no CPU is free of them) and report progress.

use super::extras::Extras;
use super::host::{Host, Signal, Stop};
use super::threads::Threads;
use super::{Calibrated, LiveRow, Observer, Prepared, Sink, Supervised, Timebase};
use crate::causes::sampler::SpikeAt;
use crate::causes::sampler::{Proc, Sampler, SamplerSpec};
use crate::clock;
use crate::engine::merge;
use crate::engine::Clock;
use crate::plan::{Threshold, ThresholdAction};
use crate::store::{RunState, StoreError};
use crate::units::Nanos;
use crate::warning::{Warning, WarningKind};
use std::time::Duration;

/// How long the main thread sleeps between two looks: a tenth of a second, the sampler's
/// default period, so that a snapshot and a drain share one wakeup (each wakeup of the main
/// thread costs the kernel tens of microseconds on a virtual machine). The rings hold seconds
/// of samples, and a signal ends the wait at once.
const WAKE_NS: u64 = 100_000_000;
/// How often the instant rate of the timebase is refined from a new anchor: every second, so
/// that the rate measured before the run (over a tenth of a second, uncertain by a tenth of a
/// ppm or so) places no sample of a short run more than about 0.1 µs from CLOCK_MONOTONIC_RAW.
/// An anchor costs the main thread about 3 µs.
const REFINE_NS: u64 = 1_000_000_000;
/// Longest a `shell:` action may run after the measurement before it is killed.
const ACTION_GRACE: Duration = Duration::from_secs(10);

/// The state of the loop.
struct Loop<'a> {
    state: RunState,
    end_detail: String,
    /// When a stop was requested (counter value).
    stop_since: Option<u64>,
    t0: u64,
    cal: &'a Calibrated,
    warnings: Vec<Warning>,
    store_error: Option<StoreError>,
    /// The largest delay a threshold action fired for.
    fired_ns: u64,
    actions: Vec<std::process::Child>,
    /// The signal that ended the run, when one did.
    signal: Option<Stop>,
    /// Stops of the process (Ctrl-Z, SIGSTOP, a debugger).
    stops: crate::stops::Tracker,
}

impl Loop<'_> {
    fn elapsed_ns(&self, now: u64) -> u64 {
        self.cal.before.ns_for_ticks(now.saturating_sub(self.t0))
    }

    fn stop(&mut self, now: u64, state: RunState, detail: String) {
        if self.stop_since.is_none() {
            self.state = state;
            self.end_detail = detail;
            self.stop_since = Some(now);
        }
    }
}

/// Runs the loop until every thread has finished, or a stop could not end one.
#[allow(clippy::too_many_arguments)]
pub(crate) fn supervise<H: Host, C: Clock + Copy, S: Sink>(
    host: &H,
    clock: C,
    p: &Prepared<'_>,
    cal: &Calibrated,
    mut timebase: Timebase,
    threads: &mut Threads<'_, H>,
    extras: &mut Extras,
    sink: &mut S,
    obs: &mut dyn Observer,
) -> Supervised {
    let t0 = timebase.zero;
    let plan = p.plan;
    let before = &cal.before;
    let end_tick = t0 + before.ticks_for_ns(plan.duration_ns.0);
    let grace_ns = 2_000_000_000 + plan.duration_ns.0 / 20;
    // Both move later by the length of every stop of the process: a run stopped past its end
    // is not a thread that failed to stop.
    let mut watchdog_tick = end_tick + before.ticks_for_ns(grace_ns);
    let mut abandon_tick = watchdog_tick + before.ticks_for_ns(2_000_000_000);
    let mut lp = Loop {
        state: RunState::Completed,
        end_detail: "ran for the whole duration".to_string(),
        stop_since: None,
        t0,
        cal,
        warnings: Vec::new(),
        store_error: None,
        fired_ns: 0,
        actions: Vec::new(),
        signal: None,
        stops: crate::stops::Tracker::default(),
    };
    // The sampler reads /proc on the main thread in every run, `sample_hz` times a second
    // (`--sample-rate 0` turns it off). A snapshot reads files kept open into buffers kept
    // from the last one and allocates nothing; its cost is the kernel's formatting of the
    // files: on a 2-vCPU virtual machine 120 to 145 µs taken back to back, about 150 µs with
    // the cold caches of a run, most of it /proc/interrupts (docs/causes.md, BENCHMARKS.md).
    // Where the main thread has a CPU of its own it never touches a measuring thread. Where
    // every CPU is measured (`-c all`, the quick study) it shares one with them, as it already
    // does for its other short turns: at 10 Hz the snapshots take about 1.5 ms a second,
    // 0.15% of one CPU, from whichever measuring thread shares the main thread's CPU. A polling
    // (noise) thread sees each snapshot as an interruption of its length; a real-time timer
    // thread preempts the main thread as soon as the kernel allows, which on a kernel without
    // forced preemption (`preempt=none`) is at the end of the read in progress, so a wakeup
    // that falls inside a snapshot can be late by up to one file's read (/proc/interrupts
    // there: 65 µs with warm caches, up to about 125 µs cold).
    let sample_every = match plan.sample_hz {
        0 => 0,
        hz => 1_000_000_000 / u64::from(hz),
    };
    let mut sampler = (sample_every > 0).then(|| {
        let spec = SamplerSpec {
            cpus: p.placement.measured.to_vec(),
            tids: threads.tids.clone(),
        };
        Sampler::new(Proc::new(), spec, p.dir.path())
    });
    let sample = |s: &mut Sampler<Proc>, at: u64, lp: &mut Loop<'_>| {
        if let Err(e) = s.sample(at) {
            lp.store_error.get_or_insert(e);
        }
    };
    if let Some(s) = sampler.as_mut() {
        sample(s, lp.elapsed_ns(clock.now()), &mut lp);
    }
    let mut next_sample_ns = sample_every;
    // With a duty cycle (`monitor --duty`) the snapshots cover the measuring windows only, from
    // one sampling period before each window opens to one after it closes: a pause has
    // nothing to explain, and at 10 % duty this cuts the sampler's file and CPU time tenfold.
    let duty = plan.threads.iter().find_map(|t| match t.workload {
        crate::model::Workload::Timer { duty: Some(d), .. } => Some(d),
        _ => None,
    });
    let in_window = |ns: u64| {
        duty.is_none_or(|d| {
            let every = d.every_ns.0.max(1);
            (ns + sample_every) % every < d.on_ns.0 + 2 * sample_every
        })
    };
    let mut last_progress = 0u64;
    let mut last_refine = t0;
    let mut spikes: Vec<SpikeAt> = Vec::with_capacity(4096);
    let progress = threads.progress.clone();
    let progress_refs: Vec<&crate::engine::Progress> =
        progress.iter().map(|p| p.as_ref()).collect();
    loop {
        if threads.all_finished() {
            break;
        }
        let seen = clock.now();
        let event = match extras.early_signal.take() {
            Some(sig) => Some(Signal::End(sig)),
            None => host.wait_event(WAKE_NS),
        };
        let now = clock.now();
        if let Some(length) = job_control(host, clock, &mut lp, event, seen, now, obs) {
            watchdog_tick += length;
            abandon_tick += length;
        }
        let now = clock.now();
        let sig = match event {
            Some(Signal::End(sig)) => Some(sig),
            _ => None,
        };
        if let Some(sig) = sig {
            if lp.stop_since.is_none() {
                lp.signal = Some(sig);
            }
            let detail = format!(
                "stopped by {} after {}",
                sig.name(),
                Nanos(lp.elapsed_ns(now))
            );
            lp.stop(now, RunState::Interrupted, detail);
            let _: Stop = sig;
        }
        if lp.stop_since.is_none() && now > watchdog_tick {
            let detail = format!(
                "the watchdog stopped the run: threads were still running {} after its end",
                Nanos(grace_ns)
            );
            lp.stop(now, RunState::Watchdog, detail);
        }
        if let (Some(th), None) = (&plan.threshold, lp.stop_since) {
            threshold(th, now, &progress_refs, extras, p, &mut lp, obs);
        }
        if let Some(since) = lp.stop_since {
            threads.request_stop();
            if now > abandon_tick.max(since + before.ticks_for_ns(2_000_000_000)) {
                lp.state = RunState::Watchdog;
                lp.end_detail =
                    format!("{}; a thread did not stop and was abandoned", lp.end_detail);
                break;
            }
        }
        // The trace is drained as the run goes only from a CPU no measuring thread uses.
        if let (Some(t), Some(_)) = (extras.tracing.as_mut(), p.placement.main_cpu) {
            t.drain();
        }
        if now.saturating_sub(last_refine) >= before.ticks_for_ns(REFINE_NS) {
            timebase.refine(&cal.first, &clock::anchor(cal.kind));
            last_refine = now;
        }
        let elapsed_ns = lp.elapsed_ns(now);
        if lp.store_error.is_none() {
            let watermark = merge::watermark(&clock, &progress_refs);
            let moved = threads
                .drain_all(sink, &timebase)
                .and_then(|()| sink.tick(elapsed_ns, watermark, &timebase));
            if let Err(e) = moved {
                lp.store_error = Some(e);
            }
        }
        if let Some(e) = &lp.store_error {
            let detail = format!(
                "stopped after {}: the run's store could not be written: {e}; what was written is kept (free some space, or choose another place with -o)",
                Nanos(elapsed_ns)
            );
            lp.stop(now, RunState::Incomplete, detail);
        }
        spikes.clear();
        sink.spikes(&mut spikes);
        if let Some(s) = sampler.as_mut() {
            s.note_spikes(&spikes);
            if lp.stop_since.is_none() && elapsed_ns >= next_sample_ns {
                if in_window(elapsed_ns) {
                    sample(s, elapsed_ns, &mut lp);
                }
                next_sample_ns = elapsed_ns - elapsed_ns % sample_every + sample_every;
            }
        }
        if elapsed_ns >= last_progress + 1_000_000_000 && now < end_tick {
            last_progress = elapsed_ns - elapsed_ns % 1_000_000_000;
            obs.progress(Nanos(elapsed_ns), plan.duration_ns);
            obs.live(Nanos(elapsed_ns), &live_rows(threads, &progress_refs));
            if lp.stop_since.is_none() {
                if let Some(why) = obs.end_early(Nanos(elapsed_ns)) {
                    let detail = format!("ended early after {}: {why}", Nanos(elapsed_ns));
                    obs.note(&detail);
                    lp.stop(now, RunState::Completed, detail);
                }
            }
        }
    }
    // A stop in the run's last moments: its SIGCONT came after the threads had finished.
    while let Some(event) = host.wait_event(0) {
        let now = clock.now();
        job_control(host, clock, &mut lp, Some(event), now, now, obs);
        if let Signal::End(sig) = event {
            if lp.state == RunState::Completed {
                lp.state = RunState::Interrupted;
                lp.signal = Some(sig);
                lp.end_detail = format!("stopped by {} at the end of the run", sig.name());
            }
        }
    }
    // The closing snapshot ends the last interval.
    let digest = sampler.map(|mut s| {
        let at = lp.elapsed_ns(clock.now());
        if let Err(e) = s.sample(at) {
            lp.store_error.get_or_insert(e);
        }
        spikes.clear();
        sink.spikes(&mut spikes);
        s.note_spikes(&spikes);
        s.finish()
    });
    let (sampler, sampler_error) = match digest {
        Some(Ok(d)) => (Some(d), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    if let Some(e) = sampler_error {
        lp.store_error.get_or_insert(e);
    }
    end_actions(&mut lp, obs);
    Supervised {
        elapsed_ns: lp.elapsed_ns(clock.now()),
        signal: lp.signal,
        stops: lp.stops.stops,
        state: lp.state,
        end_detail: lp.end_detail,
        timebase,
        sampler,
        store_error: lp.store_error,
        warnings: lp.warnings,
    }
}

/// Acts on what the main thread's wait took of job control (see [`crate::stops`]): stops the
/// process for a SIGTSTP, records each stop and warns of it. `seen` is the counter value
/// before the wait, `now` after it. Returns a recorded stop's length in counter ticks.
fn job_control<H: Host, C: Clock + Copy>(
    host: &H,
    clock: C,
    lp: &mut Loop<'_>,
    event: Option<Signal>,
    seen: u64,
    now: u64,
    obs: &mut dyn Observer,
) -> Option<u64> {
    let (at, before) = (lp.elapsed_ns(now), lp.elapsed_ns(seen));
    let stop = match event {
        Some(Signal::TerminalStop) => {
            host.stop_process();
            // The process runs again.
            let to = lp.elapsed_ns(clock.now());
            Some(lp.stops.terminal_stop(at, to))
        }
        Some(Signal::Continued) => lp.stops.continued(at, before, WAKE_NS),
        Some(Signal::End(_)) => {
            lp.stops.waited(before, at);
            None
        }
        None => lp.stops.woke(at, before, WAKE_NS, || host.tracer()),
    }?
    .clone();
    let w = stop.warning();
    obs.warning(&w);
    lp.warnings.push(w);
    Some(lp.cal.before.ticks_for_ns(stop.length_ns()))
}

fn live_rows<H: Host>(
    threads: &Threads<'_, H>,
    progress: &[&crate::engine::Progress],
) -> Vec<LiveRow> {
    progress
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (events, missed, max_ns) = p.read();
            LiveRow {
                thread: i,
                cpu: threads.cpus[i],
                events,
                missed,
                max_ns,
            }
        })
        .collect()
}

/// Acts on the first delay above the threshold, and on every larger one after it when the run
/// continues.
fn threshold(
    th: &Threshold,
    now: u64,
    progress: &[&crate::engine::Progress],
    extras: &mut Extras,
    p: &Prepared<'_>,
    lp: &mut Loop<'_>,
    obs: &mut dyn Observer,
) {
    let worst = progress.iter().map(|p| p.read().2).max().unwrap_or(0);
    if worst <= th.above_ns.0 || worst <= lp.fired_ns {
        return;
    }
    lp.fired_ns = worst;
    let at = Nanos(lp.elapsed_ns(now));
    let what = format!(
        "a delay of {} above --stop-above {} at {at}",
        Nanos(worst),
        th.above_ns
    );
    for a in &th.actions {
        match a {
            ThresholdAction::Mark => {
                if let Some(t) = &extras.tracing {
                    t.mark(&format!("sandglass: {what}"));
                }
            }
            ThresholdAction::Shell(cmd) => match std::process::Command::new("sh")
                .args(["-c", cmd])
                .env("SANDGLASS_DELAY_NS", worst.to_string())
                .env("SANDGLASS_RUN_DIR", p.dir.path())
                .stdin(std::process::Stdio::null())
                .spawn()
            {
                Ok(c) => lp.actions.push(c),
                Err(e) => {
                    let w = Warning::new(
                        WarningKind::LoadFailed,
                        format!("--on-threshold shell:{cmd} could not start: {e}"),
                    );
                    obs.warning(&w);
                    lp.warnings.push(w);
                }
            },
            ThresholdAction::Continue => {}
        }
    }
    obs.note(&what);
    if !th.actions.contains(&ThresholdAction::Continue) {
        lp.stop(now, RunState::Interrupted, format!("stopped at {what}"));
    }
}

/// Threshold commands get a bounded time to finish; none is left behind.
fn end_actions(lp: &mut Loop<'_>, obs: &mut dyn Observer) {
    let deadline = std::time::Instant::now() + ACTION_GRACE;
    for mut c in std::mem::take(&mut lp.actions) {
        while matches!(c.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
            let w = Warning::new(
                WarningKind::LoadFailed,
                format!(
                    "an --on-threshold command was still running {} s after the threshold and was killed",
                    ACTION_GRACE.as_secs()
                ),
            );
            obs.warning(&w);
            lp.warnings.push(w);
        }
        let _ = c.wait();
    }
}
