//! The `--json` outputs against their documented, versioned schemas (`docs/schema/`,
//! `docs/json.md`).
//!
//! Each output is validated with the `jsonschema` crate (draft 2020-12), and every key it
//! carries must be declared in its schema, so that a renamed, missing or undocumented field
//! fails here. Measurements that need real-time priority skip with a printed reason when the
//! process is not root; `sandglass load` needs no privilege and always runs.

use crate::common;
use common::{is_root, share, skip, Guarded};

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Every versioned output, as `sandglass schema` names them.
const KINDS: [&str; 34] = [
    "timer",
    "check",
    "noise",
    "hourglass",
    "study",
    "load",
    "bench-copy",
    "bench-ipc",
    "bench-ctxsw",
    "bench-file",
    "bench-timer-overhead",
    "bench-budget",
    "compare",
    "merge",
    "runs",
    "sysinfo",
    "study-record",
    "calibrate",
    "runs-show",
    "runs-rebuild",
    "analyze-rta",
    "analyze-rta-validate",
    "analyze-edf",
    "analyze-admission",
    "analyze-mttf",
    "analyze-mttf-grid",
    "analyze-mttf-target",
    "analyze-worst-case",
    "analyze-fit",
    "analyze-two-rate",
    "analyze-switch-cost",
    "analyze-ctxsw",
    "analyze-cache-cost",
    "analyze-ttest",
];

fn schema_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema")
}

/// The committed schema of `name`.
fn schema(name: &str) -> Value {
    let path = schema_dir().join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The schema of `name` as `sandglass schema` derives it from the types, as text.
fn generated(name: &str) -> String {
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args(["schema", name])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sandglass schema {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn committed_schemas_are_the_generated_ones() {
    let bless = std::env::var_os("SANDGLASS_BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for name in KINDS {
        let path = schema_dir().join(format!("{name}.schema.json"));
        let fresh = generated(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(fresh.as_str()) {
            if bless {
                std::fs::write(&path, &fresh).unwrap();
            } else {
                stale.push(path.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "these schemas differ from the result types: {stale:?}; review the change, raise the \
         version where a field was removed, renamed or retyped (docs/json.md), and rewrite them \
         with SANDGLASS_BLESS=1 cargo test -p sandglass-cli --test it schema::committed"
    );
    // No schema is left that no output has.
    for e in std::fs::read_dir(schema_dir()).unwrap() {
        let file = e.unwrap().file_name().to_string_lossy().into_owned();
        let kind = file.trim_end_matches(".schema.json");
        assert!(
            KINDS.contains(&kind),
            "docs/schema/{file} describes no output"
        );
    }
}

#[test]
fn schema_names_every_output_and_refuses_others() {
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args(["schema", "bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let listed = err
        .trim()
        .rsplit_once("give one of ")
        .unwrap_or_else(|| panic!("{err}"))
        .1;
    assert_eq!(listed.split(", ").collect::<Vec<_>>(), KINDS, "{err}");
}

#[test]
fn no_output_has_pairs_or_rust_enum_names() {
    fn walk(v: &Value, path: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if m.contains_key("prefixItems") {
                    out.push(format!("{path}: a tuple; use an object with named fields"));
                }
                let names = m
                    .get("enum")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .chain(m.get("const"))
                    .filter_map(Value::as_str)
                    .chain(
                        m.get("properties")
                            .and_then(Value::as_object)
                            .into_iter()
                            .flat_map(|p| p.keys().map(String::as_str)),
                    );
                for n in names {
                    let mut c = n.chars();
                    if c.next().is_some_and(|c| c.is_ascii_uppercase())
                        && c.next().is_some_and(|c| c.is_ascii_lowercase())
                    {
                        out.push(format!(
                            "{path}: '{n}' is a Rust name; rename it in snake_case"
                        ));
                    }
                }
                for (k, x) in m {
                    walk(x, &format!("{path}/{k}"), out);
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, &format!("{path}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    for name in KINDS {
        let mut found = Vec::new();
        walk(&schema(name), "", &mut found);
        assert!(found.is_empty(), "{name}: {found:#?}");
    }
}

/// Runs `sandglass ARGS` in `dir`, with its runs there too, and returns its JSON output.
fn json_in(dir: &Path, args: &[&str]) -> Value {
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args(args)
        .env("SANDGLASS_RUNS_DIR", dir)
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(dir))
        .current_dir(dir)
        .guarded_output();
    assert!(
        out.status.success(),
        "sandglass {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Runs `sandglass ARGS` with its runs in a temporary directory and returns its JSON output.
fn json_of(args: &[&str]) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    json_in(tmp.path(), args)
}

/// The validation errors of `value` against `schema`, one line each.
fn errors(schema: &Value, value: &Value) -> Vec<String> {
    let v = jsonschema::draft202012::new(schema).expect("the schema compiles");
    v.iter_errors(value)
        .map(|e| format!("{}: {e}", e.instance_path))
        .collect()
}

/// The schemas that apply to `value` under `schema`: `schema` itself with its `$ref`s into
/// `#/$defs/` followed, and the branches of its `anyOf`, `oneOf` or `allOf` that `value` fits
/// (an internally tagged enum beside a struct's own fields is a `oneOf` beside `properties`).
fn applying<'a>(root: &'a Value, schema: &'a Value, value: &Value, out: &mut Vec<&'a Value>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/$defs/");
        return applying(root, &root["$defs"][name], value, out);
    }
    out.push(schema);
    for key in ["anyOf", "oneOf", "allOf"] {
        for b in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let mut alone = b.clone();
            alone["$defs"] = root["$defs"].clone();
            if errors(&alone, value).is_empty() {
                applying(root, b, value, out);
                if key != "allOf" {
                    break;
                }
            }
        }
    }
}

/// Keys of `value` that its schema does not declare, as JSON pointers.
fn undocumented(root: &Value, schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    let mut schemas = Vec::new();
    applying(root, schema, value, &mut schemas);
    let find = |key: &str| schemas.iter().find_map(|s| s.get(key));
    match value {
        Value::Object(map) => {
            // Maps with numeric keys (`per_cpu`) declare them by pattern.
            let numbered = find("patternProperties").and_then(|p| p.get("^\\d+$"));
            // A map open on purpose (a catalog row's `figures`) says `additionalProperties`.
            let rest = find("additionalProperties").filter(|a| *a != &Value::Bool(false));
            for (k, v) in map {
                let declared = schemas
                    .iter()
                    .find_map(|s| s.get("properties").and_then(|p| p.get(k)));
                let by_pattern = numbered.filter(|_| k.bytes().all(|b| b.is_ascii_digit()));
                match declared.or(by_pattern).or(rest) {
                    Some(Value::Bool(true)) => {}
                    Some(s) => undocumented(root, s, v, &format!("{path}/{k}"), out),
                    None => out.push(format!("{path}/{k}")),
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = find("items") {
                for (i, v) in items.iter().enumerate() {
                    undocumented(root, s, v, &format!("{path}/{i}"), out);
                }
            }
        }
        _ => {}
    }
}

/// Validates `value` against the schema `name`, checks that it declares every key of `value`
/// and that it catches a renamed top-level field and the removal of each of `nested`.
fn check(name: &str, value: &Value, nested: &[&str]) {
    let s = schema(name);
    let errs = errors(&s, value);
    assert!(errs.is_empty(), "{name}: {errs:#?}\n{value:#}");
    let mut extra = Vec::new();
    undocumented(&s, &s, value, "", &mut extra);
    assert!(
        extra.is_empty(),
        "{name}: fields missing from docs/schema/{name}.schema.json: {extra:?}"
    );
    assert_eq!(value["schema"], s["properties"]["schema"]["const"]);
    assert!(value["schema"]
        .as_str()
        .unwrap()
        .starts_with(&format!("sandglass-{name}/")));

    let required: Vec<&str> = s["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut renamed = value.clone();
    let obj = renamed.as_object_mut().unwrap();
    let (k, v) = obj
        .iter()
        .find(|(k, _)| k.as_str() != "schema" && required.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    obj.remove(&k);
    obj.insert(format!("{k}_renamed"), v);
    assert!(
        !errors(&s, &renamed).is_empty(),
        "{name}: renaming '{k}' went unnoticed"
    );
    for pointer in nested {
        let (parent, field) = pointer.rsplit_once('/').unwrap();
        let mut missing = value.clone();
        missing
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("{name}: no {parent}"))
            .remove(field)
            .unwrap_or_else(|| panic!("{name}: no {pointer}"));
        assert!(
            !errors(&s, &missing).is_empty(),
            "{name}: removing {pointer} went unnoticed"
        );
    }
}

#[test]
fn every_schema_is_a_valid_draft_2020_12_schema() {
    for name in KINDS {
        let s = schema(name);
        assert_eq!(
            s["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{name}"
        );
        jsonschema::draft202012::new(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
        let meta = jsonschema::draft202012::meta::validate(&s);
        assert!(meta.is_ok(), "{name}: {meta:?}");
    }
}

#[test]
fn load_json_matches_its_schema() {
    let _g = share();
    let v = json_of(&["load", "cpu:1", "-d", "1s", "--json"]);
    check("load", &v, &["/loads/0/per_s"]);
}

#[test]
fn sysinfo_json_matches_its_schema() {
    let v = json_of(&["sysinfo", "--json"]);
    check("sysinfo", &v, &["/kernel_release"]);
}

#[test]
fn bench_and_runs_json_match_their_schemas() {
    let _g = share();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let shown = d.display().to_string();
    let frame = d.join("frame.toml");
    std::fs::write(
        &frame,
        "period = \"5ms\"\nframes = 4\npolicy = \"o:0\"\n\
         [[step]]\nkind = \"compute\"\ntime = \"100us\"\n",
    )
    .unwrap();
    let frame = frame.display().to_string();
    let cases: [(&str, Vec<&str>, &[&str]); 6] = [
        (
            "bench-copy",
            vec!["copy", "--sizes", "512", "--cell-time", "2ms"],
            &["/cells/0/size_bytes"],
        ),
        (
            "bench-ipc",
            vec![
                "ipc",
                "--mech",
                "pipe",
                "--sizes",
                "64",
                "--cell-time",
                "2ms",
            ],
            &[],
        ),
        (
            "bench-ctxsw",
            vec!["ctxsw", "--working-sets", "0", "--cell-time", "2ms"],
            &[],
        ),
        (
            "bench-file",
            vec![
                "file",
                "--dir",
                &shown,
                "--size",
                "256K",
                "--block-sizes",
                "4K",
                "--methods",
                "read",
            ],
            &[],
        ),
        (
            "bench-timer-overhead",
            vec![
                "timer-overhead",
                "--rates",
                "100,2000",
                "--phase",
                "20ms",
                "--repeat",
                "1",
                "--timers",
                "hr",
            ],
            &[],
        ),
        (
            "bench-budget",
            vec!["budget", &frame, "--predict-samples", "10"],
            &[],
        ),
    ];
    for (name, args, nested) in cases {
        let mut all = vec!["bench"];
        all.extend(args);
        all.push("--json");
        let v = json_in(d, &all);
        check(name, &v, nested);
    }
    let v = json_in(d, &["runs", "list", "--json"]);
    assert_eq!(v["runs"].as_array().unwrap().len(), 6, "{v:#}");
    check("runs", &v, &["/runs/0/figures"]);
    let id = v["runs"][0]["id"].as_str().unwrap();
    let v = json_in(d, &["runs", "show", id, "--json"]);
    assert_eq!(v["intact"], true, "{v:#}");
    check("runs-show", &v, &["/manifest/tool", "/files/0/sha256"]);
    let v = json_in(d, &["runs", "rebuild", "--json"]);
    assert_eq!(v["indexed"], 6, "{v:#}");
    check("runs-rebuild", &v, &["/indexed"]);
}

#[test]
fn calibrate_json_matches_its_schema() {
    let _g = share();
    let v = json_of(&["calibrate", "-d", "100ms", "--json"]);
    check(
        "calibrate",
        &v,
        &["/counter/kind", "/loops/0/stats", "/loops/0/above/0/count"],
    );
}

/// Every `analyze` output, on the example files, numbers written here, a short timer run and a
/// short Hourglass run (neither needs root).
#[test]
fn analyze_json_matches_its_schemas() {
    let _g = share();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let tasks = examples.join("tasks.toml").display().to_string();
    let reservations = examples.join("reservations.toml").display().to_string();
    std::fs::write(d.join("fit.txt"), "1024 2.1us\n4096 4.0us\n16384 11.9us\n").unwrap();
    std::fs::write(d.join("a.txt"), "10 11 12 13 12 11 10 12\n").unwrap();
    std::fs::write(d.join("b.txt"), "14 15 13 16 15 14 15 16\n").unwrap();
    json_in(
        d,
        &["timer", "-c", "0", "-d", "2s", "-o", "timer", "--json"],
    );
    let hourglass = Command::cargo_bin("sandglass")
        .unwrap()
        .args(["hourglass", "-n", "2", "-d", "1s", "-x", "-o", "hg"])
        .env("SANDGLASS_RUNS_DIR", d)
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(d))
        .current_dir(d)
        .guarded_output();
    assert!(hourglass.status.success());
    let cases: Vec<(&str, Vec<&str>, &[&str])> = vec![
        (
            "analyze-rta",
            vec!["rta", &tasks],
            &["/tasks/0/response_time_ns"],
        ),
        ("analyze-edf", vec!["edf", &tasks], &["/tasks/0/name"]),
        (
            "analyze-admission",
            vec!["admission", &reservations, "--cpus", "2"],
            &[],
        ),
        (
            "analyze-mttf",
            vec![
                "mttf",
                "--run",
                "timer",
                "--buffer",
                "2ms",
                "--buffers",
                "3",
                "--compute",
                "1ms",
            ],
            &[],
        ),
        (
            "analyze-mttf-grid",
            vec!["mttf", "--run", "timer", "--grid", "--compute", "1ms"],
            &["/rows/0/buffers"],
        ),
        (
            "analyze-mttf-target",
            vec![
                "mttf",
                "--run",
                "timer",
                "--target",
                "1h",
                "--compute",
                "1ms",
            ],
            &[],
        ),
        (
            "analyze-worst-case",
            vec!["worst-case", "--run", "timer"],
            &[],
        ),
        ("analyze-fit", vec!["fit", "fit.txt"], &[]),
        (
            "analyze-two-rate",
            vec!["two-rate", "--rate", "100:1530", "--rate", "2000:1333.6"],
            &[],
        ),
        (
            "analyze-switch-cost",
            vec![
                "switch-cost",
                "--work-one",
                "1000000",
                "--work-many",
                "900000",
                "--duration",
                "1s",
                "--switches",
                "10000",
            ],
            &[],
        ),
        ("analyze-ctxsw", vec!["ctxsw", "hg"], &[]),
        (
            "analyze-cache-cost",
            vec![
                "cache-cost",
                "--sizes",
                "4",
                "--reps",
                "1",
                "--duration",
                "100ms",
                "--threads",
                "2",
            ],
            &["/rows/0/size_kb"],
        ),
        (
            "analyze-ttest",
            vec!["ttest", "a.txt", "b.txt"],
            &["/test/p"],
        ),
    ];
    for (name, args, nested) in cases {
        let mut all = vec!["analyze"];
        all.extend(args);
        all.push("--json");
        let v = json_in(d, &all);
        check(name, &v, nested);
    }
}

/// `analyze rta --validate --json` on Hourglass §5.5's set, run for one second (root: the
/// threads need their SCHED_FIFO priorities).
#[test]
fn analyze_rta_validate_json_matches_its_schema() {
    if !is_root() {
        skip("analyze rta --validate needs SCHED_FIFO (root)");
        return;
    }
    let _g = share();
    let tmp = tempfile::tempdir().unwrap();
    let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hourglass-5.5.toml");
    let v = json_in(
        tmp.path(),
        &[
            "analyze",
            "rta",
            tasks.to_str().unwrap(),
            "--validate",
            "-d",
            "1s",
            "--shared-cpus",
            "--json",
        ],
    );
    check(
        "analyze-rta-validate",
        &v,
        &[
            "/analysis/tasks/0/response_time_ns",
            "/validation/tasks/1/agreement",
        ],
    );
}

#[test]
fn compare_json_matches_its_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let runs: Vec<String> = [1.0, 2.0]
        .iter()
        .enumerate()
        .map(|(k, scale)| {
            let dir = tmp.path().join(format!("r{k}"));
            let samples: Vec<(u64, u64, i64, i64, bool)> = (0..2_000u64)
                .map(|i| {
                    (
                        0,
                        i,
                        i as i64 * 1_000_000,
                        (20_000 + i * 37 % 5_000) as i64,
                        false,
                    )
                })
                .map(|(c, i, t, l, m)| (c, i, t, (l as f64 * scale) as i64, m))
                .collect();
            sandglass_report::export::fixture::timer_run(&dir, &samples).unwrap();
            dir.display().to_string()
        })
        .collect();
    let v = json_of(&["compare", &runs[0], &runs[1], "--json"]);
    check(
        "compare",
        &v,
        &[
            "/figures/0/values/0/value",
            "/comparisons/0/changes/0/baseline",
        ],
    );
}

#[test]
fn merge_json_matches_its_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let runs: Vec<String> = (0..2u64)
        .map(|k| {
            let dir = tmp.path().join(format!("r{k}"));
            let samples: Vec<(u64, u64, i64, i64, bool)> = (0..1_000u64)
                .map(|i| {
                    (
                        k,
                        i,
                        i as i64 * 1_000_000,
                        (10_000 + i * 53 % 9_000) as i64,
                        i % 97 == 0,
                    )
                })
                .collect();
            sandglass_report::export::fixture::timer_run(&dir, &samples).unwrap();
            dir.display().to_string()
        })
        .collect();
    let v = json_of(&["report", "--merge", &runs[0], &runs[1], "--json"]);
    assert_eq!(v["merged"]["count"], 2_000);
    check("merge", &v, &[]);
}

#[test]
fn hourglass_summary_matches_its_schema() {
    let _g = share();
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args([
            "hourglass",
            "-n",
            "2",
            "-d",
            "1s",
            "-t",
            "1",
            "-w",
            "PERIODIC",
            "2ms",
            "10ms",
            "-o",
            "h",
            "--json",
        ])
        .env("SANDGLASS_RUNS_DIR", tmp.path())
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(tmp.path()))
        .current_dir(tmp.path())
        .guarded_output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(tmp.path().join("h/summary.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    check("hourglass", &v, &["/switches/count", "/threads/0/workload"]);
    // `--json` prints the same result on standard output, and nothing else.
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "hourglass --json: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(printed, v);
}

/// `check --json` and the run's check.json (issue acceptance: the verdict, findings, miss
/// probability and MTTF with an interval, validated against the schema).
#[test]
fn check_json_matches_its_schema() {
    if !is_root() {
        skip("needs root for SCHED_FIFO timer threads (CI runs as root)");
        return;
    }
    let _g = share();
    let tmp = tempfile::tempdir().unwrap();
    let v = json_in(
        tmp.path(),
        &["check", "audio:64@48000x2", "-d", "3s", "-c", "1", "--json"],
    );
    check(
        "check",
        &v,
        &[
            "/verdict/level",
            "/predictions/miss_probability_high",
            "/findings/0/fix",
            "/workload/period_ns",
        ],
    );
    let saved = Path::new(v["run_dir"].as_str().unwrap()).join("check.json");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(saved).unwrap()).unwrap();
    assert_eq!(saved, v);
}

#[test]
fn timer_json_matches_its_schema() {
    if !is_root() {
        skip("needs root for SCHED_FIFO timer threads (CI runs as root)");
        return;
    }
    let _g = share();
    let tmp = tempfile::tempdir().unwrap();
    let v = json_in(tmp.path(), &["timer", "-c", "1", "-d", "1s", "--json"]);
    check(
        "timer",
        &v,
        &[
            "/cpus/0/missed_releases",
            "/cpus/0/lateness_ns/p99.9",
            "/cpus/0/later_than/0/raw_count",
        ],
    );
    // The run's summary.json is the same result.
    let summary = Path::new(v["run_dir"].as_str().unwrap()).join("summary.json");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap();
    check("timer", &saved, &[]);
    // With kernel events: the attribution, the wakeup paths and the IRQ and thread latency.
    mount_tracefs();
    if !Path::new("/sys/kernel/tracing/events/sched/sched_switch").is_dir() {
        skip("this kernel has no tracefs with sched_switch: --trace's fields are not checked");
        return;
    }
    let v = json_of(&["timer", "-c", "1", "-d", "2s", "--trace", "--json"]);
    assert!(
        v["causes"]["kernel"]["latency"][0]["irq_ns"].is_object(),
        "{:#}",
        v["causes"]["kernel"]
    );
    // A quiet run may have no delay large enough to attribute, and so no path.
    let mut nested = vec!["/causes/kernel/latency/0/irq_ns"];
    if v["causes"]["kernel"]["largest"][0]["path"].is_object() {
        nested.push("/causes/kernel/largest/0/path/wakeup_ns");
    }
    check("timer", &v, &nested);
}

/// Mounts tracefs where it is not yet (sandglass would, but the test looks first).
fn mount_tracefs() {
    if !Path::new("/sys/kernel/tracing/events").is_dir() {
        let _ = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
    }
}

#[test]
fn noise_json_matches_its_schema() {
    if !is_root() {
        skip("needs root for the polling threads' memory locking and PM QoS (CI runs as root)");
        return;
    }
    let _g = share();
    let v = json_of(&["noise", "-c", "1", "-d", "1s", "--json"]);
    check(
        "noise",
        &v,
        &["/cpus/0/noise_share", "/cpus/0/percentiles_ns/max"],
    );
}

#[test]
fn study_json_matches_its_schema() {
    if !is_root() {
        skip("needs root for the study's SCHED_FIFO cells (CI runs as root)");
        return;
    }
    let _g = share();
    let tmp = tempfile::tempdir().unwrap();
    let v = json_in(
        tmp.path(),
        &["study", "quick", "--duration-scale", "0.05", "--json"],
    );
    assert_eq!(
        v["record"]["source"],
        serde_json::json!({"builtin": "quick"})
    );
    check(
        "study",
        &v,
        &[
            "/record/cells/0/state",
            "/record/cells/0/labels/load",
            "/record/source/builtin",
            "/tables/0/rows",
        ],
    );
    // The study's own record, study.json.
    let dir = tmp.path().join(v["dir"].as_str().unwrap());
    let record: Value =
        serde_json::from_slice(&std::fs::read(dir.join("study.json")).unwrap()).unwrap();
    check("study-record", &record, &["/cells/0/state"]);
}
