"""Store now, index later: accept_sync stores only; bounded chunk and summary steps build the same tree as an
inline remember; the backlog is found in the store; the indexer's queue takes namespaces in turn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from datastore.factory import open_memory
from datastore.indexing.background import RoundRobin
from datastore.memory import Memory
from models.api import Message, RememberRequest
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from tests.support.invariants import check_tree
from tests.support.settings import make_settings
from tests.support.stores import recompose

NS = "default"


def messages(n: int, prefix: str = "m") -> list[Message]:
    """`n` messages a minute apart from a fixed time: two stores fed them at different moments render the same
    stamps (a message without `created_at` is stamped when it is stored)."""
    return [
        Message(
            id=f"{prefix}{i}",
            speaker=("Ann", "Bob")[i % 2],
            created_at=datetime(2024, 1, 1, 9, 0, tzinfo=UTC) + timedelta(minutes=i),
            content=f"Note {i}: the {('red', 'blue', 'green')[i % 3]} kite flew over hill {i} today. "
            f"We wrote down that the wind was {i % 7} knots.",
        )
        for i in range(n)
    ]


def open_store(tmp_path: Path, embedder: LocalEmbedder, name: str) -> Memory:
    settings = make_settings(tmp_path, local_db_path=tmp_path / f"{name}.db", chunk_size=48, chunk_overlap=8)
    return open_memory(settings, embedder, ExtractiveSummariser())


def tree(memory: Memory, sid: str) -> list[tuple[int, int, str, bool]]:
    return sorted((n.level, n.position, n.text, n.sealed) for n in memory.storage.source_nodes(NS, sid))


def test_accept_stores_the_messages_and_builds_nothing(tmp_path: Path, embedder: LocalEmbedder) -> None:
    memory = open_store(tmp_path, embedder, "a")
    try:
        r = memory.writer.accept(NS, RememberRequest(conversation_id="c", messages=messages(12)))
        assert r.pending_message_ids == [f"m{i}" for i in range(12)]
        assert (r.chunk_ids, r.updated_chunk_ids, r.summary_ids) == ([], [], [])
        assert memory.storage.source_nodes(NS, "c") == [] and len(memory.storage.messages(NS, "c", 0)) == 12
        assert memory.storage.backlog() == [(NS, "c")]
        again = memory.writer.accept(NS, RememberRequest(conversation_id="c", messages=messages(3)))
        assert again.skipped_message_ids == ["m0", "m1", "m2"] and not again.pending_message_ids
    finally:
        memory.close()


def test_bounded_steps_build_the_tree_an_inline_remember_builds(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """Chunks first in steps of at most 2, then summaries: the same chunks and summaries as remember_sync."""
    inline, stepped = open_store(tmp_path, embedder, "inline"), open_store(tmp_path, embedder, "stepped")
    try:
        batches = [messages(40)[i : i + 10] for i in range(0, 40, 10)]
        for b in batches:
            inline.writer.remember(NS, RememberRequest(conversation_id="c", messages=b))
            stepped.writer.accept(NS, RememberRequest(conversation_id="c", messages=b))
        steps = 0
        while True:
            step = stepped.steps.chunks(NS, "c", max_chunks=2)
            assert len(step.created) + len(step.updated) <= 2
            steps += 1
            if not step.more:
                break
        assert steps > 3 and stepped.storage.backlog() == [] and step.rollable
        assert not any(n.level > 1 for n in stepped.storage.source_nodes(NS, "c"))  # chunks only: summaries come after
        assert stepped.storage.unrolled() == [(NS, "c")]
        s = stepped.settings
        check_tree(
            stepped.storage.source_nodes(NS, "c"),
            s.chunk_size,
            s.chunk_overlap,
            s.fan_out,
            s.max_level,
            rolled_up=False,
        )
        while stepped.steps.summaries(NS, "c", max_chunks=5).more:
            pass
        assert stepped.storage.unrolled() == []
        check_tree(stepped.storage.source_nodes(NS, "c"), s.chunk_size, s.chunk_overlap, s.fan_out, s.max_level)
        assert tree(stepped, "c") == tree(inline, "c")
        assert max(level for level, *_ in tree(stepped, "c")) >= 2
    finally:
        inline.close()
        stepped.close()


def test_messages_appended_during_a_step_stay_backlog(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """A chunk step commits what it read; messages accepted after it are indexed by the next step."""
    memory = open_store(tmp_path, embedder, "a")
    try:
        memory.writer.accept(NS, RememberRequest(conversation_id="c", messages=messages(8)))
        real = memory.embedder

        class AppendingEmbedder:  # the real embedder; a client's remember lands while the first call runs
            appended = False

            def __getattr__(self, name: str) -> object:
                return getattr(real, name)

            def embed(self, texts: list[str], bulk: bool = False):
                out = real.embed(texts, bulk=bulk)
                if not self.appended:
                    self.appended = True
                    memory.writer.accept(NS, RememberRequest(conversation_id="c", messages=messages(14)[8:]))
                return out

        first = recompose(memory, embedder=AppendingEmbedder()).steps.chunks(NS, "c", max_chunks=100)
        assert first.created and first.backlog_tokens > 0  # committed despite the append, which stays backlog
        assert memory.storage.backlog() == [(NS, "c")]
        memory.steps.backlog()
        covered = {m for n in memory.storage.source_nodes(NS, "c") if n.level == 1 for m in n.message_ids}
        assert covered == {f"m{i}" for i in range(14)} and memory.storage.backlog() == []
    finally:
        memory.close()


def test_round_robin_takes_namespaces_in_turn() -> None:
    q = RoundRobin()
    for key in [("big", "a"), ("big", "b"), ("big", "c"), ("small", "x"), ("big", "a")]:
        q.add(key)
    assert len(q) == 4  # a source queued twice is queued once
    order = [q.pop() for _ in range(4)]
    assert order == [("big", "a"), ("small", "x"), ("big", "b"), ("big", "c")] and q.pop() is None
