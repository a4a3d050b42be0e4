#!/usr/bin/env bash
# Fresh-clone proof: README.md's "## Two commands" work on a clone of what is committed.
#
# 1. `git clone` this repository at HEAD (committed content only: nothing untracked, no
#    build/ cache, no local edits) into a temp dir.
# 2. Parse the "## Two commands" section of the clone's README.md: its first ```sh block
#    is the demo command, its second the test command.
# 3. Run the demo command exactly as written, in the clone, and check that it exits 0,
#    that its report says every scene passed, and that the lock was taken exactly once;
#    then run it a second time and check README's claim that warm is then all hits.
# 4. The test command is not run again here: .ci/run itself runs it in a fresh clone.
#    Check instead that .ci/run runs exactly the README's command, and print it.
# 5. `pip install .` as a user runs it (build isolation: maturin from PyPI, the release
#    profile) into a new virtualenv, then the demo through the `scenerun` it put on PATH.
#    tests/wheel.rs covers the wheel's contents and the pytest demo with a faster build.
#
# Speed: the clone's target/ is a symlink to this checkout's target dir (or
# $CARGO_TARGET_DIR), so `cargo build` in the clone reuses the compiled
# dependencies, while scenerun itself is rebuilt from the clone's sources
# (so the binary that runs is the committed one), and `./target/debug/scenerun` in the
# command resolves as written. This replaces target/debug/scenerun of the outer checkout
# with the committed build (in CI the outer checkout is itself a clone of the same commit).
# FRESH_CLONE_COLD=1 gives the clone its own target dir (a full cold build).
set -euo pipefail
top=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
cd "$top"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/scenerun-fresh-clone.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
clone="$tmp/clone"
git clone --quiet --no-hardlinks "$top" "$clone"
echo "fresh-clone: cloned $(git -C "$clone" rev-parse --short HEAD) into $clone"

# ---- the two commands, from the clone's README
block() { # README N -> the lines of the N-th ```sh block under "## Two commands"
    awk -v want="$2" '
        /^## / && !in_code { in_sec = ($0 == "## Two commands"); next }
        !in_sec { next }
        /^```/ && in_code { in_code = 0; next }
        # `sh`, or `sh` with words after it (the docs test reads `sh no-run`)
        /^```sh([[:space:]].*)?$/ { in_code = 1; n++; next }
        in_code && n == want { print }
    ' "$1"
}
readme="$clone/README.md"
demo=$(block "$readme" 1)
tests=$(block "$readme" 2)
if [ -z "$demo" ] || [ -z "$tests" ]; then
    echo "fresh-clone: README.md: expected two \`\`\`sh blocks under \"## Two commands\"" >&2
    exit 1
fi
if [ "$(printf '%s\n' "$tests" | wc -l)" -ne 1 ]; then
    echo "fresh-clone: README.md: the test block must be one command line:" >&2
    printf '%s\n' "$tests" >&2
    exit 1
fi

# ---- the demo command, exactly as written
if [ "${FRESH_CLONE_COLD:-0}" != 1 ]; then
    outer_target=${CARGO_TARGET_DIR:-$top/target}
    mkdir -p "$outer_target"
    ln -s "$outer_target" "$clone/target"
fi
# A lock pool and log of its own (the stand-in's default pool is per user, shared).
export TASK_SUBMIT_POOL="$tmp/pool" TASK_SUBMIT_LOG="$tmp/task-submit.log"
run_demo() { # LOG
    (
        cd "$clone"
        unset CARGO_TARGET_DIR SCENERUN_MANIFEST SCENERUN_CACHE_DIR GITHUB_ACTIONS GITHUB_STEP_SUMMARY
        bash -c "$demo"
    ) >"$1" 2>&1
}
echo "fresh-clone: \$ $demo"
if ! run_demo "$tmp/demo-1.log"; then
    tail -n 40 "$tmp/demo-1.log" | sed 's/^/    | /' >&2
    echo "fresh-clone: FAILED: the README's demo command exited non-zero in a fresh clone" >&2
    exit 1
fi
# Indented: a bare "6 passed, 0 failed" line would read as a test runner's closing line.
tail -n 12 "$tmp/demo-1.log" | sed 's/^/    | /'

report="$clone/fixtures/demo/build/scenerun/report.json"
[ -f "$report" ] || { echo "fresh-clone: no report at $report" >&2; exit 1; }
grep -q '"exit_code": *0' "$report" || { echo "fresh-clone: $report does not say exit_code 0" >&2; exit 1; }
acquired=$(grep -c '^acquire ' "$TASK_SUBMIT_LOG" || true)
[ "$acquired" = 1 ] || { echo "fresh-clone: the lock was acquired $acquired times, want 1" >&2; exit 1; }

# README: "Run it a second time: the warm phase is all hits and compiles nothing."
if ! run_demo "$tmp/demo-2.log"; then
    tail -n 40 "$tmp/demo-2.log" | sed 's/^/    | /' >&2
    echo "fresh-clone: FAILED: the demo command's second run exited non-zero" >&2
    exit 1
fi
last="$clone/fixtures/demo/build/cache/last-warm.json"
grep -Eq '"built": *0([^0-9]|$)' "$last" || {
    cat "$last" >&2
    echo "fresh-clone: the second warm built something (README says: all hits)" >&2
    exit 1
}
echo "fresh-clone: demo command OK (twice; the second warm was all hits)"

# ---- the test command: what .ci/run runs
if ! grep -qxF -- "$tests" "$clone/.ci/run"; then
    echo "fresh-clone: README's test command \`$tests\` is not a line of .ci/run" >&2
    exit 1
fi
echo "fresh-clone: test command \`$tests\` is what .ci/run runs (in its own fresh clone)"

# ---- `pip install .` into a new virtualenv, and the demo through what it installed
venv="$tmp/venv"
python3 -m venv "$venv"
start=$(date +%s)
if ! (cd "$clone" && unset CARGO_TARGET_DIR && "$venv/bin/pip" install -q --disable-pip-version-check .) >"$tmp/pip.log" 2>&1; then
    tail -n 40 "$tmp/pip.log" | sed 's/^/    | /' >&2
    echo "fresh-clone: FAILED: \`pip install .\` in a fresh clone" >&2
    exit 1
fi
echo "fresh-clone: pip install . took $(($(date +%s) - start)) s"
export TASK_SUBMIT_LOG="$tmp/task-submit-pip.log"
if ! (
    cd "$clone"
    unset CARGO_TARGET_DIR SCENERUN_MANIFEST SCENERUN_CACHE_DIR GITHUB_ACTIONS GITHUB_STEP_SUMMARY
    export PATH="$venv/bin:$PATH"
    [ "$(command -v scenerun)" = "$venv/bin/scenerun" ] || { echo "scenerun is not the venv's: $(command -v scenerun)"; exit 1; }
    "$venv/bin/python" -c "import scenerun_pytest.plugin"
    scenerun --manifest fixtures/demo/scenes.yaml warm && scenerun --manifest fixtures/demo/scenes.yaml device
) >"$tmp/demo-pip.log" 2>&1; then
    tail -n 40 "$tmp/demo-pip.log" | sed 's/^/    | /' >&2
    echo "fresh-clone: FAILED: the demo through the pip-installed scenerun" >&2
    exit 1
fi
grep -q '"exit_code": *0' "$report" || { echo "fresh-clone: $report does not say exit_code 0" >&2; exit 1; }
acquired=$(grep -c '^acquire ' "$TASK_SUBMIT_LOG" || true)
[ "$acquired" = 1 ] || { echo "fresh-clone: the lock was acquired $acquired times, want 1" >&2; exit 1; }
echo "fresh-clone: pip install . OK: its scenerun and plugin ran the demo"
