#![no_main]
//! `cargo +nightly fuzz run option_value`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::option_value(data));
