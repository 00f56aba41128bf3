//! Explaining long delays (capability C4): what ran on a CPU while a measured thread waited.
//!
//! Built so far: the parsers of the `/proc` files that an unprivileged sampler reads
//! ([`procfs`]) and the detector of periodic trains of delays ([`trains`]).

pub mod procfs;
pub mod trains;
