//! What a timer or a noise run streams as it goes, besides its figures: its table of every
//! sample (releases, interruptions), its per-second timeline, the per-second histograms of
//! `histograms.hlog`, and each CPU's bounded log of spikes for the explanation. Both probes'
//! sinks hold one [`Streams`] and add only what differs: the rows they write.

use super::SinkSetup;
use super::SpikeAt;
use crate::causes::spikes::{self, SpikeLog};
use crate::histo::IntervalLog;
use crate::store::table::{Limits, Table, TableWriter};
use crate::store::{FileEntry, StoreError};

pub struct Streams {
    /// Every sample, as it arrives.
    pub table: TableWriter,
    /// One row per CPU and second.
    pub timeline: TableWriter,
    /// One histogram per CPU and second.
    pub hlog: IntervalLog,
    /// Per thread: the spikes kept for the explanation.
    pub spikes: Vec<SpikeLog>,
}

impl Streams {
    /// The streams of a run measuring `cpus`: `table` and `timeline` created in the run
    /// directory, `histograms.hlog` with `comments`, and a spike log per CPU for delays of at
    /// least `spike_floor_ns` (every spike with `--trace`).
    pub fn create(
        s: &SinkSetup<'_>,
        cpus: &[usize],
        table: &'static Table,
        timeline: &'static Table,
        comments: &[String],
        spike_floor_ns: u64,
    ) -> Result<Streams, StoreError> {
        let keep_all = s.plan.trace.is_some();
        Ok(Streams {
            table: TableWriter::create(s.dir, table, Limits::default())?,
            timeline: TableWriter::create(s.dir, timeline, Limits::timeline())?,
            hlog: IntervalLog::create(
                s.dir,
                "histograms.hlog",
                crate::store::HLOG_FORMAT,
                crate::store::HLOG_DESCRIPTION,
                comments,
                s.started,
            )?,
            spikes: cpus
                .iter()
                .map(|&c| SpikeLog::new(c, spike_floor_ns, spikes::CAPACITY, keep_all))
                .collect(),
        })
    }

    /// After each drain: row groups and segments that are due, and the log's buffered lines.
    pub fn tick(&mut self, now_ns: u64) -> Result<(), StoreError> {
        self.table.tick(now_ns)?;
        self.timeline.tick(now_ns)?;
        self.hlog.flush()
    }

    /// Moves the spikes found since the last call into `out`.
    pub fn take_fresh_spikes(&mut self, out: &mut Vec<SpikeAt>) {
        for log in &mut self.spikes {
            log.take_fresh(out);
        }
    }

    /// Ends the spike logs and hands them over, for the result.
    pub fn take_spike_logs(&mut self) -> Vec<SpikeLog> {
        for log in &mut self.spikes {
            log.finish();
        }
        std::mem::take(&mut self.spikes)
    }

    /// Writes what the tables buffer and closes them and the log (once the caller has written
    /// its last timeline rows); returns the files.
    pub fn finish(self, now_ns: u64) -> Result<Vec<FileEntry>, StoreError> {
        let mut files = self.table.finish(now_ns)?;
        files.extend(self.timeline.finish(now_ns)?);
        files.push(self.hlog.finish()?);
        Ok(files)
    }
}
