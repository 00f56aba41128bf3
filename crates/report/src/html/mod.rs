//! `sandglass report --html`: one self-contained HTML file per run or study, with inline CSS
//! and SVG plots, that opens from disk on a laptop or a phone.
//!
//! What a page shows depends on what the run holds:
//!
//! * timer: key figures per CPU; the log-log histogram of lateness (Cota-Robles & Held,
//!   Figure 4); the exceedance curve with the expected worst case per hour, day and week
//!   marked; lateness over time; the interval between successive wakeups against time
//!   (Jones & Regehr, Figure 1); the mean time to buffer underrun against buffering;
//! * noise: key figures per CPU; the log-log histogram and exceedance of interruption
//!   durations; the noise timeline per CPU;
//! * hourglass: the threads; the execution timeline (Regehr, Figures 3 and 6) in a chosen
//!   window; dispatch latency of periodic jobs;
//! * study: its tables; per measure, the latency histograms, exceedance and MTTF curves of
//!   every load and setting side by side.
//!
//! Every page ends with the explanation of the largest delays (causes and trains), the
//! warnings, the system snapshot and the files with their checksums. Every file is read
//! through [`RunReader`], which checks it against the manifest first: a damaged run is an
//! error naming the file, never a half-drawn page.

pub mod figures;
pub mod page;
mod sections;
pub mod study;

use crate::export::{summary, ExportError};
use crate::svg::{Marker, Series, Style};
use figures::Named;
use page::{Page, Plot};
use sandglass::analysis::distribution::Distribution;
use sandglass::analysis::worst_case::{self, UsagePattern, WorstCaseConfig};
use sandglass::store::table::{tables, TableReader};
use sandglass::store::RunReader;
use sandglass::Nanos;
use sandglass::RunKind;
use std::collections::BTreeMap;

/// Choices of the page.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Hourglass: the window of the execution timeline, `(start, length)` from the run's
    /// start. By default the first 100 ms.
    pub window: Option<(Nanos, Nanos)>,
}

/// The default length of the execution timeline's window.
pub const DEFAULT_WINDOW: Nanos = Nanos(100_000_000);

/// The page of a run: timer, noise or hourglass.
/// The verdict `sandglass check` wrote beside a timer run's results, when it did (an
/// unreadable one is left out: the run's own figures still stand).
fn check_of(r: &RunReader) -> Option<sandglass::check::CheckReport> {
    let text = sandglass::bounded::read(
        &r.path().join("check.json"),
        sandglass::bounded::Links::Refuse,
        sandglass::bounded::RUN_FILE_BYTES,
        "a check verdict",
    )
    .ok()?;
    serde_json::from_slice(&text).ok()
}

pub fn run(r: &RunReader, o: &Options) -> Result<String, ExportError> {
    r.verify()?;
    match &r.manifest.kind {
        RunKind::Timer => timer(r),
        RunKind::Noise => noise(r),
        RunKind::Hourglass => hourglass(r, o),
        other => Err(crate::export::wrong_kind(
            r,
            format!("the HTML report covers timer, noise and hourglass runs and studies; this is a {other} run"),
        )),
    }
}

fn parse<T: serde::de::DeserializeOwned>(r: &RunReader) -> Result<T, ExportError> {
    serde_json::from_value(summary(r)?).map_err(|e| ExportError::Format {
        path: r.path().join("summary.json"),
        line: 1,
        message: format!("not a summary this sandglass reads ({e})"),
    })
}

fn time(ns: u64) -> String {
    Nanos(ns).to_string()
}

/// Points per CPU, named.
type Scatter = Vec<(String, Vec<(f64, f64)>)>;

/// Above this many wakeups the interval plot is drawn from the timeline's per-second extremes
/// instead of every wakeup (reading every sample of a long run takes seconds).
const DOTS_UP_TO: u64 = 2_000_000;

/// How the interval plot was drawn, for its caption.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dots {
    EveryWakeup,
    SecondExtremes,
}

/// Per CPU, the interval between successive wakeups against the wakeup's time, reduced to the
/// plot's cells; with whether the interval axis is logarithmic. Up to [`DOTS_UP_TO`] wakeups,
/// one dot per wakeup, streamed from the samples table (a missed release shares the wakeup of
/// the one before it); beyond, the shortest and the longest interval of each second, from the
/// timeline (runs whose timeline has them).
fn interarrival(
    r: &RunReader,
    s: &sandglass::timer::TimerResult,
) -> Result<(Scatter, bool, Dots), ExportError> {
    let lo = s
        .cpus
        .iter()
        .filter_map(|c| c.interval_ns.as_ref().map(|i| i.min))
        .min()
        .unwrap_or(1) as i64;
    let hi = s
        .cpus
        .iter()
        .filter_map(|c| c.interval_ns.as_ref().map(|i| i.max))
        .max()
        .unwrap_or(1) as i64;
    let end = s.run.elapsed_ns.max(s.run.duration_ns.0) as i64;
    let log = figures::interarrival_is_log(lo as f64, hi as f64);
    let mut grids: BTreeMap<i32, figures::InterarrivalGrid> = BTreeMap::new();
    let mut add = |cpu: i32, at: i64, d: i64| {
        grids
            .entry(cpu)
            .or_insert_with(|| figures::InterarrivalGrid::new(end, lo, hi))
            .add(at, d);
    };
    let wakeups: u64 = s.cpus.iter().map(|c| c.wakeups).sum();
    let timeline = TableReader::open(r, &tables::TIMER_TIMELINE).filter(|t| t.is_current());
    let dots = match timeline {
        Some(t) if wakeups > DOTS_UP_TO => {
            let columns = ["cpu", "second", "interval_min_ns", "interval_max_ns"];
            t.scan::<ExportError>(&columns, |b| {
                let (cpu, sec) = (b.i32s("cpu")?, b.i64s("second")?);
                let (min, max) = (b.i64s("interval_min_ns")?, b.i64s("interval_max_ns")?);
                for i in 0..b.len() {
                    let at = sec[i] * 1_000_000_000 + 500_000_000;
                    for d in [min[i], max[i]] {
                        if d >= 0 {
                            add(cpu[i], at, d);
                        }
                    }
                }
                Ok(())
            })?;
            Dots::SecondExtremes
        }
        _ => {
            if let Some(t) = TableReader::open(r, &tables::TIMER_SAMPLES) {
                let mut last: BTreeMap<i32, i64> = BTreeMap::new();
                t.scan::<ExportError>(&["cpu", "release_ns", "lateness_ns", "missed"], |b| {
                    let (cpu, rel) = (b.i32s("cpu")?, b.i64s("release_ns")?);
                    let (late, missed) = (b.i64s("lateness_ns")?, b.bools("missed")?);
                    for i in 0..b.len() {
                        if missed[i] {
                            continue;
                        }
                        let wake = rel[i] + late[i];
                        if let Some(prev) = last.insert(cpu[i], wake) {
                            add(cpu[i], wake, wake - prev);
                        }
                    }
                    Ok(())
                })?;
            }
            Dots::EveryWakeup
        }
    };
    Ok((
        grids
            .into_iter()
            .map(|(cpu, g)| (format!("CPU {cpu}"), g.points()))
            .collect(),
        log,
        dots,
    ))
}

/// Each CPU's whole-run distribution (three significant digits).
fn distributions(r: &RunReader) -> Result<Vec<Named>, ExportError> {
    let totals = sandglass::store::data::totals(r)?;
    Ok(totals
        .cpus
        .iter()
        .map(|(cpu, t)| Named::from_histogram(format!("CPU {cpu}"), &t.main))
        .collect())
}

/// The expected worst case per hour, day and week of round-the-clock use, as markers, for
/// the series whose daily value is largest; with the caption's sentence about them.
fn worst_case_markers(series: &[Named], rate_hz: f64) -> (Vec<Marker>, String) {
    let usage = UsagePattern {
        hours_per_day: 24.0,
        days_per_week: 7.0,
    };
    let mut best: Option<(i64, String, Vec<Marker>)> = None;
    // Periods the runs cannot support, with the longest run asked for.
    let mut unsupported: Vec<(&'static str, f64)> = Vec::new();
    for s in series {
        if s.dist.is_empty() {
            continue;
        }
        let Ok(w) = worst_case::analyze(&s.dist, &WorstCaseConfig::new(rate_hz, usage)) else {
            continue;
        };
        for h in &w.horizons {
            if let Some(d) = h.needs_run_s {
                match unsupported.iter_mut().find(|u| u.0 == h.period) {
                    Some(u) => u.1 = u.1.max(d),
                    None => unsupported.push((h.period, d)),
                }
            }
        }
        let markers: Vec<Marker> = w
            .horizons
            .iter()
            .filter_map(|h| {
                let v = h.worst_case_ns?;
                Some(Marker {
                    x: v as f64,
                    label: format!(
                        "{} {}{}",
                        h.period,
                        Nanos(v.max(0) as u64),
                        if h.extrapolated { " (model)" } else { "" }
                    ),
                })
            })
            .collect();
        let day = w
            .horizons
            .iter()
            .filter_map(|h| h.worst_case_ns)
            .max()
            .unwrap_or(i64::MIN);
        if best.as_ref().is_none_or(|b| day > b.0) {
            best = Some((day, s.name.clone(), markers));
        }
    }
    let left_out = if unsupported.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = unsupported
            .iter()
            .map(|(p, d)| {
                format!(
                    "per {p} needs a run of at least {}",
                    crate::analysis::seconds(*d)
                )
            })
            .collect();
        format!(
            " No worst case is drawn where the run is too short to support it (docs/analysis.md, \"Validity of predictions\"): {}.",
            list.join(", ")
        )
    };
    match best {
        Some((_, name, markers)) if !markers.is_empty() => {
            let text = format!(
                " Dashed lines: the expected worst case per hour, day and week of round-the-clock use for {name} (Cota-Robles & Held); \"(model)\" marks a value beyond the data, from the fitted tail.{left_out}"
            );
            (markers, text)
        }
        _ => (Vec::new(), left_out),
    }
}

fn timer(r: &RunReader) -> Result<String, ExportError> {
    let s: sandglass::timer::TimerResult = parse(r)?;
    let m = &r.manifest;
    let mut p = Page::new(
        RunKind::Timer,
        &format!("Timer wakeup latency: run {}", m.id),
        &format!(
            "{} timer every {}, {} mode, {} measured on {} CPU(s); {}",
            s.timer,
            s.interval_ns,
            s.mode,
            time(s.run.elapsed_ns),
            s.cpus.len(),
            s.run.state.name()
        ),
    );
    sections::header(&mut p, r);
    if let Some(c) = check_of(r) {
        sections::verdict(&mut p, &c);
    }
    p.section("Key figures");
    let key_row = |cpu: String,
                   policy: String,
                   releases: u64,
                   missed: u64,
                   l: Option<&sandglass::histo::Percentiles>,
                   per_wakeup: Option<f64>| {
        let q = |f: fn(&sandglass::histo::Percentiles) -> u64| {
            l.map(|l| time(f(l))).unwrap_or_else(|| "-".into())
        };
        vec![
            cpu,
            policy,
            crate::text::count(releases),
            crate::text::count(missed),
            q(|l| l.p50),
            q(|l| l.p99),
            q(|l| l.p99_9),
            q(|l| l.p99_99),
            q(|l| l.max.max(0) as u64),
            per_wakeup
                .map(|x| time(x.round() as u64))
                .unwrap_or_else(|| "-".into()),
        ]
    };
    let mut rows: Vec<Vec<String>> = s
        .cpus
        .iter()
        .map(|c| {
            key_row(
                c.cpu.to_string(),
                c.policy.clone().unwrap_or_else(|| "-".into()),
                c.count,
                c.missed_releases,
                c.lateness_ns.as_ref(),
                c.cpu_time_per_wakeup_ns,
            )
        })
        .collect();
    if s.cpus.len() > 1 {
        let worst =
            sandglass::histo::worst_cpu(s.cpus.iter().filter_map(|c| c.lateness_ns.as_ref()));
        rows.push(key_row(
            "worst CPU".into(),
            "-".into(),
            s.cpus.iter().map(|c| c.count).sum(),
            s.cpus.iter().map(|c| c.missed_releases).sum(),
            worst.as_ref(),
            s.cpus
                .iter()
                .filter_map(|c| c.cpu_time_per_wakeup_ns)
                .reduce(f64::max),
        ));
    }
    p.table(
        &[
            "CPU",
            "policy",
            "releases",
            "missed",
            "p50",
            "p99",
            "p99.9",
            "p99.99",
            "max",
            "CPU per wakeup",
        ],
        &rows,
        &[],
    );
    p.text("Lateness is measured from each release time, missed releases included with their true lateness (no coordinated omission). The worst CPU row gives each figure's largest over the CPUs (releases and missed releases summed), the figure study tables, runs and compare give for the run.");

    let series = distributions(r)?;
    let not_positive: u64 = series.iter().map(Named::not_positive).sum();
    p.section("Distributions");
    p.figure(
        "latency-histogram",
        &format!(
            "Lateness of every release, log-log, {} bins per decade, one outline per CPU.{}",
            figures::BINS_PER_DECADE,
            if not_positive > 0 {
                format!(" {not_positive} release(s) at zero or earlier cannot be placed on a log axis and are left out.")
            } else {
                String::new()
            }
        ),
        plot(figures::histogram(
            &series,
            1e3,
            "lateness (µs)",
            "releases per bin (count)",
        )),
    );
    let rate = if s.interval_ns.0 > 0 {
        1e9 / s.interval_ns.0 as f64
    } else {
        0.0
    };
    let (markers, marker_text) = worst_case_markers(&series, rate);
    // Markers far beyond the data would squeeze the curves into a corner: those past the
    // decade that holds the largest sample are named in the caption instead.
    let largest = series
        .iter()
        .filter_map(|s| s.dist.max())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let edge = 10f64.powf(largest.log10().ceil());
    let (shown, beyond): (Vec<Marker>, Vec<Marker>) =
        markers.into_iter().partition(|m| m.x <= edge);
    let beyond_text = if beyond.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = beyond.iter().map(|m| m.label.clone()).collect();
        format!(" Beyond the plotted range: {}.", list.join(", "))
    };
    p.figure(
        "exceedance",
        &format!("Probability that a release is later than x, per CPU.{marker_text}{beyond_text}"),
        plot(figures::exceedance(
            &series,
            1e3,
            "lateness x (µs)",
            "P(lateness > x) (per release)",
            shown,
        )),
    );

    p.section("Over time");
    // Per CPU: each second's largest and median lateness.
    type Seconds = Vec<(f64, f64)>;
    let mut per_cpu: BTreeMap<i32, (Seconds, Seconds)> = BTreeMap::new();
    if let Some(t) = TableReader::open(r, &tables::TIMER_TIMELINE) {
        // One row per CPU and second: a day is 86,400 rows per CPU, thinned when drawn.
        t.scan::<ExportError>(&["cpu", "second", "p50_ns", "max_ns"], |b| {
            let (cpu, sec) = (b.i32s("cpu")?, b.i64s("second")?);
            let (p50, max) = (b.i64s("p50_ns")?, b.i64s("max_ns")?);
            for i in 0..b.len() {
                let e = per_cpu.entry(cpu[i]).or_default();
                let t = sec[i] as f64 + 0.5;
                e.0.push((t, max[i] as f64));
                e.1.push((t, p50[i] as f64));
            }
            Ok(())
        })?;
    }
    let mut lines = Vec::new();
    for (i, (cpu, (max, p50))) in per_cpu.into_iter().enumerate() {
        lines.push(Series {
            name: format!("CPU {cpu} max"),
            style: Style::Line,
            points: max,
            colour: i,
        });
        lines.push(Series {
            name: format!("CPU {cpu} median"),
            style: Style::Dashed,
            points: p50,
            colour: i,
        });
    }
    p.figure(
        "lateness-over-time",
        "Largest (solid) and median (dashed) lateness in each second of the run, per CPU.",
        plot(figures::over_time(lines, "lateness (µs)")),
    );
    let (points, log, dots) = interarrival(r, &s)?;
    let what = match dots {
        Dots::EveryWakeup => "one dot per wakeup (dots closer than the drawing can separate are drawn once)".to_string(),
        Dots::SecondExtremes => format!("for this run of more than {} wakeups, the shortest and the longest interval of each second", crate::text::count(DOTS_UP_TO)),
    };
    p.figure(
        "interarrival",
        &format!(
            "The interval between successive wakeups against the time of the wakeup, {what}; the timer was set for {}.",
            s.interval_ns
        ),
        plot(figures::interarrival_chart(points, log)),
    );

    p.section("Buffering");
    let curves: Vec<(String, &Distribution, u32, Option<f64>)> = series
        .iter()
        .filter(|s| !s.dist.is_empty())
        .map(|s| {
            let observed = (rate > 0.0).then(|| s.dist.total() as f64 / rate);
            (
                format!("{}, double buffering", s.name),
                &s.dist,
                2,
                observed,
            )
        })
        .collect();
    p.figure(
        "mttf",
        "Mean time to buffer underrun against the buffer size, for a double-buffered stream woken like this timer with no computation per buffer: a buffer underruns when a wakeup is later than the other buffer lasts (Cota-Robles & Held, §5). Hollow dots are lower bounds where no release was that late. Times beyond ten times what the run measured are not drawn (docs/analysis.md, \"Validity of predictions\").",
        plot(figures::mttf_curves(&curves)),
    );

    sections::causes(&mut p, s.run.causes.as_ref());
    sections::warnings(&mut p, &s.run.warnings);
    sections::footer_sections(&mut p, r);
    Ok(p.finish(&sections::footer(r)))
}

fn plot(c: crate::svg::Chart) -> Plot {
    Plot::Chart(c)
}

fn noise(r: &RunReader) -> Result<String, ExportError> {
    let s: sandglass::noise::NoiseResult = parse(r)?;
    let m = &r.manifest;
    let mut p = Page::new(
        RunKind::Noise,
        &format!("OS noise: run {}", m.id),
        &format!(
            "a polling thread on each of {} CPU(s) for {}; gaps of {} or more count as interruptions; {}",
            s.cpus.len(),
            s.run.duration_ns,
            Nanos(s.threshold_ns),
            s.run.state.name()
        ),
    );
    sections::header(&mut p, r);
    p.section("Key figures");
    let mut rows: Vec<Vec<String>> = s
        .cpus
        .iter()
        .map(|c| {
            let q = |f: fn(&sandglass::histo::Percentiles) -> u64| {
                c.percentiles_ns
                    .as_ref()
                    .map(|l| time(f(l)))
                    .unwrap_or_else(|| "-".into())
            };
            vec![
                c.cpu.to_string(),
                c.policy.clone().unwrap_or_else(|| "-".into()),
                crate::text::percent(c.noise_share),
                crate::text::count(c.interruptions),
                format!("{:.0}", c.interruptions_per_s),
                q(|l| l.p50),
                q(|l| l.p99),
                time(c.max_ns),
            ]
        })
        .collect();
    if s.cpus.len() > 1 {
        // Each figure's largest over the CPUs, as runs and compare give the run's figures.
        let worst =
            sandglass::histo::worst_cpu(s.cpus.iter().filter_map(|c| c.percentiles_ns.as_ref()));
        let q = |f: fn(&sandglass::histo::Percentiles) -> u64| {
            worst
                .as_ref()
                .map(|l| time(f(l)))
                .unwrap_or_else(|| "-".into())
        };
        rows.push(vec![
            "worst CPU".into(),
            "-".into(),
            crate::text::percent(s.cpus.iter().map(|c| c.noise_share).fold(0.0, f64::max)),
            crate::text::count(s.cpus.iter().map(|c| c.interruptions).sum()),
            format!(
                "{:.0}",
                s.cpus
                    .iter()
                    .map(|c| c.interruptions_per_s)
                    .fold(0.0, f64::max)
            ),
            q(|l| l.p50),
            q(|l| l.p99),
            time(s.cpus.iter().map(|c| c.max_ns).max().unwrap_or(0)),
        ]);
    }
    p.table(
        &[
            "CPU",
            "policy",
            "noise",
            "interruptions",
            "per second",
            "p50",
            "p99",
            "max",
        ],
        &rows,
        &[],
    );
    let series = distributions(r)?;
    let dropped: u64 = s.cpus.iter().map(|c| c.list_dropped).sum();
    let dropped_text = if dropped > 0 {
        format!(" {dropped} interruption(s) did not reach the store and are in the totals only.")
    } else {
        String::new()
    };
    p.section("Distributions");
    p.figure(
        "noise-histogram",
        &format!(
            "Duration of every interruption, log-log, {} bins per decade, one outline per CPU.{dropped_text}",
            figures::BINS_PER_DECADE
        ),
        plot(figures::histogram(
            &series,
            1e3,
            "interruption duration (µs)",
            "interruptions per bin (count)",
        )),
    );
    p.figure(
        "exceedance",
        "Probability that an interruption lasts longer than x, per CPU.",
        plot(figures::exceedance(
            &series,
            1e3,
            "interruption duration x (µs)",
            "P(duration > x) (per interruption)",
            Vec::new(),
        )),
    );
    p.section("Over time");
    let span = s
        .cpus
        .iter()
        .map(|c| c.runtime_ns)
        .max()
        .unwrap_or(0)
        .max(s.run.duration_ns.0) as i64;
    let labels: Vec<String> = s.cpus.iter().map(|c| format!("CPU {}", c.cpu)).collect();
    let row_of: BTreeMap<i32, usize> = s
        .cpus
        .iter()
        .enumerate()
        .map(|(i, c)| (c.cpu as i32, i))
        .collect();
    let mut slices = figures::NoiseSlices::new(labels, span, 400);
    if let Some(t) = TableReader::open(r, &tables::NOISE_INTERRUPTIONS) {
        t.scan::<ExportError>(&["cpu", "start_ns", "duration_ns"], |b| {
            let (cpu, start, dur) = (b.i32s("cpu")?, b.i64s("start_ns")?, b.i64s("duration_ns")?);
            for i in 0..b.len() {
                if let Some(&row) = row_of.get(&cpu[i]) {
                    slices.add(row, start[i], dur[i]);
                }
            }
            Ok(())
        })?;
    }
    let (rows, top) = slices.finish();
    p.figure(
        "noise-timeline",
        &format!(
            "Where the interruptions fell: each CPU's row is cut into 400 slices of {}, shaded by the share of the slice interruptions took; the darkest slice lost {}.",
            Nanos((span / 400).max(0) as u64),
            crate::text::percent(top)
        ),
        Plot::Rows(rows),
    );
    sections::causes(&mut p, s.run.causes.as_ref());
    sections::warnings(&mut p, &s.run.warnings);
    sections::footer_sections(&mut p, r);
    Ok(p.finish(&sections::footer(r)))
}

fn hourglass(r: &RunReader, o: &Options) -> Result<String, ExportError> {
    let s: sandglass::hourglass::result::HourglassResult = parse(r)?;
    let m = &r.manifest;
    let mut p = Page::new(
        RunKind::Hourglass,
        &format!("Hourglass: run {}", m.id),
        &format!(
            "{} thread(s) for {}; gaps of {} or more count as preemptions; {}",
            s.threads.len(),
            s.run.duration_ns,
            Nanos(s.gap.threshold_ns),
            s.run.state.name()
        ),
    );
    sections::header(&mut p, r);
    p.section("Threads");
    let rows: Vec<Vec<String>> = s
        .threads
        .iter()
        .map(|t| {
            vec![
                t.thread.to_string(),
                t.workload.to_string(),
                t.priority.clone(),
                t.cpus.clone(),
                crate::text::percent(if t.active_ns > 0 {
                    t.received_ns as f64 / t.active_ns as f64
                } else {
                    0.0
                }),
                crate::text::count(t.preemptions),
                match (t.hits, t.misses) {
                    (Some(h), Some(m)) => format!("{h} / {m}"),
                    _ => "-".into(),
                },
                crate::hourglass::worst_response(t),
            ]
        })
        .collect();
    p.table(
        &[
            "thread",
            "workload",
            "priority",
            "CPUs",
            "CPU share",
            "preemptions",
            "hits / misses",
            "worst response",
        ],
        &rows,
        &[1],
    );
    let elapsed = s.run.elapsed_ns.max(s.run.duration_ns.0) as i64;
    let (from, len) = match o.window {
        Some((a, l)) => (a.0 as i64, l.0 as i64),
        None => (0, DEFAULT_WINDOW.0 as i64),
    };
    if from >= elapsed && elapsed > 0 {
        return Err(ExportError::Kind {
            run: r.path().to_path_buf(),
            message: format!(
                "--window starts at {} but the run lasted {}: choose a start inside the run",
                Nanos(from as u64),
                Nanos(elapsed as u64)
            ),
        });
    }
    let to = (from + len).min(elapsed.max(from + 1));
    // The trace is in order of start: only the window is read.
    let mut per_thread: BTreeMap<u64, Vec<(i64, i64)>> = BTreeMap::new();
    if let Some(t) = TableReader::open(r, &tables::TRACE) {
        t.scan_while::<ExportError>(&["thread", "start_ns", "end_ns"], |b| {
            let (th, a, e) = (b.i32s("thread")?, b.i64s("start_ns")?, b.i64s("end_ns")?);
            for i in 0..b.len() {
                if a[i] > to {
                    return Ok(false);
                }
                if e[i] >= from {
                    per_thread
                        .entry(th[i] as u64)
                        .or_default()
                        .push((a[i], e[i]));
                }
            }
            Ok(true)
        })?;
    }
    p.section("Execution");
    let labels: BTreeMap<u64, String> = s
        .threads
        .iter()
        .map(|t| {
            (
                t.thread as u64,
                format!("thread {} ({})", t.thread, t.priority),
            )
        })
        .collect();
    let rows: Vec<(String, Vec<(i64, i64)>)> = s
        .threads
        .iter()
        .map(|t| {
            let id = t.thread as u64;
            (
                labels.get(&id).cloned().unwrap_or_default(),
                per_thread.remove(&id).unwrap_or_default(),
            )
        })
        .collect();
    p.figure(
        "execution-timeline",
        &format!(
            "When each thread held a CPU from {} to {} of the run: one rectangle per execution interval (Regehr, Figures 3 and 6). Choose another window with --window START:LENGTH.",
            Nanos(from as u64),
            Nanos(to as u64)
        ),
        Plot::Rows(figures::timeline(rows, from, to, "thread")),
    );
    if let Some(t) = TableReader::open(r, &tables::JOBS) {
        let mut lat: BTreeMap<i32, sandglass::histo::Histogram<u64>> = BTreeMap::new();
        t.scan::<ExportError>(&["thread", "release_ns", "first_run_ns"], |b| {
            let (th, rel, first) = (
                b.i32s("thread")?,
                b.i64s("release_ns")?,
                b.i64s("first_run_ns")?,
            );
            for i in 0..b.len() {
                lat.entry(th[i])
                    .or_insert_with(sandglass::engine::record::new_histogram)
                    .saturating_record((first[i] - rel[i]).max(0) as u64);
            }
            Ok(())
        })?;
        let series: Vec<Named> = lat
            .iter()
            .map(|(th, h)| Named::from_histogram(format!("thread {th}"), h))
            .collect();
        p.figure(
            "latency-histogram",
            "Dispatch latency of periodic jobs (first run minus release), log-log, one outline per thread.",
            plot(figures::histogram(
                &series,
                1e3,
                "dispatch latency (µs)",
                "jobs per bin (count)",
            )),
        );
    }
    sections::causes(&mut p, s.run.causes.as_ref());
    sections::warnings(&mut p, &s.run.warnings);
    sections::footer_sections(&mut p, r);
    Ok(p.finish(&sections::footer(r)))
}
