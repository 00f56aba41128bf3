//! sandglass measures, explains and predicts the timing service that Linux gives to
//! time-critical work, from user space.
//!
//! This crate is the library behind the `sandglass` command: units and time strings, CPU lists,
//! scheduling policies, Hourglass's thread models and command line, the execution-trace engine,
//! the clock calibration, the system snapshot and the run directory. It contains no `unsafe`;
//! every system call goes through `sandglass-sys`. Its core returns data and never prints.

#![forbid(unsafe_code)]

pub mod analysis;
pub mod bounded;
#[cfg(feature = "linux")]
pub mod catalog;
pub mod causes;
pub mod check;
pub mod clock;
pub mod compare;
#[cfg(feature = "linux")]
pub mod contain;
pub mod cpulist;
#[cfg(feature = "linux")]
pub mod cpulock;
pub mod duration;
pub mod engine;
pub mod experiments;
#[cfg(feature = "linux")]
pub mod fleet;
pub mod histo;
pub mod hourglass;
pub mod inputs;
pub mod kind;
pub mod live;
pub mod load;
pub mod merge;
pub mod microbench;
pub mod model;
#[cfg(feature = "linux")]
pub mod monitor;
pub mod noise;
#[cfg(feature = "linux")]
pub mod os;
pub mod plan;
pub mod policy;
pub mod printable;
pub mod probe;
pub mod registry;
#[cfg(feature = "linux")]
pub mod replay;
pub mod result;
pub mod runner;
#[cfg(feature = "linux")]
pub mod runtime;
pub mod stats;
pub mod stops;
pub mod store;
pub mod study;
#[cfg(feature = "linux")]
pub mod survey;
pub mod system;
pub mod timer;
pub mod units;
pub mod warning;

pub use kind::RunKind;
pub use units::Nanos;
