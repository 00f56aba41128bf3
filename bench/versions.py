#!/usr/bin/env python3
"""This build's hot loops beside another build's, in one run: what a change to the code around
the measurement costs the measurement itself.

Alternates the two binaries REPS times (the order rotates each repetition), on one CPU of an
idle machine:

- timer: `timer -c CPU -i 1ms -d SECONDS -P f:95`; the CPU time per wakeup of the measuring
  thread and of the whole process, from the kernel's accounting
  (/proc/PID/task/TID/schedstat, as bench/timer.py reads it: between 1.5 s into the run and
  1 s before its end, so start-up, calibration and writing are left out);
- noise: `noise -c CPU -d SECONDS`; the polling loop's mean iteration (its received CPU time
  over its iterations) and its interruptions per second.

Prints Markdown: medians of the repetitions per build, and the median of the paired ratios
(this build over the other, repetition by repetition) with how many pairs had this build
above: with 7 repetitions, 6 or 7 of 7 on one side is the least a sign test calls a difference
(two-sided p = 0.125 at 6, 0.016 at 7); fewer is within the run's noise.

    python3 bench/versions.py OTHER_BINARY [--cpu 1] [--seconds 10] [--reps 7]

Needs root (SCHED_FIFO, mlockall) and a release build of this checkout (built if missing).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timer import SG, ROOT, run, run_sampled  # noqa: E402


def timer(sg, cpu, secs, tmp):
    out, thread, process = run_sampled([sg, "timer", "-c", str(cpu), "-i", "1ms", "-d", f"{secs}s", "-P", "f:95",
                                        "--json", "-o", os.path.join(tmp, f"t-{time.monotonic_ns()}")], secs)
    c = json.loads(out)["cpus"][0]
    return {"thread_us": thread, "process_us": process, "wakeups": c["wakeups"]}


def noise(sg, cpu, secs, tmp):
    out = run([sg, "noise", "-c", str(cpu), "-d", f"{secs}s", "--json",
               "-o", os.path.join(tmp, f"n-{time.monotonic_ns()}")])
    c = json.loads(out)["cpus"][0]
    return {"iteration_ns": c["mean_iteration_ns"], "per_s": c["interruptions_per_s"],
            "iterations": c["loop_iterations"]}


def version(sg):
    return run([sg, "--version"]).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("other", help="the other build's sandglass binary")
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 2) - 1)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/versions.py: run it as root (SCHED_FIFO 95 and mlockall)")
    if not os.access(a.other, os.X_OK):
        sys.exit(f"bench/versions.py: {a.other}: not an executable; give the other build's sandglass binary")
    if not os.path.exists(SG):
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    builds = {"this": SG, "other": a.other}
    rows = {(b, k): [] for b in builds for k in ("timer", "noise")}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            order = list(builds) if rep % 2 == 0 else list(reversed(builds))
            for b in order:
                rows[(b, "timer")].append(timer(builds[b], a.cpu, a.seconds, tmp))
                rows[(b, "noise")].append(noise(builds[b], a.cpu, a.seconds, tmp))
            print(f"repetition {rep + 1} of {a.reps} done", file=sys.stderr)

    def med(b, k, key):
        vals = [r[key] for r in rows[(b, k)] if r[key] is not None]
        return statistics.median(vals) if vals else None

    def ratio(k, key):
        rs = [x[key] / y[key] for x, y in zip(rows[("this", k)], rows[("other", k)]) if x[key] and y[key]]
        if not rs:
            return "n/a"
        return f"{statistics.median(rs):.3f} ({sum(r > 1 for r in rs)} of {len(rs)} above 1)"

    def f(v, d=2):
        return "n/a" if v is None else f"{v:.{d}f}"

    print(f"this: {version(SG)}; other: {version(a.other)}; CPU {a.cpu}, {a.seconds} s per run, "
          f"{a.reps} repetitions alternating\n")
    print("| figure | this build | other build | this / other (median of pairs) |")
    print("|---|---:|---:|---:|")
    for k, key, label, d in (("timer", "thread_us", "timer: CPU per wakeup, measuring thread (µs)", 2),
                             ("timer", "process_us", "timer: CPU per wakeup, whole process (µs)", 2),
                             ("noise", "iteration_ns", "noise: mean loop iteration (ns)", 2),
                             ("noise", "per_s", "noise: interruptions per s", 1)):
        print(f"| {label} | {f(med('this', k, key), d)} | {f(med('other', k, key), d)} | {ratio(k, key)} |")
    print()
    for b in builds:
        t = ", ".join(f"{f(r['thread_us'])}/{f(r['process_us'])}" for r in rows[(b, "timer")])
        n = ", ".join(f"{f(r['iteration_ns'])} ns" for r in rows[(b, "noise")])
        print(f"- {b}: timer µs per wakeup (thread/process) {t}; noise iteration {n}")


if __name__ == "__main__":
    main()
