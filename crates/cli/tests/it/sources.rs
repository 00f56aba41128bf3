//! Conventions of the source itself: outside the registry (`crates/sandglass/src/kind.rs`), no
//! non-test code names a run kind by a string literal. Code asks [`sandglass::RunKind`], so the
//! compiler, not `grep`, tells a contributor what a new probe must provide. And no module of a
//! crate imports one that imports it back, however far round: each crate's modules stand in
//! floors, each on those below it.

use std::collections::{BTreeMap, BTreeSet};
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

/// A crate's modules (`a::b` for `src/a/b.rs` or `src/a/b/mod.rs`, `""` for `lib.rs` and
/// `main.rs`) with the modules each one's non-test code names through `crate::` or `super::`.
/// A module naming one of its ancestors, or one of its descendants, is not counted: a folder's
/// `mod.rs` is the face of its files.
type Imports = BTreeMap<String, BTreeSet<String>>;

fn module_of(src: &Path, file: &Path) -> String {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The paths a line of Rust names from `crate::` or `super::`, with `use` groups expanded
/// (`use crate::{a::X, b::{self, Y}}` names `a::X`, `b`, `b::Y`); `super::` is given as
/// `super` segments, resolved by the caller.
fn named_paths(text: &str) -> Vec<Vec<String>> {
    fn ident(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '_'
    }
    // Expands a `use` tree starting at `s` (after its prefix), appending full paths to `out`.
    fn tree(prefix: &[String], s: &str, out: &mut Vec<Vec<String>>) {
        let s = s.trim();
        if let Some(inner) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        tree(prefix, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            tree(prefix, &inner[start..], out);
            return;
        }
        match s.split_once("::") {
            Some((head, rest)) => {
                let mut p = prefix.to_vec();
                p.push(head.trim().to_string());
                tree(&p, rest, out);
            }
            None => {
                let word = s.split_whitespace().next().unwrap_or("");
                let mut p = prefix.to_vec();
                if !word.is_empty() && word != "self" && word != "*" {
                    p.push(word.to_string());
                }
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    let flat = text;
    let mut i = 0;
    while i < flat.len() {
        let rest = &flat[i..];
        let root = ["crate::", "super::"].into_iter().find(|r| {
            rest.starts_with(r) && (i == 0 || !ident(flat[..i].chars().last().unwrap_or(' ')))
        });
        let Some(root) = root else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let first = vec![root.trim_end_matches(':').to_string()];
        let body = &rest[root.len()..];
        if body.starts_with('{') || flat[..i].trim_end().ends_with("use") {
            // A `use` item: to its `;`.
            let end = body.find(';').unwrap_or(body.len());
            tree(&first, &body[..end], &mut out);
            i += root.len() + end;
        } else {
            let end = body
                .find(|c: char| !(ident(c) || c == ':'))
                .unwrap_or(body.len());
            let mut p = first;
            p.extend(
                body[..end]
                    .split("::")
                    .filter(|w| !w.is_empty())
                    .map(str::to_string),
            );
            out.push(p);
            i += root.len() + end;
        }
    }
    out
}

fn crate_imports(src: &Path) -> Imports {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(src, f)).collect();
    let mut imports = Imports::new();
    for f in &files {
        let me = module_of(src, f);
        let text = std::fs::read_to_string(f).expect("source");
        let code: Vec<&str> = non_test_lines(&text).into_iter().map(|(_, l)| l).collect();
        let mut named = BTreeSet::new();
        for path in named_paths(&code.join("\n")) {
            // Where the path starts: the crate's root, or this module's parent for `super`.
            let mut base: Vec<String> = Vec::new();
            let mut segs = path.as_slice();
            if segs.first().is_some_and(|s| s == "super") {
                base = me
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                while segs.first().is_some_and(|s| s == "super") {
                    base.pop();
                    segs = &segs[1..];
                }
            } else {
                segs = &segs[1..];
            }
            base.extend(segs.iter().cloned());
            // The longest prefix that is a module.
            let target = (1..=base.len())
                .rev()
                .map(|k| base[..k].join("::"))
                .find(|m| modules.contains(m));
            if let Some(t) = target {
                let related = t == me
                    || me.starts_with(&format!("{t}::"))
                    || t.starts_with(&format!("{me}::"))
                    || me.is_empty();
                if !related {
                    named.insert(t);
                }
            }
        }
        imports.insert(me, named);
    }
    imports
}

/// The groups of two or more modules that import each other round (Tarjan's strongly connected
/// components), each sorted.
fn circles(imports: &Imports) -> Vec<Vec<String>> {
    struct Walk<'a> {
        imports: &'a Imports,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.imports.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    group.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        imports,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in imports.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let root = workspace();
    let mut found = Vec::new();
    let mut modules = 0;
    for krate in ["sandglass", "report", "cli", "http", "sys"] {
        let src = root.join("crates").join(krate).join("src");
        let imports = crate_imports(&src);
        modules += imports.len();
        for group in circles(&imports) {
            let arrows: Vec<String> = group
                .iter()
                .flat_map(|a| {
                    imports[a]
                        .iter()
                        .filter(|b| group.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            found.push(format!("{krate}: {}", arrows.join(", ")));
        }
    }
    assert!(modules > 100, "found only {modules} modules");
    assert!(
        found.is_empty(),
        "modules that import each other round; move what both need into the lower one:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_circle_check_sees_what_it_is_meant_to() {
    let paths = named_paths(
        "use crate::{a::X, b::{self, c::Y}};\nuse super::d;\nlet x = crate::e::f(1);\nlet y = supercrate::g;",
    );
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        [
            "crate::a::X",
            "crate::b",
            "crate::b::c::Y",
            "super::d",
            "crate::e::f"
        ]
    );
    let dir = tempfile::tempdir().expect("dir");
    let src = dir.path();
    std::fs::create_dir_all(src.join("store")).expect("dir");
    std::fs::write(
        src.join("lib.rs"),
        "pub mod units;\npub mod duration;\npub mod store;\n",
    )
    .expect("write");
    std::fs::write(src.join("units.rs"), "pub struct Nanos;\n").expect("write");
    std::fs::write(src.join("duration.rs"), "use crate::units::Nanos;\n").expect("write");
    std::fs::write(src.join("store/mod.rs"), "mod table;\nuse table::T;\n").expect("write");
    std::fs::write(
        src.join("store/table.rs"),
        "use super::Entry;\nuse crate::duration;\n",
    )
    .expect("write");
    assert!(circles(&crate_imports(src)).is_empty());
    // A planted way back: units names store's table, which names duration, which names units.
    std::fs::write(
        src.join("units.rs"),
        "pub struct Nanos;\nfn f() { crate::store::table::g() }\n#[cfg(test)]\nmod tests {\n    use crate::duration;\n}\n",
    )
    .expect("write");
    assert_eq!(
        circles(&crate_imports(src)),
        [vec!["duration", "store::table", "units"]]
    );
}
