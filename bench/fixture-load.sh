#!/usr/bin/env bash
# bench/fixture-load.sh — a GIB-GiB fixture (default 4 GiB of float32 normals, numpy)
# inside the lock: regenerating it (generate_args again) against loading it from the
# cache with scenerun_pytest's codec (mapped, copy-on-write), in a fresh process as a
# lane is; with the file in the page cache (the warm that just wrote it) and, when
# /proc/sys/vm/drop_caches is writable (root), from the disk. Also the copy a suite's own
# `args.clone()` makes (simpler's test_run clones the arguments before its golden).
# Needs .ci/venv (numpy, the plugin) and ~3x GIB of free memory. Env: GIB, RUNS (3).
source "$(dirname "$0")/lib.sh"
GIB=${GIB:-4}
RUNS=${RUNS:-3}
VENV=${SCENERUN_VENV:-$ROOT/.ci/venv}
[ -x "$VENV/bin/python" ] || { log "no virtualenv at $VENV (see .ci/run)"; exit 1; }
make_tmp fixture
echo "| run | generate | save (warm) | load, page cache | read all, page cache | load, disk | read all, disk | clone |"
echo "|---|---|---|---|---|---|---|---|"
for i in $(seq "$RUNS"); do
    log "run $i: ${GIB} GiB"
    "$VENV/bin/python" "$BENCH_DIR/fixture_load.py" --gib "$GIB" --dir "$BENCH_TMP" | python3 -c '
import json, sys
r = json.load(sys.stdin)
w, c = r["warm"], r.get("cold")
f = lambda v: "%.2f s" % v if v is not None else "—"
print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (sys.argv[1], f(r["generate"]), f(r["save"]), f(w["load"]), f(w["read"]),
      f(c and c["load"]), f(c and c["read"]), f(w["clone"])))' "$i"
done
