#!/usr/bin/env bash
# bench/simpler-sim.sh — hw-native-sys/simpler's real suite on its CPU simulator: the whole
# per-PR simulator job both ways, side by side in one run:
#   upstream: each pytest command of the job (.github/workflows/_st-sim-<arch>.yml: the main
#             run and the DFX smokes, 6 on a2a3sim, 5 on a5sim) in its own acquisition of the
#             stand-in lock (fixtures/bin/task-submit), one after the other, as the job runs them
#   scenerun: scenerun warm && scenerun device           (examples/simpler's manifest for PLATFORM)
# Before measuring, upstream's whole job runs once unmeasured, so simpler's kernel cache
# (build/cache) holds every kernel each command compiles, and then scenerun's flow once, so
# its compile cache holds the test bodies' builds: "kernel cache warm" is then warm for
# both (a partly cold cache made upstream compile 86 times inside the lock in earlier
# figures, 35 once fully warm).
# Scenarios: kernel caches warm + scene cache cold (what CI sees on a new commit that
# leaves the kernels alone: simpler's kernel cache, scenerun's compile cache and the
# prepare steps' stamps warm, every scene entry gone), warm-kernels-prepare (the same
# with the prepare stamps gone: simpler's own pass checks its kernel cache), first-run
# (scenerun's whole cache removed, simpler's kernel cache warm: a runner's first run),
# nothing changed (both caches warm), kernel cache cold, and queued: nothing changed, but another
# job holds every id for QUEUE_S seconds (default 30) before each acquisition asks, as a
# fleet's queue would (upstream waits before each of its commands). Per run: job wall,
# lock held (summed over acquisitions), CPU seconds (user + system of everything the job
# started), compiles inside and outside the lock (every g++-15/gcc-15 start that compiles
# or links, counted by a shim first on PATH, placed by its time against the lock's
# acquire/release in the stand-in's log; toolchain probes such as `g++-15 --version` are
# not compiles), acquisitions, and verdict differences per (selection, pytest node)
# against upstream's run of the same scenario (must be 0).
#
# Env: SCENERUN_SIMPLER_TREE (required: a tree built by the realsuite setup script, its
# env.sh beside it; for a5sim built with --platforms a5sim or sim), PLATFORM (a2a3sim or
# a5sim; default a2a3sim), SEL (default "examples tests/st": the main run's paths),
# DEVICES (default 0-1), SCENARIOS (default "warm-kernels warm-kernels-prepare first-run
# unchanged cold-kernels"; "queued" on request), QUEUE_S, PRESTART (true or all: every lane's `prestart`), WARM_ARGS (words
# after `scenerun warm`, e.g. --no-workers), PROFILE (a manifest profile, e.g. daily; the
# upstream commands then take --manual include in the main run), LOAD (N busy loops on
# the host during both sides, to see what a loaded runner sees; default 0).
source "$(dirname "$0")/lib.sh"
TREE=${SCENERUN_SIMPLER_TREE:?set SCENERUN_SIMPLER_TREE to a simpler tree built by the realsuite setup script}
ENV_SH=$(dirname "$TREE")/env.sh
[ -f "$ENV_SH" ] || { log "no env.sh beside $TREE: build it with the realsuite setup script"; exit 1; }
SEL=${SEL:-examples tests/st}
PLATFORM=${PLATFORM:-a2a3sim}
DEVICES=${DEVICES:-0-1}
PROFILE=${PROFILE:-}
LOAD=${LOAD:-0}
case $PLATFORM in
a2a3sim) ARCH=a2a3 MANIFEST=scenes.yaml SMOKES="dep_gen dep_gen_hbg chip_swimlane pmu args_dump" ;;
a5sim) ARCH=a5 MANIFEST=scenes-a5sim.yaml SMOKES="dep_gen chip_swimlane pmu args_dump" ;;
*) echo "PLATFORM must be a2a3sim or a5sim" >&2; exit 1 ;;
esac
MAIN_MANUAL=exclude
[ "$PROFILE" = daily ] && MAIN_MANUAL=include
SCENARIOS=${SCENARIOS:-warm-kernels warm-kernels-prepare first-run unchanged cold-kernels}
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
cp "$ROOT/examples/simpler/$MANIFEST" "$ROOT/examples/simpler/scenerun_simpler.py" "$W/"
sed -i "s|main: *{paths: \[examples, tests/st\]|main: {paths: [$(echo "$SEL" | sed 's/ /, /g')]|" "$W/$MANIFEST"
[ -n "${PRESTART:-}" ] && sed -i -E "s/prestart: (true|all)/prestart: $PRESTART/" "$W/$MANIFEST"
SCENERUN_ARGS="--manifest $MANIFEST${PROFILE:+ --profile $PROFILE}"
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
# `scenerun` on PATH is $SCENERUN whatever its file is called (a copy named otherwise
# beside another scenerun would be passed over for that one).
mkdir -p "$BENCH_TMP/bin"
ln -sf "$(realpath "$SCENERUN")" "$BENCH_TMP/bin/scenerun"
export PATH=$SHIMS:$BENCH_TMP/bin:$ROOT/fixtures/bin:$PATH
log "scenerun on PATH: $(command -v scenerun) -> $(realpath "$SCENERUN") ($(scenerun --version))"

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

# One pytest command of the job, by selection name: "paths|options" (--platform, --device,
# --require-pto-isa and --pto-session-timeout are added by upstream()).
command_of() {
    local dfx=tests/st/$ARCH/tensormap_and_ringbuffer/dfx smoke="-p no:xdist --manual include"
    case $1 in
    main) echo "$SEL|-v --manual $MAIN_MANUAL" ;;
    dep_gen) echo "$dfx/dep_gen/|$smoke --enable-dep-gen" ;;
    dep_gen_hbg) echo "tests/st/$ARCH/host_build_graph/dfx/dep_gen/|$smoke --enable-dep-gen" ;;
    chip_swimlane) echo "$dfx/chip_swimlane/|$smoke --enable-chip-swimlane --enable-dep-gen" ;;
    pmu) echo "$dfx/pmu/test_pmu.py|$smoke --enable-pmu 2" ;;
    args_dump) echo "$dfx/args_dump/test_args_dump.py|$smoke --dump-args" ;;
    esac
}

# Upstream's job: each command in its own acquisition, one after the other (a queue
# before each when $2 is set), every node's verdict recorded with its selection.
upstream() {
    local script=$BENCH_TMP/$1.sh sel paths opts
    : > "$BENCH_TMP/$1.verdicts"
    {
        echo "cd '$W'"
        for sel in main $SMOKES; do
            IFS='|' read -r paths opts <<< "$(command_of "$sel")"
            [ -n "${2:-}" ] && echo "hold_ids $2"
            echo "SCENERUN_VERDICTS='$BENCH_TMP/$1.verdicts' SCENERUN_VERDICTS_SELECTION=$sel PYTEST_ADDOPTS='-p scenerun_pytest.verdicts' \\"
            echo "    task-submit --timeout 3600 --max-time 3600 --device auto --device-num $NDEV \\"
            echo "    --run \"python -m pytest $paths --platform $PLATFORM --device \\\$TASK_DEVICE --pto-session-timeout 600 --require-pto-isa $opts\""
        done
    } > "$script"
    job "$1" "$(declare -f hold_ids); BENCH_TMP='$BENCH_TMP' DEVICES='$DEVICES'; source '$script'"
}

# Another job holds every id for $1 seconds; returns once it has them (its lock events go
# to a log of its own, so they count in no job's figures).
hold_ids() {
    local events=$BENCH_TMP/holder.events
    : > "$events"
    TASK_SUBMIT_LOG=$events task-submit --device "$DEVICES" --run "sleep $1" > /dev/null 2>&1 &
    while ! grep -q '^acquire' "$events"; do sleep 0.05; done
}

# N busy loops for the length of a job (LOAD), stopped by the returned pid list.
busy() {
    local pids="" i
    for i in $(seq 1 "$LOAD"); do
        (while :; do :; done) &
        pids="$pids $!"
    done
    echo "$pids"
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
    job "$1" "cd '$W' && scenerun $SCENERUN_ARGS warm ${WARM_ARGS:-} && scenerun $SCENERUN_ARGS device"
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
      f"first test {first:.2f}s into it; compiles {c.get('hit', 0)} from the cache, {c.get('built', 0)} kept, {c.get('ran', 0)} without the cache {c.get('reasons', {})}")
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

log "warm-up: upstream's whole job once, unmeasured, so simpler's kernel cache holds every kernel it compiles"
upstream warmup > /dev/null
log "warm-up: scenerun's flow once, unmeasured, so its compile cache holds what the test bodies build"
flow warmup-sr > /dev/null

echo "| scenario ($PLATFORM${PROFILE:+ $PROFILE}, $NDEV ids) | job wall upstream | job wall scenerun | lock held upstream | lock held scenerun | CPU upstream | CPU scenerun | compiles in/out of lock, upstream | compiles in/out, scenerun | acquisitions | verdict differences |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
LOADERS=""
[ "$LOAD" -gt 0 ] && LOADERS=$(busy) && trap 'kill $LOADERS 2>/dev/null || true; [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$BENCH_TMP"' EXIT
for s in $SCENARIOS; do
    case $s in
    warm-kernels | warm-kernels-prepare)
        log "$s: upstream (kernel cache as the tree has it)"
        u=$(upstream "$s-up")
        # The scene cache: the scenes' entries (fixtures, goldens, tests), the kept scene
        # lists and the checkout's records. The kernel caches stay: simpler's (build/cache),
        # scenerun's compiled test-body builds (entries/compiled, keyed by content: a new
        # commit that leaves a kernel alone hits it as it hits simpler's) and, but for
        # warm-kernels-prepare, the prepare steps' stamps (build/scenerun/job: they say
        # simpler's kernel cache was filled for these kernel sources, and a CI that
        # restores build/cache restores them with it).
        rm -rf "$W/build/scenerun-cache/entries/"{fixture,golden,test} "$W/build/scenerun-cache/generated"
        find "$W/build/scenerun" -mindepth 1 -maxdepth 1 ! -name job -exec rm -rf {} +
        [ "$s" = warm-kernels-prepare ] && rm -rf "$W/build/scenerun/job" "$W/build/scenerun-cache/entries/prepare"
        log "$s: scenerun (scene cache cold, kernel caches warm, prepare stamps $([ "$s" = warm-kernels ] && echo kept || echo removed))"
        f=$(flow "$s-sr")
        ;;
    first-run)
        log "$s: upstream (kernel cache as the tree has it)"
        u=$(upstream "$s-up")
        rm -rf "$W/build/scenerun-cache" "$W/build/scenerun"
        log "$s: scenerun (its whole cache removed: a runner's first run; simpler's kernel cache warm)"
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
        u=$(upstream "$s-up" "$QUEUE_S")
        wait
        log "$s: scenerun again (nothing changed), the same queue"
        hold_ids "$QUEUE_S"
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
