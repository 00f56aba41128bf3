//! The kinds of run: one enum for every probe that writes a run directory, serialised to the
//! strings the manifest, the result header and the catalog have always held.
//!
//! This is the one place in the library's non-test code that spells a kind: everything else
//! matches on [`RunKind`]. Each kind also declares the key figures the catalog keeps for its
//! runs ([`RunKind::key_figures`]): their names, units and how CPUs combine, so that a reader
//! formats a figure by what it is, not by the look of its name. A kind this version does not know (a run written by a newer
//! sandglass) reads as [`RunKind::Unknown`] with its text kept, so listing, packing and copying
//! such a run keep working and writing it back changes nothing.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Declares the kinds this version knows, one line each: the variant with its documentation,
/// the name runs store, and whether `sandglass bench` makes it. From the table come the enum
/// (in the table's order, which is also the order people read them in), [`RunKind::KNOWN`],
/// [`RunKind::known_name`] and [`RunKind::is_bench`]; adding a kind is one line here and its
/// probe's line in `registry::probe_of`.
macro_rules! run_kinds {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal, bench: $bench:literal;)*) => {
        /// The probe that made a run.
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum RunKind {
            $($(#[doc = $doc])* $variant,)*
            /// A kind this version does not know, with its text; empty in Hourglass results of
            /// run format 1, which had no kind field.
            Unknown(String),
        }

        impl RunKind {
            /// Every kind this version knows, in the order people read them.
            pub const KNOWN: [RunKind; [$($name),*].len()] = [$(RunKind::$variant),*];

            /// The name of a kind this version knows; `None` for [`RunKind::Unknown`].
            pub fn known_name(&self) -> Option<&'static str> {
                match self {
                    $(RunKind::$variant => Some($name),)*
                    RunKind::Unknown(_) => None,
                }
            }

            /// A run of `sandglass bench`.
            pub fn is_bench(&self) -> bool {
                match self {
                    $(RunKind::$variant => $bench,)*
                    RunKind::Unknown(_) => false,
                }
            }
        }
    };
}

run_kinds! {
    /// `sandglass timer`: periodic wake-up latency.
    Timer = "timer", bench: false;
    /// `sandglass noise`: what interrupts a busy loop.
    Noise = "noise", bench: false;
    /// `sandglass hourglass`: Hourglass's thread models and execution trace.
    Hourglass = "hourglass", bench: false;
    /// `sandglass load`: a load alone, and what it achieved.
    Load = "load", bench: false;
    /// A study: its cells, their runs and the comparison.
    Study = "study", bench: false;
    /// `sandglass bench copy`: memory copy cost against size.
    BenchCopy = "bench-copy", bench: true;
    /// `sandglass bench ipc`: message cost against size per mechanism.
    BenchIpc = "bench-ipc", bench: true;
    /// `sandglass bench ctxsw`: context-switch cost against working set.
    BenchCtxsw = "bench-ctxsw", bench: true;
    /// `sandglass bench file`: file-system operation costs.
    BenchFile = "bench-file", bench: true;
    /// `sandglass bench timer-overhead`: the cost of reading the time.
    BenchTimerOverhead = "bench-timer-overhead", bench: true;
    /// `sandglass bench budget`: one period's work against its budget.
    BenchBudget = "bench-budget", bench: true;
}

impl RunKind {
    /// The name stored in runs and typed by people: `timer`, `bench-copy`, ...
    pub fn as_str(&self) -> &str {
        match self {
            RunKind::Unknown(s) => s,
            known => known.known_name().unwrap_or_default(),
        }
    }

    /// The kind named `s`; a name this version does not know is kept as [`RunKind::Unknown`].
    pub fn named(s: &str) -> RunKind {
        RunKind::KNOWN
            .into_iter()
            .find(|k| k.as_str() == s)
            .unwrap_or_else(|| RunKind::Unknown(s.to_string()))
    }

    /// A probe whose result holds per-CPU latency samples (`timer`, `noise`, `hourglass`):
    /// the kinds that compare, merge and export to peers' formats.
    pub fn has_samples(&self) -> bool {
        matches!(self, RunKind::Timer | RunKind::Noise | RunKind::Hourglass)
    }
}

/// What a key figure counts, and so how it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// A number of things.
    Count,
    /// A time in integer nanoseconds.
    Nanos,
    /// A fraction of the time, 0 to 1.
    Share,
    /// Events per second.
    PerSecond,
    /// Bytes per second.
    BytesPerSecond,
    /// Text, such as a load profile.
    Text,
}

/// How a figure measured on each CPU becomes the run's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OverCpus {
    /// The worst CPU's (the largest).
    Worst,
    /// Summed over the CPUs.
    Sum,
    /// One figure of the whole run.
    Run,
}

/// One key figure of a kind of run, as the catalog keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KeyFigure {
    /// The key in the catalog's `figures`.
    pub key: &'static str,
    /// What people read: `p99`, `noise share`.
    pub label: &'static str,
    pub unit: Unit,
    pub over_cpus: OverCpus,
}

pub const fn fig(
    key: &'static str,
    label: &'static str,
    unit: Unit,
    over_cpus: OverCpus,
) -> KeyFigure {
    KeyFigure {
        key,
        label,
        unit,
        over_cpus,
    }
}

use OverCpus::Run;
use Unit::{Count, Text};

/// The load profile a run measured under, for every kind.
pub const LOAD: KeyFigure = fig("load", "load", Text, Run);

/// A study's figures (the catalog reads them from `study.json`).
pub const STUDY: &[KeyFigure] = &[
    fig("name", "name", Text, Run),
    fig("cells_done", "cells done", Count, Run),
    fig("cells_total", "cells total", Count, Run),
    fig("cells_failed", "cells failed", Count, Run),
];

impl fmt::Display for RunKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunKind {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(RunKind::named(s))
    }
}

impl Serialize for RunKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RunKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(RunKind::named(&s))
    }
}

impl Default for RunKind {
    /// The empty kind of Hourglass results of run format 1.
    fn default() -> Self {
        RunKind::Unknown(String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_kind_reads_back_from_its_name() {
        for k in RunKind::KNOWN {
            assert_eq!(RunKind::named(k.as_str()), k);
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert_eq!(serde_json::from_str::<RunKind>(&json).unwrap(), k);
        }
    }

    #[test]
    fn an_unknown_kind_keeps_its_text() {
        let k: RunKind = serde_json::from_str("\"bench-tlb\"").unwrap();
        assert_eq!(k, RunKind::Unknown("bench-tlb".into()));
        assert_eq!(serde_json::to_string(&k).unwrap(), "\"bench-tlb\"");
        assert!(!k.is_bench() && !k.has_samples());
        assert_eq!(RunKind::default().as_str(), "");
    }
}
