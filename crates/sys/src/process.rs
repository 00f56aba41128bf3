//! Facts about the process and the machine that need a system call: identity, resource limits,
//! timer slack, terminals, `uname`.

use crate::errno::{check, Errno};

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: no arguments; cannot fail.
    unsafe { libc::geteuid() }
}

/// The process id.
pub fn pid() -> i32 {
    // SAFETY: no arguments; cannot fail.
    unsafe { libc::getpid() }
}

/// The resource limits sandglass consults before it asks for a privilege.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// RLIMIT_RTPRIO: the highest SCHED_FIFO/RR priority an unprivileged thread may take.
    RtPrio,
    /// RLIMIT_MEMLOCK: bytes of memory an unprivileged process may lock.
    MemLock,
    /// RLIMIT_NICE: 20 minus the lowest nice value an unprivileged thread may take.
    Nice,
    /// RLIMIT_RTTIME: microseconds of CPU a real-time thread may use without blocking.
    RtTime,
}

/// A soft and hard limit; `None` means unlimited (RLIM_INFINITY).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Reads a resource limit (`getrlimit(2)`).
// `rlim_t` is 32 bits on some targets, so the conversion is not useless everywhere.
#[allow(clippy::useless_conversion)]
pub fn rlimit(resource: Resource) -> Result<Limit, Errno> {
    let res = match resource {
        Resource::RtPrio => libc::RLIMIT_RTPRIO,
        Resource::MemLock => libc::RLIMIT_MEMLOCK,
        Resource::Nice => libc::RLIMIT_NICE,
        Resource::RtTime => libc::RLIMIT_RTTIME,
    };
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is writable.
    check(unsafe { libc::getrlimit(res, &mut lim) })?;
    let conv = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then(|| u64::from(v));
    Ok(Limit {
        soft: conv(lim.rlim_cur),
        hard: conv(lim.rlim_max),
    })
}

/// The calling thread's timer slack in nanoseconds (`prctl(PR_GET_TIMERSLACK)`): how late the
/// kernel may fire its timers to group wakeups. SCHED_OTHER threads default to 50 µs; real-time
/// threads have none.
pub fn timer_slack_ns() -> Option<u64> {
    // SAFETY: PR_GET_TIMERSLACK takes no further arguments and returns the value.
    let v = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    (v >= 0).then_some(v as u64)
}

/// True when file descriptor `fd` (0, 1 or 2) is a terminal.
pub fn is_terminal(fd: i32) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// The fields of `uname(2)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uname {
    pub sysname: String,
    pub nodename: String,
    pub release: String,
    pub version: String,
    pub machine: String,
}

/// The kernel's identity (`uname(2)`).
pub fn uname() -> Result<Uname, Errno> {
    // SAFETY: all-zero is a valid utsname.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is writable.
    check(unsafe { libc::uname(&mut u) })?;
    fn field(chars: &[libc::c_char]) -> String {
        let bytes: Vec<u8> = chars
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    Ok(Uname {
        sysname: field(&u.sysname),
        nodename: field(&u.nodename),
        release: field(&u.release),
        version: field(&u.version),
        machine: field(&u.machine),
    })
}

/// Ends the process at once with `code`, without running destructors or joining threads. Used
/// only by the watchdog after every result has been written, when a thread failed to stop.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` never returns and is always safe to call.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uname_and_limits() {
        let u = uname().expect("uname");
        assert_eq!(u.sysname, "Linux");
        assert!(!u.release.is_empty());
        assert!(rlimit(Resource::MemLock).is_ok());
        assert!(rlimit(Resource::RtPrio).is_ok());
        assert!(pid() > 0);
        let _ = euid();
        assert!(timer_slack_ns().is_some());
    }
}
