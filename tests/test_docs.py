"""Docs kept honest: every setting is in .env.example and the README table; the README's test command is CI's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from models.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
KEYS = [name.upper() for name in Settings.model_fields]


@pytest.mark.parametrize("key", KEYS)
def test_every_setting_is_in_env_example(key: str) -> None:
    assert re.search(rf"^#? ?{key}=", (ROOT / ".env.example").read_text(), re.M), key


@pytest.mark.parametrize("key", KEYS)
def test_every_setting_is_in_the_readme_table(key: str) -> None:
    assert f"| `{key}` |" in (ROOT / "README.md").read_text(), key


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = "bash scripts/setup.sh dev && .venv/bin/python -m pytest"
    assert command in readme and command in ci
    assert "bash scripts/check.sh" in ci and "bash scripts/check.sh" in readme  # ruff and mypy, documented


def test_bad_setting_fails_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        Settings(_env_file=None, chunk_size="big")


def test_secrets_are_masked() -> None:
    s = Settings(_env_file=None, bearer_token="hunter2", openai_api_key="sk-secret")
    assert "hunter2" not in repr(s) and "sk-secret" not in repr(s)


def test_the_readme_opens_with_where_the_memory_is_kept() -> None:
    """A new user ran `serve` in another folder and found an empty memory there."""
    opening = "\n".join((ROOT / "README.md").read_text().splitlines()[:12])
    for words in ("`pyramind.db`", "LOCAL_DB_PATH", "another folder"):
        assert words in opening, words


def test_the_readme_says_how_to_run_postgresql_locally() -> None:
    """A new user found DATASTORE=postgres documented but not how to get a PostgreSQL with pgvector to point it at.
    The section names the packages and the pgserver way; the binaries' folder its first command computes holds
    the programs the next lines run."""
    readme = (ROOT / "README.md").read_text()
    assert "**PostgreSQL on your own machine.**" in readme
    section = readme.split("**PostgreSQL on your own machine.**")[1].split("**Pinecone**")[0]
    assert "pgvector" in section and "apt-get install postgresql" in section
    line = next(ln for ln in section.splitlines() if ln.startswith('PG="$(.venv/bin/python -c '))
    code = line.split("-c '", 1)[1].rsplit("'", 1)[0]
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    used = set(re.findall(r'"\$PG/(\w+)"', section))
    assert used >= {"initdb", "pg_ctl", "createdb"}, used
    for program in used:
        assert (Path(found) / program).is_file(), (found, program)
    assert "POSTGRES_URL=postgresql://" in section and "DATASTORE=postgres" in section
