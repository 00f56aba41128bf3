//! The unprivileged sampler: snapshots of `/proc/interrupts`, `/proc/softirqs`, the per-CPU
//! lines of `/proc/stat` and the measuring threads' context-switch counts, taken on the main
//! (housekeeping) thread at a fixed rate during a run, and the per-interval deltas they give.
//!
//! A snapshot reads four small files and allocates; it runs on the main thread, never on a
//! measuring thread, and only between the main thread's waits. Only the measured CPUs' columns
//! are kept.

use super::procfs::{self, CpuStat};

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

/// Everything a run's sampler recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub spec: SamplerSpec,
    pub irq_names: Vec<String>,
    pub softirq_names: Vec<String>,
    pub snapshots: Vec<Snapshot>,
}

/// The counts of the sources named `names` on `cpus`, from `parsed` whose columns are
/// `file_cpus`; a source or CPU missing from the file counts zero.
fn pick(
    names: &[String],
    cpus: &[usize],
    file_cpus: &[usize],
    parsed: &[procfs::Counted],
) -> Vec<Vec<u64>> {
    let cols: Vec<Option<usize>> = cpus
        .iter()
        .map(|c| file_cpus.iter().position(|f| f == c))
        .collect();
    names
        .iter()
        .map(|n| {
            let line = parsed.iter().find(|p| &p.name == n);
            cols.iter()
                .map(|col| {
                    line.zip(*col)
                        .and_then(|(l, i)| l.per_cpu.get(i).copied())
                        .unwrap_or(0)
                })
                .collect()
        })
        .collect()
}

/// The texts of the four sources, read from a place: `/proc` for a run, strings in tests.
pub trait Source {
    fn interrupts(&mut self) -> String;
    fn softirqs(&mut self) -> String;
    fn stat(&mut self) -> String;
    fn status(&mut self, tid: i32) -> String;
    fn schedstat(&mut self, tid: i32) -> String;
}

/// The running system.
pub struct Proc;

impl Source for Proc {
    fn interrupts(&mut self) -> String {
        std::fs::read_to_string("/proc/interrupts").unwrap_or_default()
    }
    fn softirqs(&mut self) -> String {
        std::fs::read_to_string("/proc/softirqs").unwrap_or_default()
    }
    fn stat(&mut self) -> String {
        std::fs::read_to_string("/proc/stat").unwrap_or_default()
    }
    fn status(&mut self, tid: i32) -> String {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap_or_default()
    }
    fn schedstat(&mut self, tid: i32) -> String {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap_or_default()
    }
}

/// Takes snapshots into a buffer reserved for the whole run.
pub struct Sampler<S: Source> {
    source: S,
    record: Record,
}

impl<S: Source> Sampler<S> {
    /// A sampler for `spec`, with room for `capacity` snapshots; the source names are those
    /// present now (a device that appears later is not followed).
    pub fn new(mut source: S, spec: SamplerSpec, capacity: usize) -> Sampler<S> {
        let (_, irqs) = procfs::parse_interrupts(&source.interrupts());
        let (_, softirqs) = procfs::parse_softirqs(&source.softirqs());
        Sampler {
            source,
            record: Record {
                spec,
                irq_names: irqs.into_iter().map(|c| c.name).collect(),
                softirq_names: softirqs.into_iter().map(|c| c.name).collect(),
                snapshots: Vec::with_capacity(capacity),
            },
        }
    }

    /// Takes one snapshot stamped `at_ns` (CLOCK_MONOTONIC). Returns false, taking nothing,
    /// when the buffer is full.
    pub fn sample(&mut self, at_ns: u64) -> bool {
        if self.record.snapshots.len() == self.record.snapshots.capacity() {
            return false;
        }
        let spec = &self.record.spec;
        let (icpus, irqs) = procfs::parse_interrupts(&self.source.interrupts());
        let (scpus, softirqs) = procfs::parse_softirqs(&self.source.softirqs());
        let stats = procfs::parse_stat(&self.source.stat());
        let stat = spec
            .cpus
            .iter()
            .map(|c| {
                stats
                    .iter()
                    .find(|(n, _)| n == c)
                    .map(|(_, s)| *s)
                    .unwrap_or_default()
            })
            .collect();
        let tids = spec.tids.clone();
        let ctxt = tids
            .iter()
            .map(|&t| procfs::parse_ctxt(&self.source.status(t)).unwrap_or((0, 0)))
            .collect();
        let wait_ns = tids
            .iter()
            .map(|&t| procfs::parse_schedstat_wait(&self.source.schedstat(t)).unwrap_or(0))
            .collect();
        let snap = Snapshot {
            at_ns,
            irq: pick(&self.record.irq_names, &spec.cpus, &icpus, &irqs),
            softirq: pick(&self.record.softirq_names, &spec.cpus, &scpus, &softirqs),
            stat,
            ctxt,
            wait_ns,
        };
        self.record.snapshots.push(snap);
        true
    }

    /// What was recorded.
    pub fn finish(self) -> Record {
        self.record
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

/// The intervals between consecutive snapshots (counters that went backwards count zero).
pub fn intervals(r: &Record) -> Vec<Interval> {
    let d = |a: u64, b: u64| b.saturating_sub(a);
    let dd = |a: &[Vec<u64>], b: &[Vec<u64>]| -> Vec<Vec<u64>> {
        a.iter()
            .zip(b)
            .map(|(x, y)| x.iter().zip(y).map(|(&p, &q)| d(p, q)).collect())
            .collect()
    };
    r.snapshots
        .windows(2)
        .map(|w| {
            let (a, b) = (&w[0], &w[1]);
            Interval {
                start_ns: a.at_ns,
                end_ns: b.at_ns,
                irq: dd(&a.irq, &b.irq),
                softirq: dd(&a.softirq, &b.softirq),
                steal: a
                    .stat
                    .iter()
                    .zip(&b.stat)
                    .map(|(p, q)| d(p.steal, q.steal))
                    .collect(),
                ctxt: a
                    .ctxt
                    .iter()
                    .zip(&b.ctxt)
                    .map(|(p, q)| (d(p.0, q.0), d(p.1, q.1)))
                    .collect(),
                wait_ns: a
                    .wait_ns
                    .iter()
                    .zip(&b.wait_ns)
                    .map(|(&p, &q)| d(p, q))
                    .collect(),
            }
        })
        .collect()
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
        fn interrupts(&mut self) -> String {
            nth(&self.interrupts, &mut self.calls[0])
        }
        fn softirqs(&mut self) -> String {
            nth(&self.softirqs, &mut self.calls[1])
        }
        fn stat(&mut self) -> String {
            nth(&self.stat, &mut self.calls[2])
        }
        fn status(&mut self, _tid: i32) -> String {
            nth(&self.status, &mut self.calls[3])
        }
        fn schedstat(&mut self, _tid: i32) -> String {
            nth(&self.schedstat, &mut self.calls[4])
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
        let mut sampler = Sampler::new(s, spec, 2);
        assert!(sampler.sample(1_000_000_000));
        assert!(sampler.sample(1_100_000_000));
        assert!(!sampler.sample(1_200_000_000), "the buffer holds two");
        let r = sampler.finish();
        assert_eq!(r.irq_names, ["30 (eth0)", "LOC (Local timer interrupts)"]);
        let iv = intervals(&r);
        assert_eq!(iv.len(), 1);
        assert_eq!(
            (iv[0].start_ns, iv[0].end_ns),
            (1_000_000_000, 1_100_000_000)
        );
        assert_eq!(iv[0].irq, vec![vec![300], vec![25]], "CPU 1's column only");
        assert_eq!(iv[0].softirq, vec![vec![0]]);
        assert_eq!(iv[0].steal, vec![3]);
        assert_eq!(iv[0].ctxt, vec![(250, 3)]);
        assert_eq!(iv[0].wait_ns, vec![2_000_000]);
    }

    #[test]
    fn this_machine_samples() {
        let spec = SamplerSpec {
            cpus: vec![0],
            tids: vec![sandglass_sys::sched::gettid().0],
        };
        let mut s = Sampler::new(Proc, spec, 4);
        assert!(s.sample(1) && s.sample(2));
        let r = s.finish();
        assert!(!r.irq_names.is_empty());
        assert_eq!(intervals(&r).len(), 1);
    }
}
