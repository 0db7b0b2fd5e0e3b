"""`pyramind openapi` prints the document the local server serves; `pyramind mcp` is a command (driven over
stdio by tests/server/test_mcp.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from typer.testing import CliRunner

from local_server.cli import app
from local_server.main import local_settings
from models.settings import Settings
from tests.server.test_gpt_actions import served


def test_openapi_command_prints_the_served_document(tmp_path: Path) -> None:
    """What `pyramind serve` serves, bearer security scheme included (it used to print the local server's, which
    declares no auth, so a GPT imported a document without the scheme); `--local`: the local server's."""
    env = {"PUBLIC_URL": "https://memory.example.com"}  # no BEARER_TOKEN: the document needs none
    result = CliRunner().invoke(app, ["openapi", "--out", str(tmp_path / "openapi.yaml")], env=env)
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load((tmp_path / "openapi.yaml").read_text())
    settings = Settings(_env_file=None, public_url=env["PUBLIC_URL"], bearer_token="x")
    live, _ = asyncio.run(served(settings))
    assert printed == live
    assert printed["components"]["securitySchemes"] == {"bearerAuth": {"type": "http", "scheme": "bearer"}}
    assert printed["security"] == [{"bearerAuth": []}]
    result = CliRunner().invoke(app, ["openapi", "--local", "--out", str(tmp_path / "local.yaml")])
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load((tmp_path / "local.yaml").read_text())
    live, _ = asyncio.run(served(local_settings(Settings(_env_file=None))))
    assert printed == live and "security" not in printed


def test_mcp_command_is_listed() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and "mcp" in result.output
