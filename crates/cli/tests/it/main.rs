//! The command's integration tests, in one binary: each module tests one part of the command
//! line end to end against the built `sandglass`, and `common` holds what they share (the lock
//! that serialises tests using the machine's CPUs, the hang guards, the privilege check).
//!
//! One binary links the workspace once, and its tests share one lock, so a test that measures
//! never runs beside another that measures while the others run beside them.
//!
//!   cargo test -p sandglass-cli --test it                  # all of them
//!   cargo test -p sandglass-cli --test it -- kernel::      # one module

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bench;
mod catalog_owner;
mod check;
mod common;
mod compare;
mod contain;
mod conventions;
mod cpulock;
mod docs_examples;
mod export;
mod figures;
mod fleet;
mod golden;
mod heal;
mod hostile;
mod hostile_input;
mod html;
mod kernel;
mod load;
mod longrun;
mod monitor;
mod old_format;
mod resolve;
mod runs;
mod schema;
mod sources;
mod state;
mod study;
mod trace;
mod usage;
