"""compose.yaml and .dockerignore, read as Docker reads them (no daemon needed: this runs with every test run).

compose.yaml cannot be run here (no registry serves pgvector/pgvector), so what would break it on a user's machine is
checked against the other files: Pyramind's environment is documented settings, its POSTGRES_URL names the db
service's user, database and password, the database lives on a named volume, the API is bound to loopback.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any

import yaml

from models.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {name.upper() for name in Settings.model_fields}


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "compose.yaml").read_text()))


def test_compose_runs_pyramind_on_the_db_service_with_documented_settings() -> None:
    services = compose()["services"]
    pyramind, db = services["pyramind"], services["db"]
    assert pyramind["build"] == "." and pyramind["env_file"] == ".env"
    env = pyramind["environment"]
    assert set(env) <= SETTINGS, "compose sets an undocumented variable"
    assert env["DATASTORE"] == "postgres"
    url = re.fullmatch(r"postgresql://(\w+):\$\{(\w+)[^}]*\}@(\w+):5432/(\w+)", env["POSTGRES_URL"])
    assert url is not None, env["POSTGRES_URL"]
    user, password_var, host, database = url.groups()
    assert host in services and host == "db"
    assert (user, database) == (db["environment"]["POSTGRES_USER"], db["environment"]["POSTGRES_DB"])
    assert db["environment"]["POSTGRES_PASSWORD"].startswith("${" + password_var)
    assert pyramind["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert all(str(port).startswith("127.0.0.1:") for port in pyramind["ports"]), "the API without TLS, public"


def test_compose_keeps_the_database_on_a_named_volume() -> None:
    doc = compose()
    db = doc["services"]["db"]
    assert db["image"] == "pgvector/pgvector:pg16"
    (mount,) = db["volumes"]
    name, target = mount.split(":")
    assert target == "/var/lib/postgresql/data" and name in doc["volumes"]


def ignored(path: str) -> bool:
    """Whether .dockerignore leaves `path` out of the build context (Docker's rules: the last matching line wins,
    a leading ! re-includes, a pattern also covers what is under a matching folder)."""
    result = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip("/").replace("**/", "")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p.rsplit("/", 1)[-1], pattern) for p in prefixes):
            result = not negate
    return result


def test_dockerignore_sends_the_package_and_never_a_secret_or_a_store() -> None:
    needed = [
        *("pyproject.toml", "README.md", ".well-known/logo.png", "server/app.py", "models/settings.py"),
        *("services/tokens.py", "datastore/memory.py", "local_server/cli.py", "wheels/pyramind-0.1.0-py3-none-any.whl"),
    ]
    assert [path for path in needed if ignored(path)] == []
    never = [
        *(".env", "pyramind.db", "data/pyramind.db-wal", ".venv/bin/python", ".git/HEAD", "bench/out/load.json"),
        *("tests/conftest.py", "server/__pycache__/app.cpython-311.pyc"),
    ]
    assert [path for path in never if not ignored(path)] == []
