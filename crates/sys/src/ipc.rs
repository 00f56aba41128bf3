//! IPC and file primitives for the cost microbenchmarks: pipes, POSIX message queues, futexes,
//! eventfd, a shared-memory channel, read-only file mappings, `posix_fadvise` and `getrusage`.
//!
//! Dannenberg et al. (Mach testbed, CMU 1993, §8-9) compared in-line IPC, sockets, shared memory
//! with simple notifications and four ways to read a file; the Linux equivalents need a few
//! system calls that `std` does not offer. Each is wrapped here behind a safe, typed interface.
//! Sockets (UNIX stream and datagram, TCP loopback) come from `std` and need nothing here.
//!
//! The shared-memory channel ([`shm_channel`]) is the one composite: two one-slot mailboxes in
//! an `mmap(MAP_SHARED | MAP_ANONYMOUS)` region, one per direction, each guarded by a state word.
//! The producer copies a message in only while its slot is empty and the consumer copies it out
//! only while it is full, and each end is used through `&mut self`, so no byte is ever written
//! and read at the same time. The consumer is woken either by `FUTEX_WAKE` on the state word or
//! by an eventfd, which is the difference the two `shm-*` mechanisms of `sandglass bench ipc`
//! measure.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::clock::timespec_from_ns;
use crate::errno::{check, Errno};

/// A pipe: `(read end, write end)`, both close-on-exec (`pipe2(O_CLOEXEC)`).
pub fn pipe() -> Result<(File, File), Errno> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors are fresh and owned by nothing else; each is wrapped once.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((File::from(r), File::from(w)))
}

/// Sets the capacity of the pipe behind `end` (`fcntl(F_SETPIPE_SZ)`) and returns the capacity
/// the kernel chose (a power of two at least as large). Unprivileged callers are limited by
/// `/proc/sys/fs/pipe-max-size`.
pub fn set_pipe_capacity(end: &File, bytes: usize) -> Result<usize, Errno> {
    let want = libc::c_int::try_from(bytes).map_err(|_| Errno::EINVAL)?;
    // SAFETY: F_SETPIPE_SZ takes an int by value and touches no memory of ours.
    let got = check(unsafe { libc::fcntl(end.as_raw_fd(), libc::F_SETPIPE_SZ, want) })?;
    Ok(got as usize)
}

/// Distinguishes the queues this process creates.
static MQ_SERIAL: AtomicU64 = AtomicU64::new(0);

/// A POSIX message queue that has no name: it is created under a unique name and unlinked at
/// once, so it disappears when the last descriptor is closed, even if the process is killed.
#[derive(Debug)]
pub struct MessageQueue {
    mqd: libc::mqd_t,
    message_bytes: usize,
}

impl MessageQueue {
    /// Creates a queue holding up to `max_messages` messages of up to `message_bytes` bytes
    /// (`mq_open(O_CREAT | O_EXCL)` then `mq_unlink`).
    ///
    /// Unprivileged limits: `/proc/sys/fs/mqueue/msg_max` messages, `msgsize_max` bytes each,
    /// and RLIMIT_MSGQUEUE bytes in all of a user's queues; beyond them the kernel answers
    /// `EINVAL` or `EMFILE`.
    pub fn create_anonymous(
        max_messages: usize,
        message_bytes: usize,
    ) -> Result<MessageQueue, Errno> {
        let serial = MQ_SERIAL.fetch_add(1, Ordering::Relaxed);
        // SAFETY: getpid takes no arguments and cannot fail.
        let pid = unsafe { libc::getpid() };
        let name = std::ffi::CString::new(format!("/sandglass-{pid}-{serial}"))
            .map_err(|_| Errno::EINVAL)?;
        // SAFETY: all-zero is a valid mq_attr; the two fields the kernel reads are set below.
        let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
        attr.mq_maxmsg = libc::c_long::try_from(max_messages).map_err(|_| Errno::EINVAL)?;
        attr.mq_msgsize = libc::c_long::try_from(message_bytes).map_err(|_| Errno::EINVAL)?;
        // SAFETY: `name` is a NUL-terminated string and `attr` a valid mq_attr, both alive for
        // the call; with O_CREAT, mq_open reads the mode and the attribute pointer.
        let mqd = unsafe {
            libc::mq_open(
                name.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                0o600 as libc::mode_t,
                &mut attr as *mut libc::mq_attr,
            )
        };
        if mqd == -1 {
            return Err(Errno::last());
        }
        // SAFETY: `name` is the NUL-terminated name just created; unlinking only removes the
        // name, the open descriptor keeps the queue alive.
        unsafe {
            libc::mq_unlink(name.as_ptr());
        }
        Ok(MessageQueue { mqd, message_bytes })
    }

    /// The largest message the queue carries.
    pub fn message_bytes(&self) -> usize {
        self.message_bytes
    }

    /// Sends `data` at priority 0, waiting at most `timeout_ns` while the queue is full
    /// (`mq_timedsend`; `Err(ETIMEDOUT)` when no room came).
    pub fn send(&self, data: &[u8], timeout_ns: u64) -> Result<(), Errno> {
        if data.len() > self.message_bytes {
            return Err(Errno(libc::EMSGSIZE));
        }
        let deadline = crate::clock::now_ns(crate::clock::ClockId::Realtime) + timeout_ns;
        let ts = timespec_from_ns(deadline);
        // SAFETY: `data` is readable for its length; the descriptor is open while `self` lives;
        // `ts` is a valid absolute CLOCK_REALTIME time.
        check(unsafe { libc::mq_timedsend(self.mqd, data.as_ptr().cast(), data.len(), 0, &ts) })
            .map(|_| ())
    }

    /// Receives the oldest message into `buf` and returns its length, waiting at most
    /// `timeout_ns` (`mq_timedreceive`; `Err(ETIMEDOUT)` when nothing came). `buf` must hold
    /// [`MessageQueue::message_bytes`] bytes.
    pub fn receive(&self, buf: &mut [u8], timeout_ns: u64) -> Result<usize, Errno> {
        if buf.len() < self.message_bytes {
            return Err(Errno(libc::EMSGSIZE));
        }
        let deadline = crate::clock::now_ns(crate::clock::ClockId::Realtime) + timeout_ns;
        let ts = timespec_from_ns(deadline);
        // SAFETY: `buf` is writable for its length, which is at least the queue's message size
        // as mq_timedreceive requires; `ts` is a valid absolute CLOCK_REALTIME time; a null
        // priority pointer is allowed.
        let n = unsafe {
            libc::mq_timedreceive(
                self.mqd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                std::ptr::null_mut(),
                &ts,
            )
        };
        if n < 0 {
            Err(Errno::last())
        } else {
            Ok(n as usize)
        }
    }
}

impl Drop for MessageQueue {
    fn drop(&mut self) {
        // SAFETY: `self.mqd` was returned by mq_open and is closed exactly once.
        unsafe {
            libc::mq_close(self.mqd);
        }
    }
}

/// `FUTEX_WAIT_PRIVATE`: sleeps while `*word == expected`, for at most `timeout_ns` when given.
/// Returns `Ok(())` when woken (or spuriously), `Err(EAGAIN)` when the word already differed,
/// `Err(ETIMEDOUT)` on timeout and `Err(EINTR)` when a signal handler ran. The word must be used
/// only by threads of this process (private futex).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: Option<u64>) -> Result<(), Errno> {
    let ts = timeout_ns.map(timespec_from_ns);
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the call; the kernel
    // only reads it. `ts_ptr` is null or points to a timespec that outlives the call (a
    // relative timeout for FUTEX_WAIT).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
        )
    };
    check(ret as libc::c_int).map(|_| ())
}

/// `FUTEX_WAKE_PRIVATE`: wakes up to `count` threads waiting on `word`; returns how many woke.
pub fn futex_wake(word: &AtomicU32, count: u32) -> Result<usize, Errno> {
    let count = libc::c_int::try_from(count).unwrap_or(libc::c_int::MAX);
    // SAFETY: `word` is a live, aligned 32-bit atomic; FUTEX_WAKE only uses its address as a
    // key and never dereferences memory beyond it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            count,
        )
    };
    check(ret as libc::c_int).map(|n| n as usize)
}

/// An eventfd counter (`eventfd(0, EFD_CLOEXEC)`), blocking: [`EventFd::take`] waits until
/// the counter is non-zero, returns it and resets it to zero.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub fn new() -> Result<EventFd, Errno> {
        // SAFETY: plain integer arguments; the returned descriptor is owned from here on.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Adds `value` to the counter, waking a reader (`write` of 8 bytes).
    pub fn add(&self, value: u64) -> Result<(), Errno> {
        let buf = value.to_ne_bytes();
        // SAFETY: `buf` is 8 readable bytes, the size an eventfd write requires.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
        match n {
            8 => Ok(()),
            n if n < 0 => Err(Errno::last()),
            _ => Err(Errno(libc::EIO)),
        }
    }

    /// Waits until the counter is non-zero, then returns it and resets it (`read` of 8 bytes).
    pub fn take(&self) -> Result<u64, Errno> {
        let mut buf = [0u8; 8];
        // SAFETY: `buf` is 8 writable bytes, the size an eventfd read requires.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            8 => Ok(u64::from_ne_bytes(buf)),
            n if n < 0 => Err(Errno::last()),
            _ => Err(Errno(libc::EIO)),
        }
    }
}

/// A region of memory from `mmap(MAP_SHARED | MAP_ANONYMOUS)`, unmapped on drop.
#[derive(Debug)]
struct Region {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region is plain memory owned by this value. Every access from several threads
// goes through atomics in the header or through copies that the channel protocol below
// serialises (a slot's bytes are written only while its state is EMPTY by its one producer and
// read only while it is FULL by its one consumer).
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    fn map(len: usize) -> Result<Region, Errno> {
        // SAFETY: a fresh anonymous mapping: no address hint, no descriptor, no offset.
        // MAP_POPULATE prefaults the pages so that the first message pays no page fault.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        Ok(Region {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The atomic at byte `offset` (a multiple of 8 inside the header page).
    fn atomic(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset.is_multiple_of(8) && offset + 4 <= HEADER_BYTES);
        // SAFETY: `offset` lies in the mapping's first page, which is page-aligned (so the
        // address is 4-byte aligned) and lives as long as `self`; the bytes were zeroed by
        // mmap, a valid AtomicU32, and are only ever accessed atomically.
        unsafe { &*(self.ptr.add(offset) as *const AtomicU32) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` describe exactly the mapping created in `map`, unmapped once.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// How a shared-memory channel wakes the receiver of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notify {
    /// `FUTEX_WAKE` on the slot's state word; the receiver sleeps in `FUTEX_WAIT` on it.
    Futex,
    /// A write to an eventfd; the receiver sleeps in `read` on it.
    EventFd,
}

const EMPTY: u32 = 0;
const FULL: u32 = 1;
/// Full, and the producer sleeps until it is emptied.
const FULL_WAITING: u32 = 2;
const CLOSED: u32 = 3;
/// The header page: per slot, the state word at `slot·64`, the length at `slot·64 + 8` and the
/// closed flag at `slot·64 + 16`.
const HEADER_BYTES: usize = 4096;

/// One end of a shared-memory channel made by [`shm_channel`]. It sends into one slot and
/// receives from the other.
#[derive(Debug)]
pub struct ShmEnd {
    region: Arc<Region>,
    capacity: usize,
    tx: usize,
    notify: Notify,
    /// Eventfds by slot, when `notify` is [`Notify::EventFd`].
    events: Option<Arc<[EventFd; 2]>>,
    closed: bool,
}

/// A channel of two one-slot mailboxes in shared memory, each carrying messages of up to
/// `capacity` bytes: the first end sends into slot 0 and receives from slot 1, the second the
/// other way round. Dropping an end closes it: the peer's receive returns `Ok(None)` and its
/// send `Err(EPIPE)`.
pub fn shm_channel(capacity: usize, notify: Notify) -> Result<(ShmEnd, ShmEnd), Errno> {
    let page = crate::mem::page_size();
    let slot = capacity.max(1).div_ceil(page) * page;
    let len = slot
        .checked_mul(2)
        .and_then(|s| s.checked_add(HEADER_BYTES))
        .ok_or(Errno::ENOMEM)?;
    let region = Arc::new(Region::map(len)?);
    let events = match notify {
        Notify::Futex => None,
        Notify::EventFd => Some(Arc::new([EventFd::new()?, EventFd::new()?])),
    };
    let end = |tx| ShmEnd {
        region: region.clone(),
        capacity,
        tx,
        notify,
        events: events.clone(),
        closed: false,
    };
    Ok((end(0), end(1)))
}

impl ShmEnd {
    /// The largest message this channel carries.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn state(&self, slot: usize) -> &AtomicU32 {
        self.region.atomic(slot * 64)
    }

    fn length(&self, slot: usize) -> &AtomicU32 {
        self.region.atomic(slot * 64 + 8)
    }

    /// Set (never cleared) when either end closed: no message will follow the one in flight.
    fn closed_flag(&self, slot: usize) -> &AtomicU32 {
        self.region.atomic(slot * 64 + 16)
    }

    fn data(&self, slot: usize) -> *mut u8 {
        let slot_bytes = (self.region.len - HEADER_BYTES) / 2;
        // SAFETY: HEADER_BYTES + slot·slot_bytes is inside the mapping for slot 0 and 1.
        unsafe { self.region.ptr.add(HEADER_BYTES + slot * slot_bytes) }
    }

    fn wake_receiver(&self, slot: usize) -> Result<(), Errno> {
        match (&self.events, self.notify) {
            (Some(ev), Notify::EventFd) => ev[slot].add(1),
            _ => futex_wake(self.state(slot), 1).map(|_| ()),
        }
    }

    fn wait_for_data(&self, slot: usize) -> Result<(), Errno> {
        let r = match (&self.events, self.notify) {
            (Some(ev), Notify::EventFd) => ev[slot].take().map(|_| ()),
            _ => futex_wait(self.state(slot), EMPTY, None),
        };
        match r {
            Err(e) if e == Errno::EAGAIN || e == Errno::EINTR => Ok(()),
            other => other,
        }
    }

    /// Copies `data` into the outgoing slot once it is empty and wakes the receiver.
    /// `Err(EMSGSIZE)` when `data` exceeds the capacity, `Err(EPIPE)` when the peer closed.
    pub fn send(&mut self, data: &[u8]) -> Result<(), Errno> {
        if data.len() > self.capacity {
            return Err(Errno(libc::EMSGSIZE));
        }
        if self.closed {
            return Err(Errno(libc::EPIPE));
        }
        let slot = self.tx;
        let state = self.state(slot);
        loop {
            if self.closed_flag(slot).load(Ordering::SeqCst) != 0 {
                return Err(Errno(libc::EPIPE));
            }
            match state.load(Ordering::Acquire) {
                EMPTY => break,
                CLOSED => return Err(Errno(libc::EPIPE)),
                FULL => {
                    let _ = state.compare_exchange(
                        FULL,
                        FULL_WAITING,
                        Ordering::Acquire,
                        Ordering::Acquire,
                    );
                }
                _ => match futex_wait(state, FULL_WAITING, None) {
                    Ok(()) => {}
                    Err(e) if e == Errno::EAGAIN || e == Errno::EINTR => {}
                    Err(e) => return Err(e),
                },
            }
        }
        // SAFETY: this end is the slot's only producer (it is used through `&mut self`) and the
        // Acquire load above saw EMPTY, which the consumer stores with Release after its last
        // read of the slot, so nobody reads these bytes now; `data.len()` is at most the
        // capacity, which the slot holds; source and destination do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.data(slot), data.len());
        }
        self.length(slot)
            .store(data.len() as u32, Ordering::Relaxed);
        if state
            .compare_exchange(EMPTY, FULL, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return Err(Errno(libc::EPIPE));
        }
        self.wake_receiver(slot)
    }

    /// Waits for a message in the incoming slot, copies it into `buf` and returns its length,
    /// or `Ok(None)` when the peer closed. `Err(EMSGSIZE)` when `buf` is too small (the
    /// message stays in the slot).
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<Option<usize>, Errno> {
        let slot = 1 - self.tx;
        let state = self.state(slot);
        loop {
            match state.load(Ordering::Acquire) {
                FULL | FULL_WAITING => break,
                CLOSED => return Ok(None),
                _ if self.closed_flag(slot).load(Ordering::SeqCst) != 0 => return Ok(None),
                _ => self.wait_for_data(slot)?,
            }
        }
        let n = self.length(slot).load(Ordering::Relaxed) as usize;
        if n > buf.len() || n > self.capacity {
            return Err(Errno(libc::EMSGSIZE));
        }
        // SAFETY: this end is the slot's only consumer and the Acquire load saw FULL, which the
        // producer stores with Release after writing the `n` bytes; the producer does not touch
        // them again until it sees EMPTY, stored below after the copy. `n` fits both the slot
        // and `buf`, which do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data(slot), buf.as_mut_ptr(), n);
        }
        if state.swap(EMPTY, Ordering::SeqCst) == FULL_WAITING {
            futex_wake(state, 1)?;
        }
        Ok(Some(n))
    }

    /// Closes this end: the peer's next receive returns `Ok(None)` once it has taken the
    /// message in flight, and its next send fails with `EPIPE`.
    ///
    /// The outgoing slot keeps a message in flight: its closed flag is set first and its state
    /// becomes CLOSED only if it is empty; a receiver that finds it empty afterwards sees the
    /// flag (the flag store, the failed or successful exchange and the receiver's exchange and
    /// flag load are all sequentially consistent, so the flag is never missed). The incoming
    /// slot is closed outright, which also wakes a peer waiting for it to empty.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let (tx, rx) = (self.tx, 1 - self.tx);
        self.closed_flag(tx).store(1, Ordering::SeqCst);
        let _ = self
            .state(tx)
            .compare_exchange(EMPTY, CLOSED, Ordering::SeqCst, Ordering::SeqCst);
        let _ = futex_wake(self.state(tx), u32::MAX);
        if let Some(ev) = &self.events {
            let _ = ev[tx].add(1);
        }
        self.closed_flag(rx).store(1, Ordering::SeqCst);
        self.state(rx).swap(CLOSED, Ordering::SeqCst);
        let _ = futex_wake(self.state(rx), u32::MAX);
    }
}

impl Drop for ShmEnd {
    fn drop(&mut self) {
        self.close();
    }
}

/// Resource usage of the calling thread or of the whole process (`getrusage(2)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rusage {
    pub user_ns: u64,
    pub system_ns: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    /// Blocks read from storage (512-byte units).
    pub blocks_in: u64,
    /// Blocks written to storage (512-byte units).
    pub blocks_out: u64,
}

/// Whose usage [`rusage`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RusageWho {
    /// `RUSAGE_THREAD`: the calling thread.
    Thread,
    /// `RUSAGE_SELF`: every thread of the process.
    Process,
}

/// Reads resource usage.
pub fn rusage(who: RusageWho) -> Result<Rusage, Errno> {
    let who = match who {
        RusageWho::Thread => libc::RUSAGE_THREAD,
        RusageWho::Process => libc::RUSAGE_SELF,
    };
    // SAFETY: all-zero is a valid rusage.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is writable.
    check(unsafe { libc::getrusage(who, &mut r) })?;
    let tv = |t: libc::timeval| (t.tv_sec as u64) * 1_000_000_000 + (t.tv_usec as u64) * 1_000;
    let n = |v: libc::c_long| v.max(0) as u64;
    Ok(Rusage {
        user_ns: tv(r.ru_utime),
        system_ns: tv(r.ru_stime),
        minor_faults: n(r.ru_minflt),
        major_faults: n(r.ru_majflt),
        voluntary_switches: n(r.ru_nvcsw),
        involuntary_switches: n(r.ru_nivcsw),
        blocks_in: n(r.ru_inblock),
        blocks_out: n(r.ru_oublock),
    })
}

/// Asks the kernel to drop the cached pages of `file` in `offset..offset + len` (`len` 0 means
/// to the end) with `posix_fadvise(POSIX_FADV_DONTNEED)`. Only clean pages are dropped: write
/// the file back first (`File::sync_all`).
pub fn fadvise_dontneed(file: &File, offset: u64, len: u64) -> Result<(), Errno> {
    fadvise(file, offset, len, libc::POSIX_FADV_DONTNEED)
}

/// Tells the kernel that `file` will be read sequentially (`POSIX_FADV_SEQUENTIAL`), which
/// doubles its read-ahead window.
pub fn fadvise_sequential(file: &File) -> Result<(), Errno> {
    fadvise(file, 0, 0, libc::POSIX_FADV_SEQUENTIAL)
}

/// Tells the kernel that `file` will be read at random (`POSIX_FADV_RANDOM`), which turns its
/// read-ahead off: every read of an uncached page then waits for storage.
pub fn fadvise_random(file: &File) -> Result<(), Errno> {
    fadvise(file, 0, 0, libc::POSIX_FADV_RANDOM)
}

fn fadvise(file: &File, offset: u64, len: u64, advice: libc::c_int) -> Result<(), Errno> {
    let offset = libc::off_t::try_from(offset).map_err(|_| Errno::EINVAL)?;
    let len = libc::off_t::try_from(len).map_err(|_| Errno::EINVAL)?;
    // SAFETY: plain integer arguments on an open descriptor; posix_fadvise returns the error
    // number instead of setting errno.
    let ret = unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, advice) };
    if ret == 0 {
        Ok(())
    } else {
        Err(Errno(ret))
    }
}

/// Opens `path` for reading with `O_DIRECT`: reads bypass the page cache and must use buffers,
/// offsets and lengths aligned to the device's logical block size (4096 bytes is always
/// enough). Filesystems without direct I/O (tmpfs) answer `EINVAL`.
pub fn open_direct(path: &std::path::Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// A read-only private mapping of a file (`mmap(PROT_READ, MAP_PRIVATE)`), unmapped on drop.
///
/// The mapping is read only through [`MappedFile::sum_words`] and [`MappedFile::copy_out`],
/// never handed out as a slice. As with any file mapping, the file must not shrink while mapped:
/// touching a page past its end raises SIGBUS. sandglass maps only files it created itself in a
/// private directory.
#[derive(Debug)]
pub struct MappedFile {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value; concurrent reads are fine.
unsafe impl Send for MappedFile {}
// SAFETY: as above.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps the first `len` bytes of `file` (which must be open for reading). `len` must be
    /// positive.
    pub fn map(file: &File, len: usize) -> Result<MappedFile, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: no address hint; the descriptor is open for reading; offset 0. The kernel
        // checks the length against nothing, so the caller's `len` is bounded by the file size
        // that callers pass (pages past the end would fault when touched, see the type's doc).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        Ok(MappedFile {
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slice(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `offset..end` lies inside the mapping, which is readable and lives as long as
        // `self`; the file is not modified while mapped (see the type's doc), so the bytes do
        // not change while the slice exists; the slice never leaves this value's methods.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) })
    }

    /// The wrapping sum of the little-endian 64-bit words in `offset..offset + len` (a partial
    /// last word is zero-padded), which touches every page of the range. `None` when the range
    /// is outside the mapping.
    pub fn sum_words(&self, offset: usize, len: usize) -> Option<u64> {
        self.slice(offset, len).map(word_sum)
    }

    /// Copies `buf.len()` bytes from `offset` into `buf`; `None` when out of range.
    pub fn copy_out(&self, offset: usize, buf: &mut [u8]) -> Option<()> {
        buf.copy_from_slice(self.slice(offset, buf.len())?);
        Some(())
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` describe exactly the mapping created in `map`, unmapped once.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// The wrapping sum of the little-endian 64-bit words of `data`, a partial last word
/// zero-padded: the checksum every file-read method of `sandglass bench file` computes over
/// what it read.
pub fn word_sum(data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(8);
    let mut sum = 0u64;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        sum = sum.wrapping_add(u64::from_le_bytes(w));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        sum = sum.wrapping_add(u64::from_le_bytes(w));
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn pipe_carries_bytes() {
        let (mut r, mut w) = pipe().expect("pipe");
        w.write_all(b"token").expect("write");
        let mut buf = [0u8; 5];
        r.read_exact(&mut buf).expect("read");
        assert_eq!(&buf, b"token");
        assert!(set_pipe_capacity(&w, 1 << 16).expect("F_SETPIPE_SZ") >= 1 << 16);
    }

    #[test]
    fn message_queue_round_trip_and_limits() {
        let q = MessageQueue::create_anonymous(4, 128).expect("mq_open");
        assert_eq!(q.message_bytes(), 128);
        q.send(b"hello", 1_000_000_000).expect("send");
        q.send(&[7u8; 128], 1_000_000_000).expect("send full size");
        assert_eq!(q.send(&[0u8; 129], 0), Err(Errno(libc::EMSGSIZE)));
        let mut buf = [0u8; 128];
        assert_eq!(q.receive(&mut buf, 1_000_000_000), Ok(5));
        assert_eq!(&buf[..5], b"hello");
        assert_eq!(q.receive(&mut buf, 1_000_000_000), Ok(128));
        assert!(buf.iter().all(|&b| b == 7));
        assert_eq!(
            q.receive(&mut buf, 1_000_000),
            Err(Errno(libc::ETIMEDOUT)),
            "an empty queue times out"
        );
        assert_eq!(
            q.receive(&mut [0u8; 8], 1_000_000),
            Err(Errno(libc::EMSGSIZE))
        );
        for _ in 0..4 {
            q.send(b"", 1_000_000_000).expect("room for four");
        }
        assert_eq!(
            q.send(b"", 1_000_000),
            Err(Errno(libc::ETIMEDOUT)),
            "a full queue times out"
        );
    }

    #[test]
    fn futex_wakes_a_waiter() {
        let word = Arc::new(AtomicU32::new(0));
        let w2 = word.clone();
        let h = std::thread::spawn(move || {
            while w2.load(Ordering::Acquire) == 0 {
                let _ = futex_wait(&w2, 0, Some(1_000_000_000));
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        word.store(1, Ordering::Release);
        futex_wake(&word, 1).expect("wake");
        h.join().expect("join");
        assert_eq!(futex_wait(&word, 0, None), Err(Errno::EAGAIN));
        assert_eq!(
            futex_wait(&word, 1, Some(1_000_000)),
            Err(Errno(libc::ETIMEDOUT))
        );
    }

    #[test]
    fn eventfd_counts() {
        let e = EventFd::new().expect("eventfd");
        e.add(2).expect("add");
        e.add(3).expect("add");
        assert_eq!(e.take(), Ok(5));
    }

    fn ping_pong(notify: Notify) {
        let (mut a, mut b) = shm_channel(10_000, notify).expect("channel");
        assert_eq!(a.capacity(), 10_000);
        let h = std::thread::spawn(move || {
            let mut buf = vec![0u8; 10_000];
            while let Some(n) = b.recv(&mut buf).expect("recv") {
                b.send(&buf[..n]).expect("echo");
            }
        });
        let mut reply = vec![0u8; 10_000];
        for n in [0usize, 1, 7, 4096, 10_000] {
            let msg: Vec<u8> = (0..n).map(|i| (i * 31 + n) as u8).collect();
            a.send(&msg).expect("send");
            assert_eq!(a.recv(&mut reply).expect("recv"), Some(n));
            assert_eq!(&reply[..n], &msg[..]);
        }
        assert_eq!(a.send(&[0u8; 10_001]), Err(Errno(libc::EMSGSIZE)));
        drop(a);
        h.join().expect("the echo thread sees the close");
    }

    #[test]
    fn shm_channel_with_futex() {
        ping_pong(Notify::Futex);
    }

    #[test]
    fn shm_channel_with_eventfd() {
        ping_pong(Notify::EventFd);
    }

    #[test]
    fn shm_send_after_peer_closed_fails() {
        let (mut a, b) = shm_channel(16, Notify::Futex).expect("channel");
        drop(b);
        assert_eq!(a.send(b"x"), Err(Errno(libc::EPIPE)));
        assert_eq!(a.recv(&mut [0u8; 16]), Ok(None));
    }

    #[test]
    fn mapped_file_sums_and_copies() {
        let dir = std::env::temp_dir().join(format!("sandglass-ipc-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("data");
        let data: Vec<u8> = (0..10_001u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        let f = File::open(&path).expect("open");
        let m = MappedFile::map(&f, data.len()).expect("mmap");
        assert_eq!(m.len(), data.len());
        assert_eq!(m.sum_words(0, data.len()), Some(word_sum(&data)));
        assert_eq!(m.sum_words(1, data.len()), None);
        let mut buf = [0u8; 16];
        m.copy_out(100, &mut buf).expect("in range");
        assert_eq!(&buf, &data[100..116]);
        f.sync_all().expect("fsync");
        fadvise_dontneed(&f, 0, 0).expect("fadvise");
        match open_direct(&path) {
            Ok(_) => {}
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}"),
        }
        fadvise_sequential(&f).expect("fadvise");
        fadvise_random(&f).expect("fadvise");
        drop(m);
        std::fs::remove_dir_all(&dir).expect("cleanup");
        assert!(MappedFile::map(&f, 0).is_err());
    }

    #[test]
    fn word_sum_pads_the_last_word() {
        assert_eq!(word_sum(&[]), 0);
        assert_eq!(word_sum(&[1]), 1);
        assert_eq!(word_sum(&[0, 1]), 256);
        let mut v = vec![0u8; 16];
        v[0] = 2;
        v[8] = 3;
        assert_eq!(word_sum(&v), 5);
        assert_eq!(word_sum(&[0xff; 16]), u64::MAX.wrapping_add(u64::MAX));
    }

    #[test]
    fn rusage_reports_cpu_time() {
        let before = rusage(RusageWho::Thread).expect("getrusage");
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let after = rusage(RusageWho::Thread).expect("getrusage");
        assert!(after.user_ns + after.system_ns >= before.user_ns + before.system_ns);
        assert!(rusage(RusageWho::Process).is_ok());
    }
}
