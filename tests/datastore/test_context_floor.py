"""The relevance floor of the context block (datastore/read/ranking.py `Floor`): a memory that shares only a common
word with the query is not shown as relevant, a namespace of several conversations asked without one draws from
the conversation the query is about, a query no memory passes gets one line saying so, and what is under the floor
is never read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from datastore.memory import Memory
from datastore.read.ranking import Floor, passing
from models.api import Message, QueryFilter, RememberRequest
from models.context import NOTHING, ContextRequest
from models.memory import MemoryNode
from tests.support.synthetic import LONG_NOW


def _remember(memory: Memory) -> None:
    """A personal chat about a December trip, and a chat between two dancers, in one namespace."""
    at = LONG_NOW - timedelta(days=20)
    trip = [
        ("user", "In December I am flying to Oslo to see my sister and her two kids."),
        ("assistant", "That sounds lovely. Oslo in December is dark but the Christmas markets are beautiful."),
        ("user", "My sister loves knitting and her kids are crazy about dinosaurs."),
    ]
    dance = [
        ("Maria", "I had an idea for our routine: we could bring back the spin from last year's show."),
        ("Luis", "Great idea! Bring your red shoes to rehearsal on Thursday, the floor is slippery."),
        ("Maria", "Sure. The choreographer wants the tango section twice as fast now."),
    ]
    for cid, turns in (("trip", trip), ("dance", dance)):
        memory.writer.remember(
            "ns",
            RememberRequest(
                conversation_id=cid,
                messages=[
                    Message(id=f"{cid}{i}", speaker=who, content=text, created_at=at + timedelta(minutes=i))
                    for i, (who, text) in enumerate(turns)
                ],
            ),
        )


def test_a_memory_sharing_only_common_words_is_not_relevant(local_memory: Memory) -> None:
    _remember(local_memory)
    res = local_memory.context.assemble(
        "ns", ContextRequest(query="Any ideas for a gift to bring on my December trip?", recent=False, now=LONG_NOW)
    )
    shown = {i.source_id for s in res.sections if s.name in ("relevant", "timeline") for i in s.items}
    assert shown == {"trip"}, res.context
    assert "Oslo" in res.context and "tango" not in res.context


def test_a_query_no_memory_passes_gets_one_line(local_memory: Memory) -> None:
    _remember(local_memory)
    for cid in (None, "trip"):
        res = local_memory.context.assemble(
            "ns",
            ContextRequest(
                conversation_id=cid, query="quarterly corporate tax filing deadlines", recent=False, now=LONG_NOW
            ),
        )
        relevant = next(s for s in res.sections if s.name == "relevant")
        timeline = next(s for s in res.sections if s.name == "timeline")
        assert not relevant.items and not timeline.items, res.context
        assert f"## Relevant memories\n{NOTHING}" in res.context
        assert res.tokens_used < 40  # the room is not filled
    res = local_memory.context.assemble(
        "ns", ContextRequest(query="When am I flying to Oslo to see my sister?", now=LONG_NOW)
    )
    assert NOTHING not in res.context and "Oslo" in res.context


@pytest.fixture
def read(local_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the nodes read from `local_memory`'s store (get_nodes), in order, as the test goes."""
    ids_read: list[str] = []
    get_nodes = local_memory.storage.get_nodes

    def counted(ns: str, ids: Sequence[str]) -> list[MemoryNode]:
        ids_read.extend(ids)
        return get_nodes(ns, ids)

    monkeypatch.setattr(local_memory.storage, "get_nodes", counted)
    return ids_read


@pytest.mark.parametrize("mode", ["hybrid", "dense", "text", "tree"])
def test_a_search_with_a_floor_returns_what_passes_and_reads_only_that(
    local_memory: Memory, mode: str, read: list[str]
) -> None:
    """`Reader.search` with a floor gives the search's own hits that pass it, in order (the block's candidates);
    a hybrid search reads from the store only the nodes it returns."""
    _remember(local_memory)
    reader, floor = local_memory.reader, Floor(words=0.2, meaning=0.35)
    left_out = kept = 0
    for query in ("Any ideas for a gift to bring on my December trip?", "the floor is slippery at rehearsal"):
        vector = local_memory.embedder.embed([query])[0]
        for flt in (None, QueryFilter(conversation_id="dance")):
            everything = reader.search("ns", query, vector, 10, flt, mode)
            expected = passing(reader.search_view, "ns", everything, vector, floor)
            left_out, kept = left_out + len(everything) - len(expected), kept + len(expected)
            read.clear()
            found = reader.search("ns", query, vector, 10, flt, mode, floor)
            assert [(n.id, s) for n, s in found] == [(n.id, s) for n, s in expected], (query, mode, flt)
            if mode == "hybrid":
                assert sorted(read) == sorted(n.id for n, _ in found)
    assert left_out and kept  # the floor took some hits and kept some


def test_the_lines_under_the_floor_are_left_out_unread(local_memory: Memory, read: list[str]) -> None:
    """`Outline.lines` with a floor gives those of its top_k lines that pass it (by their score and cosine), and
    reads only them."""
    _remember(local_memory)
    floor = Floor(words=0.2, meaning=0.35)
    query = "Any ideas for a gift to bring on my December trip?"
    vector = local_memory.embedder.embed([query])[0]
    every = local_memory.outline.lines("ns", "trip", vector, 3, query)
    expected = [ln for ln in every if floor.passes(ln.score or 0.0, ln.cosine or 0.0)]
    assert 0 < len(expected) < len(every)
    read.clear()
    found = local_memory.outline.lines("ns", "trip", vector, 3, query, floor=floor)
    assert found == expected
    assert sorted(read) == sorted(ln.id for ln in found)
