"""Fixtures of the trust tests: real server processes that are always killed at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.trust.harness import ServerProcess


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """A factory of (unstarted) ServerProcess over `tmp_path/pyramind.db`; every one made is killed at teardown,
    whether the test passed or not."""
    made: list[ServerProcess] = []

    def make(env: dict[str, str] | None = None) -> ServerProcess:
        server = ServerProcess(tmp_path / "pyramind.db", tmp_path / "server.log", env)
        made.append(server)
        return server

    yield make
    for server in made:
        server.kill()
