//! One measurement per CPU: a run holds an advisory lock per measured CPU, so that two
//! sandglass processes never measure the same CPU without knowing it (each would report the
//! other as noise).
//!
//! The lock is `flock(2)` on `cpuN.lock` in the runtime directory ([`crate::runtime`]); the
//! holder writes its pid and command line into the file. The kernel releases a `flock` when the
//! last descriptor of the open file closes, so a run killed with SIGKILL never leaves a stale
//! lock. A run that finds a CPU locked is refused with the holder's pid and command, unless it
//! was asked to share CPUs; then it measures, keeps the locks of the CPUs that were free, and
//! reports whom it shared with.
//!
//! Root's lock files (mode 0600 in the 0755 `/run/sandglass`) can be neither opened nor locked
//! by another user, so no user can block or impersonate a root run. An unprivileged run, which
//! keeps its locks in a directory of its own, also looks for root's: it `stat`s root's lock file
//! of each CPU and finds its device and inode in the kernel's table of locks (`/proc/locks`),
//! which names the holder's pid; the command is read from `/proc/PID/cmdline`. A CPU that root
//! measures is refused (or shared, when asked), never the reverse: root does not read what
//! another user wrote.
//!
//! A long-running monitor that should yield its CPUs to an explicit run can poll the same
//! files: the lock is per CPU, so it can release one CPU, wait for it, and take it back.

use crate::runtime::{RuntimeDir, RuntimeError};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Another sandglass holding a CPU's lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub cpu: usize,
    /// Its pid and command line, as it wrote them (empty while it is starting).
    pub pid: Option<i32>,
    pub command: String,
    /// A root run, found by an unprivileged one in the kernel's table of locks.
    pub root: bool,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let whose = if self.root { "root's " } else { "" };
        match self.pid {
            Some(pid) => write!(f, "CPU {} by {whose}pid {pid} ({})", self.cpu, self.command),
            None if self.root => write!(f, "CPU {} by a sandglass of root's", self.cpu),
            None => write!(f, "CPU {} by a sandglass that is starting", self.cpu),
        }
    }
}

/// Why CPUs could not be locked.
#[derive(Debug, Error)]
pub enum CpuLockError {
    #[error("another sandglass is measuring {}: wait for it to end, measure other CPUs (-c), or pass --shared-cpus to measure anyway (each run then counts the other as noise)", list(.0))]
    Busy(Vec<Holder>),
    #[error("{}: cannot lock it: {reason}; set SANDGLASS_RUNTIME_DIR to a directory only you can write", .path.display())]
    File { path: PathBuf, reason: String },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

fn list(holders: &[Holder]) -> String {
    holders
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The locks a run holds until it is dropped.
#[derive(Debug, Default)]
pub struct CpuLocks {
    _held: Vec<File>,
}

/// Locks every CPU of `cpus` in `dir`. With `shared`, CPUs another run holds are returned as
/// holders instead of refusing the run. A user other than root also finds the CPUs root's runs
/// hold, in root's runtime directory.
pub fn acquire_in(
    dir: &RuntimeDir,
    cpus: &[usize],
    shared: bool,
    command: &str,
) -> Result<(CpuLocks, Vec<Holder>), CpuLockError> {
    let root = if sandglass_sys::process::euid() != 0 {
        crate::runtime::root_dir().filter(|r| r != dir.path())
    } else {
        None
    };
    lock_cpus(dir, root.as_deref(), cpus, shared, command)
}

/// [`acquire_in`], with root's lock files looked for in `root` (none: root's runs are not
/// looked for).
fn lock_cpus(
    dir: &RuntimeDir,
    root: Option<&Path>,
    cpus: &[usize],
    shared: bool,
    command: &str,
) -> Result<(CpuLocks, Vec<Holder>), CpuLockError> {
    let mut held = Vec::new();
    let mut busy = Vec::new();
    for &cpu in cpus {
        let name = format!("cpu{cpu}.lock");
        let path = dir.path().join(&name);
        let mut file = dir.open_file(&name, true)?;
        match sandglass_sys::process::try_lock_exclusive(&file) {
            Ok(true) => {
                let text = format!("{}\n{command}\n", std::process::id());
                let _ = file.seek(SeekFrom::Start(0));
                let _ = file.write_all(text.as_bytes());
                let _ = file.set_len(text.len() as u64);
                held.push(file);
            }
            Ok(false) => busy.push(holder_of(&mut file, cpu)),
            Err(e) => {
                return Err(CpuLockError::File {
                    path,
                    reason: e.to_string(),
                })
            }
        }
    }
    if let Some(root) = root {
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        busy.extend(root_holders(root, cpus, &locks, 0));
    }
    if !busy.is_empty() && !shared {
        return Err(CpuLockError::Busy(busy));
    }
    Ok((CpuLocks { _held: held }, busy))
}

/// The CPUs of `cpus` whose lock in root's directory `root` is held, from the kernel's table of
/// locks (`/proc/locks` text): lines such as `1: FLOCK  ADVISORY  WRITE 812 00:19:1045 0 EOF`,
/// the device's major and minor in hex, then the inode. Only lock files owned by `owner` (root)
/// count.
fn root_holders(root: &Path, cpus: &[usize], locks: &str, owner: u32) -> Vec<Holder> {
    use std::os::unix::fs::MetadataExt;
    let held: Vec<(i32, (u64, u64, u64))> = locks
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.get(1) != Some(&"FLOCK") {
                return None;
            }
            let pid = f.get(4)?.parse().ok()?;
            let mut id = f.get(5)?.split(':');
            let major = u64::from_str_radix(id.next()?, 16).ok()?;
            let minor = u64::from_str_radix(id.next()?, 16).ok()?;
            let inode = id.next()?.parse().ok()?;
            Some((pid, (major, minor, inode)))
        })
        .collect();
    cpus.iter()
        .filter_map(|&cpu| {
            let m = root
                .join(format!("cpu{cpu}.lock"))
                .symlink_metadata()
                .ok()?;
            if !m.is_file() || m.uid() != owner {
                return None;
            }
            let key = (major(m.dev()), minor(m.dev()), m.ino());
            let pid = held.iter().find(|(_, k)| *k == key)?.0;
            let pid = (pid > 0).then_some(pid);
            let command = pid
                .and_then(|p| std::fs::read(format!("/proc/{p}/cmdline")).ok())
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .split('\0')
                        .filter(|a| !a.is_empty())
                        .collect::<Vec<_>>()
                        .join(" ")
                        .chars()
                        .map(|c| if c.is_control() { '?' } else { c })
                        .collect()
                })
                .unwrap_or_default();
            Some(Holder {
                cpu,
                pid,
                command,
                root: true,
            })
        })
        .collect()
}

/// The major and minor numbers of a device number, as glibc's `gnu_dev_major` and
/// `gnu_dev_minor` split it.
fn major(dev: u64) -> u64 {
    ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)
}

fn minor(dev: u64) -> u64 {
    (dev & 0xff) | ((dev >> 12) & !0xff)
}

/// How long a refused run waits for the holder to write its name: the holder writes it right
/// after taking the lock, so a run started at the same instant can find the file empty, or still
/// naming the previous, ended holder.
const HOLDER_NAME_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Who holds `file`'s lock, as it wrote itself into the file: re-read until the file names a
/// living process (or [`HOLDER_NAME_WAIT`] passes, then "a sandglass that is starting").
fn holder_of(file: &mut File, cpu: usize) -> Holder {
    let start = std::time::Instant::now();
    loop {
        let mut text = String::new();
        let _ = file.seek(SeekFrom::Start(0));
        let _ = file.read_to_string(&mut text);
        let mut lines = text.lines();
        let pid: Option<i32> = lines.next().and_then(|l| l.trim().parse().ok());
        let command = lines.next().unwrap_or_default().to_string();
        let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if (alive && !command.is_empty()) || start.elapsed() >= HOLDER_NAME_WAIT {
            return Holder {
                cpu,
                pid: pid.filter(|_| alive),
                command,
                root: false,
            };
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// [`acquire_in`] the runtime directory.
pub fn acquire(
    cpus: &[usize],
    shared: bool,
    command: &str,
) -> Result<(CpuLocks, Vec<Holder>), CpuLockError> {
    acquire_in(&crate::runtime::dir()?, cpus, shared, command)
}

#[cfg(test)]
mod tests {
    //! These tests lock CPUs in a directory of their own and look for no root's runs, so that
    //! a run measuring on the machine meanwhile (another test process's, root's) changes
    //! nothing; root's locks are found by [`root_holders`], tested on its own.
    use super::*;

    #[test]
    fn a_held_cpu_is_refused_with_its_holder_or_shared_when_asked() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = &RuntimeDir::at(tmp.path()).expect("runtime dir");
        let (first, none) =
            lock_cpus(dir, None, &[0, 1], false, "sandglass noise -c 0-1").expect("first");
        assert!(none.is_empty());
        let e = lock_cpus(dir, None, &[1, 2], false, "sandglass timer").expect_err("busy");
        let text = e.to_string();
        assert!(
            text.contains(&format!(
                "CPU 1 by pid {} (sandglass noise -c 0-1)",
                std::process::id()
            )),
            "{text}"
        );
        assert!(!text.contains("CPU 2"), "{text}");
        let (_second, shared) =
            lock_cpus(dir, None, &[1, 2], true, "sandglass timer").expect("shared");
        assert_eq!(shared.len(), 1);
        assert_eq!(shared[0].cpu, 1);
        drop(first);
        let (_third, none) = lock_cpus(dir, None, &[0], false, "x").expect("released");
        assert!(none.is_empty());
    }

    #[test]
    fn a_holder_that_has_not_written_its_name_yet_is_waited_for() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = &RuntimeDir::at(tmp.path()).expect("runtime dir");
        let path = dir.path().join("cpu3.lock");
        // A lock taken by a run that has not yet written its name, holding a previous run's.
        std::fs::write(&path, "999999999\nsandglass timer -c 3\n").expect("write");
        let file = File::open(&path).expect("open");
        assert!(sandglass_sys::process::try_lock_exclusive(&file).expect("flock"));
        let e = lock_cpus(dir, None, &[3], false, "x").expect_err("busy");
        assert!(
            e.to_string()
                .contains("CPU 3 by a sandglass that is starting"),
            "{e}"
        );
        // It writes its name while the refused run is reading.
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let text = format!("{}\nsandglass noise -c 3\n", std::process::id());
                std::fs::write(&path, text).expect("write");
            })
        };
        let e = lock_cpus(dir, None, &[3], false, "x").expect_err("busy");
        writer.join().expect("writer");
        let text = e.to_string();
        assert!(
            text.contains(&format!(
                "CPU 3 by pid {} (sandglass noise -c 3)",
                std::process::id()
            )),
            "{text}"
        );
    }

    #[test]
    fn root_locks_are_found_in_the_kernels_table_by_inode() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = &RuntimeDir::at(tmp.path()).expect("runtime dir");
        let (held, _) = lock_cpus(dir, None, &[1], false, "sandglass timer -c 1").expect("lock");
        let m = tmp.path().join("cpu1.lock").metadata().expect("stat");
        let locks = std::fs::read_to_string("/proc/locks").expect("/proc/locks");
        let me = sandglass_sys::process::euid();
        let found = root_holders(tmp.path(), &[0, 1], &locks, me);
        assert_eq!(found.len(), 1, "{found:?} in {locks}");
        assert_eq!(found[0].cpu, 1);
        assert_eq!(found[0].pid, Some(std::process::id() as i32));
        assert!(found[0].root);
        assert!(
            found[0].to_string().starts_with("CPU 1 by root's pid "),
            "{}",
            found[0]
        );
        // The same line, written by hand: device numbers in hex.
        let line = format!(
            "7: FLOCK  ADVISORY  WRITE 4242 {:02x}:{:02x}:{} 0 EOF\n",
            major(m.dev()),
            minor(m.dev()),
            m.ino()
        );
        let found = root_holders(tmp.path(), &[1], &line, me);
        assert_eq!(found[0].pid, Some(4242));
        // A lock file of another owner is not root's.
        assert!(root_holders(tmp.path(), &[1], &line, me + 1).is_empty());
        drop(held);
        let locks = std::fs::read_to_string("/proc/locks").expect("/proc/locks");
        assert!(root_holders(tmp.path(), &[1], &locks, me).is_empty());
    }
}
