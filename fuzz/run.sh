#!/usr/bin/env bash
# Coverage-guided fuzzing of every target with libFuzzer (cargo-fuzz, nightly Rust).
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]      default: 60 s, every target
#
# Installs cargo-fuzz and the nightly toolchain when they are missing. New inputs go to a
# working corpus under fuzz/work/ (not committed); the seeds in fuzz/corpus/ are only read.
# A crash or timeout leaves its input in fuzz/artifacts/TARGET/ and stops with exit code 1;
# turn it into a regression test (crates/fuzzing/tests/regressions.rs) before fixing it.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(ls fuzz_targets | sed 's/\.rs$//')
fi
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
cargo +nightly fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked
cargo +nightly fuzz build -O
summary=()
for t in "${targets[@]}"; do
    mkdir -p "work/$t"
    log="work/$t.log"
    echo "fuzz: $t for ${seconds}s"
    if ! cargo +nightly fuzz run -O "$t" "work/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 >"$log" 2>&1; then
        tail -30 "$log"
        echo "fuzz: $t FAILED; the input is in fuzz/artifacts/$t/"
        exit 1
    fi
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')
    corpus=$(ls "work/$t" | wc -l)
    summary+=("$(printf '%-18s %6ss %12s runs  %6s edges  %6s corpus' "$t" "$seconds" "$runs" "$cov" "$corpus")")
done
echo
echo "fuzz: every target ran without a crash, a timeout or a leak"
printf '%s\n' "${summary[@]}"
