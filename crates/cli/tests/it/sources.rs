//! Conventions of the source itself: outside the registry (`crates/sandglass/src/kind.rs`), no
//! non-test code names a run kind by a string literal. Code asks [`sandglass::RunKind`], so the
//! compiler, not `grep`, tells a contributor what a new probe must provide.

use std::path::{Path, PathBuf};

/// Files where a word that is also a run kind names something else, with what it names.
const NOT_RUN_KINDS: &[(&str, &str)] = &[
    (
        "crates/sandglass/src/causes/tracefs_raw.rs",
        "tracefs event systems (timer/hrtimer_start)",
    ),
    (
        "crates/sandglass/src/check/mod.rs",
        "kinds of cause (the timer interrupt)",
    ),
    (
        "crates/sandglass/src/study/table.rs",
        "a study table's dimensions (load, setting)",
    ),
    ("crates/cli/src/manual.rs", "subcommands' manual pages"),
];

/// The names of the kinds for which `bench` is `true` or `false`: the others' names are also
/// ordinary words (timer, load), the bench kinds' are spelt like nothing else.
fn kind_names(bench: bool) -> Vec<&'static str> {
    sandglass::RunKind::KNOWN
        .iter()
        .filter(|k| k.is_bench() == bench)
        .filter_map(sandglass::RunKind::known_name)
        .collect()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The lines of `text` that are compiled outside tests: a `#[cfg(test)]` module (to the end of
/// the file, where every file keeps it) and a single `#[cfg(test)]` item's first line are left
/// out, as are comments.
fn non_test_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, l)) = lines.next() {
        let t = l.trim_start();
        if t.starts_with("#[cfg(test)]") {
            match lines.peek() {
                Some((_, next)) if next.trim_start().starts_with("mod ") => break,
                _ => {
                    lines.next();
                    continue;
                }
            }
        }
        if t.starts_with("//") {
            continue;
        }
        out.push((i + 1, l));
    }
    out
}

/// Where `line` names a run kind by a literal: any `bench-…` kind, or one of the other kinds
/// compared, matched, or written as a `kind`.
fn names_a_kind(line: &str) -> bool {
    literals(line).into_iter().any(|(start, word, end)| {
        if word.starts_with("bench-") {
            return kind_names(true).contains(&word);
        }
        if !kind_names(false).contains(&word) {
            return false;
        }
        let before = line[..start].trim_end();
        let after = line[end..].trim_start();
        let arm = (before.is_empty() || before.ends_with('|'))
            && (after.starts_with("=>") || after.starts_with("if ") || after.starts_with('|'));
        arm || before.ends_with("==")
            || before.ends_with("!=")
            || after.starts_with("==")
            || after.starts_with("!=")
            || before.ends_with("kind:")
            || before.ends_with("\"kind\":")
            || line[..start].contains("matches!(")
    })
}

/// The string literals of `line` with no escapes or spaces in them: (start, text, end), start
/// and end outside the quotes.
fn literals(line: &str) -> Vec<(usize, &str, usize)> {
    let mut out = Vec::new();
    let quotes: Vec<usize> = line.match_indices('"').map(|(i, _)| i).collect();
    for pair in quotes.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let text = &line[a + 1..b];
        if !text.is_empty() && text.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
            out.push((a, text, b + 1));
        }
    }
    out
}

#[test]
fn no_string_literal_names_a_run_kind_outside_the_registry() {
    let root = workspace();
    let mut files = Vec::new();
    for krate in ["sandglass", "report", "cli", "http", "sys"] {
        rust_files(&root.join("crates").join(krate).join("src"), &mut files);
    }
    files.sort();
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&root)
            .expect("under the workspace")
            .to_string_lossy()
            .into_owned();
        if rel.ends_with("/kind.rs")
            || rel.ends_with("/tests.rs")
            || NOT_RUN_KINDS.iter().any(|(p, _)| *p == rel)
        {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("source");
        for (n, line) in non_test_lines(&text) {
            if names_a_kind(line) {
                found.push(format!("{rel}:{n}: {}", line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "these lines name a run kind by a string; use sandglass::RunKind:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_what_it_is_meant_to() {
    for bad in [
        r#"        "timer" => timer(r),"#,
        r#"        "timer" | "noise" => Ok(x),"#,
        r#"    if r.manifest.kind != "hourglass" {"#,
        r#"    if kind == "load" {"#,
        r#"    let ok = matches!(kind, "timer" | "noise");"#,
        r#"        kind: "study".into(),"#,
        r#"        "kind": "timer","#,
        r#"    Session::open("bench-copy", None, ctx)"#,
    ] {
        assert!(names_a_kind(bad), "missed: {bad}");
    }
    for good in [
        r#"        RunKind::Timer => timer(r),"#,
        r#"    let head = ["load", "CPUs", "throughput"];"#,
        r#"    ev.complete(CPU_PID, cpu, "timer", "wakeup", at, end, args)"#,
        r#"    #[arg(long = "load", value_name = "PROFILE")]"#,
    ] {
        assert!(!names_a_kind(good), "flagged: {good}");
    }
    let text = "fn a() {}\n// \"timer\" => x\n#[cfg(test)]\nfn b() { \"timer\" }\nfn c() {}\n#[cfg(test)]\nmod tests {\n    \"noise\"\n}\n";
    let kept: Vec<usize> = non_test_lines(text).iter().map(|(n, _)| *n).collect();
    assert_eq!(kept, [1, 5]);
}
