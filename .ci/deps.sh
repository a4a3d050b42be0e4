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
# A clang for the compile cache's clang test (tests/lanes/compile_exact.rs): any version.
command -v clang-19 >/dev/null || need clang clang
# The remote-cache tests run against a real nginx (WebDAV PUT); Debian puts it in /usr/sbin.
[ -x /usr/sbin/nginx ] || need nginx nginx
# The pytest lane test (tests/lanes/pytest.rs, docs/lanes.md): the shared virtualenv
# .ci/venv with pytest and pytest-reportlog from PyPI, versions pinned here (the test
# prints what it ran with), and numpy for the class-style demo suite
# (fixtures/pytest-demo/classes, tests/pytest_suite.rs), maturin, which builds the
# wheel (tests/wheel.rs; the same version as pyproject.toml pins), jsonschema, which
# checks the lane results schema (python/scenerun-pytest/tests), and mypy, which
# type-checks the plugin (tests/pytest_suite.rs; its settings are in
# python/scenerun-pytest/pyproject.toml). Adds to the venv; never removes what others
# installed in it.
if ! .ci/venv/bin/python -c "import pytest, pytest_reportlog, numpy, jsonschema" 2>/dev/null ||
    [ "$(.ci/venv/bin/maturin --version 2>/dev/null)" != "maturin 1.16.0" ] ||
    [ "$(.ci/venv/bin/mypy --version 2>/dev/null | cut -d' ' -f1-2)" != "mypy 2.4.1" ]; then
    need python3 python3
    if ! python3 -c "import venv, ensurepip" 2>/dev/null; then
        # Debian splits ensurepip out of python3.
        if [ "$updated" = 0 ]; then $SUDO apt-get update -qq; updated=1; fi
        $SUDO apt-get install -y -qq python3-venv >/dev/null
    fi
    [ -x .ci/venv/bin/python ] || python3 -m venv .ci/venv
    .ci/venv/bin/pip install -q --disable-pip-version-check "pytest==9.2.0" "pytest-reportlog==1.0.0" "numpy==2.4.6" "maturin==1.16.0" "jsonschema==4.26.0" "mypy==2.4.1"
fi
# The pytest plugin of this checkout (python/scenerun-pytest) into the same venv, for
# tests/pytest_suite.rs and fixtures/pytest-demo: reinstalled when its sources changed
# (a hash of them, paths included, stamped in the venv; what pip itself writes there,
# build/ and *.egg-info, and a mypy run's .mypy_cache are left out).
plugin=python/scenerun-pytest
sources=$(find "$plugin" -type f -not -path "$plugin/build/*" -not -path '*.egg-info/*' \
    -not -path '*/__pycache__/*' -not -path '*/.mypy_cache/*' -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum)
stamp=.ci/venv/.scenerun-pytest.sources
if [ "$(cat "$stamp" 2>/dev/null)" != "$sources" ] || ! .ci/venv/bin/python -c "import scenerun_pytest" 2>/dev/null; then
    .ci/venv/bin/pip install -q --disable-pip-version-check --force-reinstall --no-deps "./$plugin"
    echo "$sources" > "$stamp"
fi
