//! Runs from many hosts together: `report --merge` gives the histogram of all their samples.

use crate::common;
use common::{lock, run_in};

use sandglass::store::table::tables::TIMER_SAMPLES;

/// Two real timer runs merged: the merged percentiles, count and maximum are those of the
/// histogram of both runs' stored samples together.
#[test]
fn merging_two_runs_gives_the_histogram_of_all_their_samples() {
    let _machine = lock();
    let runs = tempfile::tempdir().unwrap();
    let mut dirs = Vec::new();
    for i in ["500us", "1ms"] {
        let out = run_in(
            runs.path(),
            &["timer", "-c", "1", "-i", i, "-d", "300ms", "--json", "-q"],
        );
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        dirs.push(v["run_dir"].as_str().unwrap().to_string());
    }
    let out = run_in(
        runs.path(),
        &["report", "--merge", &dirs[0], &dirs[1], "--json"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let merged: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let mut all = sandglass::histo::histogram_of(std::iter::empty());
    let mut missed = 0;
    for d in &dirs {
        let dir = std::path::Path::new(d);
        for x in common::column(dir, &TIMER_SAMPLES, "lateness_ns") {
            all.saturating_record(x.max(0) as u64);
        }
        missed += common::column(dir, &TIMER_SAMPLES, "missed")
            .iter()
            .sum::<i64>();
    }
    let expected = sandglass::histo::percentiles(&all, None, None).unwrap();
    let got: sandglass::histo::Percentiles =
        serde_json::from_value(merged["merged"].clone()).unwrap();
    // Mean and standard deviation are sums in a different order: equal to the last bits.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    assert!(close(got.mean, expected.mean), "{got:?} {expected:?}");
    assert!(close(got.stddev, expected.stddev), "{got:?} {expected:?}");
    let exact = sandglass::histo::Percentiles {
        mean: expected.mean,
        stddev: expected.stddev,
        ..got.clone()
    };
    assert_eq!(exact, expected);
    assert_eq!(got.count, 300 + 600);
    assert_eq!(merged["missed"], missed);
    assert_eq!(merged["runs"].as_array().unwrap().len(), 2);
    assert_eq!(merged["pooling"], "every CPU of every run");
    // The table names both runs and the merged row.
    let text = run_in(runs.path(), &["report", "--merge", &dirs[0], &dirs[1]]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert!(text.stdout.contains("merged"), "{}", text.stdout);
}

#[test]
fn merging_runs_of_different_kinds_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path().join("t");
    let n = tmp.path().join("n");
    sandglass_report::export::fixture::timer_run(&t, &[(0, 0, 0, 5_000, false)]).unwrap();
    sandglass_report::export::fixture::noise_run(&n, &[(0, 10, 2_000)]).unwrap();
    let out = run_in(
        tmp.path(),
        &[
            "report",
            "--merge",
            t.to_str().unwrap(),
            n.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("one kind"), "{}", out.stderr);
    let out = run_in(tmp.path(), &["report", "--merge"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

/// `compare A+B C`: the first side is both runs merged (every sample of both, all CPUs pooled),
/// compared with the third; a group with an empty member or of mixed kinds is refused.
#[test]
fn compare_takes_a_group_of_runs_as_one_side() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = sandglass_report::export::fixture::timer_run;
    // Run A on CPUs 1 and 2, run B on CPU 1: lateness 10..=300 µs and 2..=200 µs.
    let a: Vec<(u64, u64, i64, i64, bool)> = (0..300)
        .map(|i| {
            (
                1 + i % 2,
                i,
                i as i64 * 1_000_000,
                (10 + i as i64) * 1_000,
                false,
            )
        })
        .collect();
    let b: Vec<(u64, u64, i64, i64, bool)> = (0..199)
        .map(|i| (1, i, i as i64 * 1_000_000, (2 + i as i64) * 1_000, i == 7))
        .collect();
    let c: Vec<(u64, u64, i64, i64, bool)> = (0..100)
        .map(|i| (1, i, i as i64 * 1_000_000, 50_000, false))
        .collect();
    let (pa, pb, pc) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    fixture(&pa, &a).unwrap();
    fixture(&pb, &b).unwrap();
    fixture(&pc, &c).unwrap();
    let group = format!("{}+{}", pa.display(), pb.display());
    let out = run_in(
        tmp.path(),
        &["compare", &group, pc.to_str().unwrap(), "--json"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let first = &v["figures"][0];
    assert_eq!(first["runs"], 2, "{first}");
    assert_eq!(first["samples"], 499, "{first}");
    assert_eq!(first["cpus"], 3, "{first}");
    assert_eq!(v["figures"][1]["runs"], 1);
    // The group's figures are those of the histogram of both runs' samples together.
    let mut all = sandglass::histo::histogram_of(std::iter::empty());
    for s in a.iter().chain(&b) {
        all.saturating_record(s.3 as u64);
    }
    let expected = sandglass::histo::percentiles(&all, None, None).unwrap();
    let value = |name: &str| {
        first["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .map(|f| f["value"].as_f64().unwrap())
            .unwrap()
    };
    for name in ["p50", "p90", "p99", "max"] {
        assert_eq!(value(name), expected.get(name).unwrap() as f64, "{name}");
    }
    assert_eq!(v["comparisons"][0]["run"], "c");
    // The text names the group and its pooling.
    let text = run_in(tmp.path(), &["compare", &group, pc.to_str().unwrap()]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert!(text.stdout.contains("2 runs merged"), "{}", text.stdout);
    assert!(text.stdout.contains("groups pooled"), "{}", text.stdout);
    // Bad groups: one line each, exit 1 (compare's errors; 2 means a gate was crossed).
    let n = tmp.path().join("n");
    sandglass_report::export::fixture::noise_run(&n, &[(1, 10, 2_000)]).unwrap();
    for (side, what) in [
        (format!("{}+", pa.display()), "an empty run in a group"),
        (format!("{}+{}", pa.display(), n.display()), "kind"),
    ] {
        let out = run_in(tmp.path(), &["compare", &side, pc.to_str().unwrap()]);
        assert_eq!(out.code, Some(1), "{side}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{side}: {}", out.stderr);
        assert!(out.stderr.contains(what), "{side}: {}", out.stderr);
    }
}

/// `runs export --parquet`: one row per run in runs.parquet, and the histograms' buckets whose
/// counts add up to each run's samples.
#[test]
fn runs_export_writes_one_row_per_run_and_every_bucket() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::RowAccessor;
    let runs = tempfile::tempdir().unwrap();
    let lateness = |k: u64, i: u64| (10_000 + (i * 7919 + k * 13) % 50_000) as i64;
    for k in 0..3u64 {
        let dir = runs.path().join(format!("2026112{k}-120000-timer-000{k}"));
        let samples: Vec<(u64, u64, i64, i64, bool)> = (0..500u64)
            .map(|i| {
                (
                    i / 250,
                    i % 250,
                    i as i64 * 1_000_000,
                    lateness(k, i),
                    false,
                )
            })
            .collect();
        sandglass_report::export::fixture::timer_run(&dir, &samples).unwrap();
    }
    let out_dir = runs.path().join("export");
    let out = run_in(
        runs.path(),
        &["runs", "export", "--parquet", out_dir.to_str().unwrap()],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("(3 runs)"), "{}", out.stdout);
    let open = |name: &str| {
        SerializedFileReader::new(std::fs::File::open(out_dir.join(name)).unwrap()).unwrap()
    };
    let r = open("runs.parquet");
    assert_eq!(r.metadata().file_metadata().num_rows(), 3);
    let mut counts = 0i64;
    for row in r.get_row_iter(None).unwrap() {
        let row = row.unwrap();
        assert_eq!(row.get_string(1).unwrap(), "timer");
        counts += row.get_long(12).unwrap();
    }
    assert_eq!(counts, 1_500);
    let h = open("histograms.parquet");
    let mut per_run: std::collections::BTreeMap<String, i64> = Default::default();
    for row in h.get_row_iter(None).unwrap() {
        let row = row.unwrap();
        *per_run
            .entry(row.get_string(0).unwrap().clone())
            .or_default() += row.get_long(7).unwrap();
    }
    assert_eq!(per_run.len(), 3);
    assert!(per_run.values().all(|&n| n == 500), "{per_run:?}");
    // The filters choose the runs.
    let out = run_in(
        runs.path(),
        &[
            "runs",
            "export",
            "--parquet",
            out_dir.to_str().unwrap(),
            "--kind",
            "noise",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("(0 runs)"), "{}", out.stdout);
    assert_eq!(
        open("runs.parquet").metadata().file_metadata().num_rows(),
        0
    );
}

/// `runs pack` then `runs import ARCHIVE` on another runs directory: the runs arrive with
/// every file verified and enter its catalog; a second import of the same archive is refused.
#[test]
fn runs_pack_and_import_move_runs_with_their_checksums() {
    let from = tempfile::tempdir().unwrap();
    let to = tempfile::tempdir().unwrap();
    let mut ids = Vec::new();
    for k in 0..2u64 {
        let id = format!("2026112{k}-130000-timer-00a{k}");
        let samples: Vec<(u64, u64, i64, i64, bool)> = (0..100u64)
            .map(|i| (0, i, i as i64 * 1_000_000, 5_000 + i as i64, false))
            .collect();
        sandglass_report::export::fixture::timer_run(&from.path().join(&id), &samples).unwrap();
        ids.push(id);
    }
    let archive = from.path().join("moved.tar.gz");
    let out = run_in(
        from.path(),
        &[
            "runs",
            "pack",
            &ids[0],
            &ids[1],
            "-o",
            archive.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // Never over an existing file.
    let again = run_in(
        from.path(),
        &["runs", "pack", &ids[0], "-o", archive.to_str().unwrap()],
    );
    assert_eq!(again.code, Some(2), "{}", again.stderr);
    let out = run_in(to.path(), &["runs", "import", archive.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout.matches("imported timer").count(),
        2,
        "{}",
        out.stdout
    );
    let listed = run_in(to.path(), &["runs", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 2, "{v}");
    let shown = run_in(to.path(), &["runs", "show", &ids[1]]);
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    let twice = run_in(to.path(), &["runs", "import", archive.to_str().unwrap()]);
    assert_eq!(twice.code, Some(2), "{}", twice.stderr);
    assert!(twice.stderr.contains("already in"), "{}", twice.stderr);
    // Nothing was left behind by the refused import.
    let hidden = std::fs::read_dir(to.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".import"))
        .count();
    assert_eq!(hidden, 0);
}

/// An archive whose run was altered, or that reaches outside its directory, adds nothing.
#[test]
fn damaged_or_hostile_archives_import_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("src/20261127-130000-timer-00b0");
    sandglass_report::export::fixture::timer_run(&run, &[(0, 0, 0, 5_000, false)]).unwrap();
    let build = |name: &str, alter: &dyn Fn(&mut tar::Builder<Vec<u8>>)| {
        let mut b = tar::Builder::new(Vec::new());
        alter(&mut b);
        let path = tmp.path().join(name);
        std::fs::write(&path, b.into_inner().unwrap()).unwrap();
        path
    };
    // A file changed after its manifest recorded its checksum.
    let altered = build("altered.tar", &|b| {
        for e in std::fs::read_dir(&run).unwrap().flatten() {
            let mut data = std::fs::read(e.path()).unwrap();
            if e.file_name() == "summary.json" {
                data.extend_from_slice(b" ");
            }
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(
                &mut h,
                format!(
                    "20261127-130000-timer-00b0/{}",
                    e.file_name().to_string_lossy()
                ),
                &data[..],
            )
            .unwrap();
        }
    });
    // An entry that climbs out, written raw (the builder refuses such names).
    let escape = build("escape.tar", &|b| {
        let data = b"x";
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..9].copy_from_slice(b"../evil.t");
        h.set_size(1);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, &data[..]).unwrap();
    });
    let link = build("link.tar", &|b| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_cksum();
        b.append_link(&mut h, "20261127-130000-timer-00b1", "/etc")
            .unwrap();
    });
    let runs = tmp.path().join("runs");
    for (archive, what) in [
        (&altered, "summary.json"),
        (&escape, "../evil.t is not a relative path"),
        (&link, "not a file or a directory"),
    ] {
        let out = run_in(&runs, &["runs", "import", archive.to_str().unwrap()]);
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(out.stderr.contains(what), "{what}: {}", out.stderr);
        let left: Vec<_> = std::fs::read_dir(&runs)
            .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            left.iter()
                .all(|n| n.to_string_lossy().starts_with("catalog")),
            "{left:?}"
        );
    }
    assert!(!tmp.path().join("evil.t").exists());
}
