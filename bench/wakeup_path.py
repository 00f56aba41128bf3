#!/usr/bin/env python3
"""Where one timer wakeup's CPU time goes, for sandglass timer and cyclictest, from a kernel trace.

For each tool in turn (sandglass timer, cyclictest as it starts by default, cyclictest with
--mainaffinity on the housekeeping CPU), records SECONDS of kernel events on the measured CPU in
a private tracefs instance, with the TSC as the trace clock: the measuring thread's waking,
its system-call exits and entries, its switch-out, the local timer vector and every MSR write
(on x86 the TSC-deadline timer is reprogrammed with a write to MSR 0x6e0, which under
virtualisation is a VM exit). It then prints, per wakeup of the measuring thread, medians of

- kernel, wake to return: from sched_waking to the thread's clock_nanosleep returning;
- user: from that return to the next system call (the tool's own code between two sleeps);
- kernel, sleep: from that system call to the thread's switch-out;

and how many TSC-deadline writes happened per wakeup, in the timer interrupt and while the
thread went back to sleep. Prints Markdown.

    python3 bench/wakeup_path.py [--cpu 1] [--seconds 1]

Needs root, tracefs with the sched, raw_syscalls, irq_vectors and msr events, and an x86 TSC;
installs rt-tests and stress-ng if they are missing (bench/timer.py's set-up) and builds sandglass.
"""

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The binary and the cyclictest install step are bench/timer.py's.
spec = importlib.util.spec_from_file_location("timerbench", os.path.join(ROOT, "bench", "timer.py"))
tb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tb)
SG = tb.SG
TRACEFS = "/sys/kernel/tracing"
EVENTS = ["sched/sched_waking", "sched/sched_switch", "raw_syscalls/sys_enter", "raw_syscalls/sys_exit",
          "irq_vectors/local_timer_entry", "irq_vectors/local_timer_exit", "msr/write_msr"]
LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+(\d+):\s+(\w+):\s*(.*)$")
TSC_DEADLINE = "6e0"


def write(path, value):
    with open(path, "w") as f:
        f.write(value)


def tsc_hz(inst):
    """The trace clock's rate: two trace markers 200 ms apart against CLOCK_MONOTONIC."""
    write(f"{inst}/trace", "")
    write(f"{inst}/tracing_on", "1")
    m0 = time.monotonic()
    write(f"{inst}/trace_marker", "sandglass-bench-a")
    time.sleep(0.2)
    m1 = time.monotonic()
    write(f"{inst}/trace_marker", "sandglass-bench-b")
    write(f"{inst}/tracing_on", "0")
    stamps = [int(m.group(1)) for m in re.finditer(r"\s(\d+):\s+tracing_mark_write: sandglass-bench-[ab]",
                                                    open(f"{inst}/trace").read())]
    if len(stamps) != 2:
        sys.exit("cannot calibrate the trace clock: the trace markers were not recorded")
    return (stamps[1] - stamps[0]) / (m1 - m0)


def record(inst, cmd, warmup, seconds):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(warmup)
    write(f"{inst}/trace", "")
    write(f"{inst}/tracing_on", "1")
    time.sleep(seconds)
    write(f"{inst}/tracing_on", "0")
    text = open(f"{inst}/trace").read()
    p.wait()
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode})")
    return text


def analyse(text, comm, hz):
    """Per-wakeup segments (µs) and TSC-deadline writes of the thread named comm that woke most
    often (cyclictest's main thread has the same name as its measuring thread)."""
    events = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            events.append((int(m.group(2)), int(m.group(4)) / hz * 1e6, m.group(5), m.group(6)))
    wakings = {}
    for _, _, name, rest in events:
        w = re.search(r"comm=(.+?) pid=(\d+) ", rest) if name == "sched_waking" else None
        if w and w.group(1) == comm:
            wakings[w.group(2)] = wakings.get(w.group(2), 0) + 1
    if not wakings:
        return 0, {}, {}
    pid = max(wakings, key=wakings.get)
    segs = {"wake": [], "user": [], "sleep": []}
    writes = {"interrupt": 0, "sleep": 0}
    n = 0
    cur = None
    for task_pid, t, name, rest in events:
        if name == "sched_waking" and f" pid={pid} " in rest:
            cur = {"waking": t, "exit": None, "enter": None, "w_irq": 0, "w_sleep": 0}
            continue
        if cur is None:
            continue
        mine = str(task_pid) == pid
        if name == "write_msr" and rest.startswith(TSC_DEADLINE + ","):
            cur["w_sleep" if cur["enter"] is not None else "w_irq"] += 1
        elif name == "sys_exit" and mine and cur["exit"] is None:
            cur["exit"] = t
        elif name == "sys_enter" and mine and cur["exit"] is not None:
            cur["enter"] = t
        elif name == "sched_switch" and f" prev_pid={pid} " in rest:
            if cur["exit"] is not None and cur["enter"] is not None:
                n += 1
                segs["wake"].append(cur["exit"] - cur["waking"])
                segs["user"].append(cur["enter"] - cur["exit"])
                segs["sleep"].append(t - cur["enter"])
                writes["interrupt"] += cur["w_irq"]
                writes["sleep"] += cur["w_sleep"]
            cur = None
    return n, segs, writes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 2) - 1)
    ap.add_argument("--seconds", type=float, default=1.0)
    a = ap.parse_args()
    main_cpu = 0 if a.cpu != 0 else 1
    if not os.path.isdir(f"{TRACEFS}/events"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], check=False)
    missing = [e for e in EVENTS if not os.path.isdir(f"{TRACEFS}/events/{e}")]
    if missing:
        sys.exit(f"this kernel's tracefs lacks {', '.join(missing)}: cannot break a wakeup down")
    tb.ensure_tools()
    inst = f"{TRACEFS}/instances/sandglass-bench-wakeup"
    os.makedirs(inst, exist_ok=True)
    secs = int(a.seconds + 5)
    ct = ["cyclictest", "-m", "-q", "-p", "95", "-i", "1000", "-a", str(a.cpu), "-t", "1", "-D", str(secs)]
    tools = [
        ("sandglass timer", "sg-timer-0",
         [SG, "timer", "-c", str(a.cpu), "-i", "1ms", "-d", f"{secs}s", "-P", "f:95", "-o", "/tmp/sandglass-bench-wakeup"],
         2.5),
        ("cyclictest", "cyclictest", ct, 1.5),
        ("cyclictest --mainaffinity", "cyclictest", ct + [f"--mainaffinity={main_cpu}"], 1.5),
    ]
    try:
        write(f"{inst}/tracing_on", "0")
        write(f"{inst}/trace_clock", "x86-tsc")
        write(f"{inst}/buffer_size_kb", "16384")
        hz = tsc_hz(inst)
        write(f"{inst}/tracing_cpumask", format(1 << a.cpu, "x"))
        for e in EVENTS:
            write(f"{inst}/events/{e}/enable", "1")
        rows = []
        for label, comm, cmd, warmup in tools:
            shutil.rmtree("/tmp/sandglass-bench-wakeup", ignore_errors=True)
            n, segs, writes = analyse(record(inst, cmd, warmup, a.seconds), comm, hz)
            if n == 0:
                sys.exit(f"{label}: no complete wakeup in the trace")
            rows.append((label, n, segs, writes))
    finally:
        write(f"{inst}/tracing_on", "0")
        write(f"{inst}/events/enable", "0")
        os.rmdir(inst)
        shutil.rmtree("/tmp/sandglass-bench-wakeup", ignore_errors=True)
    print(f"CPU {a.cpu}, interval 1 ms, SCHED_FIFO 95, {a.seconds:g} s of events per tool; medians per wakeup "
          f"(µs, trace clock calibrated at {hz / 1e6:.0f} MHz), TSC-deadline writes per wakeup.\n")
    print("| tool | wakeups | kernel, wake to return | user | kernel, sleep | timer writes in the interrupt | timer writes going to sleep |")
    print("|---|---:|---:|---:|---:|---:|---:|")

    def both(v, digits):
        return f"{statistics.median(v):.{digits}f} ({statistics.mean(v):.{digits}f})"

    for label, n, segs, writes in rows:
        print(f"| {label} | {n} | {both(segs['wake'], 2)} | {both(segs['user'], 3)} | {both(segs['sleep'], 2)} | "
              f"{writes['interrupt'] / n:.2f} | {writes['sleep'] / n:.2f} |")
    print("\nEach time: the median, and in parentheses the mean.")


if __name__ == "__main__":
    main()
