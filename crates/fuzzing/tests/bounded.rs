//! The bounded fuzz run of the test suite: every target of `sandglass_fuzzing::TARGETS` gets
//! every seed of its corpus (`fuzz/corpus/TARGET/`) and then a fixed number of inputs made by
//! mutating those seeds the way a fuzzer does (bit flips, inserted, deleted and repeated
//! bytes, splices of two seeds, interesting numbers and separators). proptest generates the
//! mutations from a fixed seed, so a run is reproducible, and shrinks a failing one to the
//! fewest mutations that still fail.
//!
//! `SANDGLASS_FUZZ_CASES=N` sets the mutated inputs per target (default 10000; a tenth of that
//! for `run_dir` and `parquet_table`, whose inputs are whole directories or read as one). The long, coverage-guided run is
//! cargo-fuzz's: see `fuzz/README.md`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use sandglass_fuzzing::{Target, TARGETS};
use std::path::PathBuf;

fn corpus_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name)
}

fn seeds(name: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(corpus_dir(name))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_file())
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read(e.path()).unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Bytes and tokens that make parsers take their rare paths.
const TOKENS: &[&[u8]] = &[
    b"0",
    b"-1",
    b"-0",
    b"18446744073709551615",
    b"18446744073709551616",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"4294967296",
    b"1e308",
    b"1e-308",
    b"NaN",
    b"inf",
    b"0x10",
    b".",
    b"..",
    b":",
    b",",
    b"-",
    b"+",
    b"@",
    b"=",
    b"\"",
    b"'",
    b"\\",
    b"[[",
    b"]]",
    b"{",
    b"}",
    b"\n",
    b"\r\n",
    b"\t",
    b"\0",
    b"\xff",
    b"\xc3\xa9",
    b"\xe2\x80\x8b",
    b"ns",
    b"us",
    b"\xc2\xb5s",
    b"ms",
    b"s",
    b"h",
    b"KiB",
    b"M",
    b"all",
    b"null",
    b"true",
    b"[]",
    b"{}",
    b"../",
    b"/",
];

#[derive(Clone, Debug)]
enum Mutation {
    FlipBit {
        at: usize,
        bit: u8,
    },
    SetByte {
        at: usize,
        value: u8,
    },
    Delete {
        at: usize,
        len: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Token {
        at: usize,
        token: usize,
        replace: usize,
    },
    Repeat {
        at: usize,
        len: usize,
        times: usize,
    },
    Splice {
        at: usize,
        other: usize,
        from: usize,
        len: usize,
    },
    Truncate {
        at: usize,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    prop_oneof![
        (at, 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        (at, any::<u8>()).prop_map(|(at, value)| Mutation::SetByte { at, value }),
        (at, 1usize..64).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (at, prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (at, 0..TOKENS.len(), 0usize..4)
            .prop_map(|(at, token, replace)| { Mutation::Token { at, token, replace } }),
        (at, 1usize..32, 1usize..64).prop_map(|(at, len, times)| Mutation::Repeat {
            at,
            len,
            times
        }),
        (at, any::<usize>(), any::<usize>(), 1usize..256).prop_map(|(at, other, from, len)| {
            Mutation::Splice {
                at,
                other,
                from,
                len,
            }
        }),
        at.prop_map(|at| Mutation::Truncate { at }),
    ]
}

fn apply(base: &[u8], mutations: &[Mutation], all: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut d = base.to_vec();
    for m in mutations {
        let pos = |at: usize, d: &Vec<u8>| at % (d.len() + 1);
        match m {
            Mutation::FlipBit { at, bit } => {
                if !d.is_empty() {
                    let i = at % d.len();
                    d[i] ^= 1 << bit;
                }
            }
            Mutation::SetByte { at, value } => {
                if !d.is_empty() {
                    let i = at % d.len();
                    d[i] = *value;
                }
            }
            Mutation::Delete { at, len } => {
                let i = pos(*at, &d);
                let end = (i + len).min(d.len());
                d.drain(i..end);
            }
            Mutation::Insert { at, bytes } => {
                let i = pos(*at, &d);
                d.splice(i..i, bytes.iter().copied());
            }
            Mutation::Token { at, token, replace } => {
                let i = pos(*at, &d);
                let end = (i + replace).min(d.len());
                d.splice(i..end, TOKENS[*token].iter().copied());
            }
            Mutation::Repeat { at, len, times } => {
                let i = pos(*at, &d);
                let end = (i + len).min(d.len());
                let chunk: Vec<u8> = d[i..end].to_vec();
                for _ in 0..*times {
                    d.splice(end..end, chunk.iter().copied());
                }
            }
            Mutation::Splice {
                at,
                other,
                from,
                len,
            } => {
                if let Some((_, o)) = all.get(other % all.len().max(1)) {
                    let f = from % (o.len() + 1);
                    let e = (f + len).min(o.len());
                    let i = pos(*at, &d);
                    d.splice(i..i, o[f..e].iter().copied());
                }
            }
            Mutation::Truncate { at } => {
                let i = pos(*at, &d);
                d.truncate(i);
            }
        }
    }
    d
}

fn cases(t: &Target) -> u32 {
    let n = std::env::var("SANDGLASS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000u32);
    if t.name == "run_dir" || t.name == "parquet_table" {
        (n / 10).max(1)
    } else {
        n
    }
}

fn fuzz(t: &Target) {
    let all = seeds(t.name);
    assert!(
        !all.is_empty(),
        "{}: no seeds in {} (python3 fuzz/seeds.py writes them)",
        t.name,
        corpus_dir(t.name).display()
    );
    for (name, data) in &all {
        let r = std::panic::catch_unwind(|| (t.run)(data));
        assert!(r.is_ok(), "{}: the seed {name} fails", t.name);
    }
    let config = Config {
        cases: cases(t),
        failure_persistence: None,
        ..Config::default()
    };
    // The same inputs on every run: a failure here is reproducible, not a flake.
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let n = all.len();
    let strategy = (
        0..n.max(1),
        prop::collection::vec(mutation(), 1..8),
        any::<bool>(),
    );
    let result = runner.run(&strategy, |(seed, mutations, empty_base)| {
        let base: &[u8] = if empty_base { &[] } else { &all[seed].1 };
        let input = apply(base, &mutations, &all);
        (t.run)(&input);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{} ({}): {e}", t.name, t.what);
    }
    println!(
        "{}: {} seeds and {} mutated inputs, no failure",
        t.name,
        all.len(),
        cases(t)
    );
}

macro_rules! targets {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                fuzz(sandglass_fuzzing::target(stringify!($name)).unwrap());
            }
        )*

        #[test]
        fn every_target_has_a_test_and_a_cargo_fuzz_target() {
            let tested = [$(stringify!($name)),*];
            for t in TARGETS {
                assert!(tested.contains(&t.name), "{} has no bounded test", t.name);
                let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../fuzz/fuzz_targets")
                    .join(format!("{}.rs", t.name));
                assert!(file.is_file(), "{} has no cargo-fuzz target {}", t.name, file.display());
            }
            assert_eq!(tested.len(), TARGETS.len());
        }
    };
}

targets!(
    time_string,
    cpu_list,
    policy,
    hourglass_cmdline,
    task_file,
    workload,
    study_file,
    pipeline_file,
    data_file,
    load_spec,
    option_value,
    run_dir,
    parquet_table,
    tracefs,
    procfs,
    http_request,
);
