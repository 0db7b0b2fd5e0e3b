"""The context block's provider hooks on every provider (local, pgvector, pinecone): neighbours, roots, core."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pyramind.datastore.datastore import DataStore
from pyramind.models.api import RememberRequest
from pyramind.models.context import ContextRequest
from pyramind.models.core import CorePutRequest
from pyramind.services.errors import UnsupportedError
from tests.datastore.test_context import long_conversation


def test_neighbours_roots_and_context_on_every_provider(ds: DataStore, ns: str) -> None:
    ds.remember_sync(ns, RememberRequest(conversation_id="c1", messages=long_conversation(12)))
    chunks = sorted((n for n in ds._source_nodes(ns, "c1") if n.level == 1), key=lambda n: n.position)
    before, after = ds.neighbours(ns, chunks[2], 1)
    assert [n.id for n in before + after] == [chunks[1].id, chunks[3].id]
    roots = ds._roots(ns, "c1", 10)
    assert roots and all(n.parent_id is None for n in roots)
    assert [(n.level, n.position) for n in roots] == sorted(((n.level, n.position) for n in roots), reverse=True)
    res = ds.context_sync(ns, ContextRequest(conversation_id="c1", query="pottery in Kyoto", budget_tokens=900,
                                             now=datetime(2024, 6, 1, tzinfo=UTC)))
    assert res.tokens_used <= 900 and res.sections[1].items and res.sections[2].items


def test_core_memory_where_the_provider_stores_it(ds: DataStore, ns: str) -> None:
    if ds.name == "pinecone":  # no table to keep core entries in: a clear refusal, the context still works
        with pytest.raises(UnsupportedError):
            ds.core_put_sync(ns, CorePutRequest(key="name", value="Ann"))
        assert ds.core_entries(ns) == []
        return
    ds.core_put_sync(ns, CorePutRequest(key="name", value="Ann", importance=90))
    ds.core_put_sync(ns, CorePutRequest(key="name", value="Ann Lee", importance=90))  # replaces
    ds.core_put_sync(ns, CorePutRequest(key="diet", value="vegetarian", ttl_seconds=3600))
    assert [(e.key, e.value) for e in ds.core_list_sync(ns).entries] == [("name", "Ann Lee"), ("diet", "vegetarian")]
    assert ds.core_list_sync(ns).entries[1].expires_at is not None
    assert ds.core_list_sync(ns + "-other").entries == []
    assert ds.core_delete_sync(ns, "diet").deleted
    assert [e.key for e in ds.core_list_sync(ns).entries] == ["name"]
