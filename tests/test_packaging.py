"""The installed package: one import name, `pyramind`, holding every folder of the project's code.

The repository's top-level folders (models, services, datastore, server, local_server) are the subpackages of
`pyramind` (pyproject.toml maps the name onto the repository). A folder missing from the package list would be
absent from a user's wheel although every test here passes through the editable install; an import by the bare
folder name would load a second copy of a module (two `Settings` classes, two caches) wherever the repository
happens to be on sys.path.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = ("models", "services", "datastore", "server", "local_server")
BARE_IMPORT = re.compile(rf"^\s*(from|import) ({'|'.join(CODE)})(\.|\s|$)", re.M)


def test_every_code_folder_is_a_listed_subpackage() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        "pyramind." + ".".join(init.parent.relative_to(ROOT).parts)
        for top in CODE
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk, "no package folders found"
    assert on_disk <= listed, f"folders with an __init__.py missing from [tool.setuptools] packages: {on_disk - listed}"
    assert listed - {"pyramind"} <= on_disk, f"listed packages with no folder: {listed - {'pyramind'} - on_disk}"


def test_no_module_imports_a_folder_by_its_bare_name() -> None:
    offenders = []
    for top in (*CODE, "bench", "tests"):
        for path in (ROOT / top).rglob("*.py"):
            for m in BARE_IMPORT.finditer(path.read_text()):
                offenders.append(f"{path.relative_to(ROOT)}: {m.group(0).strip()}")
    assert not offenders, "import these through `pyramind.`: " + "; ".join(offenders[:10])


def test_the_bare_names_are_not_importable_as_the_project(tmp_path: Path) -> None:
    """From outside the repository, `import server` must not find this project (it is `pyramind.server`)."""
    import subprocess
    import sys

    code = ("import importlib.util as u; "
            "print(u.find_spec('server') is None, u.find_spec('pyramind.server') is not None)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
