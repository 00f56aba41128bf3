#![no_main]
//! `cargo +nightly fuzz run tracefs`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::tracefs(data));
