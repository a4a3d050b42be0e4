#!/usr/bin/env bash
# bench/plan.sh — how long `scenerun plan` takes on a big suite, cold and with the stat
# memo warm, and its peak RSS.
#
# Suite (generated, deterministic): SCENES scenes × KERNELS kernels (default 500 × 40 =
# 20,000 kernel entries) over SOURCES distinct .c files (default 5,000), sharing 300
# headers in 5 layers with transitive includes, plus a fixture and a golden per scene.
# Every scene adds -DSCENE_ID=<n>, so every kernel entry has its own key (21,000 keys).
# The cache is empty: this measures key computation + lookup, not hits.
#
#   cold: build/scenerun/statmemo.json, closurememo.json and manifest.json deleted before
#         each run (every file re-hashed, every include closure walked, the manifest
#         parsed, the three memos written): a first run
#   warm: the memos filled by a previous run, files older than the 1 s racy window
#
# Env: SCENES KERNELS SOURCES RUNS (hyperfine runs per case, default 10), BENCH_KEEP=1.
source "$(dirname "$0")/lib.sh"

SCENES=${SCENES:-500}
KERNELS=${KERNELS:-40}
SOURCES=${SOURCES:-5000}
RUNS=${RUNS:-5}

need_tools
need_scenerun
make_tmp plan
SUITE=$BENCH_TMP/suite

log "generating $SCENES scenes x $KERNELS kernels ($SOURCES sources, 300 headers) in $SUITE"
python3 "$BENCH_DIR/gen_suite.py" "$SUITE" --scenes "$SCENES" --kernels "$KERNELS" \
    --sources "$SOURCES" --per-scene-flags
# Older than the memo's racy-clean window (mtime; ctime becomes "now" with touch, hence the sleep).
find "$SUITE" -type f -exec touch -d '-1 hour' {} +
sleep 2
cd "$SUITE"

# Sanity: the plan sees every step.
"$SCENERUN" plan --format json >"$BENCH_TMP/plan.json"
read -r steps kernels < <(python3 - "$BENCH_TMP/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
steps = p.get("warm", {}).get("steps", p.get("steps", []))
print(len(steps), sum(1 for s in steps if s.get("kind") == "kernel"))
PY
)
log "plan: $steps warm steps ($kernels kernels)"

log "timing cold plan ($RUNS runs)"
hyperfine -N --style none --runs "$RUNS" --warmup 1 \
    --prepare "rm -f $SUITE/build/scenerun/statmemo.json $SUITE/build/scenerun/closurememo.json $SUITE/build/scenerun/manifest.json" \
    --export-json "$BENCH_TMP/cold.json" "$SCENERUN plan" >&2
read -r c_med c_mean c_sd c_user c_sys c_min c_max < <(hf_stats "$BENCH_TMP/cold.json")

log "timing warm plan ($RUNS runs)"
"$SCENERUN" plan >/dev/null
hyperfine -N --style none --runs "$RUNS" --warmup 1 \
    --export-json "$BENCH_TMP/warm.json" "$SCENERUN plan" >&2
read -r w_med w_mean w_sd w_user w_sys w_min w_max < <(hf_stats "$BENCH_TMP/warm.json")

rss_kb() {
    /usr/bin/time -f '%M' -o "$BENCH_TMP/rss" "$SCENERUN" plan >/dev/null 2>&1
    cat "$BENCH_TMP/rss"
}
rm -f build/scenerun/statmemo.json build/scenerun/closurememo.json build/scenerun/manifest.json
cold_rss=$(rss_kb)
warm_rss=$(rss_kb)
peak_mib=$(python3 -c "print(f'{max($cold_rss,$warm_rss)/1024:.1f}')")

load=$(loadavg)
table_header
row "plan ($SCENES×$KERNELS, $steps steps)" "cold (no stat, closure or manifest memo), median of $RUNS" \
    "${c_med} s (min ${c_min}, CPU ${c_user}+${c_sys} s)" "< 0.6 s" "$(mark "$c_med" lt 0.6)"
row "plan ($SCENES×$KERNELS, $steps steps)" "memos warm, median of $RUNS" \
    "${w_med} s (min ${w_min}, CPU ${w_user}+${w_sys} s)" "< 0.3 s" "$(mark "$w_med" lt 0.3)"
row "plan ($SCENES×$KERNELS, $steps steps)" "peak RSS (cold / warm)" \
    "$(python3 -c "print(f'{$cold_rss/1024:.1f} / {$warm_rss/1024:.1f} MiB')")" "< 60 MiB" "$(mark "$peak_mib" lt 60)"
log "load average during the run: $load"
