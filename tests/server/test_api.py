"""The HTTP API end to end on the real app, store and embedder; every error path has the one JSON shape."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.settings import AUTH, locomo_sessions

# what an error message must never show: a pydantic class ("instance of QueryRequest") or an exception's name
INTERNAL_NAME = re.compile(r"instance of|\b[A-Z]\w*(Request|Response|Filter|Error|Exception)\b")


def is_error(body: Any, code: str | None = None, field: str | None = None) -> bool:
    assert set(body) == {"error"}, body
    err = body["error"]
    assert isinstance(err["code"], str) and isinstance(err["message"], str) and err["message"]
    assert not INTERNAL_NAME.search(err["message"]), err
    assert set(err) <= {"code", "message", "field"}
    if code:
        assert err["code"] == code, err
    if field:
        assert err.get("field") == field, err
    return True


def msgs(session: list) -> list[dict]:
    return [m.model_dump(mode="json", exclude_none=True) for m in session]


async def test_remember_query_expand_round_trip(client, locomo) -> None:
    sample = locomo[0]
    for session in locomo_sessions(sample, limit=8):
        r = await client.post(
            "/remember", json={"conversation_id": "conv-26", "messages": msgs(session), "wait": True}, headers=AUTH
        )
        assert r.status_code == 200, await r.get_json()
    # a LoCoMo question: its evidence turn comes back among the results
    qa = next(q for q in sample["qa"] if q["evidence"] == ["D1:3"])
    r = await client.post("/query", json={"queries": [{"query": qa["question"], "top_k": 10}]}, headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200
    results = body["results"][0]["results"]
    assert any("D1:3" in x["message_ids"] for x in results)
    assert {"id", "text", "score", "level", "children", "parent_id", "start_time", "end_time"} <= set(results[0])
    # expand an L3 summary down to its L1 chunks
    r = await client.post(
        "/query", json={"queries": [{"query": qa["question"], "top_k": 1, "filter": {"level": 3}}]}, headers=AUTH
    )
    l3 = (await r.get_json())["results"][0]["results"][0]
    assert l3["level"] == 3 and len(l3["children"]) == 5
    r = await client.get(f"/memories/{l3['id']}", headers=AUTH)
    body = await r.get_json()
    assert [c["level"] for c in body["children"]] == [2] * 5
    l2 = body["children"][0]
    assert l2["parent_id"] == l3["id"]
    r = await client.get(f"/memories/{l2['id']}", headers=AUTH)
    body = await r.get_json()
    assert body["parent"]["id"] == l3["id"]
    assert [c["level"] for c in body["children"]] == [1] * 5 and all(c["message_ids"] for c in body["children"])


async def test_upsert_then_delete_forgets_at_every_level(client) -> None:
    text = " ".join(f"Clause {i}: the vault code is kept by officer number {i}." for i in range(120))
    doc = {"id": "policy", "text": text, "metadata": {"source": "file", "author": "ops"}}
    r = await client.post("/upsert", json={"documents": [doc]}, headers=AUTH)
    assert (await r.get_json()) == {"ids": ["policy"], "pending_ids": []}
    query = {"query": "vault code", "top_k": 3, "filter": {"document_id": "policy", "min_level": 2}}
    r = await client.post("/query", json={"queries": [query]}, headers=AUTH)
    assert (await r.get_json())["results"][0]["results"][0]["level"] >= 2
    r = await client.delete("/delete", json={"ids": ["policy"]}, headers=AUTH)
    assert (await r.get_json())["success"] is True
    r = await client.post("/query", json={"queries": [{"query": "vault code", "top_k": 10}]}, headers=AUTH)
    assert (await r.get_json())["results"][0]["results"] == []


async def test_health_is_public_and_says_what_is_in_use(client) -> None:
    r = await client.get("/health")
    assert r.status_code == 200
    assert (await r.get_json()) == {
        "status": "ok",
        "datastore": "local",
        "embedder": "all-MiniLM-L6-v2",
        "embedding_dimension": 384,
        "summariser": "extractive",
        "nodes": {},
    }


BAD_REQUESTS = [
    # (method, path, json body or raw bytes, headers, status, code, field)
    ("POST", "/query", {"queries": [{"query": "x"}]}, {}, 401, "unauthorized", None),
    ("POST", "/query", {"queries": [{"query": "x"}]}, {"Authorization": "Bearer wrong"}, 401, "unauthorized", None),
    ("POST", "/query", {"queries": [{"query": "x"}]}, {"Authorization": "Basic dGVzdA=="}, 401, "unauthorized", None),
    ("POST", "/query", b"{not json", {"Content-Type": "application/json"}, 400, "invalid_json", None),
    ("POST", "/query", {"queries": []}, {}, 422, "invalid_request", "queries"),
    ("POST", "/query", {"queries": [{"query": "x", "top_k": 0}]}, {}, 422, "invalid_request", "queries[0].top_k"),
    ("POST", "/query", {"queries": [{"query": "x", "top_k": "five"}]}, {}, 422, "invalid_request", "queries[0].top_k"),
    ("POST", "/query", {"queries": [{"query": "x", "top_k": 10_000}]}, {}, 422, "invalid_request", "queries[0].top_k"),
    ("POST", "/query", {"queries": [{"query": "x", "bogus": 1}]}, {}, 422, "invalid_request", "queries[0].bogus"),
    (
        "POST",
        "/query",
        {"queries": [{"query": "x", "filter": {"start_date": "yesterday"}}]},
        {},
        422,
        "invalid_request",
        "queries[0].filter.start_date",
    ),
    (
        "POST",
        "/query",
        {"queries": [{"query": "x", "filter": {"min_level": 3, "max_level": 2}}]},
        {},
        422,
        "invalid_request",
        "queries[0].filter.min_level",  # a check across fields names the field it blames
    ),
    ("POST", "/query", {"queries": [{"query": "x"}] * 21}, {}, 422, "invalid_request", "queries"),
    ("POST", "/query", b'{"queries": [{"query": "x"}]}', {}, 400, "invalid_request", None),  # no Content-Type
    ("POST", "/query", {"queries": ["x"]}, {}, 422, "invalid_request", "queries[0]"),
    ("POST", "/remember", {"messages": []}, {}, 422, "invalid_request", "messages"),
    ("POST", "/remember", {"messages": [{"content": ""}]}, {}, 422, "invalid_request", "messages[0].content"),
    ("POST", "/remember", {"messages": [{"content": "   "}]}, {}, 422, "invalid_request", "messages[0].content"),
    (
        "POST",
        "/remember",
        {"messages": [{"content": "x", "created_at": "2023-13-45"}]},
        {},
        422,
        "invalid_request",
        "messages[0].created_at",
    ),
    ("POST", "/remember", {"messages": [{"content": "x" * 40_000}]}, {}, 422, "invalid_request", "messages[0].content"),
    ("POST", "/remember", {"messages": "hello"}, {}, 422, "invalid_request", "messages"),
    ("POST", "/remember", [1, 2], {}, 422, "invalid_request", None),
    ("POST", "/remember", b"x" * (5 * 1024 * 1024), {"Content-Type": "application/json"}, 413, None, None),
    (
        "POST",
        "/upsert",
        {"documents": [{"text": "x", "metadata": {"colour": "red"}}]},
        {},
        422,
        "invalid_request",
        "documents[0].metadata.colour",
    ),
    ("DELETE", "/delete", {}, {}, 422, "invalid_request", "ids"),  # named none: the body names the first choice
    ("DELETE", "/delete", {"ids": ["a"], "delete_all": True}, {}, 422, "invalid_request", "delete_all"),
    ("DELETE", "/delete", {"filter": {"speaker": "Ann"}, "ids": ["a"]}, {}, 422, "invalid_request", "filter"),
    ("DELETE", "/delete", {"delete_all": True, "conversation_id": "c"}, {}, 422, "invalid_request", "conversation_id"),
    ("DELETE", "/delete", {"filter": {}}, {}, 422, "invalid_request", "filter"),
    ("DELETE", "/delete", {"ids": ["nope"]}, {}, 404, "not_found", "ids"),
    ("GET", "/memories/nope", None, {}, 404, "not_found", "id"),
    ("GET", "/nowhere", None, {}, 404, "not_found", None),
    ("GET", "/remember", None, {}, 405, "method_not_allowed", None),
]


@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "code", "field"), BAD_REQUESTS)
async def test_bad_requests_get_one_error_shape_and_change_nothing(  # noqa: PLR0913 (the parametrize columns)
    client, memory, method, path, body, headers, status, code, field
) -> None:
    before = memory.storage.counts("default")
    hdrs = {**AUTH, **headers} if "Authorization" not in headers else headers
    if not headers.get("Authorization") and status == 401:
        hdrs = {}
    kwargs: dict[str, Any] = {"headers": hdrs}
    if isinstance(body, bytes):
        kwargs["data"] = body
    elif body is not None:
        kwargs["json"] = body
    r = await client.open(path, method=method, **kwargs)
    assert r.status_code == status, await r.get_data()
    assert r.content_type.startswith("application/json")
    assert is_error(await r.get_json(), code, field)
    assert memory.storage.counts("default") == before


async def test_a_resend_without_ids_is_new_and_the_returned_ids_make_it_safe(client) -> None:
    """A message sent without `id` is a new message each time (two people may well say the
    same thing twice); the answer's `message_ids` names each message of the call (given or generated, in order),
    so a client that resends with them changes nothing."""
    turns = [{"speaker": "Ann", "content": "Book the tram tour."}, {"speaker": "Bob", "content": "Booked."}]
    for wait in (True, False):
        cid = f"resend-{wait}"
        r = await client.post("/remember", json={"conversation_id": cid, "wait": wait, "messages": turns}, headers=AUTH)
        first = await r.get_json()
        assert len(first["message_ids"]) == 2 and len(set(first["message_ids"])) == 2
        r = await client.post("/remember", json={"conversation_id": cid, "wait": wait, "messages": turns}, headers=AUTH)
        again = await r.get_json()
        assert set(again["message_ids"]).isdisjoint(first["message_ids"]) and again["skipped_message_ids"] == []
        with_ids = [{**t, "id": i} for t, i in zip(turns, first["message_ids"], strict=True)]
        r = await client.post(
            "/remember", json={"conversation_id": cid, "wait": wait, "messages": with_ids}, headers=AUTH
        )
        safe = await r.get_json()
        assert r.status_code == 200 and safe["message_ids"] == first["message_ids"]
        assert safe["skipped_message_ids"] == first["message_ids"] and safe["pending_message_ids"] == []
        listed = (await (await client.get(f"/conversations/{cid}/messages", headers=AUTH)).get_json())["messages"]
        assert [m["id"] for m in listed] == first["message_ids"] + again["message_ids"]


async def test_a_message_remembered_late_takes_its_place_by_time(client, memory) -> None:
    """A message re-remembered after its deletion (or any message older than the
    conversation's latest) is inserted by `created_at`, not appended after newer ones, with or without wait."""
    from tests.support.invariants import check_tree

    def turn(i: int) -> dict:
        return {
            "id": f"t{i}",
            "speaker": "Ann" if i % 2 else "Bob",
            "created_at": f"2024-06-01T10:{i:02d}:00Z",
            "content": f"Turn {i} of the planning talk: the budget line number {i} is settled.",
        }

    s = memory.settings
    for wait in (True, False):
        cid = f"late-{wait}"
        r = await client.post(
            "/remember",
            json={"conversation_id": cid, "wait": True, "messages": [turn(i) for i in range(30)]},
            headers=AUTH,
        )
        assert r.status_code == 200
        r = await client.delete("/delete", json={"ids": ["t7", "t20"], "conversation_id": cid}, headers=AUTH)
        assert r.status_code == 200
        r = await client.post(
            "/remember", json={"conversation_id": cid, "wait": wait, "messages": [turn(7), turn(20)]}, headers=AUTH
        )
        assert r.status_code == (200 if wait else 202), await r.get_json()
        if not wait:
            memory.steps.backlog()  # what the background indexer does
        listed = (await (await client.get(f"/conversations/{cid}/messages", headers=AUTH)).get_json())["messages"]
        assert [m["id"] for m in listed] == [f"t{i}" for i in range(30)]
        assert [m["seq"] for m in listed] == list(range(30))
        r = await client.post(
            "/query",
            json={
                "queries": [{"query": "Turn 7 of the planning talk", "top_k": 1, "filter": {"conversation_id": cid}}]
            },
            headers=AUTH,
        )
        hit = (await r.get_json())["results"][0]["results"][0]
        assert "t7" in hit["message_ids"] and hit["text"].index("Turn 6 ") < hit["text"].index("Turn 7 ")
        check_tree(memory.storage.source_nodes("default", cid), s.chunk_size, s.chunk_overlap, s.fan_out)
