//! Study files: a TOML matrix of measurements × loads × settings × repetitions, and the tables
//! to print from it.
//!
//! ```toml
//! [study]
//! name = "quick"
//! description = "timer latency and noise, idle and under load"
//! repetitions = 1
//!
//! [[measure]]
//! kind = "timer"          # timer, noise, hourglass or load
//! duration = "10s"
//! interval = "1ms"
//!
//! [[load]]
//! name = "idle"
//! profile = "idle"
//!
//! [[setting]]
//! name = "fifo"
//! policy = "f:95"
//!
//! [[table]]
//! title = "timer latency (µs)"
//! rows = "load"
//! columns = "metric"
//! values = ["p50_us", "p99_us", "max_us"]
//! ```
//!
//! Every error names the file and the line of the offending entry.

use crate::duration;
use crate::load::LoadError;
use crate::RunKind;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use thiserror::Error;
use toml::Spanned;

/// The `[study]` table.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub name: String,
    pub description: Option<String>,
    /// Repetitions of every cell (default 1).
    pub repetitions: Option<u32>,
    /// Usage pattern for the worst case per hour, day and week (see `analyze worst-case`).
    pub usage: Option<String>,
    /// How long loads run before a measurement starts (default 2 s).
    pub settle: Option<String>,
    /// `auto` (default): timer and noise cells record kernel events where this process can
    /// (root and tracefs), for the interrupt-level latency and the causes of their delays;
    /// `off`: never.
    pub trace: Option<String>,
}

/// One `[[measure]]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Measure {
    /// A label for tables (default: the kind).
    pub name: Option<String>,
    /// `timer`, `noise`, `hourglass` or `load`.
    #[schemars(with = "String")]
    pub kind: Spanned<RunKind>,
    #[schemars(with = "String")]
    pub duration: Spanned<String>,
    /// CPUs (timer, noise): a list such as `1-3`, or `all` for every CPU this process may use
    /// (default: every CPU but the main thread's).
    pub cpus: Option<String>,
    /// Interval (timer).
    pub interval: Option<String>,
    /// `absolute` or `resync` (timer).
    pub mode: Option<String>,
    /// Policy in rtla syntax (timer, noise).
    pub policy: Option<String>,
    /// Timer kind (timer).
    pub timer: Option<String>,
    /// Gap threshold (noise).
    pub threshold: Option<String>,
    /// `memmove:SIZE` (noise).
    pub workload: Option<String>,
    /// The Hourglass command line without `-d` and `-o` (hourglass).
    #[schemars(with = "Option<String>")]
    pub args: Option<Spanned<String>>,
    /// Names of the loads to pair with (default: every load).
    #[schemars(with = "Option<Vec<String>>")]
    pub loads: Option<Spanned<Vec<String>>>,
    /// Names of the settings to pair with (default: every setting for timer and noise, none
    /// for hourglass and load, whose command line or profile says everything).
    #[schemars(with = "Option<Vec<String>>")]
    pub settings: Option<Spanned<Vec<String>>>,
}

/// One `[[load]]`: a named load profile (`idle`, `cpu+disk`, `net`, `stress-ng:--cpu 1`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadEntry {
    pub name: String,
    #[schemars(with = "String")]
    pub profile: Spanned<String>,
}

/// One `[[setting]]`: overrides applied to every measurement of a cell.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Setting {
    pub name: String,
    #[schemars(with = "Option<String>")]
    pub policy: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub timer: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub interval: Option<Spanned<String>>,
}

/// One `[[table]]`: a pivot of cell metrics.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    pub title: String,
    /// What distinguishes rows: `load`, `setting`, `measure`, `repetition` or `metric`, or
    /// several joined by `+` (`measure+load`).
    #[schemars(with = "String")]
    pub rows: Spanned<String>,
    /// What distinguishes columns, in the same way.
    #[schemars(with = "String")]
    pub columns: Spanned<String>,
    /// Metric names; a name ending in `*` takes every metric with that prefix. With `metric`
    /// in neither rows nor columns, give exactly one.
    pub values: Vec<String>,
    /// Only cells of this measurement (its name or kind).
    pub measure: Option<String>,
    /// Only cells under these loads.
    pub loads: Option<Vec<String>>,
    /// Only cells with these settings.
    pub settings: Option<Vec<String>>,
    /// A sentence printed under the table.
    pub note: Option<String>,
}

/// A whole study file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StudyFile {
    pub study: Header,
    #[serde(default)]
    pub measure: Vec<Measure>,
    #[serde(default)]
    pub load: Vec<LoadEntry>,
    #[serde(default)]
    pub setting: Vec<Setting>,
    #[serde(default)]
    pub table: Vec<TableSpec>,
}

#[derive(Debug, Error, PartialEq)]
pub enum StudyFileError {
    #[error("{file}:{line}: {message}")]
    At {
        file: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{file}: {message}")]
    File { file: PathBuf, message: String },
}

/// A kind of run a study can measure.
fn measurable(kind: &RunKind) -> bool {
    matches!(
        kind,
        RunKind::Timer | RunKind::Noise | RunKind::Hourglass | RunKind::Load
    )
}

/// What rows and columns of a table can be split by.
pub const DIMENSIONS: [&str; 5] = ["load", "setting", "measure", "repetition", "metric"];

/// Splits `measure+load` into its dimensions.
pub fn dimensions(text: &str) -> Vec<&str> {
    text.split('+')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect()
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Why a timer kind cannot be used by a timer measurement.
#[derive(Debug, Error, PartialEq)]
enum TimerChoiceError {
    #[error("rtc is available in hourglass measurements only (-i RTC)")]
    RtcOnlyInHourglass,
    #[error("unknown timer '{0}': use hr, native, timerfd, posix or busy")]
    Unknown(String),
}

/// A timer kind a timer measurement can use.
fn check_timer(text: &str) -> Result<crate::model::TimerKind, TimerChoiceError> {
    match crate::model::TimerKind::parse(text) {
        Ok(crate::model::TimerKind::Rtc) => Err(TimerChoiceError::RtcOnlyInHourglass),
        Ok(k) => Ok(k),
        Err(_) => Err(TimerChoiceError::Unknown(text.to_string())),
    }
}

impl Measure {
    /// The label used in tables and cell names.
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.kind.get_ref().to_string())
    }
}

/// Parses and checks a study file. `check_profile` validates a load profile (the load module's
/// parser, [`crate::study::check_profile`]).
pub fn parse(
    file: &Path,
    text: &str,
    check_profile: &dyn Fn(&str) -> Result<(), LoadError>,
) -> Result<StudyFile, StudyFileError> {
    let s: StudyFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|r| line_of(text, r.start)).unwrap_or(1);
        StudyFileError::At {
            file: file.to_path_buf(),
            line,
            message: e.message().trim().to_string(),
        }
    })?;
    let at = |span: std::ops::Range<usize>, message: String| StudyFileError::At {
        file: file.to_path_buf(),
        line: line_of(text, span.start),
        message,
    };
    if s.measure.is_empty() {
        return Err(StudyFileError::File {
            file: file.to_path_buf(),
            message: "the study has no [[measure]] table, so its matrix is empty: add at least one"
                .into(),
        });
    }
    // Names and titles are printed in tables, on terminals and in Markdown: a control or
    // bidirectional-override character there would make the output say something else.
    let labels = std::iter::once(("[study] name", &s.study.name))
        .chain(
            s.study
                .description
                .iter()
                .map(|d| ("[study] description", d)),
        )
        .chain(
            s.measure
                .iter()
                .filter_map(|m| m.name.as_ref().map(|n| ("measure name", n))),
        )
        .chain(s.load.iter().map(|l| ("load name", &l.name)))
        .chain(s.setting.iter().map(|x| ("setting name", &x.name)))
        .chain(s.table.iter().map(|t| ("table title", &t.title)));
    for (what, text) in labels {
        if crate::printable::has_unsafe(text) {
            return Err(StudyFileError::File {
                file: file.to_path_buf(),
                message: format!(
                    "{what} '{}' has a control or bidirectional-override character: use printable text",
                    crate::printable::Printable(text)
                ),
            });
        }
    }
    if s.study.repetitions == Some(0) {
        return Err(StudyFileError::File {
            file: file.to_path_buf(),
            message: "[study] repetitions must be at least 1".into(),
        });
    }
    if let Some(settle) = &s.study.settle {
        duration::parse(settle).map_err(|e| StudyFileError::File {
            file: file.to_path_buf(),
            message: format!("[study] settle: {e}"),
        })?;
    }
    if let Some(t) = s
        .study
        .trace
        .as_deref()
        .filter(|t| !matches!(*t, "auto" | "off"))
    {
        return Err(StudyFileError::File {
            file: file.to_path_buf(),
            message: format!("[study] trace '{t}': use auto (record kernel events where root and tracefs allow) or off"),
        });
    }
    if let Some(u) = &s.study.usage {
        if crate::analysis::worst_case::preset(u).is_none() {
            return Err(StudyFileError::File {
                file: file.to_path_buf(),
                message: format!(
                    "[study] usage '{u}': use one of {}",
                    crate::analysis::worst_case::PRESETS
                        .iter()
                        .map(|p| p.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    for m in &s.measure {
        let kind = m.kind.get_ref();
        if !measurable(kind) {
            return Err(at(
                m.kind.span(),
                format!("unknown measurement '{kind}': use timer, noise, hourglass or load"),
            ));
        }
        let d = duration::parse(m.duration.get_ref())
            .map_err(|e| at(m.duration.span(), format!("duration: {e}")))?;
        if d.0 == 0 {
            return Err(at(
                m.duration.span(),
                "duration must be longer than zero".into(),
            ));
        }
        if *kind == RunKind::Hourglass && m.args.is_none() {
            return Err(at(
                m.kind.span(),
                "a hourglass measurement needs args, the Hourglass command line, for example args = \"-n 1 -t 0 -p RTHIGH -w LAT 1ms -i HR\"".into(),
            ));
        }
        if let Some(args) = &m.args {
            let words: Vec<String> = args
                .get_ref()
                .split_whitespace()
                .map(String::from)
                .collect();
            if words.iter().any(|w| w == "-d" || w == "-o") {
                return Err(at(
                    args.span(),
                    "args must not contain -d or -o: the study sets the duration and the run directory".into(),
                ));
            }
            crate::hourglass::cmdline::parse(&words)
                .map_err(|e| at(args.span(), format!("args: {e}")))?;
        }
        for (what, v) in [("interval", &m.interval), ("threshold", &m.threshold)] {
            if let Some(v) = v {
                duration::parse(v).map_err(|e| at(m.kind.span(), format!("{what}: {e}")))?;
            }
        }
        if let Some(p) = &m.policy {
            crate::policy::Policy::parse(p)
                .map_err(|e| at(m.kind.span(), format!("policy: {e}")))?;
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for l in &s.load {
        if !names.insert(l.name.clone()) {
            return Err(at(
                l.profile.span(),
                format!("load '{}' is named twice", l.name),
            ));
        }
        check_profile(l.profile.get_ref())
            .map_err(|e| at(l.profile.span(), format!("load '{}': {e}", l.name)))?;
    }
    for st in &s.setting {
        if let Some(p) = &st.policy {
            crate::policy::Policy::parse(p.get_ref())
                .map_err(|e| at(p.span(), format!("setting '{}': {e}", st.name)))?;
        }
        if let Some(t) = &st.timer {
            check_timer(t.get_ref())
                .map_err(|e| at(t.span(), format!("setting '{}': timer: {e}", st.name)))?;
        }
        if let Some(i) = &st.interval {
            duration::parse(i.get_ref())
                .map_err(|e| at(i.span(), format!("setting '{}': interval: {e}", st.name)))?;
        }
    }
    let load_names: Vec<&str> = s.load.iter().map(|l| l.name.as_str()).collect();
    let setting_names: Vec<&str> = s.setting.iter().map(|x| x.name.as_str()).collect();
    let mut setting_seen = std::collections::BTreeSet::new();
    for st in &s.setting {
        if !setting_seen.insert(st.name.clone()) {
            let span = st
                .policy
                .as_ref()
                .or(st.timer.as_ref())
                .or(st.interval.as_ref())
                .map(|x| x.span())
                .unwrap_or(0..0);
            return Err(at(span, format!("setting '{}' is named twice", st.name)));
        }
    }
    for m in &s.measure {
        for (what, list, names) in [
            ("loads", &m.loads, &load_names),
            ("settings", &m.settings, &setting_names),
        ] {
            if let Some(list) = list {
                for n in list.get_ref() {
                    if !names.contains(&n.as_str()) {
                        let known = if names.is_empty() {
                            "the study defines none".to_string()
                        } else {
                            format!("use one of {}", names.join(", "))
                        };
                        return Err(at(
                            list.span(),
                            format!("{what}: '{n}' is not defined in this study; {known}"),
                        ));
                    }
                }
            }
        }
        if *m.kind.get_ref() == RunKind::Load {
            let pairs = match &m.loads {
                Some(l) => !l.get_ref().is_empty(),
                None => !s.load.is_empty(),
            };
            if !pairs {
                return Err(at(
                    m.kind.span(),
                    "a load measurement runs the cell's load alone, so it needs at least one [[load]] to pair with".into(),
                ));
            }
        }
        if let Some(c) = &m.cpus {
            if c != "all" {
                crate::cpulist::CpuList::parse(c)
                    .map_err(|e| at(m.kind.span(), format!("cpus '{c}': {e}")))?;
            }
        }
        if let Some(w) = &m.workload {
            crate::noise::parse_workload(w)
                .map_err(|e| at(m.kind.span(), format!("workload: {e}")))?;
        }
        if let Some(mode) = &m.mode {
            if mode != "absolute" && mode != "resync" {
                return Err(at(
                    m.kind.span(),
                    format!("mode '{mode}': use absolute or resync"),
                ));
            }
        }
        if let Some(t) = &m.timer {
            check_timer(t).map_err(|e| at(m.kind.span(), format!("timer: {e}")))?;
        }
    }
    for t in &s.table {
        let mut used = Vec::new();
        for (what, v) in [("rows", &t.rows), ("columns", &t.columns)] {
            let dims = dimensions(v.get_ref());
            if dims.is_empty() {
                return Err(at(
                    v.span(),
                    format!("table '{}': {what} is empty", t.title),
                ));
            }
            for d in dims {
                if !DIMENSIONS.contains(&d) {
                    return Err(at(
                        v.span(),
                        format!(
                            "table '{}': {what} '{d}': use load, setting, measure, repetition or metric, or several joined by +",
                            t.title
                        ),
                    ));
                }
                if used.contains(&d) {
                    return Err(at(
                        v.span(),
                        format!(
                            "table '{}': '{d}' appears twice in rows and columns",
                            t.title
                        ),
                    ));
                }
                used.push(d);
            }
        }
        if t.values.is_empty() {
            return Err(at(
                t.rows.span(),
                format!(
                    "table '{}': values is empty; name at least one metric",
                    t.title
                ),
            ));
        }
        if !used.contains(&"metric") && t.values.len() != 1 {
            return Err(at(
                t.columns.span(),
                format!(
                    "table '{}': without metric in rows or columns give exactly one value",
                    t.title
                ),
            ));
        }
        for (what, list, names) in [
            ("loads", &t.loads, &load_names),
            ("settings", &t.settings, &setting_names),
        ] {
            for n in list.iter().flatten() {
                if !names.contains(&n.as_str()) {
                    return Err(at(
                        t.rows.span(),
                        format!(
                            "table '{}': {what}: '{n}' is not defined in this study",
                            t.title
                        ),
                    ));
                }
            }
        }
        if let Some(name) = &t.measure {
            if !s
                .measure
                .iter()
                .any(|m| &m.label() == name || m.kind.get_ref().as_str() == name)
            {
                return Err(at(
                    t.rows.span(),
                    format!(
                        "table '{}': measure '{name}' is not defined in this study",
                        t.title
                    ),
                ));
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(_: &str) -> Result<(), LoadError> {
        Ok(())
    }

    fn err(text: &str) -> String {
        parse(Path::new("s.toml"), text, &ok)
            .expect_err("must fail")
            .to_string()
    }

    const GOOD: &str = r#"
[study]
name = "t"
repetitions = 2

[[measure]]
kind = "timer"
duration = "2s"

[[measure]]
kind = "hourglass"
duration = "1s"
args = "-n 1 -t 0 -w LAT 1ms -i HR"

[[load]]
name = "idle"
profile = "idle"

[[setting]]
name = "fifo"
policy = "f:95"

[[table]]
title = "x"
rows = "load"
columns = "metric"
values = ["p99_us"]
"#;

    #[test]
    fn a_good_file_parses() {
        let s = parse(Path::new("s.toml"), GOOD, &ok).expect("parses");
        assert_eq!(s.measure.len(), 2);
        assert_eq!(s.study.repetitions, Some(2));
        assert_eq!(s.measure[1].label(), "hourglass");
    }

    #[test]
    fn errors_name_the_line() {
        let e = err(&GOOD.replace("kind = \"timer\"", "kind = \"stopwatch\""));
        assert!(
            e.starts_with("s.toml:7:") && e.contains("unknown measurement 'stopwatch'"),
            "{e}"
        );
        let e = err(&GOOD.replace("duration = \"2s\"", "duration = \"2\""));
        assert!(e.starts_with("s.toml:8:") && e.contains("no unit"), "{e}");
        let e = err(&GOOD.replace("repetitions = 2", "repetitions = 2\ncolour = 1"));
        assert!(e.starts_with("s.toml:5:") && e.contains("colour"), "{e}");
        let e = err(&GOOD.replace("rows = \"load\"", "rows = \"weather\""));
        assert!(e.contains("rows 'weather'"), "{e}");
        let e = err(&GOOD.replace("-w LAT 1ms", "-w SPIN"));
        assert!(e.contains("unknown workload"), "{e}");
        let e = err(&GOOD.replace("-n 1 -t 0", "-n 1 -d 5s -t 0"));
        assert!(e.contains("must not contain -d"), "{e}");
    }

    #[test]
    fn an_empty_matrix_is_refused() {
        let e = err("[study]\nname = \"empty\"\n");
        assert!(e.contains("matrix is empty"), "{e}");
    }

    #[test]
    fn trace_is_auto_or_off() {
        let file = |t: &str| {
            format!("[study]\nname = \"t\"\ntrace = \"{t}\"\n[[measure]]\nkind = \"timer\"\nduration = \"1s\"\n")
        };
        let e = err(&file("sometimes"));
        assert!(
            e.contains("[study] trace 'sometimes'") && e.contains("auto"),
            "{e}"
        );
        for t in ["auto", "off"] {
            assert!(parse(Path::new("t.toml"), &file(t), &ok).is_ok(), "{t}");
        }
    }

    #[test]
    fn load_profiles_are_checked_with_their_line() {
        let bad = |p: &str| -> Result<(), LoadError> {
            if p == "idle" {
                Ok(())
            } else {
                Err(LoadError::UnknownKind {
                    text: p.into(),
                    kind: p.into(),
                })
            }
        };
        let text = GOOD.replace("profile = \"idle\"", "profile = \"earthquake\"");
        let e = parse(Path::new("s.toml"), &text, &bad)
            .expect_err("bad load")
            .to_string();
        assert!(
            e.starts_with("s.toml:17:") && e.contains("unknown load 'earthquake'"),
            "{e}"
        );
    }
}
