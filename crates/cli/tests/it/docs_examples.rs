//! Every shell example of README.md and docs/*.md runs as written on this machine.
//!
//! The test reads each ```sh block, takes the lines that start with `sandglass` (and the quick
//! start's `cargo run --release --`, run through the built binary), joins continued lines, adds
//! every code span of a README table row that is a `sandglass` command (the comparison), and
//! runs them in order, one working directory per document, through `sh -c` so that redirections
//! work. It changes only what a reader would change:
//!
//! - durations (`-d 60s`) become 1 s, a `hourglass` without one gets `-d 1s`, a monitor's
//!   `--segment` becomes 2 s, and studies run with `--duration-scale 0.01`;
//! - placeholders name real runs made first: `RUN` (a timer run), `STUDY` (made when first
//!   named), `HOURGLASS_RUN`, `BASELINE` / `baseline-run` and `NEW` / `new-run` (two timer runs),
//!   `DIR` (a copy of a run directory outside the runs directory, or a fresh output directory),
//!   and run ids written as `20261122-1015` (the timer run; for `runs rm`, a run made to be
//!   deleted; after `--study`, the study);
//! - `study --resume [DIR]` finds a study stopped by Ctrl-C, made first (in DIR when given).
//!
//! A command passes when it exits 0 (or, for a `compare` with a gate, 2: a gate crossed). A
//! block preceded by `<!-- not run: REASON -->` is skipped with its reason. The examples set
//! real-time priorities, so the tests run as root and skip otherwise. Six tests run them (the
//! guide in three parts, README.md, docs/studies.md, the other documents: [`Part`]), each with
//! fixtures of its own, beside each other: they assert only exit codes, so they share the
//! machine ([`common::share`]).

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One example command, where it was found.
#[derive(Debug)]
struct Example {
    doc: String,
    line: usize,
    command: String,
}

/// The documents whose examples run: README.md and every docs/*.md.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

/// The command of a line without its trailing comment (`  # ...`).
fn without_comment(line: &str) -> &str {
    match line.find(" #") {
        Some(i) if !line[..i].contains('"') && !line[..i].contains('\'') => line[..i].trim_end(),
        _ => line.trim_end(),
    }
}

/// The examples of one document, and the blocks it marks as not run with their reasons.
fn examples(doc: &Path, root: &Path) -> (Vec<Example>, Vec<String>) {
    let text = std::fs::read_to_string(doc).unwrap();
    let name = doc.strip_prefix(root).unwrap().display().to_string();
    let (mut out, mut skipped) = (Vec::new(), Vec::new());
    let mut in_sh = false;
    let mut not_run: Option<String> = None;
    let mut pending: Option<(usize, String)> = None;
    let mut heading = String::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if !in_sh && trimmed.starts_with("## ") {
            heading = trimmed.to_string();
        }
        if !in_sh
            && trimmed.starts_with('|')
            && name == "README.md"
            && heading.starts_with("## sandglass beside")
        {
            // A row of the README's comparison: each code span that is a sandglass command runs
            // (other tables name commands or show synopses).
            for (k, span) in trimmed.split('`').enumerate() {
                if k % 2 == 1 && span.starts_with("sandglass ") {
                    out.push(Example {
                        doc: name.clone(),
                        line: i + 1,
                        command: span.to_string(),
                    });
                }
            }
            continue;
        }
        if !in_sh {
            if let Some(r) = trimmed
                .strip_prefix("<!-- not run:")
                .and_then(|r| r.strip_suffix("-->"))
            {
                not_run = Some(r.trim().to_string());
            } else if trimmed == "```sh" {
                in_sh = true;
            } else if !trimmed.is_empty() {
                not_run = None;
            }
            continue;
        }
        if trimmed == "```" {
            in_sh = false;
            not_run = None;
            continue;
        }
        if let Some((start, mut cmd)) = pending.take() {
            let part = without_comment(trimmed);
            match part.strip_suffix('\\') {
                Some(p) => {
                    cmd.push_str(p);
                    pending = Some((start, cmd));
                }
                None => {
                    cmd.push_str(part);
                    out.push(Example {
                        doc: name.clone(),
                        line: start,
                        command: cmd,
                    });
                }
            }
            continue;
        }
        let cmd = if let Some(rest) = trimmed.strip_prefix("cargo run --release -- ") {
            format!("sandglass {rest}")
        } else if trimmed.starts_with("sandglass ") {
            trimmed.to_string()
        } else {
            continue;
        };
        if let Some(reason) = &not_run {
            skipped.push(format!("{name}:{}: {cmd} ({reason})", i + 1));
            continue;
        }
        let cmd = without_comment(&cmd).to_string();
        match cmd.strip_suffix('\\') {
            Some(c) => pending = Some((i + 1, c.to_string())),
            None => out.push(Example {
                doc: name.clone(),
                line: i + 1,
                command: cmd,
            }),
        }
    }
    (out, skipped)
}

/// The runs the placeholders stand for.
struct Fixtures {
    runs: PathBuf,
    timer: PathBuf,
    timer_id: String,
    /// Made on first use ([`Fixtures::study_id`]): few documents name a study, and a study is
    /// the costliest fixture.
    study: std::cell::OnceCell<String>,
    hourglass_id: String,
    baseline: PathBuf,
    baseline_id: String,
    new: PathBuf,
    new_id: String,
    import: PathBuf,
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sandglass"))
}

impl Fixtures {
    /// The id of a study in the runs directory, made the first time it is asked for.
    fn study_id(&self) -> String {
        self.study
            .get_or_init(|| {
                sandglass(
                    &self.runs,
                    &self.runs,
                    &["study", "quick", "--duration-scale", "0.02", "-o", "study"],
                );
                id_of(&self.runs.join("study"))
            })
            .clone()
    }
}

/// Runs `sandglass ARGS` with the test's runs directory, failing the test when it fails.
fn sandglass(runs: &Path, cwd: &Path, args: &[&str]) {
    let out = Command::new(bin())
        .args(args)
        .env("SANDGLASS_RUNS_DIR", runs)
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(runs))
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sandglass {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The id of a run (its manifest) or a study (its state).
fn id_of(run: &Path) -> String {
    let file = ["manifest.json", "study.json"]
        .iter()
        .map(|f| run.join(f))
        .find(|f| f.exists())
        .unwrap_or_else(|| panic!("{} is neither a run nor a study", run.display()));
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    m["id"].as_str().unwrap().to_string()
}

fn fixtures(base: &Path) -> Fixtures {
    // In the runs directory itself, so that the catalog indexes them.
    let runs = base.join("sandglass-runs");
    let dir = runs.clone();
    std::fs::create_dir_all(&dir).unwrap();
    let s = |args: &[&str]| sandglass(&runs, &dir, args);
    s(&["timer", "-c", "0,1", "-d", "2s", "-o", "timer-run"]);
    s(&[
        "hourglass",
        "-n",
        "1",
        "-d",
        "2s",
        "-t",
        "0",
        "-p",
        "NORMAL",
        "-o",
        "hourglass-run",
    ]);
    s(&["timer", "-c", "1", "-d", "2s", "-o", "baseline-run"]);
    s(&["timer", "-c", "1", "-d", "2s", "-o", "new-run"]);
    // A run made elsewhere: outside the runs directory, not in the catalog.
    let elsewhere = base.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let out = Command::new(bin())
        .args(["timer", "-c", "1", "-d", "1s", "-o", "copied-run"])
        .env("SANDGLASS_RUNS_DIR", base.join("other-runs"))
        .env(
            "SANDGLASS_RUNTIME_DIR",
            common::runtime_for(&base.join("other-runs")),
        )
        .current_dir(&elsewhere)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Fixtures {
        timer_id: id_of(&dir.join("timer-run")),
        study: std::cell::OnceCell::new(),
        timer: dir.join("timer-run"),
        hourglass_id: id_of(&dir.join("hourglass-run")),
        baseline: dir.join("baseline-run"),
        baseline_id: id_of(&dir.join("baseline-run")),
        new: dir.join("new-run"),
        new_id: id_of(&dir.join("new-run")),
        import: elsewhere.join("copied-run"),
        runs,
    }
}

/// A study stopped by SIGINT in its second cell, in `dir` or in the runs directory, for
/// `study --resume`.
fn interrupted_study(f: &Fixtures, cwd: &Path, dir: Option<&str>) {
    let mut args = vec!["study", "quick", "--duration-scale", "0.05"];
    if let Some(d) = dir {
        let _ = std::fs::remove_dir_all(cwd.join(d));
        args.extend(["-o", d]);
    }
    let mut child = Command::new(bin())
        .args(&args)
        .env("SANDGLASS_RUNS_DIR", &f.runs)
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(&f.runs))
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The study names each cell on stderr as it starts it: wait for the second, however long
    // a busy machine takes to get there.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let end = Instant::now() + common::WAIT_GUARD;
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let second = line.contains("cell 2 of ");
                seen.push(line);
                if second {
                    break;
                }
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                match e {
                    std::sync::mpsc::RecvTimeoutError::Timeout => panic!(
                        "{}: {seen:?}",
                        common::hang_guard("the study's second cell", common::WAIT_GUARD)
                    ),
                    std::sync::mpsc::RecvTimeoutError::Disconnected => {
                        panic!("the study ended before its second cell: {seen:?}")
                    }
                }
            }
        }
    }
    let _ =
        sandglass_sys::signal::send_to_process(child.id() as i32, sandglass_sys::signal::SIGINT);
    let _ = child.wait();
}

fn is_run_id(word: &str) -> bool {
    let b = word.as_bytes();
    word.len() == 13
        && b[8] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 8 || c.is_ascii_digit())
}

/// The command a reader would type here, or why it cannot run.
fn adapt(cmd: &str, f: &Fixtures, cwd: &Path) -> String {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let is = |w: &str| words.contains(&w);
    let mut out: Vec<String> = Vec::new();
    let path = |p: &Path| p.display().to_string();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        let prev = if i > 0 { words[i - 1] } else { "" };
        let mapped = if prev == "-o" || prev == "--output" {
            w.to_string()
        } else if prev == "--all" && words.get(1) == Some(&"man") {
            // Man pages go to a directory of the test's, not the system's.
            path(&cwd.join(format!("man-{i}")))
        } else if prev == "-d" || prev == "--duration" {
            "1s".to_string()
        } else if prev == "--segment" {
            "2s".to_string()
        } else if prev == "--duration-scale" {
            "0.01".to_string()
        } else if is_run_id(w) {
            if prev == "rm" {
                let dir = f.runs.join(format!("to-delete-{i}"));
                sandglass(
                    &f.runs,
                    cwd,
                    &["timer", "-c", "1", "-d", "1s", "-o", &path(&dir)],
                );
                id_of(&dir)
            } else if prev == "--study" {
                f.study_id()
            } else {
                f.timer_id.clone()
            }
        } else if w == "DIR" && prev == "import" || w.starts_with("/mnt/") {
            path(&f.import)
        } else if w == "DIR" {
            path(&cwd.join(format!("out-{i}")))
        } else {
            // A `compare` side may join runs with `+`: each part is mapped. A run named as a
            // person names it is given by its id (as `sandglass runs` lists it), a study's cell
            // as STUDY/CELL with the study's id; a file inside a run (`RUN/manifest.json`) and
            // a directory name the document shows (`baseline-run`) by their paths.
            let part = |w: &str| {
                let mut s = w.to_string();
                for (from, to) in [
                    ("RUN|STUDY", f.timer_id.clone()),
                    ("HOURGLASS_RUN", f.hourglass_id.clone()),
                    ("BASELINE", f.baseline_id.clone()),
                    ("baseline-run", path(&f.baseline)),
                    ("NEW", f.new_id.clone()),
                    ("new-run", path(&f.new)),
                ] {
                    if s == from {
                        s = to;
                    }
                }
                if s == "RUN" || s.starts_with("RUN@") {
                    s = s.replacen("RUN", &f.timer_id, 1);
                } else if s.starts_with("RUN/") {
                    s = s.replacen("RUN", &path(&f.timer), 1);
                } else if s == "STUDY" {
                    s = f.study_id();
                } else if s.starts_with("STUDY/") {
                    s = s.replacen("STUDY", &f.study_id(), 1);
                }
                s
            };
            w.split('+').map(part).collect::<Vec<_>>().join("+")
        };
        out.push(mapped);
        i += 1;
    }
    let study = words.get(1) == Some(&"study") || words.get(1) == Some(&"quick");
    if study
        && !is("--duration-scale")
        && !is("--list")
        && !is("--print")
        && !is("--dry-run")
        && !is("--resume")
    {
        out.push("--duration-scale".into());
        out.push("0.01".into());
    }
    let hourglass = words.get(1) == Some(&"hourglass");
    if hourglass && !is("-d") && !is("--help") && !is("-h") {
        out.push("-d".into());
        out.push("1s".into());
    }
    out.join(" ")
}

/// Runs `cmd` through `sh -c` in `cwd`: its exit code, or `None` when it had to be killed at
/// the hang guard ([`common::COMMAND_GUARD`], many times what any example takes on an idle
/// machine).
fn run(cmd: &str, f: &Fixtures, cwd: &Path) -> (Option<i32>, String) {
    let dir = bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log = cwd.join("last.log");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("PATH", path)
        .env("SANDGLASS_RUNS_DIR", &f.runs)
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(&f.runs))
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            let err = std::fs::read_to_string(&log).unwrap_or_default();
            return (s.code(), err);
        }
        if start.elapsed() > common::COMMAND_GUARD {
            let _ = child.kill();
            let _ = child.wait();
            return (
                None,
                format!(
                    "{} (it was killed)",
                    common::hang_guard("the command's end", common::COMMAND_GUARD)
                ),
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether running `cmd` again, word for word, in another document's directory would test
/// nothing new: it writes no file a later example of that document reads (no `>`, `|`, `-o`),
/// resumes nothing and removes nothing. Such a command is run where it first appears; the
/// same words elsewhere are counted as run.
fn repeats_alike(cmd: &str) -> bool {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    !cmd.contains('>')
        && !cmd.contains('|')
        && !words.iter().any(|w| {
            matches!(
                *w,
                "-o" | "--output" | "--resume" | "rm" | "import" | "pack" | "export" | "rebuild"
            ) || w.starts_with("--output=")
        })
}

/// The six tests that run the examples, beside each other: the guide (the longest document) in
/// three parts, README.md, docs/studies.md, and the other documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// The guide up to its section on Hourglass (its first commands and studies).
    GuideFirst,
    /// The guide from its section on Hourglass to its section on cost microbenchmarks.
    GuideMiddle,
    /// The guide from its section on cost microbenchmarks on.
    GuideRest,
    Readme,
    Studies,
    Others,
}

const PARTS: [Part; 6] = [
    Part::GuideFirst,
    Part::GuideMiddle,
    Part::GuideRest,
    Part::Readme,
    Part::Studies,
    Part::Others,
];

/// The guide's headings where [`Part::GuideMiddle`] and [`Part::GuideRest`] begin.
const GUIDE_SPLITS: [&str; 2] = ["## Hourglass", "## Cost microbenchmarks"];

/// Which test runs the example at `line` of `doc` (its path from the repository's root): every
/// example is in exactly one part.
fn part(doc: &str, line: usize, root: &Path) -> Part {
    match doc {
        "docs/guide.md" => {
            let text = std::fs::read_to_string(root.join(doc)).unwrap();
            let [middle, rest] = GUIDE_SPLITS.map(|heading| {
                text.lines()
                    .position(|l| l.trim() == heading)
                    .unwrap_or_else(|| panic!("docs/guide.md has no heading {heading:?}"))
            });
            if line <= middle {
                Part::GuideFirst
            } else if line <= rest {
                Part::GuideMiddle
            } else {
                Part::GuideRest
            }
        }
        "README.md" => Part::Readme,
        "docs/studies.md" => Part::Studies,
        _ => Part::Others,
    }
}

#[test]
fn the_guides_first_commands_run_as_written() {
    run_documents(Part::GuideFirst);
}

#[test]
fn the_guides_middle_commands_run_as_written() {
    run_documents(Part::GuideMiddle);
}

#[test]
fn the_guides_other_commands_run_as_written() {
    run_documents(Part::GuideRest);
}

#[test]
fn the_readmes_commands_run_as_written() {
    run_documents(Part::Readme);
}

#[test]
fn the_studies_commands_run_as_written() {
    run_documents(Part::Studies);
}

#[test]
fn the_other_documents_commands_run_as_written() {
    run_documents(Part::Others);
}

/// Where each command that [`repeats_alike`] first ran and passed, in any part: the parts run
/// at once, so a command two of them hold may run in both, but one that has passed is not run
/// again.
fn passed() -> std::sync::MutexGuard<'static, BTreeMap<String, String>> {
    static PASSED: std::sync::Mutex<BTreeMap<String, String>> =
        std::sync::Mutex::new(BTreeMap::new());
    PASSED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the examples of one [`Part`], with fixtures of its own: the six such tests share the
/// machine ([`common::share`]), since they assert only exit codes.
fn run_documents(chosen: Part) {
    let _machine = common::share();
    if !common::is_root() {
        common::skip(
            "the examples set real-time priorities and lock memory; run as root (CI does)",
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap();
    let tmp = common::KeptOnFailure::new();
    let base = tmp.path().to_path_buf();
    let f = fixtures(&base);
    let mut failures = Vec::new();
    let mut count = 0;
    for doc in documents(&root) {
        let name = doc.strip_prefix(&root).unwrap().display().to_string();
        let (list, skipped) = examples(&doc, &root);
        let list: Vec<Example> = list
            .into_iter()
            .filter(|e| part(&name, e.line, &root) == chosen)
            .collect();
        if part(&name, 1, &root) == chosen {
            for s in skipped {
                eprintln!("not run: {s}");
            }
        }
        if list.is_empty() {
            continue;
        }
        let stem = doc.file_stem().unwrap().to_string_lossy().to_string();
        let cwd = base.join(format!("doc-{stem}"));
        std::fs::create_dir_all(&cwd).unwrap();
        std::os::unix::fs::symlink(root.join("examples"), cwd.join("examples")).unwrap();
        for e in list {
            if let Some(first) = passed().get(&e.command) {
                eprintln!("  same  {}:{}: as {first}", e.doc, e.line);
                count += 1;
                continue;
            }
            let words: Vec<&str> = e.command.split_whitespace().collect();
            if let Some(i) = words.iter().position(|w| *w == "--resume") {
                interrupted_study(&f, &cwd, words.get(i + 1).copied());
            }
            let cmd = adapt(&e.command, &f, &cwd);
            let gate = e.command.contains("compare") && e.command.contains("--fail-");
            let started = Instant::now();
            let (code, err) = run(&cmd, &f, &cwd);
            eprintln!(
                "{:6.2} s  {}:{}: {cmd}",
                started.elapsed().as_secs_f64(),
                e.doc,
                e.line
            );
            count += 1;
            let ok = code == Some(0) || (gate && code == Some(2));
            if ok && repeats_alike(&e.command) {
                passed().insert(e.command.clone(), format!("{}:{}", e.doc, e.line));
            }
            if !ok {
                failures.push(format!(
                    "{}:{}: {}\n    ran: {cmd}\n    exit {:?}: {}",
                    e.doc,
                    e.line,
                    e.command,
                    code,
                    err.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
                ));
            }
        }
    }
    assert!(count > 0, "found no examples");
    assert!(
        failures.is_empty(),
        "{} of {count} documented commands failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn examples_are_found_and_adapted() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let count: usize = documents(&root)
        .iter()
        .map(|doc| examples(doc, &root).0.len())
        .sum();
    assert!(count > 40, "found only {count} examples");
    // Each of the six tests has examples to run.
    for p in PARTS {
        let n: usize = documents(&root)
            .iter()
            .map(|doc| {
                let name = doc.strip_prefix(&root).unwrap().display().to_string();
                let list = examples(doc, &root).0;
                list.iter()
                    .filter(|e| part(&name, e.line, &root) == p)
                    .count()
            })
            .sum();
        assert!(n > 5, "{p:?} has only {n} examples");
    }
    let (list, _) = examples(&root.join("README.md"), &root);
    assert!(list.iter().any(|e| e.command == "sandglass study quick"));
    // The comparison table's commands run too.
    assert!(list
        .iter()
        .any(|e| e.command == "sandglass timer -c 1 -d 10s --trace"));
    assert!(list.iter().all(|e| e.command != "sandglass monitor"));
    assert!(list.iter().all(|e| !e.command.contains(" # ")));
    // A continued line is one command.
    let (list, _) = examples(&root.join("docs/guide.md"), &root);
    assert!(list
        .iter()
        .any(|e| e.command.contains("-w PERIODIC 3ms 8ms -i HR") && e.command.contains("RTLOW")));
    assert!(list.iter().all(|e| !e.command.contains(" # ")));
    assert!(repeats_alike("sandglass check audio:64@48000x2 -d 1s"));
    assert!(repeats_alike("sandglass study quick"));
    assert!(!repeats_alike(
        "sandglass check video:60 -d 1s --json > check.json"
    ));
    assert!(!repeats_alike("sandglass timer -c 1 -d 1s -o new-run"));
    assert!(!repeats_alike("sandglass study --resume"));
    assert!(!repeats_alike("sandglass runs rm 20261122-1015"));
    assert!(is_run_id("20261122-1015"));
    assert!(!is_run_id("2026112-10155"));
    assert_eq!(without_comment("sandglass runs   # all"), "sandglass runs");
}
