#!/usr/bin/env bash
# bench/noop-warm.sh — a `scenerun warm` with nothing to do, against make and ccache.
#
# Suite (generated, deterministic): SCENES scenes × KERNELS kernels (default 200 × 40 =
# 8,000 kernel entries) over SOURCES distinct, compilable .c files (default 2,000: kernel j
# of scene s uses source (40s+j) mod 2000, with the same flags, so scenes share cache
# entries and a full warm compiles each source once: 2,000 compiles, like the Makefile),
# 300 headers with transitive includes, a fixture and a golden per scene (400 steps).
# The same sources also get a generated Makefile (one object per source, -MD depfiles,
# `-include`d) as the baseline.
#
# Measured:
#   scenerun warm -j2, full (cold cache)             — for scale
#   scenerun warm -j2, no-op (all hits, memo warm)   — the target
#   scenerun warm -j2, no-op in a fresh copy of the tree (stat memo cold, same
#     --cache-dir): what a CI job sees after checkout + cache restore
#   make -j2 full build (plain cc)
#   make -j2 CC="ccache cc" after `make clean`, ccache warm (all hits)
#   make -q, and make -j2 with nothing to do (GNU make's no-op over the same objects)
#
# Env: SCENES KERNELS SOURCES RUNS (default 10), CCACHE_RUNS (default 2), BENCH_KEEP=1.
source "$(dirname "$0")/lib.sh"

SCENES=${SCENES:-200}
KERNELS=${KERNELS:-40}
SOURCES=${SOURCES:-2000}
RUNS=${RUNS:-10}
CCACHE_RUNS=${CCACHE_RUNS:-2}
J=2

need_tools
need_scenerun
make_tmp noop
PRISTINE=$BENCH_TMP/pristine   # the generated tree, never built in (copied for clones)
SUITE=$BENCH_TMP/suite
CLONE=$BENCH_TMP/clone
CACHE=$BENCH_TMP/cache
export CCACHE_DIR=$BENCH_TMP/ccache
export CCACHE_MAXSIZE=5G
unset CCACHE_DISABLE CCACHE_RECACHE CCACHE_PREFIX 2>/dev/null || true

log "generating $SCENES scenes x $KERNELS kernels ($SOURCES distinct sources, 300 headers)"
python3 "$BENCH_DIR/gen_suite.py" "$PRISTINE" --scenes "$SCENES" --kernels "$KERNELS" --sources "$SOURCES"
find "$PRISTINE" -type f -exec touch -d '-1 hour' {} +
cp -a "$PRISTINE" "$SUITE"
sleep 2
SR=("$SCENERUN" --cache-dir "$CACHE" -j "$J" -q)

# ---------------------------------------------------------------- scenerun
cd "$SUITE"
log "scenerun warm -j$J, full build"
sr_full=$(wall "$BENCH_TMP/warm-full.log" "${SR[@]}" warm)
tail -n 1 "$BENCH_TMP/warm-full.log" >&2
grep -q ' 0 failed' "$BENCH_TMP/warm-full.log" || { log "full warm had failures"; cat "$BENCH_TMP/warm-full.log" >&2; exit 1; }
compiles=$(python3 - "$CACHE" <<'PY'
import os, sys
print(sum(len(os.listdir(os.path.join(r))) for r in [os.path.join(sys.argv[1], "entries", "kernel", d) for d in os.listdir(os.path.join(sys.argv[1], "entries", "kernel"))]))
PY
)
log "cache has $compiles kernel entries"

log "scenerun warm no-op ($RUNS runs)"
"${SR[@]}" warm >/dev/null 2>&1   # memo settles
"${SR[@]}" warm 2>&1 | tail -n 1 >&2
hyperfine -N --style none --runs "$RUNS" --warmup 1 --export-json "$BENCH_TMP/noop.json" \
    "${SR[*]} warm" >&2
read -r n_med n_mean n_sd n_user n_sys n_min n_max < <(hf_stats "$BENCH_TMP/noop.json")

log "scenerun warm no-op in a fresh copy ($RUNS runs, stat memo cold)"
hyperfine -N --style none --runs "$RUNS" --export-json "$BENCH_TMP/clone.json" \
    --prepare "sh -c 'rm -rf $CLONE && cp -r $PRISTINE $CLONE'" \
    "$SCENERUN --manifest $CLONE/scenes.yaml --cache-dir $CACHE -j $J -q warm" >&2
read -r f_med f_mean f_sd f_user f_sys f_min f_max < <(hf_stats "$BENCH_TMP/clone.json")
"$SCENERUN" --manifest "$CLONE/scenes.yaml" --cache-dir "$CACHE" -j "$J" -q warm 2>&1 | tail -n 1 >&2

# ---------------------------------------------------------------- make / ccache
log "make -j$J full build (plain cc, $SOURCES objects)"
make -s clean >/dev/null
mk_full=$(wall "$BENCH_TMP/make-full.log" make -j"$J")

log "make -q / make no-op ($RUNS runs)"
hyperfine -N --style none --runs "$RUNS" --warmup 1 --export-json "$BENCH_TMP/makeq.json" "make -q" >&2
read -r q_med q_mean q_sd q_user q_sys q_min q_max < <(hf_stats "$BENCH_TMP/makeq.json")
hyperfine -N --style none --runs "$RUNS" --warmup 1 --export-json "$BENCH_TMP/makenoop.json" "make -j$J" >&2
read -r m_med m_mean m_sd m_user m_sys m_min m_max < <(hf_stats "$BENCH_TMP/makenoop.json")

log "ccache: fill (make clean; make -j$J CC='ccache cc')"
ccache -C >/dev/null 2>&1 || true
ccache -z >/dev/null
make -s clean >/dev/null
cc_fill=$(wall "$BENCH_TMP/ccache-fill.log" make -j"$J" CC="ccache cc")
log "ccache: warm hits ($CCACHE_RUNS runs, make clean before each)"
ccache -z >/dev/null
hyperfine -N --style none --runs "$CCACHE_RUNS" --export-json "$BENCH_TMP/ccache.json" \
    --prepare "make -s clean" "make -j$J CC='ccache cc'" >&2
read -r h_med h_mean h_sd h_user h_sys h_min h_max < <(hf_stats "$BENCH_TMP/ccache.json")
ccache_stats=$(ccache --print-stats 2>/dev/null | awk -F'\t' '$1=="direct_cache_hit"{d=$2} $1=="preprocessed_cache_hit"{p=$2} $1=="cache_miss"{m=$2} END{printf "%d direct + %d preprocessed hits, %d misses", d, p, m}')
log "ccache: $ccache_stats"

load=$(loadavg)
ratio_cc=$(python3 -c "print(f'{$h_med/$n_med:.0f}')")
ratio_mk=$(python3 -c "print(f'{$q_med/$n_med:.2f}')")
ratio_mk2=$(python3 -c "print(f'{$m_med/$n_med:.2f}')")
B="no-op warm ($SCENES×$KERNELS, $SOURCES sources)"
table_header
row "$B" "scenerun warm -j$J full build ($compiles compiles, cold cache)" "${sr_full} s" "—" ""
row "$B" "make -j$J full build (plain cc)" "${mk_full} s" "—" ""
row "$B" "make -j$J CC='ccache cc', cold ccache (fill)" "${cc_fill} s" "—" ""
row "$B" "make -j$J CC='ccache cc' after make clean, warm ccache, median of $CCACHE_RUNS" "${h_med} s ($ccache_stats)" "—" ""
row "$B" "make -q (nothing to do), median of $RUNS" "${q_med} s (CPU ${q_user}+${q_sys})" "—" ""
row "$B" "make -j$J (nothing to do), median of $RUNS" "${m_med} s (CPU ${m_user}+${m_sys})" "—" ""
row "$B" "**scenerun warm no-op**, median of $RUNS" "${n_med} s (min ${n_min}, CPU ${n_user}+${n_sys} s)" "—" ""
row "$B" "scenerun no-op in a fresh copy (stat memo cold), median of $RUNS" "${f_med} s (min ${f_min}, CPU ${f_user}+${f_sys} s)" "—" ""
row "$B" "ccache warm hits ÷ scenerun no-op" "${ratio_cc}×" "≥ 50×" "$(mark "$ratio_cc" ge 50)"
row "$B" "make -q ÷ scenerun no-op (make -j$J no-op ÷ scenerun: ${ratio_mk2}×)" "${ratio_mk}×" "> 1× (faster than make)" "$(mark "$ratio_mk" ge 1.0001)"
log "load average at the end: $load"
