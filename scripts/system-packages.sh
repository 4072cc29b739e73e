#!/usr/bin/env bash
# Debian packages the tests use (as root; skipped when already present).
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
