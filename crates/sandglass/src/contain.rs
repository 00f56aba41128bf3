//! Containment of what an external load starts: nothing a load starts may outlive its run.
//!
//! A load's command leads a process group of its own ([`sandglass_sys::child::isolate`]), but
//! a descendant may leave the group (`setsid`, `setpgid`: `timeout` does) and would then keep
//! running, perhaps at SCHED_FIFO 99, after sandglass has gone. A [`Jail`] follows every
//! descendant, whatever groups or sessions it makes, in one of two ways:
//!
//! - **A cgroup** (cgroup v2, `cgroups(7)`), where this process may create one below its own
//!   (root, or a delegated subtree): the load's child moves itself into
//!   `sandglass-load-PID-N` before it runs anything, and every process it starts is born there
//!   and cannot leave without privilege. Ending the load writes `1` to `cgroup.kill`; the
//!   directory is removed afterwards. A warden process outside the cgroup does the same when
//!   sandglass dies without doing it (SIGKILL included).
//! - **A subreaper** otherwise (`PR_SET_CHILD_SUBREAPER`, `prctl(2)`): an orphaned descendant
//!   becomes a child of sandglass instead of init, so walking `/proc` from sandglass down finds
//!   every descendant; the load's members are its leader's descendants and adopted orphans that
//!   left sandglass's process group. Ending the load sends SIGKILL to each and collects them.
//!
//! Either way the jail writes a state file in the runtime directory ([`runtime_dir`]) naming its
//! cgroup or, with a subreaper, the processes it has seen (pid and start time, rescanned every
//! 100 ms for the first two seconds of the load and every second after; a process started
//! since the last scan is not yet recorded). A sandglass killed with SIGKILL cannot clean up, so the next
//! start reads the state files whose owner has gone ([`sweep`]) and ends what they name.

use sandglass_sys::{child, Errno};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The environment variable that moves the runtime directory (tests, containers).
pub const RUNTIME_DIR_ENV: &str = "SANDGLASS_RUNTIME_DIR";
/// The environment variable that forbids the cgroup (`subreaper`), for tests of the fallback.
pub const CONTAIN_ENV: &str = "SANDGLASS_CONTAIN";

/// How often a subreaper jail rescans `/proc` for its state file: every 100 ms for the first
/// two seconds of its load, when most processes are started, then every second.
const SCAN_EVERY: Duration = Duration::from_secs(1);
const SCAN_EARLY: Duration = Duration::from_millis(100);
const EARLY: Duration = Duration::from_secs(2);
/// How long ending a jail waits for its processes to vanish after SIGKILL.
const END_LIMIT: Duration = Duration::from_secs(2);

static NEXT_JAIL: AtomicU64 = AtomicU64::new(0);
/// The leaders of running subreaper jails: an orphan in another group is not one of them.
static LEADERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// The directory of sandglass's runtime state (CPU locks, jails' state files), created with
/// mode 1777 so that every user's sandglass shares it: `$SANDGLASS_RUNTIME_DIR`, else
/// `/run/sandglass` when it can be used, else `$XDG_RUNTIME_DIR/sandglass`, else
/// `sandglass-UID` under the temporary directory.
pub fn runtime_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(RUNTIME_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let mut candidates = vec![PathBuf::from("/run/sandglass")];
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        candidates.push(PathBuf::from(x).join("sandglass"));
    }
    let fallback =
        std::env::temp_dir().join(format!("sandglass-{}", sandglass_sys::process::euid()));
    candidates
        .into_iter()
        .find(|d| usable_dir(d, true))
        .unwrap_or(fallback)
}

/// Creates `dir` (mode 1777 when `shared`) and checks that a file can be made in it.
pub(crate) fn usable_dir(dir: &Path, shared: bool) -> bool {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::create_dir_all(dir).is_err() {
        return false;
    }
    if shared {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777));
    }
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    let ok = std::fs::File::create(&probe).is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

/// One line of `/proc/PID/stat`, the fields containment needs (`proc(5)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub pid: i32,
    pub state: char,
    pub ppid: i32,
    pub pgid: i32,
    /// Clock ticks after boot at which it started: with the pid, names one process.
    pub start: u64,
}

/// Parses a `/proc/PID/stat` line (fields 1, 3, 4, 5 and 22; the command name in field 2 may
/// contain blanks and parentheses, so the rest is read after the last `)`).
pub(crate) fn parse_stat(line: &str) -> Option<ProcStat> {
    let close = line.rfind(')')?;
    let pid = line[..line.find('(')?].trim().parse().ok()?;
    let f: Vec<&str> = line[close + 1..].split_whitespace().collect();
    Some(ProcStat {
        pid,
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgid: f.get(2)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
    })
}

pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process of `/proc`.
fn proc_table() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc_stat)
        .collect()
}

/// `roots` and every process below them in `table`.
fn below(table: &[ProcStat], roots: &BTreeSet<i32>) -> BTreeSet<i32> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut found = BTreeSet::new();
    let mut todo: Vec<i32> = roots.iter().copied().collect();
    while let Some(pid) = todo.pop() {
        if found.insert(pid) {
            todo.extend(children.get(&pid).into_iter().flatten());
        }
    }
    found.retain(|pid| table.iter().any(|p| p.pid == *pid));
    found
}

/// The cgroup v2 directory of this process, from `/proc/self/mountinfo` and `/proc/self/cgroup`.
fn own_cgroup() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2").then(|| left.split(' ').nth(4))?
    })?;
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = groups.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(Path::new(mount).join(path.trim_start_matches('/')))
}

/// Makes a cgroup for one load below this process's own, when this process may move a child
/// into it (`cgroup.procs` of its own cgroup is writable: root, or a delegated subtree).
fn make_cgroup(seq: u64) -> Option<PathBuf> {
    if std::env::var(CONTAIN_ENV).is_ok_and(|v| v == "subreaper") {
        return None;
    }
    let own = own_cgroup()?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(own.join("cgroup.procs"))
        .ok()?;
    let dir = own.join(format!("sandglass-load-{}-{seq}", std::process::id()));
    std::fs::create_dir(&dir).ok()?;
    Some(dir)
}

/// Why a cgroup still has members: true while `cgroup.events` says `populated 1`.
fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .map(|t| t.lines().any(|l| l.trim() == "populated 1"))
        .unwrap_or(false)
}

fn cgroup_pids(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// SIGKILL to every process of a cgroup: `cgroup.kill` (Linux 5.14), else each process in turn.
fn kill_cgroup(dir: &Path) {
    if std::fs::write(dir.join("cgroup.kill"), "1").is_err() {
        for pid in cgroup_pids(dir) {
            let _ = sandglass_sys::signal::send_to_process(pid, child::SIGKILL);
        }
    }
}

/// The processes of one external load, and the means to end them all.
#[derive(Debug)]
pub struct Jail {
    cgroup: Option<PathBuf>,
    warden: Option<child::Warden>,
    leader: Option<i32>,
    /// Subreaper jails: every member seen, with its start time.
    tracked: BTreeMap<i32, u64>,
    scanned: Option<Instant>,
    created: Instant,
    state: Option<PathBuf>,
}

impl Jail {
    /// A jail in a cgroup of its own when one can be made, else with this process as subreaper.
    pub fn new() -> Jail {
        let seq = NEXT_JAIL.fetch_add(1, Ordering::Relaxed);
        let cgroup = make_cgroup(seq);
        if cgroup.is_none() {
            let _ = child::set_child_subreaper();
        }
        let dir = runtime_dir().join("loads");
        let state = usable_dir(&dir, false)
            .then(|| dir.join(format!("{}-{seq}.state", std::process::id())));
        Jail {
            cgroup,
            warden: None,
            leader: None,
            tracked: BTreeMap::new(),
            scanned: None,
            created: Instant::now(),
            state,
        }
    }

    /// How the jail holds its processes, in words: `cgroup DIR` or `subreaper`.
    pub fn method(&self) -> String {
        match &self.cgroup {
            Some(d) => format!("cgroup {}", d.display()),
            None => "subreaper".into(),
        }
    }

    /// Prepares `cmd` to start in the jail (see [`child::isolate`]).
    pub fn prepare(&mut self, cmd: &mut Command) -> Result<(), Errno> {
        self.warden = child::isolate(cmd, self.cgroup.as_deref())?;
        Ok(())
    }

    /// Records the started child, which leads the load's process group.
    pub fn started(&mut self, leader: i32) {
        self.leader = Some(leader);
        if self.cgroup.is_none() {
            LEADERS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(leader);
        }
        self.save();
    }

    /// The processes in the jail now (zombies of a subreaper jail included, to be collected).
    fn members(&self) -> Vec<ProcStat> {
        if let Some(dir) = &self.cgroup {
            return cgroup_pids(dir).into_iter().filter_map(proc_stat).collect();
        }
        let table = proc_table();
        let me = std::process::id() as i32;
        let my_group = proc_stat(me).map(|p| p.pgid).unwrap_or(me);
        let leaders = LEADERS.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut roots: BTreeSet<i32> = self.leader.into_iter().collect();
        for p in &table {
            let ours = self.tracked.get(&p.pid) == Some(&p.start);
            let adopted = p.ppid == me && p.pgid != my_group && !leaders.contains(&p.pid);
            if ours || adopted {
                roots.insert(p.pid);
            }
        }
        let found = below(&table, &roots);
        table
            .into_iter()
            .filter(|p| found.contains(&p.pid))
            .collect()
    }

    /// True while a process of the jail, other than a zombie, exists.
    pub fn alive(&self) -> bool {
        match &self.cgroup {
            Some(d) => populated(d),
            None => self.members().iter().any(|p| p.state != 'Z'),
        }
    }

    /// Sends `signo` to every process of the jail.
    pub fn signal(&self, signo: i32) {
        for p in self.members() {
            if p.state != 'Z' {
                let _ = sandglass_sys::signal::send_to_process(p.pid, signo);
            }
        }
    }

    /// A subreaper jail rescans its members every second and records them in its state file,
    /// and collects the adopted orphans that have ended; a cgroup jail has nothing to do.
    pub fn poll(&mut self) {
        let every = if self.created.elapsed() < EARLY {
            SCAN_EARLY
        } else {
            SCAN_EVERY
        };
        if self.cgroup.is_some() || self.scanned.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.scanned = Some(Instant::now());
        let members = self.members();
        self.collect(&members);
        let now: BTreeMap<i32, u64> = members
            .iter()
            .filter(|p| p.state != 'Z')
            .map(|p| (p.pid, p.start))
            .collect();
        if now != self.tracked {
            self.tracked = now;
            self.save();
        }
    }

    /// Collects ended orphans adopted by this process (not the leader: its `Child` waits).
    fn collect(&self, members: &[ProcStat]) {
        let me = std::process::id() as i32;
        for p in members {
            if p.ppid == me && Some(p.pid) != self.leader && p.state == 'Z' {
                child::reap(p.pid);
            }
        }
    }

    /// Ends every process of the jail (SIGKILL), waits up to two seconds for them to vanish,
    /// removes the cgroup and the state file. Returns how many processes were still there to
    /// end, or an error naming what could not be ended.
    pub fn close(&mut self) -> Result<usize, String> {
        let members = self.members();
        let ended = members.iter().filter(|p| p.state != 'Z').count();
        match &self.cgroup {
            Some(d) => kill_cgroup(d),
            None => self.signal(child::SIGKILL),
        }
        let deadline = Instant::now() + END_LIMIT;
        while self.alive() && Instant::now() < deadline {
            self.collect(&self.members());
            std::thread::sleep(Duration::from_millis(10));
        }
        self.collect(&self.members());
        let left = self.alive();
        if let Some(d) = &self.cgroup {
            if !left {
                let _ = std::fs::remove_dir(d);
            }
        }
        if let Some(leader) = self.leader {
            LEADERS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&leader);
        }
        // Closing the pipe lets the warden go; it finds the cgroup already removed.
        self.warden = None;
        if left {
            return Err(format!(
                "processes of the load ({}) were still running {} s after SIGKILL",
                self.method(),
                END_LIMIT.as_secs()
            ));
        }
        if let Some(s) = self.state.take() {
            let _ = std::fs::remove_file(s);
        }
        Ok(ended)
    }

    /// Writes the state file: the owner, then the cgroup or the tracked processes.
    fn save(&self) {
        let Some(path) = &self.state else {
            return;
        };
        let me = std::process::id() as i32;
        let mut text = format!(
            "owner {me} {}\n",
            proc_stat(me).map(|p| p.start).unwrap_or(0)
        );
        if let Some(d) = &self.cgroup {
            text.push_str(&format!("cgroup {}\n", d.display()));
        }
        let mut procs = self.tracked.clone();
        if let Some(p) = self.leader.and_then(proc_stat) {
            procs.insert(p.pid, p.start);
        }
        for (pid, start) in procs {
            text.push_str(&format!("proc {pid} {start}\n"));
        }
        let tmp = path.with_extension("tmp");
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

impl Default for Jail {
    fn default() -> Jail {
        Jail::new()
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        if self.state.is_some() || self.warden.is_some() {
            let _ = self.close();
        }
    }
}

/// What [`sweep`] found of one load left by a sandglass that was killed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    /// The pid of the sandglass that started the load.
    pub owner: i32,
    /// How the load was held: `cgroup DIR` or `subreaper`.
    pub method: String,
    /// Processes that were still running and have now been sent SIGKILL.
    pub ended: usize,
}

/// Ends what loads of sandglass processes that have gone (killed with SIGKILL, crashed) left
/// running, from their state files, and removes those files and empty cgroups. A process is
/// ended only when both its pid and its start time match the record, so a reused pid is safe.
pub fn sweep() -> Vec<Leftover> {
    sweep_in(&runtime_dir().join("loads"))
}

fn sweep_in(dir: &Path) -> Vec<Leftover> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("state") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Some(state) = StateFile::parse(&text) else {
            let _ = std::fs::remove_file(&path);
            continue;
        };
        if proc_stat(state.owner).is_some_and(|p| p.start == state.owner_start) {
            continue;
        }
        let mut ended = 0;
        if let Some(d) = &state.cgroup {
            ended += cgroup_pids(d).len();
            kill_cgroup(d);
            let deadline = Instant::now() + END_LIMIT;
            while populated(d) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = std::fs::remove_dir(d);
        }
        for (pid, start) in &state.procs {
            if proc_stat(*pid).is_some_and(|p| p.start == *start && p.state != 'Z')
                && sandglass_sys::signal::send_to_process(*pid, child::SIGKILL).is_ok()
            {
                ended += 1;
            }
        }
        let _ = std::fs::remove_file(&path);
        found.push(Leftover {
            owner: state.owner,
            method: match &state.cgroup {
                Some(d) => format!("cgroup {}", d.display()),
                None => "subreaper".into(),
            },
            ended,
        });
    }
    found
}

/// A jail's state file, read back.
#[derive(Debug, PartialEq, Eq)]
struct StateFile {
    owner: i32,
    owner_start: u64,
    cgroup: Option<PathBuf>,
    procs: Vec<(i32, u64)>,
}

impl StateFile {
    fn parse(text: &str) -> Option<StateFile> {
        let mut owner = None;
        let mut cgroup = None;
        let mut procs = Vec::new();
        for line in text.lines() {
            let (key, rest) = line.split_once(' ')?;
            let pair = || -> Option<(i32, u64)> {
                let (a, b) = rest.split_once(' ')?;
                Some((a.parse().ok()?, b.parse().ok()?))
            };
            match key {
                "owner" => owner = Some(pair()?),
                // Only a cgroup of sandglass's own naming is ever killed.
                "cgroup" => {
                    cgroup = rest
                        .contains("/sandglass-load-")
                        .then(|| PathBuf::from(rest))
                }
                "proc" => procs.push(pair()?),
                _ => return None,
            }
        }
        let (owner, owner_start) = owner?;
        Some(StateFile {
            owner,
            owner_start,
            cgroup,
            procs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_after_the_command_name() {
        let line =
            "4242 (a (b) c) S 1 4240 4240 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                pid: 4242,
                state: 'S',
                ppid: 1,
                pgid: 4240,
                start: 98765
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn state_files_round_trip_and_refuse_foreign_cgroups() {
        let s = StateFile::parse(
            "owner 10 500\ncgroup /sys/fs/cgroup/sandglass-load-10-0\nproc 11 501\nproc 12 502\n",
        )
        .expect("parse");
        assert_eq!(s.owner, 10);
        assert_eq!(
            s.cgroup.as_deref(),
            Some(Path::new("/sys/fs/cgroup/sandglass-load-10-0"))
        );
        assert_eq!(s.procs, vec![(11, 501), (12, 502)]);
        let foreign =
            StateFile::parse("owner 10 500\ncgroup /sys/fs/cgroup/user.slice\n").expect("parse");
        assert_eq!(foreign.cgroup, None);
        assert_eq!(StateFile::parse("owner x\n"), None);
        assert_eq!(StateFile::parse("proc 1 2\n"), None);
    }

    #[test]
    fn descendants_are_found_through_every_generation() {
        let p = |pid, ppid| ProcStat {
            pid,
            state: 'S',
            ppid,
            pgid: pid,
            start: 0,
        };
        let table = [p(1, 0), p(10, 1), p(11, 10), p(12, 11), p(20, 1)];
        let roots = [10].into_iter().collect();
        assert_eq!(
            below(&table, &roots),
            [10, 11, 12].into_iter().collect::<BTreeSet<_>>()
        );
    }

    #[test]
    fn a_sweep_spares_live_owners_and_ends_what_dead_ones_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let me = std::process::id() as i32;
        let my_start = proc_stat(me).expect("own stat").start;
        std::fs::write(
            dir.path().join("live.state"),
            format!("owner {me} {my_start}\n"),
        )
        .expect("write");
        let mut sleeper = Command::new("sleep").arg("30").spawn().expect("sleep");
        let pid = sleeper.id() as i32;
        let start = proc_stat(pid).expect("sleeper stat").start;
        // An owner with this pid but another start time has gone (its pid was reused).
        std::fs::write(
            dir.path().join("dead.state"),
            format!(
                "owner {me} {}\nproc {pid} {start}\nproc {pid} {}\n",
                my_start + 1,
                start + 1
            ),
        )
        .expect("write");
        let found = sweep_in(dir.path());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].ended, 1);
        assert_eq!(found[0].method, "subreaper");
        let status = sleeper.wait().expect("wait");
        assert!(!status.success());
        assert!(dir.path().join("live.state").exists());
        assert!(!dir.path().join("dead.state").exists());
    }
}
