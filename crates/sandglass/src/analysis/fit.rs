//! Least-squares fit of a transfer-cost model `t(N) = a + N/b`.
//!
//! Dannenberg et al. summarise each Mach data path by a fixed cost and a rate: "For N bytes,
//! the transfer time is approximately (0.160 + N/4000) ms. In other words, each message incurs a
//! 0.160ms overhead, and data is transferred at about 4MB/s" (CMU 1993, §8.1). With sizes N in
//! bytes and times in nanoseconds this is the straight line `t = a + s·N`, fitted by ordinary
//! least squares; a is the fixed cost and b = 10⁹/s bytes per second.
//!
//! Sums are accumulated in exact 128-bit integer arithmetic and the slope and intercept formed
//! as reduced fractions, so a data set that lies exactly on a line gives exactly its a and b
//! (up to the one rounding of the final division). Only inputs too large for 128 bits fall back
//! to the two-pass floating-point formulas. The report gives the residuals (observed − fitted),
//! their sum of squares SSE and the coefficient of determination R² = 1 − SSE/SST.
//!
//! Least squares always gives a line, but not every line is a cost model: a negative fixed
//! cost (a transfer that takes less than nothing) or a time that falls as the size grows says
//! that a straight line does not describe these sizes (a capacity, a cache, a segment size),
//! not what one transfer costs. Such a fit keeps its arithmetic and says why it is not a model
//! ([`CostFit::not_physical`]); the reports then show the reason, not a and b as results.

use super::busy::gcd;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One measurement: a size and the time it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Point {
    /// N, in bytes.
    pub size_bytes: u64,
    /// t(N), in nanoseconds.
    pub time_ns: u64,
}

/// Why the model cannot be fitted.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FitError {
    /// Fewer than two points.
    #[error("a line needs at least 2 points, got {0}")]
    TooFewPoints(usize),
    /// Every point has the same size.
    #[error("every point has the same size: measure at least two different sizes")]
    OneSize,
}

/// The fitted model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CostFit {
    /// Points fitted.
    pub points: usize,
    /// a: the fixed cost per transfer.
    pub fixed_ns: f64,
    /// s = 1/b: the cost per byte.
    pub ns_per_byte: f64,
    /// b: the transfer rate; `None` when the fitted cost does not grow with size.
    pub bytes_per_s: Option<f64>,
    /// Observed − fitted time, per point in input order.
    pub residuals_ns: Vec<f64>,
    /// Σ residual², in ns².
    pub sse: f64,
    /// 1 − SSE/SST; `None` when every time is the same (SST = 0).
    pub r2: Option<f64>,
    /// Why the fitted line is not a physical cost model (a negative fixed cost, a time that
    /// falls as the size grows); absent when it is one. a and b are then arithmetic, not costs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_physical: Option<String>,
}

/// Why `t = fixed + ns_per_byte·N` cannot be what a transfer costs, or `None`.
fn not_physical(fixed_ns: f64, ns_per_byte: f64) -> Option<String> {
    let mut why = Vec::new();
    if fixed_ns < 0.0 {
        why.push(format!(
            "the fitted fixed cost a = {} ns is negative",
            fixed_ns.round() as i64
        ));
    }
    if ns_per_byte < 0.0 {
        why.push("the fitted time falls as the size grows".to_string());
    }
    (!why.is_empty()).then(|| {
        format!(
            "{}: a straight line does not describe these sizes (see the residuals)",
            why.join(" and ")
        )
    })
}

/// p/q as f64 after reducing the fraction.
fn ratio(p: i128, q: i128) -> f64 {
    let g = gcd(p.unsigned_abs(), q.unsigned_abs()).max(1) as i128;
    (p / g) as f64 / (q / g) as f64
}

/// (slope, intercept, 1/slope·10⁹) from exact sums, or `None` on overflow.
fn exact(points: &[Point]) -> Option<(f64, f64, Option<f64>)> {
    let n = i128::try_from(points.len()).ok()?;
    let (mut sx, mut sy, mut sxx, mut sxy) = (0i128, 0i128, 0i128, 0i128);
    for p in points {
        let (x, y) = (i128::from(p.size_bytes), i128::from(p.time_ns));
        sx = sx.checked_add(x)?;
        sy = sy.checked_add(y)?;
        sxx = sxx.checked_add(x.checked_mul(x)?)?;
        sxy = sxy.checked_add(x.checked_mul(y)?)?;
    }
    // slope = dxy/dx, intercept = (sy·dx − dxy·sx)/(n·dx).
    let dx = n.checked_mul(sxx)?.checked_sub(sx.checked_mul(sx)?)?;
    let dxy = n.checked_mul(sxy)?.checked_sub(sx.checked_mul(sy)?)?;
    if dx == 0 {
        return None;
    }
    let slope = ratio(dxy, dx);
    let num = sy.checked_mul(dx)?.checked_sub(dxy.checked_mul(sx)?)?;
    let intercept = ratio(num, n.checked_mul(dx)?);
    let rate = if dxy > 0 {
        Some(ratio(dx.checked_mul(1_000_000_000)?, dxy))
    } else {
        None
    };
    Some((slope, intercept, rate))
}

fn floating(points: &[Point]) -> (f64, f64, Option<f64>) {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.size_bytes as f64).sum::<f64>() / n;
    let my = points.iter().map(|p| p.time_ns as f64).sum::<f64>() / n;
    let sxx: f64 = points
        .iter()
        .map(|p| (p.size_bytes as f64 - mx).powi(2))
        .sum();
    let sxy: f64 = points
        .iter()
        .map(|p| (p.size_bytes as f64 - mx) * (p.time_ns as f64 - my))
        .sum();
    let slope = sxy / sxx;
    (slope, my - slope * mx, (slope > 0.0).then(|| 1e9 / slope))
}

/// Fits `t(N) = a + N/b` to `points`.
pub fn fit_cost(points: &[Point]) -> Result<CostFit, FitError> {
    if points.len() < 2 {
        return Err(FitError::TooFewPoints(points.len()));
    }
    if points.iter().all(|p| p.size_bytes == points[0].size_bytes) {
        return Err(FitError::OneSize);
    }
    let (slope, intercept, rate) = exact(points).unwrap_or_else(|| floating(points));
    let residuals_ns: Vec<f64> = points
        .iter()
        .map(|p| p.time_ns as f64 - (intercept + slope * p.size_bytes as f64))
        .collect();
    let sse: f64 = residuals_ns.iter().map(|r| r * r).sum();
    let my = points.iter().map(|p| p.time_ns as f64).sum::<f64>() / points.len() as f64;
    let sst: f64 = points.iter().map(|p| (p.time_ns as f64 - my).powi(2)).sum();
    Ok(CostFit {
        points: points.len(),
        fixed_ns: intercept,
        ns_per_byte: slope,
        bytes_per_s: rate,
        residuals_ns,
        sse,
        r2: (sst > 0.0).then(|| 1.0 - sse / sst),
        not_physical: not_physical(intercept, slope),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pt(size_bytes: u64, time_ns: u64) -> Point {
        Point {
            size_bytes,
            time_ns,
        }
    }

    #[test]
    fn exact_line_gives_exact_parameters() {
        // a = 1000 ns, b = 10^8 B/s (10 ns per byte).
        let pts = [
            pt(0, 1000),
            pt(100, 2000),
            pt(1000, 11_000),
            pt(4096, 41_960),
        ];
        let f = fit_cost(&pts).expect("fit");
        assert_eq!(f.fixed_ns, 1000.0);
        assert_eq!(f.ns_per_byte, 10.0);
        assert_eq!(f.bytes_per_s, Some(1e8));
        assert_eq!(f.sse, 0.0);
        assert_eq!(f.r2, Some(1.0));
        assert!(f.residuals_ns.iter().all(|&r| r == 0.0));
        assert_eq!(f.not_physical, None);
    }

    /// A line with a negative intercept (times that grow faster than linearly: 0, 500 and
    /// 3000 ns for 0, 1000 and 2000 bytes fit s = 1.5 ns/B, a = −333 ns) is arithmetic, not a
    /// cost model, and says why; so is a time that falls with size.
    #[test]
    fn impossible_lines_say_why_they_are_not_a_model() {
        let f = fit_cost(&[pt(0, 0), pt(1000, 500), pt(2000, 3000)]).expect("fit");
        assert!(f.fixed_ns < 0.0);
        let why = f.not_physical.expect("flagged");
        assert!(
            why.starts_with("the fitted fixed cost a = -333 ns is negative"),
            "{why}"
        );
        let f = fit_cost(&[pt(0, 5000), pt(1000, 4000)]).expect("fit");
        let why = f.not_physical.expect("flagged");
        assert!(
            why.starts_with("the fitted time falls as the size grows"),
            "{why}"
        );
        let f = fit_cost(&[pt(0, 100), pt(1000, 100)]).expect("fit");
        assert_eq!(
            f.not_physical, None,
            "a constant time is a model with no per-byte cost"
        );
    }

    /// Dannenberg et al. 1993, §8.1: "A 1-byte buffer took 0.160ms, while a 32768-byte buffer
    /// took 8.77ms. For N bytes, the transfer time is approximately (0.160 + N/4000) ms", i.e.
    /// about 4 MB/s. Through the two points: s = 8.61 ms/32767 B = 262.8 ns/B, b = 3.806 MB/s,
    /// a = 0.160 ms − 262.8 ns = 159.74 µs.
    #[test]
    fn dannenberg_in_line_ipc() {
        let f = fit_cost(&[pt(1, 160_000), pt(32_768, 8_770_000)]).expect("fit");
        let s = 8_610_000.0 / 32_767.0;
        assert!((f.ns_per_byte - s).abs() < 1e-9);
        assert!((f.fixed_ns - (160_000.0 - s)).abs() < 1e-6);
        let b = f.bytes_per_s.expect("positive slope");
        assert!((b - 1e9 / s).abs() < 1e-3);
        assert!((b / 4e6 - 1.0).abs() < 0.05, "about 4 MB/s: {b}");
    }

    #[test]
    fn residuals_sse_and_r2_by_hand() {
        // Points (0,0), (1,2), (2,1): slope 0.5, intercept 0.5; residuals −0.5, 1, −0.5;
        // SSE 1.5; SST = 2 (mean 1); R² = 0.25.
        let f = fit_cost(&[pt(0, 0), pt(1, 2), pt(2, 1)]).expect("fit");
        assert_eq!((f.ns_per_byte, f.fixed_ns), (0.5, 0.5));
        assert_eq!(f.residuals_ns, vec![-0.5, 1.0, -0.5]);
        assert_eq!(f.sse, 1.5);
        assert_eq!(f.r2, Some(0.25));
        // Falling times: no rate.
        let f = fit_cost(&[pt(0, 10), pt(10, 5)]).expect("fit");
        assert_eq!(f.bytes_per_s, None);
        // Constant times: R² undefined.
        assert_eq!(fit_cost(&[pt(0, 7), pt(10, 7)]).expect("fit").r2, None);
        assert_eq!(fit_cost(&[pt(1, 1)]), Err(FitError::TooFewPoints(1)));
        assert_eq!(fit_cost(&[pt(1, 1), pt(1, 2)]), Err(FitError::OneSize));
    }

    #[test]
    fn huge_values_fall_back_to_floating_point() {
        let f = fit_cost(&[pt(0, 5), pt(u64::MAX, u64::MAX)]).expect("fit");
        assert!((f.ns_per_byte - 1.0).abs() < 1e-9);
    }

    proptest! {
        /// Times generated exactly from t = a + k·N (integer ns per byte) are fitted exactly.
        #[test]
        fn exact_data_is_fitted_exactly(a in 0u64..1_000_000, k in 1u64..1000, sizes in proptest::collection::btree_set(0u64..1_000_000, 2..20)) {
            let pts: Vec<Point> = sizes.iter().map(|&n| pt(n, a + k * n)).collect();
            let f = fit_cost(&pts).expect("fit");
            prop_assert_eq!(f.fixed_ns, a as f64);
            prop_assert_eq!(f.ns_per_byte, k as f64);
            prop_assert_eq!(f.bytes_per_s, Some(1e9 / k as f64));
            prop_assert_eq!(f.sse, 0.0);
        }
    }
}
