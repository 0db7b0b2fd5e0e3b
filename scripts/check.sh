#!/usr/bin/env bash
# Lint, format-check and type-check the project from the repository root, where every import resolves as it does
# installed: ruff over the tree, mypy over the packages, loopback/, bench/ and tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
py=".venv/bin/python"
"$py" -m ruff check .
"$py" -m ruff format --check .
"$py" -m mypy -p models -p services -p datastore -p server -p local_server -p loopback -p bench -p tests
