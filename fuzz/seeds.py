#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/TARGET/ (the files are committed;
run this again after a format changes).

    python3 fuzz/seeds.py [--bin target/release/sandglass]

Seeds are valid inputs of each parser: the examples of the documentation, the built-in studies,
the kernel's tracefs formats and raw pages under crates/sandglass/src/causes/fixtures, this
machine's /proc files, and run directories of short real runs (timer, noise, hourglass, a
traced timer run when root, two benches, a study state), packed one file per run in the format
of `sandglass_fuzzing::pack`. A first byte selects the parser where a target has several.
Standard library only.
"""

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "fuzz", "corpus")
FIXTURES = os.path.join(REPO, "crates", "sandglass", "src", "causes", "fixtures")


def put(target, data, name=None):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = name or hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def sel(b, text):
    return bytes([b]) + (text.encode() if isinstance(text, str) else text)


def scrub(data, replace):
    """The manifest's machine-specific strings replaced by neutral ones."""
    for old, new in replace:
        if old:
            data = data.replace(old, new)
    return data


def pack_dir(path, replace=()):
    out = b""
    for name in sorted(os.listdir(path)):
        p = os.path.join(path, name)
        if not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            data = f.read()
        if name in ("manifest.json", "study.json"):
            data = scrub(data, replace)
        n = name.encode()[:255]
        out += bytes([len(n)]) + n + struct.pack("<I", len(data)) + data
    return out


def read(path, limit=1 << 16):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def http_seeds():
    """Requests to the monitor's HTTP endpoint, as scrapers, probes and odd clients send them."""
    for r in [
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9474\r\nUser-Agent: Prometheus/2.53.0\r\n"
        "Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\nAccept-Encoding: gzip\r\n"
        "X-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: 10.0.0.5:9474\r\nUser-Agent: kube-probe/1.30\r\nConnection: close\r\n\r\n",
        "HEAD /metrics HTTP/1.1\r\nhost: x\r\n\r\n",
        "GET /metrics HTTP/1.0\r\n\r\n",
        "GET http://127.0.0.1:9474/healthz?probe=1 HTTP/1.1\r\nhost: x\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\nGET /metrics HTTP/1.1\r\nhost: x\r\n\r\n"
        "HEAD /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        "POST /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc",
        "GET /metrics HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 10\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nhost: x\r\n\r\n",
        "GET /../etc/passwd HTTP/1.1\r\nhost: x\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nhost: x\r\nx-pad: " + "a" * 9000 + "\r\n\r\n",
        "GET /metr",
    ]:
        put("http_request", r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "sandglass"))
    args = ap.parse_args()
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)

    for t in ["10s", "1ms", "500us", "1.5ms", "250µs", "100ns", "2h", "1m", "0", "12345", "0.25s", "3m20s", "1h30m", "1s500ms"]:
        put("time_string", t)
    for c in ["0", "0-3,6", "1,3,5-7", "0-1", "7", "0,0", "0-3,2"]:
        put("cpu_list", c)
    for p in ["f:95", "r:1", "o", "o:5", "o:-20", "b", "i", "d:100us:1ms", "d:3ms:5ms:8ms", "RTMED", "NORMAL"]:
        put("policy", p)
    for w in ["audio:64@48000x2", "audio:256@44100x3", "audio:128@48000", "control:1ms:500us", "control:250us", "video:60", "video:59.94"]:
        put("workload", sel(0, w))
    put("workload", sel(1, '[[task]]\nname = "fast"\nwcet = "200us"\nperiod = "1ms"\n\n[[task]]\nname = "slow"\nwcet = "3ms"\nperiod = "10ms"\ndeadline = "4ms"\n'))
    for c in [
        "-n 2 -d 5s -t 0 -p RTMED -w PERIODIC 3ms 8ms -i HR -t 1 -p RTLOW -w PERIODIC 17ms 33ms -i HR -x",
        "-d 5s -n 10 -a -p NORMAL -w CPU_YIELD 0.9ms -x",
        "-n 1 -d 1s -g 10us -gh",
        "-n 3 -c -e 100000 -d 2s",
    ]:
        put("hourglass_cmdline", c)

    tasks = ('[[task]]\nname = "modem"\nwcet = "3ms"\nperiod = "8ms"\n\n'
             '[[task]]\nname = "video"\nwcet = "19ms"\nperiod = "33ms"\njitter = "8ms"\n')
    put("task_file", sel(0, tasks))
    put("task_file", sel(0, '[[task]]\nwcet = "1ms"\nperiod = "4ms"\ndeadline = "3ms"\npriority = 2\n'))
    put("task_file", sel(1, '[[task]]\nname = "a"\nruntime = "1ms"\nperiod = "10ms"\nexisting = true\n'
                            '[[task]]\nname = "b"\nruntime = "5ms"\nperiod = "20ms"\ndeadline = "15ms"\n'))
    for p in [os.path.join(REPO, "crates", "cli", "tests", "data", n) for n in os.listdir(os.path.join(REPO, "crates", "cli", "tests", "data"))]:
        if p.endswith(".toml"):
            put("task_file", sel(0, read(p)))
    builtin = os.path.join(REPO, "crates", "sandglass", "src", "study", "builtin")
    for n in sorted(os.listdir(builtin)):
        put("study_file", read(os.path.join(builtin, n)), n)
    with open(os.path.join(REPO, "docs", "bench.md")) as f:
        doc = f.read()
    start = doc.find("```toml\n# The seed's video player")
    if start >= 0:
        end = doc.find("```", start + 7)
        put("pipeline_file", doc[start + 8:end], "video-player.toml")
    put("pipeline_file", 'period = "10ms"\n[[step]]\nkind = "compute"\ntime = "1ms"\n')
    put("data_file", sel(0, "# value count\n10us 5\n250us 3\n1ms 1\n-3 2\n"))
    put("data_file", sel(1, "64 1200\n4096 2100\n65536 15000\n"))
    put("data_file", sel(2, "1 2 3.5 10us 1e3\n# comment\n4\n"))
    for s in ["cpu", "cpu:2", "disk:1@1", "memory:2@0-1", "net", "timers", "stress-ng:--cpu 2", "cmd:make -j4"]:
        put("load_spec", sel(0, s))
    put("load_spec", sel(1, "make -j4 'a b' \"c d\""))
    for s in ["cpu+disk", "memory:2@0-1+net", "idle", "cpu+cmd:make -j4"]:
        put("load_spec", sel(2, s))
    options = [
        (0, "hr"), (0, "timerfd"), (1, "stop"), (1, "trace"), (2, "p99=+10%,max=+1ms"), (3, "10%"),
        (4, "64KiB"), (5, "4K,64K,1M"), (6, "cross-cpu"), (7, "read,mmap"), (8, "pipe,unix-stream,shm-futex"),
        (9, "p99.9"), (10, "run@p99.99"), (10, "sandglass-runs/x@p99:1"), (11, "2026-11-21"),
        (11, "3 days ago"), (12, "memmove:4KiB"),
    ]
    for b, s in options:
        put("option_value", sel(b, s))

    # tracefs: formats, header_page, raw pages.
    for root, _, files in os.walk(os.path.join(FIXTURES, "events")):
        for n in files:
            put("tracefs", sel(0, read(os.path.join(root, n))))
    put("tracefs", sel(1, read(os.path.join(FIXTURES, "header_page"))))
    for n in sorted(os.listdir(FIXTURES)):
        if n.endswith(".raw"):
            data = read(os.path.join(FIXTURES, n), 1 << 20)
            for i in range(0, min(len(data), 3 * 4096), 4096):
                put("tracefs", sel(2, data[i:i + 4096]))

    # procfs: this machine's files.
    for b, p in [(0, "/proc/interrupts"), (1, "/proc/softirqs"), (2, "/proc/stat"), (3, "/proc/stat"),
                 (4, "/proc/self/schedstat"), (5, "/proc/cpuinfo"), (7, "/proc/stat"), (7, "/proc/self/status"),
                 ]:
        data = read(p)
        if data:
            put("procfs", sel(b, data))
    put("procfs", sel(8, "proc /proc proc rw,relatime 0 0\nnodev /sys/kernel/tracing tracefs rw,relatime 0 0\n"
                          "debugfs /sys/kernel/debug debugfs rw,relatime 0 0\n"))
    put("procfs", sel(8, "Entries: 10\nOverrun: 3\nCommit overrun: 0\ndropped events: 2\n"))
    put("procfs", sel(9, "BOOT_IMAGE=/boot/vmlinuz root=/dev/vda ro quiet preempt=full isolcpus=2-3\n"))
    put("procfs", sel(9, "full\n"))
    for p in ["/boot/config-%s" % os.uname().release, "/proc/config.gz"]:
        data = read(p, 1 << 14)
        if data and not p.endswith(".gz"):
            put("procfs", sel(6, data))

    http_seeds()

    # Run directories of short real runs.
    if not os.path.exists(args.bin):
        subprocess.run(["cargo", "build", "--release", "--locked", "-q"], cwd=REPO, check=True)
    tmp = tempfile.mkdtemp(prefix="sandglass-seeds-")
    cmdline = (read("/proc/cmdline") or b"").strip()
    # The boot command line, the binary's and the temporary directory's paths are this
    # machine's, not the format's: the seeds carry neutral ones.
    replace = [(json.dumps(cmdline.decode("utf-8", "replace"))[1:-1].encode(), b"BOOT_IMAGE=/boot/vmlinuz root=/dev/vda ro quiet"),
               (os.path.abspath(args.bin).encode(), b"sandglass"), (tmp.encode(), b"/var/tmp/runs")]
    try:
        runs = [
            ("timer", ["timer", "-d", "300ms", "-i", "10ms"]),
            ("noise", ["noise", "-d", "300ms"]),
            ("hourglass", ["hourglass", "-n", "2", "-d", "200ms", "-e", "2000"]),
            ("ctxsw", ["bench", "ctxsw", "--working-sets", "0,4K", "--cell-time", "100ms"]),
            ("timer-overhead", ["bench", "timer-overhead", "--timers", "hr", "--phase", "100ms", "--repeat", "1"]),
        ]
        if os.geteuid() == 0:
            runs.append(("timer-trace", ["timer", "-d", "300ms", "-i", "10ms", "--trace"]))
        env = dict(os.environ, SANDGLASS_RUNS_DIR=tmp)
        for name, cmd in runs:
            out = os.path.join(tmp, name)
            p = subprocess.run([args.bin] + cmd + ["-o", out], env=env, capture_output=True, text=True)
            if p.returncode != 0 or not os.path.isdir(out):
                # Options differ between kinds; a run that cannot be made here is left out.
                print("seeds: %s left out: %s" % (name, (p.stderr.strip().splitlines() or ["?"])[-1]))
                continue
            packed = pack_dir(out, replace)
            put("run_dir", b"\x01" + packed, name)
            put("run_dir", b"\x00" + packed, name + "-as-written")
        out = os.path.join(tmp, "study")
        p = subprocess.run([args.bin, "study", "quick", "--duration-scale", "0.02", "-o", out],
                           env=env, capture_output=True, text=True)
        if os.path.isfile(os.path.join(out, "study.json")):
            put("run_dir", b"\x01" + pack_dir(out, replace), "study")
        else:
            print("seeds: study left out: %s" % (p.stderr.strip().splitlines() or ["?"])[-1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    total = sum(len(fs) for _, _, fs in os.walk(CORPUS))
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(CORPUS) for f in fs)
    print("seeds: %d files, %d KiB in %s" % (total, size // 1024, CORPUS))


if __name__ == "__main__":
    sys.exit(main())
