"""One ranking on every provider (issue 24, item 1): the same memories give the same results, in the same order,
with the same scores, on local, postgres and pinecone, in every mode and under filters, and the same after a
forget. (Before, PostgreSQL ranked text by `ts_rank` and Pinecone had no text half at all.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from models.api import DeleteRequest, Query, QueryFilter, RememberRequest
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from tests.support.settings import make_settings
from tests.support.synthetic import conversation

QUESTIONS = [
    "where did they go hiking",
    "the lake cabin trip",
    "what did Ben cook for dinner",
    "violin lessons",
    "zzz qqq",
]
FILTERS = [None, QueryFilter(conversation_id="c1"), QueryFilter(speaker="Eve"), QueryFilter(level=2)]


def fill(memory: Memory, ns: str) -> None:
    for i, pair in enumerate((("Ann", "Ben"), ("Cy", "Dee"), ("Eve", "Fay"))):
        messages = conversation(pair, 40, prefix=f"c{i}")
        for j in range(0, len(messages), 10):  # incremental writes, as a chat app sends them
            memory.writer.remember(ns, RememberRequest(conversation_id=f"c{i}", messages=messages[j : j + 10]))


def ranked(memory: Memory, ns: str) -> list[list[tuple[str, int, int, tuple[str, ...], float]]]:
    """Every query's results as (conversation, level, position, message ids, score): node ids are the store's."""
    out = []
    for mode in ("hybrid", "text", "dense", "tree"):
        for flt in FILTERS:
            queries = [Query(query=q, top_k=6, mode=mode, filter=flt) for q in QUESTIONS]
            for res in memory.reader.query(ns, queries, record_visits=False).results:
                out.append(
                    [
                        (r.conversation_id or "", r.level, _position(memory, ns, r.id), tuple(r.message_ids), r.score)
                        for r in res.results
                    ]
                )
    return out


def _position(memory: Memory, ns: str, node_id: str) -> int:
    return memory.storage.get_nodes(ns, [node_id])[0].position


def same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert [r[:4] for r in x] == [r[:4] for r in y], (i, x, y)
        assert [r[4] for r in x] == pytest.approx([r[4] for r in y], abs=1e-5)


def test_every_provider_ranks_as_the_embedded_store(
    memory: Memory, ns: str, tmp_path: Path, embedder: LocalEmbedder, open_store: Callable[..., Memory]
) -> None:
    reference = open_memory(make_settings(tmp_path / "ref"), embedder, ExtractiveSummariser())
    try:
        fill(reference, ns)
        fill(memory, ns)
        want = ranked(reference, ns)
        assert any(len(r) == 6 for r in want) and any(r and r[0][4] > 0 for r in want)
        same(ranked(memory, ns), want)
        again = open_store()  # another process over the same store: its indexes load from the store alone
        same(ranked(again, ns), want)
        for each in (reference, memory):
            each.deleter.delete(ns, DeleteRequest(ids=["c1-3", "c1-4"], conversation_id="c1"))
        want = ranked(reference, ns)
        same(ranked(memory, ns), want)
        same(ranked(again, ns), want)  # learnt the other process's delete from the store
    finally:
        reference.close()
