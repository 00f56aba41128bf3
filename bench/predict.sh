#!/usr/bin/env bash
# Predictions checked against the machine: for each condition (idle, and under a load), a 1 min
# timer run and a 6 min timer run predict, and a 60 min run right after observes:
#   - the mean time to underrun (MTTF) of a double-buffered stream woken like the timer, at two
#     buffer sizes (`analyze mttf --run`, with its 95 % interval);
#   - the expected worst delay per hour (`analyze worst-case --run`, with its 95 % interval; the
#     validity rule withholds it from the 1 min run, which can speak of 10 min at most).
# The observed figures come from the 60 min run's samples (every release): the MTTF as the time
# measured over the number of releases later than the buffer, with its exact Poisson interval,
# and the largest delay of each whole hour. bench/predict_summary.py prints the table of
# BENCHMARKS.md, "Predictions checked against a longer run".
# Usage:
#   bench/predict.sh OUT [CONDITION...]     (conditions: idle, or a --load profile such as cpu+disk)
#   bench/predict.sh /tmp/predict idle cpu+disk
# Durations can be shortened to try the script: PREDICT_S=20 PREDICT_LONG_S=60 OBSERVE_S=120.
set -euo pipefail
out=${1:?give an output directory}
shift
conditions=("$@")
[ ${#conditions[@]} -gt 0 ] || conditions=(idle cpu+disk)
here=$(cd "$(dirname "$0")" && pwd)
bin=${SANDGLASS_BIN:-$here/../target/release/sandglass}
predict_s=${PREDICT_S:-60}
predict_long_s=${PREDICT_LONG_S:-360}
observe_s=${OBSERVE_S:-3600}
cpu=${CPU:-1}
buffers=${BUFFERS:-1ms,4ms}
mkdir -p "$out"
export SANDGLASS_RUNS_DIR=$out/runs
date -u +%FT%TZ > "$out/start"
for c in "${conditions[@]}"; do
    load=()
    [ "$c" = idle ] || load=(--load "$c")
    for phase in predict:$predict_s predict-long:$predict_long_s observe:$observe_s; do
        name=${phase%%:*}
        secs=${phase##*:}
        dir=$out/$c-$name
        echo "$(date -u +%T) $c: $name, ${secs}s on CPU $cpu" >&2
        "$bin" timer -c "$cpu" -i 1ms -d "${secs}s" "${load[@]}" -q -o "$dir"
        if [ "$name" != observe ]; then
            for b in ${buffers//,/ }; do
                "$bin" analyze mttf --run "$dir" --buffer "$b" --buffers 2 --json > "$dir.mttf-$b.json"
            done
            "$bin" analyze worst-case --run "$dir" --json > "$dir.worst-case.json"
        fi
    done
done
date -u +%FT%TZ > "$out/end"
python3 "$here/predict_summary.py" --buffers "$buffers" "$out" "${conditions[@]}"
