//! Parsers of the `/proc` files the unprivileged sampler reads: `/proc/interrupts`,
//! `/proc/softirqs`, the per-CPU lines of `/proc/stat` and a thread's context-switch counts.
//! Each takes the file's text and returns counters; malformed lines are skipped, never guessed.

/// One source of interrupts or softirqs and its count on every CPU (in the file's CPU order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counted {
    /// `LOC (Local timer interrupts)`, `28 (virtio0-config)`, `TIMER`, ...
    pub name: String,
    pub per_cpu: Vec<u64>,
}

/// The CPU numbers of a header line such as `           CPU0       CPU1`.
fn header_cpus(line: &str) -> Vec<usize> {
    line.split_whitespace()
        .filter_map(|w| w.strip_prefix("CPU")?.parse().ok())
        .collect()
}

/// `/proc/interrupts`: one entry per line, the counts in the order of the header's CPUs (also
/// returned). A numbered line is named by its number and its last word (the device), a
/// lettered line by its label and description: `LOC (Local timer interrupts)`. Lines with
/// fewer counts than CPUs (`ERR:`, `MIS:`) keep the counts they have, the rest zero.
pub fn parse_interrupts(text: &str) -> (Vec<usize>, Vec<Counted>) {
    let mut lines = text.lines();
    let cpus = lines.next().map(header_cpus).unwrap_or_default();
    let mut out = Vec::new();
    for line in lines {
        let Some((label, rest)) = line.split_once(':') else {
            continue;
        };
        let label = label.trim();
        if label.is_empty() {
            continue;
        }
        let words: Vec<&str> = rest.split_whitespace().collect();
        let mut per_cpu = Vec::with_capacity(cpus.len());
        for w in words.iter().take(cpus.len()) {
            match w.parse::<u64>() {
                Ok(v) => per_cpu.push(v),
                Err(_) => break,
            }
        }
        let counted = per_cpu.len();
        per_cpu.resize(cpus.len(), 0);
        let tail = &words[counted.min(words.len())..];
        let name = if label.chars().all(|c| c.is_ascii_digit()) {
            match tail.last() {
                Some(device) => format!("{label} ({device})"),
                None => label.to_string(),
            }
        } else if tail.is_empty() {
            label.to_string()
        } else {
            format!("{label} ({})", tail.join(" "))
        };
        out.push(Counted { name, per_cpu });
    }
    (cpus, out)
}

/// `/proc/softirqs`: one entry per vector (`TIMER`, `NET_RX`, `SCHED`, ...), with the header's
/// CPUs.
pub fn parse_softirqs(text: &str) -> (Vec<usize>, Vec<Counted>) {
    let mut lines = text.lines();
    let cpus = lines.next().map(header_cpus).unwrap_or_default();
    let mut out = Vec::new();
    for line in lines {
        let Some((label, rest)) = line.split_once(':') else {
            continue;
        };
        let per_cpu: Option<Vec<u64>> = rest.split_whitespace().map(|w| w.parse().ok()).collect();
        if let Some(mut per_cpu) = per_cpu {
            per_cpu.resize(cpus.len(), 0);
            out.push(Counted {
                name: label.trim().to_string(),
                per_cpu,
            });
        }
    }
    (cpus, out)
}

/// One CPU's line of `/proc/stat`, in clock ticks (USER_HZ).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStat {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    /// Time a hypervisor ran something else while this virtual CPU wanted to run.
    pub steal: u64,
}

/// The `cpuN` lines of `/proc/stat` (not the `cpu` total), as `(N, times)`.
pub fn parse_stat(text: &str) -> Vec<(usize, CpuStat)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(cpu) = words
            .next()
            .and_then(|w| w.strip_prefix("cpu"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let v: Vec<u64> = words.map_while(|w| w.parse().ok()).collect();
        if v.len() < 4 {
            continue;
        }
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        out.push((
            cpu,
            CpuStat {
                user: at(0),
                nice: at(1),
                system: at(2),
                idle: at(3),
                iowait: at(4),
                irq: at(5),
                softirq: at(6),
                steal: at(7),
            },
        ));
    }
    out
}

/// `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` of a `status` file.
pub fn parse_ctxt(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim_start_matches(':').trim().parse::<u64>().ok())
    };
    Some((
        field("voluntary_ctxt_switches")?,
        field("nonvoluntary_ctxt_switches")?,
    ))
}

/// The time a thread has waited on a run queue (runnable, not running), in ns: the second
/// field of `/proc/PID/task/TID/schedstat`.
pub fn parse_schedstat_wait(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERRUPTS: &str = "           CPU0       CPU1       
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 28:          0          0 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config
 29:       3429       1628 PCI-MSIX-0000:00:01.0   1-edge      virtio0-requests
NMI:          0          0   Non-maskable interrupts
LOC:   18233812   19310431   Local timer interrupts
RES:     382417     405331   Rescheduling interrupts
ERR:          0
MIS:          0
";

    #[test]
    fn interrupts_name_devices_and_vectors() {
        let (cpus, v) = parse_interrupts(INTERRUPTS);
        assert_eq!(cpus, [0, 1]);
        let names: Vec<&str> = v.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "24 (ACPI:Ged)",
                "28 (virtio0-config)",
                "29 (virtio0-requests)",
                "NMI (Non-maskable interrupts)",
                "LOC (Local timer interrupts)",
                "RES (Rescheduling interrupts)",
                "ERR",
                "MIS"
            ]
        );
        assert_eq!(v[2].per_cpu, [3429, 1628]);
        assert_eq!(v[4].per_cpu, [18233812, 19310431]);
        assert_eq!(v[6].per_cpu, [0, 0], "ERR has one count, padded");
    }

    #[test]
    fn interrupts_of_an_offline_cpu_layout() {
        // CPU1 offline: the header names CPU0 and CPU2 only.
        let text = "  CPU0 CPU2\n LOC: 5 7 Local timer interrupts\n";
        let (cpus, v) = parse_interrupts(text);
        assert_eq!(cpus, [0, 2]);
        assert_eq!(v[0].per_cpu, [5, 7]);
        assert_eq!(parse_interrupts(""), (vec![], vec![]));
    }

    #[test]
    fn softirqs_parse() {
        let text = "                    CPU0       CPU1       
          HI:          0          0
       TIMER:     208209     283624
      NET_RX:        12         40
";
        let (cpus, v) = parse_softirqs(text);
        assert_eq!(cpus, [0, 1]);
        assert_eq!(v.len(), 3);
        assert_eq!(v[1].name, "TIMER");
        assert_eq!(v[2].per_cpu, [12, 40]);
    }

    #[test]
    fn stat_keeps_per_cpu_lines_with_steal() {
        let text = "cpu  914762 57531 126305 2281523 29338 0 6933 883 0 0
cpu0 392434 27738 62547 1210613 10894 0 4657 447 0 0
cpu1 522327 29792 63758 1070909 18443 0 2276 436 0 0
intr 14506312 0 0
ctxt 123
";
        let v = parse_stat(text);
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].0, 1);
        assert_eq!(v[1].1.idle, 1070909);
        assert_eq!(v[1].1.softirq, 2276);
        assert_eq!(v[1].1.steal, 436);
        // An old kernel's short line: the missing fields are zero.
        assert_eq!(parse_stat("cpu3 1 2 3 4\n")[0].1.steal, 0);
    }

    #[test]
    fn context_switches_parse() {
        let text =
            "Name:\tsandglass\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t4\n";
        assert_eq!(parse_ctxt(text), Some((17, 4)));
        assert_eq!(parse_ctxt("Name:\tx\n"), None);
    }

    #[test]
    fn schedstat_wait() {
        assert_eq!(parse_schedstat_wait("123456 7890 42\n"), Some(7890));
        assert_eq!(parse_schedstat_wait(""), None);
    }

    #[test]
    fn this_machine_parses() {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let (cpus, irqs) = parse_interrupts(&read("/proc/interrupts"));
        assert!(!cpus.is_empty() && !irqs.is_empty());
        assert!(!parse_stat(&read("/proc/stat")).is_empty());
        assert!(parse_ctxt(&read("/proc/self/status")).is_some());
    }
}
