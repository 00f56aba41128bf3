//! Bad input gets one clear error line naming what is wrong, exit code 2, and no panic. These
//! tests need no privilege and measure nothing: every one fails before a run starts.

use crate::common;
use assert_cmd::Command;

fn sandglass() -> Command {
    let mut c = Command::cargo_bin("sandglass").unwrap();
    // Never leave run directories in the source tree.
    c.env(
        "SANDGLASS_RUNS_DIR",
        std::env::temp_dir().join("sandglass-test-runs"),
    );
    c
}

/// Runs `args`, expects exit code 2 and a single `sandglass: error:` line containing `needle`.
fn usage_error(args: &str, needle: &str) {
    let words: Vec<&str> = args.split_whitespace().collect();
    let out = sandglass().args(&words).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args}: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("sandglass: error:"))
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "{args}: expected one error line, got: {stderr}"
    );
    assert!(
        errors[0].contains(needle),
        "{args}: {:?} lacks {needle:?}",
        errors[0]
    );
    assert!(!stderr.contains("panicked"), "{args}: {stderr}");
    assert!(out.stdout.is_empty(), "{args}: printed to stdout");
}

#[test]
fn unknown_workload() {
    usage_error("hourglass -n 1 -t 0 -w SPIN", "unknown workload 'SPIN'");
}

#[test]
fn missing_amount() {
    usage_error(
        "hourglass -n 1 -t 0 -w PERIODIC 4ms",
        "-w PERIODIC needs <amount> <period>",
    );
    usage_error(
        "hourglass -n 1 -t 0 -w CPU_YIELD",
        "-w CPU_YIELD needs <amount>",
    );
}

#[test]
fn bad_time_strings() {
    usage_error("hourglass -n 1 -d 10", "has no unit");
    usage_error(
        "hourglass -n 1 -d 10fortnights",
        "unknown unit 'fortnights'",
    );
    usage_error("hourglass -n 1 -d -1s", "negative");
    usage_error("hourglass -n 1 -d 99999999999h", "too large");
    usage_error("hourglass -n 1 -t 0 -w LAT 0.5ns", "finer than 1 ns");
}

#[test]
fn thread_index_out_of_range() {
    usage_error(
        "hourglass -n 2 -t 5 -p LOW",
        "-t 5 is out of range: -n 2 creates threads 0 to 1",
    );
}

#[test]
fn zero_threads() {
    usage_error("hourglass -n 0", "-n 0");
    usage_error("hourglass -d 1s", "-n is required");
}

#[test]
fn reservation_above_its_period() {
    usage_error(
        "hourglass -n 1 -t 0 -w PERIODIC 3ms 8ms -rh 9ms 8ms",
        "amount exceeds the period",
    );
}

#[test]
fn multimedia_timer() {
    usage_error("hourglass -n 1 -t 0 -w LAT 1ms -i MM", "use -i HR");
}

#[test]
fn other_bad_options() {
    usage_error("hourglass -n 1 -z", "unknown option '-z'");
    usage_error("hourglass -n 1 -t 0 -p f:200", "from 1 to 99");
    usage_error("hourglass -n 1 -t 0 -i bogus", "unknown timer 'bogus'");
    usage_error("hourglass -n 1 -p HIGH", "put -t N");
    usage_error("hourglass -n 1 -t 0 --affinity 9999", "CPU 9999");
    usage_error("hourglass -n 1 -t 0 -p RTHIGH -rh 3ms 8ms", "one policy");
    usage_error("calibrate -d 0s", "--duration");
}

#[test]
fn rtc_required_without_a_device_names_hr() {
    if std::path::Path::new("/dev/rtc").exists() || std::path::Path::new("/dev/rtc0").exists() {
        eprintln!("skipped: this machine has an RTC device, so -i RTC --require-rtc can run");
        return;
    }
    usage_error(
        "hourglass -n 1 -d 1s -t 0 -w LAT 5.3ms -i RTC --require-rtc",
        "has no /dev/rtc",
    );
    usage_error(
        "hourglass -n 1 -d 1s -t 0 -w LAT 5.3ms -i RTC --require-rtc",
        "leave out --require-rtc to run such threads with HR",
    );
}

/// The rough edges of issue 20: each bad value is named with its fix.
#[test]
fn values_are_refused_with_their_reason() {
    // A bare number, as cyclictest's -D 5 (seconds), names 5s.
    usage_error("timer -d 5", "write 5s for seconds");
    usage_error("noise -d 5", "write 5s for seconds");
    usage_error("timer -d 5h999999999999m", "too large");
    usage_error("timer --cpu-dma-latency -1", "negative");
    usage_error("noise --cpu-dma-latency -1", "negative");
    usage_error("timer --cpu-dma-latency 99999999999", "too large");
    usage_error("hourglass -n 1 --cpu-dma-latency -1", "negative");
    usage_error("timer -c 0,0", "CPU 0 appears twice");
    usage_error("noise -c 0-1,1", "CPU 1 appears twice");
    usage_error("hourglass -n 1 -t 0 --affinity 0,0", "appears twice");
    usage_error("man nosuch", "no command 'nosuch'");
    usage_error("man timer extra", "has no subcommands");
    usage_error("completions tcsh", "tcsh");
}

#[test]
fn existing_run_directory_is_never_overwritten() {
    let _machine = common::lock();
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("trace.csv");
    std::fs::write(&kept, "measured before").unwrap();
    let args = format!("hourglass -n 1 -d 1s -o {}", dir.path().display());
    usage_error(&args, "already exists and is not empty");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "measured before");
}

#[test]
fn unwritable_output_fails_before_measuring() {
    let _machine = common::lock();
    usage_error(
        "hourglass -n 1 -d 1s -o /proc/sandglass-cannot-write-here",
        "cannot create run directory",
    );
}

#[test]
fn help_and_version() {
    let out = sandglass().args(["hourglass", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("usage: sandglass hourglass"));
    assert!(text.contains("CPU_SCAN_YIELD"));
    let out = sandglass().arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("sandglass "), "{text}");
    assert!(text.contains("commit "), "{text}");
    let out = sandglass().arg("--bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn sysinfo_json_is_valid() {
    let out = sandglass().args(["sysinfo", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["kernel_release"].is_string());
    assert!(v["preemption"]["model"].is_string());
}

#[test]
fn timer_bad_input() {
    usage_error("timer -c 99", "CPU 99 does not exist");
    usage_error("timer -i 0", "-i 0");
    usage_error("timer -i 0ms", "longer than zero");
    usage_error("timer -P f:200", "from 1 to 99");
    usage_error(
        "timer --timer bogus",
        "use hr, native, timerfd, posix or busy",
    );
    usage_error("timer -d -1s", "negative");
    usage_error("timer --mode sometimes", "use absolute");
    usage_error("timer --thresholds 1ms,x", "--thresholds x");
    usage_error("timer -P d:1ms:10ms", "hourglass -rh");
    usage_error("timer --cpu-dma-latency soon", "microseconds");
    usage_error("timer --frobnicate", "unexpected argument '--frobnicate'");
    usage_error("timer --stop-above 0us", "positive time");
    usage_error("timer --explain-above 0us", "positive time");
    usage_error("timer --trace --trace-keep lots", "--trace-keep lots");
    usage_error("timer --explain-above soon", "--explain-above soon");
    usage_error("timer --stop-above soon", "--stop-above soon");
    usage_error(
        "timer --stop-above 1ms --on-threshold bogus",
        "use mark (a marker",
    );
    usage_error("timer --stop-above 1ms --on-threshold mark", "add --trace");
    usage_error("timer --on-threshold continue", "--stop-above");
    usage_error("timer --trace --trace-buffer 1", "--trace-buffer");
}

#[test]
fn noise_bad_input() {
    usage_error("noise -c 99", "CPU 99 does not exist");
    usage_error("noise -T 0ns", "longer than zero");
    usage_error("noise -d 10", "has no unit");
    usage_error("noise --workload memcpy:4K", "use memmove:SIZE");
    usage_error("noise -e 0", "-e 0");
    usage_error("noise -P f:0", "from 1 to 99");
    usage_error("noise --stop-above -5us", "negative");
}

fn data(name: &str) -> String {
    format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let out = sandglass().args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Hourglass §5.5 through the command line: R = 3 ms and 29 ms; with 8 ms of jitter and
/// C = 19 ms the video task's R is 39 ms, a miss.
#[test]
fn analyze_rta_reproduces_hourglass_5_5() {
    let v = json_of(&["analyze", "rta", &data("hourglass-5.5.toml"), "--json"]);
    let r: Vec<u64> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["response_time_ns"].as_u64().unwrap())
        .collect();
    assert_eq!(r, vec![3_000_000, 29_000_000]);
    assert_eq!(v["schedulable"], true);
    assert!(v["utilization"].as_f64().unwrap() > 0.89);
    let v = json_of(&[
        "analyze",
        "rta",
        &data("hourglass-5.5-jitter.toml"),
        "--json",
    ]);
    assert_eq!(v["tasks"][1]["response_time_ns"], 39_000_000);
    assert_eq!(v["tasks"][1]["schedulable"], false);
    assert_eq!(v["schedulable"], false);
    let v = json_of(&["analyze", "edf", &data("hourglass-5.5.toml"), "--json"]);
    assert_eq!(v["feasible"], true);
    assert!(v["first_failure_ns"].is_null());
}

#[test]
fn analyze_small_models() {
    let v = json_of(&[
        "analyze",
        "two-rate",
        "--rate",
        "100:1530",
        "--rate",
        "2000:1333.6",
        "--json",
    ]);
    let o = v["overhead_ns"].as_f64().unwrap();
    assert!((66_000.0..68_000.0).contains(&o), "{o}");
    let v = json_of(&[
        "analyze",
        "switch-cost",
        "--work-one",
        "1000",
        "--work-many",
        "900",
        "--duration",
        "45s",
        "--switches",
        "1000",
        "--json",
    ]);
    // (1000 - 900)/1000 · 45 s / 1000 = 4.5 ms per switch.
    assert_eq!(v["cost_ns"].as_f64().unwrap().round(), 4_500_000.0);
    assert!((v["lost_fraction"].as_f64().unwrap() - 0.1).abs() < 1e-12);
    let v = json_of(&[
        "analyze",
        "mttf",
        "--buffer",
        "10ms",
        "--buffers",
        "2",
        "--compute",
        "4ms",
        "--exceedance",
        "0.001",
        "--json",
    ]);
    // slack = (2 - 1)·10 ms - 4 ms = 6 ms; MTTF = 10 ms / 0.001 = 10 s.
    assert_eq!(v["slack_ns"], 6_000_000);
    assert!((v["mttf_s"].as_f64().unwrap() - 10.0).abs() < 1e-9);
}

#[test]
fn analyze_admission_matches_the_kernels_arithmetic() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("dl.toml");
    std::fs::write(
        &f,
        "[[task]]\nname = \"a\"\nruntime = \"9ms\"\nperiod = \"10ms\"\n[[task]]\nname = \"b\"\nruntime = \"9ms\"\nperiod = \"10ms\"\n[[task]]\nname = \"c\"\nruntime = \"9ms\"\nperiod = \"10ms\"\n",
    )
    .unwrap();
    let v = json_of(&[
        "analyze",
        "admission",
        f.to_str().unwrap(),
        "--cpus",
        "2",
        "--json",
    ]);
    let admitted: Vec<bool> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["admitted"].as_bool().unwrap())
        .collect();
    assert_eq!(admitted, vec![true, true, false]);
    // 9/10 · 2^20 = 943718.4 → 943718; limit 2 · 950000/1000000 · 2^20 → 2 · 996147.
    assert_eq!(v["tasks"][0]["bw"], 943_718);
    assert_eq!(v["limit_bw"], 1_992_294);
}

/// A task whose wcet is above its deadline is analysed, not refused: its response time and
/// its miss.
#[test]
fn analyze_gives_a_task_longer_than_its_deadline_its_response_time() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("late.toml");
    std::fs::write(
        &f,
        "[[task]]\nname = \"fast\"\nwcet = \"1ms\"\nperiod = \"4ms\"\n[[task]]\nname = \"late\"\nwcet = \"5ms\"\nperiod = \"10ms\"\ndeadline = \"4ms\"\n",
    )
    .unwrap();
    let v = json_of(&["analyze", "rta", f.to_str().unwrap(), "--json"]);
    assert_eq!(v["tasks"][1]["response_time_ns"], 7_000_000, "{v}");
    assert_eq!(v["tasks"][1]["schedulable"], false, "{v}");
    assert_eq!(v["schedulable"], false, "{v}");
    let out = sandglass()
        .args(["analyze", "rta", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("MISSES: responds 3 ms after its deadline"),
        "{text}"
    );
}

/// `analyze rta --validate` refuses, before it runs anything, what it cannot run: its options
/// without it, edf, non-preemptive sets, deadlines beyond the period, C above the period and a
/// run too short for a whole period.
#[test]
fn analyze_rta_validate_refuses_what_it_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let set = data("hourglass-5.5.toml");
    usage_error(
        &format!("analyze rta {set} -d 2s"),
        "--duration applies to --validate only",
    );
    usage_error(
        &format!("analyze rta {set} --timer NATIVE"),
        "--timer applies to --validate only",
    );
    usage_error(
        &format!("analyze edf {set} --validate"),
        "--validate applies to rta only",
    );
    usage_error(
        &format!("analyze rta {set} --validate --non-preemptive"),
        "cannot validate --non-preemptive",
    );
    usage_error(
        &format!("analyze rta {set} --validate -d 20ms"),
        "shorter than the longest period (33 ms)",
    );
    usage_error(
        &format!("analyze rta {set} --validate -d ten"),
        "--duration ten",
    );
    let f = dir.path().join("long.toml");
    std::fs::write(
        &f,
        "[[task]]\nname = \"slow\"\nwcet = \"1ms\"\nperiod = \"4ms\"\ndeadline = \"6ms\"\n",
    )
    .unwrap();
    usage_error(
        &format!("analyze rta {} --validate", f.display()),
        "task slow: its deadline (6 ms) is beyond its period (4 ms)",
    );
    let f = dir.path().join("over.toml");
    std::fs::write(
        &f,
        "[[task]]\nname = \"over\"\nwcet = \"5ms\"\nperiod = \"4ms\"\n",
    )
    .unwrap();
    usage_error(
        &format!("analyze rta {} --validate", f.display()),
        "task over: C (5 ms) exceeds its period (4 ms)",
    );
}

#[test]
fn analyze_bad_files_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[[task]]\nname = \"a\"\nperiod = \"8ms\"\n", "wcet"),
        ("[[task]]\nname = \"a\"\nwcet = \"1ms\"\nperiod = \"0ms\"\n", ":4"),
        (
            "[[task]]\nname = \"a\"\nwcet = \"1ms\"\nperiod = \"8ms\"\n[[task]]\nname = \"a\"\nwcet = \"1ms\"\nperiod = \"8ms\"\n",
            "a",
        ),
        ("[[task]]\nname = \"a\"\nwcet = \"1ms\"\nperiod = \"8ms\"\ncolour = \"red\"\n", "colour"),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let f = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&f, text).unwrap();
        let name = f.to_str().unwrap().to_string();
        usage_error(&format!("analyze rta {name}"), needle);
        usage_error(&format!("analyze rta {name}"), &name);
    }
    let h = dir.path().join("hist.txt");
    std::fs::write(&h, "10us 5\n20us five\n").unwrap();
    let name = h.to_str().unwrap().to_string();
    usage_error(
        &format!("analyze mttf --histogram {name} --buffer 1ms --buffers 2"),
        &format!("{name}:2"),
    );
    usage_error("analyze two-rate --rate 100:1530", "give --rate twice");
    usage_error(
        "analyze mttf --buffer 1ms --buffers 2",
        "give the latency distribution",
    );
    usage_error(
        "analyze ctxsw /nonexistent-run",
        "no run or study /nonexistent-run: no such directory",
    );
    // A directory that is no run.
    usage_error("analyze ctxsw /", "no manifest.json");
}

/// Names are the user's own labels, printed on terminals and in Markdown: a task or study name
/// with a terminal control sequence or a bidirectional override is refused with one line that
/// shows it escaped, and nothing raw reaches the terminal (here, the error line), whatever the
/// path of the file holds.
#[test]
fn names_with_control_characters_are_refused_and_shown_escaped() {
    let dir = tempfile::tempdir().unwrap();
    // The file's own path has an escape too: shown escaped in the error.
    let tasks = dir.path().join("tasks\u{1b}[2J.toml");
    std::fs::write(
        &tasks,
        "[[task]]\nname = \"\\u001b[31mred\"\nwcet = \"1ms\"\nperiod = \"10ms\"\n",
    )
    .unwrap();
    let study = dir.path().join("study.toml");
    std::fs::write(
        &study,
        "[study]\nname = \"evil\\u202eyduts\"\n\n[[measure]]\nkind = \"timer\"\nduration = \"1s\"\n",
    )
    .unwrap();
    for (args, says) in [
        (
            vec!["analyze", "rta", tasks.to_str().unwrap()],
            "'name' is '\\u{1b}[31mred', with a control or bidirectional-override character",
        ),
        (
            vec!["check", tasks.to_str().unwrap(), "-d", "1s"],
            "\\u{1b}[31mred",
        ),
        (
            vec!["study", study.to_str().unwrap(), "--dry-run"],
            "[study] name 'evil\\u{202e}yduts' has a control or bidirectional-override character",
        ),
    ] {
        let out = sandglass().args(&args).output().unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            !stderr.contains('\u{1b}') && !stderr.contains('\u{202e}'),
            "{args:?}: {stderr:?}"
        );
        assert!(
            stderr.contains("tasks\\u{1b}[2J.toml") || args[0] == "study",
            "{stderr}"
        );
    }
}
