//! Task sets and the TOML files that describe them.
//!
//! The fixed-priority and EDF analyses read one `[[task]]` table per periodic (or sporadic)
//! task, with the parameters of Liu & Layland's model extended by Tindell, Burns & Wellings
//! (1994): worst-case execution time `wcet` (C), `period` (T, the least time between releases),
//! relative `deadline` (D, default T), release `jitter` (J, default 0), `blocking` (B, the
//! longest time a lower-priority task can hold the CPU or a shared resource, default 0), and an
//! optional `priority` (a smaller number is a higher priority; with none anywhere the order is
//! deadline-monotonic, ties broken by file order). An optional `name` defaults to `taskN`, N
//! counted from 0 in file order as Hourglass numbers its threads.
//!
//! ```toml
//! [[task]]
//! name = "modem"
//! wcet = "3ms"
//! period = "8ms"
//!
//! [[task]]
//! name = "video"
//! wcet = "19ms"
//! period = "33ms"
//! jitter = "8ms"
//! ```
//!
//! The SCHED_DEADLINE admission file uses the kernel's names (`sched_setattr(2)`): `runtime`,
//! `period`, optional `deadline` (default the period) and `existing = true` for reservations
//! that are already in place.
//!
//! Durations are strings with a unit (`"3ms"`, `"250us"`) or bare integers, which mean
//! nanoseconds. Every error names the file and the line and says how to fix the entry.

use crate::duration;
use crate::units::Nanos;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use thiserror::Error;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// One task of a fixed-priority or EDF task set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Task {
    /// The task's name, unique in its set.
    pub name: String,
    /// Worst-case execution time C.
    pub wcet_ns: Nanos,
    /// Period T: the least time between two releases.
    pub period_ns: Nanos,
    /// Relative deadline D.
    pub deadline_ns: Nanos,
    /// Release jitter J: how long after its nominal arrival a job may become ready.
    pub jitter_ns: Nanos,
    /// Blocking B: the longest time one lower-priority job can delay this task.
    pub blocking_ns: Nanos,
    /// Priority; a smaller number is a higher priority.
    pub priority: Option<i64>,
}

impl Task {
    /// A task with an implicit deadline (D = T), no jitter, no blocking and no priority.
    pub fn new(name: impl Into<String>, wcet: Nanos, period: Nanos) -> Task {
        Task {
            name: name.into(),
            wcet_ns: wcet,
            period_ns: period,
            deadline_ns: period,
            jitter_ns: Nanos::ZERO,
            blocking_ns: Nanos::ZERO,
            priority: None,
        }
    }

    /// The same task with relative deadline `d`.
    pub fn with_deadline(mut self, d: Nanos) -> Task {
        self.deadline_ns = d;
        self
    }

    /// The same task with release jitter `j`.
    pub fn with_jitter(mut self, j: Nanos) -> Task {
        self.jitter_ns = j;
        self
    }

    /// The same task with blocking `b`.
    pub fn with_blocking(mut self, b: Nanos) -> Task {
        self.blocking_ns = b;
        self
    }

    /// The same task with priority `p` (smaller is higher).
    pub fn with_priority(mut self, p: i64) -> Task {
        self.priority = Some(p);
        self
    }
}

/// One SCHED_DEADLINE reservation request, in `sched_setattr(2)` terms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct DeadlineTask {
    /// The task's name, unique in its file.
    pub name: String,
    /// `sched_runtime`.
    pub runtime_ns: Nanos,
    /// `sched_deadline` (the period when not given).
    pub deadline_ns: Nanos,
    /// `sched_period`.
    pub period_ns: Nanos,
    /// Already admitted: its bandwidth is in use before any new request is decided.
    pub existing: bool,
}

/// Why a task file was refused. Every message names the file and, where there is one, the line.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TaskFileError {
    /// The text is not valid TOML.
    #[error("{file}:{line}: not valid TOML: {message}")]
    Syntax {
        /// The file.
        file: String,
        /// The line of the error.
        line: usize,
        /// The TOML parser's description.
        message: String,
    },
    /// More tasks than an analysis takes.
    #[error(
        "{file}: {count} tasks, above the limit of {limit} tasks in one set; analyse a smaller set"
    )]
    TooMany {
        /// The file.
        file: String,
        /// The tasks it has.
        count: usize,
        /// The most allowed.
        limit: usize,
    },
    /// There is no `[[task]]` table.
    #[error("{file}: no [[task]] tables: describe each task in its own [[task]] table, for example\n{example}")]
    NoTasks {
        /// The file.
        file: String,
        /// A minimal task table.
        example: &'static str,
    },
    /// `task` is not an array of tables.
    #[error("{file}:{line}: 'task' must be an array of tables: write each task under its own [[task]] header")]
    NotTaskTables {
        /// The file.
        file: String,
        /// The line of `task`.
        line: usize,
    },
    /// A key the format does not know (often a misspelling).
    #[error("{file}:{line}: unknown key '{key}' {place}: the keys are {known}")]
    UnknownKey {
        /// The file.
        file: String,
        /// The line of the key.
        line: usize,
        /// The key as written.
        key: String,
        /// Where it was: at the top level or in a task.
        place: &'static str,
        /// The keys that are accepted there.
        known: &'static str,
    },
    /// A required key is absent.
    #[error("{file}:{line}: the task has no '{key}': add a line such as {example}")]
    Missing {
        /// The file.
        file: String,
        /// The line of the task's `[[task]]` header.
        line: usize,
        /// The missing key.
        key: &'static str,
        /// An example line.
        example: &'static str,
    },
    /// A value of the wrong type or form.
    #[error("{file}:{line}: '{key}' {reason}")]
    BadValue {
        /// The file.
        file: String,
        /// The line of the value.
        line: usize,
        /// The key.
        key: String,
        /// What is wrong and how to write it.
        reason: String,
    },
    /// A period of zero.
    #[error("{file}:{line}: 'period' is zero: a task needs a period of at least 1 ns, such as period = \"10ms\"")]
    ZeroPeriod {
        /// The file.
        file: String,
        /// The line of `period`.
        line: usize,
    },
    /// An execution time of zero.
    #[error("{file}:{line}: '{key}' is zero: give the longest time one job runs, such as {key} = \"1ms\"")]
    ZeroExecution {
        /// The file.
        file: String,
        /// The line of the key.
        line: usize,
        /// `wcet` or `runtime`.
        key: &'static str,
    },
    /// Two tasks share a name.
    #[error("{file}:{line}: the name '{name}' is already used by the task at line {first}: give each task its own name")]
    DuplicateName {
        /// The file.
        file: String,
        /// The line of the second use.
        line: usize,
        /// The name.
        name: String,
        /// The line of the first use.
        first: usize,
    },
    /// Some tasks have a priority and some do not.
    #[error("{file}:{line}: this task has no 'priority' but the task at line {other} has one: give every task a priority, or none for deadline-monotonic order")]
    MixedPriorities {
        /// The file.
        file: String,
        /// The line of the task without a priority.
        line: usize,
        /// The line of a task with one.
        other: usize,
    },
}

impl TaskFileError {
    /// The line the error is about, when there is one.
    pub fn line(&self) -> Option<usize> {
        match self {
            TaskFileError::NoTasks { .. } | TaskFileError::TooMany { .. } => None,
            TaskFileError::Syntax { line, .. }
            | TaskFileError::NotTaskTables { line, .. }
            | TaskFileError::UnknownKey { line, .. }
            | TaskFileError::Missing { line, .. }
            | TaskFileError::BadValue { line, .. }
            | TaskFileError::ZeroPeriod { line, .. }
            | TaskFileError::ZeroExecution { line, .. }
            | TaskFileError::DuplicateName { line, .. }
            | TaskFileError::MixedPriorities { line, .. } => Some(*line),
        }
    }
}

const TASK_KEYS: &str = "name, wcet, period, deadline, jitter, blocking, priority";
const ADMISSION_KEYS: &str = "name, runtime, period, deadline, existing";
const TASK_EXAMPLE: &str = "[[task]]\nwcet = \"3ms\"\nperiod = \"8ms\"";
const ADMISSION_EXAMPLE: &str = "[[task]]\nruntime = \"2ms\"\nperiod = \"10ms\"";

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The entries of one `[[task]]` table, ordered by position in the file.
struct RawTask<'a> {
    /// Line of the `[[task]]` header.
    line: usize,
    entries: Vec<(String, usize, &'a DeValue<'a>)>,
}

impl RawTask<'_> {
    fn get(&self, key: &str) -> Option<(usize, &DeValue<'_>)> {
        self.entries.iter().find(|e| e.0 == key).map(|e| (e.1, e.2))
    }
}

struct Ctx<'t> {
    file: String,
    text: &'t str,
}

impl Ctx<'_> {
    fn line(&self, span: std::ops::Range<usize>) -> usize {
        line_of(self.text, span.start)
    }

    fn bad(&self, line: usize, key: &str, reason: impl Into<String>) -> TaskFileError {
        TaskFileError::BadValue {
            file: self.file.clone(),
            line,
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    fn duration(&self, line: usize, key: &str, v: &DeValue<'_>) -> Result<Nanos, TaskFileError> {
        match v {
            DeValue::String(s) => duration::parse_or_ns(s).map_err(|e| {
                self.bad(
                    line,
                    key,
                    format!("is not a duration: {e}"),
                )
            }),
            DeValue::Integer(i) => {
                let digits: String = i.as_str().chars().filter(|&c| c != '_').collect();
                let digits = digits.strip_prefix('+').unwrap_or(&digits);
                match u64::from_str_radix(digits, i.radix()) {
                    Ok(ns) => Ok(Nanos(ns)),
                    Err(_) if digits.starts_with('-') => Err(self.bad(
                        line,
                        key,
                        "is negative: durations are zero or more",
                    )),
                    Err(_) => Err(self.bad(
                        line,
                        key,
                        "is too large: the limit is about 584 years of nanoseconds",
                    )),
                }
            }
            DeValue::Float(_) => Err(self.bad(
                line,
                key,
                "is a bare decimal number: write a duration with a unit, such as \"1.5ms\", or whole nanoseconds",
            )),
            other => Err(self.bad(
                line,
                key,
                format!(
                    "is {}: write a duration such as \"3ms\" or whole nanoseconds",
                    kind(other)
                ),
            )),
        }
    }
}

/// "an integer", "a string": the TOML type of a value with its article.
fn kind(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Splits a document into its `[[task]]` tables, refusing any other top-level key.
fn raw_tasks<'a>(
    ctx: &Ctx<'_>,
    doc: &'a Spanned<DeTable<'a>>,
    known: &'static str,
    example: &'static str,
) -> Result<Vec<RawTask<'a>>, TaskFileError> {
    let mut top: Vec<(&Spanned<std::borrow::Cow<'a, str>>, &Spanned<DeValue<'a>>)> =
        doc.get_ref().iter().collect();
    top.sort_by_key(|(k, _)| k.span().start);
    let mut tasks = Vec::new();
    for (k, v) in top {
        let line = ctx.line(k.span());
        if k.get_ref() != "task" {
            return Err(TaskFileError::UnknownKey {
                file: ctx.file.clone(),
                line,
                key: k.get_ref().to_string(),
                place: "at the top level",
                known: "[[task]] tables only",
            });
        }
        let DeValue::Array(items) = v.get_ref() else {
            return Err(TaskFileError::NotTaskTables {
                file: ctx.file.clone(),
                line,
            });
        };
        if items.len() > crate::bounded::TASKS {
            return Err(TaskFileError::TooMany {
                file: ctx.file.clone(),
                count: items.len(),
                limit: crate::bounded::TASKS,
            });
        }
        for item in items.iter() {
            let DeValue::Table(table) = item.get_ref() else {
                return Err(TaskFileError::NotTaskTables {
                    file: ctx.file.clone(),
                    line: ctx.line(item.span()),
                });
            };
            let mut entries: Vec<(String, usize, &DeValue<'a>)> = table
                .iter()
                .map(|(k, v)| (k.get_ref().to_string(), ctx.line(k.span()), v.get_ref()))
                .collect();
            entries.sort_by_key(|e| e.1);
            tasks.push(RawTask {
                line: ctx.line(item.span()),
                entries,
            });
        }
    }
    if tasks.is_empty() {
        return Err(TaskFileError::NoTasks {
            file: ctx.file.clone(),
            example,
        });
    }
    for t in &tasks {
        for (key, line, _) in &t.entries {
            if !known.split(", ").any(|k| k == key) {
                return Err(TaskFileError::UnknownKey {
                    file: ctx.file.clone(),
                    line: *line,
                    key: key.clone(),
                    place: "in [[task]]",
                    known,
                });
            }
        }
    }
    Ok(tasks)
}

fn parse_doc<'t>(ctx: &Ctx<'t>) -> Result<Spanned<DeTable<'t>>, TaskFileError> {
    DeTable::parse(ctx.text).map_err(|e| TaskFileError::Syntax {
        file: ctx.file.clone(),
        line: e.span().map(|s| line_of(ctx.text, s.start)).unwrap_or(1),
        message: e.message().to_string(),
    })
}

fn name_of(ctx: &Ctx<'_>, raw: &RawTask<'_>, index: usize) -> Result<String, TaskFileError> {
    match raw.get("name") {
        None => Ok(format!("task{index}")),
        Some((line, DeValue::String(s))) if crate::printable::has_unsafe(s) => Err(ctx.bad(
            line,
            "name",
            format!(
                "is '{}', with a control or bidirectional-override character: name the task with printable text",
                crate::printable::Printable(s)
            ),
        )),
        Some((_, DeValue::String(s))) if !s.trim().is_empty() => Ok(s.to_string()),
        Some((line, DeValue::String(_))) => Err(ctx.bad(
            line,
            "name",
            "is empty: give the task a name or leave the key out",
        )),
        Some((line, other)) => Err(ctx.bad(
            line,
            "name",
            format!(
                "is {}: write it as a string, such as name = \"audio\"",
                kind(other)
            ),
        )),
    }
}

fn required(
    ctx: &Ctx<'_>,
    raw: &RawTask<'_>,
    key: &'static str,
    example: &'static str,
) -> Result<(usize, Nanos), TaskFileError> {
    let (line, v) = raw.get(key).ok_or_else(|| TaskFileError::Missing {
        file: ctx.file.clone(),
        line: raw.line,
        key,
        example,
    })?;
    Ok((line, ctx.duration(line, key, v)?))
}

fn optional(
    ctx: &Ctx<'_>,
    raw: &RawTask<'_>,
    key: &str,
) -> Result<Option<(usize, Nanos)>, TaskFileError> {
    match raw.get(key) {
        None => Ok(None),
        Some((line, v)) => Ok(Some((line, ctx.duration(line, key, v)?))),
    }
}

fn check_unique(
    ctx: &Ctx<'_>,
    seen: &mut HashMap<String, usize>,
    name: &str,
    line: usize,
) -> Result<(), TaskFileError> {
    if let Some(&first) = seen.get(name) {
        return Err(TaskFileError::DuplicateName {
            file: ctx.file.clone(),
            line,
            name: name.to_string(),
            first,
        });
    }
    seen.insert(name.to_string(), line);
    Ok(())
}

/// Parses the task file of the fixed-priority and EDF analyses. `file` is used in messages.
pub fn parse_task_file(file: &Path, text: &str) -> Result<Vec<Task>, TaskFileError> {
    let ctx = Ctx {
        file: file.display().to_string(),
        text,
    };
    let doc = parse_doc(&ctx)?;
    let raws = raw_tasks(&ctx, &doc, TASK_KEYS, TASK_EXAMPLE)?;
    let mut tasks = Vec::with_capacity(raws.len());
    let mut names = HashMap::new();
    let mut with_priority: Option<usize> = None;
    let mut without_priority: Option<usize> = None;
    for (index, raw) in raws.iter().enumerate() {
        let name = name_of(&ctx, raw, index)?;
        let name_line = raw.get("name").map(|g| g.0).unwrap_or(raw.line);
        let (wcet_line, wcet) = required(&ctx, raw, "wcet", "wcet = \"3ms\"")?;
        let (period_line, period) = required(&ctx, raw, "period", "period = \"8ms\"")?;
        let deadline = optional(&ctx, raw, "deadline")?
            .map(|d| d.1)
            .unwrap_or(period);
        let jitter = optional(&ctx, raw, "jitter")?
            .map(|d| d.1)
            .unwrap_or(Nanos::ZERO);
        let blocking = optional(&ctx, raw, "blocking")?
            .map(|d| d.1)
            .unwrap_or(Nanos::ZERO);
        let priority = match raw.get("priority") {
            None => None,
            Some((line, DeValue::Integer(i))) => {
                let digits: String = i.as_str().chars().filter(|&c| c != '_').collect();
                Some(i64::from_str_radix(&digits, i.radix()).map_err(|_| {
                    ctx.bad(
                        line,
                        "priority",
                        "does not fit in 64 bits: use a smaller number",
                    )
                })?)
            }
            Some((line, other)) => {
                return Err(ctx.bad(
                    line,
                    "priority",
                    format!(
                        "is {}: write a whole number, such as priority = 1 (smaller is higher)",
                        kind(other)
                    ),
                ))
            }
        };
        if period == Nanos::ZERO {
            return Err(TaskFileError::ZeroPeriod {
                file: ctx.file.clone(),
                line: period_line,
            });
        }
        if wcet == Nanos::ZERO {
            return Err(TaskFileError::ZeroExecution {
                file: ctx.file.clone(),
                line: wcet_line,
                key: "wcet",
            });
        }
        check_unique(&ctx, &mut names, &name, name_line)?;
        match priority {
            Some(_) => {
                with_priority.get_or_insert(raw.line);
            }
            None => {
                without_priority.get_or_insert(raw.line);
            }
        }
        tasks.push(Task {
            name,
            wcet_ns: wcet,
            period_ns: period,
            deadline_ns: deadline,
            jitter_ns: jitter,
            blocking_ns: blocking,
            priority,
        });
    }
    if let (Some(line), Some(other)) = (without_priority, with_priority) {
        return Err(TaskFileError::MixedPriorities {
            file: ctx.file.clone(),
            line,
            other,
        });
    }
    Ok(tasks)
}

/// Parses the SCHED_DEADLINE admission file. `file` is used in messages.
///
/// The file is refused only for what makes it unreadable (syntax, unknown keys, missing or
/// malformed values, a zero period, a zero runtime, duplicate names); parameters that the kernel
/// itself would refuse (runtime above deadline, deadline above period, a period outside the
/// sysctl limits) are reported by the admission analysis as the kernel's `EINVAL`.
pub fn parse_admission_file(file: &Path, text: &str) -> Result<Vec<DeadlineTask>, TaskFileError> {
    let ctx = Ctx {
        file: file.display().to_string(),
        text,
    };
    let doc = parse_doc(&ctx)?;
    let raws = raw_tasks(&ctx, &doc, ADMISSION_KEYS, ADMISSION_EXAMPLE)?;
    let mut tasks = Vec::with_capacity(raws.len());
    let mut names = HashMap::new();
    for (index, raw) in raws.iter().enumerate() {
        let name = name_of(&ctx, raw, index)?;
        let name_line = raw.get("name").map(|g| g.0).unwrap_or(raw.line);
        let (runtime_line, runtime) = required(&ctx, raw, "runtime", "runtime = \"2ms\"")?;
        let (period_line, period) = required(&ctx, raw, "period", "period = \"10ms\"")?;
        let deadline = optional(&ctx, raw, "deadline")?
            .map(|d| d.1)
            .unwrap_or(period);
        let existing = match raw.get("existing") {
            None => false,
            Some((_, DeValue::Boolean(b))) => *b,
            Some((line, other)) => {
                return Err(ctx.bad(
                    line,
                    "existing",
                    format!(
                        "is {}: write existing = true or existing = false",
                        kind(other)
                    ),
                ))
            }
        };
        if period == Nanos::ZERO {
            return Err(TaskFileError::ZeroPeriod {
                file: ctx.file.clone(),
                line: period_line,
            });
        }
        if runtime == Nanos::ZERO {
            return Err(TaskFileError::ZeroExecution {
                file: ctx.file.clone(),
                line: runtime_line,
                key: "runtime",
            });
        }
        check_unique(&ctx, &mut names, &name, name_line)?;
        tasks.push(DeadlineTask {
            name,
            runtime_ns: runtime,
            deadline_ns: deadline,
            period_ns: period,
            existing,
        });
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Task>, TaskFileError> {
        parse_task_file(Path::new("set.toml"), text)
    }

    /// The example files say what they hold: a task set that needs more than one CPU says it
    /// is unschedulable, and gives its utilisation; the reservations give theirs.
    #[test]
    fn example_files_state_their_utilisation() {
        let tasks = include_str!("../../../../examples/tasks.toml");
        let set = parse_task_file(Path::new("examples/tasks.toml"), tasks).expect("parses");
        let u: f64 = set
            .iter()
            .map(|t| t.wcet_ns.0 as f64 / t.period_ns.0 as f64)
            .sum();
        assert!(u > 1.0, "{u}");
        assert!(tasks.contains("Unschedulable on purpose"), "{tasks}");
        assert!(
            tasks.contains(&format!("{:.0} % of one CPU", u * 100.0)),
            "{u}"
        );
        let res = include_str!("../../../../examples/reservations.toml");
        let set =
            parse_admission_file(Path::new("examples/reservations.toml"), res).expect("parses");
        let u: f64 = set
            .iter()
            .map(|t| t.runtime_ns.0 as f64 / t.period_ns.0 as f64)
            .sum();
        assert!(
            res.contains(&format!("{:.0} % of one CPU", u * 100.0)),
            "{u}"
        );
        let fp = include_str!("../../../cli/tests/data/hourglass-5.5.toml");
        let set = parse_task_file(Path::new("hourglass-5.5.toml"), fp).expect("parses");
        let u: f64 = set
            .iter()
            .map(|t| t.wcet_ns.0 as f64 / t.period_ns.0 as f64)
            .sum();
        assert!(tasks.contains(&format!("{:.0} %) is", u * 100.0)), "{u}");
    }

    fn err(text: &str) -> (TaskFileError, String) {
        let e = parse(text).expect_err("the file should be refused");
        let m = e.to_string();
        (e, m)
    }

    #[test]
    fn a_name_with_a_control_character_is_refused() {
        for name in ["\\u001b[31mred", "a\\u202eb", "tab\\there"] {
            let text = format!("[[task]]\nname = \"{name}\"\nwcet = \"1ms\"\nperiod = \"10ms\"\n");
            let e = parse_task_file(Path::new("t.toml"), &text).expect_err(name);
            let m = e.to_string();
            assert!(m.starts_with("t.toml:2: 'name' is '"), "{m}");
            assert!(m.contains("printable text"), "{m}");
            assert!(!crate::printable::has_unsafe(&m), "{m:?}");
        }
    }

    #[test]
    fn hourglass_set_parses_with_units_and_bare_nanoseconds() {
        let text = "# Regehr 2002, §5.5\n[[task]]\nname = \"modem\"\nwcet = \"3ms\"\nperiod = 8000000\n\n[[task]]\nwcet = \"19ms\"\nperiod = \"33ms\"\njitter = \"8ms\"\n";
        let tasks = parse(text).expect("valid file");
        assert_eq!(
            tasks,
            vec![
                Task::new("modem", Nanos::from_millis(3), Nanos::from_millis(8)),
                Task::new("task1", Nanos::from_millis(19), Nanos::from_millis(33))
                    .with_jitter(Nanos::from_millis(8)),
            ]
        );
    }

    #[test]
    fn all_keys() {
        let text = "[[task]]\nname = \"a\"\nwcet = \"1ms\"\nperiod = \"10ms\"\ndeadline = \"5ms\"\njitter = \"2us\"\nblocking = 1_000\npriority = -3\n";
        let t = &parse(text).expect("valid")[0];
        assert_eq!(t.deadline_ns, Nanos::from_millis(5));
        assert_eq!(t.jitter_ns, Nanos(2_000));
        assert_eq!(t.blocking_ns, Nanos(1_000));
        assert_eq!(t.priority, Some(-3));
    }

    #[test]
    fn missing_wcet_names_file_and_task_line() {
        let (e, m) = err("[[task]]\nwcet = \"1ms\"\nperiod = \"2ms\"\n\n[[task]]\nname = \"b\"\nperiod = \"5ms\"\n");
        assert!(
            matches!(
                e,
                TaskFileError::Missing {
                    key: "wcet",
                    line: 5,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(m.starts_with("set.toml:5:"), "{m}");
        assert!(m.contains("wcet = \"3ms\""), "{m}");
    }

    /// A wcet above the deadline, or above the period, is a task the analyses answer (its
    /// response time and its miss), not a malformed file.
    #[test]
    fn wcet_above_deadline_or_period_is_read() {
        let tasks = parse_task_file(
            Path::new("set.toml"),
            "[[task]]\nname = \"a\"\nperiod = \"10ms\"\ndeadline = \"4ms\"\nwcet = \"5ms\"\n[[task]]\nname = \"b\"\nwcet = \"11ms\"\nperiod = \"10ms\"\n",
        )
        .unwrap();
        assert_eq!(tasks[0].wcet_ns, Nanos::from_millis(5));
        assert_eq!(tasks[0].deadline_ns, Nanos::from_millis(4));
        assert_eq!(tasks[1].wcet_ns, Nanos::from_millis(11));
    }

    #[test]
    fn zero_period_names_the_period_line() {
        let (e, m) = err("[[task]]\nwcet = \"1ms\"\n\nperiod = 0\n");
        assert!(
            matches!(e, TaskFileError::ZeroPeriod { line: 4, .. }),
            "{e:?}"
        );
        assert!(
            m.starts_with("set.toml:4:") && m.contains("at least 1 ns"),
            "{m}"
        );
    }

    #[test]
    fn duplicate_name_names_both_lines() {
        let (e, m) = err("[[task]]\nname = \"a\"\nwcet = 1\nperiod = 2\n[[task]]\nname = \"a\"\nwcet = 1\nperiod = 2\n");
        assert!(
            matches!(
                e,
                TaskFileError::DuplicateName {
                    line: 6,
                    first: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(m.starts_with("set.toml:6:") && m.contains("line 2"), "{m}");
    }

    #[test]
    fn unknown_key_names_the_key_and_the_accepted_ones() {
        let (e, m) = err("[[task]]\nwcet = 1\nperiod = 2\nperoid = 3\n");
        assert!(
            matches!(e, TaskFileError::UnknownKey { line: 4, .. }),
            "{e:?}"
        );
        assert!(
            m.starts_with("set.toml:4:") && m.contains("'peroid'") && m.contains(TASK_KEYS),
            "{m}"
        );
        let (e, _) = err("title = \"x\"\n[[task]]\nwcet = 1\nperiod = 2\n");
        assert!(
            matches!(e, TaskFileError::UnknownKey { line: 1, .. }),
            "{e:?}"
        );
    }

    #[test]
    fn other_errors() {
        let (e, m) = err("[[task]]\nwcet = \n");
        assert!(matches!(e, TaskFileError::Syntax { line: 2, .. }), "{e:?}");
        assert!(m.starts_with("set.toml:2:"), "{m}");
        let (e, _) = err("# nothing\n");
        assert!(matches!(e, TaskFileError::NoTasks { .. }));
        let (e, m) = err("[[task]]\nwcet = \"3parsecs\"\nperiod = 2\n");
        assert!(
            matches!(e, TaskFileError::BadValue { line: 2, .. }),
            "{e:?}"
        );
        assert!(m.contains("unknown unit"), "{m}");
        let (e, m) = err("[[task]]\nwcet = 1.5\nperiod = 2\n");
        assert!(m.contains("unit"), "{m} {e:?}");
        let (e, _) = err("[[task]]\nwcet = -1\nperiod = 2\n");
        assert!(
            matches!(e, TaskFileError::BadValue { line: 2, .. }),
            "{e:?}"
        );
        let (e, _) = err("[[task]]\nwcet = 0\nperiod = 2\n");
        assert!(
            matches!(e, TaskFileError::ZeroExecution { line: 2, .. }),
            "{e:?}"
        );
        let (e, _) =
            err("[[task]]\nwcet = 1\nperiod = 2\npriority = 1\n[[task]]\nwcet = 1\nperiod = 2\n");
        assert!(
            matches!(
                e,
                TaskFileError::MixedPriorities {
                    line: 5,
                    other: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        let (e, _) = err("task = 3\n");
        assert!(
            matches!(e, TaskFileError::NotTaskTables { line: 1, .. }),
            "{e:?}"
        );
        let (e, _) = err("[[task]]\nname = 3\nwcet = 1\nperiod = 2\n");
        assert!(
            matches!(e, TaskFileError::BadValue { line: 2, .. }),
            "{e:?}"
        );
    }

    #[test]
    fn admission_file() {
        let text = "[[task]]\nname = \"old\"\nruntime = \"1ms\"\nperiod = \"4ms\"\nexisting = true\n[[task]]\nruntime = 500000\ndeadline = \"2ms\"\nperiod = \"5ms\"\n";
        let t = parse_admission_file(Path::new("dl.toml"), text).expect("valid");
        assert_eq!(t.len(), 2);
        assert!(t[0].existing && !t[1].existing);
        assert_eq!(t[0].deadline_ns, Nanos::from_millis(4));
        assert_eq!(t[1].name, "task1");
        assert_eq!(t[1].deadline_ns, Nanos::from_millis(2));
        let e = parse_admission_file(
            Path::new("dl.toml"),
            "[[task]]\nruntime = 1\nperiod = 2\nwcet = 1\n",
        )
        .expect_err("wcet is not an admission key");
        assert!(e.to_string().starts_with("dl.toml:4:") && e.to_string().contains(ADMISSION_KEYS));
        let e = parse_admission_file(Path::new("dl.toml"), "[[task]]\nperiod = 2\n")
            .expect_err("no runtime");
        assert!(
            matches!(
                e,
                TaskFileError::Missing {
                    key: "runtime",
                    line: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = parse_admission_file(
            Path::new("dl.toml"),
            "[[task]]\nruntime = 1\nperiod = 2\nexisting = \"yes\"\n",
        )
        .expect_err("bad bool");
        assert!(
            matches!(e, TaskFileError::BadValue { line: 4, .. }),
            "{e:?}"
        );
    }
}
