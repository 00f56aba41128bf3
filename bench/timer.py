#!/usr/bin/env python3
"""sandglass timer beside cyclictest, and sandglass noise beside oslat, in one run.

Same CPU, interval and priority; alternating A and B REPS times; first on an idle machine, then
under `stress-ng --cpu 1 --vm 1`. CPU time per wakeup is measured the same way for both tools:
each repetition runs the tool for SECONDS and for SHORT seconds, takes the child process's user +
system time from getrusage for each, and divides the difference by the difference in wakeups.
The slope cancels what a tool spends once per run (start-up, calibration, writing results) and
keeps what it spends per wakeup, in the kernel and in user space. Prints Markdown.

    python3 bench/timer.py [--cpu 1] [--seconds 10] [--reps 3]

Needs root (SCHED_FIFO, mlockall); installs rt-tests and stress-ng if they are missing.
"""

import argparse
import json
import os
import resource
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
    """Runs cmd, returns (stdout, cpu seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p.stdout, cpu


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
    out, cpu_s = run([SG, "timer", "-c", str(cpu), "-i", "1ms", "-d", f"{secs}s", "-P", "f:95",
                      "--json", "-o", os.path.join(tmp, f"sg-{time.monotonic_ns()}")])
    c = json.loads(out)["cpus"][0]
    return {
        "cpu_s": cpu_s,
        "p50_us": c["raw_lateness_ns"]["p50"] / 1e3,
        "p99_us": c["raw_lateness_ns"]["p99"] / 1e3,
        "corrected_p99_us": c["lateness_ns"]["p99"] / 1e3,
        "max_us": c["lateness_ns"]["max"] / 1e3,
        "wakeups": c["wakeups"],
        "missed": c["missed_releases"],
        "cpu_per_wakeup_us": cpu_s * 1e6 / c["wakeups"],
        "thread_cpu_per_wakeup_us": c["cpu_time_per_wakeup_ns"] / 1e3,
    }


def cyclictest(cpu, secs, tmp):
    path = os.path.join(tmp, f"ct-{time.monotonic_ns()}.json")
    _, cpu_s = run(["cyclictest", "-m", "-q", "-p", "95", "-i", "1000", "-a", str(cpu), "-t", "1",
                    "-d", "0", "-D", str(secs), "-h", "100000", f"--json={path}"])
    t = json.load(open(path))["thread"]["0"]
    hist = {int(k): v for k, v in t["histogram"].items()}
    return {
        "cpu_s": cpu_s,
        "p50_us": quantile_from_hist(hist, 0.5),
        "p99_us": quantile_from_hist(hist, 0.99),
        "corrected_p99_us": None,
        "max_us": t["max"],
        "wakeups": t["cycles"],
        "missed": None,
        "cpu_per_wakeup_us": cpu_s * 1e6 / t["cycles"],
        "thread_cpu_per_wakeup_us": None,
    }


def sandglass_noise(cpu, secs, tmp):
    out, _ = run([SG, "noise", "-c", str(cpu), "-d", f"{secs}s", "--json",
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 2) - 1)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--short", type=int, default=2)
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
                                           str(4 * a.reps * a.seconds + 60)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(2)
            try:
                for _ in range(a.reps):
                    for tool, f in (("sandglass timer", sandglass_timer), ("cyclictest", cyclictest)):
                        long_run = f(a.cpu, a.seconds, tmp)
                        short_run = f(a.cpu, a.short, tmp)
                        dw = long_run["wakeups"] - short_run["wakeups"]
                        long_run["cpu_per_wakeup_us"] = (long_run["cpu_s"] - short_run["cpu_s"]) * 1e6 / dw
                        results.setdefault((load, tool), []).append(long_run)
                for _ in range(a.reps):
                    results.setdefault((load, "sandglass noise"), []).append(sandglass_noise(a.cpu, a.seconds, tmp))
                    results.setdefault((load, "oslat"), []).append(oslat(a.cpu, a.seconds, tmp, main_cpu))
            finally:
                if stress:
                    stress.terminate()
                    stress.wait()
    print(f"CPU {a.cpu}, interval 1 ms, SCHED_FIFO 95, {a.seconds} s per run (and {a.short} s runs for the "
          f"CPU-time slope), {a.reps} alternating repetitions per tool and load; medians of the "
          f"repetitions. {ct_version}.\n")
    print("### Timer latency\n")
    print("| load | tool | median lateness (µs) | p99 (µs) | corrected p99 (µs) | max (µs) | missed releases | CPU per wakeup (µs) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for load in ("idle", "stress-ng --cpu 1 --vm 1"):
        for tool in ("sandglass timer", "cyclictest"):
            rs = results[(load, tool)]
            print(f"| {load} | {tool} | {fmt(med(rs, 'p50_us'))} | {fmt(med(rs, 'p99_us'))} | "
                  f"{fmt(med(rs, 'corrected_p99_us'))} | {fmt(med(rs, 'max_us'))} | {fmt(med(rs, 'missed'), 0)} | "
                  f"{fmt(med(rs, 'cpu_per_wakeup_us'), 2)} |")
    print("\nRatios, sandglass / cyclictest (medians of the repetitions):\n")
    for load in ("idle", "stress-ng --cpu 1 --vm 1"):
        sg, ct = results[(load, "sandglass timer")], results[(load, "cyclictest")]
        print(f"- {load}: median lateness {med(sg, 'p50_us') / med(ct, 'p50_us'):.3f}, "
              f"p99 {med(sg, 'p99_us') / med(ct, 'p99_us'):.3f}, "
              f"CPU per wakeup {med(sg, 'cpu_per_wakeup_us') / med(ct, 'cpu_per_wakeup_us'):.3f}")
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
