"""Lines (issue 25, item 1): each message's informative lead, a level-0 node with its own embedding, written in the
commit of its chunk, forgotten with its message, carried by export, import and migrate, on every provider."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from datastore.portability.dump import export_lines, import_dump
from datastore.portability.migrate import migrate_memory
from datastore.storage import WriteBatch
from models.api import DeleteRequest, Message, Query, RememberRequest
from models.memory import MemoryNode
from services.embedding import LocalEmbedder
from services.errors import NotFoundError
from services.lines import line_text
from services.summarising import ExtractiveSummariser
from tests.support.invariants import check_lines, check_tree
from tests.support.settings import make_settings
from tests.support.synthetic import long_conversation

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
FILLER = {"d1x": "Thanks, Ann!", "d3x": "Sure! Sounds great.", "d5x": "Wow, Bo, that's awesome!"}


def chat(n_days: int = 12) -> list[Message]:
    """`long_conversation` (three messages a day, three days apart) with a filler-only message on three days."""
    out = []
    for m in long_conversation(n_days):
        out.append(m)
        x = (m.id or "")[:-1] + "x"
        if (m.id or "").endswith("c") and x in FILLER:
            assert m.created_at is not None
            out.append(Message(id=x, speaker="Bo", content=FILLER[x], created_at=m.created_at + timedelta(minutes=1)))
    return out


def lines_of(memory: Memory, ns: str, cid: str) -> list[MemoryNode]:
    nodes = memory.storage.source_nodes(ns, cid)
    s = memory.settings
    check_tree(nodes, s.chunk_size, s.chunk_overlap, s.fan_out, s.max_level, rolled_up=False)
    return check_lines(nodes)


def expected(messages: list[Message]) -> dict[str, str]:
    """{message id: its line's text} of the messages that say something."""
    out = {}
    for m in messages:
        text = line_text(m.content, {"Ann", "Bo"})
        if text is not None:
            out[m.id or ""] = text
    return out


def record_commits(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> list[WriteBatch]:
    """Every WriteBatch the store commits from now on (the provider's own commit still runs)."""
    batches: list[WriteBatch] = []
    commit = memory.storage.commit

    def recording(ns: str, batch: WriteBatch, expected_version: int) -> None:
        commit(ns, batch, expected_version)
        batches.append(batch)

    monkeypatch.setattr(memory.storage, "commit", recording)
    return batches


def assert_lines_with_their_chunks(batches: list[WriteBatch]) -> set[str]:
    """Every line is committed (with a vector, without a parent) in the batch that writes the first chunk holding
    its message; returns the lined message ids."""
    lined: set[str] = set()
    for b in batches:
        held = {mid for n, v in b.nodes if n.level == 1 and v is not None for mid in n.message_ids}
        for n, v in b.nodes:
            if n.level == 0:
                assert v is not None and n.message_ids[0] in held, f"{n.id} committed apart from its chunk"
                assert n.parent_id is None, f"{n.id} names a parent: a line is not in the tree"
                lined.add(n.message_ids[0])
    return lined


def test_every_informative_message_gets_one_line_in_its_chunks_commit(
    memory: Memory, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    msgs = chat()
    batches = record_commits(memory, monkeypatch)
    for i in range(0, len(msgs), 7):  # incremental remembers: the open chunk is re-cut each time
        memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=msgs[i : i + 7]))
    want = expected(msgs)
    assert set(FILLER) & set(want) == set() and len(want) == len(msgs) - len(FILLER)
    assert assert_lines_with_their_chunks(batches) == set(want)
    lines = lines_of(memory, ns, "c")
    assert {n.message_ids[0]: n.text for n in lines} == want
    by_id = {m.id: m for m in msgs}
    for n in lines:
        m = by_id[n.message_ids[0]]
        assert n.speakers == [m.speaker] and n.start_time == m.created_at and n.source_id == "c"
    vectors = memory.storage.get_vectors(ns, [n.id for n in lines])
    spoken = memory.embedder.embed([f"{n.speakers[0]}: {n.text}" for n in lines])
    assert all(np.allclose(vectors[n.id], spoken[i], atol=1e-4) for i, n in enumerate(lines))


def test_the_background_chunk_steps_write_lines_with_their_chunks(
    memory: Memory, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    msgs = chat()
    memory.writer.accept(ns, RememberRequest(conversation_id="c", messages=msgs))
    assert memory.storage.source_nodes(ns, "c") == []  # stored now, nothing indexed yet: no line either
    batches = record_commits(memory, monkeypatch)
    while memory.steps.chunks(ns, "c", max_chunks=2).more:
        pass
    assert len(batches) > 1
    assert assert_lines_with_their_chunks(batches) == set(expected(msgs))
    assert {n.message_ids[0] for n in lines_of(memory, ns, "c")} == set(expected(msgs))


def test_a_line_is_forgotten_with_its_message_and_the_others_are_kept(memory: Memory, ns: str) -> None:
    msgs = chat()
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=msgs))
    before = {n.message_ids[0]: n for n in lines_of(memory, ns, "c")}
    vectors = memory.storage.get_vectors(ns, [n.id for n in before.values()])
    vector = memory.embedder.embed(["a trip to Oslo"])[0]
    assert "d2a" in {ln.message_id for ln in memory.outline.lines(ns, "c", vector, 3)}  # read (and kept) once
    memory.deleter.delete(ns, DeleteRequest(ids=["d2a", "d4c"], conversation_id="c"))
    after = {n.message_ids[0]: n for n in lines_of(memory, ns, "c")}
    assert set(after) == set(before) - {"d2a", "d4c"}
    assert {ln.message_id for ln in memory.outline.lines(ns, "c")} == set(after)  # what the service read is renewed
    assert "d2a" not in {ln.message_id for ln in memory.outline.lines(ns, "c", vector, 3)}
    assert all(after[m].id == before[m].id for m in after)  # kept lines keep their ids and vectors
    kept = memory.storage.get_vectors(ns, [n.id for n in after.values()])
    assert all(np.allclose(kept[n.id], vectors[n.id]) for n in after.values())
    assert memory.storage.get_nodes(ns, [before["d2a"].id, before["d4c"].id]) == []

    memory.deleter.delete(ns, DeleteRequest(ids=[after["d6a"].id]))  # a line's id forgets its message
    assert "d6a" not in {m.id for m in memory.storage.messages(ns, "c")}
    assert "d6a" not in {n.message_ids[0] for n in lines_of(memory, ns, "c")}
    memory.deleter.delete(ns, DeleteRequest(ids=["c"]))
    assert memory.storage.source_nodes(ns, "c") == []


def within(seconds: float, probe: Callable[[], bool]) -> bool:
    """Whether `probe()` holds within `seconds` (another process's commit reaches PostgreSQL's listener by NOTIFY
    in a few ms; the issue allows 1 s)."""
    deadline = time.monotonic() + seconds
    while not probe():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_lines_are_ranked_through_the_shared_index_and_follow_another_process(
    open_store: Callable[..., Memory], ns: str
) -> None:
    """Two Memory objects over one store (two server processes): the reader's shared in-memory index holds the
    lines apart from the chunks, ranks the lines the writer committed, and never serves a line the writer
    forgot, not even before its index has caught up."""
    writer, reader = open_store(), open_store()
    query = "When did Ann plan the trip to Kyoto?"
    vector = reader.embedder.embed([query])[0]
    assert reader.outline.lines(ns, "c", vector, 5, query) == []  # the reader's index is loaded (empty)
    msgs = chat()
    writer.writer.remember(ns, RememberRequest(conversation_id="c", messages=msgs))
    stored = reader.storage.source_nodes(ns, "c")
    n_lines = sum(n.level == 0 for n in stored)
    assert within(1.0, lambda: len(reader.outline.lines(ns, "c", vector, None, query)) == n_lines > 0)
    assert "d1a" in {ln.message_id for ln in reader.outline.lines(ns, "c", vector, 3, query)}
    index = reader.search.indexes.get(ns)
    assert len(index.lines) == n_lines  # the lines are in the shared index...
    assert len(index.vectors) == len(index.text) == sum(n.level >= 1 for n in stored)  # ...apart from the chunks
    gone = next(n.text for n in stored if n.level == 0 and n.message_ids == ["d1a"])
    writer.deleter.delete(ns, DeleteRequest(ids=["d1a"], conversation_id="c"))
    every = reader.outline.lines(ns, "c", vector, None, query)  # at once: the index may be a version behind
    assert every and "d1a" not in {ln.message_id for ln in every}
    assert gone not in {ln.text for ln in every}  # the forgotten text is served from nowhere
    assert within(1.0, lambda: len(reader.search.indexes.get(ns).lines) == n_lines - 1)


def test_a_late_message_is_lined_in_its_place(memory: Memory, ns: str) -> None:
    msgs = chat()
    late = next(m for m in msgs if m.id == "d3a")
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=[m for m in msgs if m.id != "d3a"]))
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=[late]))
    lines = lines_of(memory, ns, "c")
    assert {n.message_ids[0] for n in lines} == set(expected(msgs))
    order = [m.id for m in memory.storage.messages(ns, "c")]
    assert [n.message_ids[0] for n in lines] == [m for m in order if m in expected(msgs)]


def test_lines_are_never_search_results_nor_listed(memory: Memory, ns: str) -> None:
    msgs = chat()
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=msgs))
    lines = {n.id for n in lines_of(memory, ns, "c")}
    assert lines
    for mode in ("dense", "text", "hybrid", "tree"):
        q = Query(query="a trip to Lisbon and pottery for hours", top_k=50, mode=mode)
        got = {h.id for h in memory.reader.query(ns, [q]).results[0].results}
        assert got and not got & lines, mode
    detail = memory.listing.detail(ns, "c")
    assert "0" not in detail.conversation.node_counts and all(n.level >= 1 for n in detail.top_nodes)
    assert all(lv.level >= 1 for lv in memory.describer.describe(ns, "c").levels)


def test_lines_ranked_by_a_query_over_the_whole_conversation(memory: Memory, ns: str) -> None:
    msgs = chat()
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=msgs))
    every = memory.outline.lines(ns, "c")
    assert [ln.message_id for ln in every] == [m.id for m in msgs if m.id in expected(msgs)]
    assert all(ln.score is None and ln.conversation_id == "c" for ln in every)
    query = "When did Ann plan the trip to Kyoto?"
    vector = memory.embedder.embed([query])[0]
    for text in (None, query):
        best = memory.outline.lines(ns, "c", vector, top_k=3, query_text=text)
        assert len(best) == 3 and [ln.position for ln in best] == sorted(ln.position for ln in best)
        assert "d1a" in {ln.message_id for ln in best}  # day 1: "a trip to Kyoto"
        assert all(ln.score is not None for ln in best)
    assert memory.outline.lines(ns, "nope", vector, top_k=3) == []


def test_threaded_lines_rank_as_every_line_threaded_and_only_those_returned_are_read(
    memory: Memory, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=chat()))
    query = "When did Ann plan the trip to Kyoto?"
    vector = memory.embedder.embed([query])[0]
    weight, gap = 0.6, 3600.0  # a day's three messages are one thread; days are three days apart
    every = memory.outline.lines(ns, "c", vector, None, query)
    raised = {ln.id: ln.score or 0.0 for ln in every}  # the thread, as ranked over every line read
    for a, b in zip(every, every[1:], strict=False):
        assert a.created_at is not None and b.created_at is not None
        if abs((b.created_at - a.created_at).total_seconds()) <= gap:
            raised[a.id] = max(raised[a.id], weight * (b.score or 0.0))
            raised[b.id] = max(raised[b.id], weight * (a.score or 0.0))
    assert any(raised[ln.id] > (ln.score or 0.0) for ln in every)  # some line ranks with its thread
    expected = sorted(every, key=lambda ln: -raised[ln.id])[:4]
    read: list[int] = []
    get_nodes = memory.storage.get_nodes

    def counted(name: str, ids: list[str]) -> list[MemoryNode]:
        read.append(len(ids))
        return get_nodes(name, ids)

    monkeypatch.setattr(memory.storage, "get_nodes", counted)
    got = memory.outline.lines(ns, "c", vector, 4, query, thread=(weight, gap))
    assert [ln.position for ln in got] == sorted(ln.position for ln in got)  # oldest first
    assert sorted(got, key=lambda ln: -(ln.threaded or 0.0)) == [replace(ln, threaded=raised[ln.id]) for ln in expected]
    assert read == [4]


def test_the_outline_groups_dated_lines_oldest_first_under_a_budget(memory: Memory, ns: str) -> None:
    msgs = chat()
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=msgs, title="Trips"))
    full = memory.outline.outline(ns, "c", budget_tokens=100_000)
    assert full.title == "Trips" and full.omitted == 0 and full.total_lines == len(expected(msgs))
    assert [d.date for d in full.days] == [(T0 + timedelta(days=3 * d)).date().isoformat() for d in range(12)]
    assert [ln.message_id for d in full.days for ln in d.lines] == [m.id for m in msgs if m.id in expected(msgs)]
    assert full.text.splitlines()[:2] == ["[2024-03-01]", f"Ann: {expected(msgs)['d0a']}"]
    assert "Thanks, Ann" not in full.text

    small = memory.outline.outline(ns, "c", budget_tokens=120)
    assert 0 < small.tokens <= 120 and small.omitted > 0
    head, note = small.text.rsplit("\n", 1)
    assert full.text.startswith(head)  # without a query: the oldest lines, cut at the budget
    assert note == f"({small.omitted} of {full.total_lines} lines left out)"  # and the text says so

    focused = memory.outline.outline(ns, "c", query="the trip to Oslo", budget_tokens=120)
    shown = [ln for d in focused.days for ln in d.lines]
    assert focused.tokens <= 120 and "d2a" in {ln.message_id for ln in shown}  # day 2: Oslo
    assert [ln.created_at for ln in shown] == sorted(ln.created_at for ln in shown if ln.created_at)  # oldest first
    with pytest.raises(NotFoundError):
        memory.outline.outline(ns, "nope")


def test_lines_are_carried_by_export_import_and_migrate(
    memory: Memory, ns: str, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    msgs = chat()
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=msgs))
    want = memory.outline.outline(ns, "c", query="the trip to Oslo", budget_tokens=300)
    lines = lines_of(memory, ns, "c")
    vectors = memory.storage.get_vectors(ns, [n.id for n in lines])
    for embeddings in (False, True):  # re-embedded, or the dump's vectors
        copy = f"{ns}-copy-{int(embeddings)}"
        import_dump(memory, list(export_lines(memory, [ns], embeddings=embeddings)), namespace=copy)
        assert lines_of(memory, copy, "c") == lines
        got = memory.storage.get_vectors(copy, [n.id for n in lines])
        assert all(np.allclose(got[n.id], vectors[n.id], atol=1e-4) for n in lines)
        assert memory.outline.outline(copy, "c", query="the trip to Oslo", budget_tokens=300).text == want.text

    (tmp_path / "other").mkdir()
    local = open_memory(make_settings(tmp_path / "other"), embedder, ExtractiveSummariser())
    try:
        migrate_memory(memory, local, [ns], None)  # from this provider to a local store
        assert lines_of(local, ns, "c") == lines
        assert local.outline.outline(ns, "c", query="the trip to Oslo", budget_tokens=300).text == want.text
    finally:
        local.close()


def test_migrating_into_each_provider_carries_lines(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    (tmp_path / "src").mkdir()
    source = open_memory(make_settings(tmp_path / "src"), embedder, ExtractiveSummariser())
    try:
        source.writer.remember(ns, RememberRequest(conversation_id="c", messages=chat()))
        target = open_store()
        migrate_memory(source, target, [ns], None)
        assert lines_of(target, ns, "c") == lines_of(source, ns, "c")
        q = "the trip to Oslo"
        assert target.outline.outline(ns, "c", q).text == source.outline.outline(ns, "c", q).text
    finally:
        source.close()
