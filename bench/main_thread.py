#!/usr/bin/env python3
"""Where sandglass timer's main thread spends its CPU: with the /proc sampler and without it.

Runs `sandglass timer -c CPU -i 1ms -d SECONDS -P f:95` (main thread on a CPU of its own), once
with the default --sample-rate and once with --sample-rate 0, alternating REPS times. From 1.5 s
into each run until 1 s before its end it reads the main thread's /proc/PID/task/PID/schedstat
every 2 ms: the CPU time it used per second, and the CPU time of each of its turns (the time
used between two reads in which it was switched in). The difference between the two settings,
divided by the sample rate, is what one snapshot costs in a run, caches as cold as the main
thread's 50 ms sleeps leave them. Prints Markdown.

    python3 bench/main_thread.py [--cpu 1] [--seconds 8] [--reps 3] [--sandglass PATH]

Needs root (SCHED_FIFO); wrap it in flock /tmp/sandglass-rt.lock on a shared machine. Needs a
release build (target/release/sandglass) unless --sandglass is given.
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(sg, cpu, secs, extra, tmp):
    """Main-thread CPU in µs per second, and the CPU of each of its turns in µs."""
    out = os.path.join(tmp, f"run-{time.monotonic_ns()}")
    p = subprocess.Popen([sg, "timer", "-c", str(cpu), "-i", "1ms", "-d", f"{secs}s", "-P", "f:95",
                          "-o", out, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    path = f"/proc/{p.pid}/task/{p.pid}/schedstat"
    turns, last, start = [], None, None
    end = time.monotonic() + secs - 2.5
    while time.monotonic() < end:
        try:
            on, _, n = map(int, open(path).read().split())
        except (OSError, ValueError):
            break
        if start is None:
            start = (on, time.monotonic())
        if last and n != last[1]:
            turns.append((on - last[0]) / 1e3)
        last = (on, n)
        time.sleep(0.002)
    p.wait()
    if p.returncode != 0 or start is None or last is None:
        raise SystemExit(f"sandglass timer failed ({p.returncode})")
    per_s = (last[0] - start[0]) / 1e3 / (time.monotonic() - start[1])
    return per_s, turns


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sandglass", default=os.path.join(ROOT, "target", "release", "sandglass"))
    a = ap.parse_args()
    settings = [("--sample-rate 10 (default)", []), ("--sample-rate 0", ["--sample-rate", "0"])]
    res = {name: [] for name, _ in settings}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            for name, extra in (settings if rep % 2 == 0 else settings[::-1]):
                res[name].append(run(a.sandglass, a.cpu, a.seconds, extra, tmp))
    print(f"{a.sandglass}: timer -c {a.cpu} -i 1ms -P f:95, {a.seconds} s per run, {a.reps} "
          "repetitions alternating; medians of the repetitions, turns of all repetitions.\n")
    print("| setting | main thread CPU (µs/s) | turns per s | median turn (µs) | p90 turn (µs) | longest (µs) |")
    print("|---|---:|---:|---:|---:|---:|")
    med = {}
    for name, _ in settings:
        per_s = statistics.median(r[0] for r in res[name])
        turns = sorted(t for r in res[name] for t in r[1])
        window = a.reps * (a.seconds - 2.5)
        med[name] = per_s
        print(f"| {name} | {per_s:.0f} | {len(turns) / window:.1f} | {turns[len(turns) // 2]:.1f} | "
              f"{turns[int(len(turns) * 0.9)]:.1f} | {turns[-1]:.0f} |")
    on, off = med[settings[0][0]], med[settings[1][0]]
    print(f"\nThe sampler: {on - off:.0f} µs of CPU a second, {(on - off) / 10:.0f} µs per snapshot.")


if __name__ == "__main__":
    main()
