#!/usr/bin/env bash
# bench/pytest.sh — the pytest plugin on a generated suite of CLASSES scene classes x
# CASES cases (default 100 x 3 = 300 scenes, 20 distinct kernels, 10 test modules):
#   python -m scenerun_pytest collect      (pytest collection only)  — target < 2 s
#   scenerun warm, full (collect + 20 compiles + 300 fixtures + 300 goldens) — for scale
#   scenerun warm, no-op (generator cached, every step a hit)        — target < 0.2 s
# Needs the virtualenv .ci/run creates (.ci/venv, or $SCENERUN_VENV) with the plugin.
# Env: CLASSES CASES RUNS (default 10), BENCH_KEEP=1.
source "$(dirname "$0")/lib.sh"

CLASSES=${CLASSES:-100}
CASES=${CASES:-3}
RUNS=${RUNS:-10}
VENV=${SCENERUN_VENV:-$ROOT/.ci/venv}
[ -x "$VENV/bin/python" ] || { log "no virtualenv at $VENV (see .ci/run)"; exit 1; }
export PATH="$VENV/bin:$PATH"

need_tools
need_scenerun
make_tmp pytest
SUITE=$BENCH_TMP/suite
log "generating $CLASSES classes x $CASES cases"
python3 "$BENCH_DIR/gen_pytest_suite.py" "$SUITE" --classes "$CLASSES" --cases "$CASES"
cd "$SUITE"

scenes=$(python -m scenerun_pytest collect tests/st 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["scenes"]))')
[ "$scenes" = $((CLASSES * CASES)) ] || { log "collect found $scenes scenes"; exit 1; }
log "collect: $scenes scenes"
hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$BENCH_TMP/collect.json" \
    "python -m scenerun_pytest collect tests/st" >&2
read -r c_med _ _ c_user c_sys c_min _ < <(hf_stats "$BENCH_TMP/collect.json")

log "scenerun warm, full"
full=$(wall "$BENCH_TMP/warm-full.log" "$SCENERUN" -q warm)
tail -n 1 "$BENCH_TMP/warm-full.log" >&2
grep -q ' 0 failed' "$BENCH_TMP/warm-full.log" || { cat "$BENCH_TMP/warm-full.log" >&2; exit 1; }
hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$BENCH_TMP/noop.json" \
    "$SCENERUN -q warm" >&2
read -r n_med _ _ n_user n_sys n_min _ < <(hf_stats "$BENCH_TMP/noop.json")

table_header
row "pytest collect ($CLASSES×$CASES)" "python -m scenerun_pytest collect, median of $RUNS" \
    "$c_med s (min $c_min, CPU $c_user+$c_sys s)" "< 2 s" "$(mark "$c_med" lt 2)"
row "pytest warm ($CLASSES×$CASES)" "full: collect, compiles, fixtures, goldens" "$full s" "—" ""
row "pytest warm ($CLASSES×$CASES)" "no-op (generator cached), median of $RUNS" \
    "$n_med s (min $n_min, CPU $n_user+$n_sys s)" "< 0.2 s" "$(mark "$n_med" lt 0.2)"
