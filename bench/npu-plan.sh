#!/usr/bin/env bash
# bench/npu-plan.sh — `scenerun plan --format json` over an NPU-sized tree, memos warm
# (the target), and with the closure memo deleted before each run (every include
# closure walked again, the stat memo still warm).
#
# Suite (generated, deterministic): SCENES × KERNELS kernel entries (default 8 × 56 = 448,
# the size of a real NPU operator suite), each its own source, over a deep vendor-like
# header tree (default 3,000 headers in 10 layers with transitive includes), plus a
# fixture and a golden per scene. Every scene adds -DSCENE_ID=<n>.
#
# Env: SCENES KERNELS HEADERS LAYERS RUNS (default 20), BENCH_KEEP=1.
source "$(dirname "$0")/lib.sh"

SCENES=${SCENES:-8}
KERNELS=${KERNELS:-56}
HEADERS=${HEADERS:-3000}
LAYERS=${LAYERS:-10}
RUNS=${RUNS:-20}

need_tools
need_scenerun
make_tmp npu
SUITE=$BENCH_TMP/suite
n=$((SCENES * KERNELS))
log "generating $SCENES x $KERNELS kernels ($HEADERS headers in $LAYERS layers) in $SUITE"
python3 "$BENCH_DIR/gen_suite.py" "$SUITE" --scenes "$SCENES" --kernels "$KERNELS" \
    --sources "$n" --headers "$HEADERS" --layers "$LAYERS" --per-scene-flags >/dev/null
find "$SUITE" -type f -exec touch -d '-1 hour' {} +
sleep 2
cd "$SUITE"
"$SCENERUN" plan --format json >/dev/null   # fills the stat and closure memos
hyperfine -N --style none --runs "$RUNS" --warmup 2 \
    --export-json "$BENCH_TMP/npu.json" "$SCENERUN plan --format json" >&2
read -r med mean sd user sys min max < <(hf_stats "$BENCH_TMP/npu.json")
hyperfine -N --style none --runs "$RUNS" --warmup 2 \
    --prepare "rm -f $SUITE/build/scenerun/closurememo.json" \
    --export-json "$BENCH_TMP/npu-walk.json" "$SCENERUN plan --format json" >&2
read -r wmed _ _ wuser wsys wmin _ < <(hf_stats "$BENCH_TMP/npu-walk.json")
ms() { python3 -c "print(f'{$1*1000:.1f}')"; }
table_header
row "plan --format json ($n kernels, $HEADERS headers / $LAYERS layers)" \
    "memos warm, median of $RUNS" \
    "$(ms "$med") ms (min $(ms "$min"), CPU $(ms "$user")+$(ms "$sys") ms)" "< 60 ms" \
    "$(mark "$med" lt 0.060)"
row "plan --format json ($n kernels, $HEADERS headers / $LAYERS layers)" \
    "closure memo deleted before each run, median of $RUNS" \
    "$(ms "$wmed") ms (min $(ms "$wmin"), CPU $(ms "$wuser")+$(ms "$wsys") ms)" "—" ""
log "load average: $(loadavg)"
