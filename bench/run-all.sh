#!/usr/bin/env bash
# bench/run-all.sh — run every benchmark and print one Markdown table (stdout).
# Progress goes to stderr. Each script takes its own env (see its header); here only
# PLAN_RUNS (default 5) and NOOP_RUNS (default 10) are passed on, as RUNS, to plan.sh and
# noop-warm.sh. Takes ~10 min on an idle 2-core machine (noop-warm.sh is ~5 of them).
source "$(dirname "$0")/lib.sh"
need_tools
need_scenerun
echo "scenerun $("$SCENERUN" --version 2>/dev/null | awk '{print $2}') ($(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && git diff --quiet -- src 2>/dev/null || echo ', src modified')), $(nproc) cores, $(uname -sr), load $(loadavg) at start, $(date -u +%FT%TZ)"
echo
BENCH_NO_HEADER=0 table_header
export BENCH_NO_HEADER=1
status=0
RUNS=${PLAN_RUNS:-5} "$BENCH_DIR/plan.sh" || status=1
RUNS=${NOOP_RUNS:-10} "$BENCH_DIR/noop-warm.sh" || status=1
"$BENCH_DIR/sched.sh" || status=1
"$BENCH_DIR/lock-savings.sh" || status=1
"$BENCH_DIR/lanes.sh" || status=1
echo
echo "load average at the end: $(loadavg)"
exit $status
