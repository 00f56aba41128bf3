#!/usr/bin/env bash
# The whole test suite as an unprivileged user.
#
# Builds every test binary as the calling user (root in CI), then runs each one as a dedicated
# user without any capability, from its package's directory as `cargo test` would. Tests that
# need root skip with a printed reason; every other test must pass: each command either works
# with reduced features and says which, or refuses with the missing capability and how to
# grant it.
#
#   bash tests/unprivileged.sh           # as root: creates the user `sandglass-test` if needed
#
# SANDGLASS_TEST_BINARIES=FILE runs the binaries FILE lists (tests/binaries.sh's output) instead
# of building them; SANDGLASS_TEST_MACHINE_LOCK=FILE (a file the user can read) makes the tests
# that measure wait for those of another test process holding it, so that .ci/run can run this
# pass beside the root one; SANDGLASS_TEST_LOCK_LOG=FILE (a file the user can append to) gets a
# line for each time a test held that lock.
#
# Not root: prints why it cannot switch users and exits 0 (the ordinary `cargo test` already
# runs unprivileged then).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "$(id -u)" != 0 ]; then
    echo "unprivileged test run skipped: it must start as root to switch to an unprivileged user (cargo test as $(id -un) is already unprivileged)"
    exit 0
fi
if ! command -v setpriv >/dev/null; then
    echo "unprivileged test run skipped: setpriv (util-linux) is missing; apt-get install util-linux" >&2
    exit 0
fi

user=sandglass-test
if ! id "$user" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
fi
uid=$(id -u "$user")
gid=$(id -g "$user")

home=$(mktemp -d /tmp/sandglass-unprivileged.XXXXXX)
chown "$uid:$gid" "$home"
trap 'rm -rf "$home"' EXIT

# Every test binary with its package directory, as cargo would run it: the list .ci/run made
# when it built them (SANDGLASS_TEST_BINARIES), or built and listed now; the command's tests
# first, so that its measuring tests wait for the machine beside the root pass's from the start.
if [ -n "${SANDGLASS_TEST_BINARIES:-}" ]; then
    list=$(cat "$SANDGLASS_TEST_BINARIES")
else
    list=$(bash tests/binaries.sh 2>/dev/null)
fi
# (errexit holds in the substitution too: a list without one of the two must not end it early.)
mapfile -t binaries < <(grep -P '\tit$' <<<"$list" || true; grep -vP '\tit$' <<<"$list" || true)
if [ "${#binaries[@]}" = 0 ]; then
    echo "no test binaries were built" >&2
    exit 1
fi

failed=0
skipped=0
passed=0
start=$(date +%s)
for entry in "${binaries[@]}"; do
    IFS=$'\t' read -r exe dir name <<<"$entry"
    log="$home/$name.log"
    # The command's tests mostly wait on commands or on the machine lock: all of them in flight
    # at once lets the lock decide who runs, and those that share the machine run together
    # (.ci/run says why).
    threads=2
    [ "$name" = it ] && threads=$("$exe" --list | grep -c ': test$')
    # No capabilities at all, a clean environment, the user's own temporary directory.
    if (cd "$dir" && timeout 1200 setpriv --reuid "$uid" --regid "$gid" --clear-groups \
        --inh-caps=-all --bounding-set=-all --no-new-privs \
        env -i PATH="$PATH" HOME="$home" TMPDIR="$home" LANG=C.UTF-8 \
        CARGO_MANIFEST_DIR="$dir" INSTA_WORKSPACE_ROOT="$root" CI=true RUST_BACKTRACE=1 \
        ${SANDGLASS_TEST_MACHINE_LOCK:+SANDGLASS_TEST_MACHINE_LOCK="$SANDGLASS_TEST_MACHINE_LOCK"} \
        ${SANDGLASS_TEST_LOCK_LOG:+SANDGLASS_TEST_LOCK_LOG="$SANDGLASS_TEST_LOCK_LOG"} \
        "$exe" --test-threads="$threads" >"$log" 2>&1); then
        result=$(grep -E '^test result:' "$log" | tail -1)
        n_skip=$(grep -c '^skipped ' "$log" || true)
        skipped=$((skipped + n_skip))
        passed=$((passed + $(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$result")))
        echo "ok   $name: $result; $n_skip skipped for privileges"
    else
        failed=$((failed + 1))
        echo "FAIL $name (log below)"
        grep -E '^(test .* FAILED|---- |thread .* panicked|failures:)' -A4 "$log" | sed -n '1,60p'
    fi
done
echo "unprivileged ($user, uid $uid, no capabilities): $passed tests passed ($skipped of them skipped a privileged part with a printed reason), $failed test binaries failed, $(( $(date +%s) - start )) s"
[ "$failed" = 0 ]
