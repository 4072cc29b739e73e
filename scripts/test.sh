#!/usr/bin/env bash
# Sets up everything the tests need (venv, LocalStack, the aarch64 emulation root, Chromium),
# starts LocalStack, runs the whole test suite, and stops LocalStack again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
.venv/bin/lint-imports  # the layers (.importlinter): a broken layer fails the build before any test
scripts/system-packages.sh
scripts/arm-sysroot.sh  # the aarch64 root arm combinations run in, under qemu
scripts/localstack.sh install
scripts/localstack.sh start
trap 'scripts/localstack.sh stop || true' EXIT
export AYCI_REQUIRE_LOCALSTACK=1
export AYCI_REQUIRE_ARM=1
export AYCI_REQUIRE_CGROUPS=1  # measurements confined by real cgroups (root on the CI machine)
.venv/bin/python -m pytest "$@"
