//! The tracefs backend (`--trace`): kernel scheduling and interrupt events on the measured CPUs,
//! recorded in a private tracing instance and read from its per-CPU binary buffers.
//!
//! A run creates `instances/sandglass-PID-START` in tracefs (the process's id and start time;
//! mounting tracefs first if no one has, and recording that it did in the runtime directory),
//! so the global trace, its events and any other user's instance are never touched. In it:
//! `trace_clock` `mono` (CLOCK_MONOTONIC, the clock the engine's counter is calibrated against),
//! a cpumask of the measured CPUs, the buffer size asked for, and the events of [`EVENTS`] and
//! every `irq_vectors` entry and exit event, those that exist on this kernel. Recording starts
//! just before the measurement and stops just after it.
//!
//! Events are read from `per_cpu/cpuN/trace_pipe_raw`: whole pages of binary records that the
//! kernel copies without formatting them (reading the text `trace` file makes the kernel print
//! every event, over a hundred times the cost; measured in BENCHMARKS.md). The main thread drains the
//! pages while the run goes on when it has a CPU of its own, so the buffer only needs to hold
//! the events between two drains; otherwise it reads them all after the run. Events the buffer
//! lost are counted from the kernel's own per-CPU statistics and reported.
//!
//! In a run, the pages go to the run's `kernel.tmp/cpuN.raw` as they are read (see
//! [`Session::keep_in`]): a copy, the least work for the main thread while the run goes, and
//! the run's memory does not grow with its length. After the run they are decoded a page at a
//! time ([`KernelTrace::each_event`]) for the attribution, in pieces of bounded size
//! ([`super::attribute::Chunked`]), and for the kernel table the run keeps.
//!
//! Whatever happens, the instance is removed: when the run ends, when it fails, on Ctrl-C (the
//! runner takes signals synchronously and returns normally) and on a panic (by `Drop`). A
//! process killed with SIGKILL cannot clean up: every measuring command starts with
//! [`clean_up`], which removes the instances of sandglass processes that no longer exist (no
//! process has the id in the name with the start time in the name) and unmounts tracefs when
//! sandglass mounted it (the same mount, by its id in `/proc/self/mountinfo`) and no living
//! sandglass has an instance in it.

use super::kernel_trace::{traced, CLOCK_CHECK, PAGE};
pub use super::kernel_trace::{
    Decoded, KernelTrace, RawPages, SetupError, TraceError, TraceOptions, DEFAULT_BUFFER_KB,
    DEFAULT_KEEP_BYTES, EVENTS, SPILL_DIR,
};
use super::tracefs_raw::{self, Decoder, Format, PageLayout, Traced};
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where tracefs is mounted on current systems, and on older ones.
pub const MOUNT_POINTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The O_NONBLOCK open flag (the same value on every Linux architecture sandglass builds for
/// but alpha, sparc and parisc).
const O_NONBLOCK: i32 = 0o4000;

/// The most pages read from one CPU in one drain during the run, so that the main thread goes
/// back to its other work however fast the kernel writes (16 MiB; what is not read stays in
/// the kernel's buffer, and what the buffer cannot hold is counted as lost).
const DRAIN_PAGES: usize = 4096;

/// The most pages held in memory before they are written to `kernel.tmp/` in one go (8 MiB:
/// about 18 s of a busy CPU). Every write the run makes can interrupt a measured CPU (the
/// disk's completion interrupt goes where the kernel routes it: CPU 1 on this project's virtual
/// machine), so a run writes seldom, and a short run not at all while it measures.
const HOLD_BYTES: usize = 8 << 20;

/// Where a session puts the pages it reads.
enum Keep {
    /// Decoded at once, in memory.
    Memory(Vec<Traced>),
    /// Held as they are, up to [`HOLD_BYTES`], then written, one file per CPU.
    Raw {
        dir: PathBuf,
        files: Vec<(usize, PathBuf, File, Vec<u8>)>,
        held: usize,
        error: Option<String>,
    },
}

/// What a session has read so far.
#[derive(Default)]
struct Counts {
    undecoded: u64,
    pages: u64,
    bytes: u64,
    marker_ts: Option<u64>,
}

/// A private tracing instance, recording or ready to.
pub struct Session {
    mount: PathBuf,
    dir: PathBuf,
    cpus: Vec<usize>,
    pipes: Vec<(usize, File)>,
    keep: Keep,
    counts: Counts,
    layout: PageLayout,
    decoder: Decoder,
    enabled: Vec<String>,
    buffer_kb: u64,
    keep_bytes: u64,
    read_ns: u64,
    marker: Option<(u64, u64)>,
    removed: bool,
}

/// Whether a tracefs mount is at `p` (readable by this process).
fn is_tracefs(p: &Path) -> bool {
    p.join("instances").is_dir() && p.join("trace_clock").exists()
}

/// The tracefs mount points listed in `/proc/mounts` text, in order.
pub fn tracefs_mounts(mounts: &str) -> Vec<PathBuf> {
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[2] == "tracefs").then(|| PathBuf::from(f[1]))
        })
        .collect()
}

/// Where tracefs is mounted; mounts it when it is not (true in the second field). A mount this
/// process cannot read is still returned: creating the instance then says what is missing.
fn find_or_mount() -> Result<(PathBuf, bool), TraceError> {
    if let Some(p) = MOUNT_POINTS.iter().map(Path::new).find(|p| is_tracefs(p)) {
        return Ok((p.to_path_buf(), false));
    }
    let mounted = tracefs_mounts(&fs::read_to_string("/proc/mounts").unwrap_or_default());
    if let Some(p) = MOUNT_POINTS
        .iter()
        .map(PathBuf::from)
        .find(|p| mounted.contains(p))
        .or_else(|| mounted.first().cloned())
    {
        return Ok((p, false));
    }
    let target = Path::new(MOUNT_POINTS[0]);
    let out = std::process::Command::new("mount")
        .args(["-t", "tracefs", "nodev"])
        .arg(target)
        .output();
    match out {
        Ok(o) if o.status.success() && is_tracefs(target) => Ok((target.to_path_buf(), true)),
        Ok(o) => Err(TraceError::Unavailable(format!(
            "--trace: tracefs is not mounted and mounting it at {} failed ({}): run as root, or mount it yourself (mount -t tracefs nodev {0}), or drop --trace",
            target.display(),
            String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("").trim()
        ))),
        Err(e) => Err(TraceError::Unavailable(format!(
            "--trace: tracefs is not mounted and the mount command could not run ({e}): mount it (mount -t tracefs nodev {}) or drop --trace",
            target.display()
        ))),
    }
}

/// Whether this process can record kernel events: creates its instance and removes it again.
/// The error says why not and what to do.
pub fn probe() -> Result<(), TraceError> {
    Session::create(
        &[0],
        &TraceOptions {
            buffer_kb: 64,
            ..TraceOptions::default()
        },
    )
    .map(drop)
}

/// The name of the instance of process `pid` started at `start` (clock ticks after boot, field
/// 22 of `/proc/PID/stat`).
pub fn instance_name(pid: u32, start: u64) -> String {
    format!("sandglass-{pid}-{start}")
}

/// This process's instance name.
fn own_instance_name() -> String {
    let pid = std::process::id();
    let start = crate::contain::proc_stat(pid as i32).map_or(0, |p| p.start);
    instance_name(pid, start)
}

/// Whether the instance `name` belongs to a sandglass process that still exists: its pid names
/// a process with the start time in the name (`sandglass-PID-START`; an older `sandglass-PID`
/// by its pid alone). `None`: not a sandglass instance.
fn instance_alive(name: &str) -> Option<bool> {
    let rest = name.strip_prefix("sandglass-")?;
    let (pid, start) = match rest.split_once('-') {
        Some((p, s)) => (p.parse::<i32>().ok()?, Some(s.parse::<u64>().ok()?)),
        None => (rest.parse::<i32>().ok()?, None),
    };
    Some(match crate::contain::proc_stat(pid) {
        Some(p) => start.is_none_or(|s| s == p.start),
        None => false,
    })
}

/// Removes instances left by sandglass processes that no longer exist (killed with SIGKILL);
/// returns their names.
pub fn remove_stale(mount: &Path) -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(mount.join("instances")) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if instance_alive(&name) == Some(false) {
            // Recording stops first, so that its buffers are freed even if removal fails.
            let _ = write_file(&e.path().join("tracing_on"), "0");
            if fs::remove_dir(e.path()).is_ok() {
                removed.push(name);
            }
        }
    }
    removed
}

/// The runtime directory's record that sandglass mounted tracefs: `MOUNT-ID PATH`.
const MOUNT_RECORD: &str = "tracefs.mounted";

/// The id of the tracefs mount at `path`, from `/proc/self/mountinfo`.
fn tracefs_mount_id(path: &Path) -> Option<u64> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split(' ').collect();
        (right.split_whitespace().next()? == "tracefs" && Path::new(f.get(4)?) == path)
            .then(|| f.first()?.parse().ok())?
    })
}

/// Records in the runtime directory that this process mounted tracefs at `mount`.
fn record_mount(mount: &Path) {
    if let (Ok(rt), Some(id)) = (crate::runtime::dir(), tracefs_mount_id(mount)) {
        let _ = rt.write(MOUNT_RECORD, &format!("{id} {}\n", mount.display()));
    }
}

/// Unmounts tracefs when the runtime directory records that sandglass mounted it, the mount is
/// still that one, and no living sandglass has an instance in it; returns where it was.
fn unmount_if_unused() -> Option<PathBuf> {
    let rt = crate::runtime::dir().ok()?;
    let text = rt.read(MOUNT_RECORD).ok()??;
    let (id, path) = text.trim_end().split_once(' ')?;
    let path = PathBuf::from(path);
    if tracefs_mount_id(&path) != id.parse().ok() {
        // Unmounted or mounted anew since, by someone else: not sandglass's any more.
        rt.remove(MOUNT_RECORD);
        return None;
    }
    let busy = fs::read_dir(path.join("instances"))
        .map(|d| {
            d.flatten()
                .any(|e| instance_alive(&e.file_name().to_string_lossy()) == Some(true))
        })
        .unwrap_or(false);
    if busy {
        return None;
    }
    let done = std::process::Command::new("umount")
        .arg(&path)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if done {
        rt.remove(MOUNT_RECORD);
    }
    done.then_some(path)
}

/// What [`clean_up`] found left by sandglass processes that were killed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Instances removed (their recording stopped and buffers freed).
    pub instances: Vec<String>,
    /// Where tracefs was unmounted, having been mounted by a sandglass that is gone.
    pub unmounted: Option<PathBuf>,
}

/// Restores the kernel's tracing after sandglass processes that could not (killed with
/// SIGKILL): removes their instances from every tracefs mount, and unmounts tracefs when
/// sandglass mounted it and no living sandglass uses it. Every measuring command calls it as it
/// starts, traced or not; without the privilege to write tracefs it does nothing.
pub fn clean_up() -> Cleaned {
    if sandglass_sys::process::euid() != 0 {
        return Cleaned::default();
    }
    let mounts = tracefs_mounts(&fs::read_to_string("/proc/mounts").unwrap_or_default());
    let mut instances = Vec::new();
    for m in &mounts {
        instances.extend(remove_stale(m));
    }
    Cleaned {
        instances,
        unmounted: unmount_if_unused(),
    }
}

/// A tracefs cpumask (comma-separated 32-bit hex groups, most significant first) of `cpus`.
pub fn cpumask(cpus: &[usize]) -> String {
    let top = cpus.iter().copied().max().unwrap_or(0);
    let groups = top / 32 + 1;
    let mut words = vec![0u32; groups];
    for &c in cpus {
        words[c / 32] |= 1 << (c % 32);
    }
    words
        .iter()
        .rev()
        .map(|w| format!("{w:08x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Reads a tracefs text file with large reads: some of them (`events/header_page`) do not
/// continue correctly after a short first read, which `fs::read_to_string` may issue.
fn read_text(path: &Path) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn write_file(path: &Path, value: &str) -> Result<(), SetupError> {
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|source| SetupError::Write {
            path: path.to_path_buf(),
            value: value.to_string(),
            source,
        })
}

impl Session {
    /// Creates this process's instance for `cpus`, configured but not yet recording.
    pub fn create(cpus: &[usize], opts: &TraceOptions) -> Result<Session, TraceError> {
        let (mount, mounted_here) = find_or_mount()?;
        if mounted_here {
            record_mount(&mount);
        }
        remove_stale(&mount);
        let dir = mount.join("instances").join(own_instance_name());
        if let Err(e) = fs::create_dir(&dir) {
            if mounted_here {
                unmount_if_unused();
            }
            let hint = if e.kind() == ErrorKind::PermissionDenied {
                "run as root (tracefs needs CAP_SYS_ADMIN or write access to it), or drop --trace: the sampler explains delays without privileges"
            } else {
                "drop --trace, or check the kernel's tracing support (CONFIG_FTRACE)"
            };
            return Err(TraceError::Unavailable(format!(
                "--trace: cannot create the tracing instance {} ({e}): {hint}",
                dir.display()
            )));
        }
        let mut s = Session {
            mount,
            dir,
            cpus: cpus.to_vec(),
            pipes: Vec::new(),
            keep: Keep::Memory(Vec::new()),
            counts: Counts::default(),
            layout: PageLayout {
                commit_offset: 8,
                commit_size: 8,
                data_offset: 16,
            },
            decoder: Decoder::new(&[]),
            enabled: Vec::new(),
            buffer_kb: opts.buffer_kb,
            keep_bytes: opts.keep_bytes,
            read_ns: 0,
            marker: None,
            removed: false,
        };
        // Dropping `s` on an error removes the instance.
        s.configure(opts)?;
        Ok(s)
    }

    fn configure(&mut self, opts: &TraceOptions) -> Result<(), SetupError> {
        let d = self.dir.clone();
        write_file(&d.join("tracing_on"), "0")?;
        write_file(&d.join("trace_clock"), "mono")?;
        write_file(&d.join("buffer_size_kb"), &opts.buffer_kb.to_string())?;
        write_file(&d.join("tracing_cpumask"), &cpumask(&self.cpus))?;
        let header_path = self.mount.join("events/header_page");
        let header = read_text(&header_path).map_err(|source| SetupError::ReadHeaderPage {
            path: header_path,
            source,
        })?;
        self.layout = tracefs_raw::parse_header_page(&header)
            .map_err(|source| SetupError::HeaderPage { source })?;
        let mut names: Vec<String> = EVENTS.iter().map(|e| e.to_string()).collect();
        if let Ok(rd) = fs::read_dir(d.join("events/irq_vectors")) {
            let mut v: Vec<String> = rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with("_entry") || n.ends_with("_exit"))
                .map(|n| format!("irq_vectors/{n}"))
                .collect();
            v.sort();
            names.extend(v);
        }
        let mut formats: Vec<Format> = Vec::new();
        for name in names {
            let ev = d.join("events").join(&name);
            let Some((system, _)) = name.split_once('/') else {
                continue;
            };
            let Ok(text) = read_text(&ev.join("format")) else {
                continue;
            };
            let format = tracefs_raw::parse_format(system, &text).map_err(|source| {
                SetupError::EventFormat {
                    event: name.clone(),
                    source,
                }
            })?;
            // ftrace/print has no enable file: trace_marker writes always reach the buffer.
            if ev.join("enable").exists() {
                write_file(&ev.join("enable"), "1")?;
            }
            formats.push(format);
            self.enabled.push(name);
        }
        if !self.enabled.iter().any(|e| e == "sched/sched_switch") {
            return Err(SetupError::NoSchedSwitch);
        }
        self.decoder = Decoder::new(&formats);
        for &cpu in &self.cpus {
            let p = d.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
            let f = OpenOptions::new()
                .read(true)
                .custom_flags(O_NONBLOCK)
                .open(&p)
                .map_err(|source| SetupError::OpenPipe { path: p, source })?;
            self.pipes.push((cpu, f));
        }
        write_file(&d.join("trace"), "")?;
        Ok(())
    }

    /// Starts recording, and writes a marker at a known CLOCK_MONOTONIC time from the first
    /// traced CPU (the calling thread visits it for the write; call this before the
    /// measurement starts).
    pub fn start(&mut self) -> Result<(), SetupError> {
        use sandglass_sys::sched::{get_affinity, set_affinity, Tid};
        write_file(&self.dir.join("tracing_on"), "1")?;
        let before = get_affinity(Tid::SELF).ok();
        if let Some(&cpu) = self.cpus.first() {
            if set_affinity(Tid::SELF, &[cpu]).is_ok() {
                self.marker = self.mark(CLOCK_CHECK);
            }
        }
        if let Some(aff) = before {
            let _ = set_affinity(Tid::SELF, &aff);
        }
        Ok(())
    }

    /// Writes `text` to the trace at the CLOCK_MONOTONIC times returned (before, after).
    pub fn mark(&self, text: &str) -> Option<(u64, u64)> {
        use sandglass_sys::clock::{now_ns, ClockId};
        let mut f = OpenOptions::new()
            .write(true)
            .open(self.dir.join("trace_marker"))
            .ok()?;
        let before = now_ns(ClockId::Monotonic);
        f.write_all(text.as_bytes()).ok()?;
        let after = now_ns(ClockId::Monotonic);
        Some((before, after))
    }

    /// Writes the pages from now on, as they are read, to `run_dir/kernel.tmp/cpuN.raw`
    /// rather than decoding them into memory: the cheapest way for the main thread, and a
    /// run's memory does not grow with its length. They are decoded after the run
    /// ([`KernelTrace::each_event`]).
    pub fn keep_in(&mut self, run_dir: &Path) -> io::Result<()> {
        let dir = run_dir.join(SPILL_DIR);
        fs::create_dir_all(&dir)?;
        let mut files = Vec::with_capacity(self.cpus.len());
        for &cpu in &self.cpus {
            let path = dir.join(format!("cpu{cpu}.raw"));
            let f = File::create(&path)?;
            files.push((cpu, path, f, Vec::new()));
        }
        if let Keep::Memory(held) = &self.keep {
            if !held.is_empty() {
                return Err(io::Error::other(
                    "events were decoded into memory before the run directory was given",
                ));
            }
        }
        self.keep = Keep::Raw {
            dir,
            files,
            held: 0,
            error: None,
        };
        Ok(())
    }

    /// Reads the pages the kernel has filled so far, at most [`DRAIN_PAGES`] per CPU.
    pub fn drain(&mut self) {
        self.read(DRAIN_PAGES);
    }

    fn read(&mut self, max_pages: usize) {
        use sandglass_sys::clock::{now_ns, ClockId};
        let t0 = now_ns(ClockId::Monotonic);
        let mut page = vec![0u8; PAGE];
        let Session {
            pipes,
            keep,
            counts,
            layout,
            decoder,
            ..
        } = self;
        for (cpu, f) in pipes.iter_mut() {
            for _ in 0..max_pages {
                match f.read(&mut page) {
                    Ok(0) => break,
                    Ok(n) => {
                        // A short read is a partial page: the rest of it is zeros.
                        page[n..].iter_mut().for_each(|b| *b = 0);
                        counts.pages += 1;
                        counts.bytes += PAGE as u64;
                        match keep {
                            Keep::Memory(v) => decode_into(*cpu, &page, layout, decoder, v, counts),
                            Keep::Raw {
                                files, held, error, ..
                            } => {
                                if error.is_some() {
                                    continue;
                                }
                                if let Some(x) = files.iter_mut().find(|x| x.0 == *cpu) {
                                    x.3.extend_from_slice(&page);
                                    *held += PAGE;
                                }
                                if *held >= HOLD_BYTES {
                                    write_held(files, held, error);
                                }
                            }
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        }
        self.read_ns += now_ns(ClockId::Monotonic).saturating_sub(t0);
    }

    /// Stops recording, reads the rest, removes the instance.
    pub fn finish(mut self) -> KernelTrace {
        let _ = write_file(&self.dir.join("tracing_on"), "0");
        // Nothing new arrives: whatever the buffer holds is read.
        self.read(usize::MAX);
        let lost: Vec<(usize, u64)> = self
            .cpus
            .iter()
            .map(|&c| {
                let stats =
                    read_text(&self.dir.join(format!("per_cpu/cpu{c}/stats"))).unwrap_or_default();
                (c, lost_in_stats(&stats))
            })
            .collect();
        let mut counts = std::mem::take(&mut self.counts);
        let (events, raw, spill_error) =
            match std::mem::replace(&mut self.keep, Keep::Memory(Vec::new())) {
                Keep::Memory(v) => (v, None, None),
                Keep::Raw {
                    dir,
                    mut files,
                    mut held,
                    mut error,
                } => {
                    write_held(&mut files, &mut held, &mut error);
                    let paths = files
                        .into_iter()
                        .map(|(cpu, path, ..)| (cpu, path))
                        .collect();
                    let raw = RawPages {
                        dir,
                        files: paths,
                        layout: self.layout,
                        decoder: self.decoder.clone(),
                    };
                    counts.marker_ts = marker_in(&raw);
                    (Vec::new(), Some(raw), error)
                }
            };
        let (clock_offset_ns, clock_uncertainty_ns) = match (self.marker, counts.marker_ts) {
            (Some((b, a)), Some(ts)) => {
                let mid = b / 2 + a / 2;
                (Some(ts as i64 - mid as i64), Some((a - b) / 2))
            }
            _ => (None, None),
        };
        let out = KernelTrace {
            cpus: self.cpus.clone(),
            events,
            raw,
            spill_error,
            lost,
            undecoded: counts.undecoded,
            pages: counts.pages,
            bytes: counts.bytes,
            read_ns: self.read_ns,
            enabled: self.enabled.clone(),
            buffer_kb: self.buffer_kb,
            keep_bytes: self.keep_bytes,
            clock_offset_ns,
            clock_uncertainty_ns,
        };
        self.remove();
        out
    }

    /// The instance's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn remove(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        let _ = write_file(&self.dir.join("tracing_on"), "0");
        // The instance cannot be removed while one of its files is open.
        self.pipes.clear();
        let mut ok = false;
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                ok = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Whoever mounted tracefs (this run or one killed before it), it is unmounted when
        // sandglass mounted it and no other sandglass run is recording in it.
        if ok {
            unmount_if_unused();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Writes the pages held to their CPU's file (the first error stops the writing and is kept).
fn write_held(
    files: &mut [(usize, PathBuf, File, Vec<u8>)],
    held: &mut usize,
    error: &mut Option<String>,
) {
    for (_, path, f, buf) in files.iter_mut() {
        if error.is_none() {
            if let Err(e) = f.write_all(buf) {
                *error = Some(format!("{}: {e}", path.display()));
            }
        }
        buf.clear();
        buf.shrink_to(0);
    }
    *held = 0;
}

/// Decodes one page of `cpu`'s buffer into `out`.
fn decode_into(
    cpu: usize,
    page: &[u8],
    layout: &PageLayout,
    decoder: &Decoder,
    out: &mut Vec<Traced>,
    counts: &mut Counts,
) {
    let mut on_record = |ts: u64, rec: &[u8]| match decoder.decode(rec) {
        Ok(tracefs_raw::Event::Marker { text })
            if counts.marker_ts.is_none() && text.starts_with(CLOCK_CHECK) =>
        {
            counts.marker_ts = Some(ts);
        }
        Ok(event) => out.push(traced(cpu, ts, rec, event)),
        Err(_) => counts.undecoded += 1,
    };
    if tracefs_raw::parse_page(page, layout, &mut on_record).is_err() {
        counts.undecoded += 1;
    }
}

/// The time of the clock-check marker in the first pages of `raw` (the session writes it from
/// the first traced CPU as recording starts).
fn marker_in(raw: &RawPages) -> Option<u64> {
    let (_, path) = raw.files.first()?;
    let mut file = io::BufReader::new(File::open(path).ok()?);
    let mut page = vec![0u8; PAGE];
    let mut found = None;
    for _ in 0..64 {
        if found.is_some() || file.read_exact(&mut page).is_err() {
            break;
        }
        let mut on_record = |ts: u64, rec: &[u8]| {
            if let Ok(tracefs_raw::Event::Marker { text }) = raw.decoder.decode(rec) {
                if found.is_none() && text.starts_with(CLOCK_CHECK) {
                    found = Some(ts);
                }
            }
        };
        let _ = tracefs_raw::parse_page(&page, &raw.layout, &mut on_record);
    }
    found
}

/// Events lost on a CPU, from its `per_cpu/cpuN/stats` text: overwritten (`overrun`) and
/// refused (`dropped events`).
pub fn lost_in_stats(stats: &str) -> u64 {
    stats
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| matches!(k.trim(), "overrun" | "dropped events"))
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpumasks() {
        assert_eq!(cpumask(&[1]), "00000002");
        assert_eq!(cpumask(&[0, 3]), "00000009");
        assert_eq!(cpumask(&[33]), "00000002,00000000");
    }

    #[test]
    fn tracefs_mounts_are_found_in_proc_mounts() {
        let m = "sysfs /sys sysfs rw 0 0\ntracefs /sys/kernel/tracing tracefs rw,nosuid 0 0\nnone /sys/kernel/debug/tracing tracefs rw 0 0\n";
        assert_eq!(
            tracefs_mounts(m),
            vec![
                PathBuf::from("/sys/kernel/tracing"),
                PathBuf::from("/sys/kernel/debug/tracing")
            ]
        );
        assert!(tracefs_mounts("proc /proc proc rw 0 0").is_empty());
    }

    #[test]
    fn lost_events_are_read_from_stats() {
        let s = "entries: 12\noverrun: 3\ncommit overrun: 0\nbytes: 100\noldest event ts: 1.0\nnow ts: 2.0\ndropped events: 4\nread events: 9\n";
        assert_eq!(lost_in_stats(s), 7);
        assert_eq!(lost_in_stats("garbage"), 0);
    }
}
