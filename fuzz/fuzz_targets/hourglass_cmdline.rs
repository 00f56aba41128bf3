#![no_main]
//! `cargo +nightly fuzz run hourglass_cmdline`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::hourglass_cmdline(data));
