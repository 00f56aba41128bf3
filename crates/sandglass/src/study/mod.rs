//! Studies: a matrix of measurements × loads × settings × repetitions, run cell by cell into
//! run directories under one study directory, and summarised as tables.
//!
//! A study is a TOML file ([`file`]) or one of the built-in studies ([`BUILTIN`]). Its cells
//! ([`cells`]) run one after another ([`run`]); each cell's key figures ([`metrics`]) are kept
//! in the study's state file so that the tables ([`table`]) can be printed, and an interrupted
//! study resumed, without reading the runs again.

pub mod file;
pub mod metrics;
pub mod run;
pub mod table;

use crate::RunKind;
use file::{StudyFile, StudyFileError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A study that ships with sandglass.
pub struct Builtin {
    pub name: &'static str,
    pub summary: &'static str,
    pub text: &'static str,
}

/// The built-in studies, documented in `docs/studies.md`.
pub const BUILTIN: &[Builtin] = &[
    Builtin {
        name: "quick",
        summary: "timer latency and OS noise on every CPU, idle and under cpu+disk load (about a minute)",
        text: include_str!("builtin/quick.toml"),
    },
    Builtin {
        name: "mach",
        summary: "a 100 Hz output thread under five loads, timesharing against fixed priority (Dannenberg, Table 1)",
        text: include_str!("builtin/mach.toml"),
    },
    Builtin {
        name: "wdm",
        summary: "wakeup latency at three priority levels under four loads, worst per hour, day and week (Cota-Robles & Held, Table 3)",
        text: include_str!("builtin/wdm.toml"),
    },
    Builtin {
        name: "hourglass",
        summary: "dispatch latency under file and network load, and a 4 ms in 5 ms task against network throughput (Regehr, Tables 1-2)",
        text: include_str!("builtin/hourglass.toml"),
    },
    Builtin {
        name: "timers",
        summary: "1 ms periodic wakeups with each timer kind: interval statistics and the 100 us histogram (Jones & Regehr, Tables 1-2)",
        text: include_str!("builtin/timers.toml"),
    },
];

/// Checks a load profile with the load module's parser.
pub fn check_profile(text: &str) -> Result<(), crate::load::LoadError> {
    crate::load::parse_profile(text).map(|_| ())
}

/// Where a study came from: `{"builtin": NAME}` or `{"file": PATH}` in `study.json`.
/// Records written before the names were lower case (`{"Builtin": NAME}`) still read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A built-in study, by name.
    #[serde(alias = "Builtin")]
    Builtin(String),
    /// A file, as given.
    #[serde(alias = "File")]
    File(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Builtin(n) => write!(f, "built-in study '{n}'"),
            Source::File(p) => write!(f, "{p}"),
        }
    }
}

/// A study ready to run: its file, its text and where it came from.
#[derive(Clone, Debug)]
pub struct Study {
    pub file: StudyFile,
    pub text: String,
    pub source: Source,
}

/// Why a study could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Invalid(#[from] StudyFileError),
    #[error("cannot read the study file: {reason}")]
    Read { path: String, reason: String },
    #[error("'{0}' is neither a built-in study ({1}) nor a file; give a study file or one of those names")]
    Unknown(String, String),
}

/// The names of the built-in studies, joined for messages.
pub fn builtin_names() -> String {
    BUILTIN
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses study text from `source`.
pub fn parse(text: &str, source: Source) -> Result<Study, StudyFileError> {
    let name = match &source {
        Source::Builtin(n) => format!("<built-in {n}>"),
        Source::File(p) => p.clone(),
    };
    let file = file::parse(Path::new(&name), text, &check_profile)?;
    let count = cell_count(&file);
    if count > crate::bounded::STUDY_CELLS {
        return Err(StudyFileError::File {
            file: PathBuf::from(&name),
            message: format!(
                "the matrix has {count} cells (measures x loads x settings x repetitions), above the limit of {}; split it into smaller studies",
                crate::bounded::STUDY_CELLS
            ),
        });
    }
    Ok(Study {
        file,
        text: text.to_string(),
        source,
    })
}

/// Loads a built-in study by name, or a study file by path. A name that is an existing file is
/// read as the file.
pub fn load(name_or_path: &str) -> Result<Study, LoadError> {
    let path = Path::new(name_or_path);
    if path.exists() {
        let text =
            crate::bounded::read_input(path, "a study file").map_err(|e| LoadError::Read {
                path: name_or_path.to_string(),
                reason: e.to_string(),
            })?;
        return Ok(parse(&text, Source::File(name_or_path.to_string()))?);
    }
    if let Some(b) = BUILTIN.iter().find(|b| b.name == name_or_path) {
        return Ok(parse(b.text, Source::Builtin(b.name.to_string()))?);
    }
    if name_or_path.ends_with(".toml") || name_or_path.contains('/') {
        return Err(LoadError::Read {
            path: name_or_path.to_string(),
            reason: format!("{name_or_path}: no such file"),
        });
    }
    Err(LoadError::Unknown(
        name_or_path.to_string(),
        builtin_names(),
    ))
}

/// One cell of the matrix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cell {
    /// Position in running order, from 0.
    pub index: usize,
    /// Index into the study's measures, loads (`None`: no load) and settings (`None`: the
    /// measure as written).
    pub measure: usize,
    pub load: Option<usize>,
    pub setting: Option<usize>,
    /// From 1.
    pub repetition: u32,
    /// The cell's run directory name, such as `cell-003-timer-cpu-disk-fifo-r1`.
    pub id: String,
}

/// The labels a cell shows in tables.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Labels {
    pub measure: String,
    pub load: String,
    pub setting: String,
    pub repetition: String,
}

/// A cell's load label when it runs without one.
pub const NO_LOAD: &str = "idle";
/// A cell's setting label when no setting applies.
pub const NO_SETTING: &str = "default";

impl Cell {
    pub fn labels(&self, s: &StudyFile) -> Labels {
        Labels {
            measure: s.measure[self.measure].label(),
            load: self
                .load
                .map(|l| s.load[l].name.clone())
                .unwrap_or_else(|| NO_LOAD.to_string()),
            setting: self
                .setting
                .map(|x| s.setting[x].name.clone())
                .unwrap_or_else(|| NO_SETTING.to_string()),
            repetition: self.repetition.to_string(),
        }
    }
}

pub(crate) fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').chars().take(24).collect()
}

/// The cells of a study in running order: repetitions outermost, so that drift over the study
/// affects every combination alike, then measures, loads and settings.
/// How many cells [`cells`] makes of `s`, counted without making them (a matrix too large to
/// run is refused before any work).
pub fn cell_count(s: &StudyFile) -> u64 {
    let reps = u64::from(s.study.repetitions.unwrap_or(1));
    let per_repetition = s.measure.iter().fold(0u64, |sum, m| {
        let loads = match &m.loads {
            Some(names) => names
                .get_ref()
                .iter()
                .filter(|n| s.load.iter().any(|l| &l.name == *n))
                .count(),
            None => s.load.len(),
        }
        .max(1) as u64;
        let takes_settings = matches!(m.kind.get_ref(), RunKind::Timer | RunKind::Noise);
        let settings = match &m.settings {
            Some(names) => names
                .get_ref()
                .iter()
                .filter(|n| s.setting.iter().any(|x| &x.name == *n))
                .count(),
            None if !takes_settings => 1,
            None => s.setting.len(),
        }
        .max(1) as u64;
        sum.saturating_add(loads.saturating_mul(settings))
    });
    reps.saturating_mul(per_repetition)
}

pub fn cells(s: &StudyFile) -> Vec<Cell> {
    let reps = s.study.repetitions.unwrap_or(1);
    let mut out = Vec::new();
    for repetition in 1..=reps {
        for (mi, m) in s.measure.iter().enumerate() {
            let loads: Vec<Option<usize>> = match &m.loads {
                Some(names) => names
                    .get_ref()
                    .iter()
                    .filter_map(|n| s.load.iter().position(|l| &l.name == n))
                    .map(Some)
                    .collect(),
                None if s.load.is_empty() => vec![None],
                None => (0..s.load.len()).map(Some).collect(),
            };
            let takes_settings = matches!(m.kind.get_ref(), RunKind::Timer | RunKind::Noise);
            let settings: Vec<Option<usize>> = match &m.settings {
                Some(names) => names
                    .get_ref()
                    .iter()
                    .filter_map(|n| s.setting.iter().position(|x| &x.name == n))
                    .map(Some)
                    .collect(),
                None if s.setting.is_empty() || !takes_settings => vec![None],
                None => (0..s.setting.len()).map(Some).collect(),
            };
            let settings = if settings.is_empty() {
                vec![None]
            } else {
                settings
            };
            let loads = if loads.is_empty() { vec![None] } else { loads };
            for &load in &loads {
                for &setting in &settings {
                    let index = out.len();
                    let mut cell = Cell {
                        index,
                        measure: mi,
                        load,
                        setting,
                        repetition,
                        id: String::new(),
                    };
                    let l = cell.labels(s);
                    let mut id = format!(
                        "cell-{:03}-{}-{}",
                        index + 1,
                        slug(&l.measure),
                        slug(&l.load)
                    );
                    if setting.is_some() {
                        id.push('-');
                        id.push_str(&slug(&l.setting));
                    }
                    if reps > 1 {
                        id.push_str(&format!("-r{repetition}"));
                    }
                    cell.id = id;
                    out.push(cell);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_written_in_lower_case_and_read_in_either_case() {
        let b = Source::Builtin("quick".into());
        let written = serde_json::to_string(&b).expect("writes");
        assert_eq!(written, r#"{"builtin":"quick"}"#);
        for old in [r#"{"Builtin":"quick"}"#, written.as_str()] {
            assert_eq!(serde_json::from_str::<Source>(old).expect("reads"), b);
        }
        let f: Source = serde_json::from_str(r#"{"File":"a.toml"}"#).expect("reads");
        assert_eq!(f, Source::File("a.toml".into()));
    }

    fn study(text: &str) -> StudyFile {
        file::parse(Path::new("t.toml"), text, &|_| Ok(())).expect("parses")
    }

    const TWO_BY_TWO: &str = r#"
[study]
name = "t"
repetitions = 2

[[measure]]
kind = "timer"
duration = "1s"

[[measure]]
name = "alone"
kind = "load"
duration = "1s"
loads = ["net"]

[[load]]
name = "idle"
profile = "idle"

[[load]]
name = "net"
profile = "net"

[[setting]]
name = "fifo"
policy = "f:95"

[[setting]]
name = "other"
policy = "o:0"
"#;

    #[test]
    fn cells_cover_the_matrix_in_order() {
        let s = study(TWO_BY_TWO);
        let c = cells(&s);
        // Per repetition: timer × 2 loads × 2 settings, and the load alone under net only.
        assert_eq!(c.len(), 2 * (4 + 1));
        assert_eq!(cell_count(&s), c.len() as u64);
        assert_eq!(c[0].id, "cell-001-timer-idle-fifo-r1");
        assert_eq!(c[4].id, "cell-005-alone-net-r1");
        assert_eq!(c[5].repetition, 2);
        assert!(c.iter().enumerate().all(|(i, x)| x.index == i));
        let ids: std::collections::BTreeSet<_> = c.iter().map(|x| x.id.clone()).collect();
        assert_eq!(ids.len(), c.len(), "cell ids are unique");
    }

    #[test]
    fn a_study_without_loads_or_settings_has_one_cell_per_measure() {
        let s = study("[study]\nname = \"x\"\n[[measure]]\nkind = \"noise\"\nduration = \"1s\"\n");
        let c = cells(&s);
        assert_eq!(c.len(), 1);
        assert_eq!(cell_count(&s), 1);
        assert_eq!(c[0].id, "cell-001-noise-idle");
        assert_eq!(c[0].labels(&s).setting, NO_SETTING);
    }

    #[test]
    fn every_builtin_study_parses() {
        for b in BUILTIN {
            let s = load(b.name).unwrap_or_else(|e| panic!("{}: {e}", b.name));
            assert_eq!(s.file.study.name, b.name);
            assert!(!cells(&s.file).is_empty());
            assert!(!s.file.table.is_empty(), "{} prints a table", b.name);
        }
    }

    #[test]
    fn unknown_names_list_the_builtins() {
        let e = load("no-such-study").expect_err("unknown").to_string();
        assert!(e.contains("quick") && e.contains("timers"), "{e}");
        let e = load("missing.toml").expect_err("missing").to_string();
        assert!(e.contains("no such file"), "{e}");
    }
}
