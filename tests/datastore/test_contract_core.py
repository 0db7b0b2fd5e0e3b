"""Core memory behaves the same on every provider (local, postgres, pinecone) through the Memory: scoped per
namespace and conversation, budgeted (overflow moves entries out to long-term documents), expiring, and stored
as written, long values included. Fixtures: tests/datastore/conftest.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from datastore.context.core import core_document_id
from datastore.memory import Memory
from models.api import DeleteRequest, Message, Query, QueryFilter, RememberRequest
from models.context import ContextRequest
from models.core import CoreEntry, CorePutRequest
from services.errors import InvalidRequestError, NotFoundError
from tests.support.clock import ManualClock
from tests.support.stores import CountedStorage, recompose


def test_core_overflow_moves_the_least_important_oldest_entries_to_long_term(
    open_store: Callable[..., Memory], ns: str
) -> None:
    memory = open_store(core_max_tokens=20)
    memory.core.put(ns, CorePutRequest(key="pet", value="a grey cat called Miso", importance=20))
    memory.core.put(ns, CorePutRequest(key="car", value="an old red Volvo", importance=20))
    memory.core.put(ns, CorePutRequest(key="name", value="Ann Lee", importance=90))
    res = memory.core.put(ns, CorePutRequest(key="job", value="nurse in Porto", importance=50))
    assert [e.key for e in res.moved_out] == ["pet"]  # least important, and the older of the two
    assert res.tokens_used <= 20 and [e.key for e in memory.core.list_entries(ns).entries] == ["name", "job", "car"]
    # moved out, still recallable: a document in long-term memory
    docs = QueryFilter(source_type="document")
    hits = memory.reader.query(ns, [Query(query="grey cat Miso", top_k=3, filter=docs)])
    assert hits.results[0].results[0].document_id == core_document_id("pet")
    assert "pet: a grey cat called Miso" in hits.results[0].results[0].text
    ctx = memory.context.assemble(ns, ContextRequest(query="what pet does Ann have?", min_score=0.0))
    core, *_, relevant, _ = ctx.sections
    assert "Miso" in relevant.items[0].text and "pet" not in {i.id for i in core.items}
    assert {i.id for i in core.items} == {"name", "job", "car"}
    # deleting the key removes it everywhere, the moved-out copy included
    assert memory.core.delete(ns, "pet").deleted_documents == 1
    hits = memory.reader.query(ns, [Query(query="grey cat Miso", top_k=3, filter=docs)])
    assert all("Miso" not in r.text for r in hits.results[0].results)
    with pytest.raises(NotFoundError):
        memory.core.delete(ns, "pet")


def test_core_value_over_the_budget_alone_is_refused_and_changes_nothing(
    open_store: Callable[..., Memory], ns: str
) -> None:
    memory = open_store(core_max_tokens=20)
    memory.core.put(ns, CorePutRequest(key="name", value="Ann"))
    with pytest.raises(InvalidRequestError) as err:
        memory.core.put(ns, CorePutRequest(key="bio", value="word " * 40))
    assert err.value.field == "value"
    assert [e.key for e in memory.core.list_entries(ns).entries] == ["name"]


def test_core_entries_expire_and_are_scoped(memory: Memory, ns: str) -> None:
    clock = ManualClock()
    memory = recompose(memory, clock=clock)
    other = ns + "-other"
    memory.writer.remember(ns, RememberRequest(conversation_id="c1", messages=[Message(speaker="Ann", content="hi")]))
    memory.core.put(ns, CorePutRequest(key="mood", value="tired today", ttl_seconds=1))
    clock.advance(0.1)
    memory.core.put(ns, CorePutRequest(key="topic", value="planning the move", conversation_id="c1"))
    clock.advance(0.1)
    memory.core.put(ns, CorePutRequest(key="name", value="Ann"))  # the newest of equal importance comes first
    ctx = memory.context.assemble(ns, ContextRequest(conversation_id="c1"))
    assert {i.id for i in ctx.sections[0].items} == {"mood", "topic", "name"}
    assert [e.key for e in memory.core.list_entries(ns).entries] == ["name", "mood"]  # the namespace's own
    assert [e.key for e in memory.core.list_entries(ns, "c1").entries] == ["topic"]
    clock.advance(1.0)  # mood's ttl of 1 s is over
    ctx = memory.context.assemble(ns, ContextRequest(conversation_id="c1"))
    assert {i.id for i in ctx.sections[0].items} == {"topic", "name"}
    assert "tired" not in ctx.context
    assert [e.key for e in memory.core.list_entries(ns).entries] == ["name"]
    # another namespace sees none of it
    assert memory.core.list_entries(other).entries == [] and memory.core.entries(other, "c1") == []
    with pytest.raises(NotFoundError):
        memory.core.delete(other, "name")
    # a conversation not yet remembered is an empty one: its entry waits for it, in its own namespace only
    memory.core.put(other, CorePutRequest(key="x", value="y", conversation_id="c1"))
    assert [e.key for e in memory.core.list_entries(other, "c1").entries] == ["x"]
    assert [e.key for e in memory.core.list_entries(ns, "c1").entries] == ["topic"]
    # forgetting a namespace forgets its core memory
    memory.deleter.delete(other, DeleteRequest(delete_all=True))
    assert memory.core.list_entries(other, "c1").entries == []


def test_the_core_table_keeps_entries_as_written_long_values_too(memory: Memory, ns: str) -> None:
    """What migrate and import write: any entry, exactly (times to the microsecond, a value past Pinecone's
    40 KB metadata limit), replaced by key, deleted by key with the count of entries deleted."""
    table = memory.storage.core
    assert table is not None
    at = datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)
    long = 'Ünïcödé \x01"quoted" ' * 2500  # ~50 KB of JSON-escaped metadata
    entries = [
        CoreEntry(key="bio", value=long, importance=70, created_at=at, updated_at=at, tokens=9000),
        CoreEntry(
            key="plan/è",
            value="move to Porto",
            importance=0,
            conversation_id="c 1",
            created_at=at,
            updated_at=at + timedelta(seconds=1),
            expires_at=at + timedelta(days=3650),
            tokens=5,
        ),
    ]
    for e in entries:
        assert table.write(ns, e.scope, e, []) == 0
    assert sorted(table.entries(ns, None), key=lambda e: e.key) == entries
    assert table.entries(ns, ["c 1"]) == entries[1:] and table.entries(ns, [""]) == entries[:1]
    short = entries[0].model_copy(update={"value": "a cellist", "tokens": 3})
    assert table.write(ns, "", short, ["bio"]) == 1  # replaced in place: its key in `delete` counts once
    assert table.entries(ns, [""]) == [short]
    assert table.write(ns, "", None, ["bio", "absent"]) == 1
    assert table.entries(ns, None) == entries[1:]
    memory.storage.delete_namespace(ns)
    assert table.entries(ns, None) == []


def test_the_entries_of_several_scopes_are_read_at_once(memory: Memory, ns: str) -> None:
    """`CoreTable.entries(ns, scopes)`: the entries of each scope given (every scope's with None), as read one
    scope at a time; a context block reads the namespace's and its conversation's in one call."""
    memory.writer.remember(ns, RememberRequest(conversation_id="c1", messages=[Message(speaker="Ann", content="hi")]))
    memory.core.put(ns, CorePutRequest(key="name", value="Ann"))
    memory.core.put(ns, CorePutRequest(key="topic", value="the move", conversation_id="c1"))
    memory.core.put(ns, CorePutRequest(key="topic", value="the garden", conversation_id="c2"))
    table = memory.storage.core
    assert table is not None

    def keys(scopes: list[str] | None) -> set[tuple[str | None, str]]:
        assert table is not None
        return {(e.conversation_id, e.key) for e in table.entries(ns, scopes)}

    assert keys([""]) == {(None, "name")} and keys(["c1"]) == {("c1", "topic")}
    assert keys(["", "c1"]) == keys([""]) | keys(["c1"]) and keys(["c1", "c1"]) == keys(["c1"])
    assert keys(None) == keys(["", "c1", "c2"]) and keys([]) == set() and keys(["nope"]) == set()
    counted = CountedStorage(memory.storage)
    block = recompose(memory, storage=counted).context.assemble(ns, ContextRequest(conversation_id="c1"))
    assert {i.id for i in block.sections[0].items} == {"name", "topic"} and "the garden" not in block.context
    assert counted.calls["core.entries"] == 1
