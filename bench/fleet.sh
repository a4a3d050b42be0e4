#!/usr/bin/env bash
# Fleet benchmark: CHECKOUTS checkouts with cold local caches share one remote cache (a
# real nginx with WebDAV PUT, fixtures/nginx/remote-cache.conf.in) on loopback.
#
#   1. checkout 1 warms cold and uploads (the default-branch job);
#   2. checkouts 2..N warm at the same time, reading (and offering) through the remote;
#   3. a checkout without the remote warms cold, for the build-time baseline.
# Counted: compiler invocations across the fleet (must equal the unique kernels), warm
# times from the remote vs building, bytes moved (scenerun's own counters). Then a
# BLOB_MIB MiB fixture: scenerun's download (GET, sha256 check, atomic publish) against
# `curl -o` of the same blob from the same server, back to back in each run; the median
# of the per-run throughput ratios must be >= 0.8.
#
#   bench/fleet.sh            # KERNELS=240 PER_SCENE=4 CHECKOUTS=4 BLOB_MIB=1024 RUNS=3
#                             # PART=fleet or PART=blob runs one half
# Prints Markdown table rows on stdout; progress on stderr.
source "$(dirname "$0")/lib.sh"

KERNELS=${KERNELS:-240}
PER_SCENE=${PER_SCENE:-4}
CHECKOUTS=${CHECKOUTS:-4}
BLOB_MIB=${BLOB_MIB:-1024}
RUNS=${RUNS:-3}
TOKEN=bench-token

command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; } >&2
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || { apt-get update -qq && apt-get install -y -qq nginx; } >&2
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
need_scenerun
make_tmp fleet
T=$BENCH_TMP

# ---------------------------------------------------------------- the server
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$T/nginx/tmp" "$T/nginx/data"
sed -e "s|@PREFIX@|$T/nginx|g" -e "s|@PORT@|$PORT|g" -e "s|@TOKEN@|$TOKEN|g" \
    "$ROOT/fixtures/nginx/remote-cache.conf.in" > "$T/nginx/nginx.conf"
"$NGINX" -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" &
NGINX_PID=$!
cleanup() { kill "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$T"; }
trap cleanup EXIT
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
URL="http://127.0.0.1:$PORT/scenerun"
log "nginx on $URL"

# ---------------------------------------------------------------- the suite
SCENES=$(( (KERNELS + PER_SCENE - 1) / PER_SCENE ))
python3 - "$T/src" "$SCENES" "$PER_SCENE" "$KERNELS" <<'PY'
import os, sys
root, scenes, per, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(f"{root}/kernels", exist_ok=True); os.makedirs(f"{root}/include", exist_ok=True); os.makedirs(f"{root}/bin", exist_ok=True)
open(f"{root}/include/tile.h", "w").write("#define TILE 16\nstatic inline float mix(float a, float b) { return a * 0.5f + b * 0.25f; }\n")
w = open(f"{root}/bin/cc-log", "w")
w.write('#!/bin/sh\n# counts compiler runs across the fleet\necho "$PWD $*" >> "$FLEET_CC_LOG"\nexec cc "$@"\n'); w.close()
os.chmod(f"{root}/bin/cc-log", 0o755)
for name, body in [("gen.sh", 'echo "$2" > "$1/input.txt"\nhead -c 65536 /dev/urandom > "$1/data.bin"\n'),
                   ("golden.sh", 'cat "$1/input.txt" "$1/input.txt" > "$2/expected.txt"\n')]:
    open(f"{root}/{name}", "w").write("#!/bin/sh\n" + body); os.chmod(f"{root}/{name}", 0o755)
y = ["version: 1", "cache:", "  dir: cache", "toolchains:", "  cc:",
     '    compile: "./bin/cc-log -c {source} -o {out} {includes} {flags}"',
     '    identity: "cc --version"', '    depfile: "-MD -MF {depfile}"', "scenes:"]
k = 0
for s in range(scenes):
    y += [f"  - name: s{s:03d}", "    kernels:"]
    for j in range(per):
        if k >= total: break
        src = f"kernels/k{k:04d}.c"
        fns = "\n".join(
            f"void k{k}_{f}(float *o, const float *a, const float *b, int n) {{\n"
            f"  for (int i = 0; i < n; i += TILE)\n    for (int t = 0; t < TILE; t++)\n"
            f"      o[i + t] = mix(a[i + t] * {k + f}.0f, b[(i + t * {f + 1}) % n]);\n}}"
            for f in range(12))
        open(f"{root}/{src}", "w").write(f'#include "tile.h"\n{fns}\n')
        y += [f"      - name: k{j}", "        toolchain: cc", f"        source: {src}",
              "        include_dirs: [include]", '        flags: ["-O2"]']
        k += 1
    y += ["    fixture:", f'      run: "./gen.sh {{out}} s{s:03d}"', "      inputs: [gen.sh]",
          "    golden:", '      run: "./golden.sh {fixture} {out}"', "      inputs: [golden.sh]"]
open(f"{root}/scenes.yaml", "w").write("\n".join(y) + "\n")
PY
export FLEET_CC_LOG="$T/cc.log"
: > "$FLEET_CC_LOG"
for i in $(seq 0 "$CHECKOUTS"); do cp -r "$T/src" "$T/c$i"; done
log "$KERNELS kernels in $SCENES scenes; $CHECKOUTS checkouts + 1 baseline"

# seconds of one warm; its stderr in $T/<name>.log
timed_warm() { # name args...
    local name=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    (cd "$T/$name" && CI=true SCENERUN_REMOTE_TOKEN=$TOKEN "$SCENERUN" warm "$@") 2> "$T/$name.log"
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.2f}')"
}
remote_json() { cat "$T/$1/cache/last-remote.json"; }
field() { python3 -c "import json,sys; print(json.load(open('$T/$1/cache/last-remote.json'))['$2'])"; }

# ---------------------------------------------------------------- the fleet
if [ "${PART:-all}" != blob ]; then
log "baseline: checkout 0 warms cold without a remote"
base=$(timed_warm c0 --no-remote)
base_cc=$(wc -l < "$FLEET_CC_LOG")
: > "$FLEET_CC_LOG"
log "checkout 1 warms cold and uploads"
first=$(timed_warm c1 --remote "$URL" --remote-write)
first_cc=$(wc -l < "$FLEET_CC_LOG")
log "checkouts 2..$CHECKOUTS warm at the same time from the remote"
t0=$(date +%s.%N)
pids=()
for i in $(seq 2 "$CHECKOUTS"); do
    timed_warm "c$i" --remote "$URL" --remote-write > "$T/c$i.secs" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
t1=$(date +%s.%N)
trio=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
fleet_cc=$(wc -l < "$FLEET_CC_LOG")
readers=""; down=0; up=0
for i in $(seq 1 "$CHECKOUTS"); do
    [ "$i" -gt 1 ] && readers="$readers $(cat "$T/c$i.secs")s"
    down=$((down + $(field "c$i" bytes_down)))
    up=$((up + $(field "c$i" bytes_up)))
done
hits=$(field c2 hits)
steps=$(grep -c 'remote-hit' "$T/c2.log" || true)
mib() { python3 -c "print(f'{$1 / 1048576:.1f} MiB')"; }
echo "| fleet ($CHECKOUTS checkouts, $KERNELS kernels, $SCENES scenes) | compiler runs across the fleet | $fleet_cc (unique kernels: $KERNELS; baseline checkout alone: $base_cc) | = unique kernels | $([ "$fleet_cc" = "$KERNELS" ] && echo ✅ || echo ❌) |"
echo "| fleet | warm, cold, building everything (no remote) | ${base} s | | |"
echo "| fleet | warm of checkout 1, cold, building and uploading | ${first} s | | |"
echo "| fleet | warm of checkouts 2..$CHECKOUTS from the remote, all at once | ${readers# } (together ${trio} s); $steps steps remote-hit, $hits entries each | faster than building | $(python3 -c "print('✅' if max(map(float,'$readers'.replace('s','').split())) < $base else '❌')") |"
echo "| fleet | bytes moved (scenerun counters) | $(mib "$up") up, $(mib "$down") down in total | | |"
fi
[ "${PART:-all}" != fleet ] || exit 0

# ---------------------------------------------------------------- one large blob
log "large blob: ${BLOB_MIB} MiB fixture"
mkdir -p "$T/big"
cat > "$T/big/scenes.yaml" <<YAML
version: 1
cache:
  dir: cache
scenes:
  - name: big
    fixture:
      run: "head -c ${BLOB_MIB}M /dev/urandom > {out}/blob.bin"
YAML
(cd "$T/big" && CI=true SCENERUN_REMOTE_TOKEN=$TOKEN "$SCENERUN" warm --remote "$URL" --remote-write) 2> "$T/big.log"
blob=$(python3 -c "import os,sys; d=sys.argv[1]; print(max(os.listdir(d), key=lambda n: os.path.getsize(os.path.join(d, n))))" "$T/nginx/data/scenerun/cas")
best_sr=""; best_curl=""; ratios=""
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$RUNS"); do
    rm -rf "$T/big2"; mkdir -p "$T/big2"; cp "$T/big/scenes.yaml" "$T/big2/"
    sync; s=$(timed_warm big2 --remote "$URL")
    grep -q 'remote-hit' "$T/big2.log" || { log "no remote hit:"; cat "$T/big2.log" >&2; exit 1; }
    rm -f "$T/curl.bin"; sync
    c=$(curl -s -o "$T/curl.bin" -w '%{time_total}' "$URL/cas/$blob")
    # The ratio of one run: scenerun and curl back to back, under the same load.
    ratio=$(python3 -c "print(f'{$c / $s:.2f}')")
    ratios="$ratios $ratio"
    log "run $r: scenerun warm ${s}s, curl ${c}s, ratio $ratio (load $(cut -d' ' -f1 /proc/loadavg))"
    best_sr=$(python3 -c "print(min(x for x in [$s, ${best_sr:-1e9}]))")
    best_curl=$(python3 -c "print(min(x for x in [$c, ${best_curl:-1e9}]))")
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
rm -f "$T/curl.bin"
median=$(python3 -c "import statistics; print(f'{statistics.median([$(echo $ratios | tr ' ' ',')]):.2f}')")
best=$(python3 -c "print(f'{$best_curl / $best_sr:.2f}')")
mbps() { python3 -c "print(f'{$BLOB_MIB / $1:.0f} MiB/s')"; }
echo "| remote blob ${BLOB_MIB} MiB over loopback | whole \`scenerun warm\` (plan, GET, sha256 + BLAKE3, publish) vs \`curl -o\`, $RUNS runs (load $load0 → $load1) | ratio per run:$ratios (median $median); best scenerun ${best_sr} s ($(mbps "$best_sr")), best curl ${best_curl} s ($(mbps "$best_curl")): $best | ≥ 0.8 | $(python3 -c "print('✅' if $median >= 0.8 else '❌')") |"
