//! Line-oriented data files read by the analyses.
//!
//! * Latency histograms: one `VALUE COUNT` pair per line, VALUE a time with a unit (`250us`) or
//!   integer nanoseconds, possibly negative (an early wakeup), COUNT a whole number. Equal
//!   values are merged. This is the form of cyclictest's `--histfile` once reduced to one CPU,
//!   and of Cota-Robles & Held's latency tables.
//! * Cost measurements for [`crate::analysis::fit`]: `SIZE_BYTES TIME` per line.
//! * Lists of numbers for the statistical tests: any whitespace-separated tokens, each a plain
//!   number or a time with a unit (converted to nanoseconds).
//!
//! In all three, `#` starts a comment that runs to the end of the line, and blank lines are
//! ignored. Every error names the file and the line and shows the expected form.

use super::distribution::Distribution;
use super::fit::Point;
use crate::duration::{self, DurationError};
use std::path::Path;
use thiserror::Error;

/// Why a data file was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DataFileError {
    /// A line that does not have the expected form.
    #[error("{file}:{line}: '{text}' is not {expected}")]
    Malformed {
        /// The file.
        file: String,
        /// The line number.
        line: usize,
        /// The offending line, without its comment.
        text: String,
        /// The expected form, with an example.
        expected: &'static str,
    },
    /// A field that does not parse.
    #[error("{file}:{line}: {field} '{text}' {reason}")]
    BadField {
        /// The file.
        file: String,
        /// The line number.
        line: usize,
        /// Which field.
        field: &'static str,
        /// The field as written.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// More histogram entries than are read.
    #[error("{file}:{line}: more than {limit} histogram entries; merge bins (one line per latency value) or give a shorter histogram")]
    TooMany {
        /// The file.
        file: String,
        /// The line of the first entry over the limit.
        line: usize,
        /// The most allowed.
        limit: usize,
    },
    /// No data at all.
    #[error("{file}: no data: the file needs lines of {expected}")]
    Empty {
        /// The file.
        file: String,
        /// The expected form.
        expected: &'static str,
    },
}

impl DataFileError {
    /// The line the error is about, when there is one.
    pub fn line(&self) -> Option<usize> {
        match self {
            DataFileError::Malformed { line, .. }
            | DataFileError::BadField { line, .. }
            | DataFileError::TooMany { line, .. } => Some(*line),
            DataFileError::Empty { .. } => None,
        }
    }
}

const HISTOGRAM: &str =
    "`VALUE COUNT`: a latency (250us, 1.5ms, or integer nanoseconds) and a whole count, such as `250us 17`";
const POINTS: &str =
    "`SIZE_BYTES TIME`: a size in bytes and a time (160us, or integer nanoseconds), such as `4096 1.2ms`";
const NUMBERS: &str = "numbers (such as 12.5) or times with a unit (such as 80us)";

/// The data lines of `text`: (line number, content without comment), blank ones skipped.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, l)| {
        let content = l.split('#').next().unwrap_or("").trim();
        (!content.is_empty()).then_some((i + 1, content))
    })
}

/// Why a signed time did not parse; the message follows `is not a latency: `.
#[derive(Debug, Error)]
enum SignedNsError {
    #[error(transparent)]
    Duration(#[from] DurationError),
    /// More nanoseconds than an `i64` holds.
    #[error("is too large")]
    TooLarge,
}

/// A signed time: an optional minus sign, then a time with a unit or integer nanoseconds.
fn signed_ns(s: &str) -> Result<i64, SignedNsError> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let ns = duration::parse_or_ns(body)?;
    let v = i64::try_from(ns.0).map_err(|_| SignedNsError::TooLarge)?;
    Ok(if neg { -v } else { v })
}

/// Parses a `VALUE COUNT` histogram. `file` is used in messages.
pub fn parse_histogram(file: &Path, text: &str) -> Result<Distribution, DataFileError> {
    let name = file.display().to_string();
    let mut bins = Vec::new();
    for (line, content) in lines(text) {
        if bins.len() == crate::bounded::HISTOGRAM_ENTRIES {
            return Err(DataFileError::TooMany {
                file: name,
                line,
                limit: crate::bounded::HISTOGRAM_ENTRIES,
            });
        }
        let fields: Vec<&str> = content.split_whitespace().collect();
        let [value, count] = fields[..] else {
            return Err(DataFileError::Malformed {
                file: name,
                line,
                text: content.to_string(),
                expected: HISTOGRAM,
            });
        };
        let v = signed_ns(value).map_err(|reason| DataFileError::BadField {
            file: name.clone(),
            line,
            field: "VALUE",
            text: value.to_string(),
            reason: format!("is not a latency: {reason}"),
        })?;
        let c: u64 = count.parse().map_err(|_| DataFileError::BadField {
            file: name.clone(),
            line,
            field: "COUNT",
            text: count.to_string(),
            reason: "is not a whole number of samples (such as 17)".into(),
        })?;
        bins.push((v, c));
    }
    let d = Distribution::from_bins(bins);
    if d.is_empty() {
        return Err(DataFileError::Empty {
            file: name,
            expected: HISTOGRAM,
        });
    }
    Ok(d)
}

/// Parses `SIZE_BYTES TIME` cost measurements. `file` is used in messages.
pub fn parse_points(file: &Path, text: &str) -> Result<Vec<Point>, DataFileError> {
    let name = file.display().to_string();
    let mut out = Vec::new();
    for (line, content) in lines(text) {
        let fields: Vec<&str> = content.split_whitespace().collect();
        let [size, time] = fields[..] else {
            return Err(DataFileError::Malformed {
                file: name,
                line,
                text: content.to_string(),
                expected: POINTS,
            });
        };
        let size_bytes: u64 = size.parse().map_err(|_| DataFileError::BadField {
            file: name.clone(),
            line,
            field: "SIZE_BYTES",
            text: size.to_string(),
            reason: "is not a whole number of bytes (such as 4096)".into(),
        })?;
        let t = duration::parse_or_ns(time).map_err(|e| DataFileError::BadField {
            file: name.clone(),
            line,
            field: "TIME",
            text: time.to_string(),
            reason: format!("is not a time: {e}"),
        })?;
        out.push(Point {
            size_bytes,
            time_ns: t.0,
        });
    }
    if out.is_empty() {
        return Err(DataFileError::Empty {
            file: name,
            expected: POINTS,
        });
    }
    Ok(out)
}

/// Parses a list of numbers; a token with a time unit is converted to nanoseconds.
pub fn parse_numbers(file: &Path, text: &str) -> Result<Vec<f64>, DataFileError> {
    let name = file.display().to_string();
    let mut out = Vec::new();
    for (line, content) in lines(text) {
        for token in content.split_whitespace() {
            let v = match token.parse::<f64>() {
                Ok(v) if v.is_finite() => v,
                _ => signed_ns(token)
                    .map(|ns| ns as f64)
                    .map_err(|_| DataFileError::BadField {
                        file: name.clone(),
                        line,
                        field: "value",
                        text: token.to_string(),
                        reason: format!("is not one of {NUMBERS}"),
                    })?,
            };
            out.push(v);
        }
    }
    if out.is_empty() {
        return Err(DataFileError::Empty {
            file: name,
            expected: NUMBERS,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(text: &str) -> Result<Distribution, DataFileError> {
        parse_histogram(Path::new("lat.hist"), text)
    }

    #[test]
    fn histogram_with_units_comments_and_blank_lines() {
        let d = hist("# latency histogram\n\n100us 10\n150000 5   # bare ns\n-2us 1\n100us 2\n")
            .expect("valid");
        assert_eq!(d.bins(), &[(-2_000, 1), (100_000, 12), (150_000, 5)]);
        assert_eq!(d.total(), 18);
    }

    #[test]
    fn malformed_histogram_line_names_file_and_line() {
        let e = hist("100us 10\n\n200us\n").expect_err("refused");
        assert_eq!(e.line(), Some(3));
        let m = e.to_string();
        assert!(
            m.starts_with("lat.hist:3:") && m.contains("VALUE COUNT"),
            "{m}"
        );
        let e = hist("100us 10 3\n").expect_err("three fields");
        assert!(e.to_string().starts_with("lat.hist:1:"));
        let e = hist("100parsecs 10\n").expect_err("bad unit");
        assert!(
            matches!(
                e,
                DataFileError::BadField {
                    field: "VALUE",
                    line: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("unknown unit"));
        let e = hist("# c\n100us ten\n").expect_err("bad count");
        assert!(
            matches!(
                e,
                DataFileError::BadField {
                    field: "COUNT",
                    line: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = hist("# nothing\n\n").expect_err("empty");
        assert!(matches!(e, DataFileError::Empty { .. }));
        assert!(e.to_string().starts_with("lat.hist: no data"));
        assert!(matches!(hist("5us 0\n"), Err(DataFileError::Empty { .. })));
    }

    #[test]
    fn points_and_numbers() {
        let p = parse_points(
            Path::new("ipc.txt"),
            "# size time\n1 0.16ms\n32768 8770000\n",
        )
        .expect("valid");
        assert_eq!(
            p,
            vec![
                Point {
                    size_bytes: 1,
                    time_ns: 160_000
                },
                Point {
                    size_bytes: 32_768,
                    time_ns: 8_770_000
                }
            ]
        );
        let e = parse_points(Path::new("ipc.txt"), "4k 1ms\n").expect_err("bad size");
        assert!(
            e.to_string().starts_with("ipc.txt:1: SIZE_BYTES '4k'"),
            "{e}"
        );
        let n = parse_numbers(Path::new("a.txt"), "1.5 2\n# x\n80us -3\n").expect("valid");
        assert_eq!(n, vec![1.5, 2.0, 80_000.0, -3.0]);
        let e = parse_numbers(Path::new("a.txt"), "1\nabc\n").expect_err("bad");
        assert_eq!(e.line(), Some(2));
        assert!(e.to_string().starts_with("a.txt:2:"));
    }
}
