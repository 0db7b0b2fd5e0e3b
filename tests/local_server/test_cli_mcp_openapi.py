"""`pyramind openapi` prints the document the local server serves; `pyramind mcp` is a command (driven over
stdio by tests/server/test_mcp.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from typer.testing import CliRunner

from pyramind.local_server.cli import app
from pyramind.local_server.main import local_settings
from pyramind.models.settings import Settings
from tests.server.test_gpt_actions import served


def test_openapi_command_prints_the_served_document(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["openapi", "--out", str(tmp_path / "openapi.yaml")])
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load((tmp_path / "openapi.yaml").read_text())
    live, _ = asyncio.run(served(local_settings(Settings(_env_file=None))))  # type: ignore[call-arg]
    assert printed == live and "security" not in printed


def test_mcp_command_is_listed() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and "mcp" in result.output
