#!/usr/bin/env bash
# aarch64 Linux under emulation: cross-builds scenerun, its wheel and its integration
# tests for aarch64-unknown-linux-gnu with Debian's cross gcc, then runs the demo
# (README's first command) and the device, lanes and reliability test modules, every
# scenerun and test binary aarch64, under qemu-user through binfmt_misc. Installs what it
# needs (as root, or with sudo); idempotent. `.ci/run` runs it only when
# SCENERUN_AARCH64=1 (it takes far longer than the CI budget). What is checked, what is
# skipped under emulation and why, and how long it took: docs/install.md#aarch64.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
TARGET=aarch64-unknown-linux-gnu
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
updated=0
need() {
    command -v "$1" >/dev/null && return 0
    if [ "$updated" = 0 ]; then $SUDO apt-get update -qq; updated=1; fi
    $SUDO apt-get install -y -qq "$2" >/dev/null
}
need aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu
need qemu-aarch64-static qemu-user-static
need update-binfmts binfmt-support
need file file
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"

# binfmt_misc: the kernel runs an aarch64 ELF through qemu-aarch64-static, so every
# process scenerun starts (the inner run through the lock command, itself again) is
# emulated the same way. A container without the right to mount it cannot do this.
binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/register" ]; then
    $SUDO mount -t binfmt_misc binfmt_misc "$binfmt" || {
        echo "aarch64: cannot mount binfmt_misc at $binfmt (a container without the privilege?): docs/install.md#aarch64" >&2
        exit 1
    }
fi
if ! grep -qx enabled "$binfmt/qemu-aarch64" 2>/dev/null; then
    $SUDO update-binfmts --enable qemu-aarch64
fi
grep -qx enabled "$binfmt/qemu-aarch64"
# Where qemu finds the aarch64 loader and libc: Debian's cross libc (a dependency of
# gcc-aarch64-linux-gnu), not an arm64 multiarch install.
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
# Tests that cannot hold under qemu-user skip themselves, visibly, when this is set.
export SCENERUN_EMULATED=qemu-user

bash .ci/deps.sh
start=$(date +%s)
cargo build --target "$TARGET"
bin="target/$TARGET/debug/scenerun"
file -L "$bin" | grep -q 'ARM aarch64' || { echo "aarch64: $bin is not an aarch64 binary" >&2; exit 1; }
"$bin" --version

# The wheel: no manylinux tag (its check needs the manylinux toolchain or zig, neither
# of which Debian's cross gcc is); the dev profile, so it reuses the build above (a
# user's `pip install .` builds release). The binary inside is aarch64 and runs.
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
.ci/venv/bin/maturin build --target "$TARGET" --compatibility linux --profile dev --out "$wheels"
whl=$(ls "$wheels"/*.whl)
case "$whl" in *linux_aarch64.whl) ;; *) echo "aarch64: unexpected wheel $whl" >&2; exit 1 ;; esac
.ci/venv/bin/python -m zipfile -e "$whl" "$wheels/x"
wbin=$(ls "$wheels"/x/*.data/scripts/scenerun)
chmod +x "$wbin"
file -L "$wbin" | grep -q 'ARM aarch64'
"$wbin" --version

# The demo, README's first command, in a fresh copy of fixtures/.
demo="$wheels/fixtures"
cp -r fixtures "$demo"
"$bin" --manifest "$demo/demo/scenes.yaml" warm
"$bin" --manifest "$demo/demo/scenes.yaml" device

# The test modules; the test binary is aarch64 too (binfmt runs it), and finds the
# aarch64 scenerun beside it (target/aarch64-unknown-linux-gnu/debug).
cargo test --target "$TARGET" --test main -- device:: lanes:: reliability::
echo "aarch64: done in $(( $(date +%s) - start )) s"
