//! Reading the HDR histograms the probes record: percentiles, counts above thresholds, binned
//! views, and HdrHistogram's interval-log format.
//!
//! Percentiles follow HdrHistogram: the value at quantile q is the bucket holding the sample of
//! rank ⌈q·n⌉ (nearest rank, as in [`crate::stats`]), reported as the highest value equivalent
//! to it, so it lies between the exact sample and 0.1% above it (three significant digits),
//! and never above the exact maximum (see [`percentiles`]).
//!
//! **One figure, one name.** A run on several CPUs has one distribution per CPU. Its figures for
//! the whole run are the *worst CPU's* ([`worst_cpu`]): each percentile, the maximum, the mean
//! and the standard deviation are the largest over the CPUs, the minimum the smallest, and the
//! count the sum. Study tables, `runs`, `compare`, `report`, the HTML page and the analyses'
//! `--run` inputs all give this figure, so one run's p99 is the same number everywhere
//! (docs/json.md). The CPUs are pooled only where a test needs every sample (`compare`'s
//! Mann–Whitney test), and the output says so.

use crate::engine::record::new_histogram;
use crate::store::append::AppendFile;
use crate::store::{FileEntry, StoreError};
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
pub use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The percentiles sandglass reports for a distribution of nanoseconds.
pub const QUANTILES: [(f64, &str); 7] = [
    (0.5, "p50"),
    (0.9, "p90"),
    (0.99, "p99"),
    (0.999, "p99.9"),
    (0.9999, "p99.99"),
    (0.99999, "p99.999"),
    (0.999999, "p99.9999"),
];

/// A distribution's summary, in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Percentiles {
    pub count: u64,
    pub min: i64,
    pub mean: f64,
    pub stddev: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    #[serde(rename = "p99.9")]
    pub p99_9: u64,
    #[serde(rename = "p99.99")]
    pub p99_99: u64,
    #[serde(rename = "p99.999")]
    pub p99_999: u64,
    #[serde(rename = "p99.9999")]
    pub p99_9999: u64,
    pub max: i64,
}

impl Percentiles {
    /// The value at one of [`QUANTILES`] by its name (`"p99.9"`), or the maximum (`"max"`).
    pub fn get(&self, name: &str) -> Option<u64> {
        Some(match name {
            "p50" => self.p50,
            "p90" => self.p90,
            "p99" => self.p99,
            "p99.9" => self.p99_9,
            "p99.99" => self.p99_99,
            "p99.999" => self.p99_999,
            "p99.9999" => self.p99_9999,
            "max" => self.max.max(0) as u64,
            _ => return None,
        })
    }

    /// The highest percentile that `count` samples can support: p99.99 needs at least 10 000.
    pub fn supported(count: u64) -> Vec<&'static str> {
        QUANTILES
            .iter()
            .filter(|(q, _)| count as f64 >= 1.0 / (1.0 - q) - 1e-6)
            .map(|(_, n)| *n)
            .collect()
    }
}

/// The summary of `h`; `min` and `max` are the exact signed extremes when known (the histogram
/// holds values at three significant digits and no negative values). A percentile is the
/// highest value its histogram bucket stands for, so it can exceed the exact maximum by the
/// bucket's width: it is then reported as that maximum, which is closer to the truth and never
/// shows a p99.99 above the max.
pub fn percentiles(
    h: &Histogram<u64>,
    exact_min: Option<i64>,
    exact_max: Option<i64>,
) -> Option<Percentiles> {
    if h.is_empty() {
        return None;
    }
    let cap = exact_max.map(|m| m.max(0) as u64);
    let q = |x: f64| {
        let v = h.value_at_quantile(x);
        cap.map_or(v, |c| v.min(c))
    };
    Some(Percentiles {
        count: h.len(),
        min: exact_min.unwrap_or(h.min() as i64),
        mean: h.mean(),
        stddev: h.stdev(),
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        p99_9: q(0.999),
        p99_99: q(0.9999),
        p99_999: q(0.99999),
        p99_9999: q(0.999999),
        max: exact_max.unwrap_or(h.max() as i64),
    })
}

/// The whole-run figures of several CPUs' distributions: the worst CPU's, figure by figure
/// (each percentile, the maximum, the mean and the standard deviation the largest over the
/// CPUs; the minimum the smallest; the count the sum). `None` when no CPU has samples.
///
/// The figures of one CPU are this function's answer for a run on that CPU alone, so a
/// one-CPU run reads the same either way.
pub fn worst_cpu<'a>(per_cpu: impl IntoIterator<Item = &'a Percentiles>) -> Option<Percentiles> {
    per_cpu.into_iter().cloned().reduce(|a, b| Percentiles {
        count: a.count + b.count,
        min: a.min.min(b.min),
        mean: a.mean.max(b.mean),
        stddev: a.stddev.max(b.stddev),
        p50: a.p50.max(b.p50),
        p90: a.p90.max(b.p90),
        p99: a.p99.max(b.p99),
        p99_9: a.p99_9.max(b.p99_9),
        p99_99: a.p99_99.max(b.p99_99),
        p99_999: a.p99_999.max(b.p99_999),
        p99_9999: a.p99_9999.max(b.p99_9999),
        max: a.max.max(b.max),
    })
}

/// Values recorded above `threshold_ns` (to the histogram's precision).
pub fn count_above(h: &Histogram<u64>, threshold_ns: u64) -> u64 {
    if threshold_ns >= h.max() {
        return 0;
    }
    h.len() - h.count_between(0, threshold_ns)
}

/// One bin of a binned view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Bin {
    pub from_ns: u64,
    pub to_ns: u64,
    pub count: u64,
}

/// Linear bins of width `bin_ns` from 0, only the non-empty ones (the interval histogram of
/// Jones & Regehr, 100 µs bins by default).
pub fn linear_bins(h: &Histogram<u64>, bin_ns: u64) -> Vec<Bin> {
    let bin_ns = bin_ns.max(1);
    let mut bins: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for v in h.iter_recorded() {
        let k = v.value_iterated_to() / bin_ns;
        *bins.entry(k).or_insert(0) += v.count_at_value();
    }
    bins.into_iter()
        .map(|(k, c)| Bin {
            from_ns: k * bin_ns,
            to_ns: (k + 1) * bin_ns,
            count: c,
        })
        .collect()
}

/// Bins on a 1-2-5 series (…, 1 µs, 2 µs, 5 µs, 10 µs, …), only the non-empty ones: a compact
/// logarithmic view for people.
pub fn log_bins(h: &Histogram<u64>) -> Vec<Bin> {
    let mut bins: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for v in h.iter_recorded() {
        let up = crate::analysis::trace::bin_upper(v.value_iterated_to());
        *bins.entry(up).or_insert(0) += v.count_at_value();
    }
    bins.into_iter()
        .map(|(up, c)| Bin {
            from_ns: lower_125(up),
            to_ns: up,
            count: c,
        })
        .collect()
}

/// The edge below `up` in the 1-2-5 series (0 below 1).
fn lower_125(up: u64) -> u64 {
    if up <= 1 {
        return 0;
    }
    let digits = up.to_string();
    if digits.starts_with('5') {
        up / 5 * 2
    } else {
        up / 2
    }
}

/// A histogram of `values`.
pub fn histogram_of(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
    let mut h = new_histogram();
    for v in values {
        h.saturating_record(v);
    }
    h
}

/// One entry of an interval log: `histogram` covered `[start_s, start_s + duration_s)` of the run.
pub struct LogEntry<'a> {
    pub tag: String,
    pub start_s: f64,
    pub duration_s: f64,
    pub histogram: &'a Histogram<u64>,
}

/// Writes `entries` in HdrHistogram's interval-log format (V2, compressed), readable by
/// HdrHistogram's `HistogramLogProcessor` and every HdrHistogram implementation. Values are
/// nanoseconds; with `start`, the log's `StartTime` and `BaseTime` headers place the entries'
/// times (seconds from the run's start) on the wall clock.
pub fn write_interval_log(
    comments: &[String],
    start: Option<SystemTime>,
    entries: &[LogEntry<'_>],
) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    for c in comments {
        builder.add_comment(c);
    }
    if let Some(t) = start {
        builder.with_start_time(t).with_base_time(t);
    }
    let mut w = builder
        .begin_log_with(&mut buf, &mut serializer)
        .map_err(std::io::Error::other)?;
    for e in entries {
        let tag = Tag::new(&e.tag);
        w.write_histogram(
            e.histogram,
            Duration::from_secs_f64(e.start_s.max(0.0)),
            Duration::from_secs_f64(e.duration_s.max(0.0)),
            tag,
        )
        .map_err(|err| std::io::Error::other(format!("{err:?}")))?;
    }
    drop(w);
    Ok(buf)
}

/// An interval log written as the run goes: one entry per CPU and closed second, appended and
/// handed to the kernel as each second closes, so the memory it needs does not grow and a run
/// that ends abruptly keeps every second it closed.
pub struct IntervalLog {
    path: PathBuf,
    file: AppendFile,
    serializer: V2DeflateSerializer,
}

impl IntervalLog {
    /// Creates the log `name` in `dir` and writes its headers: `comments`, then `StartTime`
    /// and `BaseTime` (the run's time zero on the wall clock).
    pub fn create(
        dir: &Path,
        name: &str,
        format: &'static str,
        description: &'static str,
        comments: &[String],
        start: SystemTime,
    ) -> Result<IntervalLog, StoreError> {
        let mut log = IntervalLog {
            path: dir.join(name),
            file: AppendFile::create(dir, name, format, description)?,
            serializer: V2DeflateSerializer::new(),
        };
        let mut b = IntervalLogWriterBuilder::new();
        for c in comments {
            b.add_comment(c);
        }
        b.with_start_time(start).with_base_time(start);
        let path = dir.join(name);
        b.begin_log_with(&mut log.file, &mut log.serializer)
            .map_err(|source| StoreError::Write { path, source })?;
        Ok(log)
    }

    /// Appends the histogram `h` of `[start_s, start_s + duration_s)` tagged `tag`.
    pub fn write(
        &mut self,
        tag: &str,
        start_s: f64,
        duration_s: f64,
        h: &Histogram<u64>,
    ) -> Result<(), StoreError> {
        let path = &self.path;
        let mut w = IntervalLogWriterBuilder::new()
            .begin_log_with(&mut self.file, &mut self.serializer)
            .map_err(|source| StoreError::Write {
                path: path.clone(),
                source,
            })?;
        w.write_histogram(
            h,
            Duration::from_secs_f64(start_s.max(0.0)),
            Duration::from_secs_f64(duration_s.max(0.0)),
            Tag::new(tag),
        )
        .map_err(|e| StoreError::Write {
            path: path.clone(),
            source: std::io::Error::other(e.to_string()),
        })
    }

    /// Hands what was written to the kernel.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.file.flush()
    }

    pub fn finish(self) -> Result<FileEntry, StoreError> {
        self.file.finish()
    }
}

/// One histogram read back from an interval log.
pub struct ReadEntry {
    pub tag: Option<String>,
    pub start_s: f64,
    pub duration_s: f64,
    pub histogram: Histogram<u64>,
}

/// An interval log entry that does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("interval log entry {entry}: {detail}")]
pub struct LogError {
    pub entry: usize,
    pub detail: String,
}

/// The entries of interval log `bytes` whose tag `keep` accepts, decoded; an entry that does not
/// decode is an error naming it.
pub fn read_interval_log(
    bytes: &[u8],
    keep: impl Fn(Option<&str>) -> bool,
) -> Result<Vec<ReadEntry>, LogError> {
    use base64::Engine as _;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry as Parsed};
    use hdrhistogram::serialization::Deserializer;
    let mut de = Deserializer::new();
    let mut out = Vec::new();
    for (k, e) in IntervalLogIterator::new(bytes).enumerate() {
        let err = |detail: String| LogError {
            entry: k + 1,
            detail,
        };
        let Parsed::Interval(i) = e.map_err(|e| err(format!("{e:?}")))? else {
            continue;
        };
        let tag = i.tag().map(|t| t.as_str());
        if !keep(tag) {
            continue;
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(i.encoded_histogram())
            .map_err(|e| err(e.to_string()))?;
        let histogram: Histogram<u64> = de
            .deserialize(&mut &raw[..])
            .map_err(|e| err(format!("{e:?}")))?;
        out.push(ReadEntry {
            tag: tag.map(str::to_string),
            start_s: i.start_timestamp().as_secs_f64(),
            duration_s: i.duration().as_secs_f64(),
            histogram,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry as Parsed};
    use hdrhistogram::serialization::Deserializer;
    use proptest::prelude::*;

    #[test]
    fn bins() {
        let h = histogram_of([50_000u64, 120_000, 130_000, 990_000, 3]);
        let l = linear_bins(&h, 100_000);
        assert_eq!(
            l.iter().map(|b| (b.from_ns, b.count)).collect::<Vec<_>>(),
            vec![(0, 2), (100_000, 2), (900_000, 1)]
        );
        let g = log_bins(&h);
        assert_eq!(g.first().map(|b| (b.from_ns, b.to_ns)), Some((2, 5)));
        assert_eq!(g.iter().map(|b| b.count).sum::<u64>(), 5);
        assert_eq!(count_above(&h, 100_000), 3);
        assert_eq!(count_above(&h, 10_000_000), 0);
    }

    #[test]
    fn the_worst_cpu_is_each_figures_largest() {
        let a = percentiles(&histogram_of([10u64, 20, 30, 4000]), Some(10), Some(4000)).expect("a");
        let b = percentiles(&histogram_of([1u64, 500, 600, 700]), Some(1), Some(700)).expect("b");
        let w = worst_cpu([&a, &b]).expect("two CPUs");
        assert_eq!(w.count, 8);
        assert_eq!(w.min, 1);
        assert_eq!(w.max, 4000);
        // The median comes from b, the maximum from a: each figure is its own worst.
        assert_eq!(w.p50, b.p50);
        assert!(w.p50 > a.p50);
        assert_eq!(w.get("max"), Some(4000));
        assert_eq!(w.mean, a.mean.max(b.mean));
        // One CPU's figures are its own.
        assert_eq!(worst_cpu([&a]), Some(a.clone()));
        assert_eq!(worst_cpu(std::iter::empty()), None);
    }

    #[test]
    fn supported_percentiles_follow_the_count() {
        assert_eq!(Percentiles::supported(99), vec!["p50", "p90"]);
        assert_eq!(Percentiles::supported(100).last(), Some(&"p99"));
        assert_eq!(Percentiles::supported(10_000).last(), Some(&"p99.99"));
        assert_eq!(Percentiles::supported(1_000_000).len(), 7);
    }

    #[test]
    fn interval_log_round_trips() {
        let a = histogram_of([1000u64, 2000, 3000]);
        let b = histogram_of([50_000u64]);
        let bytes = write_interval_log(
            &["sandglass timer".to_string()],
            None,
            &[
                LogEntry {
                    tag: "cpu1".into(),
                    start_s: 0.0,
                    duration_s: 1.0,
                    histogram: &a,
                },
                LogEntry {
                    tag: "cpu1".into(),
                    start_s: 1.0,
                    duration_s: 1.0,
                    histogram: &b,
                },
            ],
        )
        .expect("log");
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.starts_with("#sandglass timer"), "{text}");
        let mut total = 0;
        let mut de = Deserializer::new();
        for e in IntervalLogIterator::new(&bytes) {
            if let Ok(Parsed::Interval(i)) = e {
                assert_eq!(i.tag().map(|t| t.as_str()), Some("cpu1"));
                let raw = base64_decode(i.encoded_histogram());
                let h: Histogram<u64> = de.deserialize(&mut &raw[..]).expect("decode");
                total += h.len();
            }
        }
        assert_eq!(total, 4);
        let back = read_interval_log(&bytes, |t| t == Some("cpu1")).expect("read");
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].histogram.len(), 1);
        assert_eq!(back[1].start_s, 1.0);
    }

    #[test]
    fn a_streamed_log_has_its_place_in_time() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut log = IntervalLog::create(
            tmp.path(),
            "h.hlog",
            "hdrhistogram-interval-log/1.3",
            "test",
            &["sandglass".to_string()],
            start,
        )
        .expect("create");
        for s in 0..3 {
            log.write("cpu1", s as f64, 1.0, &histogram_of([1000u64 * (s + 1)]))
                .expect("write");
        }
        let e = log.finish().expect("finish");
        let bytes = std::fs::read(tmp.path().join("h.hlog")).expect("read");
        assert_eq!(e.bytes, bytes.len() as u64);
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.contains("#[StartTime: 1700000000.000 (seconds since epoch)]"),
            "{text}"
        );
        assert!(
            text.contains("#[BaseTime: 1700000000.000 (seconds since epoch)]"),
            "{text}"
        );
        let back = read_interval_log(&bytes, |_| true).expect("read");
        assert_eq!(back.len(), 3);
        assert_eq!(back[2].histogram.max(), h_max(3000));
    }

    fn h_max(v: u64) -> u64 {
        histogram_of([v]).max()
    }

    fn base64_decode(s: &str) -> Vec<u8> {
        const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        let mut buf = 0u32;
        let mut bits = 0;
        for c in s.bytes().filter(|&c| c != b'=') {
            let v = T.iter().position(|&t| t == c).unwrap_or(0) as u32;
            buf = (buf << 6) | v;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((buf >> bits) as u8);
            }
        }
        out
    }

    #[test]
    fn no_percentile_exceeds_the_exact_maximum() {
        // 54,117 ns falls in a bucket whose highest value is 54,143 ns at three digits.
        let h = histogram_of([20_000, 30_000, 54_117]);
        assert!(h.value_at_quantile(0.9999) > 54_117);
        let p = percentiles(&h, Some(20_000), Some(54_117)).expect("non-empty");
        assert_eq!((p.p99_99, p.p99_9999, p.max), (54_117, 54_117, 54_117));
        assert_eq!(p.p50, h.value_at_quantile(0.5));
        // Without the exact maximum the histogram's own is used, as before.
        let p = percentiles(&h, None, None).expect("non-empty");
        assert_eq!(p.p99_99, h.value_at_quantile(0.9999));
    }

    proptest! {
        /// Every reported percentile lies between the exact nearest-rank value of the sorted
        /// samples and that value plus the histogram's precision (0.1%).
        #[test]
        fn percentiles_are_within_precision_of_the_exact_values(
            mut xs in proptest::collection::vec(0u64..5_000_000_000, 1..2000)
        ) {
            let h = histogram_of(xs.iter().copied());
            let p = percentiles(&h, None, None).expect("non-empty");
            let mut sorted: Vec<i64> = xs.iter().map(|&x| x as i64).collect();
            sorted.sort_unstable();
            for (q, name) in QUANTILES {
                let exact = stats::quantile_sorted(&sorted, q).expect("non-empty") as u64;
                let got = p.get(name).expect("known");
                prop_assert!(got >= exact, "{name}: {got} < exact {exact}");
                prop_assert!(got <= h.highest_equivalent(exact), "{name}: {got} beyond {exact}");
                prop_assert!((got - exact) as f64 <= exact as f64 * 1e-3 + 1.0);
            }
            // With the exact extremes known, no percentile passes the maximum.
            let (lo, hi) = (sorted[0], sorted[sorted.len() - 1]);
            let capped = percentiles(&h, Some(lo), Some(hi)).expect("non-empty");
            for (q, name) in QUANTILES {
                let exact = stats::quantile_sorted(&sorted, q).expect("non-empty") as u64;
                let got = capped.get(name).expect("known");
                prop_assert!(exact <= got && got <= hi as u64, "{name}: {got} vs {exact}, max {hi}");
            }
            xs.sort_unstable();
        }

        /// Histograms of disjoint parts of the samples (one per second) add up to the histogram
        /// of all of them.
        #[test]
        fn merged_parts_equal_the_total(
            xs in proptest::collection::vec((0u64..20, 0u64..10_000_000), 1..1000)
        ) {
            let total = histogram_of(xs.iter().map(|&(_, v)| v));
            let mut merged = new_histogram();
            for s in 0..20 {
                let part = histogram_of(xs.iter().filter(|&&(k, _)| k == s).map(|&(_, v)| v));
                merged.add(&part).expect("same range");
            }
            prop_assert_eq!(merged.len(), total.len());
            for v in total.iter_recorded() {
                prop_assert_eq!(merged.count_at(v.value_iterated_to()), v.count_at_value());
            }
            prop_assert!(merged == total);
        }
    }
}
