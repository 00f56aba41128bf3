//! Fuzz entry points for every parser of sandglass: each `fn(&[u8])` feeds arbitrary bytes to
//! one kind of input a user, a file or the kernel can hand to sandglass, and checks what must
//! hold for every input: no panic, no hang, and, where a parser has a printed form, that the
//! printed form parses back to the same value.
//!
//! The same functions serve the cargo-fuzz targets in `fuzz/` (libFuzzer, nightly Rust; see
//! `fuzz/README.md`) and the bounded run of the test suite (`tests/bounded.rs`, stable Rust),
//! which replays the seed corpus in `fuzz/corpus/` and a few thousand generated inputs per
//! target. [`TARGETS`] lists them all.
//!
//! A crash found by either becomes a regression test in `tests/regressions.rs`, named after
//! what broke.

use std::path::Path;

/// A fuzz entry point: its name (the cargo-fuzz target and the corpus directory) and function.
pub struct Target {
    pub name: &'static str,
    /// What it parses, for `fuzz/README.md` and failure messages.
    pub what: &'static str,
    pub run: fn(&[u8]),
}

/// Every fuzz target, in the order of `fuzz/README.md`.
pub const TARGETS: &[Target] = &[
    Target {
        name: "time_string",
        what: "time strings (-d 10s, -i 1ms, --settle 500us, thresholds)",
        run: time_string,
    },
    Target {
        name: "cpu_list",
        what: "CPU lists (-c 0-3,6)",
        run: cpu_list,
    },
    Target {
        name: "policy",
        what: "scheduling policy specs (-P f:95, d:1ms:10ms, Hourglass priority names)",
        run: policy,
    },
    Target {
        name: "hourglass_cmdline",
        what: "the Hourglass command line (sandglass hourglass ...)",
        run: hourglass_cmdline,
    },
    Target {
        name: "task_file",
        what: "task files for analyze rta/edf/admission",
        run: task_file,
    },
    Target {
        name: "workload",
        what: "check's workload strings (audio:64@48000x2, control:1ms:500us, video:60, a task file)",
        run: workload,
    },
    Target {
        name: "study_file",
        what: "study files (TOML)",
        run: study_file,
    },
    Target {
        name: "pipeline_file",
        what: "pipeline (frame budget) files for bench budget",
        run: pipeline_file,
    },
    Target {
        name: "data_file",
        what: "histogram, point and number files for analyze",
        run: data_file,
    },
    Target {
        name: "load_spec",
        what: "load specs and load profiles (--load, --load-profile)",
        run: load_spec,
    },
    Target {
        name: "option_value",
        what: "the other option values: timer kinds, threshold actions, gates, sizes, quantiles, dates, run@quantile",
        run: option_value,
    },
    Target {
        name: "run_dir",
        what: "run directories: manifest.json, summary.json, samples and histogram files, study.json",
        run: run_dir,
    },
    Target {
        name: "parquet_table",
        what: "damaged Parquet segments of a run's tables (samples, interruptions, timeline)",
        run: parquet_table,
    },
    Target {
        name: "tracefs",
        what: "tracefs event format text, header_page and raw ring-buffer pages",
        run: tracefs,
    },
    Target {
        name: "procfs",
        what: "/proc/interrupts, /proc/softirqs, /proc/stat, schedstat, cpuinfo and kernel config text",
        run: procfs,
    },
    Target {
        name: "http_request",
        what: "the bytes a client sends to the monitor's HTTP endpoint (/metrics, /healthz)",
        run: http_request,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// Splits `data` at its first byte into a selector and the rest.
fn select(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((&b, rest)) => (b, rest),
        None => (0, data),
    }
}

/// `duration::parse` and `parse_or_ns`; a parsed time prints exactly and parses back.
pub fn time_string(data: &[u8]) {
    let s = text(data);
    for parsed in [
        sandglass::duration::parse(&s),
        sandglass::duration::parse_or_ns(&s),
    ]
    .into_iter()
    .flatten()
    {
        let printed = sandglass::duration::format_exact(parsed);
        let back = sandglass::duration::parse(&printed);
        assert_eq!(back.ok(), Some(parsed), "{s:?} printed as {printed:?}");
        let _ = sandglass::duration::format_human(parsed);
    }
}

/// `CpuList::parse`; a parsed list prints and parses back to the same CPUs.
pub fn cpu_list(data: &[u8]) {
    let s = text(data);
    if let Ok(list) = sandglass::cpulist::CpuList::parse(&s) {
        let printed = list.to_string();
        let back = sandglass::cpulist::CpuList::parse(&printed);
        assert_eq!(
            back.as_ref().map(|l| l.to_vec()).ok(),
            Some(list.to_vec()),
            "{s:?} printed as {printed:?}"
        );
        assert!(!list.is_empty());
    }
}

/// `Policy::parse`; a parsed policy prints in a form that parses to the same print.
pub fn policy(data: &[u8]) {
    let s = text(data);
    if let Ok(p) = sandglass::policy::Policy::parse(&s) {
        let printed = p.to_string();
        let back = sandglass::policy::Policy::parse(&printed)
            .unwrap_or_else(|e| panic!("{s:?} printed as {printed:?}, which does not parse: {e}"));
        assert_eq!(back.to_string(), printed, "{s:?}");
    }
}

/// The words after `sandglass hourglass`, split at spaces, tabs and newlines.
pub fn hourglass_cmdline(data: &[u8]) {
    let s = text(data);
    let words: Vec<String> = s.split([' ', '\t', '\n']).map(str::to_string).collect();
    let _ = sandglass::hourglass::cmdline::parse(&words);
}

/// Task files as `analyze rta`, `analyze edf` and `analyze admission` read them; whatever
/// parses then goes through those analyses, whose work budgets must end every one of them.
pub fn task_file(data: &[u8]) {
    let (which, rest) = select(data);
    let s = text(rest);
    let file = Path::new("fuzz.toml");
    if which % 2 == 0 {
        if let Ok(tasks) = sandglass::analysis::taskfile::parse_task_file(file, &s) {
            use sandglass::analysis::rta::{analyze, Preemption};
            let _ = analyze(&tasks, Preemption::Preemptive);
            let _ = analyze(&tasks, Preemption::NonPreemptive);
            let _ = sandglass::analysis::edf::analyze(&tasks);
        }
    } else if let Ok(tasks) = sandglass::analysis::taskfile::parse_admission_file(file, &s) {
        let config = sandglass::analysis::admission::AdmissionConfig::default();
        let _ = sandglass::analysis::admission::admit(&tasks, &config);
    }
}

/// Study files, as `sandglass study FILE` reads them, with their cells expanded.
pub fn study_file(data: &[u8]) {
    let s = text(data);
    let source = sandglass::study::Source::File("fuzz.toml".into());
    if let Ok(study) = sandglass::study::parse(&s, source) {
        let _ = sandglass::study::cells(&study.file);
    }
}

/// Pipeline files, as `sandglass bench budget FILE` reads them.
pub fn pipeline_file(data: &[u8]) {
    let s = text(data);
    if let Ok(spec) = sandglass::microbench::budget::parse_budget(&s, "fuzz.toml") {
        let _ = format!("{spec:?}");
    }
}

/// Histogram, point and number files, as `analyze` reads them, and the analyses they feed
/// (the exceedance table, the cost fit, the significance tests).
pub fn data_file(data: &[u8]) {
    let (which, rest) = select(data);
    let s = text(rest);
    let file = Path::new("fuzz.csv");
    use sandglass::analysis::{datafile, fit, significance, worst_case};
    match which % 3 {
        0 => {
            if let Ok(d) = datafile::parse_histogram(file, &s) {
                let _ = worst_case::threshold_row(&d, 1000.0, 1_000_000);
                let _ = worst_case::empirical_worst(&d, 3.6e6);
            }
        }
        1 => {
            if let Ok(points) = datafile::parse_points(file, &s) {
                let _ = fit::fit_cost(&points);
            }
        }
        _ => {
            if let Ok(xs) = datafile::parse_numbers(file, &s) {
                let (a, b) = xs.split_at(xs.len() / 2);
                let _ = significance::mean_ci(&xs, 0.95);
                let _ = significance::welch(a, b, 0.95);
                let _ = significance::paired(a, &b[..a.len()], 0.99);
                let _ = significance::mann_whitney(a, b);
            }
        }
    }
}

/// `check`'s workload strings (a first byte of 1 reads the rest as a task file); a workload
/// that parses has a period a timer can serve, and its predictions and verdict are made
/// without panicking.
pub fn workload(data: &[u8]) {
    use sandglass::check::{predict, workload};
    let (which, rest) = select(data);
    let s = text(rest).into_owned();
    let parsed = if which % 2 == 1 {
        let body = s.clone();
        workload::parse("set.toml", &move |_| Ok(body.clone()))
    } else {
        workload::parse(&s, &|_| {
            Err(std::io::Error::from(std::io::ErrorKind::NotFound))
        })
    };
    if let Ok(w) = parsed {
        assert!(w.period_ns.0 > 0, "{s:?}: {w:?}");
        let d = sandglass::analysis::distribution::Distribution::from_bins([
            (1_000, 90),
            (w.deadline_ns.0 as i64, 9),
            (2 * w.deadline_ns.0 as i64 + 1, 1),
        ]);
        let p = predict::predict(&w, sandglass::Nanos::ZERO, &d, predict::DEFAULT_TARGET_S);
        let _ = predict::verdict(&w, &p);
    }
}

/// `--load` specs and load profiles; a parsed profile prints and parses back to the same print.
pub fn load_spec(data: &[u8]) {
    let (which, rest) = select(data);
    let s = text(rest);
    match which % 3 {
        0 => {
            let _ = sandglass::load::LoadSpec::parse(&s);
        }
        1 => {
            let _ = sandglass::load::spec::split_args(&s);
        }
        _ => {
            if let Ok(specs) = sandglass::load::spec::parse_profile(&s) {
                let printed = sandglass::load::spec::format_profile(&specs);
                let back = sandglass::load::spec::parse_profile(&printed).unwrap_or_else(|e| {
                    panic!("{s:?} printed as {printed:?}, which does not parse: {e}")
                });
                assert_eq!(
                    sandglass::load::spec::format_profile(&back),
                    printed,
                    "{s:?}"
                );
            }
        }
    }
}

/// The smaller option values, chosen by the first byte.
pub fn option_value(data: &[u8]) {
    let (which, rest) = select(data);
    let s = text(rest);
    match which % 13 {
        0 => {
            let _ = sandglass::model::TimerKind::parse(&s);
        }
        1 => {
            let _ = sandglass::runner::ThresholdAction::parse(&s);
        }
        2 => {
            let _ = sandglass::compare::parse_gates(&s);
        }
        3 => {
            let _ = sandglass::compare::parse_share(&s);
        }
        4 => {
            let _ = sandglass::microbench::parse_size(&s);
        }
        5 => {
            let _ = sandglass::microbench::parse_sizes(&s);
        }
        6 => {
            let _ = sandglass::microbench::Placement::parse(&s);
        }
        7 => {
            let _ = sandglass::microbench::file::parse_methods(&s);
        }
        8 => {
            let _ = sandglass::microbench::ipc::parse_mechanisms(&s);
        }
        9 => {
            let _ = sandglass::inputs::parse_quantile(&s);
        }
        10 => {
            let _ = sandglass::inputs::parse_run_at(&s);
        }
        11 => {
            let now =
                std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_795_000_000);
            let _ = sandglass::catalog::parse_when(&s, false, now);
            let _ = sandglass::catalog::parse_when(&s, true, now);
        }
        _ => {
            let _ = sandglass::noise::parse_workload(&s);
        }
    }
}

/// The files of a run directory, packed into one input (see [`pack`]): the first byte's low
/// bit says whether the manifest's sizes and SHA-256 are made to match the files, so that
/// their contents reach the parsers behind the integrity check; without it, the check itself
/// is what is fuzzed. Every reader of run directories then reads it: the run reader and its
/// verification, the catalog's file check and figures, `compare`, the analyses' run inputs,
/// every export, the text, Markdown and HTML reports, and a study's state.
pub fn run_dir(data: &[u8]) {
    let (flags, rest) = select(data);
    read_as_run(&unpack(rest), flags & 1 == 1);
}

/// Writes `files` into a run directory of their own (names that would leave it are skipped),
/// makes the manifest's sizes and SHA-256 match them with `fix`, and reads it with everything
/// that reads runs.
fn read_as_run(files: &[(String, Vec<u8>)], fix: bool) {
    let Ok(tmp) = tempfile::tempdir() else {
        return;
    };
    let dir = tmp.path().join("run");
    if std::fs::create_dir(&dir).is_err() {
        return;
    }
    for (name, bytes) in files {
        if safe_name(name) {
            let _ = std::fs::write(dir.join(name), bytes);
        }
    }
    if fix {
        fix_checksums(&dir);
    }
    read_everything(&dir);
}

/// A run of format 2 (its tables in Parquet) that [`parquet_table`] damages: a 300 ms timer run
/// and a 300 ms noise run, packed as [`pack`] does.
const TABLE_RUNS: [&[u8]; 2] = [
    include_bytes!("../data/timer-run.pack"),
    include_bytes!("../data/noise-run.pack"),
];

/// A damaged Parquet segment in a run that is otherwise intact: the first byte chooses the run
/// (bit 1: the timer or the noise run), the segment (bit 2: the run's first table, its samples
/// or interruptions, or its timeline) and whether the manifest's size and SHA-256 are made to
/// match (bit 0), so that the damage reaches the Parquet reader behind the integrity check; the
/// rest replaces that segment. Everything that reads runs then reads it, as for [`run_dir`].
pub fn parquet_table(data: &[u8]) {
    let (flags, rest) = select(data);
    let mut files = unpack(TABLE_RUNS[usize::from(flags >> 1 & 1)]);
    let segment = if flags & 4 == 0 {
        files
            .iter()
            .position(|(n, _)| n.ends_with("-0000.parquet") && !n.starts_with("timeline"))
    } else {
        files.iter().position(|(n, _)| n == "timeline-0000.parquet")
    };
    let Some(i) = segment else {
        return;
    };
    files[i].1 = rest.to_vec();
    read_as_run(&files, flags & 1 == 1);
}

/// A file name that stays inside the directory it is written to.
fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 64
        && !name.contains(['/', '\\', '\0'])
        && !name.starts_with('.')
}

/// Rewrites `manifest.json`'s file list with the sizes and SHA-256 of the files present.
fn fix_checksums(dir: &Path) {
    let Ok(text) = std::fs::read(dir.join("manifest.json")) else {
        return;
    };
    let Ok(mut m) = serde_json::from_slice::<serde_json::Value>(&text) else {
        return;
    };
    if let Some(files) = m.get_mut("files").and_then(|f| f.as_array_mut()) {
        for f in files {
            let Some(name) = f.get("name").and_then(|n| n.as_str()).map(str::to_string) else {
                continue;
            };
            if !safe_name(&name) {
                continue;
            }
            if let Ok(bytes) = std::fs::read(dir.join(&name)) {
                f["bytes"] = serde_json::json!(bytes.len());
                f["sha256"] = serde_json::json!(sandglass::store::sha256_hex(&bytes));
            }
        }
    }
    if let Ok(out) = serde_json::to_vec(&m) {
        let _ = std::fs::write(dir.join("manifest.json"), out);
    }
}

fn read_everything(dir: &Path) {
    use sandglass::store::RunReader;
    use sandglass_report::export;
    let sink = &mut std::io::sink();
    let _ = sandglass::catalog::check_files(dir);
    let _ = sandglass::compare::load(dir);
    let _ = sandglass::inputs::latency_from_run(dir, None, sandglass::inputs::WORST_BY);
    let _ = sandglass::inputs::latency_from_run(dir, Some(1), 1.0);
    if dir.join(sandglass::study::run::STATE_FILE).exists() {
        if let Ok(o) = sandglass::study::run::outcome(dir) {
            let _ = sandglass_report::study::write(sink, &o);
            let _ = sandglass_report::markdown::study(sink, &o);
            let _ = sandglass_report::html::study::page(&o);
        }
    }
    let Ok(r) = RunReader::open(dir) else {
        return;
    };
    let _ = r.verify();
    if let Ok(summary) = r.read_text("summary.json") {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&summary) {
            let loads = v.get("loads").cloned().unwrap_or(serde_json::Value::Null);
            let _ = sandglass::registry::figures(&r.manifest.kind, &v, &loads);
        }
        match r.manifest.kind.as_str() {
            "timer" => {
                if let Ok(t) = serde_json::from_str::<sandglass::timer::TimerResult>(&summary) {
                    let _ = sandglass_report::timer::write(sink, &t);
                    let _ = sandglass_report::markdown::timer(sink, &t);
                }
            }
            "noise" => {
                if let Ok(t) = serde_json::from_str::<sandglass::noise::NoiseResult>(&summary) {
                    let _ = sandglass_report::noise::write(sink, &t);
                    let _ = sandglass_report::markdown::noise(sink, &t);
                }
            }
            "hourglass" => {
                if let Ok(t) =
                    serde_json::from_str::<sandglass::hourglass::result::HourglassResult>(&summary)
                {
                    let _ = sandglass_report::hourglass::write_summary(sink, &t);
                    let _ = sandglass_report::markdown::hourglass(sink, &t);
                    let all = sandglass_report::hourglass::Options {
                        trace: true,
                        raw_cycles: true,
                        gap_histogram: true,
                        latlate: true,
                    };
                    let _ = sandglass_report::hourglass::write(sink, &t, &r, &all);
                }
            }
            _ => {}
        }
    }
    let _ = sandglass::store::data::totals(&r);
    let _ = sandglass::inputs::execution_time_from_run(dir, None, 0.99);
    if let Ok(out) = tempfile::tempdir() {
        let _ = export::csv::write(&r, &out.path().join("csv"));
    }
    for view in [
        export::cyclictest::View::Corrected,
        export::cyclictest::View::Raw,
    ] {
        if let Ok(h) = export::cyclictest::histogram(&r, 100, view) {
            let _ = h.render();
        }
    }
    let _ = export::perfetto::write_to(&r, sink);
    let options = sandglass_report::html::Options { window: None };
    let _ = sandglass_report::html::run(&r, &options);
}

/// Packs named files into one fuzz input: for each, a one-byte name length, the name, a
/// four-byte little-endian length and the contents.
pub fn pack(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, bytes) in files {
        let name = &name.as_bytes()[..name.len().min(255)];
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// The inverse of [`pack`] (`fuzz/seeds.py` packs the seed run directories the same way); a
/// truncated last file keeps what there is of it.
pub fn unpack(mut data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    while let Some((&n, rest)) = data.split_first() {
        let n = usize::from(n).min(rest.len());
        let name = String::from_utf8_lossy(&rest[..n]).into_owned();
        let rest = &rest[n..];
        let mut len = [0u8; 4];
        let k = rest.len().min(4);
        len[..k].copy_from_slice(&rest[..k]);
        let rest = &rest[k..];
        let len = (u32::from_le_bytes(len) as usize).min(rest.len());
        files.push((name, rest[..len].to_vec()));
        data = &rest[len..];
    }
    files
}

/// The event formats of the kernel the fixtures come from (Linux 6.18, x86-64).
const FORMATS: &[(&str, &str)] = &[
    (
        "sched",
        include_str!("../../sandglass/src/causes/fixtures/events/sched/sched_switch/format"),
    ),
    (
        "sched",
        include_str!("../../sandglass/src/causes/fixtures/events/sched/sched_waking/format"),
    ),
    (
        "sched",
        include_str!("../../sandglass/src/causes/fixtures/events/sched/sched_wakeup/format"),
    ),
    (
        "irq",
        include_str!("../../sandglass/src/causes/fixtures/events/irq/irq_handler_entry/format"),
    ),
    (
        "irq",
        include_str!("../../sandglass/src/causes/fixtures/events/irq/irq_handler_exit/format"),
    ),
    (
        "irq",
        include_str!("../../sandglass/src/causes/fixtures/events/irq/softirq_entry/format"),
    ),
    (
        "irq",
        include_str!("../../sandglass/src/causes/fixtures/events/irq/softirq_exit/format"),
    ),
    (
        "ftrace",
        include_str!("../../sandglass/src/causes/fixtures/events/ftrace/print/format"),
    ),
];

const HEADER_PAGE: &str = include_str!("../../sandglass/src/causes/fixtures/header_page");

/// tracefs input chosen by the first byte: an event's `format` text, `header_page` text, or a
/// raw ring-buffer page whose records are decoded with the kernel's own formats.
pub fn tracefs(data: &[u8]) {
    use sandglass::causes::tracefs_raw as raw;
    let (which, rest) = select(data);
    match which % 3 {
        0 => {
            let _ = raw::parse_format("sched", &text(rest));
        }
        1 => {
            let _ = raw::parse_header_page(&text(rest));
        }
        _ => {
            let formats: Vec<raw::Format> = FORMATS
                .iter()
                .filter_map(|(system, t)| raw::parse_format(system, t).ok())
                .collect();
            let decoder = raw::Decoder::new(&formats);
            let Ok(layout) = raw::parse_header_page(HEADER_PAGE) else {
                return;
            };
            let _ = raw::parse_page(rest, &layout, &mut |_, record| {
                let _ = decoder.decode(record);
            });
        }
    }
}

/// The sampler's byte parser (`fill`) gives the reference parser's counts for every source of
/// `parsed` (the reference parse of the same text) on CPUs 0 to 3.
fn same_counts(
    raw: &[u8],
    parsed: &(Vec<usize>, Vec<sandglass::causes::procfs::Counted>),
    fill: sandglass::causes::procfs::FillFn,
) {
    use sandglass::causes::procfs::{Names, Scratch};
    if std::str::from_utf8(raw).is_err() {
        return; // the reference read lossy text; the sampler's bytes count nothing then
    }
    let (file_cpus, lines) = parsed;
    let cpus = [0, 1, 2, 3];
    let names: Vec<String> = lines.iter().map(|c| c.name.clone()).collect();
    let mut out = vec![vec![u64::MAX; cpus.len()]; names.len()];
    fill(
        raw,
        &Names::new(names.clone()),
        &cpus,
        &mut Scratch::default(),
        &mut out,
    );
    for (name, row) in names.iter().zip(&out) {
        let line = lines.iter().find(|c| &c.name == name);
        for (c, got) in cpus.iter().zip(row) {
            let want = line
                .zip(file_cpus.iter().position(|f| f == c))
                .and_then(|(l, i)| l.per_cpu.get(i).copied())
                .unwrap_or(0);
            assert_eq!(
                *got, want,
                "byte and reference parsers differ: {name}, CPU {c}"
            );
        }
    }
}

/// Kernel text files the sampler and the system snapshot read, chosen by the first byte; the
/// sampler's byte parsers must give the reference parsers' counts.
pub fn procfs(data: &[u8]) {
    use sandglass::causes::procfs as p;
    let (which, rest) = select(data);
    let s = text(rest);
    match which % 10 {
        0 => {
            let parsed = p::parse_interrupts(&s);
            same_counts(rest, &parsed, p::fill_interrupts);
        }
        1 => {
            let parsed = p::parse_softirqs(&s);
            same_counts(rest, &parsed, p::fill_softirqs);
        }
        2 => {
            let parsed = p::parse_stat(&s);
            // The byte parser reads the raw bytes: text that is not UTF-8 counts nothing, as
            // the sampler's reads of old made it empty.
            let cpus = [0, 1, 2, 3];
            let mut got = [p::CpuStat::default(); 4];
            p::fill_stat(rest, &cpus, &mut Vec::new(), &mut got);
            for (c, g) in cpus.iter().zip(&got) {
                let want = match std::str::from_utf8(rest) {
                    Ok(_) => parsed.iter().find(|(n, _)| n == c).map(|(_, s)| *s),
                    Err(_) => None,
                };
                assert_eq!(
                    *g,
                    want.unwrap_or_default(),
                    "fill_stat and parse_stat, CPU {c}"
                );
            }
        }
        3 => {
            let _ = p::parse_ctxt(&s);
        }
        4 => {
            let _ = p::parse_schedstat_wait(&s);
        }
        5 => {
            let _ = sandglass::system::parse_cpu_flags(&s);
            let _ = sandglass::system::parse_cpu_model(&s);
        }
        6 => {
            let _ = sandglass::system::parse_config(&s);
        }
        7 => {
            let _ = sandglass::system::parse_cpu_times(&s, 1);
            let _ = sandglass::system::parse_cap_eff(&s, 23);
        }
        8 => {
            let _ = sandglass::causes::tracefs::tracefs_mounts(&s);
            let _ = sandglass::causes::tracefs::lost_in_stats(&s);
        }
        _ => {
            let _ = sandglass::system::parse_debugfs_preempt(&s);
            let _ = sandglass::system::parse_cmdline_preempt(&s);
        }
    }
}

/// What `/metrics` serves to [`http_request`]: a fixed exposition.
struct FixedMetrics;

impl sandglass_http::Exposition for FixedMetrics {
    fn encode(&self, format: sandglass_http::Format) -> Option<String> {
        Some(match format {
            sandglass_http::Format::OpenMetrics => "# TYPE up gauge\nup 1\n# EOF\n".into(),
            sandglass_http::Format::PrometheusText => "# TYPE up gauge\nup 1\n".into(),
        })
    }
}

/// One connection of the monitor's HTTP endpoint whose client sends `data` and then shuts its
/// side, served over memory with the endpoint's own limits (a 60 s lifetime, a hang guard far
/// above the milliseconds a connection over memory takes, even on a busy machine):
/// the server must close the connection, and everything it wrote must be answers, each with
/// a status the endpoint gives, at most `max_requests` of them.
pub fn http_request(data: &[u8]) {
    let limits = sandglass_http::Limits {
        lifetime: std::time::Duration::from_secs(60),
        ..sandglass_http::Limits::DEFAULT
    };
    let Some(out) = sandglass_http::respond(data, std::sync::Arc::new(FixedMetrics), limits) else {
        panic!("hang guard: the server did not close the connection within its lifetime of 60 s (the machine may be overloaded, or it hung)");
    };
    assert!(
        out.is_empty() || out.starts_with(b"HTTP/1."),
        "the server wrote something else than an answer: {:?}",
        text(&out[..out.len().min(200)])
    );
    let mut answers = 0u64;
    let mut at = 0;
    while let Some(i) = out[at..].windows(9).position(|w| w.starts_with(b"HTTP/1.")) {
        let line = &out[at + i..];
        let status = line.get(9..12).map(text);
        assert!(
            matches!(
                status.as_deref(),
                Some("200" | "400" | "404" | "405" | "413" | "414" | "431" | "505")
            ),
            "an answer with status {status:?}"
        );
        answers += 1;
        at += i + 9;
    }
    assert!(
        answers <= limits.max_requests,
        "{answers} answers on one connection"
    );
}

#[cfg(test)]
mod tests {
    use super::{pack, unpack};

    #[test]
    fn unpack_reverses_pack_and_keeps_a_truncated_tail() {
        let files = vec![
            ("manifest.json".to_string(), b"{}".to_vec()),
            ("empty".to_string(), Vec::new()),
            ("samples.csv".to_string(), b"cpu,release\n1,2\n".to_vec()),
        ];
        let packed = pack(&files);
        assert_eq!(unpack(&packed), files);
        let cut = &packed[..packed.len() - 4];
        let got = unpack(cut);
        assert_eq!(got.len(), 3);
        assert_eq!(got[2].1, b"cpu,release\n".to_vec());
    }
}
