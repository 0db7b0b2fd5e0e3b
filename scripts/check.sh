#!/usr/bin/env bash
# Lint and type-check the project as installed: ruff over the tree, mypy over the `pyramind` package, bench/ and
# tests/. The repository's top-level folders are `pyramind`'s subpackages (pyproject.toml, package-dir), a
# mapping mypy cannot read from the editable install, so a tree of links under build/typecheck gives it the
# import names the code uses (`pyramind.server` -> server/, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
py=".venv/bin/python"
shadow="build/typecheck/pyramind"
rm -rf build/typecheck && mkdir -p "$shadow"
for d in models services datastore server local_server; do ln -s "$PWD/$d" "$shadow/$d"; done
"$py" -m ruff check .
MYPYPATH=build/typecheck "$py" -m mypy -p pyramind -p bench -p tests
