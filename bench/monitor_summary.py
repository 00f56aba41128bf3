#!/usr/bin/env python3
"""Summary of bench/monitor_beside_cyclictest.sh: the monitor's memory, CPU time and disk over
the run, its latency figures from its own segments (`sandglass report --merge`), cyclictest's
from its histogram, and the scrapes' times. Prints Markdown.

    python3 bench/monitor_summary.py OUT [--bin target/release/sandglass]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys


def growth(path):
    rows, runs = [], None
    for line in open(path):
        line = line.strip()
        m = re.match(r"# segments: (\d+), disk (\d+) KiB in (\S+)", line)
        if m:
            runs = m.group(3)
        elif line and line[0].isdigit():
            e, rss, hwm, cpu = line.split(",")
            rows.append((int(e), int(rss), int(hwm), float(cpu)))
    return rows, runs


def cyclictest(path):
    """Counts per 1 µs bucket, overflows, and cyclictest's own max (µs)."""
    counts, overflows, maximum = {}, 0, None
    for line in open(path):
        m = re.match(r"^(\d+)\s+(\d+)\s*$", line)
        if m:
            counts[int(m.group(1))] = int(m.group(2))
            continue
        m = re.match(r"# Histogram Overflows:\s+(\d+)", line)
        if m:
            overflows = int(m.group(1))
        m = re.match(r"# Max Latencies:\s+(\d+)", line)
        if m:
            maximum = int(m.group(1))
    return counts, overflows, maximum


def quantile(counts, overflows, q):
    """The nearest-rank quantile in µs (a bucket's value); None when it falls in the overflow."""
    total = sum(counts.values()) + overflows
    rank = max(1, -(-int(q * total * 1_000_000) // 1_000_000))
    seen = 0
    for us in sorted(counts):
        seen += counts[us]
        if seen >= rank:
            return us
    return None


def fmt_kib(k):
    return f"{k:,}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--bin", default="target/release/sandglass")
    a = ap.parse_args()
    rows, runs = growth(os.path.join(a.out, "growth.csv"))
    runs = runs or os.path.join(a.out, "runs")
    if not rows:
        sys.exit("no rows in growth.csv")
    end = rows[-1]
    print("| elapsed | RSS (KiB) | peak RSS (KiB) | CPU time (s) |")
    print("|---:|---:|---:|---:|")
    marks = [60, 600, 1800, 3600, 3660, 5400, end[0]]
    shown = set()
    for mark in marks:
        r = min(rows, key=lambda r: abs(r[0] - mark))
        if r[0] in shown:
            continue
        shown.add(r[0])
        print(f"| {r[0]} s | {fmt_kib(r[1])} | {fmt_kib(r[2])} | {r[3]:.2f} |")
    ten = min(rows, key=lambda r: abs(r[0] - 600))
    print()
    print(f"- memory: {fmt_kib(ten[1])} KiB at {ten[0]} s, {fmt_kib(end[1])} KiB at {end[0]} s "
          f"(peak {fmt_kib(end[2])}); min/max after 10 min: "
          f"{fmt_kib(min(r[1] for r in rows if r[0] >= 600))}/{fmt_kib(max(r[1] for r in rows if r[0] >= 600))} KiB")
    print(f"- CPU time: {end[3]:.2f} s in {end[0]} s = {end[3] / end[0] * 3600:.1f} s per hour "
          f"({end[3] / end[0] * 100:.3f} % of one CPU)")
    segs = sorted(
        os.path.join(runs, d) for d in os.listdir(runs)
        if os.path.isdir(os.path.join(runs, d)) and "-timer-" in d
    )
    du = lambda p: int(subprocess.run(["du", "-sk", p], capture_output=True, text=True).stdout.split()[0])
    print(f"- disk: {len(segs)} segments, {fmt_kib(du(runs))} KiB in all; "
          + ", ".join(f"{os.path.basename(s)} {fmt_kib(du(s))} KiB" for s in segs))
    merged = json.loads(subprocess.run(
        [a.bin, "report", "--merge", *segs, "--json"], capture_output=True, text=True, check=True
    ).stdout)
    m = merged["merged"]
    print(f"- monitor (CPU 1, 10 % duty): {m['count']:,} releases, {merged['missed']} missed; "
          f"p50 {m['p50'] / 1000:.1f} µs, p99 {m['p99'] / 1000:.1f} µs, p99.9 {m['p99.9'] / 1000:.1f} µs, "
          f"max {m['max'] / 1000:.1f} µs")
    for r in merged["runs"]:
        p = r["pooled"]
        # cyclictest's view: one sample per wakeup, a stall counted once (the summary's raw).
        summary = json.load(open(os.path.join(r["path"], "summary.json")))
        raw = [c["raw_lateness_ns"] for c in summary["cpus"] if c.get("raw_lateness_ns")]
        raw_text = ", ".join(f"p99 {x['p99'] / 1000:.1f} µs over {x['count']:,} wakeups" for x in raw)
        print(f"  - segment {r['id']}: {p['count']:,} releases, p99 {p['p99'] / 1000:.1f} µs, "
              f"max {p['max'] / 1000:.1f} µs, {r['missed']} missed; one per wakeup: {raw_text}")
    counts, overflows, maximum = cyclictest(os.path.join(a.out, "cyclictest.txt"))
    total = sum(counts.values()) + overflows
    if total:
        q = lambda x: quantile(counts, overflows, x)
        print(f"- cyclictest (CPU 0, all the time): {total:,} samples; p50 {q(0.5)} µs, "
              f"p99 {q(0.99)} µs, p99.9 {q(0.999)} µs, max {maximum} µs, "
              f"{overflows} above the histogram's 20 ms")
    scrape_path = os.path.join(a.out, "scrape.txt")
    if os.path.exists(scrape_path):
        t = sorted(float(x) * 1000 for x in open(scrape_path) if x.strip())
        if t:
            print(f"- scrapes: {len(t)}, median {statistics.median(t):.2f} ms, "
                  f"p90 {t[int(0.9 * (len(t) - 1))]:.2f} ms, max {t[-1]:.2f} ms")


if __name__ == "__main__":
    main()
