"""`datastore.migrate`: a local store copied into each provider (local, postgres, pinecone) as it is."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from datastore.portability.migrate import migrate_memory as migrate
from datastore.storage import WriteBatch
from models.api import Document, Query, RememberRequest, RememberResponse
from models.core import CorePutRequest
from server.idempotency import remember_once
from services.embedding import LocalEmbedder
from services.errors import EmbeddingMismatchError, StoreError
from services.summarising import ExtractiveSummariser
from tests.support.embedders import OtherEmbedder
from tests.support.settings import make_settings
from tests.support.stores import mark_table, unavailable
from tests.support.synthetic import conversation, document_text

RULES = {
    0: "From now on answer in French.",
    2: "From now on answer in English.",
    6: "I prefer Bootstrap over Foundation.",
}


def c2_request() -> RememberRequest:
    """The remember of conversation c2, sent with the Idempotency-Key "retry-c2"."""
    return RememberRequest(conversation_id="c2", messages=conversation(("Carol", "Dan"), 12))


def keyed_remember(memory: Memory, ns: str, key: str, req: RememberRequest) -> tuple[RememberResponse, int]:
    """`req` remembered through the server's Idempotency-Key path (server/idempotency.py): run once, its answer
    kept under `key`; a retry of a kept key answers the kept answer, and then this raises if the write runs."""

    async def run() -> tuple[RememberResponse, int]:
        if memory.storage.get_source(ns, req.conversation_id or "") is not None:
            raise AssertionError("a retry with a kept Idempotency-Key ran the write again")
        return memory.writer.remember(ns, req), 200

    return asyncio.run(remember_once(memory, ns, key, req, run))


@pytest.fixture
def source(tmp_path: Path, embedder: LocalEmbedder, ns: str) -> Iterator[Memory]:
    """A local store with two namespaces: two conversations (c2 sent with an Idempotency-Key) and a document in
    `ns`, one conversation in `ns-2`, where Eve states three standing instructions to the assistant (the second
    supersedes the first)."""
    (tmp_path / "src").mkdir()
    memory = open_memory(make_settings(tmp_path / "src"), embedder, ExtractiveSummariser())
    memory.writer.remember(ns, RememberRequest(conversation_id="c1", messages=conversation(("Alice", "Bob"), 60)))
    keyed_remember(memory, ns, "retry-c2", c2_request())
    memory.writer.upsert(ns, [Document(id="d1", text=document_text(8, "work"))])
    other = conversation(("Eve", "assistant"), 9)  # rules said to an assistant (a chat between people has none)
    for i, rule in RULES.items():
        other[i] = other[i].model_copy(update={"content": rule})
    memory.writer.remember(f"{ns}-2", RememberRequest(conversation_id="c1", messages=other))
    nodes = memory.storage.source_nodes(ns, "c1")  # every kind of record: visits, a pin, core memory
    memory.visits.record(ns, [nodes[0].id, nodes[0].id, nodes[1].id])
    memory.visits.flush()
    memory.visits.pin(ns, next(n.id for n in nodes if n.level == 2))
    memory.core.put(ns, CorePutRequest(key="name", value="Alice Smith", importance=90))
    memory.core.put(ns, CorePutRequest(key="project", value="the server migration", conversation_id="c1"))
    yield memory
    memory.close()


def _dump(memory: Memory, ns: str, sid: str) -> tuple:
    nodes = memory.storage.source_nodes(ns, sid)
    vectors = memory.storage.get_vectors(ns, [n.id for n in nodes])
    return (
        memory.storage.get_source(ns, sid),
        [m.model_dump() for m in memory.storage.messages(ns, sid, -1)],
        [n.model_dump() for n in nodes],
        {k: np.round(v, 5).tolist() for k, v in vectors.items()},
    )


def _extras(memory: Memory, ns: str) -> tuple:
    """The namespace's marks, core memory entries and standing instructions (with their vectors), as stored."""
    marks = (
        {
            i: (m.visit_count, m.pinned, m.pin_message_ids, m.last_visited_at is not None)
            for i, m in mark_table(memory).get(ns, None).items()
        }
        if memory.storage.marks
        else {}
    )
    core = memory.storage.core.entries(ns, None) if memory.storage.core else []
    return (
        marks,
        sorted((e.conversation_id or "", e.key, e.value, e.importance, e.tokens) for e in core),
        instructions(memory, ns),
    )


def instructions(memory: Memory, ns: str) -> list[tuple]:
    """Every standing instruction of the namespace, oldest first, with its vector (times to the millisecond:
    providers keep them at different grains)."""
    table = memory.storage.instructions
    assert table is not None
    rules = table.entries(ns, include_superseded=True)
    vectors = table.vectors(ns, [i.id for i in rules])

    def ms(when: object) -> object:
        return round(when.timestamp(), 3) if isinstance(when, datetime) else when

    return [
        (
            i.model_dump(exclude={"created_at", "recorded_at"}),
            ms(i.created_at),
            ms(i.recorded_at),
            np.round(vectors[i.id], 5).tolist(),
        )
        for i in rules
    ]


def test_everything_is_copied_verified_and_a_rerun_skips_it(source: Memory, memory: Memory, ns: str) -> None:
    seen: list[tuple] = []
    report = migrate(source, memory, [ns, f"{ns}-2"], lambda *event: seen.append(event))
    assert report["sources"] == 4 and report["copied"] == 4 and report["skipped"] == 0
    assert report["marks"] == 3 and report["core_memory"] == 2
    assert report["instructions"] == 3 and report["namespaces"][f"{ns}-2"]["instructions"] == 3
    assert report["idempotency"] == 1 and memory.storage.idempotency is not None
    assert memory.storage.idempotency.entries(ns) == source.storage.idempotency.entries(ns)  # type: ignore[union-attr]
    # a client retrying its keyed call after the move gets the first answer, and nothing is written again
    assert keyed_remember(memory, ns, "retry-c2", c2_request()) == keyed_remember(source, ns, "retry-c2", c2_request())
    assert _extras(memory, ns) == _extras(source, ns) and _extras(memory, ns)[0]
    assert _extras(memory, f"{ns}-2") == _extras(source, f"{ns}-2")
    rules = memory.instructions.list(f"{ns}-2", include_superseded=True).instructions
    assert [(i.message_id, i.superseded_by is None) for i in rules] == [("m-0", False), ("m-2", True), ("m-6", True)]
    assert report["namespaces"][ns]["messages"] == 73 and report["nodes"] > 10
    assert seen[-1] == (f"{ns}-2", "c1", 1, 1, "copied")
    for space, sid in ((ns, "c1"), (ns, "c2"), (ns, "d1"), (f"{ns}-2", "c1")):
        assert _dump(memory, space, sid) == _dump(source, space, sid)
    q = [Query(query="the server migration ran all weekend", top_k=3)]
    assert [r.id for r in memory.reader.query(ns, q).results[0].results] == [
        r.id for r in source.reader.query(ns, q).results[0].results
    ]

    again = migrate(source, memory, [ns, f"{ns}-2"], None)
    assert again["copied"] == 0 and again["skipped"] == 4


def test_a_destination_without_core_memory_is_refused_before_anything_is_written(
    source: Memory, tmp_path: Path, embedder: LocalEmbedder, ns: str
) -> None:
    (tmp_path / "dst").mkdir()
    dst = open_memory(make_settings(tmp_path / "dst"), embedder, ExtractiveSummariser())
    kept, dst.storage.core = dst.storage.core, None  # as a provider without the capability
    try:
        with pytest.raises(StoreError, match="2 core memory entries"):
            migrate(source, dst, [ns, f"{ns}-2"], None)
        assert dst.storage.list_sources(ns) == []
    finally:
        dst.storage.core = kept
        dst.close()


def test_an_interrupted_copy_resumes(source: Memory, memory: Memory, ns: str) -> None:
    migrate(source, memory, [ns], None)
    c2 = memory.storage.get_source(ns, "c2")
    memory.storage.commit(ns, WriteBatch(source=c2, delete_source=True), c2.version)  # type: ignore[arg-type, union-attr]
    source.writer.remember(
        ns, RememberRequest(conversation_id="c1", messages=conversation(("Alice", "Bob"), 5, first=60))
    )
    report = migrate(source, memory, [ns], None)
    assert report["copied"] == 2 and report["skipped"] == 1  # c2 was missing, c1 changed, d1 is as it was
    for sid in ("c1", "c2"):
        assert _dump(memory, ns, sid) == _dump(source, ns, sid)


def test_all_namespaces_by_default(source: Memory, tmp_path: Path, embedder: LocalEmbedder, ns: str) -> None:
    source.core.put(f"{ns}-3", CorePutRequest(key="name", value="Zoe"))  # a namespace with core memory only
    assert f"{ns}-3" in source.storage.list_namespaces()
    (tmp_path / "dst").mkdir()
    dst = open_memory(make_settings(tmp_path / "dst"), embedder, ExtractiveSummariser())
    try:
        assert set(migrate(source, dst)["namespaces"]) == set(source.storage.list_namespaces())
        assert dst.storage.list_namespaces() == source.storage.list_namespaces()
        assert [e.value for e in dst.core.list_entries(f"{ns}-3").entries] == ["Zoe"]
    finally:
        dst.close()


def test_stores_of_different_embedders_are_refused(source: Memory, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    other = open_memory(make_settings(tmp_path / "other"), OtherEmbedder(), ExtractiveSummariser())
    try:
        with pytest.raises(EmbeddingMismatchError):
            migrate(source, other)
    finally:
        other.close()


def test_cli_migrates_local_to_postgres(source: Memory, pg_server, ns: str) -> None:
    """`pyramind migrate --from local --to postgres`, configured from the environment as a user would."""
    from typer.testing import CliRunner

    from datastore.factory import open_memory
    from local_server.cli import app

    if isinstance(pg_server, str):
        unavailable(pg_server)
    url = pg_server.create_database()
    env = {"LOCAL_DB_PATH": str(source.settings.local_db_path), "POSTGRES_URL": url, "COLUMNS": "200"}
    r = CliRunner().invoke(app, ["migrate", "--from", "local", "--to", "postgres"], env=env)
    assert r.exit_code == 0, r.output
    assert "4 sources copied, 0 already there" in r.output
    assert "3 marks, 2 core memory entries, 3 instructions and 1 idempotency keys" in r.output
    r = CliRunner().invoke(app, ["migrate", "--from", "local", "--to", "postgres"], env=env)
    assert "0 sources copied, 4 already there" in r.output
    dst = open_memory(
        make_settings(source.settings.local_db_path.parent, datastore="postgres", postgres_url=url),
        source.embedder,
        source.summariser,
    )
    try:
        assert _dump(dst, ns, "c1") == _dump(source, ns, "c1")
        assert _extras(dst, ns) == _extras(source, ns)
    finally:
        dst.close()


def _everything(memory: Memory, namespaces: list[str]) -> dict:
    """Every record of the namespaces, exactly as stored: source rows (counters, version, metadata: forks),
    messages (sessions), nodes, their vectors (float32, unrounded), marks, core memory entries and standing
    instructions with their vectors, idempotency records (times to the microsecond)."""
    out: dict = {}
    for space in namespaces:
        sources = {}
        for sid in memory.storage.list_sources(space):
            nodes = memory.storage.source_nodes(space, sid)
            vectors = memory.storage.get_vectors(space, [n.id for n in nodes])
            sources[sid] = (
                memory.storage.get_source(space, sid),
                [m.model_dump() for m in memory.storage.messages(space, sid, -1)],
                [n.model_dump() for n in nodes],
                {i: np.asarray(v, dtype=np.float32).tobytes() for i, v in vectors.items()},
            )
        table, core, marks = memory.storage.instructions, memory.storage.core, memory.storage.marks
        answers = memory.storage.idempotency
        assert table is not None and core is not None and marks is not None and answers is not None
        rules = table.entries(space, include_superseded=True)
        rule_vectors = table.vectors(space, [i.id for i in rules])
        out[space] = {
            "sources": sources,
            "marks": marks.get(space, None),
            "core": sorted(
                (e.model_dump() for e in core.entries(space, None)),
                key=lambda e: (e["conversation_id"] or "", e["key"]),
            ),
            "instructions": [(i.model_dump(), rule_vectors[i.id].astype(np.float32).tobytes()) for i in rules],
            "idempotency": [asdict(r) for r in answers.entries(space)],
        }
    return out


def test_local_pinecone_postgres_local_round_trip_is_lossless(
    source: Memory, pg_server, needle_server, tmp_path: Path, embedder: LocalEmbedder, ns: str
) -> None:
    """Issue 24, item 3: every kind of record (messages with sessions, nodes with vectors, core memory of both
    scopes, standing instructions with supersession, visits, pins, a fork, the answers of keyed writes) survives
    local -> pinecone -> postgres -> local through the real providers, exactly."""
    for server in (pg_server, needle_server):
        if isinstance(server, str):
            unavailable(server)
    source.writer.remember(
        ns,
        RememberRequest(
            conversation_id="c3",
            messages=[
                m.model_copy(update={"session_id": "planning" if i < 8 else "booking"})
                for i, m in enumerate(conversation(("Gil", "Hana"), 16, prefix="s"))
            ],
        ),
    )
    source.forks.fork(ns, "c1", "m-30", "c1-branch")
    source.writer.remember(
        ns, RememberRequest(conversation_id="c1-branch", messages=conversation(("Alice", "Bob"), 4, prefix="b"))
    )
    source.core.put(ns, CorePutRequest(key="visa", value="expires in May", conversation_id="c3", ttl_seconds=86400))
    namespaces = [ns, f"{ns}-2"]
    expected = _everything(source, namespaces)
    assert expected[ns]["sources"]["c1-branch"][0].metadata.get("fork")  # the fork is in what is compared
    assert {m["session_id"] for m in expected[ns]["sources"]["c3"][1]} == {"planning", "booking"}
    assert [r["key"] for r in expected[ns]["idempotency"]] == ["retry-c2"]

    url = pg_server.create_database()
    (tmp_path / "back").mkdir()
    hops = [
        make_settings(tmp_path, datastore="pinecone", pinecone_api_key="x", pinecone_host=needle_server.host),
        make_settings(tmp_path, datastore="postgres", postgres_url=url),
        make_settings(tmp_path / "back"),
    ]
    memories = [open_memory(s, embedder, ExtractiveSummariser()) for s in hops]
    try:
        previous = source
        for memory in memories:
            report = migrate(previous, memory, namespaces, None)
            assert report["copied"] == report["sources"] == 6 and report["core_memory"] == 3
            assert report["idempotency"] == 1
            assert _everything(memory, namespaces) == expected, memory.name
            previous = memory
        back = memories[-1]
        first = keyed_remember(source, ns, "retry-c2", c2_request())
        assert keyed_remember(back, ns, "retry-c2", c2_request()) == first  # the retry after the moves
        q = [Query(query="the server migration ran all weekend", top_k=5)]
        assert [r.id for r in back.reader.query(ns, q).results[0].results] == [
            r.id for r in source.reader.query(ns, q).results[0].results
        ]
    finally:
        for memory in memories:
            memory.close()
        pg_server.drop_database(url)
