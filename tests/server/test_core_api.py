"""PUT /core scoped to a conversation not yet remembered, over HTTP on the real app and local store."""

from __future__ import annotations

from tests.support.settings import AUTH


async def test_core_memory_of_a_conversation_not_yet_remembered_waits_for_it(client) -> None:
    """An unknown conversation is an empty one: core memory scoped to it is kept (it used to
    be a 404) and shows in its context blocks once it starts."""
    r = await client.put(
        "/core", json={"key": "goal", "value": "Ann wants to learn the cello", "conversation_id": "later"}, headers=AUTH
    )
    body = await r.get_json()
    assert r.status_code == 200, body
    assert body["entry"]["conversation_id"] == "later" and body["moved_out"] == []
    r = await client.get("/core?conversation_id=later", headers=AUTH)
    assert [e["key"] for e in (await r.get_json())["entries"]] == ["goal"]
    r = await client.get("/core", headers=AUTH)
    assert (await r.get_json())["entries"] == []  # scoped to the conversation, not the namespace

    r = await client.post(
        "/remember",
        json={
            "conversation_id": "later",
            "wait": True,
            "messages": [{"speaker": "Ann", "content": "Which teacher should I call first?"}],
        },
        headers=AUTH,
    )
    assert r.status_code == 200
    r = await client.post("/context", json={"conversation_id": "later", "budget_tokens": 500}, headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200, body
    core = next(s for s in body["sections"] if s["name"] == "core")
    assert any("learn the cello" in item["text"] for item in core["items"])
