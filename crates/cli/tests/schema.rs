//! The `--json` outputs against their documented, versioned schemas (`docs/schema/`,
//! `docs/json.md`).
//!
//! Each output is validated with the `jsonschema` crate (draft 2020-12), and every key it
//! carries must be declared in its schema, so that a renamed, missing or undocumented field
//! fails here. Measurements that need real-time priority skip with a printed reason when the
//! process is not root; `sandglass load` needs no privilege and always runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::{is_root, lock, skip};

use assert_cmd::Command;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

fn schema(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/schema")
        .join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `sandglass ARGS` with its runs in a temporary directory and returns its JSON output.
fn json_of(args: &[&str]) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("sandglass")
        .unwrap()
        .args(args)
        .env("SANDGLASS_RUNS_DIR", tmp.path())
        .current_dir(tmp.path())
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
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

/// The validation errors of `value` against `schema`, one line each.
fn errors(schema: &Value, value: &Value) -> Vec<String> {
    let v = jsonschema::draft202012::new(schema).expect("the schema compiles");
    v.iter_errors(value)
        .map(|e| format!("{}: {e}", e.instance_path))
        .collect()
}

/// `schema` with its `$ref`s into `#/$defs/` followed, and a nullable `anyOf` reduced to the
/// branch that fits `value`.
fn resolve<'a>(root: &'a Value, schema: &'a Value, value: &Value) -> &'a Value {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/$defs/");
        return resolve(root, &root["$defs"][name], value);
    }
    if let Some(branches) = schema.get("anyOf").and_then(Value::as_array) {
        if !value.is_null() {
            if let Some(b) = branches
                .iter()
                .find(|b| b.get("type") != Some(&"null".into()))
            {
                return resolve(root, b, value);
            }
        }
    }
    schema
}

/// Keys of `value` that its schema does not declare, as JSON pointers.
fn undocumented(root: &Value, schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    let schema = resolve(root, schema, value);
    match value {
        Value::Object(map) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            for (k, v) in map {
                match props.get(k) {
                    Some(s) => undocumented(root, s, v, &format!("{path}/{k}"), out),
                    None => out.push(format!("{path}/{k}")),
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    undocumented(root, s, v, &format!("{path}/{i}"), out);
                }
            }
        }
        _ => {}
    }
}

/// Validates `value` against the schema `name` and checks that the schema catches a removed
/// and a renamed field.
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

    let mut renamed = value.clone();
    let obj = renamed.as_object_mut().unwrap();
    let (k, v) = obj
        .iter()
        .find(|(k, _)| k.as_str() != "schema")
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
    for name in ["timer", "noise", "load", "study"] {
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
    let _g = lock();
    let v = json_of(&["load", "cpu:1", "-d", "1s", "--json"]);
    check("load", &v, &["/loads/0/per_s"]);
}

#[test]
fn timer_json_matches_its_schema() {
    if !is_root() {
        skip("needs root for SCHED_FIFO timer threads (CI runs as root)");
        return;
    }
    let _g = lock();
    let v = json_of(&["timer", "-c", "1", "-d", "1s", "--json"]);
    check(
        "timer",
        &v,
        &[
            "/cpus/0/missed_releases",
            "/cpus/0/lateness_ns/p99.9",
            "/cpus/0/later_than/0/raw_count",
        ],
    );
    // With kernel events: the attribution, the wakeup paths and the IRQ and thread latency.
    mount_tracefs();
    if !std::path::Path::new("/sys/kernel/tracing/events/sched/sched_switch").is_dir() {
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
    if !std::path::Path::new("/sys/kernel/tracing/events").is_dir() {
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
    let _g = lock();
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
    let _g = lock();
    let v = json_of(&["study", "quick", "--duration-scale", "0.05", "--json"]);
    check(
        "study",
        &v,
        &[
            "/record/cells/0/state",
            "/record/cells/0/labels/load",
            "/tables/0/rows",
        ],
    );
}
