//! `sandglass bench`: cost microbenchmarks (memory copy, IPC, context switches, file reads,
//! timer overhead, per-frame budgets). Every kind saves a run directory, prints a table, or one
//! JSON object with `--json`.

use crate::common::{context, exit_code_for, policy_arg, print_json, time_arg, Console, Failure};
use clap::{Args, Subcommand};
use sandglass::microbench::{self, budget, copy, ctxsw, file, ipc, timer_overhead};
use sandglass::runner::RunError;
use sandglass::store::RunState;
use std::io::{self, Write};
use std::path::PathBuf;

/// Options of `sandglass bench`.
#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub kind: BenchKind,
    #[command(flatten)]
    pub run: crate::common::RunFlags,
}

/// The benchmarks.
#[derive(Subcommand)]
pub enum BenchKind {
    /// Memory copy bandwidth by block size (a few hundred bytes to past the last cache) and
    /// alignment, with the cache boundaries marked (Dannenberg et al. §8)
    Copy(CopyArgs),
    /// One-way latency and throughput of IPC mechanisms by message size, with the fitted model
    /// t(N) = a + N/b and a comparison across mechanisms (Dannenberg et al. §8, Figure 3)
    Ipc(IpcArgs),
    /// Context-switch cost, direct and with working sets (a token ring, lmbench lat_ctx's
    /// method)
    Ctxsw(CtxswArgs),
    /// File reads by buffered reads, read(2) by block size, mmap and O_DIRECT, cold and warm,
    /// with CPU use from getrusage and idle counters (Dannenberg et al. §9)
    File(FileArgs),
    /// The cost of one timer wakeup by the two-rate method, for each timer kind (Dannenberg et
    /// al. §6)
    TimerOverhead(TimerOverheadArgs),
    /// A per-frame pipeline from a TOML file: predicted time and misses from measured step
    /// costs, then a real periodic run (Dannenberg et al. §11)
    Budget(BudgetArgs),
}

/// Options of `sandglass bench copy`.
#[derive(Args)]
pub struct CopyArgs {
    /// Block sizes, such as 512,4K,1M (default: powers of two from 512 B to four times the
    /// last cache level)
    #[arg(long)]
    pub sizes: Option<String>,
    /// CPU to copy on (default: the highest CPU this process may use)
    #[arg(short = 'c', long = "cpus", visible_alias = "cpu", value_name = "CPU")]
    pub cpu: Option<usize>,
    /// Time spent on each (size, alignment) cell
    #[arg(long, default_value = "100ms")]
    pub cell_time: String,
    /// At most this many samples per cell
    #[arg(long, default_value_t = 1000)]
    pub max_samples: usize,
}

/// Options of `sandglass bench ipc`.
#[derive(Args)]
pub struct IpcArgs {
    /// Mechanisms: pipe, unix-stream, unix-dgram, tcp, mq, shm-futex, shm-eventfd, several
    /// separated by commas, or all
    // A whole list is one value (`::std::vec::Vec` keeps clap from taking it as many).
    #[arg(long, default_value = "all", value_parser = crate::common::MECHANISMS)]
    pub mech: ::std::vec::Vec<sandglass::microbench::ipc::Mechanism>,
    /// Message sizes, such as 1,64,4K,1M
    #[arg(long, default_value = "1,64,1K,4K,16K,64K,256K,1M")]
    pub sizes: String,
    /// same-cpu (both sides on one CPU) or cross-cpu (one CPU each)
    #[arg(long, default_value = "same-cpu", value_parser = crate::common::PLACEMENT)]
    pub placement: sandglass::microbench::Placement,
    /// The client's CPU, then the server's for cross-cpu, such as 1 or 0,1 (default: the
    /// highest CPUs this process may use)
    #[arg(short = 'c', long)]
    pub cpus: Option<String>,
    /// Scheduling policy of both sides: o:NICE, b, i, f:PRIO or r:PRIO
    #[arg(short = 'P', long, default_value = "o:0", allow_hyphen_values = true)]
    pub policy: String,
    /// Time spent measuring each (mechanism, size) cell
    #[arg(long, default_value = "150ms")]
    pub cell_time: String,
    /// At most this many round trips per cell
    #[arg(long, default_value_t = 10_000)]
    pub max_samples: usize,
    /// Round trips before the measured ones, per cell
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    /// Check the content of every message, not a sample of them
    #[arg(long)]
    pub verify_all: bool,
}

/// Options of `sandglass bench ctxsw`.
#[derive(Args)]
pub struct CtxswArgs {
    /// Working set of each member, such as 0,16K,1M (0 is the direct cost)
    #[arg(long, default_value = "0,4K,16K,64K,256K,1M,4M")]
    pub working_sets: String,
    /// Members of the token ring
    #[arg(long, default_value_t = 2)]
    pub ring: usize,
    /// CPU of the ring (default: the highest CPU this process may use)
    #[arg(short = 'c', long = "cpus", visible_alias = "cpu", value_name = "CPU")]
    pub cpu: Option<usize>,
    /// Scheduling policy of the members: o:NICE, b, i, f:PRIO or r:PRIO
    #[arg(short = 'P', long, default_value = "o:0", allow_hyphen_values = true)]
    pub policy: String,
    /// Time spent on each working set
    #[arg(long, default_value = "300ms")]
    pub cell_time: String,
    /// At most this many trips around the ring per working set
    #[arg(long, default_value_t = 5000)]
    pub max_trips: usize,
}

/// Options of `sandglass bench file`.
#[derive(Args)]
pub struct FileArgs {
    /// Directory for the temporary file (default: the system's temporary directory)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Size of the file, a multiple of 4 KiB
    #[arg(long, default_value = "256MiB")]
    pub size: String,
    /// Methods: buffered, read, mmap, direct, several separated by commas, or all
    #[arg(long, default_value = "all", value_parser = crate::common::METHODS)]
    pub methods: ::std::vec::Vec<sandglass::microbench::file::Method>,
    /// Block sizes of the read method
    #[arg(long, default_value = "4K,16K,64K,256K,1M,4M")]
    pub block_sizes: String,
    /// Drop the whole page cache before each cold pass (root only; default: only the file's
    /// pages, with posix_fadvise)
    #[arg(long)]
    pub drop_caches: bool,
    /// Do not run the idle counters (freetime)
    #[arg(long)]
    pub no_freetime: bool,
    /// CPU of the reading thread (default: the highest CPU this process may use)
    #[arg(short = 'c', long = "cpus", visible_alias = "cpu", value_name = "CPU")]
    pub cpu: Option<usize>,
}

/// Options of `sandglass bench timer-overhead`.
#[derive(Args)]
pub struct TimerOverheadArgs {
    /// The two timer rates in Hz
    #[arg(long, default_value = "100,10000")]
    pub rates: String,
    /// Timer kinds: hr, timerfd, posix, native, several separated by commas, or all
    #[arg(long, default_value = "all", value_parser = crate::common::OVERHEAD_TIMERS)]
    pub timers: ::std::vec::Vec<sandglass::model::TimerKind>,
    /// Length of one phase at one rate
    #[arg(long, default_value = "500ms")]
    pub phase: String,
    /// Pairs of phases per timer kind
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// CPU of the loop and the timer (default: the highest CPU this process may use)
    #[arg(short = 'c', long = "cpus", visible_alias = "cpu", value_name = "CPU")]
    pub cpu: Option<usize>,
    /// Bytes the background loop reads per iteration
    #[arg(long, default_value = "64K")]
    pub working_set: String,
    /// SCHED_FIFO priority of the timer thread
    #[arg(long, default_value_t = 90)]
    pub priority: u32,
}

/// Options of `sandglass bench budget`.
#[derive(Args)]
pub struct BudgetArgs {
    /// The budget file (TOML: period, [[step]] tables; see docs/bench.md)
    pub file: PathBuf,
    /// Directory for the files of read steps (default: the system's temporary directory)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Frames to run for real (default: the file's frames, or 10 s worth)
    #[arg(long)]
    pub frames: Option<u64>,
    /// Samples of each step for the prediction (at most; at most one second per step)
    #[arg(long, default_value_t = 200)]
    pub predict_samples: usize,
    #[command(flatten)]
    pub loads: crate::common::LoadFlags,
}

fn size_list(flag: &str, value: &str) -> Result<Vec<u64>, Failure> {
    microbench::parse_sizes(value).map_err(|e| Failure::usage(format!("{flag} {value}: {e}")))
}

fn size_one(flag: &str, value: &str) -> Result<u64, Failure> {
    microbench::parse_size(value).map_err(|e| Failure::usage(format!("{flag} {value}: {e}")))
}

fn positive_time(flag: &str, value: &str) -> Result<sandglass::Nanos, Failure> {
    let t = time_arg(flag, value)?;
    if t.0 == 0 {
        return Err(Failure::usage(format!(
            "{flag} {value}: must be longer than zero"
        )));
    }
    Ok(t)
}

/// `--cpus A` or `--cpus A,B`, in that order (the client's CPU first).
fn cpu_pair(value: &str) -> Result<Vec<usize>, Failure> {
    value
        .split(',')
        .map(|p| {
            p.trim().parse::<usize>().map_err(|_| {
                Failure::usage(format!(
                    "--cpus {value}: give one CPU number, or two separated by a comma (client,server)"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|v| {
            if v.is_empty() || v.len() > 2 {
                Err(Failure::usage(format!(
                    "--cpus {value}: give one CPU number, or two separated by a comma (client,server)"
                )))
            } else {
                Ok(v)
            }
        })
}

/// Prints the result as JSON or as the kind's table, and returns the exit code.
fn emit<T: serde::Serialize>(
    json: bool,
    result: &T,
    state: RunState,
    failed: bool,
    table: impl FnOnce(&mut dyn Write, &T) -> io::Result<()>,
) -> Result<u8, Failure> {
    if let Some(dir) = serde_json::to_value(result)
        .ok()
        .and_then(|v| v["run_dir"].as_str().map(String::from))
    {
        crate::common::register(std::path::Path::new(&dir));
    }
    if json {
        print_json(result)?;
    } else {
        crate::common::print_text(|out| table(out, result))?;
    }
    let code = exit_code_for(&state);
    Ok(if failed { code.max(1) } else { code })
}

/// Runs the library function with a console for notes and warnings.
fn with_console<T>(f: impl FnOnce(&mut Console) -> Result<T, RunError>) -> Result<T, Failure> {
    let mut console = Console::new();
    let r = f(&mut console);
    console.clear();
    Ok(r?)
}

pub fn bench(a: &BenchArgs) -> Result<u8, Failure> {
    let output = a.run.output.clone();
    let ctx = context();
    match &a.kind {
        BenchKind::Copy(c) => {
            let config = copy::CopyConfig {
                sizes: c
                    .sizes
                    .as_deref()
                    .map(|s| size_list("--sizes", s))
                    .transpose()?,
                cpu: c.cpu,
                cell_time_ns: positive_time("--cell-time", &c.cell_time)?,
                max_samples: c.max_samples,
                output_dir: output,
            };
            copy::validate(&config).map_err(Failure::usage)?;
            let r = with_console(|o| copy::run(&config, &ctx, o))?;
            let failed = r.cells.iter().any(|c| !c.verified);
            emit(a.run.json, &r, r.header.state, failed, |w, r| {
                sandglass_report::microbench::write_copy(w, r)
            })
        }
        BenchKind::Ipc(c) => {
            let config = ipc::IpcConfig {
                mechanisms: c.mech.clone(),
                sizes: size_list("--sizes", &c.sizes)?,
                placement: c.placement,
                cpus: c.cpus.as_deref().map(cpu_pair).transpose()?,
                policy: policy_arg(&c.policy)?,
                cell_time_ns: positive_time("--cell-time", &c.cell_time)?,
                max_samples: c.max_samples,
                warmup: c.warmup,
                verify: if c.verify_all {
                    ipc::Verify::Every
                } else {
                    ipc::Verify::Sampled
                },
                output_dir: output,
            };
            ipc::validate(&config).map_err(Failure::usage)?;
            ipc::resolve_cpus(&config, &sandglass::system::allowed_cpus())
                .map_err(Failure::usage)?;
            let r = with_console(|o| ipc::run(&config, &ctx, o))?;
            let errors = r.errors();
            for e in &errors {
                eprintln!("sandglass: error: {e}");
            }
            emit(
                a.run.json,
                &r,
                r.header.state,
                !errors.is_empty(),
                |w, r| sandglass_report::microbench::write_ipc(w, r),
            )
        }
        BenchKind::Ctxsw(c) => {
            let working_sets = c
                .working_sets
                .split(',')
                .map(|p| {
                    if p.trim() == "0" {
                        Ok(0)
                    } else {
                        size_one("--working-sets", p)
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            let config = ctxsw::CtxswConfig {
                working_sets,
                ring: c.ring,
                cpu: c.cpu,
                policy: policy_arg(&c.policy)?,
                cell_time_ns: positive_time("--cell-time", &c.cell_time)?,
                max_trips: c.max_trips,
                output_dir: output,
            };
            ctxsw::validate(&config).map_err(Failure::usage)?;
            let r = with_console(|o| ctxsw::run(&config, &ctx, o))?;
            let failed = r.cells.iter().any(|c| c.error.is_some());
            for c in r.cells.iter().filter_map(|c| c.error.as_ref()) {
                eprintln!("sandglass: error: {c}");
            }
            emit(a.run.json, &r, r.header.state, failed, |w, r| {
                sandglass_report::microbench::write_ctxsw(w, r)
            })
        }
        BenchKind::File(c) => {
            let config = file::FileConfig {
                dir: c.dir.clone().unwrap_or_else(std::env::temp_dir),
                size_bytes: size_one("--size", &c.size)?,
                methods: c.methods.clone(),
                block_sizes: size_list("--block-sizes", &c.block_sizes)?,
                drop_caches: c.drop_caches,
                freetime: !c.no_freetime,
                cpu: c.cpu,
                output_dir: output,
            };
            file::validate(&config).map_err(Failure::usage)?;
            let r = with_console(|o| file::run(&config, &ctx, o))?;
            let failed = r.passes.iter().any(|p| p.error.is_some()) || !r.file.removed;
            for p in r.passes.iter().filter_map(|p| p.error.as_ref()) {
                eprintln!("sandglass: error: {p}");
            }
            emit(a.run.json, &r, r.header.state, failed, |w, r| {
                sandglass_report::microbench::write_file(w, r)
            })
        }
        BenchKind::TimerOverhead(c) => {
            let rates: Vec<f64> = c
                .rates
                .split(',')
                .map(|p| p.trim().parse::<f64>())
                .collect::<Result<_, _>>()
                .ok()
                .filter(|v: &Vec<f64>| v.len() == 2)
                .ok_or_else(|| {
                    Failure::usage(format!(
                        "--rates {}: give two rates in Hz separated by a comma, such as 100,10000",
                        c.rates
                    ))
                })?;
            let config = timer_overhead::TimerOverheadConfig {
                timers: c.timers.clone(),
                rates_hz: [rates[0], rates[1]],
                phase_ns: positive_time("--phase", &c.phase)?,
                repeat: c.repeat,
                cpu: c.cpu,
                working_set_bytes: size_one("--working-set", &c.working_set)?,
                priority: c.priority,
                output_dir: output,
            };
            timer_overhead::validate(&config).map_err(Failure::usage)?;
            let r = with_console(|o| timer_overhead::run(&config, &ctx, o))?;
            let failed = r.kinds.iter().any(|k| k.error.is_some());
            for k in r.kinds.iter().filter_map(|k| k.error.as_ref()) {
                eprintln!("sandglass: error: {k}");
            }
            emit(a.run.json, &r, r.header.state, failed, |w, r| {
                sandglass_report::microbench::write_timer_overhead(w, r)
            })
        }
        BenchKind::Budget(c) => {
            let shown = c.file.display().to_string();
            let text = sandglass::bounded::read_input(&c.file, "a budget file")
                .map_err(|e| Failure::usage(format!("cannot read the budget file: {e}")))?;
            let spec = budget::parse_budget(&text, &shown).map_err(Failure::usage)?;
            let config = budget::BudgetConfig {
                spec,
                file: shown,
                dir: c.dir.clone().unwrap_or_else(std::env::temp_dir),
                frames: c.frames,
                predict_samples: c.predict_samples,
                output_dir: output,
                loads: c.loads.plan()?,
            };
            budget::validate(&config).map_err(Failure::usage)?;
            let r = with_console(|o| budget::run(&config, &ctx, o))?;
            emit(a.run.json, &r, r.header.state, false, |w, r| {
                sandglass_report::microbench::write_budget(w, r)
            })
        }
    }
}
