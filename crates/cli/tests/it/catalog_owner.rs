//! Nothing sandglass did not write is deleted, and a store it cannot or must not write is read
//! without being written: two monitors sharing a store each remove only their own segments, an
//! imported segment outlives retention and `runs rm`, `runs rm` refuses an empty or ambiguous
//! id, and a store owned by another user, not writable, or on a read-only mount is listed and
//! left byte for byte as it was. The tests that need root (a foreign owner, a mount) say why
//! they skip without it.

use crate::common;

use common::{is_root, lock, run_in, share, skip, Out};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The run directories directly in `runs`, by name.
fn dirs(runs: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(runs)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().join("manifest.json").exists())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The one `sandglass: error:` line of `o`, which must have exited with `code`.
fn one_error(o: &Out, code: i32) -> String {
    assert_eq!(o.code, Some(code), "{}{}", o.stdout, o.stderr);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    let errors: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("sandglass: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", o.stderr);
    errors[0].to_string()
}

fn ok(runs: &Path, args: &[&str]) -> Out {
    let o = run_in(runs, args);
    assert_eq!(o.code, Some(0), "{args:?}: {}", o.stderr);
    o
}

/// The ids the catalog of `runs` lists.
fn listed(runs: &Path) -> Vec<String> {
    let o = ok(runs, &["runs", "--json"]);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let mut ids: Vec<String> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

/// A short timer run in `runs`; returns its directory.
fn timer_run(runs: &Path) -> PathBuf {
    let o = ok(runs, &["timer", "-c", "0", "-d", "300ms", "--json"]);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    PathBuf::from(v["run_dir"].as_str().unwrap())
}

fn monitor(runs: &Path, cpu: &str, keep: &str, segments: &str) -> Out {
    ok(
        runs,
        &[
            "monitor",
            "-c",
            cpu,
            "--segment",
            "500ms",
            "--segments",
            segments,
            "--keep",
            keep,
            "--max-disk",
            "off",
        ],
    )
}

/// `monitor -c 0 --keep 1s` next to `monitor -c 1 --keep off` in one store: the first removes
/// its own old segments, and none of the second's, though they ended long before.
#[test]
fn two_monitors_sharing_a_store_remove_only_their_own_segments() {
    let _machine = lock();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    monitor(&runs, "1", "off", "2");
    let theirs = dirs(&runs);
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let o = monitor(&runs, "0", "1s", "4");
    let now = dirs(&runs);
    for d in &theirs {
        assert!(
            now.contains(d),
            "{d} of the other monitor was removed: {}",
            o.stderr
        );
        assert!(!o.stderr.contains(d.as_str()), "{}", o.stderr);
    }
    // Its own segments older than 1 s went (the newest always stays).
    let own: Vec<&String> = now.iter().filter(|d| !theirs.contains(d)).collect();
    assert!(!own.is_empty() && own.len() < 4, "{now:?}: {}", o.stderr);
    assert!(o.stderr.contains("beyond --keep 1s"), "{}", o.stderr);
    assert_eq!(listed(&runs), now);
}

/// A segment of the same CPUs imported in place from another directory is catalogued there and
/// is never deleted: not by retention, not by `runs rm`, which only forgets it and says so.
#[test]
fn an_imported_segment_is_never_deleted_by_retention_or_rm() {
    let _machine = share();
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    monitor(&elsewhere, "0", "off", "1");
    let seg = elsewhere.join(&dirs(&elsewhere)[0]);
    let id = seg.file_name().unwrap().to_string_lossy().into_owned();
    let runs = tmp.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let o = ok(&runs, &["runs", "import", seg.to_str().unwrap()]);
    assert!(o.stdout.contains("indexed in place"), "{}", o.stdout);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let o = monitor(&runs, "0", "1s", "3");
    assert!(seg.join("manifest.json").is_file(), "{}", o.stderr);
    assert!(!o.stderr.contains(&id), "{}", o.stderr);
    assert!(listed(&runs).contains(&id));
    let o = ok(&runs, &["runs", "show", &id]);
    assert!(
        o.stdout.contains("outside the runs directory"),
        "{}",
        o.stdout
    );

    let o = ok(&runs, &["runs", "rm", &id]);
    assert!(
        o.stdout.starts_with("forgot ") && o.stdout.contains("removed from the catalog only"),
        "{}",
        o.stdout
    );
    assert!(seg.join("manifest.json").is_file());
    assert!(!listed(&runs).contains(&id));
}

/// `runs rm ''` (an unset variable) and a prefix of several runs remove nothing: exit 2 and one
/// line, naming the runs the prefix matched.
#[test]
fn runs_rm_refuses_an_empty_or_ambiguous_id() {
    let _machine = share();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let a = timer_run(&runs);
    let b = timer_run(&runs);
    let before = dirs(&runs);
    for empty in ["", " "] {
        let e = one_error(&run_in(&runs, &["runs", "rm", empty]), 2);
        assert!(e.contains("the run is empty"), "{e}");
        assert_eq!(dirs(&runs), before);
        // Nor does any other command take it for a prefix of every run.
        let e = one_error(&run_in(&runs, &["report", empty]), 2);
        assert!(e.contains("the run is empty"), "{e}");
    }
    let e = one_error(&run_in(&runs, &["runs", "rm", "2"]), 2);
    for d in [&a, &b] {
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        assert!(e.contains(&name), "{e}");
    }
    assert!(e.contains("is ambiguous: 2 runs start with it"), "{e}");
    assert_eq!(dirs(&runs), before);
    assert_eq!(listed(&runs), before);
}

/// The catalog file's bytes and modification time, and the store's entries.
fn fingerprint(runs: &Path) -> (Vec<u8>, std::time::SystemTime, Vec<String>) {
    let file = runs.join("catalog.sqlite");
    let names = common::names_in(runs);
    (
        std::fs::read(&file).unwrap(),
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        names,
    )
}

fn chown_tree(path: &Path, uid: u32) {
    let st = std::process::Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}"), path.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// Every command that must write refuses the store in one line (exit 2) naming `needle`, and
/// the listing still works; nothing in the store changes.
fn writes_are_refused(runs: &Path, run: impl Fn(&[&str]) -> Out, needle: &str) {
    let before = fingerprint(runs);
    let o = run(&["runs", "--json"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 1, "{}", o.stdout);
    assert!(o.stderr.contains(needle), "{}", o.stderr);
    assert!(
        !o.stderr.contains("readonly database") && !o.stderr.contains("rebuild"),
        "{}",
        o.stderr
    );
    let id = v["runs"][0]["id"].as_str().unwrap().to_string();
    let o = run(&["runs", "show", &id]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let elsewhere = tempfile::tempdir().unwrap();
    for args in [
        vec!["runs", "rebuild"],
        vec!["runs", "rm", &id],
        vec!["runs", "import", elsewhere.path().to_str().unwrap()],
        vec!["timer", "-c", "0", "-d", "200ms"],
    ] {
        let e = one_error(&run(&args), 2);
        assert!(e.contains(needle), "{args:?}: {e}");
        assert!(
            !e.contains("readonly database") && !e.contains("runs rebuild"),
            "{args:?}: {e}"
        );
    }
    assert_eq!(fingerprint(runs), before, "the store was written");
}

/// A store owned by another user (nobody) is listed read-only by root and never written.
#[test]
fn root_lists_another_users_store_read_only_and_writes_nothing() {
    if !is_root() {
        skip("needs root to give the store to another user");
        return;
    }
    let _machine = share();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    timer_run(&runs);
    chown_tree(&runs, 65534);
    writes_are_refused(&runs, |args| run_in(&runs, args), "owned by uid 65534");
}

/// A store nobody may not write (root's, mode 555) is listed read-only by nobody.
#[test]
fn a_store_this_user_cannot_write_is_listed_read_only() {
    if !is_root() {
        skip("needs root to run sandglass as the user nobody");
        return;
    }
    let _machine = share();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let runs = tmp.path().join("runs");
    timer_run(&runs);
    std::fs::set_permissions(&runs, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    let runtime = tmp.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    chown_tree(&runtime, 65534);
    let as_nobody = |args: &[&str]| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(assert_cmd::cargo::cargo_bin("sandglass"))
            .args(args)
            .env("SANDGLASS_RUNS_DIR", &runs)
            .env("SANDGLASS_RUNTIME_DIR", &runtime)
            .output()
            .unwrap();
        Out {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    writes_are_refused(&runs, as_nobody, "not writable by this user (uid 65534)");
}

/// A store on a read-only bind mount is listed, and every write is refused naming the file
/// system.
#[test]
fn a_store_on_a_read_only_mount_is_listed_read_only() {
    if !is_root() {
        skip("needs root to mount");
        return;
    }
    let _machine = share();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    timer_run(&src);
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let mount = |args: &[&str]| {
        std::process::Command::new("mount")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !mount(&["--bind", src.to_str().unwrap(), ro.to_str().unwrap()]) {
        skip("mount --bind is not allowed here");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(ro.clone());
    if !mount(&["-o", "remount,bind,ro", ro.to_str().unwrap()]) {
        skip("the bind mount cannot be made read-only here");
        return;
    }
    let runtime = tmp.path().join("runtime");
    writes_are_refused(
        &ro,
        |args| {
            let out = assert_cmd::Command::cargo_bin("sandglass")
                .unwrap()
                .env("SANDGLASS_RUNS_DIR", &ro)
                .env("SANDGLASS_RUNTIME_DIR", &runtime)
                .args(args)
                .output()
                .unwrap();
            Out {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        },
        "read-only file system",
    );
}
