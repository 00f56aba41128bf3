#!/bin/bash
# The readers of a run against its size: replayed timer runs of each SIZE samples (one CPU at
# 10 kHz, written by bench/make_run through the library's store writer), and on each run every
# reader timed as a whole process with its peak memory (GNU time), median of REPS repetitions.
#
#   bash bench/readers.sh [OUT] [REPS] [SIZE ...]     # defaults: /tmp/sandglass-readers 3 1M 36M 360M
#
# The CSV export writes every sample (about 75 bytes each): for the largest size it runs once,
# and its files are deleted after each run. Writes OUT/readers.csv and prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-/tmp/sandglass-readers}
REPS=${2:-3}
shift 2 2>/dev/null || shift $#
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1M 36M 360M)

cargo build --release --quiet
cargo build --release --quiet -p sandglass --example make_run
BIN=$PWD/target/release/sandglass
MAKE=$PWD/target/release/examples/make_run
mkdir -p "$OUT"
TASKS=$PWD/crates/cli/tests/data/hourglass-5.5.toml
echo "samples,reader,wall_s,max_rss_kb" >"$OUT/readers.csv"

# median of the numbers on standard input
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

measure() { # SIZE NAME REPS COMMAND...
    local size=$1 name=$2 reps=$3
    shift 3
    local walls=() rsss=()
    for _ in $(seq "$reps"); do
        rm -rf "$OUT/csv" "$OUT/page.html"
        /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$@" >/dev/null 2>"$OUT/stderr.txt" || {
            echo "readers.sh: $name failed on $size:" >&2
            cat "$OUT/stderr.txt" >&2
            exit 1
        }
        read -r wall rss <"$OUT/time.txt"
        walls+=("$wall")
        rsss+=("$rss")
    done
    rm -rf "$OUT/csv"
    local w r
    w=$(printf '%s\n' "${walls[@]}" | median)
    r=$(printf '%s\n' "${rsss[@]}" | median)
    echo "$size,$name,$w,$r" | tee -a "$OUT/readers.csv"
}

for size in "${SIZES[@]}"; do
    run=$OUT/run-$size
    if [ ! -f "$run/summary.json" ]; then
        rm -rf "$run"
        /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$MAKE" "$size" "$run" --interval 100us >/dev/null
        read -r wall rss <"$OUT/time.txt"
        echo "$size,make_run,$wall,$rss" | tee -a "$OUT/readers.csv"
    fi
    echo "$size,bytes_on_disk,$(du -sb "$run" | cut -f1)," | tee -a "$OUT/readers.csv"
    csv_reps=$REPS
    [ "$size" = 360M ] && csv_reps=1
    measure "$size" "report" "$REPS" "$BIN" report "$run"
    measure "$size" "report --markdown" "$REPS" "$BIN" report "$run" --markdown
    measure "$size" "report --html" "$REPS" "$BIN" report "$run" --html "$OUT/page.html"
    measure "$size" "report --csv" "$csv_reps" "$BIN" report "$run" --csv "$OUT/csv"
    measure "$size" "analyze worst-case --run" "$REPS" "$BIN" analyze worst-case --run "$run"
    measure "$size" "analyze mttf --run --buffer 2ms --buffers 2" "$REPS" \
        "$BIN" analyze mttf --run "$run" --buffer 2ms --buffers 2
    measure "$size" "analyze rta --jitter-from RUN@p99.9" "$REPS" \
        "$BIN" analyze rta "$TASKS" --jitter-from "$run@p99.9"
    measure "$size" "compare RUN RUN" "$REPS" "$BIN" compare "$run" "$run"
done
rm -f "$OUT/time.txt" "$OUT/stderr.txt" "$OUT/page.html"
column -s, -t "$OUT/readers.csv"
