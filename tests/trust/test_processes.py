"""Several server processes, one store, one memory (issue 24, item 2).

Three `python -m server.main` processes share one PostgreSQL database (and, in the second case, one needledb
Pinecone index). Eight writers remember messages through them (each writer through one process, `wait: true`,
so a 200 is an acknowledged, searchable write); right after each acknowledgement the message's unique word is
searched through the two OTHER processes until it is found: every read must see it within READ_WITHIN seconds.
Then a conversation is forgotten through one process and must be gone from the others' searches within the same
time (their in-memory indexes learn of other processes' writes and deletes from the store's namespace version).
Afterwards the store is opened directly: every acknowledged message is stored exactly once, and every
conversation's tree is sound (tests.support.invariants.check_tree).

The scale is bounded for a shared 2-core machine (WRITERS x CALLS x PER_CALL = 8 x 6 x 3 messages); the full
run of issue 24 (8 writers x 1,000 messages) is the same test with `PYRAMIND_PROCESSES_CALLS=100
PYRAMIND_PROCESSES_PER_CALL=10` in the environment (its figures are in bench/RESULTS.md, "Several processes").
A second, fast test runs what several processes' indexers do to one conversation at once (its steps, from three
Memories over one store): its tree stays sound on PostgreSQL (one transaction per commit) and on Pinecone (the
writers' lease on the conversation, datastore/locks.py).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from loopback.servers import Needle, Postgres
from models.api import RememberRequest
from models.settings import Settings
from services.embedding import LocalEmbedder
from services.errors import ConflictError
from services.summarising import ExtractiveSummariser
from tests.support.invariants import check_tree
from tests.support.stores import unavailable
from tests.trust.harness import AUTH, ServerProcess

ENV = {"CHUNK_SIZE": "64", "CHUNK_OVERLAP": "16", "FAN_OUT": "5", "PG_POOL_SIZE": "4"}
PROCESSES = 3
WRITERS = 8
CALLS = int(os.environ.get("PYRAMIND_PROCESSES_CALLS", "6"))
PER_CALL = int(os.environ.get("PYRAMIND_PROCESSES_PER_CALL", "3"))
READ_WITHIN = 1.0  # seconds from an acknowledged write to its being found through every other process


def word(w: int, c: int, j: int) -> str:
    """A word no other message holds (one BM25 term)."""
    return f"zq{w}x{c}y{j}"


def body(w: int, c: int) -> dict:
    return {
        "conversation_id": f"w{w}",
        "wait": True,
        "messages": [
            {
                "id": f"w{w}-c{c}-m{j}",
                "speaker": ("Ana", "Ben")[j % 2],
                "content": f"Writer {w} call {c} note {j}: the code word is {word(w, c, j)}, keep it.",
            }
            for j in range(PER_CALL)
        ],
    }


async def found(client: httpx.AsyncClient, text: str, conversation: str) -> bool:
    r = await client.post(
        "/query",
        json={"queries": [{"query": text, "top_k": 3, "mode": "text", "filter": {"conversation_id": conversation}}]},
    )
    if r.status_code == 404:  # the conversation is not there (yet, or any more)
        return False
    assert r.status_code == 200, r.text
    return any(text in x["text"] for x in r.json()["results"][0]["results"])


async def seen_within(client: httpx.AsyncClient, text: str, conversation: str, present: bool) -> float:
    """Seconds from now to the sending of the first search through `client` that finds `text` (present) or no
    longer finds it; fails when no search sent within READ_WITHIN does."""
    start = time.monotonic()
    while True:
        sent = time.monotonic() - start
        if sent > READ_WITHIN:
            raise AssertionError(f"{text!r} {'not found' if present else 'still found'} after {READ_WITHIN} s")
        if await found(client, text, conversation) == present:
            return sent
        await asyncio.sleep(0.02)


@pytest.fixture(params=["local", "postgres", "pinecone"])
def store_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The settings (as environment) of one fresh shared store: a new SQLite file, a new PostgreSQL database, or
    a needledb index."""
    if request.param == "local":
        yield {"DATASTORE": "local", "LOCAL_DB_PATH": str(tmp_path / "shared.sqlite")}
    elif request.param == "postgres":
        try:
            pg = Postgres().start()
        except Exception as exc:
            unavailable(f"PostgreSQL (pgserver wheel) could not start: {exc}")
        url = pg.create_database()
        try:
            yield {"DATASTORE": "postgres", "POSTGRES_URL": url}
        finally:
            pg.stop()
    else:
        try:
            needle = Needle().start()
        except Exception as exc:
            unavailable(f"needledb could not start: {exc}")
        try:
            yield {"DATASTORE": "pinecone", "PINECONE_API_KEY": "x", "PINECONE_HOST": needle.host}
        finally:
            needle.stop()


async def test_three_processes_on_one_store_are_one_memory(
    store_env: dict[str, str], tmp_path: Path, embedder: LocalEmbedder
) -> None:
    env = {**ENV, **store_env}
    procs = [ServerProcess(tmp_path / "unused.db", tmp_path / f"server{i}.log", env) for i in range(PROCESSES)]
    try:
        for p in procs:
            p.start()
        clients = [httpx.AsyncClient(base_url=p.url, headers=AUTH, timeout=120) for p in procs]
        lags: list[float] = []

        async def writer(w: int) -> None:
            mine = clients[w % PROCESSES]
            others = [c for i, c in enumerate(clients) if i != w % PROCESSES]
            for c in range(CALLS):
                r = await mine.post("/remember", json=body(w, c))
                assert r.status_code == 200, r.text  # acknowledged and searchable through its own process
                for other in others:
                    lags.append(await seen_within(other, word(w, c, PER_CALL - 1), f"w{w}", present=True))

        await asyncio.gather(*(writer(w) for w in range(WRITERS)))
        # a forgotten conversation is gone from every process's search
        r = await clients[0].request("DELETE", "/delete", json={"ids": ["w1"]})
        assert r.status_code == 200, r.text
        for other in clients[1:]:
            lags.append(await seen_within(other, word(1, 0, 0), "w1", present=False))
        for c in clients:
            await c.aclose()
    finally:
        for p in procs:
            p.stop()
    assert max(lags) <= READ_WITHIN
    print(
        f"{store_env['DATASTORE']}: {WRITERS} writers x {CALLS * PER_CALL} messages through {PROCESSES} processes, "
        f"{len(lags)} reads through the others: lag p50 {statistics.median(lags):.3f} s, max {max(lags):.3f} s"
    )
    settings = Settings(_env_file=None, **{k.lower(): v for k, v in env.items()})  # type: ignore[arg-type]
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    try:
        ns = "default"
        assert memory.storage.get_source(ns, "w1") is None
        for w in [w for w in range(WRITERS) if w != 1]:
            messages = memory.storage.messages(ns, f"w{w}")
            want = [f"w{w}-c{c}-m{j}" for c in range(CALLS) for j in range(PER_CALL)]
            assert [m.id for m in messages] == want  # 0 lost, none twice, in order
            check_tree(memory.storage.source_nodes(ns, f"w{w}"), 64, 16, 5, settings.max_level)
    finally:
        memory.close()


def test_two_processes_indexing_one_conversation_keep_its_tree_sound(
    store_env: dict[str, str], tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """What the processes' indexers do when their scans (`Storage.backlog`, `Storage.unrolled`) find a conversation
    that another process is indexing: three Memories over one store (three processes' worth) run the chunk and
    summary steps of one conversation at once, a step at a time, after each call accepted through one of them.
    On PostgreSQL the version check and the write are one transaction; Pinecone's commit reads the version, then
    writes, so two steps could both commit (the full-scale run's broken tree, bench/RESULTS.md, "Several server
    processes") but for the lease each Memory's locks take on the conversation around its commit."""
    settings = Settings(_env_file=None, **{k.lower(): v for k, v in {**ENV, **store_env}.items()})  # type: ignore[arg-type]
    memories = [open_memory(settings, embedder, ExtractiveSummariser()) for _ in range(PROCESSES)]
    ns, failures = "race", []

    def drive(memory: Memory) -> None:
        try:
            for _ in range(40):  # more steps than the call needs: the ones left find nothing to do
                try:
                    memory.steps.chunks(ns, "c", max_chunks=1)
                    memory.steps.summaries(ns, "c", max_chunks=1)
                except ConflictError:
                    continue  # another process committed first: the next step reads its state
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            failures.append(exc)

    try:
        for c in range(6):
            memories[c % PROCESSES].writer.accept(
                ns, RememberRequest.model_validate(body(0, c) | {"conversation_id": "c"})
            )
            threads = [threading.Thread(target=drive, args=(m,)) for m in memories]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not failures, failures
            check_tree(memories[0].storage.source_nodes(ns, "c"), 64, 16, 5, settings.max_level, rolled_up=False)
    finally:
        for memory in memories:
            memory.close()
