#![no_main]
//! `cargo +nightly fuzz run load_spec`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::load_spec(data));
