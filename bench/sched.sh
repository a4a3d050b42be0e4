#!/usr/bin/env bash
# bench/sched.sh — the warm scheduler against the lower bound, on a DAG of `sleep` steps
# with known durations and resource hints (bench/gen_sched.py: SCENES scenes, seed SEED;
# kernels 0.2–0.8 s, fixtures and dependent goldens 0.2–3 s, some `threads: 2`, some 6 GiB
# `memory` hints against --memory 10GiB).
#
#   1. scenerun warm -j2            (fills the duration history in the cache's history.json)
#   2. scenerun cache clean         (removes entries, keeps history)
#   3. scenerun warm -j2, timed     = makespan with history-informed priorities
#   lower bound = max(critical path, total work ÷ slots) from the known durations;
#   examples/sched_bench.rs simulates the same DAG with the real policy and with plain
#   manifest order (scenerun::warm::sched::simulate), and 2000 random suite-shaped DAGs.
#
# Env: SCENES (default 10), SEED (default 7), BENCH_KEEP=1.
source "$(dirname "$0")/lib.sh"

SCENES=${SCENES:-10}
SEED=${SEED:-7}
J=2
need_tools
need_scenerun
(cd "$ROOT" && cargo build --release --quiet --example sched_bench) >&2
SIM=$ROOT/target/release/examples/sched_bench
make_tmp sched
SUITE=$BENCH_TMP/suite
CACHE=$BENCH_TMP/cache
python3 "$BENCH_DIR/gen_sched.py" "$SUITE" --scenes "$SCENES" --seed "$SEED" --budget-gib 10
cd "$SUITE"
SR=("$SCENERUN" --cache-dir "$CACHE" -j "$J" -q)

log "run 1: warm -j$J (no history yet)"
run1=$(wall "$BENCH_TMP/run1.log" "${SR[@]}" warm --memory 10GiB)
tail -n 1 "$BENCH_TMP/run1.log" >&2
"${SR[@]}" cache clean >&2
[ -s "$CACHE/history.json" ] || { log "no history.json after cache clean"; exit 1; }
log "run 2: warm -j$J with history (timed)"
run2=$(wall "$BENCH_TMP/run2.log" "${SR[@]}" warm --memory 10GiB)
tail -n 1 "$BENCH_TMP/run2.log" >&2
grep -q ' 0 failed' "$BENCH_TMP/run2.log" || { cat "$BENCH_TMP/run2.log" >&2; exit 1; }
internal=$(sed -nE 's/.* in ([0-9.]+)s;.*/\1/p' "$BENCH_TMP/run2.log" | tail -n 1)

sim=$("$SIM" dag.json --slots "$J")
rand=$("$SIM" --random 2000 --slots "$J" --seed 1)
log "sim: $sim"
log "random: $rand"
read -r tasks work lb p_ms p_r m_ms m_r < <(python3 -c "
import json
d = json.loads('''$sim''')
print(d['tasks'], d['work_secs'], d['lower_bound'], d['policy_makespan'], d['policy_ratio'], d['manifest_order_makespan'], d['manifest_order_ratio'])")
read -r rp_mean rp_max rm_mean rm_max worse < <(python3 -c "
import json
d = json.loads('''$rand''')
print(d['policy_mean_ratio'], d['policy_max_ratio'], d['manifest_order_mean_ratio'], d['manifest_order_max_ratio'], d['policy_worse_than_manifest_order'])")
ratio=$(python3 -c "print(f'{$run2/$lb:.3f}')")
B="scheduler ($tasks sleep steps, -j$J, seed $SEED)"
table_header
row "$B" "lower bound max(critical path, work ÷ slots)" "${lb} s (work ${work} s)" "—" ""
row "$B" "run 1, no history (wall)" "${run1} s" "—" ""
row "$B" "**run 2 makespan** after cache clean, history known (wall; scenerun's own clock ${internal} s)" "${run2} s" "—" ""
row "$B" "**measured makespan ÷ lower bound**" "${ratio}" "≤ 1.15" "$(mark "$ratio" le 1.15)"
row "$B" "simulated: real policy ÷ lower bound" "$(printf '%.3f' "$p_r") (${p_ms} s)" "≤ 1.15" "$(mark "$p_r" le 1.15)"
row "$B" "simulated: plain manifest order ÷ lower bound" "$(printf '%.3f' "$m_r") (${m_ms} s)" "—" ""
row "scheduler, 2000 random suite DAGs (simulated)" "policy ÷ LB mean / max; manifest order mean / max" "$(printf '%.3f / %.3f; %.3f / %.3f' "$rp_mean" "$rp_max" "$rm_mean" "$rm_max") (policy worse than manifest order on $worse)" "≤ 1.15" "$(mark "$rp_max" le 1.15)"
log "load average at the end: $(loadavg)"
