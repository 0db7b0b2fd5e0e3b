"""Shared read-only memory over HTTP: a JWT's `read_namespaces` grant, a missing grant (403), a write to a
read-only namespace (403), and READ_ONLY_NAMESPACES for the static token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from models.api import Message, RememberRequest
from server.app import create_app
from services.summarising import ExtractiveSummariser
from tests.server.test_api import is_error
from tests.server.test_auth import SECRET, bearer, hs_token
from tests.support.settings import AUTH, make_settings
from tests.support.stores import mark_table


@pytest.fixture
async def app_and_store(tmp_path: Path, embedder) -> AsyncIterator[tuple[Any, Memory]]:
    settings = make_settings(tmp_path, auth="jwt", jwt_secret=SECRET)
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    app = create_app(settings, memory)
    async with app.test_app() as test_app:
        yield test_app.test_client(), memory
    memory.close()


async def say(client, headers, cid: str, text: str) -> None:
    r = await client.post(
        "/remember",
        headers=headers,
        json={"conversation_id": cid, "wait": True, "messages": [{"id": f"{cid}-1", "speaker": "x", "content": text}]},
    )
    assert r.status_code == 200, await r.get_json()


async def test_grant_missing_grant_and_write_attempt(app_and_store) -> None:
    client, memory = app_and_store
    team = bearer(hs_token("team"))
    alice = bearer(hs_token("alice", read_namespaces=["team"]))
    bob = bearer(hs_token("bob"))
    await say(client, team, "handbook", "The office wifi password is printed on the kitchen fridge.")
    await say(client, alice, "notes", "My own wifi at home is called BlueFern.")

    body = {"namespaces": ["alice", "team"], "queries": [{"query": "wifi password", "top_k": 5}]}
    r = await client.post("/query", json=body, headers=alice)
    results = (await r.get_json())["results"][0]["results"]
    assert r.status_code == 200 and {x["namespace"] for x in results} == {"alice", "team"}
    assert next(x for x in results if x["namespace"] == "team")["conversation_id"] == "handbook"
    memory.visits.flush()
    assert mark_table(memory).get("team", None) == {}  # reading a granted namespace writes nothing there
    assert mark_table(memory).get("alice", None)

    r = await client.post("/query", json=body, headers=bob)  # no grant
    assert r.status_code == 403 and is_error(await r.get_json(), "forbidden", "namespaces")
    r = await client.post("/query", json={"namespaces": ["alice", "bob"], "queries": [{"query": "x"}]}, headers=bob)
    assert r.status_code == 403

    before = memory.storage.counts("team")
    for method, path, payload in (
        ("post", "/remember", {"namespace": "team", "messages": [{"content": "overwrite"}]}),
        ("post", "/upsert", {"namespace": "team", "documents": [{"text": "overwrite"}]}),
        ("delete", "/delete", {"namespace": "team", "delete_all": True}),
    ):
        r = await getattr(client, method)(path, json=payload, headers=alice)
        assert r.status_code == 403 and is_error(await r.get_json(), "forbidden", "namespace"), path
    hit = results[0]["id"] if results[0]["namespace"] == "team" else results[1]["id"]
    r = await client.post(f"/memories/{hit}/pin?namespace=team", headers=alice)
    assert r.status_code == 403
    assert memory.storage.counts("team") == before

    bad = bearer(hs_token("carol", read_namespaces="not a list!"))
    r = await client.post("/query", json=body, headers=bad)
    assert r.status_code == 401


async def test_static_token_read_only_namespaces(tmp_path: Path, embedder) -> None:
    settings = make_settings(tmp_path, read_only_namespaces="library")
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    try:
        memory.writer.remember(
            "library",
            RememberRequest(
                conversation_id="shelf", messages=[Message(speaker="x", content="The atlas is on the top shelf.")]
            ),
        )
        app = create_app(settings, memory)
        async with app.test_app() as test_app:
            client = test_app.test_client()
            r = await client.post(
                "/query",
                headers=AUTH,
                json={"namespaces": ["default", "library"], "queries": [{"query": "where is the atlas"}]},
            )
            results = (await r.get_json())["results"][0]["results"]
            assert r.status_code == 200 and results[0]["namespace"] == "library"
            r = await client.post(
                "/query", headers=AUTH, json={"namespaces": ["elsewhere"], "queries": [{"query": "atlas"}]}
            )
            assert r.status_code == 403
            r = await client.post(
                "/remember", headers=AUTH, json={"namespace": "library", "messages": [{"content": "the atlas is gone"}]}
            )
            assert r.status_code == 403 and is_error(await r.get_json(), "forbidden", "namespace")
            r = await client.post(
                "/query", headers=AUTH, json={"namespace": "library", "queries": [{"query": "atlas"}]}
            )
            assert r.status_code == 200
    finally:
        memory.close()
