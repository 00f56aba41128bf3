//! The system layer of sandglass: the only crate of the workspace that contains `unsafe`.
//!
//! Every function here wraps one kernel or CPU facility behind a safe, typed interface: the cycle
//! counter ([`counter`]), POSIX clocks and sleeps ([`clock`]), scheduling policies and CPU affinity
//! ([`sched`]), memory locking ([`mem`]), the timer sources a measuring thread can block on
//! ([`timer`]), signals used to stop and wake threads ([`signal`]) and facts about the process
//! ([`process`]). Nothing here decides policy, prints or allocates in a way a hot loop would see;
//! the `sandglass` library composes these pieces.
//!
//! Conventions, following rustix and nix: kernel errors are returned as [`Errno`] values, never
//! as panics; absolute and relative sleeps are separate functions; kernel constants come from
//! `libc`, not from magic numbers. Every `unsafe` block carries a `SAFETY:` paragraph.

pub mod child;
pub mod clock;
pub mod counter;
pub mod errno;
pub mod fsaccess;
pub mod ipc;
pub mod mem;
pub mod process;
pub mod sched;
pub mod signal;
pub mod timer;
pub mod tty;

pub use errno::Errno;
pub use sched::Tid;
