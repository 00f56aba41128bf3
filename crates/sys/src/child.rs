//! Child processes that cannot outlive sandglass: their own process group, and a parent-death
//! signal.
//!
//! A load such as `stress-ng` or a user's command runs as a child process. Ending the run must
//! end it and everything it started, whatever ends the run: a normal stop, Ctrl-C, an error, or
//! a SIGKILL that gives sandglass no chance to clean up. [`isolate`] arranges three things in the
//! child between `fork` and `exec`:
//!
//! 1. A process group of its own (`setpgid(2)`), so that [`signal_group`] reaches the child and
//!    every descendant that stays in the group, and so that a Ctrl-C typed at the terminal
//!    (delivered to the foreground group, sandglass's) does not reach it behind sandglass's back.
//! 2. `PR_SET_PDEATHSIG` = SIGKILL (`prctl(2)`): the kernel kills the child when the thread that
//!    spawned it ends, however it ends. The signal is tied to the spawning *thread*, not the
//!    process, so spawn from a thread that lives until the child has been waited for.
//! 3. A guardian: a small process forked inside the new group before `exec`. It blocks every
//!    signal, closes every file descriptor, and waits for its parent (the child) to end; then it
//!    sends SIGKILL to the whole group. The parent-death signal alone reaches only the direct
//!    child: `sh -c 'a; b'` keeps running `a` as a grandchild, which would otherwise survive.
//!    The guardian sleeps in `sigtimedwait` and is woken by its own parent-death signal, with a
//!    one-second poll of `getppid(2)` as a safety net, so it costs nothing while the child runs.
//!
//! The child also starts with no signal blocked. The thread that spawns it may block the signals
//! that end a run to receive them synchronously (see [`crate::signal`]), and a child inherits the
//! mask across `exec`: stress-ng would then never see the SIGINT that asks it to stop.
//!
//! A descendant that leaves the group on purpose (`setsid`, a daemon) escapes the group, so
//! [`isolate`] can also move the child into a cgroup before it runs anything (every descendant
//! stays in a cgroup whatever groups or sessions it makes), and a warden, a small process
//! forked outside it in a session of its own, waits on a pipe whose write end only sandglass
//! holds ([`Warden`]); when that end closes, normally or because sandglass died (SIGKILL
//! included), the warden kills the whole cgroup (`cgroup.kill`) and removes it. Where no cgroup
//! can be made, [`set_child_subreaper`] makes orphaned descendants children of sandglass
//! instead of init, so that they can still be found and ended.

use crate::errno::{check, Errno};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// SIGKILL, as a number.
pub const SIGKILL: i32 = libc::SIGKILL;

/// The name the guardian process shows in `ps` (at most 15 bytes, as `comm` allows).
const GUARDIAN_NAME: &[u8] = b"sandglass-guard\0";
/// The name the warden process shows in `ps`.
const WARDEN_NAME: &[u8] = b"sandglass-wardn\0";

/// `DIR/FILE` as a C string, for use between fork and exec (where nothing may allocate).
fn c_path(dir: &Path, file: &str) -> Result<CString, Errno> {
    let mut bytes = dir.as_os_str().as_bytes().to_vec();
    bytes.push(b'/');
    bytes.extend_from_slice(file.as_bytes());
    CString::new(bytes).map_err(|_| Errno::EINVAL)
}

/// Writes `text` to the file at `path` with one `open` and one `write`; async-signal-safe.
///
/// # Safety
///
/// Callable in a forked child; `path` must be a valid C string.
unsafe fn write_file(path: &CString, text: &[u8]) -> bool {
    // SAFETY: open, write and close are plain system calls on memory we own.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, text.as_ptr().cast(), text.len());
        libc::close(fd);
        n == text.len() as isize
    }
}

/// Makes the process that `cmd` spawns the leader of a new process group that dies with the
/// spawning thread, guarded so that its whole group dies with it (see the module documentation).
///
/// With `cgroup`, the child first moves itself into that cgroup v2 directory (writing `0` to its
/// `cgroup.procs`), so that it and everything it starts stay there; spawning fails with the
/// kernel's error when the move is refused.
///
/// The child starts with no signal blocked and with SIGINT, SIGTERM, SIGHUP and SIGQUIT at
/// their default actions, whatever the spawning process inherited: a process started in the
/// background of a script, or under nohup, has some of them ignored, and an ignored signal stays
/// ignored across exec, so that a load asked to stop with SIGINT would run on until killed.
///
/// Spawning fails with `ESRCH` when the spawning process was already gone by the time the child
/// set its parent-death signal (the signal would then never come).
pub fn isolate(cmd: &mut Command, cgroup: Option<&Path>) -> Result<Option<Warden>, Errno> {
    let parent = crate::process::pid();
    let none_blocked = crate::signal::sigset(&[]);
    let procs = cgroup.map(|d| c_path(d, "cgroup.procs")).transpose()?;
    let mut warden_pipe = None;
    let mut warden_end = None;
    if let Some(dir) = cgroup {
        let kill = c_path(dir, "cgroup.kill")?;
        let dir = CString::new(dir.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
        // SAFETY: pipe2 just returned these descriptors, owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        warden_pipe = Some((read, kill, dir));
        warden_end = Some(Warden { _write_end: write });
    }
    // SAFETY: the closure runs in the child between fork and exec, where the process has a
    // single thread and only async-signal-safe functions may be called. It calls signal (to
    // restore default actions), sigprocmask (with a set prepared before the fork), open, write and close (on a path prepared before
    // the fork), setpgid, prctl, getppid, getpid and fork (all
    // async-signal-safe system calls) and builds
    // `io::Error` values from raw error numbers, which does not allocate. It touches no lock
    // and no memory shared with the parent's other threads. The guardian and the warden it
    // forks run only `guard` and `warden`, whose own SAFETY paragraphs cover them, and never
    // return into Rust code.
    unsafe {
        cmd.pre_exec(move || {
            for signo in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                if libc::signal(signo, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if libc::sigprocmask(libc::SIG_SETMASK, &none_blocked, std::ptr::null_mut()) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some((read, kill, dir)) = &warden_pipe {
                // Forked before the move, so the warden stays outside the cgroup it guards.
                if libc::fork() == 0 {
                    warden(read.as_raw_fd(), kill, dir);
                }
            }
            if let Some(procs) = &procs {
                if !write_file(procs, b"0") {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if libc::setpgid(0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            let leader = libc::getpid();
            if libc::fork() == 0 {
                guard(leader);
            }
            // Without a guardian (fork failed) the parent-death signal still covers the child.
            Ok(())
        });
    }
    Ok(warden_end)
}

/// The write end of the pipe a cgroup's warden waits on (see [`isolate`]): while it is open, the
/// warden sleeps; when it closes (dropped, or sandglass ends however it ends), the warden kills
/// the cgroup and removes it.
#[derive(Debug)]
pub struct Warden {
    _write_end: OwnedFd,
}

/// The warden's whole life: wait until every write end of its pipe has closed, then write `1` to
/// `cgroup.kill` (every process in the cgroup gets SIGKILL), remove the directory once it is
/// empty (trying for two seconds) and exit.
///
/// # Safety
///
/// Must be called only in a freshly forked single-threaded child, as `isolate` does.
unsafe fn warden(read_end: libc::c_int, kill: &CString, dir: &CString) -> ! {
    // SAFETY: as in `guard`: thin wrappers of system calls, safe in a forked child; the paths
    // were made before the fork and the read end is the only descriptor kept.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        libc::setsid();
        for fd in 0..read_end {
            libc::close(fd);
        }
        libc::syscall(
            libc::SYS_close_range,
            (read_end + 1) as libc::c_uint,
            libc::c_uint::MAX,
            0,
        );
        libc::prctl(
            libc::PR_SET_NAME,
            WARDEN_NAME.as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        let mut byte = 0u8;
        while libc::read(read_end, (&mut byte as *mut u8).cast(), 1) != 0 {
            if *libc::__errno_location() != libc::EINTR {
                break;
            }
        }
        write_file(kill, b"1");
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 10_000_000,
        };
        for _ in 0..200 {
            if libc::rmdir(dir.as_ptr()) == 0 || *libc::__errno_location() == libc::ENOENT {
                break;
            }
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
        libc::_exit(0);
    }
}

/// Closes every file descriptor of a forked child.
///
/// # Safety
///
/// Only in a forked child that needs none of its descriptors.
unsafe fn close_all() {
    // SAFETY: close_range and close take integers only.
    unsafe {
        if libc::syscall(
            libc::SYS_close_range,
            0 as libc::c_uint,
            libc::c_uint::MAX,
            0,
        ) != 0
        {
            for fd in 0..65_536 {
                libc::close(fd);
            }
        }
    }
}

/// Makes this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`): a
/// process whose parent ends becomes a child of this one instead of init's, so a descendant
/// that double-forks and calls `setsid` can still be found under this process and ended.
pub fn set_child_subreaper() -> Result<(), Errno> {
    // SAFETY: integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) })
        .map(|_| ())
}

/// Collects child `pid` if it has ended (`waitpid(WNOHANG)`); true when it was collected. Used
/// for orphans adopted as subreaper, which no `Child` handle waits for.
pub fn reap(pid: i32) -> bool {
    // SAFETY: plain integer arguments, no status wanted.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) == pid }
}

/// The guardian's whole life: wait for `leader` (the parent) to end, then kill its group.
///
/// # Safety
///
/// Must be called only in a freshly forked single-threaded child, as `isolate` does.
unsafe fn guard(leader: libc::pid_t) -> ! {
    // SAFETY: every call below is a thin wrapper of one system call (sigfillset, sigemptyset and
    // sigaddset only write the local sets), safe in a forked child: sigprocmask, close_range or
    // close, prctl, getppid, sigtimedwait, kill and _exit. Closing every descriptor is required:
    // the guardian must not hold the pipe through which the spawning process learns that exec
    // succeeded (it waits for that pipe to close), nor the child's output pipes.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        close_all();
        libc::prctl(
            libc::PR_SET_NAME,
            GUARDIAN_NAME.as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        let wake_signal = libc::SIGUSR1;
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            wake_signal as libc::c_ulong,
            0,
            0,
            0,
        );
        let mut wake: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut wake);
        libc::sigaddset(&mut wake, wake_signal);
        let poll = libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        loop {
            if libc::getppid() != leader {
                // The group is the leader's pid; this kills the guardian too.
                libc::kill(-leader, libc::SIGKILL);
                libc::_exit(0);
            }
            libc::sigtimedwait(&wake, std::ptr::null_mut(), &poll);
        }
    }
}

/// Sends `signo` to every process in group `pgid` (`kill(2)` with `-pgid`).
pub fn signal_group(pgid: i32, signo: i32) -> Result<(), Errno> {
    if pgid <= 1 {
        // kill(-1) would signal every process we may signal; kill(0) our own group.
        return Err(Errno::EINVAL);
    }
    // SAFETY: plain integer arguments; the kernel checks permission.
    check(unsafe { libc::kill(-pgid, signo) }).map(|_| ())
}

/// True while process group `pgid` has a member that is not a zombie.
///
/// `kill(-pgid, 0)` alone counts zombies, which an init that does not reap orphans can keep
/// forever; a group whose members have all exited is over even if nobody has reaped them.
pub fn group_alive(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: signal 0 only checks that the group exists and may be signalled.
    if unsafe { libc::kill(-pgid, 0) } == -1 && Errno::last() == Errno(libc::ESRCH) {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    dir.flatten().any(|e| {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            return false;
        };
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse_state_and_group(&s))
            .is_some_and(|(state, group)| group == pgid && state != 'Z' && state != 'X')
    })
}

/// The state letter and the process group of a `/proc/PID/stat` line (`proc(5)`: fields 3 and
/// 5; the command name in field 2 may contain spaces and parentheses, so parse after the last
/// `)`).
fn parse_state_and_group(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let group = fields.next()?.parse().ok()?;
    Some((state, group))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    /// Whether group `pgid` is gone within 20 s: a member left behind lives on for its
    /// `sleep 30`, so a bound under that (and far above the moment killing takes on a busy
    /// machine) still tells.
    fn wait_until_gone(pgid: i32) -> bool {
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if !group_alive(pgid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    fn group_of(pid: u32) -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_state_and_group(&stat).map(|(_, g)| g)
    }

    #[test]
    fn stat_lines_are_parsed_after_the_command_name() {
        let line = "4242 (a (b) c) S 1 4240 4240 0 -1 4194560 100 0 0 0";
        assert_eq!(parse_state_and_group(line), Some(('S', 4240)));
        assert_eq!(parse_state_and_group("garbage"), None);
    }

    #[test]
    fn an_isolated_child_leads_its_own_group_and_dies_with_it() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30").stdin(Stdio::null());
        isolate(&mut cmd, None).expect("isolate");
        let mut child = cmd.spawn().expect("spawn sleep");
        let pgid = child.id() as i32;
        assert_eq!(group_of(child.id()), Some(pgid));
        assert_ne!(pgid, crate::process::pid());
        assert!(group_alive(pgid));
        signal_group(pgid, SIGKILL).expect("kill group");
        let status = child.wait().expect("wait");
        assert_eq!(status.signal(), Some(SIGKILL));
        assert!(wait_until_gone(pgid), "group {pgid} still has members");
    }

    #[test]
    fn grandchildren_die_when_the_spawning_thread_ends() {
        // The shell runs `sleep` as a grandchild; only the guardian can end it.
        let child = std::thread::spawn(|| {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "sleep 30; true"]).stdin(Stdio::null());
            isolate(&mut cmd, None).expect("isolate");
            let child = cmd.spawn().expect("spawn sh");
            // Let the shell start its grandchild before this thread ends.
            std::thread::sleep(Duration::from_millis(200));
            child
        })
        .join()
        .expect("thread");
        let pgid = child.id() as i32;
        let mut child = child;
        let status = child.wait().expect("wait");
        assert_eq!(status.signal(), Some(SIGKILL), "{status:?}");
        assert!(wait_until_gone(pgid), "group {pgid} outlived its parent");
    }

    #[test]
    fn the_child_starts_with_no_signal_blocked() {
        std::thread::spawn(|| {
            crate::signal::block(&crate::signal::TERMINATING).expect("block");
            let mut cmd = Command::new("grep");
            cmd.args(["^SigBlk:", "/proc/self/status"])
                .stdin(Stdio::null());
            isolate(&mut cmd, None).expect("isolate");
            let out = cmd.output().expect("run grep");
            let text = String::from_utf8_lossy(&out.stdout);
            let mask = text.split_whitespace().nth(1).expect("SigBlk line");
            assert!(mask.bytes().all(|b| b == b'0'), "{text}");
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn the_child_starts_with_default_actions_for_what_ends_it() {
        // Ignored here as a script's background job or nohup would have it, and restored: SIGQUIT,
        // which nothing else in these tests uses.
        // SAFETY: signal() changes one disposition; the previous one is put back below.
        let previous = unsafe { libc::signal(libc::SIGQUIT, libc::SIG_IGN) };
        let mut cmd = Command::new("grep");
        cmd.args(["^SigIgn:", "/proc/self/status"])
            .stdin(Stdio::null());
        isolate(&mut cmd, None).expect("isolate");
        let out = cmd.output();
        // SAFETY: as above.
        unsafe { libc::signal(libc::SIGQUIT, previous) };
        let out = out.expect("run grep");
        let text = String::from_utf8_lossy(&out.stdout);
        let mask = text.split_whitespace().nth(1).expect("SigIgn line");
        let mask = u64::from_str_radix(mask, 16).expect("hex mask");
        assert_eq!(mask & (1 << (libc::SIGQUIT - 1)), 0, "{text}");
    }

    #[test]
    fn groups_that_do_not_exist() {
        assert!(!group_alive(0));
        assert!(!group_alive(1));
        assert_eq!(signal_group(1, 0), Err(Errno::EINVAL));
        // Pids wrap below pid_max (at most 2^22), so this group cannot exist.
        assert!(!group_alive(i32::MAX));
        assert_eq!(signal_group(i32::MAX, 0), Err(Errno(libc::ESRCH)));
    }
}
