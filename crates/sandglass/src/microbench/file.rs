//! Reading a file by four methods, cold and warm, with the CPU each costs.
//!
//! Dannenberg et al. (§9, Table 2) read a 30 MB file by `stdio`, by `read` with various block
//! sizes, by mapping it into memory, and by a memory-mapped stdio, and gave each method's rate
//! and CPU utilisation. The Linux methods here:
//!
//! * `buffered`: a user-space buffer of 8 KiB (stdio's `BUFSIZ`) read in 1 KiB records;
//! * `read`: `read(2)` straight into a buffer of each block size, 4 KiB to 4 MiB by default;
//! * `mmap`: the file mapped read-only and every word read, so every page is faulted in;
//! * `direct`: `O_DIRECT` reads of 1 MiB into an aligned buffer, bypassing the page cache.
//!
//! Every method computes the same checksum over what it read (the wrapping sum of its 64-bit
//! words), which must equal the checksum of what was written: every byte is delivered to the
//! CPU, and delivered correctly. Each method runs twice: **cold**, after the file's pages were
//! dropped from the page cache (`posix_fadvise(POSIX_FADV_DONTNEED)` after the file was written
//! back, or, as root with `--drop-caches`, every clean page of the machine through
//! `/proc/sys/vm/drop_caches`), and **warm**, right after, with the file cached. `direct` runs
//! once (`uncached`).
//!
//! CPU utilisation comes from two sources. `getrusage(RUSAGE_THREAD)` gives the reading thread's
//! own user and system time; it misses the work done for the read in interrupts and kernel
//! threads. The seed's `freetime` instead "uses a low-priority task to consume and count all
//! available idle CPU cycles": here one SCHED_IDLE thread per CPU counts loop iterations, its
//! idle rate is calibrated before the passes, and during a pass the time it did not get is the
//! time something else used, in CPUs (more than 100% means more than one CPU was kept busy).
//! [`FREETIME_CAVEAT`] says why that figure must be read with care.
//!
//! The file lives in a new directory under `--dir` (created mode 0700) and is removed with its
//! directory when the benchmark ends, whatever way it ends.

#[cfg(feature = "linux")]
use super::{now, setup_thread, Session};
use super::{Header, ThreadSetup};
use crate::kind::{fig, KeyFigure, OverCpus, Unit, LOAD};
#[cfg(feature = "linux")]
use crate::policy::Policy;
use crate::probe::{array, num, Figures, Probe};
#[cfg(feature = "linux")]
use crate::runner::{Observer, RunContext, RunError};
use crate::stats::Summary;
#[cfg(feature = "linux")]
use crate::warning::{Warning, WarningKind};
use crate::RunKind;
#[cfg(feature = "linux")]
use sandglass_sys::ipc::{self as sys, MappedFile, RusageWho};
#[cfg(feature = "linux")]
use sandglass_sys::Errno;
use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "linux")]
use std::fs::File;
#[cfg(feature = "linux")]
use std::io::{BufReader, Read, Write};
#[cfg(feature = "linux")]
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
#[cfg(feature = "linux")]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use thiserror::Error;

/// The caveat the seed attached to `freetime`, printed with every result.
pub const FREETIME_CAVEAT: &str = "freetime's idle counters perturb what they measure: Dannenberg et al. (§9) saw a disk-read run go from 32 s to 47 s with the counter running, and their CPU figures exceed 100%. The counters also keep every CPU out of its idle states, which speeds up I/O completions, and they count other programs' work as the read's. The getrusage column counts only the reading thread's own time and misses interrupt and kernel-thread work done for it; the truth is between the two.";

/// A way to read the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    Buffered,
    Read,
    Mmap,
    Direct,
}

impl Method {
    pub const ALL: [Method; 4] = [Method::Buffered, Method::Read, Method::Mmap, Method::Direct];

    pub fn name(self) -> &'static str {
        match self {
            Method::Buffered => "buffered",
            Method::Read => "read",
            Method::Mmap => "mmap",
            Method::Direct => "direct",
        }
    }

    pub fn parse(text: &str) -> Result<Method, FileBenchError> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == text.trim())
            .ok_or_else(|| FileBenchError::UnknownMethod(text.trim().to_string()))
    }
}

/// Why a file-read configuration was refused (named by its flag, with the fix) or a pass failed
/// (named by the system call or the file).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FileBenchError {
    #[error("--methods {0}: unknown method; use buffered, read, mmap, direct or all")]
    UnknownMethod(String),
    #[error("--size must be at least 4 KiB")]
    SizeTooSmall,
    #[error("--size {0}: give a multiple of 4 KiB (O_DIRECT reads whole blocks)")]
    SizeNotPageMultiple(u64),
    #[error("--size: at most 64 GiB")]
    SizeTooLarge,
    #[error("--methods: give at least one method, or all")]
    NoMethods,
    #[error("--block-sizes: give at least one block size")]
    NoBlockSizes,
    #[error("--block-sizes: {} is more than the 256 MiB this benchmark reads at once", super::format_size(*.0))]
    BlockTooLarge(u64),
    #[error("--drop-caches needs root (it writes /proc/sys/vm/drop_caches); without it every cold pass drops the file's own pages with posix_fadvise(DONTNEED)")]
    DropCachesNeedsRoot,
    #[error("--dir {}: not a directory; give a writable directory for the temporary files", .0.display())]
    NotADirectory(PathBuf),
    #[error("--dir {}: cannot create a temporary directory there: {reason}; give a writable directory with --dir", .dir.display())]
    CreateTempDir { dir: PathBuf, reason: String },
    #[error("--dir {}: cannot write a file there: {reason}; give a writable directory with --dir", .dir.display())]
    WriteTempDir { dir: PathBuf, reason: String },
    #[error("cannot create {}: {reason}", .path.display())]
    CreateFile { path: PathBuf, reason: String },
    #[error("cannot write {}: {reason}", .path.display())]
    WriteFile { path: PathBuf, reason: String },
    #[error("cannot write {} back to storage: {reason}", .path.display())]
    SyncFile { path: PathBuf, reason: String },
    #[error("stopped while the file was being written")]
    Stopped,
    /// A system call on the file failed: `open`, `read`, `fsync`, `mmap`, `posix_fadvise`, or
    /// the write to `/proc/sys/vm/drop_caches`.
    #[error("{call}: {reason}")]
    Io { call: &'static str, reason: String },
    #[cfg(feature = "linux")]
    #[error("{call}: {errno}")]
    Sys { call: &'static str, errno: Errno },
    #[error("mmap: a range outside the mapping")]
    OutsideMapping,
    #[error("open with O_DIRECT: {reason} (the filesystem does not support direct I/O)")]
    OpenDirect { reason: String },
    #[error("cannot align the O_DIRECT buffer")]
    AlignDirect,
    #[error(transparent)]
    Setup(#[from] super::BenchError),
}

/// Parses `all` or a comma-separated list of methods.
pub fn parse_methods(text: &str) -> Result<Vec<Method>, FileBenchError> {
    if text.trim() == "all" {
        return Ok(Method::ALL.to_vec());
    }
    let mut out = Vec::new();
    for p in text.split(',') {
        let m = Method::parse(p)?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

/// The page cache's state for a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CacheState {
    Cold,
    Warm,
    /// O_DIRECT: the page cache is not used.
    Uncached,
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileConfig {
    /// The directory the temporary file is created in.
    pub dir: PathBuf,
    pub size_bytes: u64,
    pub methods: Vec<Method>,
    /// Block sizes of the `read` method.
    pub block_sizes: Vec<u64>,
    /// Drop the whole page cache before cold passes (root only).
    pub drop_caches: bool,
    /// Run the idle counters.
    pub freetime: bool,
    pub cpu: Option<usize>,
    pub output_dir: Option<PathBuf>,
}

/// The default size of the file.
pub const DEFAULT_SIZE: u64 = 256 << 20;
/// The default block sizes of `read`: 4 KiB to 4 MiB.
pub const DEFAULT_BLOCKS: [u64; 6] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20];
/// The user-space buffer of `buffered` (stdio's BUFSIZ).
pub const BUFFER_BYTES: usize = 8 << 10;
/// The record `buffered` reads at a time.
pub const RECORD_BYTES: usize = 1 << 10;
/// The block of `direct` reads.
pub const DIRECT_BLOCK: usize = 1 << 20;
/// `buffered` and `mmap` are timed per this many bytes (a clock read per 1 KiB record would
/// cost as much as the record).
pub const CHUNK_BYTES: usize = 64 << 10;

impl FileConfig {
    pub fn new(dir: PathBuf) -> FileConfig {
        FileConfig {
            dir,
            size_bytes: DEFAULT_SIZE,
            methods: Method::ALL.to_vec(),
            block_sizes: DEFAULT_BLOCKS.to_vec(),
            drop_caches: false,
            freetime: true,
            cpu: None,
            output_dir: None,
        }
    }
}

/// The reading thread's own CPU use during a pass (`getrusage(RUSAGE_THREAD)`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadUsage {
    pub user_ns: u64,
    pub system_ns: u64,
    /// (user + system) over the wall-clock time between the two `getrusage` calls.
    pub cpu_share: f64,
    pub major_faults: u64,
    pub minor_faults: u64,
    /// 512-byte blocks read from storage.
    pub blocks_in: u64,
}

/// One pass over the file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FilePass {
    pub method: Method,
    /// Bytes per call (`read`, `direct`), record size (`buffered`), 0 for `mmap`.
    pub block_bytes: u64,
    pub cache: CacheState,
    pub bytes: u64,
    pub elapsed_ns: u64,
    pub throughput_bytes_per_s: Option<f64>,
    /// Bytes each timed sample covers: one call, or [`CHUNK_BYTES`] for `buffered` and `mmap`.
    pub sample_bytes: u64,
    pub sample_ns: Option<Summary>,
    pub usage: ThreadUsage,
    /// CPUs kept busy during the pass, from the idle counters (1.0 = one whole CPU).
    pub freetime_busy_cpus: Option<f64>,
    /// The checksum of what was read equals that of what was written.
    pub content_ok: bool,
    pub error: Option<String>,
}

/// The file read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileInfo {
    /// The temporary directory it lived in.
    pub dir: String,
    pub size_bytes: u64,
    /// The filesystem type and source of `--dir`, from `/proc/self/mountinfo`.
    pub filesystem: Option<String>,
    pub device: Option<String>,
    /// The file and its directory are gone.
    pub removed: bool,
}

/// The idle counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FreetimeInfo {
    pub cpus: Vec<usize>,
    /// Iterations per second of each counter with nothing else to do.
    pub idle_rates_per_s: Vec<f64>,
}

/// The result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileResult {
    #[serde(flatten)]
    pub header: Header,
    pub cpu: usize,
    pub reader: Option<ThreadSetup>,
    pub file: FileInfo,
    /// `posix_fadvise(DONTNEED)` or `drop_caches`.
    pub cold_method: String,
    pub freetime: Option<FreetimeInfo>,
    pub freetime_caveat: String,
    pub passes: Vec<FilePass>,
}

/// A streaming version of [`sandglass_sys::ipc::word_sum`]: bytes may arrive in pieces of any
/// length and the sum equals that of their concatenation.
#[derive(Clone, Debug, Default)]
pub struct WordSum {
    sum: u64,
    pending: [u8; 8],
    len: usize,
}

impl WordSum {
    #[cfg(feature = "linux")]
    pub fn update(&mut self, mut data: &[u8]) {
        if self.len > 0 {
            let take = (8 - self.len).min(data.len());
            self.pending[self.len..self.len + take].copy_from_slice(&data[..take]);
            self.len += take;
            data = &data[take..];
            if self.len < 8 {
                return;
            }
            self.sum = self.sum.wrapping_add(u64::from_le_bytes(self.pending));
            self.len = 0;
        }
        let whole = data.len() / 8 * 8;
        self.sum = self.sum.wrapping_add(sys::word_sum(&data[..whole]));
        let rest = &data[whole..];
        self.pending[..rest.len()].copy_from_slice(rest);
        self.len = rest.len();
    }

    pub fn add_words(&mut self, sum: u64) {
        self.sum = self.sum.wrapping_add(sum);
    }

    pub fn finish(&self) -> u64 {
        if self.len == 0 {
            return self.sum;
        }
        let mut w = [0u8; 8];
        w[..self.len].copy_from_slice(&self.pending[..self.len]);
        self.sum.wrapping_add(u64::from_le_bytes(w))
    }
}

/// The filesystem type and source holding `path`, from `/proc/self/mountinfo` text: the entry
/// with the longest mount point that contains `path`.
pub fn filesystem_of(mountinfo: &str, path: &Path) -> Option<(String, String)> {
    let unescape = |s: &str| {
        s.replace("\\040", " ")
            .replace("\\011", "\t")
            .replace("\\134", "\\")
    };
    let mut best: Option<(usize, String, String)> = None;
    for line in mountinfo.lines() {
        let (left, right) = line.split_once(" - ")?;
        let mount = unescape(left.split_whitespace().nth(4)?);
        let mut r = right.split_whitespace();
        let (fstype, source) = (r.next()?.to_string(), r.next().unwrap_or("").to_string());
        if path.starts_with(&mount) && best.as_ref().is_none_or(|b| mount.len() >= b.0) {
            best = Some((mount.len(), fstype, source));
        }
    }
    best.map(|(_, t, s)| (t, s))
}

/// Sets its flag when dropped.
#[cfg(feature = "linux")]
struct SetOnDrop<'a>(&'a AtomicBool);

#[cfg(feature = "linux")]
impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A directory removed with everything in it when dropped.
#[cfg(feature = "linux")]
pub(crate) struct TempDir(PathBuf);

#[cfg(feature = "linux")]
impl TempDir {
    #[cfg(feature = "linux")]
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

#[cfg(feature = "linux")]
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Creates a new private directory under `dir`; the error says what to change.
#[cfg(feature = "linux")]
pub(crate) fn temp_dir(dir: &Path) -> Result<TempDir, FileBenchError> {
    use std::os::unix::fs::DirBuilderExt;
    if !dir.is_dir() {
        return Err(FileBenchError::NotADirectory(dir.to_path_buf()));
    }
    let stamp = now() ^ (u64::from(sandglass_sys::process::pid() as u32) << 32);
    let path = dir.join(format!("sandglass-bench-{stamp:x}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&path)
        .map_err(|e| FileBenchError::CreateTempDir {
            dir: dir.to_path_buf(),
            reason: super::io_reason(&e),
        })?;
    let guard = TempDir(path);
    // A directory can be creatable where a file cannot be written (a full or read-only
    // filesystem mounted over it is caught here, before anything is measured).
    let probe = guard.0.join("probe");
    std::fs::write(&probe, b"sandglass")
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|e| FileBenchError::WriteTempDir {
            dir: dir.to_path_buf(),
            reason: super::io_reason(&e),
        })?;
    Ok(guard)
}

/// The word at index `i` of the file: a SplitMix64 stream, so that no two blocks are alike.
#[cfg(feature = "linux")]
fn file_word(rng: &mut crate::analysis::rng::SplitMix64) -> u64 {
    rng.next_u64()
}

/// Writes `size` bytes to `path`, returns the checksum, and writes the file back to storage.
#[cfg(feature = "linux")]
fn create_file(path: &Path, size: u64, stop: &AtomicBool) -> Result<u64, FileBenchError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| FileBenchError::CreateFile {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let mut rng = crate::analysis::rng::SplitMix64::new(0x5a5d_61a5);
    let mut sum = WordSum::default();
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        if stop.load(Ordering::Relaxed) {
            return Err(FileBenchError::Stopped);
        }
        let n = left.min(chunk.len() as u64) as usize;
        for w in chunk[..n].chunks_mut(8) {
            let v = file_word(&mut rng).to_le_bytes();
            w.copy_from_slice(&v[..w.len()]);
        }
        f.write_all(&chunk[..n])
            .map_err(|e| FileBenchError::WriteFile {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        sum.update(&chunk[..n]);
        left -= n as u64;
    }
    f.sync_all().map_err(|e| FileBenchError::SyncFile {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(sum.finish())
}

/// The idle counters: one SCHED_IDLE thread per CPU counting loop iterations.
#[cfg(feature = "linux")]
struct Freetime<'a> {
    cpus: Vec<usize>,
    counts: &'a [PaddedCounter],
    rates: Vec<f64>,
}

#[cfg(feature = "linux")]
#[repr(align(128))]
#[derive(Default)]
struct PaddedCounter(AtomicU64);

#[cfg(feature = "linux")]
fn idle_counter(cpu: usize, counter: &AtomicU64, stop: &AtomicBool) {
    let _ = setup_thread(cpu, &Policy::Idle, false);
    let mut n = 0u64;
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1024 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        n += 1;
        counter.store(n, Ordering::Relaxed);
    }
}

#[cfg(feature = "linux")]
impl Freetime<'_> {
    #[cfg(feature = "linux")]
    fn snapshot(&self) -> (u64, Vec<u64>) {
        snapshot(self.counts)
    }

    /// CPUs kept busy between two snapshots.
    #[cfg(feature = "linux")]
    fn busy_cpus(&self, a: &(u64, Vec<u64>), b: &(u64, Vec<u64>)) -> Option<f64> {
        let secs = b.0.checked_sub(a.0)? as f64 / 1e9;
        if secs <= 0.0 {
            return None;
        }
        let mut busy = 0.0;
        for ((x, y), rate) in a.1.iter().zip(&b.1).zip(&self.rates) {
            if *rate <= 0.0 {
                return None;
            }
            let idle_secs = y.saturating_sub(*x) as f64 / rate;
            busy += (secs - idle_secs).max(0.0) / secs;
        }
        Some(busy)
    }
}

#[cfg(feature = "linux")]
fn snapshot(counts: &[PaddedCounter]) -> (u64, Vec<u64>) {
    (
        now(),
        counts.iter().map(|c| c.0.load(Ordering::Relaxed)).collect(),
    )
}

/// A buffer of `len` bytes starting on a `align`-byte boundary, inside `storage`.
#[cfg(feature = "linux")]
fn aligned(storage: &mut [u8], align: usize, len: usize) -> Option<&mut [u8]> {
    let off = storage.as_ptr().align_offset(align);
    storage.get_mut(off..off.checked_add(len)?)
}

#[cfg(feature = "linux")]
struct PassOut {
    bytes: u64,
    elapsed_ns: u64,
    samples: Vec<i64>,
    checksum: u64,
}

#[cfg(feature = "linux")]
fn io_err(call: &'static str) -> impl Fn(std::io::Error) -> FileBenchError {
    move |e| FileBenchError::Io {
        call,
        reason: e.to_string(),
    }
}

#[cfg(feature = "linux")]
fn read_buffered(path: &Path, size: u64) -> Result<PassOut, FileBenchError> {
    let f = File::open(path).map_err(io_err("open"))?;
    let mut r = BufReader::with_capacity(BUFFER_BYTES, f);
    let mut rec = [0u8; RECORD_BYTES];
    let mut samples = Vec::with_capacity((size as usize / CHUNK_BYTES) + 2);
    let mut sum = WordSum::default();
    let (mut bytes, mut in_chunk) = (0u64, 0usize);
    let start = now();
    let mut t = start;
    loop {
        let n = match r.read(&mut rec) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err("read")(e)),
        };
        sum.update(&rec[..n]);
        bytes += n as u64;
        in_chunk += n;
        if in_chunk >= CHUNK_BYTES {
            let e = now();
            samples.push((e - t) as i64);
            t = e;
            in_chunk = 0;
        }
    }
    let end = now();
    if in_chunk > 0 {
        samples.push((end - t) as i64);
    }
    Ok(PassOut {
        bytes,
        elapsed_ns: end - start,
        samples,
        checksum: sum.finish(),
    })
}

#[cfg(feature = "linux")]
fn read_blocks(file: &mut File, buf: &mut [u8], size: u64) -> Result<PassOut, FileBenchError> {
    let mut samples = Vec::with_capacity((size as usize / buf.len().max(1)) + 2);
    let mut sum = WordSum::default();
    let mut bytes = 0u64;
    let start = now();
    loop {
        let t0 = now();
        let n = match file.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err("read")(e)),
        };
        samples.push((now() - t0) as i64);
        sum.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(PassOut {
        bytes,
        elapsed_ns: now() - start,
        samples,
        checksum: sum.finish(),
    })
}

#[cfg(feature = "linux")]
fn read_mmap(path: &Path, size: u64) -> Result<PassOut, FileBenchError> {
    let f = File::open(path).map_err(io_err("open"))?;
    let start = now();
    let m = MappedFile::map(&f, size as usize).map_err(|errno| FileBenchError::Sys {
        call: "mmap",
        errno,
    })?;
    let mut samples = Vec::with_capacity(size as usize / CHUNK_BYTES + 2);
    let mut sum = WordSum::default();
    let mut off = 0usize;
    while off < m.len() {
        let n = CHUNK_BYTES.min(m.len() - off);
        let t0 = now();
        let s = m.sum_words(off, n).ok_or(FileBenchError::OutsideMapping)?;
        samples.push((now() - t0) as i64);
        sum.add_words(s);
        off += n;
    }
    drop(m);
    Ok(PassOut {
        bytes: off as u64,
        elapsed_ns: now() - start,
        samples,
        checksum: sum.finish(),
    })
}

#[cfg(feature = "linux")]
fn read_direct(path: &Path, size: u64) -> Result<PassOut, FileBenchError> {
    let mut f = sys::open_direct(path).map_err(|e| FileBenchError::OpenDirect {
        reason: e.to_string(),
    })?;
    let mut storage = vec![0u8; DIRECT_BLOCK + 4096];
    let buf = aligned(&mut storage, 4096, DIRECT_BLOCK).ok_or(FileBenchError::AlignDirect)?;
    read_blocks(&mut f, buf, size)
}

/// Drops the file's cached pages, and the whole page cache when asked.
#[cfg(feature = "linux")]
fn make_cold(path: &Path, drop_all: bool) -> Result<(), FileBenchError> {
    let f = File::open(path).map_err(io_err("open"))?;
    f.sync_all().map_err(io_err("fsync"))?;
    sys::fadvise_dontneed(&f, 0, 0).map_err(|errno| FileBenchError::Sys {
        call: "posix_fadvise(DONTNEED)",
        errno,
    })?;
    if drop_all {
        std::fs::write("/proc/sys/vm/drop_caches", b"1\n")
            .map_err(io_err("writing /proc/sys/vm/drop_caches"))?;
    }
    Ok(())
}

/// The passes, the reading thread's setup and the idle counters' calibration.
#[cfg(feature = "linux")]
type Passes = (Vec<FilePass>, Option<ThreadSetup>, Option<FreetimeInfo>);

#[cfg(feature = "linux")]
struct Plan {
    method: Method,
    block: u64,
    cache: CacheState,
}

#[cfg(feature = "linux")]
fn plan(config: &FileConfig) -> Vec<Plan> {
    let mut out = Vec::new();
    for &m in &config.methods {
        let both = |out: &mut Vec<Plan>, block: u64| {
            for cache in [CacheState::Cold, CacheState::Warm] {
                out.push(Plan {
                    method: m,
                    block,
                    cache,
                });
            }
        };
        match m {
            Method::Buffered => both(&mut out, RECORD_BYTES as u64),
            Method::Read => {
                for &b in &config.block_sizes {
                    both(&mut out, b);
                }
            }
            Method::Mmap => both(&mut out, 0),
            Method::Direct => out.push(Plan {
                method: m,
                block: DIRECT_BLOCK as u64,
                cache: CacheState::Uncached,
            }),
        }
    }
    out
}

#[cfg(feature = "linux")]
fn one_pass(
    p: &Plan,
    path: &Path,
    config: &FileConfig,
    expected: u64,
    ft: Option<&Freetime>,
) -> FilePass {
    let mut pass = FilePass {
        method: p.method,
        block_bytes: p.block,
        cache: p.cache,
        bytes: 0,
        elapsed_ns: 0,
        throughput_bytes_per_s: None,
        sample_bytes: match p.method {
            Method::Buffered | Method::Mmap => CHUNK_BYTES as u64,
            _ => p.block,
        },
        sample_ns: None,
        usage: ThreadUsage::default(),
        freetime_busy_cpus: None,
        content_ok: false,
        error: None,
    };
    if p.cache != CacheState::Warm {
        if let Err(e) = make_cold(path, config.drop_caches) {
            pass.error = Some(e.to_string());
            return pass;
        }
    }
    let mut block_buf = Vec::new();
    if p.method == Method::Read {
        block_buf = vec![0u8; p.block as usize];
        // Fault the buffer in before the clock starts.
        block_buf.iter_mut().for_each(|b| *b = 1);
    }
    let outer0 = now();
    let u0 = sys::rusage(RusageWho::Thread).unwrap_or_default();
    let f0 = ft.map(Freetime::snapshot);
    let out = match p.method {
        Method::Buffered => read_buffered(path, config.size_bytes),
        Method::Read => File::open(path)
            .map_err(io_err("open"))
            .and_then(|mut f| read_blocks(&mut f, &mut block_buf, config.size_bytes)),
        Method::Mmap => read_mmap(path, config.size_bytes),
        Method::Direct => read_direct(path, config.size_bytes),
    };
    let f1 = ft.map(Freetime::snapshot);
    let u1 = sys::rusage(RusageWho::Thread).unwrap_or_default();
    // The shares are over the same window as the usage figures: opening and mapping included.
    let outer = now() - outer0;
    let mut out = match out {
        Ok(o) => o,
        Err(e) => {
            pass.error = Some(e.to_string());
            return pass;
        }
    };
    pass.bytes = out.bytes;
    pass.elapsed_ns = out.elapsed_ns;
    pass.throughput_bytes_per_s =
        (out.elapsed_ns > 0).then(|| out.bytes as f64 * 1e9 / out.elapsed_ns as f64);
    pass.sample_ns = super::summarize(&mut out.samples);
    let user = u1.user_ns.saturating_sub(u0.user_ns);
    let system = u1.system_ns.saturating_sub(u0.system_ns);
    pass.usage = ThreadUsage {
        user_ns: user,
        system_ns: system,
        cpu_share: if outer > 0 {
            (user + system) as f64 / outer as f64
        } else {
            0.0
        },
        major_faults: u1.major_faults.saturating_sub(u0.major_faults),
        minor_faults: u1.minor_faults.saturating_sub(u0.minor_faults),
        blocks_in: u1.blocks_in.saturating_sub(u0.blocks_in),
    };
    if let (Some(ft), Some(a), Some(b)) = (ft, f0, f1) {
        pass.freetime_busy_cpus = ft.busy_cpus(&a, &b);
    }
    pass.content_ok = out.bytes == config.size_bytes && out.checksum == expected;
    if !pass.content_ok {
        pass.error = Some(format!(
            "read {} bytes with checksum {:#018x} where {} bytes with checksum {expected:#018x} were written",
            out.bytes, out.checksum, config.size_bytes
        ));
    }
    pass
}

/// Checks the configuration; the error names the flag.
#[cfg(feature = "linux")]
pub fn validate(config: &FileConfig) -> Result<(), FileBenchError> {
    if config.size_bytes < 4096 {
        return Err(FileBenchError::SizeTooSmall);
    }
    if !config.size_bytes.is_multiple_of(4096) {
        return Err(FileBenchError::SizeNotPageMultiple(config.size_bytes));
    }
    if config.size_bytes > 64 << 30 {
        return Err(FileBenchError::SizeTooLarge);
    }
    if config.methods.is_empty() {
        return Err(FileBenchError::NoMethods);
    }
    if config.methods.contains(&Method::Read) && config.block_sizes.is_empty() {
        return Err(FileBenchError::NoBlockSizes);
    }
    if let Some(&b) = config.block_sizes.iter().find(|&&b| b > 256 << 20) {
        return Err(FileBenchError::BlockTooLarge(b));
    }
    if config.drop_caches && sandglass_sys::process::euid() != 0 {
        return Err(FileBenchError::DropCachesNeedsRoot);
    }
    Ok(())
}

/// Runs the file benchmark and writes its run directory. The temporary file is always removed.
#[cfg(feature = "linux")]
pub fn run(
    config: &FileConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<FileResult, RunError> {
    validate(config).map_err(super::usage)?;
    let allowed = crate::system::allowed_cpus();
    let cpu = super::choose_cpu(&allowed, config.cpu).map_err(super::usage)?;
    let tmp = temp_dir(&config.dir).map_err(super::usage)?;
    let canonical = std::fs::canonicalize(&tmp.0).unwrap_or_else(|_| tmp.0.clone());
    let fs = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|m| filesystem_of(&m, &canonical));
    let session = Session::open(
        FileProbe::KIND,
        config.output_dir.as_deref(),
        ctx,
        serde_json::json!({ "file": config, "cpu": cpu }),
    )?;
    let mut warnings = Vec::new();
    if let Some((t, _)) = fs.as_ref().filter(|(t, _)| t == "tmpfs" || t == "ramfs") {
        warnings.push(Warning::new(
            WarningKind::RunTooShort,
            format!("--dir {} is on {t}: the file lives in memory, so cold reads are as warm as warm ones and O_DIRECT is refused; give a directory on a disk with --dir", config.dir.display()),
        ));
    }
    for w in &warnings {
        obs.warning(w);
    }
    obs.note(&format!(
        "writing a {} file in {}, then reading it by {} method(s) on CPU {cpu}",
        super::format_size(config.size_bytes),
        config.dir.display(),
        config.methods.len()
    ));
    let path = tmp.0.join("data");
    let stop = AtomicBool::new(false);
    let privileged = super::privileged();
    let body = || -> Result<Passes, FileBenchError> {
        let reader = setup_thread(cpu, &Policy::Other { nice: 0 }, privileged)?;
        let expected = create_file(&path, config.size_bytes, &stop)?;
        let ft_stop = AtomicBool::new(false);
        let counts: Vec<PaddedCounter> = allowed.iter().map(|_| PaddedCounter::default()).collect();
        std::thread::scope(|s| {
            // Whatever way this closure ends, the idle counters stop, or the scope would wait
            // for them forever.
            let _stop_counters = SetOnDrop(&ft_stop);
            let mut ft = None;
            if config.freetime {
                for (i, &c) in allowed.iter().enumerate() {
                    let counter = &counts[i].0;
                    let ft_stop = &ft_stop;
                    let _ = std::thread::Builder::new()
                        .name(format!("sg-freetime-{c}"))
                        .spawn_scoped(s, move || idle_counter(c, counter, ft_stop));
                }
                // Calibrate: nothing else of ours runs while the reader sleeps.
                let a = snapshot(&counts);
                let _ = sandglass_sys::clock::sleep_for(300_000_000);
                let b = snapshot(&counts);
                let secs = (b.0 - a.0) as f64 / 1e9;
                ft = Some(Freetime {
                    cpus: allowed.clone(),
                    counts: &counts,
                    rates: a
                        .1
                        .iter()
                        .zip(&b.1)
                        .map(|(x, y)| y.saturating_sub(*x) as f64 / secs)
                        .collect(),
                });
            }
            let mut passes = Vec::new();
            for p in plan(config) {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                passes.push(one_pass(&p, &path, config, expected, ft.as_ref()));
            }
            ft_stop.store(true, Ordering::Relaxed);
            let info = ft.as_ref().map(|ft| FreetimeInfo {
                cpus: ft.cpus.clone(),
                idle_rates_per_s: ft.rates.clone(),
            });
            Ok((passes, Some(reader), info))
        })
    };
    let supervised = super::supervise(&stop, body);
    let dir_shown = tmp.0.display().to_string();
    drop(tmp);
    let removed = !Path::new(&dir_shown).exists();
    let (measured, ended) = match supervised {
        Ok(v) => v,
        Err(e) => return Err(session.fail(e.to_string())),
    };
    let (passes, reader, freetime) = match measured {
        Ok(v) => v,
        Err(e) => return Err(session.fail(e.to_string())),
    };
    if !removed {
        warnings.push(Warning::new(
            WarningKind::RecordsDropped,
            format!("the temporary directory {dir_shown} could not be removed; remove it by hand"),
        ));
    }
    if let Some(r) = &reader {
        super::downgrade_warnings(&[r], &mut warnings);
    }
    let header = session.header(ended.state, &ended.detail, &warnings);
    let result = FileResult {
        header,
        cpu,
        reader,
        file: FileInfo {
            dir: dir_shown,
            size_bytes: config.size_bytes,
            filesystem: fs.as_ref().map(|f| f.0.clone()),
            device: fs.map(|f| f.1),
            removed,
        },
        cold_method: if config.drop_caches {
            "drop_caches".to_string()
        } else {
            "posix_fadvise(DONTNEED)".to_string()
        },
        freetime,
        freetime_caveat: FREETIME_CAVEAT.to_string(),
        passes,
    };
    let mut csv = String::from("method,block_bytes,cache,bytes,elapsed_ns,throughput_bytes_per_s,sample_bytes,sample_p50_ns,sample_p99_ns,sample_max_ns,user_ns,system_ns,cpu_share,freetime_busy_cpus,major_faults,blocks_in,content_ok,error\n");
    for p in &result.passes {
        let s = p.sample_ns.as_ref();
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{:.4},{},{},{},{},\"{}\"\n",
            p.method.name(),
            p.block_bytes,
            serde_json::to_value(p.cache)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            p.bytes,
            p.elapsed_ns,
            p.throughput_bytes_per_s
                .map(|t| format!("{t:.0}"))
                .unwrap_or_default(),
            p.sample_bytes,
            s.map(|s| s.p50_ns.to_string()).unwrap_or_default(),
            s.map(|s| s.p99_ns.to_string()).unwrap_or_default(),
            s.map(|s| s.max_ns.to_string()).unwrap_or_default(),
            p.usage.user_ns,
            p.usage.system_ns,
            p.usage.cpu_share,
            p.freetime_busy_cpus
                .map(|b| format!("{b:.4}"))
                .unwrap_or_default(),
            p.usage.major_faults,
            p.usage.blocks_in,
            p.content_ok,
            p.error.as_deref().unwrap_or("").replace('"', "'")
        ));
    }
    let files = vec![session.write(
        "passes.csv",
        csv.as_bytes(),
        "sandglass-bench-file-passes-csv/1",
        "one row per pass: method, cache state, throughput and CPU use",
    )?];
    session.finish(&result, &result.header, files)?;
    Ok(result)
}

/// The file-read probe (`bench file`): read throughput and CPU by method and block size.
pub struct FileProbe;

impl Probe for FileProbe {
    const KIND: RunKind = RunKind::BenchFile;
    type Config = FileConfig;
    type Result = FileResult;

    /// Its key figures, in the order people read them.
    const FIGURES: &'static [KeyFigure] = &[
        fig("passes", "passes", Unit::Count, OverCpus::Run),
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
        c: &FileConfig,
        ctx: &RunContext,
        obs: &mut dyn Observer,
    ) -> Result<FileResult, RunError> {
        run(c, ctx, obs)
    }

    fn figures(s: &Value, f: &mut Figures) {
        let passes = array(&s["passes"]);
        f.add("passes", Some(passes.len() as f64));
        let peak = passes
            .iter()
            .filter_map(|p| num(&p["throughput_bytes_per_s"]).map(f64::round))
            .reduce(f64::max);
        f.add("peak_bytes_per_s", peak);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_sum_equals_the_whole_sum() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 256) as u8).collect();
        let whole = sys::word_sum(&data);
        for split in [1usize, 3, 8, 13, 999] {
            let mut s = WordSum::default();
            for piece in data.chunks(split) {
                s.update(piece);
            }
            assert_eq!(s.finish(), whole, "pieces of {split}");
        }
    }

    #[test]
    fn mountinfo_finds_the_longest_mount_point() {
        let text = "\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /tmp rw,nosuid shared:2 - tmpfs tmpfs rw
31 22 0:27 / /mnt/my\\040disk rw shared:3 - xfs /dev/vdb1 rw";
        assert_eq!(
            filesystem_of(text, Path::new("/tmp/x")),
            Some(("tmpfs".into(), "tmpfs".into()))
        );
        assert_eq!(
            filesystem_of(text, Path::new("/var/tmp")),
            Some(("ext4".into(), "/dev/vda".into()))
        );
        assert_eq!(
            filesystem_of(text, Path::new("/mnt/my disk/y")),
            Some(("xfs".into(), "/dev/vdb1".into()))
        );
        assert_eq!(filesystem_of("garbage", Path::new("/")), None);
    }

    #[test]
    fn methods_parse() {
        assert_eq!(parse_methods("all"), Ok(Method::ALL.to_vec()));
        assert_eq!(
            parse_methods("mmap,read"),
            Ok(vec![Method::Mmap, Method::Read])
        );
        assert!(parse_methods("stdio").is_err());
    }

    #[test]
    fn alignment_inside_a_buffer() {
        let mut storage = vec![0u8; 3 * 4096];
        let b = aligned(&mut storage, 4096, 4096).expect("fits");
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert_eq!(b.len(), 4096);
        assert!(aligned(&mut [0u8; 16], 4096, 4096).is_none());
    }

    #[test]
    fn unwritable_directories_are_refused_and_nothing_is_left() {
        let e = temp_dir(Path::new("/proc"))
            .err()
            .expect("cannot create in /proc")
            .to_string();
        assert!(e.contains("--dir /proc"), "{e}");
        let t = tempfile::tempdir().expect("tempdir");
        let file = t.path().join("plain");
        std::fs::write(&file, b"x").expect("write");
        let e = temp_dir(&file)
            .err()
            .expect("a file is not a directory")
            .to_string();
        assert!(e.contains("not a directory"), "{e}");
        let e = temp_dir(&t.path().join("missing"))
            .err()
            .expect("missing")
            .to_string();
        assert!(e.contains("not a directory"), "{e}");
        let left: Vec<_> = std::fs::read_dir(t.path()).expect("list").collect();
        assert_eq!(left.len(), 1, "only the plain file remains");
    }

    #[test]
    fn short_run_reads_every_method_and_removes_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = tempfile::tempdir().expect("tempdir");
        let ctx = super::super::test_context(base.path());
        let config = FileConfig {
            size_bytes: 2 << 20,
            block_sizes: vec![4096, 1 << 20],
            ..FileConfig::new(dir.path().to_path_buf())
        };
        let r = run(&config, &ctx, &mut crate::runner::Silent).expect("run");
        assert_eq!(r.header.kind, crate::RunKind::BenchFile);
        // buffered ×2, read ×2 blocks ×2, mmap ×2, direct ×1.
        assert_eq!(r.passes.len(), 9);
        for p in &r.passes {
            if p.method == Method::Direct && p.error.is_some() {
                // Some filesystems (tmpfs, overlay) refuse O_DIRECT; the error says so.
                assert!(p.error.as_deref().unwrap_or("").contains("O_DIRECT"));
                continue;
            }
            assert!(
                p.error.is_none(),
                "{:?} {:?}: {:?}",
                p.method,
                p.cache,
                p.error
            );
            assert!(p.content_ok);
            assert_eq!(p.bytes, 2 << 20);
            assert!(p.sample_ns.is_some());
            assert!(p.freetime_busy_cpus.is_some());
        }
        assert!(r.file.removed);
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0);
        assert!(r.freetime_caveat.contains("32 s to 47 s"));
        let reader =
            crate::store::RunReader::open(Path::new(&r.header.run_dir)).expect("finished run");
        assert!(reader.read("passes.csv").is_ok());
    }

    #[test]
    fn refusals_and_failures_keep_their_wording() {
        let dir = || PathBuf::from("/mnt/x");
        let reason = || "EROFS (Read-only file system)".to_string();
        let cases = [
            (
                FileBenchError::UnknownMethod("stdio".into()),
                "--methods stdio: unknown method; use buffered, read, mmap, direct or all".to_string(),
            ),
            (FileBenchError::SizeTooSmall, "--size must be at least 4 KiB".into()),
            (
                FileBenchError::SizeNotPageMultiple(5000),
                "--size 5000: give a multiple of 4 KiB (O_DIRECT reads whole blocks)".into(),
            ),
            (FileBenchError::SizeTooLarge, "--size: at most 64 GiB".into()),
            (FileBenchError::NoMethods, "--methods: give at least one method, or all".into()),
            (FileBenchError::NoBlockSizes, "--block-sizes: give at least one block size".into()),
            (
                FileBenchError::BlockTooLarge(1 << 30),
                "--block-sizes: 1 GiB is more than the 256 MiB this benchmark reads at once".into(),
            ),
            (
                FileBenchError::DropCachesNeedsRoot,
                "--drop-caches needs root (it writes /proc/sys/vm/drop_caches); without it every cold pass drops the file's own pages with posix_fadvise(DONTNEED)".into(),
            ),
            (
                FileBenchError::NotADirectory(dir()),
                "--dir /mnt/x: not a directory; give a writable directory for the temporary files".into(),
            ),
            (
                FileBenchError::CreateTempDir { dir: dir(), reason: reason() },
                "--dir /mnt/x: cannot create a temporary directory there: EROFS (Read-only file system); give a writable directory with --dir".into(),
            ),
            (
                FileBenchError::WriteTempDir { dir: dir(), reason: reason() },
                "--dir /mnt/x: cannot write a file there: EROFS (Read-only file system); give a writable directory with --dir".into(),
            ),
            (
                FileBenchError::CreateFile { path: dir(), reason: "r".into() },
                "cannot create /mnt/x: r".into(),
            ),
            (
                FileBenchError::WriteFile { path: dir(), reason: "r".into() },
                "cannot write /mnt/x: r".into(),
            ),
            (
                FileBenchError::SyncFile { path: dir(), reason: "r".into() },
                "cannot write /mnt/x back to storage: r".into(),
            ),
            (FileBenchError::Stopped, "stopped while the file was being written".into()),
            (FileBenchError::Io { call: "fsync", reason: "r".into() }, "fsync: r".into()),
            (
                FileBenchError::Sys { call: "mmap", errno: Errno::ENOMEM },
                format!("mmap: {}", Errno::ENOMEM),
            ),
            (FileBenchError::OutsideMapping, "mmap: a range outside the mapping".into()),
            (
                FileBenchError::OpenDirect { reason: "r".into() },
                "open with O_DIRECT: r (the filesystem does not support direct I/O)".into(),
            ),
            (FileBenchError::AlignDirect, "cannot align the O_DIRECT buffer".into()),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
