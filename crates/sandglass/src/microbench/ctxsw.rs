//! Context-switch cost, direct and with a working set, as distributions.
//!
//! The method is lmbench's `lat_ctx` (McVoy & Staelin, *lmbench: Portable tools for
//! performance analysis*, USENIX 1996), written fresh: a ring of members on one CPU passes a
//! one-byte token through pipes; each member, when the token arrives, first touches its working
//! set and then passes the token on. One trip around a ring of M members costs M hops, and each
//! hop is a pipe write, a pipe read, the touch of a working set and one context switch. The same
//! hop without the switch, a single thread writing the token into a pipe, reading it back and
//! touching the same working set (which stays hot in its cache), is measured separately; its
//! median is the overhead subtracted from every hop:
//!
//! `switch = trip / M − overhead`.
//!
//! With an empty working set this is the direct cost of a switch. With a working set of S bytes
//! each switch also has to bring the next member's working set back into the cache after the
//! other members evicted it; `indirect = switch(S) − switch(0)` is that refill cost, which
//! grows with S until the working sets of the ring no longer fit the cache.
//!
//! The members are threads of one process pinned to one CPU, so a switch does not change the
//! address space (lmbench uses processes). A member touches its working set by reading one
//! 64-bit word of every 64-byte line. Each member adds one to the token, and the first member
//! checks that it came back increased by M: the token is never lost or duplicated. Every member
//! records the CPU it ran on at every hop.

#[cfg(feature = "linux")]
use super::{now, setup_thread, CpusSeen, Session};
use super::{Header, ThreadSetup};
use crate::kind::{fig, KeyFigure, OverCpus, Unit, LOAD};
use crate::policy::Policy;
use crate::probe::{array, num, Figures, Probe};
#[cfg(feature = "linux")]
use crate::runner::{Observer, RunContext, RunError};
use crate::stats::Summary;
use crate::units::Nanos;
use crate::RunKind;
#[cfg(feature = "linux")]
use sandglass_sys::Errno;
use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "linux")]
use std::fs::File;
#[cfg(feature = "linux")]
use std::io::{Read, Write};
use std::path::PathBuf;
#[cfg(feature = "linux")]
use std::sync::atomic::AtomicBool;
#[cfg(feature = "linux")]
use std::sync::atomic::Ordering;
use thiserror::Error;

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CtxswConfig {
    /// Working-set sizes per member, in bytes (0 is the direct cost).
    pub working_sets: Vec<u64>,
    /// Members of the ring (at least 2).
    pub ring: usize,
    pub cpu: Option<usize>,
    pub policy: Policy,
    /// Time spent on each working set (a third on the overhead, the rest on the ring).
    pub cell_time_ns: Nanos,
    /// At most this many trips (and overhead samples) per working set.
    pub max_trips: usize,
    pub output_dir: Option<PathBuf>,
}

/// The default working sets: 0 to 4 MiB.
pub const DEFAULT_WORKING_SETS: [u64; 7] =
    [0, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20];

impl Default for CtxswConfig {
    fn default() -> CtxswConfig {
        CtxswConfig {
            working_sets: DEFAULT_WORKING_SETS.to_vec(),
            ring: 2,
            cpu: None,
            policy: Policy::Other { nice: 0 },
            cell_time_ns: Nanos::from_millis(300),
            max_trips: 5000,
            output_dir: None,
        }
    }
}

/// At least this many samples, however long they take.
#[cfg(feature = "linux")]
const MIN_SAMPLES: usize = 10;
/// Bytes between the words a member reads from its working set.
#[cfg(feature = "linux")]
const LINE: usize = 64;

/// One working set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CtxswCell {
    pub working_set_bytes: u64,
    pub ring: usize,
    /// Measured trips around the ring.
    pub trips: u64,
    /// One hop without a switch: pipe write, pipe read and working-set touch in one thread.
    pub overhead_ns: Option<Summary>,
    /// One hop of the ring: a trip divided by the ring's size.
    pub hop_ns: Option<Summary>,
    /// `hop − median overhead`, per trip: the cost of one switch.
    pub switch_ns: Option<Summary>,
    /// Median switch cost minus the median switch cost with an empty working set.
    pub indirect_p50_ns: Option<i64>,
    /// The CPUs the members ran on.
    pub cpus_seen: Vec<usize>,
    pub placement_verified: bool,
    pub error: Option<String>,
    /// Why this working set's costs are not physical, when they are not: a negative median
    /// switch (the overhead measured alone took longer than a hop with a switch) or a negative
    /// indirect cost (refilling a cache cannot save time: the difference is the two medians'
    /// noise, not a cost). The figures stay in `switch_ns` and `indirect_p50_ns`; the text
    /// report prints the reason instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_physical: Option<String>,
}

impl CtxswCell {
    /// The median switch, when it is a cost (not negative).
    pub fn switch_p50_cost(&self) -> Option<i64> {
        self.switch_ns
            .as_ref()
            .map(|s| s.p50_ns)
            .filter(|&p| p >= 0)
    }

    /// The median indirect cost, when it is a cost: `None` when the cell has none or its
    /// costs are not physical ([`not_physical`]).
    pub fn indirect_cost(&self) -> Option<i64> {
        self.indirect_p50_ns.filter(|_| self.not_physical.is_none())
    }
}

/// Why `c`'s switch and indirect costs cannot be costs, or `None`. `direct_p50_ns` is the
/// median switch with no working set, from which every other cell's indirect cost is derived.
pub fn not_physical(c: &CtxswCell, direct_p50_ns: Option<i64>) -> Option<String> {
    if let (Some(s), Some(o), Some(h)) = (&c.switch_ns, &c.overhead_ns, &c.hop_ns) {
        if c.switch_p50_cost().is_none() {
            return Some(format!(
                "the median switch is {} ns: the overhead measured alone ({} ns) took longer than a hop with a switch ({} ns), so the subtraction gives no switch cost here (nor an indirect one)",
                s.p50_ns, o.p50_ns, h.p50_ns
            ));
        }
    }
    if c.working_set_bytes > 0 && c.indirect_p50_ns.is_some() {
        if let Some(d) = direct_p50_ns.filter(|&d| d < 0) {
            return Some(format!(
                "the indirect cost subtracts the median switch with no working set, which is {d} ns and so no cost: this working set has no indirect cost"
            ));
        }
    }
    c.indirect_p50_ns.filter(|&i| i < 0).map(|i| {
        format!(
            "the indirect cost is {i} ns: refilling a cache cannot save time, so this is the noise of two medians, not a cost"
        )
    })
}

/// The result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CtxswResult {
    #[serde(flatten)]
    pub header: Header,
    pub cpu: usize,
    pub ring: usize,
    /// How the token travels.
    pub token: String,
    /// The member threads' placement and policy (of the first working set).
    pub members: Vec<ThreadSetup>,
    pub cells: Vec<CtxswCell>,
}

/// Reads one word of every line of `ws`; the sum keeps the reads from being optimised away.
#[cfg(feature = "linux")]
#[inline]
fn touch(ws: &[u8]) -> u64 {
    let mut sum = 0u64;
    let mut i = 0;
    while i + 8 <= ws.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&ws[i..i + 8]);
        sum = sum.wrapping_add(u64::from_ne_bytes(w));
        i += LINE;
    }
    sum
}

/// A working set of `bytes`, every page written so that no touch takes a page fault.
#[cfg(feature = "linux")]
fn working_set(bytes: u64) -> Vec<u8> {
    (0..bytes as usize).map(|i| i as u8).collect()
}

/// Why a context-switch configuration was refused (named by its flag, with the fix) or a
/// measurement failed (named by its system call).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CtxswError {
    #[error("--ring {0}: a ring has 2 to 64 members")]
    Ring(usize),
    #[error("--working-sets: give at least one size (0 for the direct cost)")]
    NoWorkingSets,
    #[error("--working-sets: {} per member is more than the 256 MiB this benchmark allows", super::format_size(*.0))]
    WorkingSetTooLarge(u64),
    #[error("--cell-time must be longer than zero")]
    ZeroCellTime,
    #[error("--max-trips must be at least 1")]
    ZeroMaxTrips,
    #[error("-P: SCHED_DEADLINE is not offered here; use f:PRIO, r:PRIO, o:NICE, b or i")]
    Deadline,
    #[cfg(feature = "linux")]
    #[error("pipe2: {0}")]
    Pipe(Errno),
    #[error("the token pipe failed: {reason}")]
    TokenPipe { reason: String },
}

/// The per-hop overhead of one thread passing a token to itself.
#[cfg(feature = "linux")]
fn overhead(
    ws_bytes: u64,
    budget_ns: u64,
    max: usize,
    stop: &AtomicBool,
) -> Result<Vec<i64>, CtxswError> {
    let ws = working_set(ws_bytes);
    let (mut r, mut w) = sandglass_sys::ipc::pipe().map_err(CtxswError::Pipe)?;
    let mut token = [0u8; 1];
    let mut out = Vec::with_capacity(max.max(MIN_SAMPLES));
    let io = |e: std::io::Error| CtxswError::TokenPipe {
        reason: e.to_string(),
    };
    // Warm the pipe and the working set.
    for _ in 0..3 {
        w.write_all(&token).map_err(io)?;
        r.read_exact(&mut token).map_err(io)?;
        std::hint::black_box(touch(&ws));
    }
    let end = now() + budget_ns;
    loop {
        let t0 = now();
        w.write_all(&token).map_err(io)?;
        r.read_exact(&mut token).map_err(io)?;
        std::hint::black_box(touch(&ws));
        let t1 = now();
        out.push((t1 - t0) as i64);
        if out.len() >= max.max(MIN_SAMPLES)
            || (out.len() >= MIN_SAMPLES && (t1 >= end || stop.load(Ordering::Relaxed)))
        {
            return Ok(out);
        }
    }
}

#[cfg(feature = "linux")]
struct Member {
    rx: File,
    tx: File,
}

#[cfg(feature = "linux")]
struct MemberOutcome {
    setup: Option<ThreadSetup>,
    seen: CpusSeen,
    trips: Vec<i64>,
    error: Option<String>,
}

/// What every member of a ring shares.
#[cfg(feature = "linux")]
struct RingArgs<'a> {
    ring: usize,
    ws_bytes: u64,
    cpu: usize,
    config: &'a CtxswConfig,
    privileged: bool,
    budget_ns: u64,
    stop: &'a AtomicBool,
}

/// Member `index` of the ring. Member 0 starts every trip and times it after three warm-up
/// trips (by then every member has pinned itself and touched its working set once); the others
/// pass the token on until their pipe reaches end of file. A member that fails closes its pipes,
/// so the failure travels round the ring and ends it.
#[cfg(feature = "linux")]
fn member(index: usize, mut m: Member, a: &RingArgs<'_>) -> MemberOutcome {
    let (ring, ws_bytes, cpu, config) = (a.ring, a.ws_bytes, a.cpu, a.config);
    let (privileged, budget_ns, stop) = (a.privileged, a.budget_ns, a.stop);
    let mut out = MemberOutcome {
        setup: None,
        seen: CpusSeen::new(),
        trips: Vec::new(),
        error: None,
    };
    let setup = setup_thread(cpu, &config.policy, privileged);
    let ws = working_set(ws_bytes);
    match setup {
        Ok(s) => out.setup = Some(s),
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    }
    let mut token = [0u8; 1];
    let io = |e: std::io::Error| format!("member {index}: the token pipe failed: {e}");
    if index > 0 {
        loop {
            match m.rx.read(&mut token) {
                Ok(0) => return out,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    out.error = Some(io(e));
                    return out;
                }
            }
            out.seen.record_current();
            std::hint::black_box(touch(&ws));
            token[0] = token[0].wrapping_add(1);
            if let Err(e) = m.tx.write_all(&token) {
                out.error = Some(io(e));
                return out;
            }
        }
    }
    let cap = config.max_trips.max(MIN_SAMPLES);
    out.trips.reserve(cap);
    let warmup = 3;
    let mut end = u64::MAX;
    let mut trip = 0usize;
    loop {
        let sent = token[0];
        let t0 = now();
        let step =
            m.tx.write_all(&token)
                .and_then(|_| m.rx.read_exact(&mut token));
        if let Err(e) = step {
            out.error = Some(io(e));
            return out;
        }
        out.seen.record_current();
        std::hint::black_box(touch(&ws));
        let t1 = now();
        if token[0] != sent.wrapping_add(ring as u8 - 1) {
            out.error = Some(format!(
                "the token came back as {} where {} was expected: a member lost or repeated it",
                token[0],
                sent.wrapping_add(ring as u8 - 1)
            ));
            return out;
        }
        trip += 1;
        if trip == warmup {
            end = t1 + budget_ns;
        }
        if trip > warmup {
            out.trips.push((t1 - t0) as i64);
            if out.trips.len() >= cap
                || (out.trips.len() >= MIN_SAMPLES && (t1 >= end || stop.load(Ordering::Relaxed)))
            {
                return out;
            }
        }
    }
}

/// The ring's trips, the members' CPUs and setups.
#[cfg(feature = "linux")]
fn ring_trips(
    ws_bytes: u64,
    cpu: usize,
    config: &CtxswConfig,
    privileged: bool,
    budget_ns: u64,
    stop: &AtomicBool,
) -> (Vec<i64>, CpusSeen, Vec<ThreadSetup>, Option<String>) {
    let n = config.ring;
    let mut pipes = Vec::with_capacity(n);
    for _ in 0..n {
        match sandglass_sys::ipc::pipe() {
            Ok(p) => pipes.push(p),
            Err(e) => {
                return (
                    Vec::new(),
                    CpusSeen::new(),
                    Vec::new(),
                    Some(CtxswError::Pipe(e).to_string()),
                )
            }
        }
    }
    // Member i reads pipe i and writes pipe i+1.
    let (readers, writers): (Vec<File>, Vec<File>) = pipes.into_iter().unzip();
    let mut writers: Vec<Option<File>> = writers.into_iter().map(Some).collect();
    let mut members = Vec::with_capacity(n);
    for (i, rx) in readers.into_iter().enumerate() {
        let tx = writers[(i + 1) % n].take();
        members.push((i, rx, tx));
    }
    let args = RingArgs {
        ring: n,
        ws_bytes,
        cpu,
        config,
        privileged,
        budget_ns,
        stop,
    };
    let failed = |e: String| MemberOutcome {
        setup: None,
        seen: CpusSeen::new(),
        trips: Vec::new(),
        error: Some(e),
    };
    let outcomes: Vec<MemberOutcome> = std::thread::scope(|s| {
        let handles: Vec<_> = members
            .into_iter()
            .filter_map(|(i, rx, tx)| Some((i, rx, tx?)))
            .map(|(i, rx, tx)| {
                let args = &args;
                std::thread::Builder::new()
                    .name(format!("sg-ctxsw-{i}"))
                    .spawn_scoped(s, move || member(i, Member { rx, tx }, args))
                    .map_err(|e| format!("cannot create ring member {i}: {e}"))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| failed("a ring member panicked".to_string())),
                Err(e) => failed(e),
            })
            .collect()
    });
    let mut seen = CpusSeen::new();
    let mut setups = Vec::new();
    let mut error = None;
    let mut trips = Vec::new();
    for (i, o) in outcomes.into_iter().enumerate() {
        seen.merge(&o.seen);
        setups.extend(o.setup);
        if error.is_none() {
            error = o.error;
        }
        if i == 0 {
            trips = o.trips;
        }
    }
    (trips, seen, setups, error)
}

/// `hop − overhead` for each trip of a ring of `ring` members.
pub fn switch_costs(trips: &[i64], ring: usize, overhead_p50_ns: i64) -> (Vec<i64>, Vec<i64>) {
    let ring = ring.max(1) as i64;
    let hops: Vec<i64> = trips.iter().map(|t| t / ring).collect();
    let switches = hops.iter().map(|h| h - overhead_p50_ns).collect();
    (hops, switches)
}

#[cfg(feature = "linux")]
fn measure_cell(
    ws_bytes: u64,
    cpu: usize,
    config: &CtxswConfig,
    privileged: bool,
    stop: &AtomicBool,
) -> (CtxswCell, Vec<ThreadSetup>, Vec<i64>) {
    let mut cell = CtxswCell {
        working_set_bytes: ws_bytes,
        ring: config.ring,
        trips: 0,
        overhead_ns: None,
        hop_ns: None,
        switch_ns: None,
        indirect_p50_ns: None,
        cpus_seen: Vec::new(),
        placement_verified: false,
        error: None,
        not_physical: None,
    };
    let budget = config.cell_time_ns.0;
    let mut over = match overhead(ws_bytes, budget / 3, config.max_trips, stop) {
        Ok(o) => o,
        Err(e) => {
            cell.error = Some(e.to_string());
            return (cell, Vec::new(), Vec::new());
        }
    };
    cell.overhead_ns = super::summarize(&mut over);
    let (trips, seen, setups, error) =
        ring_trips(ws_bytes, cpu, config, privileged, budget - budget / 3, stop);
    cell.cpus_seen = seen.to_vec();
    cell.placement_verified = super::placement_holds(&cell.cpus_seen, cpu);
    cell.error = error;
    cell.trips = trips.len() as u64;
    let p50 = cell.overhead_ns.as_ref().map(|s| s.p50_ns).unwrap_or(0);
    let (mut hops, mut switches) = switch_costs(&trips, config.ring, p50);
    cell.hop_ns = super::summarize(&mut hops);
    cell.switch_ns = super::summarize(&mut switches);
    (cell, setups, trips)
}

/// Checks the configuration; the error names the flag.
pub fn validate(config: &CtxswConfig) -> Result<(), CtxswError> {
    if config.ring < 2 || config.ring > 64 {
        return Err(CtxswError::Ring(config.ring));
    }
    if config.working_sets.is_empty() {
        return Err(CtxswError::NoWorkingSets);
    }
    if let Some(&big) = config.working_sets.iter().find(|&&s| s > 256 << 20) {
        return Err(CtxswError::WorkingSetTooLarge(big));
    }
    if config.cell_time_ns.0 == 0 {
        return Err(CtxswError::ZeroCellTime);
    }
    if config.max_trips == 0 {
        return Err(CtxswError::ZeroMaxTrips);
    }
    if config.policy.is_deadline() {
        return Err(CtxswError::Deadline);
    }
    Ok(())
}

/// Runs the context-switch benchmark and writes its run directory.
#[cfg(feature = "linux")]
pub fn run(
    config: &CtxswConfig,
    ctx: &RunContext,
    obs: &mut dyn Observer,
) -> Result<CtxswResult, RunError> {
    validate(config).map_err(super::usage)?;
    let allowed = crate::system::allowed_cpus();
    let cpu = super::choose_cpu(&allowed, config.cpu).map_err(super::usage)?;
    let session = Session::open(
        CtxswProbe::KIND,
        config.output_dir.as_deref(),
        ctx,
        serde_json::json!({ "ctxsw": config, "cpu": cpu }),
    )?;
    obs.note(&format!(
        "a ring of {} threads on CPU {cpu} passing a token through pipes, {} working set(s), about {} each",
        config.ring,
        config.working_sets.len(),
        config.cell_time_ns
    ));
    let privileged = super::privileged();
    let stop = AtomicBool::new(false);
    let body = || {
        let mut cells = Vec::new();
        let mut members = Vec::new();
        let mut raw = Vec::new();
        for &ws in &config.working_sets {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let (c, setups, trips) = measure_cell(ws, cpu, config, privileged, &stop);
            if members.is_empty() {
                members = setups;
            }
            raw.push((ws, trips));
            cells.push(c);
        }
        (cells, members, raw)
    };
    let ((mut cells, members, raw), ended) = match super::supervise(&stop, body) {
        Ok(v) => v,
        Err(e) => return Err(session.fail(e.to_string())),
    };
    let direct = cells
        .iter()
        .find(|c| c.working_set_bytes == 0)
        .and_then(|c| c.switch_ns.as_ref().map(|s| s.p50_ns));
    for c in &mut cells {
        if c.working_set_bytes > 0 {
            c.indirect_p50_ns = direct.zip(c.switch_ns.as_ref()).map(|(d, s)| s.p50_ns - d);
        }
        c.not_physical = not_physical(c, direct);
    }
    let mut warnings = Vec::new();
    super::downgrade_warnings(&members.iter().collect::<Vec<_>>(), &mut warnings);
    let header = session.header(ended.state, &ended.detail, &warnings);
    let result = CtxswResult {
        header,
        cpu,
        ring: config.ring,
        token: "pipe".to_string(),
        members,
        cells,
    };
    let mut csv = String::from("working_set_bytes,trips,overhead_p50_ns,hop_p50_ns,switch_min_ns,switch_p50_ns,switch_p99_ns,switch_max_ns,indirect_p50_ns,placement_verified,error\n");
    for c in &result.cells {
        let g = |s: &Option<Summary>, f: fn(&Summary) -> i64| {
            s.as_ref().map(|s| f(s).to_string()).unwrap_or_default()
        };
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},\"{}\"\n",
            c.working_set_bytes,
            c.trips,
            g(&c.overhead_ns, |s| s.p50_ns),
            g(&c.hop_ns, |s| s.p50_ns),
            g(&c.switch_ns, |s| s.min_ns),
            g(&c.switch_ns, |s| s.p50_ns),
            g(&c.switch_ns, |s| s.p99_ns),
            g(&c.switch_ns, |s| s.max_ns),
            c.indirect_p50_ns.map(|v| v.to_string()).unwrap_or_default(),
            c.placement_verified,
            c.error.as_deref().unwrap_or("").replace('"', "'")
        ));
    }
    let mut samples = String::from("working_set_bytes,trip_ns\n");
    for (ws, trips) in &raw {
        for t in trips {
            samples.push_str(&format!("{ws},{t}\n"));
        }
    }
    let files = vec![
        session.write(
            "cells.csv",
            csv.as_bytes(),
            "sandglass-bench-ctxsw-cells-csv/1",
            "one row per working set: overhead, hop and switch cost",
        )?,
        session.write(
            "samples.csv.gz",
            &super::gzip(samples.as_bytes()),
            "sandglass-bench-ctxsw-samples-csv/1+gzip",
            "every measured trip around the ring, in nanoseconds",
        )?,
    ];
    session.finish(&result, &result.header, files)?;
    Ok(result)
}

/// The context-switch probe (`bench ctxsw`): switch times by working-set size.
pub struct CtxswProbe;

impl Probe for CtxswProbe {
    const KIND: RunKind = RunKind::BenchCtxsw;
    type Config = CtxswConfig;
    type Result = CtxswResult;

    /// Its key figures, in the order people read them.
    const FIGURES: &'static [KeyFigure] = &[
        fig("switch_p50_ns", "switch p50", Unit::Nanos, OverCpus::Run),
        LOAD,
    ];

    #[cfg(feature = "linux")]
    fn run(
        c: &CtxswConfig,
        ctx: &RunContext,
        obs: &mut dyn Observer,
    ) -> Result<CtxswResult, RunError> {
        run(c, ctx, obs)
    }

    /// The switch time of the cell without a working set (the direct cost), else the first.
    fn figures(s: &Value, f: &mut Figures) {
        let cells = array(&s["cells"]);
        let direct = cells
            .iter()
            .filter(|c| num(&c["working_set_bytes"]) == Some(0.0))
            .chain(cells.iter());
        f.add(
            "switch_p50_ns",
            direct.filter_map(|c| num(&c["switch_ns"]["p50_ns"])).next(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell from its median overhead, hop and switch and its indirect cost.
    fn cell(overhead: i64, hop: i64, switch: i64, indirect: Option<i64>) -> CtxswCell {
        let median = |v: i64| super::super::summarize(&mut [v]);
        CtxswCell {
            working_set_bytes: 4096,
            ring: 2,
            trips: 1,
            overhead_ns: median(overhead),
            hop_ns: median(hop),
            switch_ns: median(switch),
            indirect_p50_ns: indirect,
            cpus_seen: vec![1],
            placement_verified: true,
            error: None,
            not_physical: None,
        }
    }

    /// A negative switch or refill cost is not a cost and says why; zero and positive ones
    /// are costs.
    #[test]
    fn negative_costs_are_not_physical() {
        assert_eq!(
            not_physical(&cell(500, 2000, 1500, Some(0)), Some(1500)),
            None
        );
        assert_eq!(
            not_physical(&cell(500, 2000, 1500, Some(40)), Some(1460)),
            None
        );
        let why = not_physical(&cell(500, 2000, 1500, Some(-1655)), Some(3155)).expect("indirect");
        assert!(
            why.starts_with("the indirect cost is -1655 ns: refilling a cache cannot save time"),
            "{why}"
        );
        let c = cell(2216, 2000, -216, None);
        let why = not_physical(&c, Some(-216)).expect("switch");
        assert!(why.starts_with("the median switch is -216 ns: the overhead measured alone (2216 ns) took longer than a hop with a switch (2000 ns)"), "{why}");
        assert_eq!(c.switch_p50_cost(), None);
    }

    /// Every cell's indirect cost is derived from the direct cell's median switch: when that
    /// is negative, none of them is a cost, whatever its own arithmetic says.
    #[test]
    fn a_negative_direct_switch_leaves_no_indirect_cost() {
        let mut c = cell(500, 2000, 1500, Some(1716));
        let why = not_physical(&c, Some(-216)).expect("derived from a negative switch");
        assert!(
            why.starts_with("the indirect cost subtracts the median switch with no working set, which is -216 ns"),
            "{why}"
        );
        c.not_physical = Some(why);
        assert_eq!((c.switch_p50_cost(), c.indirect_cost()), (Some(1500), None));
        c.not_physical = not_physical(&c, Some(200));
        assert_eq!(c.indirect_cost(), Some(1716));
    }

    /// Exact arithmetic: trips of 4000 and 4400 ns around a ring of 2 with an overhead of
    /// 500 ns per hop are hops of 2000 and 2200 ns and switches of 1500 and 1700 ns.
    #[test]
    fn switch_cost_subtracts_the_overhead_per_hop() {
        let (hops, sw) = switch_costs(&[4000, 4400], 2, 500);
        assert_eq!(hops, vec![2000, 2200]);
        assert_eq!(sw, vec![1500, 1700]);
        let (hops, _) = switch_costs(&[9000], 3, 0);
        assert_eq!(hops, vec![3000]);
    }

    #[test]
    fn touch_reads_one_word_per_line() {
        let mut ws = vec![0u8; 256];
        ws[0] = 1;
        ws[64] = 2;
        ws[65] = 1; // not at a line start: not read
        ws[192] = 4;
        assert_eq!(touch(&ws), 1 + 2 + 256 + 4);
        assert_eq!(touch(&[]), 0);
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(validate(&CtxswConfig::default()).is_ok());
        let one = CtxswConfig {
            ring: 1,
            ..CtxswConfig::default()
        };
        assert!(validate(&one)
            .expect_err("ring")
            .to_string()
            .contains("--ring 1"));
    }

    #[test]
    fn short_run_measures_direct_and_indirect_costs() {
        let base = tempfile::tempdir().expect("tempdir");
        let ctx = super::super::test_context(base.path());
        let config = CtxswConfig {
            working_sets: vec![0, 64 << 10],
            ring: 3,
            cell_time_ns: Nanos::from_millis(6),
            max_trips: 50,
            ..CtxswConfig::default()
        };
        let r = run(&config, &ctx, &mut crate::runner::Silent).expect("run");
        assert_eq!(r.header.kind, crate::RunKind::BenchCtxsw);
        assert_eq!(r.cells.len(), 2);
        assert_eq!(r.members.len(), 3);
        assert!(r.members.iter().all(|m| m.cpu == r.cpu));
        for c in &r.cells {
            assert!(c.error.is_none(), "{:?}", c.error);
            assert_eq!(c.cpus_seen, vec![r.cpu]);
            assert!(c.placement_verified);
            assert!(c.trips >= MIN_SAMPLES as u64);
            let o = c.overhead_ns.as_ref().expect("overhead");
            let h = c.hop_ns.as_ref().expect("hops");
            let s = c.switch_ns.as_ref().expect("switches");
            assert_eq!(s.count, h.count);
            assert_eq!(s.p50_ns, h.p50_ns - o.p50_ns);
        }
        assert_eq!(r.cells[0].indirect_p50_ns, None);
        let d = r.cells[0].switch_ns.as_ref().expect("direct").p50_ns;
        let s = r.cells[1].switch_ns.as_ref().expect("64 KiB").p50_ns;
        assert_eq!(r.cells[1].indirect_p50_ns, Some(s - d));
        let reader = crate::store::RunReader::open(std::path::Path::new(&r.header.run_dir))
            .expect("finished run");
        assert!(reader.read("cells.csv").is_ok());
    }

    #[test]
    fn refusals_keep_their_wording() {
        let cases = [
            (
                CtxswError::Ring(1),
                "--ring 1: a ring has 2 to 64 members".to_string(),
            ),
            (
                CtxswError::NoWorkingSets,
                "--working-sets: give at least one size (0 for the direct cost)".into(),
            ),
            (
                CtxswError::WorkingSetTooLarge(512 << 20),
                "--working-sets: 512 MiB per member is more than the 256 MiB this benchmark allows"
                    .into(),
            ),
            (
                CtxswError::ZeroCellTime,
                "--cell-time must be longer than zero".into(),
            ),
            (
                CtxswError::ZeroMaxTrips,
                "--max-trips must be at least 1".into(),
            ),
            (
                CtxswError::Deadline,
                "-P: SCHED_DEADLINE is not offered here; use f:PRIO, r:PRIO, o:NICE, b or i".into(),
            ),
            (
                CtxswError::Pipe(Errno::ENOMEM),
                format!("pipe2: {}", Errno::ENOMEM),
            ),
            (
                CtxswError::TokenPipe {
                    reason: "Broken pipe (os error 32)".into(),
                },
                "the token pipe failed: Broken pipe (os error 32)".into(),
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
