#!/bin/bash
# Peak memory against run length: each probe's peak resident set (GNU time's maximum RSS) for
# runs of each length, one after another on CPU $CPU (default 1; the main thread on CPU $MAIN,
# default 0).
#
#   bash bench/growth.sh [OUT] [PROBES] [SECONDS]
#   bash bench/growth.sh /tmp/growth "timer noise hourglass" "60 600"     # the defaults
#
#   timer      sandglass timer -c CPU -i 100us            (10 kHz, every sample stored)
#   noise      sandglass noise -c CPU                     (busy polling at SCHED_FIFO 95)
#   hourglass  sandglass hourglass -n 1 -t 0 -w LAT 100us (one LAT thread, every wakeup stored)
#
# Appends "probe,seconds,max_rss_kb,run_dir_bytes" rows to OUT/growth.csv. Needs root for the
# real-time policies (without it the runs fall back to SCHED_OTHER and say so).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-/tmp/sandglass-growth}
PROBES=${2:-timer noise hourglass}
LENGTHS=${3:-60 600}
CPU=${CPU:-1}
MAIN=${MAIN:-0}

cargo build --release --quiet
BIN=$PWD/target/release/sandglass
mkdir -p "$OUT"
[ -f "$OUT/growth.csv" ] || echo "probe,seconds,max_rss_kb,run_dir_bytes" >"$OUT/growth.csv"

for probe in $PROBES; do
    for s in $LENGTHS; do
        dir=$OUT/$probe-$s
        rm -rf "$dir"
        case $probe in
        timer) cmd=("$BIN" timer -c "$CPU" --main-cpu "$MAIN" -i 100us -d "${s}s" -o "$dir" --json) ;;
        noise) cmd=("$BIN" noise -c "$CPU" --main-cpu "$MAIN" -d "${s}s" -o "$dir" --json) ;;
        hourglass) cmd=("$BIN" hourglass -n 1 -t 0 -w LAT 100us --affinity "$CPU" --main-cpu "$MAIN" -x -d "${s}s" -o "$dir") ;;
        *) echo "growth.sh: unknown probe '$probe' (timer, noise or hourglass)" >&2; exit 2 ;;
        esac
        /usr/bin/time -f "%M" -o "$dir.rss" "${cmd[@]}" >/dev/null 2>"$dir.err"
        echo "$probe,$s,$(cat "$dir.rss"),$(du -sb "$dir" | cut -f1)" | tee -a "$OUT/growth.csv"
        rm -f "$dir.rss"
    done
done
column -s, -t "$OUT/growth.csv"
