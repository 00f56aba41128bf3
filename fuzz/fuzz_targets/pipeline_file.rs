#![no_main]
//! `cargo +nightly fuzz run pipeline_file`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::pipeline_file(data));
