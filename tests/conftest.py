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
def store(settings: Settings, embedder: LocalEmbedder) -> Iterator[Memory]:
    ds = open_memory(settings, embedder, ExtractiveSummariser())
    yield ds
    ds.close()


@pytest.fixture
async def client(settings: Settings, store: Memory) -> AsyncIterator[object]:
    from server.app import create_app

    app = create_app(settings, store)
    async with app.test_app() as test_app:
        yield test_app.test_client()


@pytest.fixture(scope="session")
def locomo() -> list[dict]:
    if not LOCOMO.exists():
        pytest.skip(f"benchmark data not found at {LOCOMO}")
    return json.loads(LOCOMO.read_text())
