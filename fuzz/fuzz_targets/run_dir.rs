#![no_main]
//! `cargo +nightly fuzz run run_dir`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::run_dir(data));
