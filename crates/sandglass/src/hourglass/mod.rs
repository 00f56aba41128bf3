//! Hourglass (Regehr, USENIX 2002) on Linux: the command line, the plan, the run and its result.

pub mod cmdline;
pub mod result;
#[cfg(feature = "linux")]
pub mod run;
pub mod siblings;
