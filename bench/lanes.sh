#!/usr/bin/env bash
# bench/lanes.sh — lock time with a slow-starting device runtime: one process per scene
# against one lane (docs/lanes.md), through the lock stand-in fixtures/bin/task-submit.
#
# SCENES scenes (default 40); the runtime takes STARTUP_MS (default 1000) to start and
# WORK_MS (default 50) per scene; IDS ids granted (default 2).
#   (a) per-scene processes: device.run = "rt.sh one"   (start-up + work, every scene)
#   (b) one lane:            lanes.rt.run = "rt.sh {scenes} {results}" (start-up once per
#       process, then every scene of its batch)
#
# Lock held = release.t − acquire.t from $TASK_SUBMIT_LOG.
# Ideal for (b) = one start-up per process + work ÷ ids.
# scenerun overhead per scene in a lane = (inner run wall − longest lane process wall)
# ÷ scenes per process: what scenerun adds around the processes that do the work (packing,
# starting, reading results, reports). Env: SCENES STARTUP_MS WORK_MS IDS BENCH_KEEP=1.
source "$(dirname "$0")/lib.sh"

SCENES=${SCENES:-40}
STARTUP_MS=${STARTUP_MS:-1000}
WORK_MS=${WORK_MS:-50}
IDS=${IDS:-2}

need_tools
need_scenerun
make_tmp lanes
export TASK_SUBMIT_POOL=$BENCH_TMP/pool
export TASK_SUBMIT_DEVICES=0-$((IDS - 1))
export CI=1

write_suite() { # dir mode(plain|lane)
    mkdir -p "$1"
    cat >"$1/rt.sh" <<'EOF'
#!/bin/bash
# rt.sh one | rt.sh SCENES RESULTS — a runtime with a slow start.
sleep "$STARTUP"
if [ "$1" = one ]; then sleep "$WORK"; exit 0; fi
while IFS= read -r line; do
    s=${line#*\"scene\":\"}; s=${s%%\"*}
    printf '{"scene":"%s","event":"start"}\n' "$s" >>"$2"
    sleep "$WORK"
    printf '{"scene":"%s","event":"end","outcome":"passed"}\n' "$s" >>"$2"
done <"$1"
EOF
    chmod +x "$1/rt.sh"
    {
        echo "version: 1"
        echo "env: {STARTUP: \"$(python3 -c "print($STARTUP_MS/1000)")\", WORK: \"$(python3 -c "print($WORK_MS/1000)")\"}"
        echo "cache: {dir: cache}"
        echo "lock:"
        echo "  submit: \"$ROOT/fixtures/bin/task-submit --timeout 600 --max-time 600 --device auto --device-num $IDS --run {run}\""
        echo "  device_count: $IDS"
        echo "lanes:"
        echo "  rt: {run: \"./rt.sh {scenes} {results}\"}"
        echo "scenes:"
        for i in $(seq 1 "$SCENES"); do
            if [ "$2" = plain ]; then
                echo "  - {name: s$i, device: {run: \"./rt.sh one\"}}"
            else
                echo "  - {name: s$i, device: {lane: rt}}"
            fi
        done
    } >"$1/scenes.yaml"
}

held() { # logfile → lock held seconds (single acquisition expected)
    python3 - "$1" <<'PY'
import sys
ev, acq = {}, []
for line in open(sys.argv[1]):
    kind = line.split()[0]
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    ev.setdefault(f["pid"], {})[kind] = float(f["t"])
    if kind == "acquire":
        acq.append(f["pid"])
if len(acq) != 1:
    sys.exit(f"expected exactly one lock acquisition, got {len(acq)}")
e = ev[acq[0]]
print(f'{e["release"] - e["acquire"]:.3f}')
PY
}

run_case() { # name mode
    write_suite "$BENCH_TMP/$1" "$2"
    cd "$BENCH_TMP/$1"
    export TASK_SUBMIT_LOG=$BENCH_TMP/$1.log
    "$SCENERUN" warm >"$BENCH_TMP/$1-warm.out" 2>&1 || { cat "$BENCH_TMP/$1-warm.out" >&2; exit 1; }
    "$SCENERUN" device >"$BENCH_TMP/$1.out" 2>&1 || { cat "$BENCH_TMP/$1.out" >&2; exit 1; }
    tail -n 2 "$BENCH_TMP/$1.out" >&2
}

log "(a) $SCENES scenes, one process each (start-up ${STARTUP_MS} ms + ${WORK_MS} ms), $IDS ids"
run_case a plain
a_held=$(held "$BENCH_TMP/a.log")
log "(b) the same scenes in one lane"
run_case b lane
b_held=$(held "$BENCH_TMP/b.log")
read -r procs startup busy eff inner longest per_proc < <(python3 - "$BENCH_TMP/b/build/scenerun/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
d = r["device"]
lanes = d["lanes"]
longest = max(l["duration_secs"] for l in lanes)
per = max(len(l["scenes"]) for l in lanes)
print(len(lanes), f'{d["startup_secs"]:.3f}', f'{d["busy_secs"]:.3f}', f'{d["efficiency"]:.3f}',
      f'{d["inner_secs"]:.3f}', f'{longest:.3f}', per)
PY
)
ideal=$(python3 -c "print(f'{$STARTUP_MS/1000 + $SCENES*$WORK_MS/1000/$IDS:.3f}')")
limit=$(python3 -c "print(f'{1.2*$ideal:.3f}')")
ratio=$(python3 -c "print(f'{$a_held/$b_held:.1f}')")
over=$(python3 -c "print(f'{max(0.0, $inner-$longest)/$per_proc*1000:.2f}')")
upper=$(python3 -c "print(f'{max(0.0, $b_held-$ideal)/($SCENES/$IDS)*1000:.1f}')")

B="lanes ($SCENES scenes, ${STARTUP_MS} ms start-up, ${WORK_MS} ms work, $IDS ids)"
table_header
row "$B" "(a) one process per scene — lock held" "${a_held} s" "—" ""
row "$B" "(b) one lane — lock held ($procs processes, start-up ${startup} s in all)" "${b_held} s" "≤ 1.2 × ideal ${ideal} s = ${limit} s" "$(mark "$b_held" le "$limit")"
row "$B" "**lock-held ratio (a) ÷ (b)**" "${ratio}×" "≥ 5×" "$(mark "$ratio" ge 5)"
row "$B" "**scenerun overhead per scene in a lane** (inner wall − longest lane process) ÷ scenes per process" "${over} ms (all of (b) above ideal, lock tool included: ${upper} ms)" "< 5 ms" "$(mark "$over" lt 5)"
row "$B" "(b) report.json device.busy_secs / efficiency (scene time only)" "${busy} s / ${eff}" "—" ""
log "load average at the end: $(loadavg)"
