"""A forgotten message comes back from no route: no query mode, no level, no expansion, no full-text match."""

from __future__ import annotations

import typing

from models.api import RetrievalMode
from tests.support.settings import AUTH, locomo_sessions
from tests.support.stores import text_search

MODES = list(typing.get_args(RetrievalMode))


async def all_nodes(client, cid: str) -> list[dict]:
    """Every node of a conversation, found by expanding from the query results down and up."""
    r = await client.post(
        "/query",
        headers=AUTH,
        json={"queries": [{"query": "anything", "top_k": 100, "mode": "dense", "filter": {"conversation_id": cid}}]},
    )
    seen: dict[str, dict] = {}
    todo = [x["id"] for x in (await r.get_json())["results"][0]["results"]]
    while todo:
        node_id = todo.pop()
        if node_id in seen:
            continue
        body = await (await client.get(f"/memories/{node_id}", headers=AUTH)).get_json()
        seen[node_id] = body["node"]
        todo += [c["id"] for c in body["children"]] + ([body["parent"]["id"]] if body["parent"] else [])
    return list(seen.values())


async def test_deleted_text_is_found_by_no_route(client, memory, locomo) -> None:
    sessions = locomo_sessions(locomo[0], limit=7)
    for s in sessions:
        body = {
            "conversation_id": "c",
            "messages": [m.model_dump(mode="json", exclude_none=True) for m in s],
            "wait": True,
        }
        assert (await client.post("/remember", headers=AUTH, json=body)).status_code == 200
    victim = max(sessions[2], key=lambda m: len(m.content))  # a long, distinctive message
    before = await all_nodes(client, "c")
    assert any(victim.content in n["text"] for n in before)
    r = await client.delete("/delete", headers=AUTH, json={"ids": [victim.id]})
    assert (await r.get_json())["deleted_messages"] == 1
    after = await all_nodes(client, "c")
    stored = memory.storage.source_nodes("default", "c")
    assert len(after) == len([n for n in stored if n.level >= 1])  # listings leave the lines (level 0) out
    assert all(victim.id not in n.message_ids and victim.content not in n.text for n in stored)  # lines included
    assert max(n["level"] for n in after) >= 3
    for node in after:
        assert victim.id not in node["message_ids"]
        assert victim.content not in node["text"]
    for mode in MODES:
        for level in (1, 2, 3):
            r = await client.post(
                "/query",
                headers=AUTH,
                json={"queries": [{"query": victim.content, "top_k": 100, "mode": mode, "filter": {"level": level}}]},
            )
            assert r.status_code == 200
            for hit in (await r.get_json())["results"][0]["results"]:
                assert victim.content not in hit["text"] and victim.id not in hit["message_ids"]
    assert all(victim.content not in n.text for n, _ in text_search(memory).search("default", victim.content, 100))
