//! The report's plots, built from a run's distributions (value counts, such as a whole-run HDR
//! histogram) and from bounded streams of its points, so that each can be checked on data with
//! a known answer and none holds a run's samples.
//!
//! Times arrive in nanoseconds and are drawn in the unit their axis title names.

use crate::svg::{thin_scatter, Axis, Chart, Marker, Row, Rows, Scale, Series, Style};
use sandglass::analysis::distribution::Distribution;
use sandglass::analysis::mttf::{self, Exceedance};
use sandglass::Nanos;

/// Histogram bins per decade on the log-log histograms.
pub const BINS_PER_DECADE: u32 = 10;
/// Points kept per series where a plot thins its data: about one per horizontal unit.
const COLUMNS: usize = 600;
const ROWS: usize = 260;

/// A named distribution of values in nanoseconds, such as one CPU's lateness.
pub struct Named {
    pub name: String,
    pub dist: Distribution,
}

impl Named {
    /// The distribution of `values`.
    pub fn from_values(name: impl Into<String>, values: &[i64]) -> Named {
        Named {
            name: name.into(),
            dist: Distribution::from_samples(values),
        }
    }

    /// The distribution an HDR histogram holds (three significant digits).
    pub fn from_histogram(name: impl Into<String>, h: &sandglass::histo::Histogram<u64>) -> Named {
        Named {
            name: name.into(),
            dist: Distribution::from_histogram(h),
        }
    }

    /// Values at zero or below (not drawn on a log axis).
    pub fn not_positive(&self) -> u64 {
        self.dist.total() - self.dist.count_above(0)
    }
}

/// The log-spaced histogram of the positive values: `(lower edge, count)` in the values'
/// units, [`BINS_PER_DECADE`] bins per decade, empty bins included between the first and the
/// last occupied one, and the upper edge of the last bin with a count of zero.
pub fn log_bins(d: &Distribution) -> Vec<(f64, u64)> {
    let per = BINS_PER_DECADE as f64;
    let index = |v: i64| ((v as f64).log10() * per + 1e-9).floor() as i64;
    let positive: Vec<(i64, u64)> = d.bins().iter().copied().filter(|&(v, _)| v > 0).collect();
    let (Some(&(lo, _)), Some(&(hi, _))) = (positive.first(), positive.last()) else {
        return Vec::new();
    };
    let (a, b) = (index(lo), index(hi));
    let mut counts = vec![0u64; (b - a + 1) as usize];
    for (v, c) in positive {
        counts[(index(v) - a) as usize] += c;
    }
    let edge = |k: i64| 10f64.powf(k as f64 / per);
    let mut out: Vec<(f64, u64)> = counts
        .iter()
        .enumerate()
        .map(|(i, &c)| (edge(a + i as i64), c))
        .collect();
    out.push((edge(b + 1), 0));
    out
}

/// A log-log histogram with one outline per series; `scale` divides the values (1000 for µs).
pub fn histogram(series: &[Named], scale: f64, x_title: &str, y_title: &str) -> Chart {
    let mut c = Chart::new(
        Axis::log(x_title),
        Axis::log(y_title).with_range(0.5, 1.0),
        format!("histogram of {x_title}, log-log"),
    );
    let mut top = 1.0f64;
    for (i, s) in series.iter().enumerate() {
        let bins = log_bins(&s.dist);
        let Some(first) = bins.first() else { continue };
        let mut points = vec![(first.0 / scale, 0.0)];
        for &(edge, count) in &bins {
            points.push((edge / scale, count as f64));
            top = top.max(count as f64);
        }
        c.series.push(Series {
            name: s.name.clone(),
            style: Style::Step,
            points,
            colour: i,
        });
    }
    // Counts from 0.5, so that a bin of one is above the axis, to the next power of ten.
    c.y.range = Some((0.5, 10f64.powf(top.log10().ceil().max(1.0))));
    c
}

/// P(X > x) at each distinct value x of `d`, for the values above zero: the exceedance
/// (complementary cumulative) curve, down to the largest value's 1/n.
pub fn exceedance_points(d: &Distribution) -> Vec<(f64, f64)> {
    let n = d.total() as f64;
    let mut above = d.total();
    let mut out = Vec::with_capacity(d.bins().len());
    for &(x, c) in d.bins() {
        // Samples strictly above x.
        above -= c;
        if x > 0 {
            out.push((x as f64, above as f64 / n));
        }
    }
    out
}

/// The exceedance curves of the series on log-log axes, with `markers` (in the values' units)
/// such as the expected worst case per hour.
pub fn exceedance(
    series: &[Named],
    scale: f64,
    x_title: &str,
    y_title: &str,
    markers: Vec<Marker>,
) -> Chart {
    let mut c = Chart::new(
        Axis::log(x_title),
        Axis::log(y_title),
        format!("exceedance of {x_title}, log-log"),
    );
    let mut least = 1.0f64;
    for (i, s) in series.iter().enumerate() {
        if s.dist.is_empty() {
            continue;
        }
        let mut pts: Vec<(f64, f64)> = exceedance_points(&s.dist)
            .into_iter()
            .map(|(x, p)| (x / scale, p))
            .collect();
        least = least.min(1.0 / s.dist.total() as f64);
        // The curve ends at the maximum, where nothing exceeds: drawn at the axis floor.
        pts = thin_scatter(&pts, Scale::Log, Scale::Log, COLUMNS, ROWS);
        c.series.push(Series {
            name: s.name.clone(),
            style: Style::Step,
            points: pts,
            colour: i,
        });
    }
    c.y.range = Some((10f64.powf(least.log10().floor()), 1.0));
    c.markers = markers
        .into_iter()
        .map(|m| Marker {
            x: m.x / scale,
            label: m.label,
        })
        .collect();
    c
}

/// One line per series over time: points `(seconds, value in ns)`, drawn on a log y axis in
/// µs, each thinned to the largest value per drawn column.
pub fn over_time(lines: Vec<Series>, y_title: &str) -> Chart {
    let mut c = Chart::new(
        Axis::linear("time since the start (s)"),
        Axis::log(y_title),
        format!("{y_title} over time"),
    );
    for mut s in lines {
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(t, v)| (t, v / 1e3)).collect();
        s.points = crate::svg::thin_line(&pts, COLUMNS);
        c.series.push(s);
    }
    c
}

/// Whether the interarrival plot's y axis is logarithmic: when the intervals span more than a
/// factor of 20 (`lo` and `hi` in ns).
pub fn interarrival_is_log(lo: f64, hi: f64) -> bool {
    lo > 0.0 && lo.is_finite() && hi / lo > 20.0
}

/// A stream of `(time, interval)` points in ns reduced, as it arrives, to one point per cell
/// of the interarrival plot: the time axis spans `[0, end_ns]`, the interval axis `[lo_ns,
/// hi_ns]` (logarithmic per [`interarrival_is_log`]). Memory is bounded by the plot's cells.
pub struct InterarrivalGrid {
    grid: crate::svg::Grid,
}

impl InterarrivalGrid {
    pub fn new(end_ns: i64, lo_ns: i64, hi_ns: i64) -> InterarrivalGrid {
        let log = interarrival_is_log(lo_ns as f64, hi_ns as f64);
        let y = if log { Scale::Log } else { Scale::Linear };
        InterarrivalGrid {
            grid: crate::svg::Grid::new(
                (0.0, end_ns.max(1) as f64 / 1e9),
                (lo_ns.max(1) as f64 / 1e3, hi_ns.max(1) as f64 / 1e3),
                Scale::Linear,
                y,
                COLUMNS,
                ROWS,
            ),
        }
    }

    /// One wakeup at `t_ns` whose interval since the previous one was `d_ns`.
    pub fn add(&mut self, t_ns: i64, d_ns: i64) {
        self.grid.add((t_ns as f64 / 1e9, d_ns as f64 / 1e3));
    }

    /// The points kept, in the plot's units (s, µs).
    pub fn points(&self) -> Vec<(f64, f64)> {
        self.grid.points()
    }
}

/// The interval between successive wakeups against the time of the wakeup (Jones & Regehr,
/// Figure 1), one colour per series: `(time in ns, interval in ns)`. The y axis is
/// logarithmic when the intervals span more than a factor of 20.
pub fn interarrival(series: Vec<(String, Vec<(i64, i64)>)>) -> Chart {
    let mut lo = f64::INFINITY;
    let mut hi: f64 = 0.0;
    for (_, pts) in &series {
        for &(_, d) in pts {
            if d > 0 {
                lo = lo.min(d as f64);
                hi = hi.max(d as f64);
            }
        }
    }
    let log = interarrival_is_log(lo, hi);
    let y = if log {
        Axis::log("interval since the previous wakeup (µs)")
    } else {
        Axis::linear("interval since the previous wakeup (µs)")
    };
    let mut c = Chart::new(
        Axis::linear("time since the start (s)"),
        y,
        "interval between successive wakeups over time",
    );
    for (i, (name, pts)) in series.into_iter().enumerate() {
        let pts: Vec<(f64, f64)> = pts
            .into_iter()
            .map(|(t, d)| (t as f64 / 1e9, d as f64 / 1e3))
            .collect();
        let yscale = if log { Scale::Log } else { Scale::Linear };
        c.series.push(Series {
            name,
            style: Style::Points,
            points: thin_scatter(&pts, Scale::Linear, yscale, COLUMNS, ROWS),
            colour: i,
        });
    }
    c
}

/// The interarrival chart of points already reduced by [`InterarrivalGrid`] (in s and µs);
/// `log` as [`interarrival_is_log`] decided for the grids.
pub fn interarrival_chart(series: Vec<(String, Vec<(f64, f64)>)>, log: bool) -> Chart {
    let y = if log {
        Axis::log("interval since the previous wakeup (µs)")
    } else {
        Axis::linear("interval since the previous wakeup (µs)")
    };
    let mut c = Chart::new(
        Axis::linear("time since the start (s)"),
        y,
        "interval between successive wakeups over time",
    );
    for (i, (name, points)) in series.into_iter().enumerate() {
        c.series.push(Series {
            name,
            style: Style::Points,
            points,
            colour: i,
        });
    }
    c
}

/// The noise timeline built as interruptions stream: a fixed number of slices per CPU.
pub struct NoiseSlices {
    width: f64,
    rows: Vec<(String, Vec<f64>)>,
}

impl NoiseSlices {
    /// `columns` slices over `span_ns`, for the rows `labels`.
    pub fn new(labels: Vec<String>, span_ns: i64, columns: usize) -> NoiseSlices {
        let columns = columns.max(1);
        NoiseSlices {
            width: span_ns.max(1) as f64 / columns as f64,
            rows: labels
                .into_iter()
                .map(|l| (l, vec![0.0; columns]))
                .collect(),
        }
    }

    /// Spreads an interruption of row `row` over the slices it covers.
    pub fn add(&mut self, row: usize, start: i64, dur: i64) {
        let Some((_, s)) = self.rows.get_mut(row) else {
            return;
        };
        let width = self.width;
        let (a, b) = (start.max(0) as f64, (start + dur.max(0)).max(0) as f64);
        let last = s.len() - 1;
        let k0 = ((a / width) as usize).min(last);
        let k1 = ((b / width) as usize).min(last);
        for (k, slot) in s.iter_mut().enumerate().take(k1 + 1).skip(k0) {
            let lo = if k == k0 { a } else { k as f64 * width };
            let hi = if k == k1 { b } else { (k + 1) as f64 * width };
            *slot += (hi - lo).max(0.0);
        }
    }

    /// The chart and the largest share of a slice.
    pub fn finish(self) -> (Rows, f64) {
        shaded_rows(self.rows, self.width)
    }
}

/// Buffer sizes of the MTTF curves: 1, 2 and 5 times powers of ten from 100 µs to 1 s.
pub fn buffer_sizes() -> Vec<Nanos> {
    let mut out = Vec::new();
    let mut p = 100_000u64;
    while p <= 1_000_000_000 {
        for m in [1, 2, 5] {
            if m * p <= 1_000_000_000 {
                out.push(Nanos(m * p));
            }
        }
        p *= 10;
    }
    out
}

/// The mean time to buffer underrun against the buffer size (Cota-Robles & Held, §5 and
/// Figures 6-7 of Dannenberg et al.) for each `(name, distribution, buffers, observed_s)`, with
/// no computation per buffer. Where no sample exceeded the slack only a lower bound is known;
/// those points are drawn hollow as their own series. A point more than ten times the time its
/// samples took (`observed_s`, when known) is left out (docs/analysis.md, "Validity of
/// predictions").
pub fn mttf_curves(curves: &[(String, &Distribution, u32, Option<f64>)]) -> Chart {
    let mut c = Chart::new(
        Axis::log("buffer size t (ms)"),
        Axis::log("mean time to underrun (s)"),
        "mean time to buffer underrun against buffering",
    );
    let sizes = buffer_sizes();
    for (i, (name, d, n, observed_s)) in curves.iter().enumerate() {
        let Ok(mut results) = mttf::grid(&sizes, &[*n], Nanos::ZERO, &Exceedance::Measured(d))
        else {
            continue;
        };
        if let Some(o) = observed_s {
            for r in &mut results {
                mttf::within_run(r, *o, sandglass::analysis::worst_case::MAX_HORIZON_RATIO);
            }
        }
        let (mut known, mut bounds) = (Vec::new(), Vec::new());
        for r in &results {
            let t = r.buffer_ns.0 as f64 / 1e6;
            match (r.mttf_s, r.mttf_lower_bound_s) {
                (Some(m), _) => known.push((t, m)),
                (None, Some(b)) => bounds.push((t, b)),
                _ => {}
            }
        }
        c.series.push(Series {
            name: name.clone(),
            style: Style::Line,
            points: known,
            colour: i,
        });
        if !bounds.is_empty() {
            c.series.push(Series {
                name: format!("{name}: at least (no sample exceeded the slack)"),
                style: Style::Hollow,
                points: bounds,
                colour: i,
            });
        }
    }
    c
}

/// A row per thread or CPU with a rectangle per interval in `[from, to]` (ns), drawn in ms
/// from `from`.
pub fn timeline(rows: Vec<(String, Vec<(i64, i64)>)>, from: i64, to: i64, y_title: &str) -> Rows {
    let ms = |ns: i64| (ns - from) as f64 / 1e6;
    Rows {
        x: Axis::linear(format!("time since {} (ms)", seconds(from))).with_range(0.0, ms(to)),
        y_title: y_title.to_string(),
        rows: rows
            .into_iter()
            .enumerate()
            .map(|(i, (label, spans))| Row {
                label,
                spans: spans
                    .into_iter()
                    .filter(|&(a, b)| b >= from && a <= to)
                    .map(|(a, b)| (ms(a.max(from)), ms(b.min(to)), 1.0))
                    .collect(),
                colour: i,
            })
            .collect(),
        description: "execution timeline".into(),
    }
}

fn seconds(ns: i64) -> String {
    if ns == 0 {
        "the start".into()
    } else {
        format!("{:.3} s", ns as f64 / 1e9)
    }
}

/// The noise timeline: a row per CPU, the run cut into `columns` slices, each slice shaded by
/// the share of it that interruptions took (the darkest is the busiest slice of the run).
/// `list` holds `(start, duration)` in ns per row. Returns the chart and that largest share.
pub fn noise_rows(
    rows: Vec<(String, Vec<(i64, i64)>)>,
    span_ns: i64,
    columns: usize,
) -> (Rows, f64) {
    let mut slices = NoiseSlices::new(rows.iter().map(|r| r.0.clone()).collect(), span_ns, columns);
    for (i, (_, list)) in rows.iter().enumerate() {
        for &(start, dur) in list {
            slices.add(i, start, dur);
        }
    }
    slices.finish()
}

fn shaded_rows(shares: Vec<(String, Vec<f64>)>, width: f64) -> (Rows, f64) {
    let span = width * shares.first().map_or(1, |s| s.1.len()) as f64;
    let top = shares
        .iter()
        .flat_map(|(_, s)| s.iter().copied())
        .fold(0.0f64, f64::max)
        / width;
    let rows = shares
        .into_iter()
        .enumerate()
        .map(|(i, (label, s))| Row {
            label,
            spans: s
                .iter()
                .enumerate()
                .filter(|(_, &v)| v > 0.0)
                .map(|(k, &v)| {
                    let share = v / width;
                    (
                        k as f64 * width / 1e9,
                        (k + 1) as f64 * width / 1e9,
                        if top > 0.0 { share / top } else { 1.0 },
                    )
                })
                .collect(),
            colour: i,
        })
        .collect();
    (
        Rows {
            x: Axis::linear("time since the start (s)").with_range(0.0, span / 1e9),
            y_title: "CPU".into(),
            rows,
            description: "noise timeline per CPU".into(),
        },
        top,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_bins_count_every_positive_value_once() {
        let v = Distribution::from_samples(&[1, 1, 9, 10, 11, 99, 100, 0, -5]);
        let b = log_bins(&v);
        let total: u64 = b.iter().map(|x| x.1).sum();
        assert_eq!(total, 7);
        // Ten bins per decade from 1 to 100, and the closing edge.
        assert_eq!(b.len(), 22);
        assert_eq!(b[0], (1.0, 2));
        assert_eq!(b[10], (10.0, 2));
        assert_eq!(b[20], (100.0, 1));
        assert!((b[21].0 - 10f64.powf(2.1)).abs() < 1e-9 && b[21].1 == 0);
        assert!(log_bins(&Distribution::from_samples(&[0, -1])).is_empty());
    }

    #[test]
    fn exceedance_is_the_share_strictly_above() {
        let p = exceedance_points(&Distribution::from_samples(&[5, 1, 2, 2, 3]));
        assert_eq!(p, vec![(1.0, 0.8), (2.0, 0.4), (3.0, 0.2), (5.0, 0.0)]);
    }

    #[test]
    fn mttf_curves_follow_the_formula() {
        // Half the samples at 1 ms, half at 3 ms: a 2 ms double buffer fails half its cycles,
        // MTTF = (n - 1)·t / P = 2 ms / 0.5 = 4 ms; from 5 ms on nothing exceeds.
        let d = Distribution::from_samples(&[1_000_000, 3_000_000]);
        let c = mttf_curves(&[("x".into(), &d, 2, None)]);
        let known = &c.series[0].points;
        let at2 = known.iter().find(|p| p.0 == 2.0).expect("2 ms");
        assert!((at2.1 - 0.004).abs() < 1e-12, "{at2:?}");
        let bounds = &c.series[1].points;
        // Rule of three: (n - 1)·t·N/3 = 5 ms · 2 / 3.
        let at5 = bounds.iter().find(|p| p.0 == 5.0).expect("5 ms");
        assert!((at5.1 - 0.005 * 2.0 / 3.0).abs() < 1e-12, "{at5:?}");
        // Two samples that took 2 ms: nothing beyond 20 ms of MTTF is drawn.
        let c = mttf_curves(&[("x".into(), &d, 2, Some(0.002))]);
        let all: Vec<f64> = c
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .collect();
        assert!(!all.is_empty() && all.iter().all(|&m| m <= 0.02), "{all:?}");
        assert!(all.len() < known.len() + bounds.len());
    }

    #[test]
    fn noise_is_spread_over_the_slices_it_covers() {
        // 10 slices of 100 ns: an interruption from 50 to 250 covers half of slice 0, all of 1,
        // half of 2.
        let (rows, top) = noise_rows(vec![("CPU 0".into(), vec![(50, 200)])], 1000, 10);
        let spans = &rows.rows[0].spans;
        assert_eq!(spans.len(), 3);
        assert!((top - 1.0).abs() < 1e-9);
        assert!((spans[0].2 - 0.5).abs() < 1e-9 && (spans[1].2 - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_timeline_keeps_what_falls_in_the_window() {
        let r = timeline(
            vec![(
                "t0".into(),
                vec![
                    (0, 1_000_000),
                    (5_000_000, 9_000_000),
                    (20_000_000, 21_000_000),
                ],
            )],
            2_000_000,
            10_000_000,
            "thread",
        );
        assert_eq!(r.rows[0].spans, vec![(3.0, 7.0, 1.0)]);
    }
}
