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

use crate::export::{scan, summary, ExportError};
use crate::svg::{Marker, Series, Style};
use figures::Named;
use page::{Page, Plot};
use sandglass::analysis::distribution::Distribution;
use sandglass::analysis::worst_case::{self, UsagePattern, WorstCaseConfig};
use sandglass::store::RunReader;
use sandglass::Nanos;
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
pub fn run(r: &RunReader, o: &Options) -> Result<String, ExportError> {
    r.verify()?;
    match r.manifest.kind.as_str() {
        "timer" => timer(r),
        "noise" => noise(r),
        "hourglass" => hourglass(r, o),
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

/// Per CPU, from `samples.csv`: the lateness of every release, and `(wakeup, interval)` for
/// every wakeup after the first (a missed release shares the wakeup of the one before it).
pub(crate) struct TimerSamples {
    pub lateness: BTreeMap<u64, Vec<i64>>,
    pub intervals: BTreeMap<u64, Vec<(i64, i64)>>,
}

/// The error for a run file with an empty field where every row has a value.
fn empty_field(r: &RunReader, file: &str) -> ExportError {
    ExportError::Format {
        path: r.path().join(file),
        line: 0,
        message: "a row has an empty field".into(),
    }
}

pub(crate) fn timer_samples(r: &RunReader) -> Result<TimerSamples, ExportError> {
    let mut out = TimerSamples {
        lateness: BTreeMap::new(),
        intervals: BTreeMap::new(),
    };
    let mut last: BTreeMap<u64, i64> = BTreeMap::new();
    let mut missing = false;
    scan(
        r,
        "samples.csv",
        ["cpu", "release_ns", "lateness_ns", "missed"],
        |[cpu, release, late, missed]| {
            let (Some(cpu), Some(release), Some(late), Some(missed)) = (cpu, release, late, missed)
            else {
                missing = true;
                return;
            };
            let cpu = cpu as u64;
            out.lateness.entry(cpu).or_default().push(late);
            if missed == 0 {
                let wake = release + late;
                if let Some(prev) = last.insert(cpu, wake) {
                    out.intervals
                        .entry(cpu)
                        .or_default()
                        .push((wake, wake - prev));
                }
            }
        },
    )?;
    if missing {
        return Err(empty_field(r, "samples.csv"));
    }
    Ok(out)
}

/// The expected worst case per hour, day and week of round-the-clock use, as markers, for
/// the series whose daily value is largest; with the caption's sentence about them.
fn worst_case_markers(series: &[Named], rate_hz: f64) -> (Vec<Marker>, String) {
    let usage = UsagePattern {
        hours_per_day: 24.0,
        days_per_week: 7.0,
    };
    let mut best: Option<(i64, String, Vec<Marker>)> = None;
    for s in series {
        if s.values.is_empty() {
            continue;
        }
        let d = Distribution::from_samples(&s.values);
        let Ok(w) = worst_case::analyze(&d, &WorstCaseConfig::new(rate_hz, usage)) else {
            continue;
        };
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
    match best {
        Some((_, name, markers)) if !markers.is_empty() => {
            let text = format!(
                " Dashed lines: the expected worst case per hour, day and week of round-the-clock use for {name} (Cota-Robles & Held); \"(model)\" marks a value beyond the data, from the fitted tail."
            );
            (markers, text)
        }
        _ => (Vec::new(), String::new()),
    }
}

fn timer(r: &RunReader) -> Result<String, ExportError> {
    let s: sandglass::timer::TimerResult = parse(r)?;
    let data = timer_samples(r)?;
    let m = &r.manifest;
    let mut p = Page::new(
        "timer",
        &format!("Timer wakeup latency: run {}", m.id),
        &format!(
            "{} timer every {}, {} mode, {} measured on {} CPU(s); {}",
            s.timer,
            s.interval_ns,
            s.mode,
            time(s.elapsed_ns),
            s.cpus.len(),
            s.state.name()
        ),
    );
    sections::header(&mut p, r);
    p.section("Key figures");
    let rows: Vec<Vec<String>> = s
        .cpus
        .iter()
        .map(|c| {
            let l = c.lateness_ns.as_ref();
            let q = |f: fn(&sandglass::histo::Percentiles) -> u64| {
                l.map(|l| time(f(l))).unwrap_or_else(|| "-".into())
            };
            vec![
                c.cpu.to_string(),
                c.policy.clone().unwrap_or_else(|| "-".into()),
                crate::text::count(c.count),
                crate::text::count(c.missed_releases),
                q(|l| l.p50),
                q(|l| l.p99),
                q(|l| l.p99_9),
                q(|l| l.p99_99),
                l.map(|l| time(l.max.max(0) as u64))
                    .unwrap_or_else(|| "-".into()),
                c.cpu_time_per_wakeup_ns
                    .map(|x| time(x.round() as u64))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
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
    p.text("Lateness is measured from each release time, missed releases included with their true lateness (no coordinated omission).");

    let series: Vec<Named> = data
        .lateness
        .iter()
        .map(|(cpu, v)| Named {
            name: format!("CPU {cpu}"),
            values: v.clone(),
        })
        .collect();
    let not_positive: usize = series
        .iter()
        .map(|s| s.values.iter().filter(|&&v| v <= 0).count())
        .sum();
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
        .flat_map(|s| s.values.iter().copied())
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
    let mut per_cpu: BTreeMap<i64, (Seconds, Seconds)> = BTreeMap::new();
    scan(
        r,
        "timeline.csv",
        ["cpu", "second", "p50_ns", "max_ns"],
        |[cpu, sec, p50, max]| {
            let (Some(cpu), Some(sec)) = (cpu, sec) else {
                return;
            };
            let e = per_cpu.entry(cpu).or_default();
            let t = sec as f64 + 0.5;
            // A second without a release has no figures.
            if let Some(m) = max {
                e.0.push((t, m as f64));
            }
            if let Some(m) = p50 {
                e.1.push((t, m as f64));
            }
        },
    )?;
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
    p.figure(
        "interarrival",
        &format!(
            "The interval between successive wakeups against the time of the wakeup, one dot per wakeup (dots closer than the drawing can separate are drawn once); the timer was set for {}.",
            s.interval_ns
        ),
        plot(figures::interarrival(
            data.intervals
                .iter()
                .map(|(cpu, v)| (format!("CPU {cpu}"), v.clone()))
                .collect(),
        )),
    );

    p.section("Buffering");
    let dists: Vec<(String, Distribution)> = series
        .iter()
        .filter(|s| !s.values.is_empty())
        .map(|s| (s.name.clone(), Distribution::from_samples(&s.values)))
        .collect();
    let curves: Vec<(String, &Distribution, u32)> = dists
        .iter()
        .map(|(n, d)| (format!("{n}, double buffering"), d, 2))
        .collect();
    p.figure(
        "mttf",
        "Mean time to buffer underrun against the buffer size, for a double-buffered stream woken like this timer with no computation per buffer: a buffer underruns when a wakeup is later than the other buffer lasts (Cota-Robles & Held, §5). Hollow dots are lower bounds where no release was that late.",
        plot(figures::mttf_curves(&curves)),
    );

    sections::causes(&mut p, s.causes.as_ref());
    sections::warnings(&mut p, &s.warnings);
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
        "noise",
        &format!("OS noise: run {}", m.id),
        &format!(
            "a polling thread on each of {} CPU(s) for {}; gaps of {} or more count as interruptions; {}",
            s.cpus.len(),
            s.duration_ns,
            s.threshold_ns,
            s.state.name()
        ),
    );
    sections::header(&mut p, r);
    p.section("Key figures");
    let rows: Vec<Vec<String>> = s
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
    let mut per_cpu: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    let mut missing = false;
    scan(
        r,
        "interruptions.csv",
        ["cpu", "start_ns", "duration_ns"],
        |[cpu, start, dur]| match (cpu, start, dur) {
            (Some(cpu), Some(start), Some(dur)) => {
                per_cpu.entry(cpu).or_default().push((start, dur))
            }
            _ => missing = true,
        },
    )?;
    if missing {
        return Err(empty_field(r, "interruptions.csv"));
    }
    let series: Vec<Named> = per_cpu
        .iter()
        .map(|(cpu, v)| Named {
            name: format!("CPU {cpu}"),
            values: v.iter().map(|x| x.1).collect(),
        })
        .collect();
    let dropped: u64 = s.cpus.iter().map(|c| c.list_dropped).sum();
    let dropped_text = if dropped > 0 {
        format!(" {dropped} interruption(s) did not fit the list and are in the totals only.")
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
        .max(s.duration_ns.0) as i64;
    let (rows, top) = figures::noise_rows(
        per_cpu
            .into_iter()
            .map(|(cpu, v)| (format!("CPU {cpu}"), v))
            .collect(),
        span,
        400,
    );
    p.figure(
        "noise-timeline",
        &format!(
            "Where the interruptions fell: each CPU's row is cut into 400 slices of {}, shaded by the share of the slice interruptions took; the darkest slice lost {}.",
            Nanos((span / 400).max(0) as u64),
            crate::text::percent(top)
        ),
        Plot::Rows(rows),
    );
    sections::causes(&mut p, s.causes.as_ref());
    sections::warnings(&mut p, &s.warnings);
    sections::footer_sections(&mut p, r);
    Ok(p.finish(&sections::footer(r)))
}

fn hourglass(r: &RunReader, o: &Options) -> Result<String, ExportError> {
    let s: sandglass::hourglass::result::HourglassResult = parse(r)?;
    let m = &r.manifest;
    let mut p = Page::new(
        "hourglass",
        &format!("Hourglass: run {}", m.id),
        &format!(
            "{} thread(s) for {}; gaps of {} or more count as preemptions; {}",
            s.threads.len(),
            s.duration_ns,
            Nanos(s.gap.threshold_ns),
            s.state.name()
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
                t.response
                    .as_ref()
                    .map(|x| time(x.max_ns.max(0) as u64))
                    .unwrap_or_else(|| "-".into()),
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
    let mut per_thread: BTreeMap<u64, Vec<(i64, i64)>> = BTreeMap::new();
    let mut missing = false;
    scan(
        r,
        "trace.csv",
        ["thread", "start_ns", "end_ns"],
        |[th, a, b]| match (th, a, b) {
            (Some(th), Some(a), Some(b)) => per_thread.entry(th as u64).or_default().push((a, b)),
            _ => missing = true,
        },
    )?;
    if missing {
        return Err(empty_field(r, "trace.csv"));
    }
    let elapsed = s.elapsed_ns.max(s.duration_ns.0) as i64;
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
    if r.has("jobs.csv") {
        let mut lat: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        scan(
            r,
            "jobs.csv",
            ["thread", "release_ns", "first_run_ns"],
            |[th, rel, first]| {
                // A job that never ran has no first run.
                if let (Some(th), Some(rel), Some(first)) = (th, rel, first) {
                    lat.entry(th).or_default().push(first - rel);
                }
            },
        )?;
        let series: Vec<Named> = lat
            .into_iter()
            .map(|(th, v)| Named {
                name: format!("thread {th}"),
                values: v,
            })
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
    sections::causes(&mut p, s.causes.as_ref());
    sections::warnings(&mut p, &s.warnings);
    sections::footer_sections(&mut p, r);
    Ok(p.finish(&sections::footer(r)))
}
