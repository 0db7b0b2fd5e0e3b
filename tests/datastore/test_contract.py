"""The provider contract: every Memory provider (local, postgres, pinecone) behaves the same through the
Memory pipeline, with the real MiniLM embedder and the extractive summariser on real (or, for Pinecone,
emulated) services. Fixtures are in conftest.py: `memory` is a fresh store, `ns` a fresh namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pytest

from datastore.factory import open_storage
from datastore.memory import Memory
from datastore.storage import SourceRow, WriteBatch
from models.api import (
    DeleteFilter,
    DeleteRequest,
    Document,
    DocumentMetadata,
    Query,
    QueryFilter,
    RememberRequest,
)
from models.memory import MemoryNode
from models.settings import Settings
from services.embedding import LocalEmbedder
from services.errors import ConflictError, EmbeddingMismatchError, InvalidRequestError, NotFoundError
from services.instructions import make_detector
from services.summarising import ExtractiveSummariser
from tests.support.embedders import FailingEmbedder, OtherEmbedder
from tests.support.invariants import check_summary_vectors, check_tree
from tests.support.stores import recompose, text_search
from tests.support.synthetic import conversation, document_text


def remember(memory: Memory, ns: str, cid: str, messages: list, step: int | None = None) -> None:
    step = step or len(messages)
    for i in range(0, len(messages), step):
        memory.writer.remember(ns, RememberRequest(conversation_id=cid, messages=messages[i : i + step]))


def all_nodes(memory: Memory, ns: str, sources: list[str]) -> list[MemoryNode]:
    return [n for s in sources for n in memory.storage.source_nodes(ns, s)]


def search(memory: Memory, ns: str, text: str, top_k: int = 5, mode: str = "dense", **flt: object) -> list:
    """Query results; `dense` (the default here) ranks by the provider's own vector search over every level."""
    q = Query(query=text, top_k=top_k, filter=QueryFilter(**flt) if flt else None, mode=mode)  # type: ignore[arg-type]
    return memory.reader.query(ns, [q]).results[0].results


def check(memory: Memory, ns: str, cid: str) -> dict[int, int]:
    s = memory.settings
    return check_tree(memory.storage.source_nodes(ns, cid), s.chunk_size, s.chunk_overlap, s.fan_out, s.max_level)


# ---------------------------------------------------------------------- upsert / fetch / query / delete


def test_upsert_fetch_query_replace_delete(memory: Memory, ns: str) -> None:
    when = datetime(2024, 5, 1, tzinfo=UTC)
    memory.writer.upsert(
        ns,
        [
            Document(id="doc-garden", text=document_text(40, "garden"), metadata=DocumentMetadata(created_at=when)),
            Document(id="doc-music", text=document_text(3, "music")),
        ],
    )
    hits = search(memory, ns, "slugs ate the lettuce in the garden")
    assert hits and hits[0].document_id == "doc-garden" and hits[0].source_type == "document"
    node = memory.reader.get_node(ns, hits[0].id)
    assert node.text == hits[0].text and node.start_time == when
    nodes = memory.storage.source_nodes(ns, "doc-garden")
    counts = check(memory, ns, "doc-garden")
    assert counts[1] >= 5 and counts.get(2, 0) >= 1 and all(n.sealed for n in nodes)
    top = max(nodes, key=lambda n: n.level)
    expanded = memory.reader.expand(ns, top.id)
    assert [c.id for c in expanded.children] == top.children and expanded.parent is None

    memory.writer.upsert(ns, [Document(id="doc-garden", text=document_text(2, "cooking"))])  # replace
    assert all("garden" not in n.text.lower() for n in memory.storage.source_nodes(ns, "doc-garden"))
    assert all(h.document_id != "doc-garden" or "garden" not in h.text for h in search(memory, ns, "garden slugs"))

    res = memory.deleter.delete(ns, DeleteRequest(ids=["doc-music"]))
    assert res.deleted_messages == 1 and res.deleted_nodes >= 1
    assert memory.storage.get_source(ns, "doc-music") is None
    assert search(memory, ns, "cello string", document_id="doc-music") == []
    with pytest.raises(NotFoundError):
        memory.deleter.delete(ns, DeleteRequest(ids=["no-such-id"]))


def test_scores_are_cosine_similarities_best_first(memory: Memory, ns: str, embedder: LocalEmbedder) -> None:
    remember(memory, ns, "c", conversation(("Alice", "Bob"), 60))
    text = "the night train to Vienna was delayed"
    hits = search(memory, ns, text, top_k=8)
    assert len(hits) == 8
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    q = embedder.embed([text])[0]
    vectors = memory.storage.get_vectors(ns, [h.id for h in hits])
    for h in hits:
        assert h.score == pytest.approx(float(np.dot(q, vectors[h.id])), abs=2e-3)


# ---------------------------------------------------------------------- filters
def _expected(nodes: list[MemoryNode], f: QueryFilter) -> set[str]:
    lo = f.level if f.level is not None else f.min_level
    hi = f.level if f.level is not None else f.max_level

    def ok(n: MemoryNode) -> bool:
        return all(
            (
                f.conversation_id is None or (n.source_type == "conversation" and n.source_id == f.conversation_id),
                f.document_id is None or (n.source_type == "document" and n.source_id == f.document_id),
                f.source_type is None or n.source_type == f.source_type,
                n.level >= 1,  # lines (level 0) are never search results
                lo is None or n.level >= lo,
                hi is None or n.level <= hi,
                f.speaker is None or f.speaker in n.speakers,
                f.start_date is None or (n.end_time is not None and n.end_time >= f.start_date),
                f.end_date is None or (n.start_time is not None and n.start_time <= f.end_date),
            )
        )

    return {n.id for n in nodes if ok(n)}


def test_every_filter_selects_exactly_the_matching_nodes(memory: Memory, ns: str) -> None:
    jan, jun = datetime(2024, 1, 1, 9, tzinfo=UTC), datetime(2024, 6, 1, 9, tzinfo=UTC)
    remember(memory, ns, "conv-a", conversation(("Alice", "Bob"), 70, start=jan, prefix="a"))
    remember(memory, ns, "conv-b", conversation(("Carol", "Dan"), 20, start=jun, prefix="b", topics=["music"]))
    memory.writer.upsert(ns, [Document(id="doc", text=document_text(6, "work"))])  # no time: never matches dates
    nodes = all_nodes(memory, ns, ["conv-a", "conv-b", "doc"])
    assert max(n.level for n in nodes) >= 2
    mid = jan.replace(minute=30)
    filters = [
        QueryFilter(conversation_id="conv-a"),
        QueryFilter(conversation_id="conv-b"),
        QueryFilter(document_id="doc"),
        QueryFilter(document_id="conv-a"),
        QueryFilter(source_type="document"),
        QueryFilter(source_type="conversation"),
        QueryFilter(level=1),
        QueryFilter(level=2),
        QueryFilter(min_level=2),
        QueryFilter(max_level=1),
        QueryFilter(min_level=1, max_level=1),
        QueryFilter(speaker="Carol"),
        QueryFilter(speaker="Alice"),
        QueryFilter(start_date=jun),
        QueryFilter(end_date=mid),
        QueryFilter(start_date=mid, end_date=jun),
        QueryFilter(conversation_id="conv-a", max_level=1, speaker="Bob", start_date=jan, end_date=mid),
    ]
    for f in filters:
        want, given = _expected(nodes, f), f.model_dump(exclude_none=True)
        got = search(memory, ns, "news about music and work", top_k=100, **given)
        assert {h.id for h in got} == want and len(got) == len(want), f"filter {given}"
        # full text (a provider's search_text; dense where there is none), the fused and tree modes obey it too
        for mode in ("text", "hybrid", "tree"):
            assert {h.id for h in search(memory, ns, "choir concert budget", 100, mode, **given)} <= want, (mode, given)


# ---------------------------------------------------------------------- namespaces


def test_namespaces_are_isolated(memory: Memory, ns: str) -> None:
    other = f"{ns}-b"
    remember(memory, ns, "c1", conversation(("Alice", "Bob"), 30, marker="aurora"))
    remember(memory, other, "c1", conversation(("Alice", "Bob"), 30, topics=["work"], marker="zeppelin"))  # same ids
    mine, theirs = memory.storage.source_nodes(ns, "c1"), memory.storage.source_nodes(other, "c1")
    assert mine and theirs and not {n.id for n in mine} & {n.id for n in theirs}
    assert all("zeppelin" not in h.text for h in search(memory, ns, "zeppelin quarterly report", top_k=50))
    for node_id in (theirs[0].id, theirs[-1].id):
        with pytest.raises(NotFoundError):
            memory.reader.get_node(ns, node_id)
        with pytest.raises(NotFoundError):
            memory.reader.expand(ns, node_id)
        with pytest.raises(NotFoundError):
            memory.deleter.delete(ns, DeleteRequest(ids=[node_id]))
    assert len(memory.storage.find_messages(ns, ids=["m-3"])) == 1

    memory.deleter.delete(ns, DeleteRequest(ids=["c1"]))
    assert memory.storage.source_nodes(ns, "c1") == [] and len(memory.storage.source_nodes(other, "c1")) == len(theirs)
    remember(memory, ns, "c1", conversation(("Alice", "Bob"), 30, marker="aurora"))
    memory.deleter.delete(ns, DeleteRequest(filter=DeleteFilter(speaker="Alice")))
    assert memory.storage.known_message_ids(other, "c1", ["m-0", "m-2"]) == {"m-0", "m-2"}
    res = memory.deleter.delete(ns, DeleteRequest(delete_all=True))
    assert res.deleted_messages == 15 and memory.storage.get_source(ns, "c1") is None
    assert [n.id for n in memory.storage.source_nodes(other, "c1")] == [n.id for n in theirs]
    assert memory.storage.messages(other, "c1", -1)[-1].id == "m-29"


# ---------------------------------------------------------------------- the tree


def test_incremental_remembers_keep_the_tree_invariants(memory: Memory, ns: str) -> None:
    messages = conversation(("Alice", "Bob"), 170)  # enough for 26+ chunks, so 5 L2 and one L3
    remember(memory, ns, "c", messages, step=11)
    counts = check(memory, ns, "c")
    assert counts[1] >= 25 and counts[2] >= 5 and counts[3] >= 1
    s = memory.settings
    chunks = [n for n in memory.storage.source_nodes(ns, "c") if n.level == 1]
    assert all(c.token_count <= s.chunk_size for c in chunks) and s.chunk_size == 200
    # each chunk opens with the last whole sentences of the one before, at most CHUNK_OVERLAP tokens of them
    assert all(a.tok_start < b.tok_start <= a.tok_end for a, b in zip(chunks, chunks[1:], strict=False))
    assert all(a.tok_end - b.tok_start <= s.chunk_overlap for a, b in zip(chunks, chunks[1:], strict=False))
    assert {m for c in chunks for m in c.message_ids} == {m.id for m in messages}
    src = memory.storage.get_source(ns, "c")
    assert src is not None and src.n_messages == len(messages) and src.max_seq == len(messages) - 1
    # a summary's embedding is its children's mean, also where they were embedded by an earlier call
    nodes = memory.storage.source_nodes(ns, "c")
    assert check_summary_vectors(memory.storage.get_vectors(ns, [n.id for n in nodes]), nodes) >= 6


def test_messages_by_their_place_in_the_token_stream(memory: Memory, ns: str) -> None:
    """`messages(ns, source, tok_from, tok_to, limit)`: the messages whose tokens overlap [tok_from, tok_to), in
    order: the one a window starts inside, the one it ends inside, none of another source or namespace."""
    remember(memory, ns, "c", conversation(("Alice", "Bob"), 30), step=30)
    remember(memory, ns, "c2", conversation(("Alice", "Bob"), 5, prefix="x"), step=5)
    every = memory.storage.messages(ns, "c")
    assert [m.seq for m in every] == sorted(m.seq for m in every) and len(every) == 30
    assert all(b.tok_offset == a.tok_offset + a.n_tokens for a, b in zip(every, every[1:], strict=False))
    for lo, hi in (
        (0, 1),
        (5, 90),
        (every[7].tok_offset, every[9].tok_offset),
        (every[7].tok_offset + 1, None),
        (every[-1].tok_offset + every[-1].n_tokens - 1, None),
        (every[-1].tok_offset + 500, None),
    ):
        want = [m.id for m in every if m.tok_offset + m.n_tokens > lo and (hi is None or m.tok_offset < hi)]
        assert [m.id for m in memory.storage.messages(ns, "c", lo, hi)] == want, (lo, hi)
        assert [m.id for m in memory.storage.messages(ns, "c", lo, hi, limit=1)] == want[:1]
    assert memory.storage.messages(ns + "-other", "c", 0, 100) == []


def test_messages_of_several_ranges_are_read_at_once(memory: Memory, ns: str) -> None:
    """`messages_in(ns, source, ranges)`: the messages `messages` reads for each [tok_from, tok_to) range, each
    once, in order (ranges apart, overlapping, touching, inside one message, empty, past the end), none of another
    source or namespace."""
    remember(memory, ns, "c", conversation(("Alice", "Bob"), 30), step=30)
    remember(memory, ns, "c2", conversation(("Alice", "Bob"), 5, prefix="x"), step=5)
    every = memory.storage.messages(ns, "c")
    at = [m.tok_offset for m in every]
    end = every[-1].tok_offset + every[-1].n_tokens
    for ranges in (
        [(0, 1)],
        [(at[3], at[5]), (at[20] + 1, at[20] + 2)],
        [(at[20] + 1, at[20] + 2), (at[3], at[5])],  # any order
        [(at[3], at[6]), (at[5], at[8]), (at[8], at[9])],  # overlapping and touching: each message once
        [(at[2] + 1, at[2] + 2), (at[2] + 2, at[2] + 3)],  # inside one message, twice
        [(at[4], at[4]), (at[9], at[7])],  # empty: nothing
        [(at[28], end + 50), (end + 100, end + 200)],
        [(0, end)],
    ):
        want = {m.id for lo, hi in ranges if hi > lo for m in memory.storage.messages(ns, "c", lo, hi)}
        got = memory.storage.messages_in(ns, "c", ranges)
        assert [m.id for m in got] == [m.id for m in every if m.id in want], ranges
        assert got == [m for m in every if m.id in want]  # the same records (sentences included)
    assert memory.storage.messages_in(ns, "c", []) == []
    assert memory.storage.messages_in(ns + "-other", "c", [(0, 100)]) == []
    assert {m.source_id for m in memory.storage.messages_in(ns, "c2", [(0, end)])} == {"c2"}


def test_sources_read_at_once_are_those_read_one_by_one(memory: Memory, ns: str) -> None:
    """`get_sources(ns, ids)`: {id: row} of the ids the namespace holds, each as `get_source` reads it."""
    remember(memory, ns, "c", conversation(("Alice", "Bob"), 6), step=3)
    remember(memory, ns, "c2", conversation(("Alice", "Bob"), 3, prefix="x"), step=3)
    got = memory.storage.get_sources(ns, ["c2", "nope", "c", "c"])
    assert set(got) == {"c", "c2"}
    assert all(got[sid] == memory.storage.get_source(ns, sid) for sid in got)
    assert got["c"].n_messages == 6 and got["c2"].n_messages == 3
    assert memory.storage.get_sources(ns + "-other", ["c"]) == {} and memory.storage.get_sources(ns, []) == {}


def test_resending_the_same_messages_changes_nothing(memory: Memory, ns: str) -> None:
    messages = conversation(("Alice", "Bob"), 45)
    remember(memory, ns, "c", messages, step=20)

    def snapshot() -> tuple:
        nodes = memory.storage.source_nodes(ns, "c")
        msgs = memory.storage.messages(ns, "c", -1)
        return (memory.storage.get_source(ns, "c"), [n.model_dump() for n in nodes], [m.model_dump() for m in msgs])

    before = snapshot()
    res = memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages))
    assert (res.chunk_ids, res.updated_chunk_ids, res.summary_ids) == ([], [], [])
    assert res.skipped_message_ids == [m.id for m in messages]
    assert snapshot() == before
    more = conversation(("Alice", "Bob"), 3, first=45)
    res = memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages[-2:] + more))
    assert res.skipped_message_ids == [m.id for m in messages[-2:]]
    assert memory.storage.get_source(ns, "c").n_messages == 48  # type: ignore[union-attr]
    check(memory, ns, "c")


def test_a_stale_commit_is_refused_and_changes_nothing(memory: Memory, ns: str) -> None:
    with pytest.raises(ConflictError):
        memory.storage.commit(ns, WriteBatch(source=SourceRow("x", "conversation", version=1)), expected_version=3)
    assert memory.storage.get_source(ns, "x") is None
    remember(memory, ns, "c", conversation(("Alice", "Bob"), 5))
    src = memory.storage.get_source(ns, "c")
    with pytest.raises(ConflictError):
        memory.storage.commit(
            ns,
            WriteBatch(source=src, delete_source=True),  # type: ignore[arg-type]
            expected_version=src.version - 1,  # type: ignore[union-attr]
        )
    assert memory.storage.get_source(ns, "c") == src


def test_an_embedder_failure_leaves_a_backlog_that_retry_pending_indexes(
    memory: Memory, ns: str, embedder: LocalEmbedder
) -> None:
    messages = conversation(("Alice", "Bob"), 50)
    remember(memory, ns, "c", messages[:30])
    before = [n.model_dump() for n in memory.storage.source_nodes(ns, "c")]
    failing = recompose(memory, embedder=FailingEmbedder(embedder))
    res = failing.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages[30:]))
    assert res.pending_message_ids == [m.id for m in messages[30:]] and not res.chunk_ids
    assert [n.model_dump() for n in memory.storage.source_nodes(ns, "c")] == before
    assert (ns, "c") in memory.storage.backlog()
    assert memory.writer.retry_pending() >= 1 and (ns, "c") not in memory.storage.backlog()
    chunks = [n for n in memory.storage.source_nodes(ns, "c") if n.level == 1]
    assert {m for n in chunks for m in n.message_ids} == {m.id for m in messages}
    check(memory, ns, "c")

    failing.deleter.delete(ns, DeleteRequest(ids=["m-7"]))  # forgetting does not wait for the embedder
    assert not any("(note 7)" in t for t in _texts(memory, ns, "c")) and (ns, "c") in memory.storage.backlog()
    memory.writer.retry_pending()
    assert not any("(note 7)" in n.text or "m-7" in n.message_ids for n in memory.storage.source_nodes(ns, "c"))
    check(memory, ns, "c")


def test_accepted_messages_are_found_in_the_backlog_and_indexed_in_steps(memory: Memory, ns: str) -> None:
    """Store now, index later (what the server's background indexer does): the provider reports the backlog
    (`_backlog`) and then the groups awaiting a summary (`_unrolled`); the steps build a whole tree."""
    messages = conversation(("Alice", "Bob"), 60)
    for i in range(0, 60, 20):
        res = memory.writer.accept(ns, RememberRequest(conversation_id="c", messages=messages[i : i + 20]))
        assert len(res.pending_message_ids) == 20 and not res.chunk_ids
    assert memory.storage.source_nodes(ns, "c") == [] and (ns, "c") in memory.storage.backlog()
    while memory.steps.chunks(ns, "c", max_chunks=3).more:
        pass
    assert (ns, "c") not in memory.storage.backlog() and (ns, "c") in memory.storage.unrolled()
    assert not any(n.level > 1 for n in memory.storage.source_nodes(ns, "c"))
    while memory.steps.summaries(ns, "c").more:
        pass
    assert (ns, "c") not in memory.storage.unrolled()
    counts = check(memory, ns, "c")
    assert counts.get(2, 0) >= 1
    chunks = [n for n in memory.storage.source_nodes(ns, "c") if n.level == 1]
    assert {m for n in chunks for m in n.message_ids} == {m.id for m in messages}
    assert search(memory, ns, messages[41].content, top_k=3)


# ---------------------------------------------------------------------- forgetting
def _texts(memory: Memory, ns: str, cid: str) -> list[str]:
    return [n.text for n in memory.storage.source_nodes(ns, cid)]


def test_deleted_text_is_gone_from_every_level_and_every_query(memory: Memory, ns: str) -> None:
    messages = conversation(("Alice", "Bob"), 70)
    messages[3].content = "The vault combination is quixotrellis, keep it secret. " + messages[3].content
    messages[40].speaker = "Mallory"
    messages[40].content = "Mallory confessed the password is brontavex and nobody must know. " + messages[40].content
    remember(memory, ns, "c", messages, step=25)
    assert any("quixotrellis" in t for t in _texts(memory, ns, "c"))
    assert any("brontavex" in t for t in _texts(memory, ns, "c"))
    assert check(memory, ns, "c").get(2, 0) >= 2

    memory.deleter.delete(ns, DeleteRequest(ids=["m-3"]))
    memory.deleter.delete(ns, DeleteRequest(filter=DeleteFilter(speaker="Mallory")))
    for secret in ("quixotrellis", "brontavex"):
        assert not any(secret in t for t in _texts(memory, ns, "c"))
        for level in (1, 2, 3):
            assert not any(secret in h.text for h in search(memory, ns, f"vault password {secret}", 100, level=level))
        if hasattr(memory, "search_text"):
            assert text_search(memory).search(ns, secret, 10) == []
    assert {m.id for m in memory.storage.messages(ns, "c", -1)} == {m.id for m in messages} - {"m-3", "m-40"}
    check(memory, ns, "c")

    l2 = next(n for n in memory.storage.source_nodes(ns, "c") if n.level == 2)
    covered = {m for n in memory.reader.subtree(ns, l2.id) for m in n.message_ids}
    memory.deleter.delete(ns, DeleteRequest(ids=[l2.id]))
    assert not covered & {m.id for m in memory.storage.messages(ns, "c", -1)}
    with pytest.raises(NotFoundError):
        memory.reader.get_node(ns, l2.id)
    check(memory, ns, "c")
    nodes = memory.storage.source_nodes(ns, "c")  # rebuilt summaries too
    assert check_summary_vectors(memory.storage.get_vectors(ns, [n.id for n in nodes]), nodes) >= 1


# ---------------------------------------------------------------------- the embedding model


def test_opening_with_another_embedding_dimension_is_refused(memory: Memory, open_store: Callable[..., Memory]) -> None:
    with pytest.raises(EmbeddingMismatchError) as err:
        open_store(OtherEmbedder())
    assert "384" in str(err.value) and "8" in str(err.value)
    open_store()  # the same embedder opens it again


def test_a_store_refused_for_its_embedding_model_is_closed(memory: Memory, provider_settings: Settings) -> None:
    # Pinecone refuses in record_embedding itself (the index's dimension); its HTTP client was left open
    storage = open_storage(provider_settings, OtherEmbedder().dimension)
    with pytest.raises(EmbeddingMismatchError):
        Memory(provider_settings, storage, OtherEmbedder(), ExtractiveSummariser(), make_detector(provider_settings))
    with pytest.raises(Exception) as closed:  # each provider's error for a closed client (sqlite3, psycopg_pool,
        storage.counts("t-closed")  # httpx): a store left open would answer
    assert "closed" in str(closed.value).lower(), closed.value


# ---------------------------------------------------------------------- listing (datastore/read/listing.py)
def _page_all(fetch: Callable[[str | None], tuple[list, str | None]]) -> list:
    out, cursor = [], None
    while True:
        items, cursor = fetch(cursor)
        out += items
        if cursor is None:
            return out


def test_listing_pages_sources_with_counts_and_time_ranges(memory: Memory, ns: str) -> None:
    start = datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
    msgs = conversation(("Ann", "Bob"), 60, start=start)
    remember(memory, ns, "c-a", msgs, step=25)
    remember(memory, ns, "c-b", conversation(("Cy", "Di"), 3, prefix="b"))
    memory.writer.upsert(ns, [Document(id="doc-x", text=document_text(4, "garden"))])
    remember(memory, ns + "-other", "c-hidden", conversation(("Eve", "Fay"), 3, prefix="h"))

    first = memory.listing.sources(ns, limit=2)
    assert [s.id for s in first.conversations] == ["c-a", "c-b"] and first.next_cursor
    second = memory.listing.sources(ns, limit=2, cursor=first.next_cursor)
    assert [s.id for s in second.conversations] == ["doc-x"] and second.next_cursor is None
    assert [s.id for s in memory.listing.sources(ns, limit=100).conversations] == ["c-a", "c-b", "doc-x"]

    a, b = first.conversations
    nodes = memory.storage.source_nodes(ns, "c-a")
    per_level: dict[str, int] = {}
    for n in nodes:
        if n.level >= 1:  # lines (level 0) are not listed
            per_level[str(n.level)] = per_level.get(str(n.level), 0) + 1
    assert a.source_type == "conversation" and a.message_count == 60 and b.message_count == 3
    assert a.node_counts == per_level and per_level.get("2", 0) >= 1
    assert a.start_time == start and a.end_time == msgs[-1].created_at
    doc = second.conversations[0]
    assert doc.source_type == "document" and doc.message_count == 1 and doc.node_counts["1"] >= 1

    with pytest.raises(InvalidRequestError):
        memory.listing.sources(ns, cursor="not-a-cursor")
    assert [s.id for s in memory.listing.sources(ns + "-other").conversations] == ["c-hidden"]
    with pytest.raises(NotFoundError):
        memory.listing.detail(ns, "c-hidden")


def test_listing_roots_walk_down_to_every_chunk_and_message(memory: Memory, ns: str) -> None:
    msgs = conversation(("Ann", "Bob"), 60)
    remember(memory, ns, "c", msgs, step=20)
    remember(memory, ns, "c2", conversation(("Cy", "Di"), 3, prefix="x"))
    detail = memory.listing.detail(ns, "c")
    nodes = memory.storage.source_nodes(ns, "c")
    roots = [n for n in nodes if n.parent_id is None and n.level >= 1]  # a line (level 0) is not in the tree
    assert [r.id for r in detail.top_nodes] == [n.id for n in sorted(roots, key=lambda n: (-n.level, n.position))]
    assert detail.top_nodes[0].level == max(n.level for n in nodes)

    # walking down from the roots with expand reaches every chunk, in order
    leaves: list[str] = []

    def walk(node_id: str) -> None:
        exp = memory.reader.expand(ns, node_id)
        if exp.node.level == 1:
            leaves.append(exp.node.id)
        for child in exp.children:
            walk(child.id)

    for root in detail.top_nodes:
        walk(root.id)
    assert leaves == [n.id for n in nodes if n.level == 1]

    every = _page_all(
        lambda c: (lambda p: (p.messages, p.next_cursor))(memory.listing.messages(ns, "c", limit=7, cursor=c))
    )
    assert [m.id for m in every] == [m.id for m in msgs]
    assert every[0].speaker == "Ann" and every[0].content == msgs[0].content
    assert every[0].created_at == msgs[0].created_at

    chunk = next(n for n in nodes if n.level == 1 and n.position == 3)
    got = memory.listing.messages(ns, "c", limit=100, node_id=chunk.id).messages
    assert [m.id for m in got] == chunk.message_ids
    l2 = next(n for n in nodes if n.level == 2)
    under = {m for n in memory.reader.subtree(ns, l2.id) for m in n.message_ids}
    paged = _page_all(
        lambda c: (lambda p: (p.messages, p.next_cursor))(
            memory.listing.messages(ns, "c", limit=4, cursor=c, node_id=l2.id)
        )
    )
    assert [m.id for m in paged] == [m.id for m in msgs if m.id in under]

    with pytest.raises(NotFoundError):
        memory.listing.messages(ns, "c2", node_id=chunk.id)  # a node of another source
    with pytest.raises(NotFoundError):
        memory.listing.messages(ns + "-other", "c")
    with pytest.raises(InvalidRequestError):
        memory.listing.messages(ns, "c", cursor="bad")


# ---------------------------------------------------------------------- rules above the providers


def test_node_counts_are_per_level_or_none(memory: Memory, ns: str) -> None:
    remember(memory, ns, "c", conversation(("Alice", "Bob"), 40))
    counts = memory.storage.node_counts()
    if memory.name == "pinecone":
        assert counts is None  # not counted cheaply
        return
    by_level: dict[str, int] = {}
    for n in memory.storage.source_nodes(ns, "c"):
        by_level[f"L{n.level}"] = by_level.get(f"L{n.level}", 0) + 1
    assert counts == by_level and by_level.get("L2", 0) >= 1


def test_upsert_never_replaces_a_conversation_and_message_ids_are_scoped(memory: Memory, ns: str) -> None:
    from services.errors import InvalidRequestError

    remember(memory, ns, "a", conversation(("Alice", "Bob"), 6))
    remember(memory, ns, "b", conversation(("Carol", "Dan"), 6))
    before = {m.id for m in memory.storage.messages(ns, "a", -1)}
    with pytest.raises(InvalidRequestError) as err:
        memory.writer.upsert(ns, [Document(id="d1", text="fine"), Document(id="a", text="would replace the chat")])
    assert err.value.field == "documents[1].id"
    assert (
        memory.storage.get_source(ns, "d1") is None and {m.id for m in memory.storage.messages(ns, "a", -1)} == before
    )
    with pytest.raises(InvalidRequestError) as err:  # m-1 is in both conversations
        memory.deleter.delete(ns, DeleteRequest(ids=["m-1"]))
    assert err.value.field == "ids"
    out = memory.deleter.delete(ns, DeleteRequest(ids=["m-1"], conversation_id="b"))
    assert out.deleted_messages == 1
    assert "m-1" in {m.id for m in memory.storage.messages(ns, "a", -1)}
    assert "m-1" not in {m.id for m in memory.storage.messages(ns, "b", -1)}
