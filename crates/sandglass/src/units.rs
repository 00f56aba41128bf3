//! Time inside sandglass is an integer number of nanoseconds, typed as [`Nanos`].
//!
//! Floating point appears only at the edges (printing milliseconds, computing shares); every
//! stored figure is integer nanoseconds in a field whose name ends in `_ns`.

use serde::{Deserialize, Serialize};

/// A count with thousands separators: `1,234,567`.
pub fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `x` rounded to the nearest integer, halves away from zero: `x.round() as i64` without the
/// call to `round` that `f64::round` compiles to on the x86_64 baseline (no SSE4.1), for the
/// measuring threads' per-wakeup arithmetic. Exact for |x| < 2^52; saturates like `as`.
#[inline(always)]
pub fn round_i64(x: f64) -> i64 {
    let t = x as i64;
    let frac = x - t as f64;
    if frac >= 0.5 {
        t.saturating_add(1)
    } else if frac <= -0.5 {
        t.saturating_sub(1)
    } else {
        t
    }
}

/// A duration or a point in time, in nanoseconds.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct Nanos(pub u64);

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);
    pub const MICROSECOND: Nanos = Nanos(1_000);
    pub const MILLISECOND: Nanos = Nanos(1_000_000);
    pub const SECOND: Nanos = Nanos(1_000_000_000);

    pub const fn from_micros(us: u64) -> Nanos {
        Nanos(us * 1_000)
    }
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms * 1_000_000)
    }
    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s * 1_000_000_000)
    }
    pub const fn as_u64(self) -> u64 {
        self.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
    pub fn as_micros_f64(self) -> f64 {
        self.0 as f64 / 1e3
    }
    pub fn saturating_sub(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(other.0))
    }
    pub fn checked_add(self, other: Nanos) -> Option<Nanos> {
        self.0.checked_add(other.0).map(Nanos)
    }
}

impl std::ops::Add for Nanos {
    type Output = Nanos;
    fn add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0 + rhs.0)
    }
}

impl std::ops::Sub for Nanos {
    type Output = Nanos;
    fn sub(self, rhs: Nanos) -> Nanos {
        Nanos(self.0 - rhs.0)
    }
}

#[cfg(test)]
mod tests {
    use super::round_i64;
    use proptest::prelude::*;

    #[test]
    fn rounding_matches_the_standard_library_at_the_edges() {
        for x in [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            2.5,
            -2.5,
            0.49999999999999994,
            -0.49999999999999994,
            4_503_599_627_370_495.5,
            -4_503_599_627_370_495.5,
            f64::NAN,
            1e300,
            -1e300,
        ] {
            assert_eq!(round_i64(x), x.round() as i64, "{x}");
        }
    }

    proptest! {
        #[test]
        fn rounding_matches_the_standard_library(x in -4.5e15f64..4.5e15) {
            prop_assert_eq!(round_i64(x), x.round() as i64);
        }

        #[test]
        fn rounding_ticks_times_a_rate_matches(ticks in -(1i64 << 40)..(1i64 << 40), npt in 0.1f64..10.0) {
            let x = ticks as f64 * npt;
            prop_assert_eq!(round_i64(x), x.round() as i64);
        }
    }
}
