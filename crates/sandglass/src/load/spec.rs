//! The load spec syntax: `KIND[:INTENSITY][@CPUS]`, `stress-ng:ARGS`, `cmd:COMMAND`, and
//! profiles of specs joined by `+`.
//!
//! The compact syntax follows rtla's policy strings (`f:95`) and the kernel's CPU lists
//! (`0-3,6`): `disk:2@1` is two disk workers on CPU 1. An external load takes the rest of its
//! text as its arguments or command, `+` included, so in a profile it comes last.

use super::LoadError;
use crate::cpulist::CpuList;
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// The most workers one load may start.
pub const MAX_INTENSITY: u32 = 256;

/// What a load does.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LoadKind {
    /// An arithmetic loop.
    Cpu,
    /// Random read-modify-write of cache lines over a working set larger than the last-level
    /// cache.
    Memory,
    /// Write, fsync, read back and truncate a file under the temporary directory.
    Disk,
    /// A TCP stream over loopback.
    Net,
    /// A storm of short processes: fork, exec `true`, wait.
    Compile,
    /// Pairs of threads handing a token back and forth.
    Sched,
    /// Short sleeps, 50 µs to 1 ms.
    Timers,
    /// `stress-ng` with these arguments (as typed, split like a shell would at start).
    StressNg(String),
    /// `sh -c` with this command.
    Command(String),
}

/// Every built-in kind, in the order the documentation lists them.
pub const BUILT_IN: [LoadKind; 7] = [
    LoadKind::Cpu,
    LoadKind::Memory,
    LoadKind::Disk,
    LoadKind::Net,
    LoadKind::Compile,
    LoadKind::Sched,
    LoadKind::Timers,
];

impl LoadKind {
    /// The kind's name as a spec writes it: `cpu`, ..., `stress-ng`, `cmd`.
    pub fn name(&self) -> &'static str {
        match self {
            LoadKind::Cpu => "cpu",
            LoadKind::Memory => "memory",
            LoadKind::Disk => "disk",
            LoadKind::Net => "net",
            LoadKind::Compile => "compile",
            LoadKind::Sched => "sched",
            LoadKind::Timers => "timers",
            LoadKind::StressNg(_) => "stress-ng",
            LoadKind::Command(_) => "cmd",
        }
    }

    /// What one unit of the load's work is (`""` when the load cannot say).
    pub fn unit(&self) -> &'static str {
        match self {
            LoadKind::Cpu => "iterations",
            LoadKind::Memory | LoadKind::Disk | LoadKind::Net => "bytes",
            LoadKind::Compile => "processes",
            LoadKind::Sched => "handoffs",
            LoadKind::Timers => "wakeups",
            LoadKind::StressNg(_) => "bogo ops",
            LoadKind::Command(_) => "",
        }
    }

    /// True for the loads that run as threads inside sandglass.
    pub fn is_built_in(&self) -> bool {
        !matches!(self, LoadKind::StressNg(_) | LoadKind::Command(_))
    }

    fn from_name(name: &str) -> Option<LoadKind> {
        BUILT_IN
            .iter()
            .find(|k| k.name().eq_ignore_ascii_case(name))
            .cloned()
    }
}

/// One load: what it does, how many workers, on which CPUs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(into = "String", try_from = "String")]
pub struct LoadSpec {
    pub kind: LoadKind,
    /// Workers (threads, thread pairs or stream pairs, by kind); 0, the default, means one per
    /// CPU of the load's set, as stress-ng's `--cpu 0`. External loads ignore it.
    pub intensity: u32,
    /// CPUs to run on; `None` means the run's default CPUs.
    pub cpus: Option<CpuList>,
}

/// `text` without `prefix`, compared ignoring ASCII case.
fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

impl LoadSpec {
    /// A built-in load with one worker per CPU on the default CPUs.
    pub fn new(kind: LoadKind) -> LoadSpec {
        LoadSpec {
            kind,
            intensity: 0,
            cpus: None,
        }
    }

    /// `sh -c COMMAND` as a load (what `cmd:COMMAND` parses to), for options that take the
    /// command alone. The command is trimmed; an empty one does nothing.
    pub fn command(command: &str) -> LoadSpec {
        LoadSpec::new(LoadKind::Command(command.trim().to_string()))
    }

    /// "KIND[:INTENSITY][@CPUS]" such as "cpu", "cpu:2", "disk:1@1", "memory:2@0-1";
    /// "stress-ng:ARGS" (ARGS is the rest, split like a shell would) and "cmd:COMMAND" (run with
    /// sh -c).
    pub fn parse(text: &str) -> Result<LoadSpec, LoadError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(LoadError::EmptySpec);
        }
        if let Some(args) = strip_prefix_ci(t, "stress-ng:") {
            let args = args.trim();
            if args.is_empty() {
                return Err(LoadError::EmptyArgs { text: t.into() });
            }
            split_args(args).map_err(|source| LoadError::BadArgs {
                text: t.into(),
                source,
            })?;
            return Ok(LoadSpec::new(LoadKind::StressNg(args.into())));
        }
        if let Some(command) = strip_prefix_ci(t, "cmd:") {
            let command = command.trim();
            if command.is_empty() {
                return Err(LoadError::EmptyCommand { text: t.into() });
            }
            return Ok(LoadSpec::new(LoadKind::Command(command.into())));
        }
        let (head, cpus) = match t.split_once('@') {
            Some((h, c)) => (h, Some(c)),
            None => (t, None),
        };
        let (name, intensity) = match head.split_once(':') {
            Some((n, i)) => (n.trim(), Some(i.trim())),
            None => (head.trim(), None),
        };
        let kind = match LoadKind::from_name(name) {
            Some(k) => k,
            None => {
                let lower = name.to_ascii_lowercase();
                return Err(match lower.as_str() {
                    "idle" | "none" => LoadError::IdleInProfile { text: t.into() },
                    "cmd" => LoadError::EmptyCommand { text: t.into() },
                    "stress-ng" => LoadError::EmptyArgs { text: t.into() },
                    _ => LoadError::UnknownKind {
                        text: t.into(),
                        kind: name.into(),
                    },
                });
            }
        };
        let intensity = match intensity {
            None => 0,
            Some(v) => parse_intensity(v).ok_or_else(|| LoadError::BadIntensity {
                text: t.into(),
                value: v.into(),
                kind: kind.name(),
            })?,
        };
        let cpus = cpus
            .map(|c| {
                CpuList::parse(c).map_err(|source| LoadError::BadCpus {
                    text: t.into(),
                    cpus: c.trim().into(),
                    source,
                })
            })
            .transpose()?;
        Ok(LoadSpec {
            kind,
            intensity,
            cpus,
        })
    }
}

fn parse_intensity(v: &str) -> Option<u32> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok().filter(|n| (1..=MAX_INTENSITY).contains(n))
}

/// Prints what [`LoadSpec::parse`] reads back: the intensity only when given, the CPUs only
/// when given.
impl fmt::Display for LoadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            LoadKind::StressNg(args) => return write!(f, "stress-ng:{args}"),
            LoadKind::Command(command) => return write!(f, "cmd:{command}"),
            k => f.write_str(k.name())?,
        }
        if self.intensity != 0 {
            write!(f, ":{}", self.intensity)?;
        }
        if let Some(c) = &self.cpus {
            write!(f, "@{c}")?;
        }
        Ok(())
    }
}

impl From<LoadSpec> for String {
    fn from(s: LoadSpec) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for LoadSpec {
    type Error = LoadError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        LoadSpec::parse(&s)
    }
}

/// A profile: load specs joined by '+', such as "cpu+disk"; "idle" or "none" is the empty
/// profile. An external load (`stress-ng:`, `cmd:`) takes the rest of the text, so it comes
/// last: `cpu+cmd:make -j4`.
pub fn parse_profile(text: &str) -> Result<Vec<LoadSpec>, LoadError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(LoadError::EmptyProfile);
    }
    if t.eq_ignore_ascii_case("idle") || t.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut specs = Vec::new();
    let mut rest = t;
    loop {
        let piece = rest.trim_start();
        if strip_prefix_ci(piece, "stress-ng:").is_some()
            || strip_prefix_ci(piece, "cmd:").is_some()
        {
            specs.push(LoadSpec::parse(piece)?);
            return Ok(specs);
        }
        let (head, tail) = match rest.split_once('+') {
            Some((h, tl)) => (h, Some(tl)),
            None => (rest, None),
        };
        if head.trim().is_empty() {
            return Err(LoadError::EmptyLoad { profile: t.into() });
        }
        specs.push(LoadSpec::parse(head)?);
        match tail {
            Some(tl) if tl.trim().is_empty() => {
                return Err(LoadError::EmptyLoad { profile: t.into() })
            }
            Some(tl) => rest = tl,
            None => return Ok(specs),
        }
    }
}

/// Prints a profile as [`parse_profile`] reads it back (`idle` when empty), provided that an
/// external load, if any, is the last.
pub fn format_profile(specs: &[LoadSpec]) -> String {
    if specs.is_empty() {
        return "idle".into();
    }
    specs
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join("+")
}

/// Why [`split_args`] refused a text: a quote or an escape that is not finished.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SplitArgsError {
    #[error("a single quote is not closed: add the closing '")]
    UnclosedSingleQuote,
    #[error("a double quote is not closed: add the closing \"")]
    UnclosedDoubleQuote,
    #[error("the text ends with a backslash: remove it or escape it as \\\\")]
    TrailingBackslash,
}

/// Splits `text` into words as a POSIX shell would, without expansions: blanks separate words;
/// single quotes keep everything literally; double quotes keep everything but `\"`, `\\`, `\$`
/// and `` \` ``; a backslash outside quotes keeps the next character.
pub fn split_args(text: &str) -> Result<Vec<String>, SplitArgsError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err(SplitArgsError::UnclosedSingleQuote),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\' | '$' | '`')) => word.push(ch),
                            Some(ch) => {
                                word.push('\\');
                                word.push(ch);
                            }
                            None => return Err(SplitArgsError::UnclosedDoubleQuote),
                        },
                        Some(ch) => word.push(ch),
                        None => return Err(SplitArgsError::UnclosedDoubleQuote),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(ch) => word.push(ch),
                    None => return Err(SplitArgsError::TrailingBackslash),
                }
            }
            ch => {
                in_word = true;
                word.push(ch);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec(text: &str) -> LoadSpec {
        LoadSpec::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn error(text: &str) -> String {
        match LoadSpec::parse(text) {
            Ok(s) => panic!("{text} parsed as {s:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn good_specs() {
        assert_eq!(spec("cpu"), LoadSpec::new(LoadKind::Cpu));
        let s = spec("cpu:2");
        assert_eq!((s.kind, s.intensity, s.cpus), (LoadKind::Cpu, 2, None));
        let s = spec("disk:1@1");
        assert_eq!(s.kind, LoadKind::Disk);
        assert_eq!(s.intensity, 1);
        assert_eq!(s.to_string(), "disk:1@1");
        // No intensity: one worker per CPU, decided at start.
        assert_eq!(spec("disk@1").intensity, 0);
        assert_eq!(spec("disk@1").to_string(), "disk@1");
        assert_eq!(s.cpus.map(|c| c.to_vec()), Some(vec![1]));
        let s = spec(" memory:2@0-1 ");
        assert_eq!((s.kind.clone(), s.intensity), (LoadKind::Memory, 2));
        assert_eq!(s.to_string(), "memory:2@0-1");
        assert_eq!(spec("NET@0,1").to_string(), "net@0-1");
        assert_eq!(spec("timers:256").intensity, 256);
        for k in BUILT_IN {
            assert_eq!(spec(k.name()).kind, k);
        }
    }

    #[test]
    fn external_specs_take_the_rest() {
        let s = spec("stress-ng:--cpu 2 --vm 1 --vm-bytes '64M'");
        assert_eq!(
            s.kind,
            LoadKind::StressNg("--cpu 2 --vm 1 --vm-bytes '64M'".into())
        );
        assert_eq!(s.to_string(), "stress-ng:--cpu 2 --vm 1 --vm-bytes '64M'");
        let s = spec("cmd: make -j4 all@x+y ");
        assert_eq!(s.kind, LoadKind::Command("make -j4 all@x+y".into()));
        assert_eq!(s.intensity, 0);
        assert_eq!(s.cpus, None);
        assert_eq!(s.to_string(), "cmd:make -j4 all@x+y");
    }

    #[test]
    fn bad_specs_name_the_text_and_the_fix() {
        let e = error("spin:2");
        assert!(e.contains("unknown load 'spin' in 'spin:2'"), "{e}");
        assert!(e.contains("use cpu, memory, disk"), "{e}");
        for bad in [
            "cpu:0",
            "cpu:x",
            "cpu:",
            "cpu:-1",
            "cpu:257",
            "cpu:99999999999",
        ] {
            let e = error(bad);
            assert!(e.contains("intensity"), "{bad}: {e}");
            assert!(e.contains(&format!("'{bad}'")), "{bad}: {e}");
            assert!(e.contains("from 1 to 256"), "{bad}: {e}");
        }
        let e = error("cpu@x");
        assert!(e.contains("CPU list 'x' in 'cpu@x'"), "{e}");
        assert!(e.contains("examples"), "{e}");
        let e = error("cpu@");
        assert!(e.contains("empty CPU list"), "{e}");
        let e = error("cpu@3-1");
        assert!(e.contains("backwards"), "{e}");
        for bad in ["cmd:", "cmd:   ", "cmd"] {
            let e = error(bad);
            assert!(e.contains("no command"), "{bad}: {e}");
            assert!(e.contains("cmd:make"), "{bad}: {e}");
        }
        let e = error("stress-ng:");
        assert!(e.contains("stress-ng:--cpu 2"), "{e}");
        let e = error("stress-ng:--cpu '2");
        assert!(e.contains("not closed"), "{e}");
        let e = error("idle");
        assert!(e.contains("alone"), "{e}");
        assert!(error("").contains("empty load"));
    }

    #[test]
    fn profiles() {
        assert_eq!(parse_profile("idle").map(|p| p.len()).ok(), Some(0));
        assert_eq!(parse_profile(" None ").map(|p| p.len()).ok(), Some(0));
        let p = parse_profile("cpu+disk:2@1").expect("profile");
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].intensity, 2);
        assert_eq!(format_profile(&p), "cpu+disk:2@1");
        let p = parse_profile("cpu + cmd:echo a+b").expect("profile");
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].kind, LoadKind::Command("echo a+b".into()));
        assert_eq!(format_profile(&[]), "idle");
    }

    #[test]
    fn bad_profiles() {
        let msg = |t: &str| match parse_profile(t) {
            Ok(p) => panic!("{t} parsed as {p:?}"),
            Err(e) => e.to_string(),
        };
        assert!(msg("").contains("empty load profile"));
        assert!(msg("cpu++disk").contains("'cpu++disk'"));
        assert!(msg("cpu+").contains("extra '+'"));
        assert!(msg("+cpu").contains("extra '+'"));
        assert!(msg("cpu+bogus").contains("unknown load 'bogus'"));
        assert!(msg("idle+cpu").contains("alone"));
        assert!(msg("cpu+cmd:").contains("no command"));
    }

    #[test]
    fn shell_splitting() {
        let w = |t: &str| split_args(t).expect(t);
        assert_eq!(w("--cpu 2  --vm 1"), ["--cpu", "2", "--vm", "1"]);
        assert_eq!(
            w("a 'b c' \"d \\\" e\" f\\ g"),
            ["a", "b c", "d \" e", "f g"]
        );
        assert_eq!(w("'' x"), ["", "x"]);
        assert_eq!(w("\"a\\nb\""), ["a\\nb"]);
        assert_eq!(
            split_args("'open"),
            Err(SplitArgsError::UnclosedSingleQuote)
        );
        assert_eq!(
            split_args("\"open"),
            Err(SplitArgsError::UnclosedDoubleQuote)
        );
        assert_eq!(split_args("end\\"), Err(SplitArgsError::TrailingBackslash));
        // The messages say how to fix the text.
        assert_eq!(
            SplitArgsError::UnclosedSingleQuote.to_string(),
            "a single quote is not closed: add the closing '"
        );
        assert_eq!(
            SplitArgsError::UnclosedDoubleQuote.to_string(),
            "a double quote is not closed: add the closing \""
        );
        assert_eq!(
            SplitArgsError::TrailingBackslash.to_string(),
            "the text ends with a backslash: remove it or escape it as \\\\"
        );
    }

    #[test]
    fn specs_serialize_as_their_text() {
        let s = spec("memory:2@0-1");
        let json = serde_json::to_string(&s).expect("json");
        assert_eq!(json, "\"memory:2@0-1\"");
        let back: LoadSpec = serde_json::from_str(&json).expect("back");
        assert_eq!(back, s);
        assert!(serde_json::from_str::<LoadSpec>("\"spin\"").is_err());
    }

    fn any_spec() -> impl Strategy<Value = LoadSpec> {
        let builtin = (
            0..BUILT_IN.len(),
            0..=MAX_INTENSITY,
            proptest::option::of(proptest::collection::btree_set(0usize..64, 1..6)),
        )
            .prop_map(|(k, intensity, cpus)| LoadSpec {
                kind: BUILT_IN[k].clone(),
                intensity,
                cpus: cpus.and_then(CpuList::from_cpus),
            });
        let stress =
            "--[a-z]{1,8}( [0-9a-z]{1,4}){0,3}".prop_map(|a| LoadSpec::new(LoadKind::StressNg(a)));
        let command = "[a-z][a-z0-9 +@:;|&$'\"-]{0,20}[a-z0-9]"
            .prop_map(|c| LoadSpec::new(LoadKind::Command(c)));
        prop_oneof![4 => builtin, 1 => stress, 1 => command]
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,40}") {
            let _ = LoadSpec::parse(&s);
            let _ = parse_profile(&s);
        }

        #[test]
        fn parse_never_panics_near_the_syntax(s in "[a-z:@0-9,+ '\"\\-]{0,24}") {
            let _ = LoadSpec::parse(&s);
            let _ = parse_profile(&s);
        }

        #[test]
        fn display_round_trips(s in any_spec()) {
            prop_assert_eq!(LoadSpec::parse(&s.to_string()).ok(), Some(s));
        }

        #[test]
        fn profiles_round_trip(
            mut specs in proptest::collection::vec(any_spec(), 0..5),
        ) {
            // An external load takes the rest of the profile, so only the last may be one.
            let n = specs.len();
            specs.retain(|s| s.kind.is_built_in());
            if n > specs.len() {
                specs.push(LoadSpec::new(LoadKind::Command("sleep 1 + 2".into())));
            }
            prop_assert_eq!(parse_profile(&format_profile(&specs)).ok(), Some(specs));
        }
    }
}
