//! Memory locking. A page fault inside a measurement loop shows up as a gap that the kernel, not
//! the measured system, caused; Hourglass (§3.1) locks the process into memory with `mlockall`
//! and touches every page of its buffers where that is not permitted.

use crate::errno::{check, Errno};

/// Locks every current and future page of the process into RAM (`mlockall(MCL_CURRENT |
/// MCL_FUTURE)`).
///
/// Call it only when the lock cannot later make an allocation fail: as root or with
/// CAP_IPC_LOCK, or with an unlimited RLIMIT_MEMLOCK. Under a finite limit, MCL_FUTURE turns a
/// later allocation beyond the limit into an out-of-memory abort.
pub fn lock_all() -> Result<(), Errno> {
    // SAFETY: plain flag arguments.
    check(unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) }).map(|_| ())
}

/// Undoes [`lock_all`].
pub fn unlock_all() -> Result<(), Errno> {
    // SAFETY: no arguments.
    check(unsafe { libc::munlockall() }).map(|_| ())
}

/// The size of a memory page in bytes.
pub fn page_size() -> usize {
    // SAFETY: sysconf with a valid name has no side effects.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_size_is_a_power_of_two() {
        let p = page_size();
        assert!(p >= 4096 && p.is_power_of_two());
    }
}
