"""Provider fixtures: every store test can run against local (SQLite), postgres (a real PostgreSQL 16 started
here) and pinecone (the needledb emulator started here). A service starts on first use, once per session.

When a service cannot start, its provider's tests fail with the reason under CI (env CI=true) and are skipped
elsewhere (a developer machine without the wheels).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from loopback.servers import Needle, Postgres
from models.settings import Settings
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from tests.support.settings import make_settings
from tests.support.stores import PROVIDERS, unavailable


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


@pytest.fixture(params=PROVIDERS)
def provider_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings of a fresh, empty store of the parametrised provider (a new SQLite file, a new PostgreSQL
    database, or the shared needledb index, where every test uses its own namespaces)."""
    name = request.param
    if name == "local":
        yield make_settings(tmp_path, datastore="local")
    elif name == "postgres":
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
        memory = open_memory(settings, embedder_ or embedder, ExtractiveSummariser())  # type: ignore[arg-type]
        opened.append(memory)
        return memory

    yield _open
    for memory in opened:
        memory.close()


@pytest.fixture
def memory(open_store: Callable[..., Memory]) -> Memory:
    """An opened store of the parametrised provider with the real MiniLM embedder and extractive summariser."""
    return open_store()


@pytest.fixture
def ns() -> str:
    """A namespace no other test uses (the needledb index is shared by the session)."""
    return f"t-{uuid.uuid4().hex[:10]}"
