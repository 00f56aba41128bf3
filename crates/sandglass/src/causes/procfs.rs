//! Parsers of the `/proc` files the unprivileged sampler reads: `/proc/interrupts`,
//! `/proc/softirqs`, the per-CPU lines of `/proc/stat` and a thread's context-switch counts.
//! Each takes the file's text and returns counters; malformed lines are skipped, never guessed.
//!
//! Two forms. The `parse_*` functions return owned tables (names and every column): they
//! learn a file's sources when the sampler starts, and they are the reference. The `fill_*`
//! functions are what each snapshot runs: they read the same text as bytes, straight into
//! tables the sampler allocated when it started, keeping only the measured CPUs' columns, and
//! allocate nothing once their scratch space has grown to the file's size. On the same text
//! both forms give the same counts (tested against each other on captured and generated text).
//! Text that is not ASCII (never seen in `/proc`, but a device name could hold anything) goes
//! through the reference parser, so the two can never disagree.

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

/// The length of one tick of `/proc/stat`'s times (USER_HZ, 100 a second where the system does
/// not say), in ns.
#[cfg(feature = "linux")]
pub fn tick_ns() -> u64 {
    1_000_000_000 / sandglass_sys::process::clock_ticks_per_second().unwrap_or(100)
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

/// Whitespace as `str::split_whitespace` and `str::trim` see it, within ASCII.
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// The words of `s` between whitespace.
fn words(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|&b| is_ws(b)).filter(|w| !w.is_empty())
}

/// `s` without leading and trailing whitespace.
fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| !is_ws(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|&b| !is_ws(b)).map_or(start, |e| e + 1);
    &s[start..end]
}

/// The lines of `text` (a last line without its newline included, a final empty one not).
fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let empty = text.is_empty();
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    text.split(|&b| b == b'\n')
        .take(if empty { 0 } else { usize::MAX })
}

/// A decimal count as `str::parse::<u64>` reads it: an optional `+`, then digits only, no
/// overflow.
pub fn parse_u64(w: &[u8]) -> Option<u64> {
    let digits = w.strip_prefix(b"+").unwrap_or(w);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |v, &b| {
        if b.is_ascii_digit() {
            v.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// The text of a `/proc` file as the sampler reads it: bytes read into storage that is kept
/// from one snapshot to the next and grows only when the file does.
#[derive(Debug, Default)]
pub struct TextBuf {
    /// Initialised storage; `len` bytes of it hold the text.
    bytes: Vec<u8>,
    len: usize,
}

impl TextBuf {
    /// A buffer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> TextBuf {
        TextBuf {
            bytes: vec![0; capacity],
            len: 0,
        }
    }

    /// The text.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The room it has without growing.
    pub fn capacity(&self) -> usize {
        self.bytes.len()
    }

    /// Empties it (a file that could not be read).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Replaces the text with `text`.
    pub fn set(&mut self, text: &[u8]) {
        if self.bytes.len() < text.len() {
            self.bytes.resize(text.len(), 0);
        }
        self.bytes[..text.len()].copy_from_slice(text);
        self.len = text.len();
    }

    /// Replaces the text with a whole `/proc` file, read with `pread` from offset 0 on a file
    /// kept open (the kernel formats the text anew at offset 0): reads until the end, growing
    /// the storage only when the file no longer fits. Empty on an error.
    ///
    /// `one_read`: the file is made by one `show` call of the kernel (`single_open`: `/proc/stat`,
    /// `/proc/softirqs`, a task's `status` and `schedstat`), so a read that leaves room in the
    /// buffer has returned all of it and no read is spent finding the end. Files the kernel
    /// makes record by record (`/proc/interrupts`) can return less than there is, and are read
    /// until a read returns nothing.
    pub fn read_file(&mut self, f: &std::fs::File, one_read: bool) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.len = 0;
        if self.bytes.is_empty() {
            self.bytes.resize(4096, 0);
        }
        loop {
            if self.len == self.bytes.len() {
                let more = self.bytes.len() * 2;
                self.bytes.resize(more, 0);
            }
            let room = self.bytes.len() - self.len;
            match f.read_at(&mut self.bytes[self.len..], self.len as u64) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    self.len += n;
                    if one_read && n < room {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.len = 0;
                    return Err(e);
                }
            }
        }
    }
}

/// Where each of a file's sources goes: the names learnt when the sampler started, and whether
/// two of them are the same (then every line is compared with every name, as the reference
/// does).
#[derive(Clone, Debug)]
pub struct Names {
    names: Vec<String>,
    unique: bool,
}

impl Names {
    pub fn new(names: Vec<String>) -> Names {
        let mut sorted: Vec<&String> = names.iter().collect();
        sorted.sort();
        let unique = sorted.windows(2).all(|w| w[0] != w[1]);
        Names { names, unique }
    }

    pub fn as_slice(&self) -> &[String] {
        &self.names
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn into_vec(self) -> Vec<String> {
        self.names
    }

    /// Calls `f` with the index of every name equal to `name` that has no line yet (`filled`),
    /// trying `hint` (the line's position) first.
    fn each_match(&self, name: &str, hint: usize, filled: &mut [bool], mut f: impl FnMut(usize)) {
        if self.unique {
            let k = match self.names.get(hint) {
                Some(n) if n == name => Some(hint),
                _ => self.names.iter().position(|n| n == name),
            };
            if let Some(k) = k.filter(|&k| !filled[k]) {
                filled[k] = true;
                f(k);
            }
            return;
        }
        for (k, n) in self.names.iter().enumerate() {
            if n == name && !filled[k] {
                filled[k] = true;
                f(k);
            }
        }
    }
}

/// Scratch space of the `fill_*` functions, kept from one snapshot to the next.
#[derive(Debug, Default)]
pub struct Scratch {
    /// The file's CPU columns.
    file_cpus: Vec<usize>,
    /// For each measured CPU, its column in the file.
    cols: Vec<Option<usize>>,
    /// A line's counts, up to one per column.
    vals: Vec<u64>,
    /// A line's source name.
    name: String,
    /// Which names have had their line.
    filled: Vec<bool>,
}

impl Scratch {
    /// Reads a header line's CPU columns and where each of `cpus` is among them.
    fn header(&mut self, line: &[u8], cpus: &[usize]) {
        self.file_cpus.clear();
        for w in words(line) {
            if let Some(n) = w.strip_prefix(b"CPU").and_then(parse_u64) {
                if let Ok(n) = usize::try_from(n) {
                    self.file_cpus.push(n);
                }
            }
        }
        self.cols.clear();
        for c in cpus {
            let col = self.file_cpus.iter().position(|f| f == c);
            self.cols.push(col);
        }
    }

    fn start(&mut self, names: usize, out: &mut [Vec<u64>]) {
        self.filled.clear();
        self.filled.resize(names, false);
        for row in out.iter_mut() {
            row.fill(0);
        }
    }

    /// Writes the line's counts (`vals`, zero past them) into `out[k]` for the measured CPUs.
    fn put(cols: &[Option<usize>], vals: &[u64], row: &mut [u64]) {
        for (slot, col) in row.iter_mut().zip(cols) {
            *slot = col.and_then(|c| vals.get(c)).copied().unwrap_or(0);
        }
    }
}

/// The form of [`fill_interrupts`] and [`fill_softirqs`].
pub type FillFn = fn(&[u8], &Names, &[usize], &mut Scratch, &mut [Vec<u64>]);

/// The counts of `text` (`/proc/interrupts`) for the sources `names` on the measured `cpus`,
/// into `out[source][i]` (a source or CPU missing from the file counts zero): what
/// [`parse_interrupts`] gives for those sources and columns.
pub fn fill_interrupts(
    text: &[u8],
    names: &Names,
    cpus: &[usize],
    scratch: &mut Scratch,
    out: &mut [Vec<u64>],
) {
    scratch.start(names.len(), out);
    if !text.is_ascii() {
        let reference = std::str::from_utf8(text).map(parse_interrupts);
        if let Ok((file_cpus, parsed)) = reference {
            fill_from_reference(&file_cpus, &parsed, names, cpus, out);
        }
        return;
    }
    let mut it = lines(text);
    let Some(header) = it.next() else { return };
    scratch.header(header, cpus);
    let ncpus = scratch.file_cpus.len();
    let mut at = 0;
    for line in it {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let label = trim(&line[..colon]);
        if label.is_empty() {
            continue;
        }
        let rest = &line[colon + 1..];
        scratch.vals.clear();
        for w in words(rest).take(ncpus) {
            match parse_u64(w) {
                Some(v) => scratch.vals.push(v),
                None => break,
            }
        }
        let counted = scratch.vals.len();
        let name = &mut scratch.name;
        name.clear();
        push_ascii(name, label);
        if label.iter().all(u8::is_ascii_digit) {
            if let Some(device) = words(rest).skip(counted).last() {
                name.push_str(" (");
                push_ascii(name, device);
                name.push(')');
            }
        } else {
            let mut tail = words(rest).skip(counted).peekable();
            if tail.peek().is_some() {
                name.push_str(" (");
                for (j, w) in tail.enumerate() {
                    if j > 0 {
                        name.push(' ');
                    }
                    push_ascii(name, w);
                }
                name.push(')');
            }
        }
        let (cols, vals) = (&scratch.cols, &scratch.vals);
        names.each_match(&scratch.name, at, &mut scratch.filled, |k| {
            Scratch::put(cols, vals, &mut out[k]);
        });
        at += 1;
    }
}

/// Appends ASCII bytes to a string.
fn push_ascii(s: &mut String, bytes: &[u8]) {
    s.extend(bytes.iter().map(|&b| char::from(b)));
}

/// The counts of `text` (`/proc/softirqs`) for the vectors `names` on the measured `cpus`, into
/// `out[vector][i]`: what [`parse_softirqs`] gives for those vectors and columns.
pub fn fill_softirqs(
    text: &[u8],
    names: &Names,
    cpus: &[usize],
    scratch: &mut Scratch,
    out: &mut [Vec<u64>],
) {
    scratch.start(names.len(), out);
    if !text.is_ascii() {
        let reference = std::str::from_utf8(text).map(parse_softirqs);
        if let Ok((file_cpus, parsed)) = reference {
            fill_from_reference(&file_cpus, &parsed, names, cpus, out);
        }
        return;
    }
    let mut it = lines(text);
    let Some(header) = it.next() else { return };
    scratch.header(header, cpus);
    let ncpus = scratch.file_cpus.len();
    let mut at = 0;
    for line in it {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        // Every word must be a count, or the line is skipped; counts past the header's
        // columns are dropped.
        scratch.vals.clear();
        let mut whole = true;
        for w in words(&line[colon + 1..]) {
            match parse_u64(w) {
                Some(v) if scratch.vals.len() < ncpus => scratch.vals.push(v),
                Some(_) => {}
                None => {
                    whole = false;
                    break;
                }
            }
        }
        if !whole {
            continue;
        }
        scratch.name.clear();
        push_ascii(&mut scratch.name, trim(&line[..colon]));
        let (cols, vals) = (&scratch.cols, &scratch.vals);
        names.each_match(&scratch.name, at, &mut scratch.filled, |k| {
            Scratch::put(cols, vals, &mut out[k]);
        });
        at += 1;
    }
}

/// The reference path for text the byte parsers leave to it: the counts of `parsed` for
/// `names` on `cpus`.
fn fill_from_reference(
    file_cpus: &[usize],
    parsed: &[Counted],
    names: &Names,
    cpus: &[usize],
    out: &mut [Vec<u64>],
) {
    for (row, name) in out.iter_mut().zip(names.as_slice()) {
        let Some(line) = parsed.iter().find(|p| &p.name == name) else {
            continue;
        };
        for (slot, c) in row.iter_mut().zip(cpus) {
            *slot = file_cpus
                .iter()
                .position(|f| f == c)
                .and_then(|i| line.per_cpu.get(i))
                .copied()
                .unwrap_or(0);
        }
    }
}

/// The `/proc/stat` times of the measured `cpus` from `text` into `out[i]` (zero for a CPU the
/// file does not list): what [`parse_stat`] gives for them.
pub fn fill_stat(text: &[u8], cpus: &[usize], filled: &mut Vec<bool>, out: &mut [CpuStat]) {
    out.fill(CpuStat::default());
    filled.clear();
    filled.resize(cpus.len(), false);
    if !text.is_ascii() {
        if let Ok(t) = std::str::from_utf8(text) {
            let parsed = parse_stat(t);
            for (slot, c) in out.iter_mut().zip(cpus) {
                if let Some((_, s)) = parsed.iter().find(|(n, _)| n == c) {
                    *slot = *s;
                }
            }
        }
        return;
    }
    for line in lines(text) {
        let mut w = words(line);
        let Some(cpu) = w
            .next()
            .and_then(|w| w.strip_prefix(b"cpu"))
            .and_then(parse_u64)
            .and_then(|n| usize::try_from(n).ok())
        else {
            continue;
        };
        let mut v = [0u64; 8];
        let mut n = 0;
        for x in w.map_while(parse_u64) {
            if n < v.len() {
                v[n] = x;
            }
            n += 1;
        }
        if n < 4 {
            continue;
        }
        for (i, c) in cpus.iter().enumerate() {
            if *c == cpu && !filled[i] {
                filled[i] = true;
                out[i] = CpuStat {
                    user: v[0],
                    nice: v[1],
                    system: v[2],
                    idle: v[3],
                    iowait: v[4],
                    irq: v[5],
                    softirq: v[6],
                    steal: v[7],
                };
            }
        }
    }
}

/// [`parse_ctxt`] of a `status` file's bytes (text that is not UTF-8 reads as empty, as
/// `read_to_string` would make it).
pub fn ctxt_of(text: &[u8]) -> Option<(u64, u64)> {
    parse_ctxt(std::str::from_utf8(text).unwrap_or(""))
}

/// [`parse_schedstat_wait`] of a `schedstat` file's bytes.
pub fn schedstat_wait_of(text: &[u8]) -> Option<u64> {
    parse_schedstat_wait(std::str::from_utf8(text).unwrap_or(""))
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

    /// The sampler's path before the byte parsers, the oracle: the reference parse of the
    /// whole text, then the named sources' counts on the measured CPUs.
    fn oracle(
        (file_cpus, parsed): (Vec<usize>, Vec<Counted>),
        names: &[String],
        cpus: &[usize],
    ) -> Vec<Vec<u64>> {
        let cols: Vec<Option<usize>> = cpus
            .iter()
            .map(|c| file_cpus.iter().position(|f| f == c))
            .collect();
        names
            .iter()
            .map(|n| {
                let line = parsed.iter().find(|p| &p.name == n);
                cols.iter()
                    .map(|col| {
                        line.zip(*col)
                            .and_then(|(l, i)| l.per_cpu.get(i).copied())
                            .unwrap_or(0)
                    })
                    .collect()
            })
            .collect()
    }

    fn filled(
        fill: FillFn,
        text: &str,
        names: &[String],
        cpus: &[usize],
        scratch: &mut Scratch,
    ) -> Vec<Vec<u64>> {
        // Stale values in the output must not survive a fill.
        let mut out = vec![vec![7; cpus.len()]; names.len()];
        fill(
            text.as_bytes(),
            &Names::new(names.to_vec()),
            cpus,
            scratch,
            &mut out,
        );
        out
    }

    /// The byte parsers and the oracle agree on `text` for the sources named in `names_from`
    /// (what the sampler learnt when it started) on `cpus`.
    fn agree(text: &str, names_from: &str, cpus: &[usize]) {
        let mut scratch = Scratch::default();
        let names: Vec<String> = parse_interrupts(names_from)
            .1
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            filled(fill_interrupts, text, &names, cpus, &mut scratch),
            oracle(parse_interrupts(text), &names, cpus),
            "interrupts, cpus {cpus:?}:\n{text}"
        );
        let names: Vec<String> = parse_softirqs(names_from)
            .1
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            filled(fill_softirqs, text, &names, cpus, &mut scratch),
            oracle(parse_softirqs(text), &names, cpus),
            "softirqs, cpus {cpus:?}:\n{text}"
        );
        let stats = parse_stat(text);
        let want: Vec<CpuStat> = cpus
            .iter()
            .map(|c| {
                stats
                    .iter()
                    .find(|(n, _)| n == c)
                    .map(|(_, s)| *s)
                    .unwrap_or_default()
            })
            .collect();
        let mut got = vec![
            CpuStat {
                steal: 9,
                ..CpuStat::default()
            };
            cpus.len()
        ];
        fill_stat(text.as_bytes(), cpus, &mut Vec::new(), &mut got);
        assert_eq!(got, want, "stat, cpus {cpus:?}:\n{text}");
        assert_eq!(ctxt_of(text.as_bytes()), parse_ctxt(text));
        assert_eq!(
            schedstat_wait_of(text.as_bytes()),
            parse_schedstat_wait(text)
        );
    }

    const KVM: &str = include_str!("testdata/interrupts-kvm-2cpu.txt");
    const X86_48: &str = include_str!("testdata/interrupts-x86-48cpu-offline.txt");
    const ARM64: &str = include_str!("testdata/interrupts-arm64-4cpu.txt");

    #[test]
    fn byte_parsers_agree_with_the_reference_on_captured_layouts() {
        let softirqs = include_str!("testdata/softirqs-kvm-2cpu.txt");
        let stat = include_str!("testdata/stat-kvm-2cpu.txt");
        for text in [KVM, X86_48, ARM64, INTERRUPTS, softirqs, stat] {
            for cpus in [
                &[0usize][..],
                &[1],
                &[0, 1],
                &[1, 0],
                &[2, 5, 47],
                &[3, 40, 9],
            ] {
                agree(text, text, cpus);
            }
        }
        // The 48-CPU layout: names with spaces and commas, offline CPUs 5 and 40 count zero.
        let names: Vec<String> = parse_interrupts(X86_48)
            .1
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert!(names.contains(&"16 (i801_smbus)".to_string()), "{names:?}");
        assert!(names.contains(&"MCP (Machine check polls)".to_string()));
        assert!(names.contains(&"ERR".to_string()) && names.contains(&"MIS".to_string()));
        let got = filled(
            fill_interrupts,
            X86_48,
            &names,
            &[4, 5, 6],
            &mut Scratch::default(),
        );
        assert!(got.iter().all(|row| row[1] == 0), "CPU 5 is offline");
        let loc = names.iter().position(|n| n.starts_with("LOC")).unwrap_or(0);
        assert!(got[loc][0] > 0 && got[loc][2] > 0);
        // arm64: lettered IPIs with descriptions, a short Err line.
        let names: Vec<String> = parse_interrupts(ARM64)
            .1
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names[0], "11 (arch_timer)");
        assert_eq!(names[8], "IPI3 (CPU stop (for crash dump) interrupts)");
        assert_eq!(names.last().map(String::as_str), Some("Err"));
    }

    #[test]
    fn byte_parsers_agree_when_the_sources_changed_since_the_start() {
        // A device gone, one added, lines reordered: the counts follow the names.
        let later = KVM
            .lines()
            .filter(|l| !l.contains("virtio0-stats"))
            .map(|l| l.replace("ttyS0", "ttyS1"))
            .collect::<Vec<_>>();
        let mut later = later.join("\n");
        later.push_str("\n 99:  5  6  IO-APIC 9-edge   new-device\n");
        agree(&later, KVM, &[0, 1]);
        let reordered = {
            let mut v: Vec<&str> = KVM.lines().collect();
            v[1..].reverse();
            v.join("\n")
        };
        agree(&reordered, KVM, &[1, 0]);
        // Two sources with one name: both take the first line, as the reference does.
        let dup = "  CPU0 CPU1\nLOC: 1 2 Local\nLOC: 3 4 Local\nXYZ: 5 6\n";
        agree(dup, dup, &[0, 1]);
        assert_eq!(
            filled(
                fill_interrupts,
                dup,
                &["LOC (Local)".into(), "LOC (Local)".into()],
                &[1],
                &mut Scratch::default()
            ),
            [[2], [2]]
        );
    }

    #[test]
    fn byte_parsers_agree_on_odd_lines() {
        let odd = [
            "",
            "\n",
            "  CPU0 CPU1",
            "  CPU0 CPU1\r\n LOC: 1 2 Local timer\r\n ERR: 3\r\n",
            "CPU0\tCPU1\n  7:\t1\t2\tedge\tdev name\n",
            "  CPU0 CPU1\n LOC: 1 x 2 Local\n NMI: +4 5\n BIG: 18446744073709551615 18446744073709551616 tail\n",
            "  CPU0 CPU1\n no colon here\n : 1 2 empty label\n 12: 1 2\n 13:\n",
            "  CPU0 CPU0 CPU1\n A: 1 2 3 4 5\n",
            "  CPU1 CPU0\n A: 1 2\n B: 3\n",
            "  CPU0 CPU1\n TIMER: 1 2 3\n HI:\n X: 1 a\n",
            "cpu 1 2 3 4\ncpu0 1 2 3 4 5 6 7 8 9 10\ncpu1 1 2 3\ncpu+1 5 6 7 8\ncpu1 9 9 9 9\ncpux 1 2 3 4\n",
            "cpu0 1 2 3 4 x 6 7 8\ncpu18446744073709551616 1 2 3 4\n",
            "voluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches: :: 4 \n",
            "voluntary_ctxt_switches: x\nvoluntary_ctxt_switches: 5\nnonvoluntary_ctxt_switches: 1\n",
            "123 456 789\n",
            // Not ASCII: the reference parser reads it.
            "  CPU0 CPU1\n LOC: 1\u{a0}2 Local\u{2003}timer\n é: 3 4 ü\n",
        ];
        for text in odd {
            for cpus in [&[0usize][..], &[1], &[0, 1], &[1, 0], &[2]] {
                agree(text, text, cpus);
                agree(text, KVM, cpus);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn byte_parsers_agree_on_generated_text(
            lines in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::sample::select(vec![
                        "CPU0", "CPU1", "CPU3", "cpu0", "cpu1", "cpu", "12", "0", "+3", "+",
                        "18446744073709551616", "LOC", "ERR", "Local", "timer", "x", ":", " ",
                        "  ", "\t", "\r", "(", ")", "edge", "voluntary_ctxt_switches",
                        "nonvoluntary_ctxt_switches", "\u{a0}", "é",
                    ]),
                    0..12,
                ),
                0..8,
            ),
            cpus in proptest::collection::vec(0usize..4, 0..4),
        ) {
            let text: String = lines.iter().map(|l| l.concat() + "\n").collect();
            agree(&text, &text, &cpus);
            agree(&text, KVM, &cpus);
        }
    }

    #[test]
    fn this_machine_parses_alike_both_ways() {
        let cpus: Vec<usize> =
            (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        for path in ["/proc/interrupts", "/proc/softirqs", "/proc/stat"] {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            agree(&text, &text, &cpus);
        }
        // Read as the sampler reads: one file kept open, read again from offset 0.
        let f = std::fs::File::open("/proc/interrupts").expect("open /proc/interrupts");
        let mut buf = TextBuf::with_capacity(64);
        buf.read_file(&f, false).expect("read");
        let first = buf.bytes().len();
        assert!(first > 64 && buf.capacity() >= first, "grew to fit");
        buf.read_file(&f, false).expect("read again");
        let text = std::str::from_utf8(buf.bytes()).expect("ASCII");
        assert!(
            text.starts_with(' ') && text.contains("CPU0"),
            "from the start"
        );
        let names: Vec<String> = parse_interrupts(text)
            .1
            .into_iter()
            .map(|c| c.name)
            .collect();
        let got = filled(
            fill_interrupts,
            text,
            &names,
            &cpus,
            &mut Scratch::default(),
        );
        assert_eq!(got, oracle(parse_interrupts(text), &names, &cpus));
        assert!(
            got.iter().flatten().any(|&n| n > 0),
            "some interrupt has fired"
        );
        // A file made in one piece is whole after one read, even into a small buffer first.
        let f = std::fs::File::open("/proc/self/status").expect("open status");
        let mut buf = TextBuf::with_capacity(16);
        buf.read_file(&f, true).expect("read");
        let whole = std::fs::read_to_string("/proc/self/status").expect("status");
        assert_eq!(buf.bytes().len(), whole.len());
        assert!(ctxt_of(buf.bytes()).is_some());
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
