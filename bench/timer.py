#!/usr/bin/env python3
"""sandglass timer beside cyclictest, and sandglass noise beside oslat, in one run.

Same CPU, interval and priority; alternating A and B REPS times; first on an idle machine, then
under `stress-ng --cpu 1 --vm 1`.

Both tools are measured the same way. Lateness: cyclictest runs with -N and a histogram of
2,000,000 one-nanosecond buckets, so its figures are not truncated to whole microseconds (its
default divides by 1000). CPU time per wakeup: the kernel's accounting of the measuring thread
itself, /proc/PID/task/TID/schedstat (time on the CPU, and the number of times the thread was
switched in), read 1.5 s into the run and 1 s before its end; the difference in time over the
difference in switch-ins is the cost of one wakeup, kernel and user space, without start-up,
calibration or result writing. Beside it, the whole process's CPU time (every thread, wherever
it ran) over the same window and the same wakeups.

cyclictest runs twice per repetition: as it starts by default, its main thread free to run on
the measured CPU, where its 10 ms sleep timer shares the CPU's timer queue with the measuring
thread; and with --mainaffinity on the CPU sandglass keeps its own main thread on, the same
placement as sandglass's. The three runs of a repetition rotate their order. Prints Markdown.

    python3 bench/timer.py [--cpu 1] [--seconds 10] [--reps 7] [--noise-reps 3]

--reps 0 runs only the noise comparison, --noise-reps 0 only the timer one.

Needs root (SCHED_FIFO, mlockall); installs rt-tests and stress-ng if they are missing.
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SG = os.path.join(ROOT, "target", "release", "sandglass")


def ensure_tools():
    missing = [p for p, t in (("rt-tests", "cyclictest"), ("stress-ng", "stress-ng")) if not shutil.which(t)]
    if missing:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)


def run(cmd):
    """Runs cmd, returns its standard output."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr}")
    return p.stdout


def thread_stats(pid):
    """{tid: (comm, ns on cpu, switch-ins)} of a process, from schedstat."""
    out = {}
    for d in glob.glob(f"/proc/{pid}/task/*"):
        try:
            comm = open(d + "/comm").read().strip()
            on_cpu, _, slices = map(int, open(d + "/schedstat").read().split())
            out[d.rsplit("/", 1)[1]] = (comm, on_cpu, slices)
        except (OSError, ValueError):
            pass
    return out


def run_sampled(cmd, secs):
    """Runs cmd for about secs seconds; returns (stdout, CPU µs per switch-in of its busiest
    thread between 1.5 s and secs - 1 s, CPU µs of all its threads over the same switch-ins)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    first = thread_stats(p.pid)
    time.sleep(max(0.5, secs - 2.5))
    second = thread_stats(p.pid)
    out, err = p.communicate()
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {err}")
    best = None
    total = 0
    for tid, (_, cpu2, n2) in second.items():
        _, cpu1, n1 = first.get(tid, (None, 0, 0))
        total += cpu2 - cpu1
        if tid in first and n2 - n1 > 100 and (best is None or n2 - n1 > best[1]):
            best = ((cpu2 - cpu1) / (n2 - n1) / 1e3, n2 - n1)
    if best is None:
        return out, None, None
    return out, best[0], total / best[1] / 1e3


def quantile_from_hist(hist, q):
    """Nearest-rank quantile of a {value: count} histogram."""
    n = sum(hist.values())
    need, seen = max(1, -(-q * n // 1)), 0
    for v in sorted(hist):
        seen += hist[v]
        if seen >= need:
            return v
    return None


def sandglass_timer(cpu, secs, tmp):
    out, per_wakeup, process = run_sampled([SG, "timer", "-c", str(cpu), "-i", "1ms", "-d", f"{secs}s", "-P",
                                   "f:95", "--json", "-o", os.path.join(tmp, f"sg-{time.monotonic_ns()}")],
                                  secs)
    c = json.loads(out)["cpus"][0]
    return {
        "p50_us": c["raw_lateness_ns"]["p50"] / 1e3,
        "p99_us": c["raw_lateness_ns"]["p99"] / 1e3,
        "corrected_p99_us": c["lateness_ns"]["p99"] / 1e3,
        "max_us": c["lateness_ns"]["max"] / 1e3,
        "wakeups": c["wakeups"],
        "missed": c["missed_releases"],
        "cpu_per_wakeup_us": per_wakeup,
        "process_cpu_per_wakeup_us": process,
    }


def cyclictest(cpu, secs, tmp, main_cpu=None):
    path = os.path.join(tmp, f"ct-{time.monotonic_ns()}.json")
    extra = [] if main_cpu is None else [f"--mainaffinity={main_cpu}"]
    _, per_wakeup, process = run_sampled(["cyclictest", "-m", "-q", "-p", "95", "-i", "1000", "-a", str(cpu),
                                          "-t", "1", "-d", "0", "-D", str(secs), "-N", "-h", "2000000",
                                          f"--json={path}", *extra], secs)
    t = json.load(open(path))["thread"]["0"]
    hist = {int(k): v for k, v in t["histogram"].items()}
    # Wakeups beyond the histogram's 2 ms count as larger than every bucket.
    overflow = t["cycles"] - sum(hist.values())
    if overflow > 0:
        hist[10 ** 12] = overflow
    return {
        "p50_us": quantile_from_hist(hist, 0.5) / 1e3,
        "p99_us": quantile_from_hist(hist, 0.99) / 1e3,
        "corrected_p99_us": None,
        "max_us": t["max"] / 1e3,
        "wakeups": t["cycles"],
        "missed": None,
        "cpu_per_wakeup_us": per_wakeup,
        "process_cpu_per_wakeup_us": process,
    }


def sandglass_noise(cpu, secs, tmp):
    out = run([SG, "noise", "-c", str(cpu), "-d", f"{secs}s", "--json",
                  "-o", os.path.join(tmp, f"sn-{time.monotonic_ns()}")])
    c = json.loads(out)["cpus"][0]
    run_s = c["runtime_ns"] / 1e9
    above5 = sum(b["count"] for b in c["histogram"] if b["from_ns"] >= 5000)
    return {
        "per_s": c["interruptions_per_s"],
        "gt5_per_s": above5 / run_s,
        "max_us": c["max_ns"] / 1e3,
        "noise_pct": c["noise_share"] * 100,
        "threshold_ns": json.loads(out)["threshold_ns"],
    }


def oslat(cpu, secs, tmp, main_cpu):
    path = os.path.join(tmp, f"os-{time.monotonic_ns()}.json")
    run(["oslat", "-c", str(cpu), "-C", str(main_cpu), "-D", str(secs), "-b", "1024", "-q", f"--json={path}"])
    t = next(iter(json.load(open(path))["thread"].values()))
    hist = {int(k): v for k, v in t["histogram"].items()}
    dur = t["duration"]
    loops = sum(hist.values())
    # Bucket k holds loops of more than k-1 and at most k µs; the last also holds longer ones.
    return {
        "per_s": sum(v for k, v in hist.items() if k > 1) / dur,
        "gt5_per_s": sum(v for k, v in hist.items() if k > 5) / dur,
        "max_us": t["max"],
        "noise_pct": None,
        "loops": loops,
    }


def med(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:.{digits}f}"


CT_DEFAULT = "cyclictest"
CT_MAIN = "cyclictest --mainaffinity"
TIMER_TOOLS = ("sandglass timer", CT_DEFAULT, CT_MAIN)


def paired(sg, ct, key):
    """Median over repetitions of sandglass / cyclictest in the same repetition, and how many
    repetitions had sandglass above."""
    rs = [x[key] / y[key] for x, y in zip(sg, ct) if x.get(key) and y.get(key)]
    return (statistics.median(rs), sum(r > 1 for r in rs), len(rs)) if rs else (None, 0, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 2) - 1)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--noise-reps", type=int, default=3)
    a = ap.parse_args()
    main_cpu = 0 if a.cpu != 0 else 1
    ensure_tools()
    ct_version = subprocess.run(["cyclictest", "--help"], capture_output=True, text=True).stdout.splitlines()[0]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for load in ("idle", "stress-ng --cpu 1 --vm 1"):
            stress = None
            if load != "idle":
                stress = subprocess.Popen(["stress-ng", "--cpu", "1", "--vm", "1", "--timeout",
                                           str(4 * (a.reps + a.noise_reps) * (a.seconds + 3) + 60)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(2)
            try:
                runs = [("sandglass timer", lambda: sandglass_timer(a.cpu, a.seconds, tmp)),
                        (CT_DEFAULT, lambda: cyclictest(a.cpu, a.seconds, tmp)),
                        (CT_MAIN, lambda: cyclictest(a.cpu, a.seconds, tmp, main_cpu))]
                for rep in range(a.reps):
                    k = rep % len(runs)
                    for tool, go in runs[k:] + runs[:k]:
                        results.setdefault((load, tool), []).append(go())
                noise_runs = [("sandglass noise", lambda: sandglass_noise(a.cpu, a.seconds, tmp)),
                              ("oslat", lambda: oslat(a.cpu, a.seconds, tmp, main_cpu))]
                for rep in range(a.noise_reps):
                    for tool, go in (noise_runs if rep % 2 == 0 else noise_runs[::-1]):
                        results.setdefault((load, tool), []).append(go())
            finally:
                if stress:
                    stress.terminate()
                    stress.wait()
    print(f"CPU {a.cpu}, interval 1 ms, SCHED_FIFO 95, {a.seconds} s per run, {a.reps} repetitions "
          f"per tool and load in rotating order; medians of the repetitions. {ct_version}.\n")
    if a.reps > 0:
        print("### Timer latency\n")
        print("| load | tool | median lateness (µs) | p99 (µs) | corrected p99 (µs) | max (µs) | missed releases "
              "| CPU per wakeup, measuring thread (µs) | CPU per wakeup, whole process (µs) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for load in ("idle", "stress-ng --cpu 1 --vm 1"):
            for tool in TIMER_TOOLS:
                rs = results[(load, tool)]
                print(f"| {load} | {tool} | {fmt(med(rs, 'p50_us'))} | {fmt(med(rs, 'p99_us'))} | "
                      f"{fmt(med(rs, 'corrected_p99_us'))} | {fmt(med(rs, 'max_us'))} | {fmt(med(rs, 'missed'), 0)} | "
                      f"{fmt(med(rs, 'cpu_per_wakeup_us'), 2)} | {fmt(med(rs, 'process_cpu_per_wakeup_us'), 2)} |")
        print("\nRatios, sandglass / cyclictest: the ratio of the medians, then the median of the "
              "per-repetition ratios and the repetitions in which sandglass's figure was the higher:\n")
        for load in ("idle", "stress-ng --cpu 1 --vm 1"):
            sg = results[(load, "sandglass timer")]
            for tool in (CT_MAIN, CT_DEFAULT):
                ct = results[(load, tool)]
                parts = []
                for key, name in (("p50_us", "median lateness"), ("p99_us", "p99"),
                                  ("cpu_per_wakeup_us", "CPU per wakeup (thread)"),
                                  ("process_cpu_per_wakeup_us", "CPU per wakeup (process)")):
                    r, above, n = paired(sg, ct, key)
                    parts.append(f"{name} {med(sg, key) / med(ct, key):.3f} "
                                 f"(paired {fmt(r, 3)}, higher in {above}/{n})")
                print(f"- {load}, against {tool}: " + "; ".join(parts))
    if a.noise_reps > 0:
        print("\n### OS noise\n")
        print("| load | tool | interruptions per s | > 5 µs per s | max (µs) | noise |")
        print("|---|---|---:|---:|---:|---:|")
        for load in ("idle", "stress-ng --cpu 1 --vm 1"):
            for tool in ("sandglass noise", "oslat"):
                rs = results[(load, tool)]
                noise = med(rs, "noise_pct")
                print(f"| {load} | {tool} | {fmt(med(rs, 'per_s'))} | {fmt(med(rs, 'gt5_per_s'))} | "
                      f"{fmt(med(rs, 'max_us'))} | {'n/a' if noise is None else f'{noise:.2f}%'} |")
    print("\nEvery repetition:\n")
    for (load, tool), rs in results.items():
        keys = [k for k in rs[0] if rs[0][k] is not None]
        print(f"- {load}, {tool}: " + "; ".join(", ".join(f"{k} {fmt(r[k], 2)}" for k in keys) for r in rs))


if __name__ == "__main__":
    main()
