#!/usr/bin/env bash
# Installs what the test suite uses, on a fresh Debian/Ubuntu machine (as root, or with
# sudo available). Idempotent: a no-op once everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
updated=0
need() {
    command -v "$1" >/dev/null && return 0
    if [ "$updated" = 0 ]; then $SUDO apt-get update -qq; updated=1; fi
    $SUDO apt-get install -y -qq "$2" >/dev/null
}
need cc gcc
need flock util-linux
need git git
# A virtualenv with pytest and this checkout's pytest plugin, for the tests of
# python/scenerun-pytest and fixtures/pytest-demo (tests/pytest_suite.rs finds it here).
need python3 python3
python3 -c 'import venv, ensurepip' 2>/dev/null || { $SUDO apt-get update -qq; $SUDO apt-get install -y -qq python3-venv >/dev/null; }
[ -x .ci/venv/bin/python ] || python3 -m venv .ci/venv
.ci/venv/bin/pip install -q --disable-pip-version-check pytest
.ci/venv/bin/pip install -q --disable-pip-version-check --force-reinstall --no-deps ./python/scenerun-pytest
