//! One-way latency and throughput of IPC mechanisms, with the cost model `t(N) = a + N/b`.
//!
//! Dannenberg et al. (§8) sent messages between a client and a server and summarised each data
//! path by a fixed cost and a rate: in-line Mach IPC "(0.160 + N/4000) ms", out-of-line
//! "(1.1 + N/8500) ms", one-way socket transfers from "a client send data to a server, which
//! then sent the same data back ... we can divide the total time by 2", and shared memory with
//! simple notifications; their Figure 3 compares the paths. This module is that comparison on
//! Linux today, for seven mechanisms:
//!
//! | mechanism | path of one message |
//! |---|---|
//! | `pipe` | `write` into a pipe, `read` from it (two pipes, one per direction) |
//! | `unix-stream` | a connected `AF_UNIX` `SOCK_STREAM` pair |
//! | `unix-dgram` | a connected `AF_UNIX` `SOCK_DGRAM` pair; messages above 64 KiB travel as 64 KiB datagrams |
//! | `tcp` | a TCP connection over loopback with `TCP_NODELAY` |
//! | `mq` | POSIX message queues; messages above the queue's message size (`/proc/sys/fs/mqueue/msgsize_max`) travel as several |
//! | `shm-futex` | copy into a shared-memory slot, `FUTEX_WAKE`; the receiver sleeps in `FUTEX_WAIT` and copies out |
//! | `shm-eventfd` | the same slot, the receiver woken through an eventfd |
//!
//! A client thread sends N bytes, a server thread receives all N and sends them back, and the
//! client receives all N: one round trip, timed with CLOCK_MONOTONIC; the one-way latency is
//! half of it (rounded down to whole nanoseconds), as in the seed. Throughput is N divided by
//! the mean one-way latency: what one message at a time achieves, not a stream. The two
//! threads are pinned with their affinity, both to one CPU (`same-cpu`: every message also
//! costs two context switches) or to two (`cross-cpu`: a sleeping receiver is woken by an
//! inter-processor interrupt), and each records the CPU it ran on at every message so that the
//! placement is verified, not assumed. Every message the client checks carries a pattern that
//! depends on its sequence number, and the echoed bytes must equal it.
//!
//! The model `t(N) = a + N/b` is fitted per mechanism to the median one-way latency at each size
//! with [`crate::analysis::fit::fit_cost`]; the residuals show where the line does not hold
//! (a pipe's 64 KiB capacity, the caches).

#[cfg(feature = "linux")]
use super::{now, pattern, setup_thread, CpusSeen, Session};
use super::{Header, Placement, ThreadSetup};
use crate::analysis::fit::{fit_cost, CostFit, FitError, Point};
use crate::kind::{fig, KeyFigure, OverCpus, Unit, LOAD};
use crate::policy::Policy;
use crate::probe::{array, num, Figures, Probe};
#[cfg(feature = "linux")]
use crate::runner::{Observer, RunContext, RunError};
use crate::stats::Summary;
use crate::units::Nanos;
#[cfg(feature = "linux")]
use crate::warning::{Warning, WarningKind};
use crate::RunKind;
#[cfg(feature = "linux")]
use sandglass_sys::ipc::{self as sys, MessageQueue, Notify, ShmEnd};
use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "linux")]
use std::fs::File;
#[cfg(feature = "linux")]
use std::io::{self, Read, Write};
#[cfg(feature = "linux")]
use std::net::{TcpListener, TcpStream};
#[cfg(feature = "linux")]
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::PathBuf;
#[cfg(feature = "linux")]
use std::sync::atomic::AtomicBool;
#[cfg(feature = "linux")]
use std::sync::atomic::Ordering;
#[cfg(feature = "linux")]
use std::sync::Arc;
#[cfg(feature = "linux")]
use std::time::Duration;
use thiserror::Error;

/// An IPC mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    Pipe,
    UnixStream,
    UnixDgram,
    Tcp,
    Mq,
    ShmFutex,
    ShmEventfd,
}

impl Mechanism {
    pub const ALL: [Mechanism; 7] = [
        Mechanism::Pipe,
        Mechanism::UnixStream,
        Mechanism::UnixDgram,
        Mechanism::Tcp,
        Mechanism::Mq,
        Mechanism::ShmFutex,
        Mechanism::ShmEventfd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Pipe => "pipe",
            Mechanism::UnixStream => "unix-stream",
            Mechanism::UnixDgram => "unix-dgram",
            Mechanism::Tcp => "tcp",
            Mechanism::Mq => "mq",
            Mechanism::ShmFutex => "shm-futex",
            Mechanism::ShmEventfd => "shm-eventfd",
        }
    }

    pub fn parse(text: &str) -> Result<Mechanism, IpcError> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name() == text.trim())
            .ok_or_else(|| IpcError::UnknownMechanism(text.trim().to_string()))
    }
}

/// Why an IPC configuration was refused, named by its flag with the fix.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum IpcError {
    #[error("--mech {0}: unknown mechanism; use {names} or all", names = Mechanism::ALL.map(|m| m.name()).join(", "))]
    UnknownMechanism(String),
    #[error("--mech: give at least one mechanism, or all")]
    NoMechanisms,
    #[error("--sizes: give at least one size")]
    NoSizes,
    #[error("--sizes: a message of 0 bytes carries nothing; give sizes of at least 1 byte")]
    ZeroSize,
    #[error("--sizes: {} is larger than the 64 MiB this benchmark sends at most", super::format_size(*.0))]
    SizeTooLarge(u64),
    #[error("--cell-time must be longer than zero")]
    ZeroCellTime,
    #[error("--max-samples must be at least 1")]
    ZeroMaxSamples,
    #[error("-P: SCHED_DEADLINE is not offered here; use f:PRIO, r:PRIO, o:NICE, b or i")]
    Deadline,
    /// `--placement` and `--cpus` ask for CPUs this process cannot use.
    #[error(transparent)]
    Cpus(#[from] super::BenchError),
}

/// Parses `all` or a comma-separated list of mechanisms (repeats are dropped).
pub fn parse_mechanisms(text: &str) -> Result<Vec<Mechanism>, IpcError> {
    if text.trim() == "all" {
        return Ok(Mechanism::ALL.to_vec());
    }
    let mut out = Vec::new();
    for part in text.split(',') {
        let m = Mechanism::parse(part)?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

/// The largest datagram sent at once; larger messages travel as several.
pub const DGRAM_FRAGMENT: usize = 64 << 10;
/// No receive or send waits longer than this: a peer that died cannot hang the benchmark.
#[cfg(feature = "linux")]
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The default message sizes: 1 byte to 1 MiB.
pub const DEFAULT_SIZES: [u64; 8] = [
    1,
    64,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
];
/// At least this many measured round trips per cell, however long they take.
#[cfg(feature = "linux")]
const MIN_SAMPLES: usize = 10;

/// Which messages the client checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Verify {
    /// Every warm-up message, the first three measured ones and every 64th.
    Sampled,
    /// Every message.
    Every,
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IpcConfig {
    pub mechanisms: Vec<Mechanism>,
    pub sizes: Vec<u64>,
    pub placement: Placement,
    /// CPUs for the client and the server; `None`: [`super::choose_cpus`]'s default.
    pub cpus: Option<Vec<usize>>,
    pub policy: Policy,
    /// Time spent measuring each (mechanism, size) cell.
    pub cell_time_ns: Nanos,
    /// At most this many measured round trips per cell.
    pub max_samples: usize,
    /// Round trips before the measured ones, per cell.
    pub warmup: usize,
    pub verify: Verify,
    pub output_dir: Option<PathBuf>,
}

impl Default for IpcConfig {
    fn default() -> IpcConfig {
        IpcConfig {
            mechanisms: Mechanism::ALL.to_vec(),
            sizes: DEFAULT_SIZES.to_vec(),
            placement: Placement::SameCpu,
            cpus: None,
            policy: Policy::Other { nice: 0 },
            cell_time_ns: Nanos::from_millis(150),
            max_samples: 10_000,
            warmup: 20,
            verify: Verify::Sampled,
            output_dir: None,
        }
    }
}

/// The kernel's limits on POSIX message queues (`/proc/sys/fs/mqueue`): messages per queue and
/// bytes per message for unprivileged processes.
pub fn mq_limits() -> (usize, usize) {
    let rd = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/fs/mqueue/{f}"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    };
    (
        rd("msg_max").unwrap_or(10),
        rd("msgsize_max").unwrap_or(8192),
    )
}

/// One end of a channel.
#[cfg(feature = "linux")]
pub(crate) enum End {
    Pipe {
        rx: File,
        tx: File,
    },
    Unix(UnixStream),
    Tcp(TcpStream),
    Dgram(UnixDatagram),
    Mq {
        tx: Arc<MessageQueue>,
        rx: Arc<MessageQueue>,
        scratch: Vec<u8>,
    },
    Shm(ShmEnd),
}

/// Two connected ends and the largest piece a message travels in (`None`: whole).
#[cfg(feature = "linux")]
pub(crate) struct Channel {
    pub a: End,
    pub b: End,
    pub fragment: Option<usize>,
}

#[cfg(feature = "linux")]
fn sys_err(what: &str, e: sandglass_sys::Errno) -> io::Error {
    io::Error::new(io::Error::from(e).kind(), format!("{what}: {e}"))
}

/// Creates a channel of mechanism `m` for messages of up to `max_bytes` bytes.
#[cfg(feature = "linux")]
pub(crate) fn channel(m: Mechanism, max_bytes: usize) -> io::Result<Channel> {
    let timeouts = |s: &UnixStream| -> io::Result<()> {
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        s.set_write_timeout(Some(IO_TIMEOUT))
    };
    Ok(match m {
        Mechanism::Pipe => {
            let (r1, w1) = sys::pipe().map_err(|e| sys_err("pipe2", e))?;
            let (r2, w2) = sys::pipe().map_err(|e| sys_err("pipe2", e))?;
            Channel {
                a: End::Pipe { rx: r2, tx: w1 },
                b: End::Pipe { rx: r1, tx: w2 },
                fragment: None,
            }
        }
        Mechanism::UnixStream => {
            let (a, b) = UnixStream::pair()?;
            timeouts(&a)?;
            timeouts(&b)?;
            Channel {
                a: End::Unix(a),
                b: End::Unix(b),
                fragment: None,
            }
        }
        Mechanism::UnixDgram => {
            let (a, b) = UnixDatagram::pair()?;
            for s in [&a, &b] {
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
            }
            Channel {
                a: End::Dgram(a),
                b: End::Dgram(b),
                fragment: (max_bytes > DGRAM_FRAGMENT).then_some(DGRAM_FRAGMENT),
            }
        }
        Mechanism::Tcp => {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let a = TcpStream::connect(listener.local_addr()?)?;
            let (b, _) = listener.accept()?;
            for s in [&a, &b] {
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
            }
            Channel {
                a: End::Tcp(a),
                b: End::Tcp(b),
                fragment: None,
            }
        }
        Mechanism::Mq => {
            let (msg_max, msgsize_max) = mq_limits();
            let piece = max_bytes.clamp(1, msgsize_max.max(1));
            let depth = msg_max.clamp(1, 10);
            let make = || {
                MessageQueue::create_anonymous(depth, piece)
                    .map(Arc::new)
                    .map_err(|e| {
                        sys_err(&format!("mq_open ({depth} messages of {piece} bytes)"), e)
                    })
            };
            let (q1, q2) = (make()?, make()?);
            Channel {
                a: End::Mq {
                    tx: q1.clone(),
                    rx: q2.clone(),
                    scratch: vec![0; piece],
                },
                b: End::Mq {
                    tx: q2,
                    rx: q1,
                    scratch: vec![0; piece],
                },
                fragment: (max_bytes > piece).then_some(piece),
            }
        }
        Mechanism::ShmFutex | Mechanism::ShmEventfd => {
            let notify = if m == Mechanism::ShmFutex {
                Notify::Futex
            } else {
                Notify::EventFd
            };
            let (a, b) = sys::shm_channel(max_bytes, notify)
                .map_err(|e| sys_err("shared-memory channel", e))?;
            Channel {
                a: End::Shm(a),
                b: End::Shm(b),
                fragment: None,
            }
        }
    })
}

/// Reads exactly `buf.len()` bytes from a stream; `Ok(false)` on end of file before the first.
#[cfg(feature = "linux")]
fn read_stream(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut off = 0;
    while off < buf.len() {
        match r.read(&mut buf[off..]) {
            Ok(0) if off == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(feature = "linux")]
fn bad_piece(got: usize, want: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("a piece of {got} bytes arrived where {want} were expected"),
    )
}

#[cfg(feature = "linux")]
impl End {
    /// Sends one message of `data.len()` bytes (at least 1).
    pub(crate) fn send(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            End::Pipe { tx, .. } => tx.write_all(data),
            End::Unix(s) => s.write_all(data),
            End::Tcp(s) => s.write_all(data),
            End::Dgram(s) => {
                for piece in data.chunks(DGRAM_FRAGMENT) {
                    let n = s.send(piece)?;
                    if n != piece.len() {
                        return Err(bad_piece(n, piece.len()));
                    }
                }
                Ok(())
            }
            End::Mq { tx, .. } => {
                let t = IO_TIMEOUT.as_nanos() as u64;
                for piece in data.chunks(tx.message_bytes()) {
                    tx.send(piece, t).map_err(|e| sys_err("mq_timedsend", e))?;
                }
                Ok(())
            }
            End::Shm(e) => e.send(data).map_err(|e| sys_err("shared-memory send", e)),
        }
    }

    /// Receives one message of exactly `buf.len()` bytes (at least 1); `Ok(false)` when the
    /// peer closed before it.
    #[cfg(feature = "linux")]
    pub(crate) fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        match self {
            End::Pipe { rx, .. } => read_stream(rx, buf),
            End::Unix(s) => read_stream(s, buf),
            End::Tcp(s) => read_stream(s, buf),
            End::Dgram(s) => {
                let mut off = 0;
                while off < buf.len() {
                    let want = (buf.len() - off).min(DGRAM_FRAGMENT);
                    let n = match s.recv(&mut buf[off..off + want]) {
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        r => r?,
                    };
                    if n == 0 && off == 0 {
                        return Ok(false);
                    }
                    if n != want {
                        return Err(bad_piece(n, want));
                    }
                    off += n;
                }
                Ok(true)
            }
            End::Mq { rx, scratch, .. } => {
                let piece = rx.message_bytes();
                let t = IO_TIMEOUT.as_nanos() as u64;
                let mut off = 0;
                while off < buf.len() {
                    let want = (buf.len() - off).min(piece);
                    let direct = buf.len() - off >= piece;
                    let target: &mut [u8] = if direct {
                        &mut buf[off..off + piece]
                    } else {
                        &mut scratch[..]
                    };
                    let n = match rx.receive(target, t) {
                        Err(e) if e == sandglass_sys::Errno::EINTR => continue,
                        r => r.map_err(|e| sys_err("mq_timedreceive", e))?,
                    };
                    if n == 0 && off == 0 {
                        return Ok(false);
                    }
                    if n != want {
                        return Err(bad_piece(n, want));
                    }
                    if !direct {
                        buf[off..off + n].copy_from_slice(&scratch[..n]);
                    }
                    off += n;
                }
                Ok(true)
            }
            End::Shm(e) => match e
                .recv(buf)
                .map_err(|e| sys_err("shared-memory receive", e))?
            {
                None => Ok(false),
                Some(n) if n == buf.len() => Ok(true),
                Some(n) => Err(bad_piece(n, buf.len())),
            },
        }
    }

    /// Tells the peer that no message follows: closing a stream, or an empty message where
    /// messages have boundaries.
    pub(crate) fn close(mut self) {
        match &mut self {
            End::Dgram(s) => {
                let _ = s.send(&[]);
            }
            End::Mq { tx, .. } => {
                let _ = tx.send(&[], IO_TIMEOUT.as_nanos() as u64);
            }
            End::Shm(e) => e.close(),
            End::Unix(s) => {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
            End::Tcp(s) => {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
            End::Pipe { .. } => {}
        }
    }
}

/// One (mechanism, size) cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IpcCell {
    pub size_bytes: u64,
    /// Measured round trips (warm-up excluded).
    pub round_trips: u64,
    /// Half of each round trip.
    pub one_way_ns: Option<Summary>,
    /// `size / mean one-way latency`.
    pub throughput_bytes_per_s: Option<f64>,
    /// Pieces each message travelled in (1 unless the mechanism limits message size).
    pub pieces_per_message: u64,
    /// Messages whose echo was compared with what was sent, byte for byte.
    pub verified_messages: u64,
    pub client_cpus: Vec<usize>,
    pub server_cpus: Vec<usize>,
    /// Both sides ran only on their CPUs at every message.
    pub placement_verified: bool,
    pub error: Option<String>,
}

/// One mechanism over every size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MechanismResult {
    pub mechanism: Mechanism,
    /// The largest piece a message travels in, when the mechanism limits it.
    pub max_piece_bytes: Option<u64>,
    pub cells: Vec<IpcCell>,
    /// `t(N) = a + N/b` fitted to the median one-way latency of each size.
    pub model: Option<CostFit>,
    /// The points fitted, in the order of the model's residuals.
    pub model_points: Vec<Point>,
    /// Why there is no model.
    pub model_error: Option<String>,
    pub client: Option<ThreadSetup>,
    pub server: Option<ThreadSetup>,
    pub placement_verified: bool,
}

/// The result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IpcResult {
    #[serde(flatten)]
    pub header: Header,
    pub placement: Placement,
    pub client_cpu: usize,
    pub server_cpu: usize,
    /// The two CPUs are SMT siblings of one core (cross-cpu only).
    pub smt_siblings: Option<bool>,
    pub sizes: Vec<u64>,
    pub mechanisms: Vec<MechanismResult>,
}

impl IpcResult {
    /// Every cell error, as `mechanism size: error`.
    pub fn errors(&self) -> Vec<String> {
        self.mechanisms
            .iter()
            .flat_map(|m| {
                m.cells.iter().filter_map(move |c| {
                    c.error.as_ref().map(|e| {
                        format!(
                            "{} {}: {e}",
                            m.mechanism.name(),
                            super::format_size(c.size_bytes)
                        )
                    })
                })
            })
            .collect()
    }
}

/// Every round trip of a mechanism, by size.
#[cfg(feature = "linux")]
type RawSamples = Vec<(u64, Vec<i64>)>;

/// What the client of one cell measured.
#[cfg(feature = "linux")]
struct ClientOutcome {
    samples: Vec<i64>,
    seen: CpusSeen,
    verified: u64,
    setup: Option<ThreadSetup>,
    error: Option<String>,
}

#[cfg(feature = "linux")]
struct ServerOutcome {
    seen: CpusSeen,
    setup: Option<ThreadSetup>,
    error: Option<String>,
}

#[cfg(feature = "linux")]
fn serve(mut end: End, n: usize, cpu: usize, policy: &Policy, privileged: bool) -> ServerOutcome {
    let mut out = ServerOutcome {
        seen: CpusSeen::new(),
        setup: None,
        error: None,
    };
    match setup_thread(cpu, policy, privileged) {
        Ok(s) => out.setup = Some(s),
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    }
    let mut buf = vec![0u8; n];
    loop {
        match end.recv_exact(&mut buf) {
            Ok(true) => {
                out.seen.record_current();
                if let Err(e) = end.send(&buf) {
                    out.error = Some(format!("the server could not reply: {e}"));
                    break;
                }
            }
            Ok(false) => break,
            Err(e) => {
                out.error = Some(format!("the server could not receive: {e}"));
                break;
            }
        }
    }
    out
}

#[cfg(feature = "linux")]
struct ClientArgs<'a> {
    n: usize,
    cpu: usize,
    config: &'a IpcConfig,
    privileged: bool,
    stop: &'a AtomicBool,
}

#[cfg(feature = "linux")]
fn client(end: &mut End, a: &ClientArgs<'_>) -> ClientOutcome {
    let cap = a.config.max_samples.max(MIN_SAMPLES);
    let mut out = ClientOutcome {
        samples: Vec::with_capacity(cap),
        seen: CpusSeen::new(),
        verified: 0,
        setup: None,
        error: None,
    };
    match setup_thread(a.cpu, &a.config.policy, a.privileged) {
        Ok(s) => out.setup = Some(s),
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    }
    let n = a.n;
    let mut tx = vec![0u8; n];
    let mut rx = vec![0u8; n];
    let warmup = a.config.warmup as u64;
    let mut deadline = u64::MAX;
    let mut seq = 0u64;
    loop {
        let measured = seq >= warmup;
        if measured && deadline == u64::MAX {
            deadline = now() + a.config.cell_time_ns.0;
        }
        let i = seq.saturating_sub(warmup);
        let check = !measured || a.config.verify == Verify::Every || i < 3 || i.is_multiple_of(64);
        if check {
            for (k, b) in tx.iter_mut().enumerate() {
                *b = pattern(seq, n as u64, k);
            }
            rx.fill(0);
        }
        let t0 = now();
        if let Err(e) = end.send(&tx) {
            out.error = Some(format!("the client could not send: {e}"));
            break;
        }
        match end.recv_exact(&mut rx) {
            Ok(true) => {}
            Ok(false) => {
                out.error = Some("the server closed the channel".to_string());
                break;
            }
            Err(e) => {
                out.error = Some(format!("the client could not receive the reply: {e}"));
                break;
            }
        }
        let t1 = now();
        out.seen.record_current();
        if check {
            if let Some(k) = tx.iter().zip(&rx).position(|(x, y)| x != y) {
                out.error = Some(format!(
                    "corrupted: message {seq} came back with byte {k} = {} where {} was sent",
                    rx[k], tx[k]
                ));
                break;
            }
            out.verified += 1;
        }
        seq += 1;
        if measured {
            out.samples.push((t1 - t0) as i64);
            let enough = out.samples.len() >= MIN_SAMPLES;
            if out.samples.len() >= cap
                || (enough && (t1 >= deadline || a.stop.load(Ordering::Relaxed)))
            {
                break;
            }
        }
    }
    out
}

/// Measures one cell: a fresh channel, a server thread and a client thread.
#[cfg(feature = "linux")]
fn cell(
    m: Mechanism,
    n: usize,
    cpus: (usize, usize),
    config: &IpcConfig,
    privileged: bool,
    stop: &AtomicBool,
) -> (IpcCell, Option<usize>, ClientOutcome, Option<ThreadSetup>) {
    let mut c = IpcCell {
        size_bytes: n as u64,
        round_trips: 0,
        one_way_ns: None,
        throughput_bytes_per_s: None,
        pieces_per_message: 1,
        verified_messages: 0,
        client_cpus: Vec::new(),
        server_cpus: Vec::new(),
        placement_verified: false,
        error: None,
    };
    let empty = ClientOutcome {
        samples: Vec::new(),
        seen: CpusSeen::new(),
        verified: 0,
        setup: None,
        error: None,
    };
    let ch = match channel(m, n) {
        Ok(ch) => ch,
        Err(e) => {
            c.error = Some(format!("cannot create the channel: {e}"));
            return (c, None, empty, None);
        }
    };
    let fragment = ch.fragment;
    if let Some(f) = fragment {
        c.pieces_per_message = n.div_ceil(f) as u64;
    }
    let Channel { a, b, .. } = ch;
    let policy = config.policy;
    let args = ClientArgs {
        n,
        cpu: cpus.0,
        config,
        privileged,
        stop,
    };
    let (client_out, server_out) = std::thread::scope(|s| {
        let server = std::thread::Builder::new()
            .name("sg-ipc-server".into())
            .spawn_scoped(s, move || serve(b, n, cpus.1, &policy, privileged));
        let server = match server {
            Ok(h) => h,
            Err(e) => {
                return (
                    None,
                    Some(ServerOutcome {
                        seen: CpusSeen::new(),
                        setup: None,
                        error: Some(format!("cannot create the server thread: {e}")),
                    }),
                )
            }
        };
        let client_h = std::thread::Builder::new()
            .name("sg-ipc-client".into())
            .spawn_scoped(s, move || {
                let mut a = a;
                let out = client(&mut a, &args);
                a.close();
                out
            });
        let client_out = client_h.ok().and_then(|h| h.join().ok());
        (client_out, server.join().ok())
    });
    let client_out = client_out.unwrap_or(ClientOutcome {
        error: Some("the client thread failed".to_string()),
        ..empty
    });
    let server_out = server_out.unwrap_or(ServerOutcome {
        seen: CpusSeen::new(),
        setup: None,
        error: Some("the server thread failed".to_string()),
    });
    c.round_trips = client_out.samples.len() as u64;
    c.verified_messages = client_out.verified;
    c.client_cpus = client_out.seen.to_vec();
    c.server_cpus = server_out.seen.to_vec();
    c.placement_verified = super::placement_holds(&c.client_cpus, cpus.0)
        && super::placement_holds(&c.server_cpus, cpus.1);
    let mut one_way: Vec<i64> = client_out.samples.iter().map(|rt| rt / 2).collect();
    c.one_way_ns = super::summarize(&mut one_way);
    c.throughput_bytes_per_s = c
        .one_way_ns
        .as_ref()
        .filter(|s| s.mean_ns > 0.0)
        .map(|s| n as f64 * 1e9 / s.mean_ns);
    c.error = client_out.error.clone().or(server_out.error);
    (c, fragment, client_out, server_out.setup)
}

/// Fits `t(N) = a + N/b` to the median one-way latency of each size that has one.
pub fn fit_model(cells: &[IpcCell]) -> (Vec<Point>, Result<CostFit, FitError>) {
    let points: Vec<Point> = cells
        .iter()
        .filter_map(|c| {
            c.one_way_ns.as_ref().map(|s| Point {
                size_bytes: c.size_bytes,
                time_ns: s.p50_ns.max(0) as u64,
            })
        })
        .collect();
    let fit = fit_cost(&points);
    (points, fit)
}

/// Checks the configuration; the error names the flag.
pub fn validate(config: &IpcConfig) -> Result<(), IpcError> {
    if config.mechanisms.is_empty() {
        return Err(IpcError::NoMechanisms);
    }
    if config.sizes.is_empty() {
        return Err(IpcError::NoSizes);
    }
    if config.sizes.contains(&0) {
        return Err(IpcError::ZeroSize);
    }
    if let Some(&big) = config.sizes.iter().find(|&&s| s > 64 << 20) {
        return Err(IpcError::SizeTooLarge(big));
    }
    if config.cell_time_ns.0 == 0 {
        return Err(IpcError::ZeroCellTime);
    }
    if config.max_samples == 0 {
        return Err(IpcError::ZeroMaxSamples);
    }
    if config.policy.is_deadline() {
        return Err(IpcError::Deadline);
    }
    Ok(())
}

/// Resolves the CPUs of the client and the server, refusing impossible placements.
pub fn resolve_cpus(config: &IpcConfig, allowed: &[usize]) -> Result<(usize, usize), IpcError> {
    Ok(super::choose_cpus(
        config.placement,
        allowed,
        config.cpus.as_deref(),
    )?)
}

/// Runs the IPC benchmark and writes its run directory.
#[cfg(feature = "linux")]
pub fn run(
    config: &IpcConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<IpcResult, RunError> {
    validate(config).map_err(super::usage)?;
    let allowed = crate::system::allowed_cpus();
    let cpus = resolve_cpus(config, &allowed).map_err(super::usage)?;
    let smt = (cpus.0 != cpus.1)
        .then(|| crate::system::smt_siblings(cpus.0).map(|l| l.contains(cpus.1)))
        .flatten();
    let session = Session::open(
        IpcProbe::KIND,
        config.output_dir.as_deref(),
        ctx,
        serde_json::json!({ "ipc": config, "client_cpu": cpus.0, "server_cpu": cpus.1 }),
    )?;
    let mut warnings = Vec::new();
    if smt == Some(true) {
        warnings.push(Warning::new(
            WarningKind::SmtSibling,
            format!("CPUs {} and {} are SMT siblings of one core: cross-CPU figures include sharing the core; choose CPUs of different cores with --cpus A,B", cpus.0, cpus.1),
        ));
    }
    obs.note(&format!(
        "{} mechanism(s) x {} size(s), client on CPU {} and server on CPU {} ({}), about {} per cell",
        config.mechanisms.len(),
        config.sizes.len(),
        cpus.0,
        cpus.1,
        config.placement.name(),
        config.cell_time_ns
    ));
    let privileged = super::privileged();
    let stop = AtomicBool::new(false);
    let body = || {
        let mut out: Vec<(MechanismResult, RawSamples)> = Vec::new();
        for &m in &config.mechanisms {
            let mut mr = MechanismResult {
                mechanism: m,
                max_piece_bytes: None,
                cells: Vec::new(),
                model: None,
                model_points: Vec::new(),
                model_error: None,
                client: None,
                server: None,
                placement_verified: true,
            };
            let mut raw = Vec::new();
            for &size in &config.sizes {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (c, fragment, client_out, server_setup) =
                    cell(m, size as usize, cpus, config, privileged, &stop);
                if let Some(f) = fragment {
                    mr.max_piece_bytes = Some(f as u64);
                }
                mr.client = mr.client.take().or(client_out.setup);
                mr.server = mr.server.take().or(server_setup);
                mr.placement_verified &= c.placement_verified;
                raw.push((size, client_out.samples));
                mr.cells.push(c);
            }
            let (points, fit) = fit_model(&mr.cells);
            mr.model_points = points;
            match fit {
                Ok(f) => mr.model = Some(f),
                Err(e) => mr.model_error = Some(e.to_string()),
            }
            out.push((mr, raw));
        }
        out
    };
    let (measured, ended) = match super::supervise(&stop, body) {
        Ok(v) => v,
        Err(e) => return Err(session.fail(e.to_string())),
    };
    let (mechanisms, raw): (Vec<MechanismResult>, Vec<_>) = measured.into_iter().unzip();
    let setups: Vec<&ThreadSetup> = mechanisms
        .iter()
        .flat_map(|m| m.client.iter().chain(m.server.iter()))
        .collect();
    super::downgrade_warnings(&setups, &mut warnings);
    if mechanisms.iter().any(|m| !m.placement_verified) {
        warnings.push(Warning::new(
            WarningKind::SharedCpu,
            "a side of some mechanism ran on a CPU other than the one it was pinned to (see client_cpus and server_cpus): a cpuset or CPU hotplug changed the placement during the run".to_string(),
        ));
    }
    let header = session.header(ended.state, &ended.detail, &warnings);
    let result = IpcResult {
        header,
        placement: config.placement,
        client_cpu: cpus.0,
        server_cpu: cpus.1,
        smt_siblings: smt,
        sizes: config.sizes.clone(),
        mechanisms,
    };
    let files = write_files(&session, &result, &raw)?;
    session.finish(&result, &result.header, files)?;
    Ok(result)
}

#[cfg(feature = "linux")]
fn write_files(
    session: &Session,
    r: &IpcResult,
    raw: &[RawSamples],
) -> Result<Vec<crate::store::FileEntry>, RunError> {
    let mut csv = String::from("mechanism,size_bytes,round_trips,one_way_min_ns,one_way_p50_ns,one_way_p90_ns,one_way_p99_ns,one_way_max_ns,one_way_mean_ns,throughput_bytes_per_s,placement_verified,error\n");
    for m in &r.mechanisms {
        for c in &m.cells {
            let s = c.one_way_ns.as_ref();
            let f = |g: fn(&Summary) -> i64| s.map(|s| g(s).to_string()).unwrap_or_default();
            csv.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},\"{}\"\n",
                m.mechanism.name(),
                c.size_bytes,
                c.round_trips,
                f(|s| s.min_ns),
                f(|s| s.p50_ns),
                f(|s| s.p90_ns),
                f(|s| s.p99_ns),
                f(|s| s.max_ns),
                s.map(|s| format!("{:.1}", s.mean_ns)).unwrap_or_default(),
                c.throughput_bytes_per_s
                    .map(|t| format!("{t:.0}"))
                    .unwrap_or_default(),
                c.placement_verified,
                c.error.as_deref().unwrap_or("").replace('"', "'")
            ));
        }
    }
    let mut samples = String::from("mechanism,size_bytes,round_trip_ns\n");
    for (m, cells) in r.mechanisms.iter().zip(raw) {
        for (size, rts) in cells {
            for rt in rts {
                samples.push_str(&format!("{},{size},{rt}\n", m.mechanism.name()));
            }
        }
    }
    Ok(vec![
        session.write(
            "cells.csv",
            csv.as_bytes(),
            "sandglass-bench-ipc-cells-csv/1",
            "one row per (mechanism, size): the one-way latency distribution and throughput",
        )?,
        session.write(
            "samples.csv.gz",
            &super::gzip(samples.as_bytes()),
            "sandglass-bench-ipc-samples-csv/1+gzip",
            "every measured round trip, in nanoseconds (the one-way latency is half)",
        )?,
    ])
}

/// The IPC probe (`bench ipc`): one-way message times by mechanism and size.
pub struct IpcProbe;

impl Probe for IpcProbe {
    const KIND: RunKind = RunKind::BenchIpc;
    type Config = IpcConfig;
    type Result = IpcResult;

    /// Its key figures, in the order people read them.
    const FIGURES: &'static [KeyFigure] = &[
        fig("mechanisms", "mechanisms", Unit::Count, OverCpus::Run),
        fig("one_way_p50_ns", "one way p50", Unit::Nanos, OverCpus::Run),
        LOAD,
    ];

    #[cfg(feature = "linux")]
    fn run(c: &IpcConfig, ctx: &RunContext, obs: &mut dyn Observer) -> Result<IpcResult, RunError> {
        run(c, ctx, obs)
    }

    fn figures(s: &Value, f: &mut Figures) {
        let mechs = array(&s["mechanisms"]);
        f.add("mechanisms", Some(mechs.len() as f64));
        let best = mechs
            .iter()
            .flat_map(|m| array(&m["cells"]))
            .filter_map(|c| num(&c["one_way_ns"]["p50_ns"]))
            .reduce(f64::min);
        f.add("one_way_p50_ns", best);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanisms_parse() {
        assert_eq!(parse_mechanisms("all"), Ok(Mechanism::ALL.to_vec()));
        assert_eq!(
            parse_mechanisms("pipe,tcp,pipe"),
            Ok(vec![Mechanism::Pipe, Mechanism::Tcp])
        );
        let e = parse_mechanisms("bogus").expect_err("unknown").to_string();
        assert!(e.contains("--mech bogus: unknown mechanism"), "{e}");
        assert!(e.contains("shm-eventfd"), "{e}");
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::parse(m.name()), Ok(m));
        }
    }

    /// Every mechanism carries a message of every size, including sizes that are split into
    /// pieces (mq, unix-dgram) and sizes that are not a multiple of a piece, byte for byte.
    #[test]
    fn every_mechanism_carries_every_size_intact() {
        let (_, msgsize_max) = mq_limits();
        let sizes = [1usize, 7, 4096, msgsize_max + 3, 65_537, 1 << 20];
        for m in Mechanism::ALL {
            let largest = *sizes.iter().max().expect("sizes");
            let Channel { mut a, b, fragment } = channel(m, largest).expect("channel");
            if matches!(m, Mechanism::Mq | Mechanism::UnixDgram) {
                assert!(fragment.is_some(), "{m:?} splits 1 MiB");
            }
            let echo = std::thread::spawn(move || {
                let mut b = b;
                for &n in &sizes {
                    let mut buf = vec![0u8; n];
                    assert!(b.recv_exact(&mut buf).expect("server receive"));
                    b.send(&buf).expect("echo");
                }
                let mut one = [0u8; 1];
                assert!(
                    !b.recv_exact(&mut one).expect("end"),
                    "{m:?}: close is seen"
                );
            });
            for (seq, &n) in sizes.iter().enumerate() {
                let msg: Vec<u8> = (0..n).map(|i| pattern(seq as u64, n as u64, i)).collect();
                a.send(&msg).expect("send");
                let mut back = vec![0u8; n];
                assert!(a.recv_exact(&mut back).expect("receive"), "{m:?} {n}");
                assert!(
                    back == msg,
                    "{m:?}: a message of {n} bytes came back altered"
                );
            }
            a.close();
            echo.join().expect("echo thread");
        }
    }

    /// The cost model through the shared fit: cells whose medians lie exactly on
    /// t = 2000 + 3·N give a = 2000 ns and b = 10⁹/3 B/s, with zero residuals.
    #[test]
    fn model_is_fitted_on_the_medians() {
        let cell = |n: u64, p50: i64| IpcCell {
            size_bytes: n,
            round_trips: 1,
            one_way_ns: Some(Summary {
                count: 1,
                min_ns: p50,
                max_ns: p50 * 10,
                mean_ns: p50 as f64 * 3.0,
                stddev_ns: 0.0,
                p50_ns: p50,
                p90_ns: p50,
                p99_ns: p50,
                p99_9_ns: p50,
                p99_99_ns: p50,
            }),
            throughput_bytes_per_s: None,
            pieces_per_message: 1,
            verified_messages: 1,
            client_cpus: vec![0],
            server_cpus: vec![0],
            placement_verified: true,
            error: None,
        };
        let cells: Vec<IpcCell> = [1u64, 64, 4096, 65536]
            .iter()
            .map(|&n| cell(n, 2000 + 3 * n as i64))
            .collect();
        let (points, fit) = fit_model(&cells);
        let f = fit.expect("fit");
        assert_eq!(points.len(), 4);
        assert_eq!(f.fixed_ns, 2000.0);
        assert_eq!(f.ns_per_byte, 3.0);
        assert_eq!(f.bytes_per_s, Some(1e9 / 3.0));
        assert!(f.residuals_ns.iter().all(|&r| r == 0.0));
        let (_, one) = fit_model(&cells[..1]);
        assert!(one
            .expect_err("one size")
            .to_string()
            .contains("at least 2 points"));
    }

    fn quick(m: &[Mechanism], placement: Placement) -> IpcConfig {
        IpcConfig {
            mechanisms: m.to_vec(),
            sizes: vec![1, 4096, 100_000],
            placement,
            cell_time_ns: Nanos::from_millis(3),
            max_samples: 30,
            warmup: 2,
            verify: Verify::Every,
            ..IpcConfig::default()
        }
    }

    #[test]
    fn short_run_same_cpu_verifies_placement_and_content() {
        let base = tempfile::tempdir().expect("tempdir");
        let ctx = super::super::test_context(base.path());
        let r = run(
            &quick(&Mechanism::ALL, Placement::SameCpu),
            &ctx,
            &mut crate::runner::Silent,
        )
        .expect("run");
        assert_eq!(r.header.kind, crate::RunKind::BenchIpc);
        assert_eq!(r.client_cpu, r.server_cpu);
        assert!(r.errors().is_empty(), "{:?}", r.errors());
        assert_eq!(r.mechanisms.len(), 7);
        for m in &r.mechanisms {
            assert!(m.placement_verified, "{:?}", m.mechanism);
            assert!(m.model.is_some(), "{:?}: {:?}", m.mechanism, m.model_error);
            assert_eq!(m.cells.len(), 3);
            for c in &m.cells {
                assert_eq!(c.client_cpus, vec![r.client_cpu]);
                assert_eq!(c.server_cpus, vec![r.server_cpu]);
                assert!(c.round_trips >= MIN_SAMPLES as u64);
                assert_eq!(
                    c.verified_messages,
                    c.round_trips + 2,
                    "every message checked"
                );
                let s = c.one_way_ns.as_ref().expect("latency");
                assert!(s.min_ns > 0 && s.min_ns <= s.p50_ns && s.p99_ns <= s.max_ns);
            }
        }
        let reader = crate::store::RunReader::open(std::path::Path::new(&r.header.run_dir))
            .expect("finished run");
        for f in ["result.json", "cells.csv", "samples.csv.gz"] {
            assert!(reader.read(f).is_ok(), "{f}");
        }
    }

    #[test]
    fn short_run_cross_cpu_verifies_placement() {
        let allowed = crate::system::allowed_cpus();
        if allowed.len() < 2 {
            super::super::skip(
                "short_run_cross_cpu_verifies_placement",
                &format!("this process may use only CPU {allowed:?}; cross-cpu needs two"),
            );
            return;
        }
        let base = tempfile::tempdir().expect("tempdir");
        let ctx = super::super::test_context(base.path());
        let r = run(
            &quick(&[Mechanism::Pipe, Mechanism::ShmFutex], Placement::CrossCpu),
            &ctx,
            &mut crate::runner::Silent,
        )
        .expect("run");
        assert_ne!(r.client_cpu, r.server_cpu);
        for m in &r.mechanisms {
            assert!(m.placement_verified);
            for c in &m.cells {
                assert_eq!(c.client_cpus, vec![r.client_cpu]);
                assert_eq!(c.server_cpus, vec![r.server_cpu]);
            }
        }
    }

    #[test]
    fn bad_configurations_are_refused() {
        let ok = IpcConfig::default();
        assert!(validate(&ok).is_ok());
        let zero = IpcConfig {
            sizes: vec![1, 0],
            ..IpcConfig::default()
        };
        assert!(validate(&zero)
            .expect_err("zero")
            .to_string()
            .contains("0 bytes"));
        let none = IpcConfig {
            mechanisms: vec![],
            ..IpcConfig::default()
        };
        assert!(validate(&none).is_err());
        let cross = IpcConfig {
            placement: Placement::CrossCpu,
            ..IpcConfig::default()
        };
        let e = resolve_cpus(&cross, &[0]).expect_err("one CPU").to_string();
        assert!(e.contains("needs two CPUs"), "{e}");
    }

    #[test]
    fn refusals_keep_their_wording() {
        let cases = [
            (
                IpcError::UnknownMechanism("bogus".into()),
                "--mech bogus: unknown mechanism; use pipe, unix-stream, unix-dgram, tcp, mq, shm-futex, shm-eventfd or all",
            ),
            (IpcError::NoMechanisms, "--mech: give at least one mechanism, or all"),
            (IpcError::NoSizes, "--sizes: give at least one size"),
            (
                IpcError::ZeroSize,
                "--sizes: a message of 0 bytes carries nothing; give sizes of at least 1 byte",
            ),
            (
                IpcError::SizeTooLarge(128 << 20),
                "--sizes: 128 MiB is larger than the 64 MiB this benchmark sends at most",
            ),
            (IpcError::ZeroCellTime, "--cell-time must be longer than zero"),
            (IpcError::ZeroMaxSamples, "--max-samples must be at least 1"),
            (
                IpcError::Deadline,
                "-P: SCHED_DEADLINE is not offered here; use f:PRIO, r:PRIO, o:NICE, b or i",
            ),
            (
                IpcError::Cpus(super::super::BenchError::NoCpusGiven),
                "--cpus: give one or two CPUs",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
