//! Whether this process may write a path.

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_writable_directory_and_a_missing_path_are_told_apart() {
        let dir = std::env::temp_dir().join(format!("sandglass-fsaccess-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        assert!(may_write(&dir).is_ok());
        assert_eq!(may_write(&dir.join("missing")), Err(Errno::ENOENT));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
