#!/usr/bin/env python3
"""Fault-injection soak: sandglass runs ended by SIGINT, SIGTERM and SIGKILL at random moments,
on a full disk and in an unwritable place, each checked for lost results, a damaged catalog,
leftover processes and changed kernel settings.

    python3 tests/soak.py [--runs 50] [--kills 5] [--seed N] [--bin PATH] [--quick] [--keep]

Everything is written to a fresh temporary runs directory (SANDGLASS_RUNS_DIR), so the user's
store is never touched. The full-disk and read-only checks mount small tmpfs file systems and
need root; without root they are skipped and say so. Standard library only.

Each signalled run: a kind chosen by the seeded generator (timer, noise, Hourglass variants,
bench ctxsw and timer-overhead, study quick at a tenth of its length, traced runs when tracefs is
usable, runs with built-in loads and with external load processes), SIGINT or SIGTERM (and
sometimes the other one shortly after) at a random moment between 0.05 s and the planned
length. Then: the exit code (130 after SIGINT, 143 after SIGTERM, docs/guide.md), the run directory (a study's
directory and cells) with its manifest state `interrupted` (or `completed` when the signal came
after the end, counted apart), every file the manifest lists checked against its size and
SHA-256 here and by `sandglass runs show`, `sandglass report` reading it, `sandglass runs --all
--json` listing it with the same state, no process of the run left after a grace period, and
the kernel state identical before and after.

SIGKILL cases: the run is killed; no process of it may remain (loads have a parent-death
signal), the kernel state must be identical but for a traced run's tracefs instance, which the
next start must remove; the next run must work, `runs` and `runs rebuild` must work, the
catalog database must pass SQLite's integrity check, the killed directory must never be
presented as a finished run (`report` refuses it), and a killed study must finish with
`study --resume`.

Full disk: `timer -d 2s` into tmpfs file systems from already full to 256 KiB, which fail before
the measurement, while writing the data files, or while indexing the run. Unwritable: a read-only
tmpfs and a mode-0555 directory (as user 65534 through setpriv): every kind must be refused with
one error line and exit code 2 before anything is measured or any load starts.

Exit status: 0 when every check passed, 1 otherwise.
"""

import argparse
import ctypes
import hashlib
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACEFS_MOUNTS = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
TAG_VAR = "SANDGLASS_SOAK_TAG"
GRACE_S = 1.0

# Top-level tracefs files that are settings a run could change and that outlive it.
TRACE_SETTINGS = [
    "tracing_on", "current_tracer", "trace_clock", "buffer_size_kb", "buffer_percent",
    "buffer_subbuf_size_kb", "tracing_cpumask", "trace_options", "set_event", "set_event_pid",
    "set_event_notrace_pid", "set_ftrace_filter", "set_ftrace_notrace", "set_ftrace_pid",
    "tracing_thresh", "saved_cmdlines_size", "timestamp_mode", "events/enable",
]
SYSCTLS = [
    "/proc/sys/kernel/sched_rt_runtime_us", "/proc/sys/kernel/sched_rt_period_us",
    "/proc/sys/kernel/perf_event_paranoid", "/proc/sys/kernel/timer_migration",
]


# ---------------------------------------------------------------------------------------------
# Small helpers

def read_text(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError as e:
        return "<%s>" % (e.strerror or type(e).__name__)


def tracefs_root():
    for p in TRACEFS_MOUNTS:
        if os.path.isdir(os.path.join(p, "instances")) and os.path.exists(os.path.join(p, "trace_clock")):
            return p
    return None


def pids():
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            out.append(int(name))
    return out


def proc_environ_has(pid, needle):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return needle in f.read()
    except OSError:
        return False


def proc_stat(pid):
    """(comm, state, ppid, session) of pid, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    lp, rp = s.find("("), s.rfind(")")
    comm = s[lp + 1:rp]
    rest = s[rp + 2:].split()
    return comm, rest[0], int(rest[1]), int(rest[3])


def proc_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def fmt_s(x):
    return "%.2f s" % x


# ---------------------------------------------------------------------------------------------
# Kernel state

class KernelState:
    """Snapshots every setting a run could change that outlives it."""

    def __init__(self, session_tag):
        self.session_tag = session_tag.encode()
        self.tracefs = tracefs_root()

    def ours(self, pid):
        return proc_environ_has(pid, b"%s=%s" % (TAG_VAR.encode(), self.session_tag))

    def dma_holders(self):
        holders = {}
        me = os.getpid()
        for pid in pids():
            if pid == me:
                continue
            d = "/proc/%d/fd" % pid
            try:
                fds = os.listdir(d)
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.readlink(os.path.join(d, fd)) == "/dev/cpu_dma_latency":
                        st = proc_stat(pid)
                        holders[pid] = st[0] if st else "?"
                        break
                except OSError:
                    pass
        return holders

    def snapshot(self):
        s = {}
        t = self.tracefs
        if t:
            for name in TRACE_SETTINGS:
                p = os.path.join(t, name)
                if os.path.exists(p):
                    s["tracefs:" + name] = read_text(p)
            od = os.path.join(t, "options")
            if os.path.isdir(od):
                for name in sorted(os.listdir(od)):
                    s["tracefs:options/" + name] = read_text(os.path.join(od, name))
            ed = os.path.join(t, "events")
            for name in sorted(os.listdir(ed)) if os.path.isdir(ed) else []:
                p = os.path.join(ed, name, "enable")
                if os.path.isfile(p):
                    s["tracefs:events/%s/enable" % name] = read_text(p)
            insts = []
            for name in sorted(os.listdir(os.path.join(t, "instances"))):
                # Another user's live sandglass run is not ours to judge.
                # sandglass-PID-START (sandglass-PID before the start time was in the name).
                m = re.match(r"sandglass-(\d+)(?:-\d+)?$", name)
                if m:
                    pid = int(m.group(1))
                    if os.path.exists("/proc/%d" % pid) and not self.ours(pid):
                        continue
                insts.append(name)
            s["tracefs:instances/"] = " ".join(insts)
        holders = self.dma_holders()
        s["cpu_dma_latency holders"] = " ".join(
            "%d:%s" % (p, c) for p, c in sorted(holders.items())
            if self.ours(p) or p == os.getpid())
        s["cpu_dma_latency foreign holders"] = len([p for p in holders if not self.ours(p)])
        try:
            with open("/dev/cpu_dma_latency", "rb") as f:
                s["cpu_dma_latency value"] = int.from_bytes(f.read(4), "little", signed=True)
        except OSError as e:
            s["cpu_dma_latency value"] = "<%s>" % e.strerror
        s["own policy"] = os.sched_getscheduler(0)
        s["own priority"] = os.sched_getparam(0).sched_priority
        s["own nice"] = os.getpriority(os.PRIO_PROCESS, 0)
        s["own affinity"] = sorted(os.sched_getaffinity(0))
        for p in SYSCTLS:
            if os.path.exists(p):
                s[p] = read_text(p).strip()
        cpu = "/sys/devices/system/cpu"
        for name in sorted(os.listdir(cpu)):
            g = os.path.join(cpu, name, "cpufreq", "scaling_governor")
            if name.startswith("cpu") and os.path.exists(g):
                s["governor " + name] = read_text(g).strip()
        return s

    @staticmethod
    def diff(a, b, ignore=()):
        out = []
        for k in sorted(set(a) | set(b)):
            if k in ignore or k == "cpu_dma_latency foreign holders":
                continue
            if a.get(k) != b.get(k):
                out.append("%s: %r -> %r" % (k, a.get(k), b.get(k)))
        # The value in force may change only when someone else's hold changed.
        if "cpu_dma_latency value" in out and a.get("cpu_dma_latency foreign holders") != b.get(
                "cpu_dma_latency foreign holders"):
            out = [d for d in out if not d.startswith("cpu_dma_latency value")]
        return out


# ---------------------------------------------------------------------------------------------
# Run directories

def check_run_dir(path):
    """Checks a run directory against its manifest: (state, problems, n_files)."""
    problems = []
    mpath = os.path.join(path, "manifest.json")
    if not os.path.isfile(mpath):
        return None, ["%s: no manifest.json" % path], 0
    try:
        with open(mpath) as f:
            m = json.load(f)
    except (OSError, ValueError) as e:
        return None, ["%s: manifest.json unreadable: %s" % (path, e)], 0
    state = m.get("state")
    listed = set()
    for e in m.get("files", []):
        name = e.get("name", "")
        listed.add(name)
        p = os.path.join(path, name)
        if "/" in name or name.startswith("."):
            problems.append("%s: bad file name %r" % (path, name))
        elif not os.path.isfile(p):
            problems.append("%s: missing" % p)
        elif os.path.getsize(p) != e.get("bytes"):
            problems.append("%s: %d bytes, manifest says %s" % (p, os.path.getsize(p), e.get("bytes")))
        elif sha256_file(p) != e.get("sha256"):
            problems.append("%s: SHA-256 differs" % p)
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if name.startswith(".") and name.endswith(".tmp"):
            problems.append("%s: temporary file left behind" % full)
        elif os.path.isfile(full) and name != "manifest.json" and name not in listed and state != "running":
            problems.append("%s: not listed in the manifest" % full)
    if state not in ("running", None) and not m.get("ended_at"):
        problems.append("%s: state %s without ended_at" % (path, state))
    return state, problems, len(listed)


def check_study_dir(path):
    """(state, problems, n_files, cells) of a study directory; cells: [(cell id, state)]."""
    problems = []
    try:
        with open(os.path.join(path, "study.json")) as f:
            st = json.load(f)
    except (OSError, ValueError) as e:
        return None, ["%s: study.json unreadable: %s" % (path, e)], 0, []
    n = 0
    cells = []
    for c in st.get("cells", []):
        d = c.get("dir")
        cstate = c.get("state")
        if not d or not os.path.isdir(os.path.join(path, d)):
            if cstate not in ("pending", "skipped", None):
                problems.append("%s: cell %s is %s but has no directory" % (path, d, cstate))
            continue
        s, p, k = check_run_dir(os.path.join(path, d))
        problems += p
        n += k
        cells.append((d, s))
        if s != cstate:
            problems.append("%s: study.json says %s, its manifest %s" % (d, cstate, s))
    for name in os.listdir(path):
        if name.startswith(".") and name.endswith(".tmp"):
            problems.append("%s: temporary file left behind" % os.path.join(path, name))
    return st.get("state"), problems, n, cells


def check_dir(path):
    if os.path.isfile(os.path.join(path, "study.json")):
        return check_study_dir(path)
    s, p, n = check_run_dir(path)
    return s, p, n, []


# ---------------------------------------------------------------------------------------------
# The soak

class Kind:
    def __init__(self, name, args, planned, min_runtime=None, traced=False, children=False):
        self.name = name
        self.args = args
        self.planned = planned  # seconds from start to the planned end
        # A run that completed when signalled earlier than this ignored the signal.
        self.min_runtime = min_runtime
        self.traced = traced
        self.children = children


def kinds(have_trace, have_stress, quick):
    # planned: the wall time of the whole run uninterrupted on the reference machine (start-up,
    # settle, measurement, write-out), so that some signals land while the files are written or
    # after the end. min_runtime: the measurement alone, which cannot end sooner.
    k = [
        Kind("timer", ["timer", "-d", "3s"], 3.2, 3.0),
        Kind("noise", ["noise", "-d", "3s"], 3.2, 3.0),
        Kind("hourglass", ["hourglass", "-n", "2", "-d", "3s"], 3.3, 3.0),
        Kind("hourglass-periodic",
             ["hourglass", "-n", "2", "-d", "3s", "-t", "1", "-w", "PERIODIC", "2ms", "10ms", "-p", "f:50"],
             3.3, 3.0),
        Kind("hourglass-lat",
             ["hourglass", "-n", "2", "-d", "3s", "-t", "0", "-w", "LAT", "1ms", "-i", "HR", "-p", "RTHIGH"],
             3.3, 3.0),
        Kind("bench-ctxsw", ["bench", "ctxsw", "--cell-time", "400ms", "--max-trips", "1000000"], 2.9),
        Kind("bench-timer-overhead", ["bench", "timer-overhead", "--timers", "hr,timerfd", "--repeat", "2"], 4.3),
        Kind("study-quick", ["study", "quick", "--duration-scale", "0.1"], 6.0),
        Kind("timer-load-cpu", ["timer", "-d", "3s", "--load", "cpu"], 5.2, 3.0),
        Kind("noise-load-cpu", ["noise", "-d", "3s", "--load", "cpu+disk", "--settle", "0.5s"], 3.7, 3.0),
        Kind("noise-load-cmd",
             ["noise", "-d", "3s", "--load-cmd", "sleep 600", "--load", "compile", "--settle", "0.5s"],
             3.7, 3.0, children=True),
    ]
    if have_stress:
        k.append(Kind("timer-load-stress-ng", ["timer", "-d", "3s", "--load", "stress-ng:--cpu 1", "--settle", "0.5s"],
                      3.7, 3.0, children=True))
    if have_trace:
        k.append(Kind("timer-trace", ["timer", "--trace", "-d", "3s"], 3.4, 3.0, traced=True))
        k.append(Kind("hourglass-trace", ["hourglass", "-n", "2", "-d", "3s", "--trace"], 3.5, 3.0, traced=True))
    if quick:
        wanted = ["timer", "noise-load-cmd", "hourglass-periodic", "bench-ctxsw", "timer-trace", "study-quick"]
        byname = {x.name: x for x in k}
        k = [byname[n] for n in wanted if n in byname]
    return k


class Soak:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.abspath(args.bin)
        self.rng = random.Random(args.seed)
        self.session = "%d-%d" % (os.getpid(), int(time.time()))
        self.root = tempfile.mkdtemp(prefix="sandglass-soak-")
        self.runs_dir = os.path.join(self.root, "runs")
        os.mkdir(self.runs_dir)
        self.ks = KernelState(self.session)
        self.failures = []
        self.notes = []
        self.counter = 0
        self.mounts = []
        self.expected = {}  # run id -> state, every run the soak made that must stay listed
        self.fig = {
            "by_kind": {}, "interrupted": 0, "completed_before_signal": 0, "failed": 0,
            "double_signal": 0, "lost": 0, "kernel_changed": 0, "orphans": 0, "hangs": 0,
            "files_checked": 0, "sigint": 0, "sigterm": 0, "panics": 0, "reaped": 0,
        }
        self.kills = []
        self.disk = []
        self.unw = []

    # -- infrastructure ------------------------------------------------------------------------

    def env(self, runs_dir=None, tag=None):
        e = dict(os.environ)
        e["SANDGLASS_RUNS_DIR"] = runs_dir or self.runs_dir
        self.counter += 1
        e[TAG_VAR] = "%s-%d" % (self.session, self.counter) if tag is None else tag
        e.pop("RUST_BACKTRACE", None)
        return e

    def fail(self, what):
        self.failures.append(what)
        print("    FAIL: " + what, flush=True)

    def sandglass(self, args, runs_dir=None, timeout=60):
        """Runs a sandglass command to completion: (rc, stdout, stderr)."""
        p = subprocess.run([self.bin] + args, env=self.env(runs_dir), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout, start_new_session=True)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    def leftovers(self, sid, tag):
        """Processes of a run: its session or its tag in their environment."""
        out = []
        me = os.getpid()
        needle = ("%s=%s" % (TAG_VAR, tag)).encode()
        for pid in pids():
            if pid == me:
                continue
            st = proc_stat(pid)
            if st is None:
                continue
            if st[3] == sid or proc_environ_has(pid, needle):
                out.append("%d %s [%s] %s" % (pid, st[0], st[1], proc_cmdline(pid)[:80]))
        return out

    def reap(self):
        """Reaps the processes reparented to this one (a child subreaper), as init would."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.fig["reaped"] += 1

    def orphans_after(self, sid, tag):
        """The processes of a run still there after a grace period (dead ones are reaped)."""
        self.reap()
        left = self.leftovers(sid, tag)
        if left:
            time.sleep(GRACE_S)
            self.reap()
            left = self.leftovers(sid, tag)
        return left

    def check_leftovers(self, sid, tag, before, problems):
        """Counts and names the processes of a run left after it (sid -1: any process with
        the tag) and any kernel setting that differs from `before`; returns both lists."""
        orphans = self.orphans_after(sid, tag)
        if orphans:
            self.fig["orphans"] += len(orphans)
            problems.append("left behind: %s" % "; ".join(orphans))
        changed = KernelState.diff(before, self.ks.snapshot())
        if changed:
            self.fig["kernel_changed"] += 1
            problems.append("kernel state changed: %s" % "; ".join(changed))
        return orphans, changed

    def catalog_rows(self, runs_dir=None):
        rc, out, err = self.sandglass(["runs", "--all", "--json"], runs_dir)
        if rc != 0:
            return None, err.strip()
        try:
            return {r["id"]: r for r in json.loads(out)["runs"]}, ""
        except ValueError as e:
            return None, "runs --json is not JSON: %s" % e

    def integrity(self, runs_dir=None):
        db = os.path.join(runs_dir or self.runs_dir, "catalog.sqlite")
        if not os.path.exists(db):
            return "no catalog.sqlite"
        try:
            c = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=10)
            r = c.execute("PRAGMA integrity_check").fetchall()
            c.close()
        except sqlite3.Error as e:
            return "sqlite: %s" % e
        return "ok" if r == [("ok",)] else "integrity_check: %r" % r[:3]

    def new_dirs(self, before, runs_dir=None):
        d = runs_dir or self.runs_dir
        return sorted(n for n in set(os.listdir(d)) - before if os.path.isdir(os.path.join(d, n)))

    def tmp_dir(self, name):
        p = os.path.join(self.root, name)
        os.mkdir(p)
        return p

    def mount_tmpfs(self, path, opts):
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", path], check=True)
        self.mounts.append(path)

    def umount(self, path):
        subprocess.run(["umount", path], check=False)
        if path in self.mounts:
            self.mounts.remove(path)

    def cleanup(self):
        for m in list(self.mounts):
            self.umount(m)
        if self.args.keep:
            print("kept %s" % self.root)
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- one signalled run ---------------------------------------------------------------------

    def start(self, kind, tag):
        out = open(os.path.join(self.root, "out-%d.txt" % self.counter), "w+b")
        err = open(os.path.join(self.root, "err-%d.txt" % self.counter), "w+b")
        e = self.env(tag=tag)
        p = subprocess.Popen([self.bin] + kind.args, env=e, stdout=out, stderr=err,
                             start_new_session=True)
        return p, out, err

    @staticmethod
    def text(f):
        f.seek(0)
        return f.read().decode("utf-8", "replace")

    def check_listed(self, rid, state, report, cells, problems):
        rows, err = self.catalog_rows()
        if rows is None:
            problems.append("runs --json failed: %s" % err)
            return False
        ok = True
        r = rows.get(rid)
        if r is None:
            problems.append("%s not listed by runs" % rid)
            ok = False
        elif r.get("state") != state:
            problems.append("runs lists %s as %s, its directory says %s" % (rid, r.get("state"), state))
            ok = False
        for cid, cstate in cells:
            r = rows.get("%s/%s" % (rid, cid))
            if r is None or r.get("state") != cstate:
                problems.append("cell %s/%s listed as %s, is %s" % (rid, cid, r and r.get("state"), cstate))
                ok = False
        rc, _, err = self.sandglass(["runs", "show", rid])
        if rc != 0:
            problems.append("runs show %s: exit %d: %s" % (rid, rc, err.strip()[-300:]))
            ok = False
        if report:
            rc, _, err = self.sandglass(["report", os.path.join(self.runs_dir, rid)])
            if rc != 0:
                problems.append("report %s: exit %d: %s" % (rid, rc, err.strip()[-300:]))
                ok = False
        return ok

    def signalled_run(self, i, n, kind):
        f = self.fig
        sig = self.rng.choice([signal.SIGINT, signal.SIGTERM])
        at = self.rng.uniform(0.05, kind.planned)
        double = self.rng.random() < 0.15
        # The second signal lands while the run winds down and writes its files.
        second_after = self.rng.uniform(0.005, 0.05)
        f["by_kind"][kind.name] = f["by_kind"].get(kind.name, 0) + 1
        before = self.ks.snapshot()
        listing = set(os.listdir(self.runs_dir))
        tag = "%s-run%d" % (self.session, i)
        p, out, err = self.start(kind, tag)
        t0 = time.monotonic()
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        sent = []
        if p.poll() is None:
            os.kill(p.pid, sig)
            sent.append(sig)
            if double:
                time.sleep(second_after)
                if p.poll() is None:
                    other = signal.SIGTERM if sig == signal.SIGINT else signal.SIGINT
                    os.kill(p.pid, other)
                    sent.append(other)
        hang = False
        try:
            rc = p.wait(timeout=kind.planned + 60)
        except subprocess.TimeoutExpired:
            hang = True
            os.kill(p.pid, signal.SIGKILL)
            rc = p.wait()
        elapsed = time.monotonic() - t0
        problems = []
        if hang:
            f["hangs"] += 1
            problems.append("did not exit within %.0f s of its planned end" % 60)
        if sent:
            f["sigint" if sent[0] == signal.SIGINT else "sigterm"] += 1
        if len(sent) > 1:
            f["double_signal"] += 1
        stdout, stderr = self.text(out), self.text(err)
        out.close()
        err.close()
        if "panicked" in stderr or "RUST_BACKTRACE" in stderr:
            f["panics"] += 1
            problems.append("panic: %s" % stderr.strip().splitlines()[-1][:200])
        orphans, changed = self.check_leftovers(p.pid, tag, before, problems)
        dirs = self.new_dirs(listing)
        lost = False
        state = None
        nfiles = 0
        if len(dirs) != 1:
            lost = True
            problems.append("expected one new run directory, found %d %s" % (len(dirs), dirs))
        else:
            rid = dirs[0]
            state, dproblems, nfiles, cells = check_dir(os.path.join(self.runs_dir, rid))
            f["files_checked"] += nfiles
            if dproblems:
                lost = True
                problems += dproblems
            if state not in ("interrupted", "completed"):
                lost = True
                problems.append("state %s, expected interrupted (or completed if the signal came late)" % state)
            if state == "completed" and sent and kind.min_runtime and at < kind.min_runtime - 0.05:
                problems.append("completed although signalled at %.3f s, before the end of its %.1f s" % (
                    at, kind.min_runtime))
            # docs/guide.md: 130 after SIGINT, 143 after SIGTERM (the first one taken), 0 for a run that
            # ended before the signal could cut it short.
            by_signal = {128 + int(s) for s in sent}
            if state == "interrupted" and rc not in by_signal:
                problems.append("exit code %d, expected one of %s for an interrupted run" % (rc, sorted(by_signal)))
            if state == "completed" and rc not in by_signal | {0}:
                problems.append("exit code %d, expected 0 (or %s if a signal came at the end)" % (rc, sorted(by_signal)))
            if state in ("interrupted", "completed"):
                # `report` prints the summary of timer, noise, Hourglass runs and studies (docs/report.md).
                if not self.check_listed(rid, state, not kind.name.startswith("bench"), cells, problems):
                    lost = True
                self.expected[rid] = state
        if lost:
            f["lost"] += 1
        if state == "interrupted" and not problems:
            f["interrupted"] += 1
        elif state == "completed" and not problems:
            f["completed_before_signal"] += 1
        else:
            f["failed"] += 1
        sigtxt = "+".join(signal.Signals(s).name for s in sent) or "no signal (ended first)"
        print("[%2d/%d] %-22s %-15s at %.3f s -> exit %s after %s, %s, %d files ok, %d orphans, kernel %s" % (
            i, n, kind.name, sigtxt, at, rc, fmt_s(elapsed), state or "no run", nfiles,
            len(orphans), "changed" if changed else "same"), flush=True)
        for pr in problems:
            self.fail("run %d (%s, %s at %.3f s): %s" % (i, kind.name, sigtxt, at, pr))

    # -- SIGKILL -------------------------------------------------------------------------------

    def kill_case(self, j, kind):
        before = self.ks.snapshot()
        listing = set(os.listdir(self.runs_dir))
        rows_before, _ = self.catalog_rows()
        tag = "%s-kill%d" % (self.session, j)
        p, out, err = self.start(kind, tag)
        at = self.rng.uniform(0.3, kind.planned * 0.9)
        time.sleep(at)
        os.kill(p.pid, signal.SIGKILL)
        rc = p.wait()
        out.close()
        err.close()
        problems = []
        res = {"kind": kind.name, "at": at}
        orphans = self.orphans_after(p.pid, tag)
        res["orphans"] = len(orphans)
        if orphans:
            self.fig["orphans"] += len(orphans)
            problems.append("left behind after SIGKILL: %s" % "; ".join(orphans))
        after = self.ks.snapshot()
        insts_b = set(before.get("tracefs:instances/", "").split())
        insts_a = set(after.get("tracefs:instances/", "").split())
        # The killed run's instance: sandglass-PID-START.
        stale = {n for n in insts_a if n.startswith("sandglass-%d-" % p.pid)}
        res["stale_instance"] = bool(stale)
        changed = KernelState.diff(before, after, ignore=("tracefs:instances/",))
        extra = insts_a - insts_b - stale
        if insts_b - insts_a or extra:
            changed.append("tracefs instances %s -> %s" % (sorted(insts_b), sorted(insts_a)))
        if changed:
            self.fig["kernel_changed"] += 1
            problems.append("kernel state changed by the killed run: %s" % "; ".join(changed))
        dirs = self.new_dirs(listing)
        rid = dirs[0] if len(dirs) == 1 else None
        res["dir_state"] = None
        if rid:
            res["dir_state"], dproblems, _, _ = check_dir(os.path.join(self.runs_dir, rid))
            if res["dir_state"] in ("completed", "interrupted") and dproblems:
                problems.append("killed run presented as %s with damaged files: %s" % (
                    res["dir_state"], dproblems))
        elif dirs:
            problems.append("several new directories after one killed run: %s" % dirs)
        # Before the next start: what the catalog shows.
        rows, e = self.catalog_rows()
        if rows is None:
            problems.append("runs after SIGKILL: %s" % e)
        res["listed_before_next"] = rows.get(rid, {}).get("state") if (rows and rid) else None
        # The next start: a short run of the same sort (traced when the killed one was).
        nxt = ["timer", "-d", "1s"] + (["--trace"] if kind.traced else [])
        listing2 = set(os.listdir(self.runs_dir))
        rc2, o2, e2 = self.sandglass(nxt)
        d2 = self.new_dirs(listing2)
        st2 = check_dir(os.path.join(self.runs_dir, d2[0]))[0] if len(d2) == 1 else None
        if rc2 != 0 or st2 != "completed":
            problems.append("next run after SIGKILL: exit %d, state %s: %s" % (rc2, st2, e2.strip()[-300:]))
        elif d2:
            self.expected[d2[0]] = "completed"
        after2 = self.ks.snapshot()
        res["stale_removed"] = not stale & set(after2.get("tracefs:instances/", "").split())
        if res["stale_instance"] and not res["stale_removed"]:
            problems.append("stale tracefs instance %s not removed by the next run" % " ".join(sorted(stale)))
        changed2 = KernelState.diff(before, after2)
        if changed2:
            self.fig["kernel_changed"] += 1
            problems.append("kernel state after the next run differs from before the killed one: %s" % "; ".join(changed2))
        rows, e = self.catalog_rows()
        if rows is None:
            problems.append("runs after the next run: %s" % e)
        res["listed_after_next"] = rows.get(rid, {}).get("state") if (rows and rid) else None
        rc3, o3, e3 = self.sandglass(["runs", "rebuild"])
        res["rebuild_rc"] = rc3
        if rc3 != 0:
            problems.append("runs rebuild after SIGKILL: exit %d: %s" % (rc3, e3.strip()))
        rows, e = self.catalog_rows()
        if rows is None:
            problems.append("runs after rebuild: %s" % e)
        else:
            res["listed_after_rebuild"] = rows.get(rid, {}).get("state") if rid else None
            if rid and res["listed_after_rebuild"] in ("completed", "interrupted"):
                problems.append("killed run listed as %s" % res["listed_after_rebuild"])
            for k, v in self.expected.items():
                if rows.get(k, {}).get("state") != v:
                    problems.append("after rebuild, %s is listed as %s, expected %s" % (
                        k, rows.get(k, {}).get("state"), v))
            if rows_before:
                gone = set(rows_before) - set(rows)
                if gone:
                    problems.append("rows lost from the catalog: %s" % sorted(gone)[:5])
        res["integrity"] = self.integrity()
        if res["integrity"] != "ok":
            problems.append("catalog: %s" % res["integrity"])
        is_study = bool(rid) and os.path.isfile(os.path.join(self.runs_dir, rid, "study.json"))
        if rid and not is_study:
            # A run that never finished is refused by name (docs/run-format.md).
            rc4, _, e4 = self.sandglass(["report", os.path.join(self.runs_dir, rid)])
            lines = [l for l in e4.strip().splitlines() if l.startswith("sandglass: error:")]
            res["report"] = "exit %d: %s" % (rc4, lines[-1] if lines else e4.strip()[-200:])
            if rc4 == 0 or not lines or "panicked" in e4:
                problems.append("report of the killed run: %s" % res["report"])
        elif rid:
            # A killed study shows its completed cells and says it is still running; it is
            # finished with --resume (docs/studies.md), which reruns the killed cell.
            path = os.path.join(self.runs_dir, rid)
            rc4, o4, e4 = self.sandglass(["report", path])
            res["report"] = "exit %d: %s" % (rc4, (o4.strip().splitlines() or [""])[-1][:120])
            if rc4 != 0 or "study completed" in o4 or "panicked" in e4:
                problems.append("report of the killed study: %s" % res["report"])
            rc5, o5, e5 = self.sandglass(["study", "--resume", path], timeout=120)
            st5, p5, _, cells5 = check_study_dir(path)
            res["resumed"] = "exit %d, study %s" % (rc5, st5)
            if rc5 != 0 or st5 != "completed" or p5:
                problems.append("study --resume after SIGKILL: exit %d, %s %s %s" % (
                    rc5, st5, p5, e5.strip()[-300:]))
            else:
                self.expected[rid] = "completed"
                for cid, cst in cells5:
                    self.expected["%s/%s" % (rid, cid)] = cst
        # Marked as incomplete: any state other than running/completed/interrupted.
        res["marked_incomplete"] = res.get("listed_after_rebuild") not in (None, "running", "completed", "interrupted")
        res["ok"] = not problems
        self.kills.append(res)
        print("[kill %d] %-22s SIGKILL at %.3f s -> dir %s; runs: before next %s, after next %s, after rebuild %s; "
              "stale instance %s; %d orphans; catalog %s%s" % (
                  j, kind.name, at, res["dir_state"], res["listed_before_next"], res["listed_after_next"],
                  res.get("listed_after_rebuild"),
                  ("left, removed by the next traced run" if res["stale_removed"] else "left, NOT removed")
                  if res["stale_instance"] else "none", res["orphans"], res["integrity"],
                  "; study --resume: %s" % res["resumed"] if "resumed" in res else ""), flush=True)
        for pr in problems:
            self.fail("kill %d (%s): %s" % (j, kind.name, pr))

    # -- full disk -----------------------------------------------------------------------------

    def full_disk(self, sizes):
        cpu = max(os.sched_getaffinity(0))
        for size in sizes:
            mnt = self.tmp_dir("disk-%s" % size)
            res = {"size": size}
            problems = []
            try:
                self.mount_tmpfs(mnt, "size=%s" % ("64k" if size == "full" else size))
                if size == "full":
                    fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
                    try:
                        while os.write(fd, b"\0" * 4096) > 0:
                            pass
                    except OSError:
                        pass
                    finally:
                        os.close(fd)
                before = self.ks.snapshot()
                tag = "%s-disk-%s" % (self.session, size)
                t0 = time.monotonic()
                p = subprocess.run([self.bin, "timer", "-d", "2s", "-c", str(cpu)], env=self.env(mnt, tag),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                                   start_new_session=True)
                el = time.monotonic() - t0
                err = p.stderr.decode("utf-8", "replace")
                res["rc"] = p.returncode
                res["elapsed"] = el
                errors = [l for l in err.splitlines() if l.startswith("sandglass: error:")]
                res["error"] = errors[0] if errors else None
                if "panicked" in err:
                    problems.append("panic: %s" % err.strip()[-200:])
                if p.returncode == 0:
                    res["outcome"] = ("completed, not indexed (warned)" if "not added to the catalog" in err
                                      else "completed")
                elif el < 1.0:
                    res["outcome"] = "refused before measuring"
                else:
                    res["outcome"] = "failed while saving"
                if p.returncode != 0:
                    if len(errors) != 1:
                        problems.append("expected one error line, got %d: %s" % (len(errors), err.strip()[-300:]))
                    elif not any(w in errors[0] for w in ("No space left", "disk is full", "space")):
                        problems.append("error does not say the disk is full: %s" % errors[0])
                self.check_leftovers(-1, tag, before, problems)
                rc_full, _, e_full = self.sandglass(["runs"], mnt)
                res["runs_while_full"] = "exit %d" % rc_full
                if "panicked" in e_full:
                    problems.append("runs while full panicked")
                # Free space, then everything must be consistent.
                subprocess.run(["mount", "-o", "remount,size=16m", mnt], check=True)
                if size == "full":
                    os.unlink(os.path.join(mnt, "filler"))
                runs_dirs = [d for d in os.listdir(mnt) if os.path.isdir(os.path.join(mnt, d))]
                rows, e = self.catalog_rows(mnt)
                if rows is None:
                    problems.append("runs after freeing space: %s" % e)
                    rows = {}
                res["dirs"] = []
                for d in runs_dirs:
                    st, dp, _, _ = check_dir(os.path.join(mnt, d))
                    listed = rows.get(d, {}).get("state")
                    res["dirs"].append((d, st, listed, dp))
                    if st in ("completed", "interrupted") and dp:
                        problems.append("%s says %s but: %s" % (d, st, dp))
                    if listed in ("completed", "interrupted") and (st != listed or dp):
                        problems.append("runs lists %s as %s; its directory: %s %s" % (d, listed, st, dp))
                    if st in ("completed", "interrupted") and not dp and listed != st:
                        problems.append("complete run %s not listed by runs after space was freed (listed: %s)" % (
                            d, listed))
                    if st is None:
                        problems.append("directory %s left without a manifest" % d)
                    for name in os.listdir(os.path.join(mnt, d)):
                        if name.endswith(".tmp"):
                            problems.append("%s/%s: temporary file left behind" % (d, name))
                if p.returncode == 0 and not any(st == "completed" for _, st, _, _ in res["dirs"]):
                    problems.append("exit 0 but no completed run directory")
                res["integrity"] = self.integrity(mnt)
                if res["integrity"] not in ("ok", "no catalog.sqlite"):
                    problems.append("catalog: %s" % res["integrity"])
                rc_rb, _, e_rb = self.sandglass(["runs", "rebuild"], mnt)
                if rc_rb != 0:
                    problems.append("runs rebuild after freeing space: exit %d %s" % (rc_rb, e_rb.strip()))
            except (OSError, subprocess.SubprocessError) as e:
                problems.append("could not run the check: %s" % e)
            finally:
                self.umount(mnt)
            res["ok"] = not problems
            self.disk.append(res)
            print("[disk %-4s] exit %s after %s: %s; %s; runs while full: %s; dirs: %s" % (
                size, res.get("rc"), fmt_s(res.get("elapsed", 0)), res.get("outcome"),
                res.get("error") or "no error line", res.get("runs_while_full"),
                ", ".join("%s %s (listed %s)" % (d[-4:], st, ls) for d, st, ls, _ in res.get("dirs", [])) or "none"),
                flush=True)
            for pr in problems:
                self.fail("full disk %s: %s" % (size, pr))

    # -- unwritable ----------------------------------------------------------------------------

    def unwritable(self, have_trace, have_stress):
        ro = self.tmp_dir("readonly")
        self.mount_tmpfs(ro, "ro,size=64k")
        dense = self.tmp_dir("mode0555")
        os.chmod(self.root, 0o755)
        os.chmod(dense, 0o555)
        cases = [
            ("timer, read-only runs dir", ["timer", "-d", "3s"], ro, None),
            ("noise -o in a read-only fs", ["noise", "-d", "3s", "-o", os.path.join(ro, "run")], ro, None),
            ("hourglass, read-only runs dir", ["hourglass", "-n", "2", "-d", "3s"], ro, None),
            ("bench ctxsw, read-only", ["bench", "ctxsw"], ro, None),
            ("study quick, read-only", ["study", "quick", "--duration-scale", "0.1"], ro, None),
            ("timer --load cpu, read-only", ["timer", "-d", "3s", "--load", "cpu"], ro, None),
        ]
        if have_stress:
            cases.append(("timer stress-ng load, read-only",
                          ["timer", "-d", "3s", "--load", "stress-ng:--cpu 1", "--settle", "0.5s"], ro, None))
        if have_trace:
            cases.append(("timer --trace, read-only", ["timer", "-d", "3s", "--trace"], ro, None))
        setpriv = shutil.which("setpriv")
        if setpriv:
            drop = [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups"]
            cases.append(("timer as nobody, mode 0555 runs dir", ["timer", "-d", "3s"], dense, drop))
            cases.append(("noise -o as nobody, mode 0555", ["noise", "-d", "3s", "-o", os.path.join(dense, "r")],
                          dense, drop))
        else:
            self.notes.append("setpriv not found: the mode-0555 case was skipped")
        try:
            for name, args, base, prefix in cases:
                before = self.ks.snapshot()
                tag = "%s-ro-%d" % (self.session, len(self.unw))
                t0 = time.monotonic()
                p = subprocess.run((prefix or []) + [self.bin] + args, env=self.env(base, tag),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                                   start_new_session=True)
                el = time.monotonic() - t0
                err = p.stderr.decode("utf-8", "replace")
                errors = [l for l in err.splitlines() if l.startswith("sandglass: error:")]
                problems = []
                if p.returncode != 2:
                    problems.append("exit %d, expected 2 (a command that cannot run as given)" % p.returncode)
                if el > 1.0:
                    problems.append("took %.2f s: the measurement (or its loads) started" % el)
                if len(errors) != 1:
                    problems.append("expected one error line: %s" % err.strip()[-300:])
                elif base not in errors[0]:
                    problems.append("the error does not name the place: %s" % errors[0])
                if "panicked" in err:
                    problems.append("panic")
                self.check_leftovers(-1, tag, before, problems)
                if os.listdir(base):
                    problems.append("something was written: %s" % os.listdir(base))
                res = {"name": name, "rc": p.returncode, "elapsed": el, "error": errors[0] if errors else None,
                       "ok": not problems}
                self.unw.append(res)
                print("[unwritable] %-38s exit %d after %.3f s: %s" % (name, p.returncode, el, res["error"]),
                      flush=True)
                for pr in problems:
                    self.fail("unwritable (%s): %s" % (name, pr))
        finally:
            self.umount(ro)

    # -- the end -------------------------------------------------------------------------------

    def final_catalog(self):
        problems = []
        rc, _, e = self.sandglass(["runs", "rebuild"])
        if rc != 0:
            problems.append("runs rebuild: exit %d %s" % (rc, e.strip()))
        rows, e = self.catalog_rows()
        if rows is None:
            problems.append("runs: %s" % e)
            rows = {}
        for k, v in self.expected.items():
            if rows.get(k, {}).get("state") != v:
                problems.append("%s listed as %s, expected %s" % (k, rows.get(k, {}).get("state"), v))
        integ = self.integrity()
        if integ != "ok":
            problems.append("catalog: %s" % integ)
        for pr in problems:
            self.fail("final catalog: %s" % pr)
        return len(rows), integ


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50, help="signalled runs (default 50; 6 with --quick)")
    ap.add_argument("--kills", type=int, default=None, help="SIGKILL cases (default 5; 1 with --quick)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock, printed)")
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "sandglass"),
                    help="the sandglass binary (built with cargo when missing)")
    ap.add_argument("--quick", action="store_true", help="a small subset for CI, well under a minute")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(time.time()) % 100000
    if args.quick and args.runs == 50:
        args.runs = 6
    if args.kills is None:
        args.kills = 1 if args.quick else 5

    if not os.path.exists(args.bin):
        print("soak: %s missing: cargo build --release --locked -q" % args.bin, flush=True)
        subprocess.run(["cargo", "build", "--release", "--locked", "-q"], cwd=REPO, check=True)
    root = os.geteuid() == 0
    if root and tracefs_root() is None:
        # sandglass mounts tracefs itself when it traces; mounted first, the mount is not
        # counted as a change of the kernel's state.
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS_MOUNTS[0]],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    have_trace = root and tracefs_root() is not None
    have_stress = shutil.which("stress-ng") is not None
    # Orphans are reparented to this process (as to init), which reaps them after each run.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass
    s = Soak(args)
    t_start = time.monotonic()
    ks = kinds(have_trace, have_stress, args.quick)
    print("soak: %s, seed %d, %d signalled runs, %d SIGKILL cases, runs directory %s" % (
        s.bin, args.seed, args.runs, args.kills, s.runs_dir), flush=True)
    if not have_trace:
        s.notes.append("tracefs unusable (not root or not mounted): traced runs skipped")
    if not have_stress:
        s.notes.append("stress-ng not installed: the stress-ng load was skipped")
    try:
        # Every kind equally often, in a seeded random order.
        order = []
        while len(order) < args.runs:
            batch = list(ks)
            s.rng.shuffle(batch)
            order += batch
        order = order[:args.runs]
        kill_kinds = [k for k in ks if k.traced] + [k for k in ks if k.children] + \
            [k for k in ks if k.name.startswith("study")] + [k for k in ks if k.name == "hourglass-periodic"]
        kill_kinds = kill_kinds or ks
        kill_at = {int((j + 1) * args.runs / (args.kills + 1)): j for j in range(args.kills)}
        for i, kind in enumerate(order, 1):
            s.signalled_run(i, args.runs, kind)
            if i in kill_at:
                j = kill_at[i]
                s.kill_case(j + 1, kill_kinds[j % len(kill_kinds)])
        if args.kills and not args.runs:
            for j in range(args.kills):
                s.kill_case(j + 1, kill_kinds[j % len(kill_kinds)])
        if root:
            s.full_disk(["full", "48k", "128k"] if args.quick else ["full", "16k", "48k", "96k", "128k", "160k", "256k"])
            s.unwritable(have_trace, have_stress)
        else:
            s.notes.append("not root: the full-disk and read-only checks (tmpfs mounts) were skipped")
        n_rows, integ = s.final_catalog()
    finally:
        s.cleanup()
    total = time.monotonic() - t_start
    f = s.fig
    print()
    print("Figures (seed %d, %s)" % (args.seed, time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())))
    rows = [
        ("signalled runs", "%d (SIGINT %d, SIGTERM %d, a second signal in %d)" % (
            args.runs, f["sigint"], f["sigterm"], f["double_signal"])),
        ("runs by kind", ", ".join("%s %d" % kv for kv in sorted(f["by_kind"].items()))),
        ("ended interrupted, results kept", f["interrupted"]),
        ("completed before the signal", f["completed_before_signal"]),
        ("failed a check", f["failed"]),
        ("files verified (size and SHA-256)", f["files_checked"]),
        ("lost results", f["lost"]),
        ("runs that changed kernel settings", f["kernel_changed"]),
        ("orphan processes", f["orphans"]),
        ("hangs / panics", "%d / %d" % (f["hangs"], f["panics"])),
        ("exited processes reaped after a run", "%d (reparented to the soak as to init; not orphans)" % f["reaped"]),
        ("SIGKILL cases", "%d, %d passed; killed dirs: %s; catalog shows them as: %s; stale tracefs instances "
         "%d, removed by the next traced run %d" % (
             len(s.kills), sum(k["ok"] for k in s.kills),
             ", ".join(sorted(set(str(k["dir_state"]) for k in s.kills))) or "-",
             ", ".join(sorted(set(str(k.get("listed_after_rebuild")) for k in s.kills))) or "-",
             sum(k["stale_instance"] for k in s.kills),
             sum(k["stale_instance"] and k["stale_removed"] for k in s.kills))),
        ("killed runs marked incomplete", "%d of %d" % (sum(k["marked_incomplete"] for k in s.kills), len(s.kills))),
        ("full disk", "; ".join("%s: %s" % (d["size"], d.get("outcome")) for d in s.disk) or "skipped"),
        ("full disk checks passed", "%d of %d" % (sum(d["ok"] for d in s.disk), len(s.disk))),
        ("unwritable place", "%d of %d refused with one error line, exit 2, in at most %.3f s" % (
            sum(u["ok"] for u in s.unw), len(s.unw),
            max([u["elapsed"] for u in s.unw] or [0]))),
        ("catalog at the end", "%d rows, integrity %s" % (n_rows, integ)),
        ("total time", fmt_s(total)),
    ]
    w = max(len(r[0]) for r in rows)
    for k, v in rows:
        print("  %-*s  %s" % (w, k, v))
    for n in s.notes:
        print("note: " + n)
    if s.failures:
        print("\n%d check(s) FAILED:" % len(s.failures))
        for x in s.failures:
            print("  - " + x)
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
