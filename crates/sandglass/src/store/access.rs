//! Who may write a store (a runs directory and its catalog): root writes only into what root
//! owns, anyone only where the file system and the permissions allow. The run directories and
//! the catalog both ask this before they write.

#[cfg(feature = "linux")]
use std::os::unix::fs::MetadataExt;
#[cfg(feature = "linux")]
use std::path::Path;

/// The catalog's file in a runs directory.
pub const CATALOG_FILE: &str = "catalog.sqlite";

/// Why a store (a runs directory and its catalog) is only read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOnly {
    /// The file system holding it is mounted read-only (`EROFS`).
    FileSystem,
    /// Root does not write into a directory another user owns (they could have planted it).
    Owner { uid: u32 },
    /// Its permissions do not let this user write it.
    Permission { owner: u32, me: u32 },
}

impl std::fmt::Display for ReadOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadOnly::FileSystem => write!(f, "it is on a read-only file system"),
            ReadOnly::Owner { uid } => write!(f, "it is owned by uid {uid}, not by root"),
            ReadOnly::Permission { owner, me } => write!(
                f,
                "it is owned by uid {owner} and not writable by this user (uid {me})"
            ),
        }
    }
}

impl ReadOnly {
    /// What to do to write there.
    pub fn fix(&self) -> String {
        match self {
            ReadOnly::FileSystem => "remount it read-write, or set SANDGLASS_RUNS_DIR to a writable directory".into(),
            ReadOnly::Owner { uid } => format!(
                "run this as uid {uid}, or set SANDGLASS_RUNS_DIR to a directory root owns (root never writes into another user's directory)"
            ),
            ReadOnly::Permission { owner, .. } => format!(
                "run this as uid {owner}, or set SANDGLASS_RUNS_DIR to a directory you may write"
            ),
        }
    }
}

/// Whether this process may write the store `base` (its runs directory and catalog): root
/// writes only into a directory (and a catalog) that root owns, anyone only where the file
/// system and the permissions allow. A store that does not exist yet can be created.
#[cfg(feature = "linux")]
pub fn write_access(base: &Path) -> Result<(), ReadOnly> {
    let me = sandglass_sys::process::euid();
    let Ok(link) = std::fs::symlink_metadata(base) else {
        return Ok(());
    };
    // A link to the store: root follows only one root made.
    if me == 0 && link.uid() != 0 {
        return Err(ReadOnly::Owner { uid: link.uid() });
    }
    let Ok(meta) = std::fs::metadata(base) else {
        return Ok(());
    };
    if me == 0 && meta.uid() != 0 {
        return Err(ReadOnly::Owner { uid: meta.uid() });
    }
    let file = base.join(CATALOG_FILE);
    let file_meta = std::fs::symlink_metadata(&file).ok();
    if let Some(m) = &file_meta {
        if me == 0 && m.uid() != 0 {
            return Err(ReadOnly::Owner { uid: m.uid() });
        }
    }
    let denied = |owner: u32, e: sandglass_sys::Errno| {
        if e == sandglass_sys::fsaccess::EROFS {
            Some(ReadOnly::FileSystem)
        } else if e == sandglass_sys::Errno::EACCES || e == sandglass_sys::Errno::EPERM {
            Some(ReadOnly::Permission { owner, me })
        } else {
            None
        }
    };
    if let Err(e) = sandglass_sys::fsaccess::may_write(base) {
        if let Some(r) = denied(meta.uid(), e) {
            return Err(r);
        }
    }
    if let Some(m) = file_meta {
        if let Err(e) = sandglass_sys::fsaccess::may_write(&file) {
            if let Some(r) = denied(m.uid(), e) {
                return Err(r);
            }
        }
    }
    Ok(())
}
