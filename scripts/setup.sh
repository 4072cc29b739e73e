#!/usr/bin/env bash
# Sets up the project's Python 3.11 environment in .venv (idempotent).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python="${AYCI_PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  "$python" -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  .venv/bin/pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
  # torch==2.13.0 (CPU) is pinned and comes from this machine's local wheel store
  .venv/bin/pip install -q -r requirements-dev.txt 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import torch, onnxruntime, tvm, pydantic, structlog" 2>/dev/null
  echo "$want" > "$stamp"
fi
