#![no_main]
//! `cargo +nightly fuzz run cpu_list`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::cpu_list(data));
