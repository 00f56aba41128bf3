//! Scheduling: thread ids, policies through `sched_setattr(2)`, CPU affinity, `sched_yield`.
//!
//! Every policy sandglass offers (SCHED_OTHER with a nice value, SCHED_BATCH, SCHED_IDLE,
//! SCHED_FIFO, SCHED_RR and SCHED_DEADLINE, with SCHED_FLAG_RECLAIM for soft reservations) is set
//! with the one system call that can express all of them, `sched_setattr`, and read back with
//! `sched_getattr` so that the run records what the kernel actually applied.

use crate::errno::{check, Errno};

/// A kernel thread id (what `gettid(2)` returns; a process's main thread has tid == pid).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tid(pub i32);

impl Tid {
    /// The calling thread; `0` means "the caller" to every scheduling call.
    pub const SELF: Tid = Tid(0);
}

impl std::fmt::Display for Tid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The calling thread's id.
pub fn gettid() -> Tid {
    // SAFETY: gettid takes no arguments and cannot fail.
    Tid(unsafe { libc::gettid() })
}

/// Policy numbers, as in `<linux/sched.h>`.
pub const SCHED_OTHER: u32 = libc::SCHED_OTHER as u32;
pub const SCHED_FIFO: u32 = libc::SCHED_FIFO as u32;
pub const SCHED_RR: u32 = libc::SCHED_RR as u32;
pub const SCHED_BATCH: u32 = libc::SCHED_BATCH as u32;
pub const SCHED_IDLE: u32 = libc::SCHED_IDLE as u32;
pub const SCHED_DEADLINE: u32 = 6;
/// `SCHED_FLAG_RECLAIM`: a SCHED_DEADLINE task may use bandwidth other deadline tasks leave
/// unused (GRUB). sandglass uses it for Hourglass's soft reservations (`-rs`).
pub const SCHED_FLAG_RECLAIM: u64 = libc::SCHED_FLAG_RECLAIM as u64;

/// The scheduling attributes of one thread (`struct sched_attr`, times in nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SchedAttr {
    pub policy: u32,
    pub flags: u64,
    pub nice: i32,
    pub priority: u32,
    pub runtime_ns: u64,
    pub deadline_ns: u64,
    pub period_ns: u64,
}

impl SchedAttr {
    fn to_raw(self) -> libc::sched_attr {
        libc::sched_attr {
            size: std::mem::size_of::<libc::sched_attr>() as u32,
            sched_policy: self.policy,
            sched_flags: self.flags,
            sched_nice: self.nice,
            sched_priority: self.priority,
            sched_runtime: self.runtime_ns,
            sched_deadline: self.deadline_ns,
            sched_period: self.period_ns,
        }
    }
}

/// Applies `attr` to thread `tid` with `sched_setattr(2)`.
///
/// Typical errors: `EPERM` (no CAP_SYS_NICE and RLIMIT_RTPRIO too low, or a SCHED_DEADLINE
/// thread whose affinity is narrower than its root domain), `EBUSY` (SCHED_DEADLINE admission
/// control refused the bandwidth), `EINVAL` (parameters out of range).
pub fn set_attr(tid: Tid, attr: &SchedAttr) -> Result<(), Errno> {
    let mut raw = attr.to_raw();
    // SAFETY: `raw` is a properly sized and initialised `struct sched_attr` whose `size` field
    // holds its size; the kernel only reads it. The flags argument must be 0.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid.0 as libc::c_long,
            &mut raw as *mut libc::sched_attr,
            0 as libc::c_long,
        )
    };
    check(ret as libc::c_int).map(|_| ())
}

/// Reads the scheduling attributes of thread `tid` with `sched_getattr(2)`.
pub fn get_attr(tid: Tid) -> Result<SchedAttr, Errno> {
    // SAFETY: all-zero is a valid bit pattern for this plain C struct.
    let mut raw: libc::sched_attr = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::sched_attr>() as libc::c_uint;
    // SAFETY: `raw` is writable and `size` tells the kernel how much of it may be written.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid.0 as libc::c_long,
            &mut raw as *mut libc::sched_attr,
            size as libc::c_long,
            0 as libc::c_long,
        )
    };
    check(ret as libc::c_int)?;
    Ok(SchedAttr {
        policy: raw.sched_policy,
        flags: raw.sched_flags,
        nice: raw.sched_nice,
        priority: raw.sched_priority,
        runtime_ns: raw.sched_runtime,
        deadline_ns: raw.sched_deadline,
        period_ns: raw.sched_period,
    })
}

/// The static priority range of `policy` (`sched_get_priority_min/max`).
pub fn priority_range(policy: u32) -> Option<(u32, u32)> {
    // SAFETY: plain integer arguments; errors are reported as -1.
    let (lo, hi) = unsafe {
        (
            libc::sched_get_priority_min(policy as libc::c_int),
            libc::sched_get_priority_max(policy as libc::c_int),
        )
    };
    (lo >= 0 && hi >= 0).then_some((lo as u32, hi as u32))
}

/// Gives up the CPU (`sched_yield(2)`).
#[inline]
pub fn yield_now() {
    // SAFETY: no arguments; on Linux sched_yield always succeeds.
    unsafe {
        libc::sched_yield();
    }
}

/// The number of CPUs a `cpu_set_t` can name; sandglass reports an error for larger ids.
pub const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// Restricts thread `tid` to `cpus` (`sched_setaffinity(2)`).
pub fn set_affinity(tid: Tid, cpus: &[usize]) -> Result<(), Errno> {
    // SAFETY: all-zero is the empty CPU set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= MAX_CPUS {
            return Err(Errno::EINVAL);
        }
        // SAFETY: `cpu` is below CPU_SETSIZE, so CPU_SET stays inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let ret =
        unsafe { libc::sched_setaffinity(tid.0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    check(ret).map(|_| ())
}

/// The CPUs thread `tid` may run on (`sched_getaffinity(2)`), in increasing order.
pub fn get_affinity(tid: Tid) -> Result<Vec<usize>, Errno> {
    // SAFETY: all-zero is the empty CPU set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is writable and of the size passed.
    let ret =
        unsafe { libc::sched_getaffinity(tid.0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    check(ret)?;
    // SAFETY: CPU_ISSET reads inside `set` for every index below CPU_SETSIZE.
    Ok((0..MAX_CPUS)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// The CPU the calling thread is running on (`sched_getcpu(3)`, served by the vDSO).
#[inline]
pub fn current_cpu() -> Option<u32> {
    // SAFETY: no arguments; returns -1 on failure.
    let cpu = unsafe { libc::sched_getcpu() };
    (cpu >= 0).then_some(cpu as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_round_trip_for_the_calling_thread() {
        let before = get_attr(Tid::SELF).expect("sched_getattr");
        assert_eq!(before.policy, SCHED_OTHER);
        // Raising nice never needs a privilege; do it on a scratch thread to leave ours alone.
        std::thread::spawn(|| {
            let attr = SchedAttr {
                policy: SCHED_BATCH,
                nice: 5,
                ..SchedAttr::default()
            };
            set_attr(Tid::SELF, &attr).expect("sched_setattr BATCH");
            let got = get_attr(Tid::SELF).expect("sched_getattr");
            assert_eq!(got.policy, SCHED_BATCH);
            assert_eq!(got.nice, 5);
        })
        .join()
        .expect("thread");
        assert!(gettid().0 > 0);
    }

    #[test]
    fn affinity_round_trip() {
        let allowed = get_affinity(Tid::SELF).expect("getaffinity");
        assert!(!allowed.is_empty());
        let first = allowed[0];
        std::thread::spawn(move || {
            set_affinity(Tid::SELF, &[first]).expect("setaffinity");
            assert_eq!(get_affinity(Tid::SELF).expect("getaffinity"), vec![first]);
            assert_eq!(current_cpu(), Some(first as u32));
        })
        .join()
        .expect("thread");
        assert_eq!(set_affinity(Tid::SELF, &[MAX_CPUS]), Err(Errno::EINVAL));
    }

    #[test]
    fn fifo_range_is_linux_standard() {
        assert_eq!(priority_range(SCHED_FIFO), Some((1, 99)));
    }
}
