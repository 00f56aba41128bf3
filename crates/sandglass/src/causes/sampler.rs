//! The unprivileged sampler: snapshots of `/proc/interrupts`, `/proc/softirqs`, the per-CPU
//! lines of `/proc/stat` and the measuring threads' context-switch counts, taken on the main
//! (housekeeping) thread at a fixed rate during a run, and the per-interval deltas they give.
//!
//! A snapshot runs on the main thread, never on a measuring thread, and only between the main
//! thread's waits. Each file is opened once, when the sampler first reads it, and kept open:
//! a snapshot is one `pread` from offset 0 per file (and one more to find the end of
//! `/proc/interrupts`) into a buffer kept from the last snapshot, and the counts are parsed straight out of those bytes
//! into tables allocated when the sampler started ([`procfs`]'s `fill_*`), the measured CPUs'
//! columns only. What remains is the kernel's own formatting of the files, most of it
//! `/proc/interrupts` (see docs/causes.md for the cost per snapshot).
//!
//! The sampler keeps nothing that grows with the run: each interval's non-zero deltas are
//! appended to `sampler.csv` as the interval closes, each source's per-interval counts go into a
//! table of value counts (what the medians of [`super::explain`] need), and only the intervals
//! that hold the largest spikes are kept, chosen as the spikes arrive ([`Digest`]).

#[cfg(feature = "linux")]
use super::procfs::{self, Names, Scratch};
use super::procfs::{CpuStat, TextBuf};
#[cfg(feature = "linux")]
use crate::store::append::AppendFile;
use crate::store::FileEntry;
#[cfg(feature = "linux")]
use crate::store::{StoreError, SAMPLER_DESCRIPTION, SAMPLER_FORMAT};
#[cfg(feature = "linux")]
use std::path::Path;

/// What to sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplerSpec {
    /// The measured CPUs.
    pub cpus: Vec<usize>,
    /// The measuring threads' ids.
    pub tids: Vec<i32>,
}

/// One snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// CLOCK_MONOTONIC when it was taken.
    pub at_ns: u64,
    /// `irq[source][i]`: the count of interrupt source `source` on `cpus[i]`.
    pub irq: Vec<Vec<u64>>,
    /// `softirq[vector][i]`, likewise.
    pub softirq: Vec<Vec<u64>>,
    /// `/proc/stat` of `cpus[i]`.
    pub stat: Vec<CpuStat>,
    /// `(voluntary, involuntary)` context switches of `tids[j]`; zeros once a thread is gone.
    pub ctxt: Vec<(u64, u64)>,
    /// Time `tids[j]` has waited runnable on a run queue, in ns (0 where unknown).
    pub wait_ns: Vec<u64>,
}

impl Snapshot {
    /// A snapshot of zeros with room for `irqs` interrupt sources and `softirqs` vectors.
    #[cfg(feature = "linux")]
    fn zeroed(spec: &SamplerSpec, irqs: usize, softirqs: usize) -> Snapshot {
        let c = spec.cpus.len();
        let t = spec.tids.len();
        Snapshot {
            at_ns: 0,
            irq: vec![vec![0; c]; irqs],
            softirq: vec![vec![0; c]; softirqs],
            stat: vec![CpuStat::default(); c],
            ctxt: vec![(0, 0); t],
            wait_ns: vec![0; t],
        }
    }
}

/// A file the sampler reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcFile {
    Interrupts,
    Softirqs,
    Stat,
    /// `/proc/self/task/TID/status` of a measuring thread.
    Status(i32),
    /// `/proc/self/task/TID/schedstat` of a measuring thread.
    Schedstat(i32),
}

/// Where the sampler's files come from: `/proc` for a run, scripted texts in tests.
pub trait Source {
    /// Replaces the text in `buf` with `file`'s (empty when it cannot be read). `buf` is kept
    /// from one snapshot to the next: a source fills it without allocating once it is large
    /// enough.
    fn read(&mut self, file: ProcFile, buf: &mut TextBuf);
}

/// A file opened on its first read and kept open: `None` before that, `Some(None)` when it
/// could not be opened (it is not tried again).
#[cfg(feature = "linux")]
#[derive(Debug, Default)]
struct Kept(Option<Option<std::fs::File>>);

#[cfg(feature = "linux")]
impl Kept {
    /// `one_read`: see [`TextBuf::read_file`].
    fn read(&mut self, path: impl FnOnce() -> String, one_read: bool, buf: &mut TextBuf) {
        match self
            .0
            .get_or_insert_with(|| std::fs::File::open(path()).ok())
        {
            // An error leaves the buffer empty: the snapshot counts zero, as for a thread gone.
            Some(f) => {
                let _ = buf.read_file(f, one_read);
            }
            None => buf.clear(),
        }
    }
}

/// The running system. Each file is opened on its first read and kept open, and read with
/// `pread` from offset 0 after that: `/proc` formats the text anew at each read from the
/// start, so a kept file gives fresh counts without an `open` and a `close` per snapshot (and a
/// thread's files keep naming that thread, not a later one given its id).
#[cfg(feature = "linux")]
#[derive(Debug, Default)]
pub struct Proc {
    interrupts: Kept,
    softirqs: Kept,
    stat: Kept,
    /// Per measuring thread: its `status` and `schedstat`.
    threads: Vec<(i32, Kept, Kept)>,
}

#[cfg(feature = "linux")]
impl Proc {
    pub fn new() -> Proc {
        Proc::default()
    }
}

#[cfg(feature = "linux")]
impl Source for Proc {
    fn read(&mut self, file: ProcFile, buf: &mut TextBuf) {
        match file {
            ProcFile::Interrupts => self
                .interrupts
                .read(|| "/proc/interrupts".into(), false, buf),
            ProcFile::Softirqs => self.softirqs.read(|| "/proc/softirqs".into(), true, buf),
            ProcFile::Stat => self.stat.read(|| "/proc/stat".into(), true, buf),
            ProcFile::Status(tid) | ProcFile::Schedstat(tid) => {
                let at = match self.threads.iter().position(|t| t.0 == tid) {
                    Some(at) => at,
                    None => {
                        self.threads.push((tid, Kept::default(), Kept::default()));
                        self.threads.len() - 1
                    }
                };
                let (_, status, schedstat) = &mut self.threads[at];
                if matches!(file, ProcFile::Status(_)) {
                    status.read(|| format!("/proc/self/task/{tid}/status"), true, buf);
                } else {
                    schedstat.read(|| format!("/proc/self/task/{tid}/schedstat"), true, buf);
                }
            }
        }
    }
}

/// The files' texts, kept from one snapshot to the next.
#[cfg(feature = "linux")]
struct Bufs {
    interrupts: TextBuf,
    softirqs: TextBuf,
    stat: TextBuf,
    /// A measuring thread's `status`, then its `schedstat`.
    thread: TextBuf,
}

/// Takes snapshots during a run and digests them as it goes.
#[cfg(feature = "linux")]
pub struct Sampler<S: Source> {
    source: S,
    spec: SamplerSpec,
    irq_names: Names,
    softirq_names: Names,
    bufs: Bufs,
    scratch: Scratch,
    stat_filled: Vec<bool>,
    /// The snapshot being taken, and the one before it (`have_prev` once there is one).
    cur: Snapshot,
    prev: Snapshot,
    have_prev: bool,
    csv: Option<AppendFile>,
    /// An interval's rows for `sampler.csv`, kept from one interval to the next.
    rows: String,
    /// When `sampler.csv` was last flushed (ns from the run's start).
    flushed_ns: u64,
    digest: DigestBuilder,
}

#[cfg(feature = "linux")]
const CSV_HEADER: &str = "interval_start_ns,interval_end_ns,cpu,kind,name,count\n";

/// A delay to explain, on CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpikeAt {
    pub cpu: usize,
    pub at_ns: u64,
    pub size_ns: u64,
}

#[cfg(feature = "linux")]
impl<S: Source> Sampler<S> {
    /// A sampler for `spec` writing `sampler.csv` into `dir`; the source names are those present
    /// now (a device that appears later is not followed).
    pub fn new(source: S, spec: SamplerSpec, dir: &Path) -> Sampler<S> {
        let mut s = Sampler::without_file(source, spec);
        s.csv = AppendFile::create(dir, "sampler.csv", SAMPLER_FORMAT, SAMPLER_DESCRIPTION)
            .and_then(|mut f| f.append(CSV_HEADER.as_bytes()).map(|()| f))
            .ok();
        s
    }

    /// A sampler that writes no file.
    pub fn without_file(mut source: S, spec: SamplerSpec) -> Sampler<S> {
        let mut bufs = Bufs {
            interrupts: TextBuf::with_capacity(16 << 10),
            softirqs: TextBuf::with_capacity(4 << 10),
            stat: TextBuf::with_capacity(8 << 10),
            thread: TextBuf::with_capacity(4 << 10),
        };
        // The names, from the reference parsers (this is the only allocating read).
        let text = |b: &TextBuf| std::str::from_utf8(b.bytes()).unwrap_or("").to_string();
        source.read(ProcFile::Interrupts, &mut bufs.interrupts);
        source.read(ProcFile::Softirqs, &mut bufs.softirqs);
        let (_, irqs) = procfs::parse_interrupts(&text(&bufs.interrupts));
        let (_, softirqs) = procfs::parse_softirqs(&text(&bufs.softirqs));
        let irq_names = Names::new(irqs.into_iter().map(|c| c.name).collect());
        let softirq_names = Names::new(softirqs.into_iter().map(|c| c.name).collect());
        let digest = DigestBuilder::new(&spec, irq_names.len(), softirq_names.len());
        let cur = Snapshot::zeroed(&spec, irq_names.len(), softirq_names.len());
        Sampler {
            source,
            irq_names,
            softirq_names,
            bufs,
            scratch: Scratch::default(),
            stat_filled: Vec::with_capacity(spec.cpus.len()),
            prev: cur.clone(),
            cur,
            have_prev: false,
            csv: None,
            rows: String::with_capacity(4 << 10),
            flushed_ns: 0,
            digest,
            spec,
        }
    }

    /// Fills `self.cur`: no allocation once the buffers fit the files.
    fn snapshot(&mut self, at_ns: u64) {
        let (spec, bufs, snap) = (&self.spec, &mut self.bufs, &mut self.cur);
        snap.at_ns = at_ns;
        self.source.read(ProcFile::Interrupts, &mut bufs.interrupts);
        procfs::fill_interrupts(
            bufs.interrupts.bytes(),
            &self.irq_names,
            &spec.cpus,
            &mut self.scratch,
            &mut snap.irq,
        );
        self.source.read(ProcFile::Softirqs, &mut bufs.softirqs);
        procfs::fill_softirqs(
            bufs.softirqs.bytes(),
            &self.softirq_names,
            &spec.cpus,
            &mut self.scratch,
            &mut snap.softirq,
        );
        self.source.read(ProcFile::Stat, &mut bufs.stat);
        procfs::fill_stat(
            bufs.stat.bytes(),
            &spec.cpus,
            &mut self.stat_filled,
            &mut snap.stat,
        );
        for (j, &tid) in spec.tids.iter().enumerate() {
            self.source.read(ProcFile::Status(tid), &mut bufs.thread);
            snap.ctxt[j] = procfs::ctxt_of(bufs.thread.bytes()).unwrap_or((0, 0));
            self.source.read(ProcFile::Schedstat(tid), &mut bufs.thread);
            snap.wait_ns[j] = procfs::schedstat_wait_of(bufs.thread.bytes()).unwrap_or(0);
        }
    }

    /// Takes one snapshot stamped `at_ns` (ns from the run's time zero); the interval it closes
    /// is written to `sampler.csv` and digested.
    pub fn sample(&mut self, at_ns: u64) -> Result<(), StoreError> {
        self.snapshot(at_ns);
        if self.have_prev {
            // The storage of the oldest interval the digest let go, or a new one.
            let mut iv = self.digest.spare.take().unwrap_or_else(|| Interval {
                start_ns: 0,
                end_ns: 0,
                irq: Vec::new(),
                softirq: Vec::new(),
                steal: Vec::new(),
                ctxt: Vec::new(),
                wait_ns: Vec::new(),
            });
            interval_into(&self.prev, &self.cur, &mut iv);
            if let Some(f) = self.csv.as_mut() {
                self.rows.clear();
                csv_rows(
                    &mut self.rows,
                    &self.spec,
                    self.irq_names.as_slice(),
                    self.softirq_names.as_slice(),
                    &iv,
                );
                f.append(self.rows.as_bytes())?;
                // Handed to the kernel once a second, not at every interval: a process killed
                // outright loses at most the last second of rows, as it does of the samples.
                if at_ns.saturating_sub(self.flushed_ns) >= 1_000_000_000 {
                    f.flush()?;
                    self.flushed_ns = at_ns;
                }
            }
            self.digest.add(iv);
        } else {
            self.digest.first_ns = Some(at_ns);
        }
        self.digest.last_ns = Some(at_ns);
        std::mem::swap(&mut self.prev, &mut self.cur);
        self.have_prev = true;
        Ok(())
    }

    /// The last snapshot taken, if any.
    pub fn last(&self) -> Option<&Snapshot> {
        self.have_prev.then_some(&self.prev)
    }

    /// Spikes found since the last call (in any order): each is explained with the interval
    /// that holds it, if it ranks among the largest.
    pub fn note_spikes(&mut self, spikes: &[SpikeAt]) {
        for s in spikes {
            self.digest.note(*s);
        }
    }

    /// The digest of the whole run, with `sampler.csv`'s manifest entry.
    pub fn finish(self) -> Result<Digest, StoreError> {
        let file = self.csv.map(|f| f.finish()).transpose()?;
        Ok(self.digest.finish(
            self.spec,
            self.irq_names.into_vec(),
            self.softirq_names.into_vec(),
            file,
        ))
    }
}

/// The interval between two snapshots (counters that went backwards count zero).
pub fn interval(a: &Snapshot, b: &Snapshot) -> Interval {
    let mut iv = Interval {
        start_ns: 0,
        end_ns: 0,
        irq: Vec::new(),
        softirq: Vec::new(),
        steal: Vec::new(),
        ctxt: Vec::new(),
        wait_ns: Vec::new(),
    };
    interval_into(a, b, &mut iv);
    iv
}

/// [`interval`] into `iv`'s storage (which grows only the first time).
fn interval_into(a: &Snapshot, b: &Snapshot, iv: &mut Interval) {
    let d = |a: u64, b: u64| b.saturating_sub(a);
    let dd = |a: &[Vec<u64>], b: &[Vec<u64>], out: &mut Vec<Vec<u64>>| {
        out.resize_with(a.len().min(b.len()), Vec::new);
        for ((x, y), o) in a.iter().zip(b).zip(out.iter_mut()) {
            o.clear();
            o.extend(x.iter().zip(y).map(|(&p, &q)| d(p, q)));
        }
    };
    iv.start_ns = a.at_ns;
    iv.end_ns = b.at_ns;
    dd(&a.irq, &b.irq, &mut iv.irq);
    dd(&a.softirq, &b.softirq, &mut iv.softirq);
    iv.steal.clear();
    iv.steal
        .extend(a.stat.iter().zip(&b.stat).map(|(p, q)| d(p.steal, q.steal)));
    iv.ctxt.clear();
    iv.ctxt.extend(
        a.ctxt
            .iter()
            .zip(&b.ctxt)
            .map(|(p, q)| (d(p.0, q.0), d(p.1, q.1))),
    );
    iv.wait_ns.clear();
    iv.wait_ns
        .extend(a.wait_ns.iter().zip(&b.wait_ns).map(|(&p, &q)| d(p, q)));
}

/// Appends a CSV field in double quotes, its own quotes doubled.
#[cfg(feature = "linux")]
fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    for part in s.split_inclusive('"') {
        out.push_str(part);
        if part.ends_with('"') {
            out.push('"');
        }
    }
    out.push('"');
}

/// Appends the rows of `sampler.csv` for one interval to `out`: non-zero counts only.
#[cfg(feature = "linux")]
fn csv_rows(
    out: &mut String,
    spec: &SamplerSpec,
    irq_names: &[String],
    softirq_names: &[String],
    i: &Interval,
) {
    use std::fmt::Write;
    for (c, cpu) in spec.cpus.iter().enumerate() {
        let mut row = |kind: &str, name: &str, n: u64| {
            if n > 0 {
                let _ = write!(out, "{},{},{cpu},{kind},", i.start_ns, i.end_ns);
                push_quoted(out, name);
                let _ = writeln!(out, ",{n}");
            }
        };
        for (s, name) in irq_names.iter().enumerate() {
            row("irq", name, i.irq[s][c]);
        }
        for (s, name) in softirq_names.iter().enumerate() {
            row("softirq", name, i.softirq[s][c]);
        }
        row("steal_ticks", "hypervisor", i.steal[c]);
    }
    for (t, tid) in spec.tids.iter().enumerate() {
        let (vol, inv) = i.ctxt[t];
        for (kind, n) in [("voluntary_switches", vol), ("involuntary_switches", inv)] {
            if n > 0 {
                let _ = writeln!(out, "{},{},,{kind},\"tid {tid}\",{n}", i.start_ns, i.end_ns);
            }
        }
    }
}

/// How often each value occurred: exact below 1024, rounded to three significant digits above
/// (a time in ns waited runnable takes many values), so the table stays small however long the
/// run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValueCounts(std::collections::BTreeMap<u64, u64>);

impl ValueCounts {
    fn round(v: u64) -> u64 {
        if v < 1024 {
            return v;
        }
        let digits = v.ilog10();
        let unit = 10u64.pow(digits.saturating_sub(2));
        v / unit * unit
    }

    pub fn add(&mut self, v: u64) {
        *self.0.entry(Self::round(v)).or_insert(0) += 1;
    }

    fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// The value at 0-based rank `k` in sorted order.
    fn at_rank(pairs: impl Iterator<Item = (u64, u64)>, k: u64) -> u64 {
        let mut seen = 0u64;
        let mut last = 0;
        for (v, c) in pairs {
            last = v;
            seen += c;
            if seen > k {
                return v;
            }
        }
        last
    }

    /// The median (the upper middle value, as [`crate::stats::median_upper`]) and the median
    /// absolute deviation from it.
    pub fn centre(&self) -> (u64, u64) {
        let n = self.total();
        if n == 0 {
            return (0, 0);
        }
        let m = Self::at_rank(self.0.iter().map(|(&v, &c)| (v, c)), n / 2);
        let mut dev: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        for (&v, &c) in &self.0 {
            *dev.entry(v.abs_diff(m)).or_insert(0) += c;
        }
        (m, Self::at_rank(dev.into_iter(), n / 2))
    }
}

/// The intervals kept in case a spike arrives late (at 10 snapshots a second, a minute).
#[cfg(feature = "linux")]
const RECENT: usize = 600;
/// Spikes newer than the last snapshot waiting for their interval.
#[cfg(feature = "linux")]
const PENDING: usize = 1 << 16;

/// Per source and CPU (or thread): the value counts, the medians and the totals.
#[cfg(feature = "linux")]
struct Counts {
    irq: Vec<Vec<ValueCounts>>,
    softirq: Vec<Vec<ValueCounts>>,
    steal: Vec<ValueCounts>,
    ctxt: Vec<ValueCounts>,
    wait: Vec<ValueCounts>,
    irq_total: Vec<Vec<u64>>,
    softirq_total: Vec<Vec<u64>>,
    steal_total: Vec<u64>,
    wait_total: Vec<u64>,
}

/// What a run's sampling gives the explanation, built as the run goes.
#[cfg(feature = "linux")]
struct DigestBuilder {
    counts: Counts,
    intervals: u64,
    recent: std::collections::VecDeque<Interval>,
    /// The last interval let go from `recent`, whose storage the next interval reuses.
    spare: Option<Interval>,
    pending: Vec<SpikeAt>,
    /// The largest spikes with their intervals, largest first.
    chosen: Vec<(SpikeAt, Interval)>,
    cpus: Vec<usize>,
    first_ns: Option<u64>,
    last_ns: Option<u64>,
    unexplained: u64,
}

#[cfg(feature = "linux")]
impl DigestBuilder {
    fn new(spec: &SamplerSpec, irqs: usize, softirqs: usize) -> DigestBuilder {
        let c = spec.cpus.len();
        let t = spec.tids.len();
        DigestBuilder {
            counts: Counts {
                irq: vec![vec![ValueCounts::default(); c]; irqs],
                softirq: vec![vec![ValueCounts::default(); c]; softirqs],
                steal: vec![ValueCounts::default(); c],
                ctxt: vec![ValueCounts::default(); t],
                wait: vec![ValueCounts::default(); t],
                irq_total: vec![vec![0; c]; irqs],
                softirq_total: vec![vec![0; c]; softirqs],
                steal_total: vec![0; c],
                wait_total: vec![0; t],
            },
            intervals: 0,
            recent: std::collections::VecDeque::with_capacity(RECENT),
            spare: None,
            pending: Vec::new(),
            chosen: Vec::with_capacity(MAX_CHOSEN + 1),
            cpus: spec.cpus.clone(),
            first_ns: None,
            last_ns: None,
            unexplained: 0,
        }
    }

    fn add(&mut self, iv: Interval) {
        let k = &mut self.counts;
        for (s, per_cpu) in iv.irq.iter().enumerate() {
            for (c, &x) in per_cpu.iter().enumerate() {
                k.irq[s][c].add(x);
                k.irq_total[s][c] += x;
            }
        }
        for (s, per_cpu) in iv.softirq.iter().enumerate() {
            for (c, &x) in per_cpu.iter().enumerate() {
                k.softirq[s][c].add(x);
                k.softirq_total[s][c] += x;
            }
        }
        for (c, &x) in iv.steal.iter().enumerate() {
            k.steal[c].add(x);
            k.steal_total[c] += x;
        }
        for (t, &(_, inv)) in iv.ctxt.iter().enumerate() {
            k.ctxt[t].add(inv);
        }
        for (t, &w) in iv.wait_ns.iter().enumerate() {
            k.wait[t].add(w);
            k.wait_total[t] += w;
        }
        self.intervals += 1;
        // Spikes that waited for this interval (usually none).
        if !self.pending.is_empty() {
            let mut pending = std::mem::take(&mut self.pending);
            pending.retain(|s| {
                let due = s.at_ns < iv.end_ns;
                if due {
                    self.choose(*s, &iv);
                }
                !due
            });
            self.pending = pending;
        }
        if self.recent.len() == RECENT {
            self.spare = self.recent.pop_front();
        }
        self.recent.push_back(iv);
    }

    fn note(&mut self, s: SpikeAt) {
        let sampled = self.cpus.contains(&s.cpu);
        match (sampled, self.first_ns, self.last_ns) {
            (true, Some(first), Some(last)) if s.at_ns >= first => {
                if s.at_ns >= last {
                    if self.pending.len() < PENDING {
                        self.pending.push(s);
                    } else {
                        self.unexplained += 1;
                    }
                } else {
                    match self
                        .recent
                        .iter()
                        .find(|i| i.start_ns <= s.at_ns && s.at_ns < i.end_ns)
                        .cloned()
                    {
                        Some(iv) => self.choose(s, &iv),
                        None => self.unexplained += 1,
                    }
                }
            }
            _ => self.unexplained += 1,
        }
    }

    /// Keeps `s` with its interval when it is among the largest spikes so far.
    fn choose(&mut self, s: SpikeAt, iv: &Interval) {
        let rank = |a: &SpikeAt| (std::cmp::Reverse(a.size_ns), a.at_ns);
        if self.chosen.len() == MAX_CHOSEN
            && self.chosen.last().is_some_and(|(w, _)| rank(w) <= rank(&s))
        {
            return;
        }
        let at = self.chosen.partition_point(|(x, _)| rank(x) <= rank(&s));
        self.chosen.insert(at, (s, iv.clone()));
        self.chosen.truncate(MAX_CHOSEN);
    }

    fn finish(
        mut self,
        spec: SamplerSpec,
        irq_names: Vec<String>,
        softirq_names: Vec<String>,
        file: Option<FileEntry>,
    ) -> Digest {
        self.unexplained += self.pending.len() as u64;
        let k = self.counts;
        let centre = |v: &[ValueCounts]| v.iter().map(ValueCounts::centre).collect::<Vec<_>>();
        Digest {
            intervals: self.intervals,
            irq_centre: k.irq.iter().map(|v| centre(v)).collect(),
            softirq_centre: k.softirq.iter().map(|v| centre(v)).collect(),
            steal_centre: centre(&k.steal),
            ctxt_centre: centre(&k.ctxt),
            wait_centre: centre(&k.wait),
            irq_total: k.irq_total,
            softirq_total: k.softirq_total,
            steal_total: k.steal_total,
            wait_total: k.wait_total,
            sampled_ns: self
                .last_ns
                .zip(self.first_ns)
                .map_or(0, |(l, f)| l.saturating_sub(f)),
            tick_ns: procfs::tick_ns(),
            chosen: self.chosen,
            unexplained: self.unexplained,
            spec,
            irq_names,
            softirq_names,
            file,
        }
    }
}

/// The most spikes whose intervals are kept for the explanation.
pub const MAX_CHOSEN: usize = 20;

/// What the explanation needs of a run's sampling: per source and CPU (or thread), the median
/// and median absolute deviation of its per-interval counts and its total; the largest spikes
/// with the intervals that hold them; and how many spikes fell outside every interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Digest {
    pub spec: SamplerSpec,
    pub irq_names: Vec<String>,
    pub softirq_names: Vec<String>,
    pub intervals: u64,
    /// `(median, MAD)` as `irq_centre[source][cpu]`.
    pub irq_centre: Vec<Vec<(u64, u64)>>,
    pub softirq_centre: Vec<Vec<(u64, u64)>>,
    pub steal_centre: Vec<(u64, u64)>,
    /// Involuntary context switches per thread.
    pub ctxt_centre: Vec<(u64, u64)>,
    pub wait_centre: Vec<(u64, u64)>,
    pub irq_total: Vec<Vec<u64>>,
    pub softirq_total: Vec<Vec<u64>>,
    pub steal_total: Vec<u64>,
    /// Time each thread waited runnable over the run, in ns: 0 where the kernel does not
    /// tell it (no `/proc/PID/schedstat`).
    pub wait_total: Vec<u64>,
    /// From the first snapshot to the last, in ns.
    pub sampled_ns: u64,
    /// The length of one tick of `/proc/stat`'s times (USER_HZ), in ns.
    pub tick_ns: u64,
    /// The largest spikes (largest first) with their intervals.
    pub chosen: Vec<(SpikeAt, Interval)>,
    pub unexplained: u64,
    /// `sampler.csv`'s manifest entry, when it was written.
    pub file: Option<FileEntry>,
}

impl Digest {
    /// The digest of `snapshots` with `spikes` (all at once, for tests and recorded data).
    #[cfg(feature = "linux")]
    pub fn of(
        spec: SamplerSpec,
        irq_names: Vec<String>,
        softirq_names: Vec<String>,
        snapshots: &[Snapshot],
        spikes: &[SpikeAt],
    ) -> Digest {
        let mut b = DigestBuilder::new(&spec, irq_names.len(), softirq_names.len());
        b.first_ns = snapshots.first().map(|s| s.at_ns);
        b.last_ns = b.first_ns;
        let mut recent_all = Vec::new();
        for w in snapshots.windows(2) {
            let iv = interval(&w[0], &w[1]);
            b.last_ns = Some(iv.end_ns);
            recent_all.push(iv.clone());
            b.add(iv);
        }
        for s in spikes {
            let sampled = spec.cpus.contains(&s.cpu);
            match recent_all
                .iter()
                .find(|i| sampled && i.start_ns <= s.at_ns && s.at_ns < i.end_ns)
            {
                Some(iv) => b.choose(*s, iv),
                None => b.unexplained += 1,
            }
        }
        b.finish(spec, irq_names, softirq_names, None)
    }
}

/// The change of every counter over one interval between two snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    pub start_ns: u64,
    pub end_ns: u64,
    /// `irq[source][i]` for `cpus[i]`.
    pub irq: Vec<Vec<u64>>,
    pub softirq: Vec<Vec<u64>>,
    /// Per measured CPU: steal, irq and softirq time in USER_HZ ticks.
    pub steal: Vec<u64>,
    /// Per thread: (voluntary, involuntary) switches.
    pub ctxt: Vec<(u64, u64)>,
    /// Per thread: time waited runnable on a run queue, in ns.
    pub wait_ns: Vec<u64>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A scripted system: each call returns the next text of a list (the last one repeats).
    pub(crate) struct Script {
        pub interrupts: Vec<String>,
        pub softirqs: Vec<String>,
        pub stat: Vec<String>,
        pub status: Vec<String>,
        pub schedstat: Vec<String>,
        pub calls: [usize; 5],
    }

    fn nth(v: &[String], i: &mut usize) -> String {
        let s = v[(*i).min(v.len() - 1)].clone();
        *i += 1;
        s
    }

    impl Source for Script {
        fn read(&mut self, file: ProcFile, buf: &mut TextBuf) {
            let text = match file {
                ProcFile::Interrupts => nth(&self.interrupts, &mut self.calls[0]),
                ProcFile::Softirqs => nth(&self.softirqs, &mut self.calls[1]),
                ProcFile::Stat => nth(&self.stat, &mut self.calls[2]),
                ProcFile::Status(_) => nth(&self.status, &mut self.calls[3]),
                ProcFile::Schedstat(_) => nth(&self.schedstat, &mut self.calls[4]),
            };
            buf.set(text.as_bytes());
        }
    }

    pub(crate) fn irq_text(loc: [u64; 2], eth: [u64; 2]) -> String {
        format!(
            "  CPU0 CPU1\n 30: {} {} PCI-MSI 1-edge eth0\nLOC: {} {} Local timer interrupts\n",
            eth[0], eth[1], loc[0], loc[1]
        )
    }

    #[test]
    fn deltas_follow_the_measured_cpu() {
        let s = Script {
            interrupts: vec![
                irq_text([0, 0], [0, 0]), // names
                irq_text([100, 1000], [5, 7]),
                irq_text([125, 1025], [5, 307]),
            ],
            softirqs: vec!["  CPU0 CPU1\n TIMER: 1 2\n".into()],
            stat: vec![
                "cpu1 1 2 3 4 5 6 7 100\n".into(),
                "cpu1 1 2 3 4 5 6 7 103\n".into(),
            ],
            status: vec![
                "voluntary_ctxt_switches: 10\nnonvoluntary_ctxt_switches: 1\n".into(),
                "voluntary_ctxt_switches: 260\nnonvoluntary_ctxt_switches: 4\n".into(),
            ],
            schedstat: vec!["5 1000 2\n".into(), "9 2001000 3\n".into()],
            calls: [0; 5],
        };
        let spec = SamplerSpec {
            cpus: vec![1],
            tids: vec![1234],
        };
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut sampler = Sampler::new(s, spec, tmp.path());
        sampler.sample(1_000_000_000).expect("sample");
        sampler.note_spikes(&[SpikeAt {
            cpu: 1,
            at_ns: 1_050_000_000,
            size_ns: 500_000,
        }]);
        sampler.sample(1_100_000_000).expect("sample");
        let d = sampler.finish().expect("finish");
        assert_eq!(d.irq_names, ["30 (eth0)", "LOC (Local timer interrupts)"]);
        assert_eq!(d.intervals, 1);
        assert_eq!(
            d.irq_total,
            vec![vec![300], vec![25]],
            "CPU 1's column only"
        );
        assert_eq!(d.steal_total, vec![3]);
        assert_eq!(d.chosen.len(), 1);
        let (spike, iv) = &d.chosen[0];
        assert_eq!(spike.at_ns, 1_050_000_000);
        assert_eq!((iv.start_ns, iv.end_ns), (1_000_000_000, 1_100_000_000));
        assert_eq!(iv.softirq, vec![vec![0]]);
        assert_eq!(iv.ctxt, vec![(250, 3)]);
        assert_eq!(iv.wait_ns, vec![2_000_000]);
        let csv = std::fs::read_to_string(tmp.path().join("sampler.csv")).expect("csv");
        assert_eq!(
            csv,
            "interval_start_ns,interval_end_ns,cpu,kind,name,count\n\
             1000000000,1100000000,1,irq,\"30 (eth0)\",300\n\
             1000000000,1100000000,1,irq,\"LOC (Local timer interrupts)\",25\n\
             1000000000,1100000000,1,steal_ticks,\"hypervisor\",3\n\
             1000000000,1100000000,,voluntary_switches,\"tid 1234\",250\n\
             1000000000,1100000000,,involuntary_switches,\"tid 1234\",3\n"
        );
        let f = d.file.expect("file entry");
        assert_eq!(f.sha256, crate::store::sha256_hex(csv.as_bytes()));
    }

    #[test]
    fn medians_are_exact_on_small_counts() {
        let mut v = ValueCounts::default();
        for x in [3, 3, 3, 300, 4, 2, 3] {
            v.add(x);
        }
        // Sorted 2 3 3 3 3 4 300: median 3; deviations 1 0 0 0 0 1 297: median 0.
        assert_eq!(v.centre(), (3, 0));
        let mut w = ValueCounts::default();
        w.add(123_456);
        assert_eq!(w.centre(), (123_000, 0));
    }

    #[test]
    fn this_machine_samples() {
        let spec = SamplerSpec {
            cpus: vec![0],
            tids: vec![sandglass_sys::sched::gettid().0],
        };
        let mut s = Sampler::without_file(Proc::new(), spec);
        s.sample(1).expect("sample");
        s.sample(2).expect("sample");
        let d = s.finish().expect("finish");
        assert!(!d.irq_names.is_empty());
        assert_eq!(d.intervals, 1);
    }
}
