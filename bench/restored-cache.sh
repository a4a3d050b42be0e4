#!/usr/bin/env bash
# bench/restored-cache.sh — what re-hashing a restored cache costs (docs/cache-trust.md,
# guarantees D1): `scenerun warm` with nothing changed on fixtures/demo's cache, against
# the first and the second `warm` after the cache is copied with `cp -a` (new inodes: every
# stamp is taken again after a re-hash), as actions/cache restores it. Then the same on a
# cache holding one fixture of SIZE_MIB (default 256). Each figure: min / median / max
# over RUNS (default 5) runs, each on a fresh copy for the first-after-copy case.
source "$(dirname "$0")/lib.sh"

need_tools
need_scenerun
make_tmp restored
RUNS=${RUNS:-5}
SIZE_MIB=${SIZE_MIB:-256}
export CI=1

# min median max of the wall seconds of "$@" run RUNS times, `before` run untimed first.
stats() { # before-command, command...
    local before=$1; shift
    local t=()
    for _ in $(seq 1 "$RUNS"); do
        bash -c "$before" >/dev/null 2>&1
        t+=("$(wall /dev/null "$@")")
    done
    printf '%s\n' "${t[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.2f / %.2f / %.2f s", a[1], a[int((NR+1)/2)], a[NR]}'
}

measure() { # name, dir (a suite with a warm cache at build/cache)
    local d=$2
    (cd "$d" && "$SCENERUN" warm >/dev/null 2>&1)
    local same first second
    same=$(cd "$d" && stats true "$SCENERUN" warm)
    # A fresh copy of the cache before each timed run: the first warm on it re-hashes.
    first=$(cd "$d" && stats "rm -rf build/copy && cp -a build/cache build/copy && rm -rf build/cache && mv build/copy build/cache" "$SCENERUN" warm)
    second=$(cd "$d" && stats true "$SCENERUN" warm)
    row "restored cache" "$1: warm, nothing changed / first after cp -a / next" "$same / $first / $second" "—" "—"
}

table_header
mkdir -p "$BENCH_TMP/demo"
cp -r "$ROOT/fixtures/bin" "$BENCH_TMP/bin"
cp -r "$ROOT/fixtures/demo/." "$BENCH_TMP/demo/"
rm -rf "$BENCH_TMP/demo/build"
log "demo suite"
measure "fixtures/demo" "$BENCH_TMP/demo"

mkdir -p "$BENCH_TMP/big"
cat > "$BENCH_TMP/big/scenes.yaml" <<YAML
version: 1
cache: {dir: build/cache}
scenes:
  - name: big
    fixture: {run: "head -c ${SIZE_MIB}M /dev/urandom > {out}/data"}
YAML
log "one ${SIZE_MIB} MiB fixture"
measure "one ${SIZE_MIB} MiB fixture" "$BENCH_TMP/big"
