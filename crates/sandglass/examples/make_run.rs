//! Writes a timer run of N samples replayed by the real engine on a scripted clock
//! (`sandglass::replay`), through the same store as a measured run: for trying the readers
//! (`report`, the exports, `compare`, `analyze … --run`) on runs of any size.
//!
//! ```text
//! cargo run --release -p sandglass --example make_run -- SAMPLES DIR [--cpus N] [--interval T] [--seed S]
//! ```
//!
//! SAMPLES is the total over the CPUs (`36M` and `1e6` are accepted); the run lasts
//! SAMPLES / N intervals (default: 1 CPU at 100 µs, so 36M samples are one hour at 10 kHz).

use sandglass::replay::{self, TimerReplay};
use sandglass::store::Tool;
use sandglass::Nanos;
use std::path::PathBuf;
use std::process::ExitCode;

fn count(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, scale) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 1e3),
        (i, 'M') => (&t[..i], 1e6),
        (i, 'G') => (&t[..i], 1e9),
        _ => (t, 1.0),
    };
    let v = digits.parse::<f64>().ok()? * scale;
    (v.is_finite() && v >= 1.0).then_some(v.round() as u64)
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("make_run: {msg}");
    eprintln!("usage: make_run SAMPLES DIR [--cpus N] [--interval T] [--seed S]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut positional = Vec::new();
    let (mut cpus, mut interval, mut seed) = (1usize, Nanos::from_micros(100), 1u64);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let parsed = match a.as_str() {
            "--cpus" => value("--cpus").and_then(|v| {
                v.parse::<usize>()
                    .ok()
                    .filter(|&n| (1..=64).contains(&n))
                    .map(|n| cpus = n)
                    .ok_or(format!("--cpus {v}: give a number of CPUs from 1 to 64"))
            }),
            "--interval" => value("--interval").and_then(|v| {
                sandglass::duration::parse(&v)
                    .map(|d| interval = d)
                    .map_err(|e| format!("--interval {v}: {e}"))
            }),
            "--seed" => value("--seed").and_then(|v| {
                v.parse::<u64>()
                    .map(|s| seed = s)
                    .map_err(|_| format!("--seed {v}: give a whole number"))
            }),
            other if other.starts_with("--") => Err(format!("unknown option {other}")),
            other => {
                positional.push(other.to_string());
                Ok(())
            }
        };
        if let Err(e) = parsed {
            return usage(&e);
        }
    }
    let [samples, dir] = positional.as_slice() else {
        return usage("give the number of samples and the run directory");
    };
    let Some(samples) = count(samples) else {
        return usage(&format!(
            "'{samples}' is not a number of samples, such as 36M"
        ));
    };
    let per_cpu = samples.div_ceil(cpus as u64);
    let duration = Nanos(per_cpu.saturating_mul(interval.0));
    let spec = TimerReplay::new(&(1..=cpus).collect::<Vec<_>>(), interval, duration, seed);
    let tool = Tool {
        name: "sandglass".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        commit: "replay".into(),
    };
    let t0 = std::time::Instant::now();
    match replay::timer(&PathBuf::from(dir), &spec, tool) {
        Ok(r) => {
            let n: u64 = r.cpus.iter().map(|c| c.samples_stored).sum();
            eprintln!(
                "make_run: {n} samples ({cpus} CPU(s), {} at {}) written to {dir} in {:.1} s",
                duration,
                interval,
                t0.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("make_run: {e}");
            ExitCode::from(1)
        }
    }
}
