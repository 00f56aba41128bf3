//! Golden files of the output formats, from a deterministic run: a timer run replayed by the
//! real engine on a scripted clock (`sandglass::replay`), which writes the same samples and the
//! same figures on every machine. The text summary, the JSON summary and the skeleton of the
//! HTML page (its sections, headings, tables' columns and figures, not its numbers' layout)
//! are compared with `tests/it/snapshots/`; a change to any of them shows as a diff to review
//! (`cargo insta review`). Paths and the version are replaced by placeholders.

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
