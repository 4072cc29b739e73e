#!/usr/bin/env bash
# Sets up everything the tests need (venv, LocalStack, the aarch64 emulation root, Chromium),
# checks format and lint, starts LocalStack, runs the whole test suite, and stops LocalStack again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
# Format and lint (ruff.toml: lines of at most 120 characters, the rule set and why): a finding
# fails the build before any test, as a broken layer does.
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/lint-imports  # the layers (.importlinter): a broken layer fails the build before any test
scripts/system-packages.sh
scripts/arm-sysroot.sh  # the aarch64 root arm combinations run in, under qemu
scripts/localstack.sh install
scripts/localstack.sh start
trap 'scripts/localstack.sh stop || true' EXIT
# Every piece of the machine a test needs is required here: where one is missing the test fails
# instead of skipping (tests/conftest.py: skip_unless_required).
export AYCI_REQUIRE_LOCALSTACK=1
export AYCI_REQUIRE_ARM=1
export AYCI_REQUIRE_CGROUPS=1  # measurements confined by real cgroups (root on the CI machine)
export AYCI_REQUIRE_CHROMIUM=1  # the web page tests (scripts/system-packages.sh installs it)
export AYCI_REQUIRE_TRANSFORMERS=1  # requirements-dev.txt
export AYCI_REQUIRE_TVM=1  # requirements.txt
# a measurement disturbed by the suite's own work (LocalStack, the services) is measured again this soon, not 90 s on
export AYCI_DISTURBED_RETRY_S=5
.venv/bin/python -m pytest "$@"
