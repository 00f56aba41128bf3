#![no_main]
//! `cargo +nightly fuzz run time_string`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::time_string(data));
