//! One figure, one name (docs/json.md): the p50, p99, p99.9 and maximum of one timer run of
//! several CPUs are the same number, to the nanosecond, in the study table, `study.json`,
//! `runs`, `compare`, `report` (text and HTML) and `--jitter-from`, all of them the worst CPU's
//! as the run's summary gives it.

use crate::common;

use assert_cmd::Command;
use sandglass::histo::{self, Percentiles};
use sandglass::Nanos;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn sandglass(runs: &Path) -> Command {
    let mut c = Command::cargo_bin("sandglass").unwrap();
    c.env("SANDGLASS_RUNS_DIR", runs)
        .env("SANDGLASS_RUNTIME_DIR", common::runtime_for(runs));
    c
}

fn stdout(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        c,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(c: &mut Command) -> Value {
    serde_json::from_str(&stdout(c)).unwrap()
}

/// The figures compared, with their names in the catalog, in study metrics and in `compare`.
const FIGURES: [(&str, &str, &str); 4] = [
    ("p50", "p50_ns", "p50_us"),
    ("p99", "p99_ns", "p99_us"),
    ("p99.9", "p99.9_ns", "p99_9_us"),
    ("max", "max_ns", "max_us"),
];

/// The worst CPU's figures from the run's summary: the definition every output must follow.
fn truth(run: &Path) -> (Percentiles, usize) {
    let s: Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    let per: Vec<Percentiles> = s["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| serde_json::from_value(c["lateness_ns"].clone()).unwrap())
        .collect();
    (histo::worst_cpu(&per).unwrap(), per.len())
}

/// `compare --json`'s value of `figure` for run `i`, whether figures are objects or pairs.
fn compared(report: &Value, i: usize, figure: &str) -> f64 {
    let f = &report["figures"][i];
    let values = &f["values"];
    if let Some(v) = values.get(figure).and_then(Value::as_f64) {
        return v;
    }
    for item in values.as_array().expect("figures' values") {
        match item {
            Value::Array(pair) if pair[0] == figure => return pair[1].as_f64().unwrap(),
            Value::Object(o) if o.get("name").and_then(Value::as_str) == Some(figure) => {
                let v = o
                    .get("value")
                    .or_else(|| o.get("value_ns"))
                    .expect("a figure's value");
                return v.as_f64().unwrap();
            }
            _ => {}
        }
    }
    panic!("compare has no figure {figure}: {f}");
}

/// The catalog entries of `runs --json`, whether an array or an object holding one.
fn entries(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a.clone(),
        Value::Object(o) => o
            .values()
            .find_map(|x| {
                x.as_array()
                    .filter(|a| a.iter().any(|e| e.get("id").is_some()))
            })
            .cloned()
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

#[test]
fn one_runs_figures_agree_everywhere() {
    let _machine = common::share();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        common::skip("needs two CPUs for a run whose worst CPU matters");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    // In the runs directory, so that the catalog indexes the study and its cells.
    let table = stdout(sandglass(&runs).args(["study", "quick", "--duration-scale", "0.1"]));
    let study_dir = std::fs::read_dir(&runs)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.join("study.json").exists())
        .expect("the study's directory");
    let state: Value =
        serde_json::from_slice(&std::fs::read(study_dir.join("study.json")).unwrap()).unwrap();
    let cell = state["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["labels"]["measure"] == "timer" && c["labels"]["load"] == "idle")
        .or_else(|| {
            state["cells"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["cell"]["kind"] == "timer" || c["labels"]["load"] == "idle")
        })
        .expect("an idle timer cell");
    let run: PathBuf = study_dir.join(cell["dir"].as_str().unwrap());
    let (t, cpus) = truth(&run);
    assert!(cpus >= 2, "the quick study measures every CPU ({cpus})");
    let id = serde_json::from_slice::<Value>(&std::fs::read(run.join("manifest.json")).unwrap())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();

    // The study's metrics, in microseconds, and its table, printed to the nanosecond.
    let timer_table = table
        .split_once("Timer wakeup latency")
        .expect("the study's timer table")
        .1;
    let mut lines = timer_table.lines().skip(1);
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let idle: Vec<&str> = lines
        .find(|l| l.trim_start().starts_with("idle "))
        .expect("the table's idle row")
        .split_whitespace()
        .collect();
    let mut in_table = 0;
    for (name, _, metric) in FIGURES {
        let ns = t.get(name).unwrap();
        let us = cell["metrics"][metric].as_f64().unwrap();
        assert_eq!((us * 1e3).round() as u64, ns, "study.json {metric}");
        if let Some(col) = header.iter().position(|h| *h == metric) {
            assert_eq!(
                idle[col],
                sandglass_report::study::micros(ns as f64 / 1e3),
                "the study table's {metric}"
            );
            in_table += 1;
        }
    }
    assert!(in_table >= 3, "the table shows the figures: {header:?}");

    // The catalog, as `runs` gives it.
    let listed = json(sandglass(&runs).args(["runs", "--json", "--all"]));
    let entry = entries(&listed)
        .into_iter()
        .find(|e| {
            e["id"] == id.as_str()
                || e["path"]
                    .as_str()
                    .is_some_and(|p| Path::new(p).canonicalize().ok() == run.canonicalize().ok())
        })
        .expect("the run in the catalog");
    for (name, key, _) in FIGURES {
        assert_eq!(
            entry["figures"][key].as_u64(),
            t.get(name),
            "runs: {key} of {id}"
        );
    }

    // `compare`, the run against itself.
    let r = run.to_str().unwrap();
    let out = sandglass(&runs)
        .args(["compare", r, r, "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (name, _, _) in FIGURES {
        assert_eq!(
            compared(&report, 0, name) as u64,
            t.get(name).unwrap(),
            "compare: {name}"
        );
    }
    let text = String::from_utf8(
        sandglass(&runs)
            .args(["compare", r, r])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(text.contains("figure (worst CPU)"), "{text}");
    // No infinite change and no number in exponent notation among the figures (the lines
    // naming the runs hold their paths, whose random part may spell `e0`).
    let figures: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("A:") && !l.trim_start().starts_with("B:"))
        .collect();
    assert!(
        figures
            .iter()
            .all(|l| !l.contains("inf%") && !l.contains("e0")),
        "{text}"
    );

    // `report`: the text's worst-CPU block and the HTML page's worst-CPU row.
    let text = stdout(sandglass(&runs).args(["report", r]));
    let block = text
        .split_once("each figure the worst CPU's")
        .expect("the report's worst-CPU block")
        .1;
    let corrected = block
        .lines()
        .find(|l| l.trim_start().starts_with("corrected"))
        .expect("its corrected row");
    let fields: Vec<&str> = corrected.split_whitespace().collect();
    let shown = |name: &str| Nanos(t.get(name).unwrap()).to_string();
    // corrected MIN P50 P90 P99 P99.9 ...: each value is a number and a unit.
    let joined = fields.join(" ");
    for name in ["p50", "p99"] {
        assert!(joined.contains(&shown(name)), "report: {name} {joined}");
    }
    let html_path = tmp.path().join("page.html");
    sandglass(&runs)
        .args(["report", r, "--html", html_path.to_str().unwrap()])
        .assert()
        .success();
    let html = std::fs::read_to_string(&html_path).unwrap();
    let row = html
        .split("<tr>")
        .find(|r| r.contains("worst CPU"))
        .expect("the page's worst-CPU row");
    for (name, _, _) in FIGURES {
        assert!(row.contains(&shown(name)), "HTML: {name} {row}");
    }

    // `--jitter-from RUN@PCT`: the worst CPU's figure.
    let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tasks.toml");
    for (name, _, _) in FIGURES {
        let a = json(sandglass(&runs).args([
            "analyze",
            "rta",
            tasks.to_str().unwrap(),
            "--jitter-from",
            &format!("{r}@{name}"),
            "--json",
        ]));
        let jitter = a["tasks"][0]["jitter_ns"].as_u64().unwrap();
        assert_eq!(jitter, t.get(name).unwrap(), "--jitter-from @{name}");
    }
}
