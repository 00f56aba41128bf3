//! `sandglass bench`: bad input gets one clear error line, exit code 2 and no file left
//! behind; short runs of every kind produce a complete run directory, a table and a JSON
//! object with the documented fields. No test asserts a speed: the figures depend on the
//! machine, only their structure and consistency are checked.

use crate::common;
use common::skip;

use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;

/// The command with its runs directed into `runs` and its working directory in `cwd`.
fn sandglass(runs: &Path, cwd: &Path) -> Command {
    let mut c = Command::cargo_bin("sandglass").unwrap();
    c.env("SANDGLASS_RUNS_DIR", runs).current_dir(cwd);
    c
}

/// Files and directories under `dir`, recursively (empty when it does not exist).
fn entries(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            out.push(e.path().display().to_string());
            if e.path().is_dir() {
                out.extend(entries(&e.path()));
            }
        }
    }
    out
}

/// Runs `args` (a program may be put in front, such as `taskset -c 0`), expects exit code 2,
/// one `sandglass: error:` line containing `needle`, nothing on stdout and no file anywhere.
fn usage_error_with(prefix: &[&str], args: &[&str], needle: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let out = if prefix.is_empty() {
        sandglass(&runs, tmp.path()).args(args).output().unwrap()
    } else {
        let bin = assert_cmd::cargo::cargo_bin("sandglass");
        std::process::Command::new(prefix[0])
            .args(&prefix[1..])
            .arg(bin)
            .args(args)
            .env("SANDGLASS_RUNS_DIR", &runs)
            .current_dir(tmp.path())
            .output()
            .unwrap()
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("sandglass: error:"))
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "{args:?}: expected one error line: {stderr}"
    );
    assert!(
        errors[0].contains(needle),
        "{args:?}: {:?} lacks {needle:?}",
        errors[0]
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}: printed to stdout");
    assert!(!runs.exists(), "{args:?}: created {}", runs.display());
    assert_eq!(
        entries(tmp.path()),
        Vec::<String>::new(),
        "{args:?}: left files"
    );
}

fn usage_error(args: &[&str], needle: &str) {
    usage_error_with(&[], args, needle);
}

#[test]
fn unknown_mechanism() {
    usage_error(
        &["bench", "ipc", "--mech", "bogus"],
        "--mech bogus: unknown mechanism",
    );
    usage_error(
        &["bench", "ipc", "--mech", "pipe,bogus"],
        "use pipe, unix-stream",
    );
}

#[test]
fn a_size_of_zero() {
    usage_error(&["bench", "ipc", "--sizes", "0"], "a size of 0 bytes");
    usage_error(&["bench", "ipc", "--sizes", "1,0K"], "--sizes 1,0K");
    usage_error(&["bench", "copy", "--sizes", "0"], "a size of 0 bytes");
    usage_error(&["bench", "file", "--size", "0"], "--size 0");
    usage_error(
        &["bench", "ctxsw", "--working-sets", "0,0K"],
        "--working-sets 0K",
    );
}

#[test]
fn cross_cpu_on_one_cpu() {
    if Command::new("taskset").arg("-V").output().is_err() {
        skip("taskset (util-linux) is not installed; the decision itself is tested in the library");
        return;
    }
    // Restricted to CPU 0, the process sees a one-CPU machine.
    usage_error_with(
        &["taskset", "-c", "0"],
        &["bench", "ipc", "--mech", "pipe", "--placement", "cross-cpu"],
        "--placement cross-cpu needs two CPUs, but this process may use only CPU 0",
    );
}

#[test]
fn impossible_placements() {
    usage_error(
        &["bench", "ipc", "--placement", "cross-cpu", "--cpus", "0,0"],
        "two different CPUs",
    );
    usage_error(&["bench", "ipc", "--cpus", "99999"], "CPU 99999");
    usage_error(&["bench", "ipc", "--cpus", "a"], "--cpus a");
    usage_error(&["bench", "ipc", "--placement", "numa"], "--placement numa");
    usage_error(&["bench", "copy", "--cpu", "99999"], "--cpu 99999");
}

#[test]
fn unwritable_temporary_directory() {
    usage_error(
        &["bench", "file", "--dir", "/proc", "--size", "64K"],
        "--dir /proc: cannot create a temporary directory there",
    );
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain-file");
    std::fs::write(&plain, b"x").unwrap();
    let shown = plain.display().to_string();
    usage_error(
        &["bench", "file", "--dir", &shown, "--size", "64K"],
        "not a directory",
    );
    assert_eq!(
        entries(tmp.path()),
        vec![shown],
        "nothing was added next to it"
    );
    usage_error(
        &[
            "bench",
            "file",
            "--dir",
            "/nonexistent/sandglass",
            "--size",
            "64K",
        ],
        "not a directory",
    );
}

#[test]
fn other_bad_options() {
    usage_error(&["bench", "ipc", "--cell-time", "0s"], "--cell-time 0s");
    usage_error(&["bench", "ipc", "--cell-time", "10"], "has no unit");
    usage_error(&["bench", "ipc", "-P", "f:200"], "from 1 to 99");
    usage_error(&["bench", "ctxsw", "--ring", "1"], "--ring 1");
    usage_error(&["bench", "file", "--size", "5000"], "multiple of 4 KiB");
    usage_error(&["bench", "file", "--methods", "stdio"], "--methods stdio");
    usage_error(
        &["bench", "timer-overhead", "--rates", "100"],
        "--rates 100",
    );
    usage_error(
        &["bench", "timer-overhead", "--rates", "100,100"],
        "two different",
    );
    usage_error(
        &["bench", "timer-overhead", "--timers", "busy"],
        "unknown timer 'busy'",
    );
    usage_error(&["bench", "bogus"], "unrecognized subcommand");
    usage_error(
        &["bench", "budget", "/nonexistent.toml"],
        "cannot read the budget file",
    );
}

#[test]
fn bad_budget_files() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("period = \"100ms\"\n", "has no [[step]]"),
        (
            "period = \"100ms\"\n[[step]]\nkind = \"send\"\nbytes = 100\nmech = \"bogus\"\n",
            ":5: step 1 (send): mech bogus: unknown mechanism",
        ),
        (
            "period = \"100ms\"\n[[step]]\nkind = \"copy\"\nbytes = 0\n",
            "a size of 0 bytes",
        ),
        ("period = 3\n[[step]]\nkind = \"copy\"\nbytes = 1\n", ":1:"),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let f = tmp.path().join(format!("b{i}.toml"));
        std::fs::write(&f, text).unwrap();
        usage_error(&["bench", "budget", f.to_str().unwrap()], needle);
    }
}

/// Runs a short benchmark with `--json` into a fresh run directory and returns the JSON and
/// the run directory, after checking the manifest and every file's checksum.
fn json_run(args: &[&str], kind: &str) -> (Value, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let out = sandglass(&runs, tmp.path())
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["kind"], kind);
    assert_eq!(v["state"], "completed");
    let dir = Path::new(v["run_dir"].as_str().unwrap()).to_path_buf();
    assert!(dir.starts_with(&runs), "{}", dir.display());
    let reader = sandglass::store::RunReader::open(&dir).expect("a finished run directory");
    let m = &reader.manifest;
    assert_eq!(m.kind.as_str(), kind);
    assert_eq!(m.schema_version, sandglass::store::SCHEMA_VERSION);
    assert!(!m.system.kernel_release.is_empty());
    assert!(m.config.is_object());
    assert!(!m.files.is_empty());
    for f in &m.files {
        reader
            .read(&f.name)
            .expect("size and SHA-256 match the manifest");
    }
    let saved: Value = serde_json::from_slice(&reader.read("result.json").unwrap()).unwrap();
    assert_eq!(saved, v, "result.json is what --json printed");
    (v, tmp)
}

fn dist_ok(d: &Value) {
    let n = |k: &str| d[k].as_i64().unwrap_or_else(|| panic!("{k} in {d}"));
    assert!(d["count"].as_u64().unwrap() > 0);
    assert!(n("min_ns") <= n("p50_ns") && n("p50_ns") <= n("p99_ns") && n("p99_ns") <= n("max_ns"));
}

#[test]
fn copy_runs_briefly() {
    let _machine = common::lock();
    let (v, _t) = json_run(
        &[
            "bench",
            "copy",
            "--sizes",
            "512,64K",
            "--cell-time",
            "2ms",
            "--max-samples",
            "20",
        ],
        "bench-copy",
    );
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6);
    for c in cells {
        dist_ok(&c["sample_ns"]);
        assert_eq!(c["verified"], true);
        assert!(c["p50_bytes_per_s"].as_f64().unwrap() > 0.0);
    }
    let variants: Vec<&str> = cells[..3]
        .iter()
        .map(|c| c["variant"].as_str().unwrap())
        .collect();
    assert_eq!(variants, ["aligned", "odd-size", "odd-offset"]);
}

#[test]
fn ipc_runs_briefly_and_prints_the_comparison() {
    let _machine = common::lock();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let out = sandglass(&runs, tmp.path())
        .args([
            "bench",
            "ipc",
            "--mech",
            "pipe,shm-futex,mq",
            "--sizes",
            "1,4K,100000",
            "--cell-time",
            "2ms",
            "--max-samples",
            "20",
            "--warmup",
            "2",
            "--verify-all",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("median one-way latency by mechanism"),
        "{stdout}"
    );
    assert!(stdout.contains("t(N) = a + N/b"), "{stdout}");
    assert!(stdout.contains("placement verified"), "{stdout}");
    assert!(stdout.contains("run directory:"), "{stdout}");

    let (v, _t) = json_run(
        &[
            "bench",
            "ipc",
            "--mech",
            "all",
            "--sizes",
            "1,65537",
            "--cell-time",
            "2ms",
            "--max-samples",
            "15",
            "--warmup",
            "1",
            "--verify-all",
        ],
        "bench-ipc",
    );
    assert_eq!(v["placement"], "same-cpu");
    let mechs = v["mechanisms"].as_array().unwrap();
    assert_eq!(mechs.len(), 7);
    for m in mechs {
        assert_eq!(m["placement_verified"], true, "{}", m["mechanism"]);
        assert!(m["model"]["fixed_ns"].is_number(), "{}", m["mechanism"]);
        assert_eq!(m["model"]["residuals_ns"].as_array().unwrap().len(), 2);
        for c in m["cells"].as_array().unwrap() {
            dist_ok(&c["one_way_ns"]);
            assert!(c["error"].is_null(), "{c}");
            assert_eq!(c["client_cpus"], serde_json::json!([v["client_cpu"]]));
            assert_eq!(c["server_cpus"], serde_json::json!([v["server_cpu"]]));
            assert_eq!(
                c["verified_messages"].as_u64().unwrap(),
                c["round_trips"].as_u64().unwrap() + 1
            );
        }
    }
}

#[test]
fn ipc_cross_cpu_reads_where_each_side_ran() {
    let _machine = common::lock();
    let cpus = sandglass::system::allowed_cpus();
    if cpus.len() < 2 {
        skip(&format!(
            "this process may use only CPU {cpus:?}; cross-cpu needs two"
        ));
        return;
    }
    let (v, _t) = json_run(
        &[
            "bench",
            "ipc",
            "--mech",
            "pipe,shm-eventfd",
            "--sizes",
            "64",
            "--placement",
            "cross-cpu",
            "--cell-time",
            "2ms",
            "--max-samples",
            "15",
        ],
        "bench-ipc",
    );
    assert_ne!(v["client_cpu"], v["server_cpu"]);
    for m in v["mechanisms"].as_array().unwrap() {
        let c = &m["cells"][0];
        assert_eq!(c["client_cpus"], serde_json::json!([v["client_cpu"]]));
        assert_eq!(c["server_cpus"], serde_json::json!([v["server_cpu"]]));
        assert_eq!(c["placement_verified"], true);
    }
}

#[test]
fn ctxsw_runs_briefly() {
    let _machine = common::lock();
    let (v, _t) = json_run(
        &[
            "bench",
            "ctxsw",
            "--working-sets",
            "0,16K",
            "--cell-time",
            "6ms",
            "--max-trips",
            "40",
        ],
        "bench-ctxsw",
    );
    assert_eq!(v["ring"], 2);
    assert_eq!(v["token"], "pipe");
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    for c in cells {
        dist_ok(&c["overhead_ns"]);
        assert_eq!(c["placement_verified"], true);
        assert_eq!(c["cpus_seen"], serde_json::json!([v["cpu"]]));
        let hop = c["hop_ns"]["p50_ns"].as_i64().unwrap();
        let over = c["overhead_ns"]["p50_ns"].as_i64().unwrap();
        assert_eq!(c["switch_ns"]["p50_ns"].as_i64().unwrap(), hop - over);
    }
    assert!(cells[0]["indirect_p50_ns"].is_null());
    assert!(cells[1]["indirect_p50_ns"].is_i64());
}

#[test]
fn file_runs_briefly_and_removes_its_file() {
    let _machine = common::lock();
    let dir = tempfile::tempdir().unwrap();
    let shown = dir.path().display().to_string();
    let (v, _t) = json_run(
        &[
            "bench",
            "file",
            "--dir",
            &shown,
            "--size",
            "1M",
            "--block-sizes",
            "4K,64K",
            "--methods",
            "buffered,read,mmap",
        ],
        "bench-file",
    );
    let passes = v["passes"].as_array().unwrap();
    assert_eq!(passes.len(), 8);
    for p in passes {
        assert_eq!(p["content_ok"], true, "{p}");
        assert_eq!(p["bytes"], 1 << 20);
        assert!(p["freetime_busy_cpus"].is_number());
        assert!(p["usage"]["cpu_share"].is_number());
    }
    let caches: Vec<&str> = passes
        .iter()
        .map(|p| p["cache"].as_str().unwrap())
        .collect();
    assert_eq!(caches[..2], ["cold", "warm"]);
    assert_eq!(v["file"]["removed"], true);
    assert!(v["freetime_caveat"].as_str().unwrap().contains("perturb"));
    assert_eq!(
        entries(dir.path()),
        Vec::<String>::new(),
        "the temporary file is gone"
    );
}

#[test]
fn timer_overhead_runs_briefly() {
    let _machine = common::lock();
    let (v, _t) = json_run(
        &[
            "bench",
            "timer-overhead",
            "--rates",
            "100,2000",
            "--phase",
            "20ms",
            "--repeat",
            "1",
            "--timers",
            "hr,timerfd",
            "--working-set",
            "4K",
        ],
        "bench-timer-overhead",
    );
    let kinds = v["kinds"].as_array().unwrap();
    assert_eq!(kinds.len(), 2);
    assert_eq!(kinds[0]["timer"], "HR");
    for k in kinds {
        assert_eq!(k["phases"].as_array().unwrap().len(), 2);
        assert_eq!(k["analysis"]["medians"].as_array().unwrap().len(), 2);
        assert_eq!(k["placement_verified"], true);
    }
}

#[test]
fn budget_runs_briefly() {
    let _machine = common::lock();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("frame.toml");
    std::fs::write(
        &file,
        "period = \"5ms\"\nframes = 6\npolicy = \"o:0\"\n\
         [[step]]\nkind = \"read\"\nbytes = \"8KiB\"\ncache = \"cold\"\n\
         [[step]]\nkind = \"send\"\nbytes = 1000\nmech = \"unix-dgram\"\n\
         [[step]]\nkind = \"compute\"\ntime = \"100us\"\n",
    )
    .unwrap();
    let shown = tmp.path().display().to_string();
    let (v, _t) = json_run(
        &[
            "bench",
            "budget",
            file.to_str().unwrap(),
            "--dir",
            &shown,
            "--predict-samples",
            "20",
        ],
        "bench-budget",
    );
    assert_eq!(v["measured"]["frames"], 6);
    assert_eq!(v["steps"].as_array().unwrap().len(), 3);
    assert_eq!(v["steps"][1]["mechanism"], "unix-dgram");
    assert_eq!(v["prediction"]["draws"], 20_000);
    assert!(v["prediction"]["headroom_ns"].is_i64());
    for s in v["steps"].as_array().unwrap() {
        dist_ok(&s["predicted_ns"]);
        dist_ok(&s["measured_ns"]);
    }
    assert_eq!(
        entries(tmp.path()),
        vec![file.display().to_string()],
        "step files removed"
    );
}

/// `--load` runs the loads through the frames only and reports what they achieved; nothing of
/// theirs outlives the run.
#[test]
fn budget_runs_under_a_load() {
    let _machine = common::lock();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("frame.toml");
    std::fs::write(
        &file,
        "period = \"10ms\"\nframes = 20\npolicy = \"o:0\"\n\
         [[step]]\nkind = \"copy\"\nbytes = \"64KiB\"\n",
    )
    .unwrap();
    let (v, _t) = json_run(
        &[
            "bench",
            "budget",
            file.to_str().unwrap(),
            "--predict-samples",
            "20",
            "--load",
            "cpu:1",
            "--settle",
            "100ms",
        ],
        "bench-budget",
    );
    assert_eq!(v["measured"]["frames"], 20);
    let loads = v["loads"].as_array().unwrap();
    assert_eq!(loads.len(), 1, "{v}");
    assert_eq!(loads[0]["spec"], "cpu:1");
    assert!(loads[0]["work"].as_f64().unwrap() > 0.0, "{}", loads[0]);
    assert!(loads[0]["error"].is_null(), "{}", loads[0]);
    // The load's threads belonged to the process, which has exited: no load thread can
    // outlive it, and no child process was started.
}
