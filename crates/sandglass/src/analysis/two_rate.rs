//! Clock-interrupt overhead from a background loop's speed at two tick rates.
//!
//! Dannenberg et al. (CMU 1993, §6) measured "the overhead of the clock by changing its
//! interrupt frequency and measuring the resulting impact on a background process": a loop that
//! does `I` iterations per second at tick rate `f`. If each tick costs `o` seconds and each
//! iteration `x` seconds, one second holds `f·o` of interrupt handling and `I·x` of loop:
//!
//! `I(f) = (1 − f·o)/x`.
//!
//! Two measurements give two equations in the two unknowns:
//!
//! `o = (I₁ − I₂)/(I₁·f₂ − I₂·f₁)`, `x = (1 − f₁·o)/I₁`.
//!
//! "An interrupt rate of 100Hz, which allowed 1530 iterations per second, and another with an
//! interrupt rate of 2000Hz, which allowed 1333.6 iterations per second. Solving for clock
//! interrupt time, we get 67us", and "a 1KHz clock rate will consume 6.7% of the available
//! processing time".

use serde::{Deserialize, Serialize};
use std::str::FromStr;
use thiserror::Error;

/// One measurement: iterations per second of the loop at a tick rate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RateMeasurement {
    /// f, in Hz.
    pub tick_hz: f64,
    /// I, iterations per second.
    pub iterations_per_s: f64,
}

/// Why the two equations have no meaningful solution.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum TwoRateError {
    /// Text that is not `F:I`.
    #[error("'{0}' is not TICK_HZ:ITERATIONS_PER_S, such as 100:1530")]
    Malformed(String),
    /// A rate that is not positive and finite.
    #[error(
        "rates must be positive numbers: got {tick_hz} Hz and {iterations_per_s} iterations/s"
    )]
    NotPositive {
        /// The tick rate.
        tick_hz: f64,
        /// The iteration rate.
        iterations_per_s: f64,
    },
    /// Both measurements at the same tick rate.
    #[error("both measurements are at {0} Hz: measure at two different tick rates")]
    SameTickRate(f64),
    /// The loop did not slow down at the faster tick rate (or the solution is impossible).
    #[error("the loop ran {0} at the faster tick rate, so no positive per-tick overhead explains the two measurements: measure longer or farther apart")]
    Inconsistent(&'static str),
}

impl FromStr for RateMeasurement {
    type Err = TwoRateError;

    /// Parses `F:I`, such as `100:1530`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || TwoRateError::Malformed(s.to_string());
        let (f, i) = s.split_once(':').ok_or_else(bad)?;
        let tick_hz: f64 = f.trim().parse().map_err(|_| bad())?;
        let iterations_per_s: f64 = i.trim().parse().map_err(|_| bad())?;
        Ok(RateMeasurement {
            tick_hz,
            iterations_per_s,
        })
    }
}

/// The solution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TwoRate {
    /// o: the cost of one clock interrupt.
    pub overhead_ns: f64,
    /// x: the time of one loop iteration with no interrupts.
    pub iteration_ns: f64,
    /// The two measurements.
    pub measurements: [RateMeasurement; 2],
}

impl TwoRate {
    /// The share of the CPU that ticks at `tick_hz` take: f·o.
    pub fn overhead_share(&self, tick_hz: f64) -> f64 {
        tick_hz * self.overhead_ns / 1e9
    }
}

/// Solves for the per-tick overhead and the iteration time.
pub fn solve(a: RateMeasurement, b: RateMeasurement) -> Result<TwoRate, TwoRateError> {
    for m in [a, b] {
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !ok(m.tick_hz) || !ok(m.iterations_per_s) {
            return Err(TwoRateError::NotPositive {
                tick_hz: m.tick_hz,
                iterations_per_s: m.iterations_per_s,
            });
        }
    }
    if a.tick_hz == b.tick_hz {
        return Err(TwoRateError::SameTickRate(a.tick_hz));
    }
    let (f1, i1, f2, i2) = (a.tick_hz, a.iterations_per_s, b.tick_hz, b.iterations_per_s);
    let o = (i1 - i2) / (i1 * f2 - i2 * f1);
    if o.is_nan() || o <= 0.0 {
        return Err(TwoRateError::Inconsistent("as fast or faster"));
    }
    if o * f1.max(f2) >= 1.0 {
        return Err(TwoRateError::Inconsistent("at all"));
    }
    let x = (1.0 - f1 * o) / i1;
    Ok(TwoRate {
        overhead_ns: o * 1e9,
        iteration_ns: x * 1e9,
        measurements: [a, b],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dannenberg et al. 1993, §6: 1530 iterations/s at 100 Hz and 1333.6 at 2000 Hz give
    /// "67us". By hand: o = 196.4/(1530·2000 − 1333.6·100) = 196.4/2926640 = 67.108 µs and
    /// x = (1 − 100·o)/1530 = 649.21 µs; at 1 kHz the ticks take 6.7% of the CPU.
    #[test]
    fn dannenberg_clock_overhead() {
        let r = solve(
            "100:1530".parse().expect("valid"),
            "2000:1333.6".parse().expect("valid"),
        )
        .expect("solution");
        assert!((r.overhead_ns - 196.4 / 2_926_640.0 * 1e9).abs() < 1e-6);
        assert!((r.overhead_ns / 1000.0 - 67.0).abs() < 0.5, "{r:?}");
        assert!((r.iteration_ns - (1.0 - 100.0 * 196.4 / 2_926_640.0) / 1530.0 * 1e9).abs() < 1e-6);
        assert!((r.overhead_share(1000.0) - 0.067).abs() < 0.001);
    }

    #[test]
    fn exact_synthetic_rates() {
        // o = 10 µs, x = 1 ms: I(100) = 0.999/0.001 = 999, I(1000) = 0.99/0.001 = 990.
        let r = solve(
            RateMeasurement {
                tick_hz: 100.0,
                iterations_per_s: 999.0,
            },
            RateMeasurement {
                tick_hz: 1000.0,
                iterations_per_s: 990.0,
            },
        )
        .expect("solution");
        assert!((r.overhead_ns - 10_000.0).abs() < 1e-6);
        assert!((r.iteration_ns - 1_000_000.0).abs() < 1e-3);
    }

    #[test]
    fn refusals() {
        let m = |f: f64, i: f64| RateMeasurement {
            tick_hz: f,
            iterations_per_s: i,
        };
        assert!(matches!(
            "100".parse::<RateMeasurement>(),
            Err(TwoRateError::Malformed(_))
        ));
        assert!(matches!(
            "a:b".parse::<RateMeasurement>(),
            Err(TwoRateError::Malformed(_))
        ));
        assert_eq!(
            solve(m(100.0, 5.0), m(100.0, 4.0)),
            Err(TwoRateError::SameTickRate(100.0))
        );
        assert!(matches!(
            solve(m(100.0, 5.0), m(1000.0, 6.0)),
            Err(TwoRateError::Inconsistent(_))
        ));
        assert!(matches!(
            solve(m(0.0, 5.0), m(1000.0, 6.0)),
            Err(TwoRateError::NotPositive { .. })
        ));
    }
}
