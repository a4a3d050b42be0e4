#!/usr/bin/env bash
# bench/instructions.sh — user-space instructions (callgrind's total Ir of the whole
# process, all threads) of two scenerun builds side by side: a no-op `warm` on
# SCENES×KERNELS (default 200×40 over 2,000 sources, one full cache shared by both) and
# `plan --format json` on PLAN_SCENES×KERNELS (default 500×40 over 5,000 sources, with
# per-scene flags). Instruction counts do not move with the machine's load, so a shared
# host can say whether a change made scenerun slower.
#
#   BEFORE=<git rev> bench/instructions.sh   # builds BEFORE in a temporary worktree
#   BEFORE_BIN=<path> bench/instructions.sh  # or an existing binary
#
# `after` is SCENERUN (default: this checkout's release build). Each binary runs on its
# own copy of each tree, twice first (so its memos and its warm record are its own),
# then RUNS times (default 3), the two interleaved; medians with the range.
# Env: BEFORE BEFORE_BIN RUNS SCENES PLAN_SCENES KERNELS SOURCES PLAN_SOURCES BENCH_KEEP=1.
source "$(dirname "$0")/lib.sh"

RUNS=${RUNS:-3}
SCENES=${SCENES:-200}
PLAN_SCENES=${PLAN_SCENES:-500}
KERNELS=${KERNELS:-40}
SOURCES=${SOURCES:-2000}
PLAN_SOURCES=${PLAN_SOURCES:-5000}

command -v valgrind >/dev/null || { log "needs valgrind (apt-get install valgrind)"; exit 1; }
need_scenerun
make_tmp instructions
AFTER=$SCENERUN
if [ -n "${BEFORE_BIN:-}" ]; then
    BEFORE=${BEFORE:-$BEFORE_BIN}
elif [ -n "${BEFORE:-}" ]; then
    log "building $BEFORE"
    git -C "$ROOT" worktree add -q --detach "$BENCH_TMP/before-src" "$BEFORE"
    (cd "$BENCH_TMP/before-src" && CARGO_TARGET_DIR=$BENCH_TMP/before-target cargo build --release --quiet) >&2
    git -C "$ROOT" worktree remove --force "$BENCH_TMP/before-src"
    BEFORE_BIN=$BENCH_TMP/before-target/release/scenerun
else
    log "set BEFORE (a git rev) or BEFORE_BIN (a scenerun binary)"
    exit 1
fi

# Total Ir of one run of "$@" in the current directory.
ir() {
    valgrind --tool=callgrind --callgrind-out-file="$BENCH_TMP/cg.out" "$@" >/dev/null 2>&1 || true
    callgrind_annotate "$BENCH_TMP/cg.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}

median() { # values → "median (min–max)" in millions
    python3 -c "import statistics,sys; v=sorted(float(x)/1e6 for x in sys.argv[1:]); print(f'{statistics.median(v):,.1f} M ({v[0]:,.1f}–{v[-1]:,.1f})')" "$@"
}

change() { # before-values… -- after-values…
    python3 - "$@" <<'PY'
import statistics, sys
a = sys.argv[1:]
i = a.index("--")
b, c = statistics.median(map(float, a[:i])), statistics.median(map(float, a[i + 1:]))
print(f"{(c - b) / b * 100:+.1f} %")
PY
}

log "generating the trees"
python3 "$BENCH_DIR/gen_suite.py" "$BENCH_TMP/noop-a" --scenes "$SCENES" --kernels "$KERNELS" --sources "$SOURCES" >/dev/null
python3 "$BENCH_DIR/gen_suite.py" "$BENCH_TMP/plan-a" --scenes "$PLAN_SCENES" --kernels "$KERNELS" \
    --sources "$PLAN_SOURCES" --per-scene-flags >/dev/null
find "$BENCH_TMP/noop-a" "$BENCH_TMP/plan-a" -type f -exec touch -d '-1 hour' {} +
cp -a "$BENCH_TMP/noop-a" "$BENCH_TMP/noop-b"
cp -a "$BENCH_TMP/plan-a" "$BENCH_TMP/plan-b"
sleep 2
CACHE=$BENCH_TMP/cache
warm() { (cd "$1" && "$2" --cache-dir "$CACHE" -j 2 -q warm >/dev/null 2>&1); }
plan() { (cd "$1" && "$2" plan --format json >/dev/null 2>&1); }
log "full warm, then the first no-op warms and plans of each"
for _ in 1 2; do
    warm "$BENCH_TMP/noop-a" "$BEFORE_BIN"
    warm "$BENCH_TMP/noop-b" "$AFTER"
    plan "$BENCH_TMP/plan-a" "$BEFORE_BIN"
    plan "$BENCH_TMP/plan-b" "$AFTER"
done

nb=() na=() pb=() pa=()
for r in $(seq 1 "$RUNS"); do
    log "round $r/$RUNS"
    nb+=("$(cd "$BENCH_TMP/noop-a" && ir "$BEFORE_BIN" --cache-dir "$CACHE" -j 2 -q warm)")
    na+=("$(cd "$BENCH_TMP/noop-b" && ir "$AFTER" --cache-dir "$CACHE" -j 2 -q warm)")
    pb+=("$(cd "$BENCH_TMP/plan-a" && ir "$BEFORE_BIN" plan --format json)")
    pa+=("$(cd "$BENCH_TMP/plan-b" && ir "$AFTER" plan --format json)")
done

echo "| bench ($BEFORE → $(git -C "$ROOT" rev-parse --short HEAD)) | before | after | change |"
echo "|---|---|---|---|"
echo "| no-op warm ${SCENES}×${KERNELS} (\`warm -j 2 -q\`, all hits) | $(median "${nb[@]}") | $(median "${na[@]}") | $(change "${nb[@]}" -- "${na[@]}") |"
echo "| \`plan --format json\` ${PLAN_SCENES}×${KERNELS}, per-scene flags | $(median "${pb[@]}") | $(median "${pa[@]}") | $(change "${pb[@]}" -- "${pa[@]}") |"
