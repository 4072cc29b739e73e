#!/usr/bin/env bash
# Build the lean aarch64 root used to run the arm runtime path under qemu user-mode
# emulation (correctness only, never timing). Idempotent; run as root.
#   SYSROOT: ${AYCI_ARM_SYSROOT:-<repo>/.arm-sysroot}
# Steps (see shared arm.md): apt tools -> arm64 Debian userland unpacked without running
# anything emulated -> aarch64 wheels installed by the host's pip --target -> an arm
# /proc/cpuinfo (ONNX Runtime segfaults reading the host's x86 one).
# AYCI_ARM_TORCH=0 skips torch's aarch64 wheel (used for `base` on arm).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SYSROOT="${AYCI_ARM_SYSROOT:-$REPO/.arm-sysroot}"
PYTHON="${AYCI_PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"
WITH_TORCH="${AYCI_ARM_TORCH:-1}"
TORCH_VERSION="2.9.1"

need=()
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
# The cross linker needs the aarch64 C runtime objects (crti.o) to link a shared library.
[ -f /usr/aarch64-linux-gnu/lib/crti.o ] || need+=(libc6-dev-arm64-cross)
if [ ${#need[@]} -gt 0 ]; then
    echo "arm-sysroot: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ ! -x "$SYSROOT/usr/bin/python3" ]; then
    mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    mirror="${mirror:-http://deb.debian.org/debian}"
    echo "arm-sysroot: unpacking arm64 bookworm into $SYSROOT from $mirror"
    rm -rf "$SYSROOT"
    mkdir -p "$(dirname "$SYSROOT")"
    mmdebstrap --quiet --arch=arm64 --variant=extract --mode=root \
        --include=python3,libpython3.11-stdlib,libstdc++6,libgcc-s1 \
        bookworm "$SYSROOT" "$mirror"
fi

mkdir -p "$SYSROOT/proc"
cp "$REPO/scripts/cpuinfo-neoverse-n1.txt" "$SYSROOT/proc/cpuinfo"

SITE="$SYSROOT/opt/site"
pip_arm() {
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-warn-conflicts \
        --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 \
        --platform manylinux_2_17_aarch64 --python-version 3.11 --implementation cp --abi cp311 \
        --only-binary=:all: --target "$SITE" --upgrade "$@"
}
stamp="$SITE/.ayci-wheels-v2"
if [ ! -f "$stamp" ]; then
    echo "arm-sysroot: installing aarch64 wheels into $SITE"
    mkdir -p "$SITE"
    # pydantic: engines/__init__.py imports schemas.combos, which needs it.
    pip_arm "numpy<2.5" "onnxruntime==1.31.1" apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1 \
        "pydantic==2.13.4" psutil
    touch "$stamp"
fi
torch_stamp="$SITE/.ayci-torch-$TORCH_VERSION"
if [ "$WITH_TORCH" = "1" ] && [ ! -f "$torch_stamp" ]; then
    echo "arm-sysroot: installing torch $TORCH_VERSION (aarch64 CPU wheel) for base on arm"
    # --no-deps: pip evaluates the wheel's markers for the host (x86_64) and would fetch
    # torch's CUDA packages, which the aarch64 CPU wheel does not use. Its pure deps follow.
    if pip_arm --no-deps "torch==$TORCH_VERSION" && \
        pip_arm filelock "typing-extensions>=4.10.0" "sympy>=1.13.3" "networkx>=2.5.1" jinja2 "fsspec>=0.8.5"; then
        touch "$torch_stamp"
    else
        echo "arm-sysroot: torch $TORCH_VERSION aarch64 wheel not installable; base on arm falls back to ONNX" >&2
    fi
fi
echo "arm-sysroot: ready at $SYSROOT"
