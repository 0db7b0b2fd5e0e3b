"""GET /metrics: Prometheus text scraped after real requests on a real app and store; the counters and histograms
move with the requests, the indexer's backlog and lag with its work, and the endpoint is refused without a token."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from datastore.factory import open_memory
from datastore.memory import Memory
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from tests.server.test_remember_background import app_client, found
from tests.support.embedders import FailingEmbedder
from tests.support.settings import AUTH, make_settings

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: Any) -> Samples:
    """Every sample of a /metrics scrape: {(name, labels): value}."""
    r = await client.get("/metrics", headers=AUTH)
    assert r.status_code == 200, await r.get_data(as_text=True)
    assert r.content_type.startswith("text/plain")
    text = await r.get_data(as_text=True)
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; 0 when it is not there (a counter never incremented)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def body(cid: str, n: int, word: str, **extra: Any) -> dict:
    return {
        "conversation_id": cid,
        **extra,
        "messages": [
            {"id": f"{cid}-{i}", "speaker": "Ann", "content": f"Day {i}: the {word} went to shelf {i} in the attic."}
            for i in range(n)
        ],
    }


async def until(check: Any, timeout: float = 120) -> None:
    t0 = time.monotonic()
    while not await check():
        assert time.monotonic() - t0 < timeout, "not done in time"
        await asyncio.sleep(0.05)


async def test_requests_are_counted_and_timed_by_route_rule_and_status(client) -> None:
    before = await scrape(client)
    made = await (await client.post("/remember", json=body("c", 6, "banjo", wait=True), headers=AUTH)).get_json()
    chunk = made["chunk_ids"][0]
    q = {"queries": [{"query": "where did the banjo go", "top_k": 3}]}
    assert (await client.post("/query", json=q, headers=AUTH)).status_code == 200
    assert (await client.post("/query", json=q, headers=AUTH)).status_code == 200
    assert (await client.get(f"/memories/{chunk}", headers=AUTH)).status_code == 200
    assert (await client.get("/memories/no-such-node", headers=AUTH)).status_code == 404
    assert (await client.post("/query", json={"queries": []}, headers=AUTH)).status_code == 422
    assert (await client.get("/no/such/path/42", headers=AUTH)).status_code == 404
    after = await scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    total = "pyramind_http_requests_total"
    assert moved(total, method="POST", route="/query", status="200") == 2
    assert moved(total, method="POST", route="/query", status="422") == 1
    assert moved(total, method="POST", route="/remember", status="200") == 1
    # the route's rule, not the raw path: both ids fall under one label, apart by status
    assert moved(total, method="GET", route="/memories/<string:memory_id>", status="200") == 1
    assert moved(total, method="GET", route="/memories/<string:memory_id>", status="404") == 1
    assert moved(total, method="GET", route="<unmatched>", status="404") == 1
    assert not any("no-such-node" in dict(labels).get("route", "") for _, labels in after)
    assert moved(total, method="GET", route="/metrics", status="200") == 1  # the first scrape
    hist = "pyramind_http_request_duration_seconds"
    assert moved(f"{hist}_count", method="POST", route="/query", status="200") == 2
    assert moved(f"{hist}_sum", method="POST", route="/query", status="200") > 0
    assert moved(f"{hist}_bucket", method="POST", route="/query", status="200", le="+Inf") == 2
    # the query loaded the namespace's index: held in memory now, its load timed
    assert value(after, "pyramind_index_namespaces") == 1
    assert value(after, "pyramind_index_nodes") >= len(made["chunk_ids"])
    assert value(after, "pyramind_index_max_nodes") == 1_000_000
    assert value(after, "pyramind_index_load_seconds_count", kind="load") >= 1
    assert value(after, "process_resident_memory_bytes") > 0


async def test_mcp_calls_are_counted_under_their_route(client) -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {**AUTH, "Accept": "application/json, text/event-stream"}
    assert (await client.post("/mcp", json=call, headers=headers)).status_code == 200
    after = await scrape(client)
    assert value(after, "pyramind_http_requests_total", method="POST", route="/mcp", status="200") == 1


async def test_a_scrape_without_the_token_is_refused(client) -> None:
    r = await client.get("/metrics")
    assert r.status_code == 401 and (await r.get_json())["error"]["code"] == "unauthorized"
    r = await client.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
    assert r.status_code == 401
    assert "pyramind_http_requests_total" not in await r.get_data(as_text=True)


async def test_metrics_can_be_turned_off(tmp_path: Path, local_memory: Memory) -> None:
    async with app_client(make_settings(tmp_path, metrics_enabled=False), local_memory) as client:
        assert (await client.get("/metrics", headers=AUTH)).status_code == 404
        assert (await client.get("/health")).status_code == 200


async def test_two_apps_in_one_process_count_apart(tmp_path: Path, local_memory: Memory) -> None:
    settings = make_settings(tmp_path)
    async with app_client(settings, local_memory) as one, app_client(settings, local_memory) as two:
        for _ in range(3):
            assert (await one.get("/stats", headers=AUTH)).status_code == 200
        ones, twos = await scrape(one), await scrape(two)
        stats = {"method": "GET", "route": "/stats", "status": "200"}
        assert value(ones, "pyramind_http_requests_total", **stats) == 3
        assert value(twos, "pyramind_http_requests_total", **stats) == 0


class GatedEmbedder:
    """The real embedder, whose bulk calls (the indexer's) wait until `gate` is set: a backlog that stays."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner, self.gate = inner, threading.Event()
        self.model_name, self.dimension = inner.model_name, inner.dimension

    def close(self) -> None:
        """Nothing to release (the inner embedder is the session's)."""

    def embed(self, texts: list[str], *, bulk: bool = False) -> Any:
        if bulk:
            assert self.gate.wait(120), "the gate was never opened"
        return self.inner.embed(texts, bulk=bulk)


async def test_the_indexing_backlog_and_its_lag_are_exported(tmp_path: Path, embedder: LocalEmbedder) -> None:
    settings = make_settings(tmp_path)
    gated = GatedEmbedder(embedder)
    memory = open_memory(settings, gated, ExtractiveSummariser())
    try:
        async with app_client(settings, memory) as client:
            try:
                r = await client.post("/remember", json=body("c", 20, "tuba"), headers=AUTH)
                assert r.status_code == 202
                await asyncio.sleep(0.3)
                waiting = await scrape(client)
                assert value(waiting, "pyramind_indexing_backlog_sources", lane="chunks") == 1
                assert value(waiting, "pyramind_indexing_backlog_tokens") > 50  # 20 messages, ~55 characters each
                assert value(waiting, "pyramind_indexing_lag_seconds") >= 0.3
            finally:
                gated.gate.set()

            async def indexed() -> bool:
                s = await scrape(client)
                return value(s, "pyramind_indexing_backlog_sources", lane="chunks") == 0

            await until(indexed)
            done = await scrape(client)
            assert value(done, "pyramind_indexing_backlog_tokens") == 0
            assert value(done, "pyramind_indexing_lag_seconds") == 0
    finally:
        memory.close()


async def test_indexing_failures_are_counted_by_code(tmp_path: Path, embedder: LocalEmbedder) -> None:
    settings = make_settings(tmp_path)
    memory = open_memory(settings, FailingEmbedder(embedder), ExtractiveSummariser())
    try:
        async with app_client(settings, memory) as client:
            assert (await client.post("/remember", json=body("c", 3, "oboe"), headers=AUTH)).status_code == 202

            async def failed() -> bool:
                s = await scrape(client)
                return value(s, "pyramind_indexing_failures_total", code="embedding_failed") >= 1

            await until(failed)
            s = await scrape(client)
            assert value(s, "pyramind_indexing_backlog_sources", lane="chunks") == 1  # kept for the next scan
            assert value(s, "pyramind_store_errors_total", where="indexing", code="embedding_failed") == 0
    finally:
        memory.close()


async def test_a_request_ended_by_a_store_error_is_counted(tmp_path: Path, embedder: LocalEmbedder) -> None:
    settings = make_settings(tmp_path)
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    async with app_client(settings, memory) as client:
        memory.storage.close()  # the store goes away under the server
        r = await client.get("/stats", headers=AUTH)
        assert r.status_code == 500 and (await r.get_json())["error"]["code"] == "store_error"
        s = await scrape(client)
        assert value(s, "pyramind_store_errors_total", where="request", code="store_error") == 1
        assert value(s, "pyramind_http_requests_total", method="GET", route="/stats", status="500") == 1


async def test_the_start_preload_of_index_snapshots_is_exported(tmp_path: Path, embedder: LocalEmbedder) -> None:
    settings = make_settings(
        tmp_path, index_snapshot_dir=tmp_path / "snapshots", index_snapshot_min_nodes=0, index_preload_share=1.0
    )
    before = open_memory(settings, embedder, ExtractiveSummariser())  # the previous life: searched, snapshotted
    async with app_client(settings, before) as client:
        assert (await client.post("/remember", json=body("c", 12, "kazoo"), headers=AUTH)).status_code == 202
        await until(lambda: found(client, "kazoo"))
        held = value(await scrape(client), "pyramind_index_nodes")
        assert value(await scrape(client), "pyramind_index_preloaded_namespaces") == 0
    before.close()  # writes the snapshot
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    try:
        async with app_client(settings, memory) as client:

            async def preloaded() -> bool:
                return value(await scrape(client), "pyramind_index_preload_done") == 1

            await until(preloaded)
            s = await scrape(client)
            assert value(s, "pyramind_index_preloaded_namespaces") == 1
            assert value(s, "pyramind_index_preloaded_nodes") == held > 0
            assert value(s, "pyramind_index_preload_seconds") > 0
            assert value(s, "pyramind_index_load_seconds_count", kind="preload") == 1
            assert await found(client, "kazoo")
            assert value(await scrape(client), "pyramind_index_load_seconds_count", kind="load") == 0
    finally:
        memory.close()
