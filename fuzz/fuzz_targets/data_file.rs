#![no_main]
//! `cargo +nightly fuzz run data_file`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::data_file(data));
