//! The monitor's metrics in the OpenMetrics text format, encoded by the `prometheus-client`
//! crate from the live figures at each scrape.
//!
//! Names follow Prometheus's conventions (base unit seconds, `_total` counters, one `cpu`
//! label per measured CPU):
//!
//! - `sandglass_timer_latency_seconds` (histogram): every release's lateness, corrected for
//!   coordinated omission as the runs store it; 161 log-spaced buckets from 1 µs to 1.05 s,
//!   eight per doubling, so that `histogram_quantile` is within 9.05 % of the exact quantile
//!   above 1 µs ([`sandglass::live::RELATIVE_ERROR`]);
//! - `sandglass_timer_releases_total`, `sandglass_timer_missed_releases_total` (counters);
//! - `sandglass_timer_latency_last_seconds` (gauge): the latest release's lateness;
//! - `sandglass_monitor_segments_total` (counter), `sandglass_monitor_duty_ratio` (gauge);
//! - `sandglass_monitor_cause_delays` (gauge, label `cause`): what the last completed segment's
//!   sampler named for its largest delays;
//! - `sandglass_build_info` (gauge, always 1): version, commit, host, kernel.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use sandglass::live::{self, Live};
use std::sync::Arc;

/// What a scrape encodes.
#[derive(Debug)]
pub struct Exposition {
    live: Arc<Live>,
    host: String,
    kernel: String,
}

impl Exposition {
    pub fn new(live: Arc<Live>) -> Exposition {
        let s = sandglass::system::snapshot();
        Exposition {
            live,
            host: s.hostname,
            kernel: s.kernel_release,
        }
    }

    /// The whole exposition, ending with `# EOF`.
    pub fn encode(self: &Arc<Self>) -> Result<String, std::fmt::Error> {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.clone()));
        let mut out = String::with_capacity(64 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
        Ok(out)
    }
}

/// What the HTTP endpoint serves at `/metrics`: the exposition, encoded at each scrape in
/// the format the scraper asked for.
pub struct Endpoint(pub Arc<Exposition>);

impl sandglass_http::Exposition for Endpoint {
    fn encode(&self, format: sandglass_http::Format) -> Option<String> {
        let text = self.0.encode().ok()?;
        Some(match format {
            sandglass_http::Format::OpenMetrics => text,
            sandglass_http::Format::PrometheusText => prometheus_text(&text),
        })
    }
}

/// The Prometheus text format (version 0.0.4) of an OpenMetrics exposition, for clients that
/// do not ask for OpenMetrics (curl, promtool, older scrapers): a counter's family is named
/// with its `_total` suffix, as its samples are, and there is no `# EOF`. Everything else is
/// the same text.
pub fn prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        match renamed {
            Some(r) => out.push_str(&r),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let cpus = self.live.snapshot();
        let bounds: Vec<f64> = (0..live::BUCKETS)
            .map(|k| live::upper_ns(k) / 1e9)
            .chain(std::iter::once(f64::INFINITY))
            .collect();
        {
            let mut m = enc.encode_descriptor(
                "sandglass_timer_latency_seconds",
                "Timer wakeup latency of every release (corrected for coordinated omission)",
                None,
                MetricType::Histogram,
            )?;
            for c in &cpus {
                let cpu = c.cpu.to_string();
                let labels = [("cpu", cpu.as_str())];
                let buckets: Vec<(f64, u64)> = bounds
                    .iter()
                    .copied()
                    .zip(c.buckets.iter().copied())
                    .collect();
                m.encode_family(&labels)?
                    .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                        c.sum_ns as f64 / 1e9,
                        c.count(),
                        &buckets,
                        None,
                    )?;
            }
        }
        let counter = |enc: &mut DescriptorEncoder,
                       name: &str,
                       help: &str,
                       f: &dyn Fn(&live::CpuSnapshot) -> u64|
         -> Result<(), std::fmt::Error> {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for c in &cpus {
                let cpu = c.cpu.to_string();
                ConstCounter::new(f(c)).encode(m.encode_family(&[("cpu", cpu.as_str())])?)?;
            }
            Ok(())
        };
        counter(
            &mut enc,
            "sandglass_timer_releases",
            "Releases measured (each wakeup's release and every missed one)",
            &|c| c.releases,
        )?;
        counter(
            &mut enc,
            "sandglass_timer_missed_releases",
            "Releases that fell due before the wakeup that served them",
            &|c| c.missed,
        )?;
        {
            let mut m = enc.encode_descriptor(
                "sandglass_timer_latency_last_seconds",
                "Lateness of the latest release",
                None,
                MetricType::Gauge,
            )?;
            for c in &cpus {
                let cpu = c.cpu.to_string();
                ConstGauge::new(c.current_ns as f64 / 1e9)
                    .encode(m.encode_family(&[("cpu", cpu.as_str())])?)?;
            }
        }
        let seg = self.live.segment();
        ConstCounter::new(seg.completed).encode(enc.encode_descriptor(
            "sandglass_monitor_segments",
            "Segments completed and catalogued since the monitor started",
            None,
            MetricType::Counter,
        )?)?;
        ConstGauge::new(seg.duty).encode(enc.encode_descriptor(
            "sandglass_monitor_duty_ratio",
            "Share of the time measured (--duty)",
            None,
            MetricType::Gauge,
        )?)?;
        if !seg.causes.is_empty() {
            let mut m = enc.encode_descriptor(
                "sandglass_monitor_cause_delays",
                "Largest delays of the last completed segment, by the cause the sampler named",
                None,
                MetricType::Gauge,
            )?;
            for (cause, n) in &seg.causes {
                ConstGauge::new(*n as i64)
                    .encode(m.encode_family(&[("cause", cause.as_str())])?)?;
            }
        }
        // An info metric as a gauge of 1, which every Prometheus text parser reads (the
        // OpenMetrics `info` type is unknown to promtool's and older scrapers' parsers).
        let mut m = enc.encode_descriptor(
            "sandglass_build_info",
            "The sandglass that measures, and the machine (always 1)",
            None,
            MetricType::Gauge,
        )?;
        let labels = [
            ("version", env!("CARGO_PKG_VERSION")),
            ("commit", env!("SANDGLASS_GIT_COMMIT")),
            ("host", self.host.as_str()),
            ("kernel", self.kernel.as_str()),
        ];
        ConstGauge::new(1i64).encode(m.encode_family(&labels)?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_every_bucket_and_counter() {
        let live = Arc::new(Live::new(&[1]));
        let c = live.cpu(1).expect("cpu 1");
        c.release(20_000, false);
        c.release(3_000_000, true);
        let text = Arc::new(Exposition::new(live)).encode().expect("encode");
        assert!(text.contains("# TYPE sandglass_timer_latency_seconds histogram"));
        let buckets = text
            .lines()
            .filter(|l| l.starts_with("sandglass_timer_latency_seconds_bucket{"))
            .count();
        assert_eq!(buckets, live::BUCKETS + 1);
        assert!(text.contains("sandglass_timer_latency_seconds_count{cpu=\"1\"} 2"));
        assert!(
            text.contains("sandglass_timer_latency_seconds_bucket{le=\"+Inf\",cpu=\"1\"} 2"),
            "{text}"
        );
        assert!(text.contains("sandglass_timer_missed_releases_total{cpu=\"1\"} 1"));
        assert!(text.contains("sandglass_timer_releases_total{cpu=\"1\"} 2"));
        assert!(text.contains("sandglass_build_info{"));
        assert!(text.trim_end().ends_with("# EOF"));
        let old = prometheus_text(&text);
        assert!(old.contains("# TYPE sandglass_timer_releases_total counter\n"));
        assert!(old.contains("# HELP sandglass_timer_releases_total Releases"));
        assert!(old.contains("# TYPE sandglass_timer_latency_seconds histogram\n"));
        assert!(!old.contains("# EOF"));
        assert_eq!(old.lines().count(), text.lines().count() - 1);
    }
}
