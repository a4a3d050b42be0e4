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
# The remote-cache tests run against a real nginx (WebDAV PUT); Debian puts it in /usr/sbin.
[ -x /usr/sbin/nginx ] || need nginx nginx
