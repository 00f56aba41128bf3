//! What the command's integration tests share: one lock for the tests that use the machine's
//! CPUs, the hang guards, the skip message, and the privilege check.

use std::os::fd::AsRawFd;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Who holds the machine in this process: one test alone ([`lock`]), or any number of tests
/// that share it ([`share`]).
struct Holders {
    alone: bool,
    shared: usize,
}

static HOLDERS: Mutex<Holders> = Mutex::new(Holders {
    alone: false,
    shared: 0,
});
/// Signalled whenever a test lets go of the machine.
static LET_GO: Condvar = Condvar::new();

/// The file two test processes lock to serialise their measuring tests with each other, so
/// that the root and the unprivileged pass can run at once: a file both users can open, made by
/// the script that starts them (.ci/run). Unset, only the tests of this process are serialised.
pub const MACHINE_LOCK_ENV: &str = "SANDGLASS_TEST_MACHINE_LOCK";

/// A file to which each test appends how long it held the machine
/// (`SECONDS\tTEST\tUSER\tHOW\tTAKEN`, HOW `alone` or `shared`, TAKEN the Unix time at which it
/// took it), when it lets go: the tests that have the machine to themselves run one at a time,
/// so their sum bounds the suite's wall time, and .ci/run prints it, the longest, and how long
/// no test held the machine.
pub const LOCK_LOG_ENV: &str = "SANDGLASS_TEST_LOCK_LOG";

/// Held while a test measures or loads the machine; see [`lock`] and [`share`].
pub struct Machine {
    since: Instant,
    /// When the lock was taken, for the log's timeline.
    taken: std::time::SystemTime,
    alone: bool,
    _file: Option<std::fs::File>,
}

impl Drop for Machine {
    fn drop(&mut self) {
        {
            let mut h = HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
            if self.alone {
                h.alone = false;
            } else {
                h.shared -= 1;
            }
        }
        LET_GO.notify_all();
        let Some(path) = std::env::var_os(LOCK_LOG_ENV) else {
            return;
        };
        let held = self.since.elapsed().as_secs_f64();
        let test = std::thread::current().name().unwrap_or("?").to_string();
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let how = if self.alone { "alone" } else { "shared" };
        let taken = self
            .taken
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let line = format!("{held:.1}\t{test}\t{uid}\t{how}\t{taken:.1}\n");
        // One write of a short line to a file opened for appending: lines of two processes
        // never interleave.
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) {
            let _ = std::io::Write::write_all(&mut f, line.as_bytes());
        }
    }
}

/// Gives a test the machine to itself: for a test whose assertions depend on timing (a
/// latency, a count of releases, a named culprit, a verdict, the machine's state), which another
/// test's threads and loads would change. It waits for every other test that holds the machine
/// (alone or shared), and with [`MACHINE_LOCK_ENV`] set, for those of other processes holding
/// that file locked. A test that panicked while holding it still lets go.
pub fn lock() -> Machine {
    let mut h = HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
    while h.alone || h.shared > 0 {
        h = LET_GO.wait(h).unwrap_or_else(|p| p.into_inner());
    }
    h.alone = true;
    drop(h);
    hold(true)
}

/// Shares the machine with other tests that share it, never with one that has it alone: for a
/// test that measures or loads the machine but asserts only what no other test's load can
/// change (files, formats, exit codes, counts that hold under any load). Such a test's commands
/// use a runtime directory of their own ([`runtime_for`]), so that two of them do not refuse each
/// other's CPUs. A test that shares joins those sharing even while a test waits to have the
/// machine alone: the sharing tests then run together, and the suite is shorter, however long
/// that one waits.
pub fn share() -> Machine {
    let mut h = HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
    while h.alone {
        h = LET_GO.wait(h).unwrap_or_else(|p| p.into_inner());
    }
    h.shared += 1;
    drop(h);
    hold(false)
}

/// Holds the file of [`MACHINE_LOCK_ENV`], when set, exclusively when `alone` (flock's LOCK_EX)
/// and shared otherwise (LOCK_SH), after this process's holders let the test in: always in this
/// order, so that no two tests wait for each other.
fn hold(alone: bool) -> Machine {
    // Made first, so that a panic below still lets go of this process's holders.
    let mut machine = Machine {
        since: Instant::now(),
        taken: std::time::SystemTime::now(),
        alone,
        _file: None,
    };
    let how = if alone { libc::LOCK_EX } else { libc::LOCK_SH };
    machine._file = std::env::var_os(MACHINE_LOCK_ENV).map(|path| {
        let file = std::fs::File::open(&path)
            .unwrap_or_else(|e| panic!("{MACHINE_LOCK_ENV}={}: {e}", path.to_string_lossy()));
        // SAFETY: flock on a descriptor this function owns; it blocks until the lock is held.
        while unsafe { libc::flock(file.as_raw_fd(), how) } != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "flock: {e}");
        }
        file
    });
    machine.since = Instant::now();
    machine.taken = std::time::SystemTime::now();
    machine
}

/// How long a test lets one whole command run before it calls it hung and kills it. A hang
/// guard, not a verdict on speed: a command that takes seconds on an idle machine may take
/// many times as long beside other work, and only one that has not ended after this long fails.
pub const COMMAND_GUARD: Duration = Duration::from_secs(900);

/// How long a test waits for something a running command is to do (a file, a line, a state)
/// before it calls the command hung. A hang guard like [`COMMAND_GUARD`].
pub const WAIT_GUARD: Duration = Duration::from_secs(300);

/// The message of an expired hang guard: `what` did not happen within `guard`.
pub fn hang_guard(what: &str, guard: Duration) -> String {
    format!(
        "hang guard: {what} did not happen within {} s (the machine may be overloaded, or it hung)",
        guard.as_secs()
    )
}

/// Waits until `done` holds, checking every 20 ms; panics with a [`hang_guard`] message naming
/// `what` when it does not hold within [`WAIT_GUARD`].
pub fn wait_until(what: &str, done: impl FnMut() -> bool) {
    wait_until_within(what, WAIT_GUARD, done)
}

/// [`wait_until`] with a guard of `guard`.
pub fn wait_until_within(what: &str, guard: Duration, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + guard;
    while !done() {
        assert!(Instant::now() < end, "{}", hang_guard(what, guard));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the run `child` writes into `dir` has begun (its manifest exists); panics with
/// the command's exit status and error output if it ends first (refused, or failed to start),
/// or with a [`hang_guard`] message.
pub fn wait_for_run(child: &mut std::process::Child, dir: &std::path::Path) {
    let manifest = dir.join("manifest.json");
    let mut ended = None;
    wait_until("the run's manifest", || {
        ended = child.try_wait().unwrap();
        ended.is_some() || manifest.exists()
    });
    if let (Some(status), false) = (ended, manifest.exists()) {
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
        }
        panic!("the command ended ({status}) before its run began: {stderr}");
    }
}

/// Waits until `child` has a thread named `comm` and returns its id; panics if `child` ends
/// first, or with a [`hang_guard`] message.
pub fn wait_for_thread(child: &mut std::process::Child, comm: &str) -> String {
    let mut tid = None;
    wait_until(&format!("the thread {comm}"), || {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the process ended before its thread {comm} appeared"
        );
        let tasks = std::fs::read_dir(format!("/proc/{}/task", child.id()));
        tid = tasks.ok().and_then(|rd| {
            rd.flatten().find_map(|e| {
                let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
                (name.trim() == comm).then(|| e.file_name().to_string_lossy().into_owned())
            })
        });
        tid.is_some()
    });
    tid.unwrap()
}

/// Running a command to its end under [`COMMAND_GUARD`].
pub trait Guarded {
    /// The command's output once it has ended; panics with a [`hang_guard`] message when it
    /// had to be killed at the guard.
    fn guarded_output(&mut self) -> std::process::Output;
}

impl Guarded for assert_cmd::Command {
    fn guarded_output(&mut self) -> std::process::Output {
        let started = Instant::now();
        let out = self.timeout(COMMAND_GUARD).output().unwrap();
        if out.status.code().is_none() && started.elapsed() >= COMMAND_GUARD {
            panic!(
                "{} (it was killed): {self:?}",
                hang_guard("the command's end", COMMAND_GUARD)
            );
        }
        out
    }
}

/// Prints why a test is skipped. Written to the stderr handle directly, not with `eprintln!`,
/// so that the test harness does not capture it and `cargo test` shows it.
pub fn skip(reason: &str) {
    use std::io::Write;
    // The harness names each test's thread after the test.
    let current = std::thread::current();
    let test = current.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "skipped {test}: {reason}");
}

/// Whether the tests run as root (real-time priorities, SCHED_DEADLINE, tracefs).
pub fn is_root() -> bool {
    sandglass_sys::process::euid() == 0
}

/// Reads a table of the run at `dir` (any run format, any state): column `column` as 64-bit
/// integers (32-bit and boolean columns widened), in the table's order.
pub fn column(
    dir: &std::path::Path,
    table: &'static sandglass::store::table::Table,
    column: &str,
) -> Vec<i64> {
    let r = sandglass::store::RunReader::open_any_state(dir).unwrap();
    let mut out = Vec::new();
    let Some(t) = sandglass::store::table::TableReader::open(&r, table) else {
        return out;
    };
    t.scan::<sandglass::store::ReadError>(&[column], |b| {
        if let Ok(v) = b.i64s(column) {
            out.extend_from_slice(v);
        } else if let Ok(v) = b.i32s(column) {
            out.extend(v.iter().map(|&x| x as i64));
        } else {
            out.extend(b.bools(column)?.iter().map(|&x| x as i64));
        }
        Ok(())
    })
    .unwrap();
    out
}

/// The rows of a table of the run at `dir`.
pub fn rows(dir: &std::path::Path, table: &'static sandglass::store::table::Table) -> usize {
    column(dir, table, table.columns[0].name).len()
}

/// What one invocation of the command printed and how it ended.
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// A runtime directory (CPU locks) of its own for the runs directory `runs`: tests of one
/// binary run at once, and those that do not measure figures need not wait for each other's
/// CPUs.
pub fn runtime_for(runs: &std::path::Path) -> std::path::PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    runs.hash(&mut h);
    std::env::temp_dir().join(format!("sandglass-test-runtime-{:x}", h.finish()))
}

/// Runs the command with `args` and its runs directory (and so its catalog) in `runs`.
pub fn run_in(runs: &std::path::Path, args: &[&str]) -> Out {
    let out = assert_cmd::Command::cargo_bin("sandglass")
        .unwrap()
        .env("SANDGLASS_RUNS_DIR", runs)
        .env("SANDGLASS_RUNTIME_DIR", runtime_for(runs))
        .args(args)
        .output()
        .unwrap();
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`start_run`] of `sandglass timer -c 0 -d 60s`.
pub fn start_timer_run(runs: &std::path::Path) -> (std::process::Child, std::path::PathBuf) {
    start_run(runs, &["timer", "-c", "0", "-d", "60s"])
}

/// Starts `sandglass ARGS` with its runs directory in `runs` and waits until it has written
/// its `running` manifest; returns the process and the run's directory. The caller ends the
/// process and waits for it.
#[allow(clippy::zombie_processes)]
pub fn start_run(
    runs: &std::path::Path,
    args: &[&str],
) -> (std::process::Child, std::path::PathBuf) {
    let before: Vec<std::path::PathBuf> = std::fs::read_dir(runs)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("sandglass"))
        .args(args)
        .env("SANDGLASS_RUNS_DIR", runs)
        .env("SANDGLASS_RUNTIME_DIR", runtime_for(runs))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let end = Instant::now() + WAIT_GUARD;
    loop {
        let found = std::fs::read_dir(runs).ok().and_then(|rd| {
            rd.flatten().find(|e| {
                !before.contains(&e.path())
                    && std::fs::read_to_string(e.path().join("manifest.json"))
                        .is_ok_and(|m| m.contains("\"running\""))
            })
        });
        if let Some(e) = found {
            return (child, e.path());
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{}", hang_guard("the run's running manifest", WAIT_GUARD));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A temporary directory that is kept, and its path printed, when the test panics while it
/// is alive: a failed check against the real kernel leaves its run behind for inspection.
pub struct KeptOnFailure(Option<tempfile::TempDir>);

impl KeptOnFailure {
    pub fn new() -> KeptOnFailure {
        KeptOnFailure(Some(tempfile::tempdir().unwrap()))
    }

    pub fn path(&self) -> &std::path::Path {
        self.0.as_ref().unwrap().path()
    }
}

impl Drop for KeptOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(dir) = self.0.take() {
                let kept = dir.keep();
                eprintln!("kept the failed attempt's files in {}", kept.display());
            }
        }
    }
}

/// The names of the entries of `dir`, sorted.
pub fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Copies the directory `from` with everything under it to `to`.
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}
