#!/usr/bin/env bash
# Render check of the HTML reports (`sandglass report RUN --html FILE`).
#
# Renders each page in headless Chromium at a desktop width (1280 px) and a phone width
# (390 px), and checks with tests/render_check.py, from the document as Chromium parsed it,
# that the page is of the right kind, loads nothing, and has every plot expected for its kind
# with data and axis titles with units; and from each screenshot that the page is not blank.
#
#   bash tests/render.sh                       # build, make a short timer, noise and Hourglass
#                                              # run and a quick study, check their pages
#   bash tests/render.sh --update-docs         # the same with a 10 s timer run, then copy the
#                                              # timer and study pages' desktop screenshots to
#                                              # docs/report-timer.png and docs/report-study.png
#   bash tests/render.sh --html FILE KIND ...  # check the given pages only (the option may be
#                                              # repeated; KIND: timer, noise, hourglass, study)
#   bash tests/render.sh --pages-to DIR        # make the runs and their pages (DIR/T.html,
#                                              # N.html, H.html, S.html) and check nothing
#
# The runs are made with a release build, or with the binary SANDGLASS_BIN names (CI uses the
# test build's: the pages are the same). With SANDGLASS_TEST_MACHINE_LOCK=FILE they are made
# holding FILE shared (flock), as the command's tests that share the machine hold it (.ci/run
# makes the pages beside the tests, and checks them once the tests that share the machine are
# done).
#
# Chromium is Debian's `chromium`, installed when missing if this runs as root with apt-get;
# otherwise the check is skipped with a printed reason (exit 0). Exits 1 if any page fails,
# with a line naming the file, the plot and what is wrong.
set -euo pipefail

usage() {
    sed -n '9,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

update_docs=0
pages_to=""
pages=() # FILE KIND pairs
while [ $# -gt 0 ]; do
    case $1 in
    --update-docs) update_docs=1; shift ;;
    --html) [ $# -ge 3 ] || usage; pages+=("$(realpath -m "$2")" "$3"); shift 3 ;;
    --pages-to) [ $# -ge 2 ] || usage; pages_to=$(realpath -m "$2"); shift 2 ;;
    *) usage ;;
    esac
done
if [ "$update_docs" = 1 ] && [ ${#pages[@]} -gt 0 ]; then
    echo "--update-docs makes its own runs: it cannot be combined with --html" >&2
    exit 2
fi
if [ -n "$pages_to" ] && { [ "$update_docs" = 1 ] || [ ${#pages[@]} -gt 0 ]; }; then
    echo "--pages-to only makes pages: it cannot be combined with --html or --update-docs" >&2
    exit 2
fi
cd "$(dirname "$0")/.."

find_chromium() { command -v chromium || command -v chromium-browser; }
if [ -n "$pages_to" ]; then
    chrome=""
elif ! chrome=$(find_chromium); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing chromium"
        timeout 600 apt-get update -qq
        DEBIAN_FRONTEND=noninteractive timeout 1200 apt-get install -y -qq chromium >/dev/null
        chrome=$(find_chromium)
    else
        echo "render check skipped: chromium is missing; install it with: sudo apt-get install chromium"
        exit 0
    fi
fi
[ -z "$chrome" ] || echo "using $(timeout 60 "$chrome" --version 2>/dev/null) ($chrome)"

tmp=$(mktemp -d /tmp/sandglass-render.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

headless() { # ARGS... : one bounded headless call with a throwaway profile, log in $tmp
    local profile status=0
    profile=$(mktemp -d "$tmp/profile.XXXXXX")
    timeout -k 10 60 "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --disable-dev-shm-usage --force-device-scale-factor=1 --no-first-run \
        --user-data-dir="$profile" "$@" 2>>"$tmp/chromium.log" || status=$?
    rm -rf "$profile"
    return "$status"
}

screenshot() { # HTML WIDTH PNG : the whole page, cropped below its content
    local url width=$2 png=$3 height=4000 dims
    url="file://$(realpath "$1")"
    while :; do
        rm -f "$png"
        headless --window-size="$width,$height" --screenshot="$png" "$url" >/dev/null || return 1
        dims=$(timeout 300 python3 tests/render_check.py crop "$png" "$png") || return 1
        # Content down to the bottom edge: the page is taller than the window.
        [ "${dims% *}" -lt "${dims#* }" ] && break
        if [ "$height" -ge 32000 ]; then
            echo "note: $1 is taller than $height px at $width px; checking its top part"
            break
        fi
        height=$((height * 2))
    done
}

failed=()
check() { # HTML KIND : render and check one page; a failure is recorded, not fatal
    local html=$1 kind=$2 base
    base="$tmp/$(basename "$html" .html)"
    echo "== $html ($kind)"
    if [ ! -f "$html" ]; then
        echo "FAIL $html: no such file"
        failed+=("$html")
        return
    fi
    if ! { screenshot "$html" 1280 "$base-1280.png" && screenshot "$html" 390 "$base-390.png" &&
        headless --dump-dom "file://$(realpath "$html")" >"$base.dom.html"; }; then
        echo "FAIL $html: chromium could not render it; its last messages:"
        tail -n 5 "$tmp/chromium.log"
        failed+=("$html")
        return
    fi
    timeout 300 python3 tests/render_check.py check "$(basename "$html")" "$kind" \
        "$base.dom.html" "$base-1280.png" "$base-390.png" || failed+=("$html")
}

[ -n "$pages_to" ] || timeout 60 python3 tests/render_check.py selftest

if [ ${#pages[@]} -eq 0 ]; then
    start=$SECONDS
    if [ -n "${SANDGLASS_BIN:-}" ]; then
        bin=$(realpath "$SANDGLASS_BIN")
    else
        timeout 2400 cargo build --release --locked -q
        bin=$PWD/target/release/sandglass
    fi
    export SANDGLASS_RUNS_DIR="$tmp/runs" SANDGLASS_RUNTIME_DIR="$tmp/runtime"
    if [ -n "${SANDGLASS_TEST_MACHINE_LOCK:-}" ]; then
        exec {machine}<"$SANDGLASS_TEST_MACHINE_LOCK"
        flock -s "$machine"
    fi
    prio=f:50 timer_duration=3s study_scale=0.05
    [ "$(id -u)" = 0 ] || prio=NORMAL # a real-time priority needs root
    [ "$update_docs" = 0 ] || timer_duration=10s study_scale=0.25
    run() { # NAME ARGS... : one run or study, its output shown only if it fails
        local name=$1
        shift
        echo "== sandglass $*"
        if ! timeout 300 "$bin" "$@" -o "$tmp/$name" >"$tmp/$name.log" 2>&1 ||
            ! timeout 120 "$bin" report "$tmp/$name" --html "$tmp/$name.html" >>"$tmp/$name.log" 2>&1; then
            tail -n 20 "$tmp/$name.log"
            echo "FAIL sandglass $*: no page"
            exit 1
        fi
    }
    run T timer -d "$timer_duration"
    run N noise -d 3s
    run H hourglass -n 2 -d 2s -t 1 -w PERIODIC 2ms 10ms -p "$prio"
    run S study quick --duration-scale "$study_scale"
    [ -z "${machine:-}" ] || exec {machine}<&-
    echo "build and runs took $((SECONDS - start)) s"
    if [ -n "$pages_to" ]; then
        mkdir -p "$pages_to"
        cp "$tmp/T.html" "$tmp/N.html" "$tmp/H.html" "$tmp/S.html" "$pages_to/"
        echo "pages made in $pages_to: T.html (timer), N.html (noise), H.html (hourglass), S.html (study)"
        exit 0
    fi
    pages=("$tmp/T.html" timer "$tmp/N.html" noise "$tmp/H.html" hourglass "$tmp/S.html" study)
fi

for ((i = 0; i < ${#pages[@]}; i += 2)); do
    check "${pages[i]}" "${pages[i + 1]}"
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "render check failed: ${failed[*]}"
    exit 1
fi
if [ "$update_docs" = 1 ]; then
    cp "$tmp/T-1280.png" docs/report-timer.png
    cp "$tmp/S-1280.png" docs/report-study.png
    echo "updated docs/report-timer.png and docs/report-study.png"
fi
echo "render check passed: $((${#pages[@]} / 2)) pages"
