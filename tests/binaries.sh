#!/usr/bin/env bash
# Builds every test binary of the workspace (`cargo test --workspace --no-run`) and prints one
# line per binary: its path, its package's directory (where `cargo test` runs it) and its name,
# separated by tabs. Build progress and diagnostics go to stderr.
#
#   bash tests/binaries.sh > target/test-binaries.tsv
#   bash tests/binaries.sh --test it > target/test-binaries-it.tsv   # the command's tests only
#
# Arguments go to cargo: a target filter such as `--test it` builds those targets alone, with
# the features of the whole workspace, so that a later build of every test binary reuses them
# instead of building them again for other features. .ci/run builds the command's tests first
# and the rest while they run, and runs the same binaries as root and, through
# tests/unprivileged.sh, as an unprivileged user.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked --no-run --message-format=json-render-diagnostics "$@" |
    python3 -c '
import json, sys, os
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"] + "\t" + os.path.dirname(m["manifest_path"]) + "\t" + m["target"]["name"])
'
