//! Bounded reads of input files: every file sandglass reads as input (a run directory's
//! manifest and JSON files, study, task, workload and configuration files, histograms, imports)
//! goes through this module, so that no file can hang a command or exhaust its memory.
//!
//! A file is opened with `O_NONBLOCK | O_CLOEXEC` (and `O_NOFOLLOW` when it lies inside a run
//! directory, where nobody but sandglass writes links), checked with `fstat(2)` to be a regular
//! file, refused above a size limit, and read for at most one byte more than the limit (so a
//! file that grows while it is read is still refused). A FIFO opened with `O_NONBLOCK` for
//! reading returns at once whether or not anyone writes it (`fifo(7)`), and a device is refused
//! before a byte of it is read. `docs/robustness.md` ("Input data") lists the limits.

use std::fs::{File, Metadata};
use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The largest `manifest.json` read: 64 MiB (a manifest lists every file of its run, a few
/// hundred bytes each, and a long run has thousands of segments).
pub const MANIFEST_BYTES: u64 = 64 << 20;
/// The largest other JSON or TOML file of a run directory (summary.json, loads.json): 64 MiB.
/// Every file of a run is also read for at most the size its manifest records; tables are
/// streamed, never read whole.
pub const RUN_FILE_BYTES: u64 = 64 << 20;
/// The largest study, task, workload or configuration file: 1 MiB.
pub const INPUT_BYTES: u64 = 1 << 20;
/// The largest data file (histogram, numbers, imported measurement): 64 MiB.
pub const DATA_BYTES: u64 = 64 << 20;
/// The largest row-group journal of a segment read when a killed run is recovered: 256 MiB
/// (30,000 row groups of a few kilobytes of metadata each).
pub const JOURNAL_BYTES: u64 = 256 << 20;
/// The most entries (lines) a histogram may have: 1,000,000.
pub const HISTOGRAM_ENTRIES: usize = 1_000_000;
/// The most cells a study matrix may have: 10,000.
pub const STUDY_CELLS: u64 = 10_000;
/// The most tasks a task set may have: 4,096.
pub const TASKS: usize = 4_096;

/// Whether a symbolic link at the path itself is followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// Follow it (a file the user named on the command line).
    Follow,
    /// Refuse it (a file inside a run directory, which sandglass wrote without links).
    Refuse,
}

/// Why a file was not read.
#[derive(Debug, Error)]
pub enum BoundedError {
    #[error("{path}: no such file")]
    NotFound { path: PathBuf },
    #[error("{path}: permission denied ({source}); run as a user who may read it, or fix its permissions")]
    Permission {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: is {what}, not a regular file; sandglass reads only regular files here: put a regular file there")]
    NotRegular { path: PathBuf, what: &'static str },
    #[error(
        "{path}: {size} bytes, above the limit of {limit} bytes for {role}; give a smaller file"
    )]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
        role: &'static str,
    },
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl BoundedError {
    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            BoundedError::NotFound { path }
            | BoundedError::Permission { path, .. }
            | BoundedError::NotRegular { path, .. }
            | BoundedError::TooLarge { path, .. }
            | BoundedError::Io { path, .. } => path,
        }
    }
}

/// What a file type is called in messages.
fn describe(meta: &Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if meta.file_type().is_symlink() {
        "a symbolic link"
    } else if meta.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

fn io_error(path: &Path, source: std::io::Error) -> BoundedError {
    let path = path.to_path_buf();
    match source.kind() {
        std::io::ErrorKind::NotFound => BoundedError::NotFound { path },
        std::io::ErrorKind::PermissionDenied => BoundedError::Permission { path, source },
        _ => BoundedError::Io { path, source },
    }
}

/// Opens `path` without blocking and checks that it is a regular file; returns it with its
/// metadata. Nothing is read.
pub fn open(path: &Path, links: Links) -> Result<(File, Metadata), BoundedError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
        if links == Links::Refuse {
            flags |= libc::O_NOFOLLOW;
        }
        options.custom_flags(flags);
    }
    let file = match options.open(path) {
        Ok(f) => f,
        Err(e) => {
            // O_NOFOLLOW on a link fails with ELOOP: say what is there.
            if links == Links::Refuse {
                if let Ok(m) = std::fs::symlink_metadata(path) {
                    if m.file_type().is_symlink() {
                        return Err(BoundedError::NotRegular {
                            path: path.to_path_buf(),
                            what: "a symbolic link",
                        });
                    }
                }
            }
            if e.raw_os_error() == Some(libc::ENXIO) {
                // A socket, or a FIFO opened for writing with no reader.
                if let Ok(m) = std::fs::metadata(path) {
                    return Err(BoundedError::NotRegular {
                        path: path.to_path_buf(),
                        what: describe(&m),
                    });
                }
            }
            return Err(io_error(path, e));
        }
    };
    let meta = file.metadata().map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(BoundedError::NotRegular {
            path: path.to_path_buf(),
            what: describe(&meta),
        });
    }
    Ok((file, meta))
}

/// Opens `path` as [`open`] does and refuses it above `limit` bytes; `role` names what the file
/// is for in the message (`"a manifest"`).
pub fn open_limited(
    path: &Path,
    links: Links,
    limit: u64,
    role: &'static str,
) -> Result<(File, Metadata), BoundedError> {
    let (file, meta) = open(path, links)?;
    if meta.len() > limit {
        return Err(BoundedError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            limit,
            role,
        });
    }
    Ok((file, meta))
}

/// Reads a regular file of at most `limit` bytes.
pub fn read(
    path: &Path,
    links: Links,
    limit: u64,
    role: &'static str,
) -> Result<Vec<u8>, BoundedError> {
    let (file, meta) = open_limited(path, links, limit, role)?;
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut data)
        .map_err(|e| io_error(path, e))?;
    if data.len() as u64 > limit {
        return Err(BoundedError::TooLarge {
            path: path.to_path_buf(),
            size: data.len() as u64,
            limit,
            role,
        });
    }
    Ok(data)
}

/// [`read`] as UTF-8 text.
pub fn read_to_string(
    path: &Path,
    links: Links,
    limit: u64,
    role: &'static str,
) -> Result<String, BoundedError> {
    let data = read(path, links, limit, role)?;
    String::from_utf8(data).map_err(|_| BoundedError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"),
    })
}

/// A user's input file (study, task, workload, configuration): a regular file of at most
/// [`INPUT_BYTES`], links followed.
pub fn read_input(path: &Path, role: &'static str) -> Result<String, BoundedError> {
    read_to_string(path, Links::Follow, INPUT_BYTES, role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_within_the_limit_is_read() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("a.toml");
        std::fs::write(&p, "x = 1\n").expect("write");
        assert_eq!(read_input(&p, "a study file").expect("read"), "x = 1\n");
    }

    #[test]
    fn a_file_above_the_limit_is_refused_by_its_size() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("big");
        std::fs::write(&p, vec![b'x'; 11]).expect("write");
        let e = read(&p, Links::Follow, 10, "a test file").unwrap_err();
        assert!(matches!(e, BoundedError::TooLarge { size: 11, .. }), "{e}");
        assert!(read(&p, Links::Follow, 11, "a test file").is_ok());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn devices_directories_and_links_are_named() {
        let e = read_input(Path::new("/dev/zero"), "a study file").unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let e = read_input(Path::new("/"), "a study file").unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let dir = tempfile::tempdir().expect("tmp");
        let link = dir.path().join("manifest.json");
        std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
        let e = read(&link, Links::Refuse, MANIFEST_BYTES, "a manifest").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = read(&link, Links::Follow, MANIFEST_BYTES, "a manifest").unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
    }

    #[test]
    fn a_missing_file_is_not_found() {
        let e = read_input(Path::new("/nonexistent/x.toml"), "a study file").unwrap_err();
        assert!(matches!(e, BoundedError::NotFound { .. }), "{e}");
    }
}
