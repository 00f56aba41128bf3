//! Periodic trains of delays: "delays of about X every P, M of N slots, first at T".
//!
//! Jones and Regehr (seed 004, §4) found by hand that their longest timer delays came from a
//! network driver's deferred procedure call every 5 s and a card reset every 10 s. This module
//! finds such trains by program, among the spikes of one CPU.
//!
//! **What a train is.** A grid of slots `first + k·period`, `k = 0 .. slots − 1`, on which most
//! slots hold a spike of similar size within `± tol(period)` of the slot, where `tol(P) =
//! min(max(min_tolerance, P · period_tolerance), P · max_tolerance_share)`: 2 ms for periods
//! from 40 ms to 1 s, 0.2% of longer ones, 5% of shorter ones. The rule: at least `min_members`
//! (5) members, and the members fill at least `min_fill` (90%) of the slots from the first
//! member to the last, so nine of ten is a train and a missing member does not end one. The
//! members take at most `max_duty` (a quarter) of the period: delays that take more of the CPU
//! are time sharing (a competitor's CFS slices alternating with the measured thread), not a
//! periodic interruption. The shortest period looked for is 1 ms, so the kernel's tick (4 ms at
//! HZ 250, 1 ms at HZ 1000) is a train when most ticks are spikes and little else is.
//!
//! **Similar size.** Sizes are put in classes a factor `√size_ratio` wide, and a band is a class
//! with its two neighbours: a train whose sizes lie within a factor `size_ratio` (2) of each
//! other lies in the band of its middle class. A periodic source tends to cost about the same
//! each time, and the band is what separates its train from the crowd: trains are proposed in
//! each band on its own, from its spikes. A slot may also be filled by a longer spike (the
//! band's lowest class or larger): when the source fires during another delay, the two are one
//! spike, as long as both.
//!
//! **Search.** In the band of each class, every pair of spikes `(a, b)` with `a` in the class
//! and `d = b − a` within the period range proposes the grid `(a, d)`. A spike's pairs are at
//! most its `MAX_P / (2 · period_tolerance)` (63) nearest followers in the band, and none when
//! the band's spikes within the period are so dense that a slot's window would hold one by
//! chance more than a quarter of the time, or the spikes within four periods so dense that a
//! seen slot would be filled by chance (estimate 1 below) more than 35% of the time: no train
//! could be told from chance there. A pair is followed only when slots 2 and 3 hold a spike of the band
//! and slot −1 none of the class (a train is followed from its first member of the class, or
//! from one after a miss), and not when `a` and `b` are members of one chain already followed
//! in the band (a multiple of its period, or the same train seen from a later member). The walk
//! goes forward from `b` and back from `a`, predicting each slot from the least-squares line
//! through the members so far, and takes the possible member nearest to the slot within
//! `± tol`; an empty slot is a miss, and each way ends when the misses exceed what the members
//! could carry at `min_fill`, plus two. Of what the walk found, the stretch with the most
//! members that fills `min_fill` of its slots is the chain.
//!
//! **Significance.** A slot that fell within a longer delay was not seen: it is neither a hit
//! nor a miss. Under the null hypothesis (no periodic source: the spikes are where they are for
//! other reasons), a seen slot holds a possible member by accident with a probability `p`, the
//! largest of three estimates:
//!
//! 1. From the densities within half a period of each slot `k` (at least 1/2048 of the run,
//!    members included): its window holds one of the band's spikes with probability `hit_k =
//!    1 − exp(−ρ_k · 2·tol)` and no spike that could hide it with probability `miss_k =
//!    exp(−ρ'_k · 2·tol − h_k)` (`ρ'_k` the density of the band's and longer spikes, `h_k` the
//!    share of time within them), so a seen slot is filled with probability `hit_k / (hit_k +
//!    miss_k)`; `p` is at least the mean of that over the slots (Hoeffding: the binomial tail
//!    with the mean bounds the tail of the slots' own chances). A train in a burst of similar
//!    spikes is judged against the burst, one in a quiet stretch against the quiet; and among
//!    many longer spikes, where most slots are hidden, the few seen are judged by what is
//!    left of them.
//! 2. The share of the grid's continuation (up to 64 slots before its first and after its last
//!    member, within the run) that holds a possible member, of the slots seen there: a lucky
//!    stretch of a grid filled at 40% elsewhere is not a train.
//! 3. The share of the band's spikes around the train, off its grid and not members of trains
//!    taken (at most 1,024 of them), that have a possible member one period later, within a
//!    window `√2` times wider (the follower is placed from one spike, with its error, not from
//!    the line through many): the chance that a slot is filled when the one before it was.
//!    For spikes at random this is estimate 1 again. Time slicing puts its delays on the
//!    kernel's tick at irregular multiples of it, and returns to the same phase of a period
//!    more often than it fills the period's slots (0.49 against 0.4 for steps of 1 to 4 ticks,
//!    from the renewal equation): a run of such returns is not a train.
//!
//! Two members fix the grid and the other seen slots are trials, so the chance of `count − 2`
//! or more of them filled is at most `P[Bin(seen − 2, p) ≥ count − 2]` (`count` and `seen`
//! counting the members in their windows), which accounts for the misses allowed; the expected
//! number of chance trains (`chance`) is that tail times the number of pairs proposed. A train
//! is reported when `chance` is below `max_false` (0.01), and when the mean `hit_k` is at most
//! `MAX_WINDOW` (a half): beyond it, the spike nearest a slot is as likely chance as the
//! source. Members of a train already reported are not counted as evidence for another.
//!
//! **Once per source.** Candidates are taken most members first, then least likely by chance. A
//! candidate of similar size to a train already taken, with a multiple of its period, is
//! dropped when three quarters of its members lie on that train's grid, continued with the
//! uncertainty of its period: a multiple of the period, the same train from a later member or
//! at a neighbouring phase, or the same source again after a pause. So is a candidate three
//! quarters of whose members are members of trains taken. Two trains of different periods whose
//! slots coincide now and then (every 6 s for trains of 2 s and 3 s) are both kept.
//!
//! **Cost.** Each spike proposes at most 63 pairs, checked with pointers that only move one way;
//! a walk costs about its slots, and all walks together look at no more than `MAX_WALK_STEPS`
//! slots; candidates are kept without their members (walked again when chosen, and then
//! judged from at most 128 slots of continuation and 1,024 spikes around them), at most
//! `MAX_CHAINS` of them. Memory is about 40 bytes per spike, 32 KB per band and at most 0.8 MB
//! of candidates: 100,000 random spikes over ten minutes take about 7 MB and 0.6 s, the 8,192 a
//! CPU keeps without `--trace` 0.04 s (BENCHMARKS.md, `examples/trains_cost.rs`).

use serde::{Deserialize, Serialize};
use std::f64::consts::SQRT_2;

/// One delay: when it started and how long it was, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spike {
    pub at_ns: u64,
    pub size_ns: u64,
}

/// A periodic train found among the spikes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Train {
    /// The period: the least-squares slope of the members' times over their slot numbers.
    pub period_ns: u64,
    /// Members of the train: the slots that held a spike.
    pub count: u64,
    /// Slots of the grid from the first member to the last, both included; `count` of them held
    /// a spike (0 in runs written before slots were counted).
    #[serde(default)]
    pub slots: u64,
    /// The median size of its members.
    pub typical_ns: u64,
    /// When its first member started: the train's phase.
    pub first_ns: u64,
    /// The expected number of trains this full made by chance (the smaller, the surer).
    pub chance: f64,
}

/// What counts as a train.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainConfig {
    /// The shortest period looked for (1 ms: a kernel tick at HZ 1000 is a train).
    pub min_period_ns: u64,
    /// The longest period looked for; also at most the spikes' span over `min_members − 1`.
    pub max_period_ns: u64,
    /// Members may differ in size by this factor (2: from 0.5× to 2× of each other).
    pub size_ratio: f64,
    /// A member may be this share of the period early or late...
    pub period_tolerance: f64,
    /// ... but at least this many nanoseconds...
    pub min_tolerance_ns: u64,
    /// ... and at most this share of the period.
    pub max_tolerance_share: f64,
    /// Fewer members are never a train.
    pub min_members: u64,
    /// The least share of the slots from the first member to the last that hold a member.
    pub min_fill: f64,
    /// The largest share of the period its members may take (their median size over it).
    pub max_duty: f64,
    /// The largest expected number of chance trains accepted.
    pub max_false: f64,
}

impl Default for TrainConfig {
    fn default() -> TrainConfig {
        TrainConfig {
            min_period_ns: 1_000_000,
            max_period_ns: 600_000_000_000,
            size_ratio: 2.0,
            period_tolerance: 0.002,
            min_tolerance_ns: 2_000_000,
            max_tolerance_share: 0.05,
            min_members: 5,
            min_fill: 0.9,
            max_duty: 0.25,
            max_false: 0.01,
        }
    }
}

/// The most candidate chains kept for the choice of trains (24 bytes each).
const MAX_CHAINS: usize = 16_384;

/// The chance of a slot's window holding a spike of the band by accident beyond which pairs are
/// not proposed: it bounds the pairs of each spike (its followers in the band within which a
/// window of a period's `2 · period_tolerance` holds `MAX_P` of them) and skips the dense
/// stretches, where the walks would be long and no train told from chance.
const MAX_P: f64 = 0.25;

/// The largest chance of a slot's window holding a possible member by accident for which a
/// train is reported.
const MAX_WINDOW: f64 = 0.5;

/// Slots of the grid's continuation, each side, that measure how full the grid is elsewhere,
/// and periods around the train whose spikes measure how often a slot filled is followed by
/// another.
const MAX_EXTENSION: u64 = 64;

/// The most spikes around a train whose follower one period later is looked for.
const MAX_BACKGROUND: usize = 1024;

/// The fewest slots seen for a share of them filled to be an estimate.
const MIN_PROBES: u64 = 8;

/// Misses a walk goes on through beyond those its members could carry at `min_fill`.
const SPARE_MISSES: u64 = 2;

/// The most slots all walks together look at: what bounds the search on inputs built to make
/// it walk (hundreds of thousands of spikes on a lattice); no run of random or periodic spikes
/// comes near it.
const MAX_WALK_STEPS: u64 = 20_000_000;

/// No owner yet.
const NONE: u32 = u32::MAX;

/// A candidate train, kept without its members (recomputed from `a` and `b` when it is chosen),
/// so that memory does not depend on how many spikes chain up.
#[derive(Clone, Copy)]
struct Chain {
    /// The band, and the positions of `a` and `b` among all spikes.
    band: u32,
    a: u32,
    b: u32,
    members: u32,
    /// The natural logarithm of the expected number of chance chains this full.
    ln_chance: f64,
}

/// The least-squares line `t = intercept + slope · k` through the members' `(slot, time)`.
#[derive(Clone, Copy, Default)]
struct Fit {
    n: f64,
    sk: f64,
    skk: f64,
    st: f64,
    skt: f64,
}

impl Fit {
    fn add(&mut self, k: i64, t: f64) {
        let k = k as f64;
        self.n += 1.0;
        self.sk += k;
        self.skk += k * k;
        self.st += t;
        self.skt += k * t;
    }

    /// `(intercept, slope)`; needs two members in different slots.
    fn line(&self) -> (f64, f64) {
        let den = self.n * self.skk - self.sk * self.sk;
        let slope = (self.n * self.skt - self.sk * self.st) / den;
        ((self.st - slope * self.sk) / self.n, slope)
    }
}

/// A chain followed from a pair: its members as `(slot, position among all spikes)`, the
/// first at slot 0, whether each started in its slot's window (not within a longer delay),
/// and the line through those that did.
#[derive(Default)]
struct Walked {
    members: Vec<(u64, usize)>,
    exact: Vec<bool>,
    /// The time of the first member that started in its window, and the line through those
    /// members from it.
    t0: u64,
    intercept: f64,
    period: f64,
    /// What the walk found before the stretch was chosen (slot, position, in its window),
    /// and scratch.
    found: Vec<(i64, usize, bool)>,
    prefix_min: Vec<f64>,
}

impl Walked {
    fn slots(&self) -> u64 {
        self.members.last().map_or(0, |&(k, _)| k + 1)
    }

    /// The predicted time of slot `k` (before the run or past it too).
    fn slot_time(&self, k: i64) -> f64 {
        self.t0 as f64 + self.intercept + self.period * k as f64
    }

    /// Members that started in their slot's window.
    fn in_window(&self) -> u64 {
        self.exact.iter().filter(|&&e| e).count() as u64
    }

    /// When the first member started, or its slot's time when it fell within a longer delay.
    fn first_ns(&self, times: &[u64]) -> u64 {
        match (self.members.first(), self.exact.first()) {
            (Some(&(_, j)), Some(true)) => times[j],
            _ => self.slot_time(0).max(0.0).round() as u64,
        }
    }
}

/// The spikes a train of one band may take as members: the band's spikes, and the longer
/// ones that hide a slot (a source that fires during another delay makes one spike of both),
/// with their densities over the run in `BUCKETS` stretches.
struct Members<'s> {
    times: &'s [u64],
    sizes: &'s [u64],
    class: &'s [i32],
    /// The band's classes.
    lowest: i32,
    highest: i32,
    /// What started in buckets `0 .. k`, for each `k`.
    cumulative: &'s [Counted],
}

/// Spikes that started in a stretch of the run, for one band: the band's own, those that may
/// hide a slot (of its lowest class or larger, the band's included), and the time those
/// lasted.
#[derive(Clone, Copy, Default)]
struct Counted {
    band: u32,
    hiders: u32,
    hidden_ns: u64,
}

/// Densities around a slot, per ns: the band's spikes, the spikes that may hide a slot, and
/// the share of the time within them.
struct Rates {
    band: f64,
    hiders: f64,
    hidden: f64,
}

/// Spikes looked at before a slot's window for a longer delay that covers it.
const COVER_SCAN: usize = 16;

/// Stretches of the run over which the density of each band's spikes is counted.
const BUCKETS: usize = 2048;

impl Members<'_> {
    /// Of the band.
    fn is(&self, j: usize) -> bool {
        (self.lowest..=self.highest).contains(&self.class[j])
    }

    /// Of the band or longer.
    fn hides(&self, j: usize) -> bool {
        self.class[j] >= self.lowest
    }

    /// The member of the slot at `t` among positions `from .. to`, searched for from `from`
    /// (or back from `to`, with `back`): the band's spike nearest to `t` within `± tol`
    /// (`true`); or else, when the slot fell within a longer delay (one that started in the
    /// window, or before it and lasted past `t`), that delay (`false`: the slot was hidden).
    fn find(
        &self,
        t: f64,
        tol: f64,
        (from, to): (usize, usize),
        back: bool,
    ) -> Option<(usize, bool)> {
        let (lo, hi) = ((t - tol).max(0.0) as u64, (t + tol).max(0.0) as u64);
        let first = if back {
            lower_bound_back(self.times, from, to, lo)
        } else {
            lower_bound(self.times, from, to, lo)
        };
        let mut best: Option<(f64, usize)> = None;
        let mut longer: Option<usize> = None;
        let mut j = first;
        while j < to && self.times[j] <= hi {
            if self.is(j) {
                let dist = (self.times[j] as f64 - t).abs();
                if best.is_none_or(|(bd, _)| dist < bd) {
                    best = Some((dist, j));
                }
            } else if self.hides(j) && longer.is_none() {
                longer = Some(j);
            }
            j += 1;
        }
        if let Some((_, j)) = best {
            return Some((j, true));
        }
        longer
            .or_else(|| {
                (from..first)
                    .rev()
                    .take(COVER_SCAN)
                    .find(|&j| self.hides(j))
                    .filter(|&j| (self.times[j] + self.sizes[j]) as f64 >= t)
            })
            .map(|j| (j, false))
    }
}

/// The settings of the search and the run's first and last spike.
struct Grid<'c> {
    config: &'c TrainConfig,
    start: u64,
    end: u64,
}

impl Grid<'_> {
    /// How early or late a member of a train of period `p` may be.
    fn tol(&self, p: f64) -> f64 {
        let c = self.config;
        (p * c.period_tolerance.clamp(0.0, 0.25))
            .max(c.min_tolerance_ns as f64)
            .min(p * c.max_tolerance_share.clamp(0.0, 0.25))
    }

    fn tol_ns(&self, d: u64) -> u64 {
        self.tol(d as f64) as u64
    }

    fn fill(&self) -> f64 {
        self.config.min_fill.clamp(0.01, 1.0)
    }

    fn bucket_width(&self) -> f64 {
        ((self.end - self.start) as f64 / BUCKETS as f64).max(1.0)
    }

    /// The densities of `m`'s spikes between `lo` and `hi`, from the bucket counts (spread
    /// evenly within a bucket).
    fn rates(&self, m: &Members, lo: f64, hi: f64) -> Rates {
        let (start, width) = (self.start as f64, self.bucket_width());
        let below = |t: f64| {
            let x = ((t - start) / width).clamp(0.0, BUCKETS as f64);
            let i = (x as usize).min(BUCKETS - 1);
            let (c0, c1) = (m.cumulative[i], m.cumulative[i + 1]);
            let at = |v0: f64, v1: f64| v0 + (x - i as f64) * (v1 - v0);
            [
                at(c0.band as f64, c1.band as f64),
                at(c0.hiders as f64, c1.hiders as f64),
                at(c0.hidden_ns as f64, c1.hidden_ns as f64),
            ]
        };
        let (lo, hi) = (lo.max(start), hi.min(self.end as f64));
        if hi <= lo {
            return Rates {
                band: 0.0,
                hiders: 0.0,
                hidden: 0.0,
            };
        }
        let (b, a) = (below(hi), below(lo));
        let per_ns = |i: usize| (b[i] - a[i]) / (hi - lo);
        Rates {
            band: per_ns(0),
            hiders: per_ns(1),
            hidden: per_ns(2).min(1.0),
        }
    }

    /// The chances of a slot with densities `r` around it, by accident: that it is filled
    /// when it was seen (not within a longer delay), and that its window holds a possible
    /// member (see `chance_per_slot`).
    fn by_chance(&self, r: &Rates, tol: f64) -> (f64, f64) {
        let hit = 1.0 - (-r.band * 2.0 * tol).exp();
        let miss = (-r.hiders * 2.0 * tol - r.hidden).exp();
        let seen = if hit > 0.0 { hit / (hit + miss) } else { 0.0 };
        (seen, hit)
    }

    /// Follows the grid through the spikes at positions `a` and `b` forward from `b` and back
    /// from `a`, and keeps in `w` the stretch of what it found with the most members that
    /// fills `min_fill` of its slots. Returns the slots looked at.
    fn walk(&self, m: &Members, a: usize, b: usize, w: &mut Walked) -> u64 {
        let times = m.times;
        let t0 = times[a];
        let rel = |j: usize| times[j] as f64 - t0 as f64;
        w.found.clear();
        w.found.extend([(0, a, true), (1, b, true)]);
        let mut fit = Fit::default();
        fit.add(0, 0.0);
        fit.add(1, rel(b));
        let fill = self.fill();
        let mut steps = 0;
        for forward in [true, false] {
            let mut misses = 0u64;
            let mut k: i64 = if forward { 2 } else { -1 };
            // Members are looked for from `after` going forward, before `before` going back.
            let (mut after, mut before) = (b + 1, a);
            while if forward {
                after < times.len()
            } else {
                before > 0
            } {
                let (i, p) = fit.line();
                let tol = self.tol(p);
                let pred = t0 as f64 + i + p * k as f64;
                if pred - tol > self.end as f64 || pred + tol < self.start as f64 {
                    break;
                }
                steps += 1;
                let range = if forward {
                    (after, times.len())
                } else {
                    (0, before)
                };
                if let Some((j, exact)) = m.find(pred, tol, range, !forward) {
                    w.found.push((k, j, exact));
                    if exact {
                        fit.add(k, rel(j));
                    }
                    if forward {
                        after = j + 1;
                    } else {
                        before = j;
                    }
                } else {
                    misses += 1;
                    // Twice the misses the members could carry at `fill`: a sparse stretch in
                    // a train is walked through, and the best stretch is chosen below.
                    let carried = (w.found.len() as f64 * 2.0 * (1.0 - fill) / fill) as u64;
                    if misses > carried + SPARE_MISSES {
                        break;
                    }
                }
                k += if forward { 1 } else { -1 };
            }
        }
        w.found.sort_unstable_by_key(|&(k, _, _)| k);
        // The stretch [i, e] of what was found with the most members among those whose
        // members are at least fill · slots: with g(j) = j − fill · slot(j), the smallest i
        // with g(i) ≤ g(e) + 1 − fill, found in the running minimum of g.
        let slot0 = w.found[0].0;
        let g = |j: usize| j as f64 - fill * (w.found[j].0 - slot0) as f64;
        w.prefix_min.clear();
        let mut low = f64::INFINITY;
        for j in 0..w.found.len() {
            low = low.min(g(j));
            w.prefix_min.push(low);
        }
        let (mut best_i, mut best_e) = (0, 0);
        for e in 0..w.found.len() {
            let bound = g(e) + (1.0 - fill) + 1e-9;
            let i = w.prefix_min[..=e].partition_point(|&x| x > bound);
            if e - i > best_e - best_i {
                (best_i, best_e) = (i, e);
            }
        }
        let stretch = &w.found[best_i..=best_e];
        let k0 = stretch[0].0;
        w.members.clear();
        w.members
            .extend(stretch.iter().map(|&(k, j, _)| ((k - k0) as u64, j)));
        w.exact.clear();
        w.exact.extend(stretch.iter().map(|&(_, _, e)| e));
        let mut fit = Fit::default();
        let mut reference = None;
        for &(k, j, _) in stretch.iter().filter(|x| x.2) {
            let t0 = *reference.get_or_insert(times[j]);
            fit.add(k - k0, (times[j] - t0) as f64);
        }
        w.t0 = reference.unwrap_or(t0);
        if fit.n < 2.0 {
            // Too few members in their windows for a line: no chain.
            w.members.clear();
            w.exact.clear();
            (w.intercept, w.period) = (0.0, 0.0);
        } else {
            (w.intercept, w.period) = fit.line();
        }
        steps
    }

    /// Whether the slot at `t` holds a possible member in its window (`Some(true)`), holds
    /// nothing (`Some(false)`), or was not seen: within a longer delay, or outside the run.
    fn probe(&self, m: &Members, t: f64, tol: f64) -> Option<bool> {
        if t + tol < self.start as f64 || t - tol > self.end as f64 {
            return None;
        }
        let from = lower_bound(m.times, 0, m.times.len(), (t - tol).max(0.0) as u64);
        let from = from.saturating_sub(COVER_SCAN);
        match m.find(t, tol, (from, m.times.len()), false) {
            Some((_, true)) => Some(true),
            Some((_, false)) => None,
            None => Some(false),
        }
    }

    /// The chance of a slot of `w` that was seen (not hidden within a longer delay) holding a
    /// possible member in its window by accident, the largest of three estimates:
    ///
    /// - from the densities around each slot (within half a period, or a bucket): a window
    ///   holds one of the band's spikes with probability `hit = 1 − exp(−ρ · 2·tol)` and is
    ///   empty of any spike that could hide it with probability `miss = exp(−ρ_h · 2·tol −
    ///   h)`, `ρ` and `ρ_h` the densities of the band's spikes and of those that may hide a
    ///   slot, `h` the share of time within the latter (which bounds the chance of a slot
    ///   falling within one that started earlier); a seen slot is a hit or a miss, so its
    ///   chance is `hit / (hit + miss)`, and the estimate is its mean over the slots (leaving
    ///   the hidden slots out of the trials is then no evidence of a train);
    /// - with `explained`, the share of the grid's continuation (up to `MAX_EXTENSION` slots
    ///   before the train and after it) that holds a possible member, of the slots there that
    ///   were seen: a lucky stretch of a grid filled at 40% is not a train;
    /// - with `explained`, the share of the band's spikes around the train and off its grid
    ///   (not members of trains taken, at most `MAX_BACKGROUND` of them) that are followed one
    ///   period later by a possible member, within `√2 · tol` (the follower is placed from one
    ///   spike, with its error, where a slot is placed from the line through many): the
    ///   chance that a slot is filled given that the one before it was, in the spikes that are
    ///   not the train. Spikes at random give the
    ///   first estimate again; time slicing, whose delays fall on the kernel's tick at
    ///   irregular multiples of it, gives the chance that the slicing returns to the same
    ///   phase of the period, which is higher than the share of slots it fills (0.49 against
    ///   0.4 for steps of 1 to 4 ticks, by the renewal equation), and a lucky run of it is no
    ///   train.
    ///
    /// Returns the estimate, and the mean of `hit`, the chance of a window holding a possible
    /// member, which must stay within `MAX_WINDOW`.
    fn chance_per_slot(&self, m: &Members, w: &Walked, explained: Option<&[bool]>) -> (f64, f64) {
        let tol = self.tol(w.period);
        let slots = w.slots();
        let half = (w.period / 2.0).max(self.bucket_width() / 2.0);
        let (mut seen, mut window) = (0.0, 0.0);
        for k in 0..slots as i64 {
            let t = w.slot_time(k);
            let (filled, hit) = self.by_chance(&self.rates(m, t - half, t + half), tol);
            seen += filled;
            window += hit;
        }
        let n = slots.max(1) as f64;
        let (mut p, window) = (seen / n, window / n);
        let Some(explained) = explained else {
            return (p, window);
        };
        let share = |probes: &mut dyn Iterator<Item = Option<bool>>| {
            let (mut tried, mut held) = (0u64, 0u64);
            for hit in probes.flatten() {
                tried += 1;
                held += u64::from(hit);
            }
            (tried >= MIN_PROBES).then(|| held as f64 / tried as f64)
        };
        let e = slots.clamp(16, MAX_EXTENSION) as i64;
        let continuation = share(
            &mut (-e..0)
                .chain(slots as i64..slots as i64 + e)
                .map(|k| self.probe(m, w.slot_time(k), tol)),
        );
        let on_grid = |t: f64| {
            let k = ((t - w.slot_time(0)) / w.period).round();
            (t - w.slot_time(k as i64)).abs() <= tol
        };
        let (lo, hi) = (
            w.slot_time(-(MAX_EXTENSION as i64)).max(0.0) as u64,
            w.slot_time((slots + MAX_EXTENSION) as i64).max(0.0) as u64,
        );
        let from = lower_bound(m.times, 0, m.times.len(), lo);
        let to = lower_bound(m.times, from, m.times.len(), hi);
        let step = (to - from).div_ceil(MAX_BACKGROUND).max(1);
        let background = share(
            &mut (from..to)
                .step_by(step)
                .filter(|&j| m.is(j) && !explained[j] && !on_grid(m.times[j] as f64))
                .map(|j| self.probe(m, m.times[j] as f64 + w.period, SQRT_2 * tol)),
        );
        for q in [continuation, background].into_iter().flatten() {
            p = p.max(q);
        }
        (p, window)
    }

    /// The natural logarithm of the expected number of chance chains with `members` of
    /// `slots` filled among `trials`, with a per-slot chance `p`; `None` when a window holds a
    /// possible member by chance more often than `MAX_WINDOW` (`window`): the nearest spike
    /// to a slot is then as likely chance as the source.
    fn ln_chance(
        &self,
        members: u64,
        slots: u64,
        (p, window): (f64, f64),
        trials: u64,
    ) -> Option<f64> {
        (window <= MAX_WINDOW).then(|| {
            (trials.max(1) as f64).ln()
                + ln_binomial_tail(slots.saturating_sub(2), members.saturating_sub(2), p)
        })
    }
}

/// The first position in `from .. to` whose time is at least `lo`, or `to` (galloping search
/// from `from`).
fn lower_bound(times: &[u64], from: usize, to: usize, lo: u64) -> usize {
    if from >= to || times[from] >= lo {
        return from;
    }
    // times[prev] < lo throughout.
    let (mut prev, mut step) = (from, 1);
    while prev + step < to && times[prev + step] < lo {
        prev += step;
        step *= 2;
    }
    let end = (prev + step).min(to);
    prev + 1 + times[prev + 1..end].partition_point(|&t| t < lo)
}

/// The first position in `from .. to` whose time is at least `lo`, or `to` (galloping search
/// back from `to`).
fn lower_bound_back(times: &[u64], from: usize, to: usize, lo: u64) -> usize {
    if from >= to || times[to - 1] < lo {
        return to;
    }
    // times[next] ≥ lo throughout.
    let (mut next, mut step) = (to - 1, 1);
    while next >= from + step && times[next - step] >= lo {
        next -= step;
        step *= 2;
    }
    let begin = next.saturating_sub(step).max(from);
    begin + times[begin..next].partition_point(|&t| t < lo)
}

/// `ln P[X ≥ k]` for `X ~ Binomial(n, p)`.
fn ln_binomial_tail(n: u64, k: u64, p: f64) -> f64 {
    if k == 0 || p >= 1.0 {
        return 0.0;
    }
    if k > n || p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let term = |j: u64| {
        statrs::function::factorial::ln_binomial(n, j) + j as f64 * lp + (n - j) as f64 * lq
    };
    // The terms in log space, scaled by the largest so far; once past the mode they fall
    // geometrically, and the sum stops when they no longer matter.
    let (mut top, mut sum) = (f64::NEG_INFINITY, 0.0);
    for j in k..=n {
        let t = term(j);
        if t > top {
            sum = sum * (top - t).exp() + 1.0;
            top = t;
        } else {
            sum += (t - top).exp();
            if t < top - 40.0 {
                break;
            }
        }
    }
    top + sum.ln()
}

/// The class of a size: classes are a factor `width` wide.
fn size_class(size_ns: u64, width: f64) -> i32 {
    ((size_ns.max(1) as f64).ln() / width.ln()).floor() as i32
}

/// A train taken: its grid, for the candidates that repeat it.
struct Taken {
    t0: f64,
    period: f64,
    tol: f64,
    /// The standard error of the period, and the mean slot of the members.
    period_error: f64,
    mid_slot: f64,
    typical: u64,
}

impl Taken {
    fn of(grid: &Grid, times: &[u64], w: &Walked, typical: u64) -> Taken {
        let exact = || w.members.iter().zip(&w.exact).filter(|x| *x.1).map(|x| x.0);
        let n = exact().count() as f64;
        let mid = exact().map(|&(k, _)| k as f64).sum::<f64>() / n.max(1.0);
        let (mut sr, mut sk) = (0.0, 0.0);
        for &(k, j) in exact() {
            let r = times[j] as f64 - w.slot_time(k as i64);
            sr += r * r;
            sk += (k as f64 - mid).powi(2);
        }
        let sigma = (sr / (n - 2.0).max(1.0)).sqrt();
        Taken {
            t0: w.slot_time(0),
            period: w.period,
            tol: grid.tol(w.period),
            period_error: sigma / sk.max(1.0).sqrt(),
            mid_slot: mid,
            typical,
        }
    }

    /// Whether a spike at `at` lies on this train's grid, continued with three standard errors
    /// of its period.
    fn on_grid(&self, at: u64) -> bool {
        let k = ((at as f64 - self.t0) / self.period).round();
        let allowed = self.tol + 3.0 * self.period_error * (k - self.mid_slot).abs();
        (at as f64 - (self.t0 + k * self.period)).abs() <= allowed
    }

    /// Which multiple of this train's period `period` is, within the uncertainties.
    fn multiple(&self, period: f64, error: f64, tolerance: f64) -> Option<u64> {
        let j = (period / self.period).round();
        (j >= 1.0
            && (period - j * self.period).abs()
                <= (3.0 * (j * self.period_error + error)).max(tolerance * period))
        .then_some(j as u64)
    }
}

/// Finds periodic trains among `spikes` (of one CPU, in any order), most members first.
/// Deterministic; see the module's text for the method and its cost.
pub fn find_trains(spikes: &[Spike], config: &TrainConfig) -> Vec<Train> {
    let min_members = config.min_members.max(3) as usize;
    if spikes.len() < min_members {
        return Vec::new();
    }
    let mut s: Vec<Spike> = spikes.to_vec();
    s.sort_by_key(|x| (x.at_ns, x.size_ns));
    let (start, end) = (s[0].at_ns, s[s.len() - 1].at_ns);
    let span = end - start;
    let max_period = config.max_period_ns.min(span / (min_members as u64 - 1));
    if span == 0 || max_period < config.min_period_ns.max(1) {
        return Vec::new();
    }
    let grid = Grid { config, start, end };
    let times: Vec<u64> = s.iter().map(|x| x.at_ns).collect();
    let width = config.size_ratio.max(1.01).sqrt();
    let class: Vec<i32> = s.iter().map(|x| size_class(x.size_ns, width)).collect();

    // The bands, by their middle class, with enough spikes for a train; for each, the count of
    // its possible members (its lowest class or larger) per bucket.
    let mut classes = class.clone();
    classes.sort_unstable();
    let in_band =
        |c: i32| classes.partition_point(|&k| k <= c + 1) - classes.partition_point(|&k| k < c - 1);
    let mut band_class: Vec<i32> = classes.clone();
    band_class.dedup();
    band_class.retain(|&c| in_band(c) >= min_members);
    let mut cumulative: Vec<Counted> = Vec::new();
    let bucket = |t: u64| (((t - start) as f64 / grid.bucket_width()) as usize).min(BUCKETS - 1);
    for &c in &band_class {
        let at = cumulative.len();
        cumulative.resize(at + BUCKETS + 1, Counted::default());
        for i in (0..s.len()).filter(|&i| class[i] >= c - 1) {
            let x = &mut cumulative[at + 1 + bucket(times[i])];
            x.band += u32::from(class[i] <= c + 1);
            x.hiders += 1;
            x.hidden_ns += s[i].size_ns;
        }
        for k in 0..BUCKETS {
            let (prev, x) = (cumulative[at + k], &mut cumulative[at + k + 1]);
            x.band += prev.band;
            x.hiders += prev.hiders;
            x.hidden_ns += prev.hidden_ns;
        }
    }
    let sizes: Vec<u64> = s.iter().map(|x| x.size_ns).collect();
    let members_of = |b: usize| {
        let range = b * (BUCKETS + 1)..(b + 1) * (BUCKETS + 1);
        Members {
            times: &times,
            sizes: &sizes,
            class: &class,
            lowest: band_class[b] - 1,
            highest: band_class[b] + 1,
            cumulative: &cumulative[range],
        }
    };

    // The order in which chains are chosen: most members first, then least likely by chance.
    let order = |x: &Chain, y: &Chain| {
        y.members
            .cmp(&x.members)
            .then(x.ln_chance.total_cmp(&y.ln_chance))
            .then(x.band.cmp(&y.band))
            .then(x.a.cmp(&y.a))
    };
    let followers =
        ((MAX_P / (2.0 * config.period_tolerance.max(1e-6))).ceil() as usize).clamp(8, 4096);
    let ln_max_false = config.max_false.ln();
    // The expected spikes in a slot's window at which it holds one with probability MAX_P.
    let max_rate = -(1.0 - MAX_P).ln();
    let dense = 1.0 - (-1.5 * max_rate).exp();
    let mut chains: Vec<Chain> = Vec::new();
    // The chain each spike was last a member of; chains of earlier bands do not count.
    let mut owner: Vec<u32> = vec![NONE; s.len()];
    let mut owners = 0u32;
    let mut proposed = 0u64;
    let mut steps = 0u64;
    // The band's spikes: their positions among all, times, and whether of its middle class.
    let mut ids: Vec<usize> = Vec::new();
    let mut bt: Vec<u64> = Vec::new();
    let mut in_class: Vec<bool> = Vec::new();
    let mut w = Walked::default();
    for (bi, &c) in band_class.iter().enumerate() {
        ids.clear();
        ids.extend((0..s.len()).filter(|&i| (c - 1..=c + 1).contains(&class[i])));
        bt.clear();
        bt.extend(ids.iter().map(|&i| times[i]));
        in_class.clear();
        in_class.extend(ids.iter().map(|&i| class[i] == c));
        let n = bt.len();
        let m = members_of(bi);
        let band_first = owners;
        let owned = |x: u32| x != NONE && x >= band_first;
        let mut first_b = 0;
        for a in (0..n).filter(|&a| in_class[a]) {
            let ta = bt[a];
            while first_b < n && bt[first_b] < ta + config.min_period_ns {
                first_b += 1;
            }
            // Pointers to the first spike at or after the start of the windows of slot 2,
            // which only moves forward as d grows, and of slot −1, which only moves back.
            let (mut p2, mut q) = (first_b, a);
            for b in first_b..n.min(first_b + followers) {
                let d = bt[b] - ta;
                if d > max_period || steps > MAX_WALK_STEPS {
                    break;
                }
                proposed += 1;
                let (ga, gb) = (ids[a], ids[b]);
                if owned(owner[ga]) && owner[ga] == owner[gb] {
                    continue;
                }
                let tol = grid.tol_ns(d);
                // So many of the band's spikes between a and b that a slot's window would hold
                // one by chance more often than MAX_P: no train could be told from chance.
                if (b - a - 1) as f64 * 2.0 * tol as f64 > max_rate * d as f64 {
                    continue;
                }
                // Slot 2, predicted from a and b alone (an error of up to about three times a
                // member's, hence the wider window), holds a spike of the band...
                let t2 = ta + 2 * d;
                while p2 < n && bt[p2] < t2 - 2 * tol {
                    p2 += 1;
                }
                let Some(s2) = (p2..n)
                    .take_while(|&j| bt[j] <= t2 + 2 * tol)
                    .min_by_key(|&j| bt[j].abs_diff(t2))
                else {
                    continue;
                };
                // ... and so does slot 3, predicted from the line through a, b and it...
                let t3 = (ta + bt[b] + bt[s2]) as f64 / 3.0 + (bt[s2] - ta) as f64;
                let j = lower_bound(&bt, s2 + 1, n, (t3 - 1.5 * tol as f64) as u64);
                if j >= n || bt[j] as f64 > t3 + 1.5 * tol as f64 {
                    continue;
                }
                // ... and slot −1 holds none of the class.
                if ta + tol >= d {
                    let (lo, hi) = ((ta + tol - d).saturating_sub(2 * tol), ta + tol - d);
                    while q > 0 && bt[q - 1] >= lo {
                        q -= 1;
                    }
                    if (q..n).take_while(|&j| bt[j] <= hi).any(|j| in_class[j]) {
                        continue;
                    }
                }
                // Nor when there are so many spikes within four periods of a and b that a
                // seen slot would be filled by chance (by the local estimate) more often than
                // 1.5 times MAX_P.
                let (lo, hi) = (ta as f64 - 4.0 * d as f64, (bt[b] + 4 * d) as f64);
                if grid.by_chance(&grid.rates(&m, lo, hi), tol as f64).0 > dense {
                    continue;
                }
                steps += grid.walk(&m, ga, gb, &mut w);
                let count = w.members.len();
                if count < min_members {
                    continue;
                }
                for &(_, j) in &w.members {
                    if !owned(owner[j]) {
                        owner[j] = owners;
                    }
                }
                owners = owners.saturating_add(1).min(NONE - 1);
                let p = grid.chance_per_slot(&m, &w, None);
                steps += w.slots();
                // Slots within a longer delay could not be seen: neither hits nor misses.
                let seen = w.slots() - (count as u64 - w.in_window());
                match grid.ln_chance(w.in_window(), seen, p, proposed) {
                    Some(ln_chance) if ln_chance < ln_max_false => chains.push(Chain {
                        band: bi as u32,
                        a: ga as u32,
                        b: gb as u32,
                        members: count as u32,
                        ln_chance,
                    }),
                    _ => continue,
                }
                // Only the first MAX_CHAINS in the order of choice can be chosen in practice.
                if chains.len() >= 2 * MAX_CHAINS {
                    chains.sort_by(order);
                    chains.truncate(MAX_CHAINS);
                }
            }
        }
    }
    chains.sort_by(order);
    chains.truncate(MAX_CHAINS);

    // The choice: each candidate walked again, dropped when it repeats a train taken, tested
    // with the grid's continuation and without the members of the trains taken.
    let similar = |x: u64, y: u64| {
        let (lo, hi) = (x.min(y).max(1) as f64, x.max(y) as f64);
        hi <= lo * config.size_ratio.max(1.0)
    };
    let mut member = vec![false; s.len()];
    let mut taken: Vec<Taken> = Vec::new();
    let mut out = Vec::new();
    for c in chains {
        let m = members_of(c.band as usize);
        let _ = grid.walk(&m, c.a as usize, c.b as usize, &mut w);
        let count = w.members.len();
        let mut sizes: Vec<u64> = (w.members.iter().zip(&w.exact))
            .filter(|x| *x.1)
            .map(|(&(_, j), _)| s[j].size_ns)
            .collect();
        let typical = crate::stats::median_upper(&mut sizes);
        if typical as f64 > config.max_duty * w.period {
            continue;
        }
        let shared = w.members.iter().filter(|&&(_, j)| member[j]).count();
        let this = Taken::of(&grid, &times, &w, typical);
        // The same source: its period again (at any phase: a source that sleeps for a period
        // after its work drifts), or a multiple of it on its grid.
        let repeats = |t: &Taken| {
            similar(t.typical, typical)
                && match t.multiple(w.period, this.period_error, config.period_tolerance) {
                    Some(1) => true,
                    Some(_) => {
                        w.members
                            .iter()
                            .filter(|&&(_, j)| t.on_grid(times[j]))
                            .count()
                            * 4
                            >= count * 3
                    }
                    None => false,
                }
        };
        if shared * 4 >= count * 3 || taken.iter().any(repeats) {
            // Its members are the source's: not evidence for another train.
            for &(_, j) in &w.members {
                member[j] = true;
            }
            continue;
        }
        let p = grid.chance_per_slot(&m, &w, Some(&member));
        // Members of trains taken are explained by them, and slots within a longer delay could
        // not be seen: neither is evidence.
        let seen_shared = (w.members.iter().zip(&w.exact))
            .filter(|x| *x.1 && member[x.0 .1])
            .count() as u64;
        let evidence = w.in_window() - seen_shared;
        let seen = w.slots() - (count as u64 - w.in_window()) - seen_shared;
        let significant = |p| {
            grid.ln_chance(evidence, seen, p, proposed)
                .filter(|&c| c < ln_max_false)
        };
        if let Some(ln_chance) = significant(p) {
            for &(_, j) in &w.members {
                member[j] = true;
            }
            taken.push(this);
            out.push(Train {
                period_ns: w.period.round() as u64,
                count: count as u64,
                slots: w.slots(),
                typical_ns: typical,
                first_ns: w.first_ns(&times),
                chance: ln_chance.exp(),
            });
        } else if significant((p.1, p.1)).is_some() {
            // Periodic, but a stretch of a grid that goes on less full: the source is not a
            // train, and neither are multiples of its period on its grid.
            for &(_, j) in &w.members {
                member[j] = true;
            }
            taken.push(this);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::rng::SplitMix64;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    /// A uniform number in `lo..=hi`.
    fn between(r: &mut SplitMix64, lo: u64, hi: u64) -> u64 {
        lo + r.below(hi - lo + 1)
    }

    /// A size log-uniform from `lo` to `hi`.
    fn log_uniform(r: &mut SplitMix64, lo: u64, hi: u64) -> u64 {
        let u = r.below(1_000_000) as f64 / 1e6;
        (lo as f64 * (hi as f64 / lo as f64).powf(u)) as u64
    }

    /// `n` spikes at uniformly random times over `span`, with sizes log-uniform from 10 µs to
    /// 10 ms.
    fn random_spikes(n: usize, span: u64, seed: u64) -> Vec<Spike> {
        let mut r = SplitMix64::new(seed);
        (0..n)
            .map(|_| Spike {
                at_ns: r.below(span),
                size_ns: log_uniform(&mut r, 10_000, 10_000_000),
            })
            .collect()
    }

    /// A grid of `slots` spikes every `period` from `first`, each up to `jitter` early or late,
    /// sized uniformly in `sizes`, without the slots in `missing`.
    #[allow(clippy::too_many_arguments)]
    fn grid(
        r: &mut SplitMix64,
        first: u64,
        period: u64,
        slots: u64,
        jitter: u64,
        sizes: (u64, u64),
        missing: &[u64],
    ) -> Vec<Spike> {
        (0..slots)
            .filter(|k| !missing.contains(k))
            .map(|k| Spike {
                at_ns: first + k * period + r.below(2 * jitter + 1) - jitter,
                size_ns: between(r, sizes.0, sizes.1),
            })
            .collect()
    }

    /// What a case expects of one train.
    struct Expect {
        period_ns: u64,
        /// Members at least...
        count: u64,
        /// ... and slots at most.
        slots: u64,
    }

    /// Checks that `trains` are exactly the `expected` ones, in any order, each once, with the
    /// period within 0.5%.
    fn check(name: &str, trains: &[Train], expected: &[Expect]) {
        assert_eq!(trains.len(), expected.len(), "{name}: {trains:#?}");
        for e in expected {
            let found: Vec<&Train> = trains
                .iter()
                .filter(|t| t.period_ns.abs_diff(e.period_ns) * 200 <= e.period_ns)
                .collect();
            assert_eq!(found.len(), 1, "{name}: {trains:#?}");
            let t = found[0];
            assert!(t.count >= e.count && t.slots <= e.slots, "{name}: {t:?}");
            assert!(t.count <= t.slots, "{name}: {t:?}");
            assert!(t.count as f64 >= 0.9 * t.slots as f64, "{name}: {t:?}");
            assert!(t.chance < 0.01, "{name}: {t:?}");
        }
    }

    /// Jones & Regehr's case: a 7 ms delay every 5 s for 10 minutes among 5,000 random delays;
    /// members up to 1 ms early or late and ±5% in size.
    fn jones_regehr() -> Vec<Spike> {
        let mut r = SplitMix64::new(7);
        let mut v = random_spikes(5000, 600 * S, 42);
        v.extend(grid(
            &mut r,
            2300 * MS,
            5 * S,
            120,
            MS,
            (6_650_000, 7_350_000),
            &[],
        ));
        v
    }

    /// Nine delays of about 930 µs on a 100 ms grid of ten (the seventh missing), among 300
    /// random delays over 30 s.
    fn grid_with_a_missing_member() -> Vec<Spike> {
        let mut r = SplitMix64::new(11);
        let mut v = random_spikes(300, 30 * S, 12);
        v.extend(grid(
            &mut r,
            12_345 * MS,
            100 * MS,
            10,
            50_000,
            (900_000, 960_000),
            &[6],
        ));
        v
    }

    /// Nine of ten: 90 delays of about 1 ms on a 100 ms grid of 100 slots, every tenth slot
    /// empty (the fourth, the fourteenth, ...), up to 0.2 ms early or late, among 2,000 random
    /// delays over 30 s. No ten members in a row are unbroken, so a search for unbroken chains
    /// would find nothing longer than nine.
    fn nine_of_ten() -> Vec<Spike> {
        let mut r = SplitMix64::new(9);
        let missing: Vec<u64> = (0..100).filter(|k| k % 10 == 3).collect();
        let mut v = random_spikes(2000, 30 * S, 10);
        v.extend(grid(
            &mut r,
            2_345 * MS,
            100 * MS,
            100,
            200_000,
            (900_000, 1_100_000),
            &missing,
        ));
        v
    }

    /// A 2 ms burst every 500 ms for two minutes as a 1 ms timer sees it: each burst delays the
    /// first release after its start by 1 to 2 ms, up to 1 ms after the start; among 2,000
    /// random delays.
    fn burst_every_half_second() -> Vec<Spike> {
        let mut r = SplitMix64::new(5);
        let mut v = random_spikes(2000, 120 * S, 6);
        v.extend((0..240u64).map(|k| {
            let late = r.below(MS);
            Spike {
                at_ns: 700 * MS + k * 500 * MS + late,
                size_ns: 2 * MS - late,
            }
        }));
        v
    }

    /// Delays of about 1 ms every 2 s and every 3 s from the same phase over 60 s (one spike
    /// where both fall together, every 6 s), among 500 random delays.
    fn two_interleaved() -> Vec<Spike> {
        let mut r = SplitMix64::new(3);
        let mut v = random_spikes(500, 60 * S, 4);
        let mut two = grid(&mut r, S, 2 * S, 30, 100_000, (950_000, 1_050_000), &[]);
        let three = grid(&mut r, S, 3 * S, 20, 100_000, (950_000, 1_050_000), &[]);
        two.retain(|x| three.iter().all(|y| x.at_ns.abs_diff(y.at_ns) > MS));
        v.extend(two);
        v.extend(three);
        v
    }

    /// The kernel's tick at HZ 250 for 20 s: 30 µs ± 20% every 4 ms within 5 µs, 3% of ticks
    /// missing (under the threshold), among 1,000 random delays of 20 µs to 2 ms.
    fn tick() -> Vec<Spike> {
        let mut r = SplitMix64::new(250);
        let missing: Vec<u64> = (0..5000).filter(|_| r.below(100) < 3).collect();
        let mut v = grid(
            &mut r,
            1_700_000,
            4 * MS,
            5000,
            5_000,
            (24_000, 36_000),
            &missing,
        );
        v.extend((0..1000).map(|_| Spike {
            at_ns: r.below(20 * S),
            size_ns: log_uniform(&mut r, 20_000, 2_000_000),
        }));
        v
    }

    /// Time slicing against a SCHED_OTHER competitor, as preemption at the tick makes it:
    /// delays of `size` ± 20% at irregular multiples (1 to `most`) of the tick `tick`, each
    /// within 0.2 ms of it, for 60 s.
    fn time_slicing(seed: u64, tick: u64, most: u64, size: u64) -> Vec<Spike> {
        let mut r = SplitMix64::new(seed);
        let mut v = Vec::new();
        let mut lattice = 5 * MS;
        while lattice < 60 * S {
            v.push(Spike {
                at_ns: lattice + r.below(400_000) - 200_000,
                size_ns: between(&mut r, size * 4 / 5, size * 6 / 5),
            });
            lattice += between(&mut r, 1, most) * tick;
        }
        v
    }

    #[test]
    fn trains_are_found_once_with_their_period() {
        let cases: Vec<(&str, Vec<Spike>, Vec<Expect>)> = vec![
            (
                "7 ms every 5 s (Jones & Regehr)",
                jones_regehr(),
                vec![Expect {
                    period_ns: 5 * S,
                    count: 120,
                    slots: 120,
                }],
            ),
            (
                "930 us on a 100 ms grid, one missing",
                grid_with_a_missing_member(),
                vec![Expect {
                    period_ns: 100 * MS,
                    count: 9,
                    slots: 10,
                }],
            ),
            (
                "nine of ten on a 100 ms grid",
                nine_of_ten(),
                vec![Expect {
                    period_ns: 100 * MS,
                    count: 90,
                    slots: 100,
                }],
            ),
            (
                "2 ms every 500 ms, jittered",
                burst_every_half_second(),
                vec![Expect {
                    period_ns: 500 * MS,
                    count: 228,
                    slots: 240,
                }],
            ),
            (
                "every 2 s and every 3 s",
                two_interleaved(),
                vec![
                    Expect {
                        period_ns: 2 * S,
                        count: 27,
                        slots: 30,
                    },
                    Expect {
                        period_ns: 3 * S,
                        count: 20,
                        slots: 20,
                    },
                ],
            ),
            (
                "the tick, 4 ms",
                tick(),
                vec![Expect {
                    period_ns: 4 * MS,
                    count: 4500,
                    slots: 5000,
                }],
            ),
        ];
        for (name, spikes, expected) in cases {
            let trains = find_trains(&spikes, &TrainConfig::default());
            check(name, &trains, &expected);
        }
    }

    #[test]
    fn chance_and_time_slicing_make_no_train() {
        let mut cases: Vec<(String, Vec<Spike>)> = (1..=5)
            .map(|seed| {
                (
                    format!("2,000 random delays, seed {seed}"),
                    random_spikes(2000, 100 * S, seed),
                )
            })
            .collect();
        for seed in 1..=3 {
            cases.push((
                format!("3 ms slices at 1 to 4 ticks of 3 ms, seed {seed}"),
                time_slicing(seed, 3 * MS, 4, 3 * MS),
            ));
            cases.push((
                format!("4 ms slices at 1 to 3 ticks of 4 ms, seed {seed}"),
                time_slicing(seed, 4 * MS, 3, 4 * MS),
            ));
            cases.push((
                format!("2 ms delays at 1 to 6 ticks of 4 ms, seed {seed}"),
                time_slicing(seed, 4 * MS, 6, 2 * MS),
            ));
            cases.push((
                format!("0.5 ms slices at 1 to 3 ticks of 1 ms, seed {seed}"),
                time_slicing(seed, MS, 3, MS / 2),
            ));
        }
        for (name, spikes) in cases {
            let trains = find_trains(&spikes, &TrainConfig::default());
            assert!(trains.is_empty(), "{name}: {trains:#?}");
        }
    }

    /// A noise run of ten minutes can keep 100,000 spikes: the search ends, with no train among
    /// random ones (its speed is not asserted). Among so many, almost every slot of the
    /// smallest sizes falls within a longer spike: counting only the slots seen, with the chance
    /// of a slot in its window and not what is left of it once the hidden ones are set aside,
    /// made trains of 200 members here.
    #[test]
    fn a_hundred_thousand_random_spikes_make_no_train() {
        let spikes = random_spikes(100_000, 600 * S, 9);
        let trains = find_trains(&spikes, &TrainConfig::default());
        assert!(trains.is_empty(), "{trains:#?}");
    }

    /// Time slicing at HZ 1000 returns to a phase of 3 ms more often (0.59) than it fills the
    /// slots of 3 ms (0.5): judged by the share of slots filled, a lucky stretch of it made a
    /// train of 54 of 60 slots (seed 312) and 30 of 33 (seed 306).
    #[test]
    fn time_slicing_at_hz_1000_on_a_lucky_stretch_is_not_a_train() {
        for seed in [306, 312] {
            let trains = find_trains(&time_slicing(seed, MS, 3, MS / 2), &TrainConfig::default());
            assert!(trains.is_empty(), "seed {seed}: {trains:#?}");
        }
    }

    /// A tick of the same size every 12 ms for 24 s: every pair of ticks is a candidate at each
    /// multiple of the period, and the one train is the ticks themselves, each of them a member,
    /// its multiples not reported again.
    #[test]
    fn a_long_regular_tick_is_one_train_of_every_tick() {
        let spikes: Vec<Spike> = (0..2000u64)
            .map(|k| Spike {
                at_ns: MS + k * 12 * MS,
                size_ns: 50_000,
            })
            .collect();
        let trains = find_trains(&spikes, &TrainConfig::default());
        assert_eq!(trains.len(), 1, "{trains:?}");
        assert_eq!((trains[0].count, trains[0].slots), (2000, 2000));
        assert_eq!(trains[0].period_ns, 12 * MS);
        assert_eq!(trains[0].typical_ns, 50_000);
        assert_eq!(trains[0].first_ns, MS);
    }

    #[test]
    fn two_trains_and_no_multiples() {
        // 10 ms delays every 10 s and 1 ms delays every 2 s over 60 s: the 2 s train must not
        // also be reported at 4 s or 6 s.
        let mut spikes = Vec::new();
        for k in 0..6u64 {
            spikes.push(Spike {
                at_ns: 500 * MS + k * 10 * S,
                size_ns: 10 * MS,
            });
        }
        for k in 0..30u64 {
            spikes.push(Spike {
                at_ns: S + k * 2 * S,
                size_ns: MS,
            });
        }
        let mut trains = find_trains(&spikes, &TrainConfig::default());
        trains.sort_by_key(|t| t.period_ns);
        assert_eq!(trains.len(), 2, "{trains:?}");
        assert_eq!((trains[0].period_ns, trains[0].count), (2 * S, 30));
        assert_eq!((trains[1].period_ns, trains[1].count), (10 * S, 6));
    }

    #[test]
    fn too_few_spikes_make_no_train() {
        let spikes: Vec<Spike> = (0..4u64)
            .map(|k| Spike {
                at_ns: k * S,
                size_ns: MS,
            })
            .collect();
        assert!(find_trains(&spikes, &TrainConfig::default()).is_empty());
        assert!(find_trains(&[], &TrainConfig::default()).is_empty());
    }

    /// Runs written before slots were counted still read, with no slots.
    #[test]
    fn a_train_without_slots_reads() {
        let old = r#"{"period_ns": 500000000, "count": 10, "typical_ns": 1613000,
                      "first_ns": 107000000, "chance": 1.2e-30}"#;
        let t: Train = serde_json::from_str(old).expect("an old train reads");
        assert_eq!((t.count, t.slots), (10, 0));
    }

    #[test]
    fn the_binomial_tail() {
        // P[Bin(10, 0.5) ≥ 9] = 11/1024; P[Bin(8, 0.1) ≥ 0] = 1; P[Bin(5, 0.2) ≥ 5] = 0.2^5.
        assert!((ln_binomial_tail(10, 9, 0.5).exp() - 11.0 / 1024.0).abs() < 1e-12);
        assert_eq!(ln_binomial_tail(8, 0, 0.1), 0.0);
        assert!((ln_binomial_tail(5, 5, 0.2) - 5.0 * 0.2f64.ln()).abs() < 1e-9);
        assert_eq!(ln_binomial_tail(5, 6, 0.2), f64::NEG_INFINITY);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// A grid of delays of about 1 ms, each within 0.05% of the period of its slot, with up
        /// to 10% of its members removed, among up to three random delays (10 µs to 10 ms) per
        /// period, is one train with its period within 0.5%, reported once.
        #[test]
        fn a_grid_with_few_members_missing_is_one_train(
            period in 20 * MS..2 * S,
            slots in 30u64..150,
            removed_share in 0u64..=10,
            noise_per_slot in 0u64..=3,
            seed in 0u64..1_000_000,
        ) {
            let mut r = SplitMix64::new(seed);
            let removed = slots * removed_share / 100;
            let mut missing = Vec::new();
            while (missing.len() as u64) < removed {
                let k = r.below(slots);
                if !missing.contains(&k) {
                    missing.push(k);
                }
            }
            let first = 50 * MS + r.below(period);
            let jitter = period / 2000;
            let mut spikes = grid(&mut r, first, period, slots, jitter, (950_000, 1_050_000), &missing);
            let noise = (slots * noise_per_slot) as usize;
            spikes.extend(random_spikes(noise, first + slots * period + period, seed ^ 0x5eed));
            let trains = find_trains(&spikes, &TrainConfig::default());
            // The grid is one train, reported once, with its period within 0.5%.
            let near = |p: u64, q: u64, share: u64| p.abs_diff(q) * share <= q;
            let grid_trains: Vec<&Train> =
                trains.iter().filter(|t| near(t.period_ns, period, 200)).collect();
            proptest::prop_assert_eq!(grid_trains.len(), 1, "{:#?}", trains);
            // Nothing else is the grid again, at a multiple or a fraction of its period. The
            // random delays may, rarely, line up into a train of their own: the detector
            // accepts an expected 0.01 chance trains per run (`max_false`), so one such train,
            // and only one, is allowed.
            let others: Vec<&Train> =
                trains.iter().filter(|t| !near(t.period_ns, period, 200)).collect();
            for t in &others {
                let harmonic = (2..=10u64)
                    .any(|k| near(t.period_ns, period * k, 100) || near(t.period_ns * k, period, 100));
                proptest::prop_assert!(!harmonic, "{:#?}", trains);
                proptest::prop_assert!(t.chance <= TrainConfig::default().max_false, "{:#?}", t);
            }
            proptest::prop_assert!(others.len() <= 1, "{:#?}", trains);
        }
    }
}
