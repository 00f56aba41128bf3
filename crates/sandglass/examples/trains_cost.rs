//! The cost of the periodic-train search (`causes::trains::find_trains`) on the inputs that make
//! it work hardest: many spikes at random times, or time slicing on the tick, timed on one
//! search and with the process's peak memory.
//!
//! ```text
//! cargo run --release -p sandglass --example trains_cost -- random SPIKES SECONDS [SEED]
//! cargo run --release -p sandglass --example trains_cost -- slicing SPIKES [SEED]
//! ```
//!
//! `random`: SPIKES spikes at uniformly random times over SECONDS, sized log-uniformly from
//! 10 µs to 10 ms (a traced run keeps every spike; without `--trace` a CPU keeps at most
//! 8,192). `slicing`: SPIKES delays of 2.4 to 3.6 ms at 1 to 4 ticks of 3 ms, as a SCHED_OTHER
//! competitor's slices make them. Prints the search's time, the peak resident memory of the
//! whole process (`VmHWM`, the input included) and the trains found, which should be none.

use sandglass::analysis::rng::SplitMix64;
use sandglass::causes::trains::{find_trains, Spike, TrainConfig};
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: trains_cost random SPIKES SECONDS [SEED] | slicing SPIKES [SEED]";

fn random(n: usize, span_ns: u64, seed: u64) -> Vec<Spike> {
    let mut r = SplitMix64::new(seed);
    (0..n)
        .map(|_| {
            let u = r.below(1_000_000) as f64 / 1e6;
            Spike {
                at_ns: r.below(span_ns),
                size_ns: (10_000.0 * 1000f64.powf(u)) as u64,
            }
        })
        .collect()
}

fn slicing(n: usize, seed: u64) -> Vec<Spike> {
    let mut r = SplitMix64::new(seed);
    let mut t = 0u64;
    (0..n)
        .map(|_| {
            t += (1 + r.below(4)) * 3_000_000;
            Spike {
                at_ns: t + r.below(400_000),
                size_ns: 2_400_000 + r.below(1_200_000),
            }
        })
        .collect()
}

/// The process's peak resident memory in KiB, from `/proc/self/status`.
fn peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn spikes(args: &[String]) -> Option<Vec<Spike>> {
    let number = |i: usize| args.get(i).and_then(|x| x.parse::<u64>().ok());
    match args.first().map(String::as_str) {
        Some("random") => {
            let (n, seconds) = (number(1)?, number(2)?);
            Some(random(
                n as usize,
                seconds.checked_mul(1_000_000_000)?,
                number(3).unwrap_or(9),
            ))
        }
        Some("slicing") => Some(slicing(number(1)? as usize, number(2).unwrap_or(9))),
        _ => None,
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(spikes) = spikes(&args) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let started = Instant::now();
    let trains = find_trains(&spikes, &TrainConfig::default());
    let took = started.elapsed();
    println!(
        "{} spikes: {:.3} s, peak memory {} KiB, {} train(s)",
        spikes.len(),
        took.as_secs_f64(),
        peak_kib().map_or("unknown".to_string(), |k| k.to_string()),
        trains.len()
    );
    for t in &trains {
        println!(
            "  every {:.3} ms: {} of {} slots, typical {:.1} µs, first at {:.3} s, chance {:.2e}",
            t.period_ns as f64 / 1e6,
            t.count,
            t.slots,
            t.typical_ns as f64 / 1e3,
            t.first_ns as f64 / 1e9,
            t.chance
        );
    }
    ExitCode::SUCCESS
}
