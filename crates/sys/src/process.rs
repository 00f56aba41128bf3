//! Facts about the process and the machine that need a system call: identity, resource limits,
//! timer slack, terminals, `uname`, the clock tick of `/proc`'s times.

use crate::errno::{check, Errno};

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: no arguments; cannot fail.
    unsafe { libc::geteuid() }
}

/// `open(2)` flags and an errno the runtime directory's checks need, for `OpenOptionsExt`:
/// fail on a symbolic link instead of following it (with `ELOOP`), and never block opening a
/// FIFO.
pub const O_NOFOLLOW: i32 = libc::O_NOFOLLOW;
pub const O_NONBLOCK: i32 = libc::O_NONBLOCK;
pub const ELOOP: i32 = libc::ELOOP;

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

/// Clock ticks per second of the times in `/proc/stat` and `/proc/PID/stat` (USER_HZ,
/// `sysconf(_SC_CLK_TCK)`; 100 on every common architecture).
pub fn clock_ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf takes a constant name and reads no memory of ours; -1 means unknown.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(v).ok().filter(|&v| v > 0)
}

/// The calling thread's timer slack in nanoseconds (`prctl(PR_GET_TIMERSLACK)`): how late the
/// kernel may fire its timers to group wakeups. SCHED_OTHER threads default to 50 µs; real-time
/// threads have none.
pub fn timer_slack_ns() -> Option<u64> {
    // SAFETY: PR_GET_TIMERSLACK takes no further arguments and returns the value.
    let v = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    (v >= 0).then_some(v as u64)
}

/// The process tracing this one (a debugger, strace), from `TracerPid` in `/proc/self/status`;
/// `None` when nothing traces it or the file cannot be read.
pub fn tracer_pid() -> Option<i32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|&p| p > 0)
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
        // USER_HZ: 100 on every common architecture, never more than the kernel's HZ.
        assert!(clock_ticks_per_second().is_some_and(|t| (24..=1000).contains(&t)));
    }
}

/// Takes an exclusive advisory lock on an open file or directory without waiting
/// (`flock(LOCK_EX | LOCK_NB)`). `Ok(true)`: this open file now holds the lock, until it is
/// closed or the process ends (however it ends, SIGKILL included); `Ok(false)`: another open
/// file holds it. Errors are the file system's (`ENOLCK`, `EOPNOTSUPP` on some network file
/// systems).
pub fn try_lock_exclusive(file: &std::fs::File) -> Result<bool, Errno> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for the lifetime of `file`; flock takes no pointers.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = Errno::last();
    if e.0 == libc::EWOULDBLOCK {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Takes a shared advisory lock on an open file, waiting while another open file holds it
/// exclusively (`flock(LOCK_SH)`, retried when a signal interrupts it). Held until the file is
/// closed or the process ends.
pub fn lock_shared(file: &std::fs::File) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: the descriptor is open for the lifetime of `file`; flock takes no pointers.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH) } == 0 {
            return Ok(());
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod lock_tests {
    use super::try_lock_exclusive;

    #[test]
    fn a_second_open_file_cannot_take_a_held_lock_until_the_first_is_closed() {
        let dir = std::env::temp_dir().join(format!("sandglass-sys-lock-{}", super::pid()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let first = std::fs::File::open(&dir).expect("open");
        let second = std::fs::File::open(&dir).expect("open");
        assert_eq!(try_lock_exclusive(&first), Ok(true));
        assert_eq!(try_lock_exclusive(&second), Ok(false));
        drop(first);
        assert_eq!(try_lock_exclusive(&second), Ok(true));
        drop(second);
        std::fs::remove_dir(&dir).expect("rmdir");
    }
}
