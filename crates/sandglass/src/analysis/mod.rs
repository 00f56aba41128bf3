//! Pure analyses of measured data.

pub mod admission;
pub mod busy;
pub mod datafile;
pub mod distribution;
pub mod edf;
pub mod fit;
pub mod mttf;
pub mod rng;
pub mod rta;
pub mod significance;
pub mod switch_cost;
pub mod tail;
pub mod taskfile;
pub mod trace;
pub mod two_rate;
pub mod worst_case;
