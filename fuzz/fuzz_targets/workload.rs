#![no_main]
//! `cargo +nightly fuzz run workload`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::workload(data));
