//! `sandglass monitor`: timer wakeup latency measured without end, in segments.
//!
//! Each segment is one complete timer run (its own directory, manifest and checksums, in the
//! catalog like any run), one hour long by default, so memory stays that of one run however
//! long the monitor lives, and every sample is kept. With a duty cycle the threads measure
//! only part of each cycle (`--duty 10%`: one second in ten) and sleep in between. After each
//! segment the oldest segments of the same monitor go, by age (`--keep`) and by disk use
//! (`--max-disk`); the segment just written is always kept. A monitor's segments are those of
//! its unit ([`unit_of`]: this host, the same measured CPUs) lying directly in its runs
//! directory and owned by its user: another monitor's segments, a segment imported from
//! elsewhere and anything another user wrote are never removed.
//!
//! SIGTERM, SIGINT or SIGHUP ends the segment under way (its files written and catalogued, state
//! `interrupted`) and the monitor. A monitor that was killed leaves its segment `running`;
//! the next start of any sandglass marks it incomplete (its samples kept) and carries on.

use crate::catalog::{Catalog, CatalogError, Entry, Filter, Place};
use crate::live::Live;
use crate::runner::{Observer, RunContext, RunError};
use crate::store::RunState;
use crate::timer::{self, TimerConfig, TimerResult};
use crate::units::Nanos;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What the monitor keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Segments that ended longer ago than this go.
    pub keep: Option<Nanos>,
    /// Beyond this many bytes of segments, the oldest go.
    pub max_disk: Option<u64>,
}

/// How the monitor runs.
#[derive(Clone, Debug)]
pub struct MonitorConfig {
    /// Each segment's measurement (its `duration_ns` is the segment's length).
    pub timer: TimerConfig,
    pub retention: Retention,
    /// Stop after this many segments (`None`: until a signal).
    pub segments: Option<u64>,
}

/// Receives what the monitor has to say (the library never prints).
pub trait MonitorObserver: Observer {
    /// A segment has ended and its files are written.
    fn segment(&mut self, _result: &TimerResult) {}
    /// A segment was removed by the retention rules.
    fn removed(&mut self, _entry: &Entry, _why: &str) {}
    /// Whether another segment is wanted: `false` ends the monitor before the next one starts
    /// (its reader went away).
    fn more(&self) -> bool {
        true
    }
}

/// The command line's marker of a monitor's segment (`sandglass monitor` or `sandglass top`).
pub fn is_segment(e: &Entry) -> bool {
    e.kind == crate::RunKind::Timer
        && matches!(
            e.command_line.get(1).map(String::as_str),
            Some("monitor" | "top")
        )
}

/// The unit a segment belongs to: the CPUs its threads measured, as its manifest records them
/// (`config.threads[].affinity`). Two monitors sharing a store measure different CPUs (a CPU
/// is measured by one sandglass at a time), and a monitor restarted with the same CPUs is the
/// same unit, so it removes the segments its predecessor left. `None` when the manifest
/// cannot be read or records no CPU.
pub fn unit_of(dir: &Path) -> Option<std::collections::BTreeSet<usize>> {
    let r = crate::store::RunReader::open_any_state(dir).ok()?;
    let cpus: std::collections::BTreeSet<usize> = r.manifest.config["threads"]
        .as_array()?
        .iter()
        .filter_map(|t| t["affinity"].as_str())
        .filter_map(|text| crate::cpulist::CpuList::parse(text).ok())
        .flat_map(|l| l.to_vec())
        .collect();
    (!cpus.is_empty()).then_some(cpus)
}

/// Bytes used by the files of `dir` (not following links).
pub fn disk_use(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_use(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The segments to remove from `segments` (any order) under `rule` at `now`, oldest first,
/// with the reason: older than `keep` (by their end), then the oldest while the total is above
/// `max_disk`. The newest segment is never removed, nor one still running.
pub fn to_remove(
    segments: &[(Entry, u64)],
    rule: Retention,
    now: SystemTime,
) -> Vec<(PathBuf, String, String)> {
    let mut by_age: Vec<&(Entry, u64)> = segments
        .iter()
        .filter(|(e, _)| e.state != "running")
        .collect();
    by_age.sort_by(|a, b| (&a.0.started_at, &a.0.id).cmp(&(&b.0.started_at, &b.0.id)));
    let newest = segments
        .iter()
        .max_by(|a, b| (&a.0.started_at, &a.0.id).cmp(&(&b.0.started_at, &b.0.id)))
        .map(|(e, _)| e.id.clone());
    let mut total: u64 = segments.iter().map(|(_, b)| b).sum();
    let mut out = Vec::new();
    for (e, bytes) in by_age {
        if Some(&e.id) == newest.as_ref() {
            continue;
        }
        let ended = e.ended_at.as_deref().unwrap_or(&e.started_at);
        let age = humantime::parse_rfc3339(ended)
            .ok()
            .and_then(|t| now.duration_since(t).ok());
        let why = match (rule.keep, age) {
            (Some(keep), Some(age)) if age > Duration::from_nanos(keep.0) => Some(format!(
                "ended {} ago, beyond --keep {}",
                crate::duration::format_coarse(age.as_secs()),
                crate::duration::format_coarse(keep.0 / 1_000_000_000)
            )),
            _ => match rule.max_disk {
                Some(max) if total > max => Some(format!(
                    "segments use {} bytes, beyond --max-disk {max}",
                    total
                )),
                _ => None,
            },
        };
        if let Some(why) = why {
            total = total.saturating_sub(*bytes);
            out.push((e.path.clone(), e.id.clone(), why));
        }
    }
    out
}

/// Applies `rule` to the segments of the monitor that has just written `own` (a segment
/// directory) in the catalog of `base`, telling `obs` of each removal. Only segments of the
/// same unit ([`unit_of`]) on this host, lying directly in `base` and owned by this user
/// ([`Place::Owned`]), are considered: other monitors' segments, imported ones and other
/// users' are left alone, and count for nothing in `--max-disk`.
pub fn enforce(
    base: &Path,
    rule: Retention,
    own: &Path,
    obs: &mut dyn MonitorObserver,
) -> Result<(), CatalogError> {
    if rule.keep.is_none() && rule.max_disk.is_none() {
        return Ok(());
    }
    let Some(unit) = unit_of(own) else {
        obs.note(&format!(
            "warning: retention not applied: the CPUs of {} cannot be read from its manifest",
            own.display()
        ));
        return Ok(());
    };
    let mut cat = Catalog::open(base)?;
    let host = sandglass_sys::process::uname()
        .map(|u| u.nodename)
        .unwrap_or_default();
    let segments: Vec<(Entry, u64)> = cat
        .list(&Filter {
            kind: Some(crate::RunKind::Timer.to_string()),
            host: Some(host),
            ..Filter::default()
        })?
        .into_iter()
        .filter(is_segment)
        .filter(|e| cat.place(e) == Place::Owned)
        .filter(|e| unit_of(&e.path).as_ref() == Some(&unit))
        .map(|e| {
            let b = disk_use(&e.path);
            (e, b)
        })
        .collect();
    for (_, id, why) in to_remove(&segments, rule, SystemTime::now()) {
        let (e, _) = cat.remove(&id, false)?;
        obs.removed(&e, &why);
    }
    Ok(())
}

/// The causes the sampler named for a segment's largest delays, most often named first: the
/// most unusual source of each explained delay (`irq LOC`, `steal hypervisor (steal)`), else
/// what the thread's wait says (`held_by_task`, `not_runnable`), else `unexplained`; at most
/// five.
pub fn top_causes(c: &crate::causes::Causes) -> Vec<(String, u64)> {
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for sp in c.explanation.iter().flat_map(|e| &e.spikes) {
        let name = match sp.abnormal.first() {
            Some(a) => format!("{} {}", a.kind, a.name),
            None => match &sp.inferred {
                Some(i) => i.kind.clone(),
                None => "unexplained".to_string(),
            },
        };
        *counts.entry(name).or_default() += 1;
    }
    let mut v: Vec<(String, u64)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(5);
    v
}

/// True when a signal that ends a run (SIGINT, SIGTERM, SIGHUP) has been taken or is pending
/// (they are blocked throughout).
fn stop_pending() -> bool {
    use sandglass_sys::signal;
    signal::termination().is_some() || signal::wait_timeout(&signal::TERMINATING, 0).is_some()
}

/// How the monitor ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// Segments run.
    pub segments: u64,
    /// The last segment's state: `completed` (the segments asked for ran), `interrupted` (a
    /// signal, the normal end), or a failure (`incomplete` when its store could not be
    /// written, `watchdog`) that ended the monitor.
    pub last: Option<RunState>,
    /// The last segment's directory and why it ended.
    pub last_dir: String,
    pub last_detail: String,
}

/// Runs segments until a signal (or `config.segments`), counting every release into `live`.
/// `done` is called after each segment with its result (to catalogue it) before retention is
/// applied.
pub fn run(
    config: &MonitorConfig,
    ctx: &RunContext,
    obs: &mut dyn MonitorObserver,
    live: Arc<Live>,
    mut done: impl FnMut(&TimerResult),
) -> Result<Ended, RunError> {
    // SIGINT, SIGTERM and SIGHUP stay blocked from here to the end: each segment's run takes them in
    // its wait, and between segments they are looked for before the next one starts.
    let _hold = crate::runner::SignalHold::block()?;
    let mut n = 0u64;
    let mut last = None;
    let (mut last_dir, mut last_detail) = (String::new(), String::new());
    while config.segments.is_none_or(|max| n < max) {
        if stop_pending() || !obs.more() {
            break;
        }
        let result = timer::run_live(&config.timer, ctx, obs, Some(live.clone()))?;
        n += 1;
        done(&result);
        live.update_segment(|s| {
            s.completed += 1;
            s.causes = result
                .run
                .causes
                .as_ref()
                .map(top_causes)
                .unwrap_or_default();
        });
        obs.segment(&result);
        let own = Path::new(&result.run.run_dir);
        if let Err(e) = enforce(&ctx.base_dir, config.retention, own, obs) {
            obs.note(&format!("warning: retention not applied: {e}"));
        }
        last = Some(result.run.state);
        last_dir.clone_from(&result.run.run_dir);
        last_detail.clone_from(&result.run.end_detail);
        if result.run.state != RunState::Completed {
            // Cut short by a signal, or failed: the monitor ends with it.
            break;
        }
    }
    Ok(Ended {
        segments: n,
        last,
        last_dir,
        last_detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(id: &str, ended: &str, state: &str) -> Entry {
        Entry {
            id: id.into(),
            path: PathBuf::from(format!("/runs/{id}")),
            kind: crate::RunKind::Timer,
            state: state.into(),
            started_at: ended.into(),
            ended_at: Some(ended.into()),
            host: "h".into(),
            kernel: "k".into(),
            command_line: vec!["sandglass".into(), "monitor".into()],
            study: None,
            figures: Default::default(),
            tool_version: "0".into(),
            indexed_at: ended.into(),
        }
    }

    fn ids(v: &[(PathBuf, String, String)]) -> Vec<&str> {
        v.iter().map(|(_, id, _)| id.as_str()).collect()
    }

    #[test]
    fn retention_removes_by_age_then_by_size_and_keeps_the_newest() {
        let now = humantime::parse_rfc3339("2026-11-27T12:00:00Z").unwrap();
        let s = vec![
            (segment("a", "2026-11-18T12:00:00Z", "completed"), 100),
            (segment("b", "2026-11-25T12:00:00Z", "completed"), 100),
            (segment("c", "2026-11-26T12:00:00Z", "incomplete"), 100),
            (segment("d", "2026-11-27T11:00:00Z", "completed"), 100),
        ];
        let week = Nanos(7 * 86_400_000_000_000);
        let age = to_remove(
            &s,
            Retention {
                keep: Some(week),
                max_disk: None,
            },
            now,
        );
        assert_eq!(ids(&age), ["a"]);
        assert_eq!(age[0].2, "ended 9d ago, beyond --keep 7d");
        assert_eq!(
            crate::duration::format_coarse(7 * 86_400 + 4 * 3_600 + 5),
            "7d 4h"
        );
        assert_eq!(crate::duration::format_coarse(3 * 3_600 + 300), "3h 5m");
        assert_eq!(crate::duration::format_coarse(20), "20s");
        assert_eq!(crate::duration::format_coarse(0), "0s");
        let size = to_remove(
            &s,
            Retention {
                keep: Some(week),
                max_disk: Some(250),
            },
            now,
        );
        assert_eq!(ids(&size), ["a", "b"]);
        // A limit below one segment keeps the newest anyway.
        let all = to_remove(
            &s,
            Retention {
                keep: None,
                max_disk: Some(1),
            },
            now,
        );
        assert_eq!(ids(&all), ["a", "b", "c"]);
        assert!(to_remove(&s, Retention::default(), now).is_empty());
    }

    #[test]
    fn a_running_segment_is_never_removed() {
        let now = humantime::parse_rfc3339("2026-11-27T12:00:00Z").unwrap();
        let s = vec![
            (segment("a", "2026-11-01T12:00:00Z", "running"), 100),
            (segment("b", "2026-11-27T11:00:00Z", "completed"), 100),
        ];
        let r = to_remove(
            &s,
            Retention {
                keep: Some(Nanos(1)),
                max_disk: Some(1),
            },
            now,
        );
        assert!(r.is_empty(), "{r:?}");
    }
}
