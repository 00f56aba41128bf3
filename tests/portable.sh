#!/usr/bin/env bash
# The portable core (docs/design.md, "A portable core"): sandglass-report, and the library under
# it without its `linux` feature, depend on no sandglass-sys, build with warnings denied, and
# build for a second target (macOS on x86_64), so that a run recorded on a target can be read,
# analysed and rendered on a laptop. A second target whose standard library cannot be installed
# here is skipped with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-apple-darwin

# What the report crate is built on, as Cargo resolves it for that crate alone.
tree=$(cargo tree --locked -p sandglass-report -e normal --prefix none)
if grep -q '^sandglass-sys ' <<<"$tree"; then
    echo "portable: sandglass-report depends on sandglass-sys:" >&2
    cargo tree --locked -p sandglass-report -e normal -i sandglass-sys >&2
    exit 1
fi
if ! grep -q '^sandglass ' <<<"$tree"; then
    echo "portable: cargo tree does not list the library under sandglass-report; the check above proves nothing" >&2
    exit 1
fi
echo "portable: sandglass-report and the library under it depend on no sandglass-sys"

# The portable build, lint with warnings denied (it is not the build the tests use: items that
# only measuring code uses are gated by the `linux` feature, and a name left ungated shows here).
cargo clippy --locked -p sandglass-report -- -D warnings
cargo clippy --locked -p sandglass --no-default-features -- -D warnings

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    rustup target add "$target" >/dev/null 2>&1 || true
fi
if rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    cargo check --locked -p sandglass-report --target "$target"
    echo "portable: sandglass-report builds for $target"
else
    echo "portable: skipped the build for $target: its standard library is not installed and rustup could not add it"
fi
