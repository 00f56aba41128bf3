//! A typed kernel error number.

use std::fmt;

/// An error number returned by a system call, such as `EPERM` or `EBUSY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const EINTR: Errno = Errno(libc::EINTR);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const ENODEV: Errno = Errno(libc::ENODEV);

    /// The error number the calling thread's last failed C library call left in `errno`.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// The symbolic name, such as `"EPERM"`, for the numbers sandglass reports; `"E<n>"` otherwise.
    pub fn name(self) -> String {
        let known = match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::ESRCH => "ESRCH",
            libc::EINTR => "EINTR",
            libc::EIO => "EIO",
            libc::EBADF => "EBADF",
            libc::EAGAIN => "EAGAIN",
            libc::ENOMEM => "ENOMEM",
            libc::EACCES => "EACCES",
            libc::EFAULT => "EFAULT",
            libc::EBUSY => "EBUSY",
            libc::ENODEV => "ENODEV",
            libc::EINVAL => "EINVAL",
            libc::ENOTTY => "ENOTTY",
            libc::ENOSPC => "ENOSPC",
            libc::ERANGE => "ERANGE",
            libc::ENOSYS => "ENOSYS",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            _ => return format!("E{}", self.0),
        };
        known.to_string()
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = std::io::Error::from_raw_os_error(self.0).to_string();
        // std appends " (os error N)"; keep the kernel's words and the symbolic name.
        let text = text.split(" (os error").next().unwrap_or(&text).to_string();
        write!(f, "{} ({})", self.name(), text)
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

/// Turns a C-style return value (`-1` means failure, the cause in `errno`) into a `Result`.
pub(crate) fn check(ret: libc::c_int) -> Result<libc::c_int, Errno> {
    if ret == -1 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_display() {
        assert_eq!(Errno::EPERM.name(), "EPERM");
        assert_eq!(Errno(9999).name(), "E9999");
        let shown = Errno::EBUSY.to_string();
        assert!(shown.starts_with("EBUSY ("), "{shown}");
        assert!(!shown.contains("os error"), "{shown}");
    }
}
