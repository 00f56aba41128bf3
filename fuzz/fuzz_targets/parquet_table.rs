#![no_main]
//! `cargo +nightly fuzz run parquet_table`: see fuzz/README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandglass_fuzzing::parquet_table(data));
