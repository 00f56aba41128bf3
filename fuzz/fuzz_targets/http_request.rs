#![no_main]
//! `cargo +nightly fuzz run http_request`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::http_request(data));
