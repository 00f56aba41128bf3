#![no_main]
//! `cargo +nightly fuzz run task_file`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::task_file(data));
