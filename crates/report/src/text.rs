//! Small formatting helpers shared by the text renderers.

use sandglass::Nanos;

/// A signed duration in nanoseconds for people: `-3 µs`, `1.5 ms`.
pub fn signed(ns: i64) -> String {
    if ns < 0 {
        format!("-{}", Nanos(ns.unsigned_abs()))
    } else {
        Nanos(ns as u64).to_string()
    }
}

/// A count with thousands separators: `1,234,567`.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A share as a percentage with one decimal: `98.7%`.
pub fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234), "1,234");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(signed(-3000), "-3 µs");
        assert_eq!(signed(1_500_000), "1.5 ms");
        assert_eq!(percent(0.987), "98.7%");
    }
}
