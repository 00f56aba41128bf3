//! Timer sources a measuring thread can block on, beside the plain sleeps of [`crate::clock`]:
//! `timerfd` (a file descriptor that becomes readable at the expiry), POSIX per-thread timers
//! (`timer_create` with `SIGEV_THREAD_ID`, the expiry delivered as a real-time signal to one
//! thread) and the `/dev/rtc` periodic interrupt that Hourglass used on 2002 Linux (§3.3).
//!
//! All three are armed with absolute `CLOCK_MONOTONIC` expiries, so a late wakeup never shifts
//! the next release.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::clock::timespec_from_ns;
use crate::errno::{check, Errno};
use crate::sched::Tid;

/// A `CLOCK_MONOTONIC` timerfd armed with absolute expiries.
#[derive(Debug)]
pub struct TimerFd {
    fd: OwnedFd,
}

impl TimerFd {
    /// Creates the timer (`timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC)`).
    pub fn new() -> Result<TimerFd, Errno> {
        // SAFETY: plain integer arguments; the returned descriptor is owned from here on.
        let fd = check(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(TimerFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Arms a single expiry at `deadline_ns` on `CLOCK_MONOTONIC`.
    pub fn arm_at(&self, deadline_ns: u64) -> Result<(), Errno> {
        let spec = libc::itimerspec {
            it_interval: timespec_from_ns(0),
            it_value: timespec_from_ns(deadline_ns.max(1)),
        };
        // SAFETY: `spec` is valid; the old-value pointer may be null.
        check(unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        })
        .map(|_| ())
    }

    /// Blocks until the timer expires; returns the number of expiries since the last wait.
    /// Returns `Err(EINTR)` when a signal handler interrupted the wait.
    pub fn wait(&self) -> Result<u64, Errno> {
        let mut buf = [0u8; 8];
        // SAFETY: `buf` is 8 writable bytes, the size a timerfd read requires.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n == 8 {
            Ok(u64::from_ne_bytes(buf))
        } else if n < 0 {
            Err(Errno::last())
        } else {
            Err(Errno(libc::EIO))
        }
    }
}

/// A POSIX per-thread timer: `timer_create(CLOCK_MONOTONIC)` whose expiry sends `signo` to one
/// thread (`SIGEV_THREAD_ID`), which waits for it with `sigwaitinfo`. The signal must be blocked
/// in that thread (see [`crate::signal::block`]) so that it is received, not handled.
#[derive(Debug)]
pub struct PosixTimer {
    id: libc::timer_t,
    signo: i32,
}

impl PosixTimer {
    /// Creates a timer that signals thread `tid` with `signo` at each expiry.
    pub fn new_for_thread(tid: Tid, signo: i32) -> Result<PosixTimer, Errno> {
        // SAFETY: all-zero is a valid sigevent; the fields used below are set explicitly.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = signo;
        sev.sigev_notify_thread_id = tid.0;
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: `sev` and `id` are valid for the call; the kernel fills `id`.
        check(unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut id) })?;
        Ok(PosixTimer { id, signo })
    }

    /// Arms a single expiry at `deadline_ns` on `CLOCK_MONOTONIC`.
    pub fn arm_at(&self, deadline_ns: u64) -> Result<(), Errno> {
        let spec = libc::itimerspec {
            it_interval: timespec_from_ns(0),
            it_value: timespec_from_ns(deadline_ns.max(1)),
        };
        // SAFETY: `self.id` is a live timer owned by this value; `spec` is valid.
        check(unsafe {
            libc::timer_settime(self.id, libc::TIMER_ABSTIME, &spec, std::ptr::null_mut())
        })
        .map(|_| ())
    }

    /// Blocks until the timer's signal arrives. Returns `Err(EINTR)` when another, handled
    /// signal interrupted the wait.
    pub fn wait(&self) -> Result<(), Errno> {
        let set = crate::signal::sigset(&[self.signo]);
        // SAFETY: `set` is an initialised signal set; the info pointer may be null.
        check(unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) }).map(|_| ())
    }
}

impl Drop for PosixTimer {
    fn drop(&mut self) {
        // SAFETY: `self.id` was created by timer_create and is deleted exactly once.
        unsafe {
            libc::timer_delete(self.id);
        }
    }
}

/// `RTC_IRQP_SET`: `_IOW('p', 0x0c, unsigned long)`.
const RTC_IRQP_SET: libc::c_ulong = 0x4008_700c;
/// `RTC_PIE_ON`: `_IO('p', 0x05)`.
const RTC_PIE_ON: libc::c_ulong = 0x7005;
/// `RTC_PIE_OFF`: `_IO('p', 0x06)`.
const RTC_PIE_OFF: libc::c_ulong = 0x7006;

/// The real-time clock's periodic interrupt (`/dev/rtc`), as Hourglass's `RTC` timer used it:
/// each `read` blocks until the next interrupt at a power-of-two rate.
#[derive(Debug)]
pub struct Rtc {
    file: File,
}

impl Rtc {
    /// Opens the RTC device at `path` (usually `/dev/rtc` or `/dev/rtc0`).
    pub fn open(path: &std::path::Path) -> std::io::Result<Rtc> {
        Ok(Rtc {
            file: File::open(path)?,
        })
    }

    /// Sets the periodic interrupt rate (a power of two; above 64 Hz needs CAP_SYS_RESOURCE or
    /// a raised `/proc/sys/dev/rtc/max-user-freq`) and enables it.
    pub fn start_periodic(&self, hz: u64) -> Result<(), Errno> {
        let fd = self.file.as_raw_fd();
        // SAFETY: RTC_IRQP_SET takes the rate as an unsigned long by value.
        check(unsafe { libc::ioctl(fd, RTC_IRQP_SET as _, hz as libc::c_ulong) })?;
        // SAFETY: RTC_PIE_ON takes no argument.
        check(unsafe { libc::ioctl(fd, RTC_PIE_ON as _, 0) }).map(|_| ())
    }

    /// Blocks until the next periodic interrupt; returns how many occurred since the last read.
    // `c_ulong` is 32 bits on some targets, so the conversion is not useless everywhere.
    #[allow(clippy::useless_conversion)]
    pub fn wait(&mut self) -> Result<u64, Errno> {
        let mut buf = [0u8; std::mem::size_of::<libc::c_ulong>()];
        match self.file.read(&mut buf) {
            Ok(n) if n == buf.len() => Ok(u64::from(libc::c_ulong::from_ne_bytes(buf)) >> 8),
            Ok(_) => Err(Errno(libc::EIO)),
            Err(e) => Err(Errno(e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }
}

impl Drop for Rtc {
    fn drop(&mut self) {
        // SAFETY: RTC_PIE_OFF takes no argument; failure is harmless at this point.
        unsafe {
            libc::ioctl(self.file.as_raw_fd(), RTC_PIE_OFF as _, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{now_ns, ClockId};

    #[test]
    fn timerfd_expires_at_its_absolute_deadline() {
        let t = TimerFd::new().expect("timerfd_create");
        let deadline = now_ns(ClockId::Monotonic) + 2_000_000;
        t.arm_at(deadline).expect("arm");
        assert!(t.wait().expect("read") >= 1);
        assert!(now_ns(ClockId::Monotonic) >= deadline);
    }

    #[test]
    fn posix_timer_signals_its_thread() {
        std::thread::spawn(|| {
            let signo = crate::signal::timer_signal();
            crate::signal::block(&[signo]).expect("block");
            let t = PosixTimer::new_for_thread(crate::sched::gettid(), signo).expect("create");
            let deadline = now_ns(ClockId::Monotonic) + 2_000_000;
            t.arm_at(deadline).expect("arm");
            t.wait().expect("wait");
            assert!(now_ns(ClockId::Monotonic) >= deadline);
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn rtc_open_reports_a_missing_device() {
        let err = Rtc::open(std::path::Path::new("/nonexistent/rtc")).expect_err("no device");
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}
