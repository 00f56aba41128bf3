//! A probe is a type. Each kind of measurement that writes a run directory (timer, noise,
//! Hourglass, each bench kind) is a zero-sized type implementing [`Probe`]: the kind of run it
//! writes, what it measures with (its config), what it concludes (its result), how it measures,
//! and the key figures the catalog keeps from a stored result. The compiler tells a new probe
//! what it must provide, and [`crate::registry`] lists them: one line per probe.
//!
//! Each probe declares its key figures ([`Probe::FIGURES`]: key, label, unit and how CPUs
//! combine; [`RunKind::key_figures`] finds them by kind); reading a stored result, it only says
//! what each CPU (or the run) measured, and [`Figures`] combines the CPUs' values as the
//! declaration says.

use crate::kind::{KeyFigure, OverCpus};
#[cfg(feature = "linux")]
use crate::runner::{Observer, RunContext, RunError};
use crate::RunKind;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// A kind of measurement.
pub trait Probe {
    /// The kind of run it writes.
    const KIND: RunKind;
    /// What it measures with: its flags, as typed values.
    type Config;
    /// What it concludes: the result it prints and stores (`summary.json` or `result.json`),
    /// whose JSON Schema `sandglass schema` prints.
    type Result: Serialize + schemars::JsonSchema;
    /// The key figures the catalog keeps for its runs, in the order people read them: key,
    /// label, unit, and how the CPUs' values combine.
    const FIGURES: &'static [KeyFigure];

    /// Measures as `config` says, in a new run directory, and concludes.
    #[cfg(feature = "linux")]
    fn run(
        config: &Self::Config,
        ctx: &RunContext,
        obs: &mut dyn Observer,
    ) -> Result<Self::Result, RunError>;

    /// Adds to `f` the key figures of a stored result, read as JSON so that a result written
    /// by an older version still gives what it has (a figure it lacks is left out).
    fn figures(summary: &Value, f: &mut Figures);
}

/// The key figures of one run, as a probe adds them: each value is one CPU's (or thread's,
/// or the run's), and [`Figures::finish`] combines a key's values as its kind declares
/// ([`KeyFigure::over_cpus`]; a key its kind does not declare is a figure of the run).
pub struct Figures {
    declared: &'static [KeyFigure],
    values: Vec<(String, Vec<f64>)>,
    texts: Vec<(String, String)>,
}

impl Figures {
    /// No figures yet, for a run whose kind declares `declared` ([`Probe::FIGURES`]).
    pub fn new(declared: &'static [KeyFigure]) -> Figures {
        Figures {
            declared,
            values: Vec::new(),
            texts: Vec::new(),
        }
    }

    /// One value of `key`: a CPU's, or the run's for a figure of the whole run. Nothing when
    /// `v` is `None` or not finite (the result did not have it).
    pub fn add(&mut self, key: &str, v: Option<f64>) {
        let Some(v) = v.filter(|v| v.is_finite()) else {
            return;
        };
        match self.values.iter_mut().find(|(k, _)| k == key) {
            Some((_, vs)) => vs.push(v),
            None => self.values.push((key.to_string(), vec![v])),
        }
    }

    /// A text figure of the whole run (a load profile).
    pub fn text(&mut self, key: &str, v: String) {
        self.texts.push((key.to_string(), v));
    }

    /// The figures by key, each key's values combined: the largest for the worst CPU's, the
    /// sum for a count over CPUs, the one value for a figure of the run. Integral values are
    /// written as integers.
    pub fn finish(self) -> Map<String, Value> {
        let mut out = Map::new();
        for (key, vs) in self.values {
            let over = self
                .declared
                .iter()
                .find(|f| f.key == key)
                .map_or(OverCpus::Run, |f| f.over_cpus);
            let x = match over {
                OverCpus::Worst => vs.iter().copied().fold(f64::MIN, f64::max),
                OverCpus::Sum => vs.iter().sum(),
                OverCpus::Run => vs[vs.len() - 1],
            };
            let value = if x.fract() == 0.0 && x.abs() < 9.0e15 {
                json!(x as i64)
            } else {
                json!(x)
            };
            out.insert(key, value);
        }
        for (key, text) in self.texts {
            out.insert(key, json!(text));
        }
        out
    }
}

/// A JSON number as `f64`.
pub fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// A JSON array's items (none for anything else).
pub fn array(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}
