//! Time strings, as Hourglass's Appendix A defines them: "Times are self-describing; valid
//! examples are: 3m, 1.5s, 1020ms, 87.0us."
//!
//! A time string is a non-negative decimal number followed by a unit: `ns`, `us` (or `µs`),
//! `ms`, `s`, `m` (or `min`) and `h`; several such parts in a row add up (`1h30m`, `1s500ms`). The value is converted to integer nanoseconds exactly, by
//! decimal arithmetic (no floating point): `1.5s` is 1 500 000 000 ns and `0.1ms` is 100 000 ns.
//! A value that needs a fraction of a nanosecond, or that does not fit in 64 bits of
//! nanoseconds (about 584 years), is an error, never a silent rounding or wrap.

use crate::units::Nanos;
use thiserror::Error;

/// Why a time string was refused. Each message names the input and says how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DurationError {
    #[error("empty time: give a number with a unit, such as 10ms or 1.5s")]
    Empty,
    #[error("time '{0}' has no unit: write {0}s for seconds (what cyclictest's -D {0} means), or {0}ms, {0}us, {0}ns")]
    MissingUnit(String),
    #[error("time '{input}' has unknown unit '{unit}': use ns, us, ms, s, m, h or d")]
    UnknownUnit { input: String, unit: String },
    #[error("time '{0}' is negative: times must be zero or more")]
    Negative(String),
    #[error("time '{0}' is not a number with a unit (examples: 3m, 1.5s, 1020ms, 87.0us, 1h30m)")]
    Malformed(String),
    #[error("time '{0}' is too large: the limit is about 584 years")]
    Overflow(String),
    #[error("time '{0}' is finer than 1 ns: use at most {1} decimals with this unit")]
    TooPrecise(String, usize),
}

/// Nanoseconds per unit, for each accepted unit spelling.
fn unit_scale(unit: &str) -> Option<(u64, usize)> {
    // (nanoseconds per unit, decimals that still give whole nanoseconds)
    Some(match unit {
        "ns" => (1, 0),
        "us" | "µs" | "μs" => (1_000, 3),
        "ms" => (1_000_000, 6),
        "s" => (1_000_000_000, 9),
        "m" | "min" => (60_000_000_000, 11),
        "h" => (3_600_000_000_000, 13),
        "d" => (86_400_000_000_000, 14),
        _ => return None,
    })
}

/// Parses a self-describing time string such as `3m`, `1.5s`, `1020ms`, `87.0us` or `250ns`.
pub fn parse(input: &str) -> Result<Nanos, DurationError> {
    parse_inner(input, false)
}

/// Like [`parse`], but a bare integer (no unit) means nanoseconds. Used where files and flags
/// are documented to accept "units or bare integers, which mean nanoseconds".
pub fn parse_or_ns(input: &str) -> Result<Nanos, DurationError> {
    parse_inner(input, true)
}

fn parse_inner(input: &str, bare_is_ns: bool) -> Result<Nanos, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative(s.to_string()));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    let mut total: u64 = 0;
    let mut first = true;
    while first || !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(split);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let part = segment(s, number, unit.trim(), first && next.is_empty(), bare_is_ns)?;
        total = total
            .checked_add(part)
            .ok_or_else(|| DurationError::Overflow(s.to_string()))?;
        rest = next;
        first = false;
    }
    Ok(Nanos(total))
}

/// One `NUMBER UNIT` part of the time string `whole` (`1h30m` has two), in nanoseconds.
/// `alone`: the part is the whole string, so a bare number may mean nanoseconds (`bare_is_ns`)
/// and an unknown unit is named.
fn segment(
    whole: &str,
    number: &str,
    unit: &str,
    alone: bool,
    bare_is_ns: bool,
) -> Result<u64, DurationError> {
    let malformed = || DurationError::Malformed(whole.to_string());
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(malformed());
    }
    let (scale, max_decimals) = if unit.is_empty() {
        if !alone {
            return Err(malformed());
        }
        if bare_is_ns && !number.contains('.') {
            (1, 0)
        } else {
            return Err(DurationError::MissingUnit(whole.to_string()));
        }
    } else {
        match unit_scale(unit) {
            Some(v) => v,
            None if alone && unit.chars().all(char::is_alphabetic) => {
                return Err(DurationError::UnknownUnit {
                    input: whole.to_string(),
                    unit: unit.to_string(),
                })
            }
            None => return Err(malformed()),
        }
    };
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let overflow = || DurationError::Overflow(whole.to_string());
    let mut total: u64 = 0;
    for c in int_part.chars() {
        let d = u64::from(c as u8 - b'0');
        total = total
            .checked_mul(10)
            .and_then(|t| t.checked_add(d))
            .ok_or_else(overflow)?;
    }
    total = total.checked_mul(scale).ok_or_else(overflow)?;
    let frac = frac_part.trim_end_matches('0');
    if frac.len() > max_decimals {
        return Err(DurationError::TooPrecise(whole.to_string(), max_decimals));
    }
    let mut place = scale;
    for c in frac.chars() {
        place /= 10;
        let d = u64::from(c as u8 - b'0');
        total = total.checked_add(d * place).ok_or_else(overflow)?;
    }
    Ok(total)
}

/// Prints the duration with the largest unit that keeps it at or above 1, with up to three
/// decimals and no trailing zeros: `1.5 ms`, `87 µs`, `3 s`, `250 ns`.
impl std::fmt::Display for Nanos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_human(*self))
    }
}

/// Formats a duration for people: the largest unit that keeps the value at or above 1, up to
/// three decimals, trailing zeros removed (`1.5 ms`, `87 µs`, `3 s`, `0 ns`).
pub fn format_human(d: Nanos) -> String {
    let (div, unit) = human_unit(d.0);
    format!("{} {unit}", human_value(d.0, div))
}

/// Formats a range of durations with one unit, that of its upper end: `0-100 µs`,
/// `2.9-3 ms`, `250-500 ns`.
pub fn format_human_range(from: Nanos, to: Nanos) -> String {
    let (div, unit) = human_unit(to.0);
    format!(
        "{}-{} {unit}",
        human_value(from.0, div),
        human_value(to.0, div)
    )
}

/// The unit that keeps `ns` at or above 1: (nanoseconds per unit, its symbol).
fn human_unit(ns: u64) -> (u64, &'static str) {
    if ns >= 1_000_000_000 {
        (1_000_000_000, "s")
    } else if ns >= 1_000_000 {
        (1_000_000, "ms")
    } else if ns >= 1_000 {
        (1_000, "µs")
    } else {
        (1, "ns")
    }
}

/// `ns` in units of `div` nanoseconds, up to three decimals, trailing zeros removed.
fn human_value(ns: u64, div: u64) -> String {
    if div == 1 {
        return ns.to_string();
    }
    let value = ns as f64 / div as f64;
    let text = format!("{value:.3}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// `secs` in its two largest units: `9d`, `7d 4h`, `3h 5m`, `20s`.
pub fn format_coarse(secs: u64) -> String {
    let parts = [
        (secs / 86_400, "d"),
        (secs / 3_600 % 24, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
    ];
    let first = parts.iter().position(|p| p.0 > 0).unwrap_or(3);
    parts[first..(first + 2).min(4)]
        .iter()
        .enumerate()
        .filter(|(i, p)| *i == 0 || p.0 > 0)
        .map(|(_, (n, u))| format!("{n}{u}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Formats a duration as a time string that [`parse`] reads back exactly (`1500us` → `1.5ms`).
pub fn format_exact(d: Nanos) -> String {
    let ns = d.0;
    for (scale, unit) in [(1_000_000_000u64, "s"), (1_000_000, "ms"), (1_000, "us")] {
        if ns >= scale {
            let int = ns / scale;
            let frac = ns % scale;
            if frac == 0 {
                return format!("{int}{unit}");
            }
            let width = scale.ilog10() as usize;
            let digits = format!("{frac:0width$}");
            return format!("{int}.{}{unit}", digits.trim_end_matches('0'));
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn appendix_a_examples() {
        assert_eq!(parse("3m"), Ok(Nanos(180_000_000_000)));
        assert_eq!(parse("1.5s"), Ok(Nanos(1_500_000_000)));
        assert_eq!(parse("1020ms"), Ok(Nanos(1_020_000_000)));
        assert_eq!(parse("87.0us"), Ok(Nanos(87_000)));
        assert_eq!(parse("250ns"), Ok(Nanos(250)));
        assert_eq!(parse("0.9ms"), Ok(Nanos(900_000)));
        assert_eq!(parse("5.3ms"), Ok(Nanos(5_300_000)));
        assert_eq!(parse("87µs"), Ok(Nanos(87_000)));
        assert_eq!(parse("2h"), Ok(Nanos(7_200_000_000_000)));
        assert_eq!(parse("1min"), Ok(Nanos(60_000_000_000)));
        assert_eq!(parse(" 10ms "), Ok(Nanos(10_000_000)));
        assert_eq!(parse("0s"), Ok(Nanos(0)));
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(parse(""), Err(DurationError::Empty));
        assert_eq!(parse("10"), Err(DurationError::MissingUnit("10".into())));
        assert!(matches!(
            parse("10parsecs"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert_eq!(parse("-1s"), Err(DurationError::Negative("-1s".into())));
        assert!(matches!(parse("1.2.3s"), Err(DurationError::Malformed(_))));
        assert!(matches!(parse("ms"), Err(DurationError::Malformed(_))));
        assert!(matches!(parse("1e3ms"), Err(DurationError::Malformed(_))));
        assert!(matches!(
            parse("99999999999h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse("18446744073709551616ns"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse("0.5ns"),
            Err(DurationError::TooPrecise(_, 0))
        ));
        assert!(matches!(
            parse("1.0000000001s"),
            Err(DurationError::TooPrecise(_, 9))
        ));
        let msg = parse("10").unwrap_err().to_string();
        assert!(msg.contains("10ms"), "{msg}");
        let msg = parse("5").unwrap_err().to_string();
        assert!(msg.contains("write 5s for seconds"), "{msg}");
    }

    #[test]
    fn parts_add_up() {
        assert_eq!(parse("1h30m"), Ok(Nanos(5_400_000_000_000)));
        assert_eq!(parse("1s500ms"), Ok(Nanos(1_500_000_000)));
        assert_eq!(parse("2m0.5s"), Ok(Nanos(120_500_000_000)));
        assert_eq!(parse_or_ns("1us5ns"), Ok(Nanos(1_005)));
        // Each part overflows alone, or only their sum does: too large either way.
        assert_eq!(
            parse("5h999999999999m"),
            Err(DurationError::Overflow("5h999999999999m".into()))
        );
        assert_eq!(
            parse("18446744073709551615ns1ns"),
            Err(DurationError::Overflow("18446744073709551615ns1ns".into()))
        );
        for bad in ["1h30", "1h-30m", "1x2s", "1s.", "s1s"] {
            assert!(
                matches!(parse(bad), Err(DurationError::Malformed(_))),
                "{bad}: {:?}",
                parse(bad)
            );
        }
    }

    #[test]
    fn bare_integers_are_nanoseconds_where_allowed() {
        assert_eq!(parse_or_ns("1500"), Ok(Nanos(1500)));
        assert_eq!(parse_or_ns("3ms"), Ok(Nanos(3_000_000)));
        assert!(matches!(
            parse_or_ns("1.5"),
            Err(DurationError::MissingUnit(_))
        ));
    }

    #[test]
    fn human_format() {
        assert_eq!(format_human(Nanos(1_500_000)), "1.5 ms");
        assert_eq!(format_human(Nanos(87_000)), "87 µs");
        assert_eq!(format_human(Nanos(3_000_000_000)), "3 s");
        assert_eq!(format_human(Nanos(250)), "250 ns");
        assert_eq!(format_human(Nanos(1_234_567)), "1.235 ms");
        assert_eq!(format_human(Nanos(0)), "0 ns");
    }

    #[test]
    fn human_ranges_share_one_unit() {
        assert_eq!(format_human_range(Nanos(0), Nanos(100_000)), "0-100 µs");
        assert_eq!(
            format_human_range(Nanos(2_900_000), Nanos(3_000_000)),
            "2.9-3 ms"
        );
        assert_eq!(format_human_range(Nanos(250), Nanos(500)), "250-500 ns");
        assert_eq!(format_human_range(Nanos(900), Nanos(1_000)), "0.9-1 µs");
    }

    proptest! {
        #[test]
        fn exact_format_round_trips(ns in any::<u64>()) {
            prop_assert_eq!(parse(&format_exact(Nanos(ns))), Ok(Nanos(ns)));
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,24}") {
            let _ = parse(&s);
            let _ = parse_or_ns(&s);
        }

        #[test]
        fn decimal_milliseconds_are_exact(int in 0u64..1_000_000, frac in 0u64..1_000_000) {
            let text = format!("{int}.{frac:06}ms");
            prop_assert_eq!(parse(&text), Ok(Nanos(int * 1_000_000 + frac)));
        }
    }
}
