#!/usr/bin/env bash
# Sets up Pyramind in .venv. No PyTorch unless asked for: the default embedder runs on ONNX Runtime.
# Usage: [PYTHON=python3.12] bash scripts/setup.sh [extras]
#   bash scripts/setup.sh             the server (offline default: local embedder, SQLite)
#   bash scripts/setup.sh dev         + the test tools
#   bash scripts/setup.sh openai,ann  + the OpenAI client, + faiss for namespaces of 50k+ nodes (see the README)
#   bash scripts/setup.sh torch       + PyTorch's CPU build and sentence-transformers (EMBEDDER=sentence-transformers)
# PYTHON picks the interpreter (default python3); Pyramind needs Python 3.11 or 3.12.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"

# the Python version first, before anything is installed
if ! command -v "$python" >/dev/null 2>&1; then
  echo "setup.sh: no Python interpreter '$python'; Pyramind needs Python 3.11 or 3.12 (set PYTHON=/path/to/python3.12)" >&2
  exit 1
fi
version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
case "$version" in
  3.11 | 3.12) echo "setup.sh: Python $version ($(command -v "$python")), supported (3.11-3.12)" ;;
  *)
    echo "setup.sh: $python is Python $version; Pyramind needs Python 3.11 or 3.12 (set PYTHON=/path/to/python3.12)" >&2
    exit 1
    ;;
esac

"$python" -m venv .venv
if [[ ",$extras," == *",torch,"* ]]; then
  # PyTorch's CPU build first, from its CPU index: with torch installed, pip pulls no CUDA wheels for the extra.
  .venv/bin/python -m pip install --quiet torch --index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
fi
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
