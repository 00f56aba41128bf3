#!/usr/bin/env bash
# `sandglass monitor --duty 10%` on CPU 1 and cyclictest on CPU 0, side by side for the same
# stretch of time, with Prometheus-style scrapes of the monitor every 15 s. Writes into OUT:
# growth.csv (the monitor's memory and CPU time every 30 s, from bench/monitor_growth.sh),
# cyclictest.txt (its histogram, 1 µs buckets), scrape.txt (each scrape's time in s), and the
# monitor's segments in OUT/runs; then prints the summary (bench/monitor_summary.py).
# Usage:
#   bench/monitor_beside_cyclictest.sh SECONDS OUT
#   bench/monitor_beside_cyclictest.sh 7200 /tmp/monitor-2h
set -euo pipefail
duration=${1:?give the duration in seconds}
out=${2:?give an output directory}
here=$(cd "$(dirname "$0")" && pwd)
bin=${SANDGLASS_BIN:-$here/../target/release/sandglass}
mkdir -p "$out/runs"
command -v cyclictest >/dev/null || { echo "cyclictest not found: apt-get install rt-tests" >&2; exit 2; }
port=${PORT:-9474}
date -u +%FT%TZ > "$out/start"
cyclictest -m -t1 -a0 -p95 -i1000 -D"${duration}s" -q -h 20000 > "$out/cyclictest.txt" 2>&1 &
cpid=$!
(
    for _ in $(seq 1 $((duration / 15))); do
        sleep 15
        curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port/metrics" >> "$out/scrape.txt" || true
    done
) &
spid=$!
trap 'kill $cpid $spid 2>/dev/null || true' EXIT
SANDGLASS_BIN=$bin RUNS_DIR=$out/runs bash "$here/monitor_growth.sh" "$duration" \
    -c 1 --duty 10% --segment 1h --listen "127.0.0.1:$port" > "$out/growth.csv"
wait $cpid
kill $spid 2>/dev/null || true
date -u +%FT%TZ > "$out/end"
python3 "$here/monitor_summary.py" "$out" --bin "$bin"
