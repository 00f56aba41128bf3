//! Inline SVG charts for the HTML report: x-y charts on linear or logarithmic axes, and row
//! charts (one row per thread or CPU, a rectangle per interval).
//!
//! The output is plain SVG text meant to sit inside an HTML page: it scales with its container
//! (a `viewBox` and `width="100%"`), needs no fonts beyond the page's, no script and no network.
//! Every element that draws data has the class `d`; axis titles have the classes
//! `axis-title x` and `axis-title y`, so that a check can find what a chart shows without
//! rendering it. A chart draws no more elements than its width has pixels per series: callers
//! thin large data sets first (see [`thin_scatter`] and [`thin_line`]).

use std::fmt::Write;

/// The chart's coordinate width; the height varies. Text sizes are in the same units, so at
/// the 640-unit width text is as large as the page's on a laptop and stays legible when a
/// phone scales the chart down.
pub const WIDTH: f64 = 640.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 26.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 44.0;

/// Colours that stay distinct for the common kinds of colour blindness (Okabe & Ito).
pub const PALETTE: [&str; 7] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000",
];

/// The colour of series `i`.
pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// How an axis maps values to positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Base 10; values at or below zero are not drawn.
    Log,
}

/// One axis: its title (with the unit, such as `lateness (µs)`), scale and optional range.
#[derive(Clone, Debug)]
pub struct Axis {
    pub title: String,
    pub scale: Scale,
    /// The range shown; from the data when `None`.
    pub range: Option<(f64, f64)>,
}

impl Axis {
    pub fn linear(title: impl Into<String>) -> Axis {
        Axis {
            title: title.into(),
            scale: Scale::Linear,
            range: None,
        }
    }

    pub fn log(title: impl Into<String>) -> Axis {
        Axis {
            title: title.into(),
            scale: Scale::Log,
            range: None,
        }
    }

    pub fn with_range(mut self, lo: f64, hi: f64) -> Axis {
        self.range = Some((lo, hi));
        self
    }
}

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Points joined by straight lines.
    Line,
    /// A dashed line.
    Dashed,
    /// A histogram outline: each point's value holds until the next point.
    Step,
    /// Dots.
    Points,
    /// Hollow dots, for values that are only bounds.
    Hollow,
}

/// A named set of points.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub style: Style,
    pub points: Vec<(f64, f64)>,
    /// Index into [`PALETTE`].
    pub colour: usize,
}

/// A labelled vertical line across the plot, such as an expected worst case.
#[derive(Clone, Debug)]
pub struct Marker {
    pub x: f64,
    pub label: String,
}

/// An x-y chart.
#[derive(Clone, Debug)]
pub struct Chart {
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub markers: Vec<Marker>,
    pub height: f64,
    /// A text description for screen readers.
    pub description: String,
}

/// A mapping from values to chart coordinates.
#[derive(Clone, Copy, Debug)]
struct Map {
    scale: Scale,
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl Map {
    fn t(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => v,
            Scale::Log => v.log10(),
        }
    }

    /// The position of `v`, or `None` when it cannot be shown on this axis.
    fn at(&self, v: f64) -> Option<f64> {
        if !v.is_finite() || (self.scale == Scale::Log && v <= 0.0) {
            return None;
        }
        let (a, b) = (self.t(self.lo), self.t(self.hi));
        let f = if b > a {
            (self.t(v) - a) / (b - a)
        } else {
            0.5
        };
        Some(self.from + f * (self.to - self.from))
    }

    /// Like [`Map::at`], held to the axis's ends.
    fn clamped(&self, v: f64) -> Option<f64> {
        let (lo, hi) = (self.from.min(self.to), self.from.max(self.to));
        if self.scale == Scale::Log && v <= 0.0 && v.is_finite() {
            return Some(if self.from < self.to { lo } else { hi });
        }
        self.at(v).map(|p| p.clamp(lo, hi))
    }
}

/// The range of the finite values (positive ones on a log axis), widened to whole decades on
/// a log axis and to round numbers on a linear one.
fn auto_range(values: impl Iterator<Item = f64>, scale: Scale) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in values {
        if v.is_finite() && (scale == Scale::Linear || v > 0.0) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    match scale {
        Scale::Log => {
            if !lo.is_finite() {
                return (1.0, 10.0);
            }
            let a = lo.log10().floor();
            let mut b = hi.log10().ceil();
            if b <= a {
                b = a + 1.0;
            }
            (10f64.powf(a), 10f64.powf(b))
        }
        Scale::Linear => {
            if !lo.is_finite() {
                return (0.0, 1.0);
            }
            // Counts, times and shares start at zero when all are positive.
            if lo > 0.0 {
                lo = 0.0;
            }
            if hi <= lo {
                hi = lo + 1.0;
            }
            let step = nice_step((hi - lo) / 5.0);
            ((lo / step).floor() * step, (hi / step).ceil() * step)
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let f = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    f * p
}

/// Tick values in `[lo, hi]`: round numbers on a linear axis; powers of ten on a log axis,
/// with 2 and 5 between them when the axis spans fewer than three decades.
fn ticks(scale: Scale, lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    match scale {
        Scale::Linear => {
            let step = nice_step((hi - lo) / 5.0);
            let mut k = (lo / step).ceil();
            while k * step <= hi + step * 1e-9 && out.len() < 50 {
                out.push(k * step);
                k += 1.0;
            }
        }
        Scale::Log => {
            if !(lo > 0.0 && hi > lo) {
                return out;
            }
            let a = lo.log10().floor() as i32;
            let b = hi.log10().ceil() as i32;
            let minor = b - a < 3;
            for e in a..=b.min(a + 40) {
                let p = 10f64.powi(e);
                for m in [1.0, 2.0, 5.0] {
                    let v = m * p;
                    if (m == 1.0 || minor) && v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                        out.push(v);
                    }
                }
            }
        }
    }
    out
}

/// A tick label: integers with thousands separators, small and large values compactly.
pub fn number(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e7).contains(&a) {
        let e = a.log10().floor() as i32;
        let m = v / 10f64.powi(e);
        return if (m.round() - m).abs() < 1e-9 && m.round().abs() == 1.0 {
            format!("{}1e{e}", if v < 0.0 { "-" } else { "" })
        } else {
            format!("{m:.0}e{e}")
        };
    }
    if (v.round() - v).abs() < 1e-9 * a.max(1.0) {
        let sign = if v < 0.0 { "-" } else { "" };
        return format!("{sign}{}", crate::text::count(a.round() as u64));
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `&`, `<`, `>` and quotes escaped, for text and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn open(out: &mut String, height: f64, description: &str) {
    let _ = write!(
        out,
        r#"<svg viewBox="0 0 {WIDTH} {height}" width="100%" role="img" aria-label="{}">"#,
        escape(description)
    );
}

/// Axis lines, ticks, grid and titles for the plot area `[xm.from, xm.to] × [ym.to, ym.from]`;
/// the y axis has ticks when `y_ticks`.
fn frame(out: &mut String, xm: &Map, ym: &Map, y_ticks: bool, x_title: &str, y_title: &str) {
    let (x0, x1) = (xm.from, xm.to);
    let (y0, y1) = (ym.from, ym.to);
    for v in ticks(xm.scale, xm.lo, xm.hi) {
        if let Some(x) = xm.at(v) {
            let _ = write!(
                out,
                r#"<line class="grid" x1="{x:.1}" y1="{y1:.1}" x2="{x:.1}" y2="{y0:.1}"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                y0 + 15.0,
                number(v)
            );
        }
    }
    if y_ticks {
        for v in ticks(ym.scale, ym.lo, ym.hi) {
            if let Some(y) = ym.at(v) {
                let _ = write!(
                    out,
                    r#"<line class="grid" x1="{x0:.1}" y1="{y:.1}" x2="{x1:.1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                    x0 - 5.0,
                    y + 4.0,
                    number(v)
                );
            }
        }
    }
    let _ = write!(
        out,
        r#"<path class="axis" d="M{x0:.1},{y1:.1}V{y0:.1}H{x1:.1}"/><text class="axis-title x" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text class="axis-title y" transform="translate(13,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        y0 + 36.0,
        escape(x_title),
        (y0 + y1) / 2.0,
        escape(y_title)
    );
}

impl Chart {
    pub fn new(x: Axis, y: Axis, description: impl Into<String>) -> Chart {
        Chart {
            x,
            y,
            series: Vec::new(),
            markers: Vec::new(),
            height: 300.0,
            description: description.into(),
        }
    }

    /// True when no series has a point that the axes can show.
    pub fn is_empty(&self) -> bool {
        !self.series.iter().any(|s| {
            s.points.iter().any(|&(x, y)| {
                x.is_finite()
                    && y.is_finite()
                    && (self.x.scale == Scale::Linear || x > 0.0)
                    && (self.y.scale == Scale::Linear || y > 0.0)
            })
        })
    }

    /// The chart as an `<svg>` element.
    pub fn svg(&self) -> String {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(self.markers.iter().map(|m| m.x));
        let (xlo, xhi) = self.x.range.unwrap_or_else(|| auto_range(xs, self.x.scale));
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1));
        let (ylo, yhi) = self.y.range.unwrap_or_else(|| auto_range(ys, self.y.scale));
        let xm = Map {
            scale: self.x.scale,
            lo: xlo,
            hi: xhi,
            from: LEFT,
            to: WIDTH - RIGHT,
        };
        let ym = Map {
            scale: self.y.scale,
            lo: ylo,
            hi: yhi,
            from: self.height - BOTTOM,
            to: TOP,
        };
        let mut out = String::new();
        open(&mut out, self.height, &self.description);
        frame(&mut out, &xm, &ym, true, &self.x.title, &self.y.title);
        for s in &self.series {
            draw(&mut out, s, &xm, &ym);
        }
        for (i, m) in self.markers.iter().enumerate() {
            let Some(x) = xm.at(m.x) else { continue };
            if x < xm.from - 0.5 || x > xm.to + 0.5 {
                continue;
            }
            let y = TOP + 12.0 + 13.0 * (i % 3) as f64;
            let (anchor, dx) = if x > WIDTH * 0.7 {
                ("end", -3.0)
            } else {
                ("start", 3.0)
            };
            let _ = write!(
                out,
                r#"<line class="marker" x1="{x:.1}" y1="{TOP:.1}" x2="{x:.1}" y2="{:.1}"/><text class="marker-label" x="{:.1}" y="{y:.1}" text-anchor="{anchor}">{}</text>"#,
                ym.from,
                x + dx,
                escape(&m.label)
            );
        }
        out.push_str("</svg>");
        out
    }
}

fn draw(out: &mut String, s: &Series, xm: &Map, ym: &Map) {
    let c = colour(s.colour);
    match s.style {
        Style::Points | Style::Hollow => {
            let fill = if s.style == Style::Hollow {
                "none".to_string()
            } else {
                c.to_string()
            };
            let r = if s.style == Style::Hollow { 3.0 } else { 1.6 };
            let mut n = 0;
            for &(x, y) in &s.points {
                let (Some(px), Some(py)) = (xm.at(x), ym.at(y)) else {
                    continue;
                };
                if !inside(px, xm) || !inside(py, ym) {
                    continue;
                }
                if n == 0 {
                    let _ = write!(
                        out,
                        r#"<g class="d" fill="{fill}" stroke="{c}"><title>{}</title>"#,
                        escape(&s.name)
                    );
                }
                n += 1;
                let _ = write!(
                    out,
                    r#"<circle class="d" cx="{px:.1}" cy="{py:.1}" r="{r}"/>"#
                );
            }
            if n > 0 {
                out.push_str("</g>");
            }
        }
        Style::Line | Style::Dashed | Style::Step => {
            let mut d = String::new();
            let mut pen_down = false;
            for &(x, y) in &s.points {
                let (Some(px), Some(py)) = (xm.at(x), ym.clamped(y)) else {
                    pen_down = false;
                    continue;
                };
                if !inside(px, xm) {
                    pen_down = false;
                    continue;
                }
                if !pen_down {
                    let _ = write!(d, "M{px:.1},{py:.1}");
                    pen_down = true;
                } else if s.style == Style::Step {
                    let _ = write!(d, "H{px:.1}V{py:.1}");
                } else {
                    let _ = write!(d, "L{px:.1},{py:.1}");
                }
            }
            if !d.is_empty() {
                let dash = if s.style == Style::Dashed {
                    r#" stroke-dasharray="5 4""#
                } else {
                    ""
                };
                let _ = write!(
                    out,
                    r#"<path class="d" fill="none" stroke="{c}"{dash} d="{d}"><title>{}</title></path>"#,
                    escape(&s.name)
                );
            }
        }
    }
}

fn inside(p: f64, m: &Map) -> bool {
    let (lo, hi) = (m.from.min(m.to), m.from.max(m.to));
    p >= lo - 0.5 && p <= hi + 0.5
}

/// One row of a [`Rows`] chart.
#[derive(Clone, Debug)]
pub struct Row {
    pub label: String,
    /// `(start, end, opacity)` in x units; opacity in (0, 1].
    pub spans: Vec<(f64, f64, f64)>,
    pub colour: usize,
}

/// A chart of rows: one per thread or CPU, a rectangle per interval.
#[derive(Clone, Debug)]
pub struct Rows {
    pub x: Axis,
    pub y_title: String,
    pub rows: Vec<Row>,
    pub description: String,
}

const ROW: f64 = 26.0;
const ROW_LEFT: f64 = 150.0;

impl Rows {
    pub fn is_empty(&self) -> bool {
        !self.rows.iter().any(|r| !r.spans.is_empty())
    }

    pub fn svg(&self) -> String {
        let height = TOP + ROW * self.rows.len().max(1) as f64 + BOTTOM;
        let xs = self
            .rows
            .iter()
            .flat_map(|r| r.spans.iter().flat_map(|s| [s.0, s.1]));
        let (lo, hi) = self
            .x
            .range
            .unwrap_or_else(|| auto_range(xs, Scale::Linear));
        let xm = Map {
            scale: Scale::Linear,
            lo,
            hi,
            from: ROW_LEFT,
            to: WIDTH - RIGHT,
        };
        let ym = Map {
            scale: Scale::Linear,
            lo: 0.0,
            hi: 1.0,
            from: height - BOTTOM,
            to: TOP,
        };
        let mut out = String::new();
        open(&mut out, height, &self.description);
        // The y axis has no ticks: the rows are labelled instead.
        frame(&mut out, &xm, &ym, false, &self.x.title, &self.y_title);
        for (i, r) in self.rows.iter().enumerate() {
            let top = TOP + ROW * i as f64 + 4.0;
            let _ = write!(
                out,
                r#"<text class="row-label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                ROW_LEFT - 6.0,
                top + ROW / 2.0 + 1.0,
                escape(&r.label)
            );
            let c = colour(r.colour);
            let mut any = false;
            for &(a, b, op) in &r.spans {
                let (Some(pa), Some(pb)) = (xm.clamped(a), xm.clamped(b)) else {
                    continue;
                };
                if b < lo || a > hi {
                    continue;
                }
                if !any {
                    let _ = write!(out, r#"<g fill="{c}">"#);
                    any = true;
                }
                // At least a hairline, so that the shortest interval is still seen.
                let w = (pb - pa).max(0.6);
                let o = if op >= 0.999 {
                    String::new()
                } else {
                    format!(r#" fill-opacity="{:.2}""#, op.clamp(0.08, 1.0))
                };
                let _ = write!(
                    out,
                    r#"<rect class="d" x="{pa:.2}" y="{top:.1}" width="{w:.2}" height="{:.1}"{o}/>"#,
                    ROW - 8.0
                );
            }
            if any {
                out.push_str("</g>");
            }
        }
        out.push_str("</svg>");
        out
    }
}

/// Points reduced as they arrive to at most one per cell of a `columns` × `rows` grid over
/// known ranges (in the axes' units, transformed by their scales): what [`thin_scatter`] does
/// for a list, in memory bounded by the grid for a stream of any length.
pub struct Grid {
    x: Scale,
    y: Scale,
    xr: (f64, f64),
    yr: (f64, f64),
    columns: usize,
    rows: usize,
    cells: std::collections::BTreeMap<(usize, usize), (f64, f64)>,
}

impl Grid {
    pub fn new(
        xr: (f64, f64),
        yr: (f64, f64),
        x: Scale,
        y: Scale,
        columns: usize,
        rows: usize,
    ) -> Grid {
        let t = |s: Scale, v: f64| match s {
            Scale::Linear => v,
            Scale::Log => v.max(f64::MIN_POSITIVE).log10(),
        };
        Grid {
            x,
            y,
            xr: (t(x, xr.0), t(x, xr.1)),
            yr: (t(y, yr.0), t(y, yr.1)),
            columns: columns.max(1),
            rows: rows.max(1),
            cells: std::collections::BTreeMap::new(),
        }
    }

    /// Takes a point; the first point of each cell is kept.
    pub fn add(&mut self, p: (f64, f64)) {
        let ok = p.0.is_finite()
            && p.1.is_finite()
            && (self.x == Scale::Linear || p.0 > 0.0)
            && (self.y == Scale::Linear || p.1 > 0.0);
        if !ok {
            return;
        }
        let t = |s: Scale, v: f64| match s {
            Scale::Linear => v,
            Scale::Log => v.log10(),
        };
        let cell = |v: f64, (a, b): (f64, f64), n: usize| -> usize {
            if b > a {
                (((v - a) / (b - a)).clamp(0.0, 1.0) * (n as f64 - 1.0)).round() as usize
            } else {
                0
            }
        };
        let key = (
            cell(t(self.x, p.0), self.xr, self.columns),
            cell(t(self.y, p.1), self.yr, self.rows),
        );
        self.cells.entry(key).or_insert(p);
    }

    /// The points kept, in order of x.
    pub fn points(&self) -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = self.cells.values().copied().collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }
}

/// Thins a scatter to what the chart can show: points that fall on the same cell of a
/// `columns × rows` grid (in the axes' own scales) are drawn once. The extremes survive,
/// because every occupied cell keeps one point.
pub fn thin_scatter(
    points: &[(f64, f64)],
    x: Scale,
    y: Scale,
    columns: usize,
    rows: usize,
) -> Vec<(f64, f64)> {
    let t = |s: Scale, v: f64| match s {
        Scale::Linear => v,
        Scale::Log => v.log10(),
    };
    let ok = |&&(a, b): &&(f64, f64)| {
        a.is_finite()
            && b.is_finite()
            && (x == Scale::Linear || a > 0.0)
            && (y == Scale::Linear || b > 0.0)
    };
    let pts: Vec<(f64, f64)> = points.iter().filter(ok).copied().collect();
    if pts.len() <= columns.max(1) {
        return pts;
    }
    let range = |f: &dyn Fn(&(f64, f64)) -> f64| {
        pts.iter()
            .map(f)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    };
    let (xa, xb) = range(&|p| t(x, p.0));
    let (ya, yb) = range(&|p| t(y, p.1));
    let cell = |v: f64, a: f64, b: f64, n: usize| -> usize {
        if b > a {
            (((v - a) / (b - a)) * (n as f64 - 1.0)).round() as usize
        } else {
            0
        }
    };
    let mut seen = std::collections::HashSet::new();
    pts.into_iter()
        .filter(|p| {
            seen.insert((
                cell(t(x, p.0), xa, xb, columns),
                cell(t(y, p.1), ya, yb, rows),
            ))
        })
        .collect()
}

/// Thins a line over x to at most `columns` buckets, keeping each bucket's largest y (the
/// worst value in every stretch of time stays visible).
pub fn thin_line(points: &[(f64, f64)], columns: usize) -> Vec<(f64, f64)> {
    if points.len() <= columns.max(1) {
        return points.to_vec();
    }
    let per = points.len().div_ceil(columns.max(1));
    points
        .chunks(per)
        .filter_map(|c| {
            c.iter()
                .copied()
                .filter(|p| p.1.is_finite())
                .max_by(|a, b| a.1.total_cmp(&b.1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_axes_span_whole_decades() {
        assert_eq!(
            auto_range([3.0, 4500.0].into_iter(), Scale::Log),
            (1.0, 10_000.0)
        );
        assert_eq!(auto_range([10.0].into_iter(), Scale::Log), (10.0, 100.0));
        // Values the axis cannot show are left out of the range.
        assert_eq!(
            auto_range([0.0, -1.0, f64::NAN, 20.0].into_iter(), Scale::Log),
            (10.0, 100.0)
        );
        assert_eq!(auto_range(std::iter::empty(), Scale::Log), (1.0, 10.0));
    }

    #[test]
    fn linear_axes_start_at_zero_and_end_on_a_round_number() {
        assert_eq!(
            auto_range([3.0, 47.0].into_iter(), Scale::Linear),
            (0.0, 50.0)
        );
        assert_eq!(
            auto_range([-3.0, 7.0].into_iter(), Scale::Linear),
            (-4.0, 8.0)
        );
        assert_eq!(
            auto_range([5.0, 5.0].into_iter(), Scale::Linear),
            (0.0, 5.0)
        );
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(
            ticks(Scale::Linear, 0.0, 50.0),
            vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
        );
        assert_eq!(
            ticks(Scale::Log, 1.0, 10_000.0),
            vec![1.0, 10.0, 100.0, 1000.0, 10_000.0]
        );
        assert_eq!(
            ticks(Scale::Log, 10.0, 100.0),
            vec![10.0, 20.0, 50.0, 100.0]
        );
    }

    #[test]
    fn numbers_are_compact() {
        assert_eq!(number(1000.0), "1,000");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(1e-4), "1e-4");
        assert_eq!(number(2e7), "2e7");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(-20.0), "-20");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape(r#"<a & "b">"#), "&lt;a &amp; &quot;b&quot;&gt;");
    }

    #[test]
    fn a_chart_draws_its_data_and_titles() {
        let mut c = Chart::new(Axis::log("lateness (µs)"), Axis::log("count"), "a <test>");
        c.series.push(Series {
            name: "CPU 0".into(),
            style: Style::Step,
            points: vec![(1.0, 5.0), (10.0, 0.0), (100.0, 2.0)],
            colour: 0,
        });
        c.markers.push(Marker {
            x: 50.0,
            label: "hour".into(),
        });
        let s = c.svg();
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert!(s.contains(r#"class="axis-title x""#) && s.contains("lateness (µs)"));
        assert!(s.contains(r#"aria-label="a &lt;test&gt;""#));
        // A zero count on a log axis sits on the axis rather than breaking the outline.
        assert_eq!(s.matches(r#"<path class="d""#).count(), 1);
        assert!(s.contains("hour"));
        assert!(!c.is_empty());
    }

    #[test]
    fn points_off_a_log_axis_are_not_drawn() {
        let mut c = Chart::new(Axis::linear("t (s)"), Axis::log("x (µs)"), "");
        c.series.push(Series {
            name: "s".into(),
            style: Style::Points,
            points: vec![(1.0, 0.0), (2.0, -5.0)],
            colour: 1,
        });
        assert!(c.is_empty());
        assert!(!c.svg().contains(r#"class="d""#));
    }

    #[test]
    fn rows_draw_one_rectangle_per_span_in_the_window() {
        let r = Rows {
            x: Axis::linear("time (ms)").with_range(0.0, 10.0),
            y_title: "thread".into(),
            rows: vec![
                Row {
                    label: "thread 0".into(),
                    spans: vec![(0.0, 2.0, 1.0), (3.0, 3.0, 1.0), (20.0, 30.0, 1.0)],
                    colour: 0,
                },
                Row {
                    label: "thread 1".into(),
                    spans: vec![],
                    colour: 1,
                },
            ],
            description: "timeline".into(),
        };
        let s = r.svg();
        assert_eq!(s.matches("<rect class=\"d\"").count(), 2);
        assert!(s.contains("thread 1"));
    }

    #[test]
    fn thinning_keeps_the_extremes() {
        let mut pts: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64, 10.0)).collect();
        pts[5000].1 = 9000.0;
        let t = thin_scatter(&pts, Scale::Linear, Scale::Log, 600, 250);
        assert!(t.len() < 1300, "{}", t.len());
        assert!(t.iter().any(|p| p.1 == 9000.0));
        let l = thin_line(&pts, 500);
        assert!(l.len() <= 500);
        assert!(l.iter().any(|p| p.1 == 9000.0));
    }
}
