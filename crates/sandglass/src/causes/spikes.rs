//! The spikes of one CPU, formed as its samples arrive and kept within a fixed size.
//!
//! A spike is a delay of at least a floor; consecutive late samples that fall inside the stall
//! of the previous one (a stall that delayed several releases) are one spike, which keeps the
//! largest delay ([`super::spikes_of`] on a list, [`SpikeLog::sample`] as the run goes). Every
//! spike's size goes into a histogram, so the number above any threshold is known to three
//! significant digits however long the run; the spikes themselves are kept (for the periodic
//! trains and the explanation) up to a capacity: when it is reached, the floor rises to the
//! median size of those kept and the smaller ones are let go, so a long run keeps its largest
//! spikes, spread over the whole run, in a fixed amount of memory.

use super::sampler::SpikeAt;
use super::trains::Spike;
use crate::engine::record::{new_histogram, record};
use hdrhistogram::Histogram;

/// The spikes one CPU's log keeps at most.
pub const CAPACITY: usize = 8192;

/// The spikes of one CPU.
pub struct SpikeLog {
    cpu: usize,
    floor_ns: u64,
    kept: Vec<Spike>,
    capacity: usize,
    sizes: Histogram<u64>,
    over: u64,
    /// The spike under way and when its stall ends.
    open: Option<Spike>,
    busy_until: i64,
    /// Spikes closed since the last [`SpikeLog::take_fresh`].
    fresh: Vec<SpikeAt>,
    /// Every spike, when the caller asked for all of them (kernel attribution).
    all: Option<Vec<Spike>>,
}

impl SpikeLog {
    /// A log of CPU `cpu`'s delays of at least `floor_ns`, keeping at most `capacity` spikes
    /// (and all of them too when `keep_all`).
    pub fn new(cpu: usize, floor_ns: u64, capacity: usize, keep_all: bool) -> SpikeLog {
        SpikeLog {
            cpu,
            floor_ns,
            kept: Vec::with_capacity(capacity),
            capacity: capacity.max(2),
            sizes: new_histogram(),
            over: 0,
            open: None,
            busy_until: i64::MIN,
            fresh: Vec::with_capacity(1024),
            all: keep_all.then(Vec::new),
        }
    }

    /// The delay of a sample at `at_ns` (ns from the run's start), in time order.
    pub fn sample(&mut self, at_ns: i64, delay_ns: i64, floor_ns: u64) {
        if delay_ns < floor_ns as i64 || at_ns < 0 {
            return;
        }
        if let Some(s) = self.open.as_mut() {
            if at_ns < self.busy_until {
                s.size_ns = s.size_ns.max(delay_ns as u64);
                self.busy_until = self.busy_until.max(at_ns + delay_ns);
                return;
            }
        }
        self.close();
        self.open = Some(Spike {
            at_ns: at_ns as u64,
            size_ns: delay_ns as u64,
        });
        self.busy_until = at_ns + delay_ns;
    }

    fn close(&mut self) {
        let Some(s) = self.open.take() else { return };
        record(&mut self.sizes, s.size_ns, &mut self.over);
        if let Some(all) = self.all.as_mut() {
            all.push(s);
        }
        if self.fresh.len() < self.fresh.capacity() {
            self.fresh.push(SpikeAt {
                cpu: self.cpu,
                at_ns: s.at_ns,
                size_ns: s.size_ns,
            });
        }
        if s.size_ns < self.floor_ns {
            return;
        }
        if self.kept.len() == self.capacity {
            let mut sizes: Vec<u64> = self.kept.iter().map(|k| k.size_ns).collect();
            let mid = sizes.len() / 2;
            let (_, &mut median, _) = sizes.select_nth_unstable(mid);
            self.floor_ns = self.floor_ns.max(median + 1);
            let floor = self.floor_ns;
            self.kept.retain(|k| k.size_ns >= floor);
            if s.size_ns < floor {
                return;
            }
        }
        self.kept.push(s);
    }

    /// Spikes closed since the last call.
    pub fn take_fresh(&mut self, out: &mut Vec<SpikeAt>) {
        out.append(&mut self.fresh);
    }

    /// Ends the spike under way (the run is over).
    pub fn finish(&mut self) {
        self.close();
    }

    /// Spikes of at least `ns`: exact to the histogram's three significant digits.
    pub fn count_at_least(&self, ns: u64) -> u64 {
        if ns == 0 {
            return self.sizes.len();
        }
        self.sizes.len() - self.sizes.count_between(0, ns.saturating_sub(1))
    }

    /// The spikes kept of at least `ns`, in time order.
    pub fn kept(&self, ns: u64) -> Vec<Spike> {
        self.kept
            .iter()
            .filter(|s| s.size_ns >= ns)
            .copied()
            .collect()
    }

    /// The smallest size now kept: spikes below it were counted, not kept.
    pub fn floor_ns(&self) -> u64 {
        self.floor_ns
    }

    /// Every spike, when the log was made to keep them all.
    pub fn all(&self) -> Option<&[Spike]> {
        self.all.as_deref()
    }

    pub fn cpu(&self) -> usize {
        self.cpu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list and the streaming forms agree on the test of `spikes_of`.
    #[test]
    fn stalls_merge_as_in_the_list_form() {
        let samples = [
            (9_000_000, 20_000),
            (10_000_000, 2_500_000),
            (11_000_000, 1_500_000),
            (12_000_000, 500_000),
            (13_000_000, 20_000),
            (50_000_000, 300_000),
        ];
        let mut log = SpikeLog::new(1, 100_000, 16, true);
        for (at, d) in samples {
            log.sample(at, d, 100_000);
        }
        log.finish();
        let list = super::super::spikes_of(samples.into_iter(), 100_000);
        assert_eq!(log.kept(0), list);
        assert_eq!(log.all(), Some(&list[..]));
        assert_eq!(log.count_at_least(100_000), 2);
        assert_eq!(log.count_at_least(1_000_000), 1);
        let mut fresh = Vec::new();
        log.take_fresh(&mut fresh);
        assert_eq!(fresh.len(), 2);
        assert_eq!(fresh[0].cpu, 1);
    }

    /// A full log raises its floor and keeps the largest spikes; every spike is still counted.
    #[test]
    fn a_full_log_keeps_the_largest() {
        let mut log = SpikeLog::new(0, 10, 8, false);
        for k in 0..100i64 {
            // Sizes 10..109, far apart so that none merges.
            log.sample(k * 1_000_000, 10 + (k * 37) % 100, 10);
        }
        log.finish();
        assert_eq!(log.count_at_least(10), 100);
        let kept = log.kept(0);
        assert!(kept.len() <= 8, "{}", kept.len());
        assert!(kept.iter().all(|s| s.size_ns >= log.floor_ns()));
        // The largest spike is always kept, and the kept ones are in time order.
        assert!(kept.iter().any(|s| s.size_ns == 109));
        assert!(kept.windows(2).all(|w| w[0].at_ns < w[1].at_ns));
    }
}
