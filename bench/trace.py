#!/usr/bin/env python3
"""The cost of `sandglass timer --trace` on the latency it measures, beside cyclictest with the
same kernel events recorded.

Four configurations alternate REPS times on one CPU (interval 1 ms, SCHED_FIFO 95, SECONDS each):
sandglass timer; sandglass timer --trace; cyclictest; cyclictest while the same events are
recorded on the same CPU. For the last, `trace-cmd record` is tried first; where it cannot run
(on machines that refuse its function-tracer controls), a private tracefs instance with the same
events, clock and buffer size records instead, which is what trace-cmd would set up. Prints
Markdown with the median over the repetitions of each run's median and p99 lateness.

    python3 bench/trace.py [--cpu 1] [--seconds 10] [--reps 3]

Needs root; installs rt-tests and trace-cmd if missing.
"""

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("timerbench", os.path.join(ROOT, "bench", "timer.py"))
tb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tb)

TRACEFS = "/sys/kernel/tracing"
EVENTS = ["sched/sched_switch", "sched/sched_waking", "sched/sched_wakeup", "irq/irq_handler_entry",
          "irq/irq_handler_exit", "irq/softirq_entry", "irq/softirq_exit", "timer/hrtimer_expire_entry",
          "timer/hrtimer_expire_exit", "workqueue/workqueue_execute_start",
          "workqueue/workqueue_execute_end", "irq_vectors"]


def sg(cpu, secs, tmp, trace):
    cmd = [tb.SG, "timer", "-c", str(cpu), "-i", "1ms", "-d", f"{secs}s", "-P", "f:95", "--json",
           "-o", os.path.join(tmp, f"sg-{time.monotonic_ns()}")] + (["--trace"] if trace else [])
    out = tb.run(cmd)
    v = json.loads(out)
    c = v["cpus"][0]
    k = (v.get("causes") or {}).get("kernel") or {}
    return {"p50_us": c["raw_lateness_ns"]["p50"] / 1e3, "p99_us": c["raw_lateness_ns"]["p99"] / 1e3,
            "events": k.get("events"), "lost": k.get("lost_events"),
            "read_ms": (k["read_ns"] / 1e6) if k else None}


class Instance:
    """A private tracefs instance recording EVENTS on one CPU, as trace-cmd would set up."""

    def __init__(self, cpu):
        self.dir = os.path.join(TRACEFS, "instances", f"bench-trace-{os.getpid()}")
        os.mkdir(self.dir)
        w = lambda f, v: open(os.path.join(self.dir, f), "w").write(v)
        w("tracing_on", "0")
        w("trace_clock", "mono")
        w("buffer_size_kb", "8192")
        w("tracing_cpumask", format(1 << cpu, "x"))
        for e in EVENTS:
            p = os.path.join(self.dir, "events", e, "enable")
            if os.path.exists(p):
                w(os.path.join("events", e, "enable"), "1")
        w("tracing_on", "1")

    def close(self):
        open(os.path.join(self.dir, "tracing_on"), "w").write("0")
        entries = open(os.path.join(self.dir, "buffer_total_size_kb")).read().strip()
        os.rmdir(self.dir)
        return entries


def trace_cmd_works(tmp):
    p = subprocess.run(["trace-cmd", "record", "-q", "-e", "sched:sched_switch", "-o",
                        os.path.join(tmp, "probe.dat"), "sleep", "0.1"], capture_output=True, text=True)
    return p.returncode == 0, (p.stderr.strip().splitlines() or [""])[-1]


def cyclictest_traced(cpu, secs, tmp, use_trace_cmd):
    if use_trace_cmd:
        dat = os.path.join(tmp, f"ct-{time.monotonic_ns()}.dat")
        rec = subprocess.Popen(["trace-cmd", "record", "-q", "-M", format(1 << cpu, "x"), "-b", "8192",
                                "-C", "mono", "-o", dat] + sum((["-e", e.replace("/", ":")] for e in EVENTS), []),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        try:
            return tb.cyclictest(cpu, secs, tmp)
        finally:
            rec.send_signal(2)
            rec.wait()
    inst = Instance(cpu)
    try:
        return tb.cyclictest(cpu, secs, tmp)
    finally:
        inst.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 2) - 1)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if not shutil.which("trace-cmd") or not shutil.which("cyclictest"):
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "rt-tests", "trace-cmd"], check=True,
                       stdout=subprocess.DEVNULL)
    if not os.path.isdir(os.path.join(TRACEFS, "instances")):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], check=True)
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        works, why = trace_cmd_works(tmp)
        recorder = "trace-cmd record" if works else "a tracefs instance (trace-cmd record fails here: " + why + ")"
        for _ in range(a.reps):
            rows.setdefault("sandglass timer", []).append(sg(a.cpu, a.seconds, tmp, False))
            rows.setdefault("sandglass timer --trace", []).append(sg(a.cpu, a.seconds, tmp, True))
            rows.setdefault("cyclictest", []).append(tb.cyclictest(a.cpu, a.seconds, tmp))
            rows.setdefault("cyclictest, events recorded", []).append(
                cyclictest_traced(a.cpu, a.seconds, tmp, works))
    med = lambda rs, k: statistics.median([r[k] for r in rs if r.get(k) is not None] or [float("nan")])
    print(f"CPU {a.cpu}, interval 1 ms, SCHED_FIFO 95, {a.seconds} s per run, {a.reps} alternating repetitions; "
          f"cyclictest's events recorded by {recorder}.\n")
    print("| configuration | median lateness (µs) | p99 (µs) | kernel events | lost | reading (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rs in rows.items():
        ev = med(rs, "events") if rs[0].get("events") is not None else None
        lost = med(rs, "lost") if rs[0].get("lost") is not None else None
        rd = med(rs, "read_ms") if rs[0].get("read_ms") is not None else None
        print(f"| {name} | {med(rs, 'p50_us'):.1f} | {med(rs, 'p99_us'):.1f} | "
              f"{'n/a' if ev is None else f'{ev:,.0f}'} | {'n/a' if lost is None else f'{lost:.0f}'} | "
              f"{'n/a' if rd is None else f'{rd:.1f}'} |")
    base, tr = rows["sandglass timer"], rows["sandglass timer --trace"]
    ct, ctt = rows["cyclictest"], rows["cyclictest, events recorded"]
    print(f"\nRatios with events recorded over without: sandglass median {med(tr, 'p50_us') / med(base, 'p50_us'):.3f}, "
          f"p99 {med(tr, 'p99_us') / med(base, 'p99_us'):.3f}; cyclictest median "
          f"{med(ctt, 'p50_us') / med(ct, 'p50_us'):.3f}, p99 {med(ctt, 'p99_us') / med(ct, 'p99_us'):.3f}")


if __name__ == "__main__":
    main()
