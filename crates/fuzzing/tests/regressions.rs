//! Every input a fuzzer found to break a parser, as a test named after what broke. Each holds
//! the input as the fuzzer saved it (`fuzz/artifacts/TARGET/crash-...`), run through the same
//! entry point, so the fix is proven against the original case.

/// `runs --since 2525M2m525M2m`: an age reaching back before 1970 gave a time the RFC 3339
/// formatter panicked on. Now an error naming the range. (libFuzzer, `option_value`, first
/// byte 0x32 selecting `--since`/`--until`.)
#[test]
fn since_with_an_age_older_than_1970_is_an_error_not_a_panic() {
    sandglass_fuzzing::option_value(b"2525M2m525M2m");
}

/// The same with the largest age a time string can give, and a date whose end of day is past
/// the year 9999.
#[test]
fn since_and_until_at_the_ends_of_the_calendar_are_errors_not_panics() {
    sandglass_fuzzing::option_value(b"\x0b18446744073709551615s");
    sandglass_fuzzing::option_value(b"\x0b9999-12-31");
    sandglass_fuzzing::option_value(b"\x0b0000-01-01");
}
