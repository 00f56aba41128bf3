//! The terminal a live display runs in: whether a descriptor is one, and its input read with a
//! timeout, so that a terminal that went away (its window closed, the master side of a
//! pseudo-terminal closed: `poll(2)` gives `POLLHUP`, `read(2)` gives `EIO` or end of file) is
//! seen at once instead of being read again and again.

use crate::errno::Errno;
use std::os::fd::RawFd;

/// What waiting for a terminal's input found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Nothing to read before the timeout.
    Nothing,
    /// Input is waiting: [`read`] will not block.
    Ready,
    /// The terminal hung up, or the descriptor is closed or in error.
    HungUp,
}

/// True when `fd` is a terminal (`isatty(3)`).
pub fn is_terminal(fd: RawFd) -> bool {
    // SAFETY: isatty only inspects the descriptor number; any value is allowed.
    unsafe { libc::isatty(fd) == 1 }
}

/// Waits up to `timeout_ms` for input on `fd` (`poll(2)`). An interrupted wait (a signal) is
/// [`Input::Nothing`].
pub fn wait_input(fd: RawFd, timeout_ms: i32) -> Input {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid, initialised pollfd, and its count.
    let ret = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if ret <= 0 {
        return Input::Nothing;
    }
    if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        Input::HungUp
    } else if p.revents & libc::POLLIN != 0 {
        Input::Ready
    } else {
        Input::Nothing
    }
}

/// Reads what is waiting on `fd` into `buf` (`read(2)`); `Ok(0)` is the end of file.
pub fn read(fd: RawFd, buf: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(Errno::last())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_closed_writer_is_a_hang_up_and_a_pipe_is_no_terminal() {
        let (r, w) = std::io::pipe().expect("pipe");
        assert!(!is_terminal(r.as_raw_fd()));
        assert_eq!(wait_input(r.as_raw_fd(), 0), Input::Nothing);
        drop(w);
        assert_eq!(wait_input(r.as_raw_fd(), 1_000), Input::HungUp);
        let mut buf = [0u8; 8];
        assert_eq!(read(r.as_raw_fd(), &mut buf), Ok(0));
    }
}
