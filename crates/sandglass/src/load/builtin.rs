//! The built-in loads: threads inside sandglass that work in short steps until told to stop.
//!
//! Each kind models one kind of competition a time-critical thread meets on a general-purpose
//! system, after the loads of the seeds: computation (`cpu`), cache and DRAM bandwidth
//! (`memory`), the block layer and journal (`disk`, with an fsync per file), the network stack
//! and its softirqs (`net`), process creation and exec as in a compile (`compile`), wakeups and
//! context switches (`sched`), and the timer wheel and hrtimers (`timers`).

use super::{
    Body, LoadError, LoadKind, LoadOptions, LoadSpec, StartError, Tally, ThreadEnd, ThreadError,
    ThreadPlan, STEP,
};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Iterations of the arithmetic loop between two looks at the stop flag (about 0.1 ms).
const CPU_CHUNK: u64 = 1 << 16;
/// Cache lines read, modified and written between two looks at the stop flag (about 1 ms when
/// every access misses to DRAM).
const MEMORY_CHUNK: u64 = 1 << 13;
const CACHE_LINE: usize = 64;
/// The memory load's working set when the last-level cache size cannot be read.
const MEMORY_DEFAULT: u64 = 64 << 20;
/// The largest working set of one memory worker.
const MEMORY_MAX: u64 = 256 << 20;
/// The smallest working set of one memory worker, however little memory is available.
const MEMORY_MIN: u64 = 1 << 20;
/// Size of each disk worker's file, and of its writes and reads.
pub(crate) const DISK_FILE: u64 = 16 << 20;
const DISK_BLOCK: usize = 1 << 20;
/// Bytes per write and per read of the net load.
const NET_BUFFER: usize = 128 << 10;
/// Token handoffs of one sched thread between two looks at the stop flag.
const SCHED_CHUNK: u32 = 64;
/// The timers load's sleeps, in microseconds.
const TIMER_MIN_US: u64 = 50;
const TIMER_MAX_US: u64 = 1000;

/// One bounded piece of a load's work, well under 10 ms.
trait Step: Send {
    fn step(&mut self, t: &mut Tally) -> Result<(), ThreadError>;
}

/// A thread body that sets up a step with `setup`, reports, waits at the gate, and repeats the
/// step until the loads are stopped.
fn steps<S, F>(setup: F) -> Body
where
    S: Step + 'static,
    F: FnOnce() -> Result<S, ThreadError> + Send + 'static,
{
    Box::new(move |shared, starter, counters| {
        let mut s = match setup() {
            Ok(s) => s,
            Err(e) => {
                let reason = e.to_string();
                starter.ready(Err(e));
                return ThreadEnd::failed(reason);
            }
        };
        starter.ready(Ok(None));
        if !shared.wait_go() {
            return ThreadEnd::default();
        }
        let mut tally = Tally::default();
        let mut error = None;
        while !shared.stopped() {
            if let Err(e) = s.step(&mut tally) {
                // A peer that went away because of the stop is not an error.
                if !shared.stopped() {
                    error = Some(e.to_string());
                }
                break;
            }
            counters.publish(tally);
        }
        ThreadEnd {
            tally,
            ended: Some(Instant::now()),
            error,
            external: None,
        }
    })
}

/// A small fast generator for addresses and sleep lengths (xorshift64*, Vigna 2016).
#[derive(Clone, Copy)]
struct Rng(u64);

impl Rng {
    fn seeded(salt: u64) -> Rng {
        Rng(0x9e37_79b9_7f4a_7c15 ^ salt.wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The threads of a built-in load and the detail its report starts from. `next_cpu` is the
/// round-robin position, carried from one load to the next.
pub(crate) fn plan(
    spec: &LoadSpec,
    cpus: &[usize],
    next_cpu: &mut usize,
    opts: &LoadOptions,
) -> Result<(Vec<ThreadPlan>, Option<String>), LoadError> {
    let text = spec.to_string();
    // No intensity: one worker per CPU of the load's set.
    let workers = match spec.intensity {
        0 => cpus.len().max(1),
        n => n as usize,
    };
    let mut pin = || {
        let cpu = cpus[*next_cpu % cpus.len()];
        *next_cpu += 1;
        vec![cpu]
    };
    let kind = spec.kind.name();
    let mut plans = Vec::new();
    let mut detail = None;
    match &spec.kind {
        LoadKind::Cpu => {
            for i in 0..workers {
                plans.push(ThreadPlan {
                    name: format!("load-cpu-{i}"),
                    cpus: pin(),
                    body: steps(move || Ok(CpuStep(Rng::seeded(i as u64).next()))),
                });
            }
        }
        LoadKind::Memory => {
            let (bytes, why) = memory_working_set(workers as u64);
            detail = Some(format!(
                "working set {} per worker ({why})",
                format_bytes(bytes)
            ));
            for i in 0..workers {
                plans.push(ThreadPlan {
                    name: format!("load-memory-{i}"),
                    cpus: pin(),
                    body: steps(move || MemoryStep::new(bytes as usize, i as u64)),
                });
            }
        }
        LoadKind::Disk => {
            super::check_temp_dir(&text, &opts.temp_dir)?;
            let dir = opts.temp_dir.clone();
            let fs = super::fs_type(&dir);
            detail = Some(match fs.as_deref() {
                Some("tmpfs" | "ramfs") => format!(
                    "{} files in {} (tmpfs: nothing reaches a disk; give a directory on a disk)",
                    format_bytes(DISK_FILE),
                    dir.display()
                ),
                Some(fs) => format!(
                    "{} files in {} ({fs})",
                    format_bytes(DISK_FILE),
                    dir.display()
                ),
                None => format!("{} files in {}", format_bytes(DISK_FILE), dir.display()),
            });
            for i in 0..workers {
                let dir = dir.clone();
                plans.push(ThreadPlan {
                    name: format!("load-disk-{i}"),
                    cpus: pin(),
                    body: steps(move || DiskStep::new(&dir, i as u64)),
                });
            }
        }
        LoadKind::Net => {
            for i in 0..workers {
                let (writer, reader) = loopback_pair().map_err(|source| LoadError::Start {
                    spec: text.clone(),
                    source,
                })?;
                plans.push(ThreadPlan {
                    name: format!("load-net-{i}-tx"),
                    cpus: pin(),
                    body: steps(move || NetWriter::new(writer)),
                });
                plans.push(ThreadPlan {
                    name: format!("load-net-{i}-rx"),
                    cpus: pin(),
                    body: steps(move || NetReader::new(reader)),
                });
            }
            detail = Some("TCP over 127.0.0.1".into());
        }
        LoadKind::Compile => {
            let program =
                find_true().ok_or_else(|| LoadError::TrueMissing { spec: text.clone() })?;
            detail = Some(format!("runs {}", program.display()));
            for i in 0..workers {
                let program = program.clone();
                plans.push(ThreadPlan {
                    name: format!("load-compile-{i}"),
                    cpus: pin(),
                    body: steps(move || Ok(CompileStep(program))),
                });
            }
        }
        LoadKind::Sched => {
            for i in 0..workers {
                let token = Arc::new(Token::default());
                for side in [0u8, 1] {
                    let token = token.clone();
                    plans.push(ThreadPlan {
                        name: format!("load-sched-{i}{}", if side == 0 { 'a' } else { 'b' }),
                        cpus: pin(),
                        body: steps(move || Ok(SchedStep { token, side })),
                    });
                }
            }
            detail = Some(format!("{workers} pair(s) of threads passing a token"));
        }
        LoadKind::Timers => {
            for i in 0..workers {
                plans.push(ThreadPlan {
                    name: format!("load-timers-{i}"),
                    cpus: pin(),
                    body: steps(move || Ok(TimerStep(Rng::seeded(i as u64 + 1)))),
                });
            }
            detail = Some(format!(
                "sleeps of {} to {}",
                crate::Nanos::from_micros(TIMER_MIN_US),
                crate::Nanos::from_micros(TIMER_MAX_US)
            ));
        }
        LoadKind::StressNg(_) | LoadKind::Command(_) => {
            return Err(LoadError::Start {
                spec: text,
                source: StartError::NotBuiltIn { kind },
            })
        }
    }
    Ok((plans, detail))
}

/// The report's detail: the plan's, with the counts only the kind knows.
pub(crate) fn detail(kind: &LoadKind, t: Tally, secs: f64, base: Option<String>) -> Option<String> {
    let rate = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let joined = |first: String| match &base {
        Some(b) => Some(format!("{first}; {b}")),
        None => Some(first),
    };
    match kind {
        LoadKind::Disk => joined(format!("{} fsyncs ({:.1}/s)", t.aux, rate(t.aux))),
        LoadKind::Net => joined(format!("{} sent", format_bytes(t.aux))),
        _ => base,
    }
}

/// `bytes` with a binary prefix: `16 MiB`, `1.5 GiB`, `512 B`.
pub(crate) fn format_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    for (unit, scale) in [
        ("GiB", (1u64 << 30) as f64),
        ("MiB", (1u64 << 20) as f64),
        ("KiB", 1024.0),
    ] {
        if b >= scale {
            let v = b / scale;
            return if v.fract() == 0.0 {
                format!("{v:.0} {unit}")
            } else {
                format!("{v:.1} {unit}")
            };
        }
    }
    format!("{bytes} B")
}

struct CpuStep(u64);

impl Step for CpuStep {
    fn step(&mut self, t: &mut Tally) -> Result<(), ThreadError> {
        let mut x = self.0;
        for _ in 0..CPU_CHUNK {
            // A multiply-xorshift chain: every iteration depends on the last, so the loop can be
            // neither vectorised nor skipped.
            x = x
                .wrapping_mul(0x5851_f42d_4c95_7f2d)
                .wrapping_add(0x1405_7b7e_f767_814f);
            x ^= x >> 33;
        }
        self.0 = std::hint::black_box(x);
        t.work += CPU_CHUNK;
        Ok(())
    }
}

/// The size of the largest data or unified cache `cpu0` reports, from
/// `/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}`.
pub(crate) fn last_level_cache_bytes() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let read = |p: &Path, f: &str| std::fs::read_to_string(p.join(f)).ok();
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let p = e.path();
            let level: u32 = read(&p, "level")?.trim().parse().ok()?;
            let kind = read(&p, "type")?;
            if kind.trim() == "Instruction" {
                return None;
            }
            Some((level, parse_cache_size(&read(&p, "size")?)?))
        })
        .max()
        .map(|(_, size)| size)
}

/// A sysfs cache size: `32768K`, `8M`, `512`.
pub(crate) fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, scale) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 1 << 10),
        'M' => (&t[..t.len() - 1], 1 << 20),
        'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits
        .parse::<u64>()
        .ok()?
        .checked_mul(scale)
        .filter(|&b| b > 0)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The working set of each of `workers` memory workers, and why: twice the last-level cache
/// (so that most accesses miss it), at most [`MEMORY_MAX`], and all workers together at most
/// half the available memory.
fn memory_working_set(workers: u64) -> (u64, String) {
    let (mut bytes, mut why) = match last_level_cache_bytes() {
        Some(llc) if 2 * llc > MEMORY_MAX => (
            MEMORY_MAX,
            format!(
                "twice the {} last-level cache would exceed the {} limit",
                format_bytes(llc),
                format_bytes(MEMORY_MAX)
            ),
        ),
        Some(llc) => (
            2 * llc,
            format!("twice the {} last-level cache", format_bytes(llc)),
        ),
        None => (
            MEMORY_DEFAULT,
            "the last-level cache size is unknown".to_string(),
        ),
    };
    if let Some(avail) = mem_available_bytes() {
        let share = avail / 2 / workers.max(1);
        if bytes > share {
            bytes = share.max(MEMORY_MIN);
            why = format!("{why}, reduced to keep within half the available memory");
        }
    }
    (bytes / CACHE_LINE as u64 * CACHE_LINE as u64, why)
}

struct MemoryStep {
    words: Vec<u64>,
    rng: Rng,
}

impl MemoryStep {
    /// Allocates and touches the working set, so that page faults are over before the start.
    fn new(bytes: usize, salt: u64) -> Result<MemoryStep, ThreadError> {
        let n = bytes / 8;
        let mut words = Vec::new();
        words
            .try_reserve_exact(n)
            .map_err(|_| ThreadError::Allocate {
                bytes: bytes as u64,
            })?;
        words.extend(0..n as u64);
        Ok(MemoryStep {
            words,
            rng: Rng::seeded(salt + 100),
        })
    }
}

impl Step for MemoryStep {
    fn step(&mut self, t: &mut Tally) -> Result<(), ThreadError> {
        let per_line = CACHE_LINE / 8;
        let lines = (self.words.len() / per_line) as u64;
        if lines == 0 {
            return Err(ThreadError::EmptyWorkingSet);
        }
        for _ in 0..MEMORY_CHUNK {
            let base = (self.rng.next() % lines) as usize * per_line;
            for w in &mut self.words[base..base + per_line] {
                *w = w.wrapping_mul(3).wrapping_add(1);
            }
        }
        t.work += MEMORY_CHUNK * CACHE_LINE as u64;
        Ok(())
    }
}

/// Where a disk worker is in its cycle: write the file, fsync, read it back, truncate.
enum DiskPhase {
    Write(u64),
    Read(u64),
}

struct DiskStep {
    file: File,
    block: Vec<u8>,
    phase: DiskPhase,
}

impl DiskStep {
    fn new(dir: &Path, salt: u64) -> Result<DiskStep, ThreadError> {
        let file = super::anonymous_file(dir).map_err(|source| ThreadError::CreateFile {
            dir: dir.to_path_buf(),
            source,
        })?;
        // Data that no layer can compress or deduplicate.
        let mut rng = Rng::seeded(salt + 200);
        let block = (0..DISK_BLOCK).map(|_| rng.next() as u8).collect();
        Ok(DiskStep {
            file,
            block,
            phase: DiskPhase::Write(0),
        })
    }
}

impl Step for DiskStep {
    fn step(&mut self, t: &mut Tally) -> Result<(), ThreadError> {
        let fail = |call: &'static str, source: std::io::Error| ThreadError::Disk { call, source };
        match self.phase {
            DiskPhase::Write(off) => {
                self.file
                    .write_all_at(&self.block, off)
                    .map_err(|e| fail("write", e))?;
                t.work += DISK_BLOCK as u64;
                let off = off + DISK_BLOCK as u64;
                if off >= DISK_FILE {
                    self.file.sync_all().map_err(|e| fail("fsync", e))?;
                    t.aux += 1;
                    self.phase = DiskPhase::Read(0);
                } else {
                    self.phase = DiskPhase::Write(off);
                }
            }
            DiskPhase::Read(off) => {
                self.file
                    .read_exact_at(&mut self.block, off)
                    .map_err(|e| fail("read", e))?;
                t.work += DISK_BLOCK as u64;
                let off = off + DISK_BLOCK as u64;
                if off >= DISK_FILE {
                    self.file.set_len(0).map_err(|e| fail("truncate", e))?;
                    self.phase = DiskPhase::Write(0);
                } else {
                    self.phase = DiskPhase::Read(off);
                }
            }
        }
        Ok(())
    }
}

/// A connected TCP pair over loopback: (the writer's end, the reader's end).
fn loopback_pair() -> Result<(TcpStream, TcpStream), StartError> {
    let io = |action: &str, source: std::io::Error| StartError::Loopback {
        action: action.to_string(),
        source,
    };
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| io("cannot listen on 127.0.0.1", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| io("cannot read the listening address", e))?;
    let writer = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| io(&format!("cannot connect to {addr}"), e))?;
    let mine = writer
        .local_addr()
        .map_err(|e| io("cannot read the local address", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| io("cannot make the listener non-blocking", e))?;
    let deadline = Instant::now() + Duration::from_secs(2);
    let reader = loop {
        match listener.accept() {
            // Anything else that connected to the ephemeral port is not ours.
            Ok((s, peer)) if peer == mine => break s,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(io(&format!("cannot accept the connection on {addr}"), e)),
        }
    };
    reader
        .set_nonblocking(false)
        .map_err(|e| io("cannot make the socket blocking", e))?;
    Ok((writer, reader))
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

struct NetWriter {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl NetWriter {
    fn new(stream: TcpStream) -> Result<NetWriter, ThreadError> {
        stream
            .set_write_timeout(Some(STEP))
            .map_err(|source| ThreadError::SocketTimeout {
                direction: "write",
                source,
            })?;
        let mut rng = Rng::seeded(300);
        Ok(NetWriter {
            stream,
            buf: (0..NET_BUFFER).map(|_| rng.next() as u8).collect(),
        })
    }
}

impl Step for NetWriter {
    fn step(&mut self, t: &mut Tally) -> Result<(), ThreadError> {
        match self.stream.write(&self.buf) {
            Ok(n) => t.aux += n as u64,
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err(ThreadError::Send(e)),
        }
        Ok(())
    }
}

struct NetReader {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl NetReader {
    fn new(stream: TcpStream) -> Result<NetReader, ThreadError> {
        stream
            .set_read_timeout(Some(STEP))
            .map_err(|source| ThreadError::SocketTimeout {
                direction: "read",
                source,
            })?;
        Ok(NetReader {
            stream,
            buf: vec![0; NET_BUFFER],
        })
    }
}

impl Step for NetReader {
    fn step(&mut self, t: &mut Tally) -> Result<(), ThreadError> {
        match self.stream.read(&mut self.buf) {
            Ok(0) => Err(ThreadError::ConnectionClosed),
            Ok(n) => {
                t.work += n as u64;
                Ok(())
            }
            Err(e) if timed_out(&e) => Ok(()),
            Err(e) => Err(ThreadError::Receive(e)),
        }
    }
}

/// `true`, which the compile load runs: `/bin/true`, `/usr/bin/true`, or the first on `PATH`.
fn find_true() -> Option<PathBuf> {
    ["/bin/true", "/usr/bin/true"]
        .iter()
        .map(PathBuf::from)
        .find(|p| super::is_executable(p))
        .or_else(|| super::find_program("true", std::env::var_os("PATH").as_deref()))
}

/// Starts `true` and waits for it. std starts a command without a pre-exec hook with
/// `posix_spawn`, a vfork-style clone, as GNU make does: its cost does not grow with
/// sandglass's own memory.
struct CompileStep(PathBuf);

impl Step for CompileStep {
    fn step(&mut self, t: &mut Tally) -> Result<(), ThreadError> {
        // `true` exits at once, so the wait is as short as the process's life.
        let status = Command::new(&self.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|source| ThreadError::Run {
                program: self.0.clone(),
                source,
            })?;
        if !status.success() {
            return Err(ThreadError::ProgramFailed {
                program: self.0.clone(),
                status,
            });
        }
        t.work += 1;
        Ok(())
    }
}

/// The token of a sched pair: whose turn it is.
#[derive(Default)]
struct Token {
    turn: Mutex<u8>,
    passed: Condvar,
}

struct SchedStep {
    token: Arc<Token>,
    side: u8,
}

impl Step for SchedStep {
    fn step(&mut self, t: &mut Tally) -> Result<(), ThreadError> {
        let mut turn = self.token.turn.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..SCHED_CHUNK {
            while *turn != self.side {
                let (g, wait) = self
                    .token
                    .passed
                    .wait_timeout(turn, STEP)
                    .unwrap_or_else(|p| p.into_inner());
                turn = g;
                if wait.timed_out() {
                    // Let the caller look at the stop flag.
                    return Ok(());
                }
            }
            *turn = 1 - self.side;
            t.work += 1;
            self.token.passed.notify_one();
        }
        Ok(())
    }
}

struct TimerStep(Rng);

impl Step for TimerStep {
    fn step(&mut self, t: &mut Tally) -> Result<(), ThreadError> {
        let us = TIMER_MIN_US + self.0.next() % (TIMER_MAX_US - TIMER_MIN_US + 1);
        std::thread::sleep(Duration::from_micros(us));
        t.work += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("8M"), Some(8 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("0K"), None);
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size(""), None);
    }

    #[test]
    fn byte_counts() {
        assert_eq!(format_bytes(16 << 20), "16 MiB");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
        assert_eq!(format_bytes(512), "512 B");
    }

    #[test]
    fn working_sets_are_bounded() {
        let (one, why) = memory_working_set(1);
        assert!((MEMORY_MIN..=MEMORY_MAX).contains(&one), "{one}: {why}");
        assert_eq!(one % CACHE_LINE as u64, 0);
        let (many, _) = memory_working_set(256);
        assert!(many <= one);
    }

    #[test]
    fn timer_sleeps_stay_in_range() {
        let mut r = Rng::seeded(1);
        for _ in 0..10_000 {
            let us = TIMER_MIN_US + r.next() % (TIMER_MAX_US - TIMER_MIN_US + 1);
            assert!((TIMER_MIN_US..=TIMER_MAX_US).contains(&us));
        }
    }
}
