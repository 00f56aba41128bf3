//! POSIX clocks and sleeps, in integer nanoseconds.
//!
//! Absolute and relative sleeps are separate functions, as in rustix: [`sleep_until`] is
//! `clock_nanosleep(TIMER_ABSTIME)` (what cyclictest and Hourglass's `HR` timer use) and
//! [`sleep_for`] is `nanosleep` (the "native" relative sleep of Hourglass's `NATIVE` timer).
//! Both return `Err(Errno::EINTR)` when a signal handler ran, so a stop request can interrupt
//! them; the caller decides whether to sleep again.

use crate::errno::Errno;

/// The POSIX clocks sandglass reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockId {
    /// `CLOCK_MONOTONIC`: NTP-slewed, the clock of timers and of tracefs `trace_clock mono`.
    Monotonic,
    /// `CLOCK_MONOTONIC_RAW`: the hardware clock without NTP slewing; the reference against which
    /// the cycle counter is calibrated.
    MonotonicRaw,
    /// `CLOCK_REALTIME`: wall-clock time.
    Realtime,
    /// `CLOCK_BOOTTIME`: monotonic including time spent suspended.
    Boottime,
    /// `CLOCK_THREAD_CPUTIME_ID`: CPU time consumed by the calling thread.
    ThreadCpu,
}

impl ClockId {
    fn raw(self) -> libc::clockid_t {
        match self {
            ClockId::Monotonic => libc::CLOCK_MONOTONIC,
            ClockId::MonotonicRaw => libc::CLOCK_MONOTONIC_RAW,
            ClockId::Realtime => libc::CLOCK_REALTIME,
            ClockId::Boottime => libc::CLOCK_BOOTTIME,
            ClockId::ThreadCpu => libc::CLOCK_THREAD_CPUTIME_ID,
        }
    }
}

pub(crate) fn timespec_from_ns(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

pub(crate) fn ns_from_timespec(ts: &libc::timespec) -> u64 {
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The current value of `clock` in nanoseconds.
#[inline]
pub fn now_ns(clock: ClockId) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids above are supported by every
    // Linux kernel sandglass runs on, so the call cannot fail with EINVAL, and EFAULT is
    // impossible for a stack address.
    unsafe {
        libc::clock_gettime(clock.raw(), &mut ts);
    }
    ns_from_timespec(&ts)
}

/// The resolution the kernel reports for `clock`, in nanoseconds.
pub fn resolution_ns(clock: ClockId) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let ret = unsafe { libc::clock_getres(clock.raw(), &mut ts) };
    (ret == 0).then(|| ns_from_timespec(&ts))
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline_ns` (`clock_nanosleep` with TIMER_ABSTIME).
/// Returns `Err(EINTR)` if a signal handler interrupted the sleep.
#[inline]
pub fn sleep_until(clock: ClockId, deadline_ns: u64) -> Result<(), Errno> {
    let ts = timespec_from_ns(deadline_ns);
    // SAFETY: `ts` is a valid timespec; the remaining-time pointer may be null with
    // TIMER_ABSTIME. clock_nanosleep returns the error number instead of setting errno.
    let ret = unsafe {
        libc::clock_nanosleep(clock.raw(), libc::TIMER_ABSTIME, &ts, std::ptr::null_mut())
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(Errno(ret))
    }
}

/// Sleeps for `duration_ns` with `nanosleep` (a relative sleep on `CLOCK_MONOTONIC`).
/// Returns `Err(EINTR)` if a signal handler interrupted the sleep; the caller recomputes what is
/// left from its own clock rather than trusting the remaining time.
#[inline]
pub fn sleep_for(duration_ns: u64) -> Result<(), Errno> {
    let ts = timespec_from_ns(duration_ns);
    // SAFETY: `ts` is a valid timespec and the remaining-time pointer may be null.
    let ret = unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    crate::errno::check(ret).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_advance_and_sleeps_last() {
        let a = now_ns(ClockId::Monotonic);
        sleep_for(1_000_000).expect("nanosleep");
        let b = now_ns(ClockId::Monotonic);
        assert!(b >= a + 1_000_000, "slept {} ns", b - a);
        sleep_until(ClockId::Monotonic, b + 1_000_000).expect("clock_nanosleep");
        assert!(now_ns(ClockId::Monotonic) >= b + 1_000_000);
        assert!(now_ns(ClockId::MonotonicRaw) > 0);
        assert!(now_ns(ClockId::Realtime) > 1_600_000_000_000_000_000);
        assert!(resolution_ns(ClockId::Monotonic).is_some());
    }

    #[test]
    fn timespec_round_trip() {
        for ns in [0, 1, 999_999_999, 1_000_000_000, 123_456_789_012] {
            assert_eq!(ns_from_timespec(&timespec_from_ns(ns)), ns);
        }
    }
}
