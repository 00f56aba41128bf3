//! Pure analyses of measured data.

pub mod trace;
