//! Cost microbenchmarks: what each building block of a real-time pipeline costs on this machine.
//!
//! Dannenberg et al. (*Multimedia testbed on Mach 3.0*, CMU 1993) explained why their video
//! player barely kept up with real time by measuring its parts: memory copy (§8), in-line and
//! out-of-line IPC, sockets and shared memory, each summarised as a fixed cost and a rate
//! `t(N) = a + N/b` (§8.1-8.5), file reads by four methods with the CPU they cost (§9), the
//! clock interrupt's own overhead from two tick rates (§6), and finally a per-frame budget
//! (§11). lmbench is what people use for such figures today; it reports averages, leaves
//! placement to chance and varies 10-15% between runs by its own account. These benchmarks
//! report distributions (exact nearest-rank percentiles, [`crate::stats`]), pin every thread
//! with its affinity and verify where it ran, and fit the seed's models with the shared
//! functions of [`crate::analysis`].
//!
//! | module | measures | seed |
//! |---|---|---|
//! | [`copy`] | memory copy bandwidth by block size, alignment and cache level | §8 |
//! | [`ipc`] | one-way latency and throughput of seven IPC mechanisms, `t(N) = a + N/b` | §8.1-8.5, Figure 3 |
//! | [`ctxsw`] | direct and cache-indirect context-switch cost (lmbench `lat_ctx`'s method) | |
//! | [`file`] | file reads by method, cold and warm, with CPU use from getrusage and `freetime` | §9, Table 2 |
//! | [`timer_overhead`] | the cost of one timer wakeup by the two-rate method | §6 |
//! | [`budget`] | a per-frame pipeline: predicted time and misses against a real periodic run | §11 |
//!
//! Every kind runs its measurement in worker threads while the calling thread waits for
//! SIGINT, SIGTERM or SIGHUP (blocked and received synchronously, as in [`crate::runner`]): a signal
//! stops the measurement between samples, and what was measured is kept and marked
//! `interrupted`. Every kind writes a run directory ([`crate::store`]) whose manifest holds the
//! system snapshot and the resolved configuration, and returns its result; nothing here prints.
//!
//! The two sides of every IPC measurement and the members of every token ring are threads of
//! one process, as in `perf bench sched pipe -T`: a switch between them does not change the
//! address space. lmbench and perf's default use processes and so also pay for the
//! address-space switch.

pub mod budget;
pub mod copy;
pub mod ctxsw;
pub mod file;
pub mod ipc;
pub mod timer_overhead;

#[cfg(feature = "linux")]
use crate::os::{self, AppliedPolicy, PolicyFailure};
use crate::policy::Policy;
#[cfg(feature = "linux")]
use crate::runner::RunContext;
#[cfg(feature = "linux")]
use crate::runner::RunError;
use crate::stats::{self, Summary};
use crate::store::RunState;
#[cfg(feature = "linux")]
use crate::store::{self, FileEntry, Manifest, RunDir};
use crate::warning::Warning;
#[cfg(feature = "linux")]
use crate::warning::WarningKind;
#[cfg(feature = "linux")]
use sandglass_sys::sched::{self, Tid};
#[cfg(feature = "linux")]
use sandglass_sys::signal;
#[cfg(feature = "linux")]
use sandglass_sys::Errno;
use serde::{Deserialize, Serialize};
#[cfg(feature = "linux")]
use std::io::Write as _;
#[cfg(feature = "linux")]
use std::path::Path;
#[cfg(feature = "linux")]
use std::sync::atomic::{AtomicBool, Ordering};
use thiserror::Error;

/// Why a byte size was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SizeError {
    #[error("empty size: give a number of bytes such as 4096, 4K or 1MiB")]
    Empty,
    #[error("size '{0}' is not a number of bytes (examples: 512, 4K, 64KiB, 1M, 256MiB)")]
    Malformed(String),
    #[error(
        "size '{0}' has unknown unit '{1}': use B, K, KiB, M, MiB, G or GiB (binary multiples)"
    )]
    UnknownUnit(String, String),
    #[error("size '{0}' is too large")]
    Overflow(String),
    #[error("a size of 0 bytes measures nothing: give sizes of at least 1 byte")]
    Zero,
}

/// Parses a byte size: a whole number with an optional binary unit, `512`, `4K`, `4KiB`, `1M`,
/// `256MiB`, `1G` (K = 1024). Zero is refused: every size here is the size of something that
/// is moved.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(SizeError::Malformed(s.to_string()));
    }
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(SizeError::UnknownUnit(s.to_string(), other.to_string())),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| SizeError::Overflow(s.to_string()))?;
    let bytes = n
        .checked_mul(scale)
        .ok_or_else(|| SizeError::Overflow(s.to_string()))?;
    if bytes == 0 {
        return Err(SizeError::Zero);
    }
    Ok(bytes)
}

/// Parses a comma-separated list of sizes.
pub fn parse_sizes(text: &str) -> Result<Vec<u64>, SizeError> {
    text.split(',').map(parse_size).collect()
}

/// A size for people, exact: `4 KiB`, `1 MiB`, `1.5 KiB` is written `1536 B`.
pub fn format_size(bytes: u64) -> String {
    for (unit, scale) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{} {unit}", bytes / scale);
        }
    }
    format!("{bytes} B")
}

/// Why the CPUs or the scheduling of a benchmark's threads were refused. Every message names
/// the flag or the system call and says what to change.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BenchError {
    #[error("--placement {0}: use same-cpu (both sides on one CPU) or cross-cpu (one CPU each)")]
    UnknownPlacement(String),
    #[error("--cpus: give one or two CPUs")]
    NoCpusGiven,
    #[error("--cpus: this process may not use CPU {cpu} (allowed: {})", list(.allowed))]
    CpusNotAllowed { cpu: usize, allowed: Vec<usize> },
    #[error("--placement same-cpu runs both sides on one CPU: give one CPU with --cpus")]
    SameCpuNeedsOne,
    #[error("--placement cross-cpu needs two different CPUs: give them as --cpus A,B")]
    CrossCpuNeedsTwoDifferent,
    #[error("--placement cross-cpu needs two CPUs, but this process may use only CPU {0}: use --placement same-cpu, or run where more CPUs are allowed")]
    CrossCpuOnlyOne(usize),
    #[error("--cpu {cpu}: this process may not use CPU {cpu} (allowed: {})", list(.allowed))]
    CpuNotAllowed { cpu: usize, allowed: Vec<usize> },
    #[error("this process may use no CPU at all")]
    NoCpu,
    #[cfg(feature = "linux")]
    #[error("cannot pin a thread to CPU {cpu}: {errno}")]
    Pin { cpu: usize, errno: Errno },
    #[error("{}: SCHED_DEADLINE admission control refused the bandwidth", .policy.describe())]
    Admission { policy: Policy },
    /// The kernel refused the policy's parameters; the message is [`os::apply_policy`]'s.
    #[error("{0}")]
    PolicyRefused(String),
}

/// A configuration or CPU choice refused before anything was measured, as the runner's usage
/// error (exit code 2).
#[cfg(feature = "linux")]
pub(crate) fn usage(e: impl std::fmt::Display) -> RunError {
    RunError::Usage(e.to_string())
}

/// Where the two sides of a measurement run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Both sides pinned to one CPU: every message costs two context switches (the seed's
    /// uniprocessor case).
    SameCpu,
    /// The sides pinned to two different CPUs: every message crosses CPUs, and a sleeping
    /// receiver is woken by an inter-processor interrupt.
    CrossCpu,
}

impl Placement {
    pub fn parse(text: &str) -> Result<Placement, BenchError> {
        match text {
            "same-cpu" => Ok(Placement::SameCpu),
            "cross-cpu" => Ok(Placement::CrossCpu),
            other => Err(BenchError::UnknownPlacement(other.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Placement::SameCpu => "same-cpu",
            Placement::CrossCpu => "cross-cpu",
        }
    }
}

/// Chooses the CPUs of the two sides (`first`, `second`) for `placement`, from the CPUs the
/// process may use (`allowed`, increasing) and the CPUs the user asked for, if any.
///
/// Without a request, same-cpu takes the highest allowed CPU and cross-cpu the two highest
/// (CPU 0 usually takes the most device interrupts and housekeeping work).
pub fn choose_cpus(
    placement: Placement,
    allowed: &[usize],
    requested: Option<&[usize]>,
) -> Result<(usize, usize), BenchError> {
    let check = |cpu: usize| {
        if allowed.contains(&cpu) {
            Ok(cpu)
        } else {
            Err(BenchError::CpusNotAllowed {
                cpu,
                allowed: allowed.to_vec(),
            })
        }
    };
    match (placement, requested) {
        (_, Some([])) => Err(BenchError::NoCpusGiven),
        (Placement::SameCpu, Some([c])) => check(*c).map(|c| (c, c)),
        (Placement::SameCpu, Some([a, b])) if a == b => check(*a).map(|c| (c, c)),
        (Placement::SameCpu, Some(_)) => Err(BenchError::SameCpuNeedsOne),
        (Placement::CrossCpu, Some([a, b])) if a != b => Ok((check(*a)?, check(*b)?)),
        (Placement::CrossCpu, Some(_)) => Err(BenchError::CrossCpuNeedsTwoDifferent),
        (Placement::SameCpu, None) => allowed.last().map(|&c| (c, c)).ok_or(BenchError::NoCpu),
        (Placement::CrossCpu, None) => match allowed {
            [.., a, b] => Ok((*a, *b)),
            [only] => Err(BenchError::CrossCpuOnlyOne(*only)),
            [] => Err(BenchError::NoCpu),
        },
    }
}

/// Chooses one CPU: `requested` if allowed, otherwise the highest allowed CPU.
pub fn choose_cpu(allowed: &[usize], requested: Option<usize>) -> Result<usize, BenchError> {
    match requested {
        Some(c) if allowed.contains(&c) => Ok(c),
        Some(cpu) => Err(BenchError::CpuNotAllowed {
            cpu,
            allowed: allowed.to_vec(),
        }),
        None => allowed.last().copied().ok_or(BenchError::NoCpu),
    }
}

fn list(cpus: &[usize]) -> String {
    crate::cpulist::CpuList::from_cpus(cpus.iter().copied())
        .map(|l| l.to_string())
        .unwrap_or_else(|| "none".to_string())
}

/// The CPUs a thread was seen running on, as a bitset (the placement check of every kind).
#[cfg(feature = "linux")]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpusSeen {
    words: Vec<u64>,
}

#[cfg(feature = "linux")]
impl CpusSeen {
    /// A set with room for every CPU number, allocated before a measurement loop.
    pub fn new() -> CpusSeen {
        CpusSeen {
            words: vec![0; sched::MAX_CPUS.div_ceil(64)],
        }
    }

    /// Adds the CPU the calling thread runs on now (`sched_getcpu`, served by the vDSO).
    #[inline]
    pub fn record_current(&mut self) {
        if let Some(c) = sched::current_cpu() {
            self.insert(c as usize);
        }
    }

    #[inline]
    pub fn insert(&mut self, cpu: usize) {
        if let Some(w) = self.words.get_mut(cpu / 64) {
            *w |= 1 << (cpu % 64);
        }
    }

    pub fn merge(&mut self, other: &CpusSeen) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    pub fn to_vec(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for (i, w) in self.words.iter().enumerate() {
            for b in 0..64 {
                if w & (1 << b) != 0 {
                    out.push(i * 64 + b);
                }
            }
        }
        out
    }
}

/// True when every CPU in `seen` is `expected` (and something was seen).
pub fn placement_holds(seen: &[usize], expected: usize) -> bool {
    !seen.is_empty() && seen.iter().all(|&c| c == expected)
}

/// The version of every `sandglass bench KIND --json` output (and its `summary.json`), whose
/// `schema` is `sandglass-bench-KIND/` and this number.
pub const BENCH_JSON_VERSION: u32 = 1;

/// What every benchmark result starts with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Header {
    /// The version of the result's format, `sandglass-KIND/1` (`sandglass-bench-copy/1`);
    /// empty in summaries written before the field existed.
    #[serde(default)]
    pub schema: String,
    /// `bench-copy`, `bench-ipc`, `bench-ctxsw`, `bench-file`, `bench-timer-overhead`,
    /// `bench-budget`.
    #[schemars(with = "String")]
    pub kind: crate::RunKind,
    pub run_id: String,
    pub run_dir: String,
    pub state: RunState,
    pub end_detail: String,
    /// Wall-clock time of the whole measurement.
    pub elapsed_ns: u64,
    pub warnings: Vec<Warning>,
}

/// Whether the process may use real-time policies without asking (root or CAP_SYS_NICE).
#[cfg(feature = "linux")]
pub fn privileged() -> bool {
    let p = crate::system::privileges();
    p.euid == 0 || p.cap_sys_nice
}

/// How a worker thread was placed and scheduled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadSetup {
    pub tid: i32,
    /// The CPU it was pinned to.
    pub cpu: usize,
    /// The policy the kernel applied, read back (`o:0`, `f:80`, ...).
    pub policy: Option<String>,
    /// Why the policy is lower than requested, with the fix.
    pub downgraded: Option<String>,
}

/// Pins the calling thread to `cpu` and applies `policy` (falling back to SCHED_OTHER with a
/// message when a privilege is missing). An error means the thread must not measure.
#[cfg(feature = "linux")]
pub fn setup_thread(
    cpu: usize,
    policy: &Policy,
    privileged: bool,
) -> Result<ThreadSetup, BenchError> {
    sched::set_affinity(Tid::SELF, &[cpu]).map_err(|errno| BenchError::Pin { cpu, errno })?;
    let applied: AppliedPolicy = match os::apply_policy(policy, privileged) {
        Ok(a) => a,
        Err(PolicyFailure::Admission) => return Err(BenchError::Admission { policy: *policy }),
        Err(PolicyFailure::Refused(m)) => return Err(BenchError::PolicyRefused(m)),
    };
    os::prefault_stack();
    Ok(ThreadSetup {
        tid: sched::gettid().0,
        cpu,
        policy: applied.effective.map(|p| p.to_string()),
        downgraded: applied.downgraded,
    })
}

/// The warning for a policy that was lowered, once per message.
#[cfg(feature = "linux")]
pub(crate) fn downgrade_warnings(setups: &[&ThreadSetup], warnings: &mut Vec<Warning>) {
    for s in setups {
        if let Some(m) = &s.downgraded {
            if !warnings.iter().any(|w| &w.message == m) {
                warnings.push(Warning::new(WarningKind::PolicyDowngraded, m.clone()));
            }
        }
    }
}

/// Summarises samples in nanoseconds (exact nearest-rank percentiles; sorts them).
pub fn summarize(samples: &mut [i64]) -> Option<Summary> {
    stats::summarize(samples)
}

/// An open run directory of a benchmark, from the `running` manifest to the final one.
#[cfg(feature = "linux")]
pub(crate) struct Session {
    dir: RunDir,
    manifest: Manifest,
    start_ns: u64,
    /// SIGINT, SIGTERM and SIGHUP stay blocked from the `running` manifest to the final one, so that a
    /// signal cannot end the process while the results are written.
    _signals: crate::runner::SignalHold,
}

#[cfg(feature = "linux")]
fn monotonic_ns() -> u64 {
    sandglass_sys::clock::now_ns(sandglass_sys::clock::ClockId::Monotonic)
}

#[cfg(feature = "linux")]
impl Session {
    /// Creates the run directory (`output` or a new one under the context's base) and writes
    /// the `running` manifest. Everything the user can get wrong must be checked before: a
    /// refused command line leaves no file behind.
    pub(crate) fn open(
        kind: crate::RunKind,
        output: Option<&Path>,
        ctx: &RunContext,
        config: serde_json::Value,
    ) -> Result<Session, RunError> {
        let signals = crate::runner::SignalHold::block()?;
        let dir = RunDir::create(output, &ctx.base_dir, kind.as_str())
            .map_err(|e| RunError::Usage(e.to_string()))?;
        let manifest = ctx.manifest(
            &dir,
            &kind,
            crate::system::snapshot(),
            serde_json::json!({ "source": "CLOCK_MONOTONIC" }),
            config,
        );
        if let Err(e) = dir.write_manifest(&manifest) {
            // Nothing was measured: leave nothing behind.
            if output.is_none() {
                let _ = std::fs::remove_dir_all(dir.path());
            }
            return Err(RunError::Usage(e.to_string()));
        }
        Ok(Session {
            dir,
            manifest,
            start_ns: monotonic_ns(),
            _signals: signals,
        })
    }

    pub(crate) fn header(&self, state: RunState, end_detail: &str, warnings: &[Warning]) -> Header {
        Header {
            schema: format!("sandglass-{}/{BENCH_JSON_VERSION}", self.manifest.kind),
            kind: self.manifest.kind.clone(),
            run_id: self.dir.id().to_string(),
            run_dir: self.dir.path().display().to_string(),
            state,
            end_detail: end_detail.to_string(),
            elapsed_ns: monotonic_ns().saturating_sub(self.start_ns),
            warnings: warnings.to_vec(),
        }
    }

    /// Writes one data file.
    pub(crate) fn write(
        &self,
        name: &str,
        data: &[u8],
        format: &str,
        description: &str,
    ) -> Result<FileEntry, RunError> {
        self.dir
            .write_file(name, data, format, description)
            .map_err(|e| {
                RunError::Failed(format!(
                    "the run finished but its results could not be saved: {e}"
                ))
            })
    }

    /// Writes the result as `result.json`, the given extra files, and the final manifest.
    pub(crate) fn finish<T: Serialize>(
        mut self,
        result: &T,
        header: &Header,
        mut files: Vec<FileEntry>,
    ) -> Result<(), RunError> {
        let mut json = serde_json::to_vec_pretty(result)
            .map_err(|e| RunError::Failed(format!("cannot encode the result: {e}")))?;
        json.push(b'\n');
        files.insert(
            0,
            self.write(
                "result.json",
                &json,
                &format!("sandglass-{}-json/1", header.kind),
                "the result, as printed by --json",
            )?,
        );
        self.manifest.state = header.state;
        self.manifest.ended_at = Some(store::now_rfc3339());
        self.manifest.end_detail = Some(header.end_detail.clone());
        self.manifest.warnings = header.warnings.clone();
        self.manifest.files = files;
        self.dir.write_manifest(&self.manifest).map_err(|e| {
            RunError::Failed(format!(
                "the run finished but its manifest could not be saved: {e}"
            ))
        })
    }

    /// Marks the run failed with `msg` and returns the error to report (exit code 1).
    pub(crate) fn fail(mut self, msg: String) -> RunError {
        self.manifest.state = RunState::Failed;
        self.manifest.ended_at = Some(store::now_rfc3339());
        self.manifest.end_detail = Some(msg.clone());
        let _ = self.dir.write_manifest(&self.manifest);
        RunError::Failed(msg)
    }
}

/// How a measurement ended, from the supervising thread's point of view.
#[cfg(feature = "linux")]
pub(crate) struct Ended {
    pub state: RunState,
    pub detail: String,
}

#[cfg(feature = "linux")]
impl Ended {
    fn completed() -> Ended {
        Ended {
            state: RunState::Completed,
            detail: "ran to the end".to_string(),
        }
    }
}

/// Runs `body` in a worker thread while the calling thread waits for a signal that ends a run
/// (SIGINT, SIGTERM, SIGHUP); it sets `stop`, which the body checks between samples. They are
/// blocked for the duration (threads the body creates inherit the mask) and unblocked afterwards
/// unless the caller had blocked them itself.
#[cfg(feature = "linux")]
pub(crate) fn supervise<T: Send>(
    stop: &AtomicBool,
    body: impl FnOnce() -> T + Send,
) -> Result<(T, Ended), RunError> {
    let terminate = signal::TERMINATING;
    let caller_blocks = signal::terminating_blocked();
    signal::block(&terminate)
        .map_err(|e| RunError::Failed(format!("cannot block SIGINT, SIGTERM and SIGHUP: {e}")))?;
    let mut ended = Ended::completed();
    let joined = std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("sg-bench".to_string())
            .spawn_scoped(s, body)
            .map_err(|e| RunError::Failed(format!("cannot create the measuring thread: {e}")))?;
        while !handle.is_finished() {
            if let Some(sig) = signal::wait_termination(50_000_000) {
                if !stop.swap(true, Ordering::SeqCst) {
                    let name = signal::name(sig);
                    ended = Ended {
                        state: RunState::Interrupted,
                        detail: format!("stopped by {name}; what was measured until then is kept"),
                    };
                }
            }
        }
        handle
            .join()
            .map_err(|_| RunError::Failed("a measuring thread panicked".to_string()))
    });
    while signal::wait_termination(0).is_some() {
        if ended.state == RunState::Completed {
            ended = Ended {
                state: RunState::Interrupted,
                detail: "stopped by a signal at the end of the run".to_string(),
            };
        }
    }
    if !caller_blocks {
        let _ = signal::unblock(&terminate);
    }
    Ok((joined?, ended))
}

/// An I/O error's reason in the kernel's words with its symbolic name, without std's
/// "(os error N)": `ENOENT (No such file or directory)`.
#[cfg(feature = "linux")]
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => sandglass_sys::Errno(n).to_string(),
        None => e.to_string(),
    }
}

/// Gzip-compresses `text`.
#[cfg(feature = "linux")]
pub(crate) fn gzip(text: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(text);
    enc.finish().unwrap_or_default()
}

/// The current CLOCK_MONOTONIC time in nanoseconds.
#[cfg(feature = "linux")]
#[inline]
pub(crate) fn now() -> u64 {
    monotonic_ns()
}

/// A stable, cheap pattern byte for message `seq` of size `size` at offset `i`, so that a
/// stale or misplaced byte is detected.
#[cfg(feature = "linux")]
#[inline]
pub(crate) fn pattern(seq: u64, size: u64, i: usize) -> u8 {
    (i as u64)
        .wrapping_mul(31)
        .wrapping_add(seq.wrapping_mul(7))
        .wrapping_add(size)
        .wrapping_add((i >> 8) as u64) as u8
}

/// A run context for tests, writing runs under `base`.
#[cfg(feature = "linux")]
#[cfg(test)]
pub(crate) fn test_context(base: &Path) -> RunContext {
    RunContext {
        command_line: vec!["test".into()],
        tool: store::Tool {
            name: "sandglass".into(),
            version: "0".into(),
            commit: "0".into(),
        },
        base_dir: base.to_path_buf(),
        faults: Default::default(),
        shared_cpus: None,
    }
}

/// Tells the person running the tests why one was skipped, on the real stderr (the test
/// harness captures `eprintln!`).
#[cfg(feature = "linux")]
#[cfg(test)]
pub(crate) fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "skipped {test}: {reason}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4kib"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size(" 256MiB "), Ok(256 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("7B"), Ok(7));
        assert_eq!(parse_size("0"), Err(SizeError::Zero));
        assert_eq!(parse_size("0K"), Err(SizeError::Zero));
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert!(matches!(parse_size("K"), Err(SizeError::Malformed(_))));
        assert!(matches!(parse_size("-1"), Err(SizeError::Malformed(_))));
        assert!(matches!(
            parse_size("1.5M"),
            Err(SizeError::UnknownUnit(..))
        ));
        assert!(matches!(parse_size("3T"), Err(SizeError::UnknownUnit(..))));
        assert!(matches!(
            parse_size("99999999999999999999"),
            Err(SizeError::Overflow(_))
        ));
        assert!(matches!(
            parse_size("99999999999G"),
            Err(SizeError::Overflow(_))
        ));
        assert_eq!(parse_sizes("1,4K,1M"), Ok(vec![1, 4096, 1 << 20]));
        assert_eq!(parse_sizes("1,0"), Err(SizeError::Zero));
    }

    #[test]
    fn sizes_print_exactly() {
        assert_eq!(format_size(1), "1 B");
        assert_eq!(format_size(1536), "1536 B");
        assert_eq!(format_size(4096), "4 KiB");
        assert_eq!(format_size(3 << 20), "3 MiB");
        assert_eq!(format_size(1 << 30), "1 GiB");
        for s in ["1", "4K", "1M", "12G", "65537"] {
            let b = parse_size(s).expect("valid");
            assert_eq!(parse_size(&format_size(b).replace(' ', "")), Ok(b));
        }
    }

    #[test]
    fn placement_decisions() {
        use Placement::*;
        assert_eq!(choose_cpus(SameCpu, &[0, 1, 2, 3], None), Ok((3, 3)));
        assert_eq!(choose_cpus(CrossCpu, &[0, 1, 2, 3], None), Ok((2, 3)));
        assert_eq!(choose_cpus(SameCpu, &[0], None), Ok((0, 0)));
        let e = choose_cpus(CrossCpu, &[0], None)
            .expect_err("one CPU")
            .to_string();
        assert!(e.contains("--placement cross-cpu needs two CPUs"), "{e}");
        assert!(e.contains("only CPU 0"), "{e}");
        assert_eq!(choose_cpus(CrossCpu, &[0, 1], Some(&[1, 0])), Ok((1, 0)));
        assert!(choose_cpus(CrossCpu, &[0, 1], Some(&[1, 1])).is_err());
        assert!(choose_cpus(CrossCpu, &[0, 1], Some(&[1])).is_err());
        assert!(choose_cpus(CrossCpu, &[0, 1], Some(&[0, 5]))
            .expect_err("not allowed")
            .to_string()
            .contains("CPU 5"));
        assert_eq!(choose_cpus(SameCpu, &[0, 1], Some(&[0])), Ok((0, 0)));
        assert!(choose_cpus(SameCpu, &[0, 1], Some(&[0, 1])).is_err());
        assert!(choose_cpus(SameCpu, &[], None).is_err());
        assert_eq!(choose_cpu(&[0, 1], None), Ok(1));
        assert_eq!(choose_cpu(&[0, 1], Some(0)), Ok(0));
        assert!(choose_cpu(&[0, 1], Some(7)).is_err());
        assert_eq!(Placement::parse("cross-cpu"), Ok(CrossCpu));
        assert!(Placement::parse("numa").is_err());
    }

    #[test]
    fn cpus_seen_and_placement_check() {
        let mut s = CpusSeen::new();
        assert!(!placement_holds(&s.to_vec(), 0));
        s.insert(3);
        s.insert(3);
        assert!(placement_holds(&s.to_vec(), 3));
        let mut t = CpusSeen::new();
        t.insert(70);
        s.merge(&t);
        assert_eq!(s.to_vec(), vec![3, 70]);
        assert!(!placement_holds(&s.to_vec(), 3));
    }

    #[test]
    fn patterns_differ_between_messages() {
        let a: Vec<u8> = (0..64).map(|i| pattern(1, 64, i)).collect();
        let b: Vec<u8> = (0..64).map(|i| pattern(2, 64, i)).collect();
        assert_ne!(a, b);
    }

    #[test]
    fn supervise_returns_the_body_result() {
        let stop = AtomicBool::new(false);
        let (v, ended) = supervise(&stop, || 41 + 1).expect("ran");
        assert_eq!(v, 42);
        assert_eq!(ended.state, RunState::Completed);
        assert!(!stop.load(Ordering::SeqCst));
    }

    /// The wording users and scripts rely on, one case per refusal.
    #[test]
    fn cpu_and_placement_messages_keep_their_wording() {
        let deadline = Policy::parse("d:1ms:10ms").expect("deadline policy");
        let cases = [
            (
                BenchError::UnknownPlacement("numa".into()),
                "--placement numa: use same-cpu (both sides on one CPU) or cross-cpu (one CPU each)".to_string(),
            ),
            (BenchError::NoCpusGiven, "--cpus: give one or two CPUs".into()),
            (
                BenchError::CpusNotAllowed { cpu: 5, allowed: vec![0, 1, 3] },
                "--cpus: this process may not use CPU 5 (allowed: 0-1,3)".into(),
            ),
            (
                BenchError::SameCpuNeedsOne,
                "--placement same-cpu runs both sides on one CPU: give one CPU with --cpus".into(),
            ),
            (
                BenchError::CrossCpuNeedsTwoDifferent,
                "--placement cross-cpu needs two different CPUs: give them as --cpus A,B".into(),
            ),
            (
                BenchError::CrossCpuOnlyOne(0),
                "--placement cross-cpu needs two CPUs, but this process may use only CPU 0: use --placement same-cpu, or run where more CPUs are allowed".into(),
            ),
            (
                BenchError::CpuNotAllowed { cpu: 7, allowed: vec![] },
                "--cpu 7: this process may not use CPU 7 (allowed: none)".into(),
            ),
            (BenchError::NoCpu, "this process may use no CPU at all".into()),
            (
                BenchError::Pin { cpu: 3, errno: Errno::EINVAL },
                format!("cannot pin a thread to CPU 3: {}", Errno::EINVAL),
            ),
            (
                BenchError::Admission { policy: deadline },
                format!(
                    "{}: SCHED_DEADLINE admission control refused the bandwidth",
                    deadline.describe()
                ),
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
