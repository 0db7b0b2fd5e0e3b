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
# The browser tests (tests/ui) drive Debian's chromium headless; the dev extras install it when it is missing.
if [[ ",$extras," == *",dev,"* ]] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium is missing and this is not root: tests/ui will skip (and fail with CI=true);" \
      "install it with: sudo apt-get install chromium" >&2
  fi
fi
echo "Pyramind is installed in .venv (run .venv/bin/pyramind --help)"
