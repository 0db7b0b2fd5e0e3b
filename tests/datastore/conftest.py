"""Provider fixtures: every store test can run against local (SQLite), pgvector (a real PostgreSQL 16 started
here) and pinecone (the needledb emulator started here). A service starts on first use, once per session.

When a service cannot start, its provider's tests fail with the reason under CI (env CI=true) and are skipped
elsewhere (a developer machine without the wheels).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.servers import Needle, Postgres
from datastore.factory import open_memory
from datastore.memory import Memory
from models.settings import Settings
from services.embedding import LocalEmbedder
from services.errors import EmbeddingError
from services.summarising import ExtractiveSummariser
from tests.conftest import make_settings

PROVIDERS = ["local", "pgvector", "pinecone"]
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Fail (in CI) or skip (elsewhere) the current test: its service could not start."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: provider services must start)", pytrace=False)
    pytest.skip(reason)


def _service(factory: Callable[[], Postgres | Needle], what: str) -> Iterator[Postgres | Needle | str]:
    try:
        server = factory()
    except Exception as exc:  # any failure to start is reported by each test that needs the service
        yield f"{what} could not start: {type(exc).__name__}: {exc}"
        return
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Postgres | str]:
    yield from _service(lambda: Postgres().start(), "PostgreSQL (pgserver wheel)")  # type: ignore[misc]


@pytest.fixture(scope="session")
def needle_server() -> Iterator[Needle | str]:
    yield from _service(lambda: Needle().start(), "needledb (Pinecone emulator)")  # type: ignore[misc]


class OtherEmbedder:
    """A deterministic 8-d embedder (hashed character trigrams): another model and dimension than MiniLM's."""

    model_name = "trigram-hash-8"
    dimension = 8

    def close(self) -> None:
        """Nothing to release."""

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, t in enumerate(texts):
            for j in range(max(1, len(t) - 2)):
                out[i, hash(t[j : j + 3]) % self.dimension] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


class FailingEmbedder:
    """The real embedder made to fail on every call (an injected fault, like a crashed model server)."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.model_name, self.dimension = inner.model_name, inner.dimension

    def close(self) -> None:
        """Nothing to release."""

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        raise EmbeddingError("injected failure")


@pytest.fixture(params=PROVIDERS)
def provider_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings of a fresh, empty store of the parametrised provider (a new SQLite file, a new PostgreSQL
    database, or the shared needledb index, where every test uses its own namespaces)."""
    name = request.param
    if name == "local":
        yield make_settings(tmp_path, datastore="local")
    elif name == "pgvector":
        server = request.getfixturevalue("pg_server")
        if isinstance(server, str):
            unavailable(server)
        url = server.create_database()
        yield make_settings(tmp_path, datastore="postgres", postgres_url=url, pg_pool_size=3)
        server.drop_database(url)
    else:
        server = request.getfixturevalue("needle_server")
        if isinstance(server, str):
            unavailable(server)
        yield make_settings(tmp_path, datastore="pinecone", pinecone_api_key="x", pinecone_host=server.host)


@pytest.fixture
def open_store(provider_settings: Settings, embedder: LocalEmbedder) -> Iterator[Callable[..., Memory]]:
    """open_store(embedder=None, **setting overrides) -> an opened store on the test's backend (closed at the
    end); through the factory, so its provider branch is exercised too."""
    opened: list[Memory] = []

    def _open(embedder_: object | None = None, **overrides: object) -> Memory:
        settings = provider_settings.model_copy(update=overrides)
        ds = open_memory(settings, embedder_ or embedder, ExtractiveSummariser())  # type: ignore[arg-type]
        opened.append(ds)
        return ds

    yield _open
    for ds in opened:
        ds.close()


@pytest.fixture
def ds(open_store: Callable[..., Memory]) -> Memory:
    """An opened store of the parametrised provider with the real MiniLM embedder and extractive summariser."""
    return open_store()


@pytest.fixture
def ns() -> str:
    """A namespace no other test uses (the needledb index is shared by the session)."""
    return f"t-{uuid.uuid4().hex[:10]}"
