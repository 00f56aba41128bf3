#!/usr/bin/env bash
# sandglass's pipe latency and context-switch cost beside `perf bench sched pipe` and
# hackbench, measured in the same run on the same CPU, alternating the tools REPS times.
# Prints a Markdown table of the medians over the repetitions, every repetition, and the exact
# command lines.
#
#   bash bench/ipc.sh [CPU] [REPS]      (defaults: last CPU, 3)
#
# Installs linux-perf and rt-tests (hackbench) with apt-get when they are missing. Uses
# $CARGO_TARGET_DIR when set.
set -euo pipefail
cd "$(dirname "$0")/.."

CPU=${1:-$(( $(nproc) - 1 ))}
REPS=${2:-3}
PERF_LOOPS=200000
HB_GROUPS=4
HB_LOOPS=200

if ! command -v perf >/dev/null || ! perf bench sched pipe -l 1 >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq linux-perf >/dev/null
fi
if ! command -v hackbench >/dev/null; then
    apt-get update -qq && apt-get install -y -qq rt-tests >/dev/null
fi
cargo build --release -q -p sandglass-cli
SG="${CARGO_TARGET_DIR:-target}/release/sandglass"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# The command lines, exactly as run (the run directories go to $OUT).
SG_IPC="$SG bench ipc --mech pipe --sizes 4 --placement same-cpu --cpus $CPU --max-samples 200000 --cell-time 2s --json"
SG_CTX="$SG bench ctxsw --working-sets 0 --cpu $CPU --max-trips 200000 --cell-time 3s --json"
PERF_P="taskset -c $CPU perf bench sched pipe -l $PERF_LOOPS"
PERF_T="taskset -c $CPU perf bench sched pipe -T -l $PERF_LOOPS"
HB_P="taskset -c $CPU hackbench -p -g $HB_GROUPS -l $HB_LOOPS"
HB_T="taskset -c $CPU hackbench -p -T -g $HB_GROUPS -l $HB_LOOPS"

for rep in $(seq 1 "$REPS"); do
    SANDGLASS_RUNS_DIR="$OUT/runs" $SG_IPC > "$OUT/sg-ipc.$rep.json" 2>/dev/null
    $PERF_P > "$OUT/perf-p.$rep.txt" 2>&1
    SANDGLASS_RUNS_DIR="$OUT/runs" $SG_CTX > "$OUT/sg-ctx.$rep.json" 2>/dev/null
    $PERF_T > "$OUT/perf-t.$rep.txt" 2>&1
    $HB_P > "$OUT/hb-p.$rep.txt" 2>&1
    $HB_T > "$OUT/hb-t.$rep.txt" 2>&1
done

python3 - "$OUT" "$REPS" "$HB_GROUPS" "$HB_LOOPS" "$SG_IPC" "$SG_CTX" "$PERF_P" "$PERF_T" "$HB_P" "$HB_T" <<'PY'
import json, re, statistics, sys
out, reps, groups, loops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sg_ipc, sg_ctx, perf_p, perf_t, hb_p, hb_t = sys.argv[5:11]
rows = []  # (label, command, [values in ns])

def perf_one_way(name):
    # usecs/op is one round trip (A writes, B reads and writes back, A reads).
    vals = []
    for r in range(1, reps + 1):
        m = re.search(r"([\d.]+)\s+usecs/op", open(f"{out}/{name}.{r}.txt").read())
        vals.append(float(m.group(1)) * 1000 / 2)
    return vals

def hackbench_per_message(name):
    # Each of the 20 senders of a group writes `loops` messages to each of its 20 receivers.
    vals = []
    for r in range(1, reps + 1):
        m = re.search(r"Time:\s*([\d.]+)", open(f"{out}/{name}.{r}.txt").read())
        vals.append(float(m.group(1)) * 1e9 / (groups * 20 * 20 * loops))
    return vals

ipc = [json.load(open(f"{out}/sg-ipc.{r}.json")) for r in range(1, reps + 1)]
cell = lambda v: v["mechanisms"][0]["cells"][0]["one_way_ns"]
rows.append(("sandglass: pipe one-way latency, 4 B, p50", sg_ipc, [cell(v)["p50_ns"] for v in ipc]))
rows.append(("sandglass: pipe one-way latency, 4 B, mean", sg_ipc, [cell(v)["mean_ns"] for v in ipc]))
rows.append(("sandglass: pipe one-way latency, 4 B, p99", sg_ipc, [cell(v)["p99_ns"] for v in ipc]))
rows.append(("perf bench sched pipe, processes: one-way (usecs/op ÷ 2, mean)", perf_p, perf_one_way("perf-p")))
rows.append(("perf bench sched pipe -T, threads: one-way (usecs/op ÷ 2, mean)", perf_t, perf_one_way("perf-t")))
ctx = [json.load(open(f"{out}/sg-ctx.{r}.json")) for r in range(1, reps + 1)]
c0 = lambda v: v["cells"][0]
rows.append(("sandglass ctxsw: direct switch, p50", sg_ctx, [c0(v)["switch_ns"]["p50_ns"] for v in ctx]))
rows.append(("sandglass ctxsw: direct switch, p99", sg_ctx, [c0(v)["switch_ns"]["p99_ns"] for v in ctx]))
rows.append(("sandglass ctxsw: hop (switch + pipe write + pipe read), p50", sg_ctx, [c0(v)["hop_ns"]["p50_ns"] for v in ctx]))
rows.append(("sandglass ctxsw: overhead (pipe write + read, no switch), p50", sg_ctx, [c0(v)["overhead_ns"]["p50_ns"] for v in ctx]))
rows.append(("hackbench -p, processes: time per 100 B message", hb_p, hackbench_per_message("hb-p")))
rows.append(("hackbench -p -T, threads: time per 100 B message", hb_t, hackbench_per_message("hb-t")))

def fmt(ns):
    return "%.0f ns" % ns if ns < 1000 else "%.2f µs" % (ns / 1000)

print(f"CPU {ipc[0]['client_cpu']}, {reps} repetitions alternating; medians of the repetitions:\n")
print("| measurement | median | every repetition |")
print("|---|---:|---|")
for label, _, vals in rows:
    print(f"| {label} | {fmt(statistics.median(vals))} | {', '.join(fmt(v) for v in vals)} |")
print("\nCommands:\n")
seen = set()
for label, cmd, _ in rows:
    if cmd not in seen:
        seen.add(cmd)
        print(f"    {cmd}")
print("""
What each figure contains:
- sandglass pipe: two threads pinned to one CPU; one write and one read of 4 bytes and one
  context switch per one-way trip, every round trip timed; percentiles are exact.
- perf bench sched pipe: the same ping-pong of a 4-byte int over two pipes, pinned here with
  taskset; it reports only the mean over all loops. Without -T the two sides are processes, so
  every switch also changes the address space; with -T they are threads, as in sandglass.
- sandglass ctxsw: switch = hop − the same pipe write and read done without a switch (lmbench
  lat_ctx's method), so it excludes the pipe's own cost that the two rows above include.
- hackbench: 20 senders and 20 receivers per group through pipes, all on one CPU here; the time
  per message mixes wakeups, switches and batching (a receiver often finds several messages),
  so it is a throughput figure, smaller than a one-way latency.""")
PY
