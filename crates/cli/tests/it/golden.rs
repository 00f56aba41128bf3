//! Golden files of the output formats, from a deterministic run: a timer run replayed by the
//! real engine on a scripted clock (`sandglass::replay`), which writes the same samples and the
//! same figures on every machine. The text summary, the JSON summary and the skeleton of the
//! HTML page (its sections, headings, tables' columns and figures, not its numbers' layout)
//! are compared with `tests/it/snapshots/`; a change to any of them shows as a diff to review
//! (`cargo insta review`). Paths and the version are replaced by placeholders.
//!
//! The other probes' formats come from runs stored by the previous release (`tests/data/v2/`:
//! noise, hourglass, a check, a study), whose figures never change: text, Markdown, JSON as
//! this version writes the stored result, the CSV files' headers, the Perfetto trace's kinds of
//! event and the HTML page's skeleton, for each of timer, noise, hourglass and check; text,
//! Markdown, JSON and the page for a study.

use assert_cmd::Command;
use sandglass::replay::{self, TimerReplay};
use sandglass::store::Tool;
use sandglass::Nanos;
use std::path::{Path, PathBuf};

/// The replayed run in `tmp`: two CPUs at 500 µs for 21 s (two stalls of 2.5 ms each).
fn golden_run(tmp: &Path) -> PathBuf {
    let dir = tmp.join("golden-run");
    let spec = TimerReplay::new(&[1, 2], Nanos::from_micros(500), Nanos::from_secs(21), 7);
    let tool = Tool {
        name: "sandglass".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        commit: "replay".into(),
    };
    replay::timer(&dir, &spec, tool).unwrap();
    dir
}

/// `text` with the run's directory and the version replaced by placeholders.
fn redact(text: &str, run: &Path) -> String {
    text.replace(&run.display().to_string(), "[RUN]")
        .replace(env!("CARGO_PKG_VERSION"), "[VERSION]")
}

fn report(args: &[&str]) -> String {
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn text_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let run = golden_run(tmp.path());
    let text = report(&["report", run.to_str().unwrap()]);
    insta::assert_snapshot!("timer_text", redact(&text, &run));
}

#[test]
fn json_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let run = golden_run(tmp.path());
    // As the run wrote it (the fields in the order `sandglass timer --json` prints them).
    let text = std::fs::read_to_string(run.join("summary.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap();
    insta::assert_snapshot!("timer_json", redact(&text, &run));
}

#[test]
fn html_skeleton() {
    let tmp = tempfile::tempdir().unwrap();
    let run = golden_run(tmp.path());
    let page = tmp.path().join("page.html");
    report(&[
        "report",
        run.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&page).unwrap();
    insta::assert_snapshot!("timer_html_skeleton", redact(&skeleton(&html), &run));
}

/// The structure of a page: one line per structural element, indented by its nesting, with its
/// class, and the text of its headings, captions, column heads and terms. What a figure draws
/// is left out; its caption is kept.
fn skeleton(html: &str) -> String {
    const KEEP: &[&str] = &[
        "html",
        "head",
        "title",
        "body",
        "main",
        "header",
        "footer",
        "section",
        "div",
        "h1",
        "h2",
        "h3",
        "h4",
        "table",
        "thead",
        "tbody",
        "th",
        "dl",
        "dt",
        "figure",
        "figcaption",
        "svg",
        "details",
        "summary",
    ];
    const TEXT: &[&str] = &[
        "title",
        "h1",
        "h2",
        "h3",
        "h4",
        "th",
        "dt",
        "figcaption",
        "summary",
        "footer",
    ];
    let mut lines: Vec<String> = Vec::new();
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut text: Option<String> = None;
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        if let Some(t) = text.as_mut() {
            t.push_str(&rest[..lt]);
        }
        let Some(gt) = rest[lt..].find('>') else {
            break;
        };
        let tag = &rest[lt + 1..lt + gt];
        rest = &rest[lt + gt + 1..];
        let in_svg = stack.iter().any(|(n, _)| n == "svg");
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim();
            if stack.last().is_some_and(|(n, _)| n == name) {
                let (_, line) = stack.pop().unwrap();
                if TEXT.contains(&name) {
                    let t = text.take().unwrap_or_default();
                    let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
                    lines[line].push_str(": ");
                    lines[line].push_str(&t);
                }
            }
            continue;
        }
        let name = tag
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()
            .unwrap_or("");
        if !KEEP.contains(&name) || in_svg || tag.ends_with('/') {
            continue;
        }
        let class = tag
            .split("class=\"")
            .nth(1)
            .and_then(|c| c.split('"').next())
            .map(|c| format!(".{}", c.replace(' ', ".")))
            .unwrap_or_default();
        lines.push(format!("{}{name}{class}", "  ".repeat(stack.len())));
        stack.push((name.to_string(), lines.len() - 1));
        if TEXT.contains(&name) {
            text = Some(String::new());
        }
    }
    lines.join("\n") + "\n"
}

/// A copy of the stored run `name` of `tests/data/v2/` in `tmp` (written by the previous
/// release, so its figures never change), so that no export writes next to the fixture.
fn stored(tmp: &Path, name: &str) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/v2")
        .join(name);
    let to = tmp.join(name);
    crate::common::copy_tree(&from, &to);
    to
}

/// The first line of every CSV file `report --csv` writes, by file name.
fn csv_headers(run: &Path, tmp: &Path) -> String {
    let dir = tmp.join("csv");
    report(&[
        "report",
        run.to_str().unwrap(),
        "--csv",
        dir.to_str().unwrap(),
    ]);
    crate::common::names_in(&dir)
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(n)).unwrap();
            format!("{n}: {}\n", text.lines().next().unwrap_or(""))
        })
        .collect()
}

/// The kinds of event of the Perfetto trace `report --perfetto` writes: each phase, category
/// and name once, with the process and thread names of its metadata.
fn perfetto_skeleton(run: &Path, tmp: &Path) -> String {
    let file = tmp.join("trace.json");
    report(&[
        "report",
        run.to_str().unwrap(),
        "--perfetto",
        file.to_str().unwrap(),
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let events = v["traceEvents"]
        .as_array()
        .or_else(|| v.as_array())
        .expect("a trace's events");
    let mut kinds = std::collections::BTreeSet::new();
    for e in events {
        let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
        let name = if s("ph") == "M" {
            format!(
                "{} = {}",
                s("name"),
                e["args"]["name"].as_str().unwrap_or("")
            )
        } else {
            s("name")
        };
        kinds.insert(format!("{} {} {}", s("ph"), s("cat"), name));
    }
    kinds.into_iter().map(|k| k + "\n").collect()
}

fn html_of(run: &Path, tmp: &Path) -> String {
    let page = tmp.join("page.html");
    report(&[
        "report",
        run.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
    ]);
    skeleton(&std::fs::read_to_string(&page).unwrap())
}

/// A stored JSON result read into this version's type and written again: the JSON this
/// version prints for it.
fn json_again<T: serde::de::DeserializeOwned + serde::Serialize>(path: &Path) -> String {
    let v: T = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    serde_json::to_string_pretty(&v).unwrap() + "\n"
}

/// Every format of a stored run of a probe that has samples: text, Markdown, JSON, the CSV
/// files' headers, the Perfetto trace's kinds of event and the HTML page's skeleton.
fn every_format<T: serde::de::DeserializeOwned + serde::Serialize>(probe: &str, result: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let run = stored(tmp.path(), probe);
    let path = run.to_str().unwrap();
    let r = |t: String| redact(&t, &run);
    insta::assert_snapshot!(format!("{probe}_text"), r(report(&["report", path])));
    insta::assert_snapshot!(
        format!("{probe}_markdown"),
        r(report(&["report", path, "--markdown"]))
    );
    insta::assert_snapshot!(
        format!("{probe}_json"),
        r(json_again::<T>(&run.join(result)))
    );
    insta::assert_snapshot!(
        format!("{probe}_csv_headers"),
        r(csv_headers(&run, tmp.path()))
    );
    insta::assert_snapshot!(
        format!("{probe}_perfetto_skeleton"),
        r(perfetto_skeleton(&run, tmp.path()))
    );
    insta::assert_snapshot!(
        format!("{probe}_html_skeleton"),
        r(html_of(&run, tmp.path()))
    );
}

#[test]
fn noise_in_every_format() {
    every_format::<sandglass::noise::NoiseResult>("noise", "summary.json");
}

#[test]
fn hourglass_in_every_format() {
    every_format::<sandglass::hourglass::result::HourglassResult>("hourglass", "summary.json");
}

#[test]
fn check_in_every_format() {
    every_format::<sandglass::check::CheckReport>("check", "check.json");
}

#[test]
fn timer_markdown_csv_and_perfetto() {
    let tmp = tempfile::tempdir().unwrap();
    let run = golden_run(tmp.path());
    let path = run.to_str().unwrap();
    insta::assert_snapshot!(
        "timer_markdown",
        redact(&report(&["report", path, "--markdown"]), &run)
    );
    insta::assert_snapshot!(
        "timer_csv_headers",
        redact(&csv_headers(&run, tmp.path()), &run)
    );
    insta::assert_snapshot!(
        "timer_perfetto_skeleton",
        redact(&perfetto_skeleton(&run, tmp.path()), &run)
    );
}

/// A study: its tables as text and Markdown, its `study.json` as this version writes it, and
/// its page (a study has no CSV or Perfetto export: its cells do).
#[test]
fn study_in_every_format() {
    let tmp = tempfile::tempdir().unwrap();
    let study = stored(tmp.path(), "study");
    let path = study.to_str().unwrap();
    let r = |t: String| redact(&t, &study);
    insta::assert_snapshot!("study_text", r(report(&["report", path])));
    insta::assert_snapshot!("study_markdown", r(report(&["report", path, "--markdown"])));
    insta::assert_snapshot!(
        "study_json",
        r(json_again::<sandglass::study::run::StudyRecord>(
            &study.join("study.json")
        ))
    );
    insta::assert_snapshot!("study_html_skeleton", r(html_of(&study, tmp.path())));
}
