//! The cost of one `/proc` snapshot of the cause sampler, as the main thread pays it during a
//! run: `Sampler::sample` on the running system (the four `/proc` files, read and parsed, and
//! the interval they close digested), timed one snapshot at a time, for every online CPU as the
//! measured CPUs and two sleeping threads as the measuring threads, each interval's rows
//! appended to a `sampler.csv` as in a run.
//!
//! ```text
//! cargo run --release -p sandglass --example proc_snapshot -- [SNAPSHOTS] [--threads N]
//! ```
//!
//! Prints the median, p99 and maximum over SNAPSHOTS (default 5000) snapshots, and beside them
//! what the kernel alone takes to produce each file (its text read in a loop from a file kept
//! open, without parsing): the floor that no reader of these files can go below; and the
//! parsing alone of the three system files, on text read once. Run it with
//! nothing else measuring on the machine (`flock /tmp/sandglass-rt.lock ...`).

use sandglass::causes::procfs;
use sandglass::causes::sampler::{Proc, Sampler, SamplerSpec};
use std::os::unix::fs::FileExt;
use std::process::ExitCode;
use std::time::Instant;

/// Median, p99 and maximum of `ns`, in µs.
fn summary(ns: &mut [u64]) -> (f64, f64, f64) {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)] as f64 / 1e3;
    (at(0.5), at(0.99), ns[ns.len() - 1] as f64 / 1e3)
}

/// What the kernel takes to produce `path`'s text: reads from offset 0 until the end, on a
/// file kept open.
fn kernel_floor(path: &str, n: usize) -> Option<(f64, f64, f64)> {
    let f = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 1 << 16];
    let mut ns = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut off = 0;
        loop {
            match f.read_at(&mut buf, off) {
                Ok(0) | Err(_) => break,
                Ok(k) => off += k as u64,
            }
        }
        ns.push(t.elapsed().as_nanos() as u64);
    }
    Some(summary(&mut ns))
}

fn main() -> ExitCode {
    let mut snapshots = 5000usize;
    let mut threads = 2usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--threads" => match it.next().and_then(|v| v.parse().ok()) {
                Some(n) => threads = n,
                None => {
                    eprintln!("proc_snapshot: --threads needs a number");
                    return ExitCode::from(2);
                }
            },
            v => match v.parse() {
                Ok(n) if n > 0 => snapshots = n,
                _ => {
                    eprintln!("usage: proc_snapshot [SNAPSHOTS] [--threads N]");
                    return ExitCode::from(2);
                }
            },
        }
    }
    // Every online CPU is measured (not only those this process may run on: pinned with
    // taskset, it still reads every CPU's columns, as a run with -c all does).
    let cpu_list: Vec<usize> = sandglass::system::online_cpus()
        .map(|l| l.to_vec())
        .unwrap_or_else(|| vec![0]);
    let cpus = cpu_list.len();
    // Threads that sleep until the end: their status and schedstat files are read.
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let tx = tx.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let _ = tx.send(sandglass_sys::sched::gettid().0);
                stop.wait();
            })
        })
        .collect();
    let tids: Vec<i32> = (0..threads).filter_map(|_| rx.recv().ok()).collect();
    let spec = SamplerSpec {
        cpus: cpu_list.clone(),
        tids: tids.clone(),
    };
    // As in a run: each interval's rows are appended to sampler.csv (here in a directory
    // removed at the end).
    let dir = std::env::temp_dir().join(format!("proc_snapshot-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("proc_snapshot: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let mut sampler = Sampler::new(Proc::new(), spec, &dir);
    let mut ns = Vec::with_capacity(snapshots);
    let mut at = 0u64;
    for k in 0..snapshots + 100 {
        at += 100_000_000;
        let t = Instant::now();
        if let Err(e) = sampler.sample(at) {
            eprintln!("proc_snapshot: {e}");
            return ExitCode::FAILURE;
        }
        let took = t.elapsed().as_nanos() as u64;
        // The first hundred warm the caches and the sampler's tables.
        if k >= 100 {
            ns.push(took);
        }
    }
    let written = sampler.finish().map(|d| d.file.map_or(0, |f| f.bytes));
    let _ = std::fs::remove_dir_all(&dir);
    match written {
        Ok(bytes) => println!("sampler.csv: {bytes} bytes"),
        Err(e) => {
            eprintln!("proc_snapshot: {e}");
            return ExitCode::FAILURE;
        }
    }
    let (p50, p99, max) = summary(&mut ns);
    println!(
        "snapshot ({cpus} CPUs, {threads} threads): median {p50:.1} µs, p99 {p99:.1} µs, max {max:.1} µs over {snapshots}"
    );
    let mut files = vec![
        "/proc/interrupts".to_string(),
        "/proc/softirqs".to_string(),
        "/proc/stat".to_string(),
    ];
    for t in &tids {
        files.push(format!("/proc/self/task/{t}/status"));
        files.push(format!("/proc/self/task/{t}/schedstat"));
    }
    for f in &files {
        if let Some((p50, p99, max)) = kernel_floor(f, snapshots) {
            println!("  kernel alone, {f}: median {p50:.1} µs, p99 {p99:.1} µs, max {max:.1} µs");
        }
    }
    // The parsing alone, on text read once: what the sampler adds to the kernel's time.
    let text = |p: &str| std::fs::read(p).unwrap_or_default();
    let names = |t: &[u8], f: fn(&str) -> (Vec<usize>, Vec<procfs::Counted>)| {
        procfs::Names::new(
            f(std::str::from_utf8(t).unwrap_or(""))
                .1
                .into_iter()
                .map(|c| c.name)
                .collect(),
        )
    };
    let mut scratch = procfs::Scratch::default();
    let (irq, soft, stat) = (
        text("/proc/interrupts"),
        text("/proc/softirqs"),
        text("/proc/stat"),
    );
    let (irq_names, soft_names) = (
        names(&irq, procfs::parse_interrupts),
        names(&soft, procfs::parse_softirqs),
    );
    let mut irq_out = vec![vec![0u64; cpus]; irq_names.len()];
    let mut soft_out = vec![vec![0u64; cpus]; soft_names.len()];
    let mut stat_out = vec![procfs::CpuStat::default(); cpus];
    let mut filled = Vec::new();
    let mut ns = Vec::with_capacity(snapshots);
    for _ in 0..snapshots {
        let t = Instant::now();
        procfs::fill_interrupts(&irq, &irq_names, &cpu_list, &mut scratch, &mut irq_out);
        procfs::fill_softirqs(&soft, &soft_names, &cpu_list, &mut scratch, &mut soft_out);
        procfs::fill_stat(&stat, &cpu_list, &mut filled, &mut stat_out);
        ns.push(t.elapsed().as_nanos() as u64);
    }
    let (p50, p99, max) = summary(&mut ns);
    println!("  parsing alone, the three system files: median {p50:.1} µs, p99 {p99:.1} µs, max {max:.1} µs");
    stop.wait();
    for h in handles {
        let _ = h.join();
    }
    ExitCode::SUCCESS
}
