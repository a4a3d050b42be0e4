#!/usr/bin/env bash
# bench/lock-savings.sh — device-lock time of the old way against `warm && device`, on
# fixtures/demo with the lock stand-in fixtures/bin/task-submit (private pool, 2 ids).
#
#   (a) old way, cold cache: the whole suite inside one lock
#       task-submit --device auto --device-num 2 --run "scenerun run --no-lock --devices $TASK_DEVICE"
#   (b) new way, cold cache: scenerun warm && scenerun device   (lock.submit of the demo)
#
# Lock held = release.t − acquire.t from $TASK_SUBMIT_LOG. Each case runs in its own copy
# of fixtures/demo (+ fixtures/bin beside it, so ../bin/task-submit resolves) with no
# build/ dir, i.e. an empty cache. Env: BENCH_KEEP=1.
source "$(dirname "$0")/lib.sh"

need_tools
need_scenerun
make_tmp lock
export TASK_SUBMIT_POOL=$BENCH_TMP/pool
export TASK_SUBMIT_DEVICES=0-1
export CI=1   # plain progress lines

copy_demo() { # dest
    mkdir -p "$1"
    cp -r "$ROOT/fixtures/bin" "$1/bin"
    cp -r "$ROOT/fixtures/demo" "$1/demo"
    rm -rf "$1/demo/build"
}

held() { # logfile → "held queue" in seconds (single acquisition expected)
    python3 - "$1" <<'PY'
import re, sys
ev = {}
acq = []
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    kind = line.split()[0]
    ev.setdefault(f["pid"], {})[kind] = float(f["t"])
    if kind == "acquire":
        acq.append(f["pid"])
if len(acq) != 1:
    sys.exit(f"expected exactly one lock acquisition, got {len(acq)}")
e = ev[acq[0]]
print(f'{e["release"] - e["acquire"]:.3f} {e["acquire"] - e["request"]:.3f}')
PY
}

# ---------------------------------------------------------------- (a) old way
copy_demo "$BENCH_TMP/a"
cd "$BENCH_TMP/a/demo"
export TASK_SUBMIT_LOG=$BENCH_TMP/a.log
log "(a) whole suite inside one lock, cold cache"
a_wall=$(wall "$BENCH_TMP/a.out" ../bin/task-submit --device auto --device-num 2 \
    --run "$SCENERUN run --no-lock --devices \$TASK_DEVICE") || { cat "$BENCH_TMP/a.out" >&2; exit 1; }
tail -n 3 "$BENCH_TMP/a.out" >&2
read -r a_held a_queue < <(held "$TASK_SUBMIT_LOG")

# ---------------------------------------------------------------- (b) warm && device
copy_demo "$BENCH_TMP/b"
cd "$BENCH_TMP/b/demo"
export TASK_SUBMIT_LOG=$BENCH_TMP/b.log
log "(b) scenerun warm && scenerun device, cold cache"
t0=$(date +%s.%N)
"$SCENERUN" warm >"$BENCH_TMP/b-warm.out" 2>&1 || { cat "$BENCH_TMP/b-warm.out" >&2; exit 1; }
t1=$(date +%s.%N)
"$SCENERUN" device >"$BENCH_TMP/b-device.out" 2>&1 || { cat "$BENCH_TMP/b-device.out" >&2; exit 1; }
t2=$(date +%s.%N)
tail -n 1 "$BENCH_TMP/b-warm.out" >&2
tail -n 2 "$BENCH_TMP/b-device.out" >&2
read -r b_held b_queue < <(held "$TASK_SUBMIT_LOG")
read -r r_held r_queue r_busy r_eff r_occ r_scenes < <(python3 - build/scenerun/report.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
d = r["device"]
# Lane start-up is not scene time (device.efficiency leaves it out), but the ids are
# occupied by it as a plain step's own start-up would occupy them.
startup = sum(l["startup_secs"] * len(l["devices"]) for l in d.get("lanes", []))
occupied = (d["device_secs_used"] + startup) / d["device_secs_held"]
print(f'{r["lock"]["held_secs"]:.3f} {r["lock"]["queue_wait_secs"]:.3f} {d["busy_secs"]:.3f} {d["efficiency"]:.3f} {occupied:.3f} {len(r["scenes"])}')
PY
)
read -r b_warm b_dev < <(python3 -c "print(f'{$t1-$t0:.3f} {$t2-$t1:.3f}')")
ratio=$(python3 -c "print(f'{$a_held/$b_held:.1f}')")

B="lock savings (fixtures/demo, ${r_scenes} scenes, 2 ids)"
table_header
row "$B" "(a) old way: whole suite in one lock, cold cache — lock held" "${a_held} s (wall ${a_wall} s)" "—" ""
row "$B" "(b) warm && device, cold cache — lock held" "${b_held} s (warm ${b_warm} s unlocked, device ${b_dev} s)" "—" ""
row "$B" "(b) report.json: lock.held_secs / queue_wait_secs / device.busy_secs" "${r_held} / ${r_queue} / ${r_busy} s" "—" ""
row "$B" "**lock-held ratio (a) ÷ (b)**" "${ratio}×" "≥ 5×" "$(mark "$ratio" ge 5)"
row "$B" "(b) device efficiency, scene time only (report.json device.efficiency)" "${r_eff}" "—" ""
row "$B" "**(b) device occupancy**: scene time + lane start-ups ÷ device-seconds held" "${r_occ}" "≥ 0.8" "$(mark "$r_occ" ge 0.8)"
log "load average at the end: $(loadavg)"
