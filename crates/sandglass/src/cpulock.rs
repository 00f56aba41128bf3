//! One measurement per CPU: a run holds an advisory lock per measured CPU, so that two
//! sandglass processes never measure the same CPU without knowing it (each would report the
//! other as noise).
//!
//! The lock is `flock(2)` on `cpuN.lock` in the runtime directory
//! ([`crate::contain::runtime_dir`]); the holder writes its pid and command line into the file.
//! The kernel releases a `flock` when the last descriptor of the open file closes, so a run
//! killed with SIGKILL never leaves a stale lock. A run that finds a CPU locked is refused with
//! the holder's pid and command, unless it was asked to share CPUs; then it measures, keeps the
//! locks of the CPUs that were free, and reports whom it shared with.
//!
//! A long-running monitor that should yield its CPUs to an explicit run can poll the same
//! files: the lock is per CPU, so it can release one CPU, wait for it, and take it back.

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
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "CPU {} by pid {pid} ({})", self.cpu, self.command),
            None => write!(f, "CPU {} by a sandglass that is starting", self.cpu),
        }
    }
}

/// Why CPUs could not be locked.
#[derive(Debug, Error)]
pub enum CpuLockError {
    #[error("another sandglass is measuring {}: wait for it to end, measure other CPUs (-c), or pass --shared-cpus to measure anyway (each run then counts the other as noise)", list(.0))]
    Busy(Vec<Holder>),
    #[error("{}: cannot lock it: {reason}; set SANDGLASS_RUNTIME_DIR to a writable directory", .path.display())]
    File { path: PathBuf, reason: String },
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
/// holders instead of refusing the run.
pub fn acquire_in(
    dir: &Path,
    cpus: &[usize],
    shared: bool,
    command: &str,
) -> Result<(CpuLocks, Vec<Holder>), CpuLockError> {
    let mut held = Vec::new();
    let mut busy = Vec::new();
    for &cpu in cpus {
        let path = dir.join(format!("cpu{cpu}.lock"));
        let err = |reason: String| CpuLockError::File {
            path: path.clone(),
            reason,
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| err(e.to_string()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = file.set_permissions(std::fs::Permissions::from_mode(0o666));
        }
        match sandglass_sys::process::try_lock_exclusive(&file) {
            Ok(true) => {
                let text = format!("{}\n{command}\n", std::process::id());
                let _ = file.seek(SeekFrom::Start(0));
                let _ = file.write_all(text.as_bytes());
                let _ = file.set_len(text.len() as u64);
                held.push(file);
            }
            Ok(false) => busy.push(holder_of(&mut file, cpu)),
            Err(e) => return Err(err(e.to_string())),
        }
    }
    if !busy.is_empty() && !shared {
        return Err(CpuLockError::Busy(busy));
    }
    Ok((CpuLocks { _held: held }, busy))
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
    let dir = crate::contain::runtime_dir();
    if !crate::contain::usable_dir(&dir, true) {
        return Err(CpuLockError::File {
            path: dir,
            reason: "not a writable directory".into(),
        });
    }
    acquire_in(&dir, cpus, shared, command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_cpu_is_refused_with_its_holder_or_shared_when_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (first, none) =
            acquire_in(dir.path(), &[0, 1], false, "sandglass noise -c 0-1").expect("first");
        assert!(none.is_empty());
        let e = acquire_in(dir.path(), &[1, 2], false, "sandglass timer").expect_err("busy");
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
            acquire_in(dir.path(), &[1, 2], true, "sandglass timer").expect("shared");
        assert_eq!(shared.len(), 1);
        assert_eq!(shared[0].cpu, 1);
        drop(first);
        let (_third, none) = acquire_in(dir.path(), &[0], false, "x").expect("released");
        assert!(none.is_empty());
    }

    #[test]
    fn a_holder_that_has_not_written_its_name_yet_is_waited_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cpu3.lock");
        // A lock taken by a run that has not yet written its name, holding a previous run's.
        std::fs::write(&path, "999999999\nsandglass timer -c 3\n").expect("write");
        let file = File::open(&path).expect("open");
        assert!(sandglass_sys::process::try_lock_exclusive(&file).expect("flock"));
        let e = acquire_in(dir.path(), &[3], false, "x").expect_err("busy");
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
        let e = acquire_in(dir.path(), &[3], false, "x").expect_err("busy");
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
}
