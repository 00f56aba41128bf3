#![no_main]
//! `cargo +nightly fuzz run policy`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::policy(data));
