//! Whether this process may write a path, and opening a file that must be a regular file
//! without following a link or blocking on a FIFO.

use crate::errno::Errno;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Checks that this process, with its effective user and group ids, may write `path`
/// (`faccessat(2)` with `AT_EACCESS`): `EROFS` on a read-only file system, `EACCES` when the
/// permissions deny it, `ENOENT` when it does not exist. Root is refused only by `EROFS`.
pub fn may_write(path: &Path) -> Result<(), Errno> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call; nothing is written.
    let r = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) };
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// `EROFS`: a read-only file system.
pub const EROFS: Errno = Errno(libc::EROFS);

/// Opens `path` for reading with `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC` and checks that what
/// it opened is a regular file: a symbolic link at the end of the path, a FIFO or a device is
/// refused (`ELOOP` or `InvalidInput`) instead of followed or waited on.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_link_or_a_fifo_is_not_opened_as_a_file() {
        let dir = std::env::temp_dir().join(format!("sandglass-fsaccess-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(open_regular(&file).is_ok());
        std::os::unix::fs::symlink(&file, dir.join("link")).unwrap();
        assert!(open_regular(&dir.join("link")).is_err());
        let fifo = CString::new(dir.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(open_regular(&dir.join("fifo")).is_err());
        assert!(open_regular(Path::new("/dev/zero")).is_err());
        assert!(may_write(&dir).is_ok());
        assert_eq!(may_write(&dir.join("missing")), Err(Errno::ENOENT));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
