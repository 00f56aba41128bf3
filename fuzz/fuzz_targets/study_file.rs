#![no_main]
//! `cargo +nightly fuzz run study_file`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::study_file(data));
