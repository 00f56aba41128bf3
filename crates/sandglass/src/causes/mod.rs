//! Explaining long delays (capability C4): what ran on a CPU while a measured thread waited.
//!
//! Built so far: the parsers of the `/proc` files that the unprivileged sampler reads
//! ([`procfs`]), the sampler and its per-interval deltas ([`sampler`]), the coarse explanation
//! of spikes by the sources that were abnormal around them ([`explain`]), and the detector of
//! periodic trains of delays ([`trains`]).

pub mod explain;
pub mod procfs;
pub mod sampler;
pub mod trains;
