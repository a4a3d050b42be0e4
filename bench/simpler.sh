#!/usr/bin/env bash
# bench/simpler.sh — `python -m scenerun_pytest collect` on a checkout of
# hw-native-sys/simpler (SCENERUN_SIMPLER_TREE, not part of this repository), against
# pytest's own `--collect-only` of the same selection; then `scenerun plan` (release
# build) of a manifest whose scenes come from that collect: first with the generator
# running, then with its output cached. The tree is copied; what this machine cannot
# install comes from tests/standins/simpler (the C++ extension, torch, cloudpickle, and a
# git that fails, so simpler's conftest does not retry its PTO-ISA clone for ~6 s).
# Env: SCENERUN_SIMPLER_TREE (required), PLATFORM (a2a3sim), RUNS (5).
source "$(dirname "$0")/lib.sh"
TREE=${SCENERUN_SIMPLER_TREE:?set SCENERUN_SIMPLER_TREE to a checkout of hw-native-sys/simpler}
PLATFORM=${PLATFORM:-a2a3sim}
RUNS=${RUNS:-5}
VENV=${SCENERUN_VENV:-$ROOT/.ci/venv}
[ -x "$VENV/bin/python" ] || { log "no virtualenv at $VENV (see .ci/run)"; exit 1; }
need_tools
need_scenerun
make_tmp simpler
cp -r "$TREE" "$BENCH_TMP/simpler"
rm -rf "$BENCH_TMP/simpler/.git" "$BENCH_TMP/simpler/build"
cd "$BENCH_TMP/simpler"
STANDINS=$ROOT/tests/standins/simpler
export PATH="$STANDINS/bin:$VENV/bin:$PATH"
export PYTHONPATH="$STANDINS:$PWD/python:$PWD"
SEL="examples tests/st --platform $PLATFORM"

scenes=$(python -m scenerun_pytest collect $SEL 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["scenes"]))')
log "collect: $scenes scenes for $PLATFORM"
hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$BENCH_TMP/own.json" \
    "python -m pytest --collect-only -q -p no:cacheprovider $SEL" >&2
hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$BENCH_TMP/collect.json" \
    "python -m scenerun_pytest collect $SEL" >&2
cat > scenes.yaml <<YAML
version: 1
platform: $PLATFORM
cache: {dir: build/scenerun-cache}
lanes:
  pytest: {run: "python -m pytest {args} --platform {platform} --device {devices}"}
  pytest_x2: {run: "python -m pytest {args} --platform {platform} --device {devices}", devices: 2}
  pytest_x3: {run: "python -m pytest {args} --platform {platform} --device {devices}", devices: 3}
  pytest_x4: {run: "python -m pytest {args} --platform {platform} --device {devices}", devices: 4}
scenes_from:
  - run: "python -m scenerun_pytest collect examples tests/st --platform {platform}"
    inputs: ["examples/**/*.py", "tests/st/**/*.py", conftest.py, pyproject.toml]
YAML
hyperfine -N --runs "$RUNS" --prepare "rm -rf build/scenerun-cache/generated" --export-json "$BENCH_TMP/plan-cold.json" \
    "$SCENERUN plan" >&2
hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$BENCH_TMP/plan-cached.json" "$SCENERUN plan" >&2
row() { read -r med mean sd user sys min max < <(hf_stats "$2"); echo "| $1 | ${med}s | ${min}s | ${user}s |"; }
echo "| simpler, $PLATFORM ($scenes scenes), median of $RUNS | median | min | user CPU |"
echo "|---|---|---|---|"
row "pytest --collect-only (simpler's own)" "$BENCH_TMP/own.json"
row "python -m scenerun_pytest collect" "$BENCH_TMP/collect.json"
row "scenerun plan, generator runs" "$BENCH_TMP/plan-cold.json"
row "scenerun plan, generator output cached" "$BENCH_TMP/plan-cached.json"
