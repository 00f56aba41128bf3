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
//! Either way the jail writes a state file in `loads/` of the runtime directory
//! ([`crate::runtime`], private to the user) naming its cgroup or, with a subreaper, the
//! processes it has seen (pid and start time, rescanned every 100 ms for the first two seconds
//! of the load and every second after; a process started since the last scan is not yet
//! recorded). A sandglass killed with SIGKILL cannot clean up, so the next start reads the state
//! files whose owner has gone ([`sweep`]) and ends what they name, trusting nothing it did not
//! write: a record is read only when it is a regular file of this user's with one link, a
//! process is ended only when its pid and start time both match the record, and a cgroup only
//! when it lies in the cgroup v2 hierarchy and bears the name sandglass gives its loads with the
//! recorded owner's pid. Anything else is reported and left as it is.

use sandglass_sys::{child, Errno};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The environment variable that moves the runtime directory (tests, containers).
pub const RUNTIME_DIR_ENV: &str = crate::runtime::RUNTIME_DIR_ENV;
/// The environment variable that forbids the cgroup (`subreaper`), for tests of the fallback.
pub const CONTAIN_ENV: &str = "SANDGLASS_CONTAIN";

/// How often a subreaper jail rescans `/proc` for its state file: every 100 ms for the first
/// two seconds of its load, when most processes are started, then every second.
const SCAN_EVERY: Duration = Duration::from_secs(1);
const SCAN_EARLY: Duration = Duration::from_millis(100);
const EARLY: Duration = Duration::from_secs(2);
/// How long ending a jail waits for its processes to vanish after SIGKILL. A killed process
/// vanishes once it runs again to exit: one in uninterruptible I/O only when that I/O ends, and
/// one at normal priority only when the CPUs' real-time threads leave it time. On a busy machine
/// (the disk loaded, every CPU measured at real-time priority) that took more than 2 s; a process
/// that is still there after this long is reported, never left unsaid.
const END_LIMIT: Duration = Duration::from_secs(10);

static NEXT_JAIL: AtomicU64 = AtomicU64::new(0);
/// The leaders of running subreaper jails: an orphan in another group is not one of them.
static LEADERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

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

/// Where the cgroup v2 hierarchy is mounted, from `/proc/self/mountinfo`.
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2")
            .then(|| left.split(' ').nth(4).map(PathBuf::from))?
    })
}

/// The cgroup v2 directory of this process, from `/proc/self/mountinfo` and `/proc/self/cgroup`.
fn own_cgroup() -> Option<PathBuf> {
    let mount = cgroup2_mount()?;
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = groups.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(mount.join(path.trim_start_matches('/')))
}

/// Whether `dir` is a cgroup that sandglass process `owner` made for a load: below the cgroup
/// v2 mount `mount`, with no `.` or `..` in its path, named `sandglass-load-OWNER-N`, and a
/// directory rather than a link (or gone already: its warden removed it).
fn is_load_cgroup(dir: &Path, mount: &Path, owner: i32) -> bool {
    use std::path::Component;
    let plain = dir
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    let named = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(&format!("sandglass-load-{owner}-")))
        .is_some_and(|seq| !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit()));
    let kind = match dir.symlink_metadata() {
        Ok(m) => m.is_dir(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    };
    plain && named && kind && dir.starts_with(mount) && dir != mount
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
    /// The leader's start time: once its `Child` has been waited for, its pid may name another
    /// process, which the jail must not take for its own.
    leader_start: Option<u64>,
    /// Subreaper jails: every member seen, with its start time.
    tracked: BTreeMap<i32, u64>,
    scanned: Option<Instant>,
    created: Instant,
    /// Where its state file is, and its name there.
    state: Option<(crate::runtime::RuntimeDir, String)>,
}

impl Jail {
    /// A jail in a cgroup of its own when one can be made, else with this process as subreaper.
    pub fn new() -> Jail {
        let seq = NEXT_JAIL.fetch_add(1, Ordering::Relaxed);
        let cgroup = make_cgroup(seq);
        if cgroup.is_none() {
            let _ = child::set_child_subreaper();
        }
        let state = crate::runtime::dir()
            .and_then(|d| d.subdir("loads"))
            .ok()
            .map(|d| (d, format!("{}-{seq}.state", std::process::id())));
        Jail {
            cgroup,
            warden: None,
            leader: None,
            leader_start: None,
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
        self.leader_start = proc_stat(leader).map(|p| p.start);
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
        let mut roots = BTreeSet::new();
        for p in &table {
            let leader = Some(p.pid) == self.leader && Some(p.start) == self.leader_start;
            let ours = leader || self.tracked.get(&p.pid) == Some(&p.start);
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

    /// Ends every process of the jail (SIGKILL), waits up to 10 s (`END_LIMIT`) for them to vanish,
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
        if let Some((dir, name)) = self.state.take() {
            dir.remove(&name);
        }
        Ok(ended)
    }

    /// Writes the state file: the owner, then the cgroup or the tracked processes.
    fn save(&self) {
        let Some((dir, name)) = &self.state else {
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
        if let (Some(pid), Some(start)) = (self.leader, self.leader_start) {
            procs.insert(pid, start);
        }
        for (pid, start) in procs {
            text.push_str(&format!("proc {pid} {start}\n"));
        }
        let _ = dir.write(name, &text);
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
    /// The state file.
    pub record: PathBuf,
    /// The pid of the sandglass that started the load.
    pub owner: i32,
    /// How the load was held: `cgroup DIR` or `subreaper`.
    pub method: String,
    /// Processes that were still running and have now been sent SIGKILL.
    pub ended: usize,
    /// Why the record was not acted on (not this user's own file, a cgroup sandglass did not
    /// make): it is left as it is.
    pub refused: Option<String>,
}

/// Ends what loads of sandglass processes that have gone (killed with SIGKILL, crashed) left
/// running, from their state files in this user's runtime directory, and removes those files
/// and empty cgroups. A process is ended only when both its pid and its start time match the
/// record, so a reused pid is safe; a record this user did not write, or one naming a cgroup
/// sandglass did not make, is reported and left.
pub fn sweep() -> Vec<Leftover> {
    match crate::runtime::dir() {
        Ok(d) => match d.path().join("loads").symlink_metadata() {
            Ok(_) => match d.subdir("loads") {
                Ok(loads) => sweep_in(&loads),
                Err(e) => vec![Leftover {
                    record: d.path().join("loads"),
                    owner: 0,
                    method: String::new(),
                    ended: 0,
                    refused: Some(e.to_string()),
                }],
            },
            Err(_) => Vec::new(),
        },
        // The commands that need the directory say why it cannot be used.
        Err(_) => Vec::new(),
    }
}

fn sweep_in(dir: &crate::runtime::RuntimeDir) -> Vec<Leftover> {
    let mount = cgroup2_mount();
    let mut found = Vec::new();
    for name in dir.names() {
        if !name.ends_with(".state") {
            continue;
        }
        let record = dir.path().join(&name);
        let refuse = |owner: i32, why: String| Leftover {
            record: record.clone(),
            owner,
            method: String::new(),
            ended: 0,
            refused: Some(why),
        };
        let text = match dir.read(&name) {
            Ok(Some(t)) => t,
            Ok(None) => continue,
            Err(e) => {
                found.push(refuse(0, e.to_string()));
                continue;
            }
        };
        let Some(state) = StateFile::parse(&text) else {
            // This user's own file, but not one sandglass could have written whole.
            dir.remove(&name);
            continue;
        };
        if proc_stat(state.owner).is_some_and(|p| p.start == state.owner_start) {
            continue;
        }
        let mut ended = 0;
        if let Some(d) = &state.cgroup {
            if !mount
                .as_deref()
                .is_some_and(|m| is_load_cgroup(d, m, state.owner))
            {
                found.push(refuse(
                    state.owner,
                    format!(
                        "it names {}, which is not a cgroup sandglass made for a load",
                        d.display()
                    ),
                ));
                continue;
            }
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
        dir.remove(&name);
        found.push(Leftover {
            record,
            owner: state.owner,
            method: match &state.cgroup {
                Some(d) => format!("cgroup {}", d.display()),
                None => "subreaper".into(),
            },
            ended,
            refused: None,
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
                // Checked before it is acted on ([`is_load_cgroup`]).
                "cgroup" => cgroup = Some(PathBuf::from(rest)),
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

    /// A leader that has been waited for leaves its pid free: a process that takes it later (a
    /// different start time) is not the jail's, and nothing the jail does reaches it.
    #[test]
    fn a_pid_the_leader_left_names_nothing_of_the_jails() {
        let mut stranger = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = stranger.id() as i32;
        let start = proc_stat(pid).expect("stat").start;
        let mut jail = Jail {
            cgroup: None,
            warden: None,
            leader: Some(pid),
            leader_start: Some(start),
            tracked: BTreeMap::new(),
            scanned: None,
            created: Instant::now(),
            state: None,
        };
        assert!(jail.members().iter().any(|p| p.pid == pid));
        jail.leader_start = Some(start + 1);
        assert!(jail.members().is_empty(), "{:?}", jail.members());
        assert!(!jail.alive());
        jail.signal(child::SIGKILL);
        assert_eq!(
            stranger.try_wait().expect("wait"),
            None,
            "the stranger was signalled"
        );
        let _ = stranger.kill();
        let _ = stranger.wait();
    }

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
    fn state_files_round_trip() {
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
        assert_eq!(StateFile::parse("owner x\n"), None);
        assert_eq!(StateFile::parse("proc 1 2\n"), None);
    }

    #[test]
    fn only_cgroups_sandglass_made_for_the_recorded_owner_are_load_cgroups() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mount = tmp.path();
        let ours = mount.join("system.slice/sandglass-load-10-3");
        std::fs::create_dir_all(&ours).expect("mkdir");
        assert!(is_load_cgroup(&ours, mount, 10));
        // Another owner's, a foreign name, a path out of the hierarchy, a link, the mount.
        assert!(!is_load_cgroup(&ours, mount, 11));
        let user = mount.join("user.slice");
        std::fs::create_dir_all(&user).expect("mkdir");
        assert!(!is_load_cgroup(&user, mount, 10));
        let out = mount.join("system.slice/../../sandglass-load-10-3");
        assert!(!is_load_cgroup(&out, mount, 10));
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let outside = elsewhere.path().join("sandglass-load-10-4");
        std::fs::create_dir(&outside).expect("mkdir");
        assert!(!is_load_cgroup(&outside, mount, 10));
        let link = mount.join("sandglass-load-10-5");
        std::os::unix::fs::symlink(&user, &link).expect("symlink");
        assert!(!is_load_cgroup(&link, mount, 10));
        assert!(!is_load_cgroup(mount, mount, 10));
        // One its warden has removed already: nothing left to end.
        assert!(is_load_cgroup(
            &mount.join("sandglass-load-10-6"),
            mount,
            10
        ));
        assert!(!is_load_cgroup(
            &mount.join("sandglass-load-10-x"),
            mount,
            10
        ));
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
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = crate::runtime::RuntimeDir::at(tmp.path()).expect("runtime dir");
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
        // A record naming a cgroup sandglass did not make is reported and left.
        std::fs::write(
            dir.path().join("foreign.state"),
            format!(
                "owner {me} {}\ncgroup /sys/fs/cgroup/user.slice\n",
                my_start + 1
            ),
        )
        .expect("write");
        let mut found = sweep_in(&dir);
        found.sort_by_key(|l| l.refused.is_some());
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[1]
            .refused
            .as_deref()
            .is_some_and(|r| r.contains("user.slice")));
        assert!(dir.path().join("foreign.state").exists());
        assert_eq!(found[0].refused, None);
        assert_eq!(found[0].ended, 1);
        assert_eq!(found[0].method, "subreaper");
        let status = sleeper.wait().expect("wait");
        assert!(!status.success());
        assert!(dir.path().join("live.state").exists());
        assert!(!dir.path().join("dead.state").exists());
    }
}
