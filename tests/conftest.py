"""Shared fixtures: the real local embedder (loaded once per session), real SQLite stores in tmp_path, the app."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from models.settings import Settings
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from tests.support.settings import LOCOMO, make_settings


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(threads=1, workers=2)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def local_memory(settings: Settings, embedder: LocalEmbedder) -> Iterator[Memory]:
    """A Memory over a fresh SQLite store in tmp_path, the real MiniLM embedder and the extractive summariser.
    Under tests/datastore, where `memory` is the one parametrised over the providers, this is the local one."""
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    yield memory
    memory.close()


@pytest.fixture
def memory(local_memory: Memory) -> Memory:
    """The local Memory (`local_memory`); tests/datastore/conftest.py overrides it with one per provider."""
    return local_memory


@pytest.fixture
async def client(settings: Settings, local_memory: Memory) -> AsyncIterator[object]:
    from server.app import create_app

    app = create_app(settings, local_memory)
    async with app.test_app() as test_app:
        yield test_app.test_client()


@pytest.fixture(scope="session")
def locomo() -> list[dict]:
    if not LOCOMO.exists():
        pytest.skip(f"benchmark data not found at {LOCOMO}")
    return json.loads(LOCOMO.read_text())


SLOW_MODULES = ("tests/trust/", "tests/local_server/test_cli_serve.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by what it needs (markers registered in pyproject.toml): `provider` when it runs on
    PostgreSQL or Pinecone, `browser` under tests/ui, `dataset` when it reads LoCoMo, `slow` for the modules that
    start server processes or run a benchmark."""
    for item in items:
        path = item.path.relative_to(item.config.rootpath).as_posix()
        fixtures = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        provider = callspec.params.get("provider_settings") if callspec is not None else None
        if provider in ("postgres", "pinecone") or fixtures & {"pg_server", "needle_server"}:
            item.add_marker(pytest.mark.provider)
        if path.startswith("tests/ui/"):
            item.add_marker(pytest.mark.browser)
        if "locomo" in fixtures:
            item.add_marker(pytest.mark.dataset)
        if path.startswith(SLOW_MODULES):
            item.add_marker(pytest.mark.slow)
