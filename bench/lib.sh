# Shared helpers for the bench scripts (sourced, not run).
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
SCENERUN=${SCENERUN:-$ROOT/target/release/scenerun}

log() { printf "[bench %s] %s\n" "$(date +%T)" "$*" >&2; }

# Install what the benchmarks need when it is missing (Debian: apt-get).
need_tools() {
    local missing=()
    command -v hyperfine >/dev/null || missing+=(hyperfine)
    command -v ccache >/dev/null || missing+=(ccache)
    [ -x /usr/bin/time ] || missing+=(time)
    command -v make >/dev/null || missing+=(make)
    command -v cc >/dev/null || missing+=(gcc)
    command -v python3 >/dev/null || missing+=(python3)
    command -v flock >/dev/null || missing+=(util-linux)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing: ${missing[*]}"
        local sudo=
        [ "$(id -u)" = 0 ] || sudo=sudo
        $sudo apt-get update -qq >&2
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    fi
}

# Build the release binary unless SCENERUN points at one already.
need_scenerun() {
    if [ "$SCENERUN" = "$ROOT/target/release/scenerun" ]; then
        (cd "$ROOT" && cargo build --release --quiet) >&2
    fi
    [ -x "$SCENERUN" ] || { log "no scenerun binary at $SCENERUN"; exit 1; }
}

# A fresh temp dir removed on exit (BENCH_KEEP=1 keeps it).
make_tmp() {
    BENCH_TMP=$(mktemp -d "${TMPDIR:-/tmp}/scenerun-bench.$1.XXXXXX")
    if [ "${BENCH_KEEP:-0}" != 1 ]; then
        trap 'rm -rf "$BENCH_TMP"' EXIT
    else
        log "keeping $BENCH_TMP"
    fi
}

# hyperfine JSON → "median mean stddev user system min max" in seconds (first result)
hf_stats() {
    python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print(f'{r["median"]:.4f} {r["mean"]:.4f} {r["stddev"] or 0:.4f} {r["user"]:.4f} {r["system"]:.4f} {r["min"]:.4f} {r["max"]:.4f}')
PY
}

# Wall seconds of one command run (stdout/stderr to the given log).
wall() { # logfile cmd...
    local logf=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >"$logf" 2>&1
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1-$t0:.3f}')"
}

# 1-minute load average, to put beside results measured on a shared machine.
loadavg() { cut -d' ' -f1 /proc/loadavg; }

# Pass/fail mark for a target.
mark() { # value op target   (op: lt|le|ge)
    python3 -c "
import sys
v,op,t=float('$1'),'$2',float('$3')
ok={'lt':v<t,'le':v<=t,'ge':v>=t}[op]
print('✅' if ok else '❌')"
}

# The Markdown table every script prints rows of (run-all.sh prints the header once).
table_header() {
    if [ "${BENCH_NO_HEADER:-0}" != 1 ]; then
        echo "| benchmark | measurement | result | target | ok |"
        echo "|---|---|---|---|---|"
    fi
}
row() { # bench measurement result target ok
    echo "| $1 | $2 | $3 | $4 | $5 |"
}
