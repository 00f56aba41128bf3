#![no_main]
//! `cargo +nightly fuzz run procfs`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::procfs(data));
