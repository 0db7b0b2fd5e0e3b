"""The context block's provider hooks on every provider (local, postgres, pinecone): neighbours, roots, core."""

from __future__ import annotations

from datetime import UTC, datetime

from datastore.memory import Memory
from models.api import RememberRequest
from models.context import ContextRequest
from models.core import CorePutRequest
from tests.support.stores import CountedStorage, recompose
from tests.support.synthetic import long_conversation


def test_neighbours_roots_and_context_on_every_provider(memory: Memory, ns: str) -> None:
    memory.writer.remember(ns, RememberRequest(conversation_id="c1", messages=long_conversation(12)))
    chunks = sorted((n for n in memory.storage.source_nodes(ns, "c1") if n.level == 1), key=lambda n: n.position)
    before, after = memory.reader.neighbours(ns, chunks[2], 1)
    assert [n.id for n in before + after] == [chunks[1].id, chunks[3].id]
    roots = memory.storage.roots(ns, "c1", 10)
    assert roots and all(n.parent_id is None for n in roots)
    assert [(n.level, n.position) for n in roots] == sorted(((n.level, n.position) for n in roots), reverse=True)
    res = memory.context.assemble(
        ns,
        ContextRequest(
            conversation_id="c1", query="pottery in Kyoto", budget_tokens=900, now=datetime(2024, 6, 1, tzinfo=UTC)
        ),
    )
    assert res.tokens_used <= 900 and res.sections[2].items and res.sections[3].items  # recent, relevant


def test_a_block_reads_the_sentences_of_its_candidates_at_once(memory: Memory, ns: str) -> None:
    """A block reads the stored sentences of its first candidates in one read a source (`Storage.messages_in`),
    not one read a chunk, and its lines' sentences as many at once as its room may hold; the block is the same.
    What is read one message range at a time (`messages`) is the conversation's last messages only."""
    memory.writer.remember(ns, RememberRequest(conversation_id="c1", messages=long_conversation(40)))
    assert len(memory.storage.source_nodes(ns, "c1", level=1)) >= 10  # more chunks than a block's first candidates
    counted = CountedStorage(memory.storage)
    reads = recompose(memory, storage=counted)
    for budget in (1500, 3000):
        req = ContextRequest(
            conversation_id="c1",
            query="Which trip to Kyoto, and how many hours of pottery?",
            budget_tokens=budget,
            now=datetime(2024, 6, 1, tzinfo=UTC),
        )
        counted.calls.clear()
        block = reads.context.assemble(ns, req)
        assert block.sections[3].items and block.sections[4].items  # relevant, timeline
        assert block == memory.context.assemble(ns, req)
        assert counted.calls["messages"] <= 1, counted.calls  # the recent turns
        # the first candidates', the next ones' (the section shows more), the lines', the periods'
        assert counted.calls["messages_in"] <= 4, counted.calls
        # the namespace's and the conversation's core entries in one read; no instruction in force, no vector read
        assert counted.calls["core.entries"] == 1 and counted.calls["instructions.vectors"] == 0, counted.calls
    assert memory.instructions.standing(ns) == ([], [])


def test_core_memory_on_every_provider(memory: Memory, ns: str) -> None:
    memory.core.put(ns, CorePutRequest(key="name", value="Ann", importance=90))
    memory.core.put(ns, CorePutRequest(key="name", value="Ann Lee", importance=90))  # replaces
    memory.core.put(ns, CorePutRequest(key="diet", value="vegetarian", ttl_seconds=3600))
    assert [(e.key, e.value) for e in memory.core.list_entries(ns).entries] == [
        ("name", "Ann Lee"),
        ("diet", "vegetarian"),
    ]
    assert memory.core.list_entries(ns).entries[1].expires_at is not None
    assert memory.core.list_entries(ns + "-other").entries == []
    assert memory.core.delete(ns, "diet").deleted
    assert [e.key for e in memory.core.list_entries(ns).entries] == ["name"]
    block = memory.context.assemble(ns, ContextRequest(query="who am I?", budget_tokens=300))
    assert [i.id for i in block.sections[0].items] == ["name"] and "name: Ann Lee" in block.context
