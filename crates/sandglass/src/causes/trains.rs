//! Periodic trains of delays: "N delays of about X recur every P s (first at T)".
//!
//! Jones and Regehr (seed 004, §4) found by hand that their longest timer delays came from a
//! network driver's deferred procedure call every 5 s and a card reset every 10 s. This module
//! finds such trains by program, among the spikes of one CPU.
//!
//! **Method.** Spikes are compared only with spikes of similar size (within a factor
//! `1 ± size_tolerance` of each other): a periodic source tends to cost about the same each
//! time, and the size filter is what separates its train from the crowd. Every pair of similar
//! spikes `(a, b)` whose distance `d` lies within the period range proposes a train starting at
//! `a` (only when no similar spike lies one period before `a`, so that each train is proposed
//! from its first member). The chain is extended forward: the next member is the similar spike
//! nearest to `last + d` within `± tol(d)`, where `tol(d) = max(min_tolerance, d ·
//! period_tolerance)`, and `d` is refined to `(last − first) / (members − 1)` after each member.
//! A missing member (a period with no spike) ends the chain.
//!
//! **Significance.** Among `n` similar spikes spread over a span `S`, the chance that a window of
//! width `2·tol` around a predicted time holds one by accident is about `p = n · 2·tol / S`. A
//! chain of `m` members is two spikes chosen freely and `m − 2` accidents, so the number of chance
//! chains at least that long among the `c` pairs proposed is about `c · p^(m−2)`. A chain is
//! reported only when that expectation is below `max_false` (default 0.01) and `m ≥
//! min_members`. Accepted trains are taken longest first; a chain sharing half or more of its
//! members with an accepted one (a multiple of its period, or the same train seen from a later
//! member) is dropped.

use serde::{Deserialize, Serialize};

/// One delay: when it started and how long it was, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spike {
    pub at_ns: u64,
    pub size_ns: u64,
}

/// A periodic train found among the spikes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Train {
    /// The mean period: (last − first) / (count − 1).
    pub period_ns: u64,
    /// Members of the train.
    pub count: u64,
    /// The median size of its members.
    pub typical_ns: u64,
    /// When its first member started.
    pub first_ns: u64,
    /// The expected number of chains this long made by chance (the smaller, the surer).
    pub chance: f64,
}

/// What counts as a train.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainConfig {
    /// The shortest period looked for.
    pub min_period_ns: u64,
    /// The longest period looked for; also at most a third of the spikes' span.
    pub max_period_ns: u64,
    /// Members may differ in size by this factor (0.25: from 0.8× to 1.25× of each other).
    pub size_tolerance: f64,
    /// A member may be this share of the period early or late.
    pub period_tolerance: f64,
    /// ... but at least this many nanoseconds.
    pub min_tolerance_ns: u64,
    /// Fewer members are never a train.
    pub min_members: u64,
    /// The largest expected number of chance chains accepted.
    pub max_false: f64,
}

impl Default for TrainConfig {
    fn default() -> TrainConfig {
        TrainConfig {
            min_period_ns: 10_000_000,
            max_period_ns: 600_000_000_000,
            size_tolerance: 0.25,
            period_tolerance: 0.002,
            min_tolerance_ns: 2_000_000,
            min_members: 5,
            max_false: 0.01,
        }
    }
}

/// The most candidate chains kept for the choice of trains (40 bytes each).
const MAX_CHAINS: usize = 16_384;

/// Finds periodic trains among `spikes` (of one CPU, in any order). Deterministic; about
/// O(n² log n) in the worst case, for n up to a few thousand spikes, in memory that does not
/// depend on how the spikes chain up.
pub fn find_trains(spikes: &[Spike], config: &TrainConfig) -> Vec<Train> {
    if spikes.len() < config.min_members.max(3) as usize {
        return Vec::new();
    }
    let mut s: Vec<Spike> = spikes.to_vec();
    s.sort_by_key(|x| (x.at_ns, x.size_ns));
    let span = s[s.len() - 1].at_ns - s[0].at_ns;
    if span == 0 {
        return Vec::new();
    }
    let max_period = config.max_period_ns.min(span / 2);
    let similar = |a: &Spike, b: &Spike| {
        let (lo, hi) = if a.size_ns <= b.size_ns {
            (a.size_ns as f64, b.size_ns as f64)
        } else {
            (b.size_ns as f64, a.size_ns as f64)
        };
        hi <= lo * (1.0 + config.size_tolerance)
    };
    let tol = |d: u64| ((d as f64 * config.period_tolerance) as u64).max(config.min_tolerance_ns);
    // The similar spike nearest to `t` within `w` of it, if any.
    let nearest = |t: u64, w: u64, like: &Spike| -> Option<usize> {
        let lo = t.saturating_sub(w);
        let start = s.partition_point(|x| x.at_ns < lo);
        let mut best: Option<(u64, usize)> = None;
        for (k, x) in s.iter().enumerate().skip(start) {
            if x.at_ns > t + w {
                break;
            }
            if similar(x, like) {
                let dist = x.at_ns.abs_diff(t);
                if best.is_none_or(|(bd, _)| dist < bd) {
                    best = Some((dist, k));
                }
            }
        }
        best.map(|(_, k)| k)
    };

    // The chain that starts with spikes `a` and `b`, followed at its own running period,
    // into `members`.
    let walk = |a: usize, b: usize, members: &mut Vec<usize>| {
        members.clear();
        members.extend([a, b]);
        let mut period = (s[b].at_ns - s[a].at_ns) as f64;
        loop {
            let last = s[*members.last().unwrap_or(&b)].at_ns;
            let next = last + period.round() as u64;
            match nearest(next, tol(period as u64), &s[a]) {
                Some(k) if !members.contains(&k) => {
                    members.push(k);
                    let first = s[members[0]].at_ns;
                    period = (s[k].at_ns - first) as f64 / (members.len() - 1) as f64;
                }
                _ => break,
            }
        }
    };
    // The similar spikes around each spike's size, counted once per spike.
    let mut similar_count: Vec<Option<f64>> = vec![None; s.len()];
    let mut n_similar = |a: usize| {
        *similar_count[a]
            .get_or_insert_with(|| s.iter().filter(|x| similar(x, &s[a])).count() as f64)
    };

    /// A candidate train, kept without its members (recomputed from `a` and `b` when it is
    /// chosen), so that memory does not depend on how many spikes chain up.
    #[derive(Clone, Copy)]
    struct Chain {
        a: usize,
        b: usize,
        len: usize,
        /// The chance of one member falling in the window by accident.
        p: f64,
    }
    // In the order chains are chosen: longest first, then least likely by chance, then first.
    let order = |x: &Chain, y: &Chain| {
        y.len
            .cmp(&x.len)
            .then(x.p.total_cmp(&y.p))
            .then(x.a.cmp(&y.a))
    };
    let mut chains: Vec<Chain> = Vec::new();
    let mut members: Vec<usize> = Vec::new();
    let mut proposed = 0u64;
    for a in 0..s.len() {
        for b in a + 1..s.len() {
            let d = s[b].at_ns - s[a].at_ns;
            if d > max_period {
                break;
            }
            if d < config.min_period_ns || !similar(&s[a], &s[b]) {
                continue;
            }
            proposed += 1;
            let w = tol(d);
            if s[a].at_ns >= d && nearest(s[a].at_ns - d, w, &s[a]).is_some() {
                continue; // not the first member
            }
            walk(a, b, &mut members);
            if (members.len() as u64) < config.min_members {
                continue;
            }
            // Chance: p = (similar spikes per ns) · 2·tol, with the similar spikes counted
            // around the chain's own size. The expected number of chance chains only grows
            // with `proposed`, so a chain already too likely now stays so.
            let p = (n_similar(a) * 2.0 * w as f64 / span as f64).min(1.0);
            if proposed as f64 * p.powi(members.len() as i32 - 2) >= config.max_false {
                continue;
            }
            chains.push(Chain {
                a,
                b,
                len: members.len(),
                p,
            });
            // Only the first MAX_CHAINS in the order of choice can be chosen in practice.
            if chains.len() >= 2 * MAX_CHAINS {
                chains.sort_by(order);
                chains.truncate(MAX_CHAINS);
            }
        }
    }
    chains.sort_by(order);
    chains.truncate(MAX_CHAINS);
    let mut taken = vec![false; s.len()];
    let mut out = Vec::new();
    for c in chains {
        let chance = proposed as f64 * c.p.powi(c.len as i32 - 2);
        if chance >= config.max_false {
            continue;
        }
        walk(c.a, c.b, &mut members);
        let shared = members.iter().filter(|&&k| taken[k]).count();
        if shared * 2 >= members.len() {
            continue;
        }
        for &k in &members {
            taken[k] = true;
        }
        let first = s[members[0]].at_ns;
        let last = s[*members.last().unwrap_or(&members[0])].at_ns;
        let mut sizes: Vec<u64> = members.iter().map(|&k| s[k].size_ns).collect();
        out.push(Train {
            period_ns: (last - first) / (members.len() as u64 - 1),
            count: members.len() as u64,
            typical_ns: crate::stats::median_upper(&mut sizes),
            first_ns: first,
            chance,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::rng::SplitMix64;

    /// `n` spikes at uniformly random times over `span`, with sizes log-uniform from 10 µs to
    /// 10 ms.
    fn random_spikes(n: usize, span: u64, seed: u64) -> Vec<Spike> {
        let mut r = SplitMix64::new(seed);
        (0..n)
            .map(|_| {
                let u = r.below(1_000_000) as f64 / 1e6;
                Spike {
                    at_ns: r.below(span),
                    size_ns: (10_000.0 * 1000f64.powf(u)) as u64,
                }
            })
            .collect()
    }

    #[test]
    fn a_five_second_train_is_found_among_random_spikes() {
        // Jones & Regehr's case: a 7 ms delay every 5 s, here 20 of them, with 2,000 random
        // spikes over the same 100 s. Members are up to 1 ms early or late and vary ±5% in size.
        let mut r = SplitMix64::new(7);
        let mut spikes = random_spikes(2000, 100_000_000_000, 42);
        for k in 0..20u64 {
            let jitter = r.below(2_000_000) as i64 - 1_000_000;
            let size = 7_000_000 - 350_000 + r.below(700_000);
            spikes.push(Spike {
                at_ns: (2_300_000_000 + k as i64 * 5_000_000_000 + jitter) as u64,
                size_ns: size,
            });
        }
        let trains = find_trains(&spikes, &TrainConfig::default());
        assert_eq!(trains.len(), 1, "{trains:?}");
        let t = &trains[0];
        assert_eq!(t.count, 20);
        assert!(t.period_ns.abs_diff(5_000_000_000) < 1_000_000, "{t:?}");
        assert!(t.typical_ns.abs_diff(7_000_000) < 400_000, "{t:?}");
        assert!(t.first_ns.abs_diff(2_300_000_000) <= 1_000_000, "{t:?}");
        assert!(t.chance < 1e-6, "{t:?}");
    }

    /// A tick of the same size every 12 ms for 24 s: every pair of ticks starts a candidate
    /// chain at each multiple of the period (millions of them, which the search no longer
    /// keeps), and the one train is the ticks themselves, each of them a member, its multiples
    /// not reported again.
    #[test]
    fn a_long_regular_tick_is_one_train_of_every_tick() {
        let spikes: Vec<Spike> = (0..2000u64)
            .map(|k| Spike {
                at_ns: 1_000_000 + k * 12_000_000,
                size_ns: 50_000,
            })
            .collect();
        let trains = find_trains(&spikes, &TrainConfig::default());
        assert_eq!(trains.len(), 1, "{trains:?}");
        assert_eq!(trains[0].count, 2000);
        assert_eq!(trains[0].period_ns, 12_000_000);
        assert_eq!(trains[0].typical_ns, 50_000);
    }

    #[test]
    fn random_spikes_alone_make_no_train() {
        for seed in 1..=5 {
            let spikes = random_spikes(2000, 100_000_000_000, seed);
            let trains = find_trains(&spikes, &TrainConfig::default());
            assert!(trains.is_empty(), "seed {seed}: {trains:?}");
        }
    }

    #[test]
    fn two_trains_and_no_multiples() {
        // 10 ms delays every 10 s and 1 ms delays every 2 s over 60 s: the 2 s train must not
        // also be reported at 4 s or 6 s.
        let mut spikes = Vec::new();
        for k in 0..6u64 {
            spikes.push(Spike {
                at_ns: 500_000_000 + k * 10_000_000_000,
                size_ns: 10_000_000,
            });
        }
        for k in 0..30u64 {
            spikes.push(Spike {
                at_ns: 1_000_000_000 + k * 2_000_000_000,
                size_ns: 1_000_000,
            });
        }
        let mut trains = find_trains(&spikes, &TrainConfig::default());
        trains.sort_by_key(|t| t.period_ns);
        assert_eq!(trains.len(), 2, "{trains:?}");
        assert_eq!((trains[0].period_ns, trains[0].count), (2_000_000_000, 30));
        assert_eq!((trains[1].period_ns, trains[1].count), (10_000_000_000, 6));
    }

    #[test]
    fn too_few_spikes_make_no_train() {
        let spikes: Vec<Spike> = (0..4u64)
            .map(|k| Spike {
                at_ns: k * 1_000_000_000,
                size_ns: 1_000_000,
            })
            .collect();
        assert!(find_trains(&spikes, &TrainConfig::default()).is_empty());
        assert!(find_trains(&[], &TrainConfig::default()).is_empty());
    }
}
