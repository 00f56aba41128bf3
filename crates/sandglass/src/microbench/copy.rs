//! Memory copy bandwidth by block size, alignment and cache level.
//!
//! Dannenberg et al. (§8) timed repeated `bcopy` calls: "Copies of multiples of 4 bytes ran at
//! 10MB/s to 14MB/s ... block sizes ranging from 656 to 65536 bytes ... When block sizes are not
//! multiples of 4 bytes, the transfer rate is between 3.5MB/s and 4.0MB/s." Today the size of
//! the block relative to the caches matters more than its alignment, so the sizes run from a
//! few hundred bytes to well past the last cache level (four times its size, read from
//! `/sys/devices/system/cpu/cpuN/cache`), each in three variants:
//!
//! * `aligned`: source and destination 64-byte aligned, the size a power of two;
//! * `odd-size`: the same buffers, one byte less (not a multiple of 2, 4 or 8);
//! * `odd-offset`: the full size from source + 1 to destination + 3 (neither aligned).
//!
//! One sample is the time of `r` back-to-back copies of the same block (`copy_from_slice`, which
//! is the C library's `memcpy`), with `r` chosen so that a sample lasts at least 20 µs and the
//! clock's cost stays below 0.1%; the distribution is of these samples, and a bandwidth is
//! `r · size / time`. The copying
//! thread is pinned to one CPU. A copy touches both blocks, so a block of size N fits a cache
//! level when 2N does; the table marks where that changes.

use super::Header;
#[cfg(feature = "linux")]
use super::{now, summarize, Session};
use crate::kind::{fig, KeyFigure, OverCpus, Unit, LOAD};
use crate::probe::{array, num, Figures, Probe};
#[cfg(feature = "linux")]
use crate::runner::{Observer, RunContext, RunError};
use crate::stats::Summary;
use crate::units::Nanos;
#[cfg(feature = "linux")]
use crate::warning::Warning;
use crate::RunKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
#[cfg(feature = "linux")]
use std::sync::atomic::{AtomicBool, Ordering};
use thiserror::Error;

/// One cache of a CPU, from `/sys/devices/system/cpu/cpuN/cache/indexM`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CacheLevel {
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    #[serde(rename = "type")]
    pub kind: String,
    pub size_bytes: u64,
    /// The CPUs sharing it, in the kernel's list notation.
    pub shared_cpus: String,
}

impl CacheLevel {
    /// `L1d`, `L2`, `L3`, ...
    pub fn name(&self) -> String {
        match self.kind.as_str() {
            "Data" => format!("L{}d", self.level),
            "Instruction" => format!("L{}i", self.level),
            _ => format!("L{}", self.level),
        }
    }
}

/// Parses a sysfs cache size such as `48K`, `1024K`, `32M` or `512`.
pub fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, scale) = match t.chars().last()? {
        'K' | 'k' => (&t[..t.len() - 1], 1u64 << 10),
        'M' | 'm' => (&t[..t.len() - 1], 1 << 20),
        'G' | 'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(scale)
}

/// The data and unified caches of `cpu` (falling back to CPU 0), smallest level first.
pub fn cache_levels(cpu: usize) -> Vec<CacheLevel> {
    let read_dir = |c: usize| std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{c}/cache"));
    let dir = read_dir(cpu).or_else(|_| read_dir(0));
    let mut out = Vec::new();
    if let Ok(entries) = dir {
        for e in entries.flatten() {
            if !e.file_name().to_string_lossy().starts_with("index") {
                continue;
            }
            let rd = |f: &str| {
                std::fs::read_to_string(e.path().join(f))
                    .ok()
                    .map(|s| s.trim().to_string())
            };
            let (Some(level), Some(kind), Some(size)) = (rd("level"), rd("type"), rd("size"))
            else {
                continue;
            };
            let (Ok(level), Some(size_bytes)) = (level.parse(), parse_cache_size(&size)) else {
                continue;
            };
            out.push(CacheLevel {
                level,
                kind,
                size_bytes,
                shared_cpus: rd("shared_cpu_list").unwrap_or_default(),
            });
        }
    }
    data_caches(out)
}

/// Keeps the caches data passes through (data and unified), one per level, in level order.
pub fn data_caches(mut all: Vec<CacheLevel>) -> Vec<CacheLevel> {
    all.retain(|c| c.kind != "Instruction");
    all.sort_by_key(|c| (c.level, c.size_bytes));
    all.dedup_by_key(|c| c.level);
    all
}

/// The smallest default size: a few hundred bytes, as the seed's 656.
pub const MIN_DEFAULT_SIZE: u64 = 512;

/// Powers of two from 512 bytes to four times the last cache level (at least 8 MiB when the
/// caches are unknown).
pub fn default_sizes(caches: &[CacheLevel]) -> Vec<u64> {
    let last = caches.iter().map(|c| c.size_bytes).max().unwrap_or(2 << 20);
    let top = (last.saturating_mul(4)).max(8 << 20);
    let mut sizes = Vec::new();
    let mut s = MIN_DEFAULT_SIZE;
    while s <= top {
        sizes.push(s);
        s *= 2;
    }
    sizes
}

/// The smallest cache level that holds `bytes`, or `memory`.
pub fn level_for(caches: &[CacheLevel], bytes: u64) -> String {
    caches
        .iter()
        .find(|c| bytes <= c.size_bytes)
        .map(|c| c.name())
        .unwrap_or_else(|| "memory".to_string())
}

/// How the block is placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    Aligned,
    OddSize,
    OddOffset,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::Aligned, Variant::OddSize, Variant::OddOffset];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Aligned => "aligned",
            Variant::OddSize => "odd-size",
            Variant::OddOffset => "odd-offset",
        }
    }

    /// (bytes copied, source offset, destination offset) for a block of nominal size `size`.
    pub fn layout(self, size: u64) -> (u64, u64, u64) {
        match self {
            Variant::Aligned => (size, 0, 0),
            Variant::OddSize => (size.saturating_sub(1).max(1), 0, 0),
            Variant::OddOffset => (size, 1, 3),
        }
    }
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CopyConfig {
    /// Nominal block sizes; `None`: [`default_sizes`].
    pub sizes: Option<Vec<u64>>,
    pub cpu: Option<usize>,
    /// Time spent on each (size, variant) cell.
    pub cell_time_ns: Nanos,
    /// At most this many samples per cell.
    pub max_samples: usize,
    pub output_dir: Option<PathBuf>,
}

impl Default for CopyConfig {
    fn default() -> CopyConfig {
        CopyConfig {
            sizes: None,
            cpu: None,
            cell_time_ns: Nanos::from_millis(100),
            max_samples: 1000,
            output_dir: None,
        }
    }
}

/// At least this many samples per cell, however long they take.
#[cfg(feature = "linux")]
const MIN_SAMPLES: usize = 5;
/// A sample lasts at least this long.
#[cfg(feature = "linux")]
const MIN_SAMPLE_NS: u64 = 20_000;

/// One (size, variant) cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CopyCell {
    pub variant: Variant,
    /// The nominal size of the row.
    pub size_bytes: u64,
    /// Bytes each copy moves.
    pub copied_bytes: u64,
    pub src_offset: u64,
    pub dst_offset: u64,
    /// The cache level that holds both blocks (2 × size), or `memory`.
    pub fits: String,
    /// Copies timed together in one sample.
    pub copies_per_sample: u64,
    /// The time of one sample (`copies_per_sample` copies).
    pub sample_ns: Option<Summary>,
    /// Bytes per second at the median, p99 (slow) and minimum (fast) copy time.
    pub p50_bytes_per_s: Option<f64>,
    pub p99_bytes_per_s: Option<f64>,
    pub best_bytes_per_s: Option<f64>,
    /// The destination equalled the source after the cell.
    pub verified: bool,
}

/// The result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CopyResult {
    #[serde(flatten)]
    pub header: Header,
    pub cpu: usize,
    pub caches: Vec<CacheLevel>,
    pub cells: Vec<CopyCell>,
}

#[cfg(feature = "linux")]
fn rate(bytes: u64, ns: i64) -> Option<f64> {
    (ns > 0).then(|| bytes as f64 * 1e9 / ns as f64)
}

impl CopyCell {
    /// The time of one copy at the median sample, in nanoseconds.
    pub fn p50_copy_ns(&self) -> Option<f64> {
        self.sample_ns
            .as_ref()
            .map(|s| s.p50_ns as f64 / self.copies_per_sample.max(1) as f64)
    }
}

#[cfg(feature = "linux")]
struct Measured {
    cells: Vec<CopyCell>,
    samples: Vec<(Variant, u64, u64, Vec<i64>)>,
    error: Option<String>,
}

#[cfg(feature = "linux")]
fn measure(
    config: &CopyConfig,
    cpu: usize,
    sizes: &[u64],
    caches: &[CacheLevel],
    stop: &AtomicBool,
) -> Measured {
    let mut m = Measured {
        cells: Vec::new(),
        samples: Vec::new(),
        error: None,
    };
    if let Err(e) = sandglass_sys::sched::set_affinity(sandglass_sys::Tid::SELF, &[cpu]) {
        m.error = Some(format!("cannot pin the copying thread to CPU {cpu}: {e}"));
        return m;
    }
    let largest = sizes.iter().copied().max().unwrap_or(0) as usize;
    // 64 bytes of slack for the offsets and the alignment; filled (not zeroed) so every page is
    // faulted in before the first timed copy.
    let mut src_buf = vec![0x5au8; largest + 128];
    let mut dst_buf = vec![0xa5u8; largest + 128];
    let src_base = src_buf.as_ptr().align_offset(64);
    let dst_base = dst_buf.as_ptr().align_offset(64);
    for (i, b) in src_buf.iter_mut().enumerate() {
        *b = super::pattern(1, 0, i);
    }
    let mut samples = Vec::with_capacity(config.max_samples.max(MIN_SAMPLES));
    for &size in sizes {
        for variant in Variant::ALL {
            if stop.load(Ordering::Relaxed) {
                return m;
            }
            let (bytes, so, dof) = variant.layout(size);
            let (n, so, dof) = (
                bytes as usize,
                src_base + so as usize,
                dst_base + dof as usize,
            );
            let src = &src_buf[so..so + n];
            let dst = &mut dst_buf[dof..dof + n];
            // Warm up, then double the copies per sample until a sample lasts long enough.
            dst.copy_from_slice(src);
            let mut reps = 1u64;
            loop {
                let t = now();
                for _ in 0..reps {
                    dst.copy_from_slice(std::hint::black_box(src));
                    std::hint::black_box(&mut *dst);
                }
                if now() - t >= MIN_SAMPLE_NS || reps >= 1 << 30 {
                    break;
                }
                reps *= 2;
            }
            samples.clear();
            let start = now();
            while samples.len() < config.max_samples.max(MIN_SAMPLES) {
                let t = now();
                for _ in 0..reps {
                    dst.copy_from_slice(std::hint::black_box(src));
                    std::hint::black_box(&mut *dst);
                }
                let e = now();
                samples.push((e - t) as i64);
                if samples.len() >= MIN_SAMPLES
                    && (e - start >= config.cell_time_ns.0 || stop.load(Ordering::Relaxed))
                {
                    break;
                }
            }
            let verified = dst[..] == src[..];
            let mut sorted = samples.clone();
            let s = summarize(&mut sorted);
            let moved = bytes * reps;
            m.cells.push(CopyCell {
                variant,
                size_bytes: size,
                copied_bytes: bytes,
                src_offset: (so - src_base) as u64,
                dst_offset: (dof - dst_base) as u64,
                fits: level_for(caches, 2 * size),
                copies_per_sample: reps,
                p50_bytes_per_s: s.as_ref().and_then(|s| rate(moved, s.p50_ns)),
                p99_bytes_per_s: s.as_ref().and_then(|s| rate(moved, s.p99_ns)),
                best_bytes_per_s: s.as_ref().and_then(|s| rate(moved, s.min_ns)),
                sample_ns: s,
                verified,
            });
            m.samples.push((variant, size, reps, samples.clone()));
            if !verified {
                m.error = Some(format!(
                    "the {} copy of {} left a destination that differs from its source",
                    variant.name(),
                    super::format_size(bytes)
                ));
                return m;
            }
        }
    }
    m
}

/// A copy configuration that cannot run, named by its flag with the fix.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CopyError {
    #[error("--cell-time must be longer than zero")]
    ZeroCellTime,
    #[error("--max-samples must be at least 1")]
    ZeroMaxSamples,
    #[error("--sizes: give at least one size")]
    NoSizes,
    #[error("--sizes: {} is larger than the 4 GiB this benchmark copies at most", super::format_size(*.0))]
    SizeTooLarge(u64),
}

/// Checks the configuration; the error names the flag.
pub fn validate(config: &CopyConfig) -> Result<(), CopyError> {
    if config.cell_time_ns.0 == 0 {
        return Err(CopyError::ZeroCellTime);
    }
    if config.max_samples == 0 {
        return Err(CopyError::ZeroMaxSamples);
    }
    if let Some(s) = &config.sizes {
        if s.is_empty() {
            return Err(CopyError::NoSizes);
        }
        if let Some(&big) = s.iter().find(|&&b| b > 1 << 32) {
            return Err(CopyError::SizeTooLarge(big));
        }
    }
    Ok(())
}

/// Runs the copy benchmark and writes its run directory.
#[cfg(feature = "linux")]
pub fn run(
    config: &CopyConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<CopyResult, RunError> {
    validate(config).map_err(super::usage)?;
    let allowed = crate::system::allowed_cpus();
    let cpu = super::choose_cpu(&allowed, config.cpu).map_err(super::usage)?;
    let caches = cache_levels(cpu);
    let sizes = config
        .sizes
        .clone()
        .unwrap_or_else(|| default_sizes(&caches));
    let session = super::Session::open(
        CopyProbe::KIND,
        config.output_dir.as_deref(),
        ctx,
        serde_json::json!({ "copy": config, "cpu": cpu, "sizes": sizes, "caches": caches }),
    )?;
    obs.note(&format!(
        "copying blocks of {} to {} on CPU {cpu}, three alignments each",
        super::format_size(sizes.iter().copied().min().unwrap_or(0)),
        super::format_size(sizes.iter().copied().max().unwrap_or(0))
    ));
    let stop = AtomicBool::new(false);
    let (m, ended) = match super::supervise(&stop, || measure(config, cpu, &sizes, &caches, &stop))
    {
        Ok(v) => v,
        Err(e) => return Err(session.fail(e.to_string())),
    };
    if let Some(e) = m.error {
        return Err(session.fail(e));
    }
    let warnings: Vec<Warning> = Vec::new();
    let header = session.header(ended.state, &ended.detail, &warnings);
    let result = CopyResult {
        header,
        cpu,
        caches,
        cells: m.cells,
    };
    let files = write_files(&session, &result, &m.samples)?;
    session.finish(&result, &result.header, files)?;
    Ok(result)
}

#[cfg(feature = "linux")]
fn write_files(
    session: &Session,
    r: &CopyResult,
    samples: &[(Variant, u64, u64, Vec<i64>)],
) -> Result<Vec<crate::store::FileEntry>, RunError> {
    let mut csv = String::from(
        "variant,size_bytes,copied_bytes,fits,copies_per_sample,samples,sample_min_ns,sample_p50_ns,sample_p99_ns,sample_max_ns,p50_bytes_per_s\n",
    );
    for c in &r.cells {
        if let Some(s) = &c.sample_ns {
            csv.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{:.0}\n",
                c.variant.name(),
                c.size_bytes,
                c.copied_bytes,
                c.fits,
                c.copies_per_sample,
                s.count,
                s.min_ns,
                s.p50_ns,
                s.p99_ns,
                s.max_ns,
                c.p50_bytes_per_s.unwrap_or(0.0)
            ));
        }
    }
    let mut raw = String::from("variant,size_bytes,copies,sample_ns\n");
    for (v, size, reps, ss) in samples {
        for s in ss {
            raw.push_str(&format!("{},{size},{reps},{s}\n", v.name()));
        }
    }
    Ok(vec![
        session.write(
            "cells.csv",
            csv.as_bytes(),
            "sandglass-bench-copy-cells-csv/1",
            "one row per (variant, size): the distribution of the sample times",
        )?,
        session.write(
            "samples.csv.gz",
            &super::gzip(raw.as_bytes()),
            "sandglass-bench-copy-samples-csv/1+gzip",
            "every sample: the time of `copies` back-to-back copies",
        )?,
    ])
}

/// The memory-copy probe (`bench copy`): copy rates by block size and variant.
pub struct CopyProbe;

impl Probe for CopyProbe {
    const KIND: RunKind = RunKind::BenchCopy;
    type Config = CopyConfig;
    type Result = CopyResult;

    /// Its key figures, in the order people read them.
    const FIGURES: &'static [KeyFigure] = &[
        fig("cells", "cells", Unit::Count, OverCpus::Run),
        fig(
            "peak_bytes_per_s",
            "peak",
            Unit::BytesPerSecond,
            OverCpus::Run,
        ),
        LOAD,
    ];

    #[cfg(feature = "linux")]
    fn run(
        c: &CopyConfig,
        ctx: &RunContext,
        obs: &mut dyn Observer,
    ) -> Result<CopyResult, RunError> {
        run(c, ctx, obs)
    }

    fn figures(s: &Value, f: &mut Figures) {
        let cells = array(&s["cells"]);
        f.add("cells", Some(cells.len() as f64));
        let rate = |c: &Value| {
            let bytes = num(&c["size_bytes"])? * num(&c["copies_per_sample"])?.max(1.0);
            let ns = num(&c["sample_ns"]["p50_ns"]).filter(|&n| n > 0.0)?;
            Some((bytes * 1e9 / ns).round())
        };
        f.add(
            "peak_bytes_per_s",
            cells.iter().filter_map(rate).reduce(f64::max),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(level: u32, kind: &str, size: u64) -> CacheLevel {
        CacheLevel {
            level,
            kind: kind.to_string(),
            size_bytes: size,
            shared_cpus: "0".to_string(),
        }
    }

    #[test]
    fn sysfs_sizes_parse() {
        assert_eq!(parse_cache_size("48K"), Some(48 << 10));
        assert_eq!(parse_cache_size("1024K"), Some(1 << 20));
        assert_eq!(parse_cache_size("32M\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size(""), None);
    }

    #[test]
    fn levels_and_default_sizes() {
        let caches = data_caches(vec![
            cache(2, "Unified", 1 << 20),
            cache(1, "Instruction", 32 << 10),
            cache(1, "Data", 48 << 10),
            cache(3, "Unified", 32 << 20),
        ]);
        let names: Vec<String> = caches.iter().map(CacheLevel::name).collect();
        assert_eq!(names, ["L1d", "L2", "L3"]);
        let sizes = default_sizes(&caches);
        assert_eq!(sizes[0], 512);
        assert_eq!(*sizes.last().expect("sizes"), 128 << 20);
        assert!(sizes.windows(2).all(|w| w[1] == 2 * w[0]));
        assert_eq!(level_for(&caches, 48 << 10), "L1d");
        assert_eq!(level_for(&caches, 64 << 10), "L2");
        assert_eq!(level_for(&caches, 64 << 20), "memory");
        assert_eq!(*default_sizes(&[]).last().expect("sizes"), 8 << 20);
    }

    #[test]
    fn variants_lay_out_blocks() {
        assert_eq!(Variant::Aligned.layout(4096), (4096, 0, 0));
        assert_eq!(Variant::OddSize.layout(4096), (4095, 0, 0));
        assert_eq!(Variant::OddOffset.layout(4096), (4096, 1, 3));
        assert_eq!(Variant::OddSize.layout(1), (1, 0, 0));
    }

    #[test]
    fn this_machine_reports_its_caches() {
        // Containers without sysfs have none; when present, levels increase.
        let c = cache_levels(0);
        assert!(c.windows(2).all(|w| w[0].level < w[1].level));
    }

    #[test]
    fn short_run_measures_every_cell() {
        let base = tempfile::tempdir().expect("tempdir");
        let config = CopyConfig {
            sizes: Some(vec![512, 4096, 65536]),
            cell_time_ns: Nanos::from_millis(2),
            max_samples: 20,
            ..CopyConfig::default()
        };
        let ctx = super::super::test_context(base.path());
        let r = run(&config, &ctx, &mut crate::runner::Silent).expect("run");
        assert_eq!(r.header.kind, crate::RunKind::BenchCopy);
        assert_eq!(r.cells.len(), 9);
        for c in &r.cells {
            let s = c.sample_ns.as_ref().expect("samples");
            assert!(s.count >= MIN_SAMPLES as u64);
            assert!(s.min_ns <= s.p50_ns && s.p50_ns <= s.p99_ns && s.p99_ns <= s.max_ns);
            assert!(c.verified);
            assert!(c.p50_bytes_per_s.is_some());
        }
        assert_eq!(r.cells[1].variant, Variant::OddSize);
        assert_eq!(r.cells[1].copied_bytes, 511);
        let reader = crate::store::RunReader::open(std::path::Path::new(&r.header.run_dir))
            .expect("finished run");
        assert_eq!(reader.manifest.kind, crate::RunKind::BenchCopy);
        for f in ["result.json", "cells.csv", "samples.csv.gz"] {
            assert!(reader.read(f).is_ok(), "{f}");
        }
    }

    #[test]
    fn refusals_keep_their_wording() {
        let cases = [
            (
                CopyError::ZeroCellTime,
                "--cell-time must be longer than zero",
            ),
            (
                CopyError::ZeroMaxSamples,
                "--max-samples must be at least 1",
            ),
            (CopyError::NoSizes, "--sizes: give at least one size"),
            (
                CopyError::SizeTooLarge(8 << 30),
                "--sizes: 8 GiB is larger than the 4 GiB this benchmark copies at most",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
