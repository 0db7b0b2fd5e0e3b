"""A store's parts as a test needs them, the providers the contract suite runs on, and what a test does when a
provider's service cannot start."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, cast

import pytest

from datastore.memory import Memory
from datastore.providers.local import LocalStorage
from datastore.read.ranking import TextSearch
from datastore.storage import MarkTable, Storage
from models.settings import Settings
from services.clock import Clock

PROVIDERS = ["local", "postgres", "pinecone"]
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Fail (in CI) or skip (elsewhere) the current test: its service could not start."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: provider services must start)", pytrace=False)
    pytest.skip(reason)


def local_storage(memory: Memory) -> LocalStorage:
    """The memory's storage as the local SQLite provider (for tests that read its file, caches or connections)."""
    assert isinstance(memory.storage, LocalStorage), memory.storage.name
    return memory.storage


def text_search(memory: Memory) -> TextSearch:
    """The full-text search queries rank with (above the providers: the same on every provider)."""
    assert memory.search.text is not None
    return memory.search.text


def mark_table(memory: Memory) -> MarkTable:
    """The storage's table of visits and pins (every provider keeps one)."""
    assert memory.storage.marks is not None, f"the {memory.storage.name} store keeps no marks"
    return memory.storage.marks


CAPABILITIES = ("core", "marks", "instructions", "idempotency", "leases")  # Storage's optional tables


class CountedStorage:
    """A storage that counts the calls made to it and to its capabilities (`calls`: by method name, `core.entries`
    for a capability's), and passes each on to `inner`: what a test reads round trips from (every call of a
    provider with round trips makes at least one)."""

    def __init__(self, inner: Any, calls: Counter[str] | None = None, prefix: str = "") -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter() if calls is None else calls
        self.prefix = prefix

    def __getattr__(self, name: str) -> Any:
        got = getattr(self.inner, name)
        if not self.prefix and name in CAPABILITIES and got is not None:
            return CountedStorage(got, self.calls, f"{name}.")
        if not callable(got):
            return got

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[self.prefix + name] += 1
            return got(*args, **kwargs)

        return counted


def recompose(
    memory: Memory,
    *,
    storage: Storage | CountedStorage | None = None,
    settings: Settings | None = None,
    embedder: object | None = None,
    summariser: object | None = None,
    detector: object | None = None,
    clock: Clock | None = None,
) -> Memory:
    """A second Memory over `memory`'s storage whose services read other `settings` (limits), or embed,
    summarise or detect instructions with another `embedder` / `summariser` / `detector` (an injected fault, or
    one that acts mid-call), or read the time from another `clock`, or over another `storage` (a wrapper of its
    own: `CountedStorage`); close only the first."""
    return Memory(
        settings or memory.settings,
        cast(Storage, storage) if storage is not None else memory.storage,
        embedder or memory.embedder,  # type: ignore[arg-type]
        summariser or memory.summariser,  # type: ignore[arg-type]
        detector or memory.detector,  # type: ignore[arg-type]
        clock or memory.clock,
    )
