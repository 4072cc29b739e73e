#!/usr/bin/env bash
# Debian packages the tests use (as root; skipped when already present):
# chromium for the web page tests (tests/e2e/test_web_page.py: Playwright drives /usr/bin/chromium
# over its DevTools protocol, so no chromium-driver), qemu, mmdebstrap and the aarch64 compiler for
# the arm combinations (scripts/arm-sysroot.sh).
set -euo pipefail
need=()
[[ -x /usr/bin/chromium ]] || need+=(chromium)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
