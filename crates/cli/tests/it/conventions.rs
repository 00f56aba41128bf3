//! Installing and discovering the command, and what it prints: man pages, shell completions,
//! `--quiet`, the units in calibrate's table and Hourglass's `-i RTC` fallback as the run
//! records it.

use crate::common;

use assert_cmd::Command;
use common::{lock, skip};
use std::path::Path;

fn sandglass() -> Command {
    let mut c = Command::cargo_bin("sandglass").unwrap();
    c.env(
        "SANDGLASS_RUNS_DIR",
        std::env::temp_dir().join("sandglass-test-runs"),
    );
    c
}

fn stdout_of(args: &[&str]) -> String {
    let out = sandglass().args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn man_prints_roff_pages_for_the_top_and_each_command() {
    let top = stdout_of(&["man"]);
    assert!(top.starts_with(".ie"), "{}", &top[..top.len().min(200)]);
    assert!(top.contains(".TH sandglass 1"), "no title line");
    assert!(top.contains("sandglass\\-timer(1)"), "no timer page named");
    let timer = stdout_of(&["man", "timer"]);
    assert!(timer.contains(".TH sandglass-timer 1"), "no timer title");
    assert!(
        timer.contains("\\-\\-cpu\\-dma\\-latency"),
        "timer options missing"
    );
    assert!(timer.contains("\\-\\-quiet"), "--quiet missing");
    let tail = stdout_of(&["man", "analyze", "rta"]);
    assert!(
        tail.contains(".TH sandglass-analyze-rta 1"),
        "no nested title"
    );
}

/// Every command's path, from `sandglass man --all`: `[]`, `["timer"]`, `["analyze", "rta"]`.
fn every_command() -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    stdout_of(&["man", "--all", dir.path().to_str().unwrap()]);
    let mut paths: Vec<Vec<String>> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .map(|name| {
            let stem = name.strip_suffix(".1").unwrap().to_string();
            let words = stem.strip_prefix("sandglass").unwrap();
            // Command names hold dashes too (`two-rate`): split by the known tree.
            words.trim_start_matches('-').to_string()
        })
        .map(|w| split_path(&w))
        .collect();
    paths.sort();
    paths
}

/// `analyze-two-rate` as `["analyze", "two-rate"]`: the first word is a top-level command.
fn split_path(words: &str) -> Vec<String> {
    if words.is_empty() {
        return Vec::new();
    }
    match words.split_once('-') {
        Some((top, rest)) if ["analyze", "bench", "runs"].contains(&top) => {
            vec![top.to_string(), rest.to_string()]
        }
        _ => vec![words.to_string()],
    }
}

#[test]
fn every_man_page_has_a_synopsis_with_values_examples_and_exit_status() {
    let timer = stdout_of(&["man", "timer"]);
    for section in [".SH SYNOPSIS", ".SH EXAMPLES", ".SH \"EXIT STATUS\""] {
        assert!(
            timer.contains(section),
            "sandglass man timer has no {section}"
        );
    }
    let synopsis = timer
        .split(".SH SYNOPSIS")
        .nth(1)
        .unwrap()
        .split(".SH")
        .next()
        .unwrap();
    assert!(
        synopsis.contains("\\fICPUS"),
        "no value placeholder: {synopsis}"
    );
    assert!(timer.contains("sandglass timer \\-c 1 \\-i 1ms \\-d 60s"));
    let commands = every_command();
    assert!(commands.len() > 30, "{commands:?}");
    for path in &commands {
        let mut args = vec!["man"];
        args.extend(path.iter().map(String::as_str));
        let page = stdout_of(&args);
        assert!(
            page.contains(".SH \"EXIT STATUS\""),
            "{path:?}: no EXIT STATUS"
        );
    }
    // Every top-level command has examples.
    for path in commands.iter().filter(|p| p.len() == 1) {
        let page = stdout_of(&["man", &path[0]]);
        assert!(page.contains(".SH EXAMPLES"), "{path:?}: no EXAMPLES");
    }
}

#[test]
fn man_all_writes_every_page_and_refuses_a_link_in_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let top = stdout_of(&["--help"]);
    let pages: Vec<String> = {
        stdout_of(&["man", "--all", &d]);
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect()
    };
    // Every command `sandglass --help` lists has its page.
    let listed: Vec<&str> = top
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| *w != "help" && w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .collect();
    assert!(listed.len() > 15, "{listed:?}");
    for c in listed {
        assert!(
            pages.contains(&format!("sandglass-{c}.1")),
            "no page for {c}: {pages:?}"
        );
    }
    assert!(pages.contains(&"sandglass-analyze-rta.1".to_string()));
    // Written again over its own pages; a link in a page's place is refused, not followed.
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, "kept").unwrap();
    std::fs::remove_file(dir.path().join("sandglass-timer.1")).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("sandglass-timer.1")).unwrap();
    let out = sandglass().args(["man", "--all", &d]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sandglass-timer.1: a symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
    // A hard link in a page's place is refused too: its other name keeps its content.
    std::fs::remove_file(dir.path().join("sandglass-timer.1")).unwrap();
    std::fs::hard_link(&target, dir.path().join("sandglass-timer.1")).unwrap();
    let out = sandglass().args(["man", "--all", &d]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sandglass-timer.1: has another name"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
}

#[test]
fn help_is_wrapped_and_its_examples_are_documented_commands() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The lines of the documents' ```sh blocks, whose commands the documentation test runs
    // (those that run until a signal, such as `top`, run in the monitor's tests).
    let mut documented = Vec::new();
    let mut docs = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    for doc in docs {
        let text = std::fs::read_to_string(&doc).unwrap();
        let mut in_sh = false;
        for line in text.lines() {
            let t = line.trim();
            if t == "```sh" {
                in_sh = true;
            } else if t == "```" {
                in_sh = false;
            } else if in_sh {
                let command = t.split(" #").next().unwrap();
                documented.push(command.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    }
    for path in every_command() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        if args == ["hourglass"] {
            continue; // Hourglass prints the paper's own help.
        }
        args.push("--help");
        let help = stdout_of(&args);
        // clap does not wrap the usage line.
        for line in help.lines().filter(|l| !l.starts_with("Usage:")) {
            assert!(
                line.chars().count() <= 100,
                "{args:?}: a line of {} columns: {line}",
                line.chars().count()
            );
        }
        assert!(help.contains("Exit status:"), "{args:?}: no exit status");
        let Some(examples) = help.split("Examples:\n").nth(1) else {
            continue;
        };
        for line in examples.lines().take_while(|l| !l.is_empty()) {
            if let Some(cmd) = line.strip_prefix("  sandglass ") {
                let cmd = format!("sandglass {}", cmd.trim());
                assert!(
                    documented.contains(&cmd),
                    "{args:?}: the example `{cmd}` is in no ```sh block of README.md or docs/"
                );
            }
        }
    }
}

/// The lines of `--help` that describe the option whose line starts with `flag` (such as `-o,
/// --output` or `--json`), up to the next option.
fn option_help(help: &str, flag: &str) -> Option<String> {
    let mut lines = help
        .lines()
        .skip_while(|l| !l.trim_start().starts_with(flag));
    let first = lines.next()?;
    let rest: Vec<&str> = lines
        .take_while(|l| !l.trim_start().starts_with('-') && !l.trim().is_empty())
        .collect();
    Some(
        std::iter::once(first)
            .chain(rest)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

#[test]
fn the_run_flags_mean_the_same_in_every_command_that_records_a_run() {
    let commands: &[&[&str]] = &[
        &["timer"],
        &["noise"],
        &["check"],
        &["bench", "copy"],
        &["bench", "ipc"],
        &["bench", "ctxsw"],
        &["bench", "file"],
        &["bench", "timer-overhead"],
        &["bench", "budget"],
    ];
    for flag in ["-o, --output", "--json", "-q, --quiet"] {
        let mut first: Option<(String, String)> = None;
        for c in commands {
            let mut args = c.to_vec();
            args.push("--help");
            let help = stdout_of(&args);
            let text = option_help(&help, flag)
                .unwrap_or_else(|| panic!("`sandglass {}` has no {flag}", c.join(" ")));
            match &first {
                None => first = Some((c.join(" "), text)),
                Some((name, seen)) => assert_eq!(
                    &text,
                    seen,
                    "{flag} of `sandglass {}` differs from that of `sandglass {name}`",
                    c.join(" ")
                ),
            }
        }
    }
}

#[test]
fn bash_accepts_the_bash_completions() {
    let script = stdout_of(&["completions", "bash"]);
    assert!(script.contains("complete -F"), "not a bash completion");
    assert!(
        script.contains("--cpu-dma-latency"),
        "timer options missing"
    );
    let Ok(bash) = std::process::Command::new("bash")
        .arg("-n")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        skip("bash is not installed");
        return;
    };
    let mut bash = bash;
    use std::io::Write;
    bash.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = bash.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(!stdout_of(&["completions", shell]).is_empty(), "{shell}");
    }
}

/// Runs a one-second measurement of CPU 0 with `flags` into `run`; expects exit code 0 and
/// nothing on standard error, and gives standard output.
fn quiet_run(command: &str, flags: &[&str], run: &Path) -> Vec<u8> {
    let out = sandglass()
        .args([command, "-c", "0", "-d", "1s", "--sample-rate", "0"])
        .args(flags)
        .arg("-o")
        .arg(run)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{command} {flags:?}: {stderr}");
    assert!(stderr.is_empty(), "{command} {flags:?} printed: {stderr}");
    // The run keeps what was not printed.
    assert!(run.join("summary.json").is_file(), "{command}: no summary");
    out.stdout
}

#[test]
fn quiet_prints_only_what_json_asks_for() {
    let _g = lock();
    let dir = tempfile::tempdir().unwrap();
    let text = quiet_run("timer", &["-q"], &dir.path().join("timer"));
    assert!(text.is_empty(), "quiet printed a summary");
    let json = quiet_run("noise", &["--quiet", "--json"], &dir.path().join("noise"));
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert!(v["cpus"].is_array(), "{v}");
}

#[test]
fn calibrate_names_the_counter_and_the_unit() {
    let _g = lock();
    let text = stdout_of(&["calibrate", "--cpu", "0", "-d", "100ms"]);
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("counter: "), "{first}");
    let name = first["counter: ".len()..].split(' ').next().unwrap();
    assert!(
        ["TSC", "CNTVCT_EL0", "CLOCK_MONOTONIC_RAW"].contains(&name),
        "{first}"
    );
    assert!(text.contains("(times in ns)"), "{text}");
    // Figures are plain numbers under the header's unit, with no letter glued to them.
    for line in text.lines().skip(2) {
        if line.starts_with("gap threshold") {
            continue;
        }
        for field in line.split_whitespace().rev().take(8) {
            assert!(
                field.parse::<f64>().is_ok(),
                "'{field}' in '{line}' is not a number"
            );
        }
    }
}

/// Hourglass's `-i RTC` where there is no RTC device: HR instead, a warning printed, and the
/// substitution recorded in the run (the warning's kind and the thread's timer).
#[test]
fn rtc_falls_back_to_hr_and_the_run_records_it() {
    if Path::new("/dev/rtc").exists() || Path::new("/dev/rtc0").exists() {
        skip("this machine has an RTC device, so -i RTC runs as asked");
        return;
    }
    let _g = lock();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("rtc");
    let out = sandglass()
        .args(["hourglass", "-n", "1", "-d", "1s", "-x", "-t", "0"])
        .args(["-w", "LAT", "5.3ms", "-i", "RTC", "-o"])
        .arg(&run)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: -i RTC: this machine has no /dev/rtc")
            && stderr.contains("thread 0 waits with HR"),
        "{stderr}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("latlate"), "{text}");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap();
    let kinds: Vec<&str> = manifest["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"timer_fallback"), "{kinds:?}");
    let threads = manifest["config"]["threads"].as_array().expect("threads");
    assert_eq!(threads[0]["timer"], "HR", "{}", threads[0]);
}

/// Runs `sandglass ARGS` with its standard output a pipe whose reader is already closed, so
/// that its first write fails with EPIPE; returns the exit code and standard error. Ended at
/// the hang guard if it hangs.
fn into_a_closed_pipe(runs: &Path, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("sandglass"))
        .args(args)
        .env("SANDGLASS_RUNS_DIR", runs)
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(runs))
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + common::WAIT_GUARD;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{}: {args:?} with its output closed",
                common::hang_guard("the command's end", common::WAIT_GUARD)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Regression: `sandglass completions zsh | head -1` panicked (exit 101, a broken pipe inside
/// clap_complete). Every command that prints ends quietly with exit 0 when its reader has gone,
/// and one that measured keeps its run.
#[test]
fn a_closed_pipe_ends_every_output_quietly_without_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let run = tmp.path().join("run");
    let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hourglass-5.5.toml");
    let tasks = tasks.to_str().unwrap();
    let measured = {
        let _g = lock();
        let args = [
            "timer",
            "-c",
            "0",
            "-d",
            "300ms",
            "-o",
            run.to_str().unwrap(),
        ];
        let (code, err) = into_a_closed_pipe(&runs, &args);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(matches!(code, Some(0 | 1)), "{args:?}: {code:?} {err}");
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap();
        m["state"].as_str().unwrap().to_string()
    };
    assert!(measured != "running", "{measured}");
    let run = run.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["completions", "zsh"],
        vec!["completions", "bash"],
        vec!["man"],
        vec!["man", "timer"],
        vec!["schema", "timer"],
        vec!["help"],
        vec!["--help"],
        vec!["timer", "--help"],
        vec!["--version"],
        vec!["sysinfo"],
        vec!["sysinfo", "--json"],
        vec!["runs", "list"],
        vec!["runs", "list", "--json"],
        vec!["report", run],
        vec!["report", run, "--markdown"],
        vec!["report", "--merge", run, run],
        vec!["report", "--merge", run, run, "--json"],
        vec!["compare", run, run],
        vec!["compare", run, run, "--json"],
        vec!["analyze", "rta", tasks],
        vec!["analyze", "rta", tasks, "--json"],
        vec!["study", "--list"],
        vec!["study", "quick", "--dry-run"],
        vec!["study", "--print", "quick"],
    ];
    for args in cases {
        let (code, err) = into_a_closed_pipe(&runs, &args);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(code, Some(0), "{args:?}: {err}");
    }
}

/// A name from the system printed in a report (here the run directory's path, chosen with an
/// escape sequence in it) is shown escaped: nothing raw reaches the terminal.
#[test]
fn a_path_with_an_escape_sequence_is_printed_escaped() {
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run\u{1b}[31m\u{202e}");
    let out = sandglass()
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(tmp.path()))
        .args(["timer", "-c", "0", "-d", "300ms", "-o"])
        .arg(&dir)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(matches!(out.status.code(), Some(0 | 1)), "{stderr}");
    assert!(dir.join("manifest.json").is_file(), "{stderr}");
    assert!(stdout.contains("run\\u{1b}[31m\\u{202e}"), "{stdout:?}");
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{202e}'),
            "{text:?}"
        );
    }
}
