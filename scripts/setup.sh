#!/usr/bin/env bash
# Sets up Pyramind in .venv: PyTorch's CPU build first (so nothing pulls CUDA wheels), then the project.
# Usage: bash scripts/setup.sh [extras]   e.g. bash scripts/setup.sh dev
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python3 -m venv .venv
# torch 2.13.0 first: on the project's machines pip finds its CPU wheel locally; with it installed, the
# project's "torch>=2.1" is already satisfied and no CUDA wheels are pulled.
.venv/bin/python -m pip install --quiet "torch==2.13.0"
if [ -n "$extras" ]; then
  .venv/bin/python -m pip install --quiet -e ".[$extras]"
else
  .venv/bin/python -m pip install --quiet -e .
fi
echo "Pyramind is installed in .venv (run .venv/bin/pyramind --help)"
