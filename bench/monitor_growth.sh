#!/usr/bin/env bash
# Memory, CPU time and disk of `sandglass monitor` over a long run: samples the process's
# resident memory (VmRSS, VmHWM) and CPU time (user + system, all threads) every 30 s, then
# ends it with SIGTERM and gives its segments' disk use. Usage:
#   bench/monitor_growth.sh DURATION_S [monitor options...]
#   bench/monitor_growth.sh 7200 -c 1 --duty 10% --segment 1h
# RUNS_DIR chooses where the segments go (default: a new temporary directory).
set -euo pipefail
duration=${1:?give the duration in seconds}
shift
bin=${SANDGLASS_BIN:-target/release/sandglass}
runs=${RUNS_DIR:-$(mktemp -d)}
export SANDGLASS_RUNS_DIR=$runs
"$bin" monitor "$@" -q &
pid=$!
tick=$(getconf CLK_TCK)
start=$(date +%s)
echo "elapsed_s,rss_kib,hwm_kib,cpu_s"
while :; do
    now=$(date +%s)
    elapsed=$((now - start))
    rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status)
    hwm=$(awk '/^VmHWM/ {print $2}' /proc/$pid/status)
    # utime + stime of the whole process (fields 14 and 15 of /proc/PID/stat).
    cpu=$(awk -v t="$tick" '{printf "%.2f", ($14 + $15) / t}' /proc/$pid/stat)
    echo "$elapsed,$rss,$hwm,$cpu"
    [ "$elapsed" -ge "$duration" ] && break
    sleep 30
done
kill -TERM $pid
wait $pid
echo "# segments: $(find "$runs" -mindepth 1 -maxdepth 1 -type d | wc -l), disk $(du -sk "$runs" | cut -f1) KiB in $runs"
