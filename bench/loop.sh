#!/usr/bin/env bash
# The gap detector's polling loop beside a bare cycle-counter loop and beside oslat, measured in
# the same run on the same CPU, alternating A/B/C REPS times. Prints a Markdown table of the
# medians over the repetitions, then every repetition.
#
#   bash bench/loop.sh [CPU] [SECONDS] [REPS]      (defaults: last CPU, 5, 3)
#
# Needs root for oslat's and sandglass's memory locking; installs rt-tests if oslat is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

CPU=${1:-$(( $(nproc) - 1 ))}
SECS=${2:-5}
REPS=${3:-3}
MAIN_CPU=0
[ "$CPU" = 0 ] && MAIN_CPU=1

if ! command -v oslat >/dev/null; then
    apt-get update -qq && apt-get install -y -qq rt-tests >/dev/null
fi
cargo build --release -q
SG=./target/release/sandglass
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

for rep in $(seq 1 "$REPS"); do
    "$SG" calibrate --cpu "$CPU" -d "${SECS}s" --json > "$OUT/calibrate.$rep.json"
    # 1024 one-µs buckets: oslat's default 32 puts every longer loop into its last bucket.
    oslat -c "$CPU" -C "$MAIN_CPU" -D "$SECS" -b 1024 -q --json="$OUT/oslat.$rep.json" > /dev/null
    "$SG" hourglass -n 1 -d "${SECS}s" -t 0 -w CPU --affinity "$CPU" --main-cpu "$MAIN_CPU" -x \
        -o "$OUT/hourglass.$rep" > /dev/null 2>&1
done

python3 - "$OUT" "$REPS" "$SECS" "$CPU" <<'PY'
import json, statistics, sys
out, reps, secs, cpu = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
rows = {}
def add(name, rep, **v):
    rows.setdefault(name, []).append(dict(rep=rep, **v))
for r in range(1, reps + 1):
    cal = json.load(open(f"{out}/calibrate.{r}.json"))
    for loop in cal["loops"]:
        s, above = loop["stats"], loop["above_ns"]
        dur = s["mean_ns"] * s["iterations"] / 1e9
        add(loop["loop"], r, per_s=s["iterations"] / dur, mean=s["mean_ns"], p50=s["p50_ns"],
            p9999=s["p99_99_ns"], gt5=above["5000"] / dur, gt50=above["50000"] / dur)
    os_ = json.load(open(f"{out}/oslat.{r}.json"))["thread"]
    t = next(iter(os_.values()))
    hist = {int(k): v for k, v in t["histogram"].items()}
    n = sum(hist.values())
    dur = t["duration"]
    def q(p):
        need, seen = p * n, 0
        for us in sorted(hist):
            seen += hist[us]
            if seen >= need:
                return us * 1000.0
    # oslat bucket k counts loops that took at most k µs and more than k-1 µs; the last
    # bucket (1024) also holds every longer loop, which still counts as above 5 and 50 µs.
    add("oslat (rt-tests %s)" % json.load(open(f"{out}/oslat.{r}.json"))["rt_test_version:"], r,
        per_s=n / dur, mean=dur * 1e9 / n, p50=q(0.5), p9999=q(0.9999),
        gt5=sum(v for k, v in hist.items() if k > 5) / dur,
        gt50=sum(v for k, v in hist.items() if k > 50) / dur)
    summ = json.load(open(f"{out}/hourglass.{r}/summary.json"))
    th = summ["threads"][0]
    trace = open(f"{out}/hourglass.{r}/trace.csv").read().splitlines()[1:]
    recs = [tuple(int(x) for x in l.split(",")[2:4]) for l in trace]
    gaps = [b[0] - a[1] for a, b in zip(recs, recs[1:])]
    span = th["active_ns"] / 1e9
    add("sandglass hourglass CPU thread (the real engine loop)", r,
        per_s=th["iterations"] / (th["received_ns"] / 1e9), mean=th["mean_iteration_ns"],
        p50=None, p9999=None, gt5=sum(g > 5000 for g in gaps) / span,
        gt50=sum(g > 50000 for g in gaps) / span)

def fmt(v, unit=""):
    if v is None:
        return "n/a"
    if unit == "ns" and v >= 1000:
        return "≤%d µs" % round(v / 1000) if v % 1000 == 0 else "%.2f µs" % (v / 1000)
    return ("%.1f" % v) + (" " + unit if unit else "")
print(f"CPU {cpu}, {secs:g} s per loop, {reps} repetitions alternating; medians of the repetitions\n")
print("| loop | iterations/s | mean | p50 | p99.99 | gaps > 5 µs per s | gaps > 50 µs per s |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, rs in rows.items():
    med = lambda k: (statistics.median([x[k] for x in rs]) if rs[0][k] is not None else None)
    print(f"| {name} | {med('per_s')/1e6:.1f} M | {fmt(med('mean'), 'ns')} | {fmt(med('p50'), 'ns')} | "
          f"{fmt(med('p9999'), 'ns')} | {fmt(med('gt5'))} | {fmt(med('gt50'))} |")
print("\nEvery repetition (iterations/s in millions, mean ns, gaps > 5 µs per s):\n")
for name, rs in rows.items():
    print(f"- {name}: " + "; ".join(f"{x['per_s']/1e6:.1f} M, {x['mean']:.1f} ns, {x['gt5']:.0f}/s" for x in rs))
PY
