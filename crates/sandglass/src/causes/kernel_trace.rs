//! A kernel trace as a run records it: what to record ([`TraceOptions`]), the events and the
//! pages kept ([`KernelTrace`]), and reading them back a page at a time
//! ([`KernelTrace::each_event`]). Portable: recording them is [`super::tracefs`]'s, on Linux.

use super::tracefs_raw::{self, DecodeError, Decoder, PageLayout, Traced};
use std::fs::{self, File};
use std::io::{self, ErrorKind, Read};
use std::path::PathBuf;

/// Per-CPU buffer size unless told otherwise, in KiB.
pub const DEFAULT_BUFFER_KB: u64 = 8192;

/// The events recorded, when this kernel has them (`irq_vectors` events are added by listing).
pub const EVENTS: [&str; 17] = [
    "sched/sched_switch",
    "sched/sched_waking",
    "sched/sched_wakeup",
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "irq/softirq_entry",
    "irq/softirq_exit",
    "irq/softirq_raise",
    "nmi/nmi_handler",
    "timer/hrtimer_start",
    "timer/hrtimer_expire_entry",
    "timer/hrtimer_expire_exit",
    "workqueue/workqueue_execute_start",
    "workqueue/workqueue_execute_end",
    "ipi/ipi_send_cpu",
    "ipi/ipi_send_cpumask",
    "ftrace/print",
];

/// The marker written at a known CLOCK_MONOTONIC time, to check that the trace shares it.
pub(super) const CLOCK_CHECK: &str = "sandglass clock check";

/// How `--trace` is to record.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct TraceOptions {
    /// Per-CPU buffer size in KiB.
    pub buffer_kb: u64,
    /// The most of the kernel's trace kept in the run, in bytes of the kernel's own records
    /// (`--trace-keep`; `u64::MAX`: all of it). See [`super::kernel_store`].
    #[serde(default = "default_keep_bytes")]
    pub keep_bytes: u64,
}

/// The default of `--trace-keep`: 256 MiB of the kernel's records (about 25 minutes at 1 kHz
/// beside a busy load; the Parquet files are several times smaller).
pub const DEFAULT_KEEP_BYTES: u64 = 256 << 20;

fn default_keep_bytes() -> u64 {
    DEFAULT_KEEP_BYTES
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            buffer_kb: DEFAULT_BUFFER_KB,
            keep_bytes: DEFAULT_KEEP_BYTES,
        }
    }
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Missing privilege or kernel support: the message says what to do (a usage error).
    #[error("{0}")]
    Unavailable(String),
    /// Something failed while setting up or reading.
    #[error("{0}")]
    Failed(String),
}

/// Why the tracing instance could not be configured or started (after it was created).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A tracefs control file refused a value.
    #[error(
        "cannot write {value:?} to {path}: {source} (give a smaller --trace-buffer if the \
         kernel is short of memory, or drop --trace)"
    )]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    /// `events/header_page` could not be read.
    #[error("cannot read events/header_page ({path}): {source} (drop --trace)")]
    ReadHeaderPage {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// `events/header_page` describes a page this reader does not know.
    #[error("cannot read the page layout in events/header_page: {source} (drop --trace)")]
    HeaderPage {
        #[source]
        source: DecodeError,
    },
    /// An event's `format` file could not be parsed.
    #[error("cannot read the format of {event}: {source} (drop --trace)")]
    EventFormat {
        event: String,
        #[source]
        source: DecodeError,
    },
    /// The kernel has no `sched:sched_switch` event.
    #[error(
        "this kernel has no sched_switch event: --trace cannot attribute time (use a kernel \
         with scheduler tracepoints, or drop --trace)"
    )]
    NoSchedSwitch,
    /// A CPU's `trace_pipe_raw` could not be opened.
    #[error("cannot open {path}: {source} (drop --trace)")]
    OpenPipe {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl From<SetupError> for TraceError {
    fn from(e: SetupError) -> Self {
        TraceError::Failed(e.to_string())
    }
}

/// What the kernel recorded during a run.
#[derive(Clone, Debug, Default)]
pub struct KernelTrace {
    /// The CPUs traced.
    pub cpus: Vec<usize>,
    /// Every event, in time order on each CPU, when they were decoded into memory (a session
    /// without a run directory).
    pub events: Vec<Traced>,
    /// The pages as read, on disk, when they were kept there instead.
    pub raw: Option<RawPages>,
    /// Why the pages could not all be written, if they could not.
    pub spill_error: Option<String>,
    /// Events the kernel could not keep (buffer full), per traced CPU.
    pub lost: Vec<(usize, u64)>,
    /// Records that could not be decoded (of `events`; [`KernelTrace::each_event`] counts those
    /// of `raw`).
    pub undecoded: u64,
    /// Pages and bytes read.
    pub pages: u64,
    pub bytes: u64,
    /// Time the main thread spent reading (and, into memory, decoding), in ns.
    pub read_ns: u64,
    /// The events enabled.
    pub enabled: Vec<String>,
    pub buffer_kb: u64,
    /// The most of the trace to keep in the run, in bytes of the kernel's records.
    pub keep_bytes: u64,
    /// A marker written at a known CLOCK_MONOTONIC time came back with this offset (trace
    /// time minus the midpoint of the write), in ns: the check that both share one clock.
    pub clock_offset_ns: Option<i64>,
    /// Half the time the marker's write took: the check's uncertainty, in ns.
    pub clock_uncertainty_ns: Option<u64>,
}

/// The kernel's pages of each CPU as a session read them (`RUN/kernel.tmp/cpuN.raw`, 4096
/// bytes a page), and what decodes them.
#[derive(Clone, Debug)]
pub struct RawPages {
    pub dir: PathBuf,
    pub files: Vec<(usize, PathBuf)>,
    pub layout: PageLayout,
    pub decoder: Decoder,
}

/// Events decoded, and records that could not be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub events: u64,
    pub undecoded: u64,
}

impl KernelTrace {
    pub fn lost_total(&self) -> u64 {
        self.lost.iter().map(|(_, n)| n).sum()
    }

    /// Every event, each CPU's in time order, one CPU after the other, wherever they were kept;
    /// reads the pages on disk one at a time.
    pub fn each_event(&self, mut f: impl FnMut(Traced)) -> io::Result<Decoded> {
        let mut n = Decoded {
            events: self.events.len() as u64,
            undecoded: self.undecoded,
        };
        for e in &self.events {
            f(e.clone());
        }
        let Some(raw) = &self.raw else {
            return Ok(n);
        };
        let mut page = vec![0u8; PAGE];
        for (cpu, path) in &raw.files {
            let mut file = io::BufReader::new(File::open(path)?);
            loop {
                match file.read_exact(&mut page) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e),
                }
                let mut on_record = |ts: u64, rec: &[u8]| match raw.decoder.decode(rec) {
                    Ok(tracefs_raw::Event::Marker { text }) if text.starts_with(CLOCK_CHECK) => {}
                    Ok(event) => {
                        n.events += 1;
                        f(traced(*cpu, ts, rec, event));
                    }
                    Err(_) => n.undecoded += 1,
                };
                if tracefs_raw::parse_page(&page, &raw.layout, &mut on_record).is_err() {
                    n.undecoded += 1;
                }
            }
        }
        Ok(n)
    }

    /// Removes the pages kept on disk during the run.
    pub fn remove_spill(&self) {
        if let Some(r) = &self.raw {
            let _ = fs::remove_dir_all(&r.dir);
        }
    }
}

/// The bytes of a buffer page.
pub(super) const PAGE: usize = 4096;

/// An event of `cpu` at `ts` from its record `rec`.
pub(super) fn traced(cpu: usize, ts: u64, rec: &[u8], event: tracefs_raw::Event) -> Traced {
    Traced {
        ts_ns: ts,
        cpu,
        // Every record starts with common_type (2 bytes), common_flags, common_preempt_count
        // (1 byte each) and common_pid (4 bytes).
        pid: rec
            .get(4..8)
            .and_then(|b| b.try_into().ok())
            .map(i32::from_ne_bytes),
        event,
    }
}

/// The directory of a run where a session writes its events as it reads them.
pub const SPILL_DIR: &str = "kernel.tmp";
