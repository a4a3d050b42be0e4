#!/usr/bin/env bash
# bench/prestart.sh — lock time of a lane whose start-up costs seconds, started inside the
# lock vs started before it (`lanes.<name>.prestart`, docs/lanes.md), through the lock
# stand-in fixtures/bin/task-submit, side by side in one run.
#
# The lane `rt.sh` takes STARTUP_MS (default 3000: interpreter, imports, collection)
# before it can take ids, then INIT_MS (default 500: the device runtime's init, on its
# ids) and WORK_MS (default 50) per scene; SCENES scenes (default 16) on IDS ids
# (default 2). Another job holds the ids for QUEUE_MS (default 4000) first, as a queue
# would: a lane started before the lock does its start-up while it waits.
#   (a) prestart: false — every lane process starts inside the lock
#   (b) prestart: true  — they start before the lock call and wait for their ids
#   (c) prestart: true, the lock free at once (no queue to hide the start-up in)
# Then the same scenes over LANES lanes (default 3: LANES waves of processes on the ids):
#   (d) prestart: true — the first wave starts before the lock, the later ones inside it
#   (e) prestart: all  — every wave's processes start before the lock
# Each case RUNS times (default 3), interleaved a b c d e a b c d e ...; medians.
#
# Lock held = release.t − acquire.t of scenerun's own acquisition in $TASK_SUBMIT_LOG.
# Target for (b): ≤ 1.1 × (INIT + SCENES × WORK ÷ IDS), "runtime init + test work + 10 %";
# for (e) the same with one runtime init per wave: 1.1 × (LANES × INIT + SCENES × WORK ÷ IDS).
# Env: STARTUP_MS INIT_MS WORK_MS SCENES IDS QUEUE_MS LANES RUNS BENCH_KEEP=1.
source "$(dirname "$0")/lib.sh"

STARTUP_MS=${STARTUP_MS:-3000}
INIT_MS=${INIT_MS:-500}
WORK_MS=${WORK_MS:-50}
SCENES=${SCENES:-16}
IDS=${IDS:-2}
QUEUE_MS=${QUEUE_MS:-4000}
LANES=${LANES:-3}
RUNS=${RUNS:-3}

need_tools
need_scenerun
make_tmp prestart
export TASK_SUBMIT_DEVICES=0-$((IDS - 1))
export CI=1
secs() { python3 -c "print($1/1000)"; }

write_suite() { # dir prestart(true|false|all) [lanes]
    mkdir -p "$1"
    cat >"$1/rt.sh" <<'EOF'
#!/bin/bash
# rt.sh SCENES RESULTS: a device runtime with a slow start-up, speaking the go protocol
# of docs/lanes.md when it is started before the lock.
sleep "$STARTUP"
if [ -n "${SCENERUN_GO:-}" ]; then
    printf '{"event":"ready","unix_secs":%s}\n' "$EPOCHREALTIME" >>"$2"
    while [ ! -e "$SCENERUN_GO" ]; do sleep 0.01; done
fi
sleep "$INIT"
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
        echo "env: {STARTUP: \"$(secs "$STARTUP_MS")\", INIT: \"$(secs "$INIT_MS")\", WORK: \"$(secs "$WORK_MS")\"}"
        echo "cache: {dir: cache}"
        echo "lock:"
        echo "  submit: \"$ROOT/fixtures/bin/task-submit --timeout 600 --max-time 600 --device auto --device-num $IDS --run {run}\""
        echo "  device_count: $IDS"
        echo "lanes:"
        for l in $(seq 1 "${3:-1}"); do
            echo "  rt$l: {run: \"./rt.sh {scenes} {results}\", prestart: $2}"
        done
        echo "scenes:"
        for i in $(seq 1 "$SCENES"); do echo "  - {name: s$i, device: {lane: rt$(((i - 1) % ${3:-1} + 1))}}"; done
    } >"$1/scenes.yaml"
}

held() { # logfile → lock held seconds of scenerun's acquisition (the one that asked auto:N)
    python3 - "$1" <<'PY'
import sys
ev = {}
for line in open(sys.argv[1]):
    kind, *kv = line.split()
    f = dict(x.split("=", 1) for x in kv)
    if kind == "request" and f["want"].startswith("auto:"):
        ev["pid"] = f["pid"]
    ev.setdefault(f["pid"], {})[kind] = float(f["t"])
e = ev[ev["pid"]]
print(f'{e["release"] - e["acquire"]:.3f}')
PY
}

run_case() { # name prestart queue_ms round [lanes] → lock held
    local dir=$BENCH_TMP/$1 logf=$BENCH_TMP/$1.$4.log
    [ -d "$dir" ] || write_suite "$dir" "$2" "${5:-1}"
    export TASK_SUBMIT_POOL=$BENCH_TMP/pool-$1 TASK_SUBMIT_LOG=$logf
    mkdir -p "$TASK_SUBMIT_POOL"
    if [ "$3" -gt 0 ]; then
        "$ROOT/fixtures/bin/task-submit" --device "0-$((IDS - 1))" --run "sleep $(secs "$3")" &
        while ! grep -q '^acquire' "$logf" 2>/dev/null; do sleep 0.01; done
    fi
    (cd "$dir" && "$SCENERUN" device >"$BENCH_TMP/$1.$4.out" 2>&1) || {
        cat "$BENCH_TMP/$1.$4.out" >&2
        exit 1
    }
    wait
    held "$logf"
}

median() { python3 -c "import statistics,sys; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }

a=() b=() c=() d=() e=()
for r in $(seq 1 "$RUNS"); do
    log "round $r/$RUNS"
    a+=("$(run_case a false "$QUEUE_MS" "$r")")
    b+=("$(run_case b true "$QUEUE_MS" "$r")")
    c+=("$(run_case c true 0 "$r")")
    d+=("$(run_case d true "$QUEUE_MS" "$r" "$LANES")")
    e+=("$(run_case e all "$QUEUE_MS" "$r" "$LANES")")
done
log "lock held (a) ${a[*]}  (b) ${b[*]}  (c) ${c[*]}  (d) ${d[*]}  (e) ${e[*]}"
ma=$(median "${a[@]}") mb=$(median "${b[@]}") mc=$(median "${c[@]}")
md=$(median "${d[@]}") me=$(median "${e[@]}")
work=$(python3 -c "print(f'{$INIT_MS/1000 + $SCENES*$WORK_MS/1000/$IDS:.3f}')")
limit=$(python3 -c "print(f'{1.1*$work:.3f}')")
ratio=$(python3 -c "print(f'{$ma/$mb:.1f}')")
work_e=$(python3 -c "print(f'{$LANES*$INIT_MS/1000 + $SCENES*$WORK_MS/1000/$IDS:.3f}')")
limit_e=$(python3 -c "print(f'{1.1*$work_e:.3f}')")
split_of() { python3 - "$BENCH_TMP/$1/build/scenerun/report.json" <<'PY'
import json, sys
lanes = json.load(open(sys.argv[1]))["device"]["lanes"]
before = sum(l.get("startup_before_lock_secs") or 0 for l in lanes)
inside = sum(l.get("startup_secs") or 0 for l in lanes)
print(f"{len(lanes)} processes, start-up {before:.2f} s before the lock + {inside:.2f} s inside it")
PY
}
split=$(split_of b)

B="prestart (${STARTUP_MS} ms start-up, ${INIT_MS} ms init, $SCENES × ${WORK_MS} ms, $IDS ids, ${QUEUE_MS} ms queue; median of $RUNS)"
table_header
row "$B" "(a) lanes started inside the lock — lock held" "${ma} s" "—" ""
row "$B" "(b) lanes started before the lock — lock held ($split)" "${mb} s" "≤ 1.1 × (init + work) = ${limit} s" "$(mark "$mb" le "$limit")"
row "$B" "**lock-held ratio (a) ÷ (b)**" "${ratio}×" "—" ""
row "$B" "(c) started before the lock, no queue to wait in — lock held" "${mc} s" "—" ""
W="prestart, $LANES lanes ($LANES waves of processes; otherwise as above)"
row "$W" "(d) prestart: true, the first wave before the lock — lock held ($(split_of d))" "${md} s" "—" ""
row "$W" "(e) prestart: all, every wave before the lock — lock held ($(split_of e))" "${me} s" "≤ 1.1 × ($LANES × init + work) = ${limit_e} s" "$(mark "$me" le "$limit_e")"
row "$W" "**lock-held ratio (d) ÷ (e)**" "$(python3 -c "print(f'{$md/$me:.1f}')")×" "—" ""
log "load average at the end: $(loadavg)"
