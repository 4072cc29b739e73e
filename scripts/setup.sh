#!/usr/bin/env bash
# Sets up the project's Python 3.11 environment in .venv (idempotent). A failed install fails
# this script and leaves the stamp alone, so the next run installs again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python="${AYCI_PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  "$python" -m venv .venv
fi
# pip's noise ("... is ignored") filtered out; pipefail keeps pip's exit status, and the filter
# itself succeeds when it had nothing to print (grep exits 1 when no line is left).
quiet() { grep -v "is ignored" || [[ $? == 1 ]]; }
stamp=.venv/.requirements.sha
want=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  rm -f "$stamp"
  .venv/bin/pip install -q --upgrade pip 2>&1 | quiet
  # torch==2.13.0 (CPU) is pinned and comes from this machine's local wheel store
  .venv/bin/pip install -q -r requirements-dev.txt 2>&1 | quiet
  .venv/bin/python -c "import torch, onnxruntime, tvm, pydantic, structlog, transformers, playwright"
  echo "$want" > "$stamp"
fi
