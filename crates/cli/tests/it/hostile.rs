//! A hostile local user against a root sandglass (docs/robustness.md, "Running as root"): links
//! and files planted in the runtime directory, forged load records, held locks, FIFOs. Each
//! case checks that root's run refuses or carries on safely, and that nothing it did not start
//! or write is touched. The user is nobody (uid 65534), through `setpriv`; without root or
//! setpriv the tests skip with the reason.

use crate::common;

use common::{is_root, lock, skip};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

/// Whether the tests can play root and nobody; prints why not.
fn can_play() -> bool {
    if !is_root() {
        skip("needs root: the hostile user is played by nobody through setpriv (CI runs as root)");
        return false;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        skip("setpriv (util-linux) is missing: apt-get install util-linux");
        return false;
    }
    true
}

/// `args` as nobody.
fn as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .args(args)
        .output()
        .expect("setpriv")
}

/// A directory that nobody can reach (mode 0755 up the path), removed afterwards.
struct Place(tempfile::TempDir);

impl Place {
    fn new() -> Place {
        let t = tempfile::Builder::new()
            .prefix("sandglass-hostile-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Place(t)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// Root's `sandglass ARGS` with the runtime directory `rt` and a runs directory in `place`;
/// killed, and the test failed, only at the hang guard.
fn root_run(place: &Path, rt: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandglass"))
        .args(args)
        .env("SANDGLASS_RUNTIME_DIR", rt)
        .env("SANDGLASS_RUNS_DIR", place.join("runs"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sandglass");
    let deadline = Instant::now() + common::COMMAND_GUARD;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{}: sandglass {args:?}",
                common::hang_guard("the command's end", common::COMMAND_GUARD)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The machine's lock, a place, and a runtime directory in it made by a root run on CPU 1;
/// `None` (after saying why) where root and nobody cannot both be played.
fn root_made_runtime_dir() -> Option<(common::Machine, Place, PathBuf)> {
    if !can_play() {
        return None;
    }
    let guard = lock();
    let place = Place::new();
    let rt = place.path().join("rt");
    let (code, err) = root_run(
        place.path(),
        &rt,
        &["timer", "-c", "1", "-d", "200ms", "-q"],
    );
    assert_eq!(code, Some(0), "{err}");
    Some((guard, place, rt))
}

fn mode(p: &Path) -> u32 {
    p.symlink_metadata().expect("stat").mode() & 0o7777
}

/// Issue reproduction 1: a link planted as a CPU's lock file never makes root write through it,
/// and a runtime directory others can write is refused, not used or repaired.
#[test]
fn a_link_planted_as_a_lock_file_is_never_followed() {
    let Some((_g, place, rt)) = root_made_runtime_dir() else {
        return;
    };
    assert_eq!(mode(&rt), 0o755, "root's runtime directory");
    assert_eq!(mode(&rt.join("cpu1.lock")), 0o600, "root's lock file");
    let victim = place.path().join("victim");
    std::fs::write(&victim, "PRECIOUS\n").expect("write");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let link = rt.join("cpu0.lock");
    let planted = as_nobody(&["ln", "-s", victim.to_str().unwrap(), link.to_str().unwrap()]);
    assert!(
        !planted.status.success() && link.symlink_metadata().is_err(),
        "nobody could plant a link in root's runtime directory"
    );
    // Had it been able to (a directory left writable), root refuses the link.
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    let (code, err) = root_run(
        place.path(),
        &rt,
        &["timer", "-c", "0", "-d", "200ms", "-q"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cpu0.lock: is a symbolic link"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "PRECIOUS\n");
    assert_eq!(mode(&victim), 0o600);
    // A hard link to the victim: refused as well.
    std::fs::remove_file(&link).expect("rm");
    std::fs::hard_link(&victim, &link).expect("link");
    let (code, err) = root_run(
        place.path(),
        &rt,
        &["timer", "-c", "0", "-d", "200ms", "-q"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("hard links"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "PRECIOUS\n");
    assert_eq!(mode(&victim), 0o600);
    // A runtime directory of mode 1777 (as older versions made it) or of another owner.
    let shared = place.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let (code, err) = root_run(place.path(), &shared, &["timer", "-c", "0", "-d", "200ms"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("has mode 1777") && err.contains("remove it"),
        "{err}"
    );
    assert_eq!(mode(&shared), 0o1777, "refused, and left as it was");
    let theirs = place.path().join("theirs");
    std::fs::create_dir(&theirs).expect("mkdir");
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).expect("chown");
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let (code, err) = root_run(place.path(), &theirs, &["timer", "-c", "0", "-d", "200ms"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is owned by uid 65534"), "{err}");
}

/// Issue reproduction 2: a load record root did not write, one naming a cgroup sandglass did
/// not make, and a FIFO among the records signal nothing and hang nothing; nobody cannot plant
/// one in the first place.
#[test]
fn a_planted_load_record_signals_nothing() {
    let Some((_g, place, rt)) = root_made_runtime_dir() else {
        return;
    };
    let loads = rt.join("loads");
    std::fs::create_dir(&loads).expect("mkdir");
    std::fs::set_permissions(&loads, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let planted = as_nobody(&["touch", loads.join("x.state").to_str().unwrap()]);
    assert!(
        !planted.status.success(),
        "nobody could write into root's loads/"
    );
    let mut victim = Command::new("sleep").arg("60").spawn().expect("sleep");
    let pid = victim.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let start = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_string();
    // A record of another owner naming the victim exactly (pid and start time).
    let foreign = loads.join("foreign.state");
    std::fs::write(&foreign, format!("owner 4000000 1\nproc {pid} {start}\n")).expect("write");
    std::os::unix::fs::chown(&foreign, Some(NOBODY), Some(NOBODY)).expect("chown");
    // Root's own file naming a cgroup that is not a load's.
    let cgroup = loads.join("cgroup.state");
    std::fs::write(
        &cgroup,
        "owner 4000000 1\ncgroup /sys/fs/cgroup/user.slice\n",
    )
    .expect("write");
    let fifo = loads.join("fifo.state");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo")
        .success());
    // A record that would hang the run (the FIFO) fails the test at root_run's hang guard.
    let (code, err) = root_run(
        place.path(),
        &rt,
        &["timer", "-c", "1", "-d", "200ms", "-q"],
    );
    let alive = victim.try_wait().expect("wait").is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        alive,
        "root signalled a process named by a planted record: {err}"
    );
    assert!(
        err.contains("foreign.state is not a load record this user's sandglass wrote")
            && err.contains("owned by uid 65534"),
        "{err}"
    );
    assert!(err.contains("/sys/fs/cgroup/user.slice"), "{err}");
    assert!(
        err.contains("fifo.state") && err.contains("not a regular file"),
        "{err}"
    );
    assert!(
        foreign.exists() && cgroup.exists() && fifo.exists(),
        "left as they were"
    );
}

/// Issue reproduction 3: nobody can neither open nor lock root's lock file, so root's runs on
/// that CPU go on; and the text of a refusal is never what another user wrote.
#[test]
fn nobody_cannot_block_a_root_run() {
    if Command::new("flock").arg("--version").output().is_err() {
        skip("flock (util-linux) is missing");
        return;
    }
    let Some((_g, place, rt)) = root_made_runtime_dir() else {
        return;
    };
    let held = as_nobody(&[
        "flock",
        "-n",
        rt.join("cpu1.lock").to_str().unwrap(),
        "true",
    ]);
    assert!(!held.status.success(), "nobody locked root's cpu1.lock");
    let (code, err) = root_run(
        place.path(),
        &rt,
        &["timer", "-c", "1", "-d", "200ms", "-q"],
    );
    assert_eq!(code, Some(0), "{err}");
}

/// An unprivileged run finds root's lock in the kernel's table of locks and refuses the CPU,
/// naming root's run; it cannot open root's lock file to hold it.
#[test]
fn an_unprivileged_run_refuses_a_cpu_root_measures() {
    if !can_play() {
        return;
    }
    let root_dir = Path::new("/run/sandglass");
    if let Ok(m) = root_dir.symlink_metadata() {
        if !m.is_dir() || m.uid() != 0 || m.mode() & 0o022 != 0 {
            skip("/run/sandglass exists with another owner or mode: sandglass refuses it");
            return;
        }
    }
    let _g = lock();
    let place = Place::new();
    let mine = place.path().join("nobody");
    std::fs::create_dir(&mine).expect("mkdir");
    std::os::unix::fs::chown(&mine, Some(NOBODY), Some(NOBODY)).expect("chown");
    let runs = place.path().join("runs");
    // Root measures far longer than nobody's run takes to start on a busy machine; it is
    // stopped (Ctrl-C) once nobody has been refused.
    let mut root = Command::new(env!("CARGO_BIN_EXE_sandglass"))
        .args(["timer", "-c", "1", "-d", "600s", "-q"])
        .env_remove("SANDGLASS_RUNTIME_DIR")
        .env("SANDGLASS_RUNS_DIR", &runs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sandglass");
    let lock_file = root_dir.join("cpu1.lock");
    let deadline = Instant::now() + common::WAIT_GUARD;
    while !held_by(&lock_file, root.id()) {
        let ended = root.try_wait().expect("wait").is_some();
        if ended || Instant::now() > deadline {
            let _ = root.kill();
            let out = root.wait_with_output().expect("output");
            let why = if ended {
                "root's run ended".to_string()
            } else {
                common::hang_guard("root's run holding its lock", common::WAIT_GUARD)
            };
            panic!(
                "{why}: it never held {}: {}",
                lock_file.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let rt = mine.join("rt");
    let out = as_nobody(&[
        "env",
        &format!("SANDGLASS_RUNTIME_DIR={}", rt.display()),
        &format!("SANDGLASS_RUNS_DIR={}", mine.join("runs").display()),
        env!("CARGO_BIN_EXE_sandglass"),
        "timer",
        "-c",
        "1",
        "-d",
        "200ms",
        "-q",
    ]);
    let opened = as_nobody(&["flock", "-n", lock_file.to_str().unwrap(), "true"]);
    let root_pid = root.id();
    sandglass_sys::signal::send_to_process(root_pid as i32, sandglass_sys::signal::SIGINT)
        .expect("SIGINT");
    let root_out = root.wait_with_output().expect("root");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("CPU 1 by root's pid {root_pid} (")),
        "{err}"
    );
    assert!(err.contains("sandglass timer -c 1 -d 600s"), "{err}");
    assert!(
        !opened.status.success(),
        "nobody could open root's lock file"
    );
    assert_eq!(
        root_out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&root_out.stderr)
    );
}

/// Whether process `pid` holds a `flock` on `file`, from `/proc/locks`.
fn held_by(file: &Path, pid: u32) -> bool {
    let Ok(m) = file.symlink_metadata() else {
        return false;
    };
    let ino = m.ino().to_string();
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&"FLOCK")
                && f.get(4) == Some(&pid.to_string().as_str())
                && f.get(5)
                    .is_some_and(|id| id.rsplit(':').next() == Some(&ino))
        })
}

/// Root's `-o` into a place others can write (`/tmp`): a directory nobody made there first, or
/// a link nobody planted, is refused before anything is written through it.
#[test]
fn root_writes_no_run_into_a_directory_another_user_planted() {
    let Some((_g, place, rt)) = root_made_runtime_dir() else {
        return;
    };
    let open = place.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    // Root's run into `dir` is refused naming `why`, and nothing is written into `inside`.
    let refused = |dir: &Path, why: &str, inside: &Path| {
        let (code, err) = root_run(
            place.path(),
            &rt,
            &[
                "timer",
                "-c",
                "1",
                "-d",
                "200ms",
                "-q",
                "-o",
                dir.to_str().unwrap(),
            ],
        );
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(why), "{err}");
        assert_eq!(
            std::fs::read_dir(inside).unwrap().count(),
            0,
            "{}",
            inside.display()
        );
    };
    let theirs = open.join("run");
    let made = as_nobody(&["mkdir", theirs.to_str().unwrap()]);
    assert!(made.status.success(), "nobody's mkdir");
    refused(&theirs, "is owned by uid 65534", &theirs);
    let target = place.path().join("target");
    std::fs::create_dir(&target).expect("mkdir");
    let link = open.join("link");
    let planted = as_nobody(&["ln", "-s", target.to_str().unwrap(), link.to_str().unwrap()]);
    assert!(planted.status.success(), "nobody's link");
    refused(&link, "is a symbolic link", &target);
}

/// Root's `study --resume DIR` of a study in a directory another user owns, or through a link,
/// is refused before anything is written into it (not even the study's lock).
#[test]
fn root_resumes_no_study_in_another_users_directory() {
    if !is_root() {
        skip("only root's resume is refused here (CI runs as root)");
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v2/study");
    let place = tempfile::tempdir().expect("tempdir");
    let runs = place.path().join("runs");
    let refused = |dir: &Path, why: &str, inside: &Path| {
        let before = common::names_in(inside);
        let out = common::run_in(&runs, &["study", "--resume", dir.to_str().unwrap()]);
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(out.stderr.contains(why), "{}", out.stderr);
        assert_eq!(common::names_in(inside), before, "{}", inside.display());
    };
    let theirs = place.path().join("theirs");
    common::copy_tree(&fixture, &theirs);
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
    refused(&theirs, "is owned by uid 65534", &theirs);
    let own = place.path().join("own");
    common::copy_tree(&fixture, &own);
    let link = place.path().join("link");
    std::os::unix::fs::symlink(&own, &link).expect("symlink");
    refused(&link, "is a symbolic link", &own);
}
