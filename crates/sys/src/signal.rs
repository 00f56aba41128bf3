//! Signals that stop a run and wake its threads.
//!
//! The design keeps signal handling out of the measuring threads: the main thread blocks the
//! signals that end a run ([`TERMINATING`]: SIGINT, SIGTERM, SIGHUP) before it creates any
//! thread (the mask is inherited) and receives them synchronously with [`wait_timeout`]. To interrupt a measuring thread that sleeps, the main
//! thread sends it [`wake_signal`] with [`send_to_thread`]; that signal has a handler that does
//! nothing and is installed without `SA_RESTART`, so the sleep returns `EINTR` and the thread
//! checks its stop flag.

use crate::errno::{check, Errno};
use crate::sched::Tid;

/// The real-time signal that POSIX timers deliver to their thread: `SIGRTMIN + 2`.
pub fn timer_signal() -> i32 {
    libc::SIGRTMIN() + 2
}

/// The signal used to interrupt a sleeping measuring thread: `SIGRTMIN + 3`.
pub fn wake_signal() -> i32 {
    libc::SIGRTMIN() + 3
}

/// SIGINT, as a number.
pub const SIGINT: i32 = libc::SIGINT;
/// SIGTERM, as a number.
pub const SIGTERM: i32 = libc::SIGTERM;
/// SIGHUP, as a number: the terminal hung up (its window closed, an ssh session dropped).
pub const SIGHUP: i32 = libc::SIGHUP;

/// The signals that end a run, as SIGINT (Ctrl-C) does: the run stops, its files are written
/// and catalogued, and the exit code is 128 + the signal's number (130, 143, 129). Every place
/// that blocks, waits for or recognises them uses this one list, so that a signal added here is
/// handled everywhere. SIGHUP is left out where it is ignored (`nohup`; see [`is_ignored`]).
pub const TERMINATING: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// [`TERMINATING`] and the terminal's job control (SIGTSTP, SIGCONT): what the main thread of a
/// run blocks and takes in its wait (see `sandglass::stops`).
pub const WITH_JOB_CONTROL: [i32; 5] = [SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGCONT];

/// True when `signo` is one of [`TERMINATING`].
pub fn is_terminating(signo: i32) -> bool {
    TERMINATING.contains(&signo)
}

/// The name of a signal that ends a run (`SIGINT`, `SIGTERM`, `SIGHUP`), or `signal N`.
pub fn name(signo: i32) -> String {
    match signo {
        SIGINT => "SIGINT".into(),
        SIGTERM => "SIGTERM".into(),
        SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

/// True when every signal of [`TERMINATING`] is blocked in the calling thread (a caller that
/// holds them, such as a study running many cells). An ignored SIGHUP (`nohup`) is never
/// blocked (see [`block`]), so it does not count: without this, a study started with `nohup`
/// looked to each cell as if nobody held the signals, and a cell's end took (and lost) a
/// Ctrl-C meant for the study.
pub fn terminating_blocked() -> bool {
    TERMINATING
        .iter()
        .all(|&s| is_blocked(s) || (s == SIGHUP && is_ignored(SIGHUP)))
}
/// SIGCONT, as a number: a stopped process runs again. Blocking it does not keep the process
/// stopped; the signal stays pending, so that [`wait_timeout`] tells when the stop ended.
pub const SIGCONT: i32 = libc::SIGCONT;
/// SIGTSTP, as a number: the terminal's stop (Ctrl-Z). Blocked, it stops nothing until it is
/// taken with [`wait_timeout`]; [`stop_self`] then stops the process as the default would.
pub const SIGTSTP: i32 = libc::SIGTSTP;
/// SIGSTOP, as a number.
pub const SIGSTOP: i32 = libc::SIGSTOP;

/// True when `signo`'s disposition is to ignore it (`SIG_IGN`), as `nohup` sets SIGHUP's.
pub fn is_ignored(signo: i32) -> bool {
    // SAFETY: all-zero is a valid sigaction; with a null new action, sigaction only reads the
    // current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signo, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// The set of `signals`, less SIGHUP when it is ignored: a process started with `nohup` asked
/// to outlive its terminal, so its hang-up is neither blocked nor taken (and ends nothing).
pub(crate) fn sigset(signals: &[i32]) -> libc::sigset_t {
    let skip_hangup = signals.contains(&SIGHUP) && is_ignored(SIGHUP);
    // SAFETY: sigemptyset initialises the set; sigaddset with a valid number only sets a bit.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            if !(skip_hangup && s == SIGHUP) {
                libc::sigaddset(&mut set, s);
            }
        }
        set
    }
}

/// Blocks `signals` in the calling thread; threads created afterwards inherit the mask.
pub fn block(signals: &[i32]) -> Result<(), Errno> {
    let set = sigset(signals);
    // SAFETY: `set` is initialised; the old-mask pointer may be null.
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if ret == 0 {
        Ok(())
    } else {
        Err(Errno(ret))
    }
}

/// True when `signo` is blocked in the calling thread.
pub fn is_blocked(signo: i32) -> bool {
    // SAFETY: all-zero is a valid sigset_t; pthread_sigmask with a null new set only reads the
    // current mask into `old`.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut old) == 0
            && libc::sigismember(&old, signo) == 1
    }
}

/// Unblocks `signals` in the calling thread.
pub fn unblock(signals: &[i32]) -> Result<(), Errno> {
    let set = sigset(signals);
    // SAFETY: as in `block`.
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    if ret == 0 {
        Ok(())
    } else {
        Err(Errno(ret))
    }
}

/// The first signal of [`TERMINATING`] that [`wait_timeout`] took in this process (0: none).
static TERMINATION: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Waits up to `timeout_ns` for one of `signals` (which must be blocked in the calling thread)
/// and returns its number, or `None` on timeout or interruption. A signal of [`TERMINATING`]
/// taken is remembered for [`termination`].
pub fn wait_timeout(signals: &[i32], timeout_ns: u64) -> Option<i32> {
    let set = sigset(signals);
    let ts = crate::clock::timespec_from_ns(timeout_ns);
    // SAFETY: `set` and `ts` are valid; the info pointer may be null.
    let ret = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    if is_terminating(ret) {
        let _ = TERMINATION.compare_exchange(
            0,
            ret,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    (ret > 0).then_some(ret)
}

/// Waits up to `timeout_ns` for a signal of [`TERMINATING`] (blocked in the calling thread) and
/// returns the one taken. A SIGTSTP (Ctrl-Z) taken meanwhile, blocked where a run records its stops,
/// stops the process as its default action would, and a SIGCONT is taken without effect; the
/// wait then goes on to its end.
pub fn wait_termination(timeout_ns: u64) -> Option<i32> {
    let now = || crate::clock::now_ns(crate::clock::ClockId::Monotonic);
    let deadline = now().saturating_add(timeout_ns);
    loop {
        let left = deadline.saturating_sub(now());
        match wait_timeout(&WITH_JOB_CONTROL, left) {
            Some(SIGTSTP) => stop_self(),
            Some(SIGCONT) | None => {}
            Some(s) => return Some(s),
        }
        if now() >= deadline {
            return None;
        }
    }
}

/// The first signal of [`TERMINATING`] this process took (and acted on by ending its work
/// early), if any: the command's exit code then says so (128 + the signal's number, as a shell reports a
/// process the signal ended).
pub fn termination() -> Option<i32> {
    match TERMINATION.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

extern "C" fn do_nothing(_: libc::c_int) {}

/// Installs a handler that does nothing for `signo`, without `SA_RESTART`, so that a blocking
/// call interrupted by it returns `EINTR`.
pub fn install_wake_handler(signo: i32) -> Result<(), Errno> {
    // SAFETY: all-zero is a valid sigaction; the handler is an `extern "C"` function that
    // touches no state, which makes it async-signal-safe.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = do_nothing as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut act.sa_mask);
        act.sa_flags = 0;
        check(libc::sigaction(signo, &act, std::ptr::null_mut())).map(|_| ())
    }
}

/// Sends `signo` to thread `tid` of this process (`tgkill(2)`).
pub fn send_to_thread(tid: Tid, signo: i32) -> Result<(), Errno> {
    // SAFETY: plain integer arguments; the kernel checks that `tid` belongs to our process.
    let ret = unsafe { libc::tgkill(libc::getpid(), tid.0, signo) };
    check(ret).map(|_| ())
}

/// Stops the calling process (SIGSTOP to itself), as a terminal stop whose SIGTSTP was taken
/// does by default; it runs again when it receives SIGCONT (the shell's `fg` or `bg`).
pub fn stop_self() {
    // SAFETY: plain integer arguments; a process may always signal itself.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGSTOP);
    }
}

/// Sends `signo` to process `pid` (`kill(2)`); tests use it to deliver Ctrl-C to a run.
pub fn send_to_process(pid: i32, signo: i32) -> Result<(), Errno> {
    // SAFETY: plain integer arguments; the kernel checks permission.
    check(unsafe { libc::kill(pid, signo) }).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_signal_interrupts_a_sleep() {
        install_wake_handler(wake_signal()).expect("sigaction");
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            tx.send(crate::sched::gettid()).expect("send");
            crate::clock::sleep_for(10_000_000_000)
        });
        let tid = rx.recv().expect("tid");
        // Keep signalling until the sleeper has returned: the first signal may arrive before it
        // entered nanosleep, and a busy machine may run it late. Past a minute (a hang guard:
        // its sleep is 10 s) it did not wake.
        let mut result = None;
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < end {
            let _ = send_to_thread(tid, wake_signal());
            std::thread::sleep(std::time::Duration::from_millis(5));
            if h.is_finished() {
                result = Some(h.join().expect("join"));
                break;
            }
        }
        assert_eq!(result, Some(Err(Errno::EINTR)));
    }

    #[test]
    fn job_control_list_extends_the_terminating_one() {
        assert_eq!(WITH_JOB_CONTROL[..TERMINATING.len()], TERMINATING);
        assert_eq!(WITH_JOB_CONTROL[TERMINATING.len()..], [SIGTSTP, SIGCONT]);
        assert!(is_terminating(SIGHUP) && !is_terminating(SIGTSTP));
        assert_eq!(name(SIGHUP), "SIGHUP");
    }

    #[test]
    fn an_ignored_hang_up_is_neither_blocked_nor_taken_and_the_rest_count_as_held() {
        // In a child process: the test harness's own dispositions stay as they were.
        // SAFETY: fork in a test; the child only calls async-signal-safe functions and
        // _exit, the parent waits for it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: signal() with SIG_IGN, kill to itself and _exit are async-signal-safe.
            let ok = unsafe {
                libc::signal(SIGHUP, libc::SIG_IGN);
                let ok = is_ignored(SIGHUP)
                    && block(&TERMINATING).is_ok()
                    && !is_blocked(SIGHUP)
                    && terminating_blocked();
                libc::kill(libc::getpid(), SIGHUP);
                ok && wait_timeout(&TERMINATING, 1_000_000).is_none()
            };
            // SAFETY: _exit ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status}"
        );
    }

    #[test]
    fn blocked_state_is_reported() {
        std::thread::spawn(|| {
            assert!(!is_blocked(libc::SIGUSR1));
            block(&[libc::SIGUSR1]).expect("block");
            assert!(is_blocked(libc::SIGUSR1));
            unblock(&[libc::SIGUSR1]).expect("unblock");
            assert!(!is_blocked(libc::SIGUSR1));
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn wait_timeout_times_out() {
        std::thread::spawn(|| {
            block(&[libc::SIGUSR2]).expect("block");
            assert_eq!(wait_timeout(&[libc::SIGUSR2], 1_000_000), None);
            unblock(&[libc::SIGUSR2]).expect("unblock");
        })
        .join()
        .expect("thread");
    }
}
