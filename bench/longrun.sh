#!/bin/bash
# A long timer run at 10 kHz and cyclictest beside it, with each one's memory every minute.
#
#   bash bench/longrun.sh [DURATION] [OUT]      # defaults: 1h, /tmp/sandglass-longrun
#
# sandglass measures CPU 1 (its main thread on CPU 0) and cyclictest measures CPU 0, both at
# SCHED_FIFO 95 with a 100 µs interval, at the same time: on a two-CPU machine this halves the
# time the comparison takes, and both see the same host. Each one's resident set (VmRSS) and
# peak (VmHWM) is read from /proc every 60 s into OUT/memory.csv. At the end the run's Parquet
# tables are checked against sandglass's own report with DuckDB (bench/duckdb_check.py), and
# OUT/summary.txt gives the bytes per stored sample. Needs root, cyclictest (rt-tests) and
# the duckdb Python package.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${1:-1h}
OUT=${2:-/tmp/sandglass-longrun}
case $DURATION in
*h) SECS=$((${DURATION%h} * 3600)) ;;
*m) SECS=$((${DURATION%m} * 60)) ;;
*s) SECS=${DURATION%s} ;;
*) echo "longrun.sh: duration '$DURATION' needs a unit: 90s, 10m or 1h" >&2; exit 2 ;;
esac
command -v cyclictest >/dev/null || { echo "longrun.sh: cyclictest not found (apt-get install rt-tests)" >&2; exit 2; }

cargo build --release --quiet
BIN=target/release/sandglass
rm -rf "$OUT"
mkdir -p "$OUT"

"$BIN" timer -c 1 --main-cpu 0 -i 100us -d "$DURATION" -o "$OUT/run" --json \
    >"$OUT/sandglass.json" 2>"$OUT/sandglass.err" &
SG=$!
cyclictest -m -t1 -a 0 -p95 -i100 -D"$SECS" -q -h 1000 >"$OUT/cyclictest.txt" 2>&1 &
CT=$!
trap 'kill -INT $SG $CT 2>/dev/null || true' INT TERM

status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || true; }
echo "minute,sandglass_rss_kb,sandglass_hwm_kb,cyclictest_rss_kb,cyclictest_hwm_kb" >"$OUT/memory.csv"
second=0
while kill -0 $SG 2>/dev/null || kill -0 $CT 2>/dev/null; do
    sleep 1
    second=$((second + 1))
    if ((second % 60 == 0)); then
        echo "$((second / 60)),$(status_kb $SG VmRSS),$(status_kb $SG VmHWM),$(status_kb $CT VmRSS),$(status_kb $CT VmHWM)" \
            >>"$OUT/memory.csv"
    fi
done
wait $SG || echo "sandglass exited with $?" >&2
wait $CT || echo "cyclictest exited with $?" >&2

samples=$(python3 -c "import duckdb,sys; print(duckdb.connect().execute(\"SELECT count(*) FROM '$OUT/run/samples-*.parquet'\").fetchone()[0])")
bytes=$(cat "$OUT"/run/samples-*.parquet | wc -c)
{
    echo "duration: $DURATION"
    echo "samples stored: $samples"
    echo "samples-*.parquet: $bytes bytes"
    python3 -c "print(f'bytes per sample: {$bytes / $samples:.2f}')"
    echo "run directory: $(du -sb "$OUT/run" | cut -f1) bytes"
    ls -l "$OUT/run"
} >"$OUT/summary.txt"
python3 bench/duckdb_check.py "$OUT/run" | tee -a "$OUT/summary.txt"
cat "$OUT/summary.txt"
column -s, -t "$OUT/memory.csv"
