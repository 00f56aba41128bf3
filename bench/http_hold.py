#!/usr/bin/env python3
"""Scrape times of the monitor's HTTP endpoint while idle and slow clients hold connections.

    python3 bench/http_hold.py [--addr 127.0.0.1:PORT | --bin target/release/sandglass]
                               [--hold 200] [--scrapes 20] [--interval 0.3]

Holds HOLD connections to the endpoint (half idle after connecting, half a slowloris sending a
request head one byte a second; each one the server closes is opened again at once), then
scrapes /metrics and /healthz alternately SCRAPES times, each on a fresh connection with a 1 s
timeout, INTERVAL seconds apart, and prints the answered count and the median and largest
scrape time. Without --addr it starts `BIN monitor -c 1 --segment 1h --listen 127.0.0.1:0` in a
temporary runs directory (root for its real-time threads) and stops it with SIGTERM at the end.
Loopback only; ends by itself (about HOLD / 100 + SCRAPES * INTERVAL seconds). Standard library
only.
"""

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HEAD = b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-slow: " + b"a" * 40


def start_monitor(binary, runs):
    env = dict(os.environ, SANDGLASS_RUNS_DIR=runs, SANDGLASS_RUNTIME_DIR=os.path.join(runs, ".rt"))
    p = subprocess.Popen([binary, "monitor", "-c", "1", "--segment", "1h", "--listen", "127.0.0.1:0"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        line = p.stderr.readline()
        if not line:
            break
        if line.startswith("sandglass: serving http://"):
            host, port = line[len("sandglass: serving http://"):].split("/")[0].rsplit(":", 1)
            threading.Thread(target=lambda: p.stderr.read(), daemon=True).start()
            return p, (host, int(port))
    p.kill()
    sys.exit("http_hold: the monitor did not say where it serves within 20 s")


class Holder(threading.Thread):
    def __init__(self, addr, n):
        super().__init__(daemon=True)
        self.addr, self.n = addr, n
        self.stop = threading.Event()
        self.reopened = 0

    def open(self):
        s = socket.create_connection(self.addr, timeout=5)
        s.setblocking(False)
        return s

    def run(self):
        held = [[self.open(), 0] for _ in range(self.n)]
        while not self.stop.is_set():
            for i, h in enumerate(held):
                s, sent = h
                gone = True  # data, end of file or an error: the server is done with it
                try:
                    s.recv(256)
                except BlockingIOError:
                    gone = False
                except OSError:
                    pass
                if not gone and i % 2 == 1:
                    try:
                        s.send(HEAD[sent % len(HEAD):][:1])
                        h[1] += 1
                    except OSError:
                        gone = True
                if gone:
                    s.close()
                    h[0], h[1] = self.open(), 0
                    self.reopened += 1
            self.stop.wait(1.0)
        for s, _ in held:
            s.close()


def scrape(addr, path):
    t0 = time.monotonic()
    try:
        with socket.create_connection(addr, timeout=1) as s:
            s.settimeout(max(0.001, 1 - (time.monotonic() - t0)))
            s.sendall(("GET %s HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n" % path).encode())
            out = b""
            while True:
                s.settimeout(max(0.001, 1 - (time.monotonic() - t0)))
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
    except OSError:
        return None, time.monotonic() - t0
    took = time.monotonic() - t0
    parts = out.split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", help="HOST:PORT of a running monitor (loopback)")
    ap.add_argument("--bin", default="target/release/sandglass")
    ap.add_argument("--hold", type=int, default=200)
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--interval", type=float, default=0.3)
    args = ap.parse_args()
    monitor, runs = None, None
    if args.addr:
        host, port = args.addr.rsplit(":", 1)
        addr = (host, int(port))
        if not host.startswith("127.") and host not in ("localhost", "::1"):
            sys.exit("http_hold: --addr must be a loopback address")
    else:
        runs = tempfile.TemporaryDirectory(prefix="sandglass-http-hold-")
        monitor, addr = start_monitor(args.bin, runs.name)
    holder = Holder(addr, args.hold)
    try:
        holder.start()
        time.sleep(1 + args.hold / 100)
        times, answered = [], 0
        for i in range(args.scrapes):
            status, took = scrape(addr, "/metrics" if i % 2 == 0 else "/healthz")
            times.append(took)
            if status == 200 and took < 1:
                answered += 1
            time.sleep(args.interval)
    finally:
        holder.stop.set()
        holder.join(10)
        if monitor:
            monitor.send_signal(signal.SIGTERM)
            try:
                monitor.wait(30)
            except subprocess.TimeoutExpired:
                monitor.kill()
            runs.cleanup()
    print("held %d connections (%d cut by the server and reopened)" % (args.hold, holder.reopened))
    print("answered %d of %d scrapes with 200 within 1 s" % (answered, args.scrapes))
    print("scrape time: median %.2f ms, max %.2f ms" % (statistics.median(times) * 1e3, max(times) * 1e3))
    return 0 if answered == args.scrapes else 1


if __name__ == "__main__":
    sys.exit(main())
