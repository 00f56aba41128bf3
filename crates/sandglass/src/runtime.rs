//! The runtime directory: where sandglass keeps what lives only as long as its runs (the CPU
//! locks, the state files of external loads, the record of a tracefs mount it made).
//!
//! Its privilege model (docs/robustness.md, "Running as root"):
//!
//! - **Root** uses `/run/sandglass` (or `$TMPDIR/sandglass-0` where `/run` cannot be used),
//!   owned by root, mode 0755: every user may read the directory, nobody else may create,
//!   rename or remove anything in it.
//! - **Any other user** uses a directory of its own, `$XDG_RUNTIME_DIR/sandglass`, else
//!   `$TMPDIR/sandglass-UID`, mode 0700.
//! - `SANDGLASS_RUNTIME_DIR` names another; it is held to the same rules.
//!
//! A directory found with another owner, writable by group or others, or as a symbolic link is
//! refused with one line naming it and the fix, never used or repaired: a directory another
//! user could write is one where that user could plant a link for sandglass to follow. Files in
//! it are opened without following links (`O_NOFOLLOW`), created with mode 0600, and checked
//! with `fstat` to be regular files of this user with one link before they are read, locked or
//! written.
//!
//! An unprivileged run and a root run on the same CPU learn of each other without either being
//! able to forge or block the other: the unprivileged run finds root's lock on the CPU in the
//! kernel's table of locks (`/proc/locks`, by the lock file's device and inode, which it can
//! `stat` in the 0755 directory but not open) and refuses the CPU; root never reads what an
//! unprivileged user wrote. See [`crate::cpulock`].

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The environment variable that moves the runtime directory (tests, containers).
pub const RUNTIME_DIR_ENV: &str = "SANDGLASS_RUNTIME_DIR";

/// Root's runtime directory.
pub const ROOT_DIR: &str = "/run/sandglass";

/// The largest state or lock file read back: they hold a few lines.
const MAX_READ: u64 = 64 * 1024;

/// Why the runtime directory, or a file in it, cannot be used.
#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error("{}: {what}: {fix}", .path.display())]
    Unsafe {
        path: PathBuf,
        what: String,
        fix: String,
    },
    #[error("{}: {source}; set {RUNTIME_DIR_ENV} to a directory only you can write", .path.display())]
    Io { path: PathBuf, source: io::Error },
}

impl RuntimeError {
    fn io(path: &Path, source: io::Error) -> RuntimeError {
        RuntimeError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A checked runtime directory (or one of its subdirectories).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeDir {
    path: PathBuf,
    uid: u32,
}

/// The directory this process uses, created and checked (see the module's text).
pub fn dir() -> Result<RuntimeDir, RuntimeError> {
    let uid = sandglass_sys::process::euid();
    if let Some(d) = std::env::var_os(RUNTIME_DIR_ENV).filter(|d| !d.is_empty()) {
        return RuntimeDir::open(Path::new(&d), uid, true);
    }
    let fallback = std::env::temp_dir().join(format!("sandglass-{uid}"));
    if uid == 0 {
        if Path::new("/run").is_dir() {
            if let Ok(d) = RuntimeDir::open(Path::new(ROOT_DIR), uid, false) {
                return Ok(d);
            }
            // A /run/sandglass of the wrong owner or mode is refused, not passed over: a
            // fallback would hide from unprivileged runs the CPUs root measures.
            if Path::new(ROOT_DIR).symlink_metadata().is_ok() {
                return RuntimeDir::open(Path::new(ROOT_DIR), uid, false);
            }
        }
        return RuntimeDir::open(&fallback, uid, false);
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        let x = PathBuf::from(x);
        if x.symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == uid)
        {
            return RuntimeDir::open(&x.join("sandglass"), uid, false);
        }
    }
    RuntimeDir::open(&fallback, uid, false)
}

/// Root's runtime directory as an unprivileged process sees it, when root has made one: where
/// root's CPU locks are.
pub fn root_dir() -> Option<PathBuf> {
    let m = Path::new(ROOT_DIR).symlink_metadata().ok()?;
    (m.is_dir() && m.uid() == 0 && m.mode() & 0o022 == 0).then(|| PathBuf::from(ROOT_DIR))
}

/// The mode a runtime directory of `uid` is made with: root's can be read by all (its locks
/// are found by their inode), a user's by that user alone.
fn dir_mode(uid: u32) -> u32 {
    if uid == 0 {
        0o755
    } else {
        0o700
    }
}

impl RuntimeDir {
    /// Creates `path` if it does not exist (parents with `create_dir_all`, the directory itself
    /// with this user's mode) and checks it: a directory, not a link, owned by `uid`, writable
    /// by nobody else.
    fn open(path: &Path, uid: u32, parents: bool) -> Result<RuntimeDir, RuntimeError> {
        if path.symlink_metadata().is_err() {
            if parents {
                if let Some(p) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(p).map_err(|e| RuntimeError::io(p, e))?;
                }
            }
            match std::fs::DirBuilder::new().mode(dir_mode(uid)).create(path) {
                Ok(()) => {
                    // The umask may have taken bits away: give the directory exactly its mode.
                    let _ = std::fs::set_permissions(
                        path,
                        std::fs::Permissions::from_mode(dir_mode(uid)),
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(RuntimeError::io(path, e)),
            }
        }
        let m = path
            .symlink_metadata()
            .map_err(|e| RuntimeError::io(path, e))?;
        let refuse = |what: String| {
            RuntimeError::Unsafe {
            path: path.to_path_buf(),
            what,
            fix: format!(
                "remove it (sandglass makes its own anew, owned by uid {uid} and writable by it alone) or set {RUNTIME_DIR_ENV} to a directory only you can write"
            ),
        }
        };
        if m.file_type().is_symlink() {
            return Err(refuse("is a symbolic link".into()));
        }
        if !m.is_dir() {
            return Err(refuse("is not a directory".into()));
        }
        if m.uid() != uid {
            return Err(refuse(format!(
                "is owned by uid {}, not by uid {uid}",
                m.uid()
            )));
        }
        if m.mode() & 0o022 != 0 {
            return Err(refuse(format!(
                "has mode {:o}: other users could write into it",
                m.mode() & 0o7777
            )));
        }
        Ok(RuntimeDir {
            path: path.to_path_buf(),
            uid,
        })
    }

    /// An existing directory (or one made without its parents), checked as [`dir`] checks its
    /// own: tests and callers that choose the place themselves.
    pub fn at(path: &Path) -> Result<RuntimeDir, RuntimeError> {
        RuntimeDir::open(path, sandglass_sys::process::euid(), false)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A subdirectory (`loads`), created and checked as the directory itself.
    pub fn subdir(&self, name: &str) -> Result<RuntimeDir, RuntimeError> {
        RuntimeDir::open(&self.path.join(name), self.uid, false)
    }

    /// Opens `name` for reading and writing, creating it (mode 0600) when `create`, without
    /// following a link, and checks that it is a regular file of this user with one link.
    pub fn open_file(&self, name: &str, create: bool) -> Result<File, RuntimeError> {
        let path = self.path.join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .mode(0o600)
            .custom_flags(sandglass_sys::process::O_NOFOLLOW | sandglass_sys::process::O_NONBLOCK)
            .open(&path)
            .map_err(|e| {
                if e.raw_os_error() == Some(sandglass_sys::process::ELOOP) {
                    RuntimeError::Unsafe {
                        path: path.clone(),
                        what: "is a symbolic link".into(),
                        fix: "remove it: sandglass never follows a link in its runtime directory"
                            .into(),
                    }
                } else {
                    RuntimeError::io(&path, e)
                }
            })?;
        self.check_file(&path, &file)?;
        Ok(file)
    }

    /// Reads `name` (at most 64 KiB), refusing what [`RuntimeDir::open_file`] refuses; `None`
    /// when it does not exist.
    pub fn read(&self, name: &str) -> Result<Option<String>, RuntimeError> {
        use crate::bounded::{self, BoundedError, Links};
        let path = self.path.join(name);
        let (file, _) =
            match bounded::open_limited(&path, Links::Refuse, MAX_READ, "a runtime record") {
                Ok(f) => f,
                Err(BoundedError::NotFound { .. }) => return Ok(None),
                Err(BoundedError::NotRegular { what, .. }) => {
                    return Err(RuntimeError::Unsafe {
                        path: path.clone(),
                        what: format!("is {what}, not a regular file"),
                        fix: "remove it: sandglass writes its own anew".into(),
                    })
                }
                Err(e) => {
                    return Err(RuntimeError::Unsafe {
                        path: path.clone(),
                        what: e.to_string(),
                        fix: "remove it: sandglass writes its own anew".into(),
                    })
                }
            };
        self.check_file(&path, &file)?;
        let mut text = String::new();
        file.take(MAX_READ)
            .read_to_string(&mut text)
            .map_err(|e| RuntimeError::io(&path, e))?;
        Ok(Some(text))
    }

    /// Writes `name` whole: a new file beside it (created exclusively), then renamed over it.
    pub fn write(&self, name: &str, text: &str) -> Result<(), RuntimeError> {
        use std::io::Write;
        let tmp = self.path.join(format!("{name}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(sandglass_sys::process::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| RuntimeError::io(&tmp, e))?;
        f.write_all(text.as_bytes())
            .map_err(|e| RuntimeError::io(&tmp, e))?;
        std::fs::rename(&tmp, self.path.join(name)).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            RuntimeError::io(&self.path.join(name), e)
        })
    }

    /// Removes `name` (a file this process wrote); a missing file is not an error.
    pub fn remove(&self, name: &str) {
        let _ = std::fs::remove_file(self.path.join(name));
    }

    /// The names of the files in the directory.
    pub fn names(&self) -> Vec<String> {
        std::fs::read_dir(&self.path)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn check_file(&self, path: &Path, file: &File) -> Result<(), RuntimeError> {
        let m = file.metadata().map_err(|e| RuntimeError::io(path, e))?;
        let refuse = |what: String| RuntimeError::Unsafe {
            path: path.to_path_buf(),
            what,
            fix: "remove it: sandglass writes its own anew".into(),
        };
        if !m.is_file() {
            return Err(refuse("is not a regular file".into()));
        }
        if m.uid() != self.uid {
            return Err(refuse(format!(
                "is owned by uid {}, not by uid {}",
                m.uid(),
                self.uid
            )));
        }
        if m.nlink() != 1 {
            return Err(refuse(format!(
                "has {} hard links: another name of it could be someone else's file",
                m.nlink()
            )));
        }
        if m.mode() & 0o022 != 0 {
            return Err(refuse(format!(
                "has mode {:o}: other users could write it",
                m.mode() & 0o7777
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        p.symlink_metadata().expect("stat").mode() & 0o7777
    }

    #[test]
    fn a_new_directory_gets_this_users_mode_and_files_are_private() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let uid = sandglass_sys::process::euid();
        let d = RuntimeDir::open(&tmp.path().join("a/b/rt"), uid, true).expect("open");
        assert_eq!(mode(d.path()), dir_mode(uid));
        drop(d.open_file("cpu0.lock", true).expect("create"));
        assert_eq!(mode(&d.path().join("cpu0.lock")), 0o600);
        d.write("x.state", "owner 1 2\n").expect("write");
        assert_eq!(
            d.read("x.state").expect("read").as_deref(),
            Some("owner 1 2\n")
        );
        assert_eq!(d.read("missing").expect("read"), None);
        let loads = d.subdir("loads").expect("subdir");
        assert_eq!(mode(loads.path()), dir_mode(uid));
    }

    #[test]
    fn directories_others_could_write_and_links_are_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let uid = sandglass_sys::process::euid();
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        let e = RuntimeDir::open(&shared, uid, false).expect_err("1777");
        let text = e.to_string();
        assert!(text.contains("has mode 1777"), "{text}");
        assert!(text.contains("remove it"), "{text}");
        // Left as it was found: never repaired.
        assert_eq!(mode(&shared), 0o1777);
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path(), &link).expect("symlink");
        let e = RuntimeDir::open(&link, uid, false).expect_err("link");
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
    }

    #[test]
    fn planted_links_fifos_and_hard_links_in_it_are_refused_and_left_alone() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let uid = sandglass_sys::process::euid();
        let d = RuntimeDir::open(&tmp.path().join("rt"), uid, false).expect("open");
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "PRECIOUS\n").expect("write");
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::os::unix::fs::symlink(&victim, d.path().join("cpu0.lock")).expect("symlink");
        let e = d.open_file("cpu0.lock", true).expect_err("link");
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        std::fs::hard_link(&victim, d.path().join("cpu1.lock")).expect("link");
        let e = d.open_file("cpu1.lock", true).expect_err("hard link");
        assert!(e.to_string().contains("2 hard links"), "{e}");
        let fifo = d.path().join("cpu2.lock");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success());
        let e = d.read("cpu2.lock").expect_err("fifo");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&victim).expect("read"),
            "PRECIOUS\n"
        );
        assert_eq!(mode(&victim), 0o600);
    }
}
