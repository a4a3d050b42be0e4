#!/usr/bin/env bash
# bench/fleet-sim.sh — speed of `scenerun fleet simulate` (release build): job events
# (arrivals, grants, releases: jobs + 2 × acquisitions, summed over the flows) per second
# of the whole process's wall time, median of RUNS runs. Target: >= 1,000,000 per second.
#
#   (a) JOBS jobs, M/M/8 at load 0.75, one acquisition each (flags)
#   (b) JOBS jobs on 64 cards, 4 cards per job, load 0.9
#   (c) (a) with --svg: the timeline kept, bucketed and drawn
#   (d) --compare on the demo's real reports (smoke scenes warmed, then run through the
#       stand-in lock tool), --old-acquisitions 8: JOBS/5 jobs per flow
#
#   bench/fleet-sim.sh          # JOBS=1000000 RUNS=5
# Prints Markdown table rows on stdout; progress on stderr.
source "$(dirname "$0")/lib.sh"

JOBS=${JOBS:-1000000}
RUNS=${RUNS:-5}
need_scenerun
make_tmp fleetsim
T=$BENCH_TMP

# ---------------------------------------------------------------- the demo's reports
log "demo: warm and device (smoke scenes) through the stand-in lock tool"
cp -r "$ROOT/fixtures/demo" "$T/demo"
cp -r "$ROOT/fixtures/bin" "$T/bin"
rm -rf "$T/demo/build"
mkdir -p "$T/pool"
(
    cd "$T/demo"
    export TASK_SUBMIT_POOL=$T/pool TASK_SUBMIT_DEVICES=0-3 CI=1
    "$SCENERUN" warm --tag smoke >"$T/warm.out" 2>&1 || { cat "$T/warm.out" >&2; exit 1; }
    "$SCENERUN" device --tag smoke >"$T/device.out" 2>&1 || { cat "$T/device.out" >&2; exit 1; }
)

table_header
python3 - "$SCENERUN" "$JOBS" "$RUNS" "$T" <<'PY'
import json, statistics, subprocess, sys, time
scenerun, jobs, runs, tmp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cases = [
    ("(a) M/M/8, load 0.75", jobs,
     ["--cards", "8", "--arrival", "poisson:3", "--hold", "exp:2"]),
    ("(b) 64 cards, 4 per job, load 0.9", jobs,
     ["--cards", "64", "--cards-per-job", "4", "--arrival", "poisson:7.2", "--hold", "exp:2"]),
    ("(c) (a) with --svg", jobs,
     ["--cards", "8", "--arrival", "poisson:3", "--hold", "exp:2", "--svg", f"{tmp}/a.svg"]),
    ("(d) demo reports, --compare, 8 old acquisitions", jobs // 5,
     ["--cards", "8", "--arrival", "poisson:0.02", "--from-reports", f"{tmp}/demo/build/scenerun",
      "--compare", "--old-acquisitions", "8"]),
]
for name, n, args in cases:
    cmd = [scenerun, "fleet", "simulate", "--jobs", str(n), "--format", "json", *args]
    times, doc = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        times.append(time.perf_counter() - t0)
        if out.returncode != 0:
            sys.exit(f"{name}: exit {out.returncode}\n{out.stderr}")
        doc = json.loads(out.stdout)
    events = sum(f["jobs"] + 2 * f["acquisitions"] for f in doc["flows"].values())
    median = statistics.median(times)
    rate = events / median
    ok = "✅" if rate >= 1e6 else "❌"
    print(f"| fleet simulate | {name}: {events:,} events, median of {runs} runs {median:.3f} s "
          f"(min {min(times):.3f}) | {rate / 1e6:.1f} M events/s | ≥ 1 M/s | {ok} |")
    print(f"[bench] {name}: {[round(t, 3) for t in times]}", file=sys.stderr)
PY
