"""POST /context and /core over HTTP on the real app, store and embedder: round trip, bad input, namespaces."""

from __future__ import annotations

from typing import Any

from tests.server.test_api import is_error
from tests.support.settings import AUTH

MESSAGES = [
    {
        "id": "m1",
        "speaker": "Ann",
        "content": "I start my new job as a nurse in Porto on Monday.",
        "created_at": "2024-05-01T09:00:00Z",
    },
    {"id": "m2", "speaker": "Bo", "content": "Congratulations! Which hospital?", "created_at": "2024-05-01T09:01:00Z"},
    {
        "id": "m3",
        "speaker": "Ann",
        "content": "Santo António, in the paediatric ward.",
        "created_at": "2024-05-01T09:02:00Z",
    },
]


async def _seed(client, ns: str | None = None) -> None:
    extra = {"namespace": ns} if ns else {}
    r = await client.put("/core", json={"key": "name", "value": "Ann Lee", "importance": 90, **extra}, headers=AUTH)
    assert r.status_code == 200, await r.get_json()
    r = await client.post(
        "/remember", json={"conversation_id": "c1", "messages": MESSAGES, "wait": True, **extra}, headers=AUTH
    )
    assert r.status_code == 200, await r.get_json()


async def test_core_remember_context_round_trip(client) -> None:
    await _seed(client)
    r = await client.post(
        "/context",
        json={"conversation_id": "c1", "budget_tokens": 300, "user_name": "Ann", "now": "2024-05-04T09:30:00Z"},
        headers=AUTH,
    )
    body = await r.get_json()
    assert r.status_code == 200, body
    assert body["tokens_used"] <= 300 and body["budget_tokens"] == 300
    assert [s["name"] for s in body["sections"]] == ["core", "instructions", "recent", "relevant", "timeline"]
    assert "- name: Ann Lee" in body["context"]
    assert (
        "## Recent turns\n[2024-05-01, 3 days ago]\nAnn: I start my new job as a nurse in Porto on Monday.\n"
        "Bo: Congratulations! Which hospital?\nAnn: Santo António, in the paediatric ward."
    ) in body["context"]
    item = body["sections"][2]["items"][-1]
    assert {"id", "level", "text", "speaker", "start_time", "end_time", "score", "why"} <= set(item)
    r = await client.get("/core", headers=AUTH)
    body = await r.get_json()
    assert [e["key"] for e in body["entries"]] == ["name"] and body["budget_tokens"] == 500
    r = await client.delete("/core/name", headers=AUTH)
    assert r.status_code == 200 and (await r.get_json())["deleted"] is True
    r = await client.delete("/core/name", headers=AUTH)
    assert r.status_code == 404 and is_error(await r.get_json(), "not_found", "key")


async def test_bad_input_is_a_4xx_naming_the_field_and_changes_nothing(client) -> None:
    await _seed(client)
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"budget_tokens": 0}, 422, "budget_tokens"),
        ({"budget_tokens": 10**6}, 422, "budget_tokens"),
        ({"budget_tokens": "big"}, 422, "budget_tokens"),
        ({"template": "{memories} {password}"}, 422, "template"),
        ({"memory_template": "{text} {secret}"}, 422, "memory_template"),
        ({"surprise": 1}, 422, "surprise"),
    ]
    for body, status, field in cases:
        r = await client.post("/context", json={"conversation_id": "c1", **body}, headers=AUTH)
        assert r.status_code == status, (body, await r.get_json())
        assert is_error(await r.get_json(), field=field)
    core_cases: list[tuple[dict[str, Any], int, str]] = [
        ({"key": "bio", "value": "word " * 600}, 422, "value"),
        ({"key": "mood", "value": "tired", "ttl_seconds": "soon"}, 422, "ttl_seconds"),
        ({"key": "mood", "value": "tired", "ttl_seconds": -1}, 422, "ttl_seconds"),
        ({"key": "mood", "value": "tired", "importance": 101}, 422, "importance"),
    ]
    for body, status, field in core_cases:
        r = await client.put("/core", json=body, headers=AUTH)
        assert r.status_code == status, (body, await r.get_json())
        assert is_error(await r.get_json(), field=field)
    r = await client.get("/core", headers=AUTH)
    assert [e["key"] for e in (await r.get_json())["entries"]] == ["name"]  # nothing changed


async def test_the_first_turn_of_a_new_conversation_gets_a_block(client) -> None:
    """A chat app's first turn: context before the conversation was ever remembered. It is an empty one: the
    namespace's core memory and memories still count."""
    await _seed(client)
    r = await client.post(
        "/context",
        json={"conversation_id": "brand-new", "query": "Where does Ann work?", "now": "2024-05-04T09:30:00Z"},
        headers=AUTH,
    )
    body = await r.get_json()
    assert r.status_code == 200, body
    sections = {s["name"]: s for s in body["sections"]}
    assert [i["id"] for i in sections["core"]["items"]] == ["name"] and not sections["recent"]["items"]
    assert "Santo António" in body["context"]  # the namespace's memory of c1


async def test_another_namespace_gets_nothing(client) -> None:
    await _seed(client, "alice")
    r = await client.post("/context", json={"namespace": "bob", "conversation_id": "c1"}, headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and all(not s["items"] for s in body["sections"]) and "Ann" not in body["context"]
    r = await client.post("/context", json={"namespace": "bob", "query": "nurse in Porto"}, headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and all(not s["items"] for s in body["sections"])
    assert "Ann" not in body["context"]
    r = await client.get("/core?namespace=bob", headers=AUTH)
    assert (await r.get_json())["entries"] == []
    r = await client.delete("/core/name?namespace=bob", headers=AUTH)
    assert r.status_code == 404
    r = await client.get("/core?namespace=alice", headers=AUTH)
    assert [e["key"] for e in (await r.get_json())["entries"]] == ["name"]


async def test_the_endpoints_are_in_the_openapi_document(client) -> None:
    doc = await (await client.get("/openapi.json")).get_json()
    assert {"post"} <= set(doc["paths"]["/context"]) and {"get", "put"} <= set(doc["paths"]["/core"])
    assert "delete" in doc["paths"]["/core/{key}"]
    for path in ("/context", "/core", "/core/{key}"):
        for op in doc["paths"][path].values():
            assert len(op.get("description", "")) <= 300
