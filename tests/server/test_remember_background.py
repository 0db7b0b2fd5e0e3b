"""POST /remember stores and answers 202; the app's background indexer makes the messages searchable, then
summarised; `wait: true` answers with the chunks; a restart finds the backlog; a full backlog answers 429."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from datastore.factory import open_memory
from datastore.memory import Memory
from loopback.openai_server import LoopbackOpenAI
from models.api import Message, RememberRequest
from models.settings import Settings
from server.app import create_app
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser, OpenAISummariser
from tests.support.settings import AUTH, make_settings


def body(cid: str, n: int, word: str, **extra: Any) -> dict:
    return {
        "conversation_id": cid,
        **extra,
        "messages": [
            {
                "id": f"{cid}-{i}",
                "speaker": ("Ann", "Bob")[i % 2],
                "content": f"Day {i}: the {word} was moved from shelf {i} to the attic, said the note on the door.",
            }
            for i in range(n)
        ],
    }


@asynccontextmanager
async def app_client(settings: Settings, memory: Memory) -> AsyncIterator[Any]:
    app = create_app(settings, memory)
    async with app.test_app() as test_app:
        yield test_app.test_client()


async def found(client: Any, word: str, namespace: str | None = None) -> bool:
    q: dict[str, Any] = {"queries": [{"query": f"where is the {word}", "top_k": 3, "mode": "text"}]}
    if namespace:
        q["namespace"] = namespace
    r = await client.post("/query", json=q, headers=AUTH)
    return any(word in x["text"] for x in (await r.get_json())["results"][0]["results"])


async def until(check: Any, timeout: float = 180) -> float:
    """Seconds until the async `check()` is true; fails after `timeout`."""
    t0 = time.monotonic()
    while not await check():
        assert time.monotonic() - t0 < timeout, "not done in time"
        await asyncio.sleep(0.05)
    return time.monotonic() - t0


async def test_remember_answers_202_with_pending_ids_then_the_indexer_makes_them_searchable(client) -> None:
    r = await client.post("/remember", json=body("c", 12, "harmonica"), headers=AUTH)
    made = await r.get_json()
    assert r.status_code == 202, made
    assert made["pending_message_ids"] == [f"c-{i}" for i in range(12)]
    assert (made["chunk_ids"], made["summary_ids"]) == ([], [])
    await until(lambda: found(client, "harmonica"))
    r = await client.post("/remember", json=body("c", 3, "harmonica"), headers=AUTH)  # all known: nothing pending
    assert r.status_code == 200 and (await r.get_json())["skipped_message_ids"] == ["c-0", "c-1", "c-2"]


async def test_wait_true_answers_with_the_chunks_and_summaries(client, memory) -> None:
    r = await client.post("/remember", json=body("c", 40, "trombone", wait=True), headers=AUTH)
    made = await r.get_json()
    assert r.status_code == 200 and not made["pending_message_ids"], made
    assert made["chunk_ids"] and made["summary_ids"]
    nodes = {n.id: n for n in memory.storage.source_nodes("default", "c")}
    assert set(made["chunk_ids"]) == {i for i, n in nodes.items() if n.level == 1}
    assert set(made["summary_ids"]) == {i for i, n in nodes.items() if n.level > 1}
    assert await found(client, "trombone")
    # the next call extends the open chunk and says so
    more = body("c", 41, "trombone", wait=True)
    more["messages"] = more["messages"][40:]
    open_before = memory.steps.open_chunk_id("default", "c")
    made = await (await client.post("/remember", json=more, headers=AUTH)).get_json()
    assert made["updated_chunk_ids"] == ([open_before] if open_before else []), made


async def test_a_restarted_app_indexes_the_backlog_it_finds_in_the_store(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    settings = make_settings(tmp_path)
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    try:
        msgs = [Message(**m) for m in body("c", 80, "accordion")["messages"]]
        memory.writer.accept("default", RememberRequest(conversation_id="c", messages=msgs))  # then the server died
        assert memory.storage.backlog() == [("default", "c")]
        async with app_client(settings, memory) as client:
            await until(lambda: found(client, "accordion"))

            async def summarised() -> bool:
                return not memory.storage.backlog() and not memory.storage.unrolled()

            await until(summarised)
        assert any(n.level > 1 for n in memory.storage.source_nodes("default", "c"))
    finally:
        memory.close()


async def test_a_namespace_over_its_backlog_cap_gets_429_and_others_do_not(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    settings = make_settings(tmp_path, max_pending_tokens=500)
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    try:
        async with app_client(settings, memory) as client:
            big = body("big", 100, "cello", namespace="bulk")  # ~6,000 characters: ~1,500 tokens queued
            assert (await client.post("/remember", json=big, headers=AUTH)).status_code == 202
            r = await client.post("/remember", json=body("more", 2, "cello", namespace="bulk"), headers=AUTH)
            assert r.status_code == 429, await r.get_json()
            assert (await r.get_json())["error"]["code"] == "too_many_requests"
            assert 1 <= int(r.headers["Retry-After"]) <= 60
            r = await client.post("/remember", json=body("c", 2, "flute", namespace="other"), headers=AUTH)
            assert r.status_code == 202
            await until(lambda: found(client, "flute", "other"))
            await until(lambda: found(client, "cello", "bulk"))
            assert memory.storage.counts("bulk")["messages"] == 100  # the refused call stored nothing

            async def accepted() -> bool:  # once the backlog is indexed, the namespace may send again
                r = await client.post("/remember", json=body("more", 2, "cello", namespace="bulk"), headers=AUTH)
                return r.status_code == 202

            await until(accepted)
    finally:
        memory.close()


async def test_one_namespace_big_backlog_does_not_hold_back_another(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """The indexer takes namespaces in turn, a bounded step each: a small call waits one step, not the backlog."""
    settings = make_settings(tmp_path, index_chunk_batch=4)
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    try:
        async with app_client(settings, memory) as client:
            big = body("big", 400, "bassoon", namespace="bulk")
            assert (await client.post("/remember", json=big, headers=AUTH)).status_code == 202
            r = await client.post("/remember", json=body("c", 2, "ukulele", namespace="other"), headers=AUTH)
            assert r.status_code == 202
            await until(lambda: found(client, "ukulele", "other"))
            assert ("bulk", "big") in memory.storage.backlog(), (
                "the small call was indexed only after the whole backlog"
            )
    finally:
        memory.close()


async def test_summaries_of_different_conversations_are_made_concurrently(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    with LoopbackOpenAI(delay=1.0) as llm:
        settings = make_settings(
            tmp_path,
            openai_api_key=llm.api_key,
            openai_base_url=llm.base_url,
            openai_max_retries=0,
            index_summary_concurrency=3,
        )
        memory = open_memory(settings, embedder, OpenAISummariser(settings, ExtractiveSummariser()))
        try:
            async with app_client(settings, memory) as client:
                for cid in ("a", "b", "c"):
                    r = await client.post("/remember", json=body(cid, 150, "oboe"), headers=AUTH)
                    assert r.status_code == 202

                async def summarised() -> bool:
                    return (
                        not memory.storage.backlog()
                        and not memory.storage.unrolled()
                        and all(
                            any(n.level > 1 for n in memory.storage.source_nodes("default", cid))
                            for cid in ("a", "b", "c")
                        )
                    )

                await until(summarised)
            assert llm.peak_concurrent >= 2, "summaries of different conversations were made one at a time"
            made_by = {
                n.summariser for cid in "abc" for n in memory.storage.source_nodes("default", cid) if n.level > 1
            }
            assert made_by == {"openai:gpt-4o-mini"}
        finally:
            memory.close()


class SlowEmbedder:
    """The real embedder, taking `delay` seconds more for each bulk call (a slow model on a busy machine)."""

    def __init__(self, inner: LocalEmbedder, delay: float) -> None:
        self.inner, self.delay = inner, delay
        self.model_name, self.dimension = inner.model_name, inner.dimension
        self.bulk_calls_started = self.bulk_calls_done = 0

    def close(self) -> None:
        """Nothing to release (the inner embedder is the session's)."""

    def embed(self, texts: list[str], *, bulk: bool = False) -> Any:
        if bulk:
            self.bulk_calls_started += 1
        out = self.inner.embed(texts, bulk=bulk)
        if bulk:
            time.sleep(self.delay)
            self.bulk_calls_done += 1
        return out

    @property
    def in_flight(self) -> int:
        """Bulk calls running now (a background step inside its embedding)."""
        return self.bulk_calls_started - self.bulk_calls_done


async def test_stopping_waits_for_a_running_step_and_the_lock_table_empties(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """A clean shutdown: the app stops the indexer before the store closes, and `stop` waits for the
    step already running (it commits whole), past its grace; the lanes' per-source locks are not kept once no
    one holds them."""
    settings = make_settings(tmp_path, index_chunk_batch=4)
    slow = SlowEmbedder(embedder, 1.5)
    memory = open_memory(settings, slow, ExtractiveSummariser())
    try:
        app = create_app(settings, memory)
        async with app.test_app() as test_app:
            client = test_app.test_client()
            indexer = app.extensions["pyramind.indexer"]
            for cid in ("a", "b", "c"):  # ~15 chunks each, 4 a step: steps keep running for a while
                r = await client.post("/remember", json=body(cid, 120, "harp"), headers=AUTH)
                assert r.status_code == 202
            await until(lambda: _true(slow.bulk_calls_done >= 1 and slow.in_flight >= 1))  # a step is running
            before = slow.bulk_calls_done
            await indexer.stop(grace=0.1)
            done = slow.bulk_calls_done
            assert done > before  # the step running when stop was called ended before stop returned
            await asyncio.sleep(2.0)
            assert slow.bulk_calls_done == done  # nothing runs after stop: no step is left on the store
            assert len(indexer.chunks.locks) == 0 and len(indexer.summaries.locks) == 0
            app.extensions.pop("pyramind.indexer")  # stopped here; the app's own stop would find nothing
        assert memory.storage.backlog()  # the queued steps never started: their messages stay backlog
    finally:
        memory.close()


async def _true(value: bool) -> bool:
    return value


async def test_chunks_are_searchable_while_the_model_reads_them_for_instructions(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    release = threading.Event()

    def held(request: dict) -> str:  # the model answers only once released
        release.wait(60)
        sent = json.loads(request["messages"][-1]["content"])
        return json.dumps(
            {
                "instructions": [
                    {
                        "message_id": m["message_id"],
                        "text": m["content"],
                        "kind": "preference",
                        "subject": "css framework",
                    }
                    for m in sent
                    if "Bootstrap" in m["content"]
                ]
            }
        )

    with LoopbackOpenAI() as llm:
        llm.chat_reply = held
        settings = make_settings(
            tmp_path,
            summariser="openai",
            openai_api_key=llm.api_key,
            openai_base_url=llm.base_url,
            openai_max_retries=0,
        )
        memory = open_memory(settings, embedder, ExtractiveSummariser())  # the detector: the model
        try:
            async with app_client(settings, memory) as client:
                payload = body("c", 12, "kazoo", user="Ann")  # a chat between Ann and Bob: Ann's memory
                payload["messages"][4]["content"] = "I prefer Bootstrap over Foundation."  # said by Ann
                assert (await client.post("/remember", json=payload, headers=AUTH)).status_code == 202

                async def asked() -> bool:
                    return any(path == "/v1/chat/completions" for path, _ in llm.requests)

                await until(asked)  # the model holds the messages...
                assert await found(client, "kazoo")  # ...and their chunks are searchable already
                assert not memory.instructions.list("default").instructions
                release.set()

                async def kept() -> bool:
                    return bool(memory.instructions.list("default").instructions)

                await until(kept)
                assert [i.message_id for i in memory.instructions.list("default").instructions] == ["c-4"]
                source = memory.storage.get_source("default", "c")
                assert source is not None and "unread_from" not in source.metadata
        finally:
            release.set()
            memory.close()
