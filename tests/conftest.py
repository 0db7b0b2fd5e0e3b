"""Shared fixtures: the real local embedder (loaded once per session), real SQLite stores in tmp_path, the app."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from datastore.providers.local import LocalStorage
from datastore.storage import MarkTable, TextSearch
from models.api import Message
from models.settings import Settings
from services import importers
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser

TOKEN = "test-token"
# LoCoMo (see README, "Tests"): `shared/bench/data/locomo_dev.json` beside the checkout, or PYRAMIND_LOCOMO
LOCOMO = Path(
    os.environ.get("PYRAMIND_LOCOMO")
    or Path(__file__).resolve().parents[2] / "shared" / "bench" / "data" / "locomo_dev.json"
)


def local_storage(memory: Memory) -> LocalStorage:
    """The memory's storage as the local SQLite provider (for tests that read its file, caches or connections)."""
    assert isinstance(memory.storage, LocalStorage), memory.storage.name
    return memory.storage


def text_search(memory: Memory) -> TextSearch:
    """The storage's full-text search (every provider of these tests but Pinecone offers one)."""
    assert memory.storage.text is not None, f"the {memory.storage.name} store has no text search"
    return memory.storage.text


def mark_table(memory: Memory) -> MarkTable:
    """The storage's table of visits and pins (every provider keeps one)."""
    assert memory.storage.marks is not None, f"the {memory.storage.name} store keeps no marks"
    return memory.storage.marks


def recompose(
    memory: Memory,
    *,
    settings: Settings | None = None,
    embedder: object | None = None,
    summariser: object | None = None,
    detector: object | None = None,
) -> Memory:
    """A second Memory over `memory`'s storage whose services read other `settings` (limits), or embed,
    summarise or detect instructions with another `embedder` / `summariser` / `detector` (an injected fault, or
    one that acts mid-call); close only the first."""
    return Memory(
        settings or memory.settings,
        memory.storage,
        embedder or memory.embedder,  # type: ignore[arg-type]
        summariser or memory.summariser,  # type: ignore[arg-type]
        detector or memory.detector,  # type: ignore[arg-type]
    )


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    """Settings for a test: a fresh SQLite file, a known bearer token, nothing read from .env."""
    values: dict[str, object] = {"local_db_path": tmp_path / "pyramind.db", "bearer_token": TOKEN}
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]


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


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="session")
def locomo() -> list[dict]:
    if not LOCOMO.exists():
        pytest.skip(f"benchmark data not found at {LOCOMO}")
    return json.loads(LOCOMO.read_text())


def locomo_sessions(sample: dict, limit: int | None = None) -> list[list[Message]]:
    """The sample's sessions in time order as Message lists (id = dia_id, time = the session's date)."""
    return [batch.messages for batch in importers.locomo_sessions(sample)][:limit]
