"""The installed packages: the repository's top-level folders under their own names, as the design card lays them out.

`models`, `services`, `datastore`, `server` and `local_server` are installed packages (pyproject.toml, poetry-core),
so `from datastore.memory import Memory` means the same thing to the interpreter, mypy, an IDE and an import graph,
from the repository root with no set-up. The wheel a user installs must hold exactly the modules the editable install
serves from this tree (a folder missing from it would pass every test here and fail on a user's machine), and no
module may reach the code through a second name (`pyramind.server`), which would load a second copy of a module (two
`Settings` classes, two caches).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE = ("models", "services", "datastore", "server", "local_server")
SECOND_NAME = re.compile(r"^\s*(from|import) pyramind\b", re.M)


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The files of the wheel poetry-core builds from this tree (the build a `pip install .` runs)."""
    from poetry.core.masonry.api import build_wheel

    out = tmp_path_factory.mktemp("wheel")
    cwd = Path.cwd()
    try:
        os.chdir(ROOT)
        name = build_wheel(str(out))
    finally:
        os.chdir(cwd)
    with zipfile.ZipFile(out / name) as wheel:
        return {n for n in wheel.namelist() if ".dist-info/" not in n}


def test_the_wheel_holds_every_module_and_file_of_the_code_folders(wheel_files: set[str]) -> None:
    in_tree = {f for f in tracked_files() if f.split("/")[0] in CODE}
    assert in_tree, "no tracked files under the code folders"
    assert in_tree - wheel_files == set(), "in the tree but not in the wheel"
    extra = {f for f in wheel_files - in_tree if not f.startswith(".well-known/")}
    assert extra == set(), "in the wheel but not tracked in the tree"


def test_the_wheel_holds_the_well_known_files(wheel_files: set[str]) -> None:
    """server/wellknown.py reads `.well-known/` beside the packages, in the tree and in site-packages alike."""
    assert {f for f in tracked_files() if f.startswith(".well-known/")} <= wheel_files


def test_no_module_imports_through_a_second_name() -> None:
    offenders = []
    for top in (*CODE, "bench", "tests"):
        for path in (ROOT / top).rglob("*.py"):
            for m in SECOND_NAME.finditer(path.read_text()):
                offenders.append(f"{path.relative_to(ROOT)}: {m.group(0).strip()}")
    assert not offenders, "import the packages by their own names: " + "; ".join(offenders[:10])


def test_the_installed_packages_are_this_tree(tmp_path: Path) -> None:
    """From outside the repository the editable install finds these folders, and `pyramind` is not a package."""
    code = "import importlib.util as u; " + "; ".join(
        [f"print(u.find_spec({name!r}).origin)" for name in CODE] + ["print(u.find_spec('pyramind'))"]
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    *origins, pyramind = out.stdout.split("\n")[:-1]
    assert origins == [str(ROOT / name / "__init__.py") for name in CODE]
    assert pyramind == "None"
