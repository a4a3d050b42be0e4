#!/usr/bin/env bash
# bench/simpler-sim.sh — hw-native-sys/simpler's real suite on its CPU simulator, the same
# selection both ways, side by side in one run:
#   upstream: task-submit --device-num N --run "python -m pytest SEL --platform a2a3sim
#             --device $TASK_DEVICE --manual exclude"   (the stand-in lock, fixtures/bin)
#   scenerun: scenerun warm && scenerun device           (examples/simpler's files)
# Scenarios: kernel cache warm + scene cache cold (what CI sees on a new commit), nothing
# changed (both caches warm), kernel cache cold, and queued: nothing changed, but another
# job holds every id for QUEUE_S seconds (default 30) before each command asks, as a
# fleet's queue would (job wall then includes that wait, the same for both). Per run: job wall, lock held, CPU seconds
# (user + system of everything the job started), compiles inside and outside the lock
# (every g++-15/gcc-15 start that compiles or links, counted by a shim first on PATH,
# placed by its time against the lock's acquire/release in the stand-in's log; toolchain
# probes such as `g++-15 --version` are not compiles), and verdict differences per pytest node
# against upstream's run of the same scenario (must be 0).
#
# Env: SCENERUN_SIMPLER_TREE (required: a tree built by the realsuite setup script, its
# env.sh beside it), SEL (default "examples tests/st"), DEVICES (default 0-1),
# SCENARIOS (default "warm-kernels unchanged cold-kernels"; "queued" on request), QUEUE_S,
# PRESTART (true or all: every lane's `prestart` in the copied scenes.yaml; default as
# examples/simpler has it), WARM_ARGS (words after
# `scenerun warm`, e.g. --no-workers to time one process per step).
source "$(dirname "$0")/lib.sh"
TREE=${SCENERUN_SIMPLER_TREE:?set SCENERUN_SIMPLER_TREE to a simpler tree built by the realsuite setup script}
ENV_SH=$(dirname "$TREE")/env.sh
[ -f "$ENV_SH" ] || { log "no env.sh beside $TREE: build it with the realsuite setup script"; exit 1; }
SEL=${SEL:-examples tests/st}
DEVICES=${DEVICES:-0-1}
SCENARIOS=${SCENARIOS:-warm-kernels unchanged cold-kernels}
QUEUE_S=${QUEUE_S:-30}
need_tools
need_scenerun
make_tmp simpler-sim
# shellcheck disable=SC1090
source "$ENV_SH"
NDEV=$(python3 -c "import sys; a,_,b=sys.argv[1].partition('-'); print(int(b or a)-int(a)+1)" "$DEVICES")

log "copying $TREE"
cp -a "$TREE" "$BENCH_TMP/simpler"
W=$BENCH_TMP/simpler
cp "$ROOT/examples/simpler/scenes.yaml" "$ROOT/examples/simpler/scenerun_simpler.py" "$W/"
sed -i "s|examples tests/st|$SEL|g" "$W/scenes.yaml"
[ -n "${PRESTART:-}" ] && sed -i -E "s/prestart: (true|all)/prestart: $PRESTART/" "$W/scenes.yaml"
python -m pip install -q --disable-pip-version-check "$ROOT/python/scenerun-pytest" >&2

# Compiler starts, with their time: a shim per compiler name first on PATH.
SHIMS=$BENCH_TMP/shims
mkdir -p "$SHIMS"
export COMPILE_LOG=$BENCH_TMP/compiles.log
for cc in g++-15 gcc-15; do
    real=$(command -v "$cc")
    # A start that compiles or links (has -c or -o) counts; a toolchain probe
    # (`g++-15 --version`, `-print-file-name=...`) is logged as a probe and does not.
    # The output path is logged too (where a compile writes tells whose it is).
    printf '#!/bin/sh\nkind=probe; out=-; next=\nfor a in "$@"; do [ -n "$next" ] && out=$a && next=; case "$a" in -c) kind=compile ;; -o) kind=compile; next=1 ;; esac; done\necho "$(date +%%s.%%N) %s $kind $out" >> "$COMPILE_LOG"\nexec %s "$@"\n' "$cc" "$real" > "$SHIMS/$cc"
    chmod +x "$SHIMS/$cc"
done
export PATH=$SHIMS:$(dirname "$SCENERUN"):$ROOT/fixtures/bin:$PATH

export TASK_SUBMIT_DEVICES=$DEVICES
export TASK_SUBMIT_POOL=$BENCH_TMP/pool
mkdir -p "$TASK_SUBMIT_POOL"

# Run "$@" as one job: wall and CPU of it and its children, the lock events it made, the
# compiles it started. Prints "wall cpu held compiles_in compiles_out acquisitions".
job() {
    local name=$1; shift
    export TASK_SUBMIT_LOG=$BENCH_TMP/$name.events
    : > "$TASK_SUBMIT_LOG"
    : > "$COMPILE_LOG"
    /usr/bin/time -f "%e %U %S" -o "$BENCH_TMP/$name.time" bash -c "$*" > "$BENCH_TMP/$name.log" 2>&1 || true
    python3 - "$BENCH_TMP/$name.time" "$TASK_SUBMIT_LOG" "$COMPILE_LOG" <<'PY'
import sys
wall, user, system = open(sys.argv[1]).read().split()[-3:]
spans, open_ = [], {}
for line in open(sys.argv[2]):
    w = line.split()
    f = dict(x.split("=", 1) for x in w[1:] if "=" in x)
    if w[0] == "acquire":
        open_[f["pid"]] = float(f["t"])
    elif w[0] == "release" and f["pid"] in open_:
        spans.append((open_.pop(f["pid"]), float(f["t"])))
held = sum(b - a for a, b in spans)
inside = outside = 0
for line in open(sys.argv[3]):
    w = line.split()
    if w[2] == "probe":
        continue
    t = float(w[0])
    if any(a <= t <= b for a, b in spans):
        inside += 1
    else:
        outside += 1
print(f"{float(wall):.1f} {float(user) + float(system):.1f} {held:.1f} {inside} {outside} {len(spans)}")
PY
}

upstream() {
    job "$1" "cd '$W' && SCENERUN_VERDICTS='$BENCH_TMP/$1.verdicts' PYTEST_ADDOPTS='-p scenerun_pytest.verdicts' \
        task-submit --timeout 3600 --max-time 3600 --device auto --device-num $NDEV \
        --run \"python -m pytest $SEL --platform a2a3sim --device \\\$TASK_DEVICE --manual exclude\""
}

# Another job holds every id for $1 seconds; returns once it has them (its lock events go
# to a log of its own, so they count in no job's figures).
hold() {
    local events=$BENCH_TMP/holder.events
    : > "$events"
    TASK_SUBMIT_LOG=$events task-submit --device "$DEVICES" --run "sleep $1" > /dev/null 2>&1 &
    while ! grep -q '^acquire' "$events"; do sleep 0.05; done
}

flow() {
    # Meanwhile, the memory of the lane processes waiting for their ids (their arguments
    # hold the sentinel until the ids come), with the fork server and what it forked
    # (their arguments are the server's), the most seen at once: resident (RSS, shared
    # pages counted in every process) and proportional (PSS, shared pages split).
    (
        most=0 n=0 pss=0
        while [ ! -e "$BENCH_TMP/$1.done" ]; do
            read -r c kib pids < <(ps -eo pid=,rss=,args= | awk '/__scenerun_devices__|scenerun_pytest zygote/ && $3 ~ /python/ {n++; s+=$2; p=p" "$1} END {print n+0, s+0, p}')
            if [ "$kib" -gt "$most" ]; then
                most=$kib n=$c
                # shellcheck disable=SC2086
                pss=$(cd /proc && awk '/^Pss:/ {s+=$2} END {print s+0}' $(printf '%s/smaps_rollup ' $pids) 2>/dev/null || echo 0)
            fi
            sleep 0.5
        done
        log "$1: at most $n lane processes (and fork server) waited for their ids at once: $((most / 1024)) MiB resident (RSS), $((pss / 1024)) MiB proportional (PSS) in all"
    ) &
    job "$1" "cd '$W' && scenerun warm ${WARM_ARGS:-} && scenerun device"
    touch "$BENCH_TMP/$1.done"
    wait $!
    cp "$W/build/scenerun/report.json" "$BENCH_TMP/$1.report.json" 2>/dev/null || true
    # From its report: the lane processes' start-up inside the lock, when the first test
    # began, and the compiles the tests started (compile_cache:).
    python3 - "$BENCH_TMP/$1.report.json" "$1" <<'PY' >&2 || true
import json, sys
d = json.load(open(sys.argv[1]))["device"]
lanes = d.get("lanes") or []
first = min((l["start_secs"] + l["startup_secs"] for l in lanes), default=0.0)
c = d.get("compiles") or {}
print(f"[bench] {sys.argv[2]}: {len(lanes)} lane processes, start-up {d['startup_secs']:.1f}s in all inside the lock; "
      f"first test {first:.2f}s into it; compiles {c.get('hit', 0)} from the cache, {c.get('built', 0)} kept, {c.get('ran', 0)} without the cache")
PY
}

diffs() { # upstream-name scenerun-name
    python -m scenerun_pytest.verdicts "$BENCH_TMP/$1.verdicts" "$BENCH_TMP/$2.report.json" > "$BENCH_TMP/$2.diff" || true
    tail -n 1 "$BENCH_TMP/$2.diff" | sed -n 's/.*; \([0-9]*\) differences/\1/p'
}

row() { # scenario, upstream stats, scenerun stats, differences
    read -r uw uc uh ui uo ua <<< "$2"
    read -r sw sc sh si so sa <<< "$3"
    python3 - "$1" "$uw" "$sw" "$uh" "$sh" "$uc" "$sc" "$ui" "$si" "$uo" "$so" "$ua" "$sa" "$4" <<'PY'
import sys
n, uw, sw, uh, sh, uc, sc, ui, si, uo, so, ua, sa, d = sys.argv[1:]
r = lambda a, b: f"{float(b) / float(a):.2f}×" if float(a) > 0 else "—"
print(f"| {n} | {uw}s | {sw}s ({r(uw, sw)}) | {uh}s | {sh}s ({r(uh, sh)}) | {uc}s | {sc}s | {ui} / {uo} | {si} / {so} | {ua} / {sa} | {d} |")
PY
}

echo "| scenario ($SEL, $NDEV ids) | job wall upstream | job wall scenerun | lock held upstream | lock held scenerun | CPU upstream | CPU scenerun | compiles in/out of lock, upstream | compiles in/out, scenerun | acquisitions | verdict differences |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for s in $SCENARIOS; do
    case $s in
    warm-kernels)
        log "$s: upstream (kernel cache as the tree has it)"
        u=$(upstream "$s-up")
        rm -rf "$W/build/scenerun-cache" "$W/build/scenerun"
        log "$s: scenerun (scene cache cold)"
        f=$(flow "$s-sr")
        ;;
    unchanged)
        log "$s: upstream again"
        u=$(upstream "$s-up")
        log "$s: scenerun again (nothing changed)"
        f=$(flow "$s-sr")
        ;;
    queued)
        log "$s: upstream again, another job holding the ids for ${QUEUE_S}s first"
        hold "$QUEUE_S"
        u=$(upstream "$s-up")
        wait
        log "$s: scenerun again (nothing changed), the same queue"
        hold "$QUEUE_S"
        f=$(flow "$s-sr")
        wait
        ;;
    cold-kernels)
        rm -rf "$W/build/cache"
        log "$s: upstream (kernel cache removed)"
        u=$(upstream "$s-up")
        rm -rf "$W/build/cache" "$W/build/scenerun-cache" "$W/build/scenerun"
        log "$s: scenerun (kernel and scene caches removed)"
        f=$(flow "$s-sr")
        ;;
    *) log "unknown scenario $s"; exit 1 ;;
    esac
    row "$s" "$u" "$f" "$(diffs "$s-up" "$s-sr")"
done
log "logs and reports: $BENCH_TMP (BENCH_KEEP=1 keeps them)"
