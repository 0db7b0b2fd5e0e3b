"""One consistent API (issue 27): an unknown conversation in a filter is an empty answer with a warning, not a
404; every body validation error is a 422 naming the field; /context and /query share MAX_QUERY_CHARS; MCP is
as strict as REST; a write resent with the same Idempotency-Key is answered once and stored once; the OpenAPI
document says all of it. On the real app, store and embedder (and the real MCP client over HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datastore.memory import Memory
from server.openapi import named_schemas
from tests.server.test_mcp import TOKEN, data, error_text, mcp_client, serving
from tests.support.settings import AUTH, make_settings

CHAT = [
    {"id": "m1", "speaker": "Ann", "content": "My cat Pepper likes the red cushion."},
    {"id": "m2", "speaker": "Bob", "content": "Pepper sleeps all day then."},
]


def warned(body: dict[str, Any], conversation_id: str, field: str) -> bool:
    assert body["warnings"] == [
        {
            "code": "unknown_conversation",
            "conversation_id": conversation_id,
            "field": field,
            "message": body["warnings"][0]["message"],
        }
    ], body
    assert conversation_id in body["warnings"][0]["message"]
    return True


async def test_a_filter_on_an_unknown_conversation_is_empty_with_a_warning(client: Any) -> None:
    r = await client.post("/remember", json={"conversation_id": "c1", "messages": CHAT, "wait": True}, headers=AUTH)
    assert r.status_code == 200
    for mode in ("hybrid", "dense", "text", "tree"):
        queries = [
            {"query": "Pepper", "mode": mode},
            {"query": "Pepper", "mode": mode, "filter": {"conversation_id": "not-yet"}},
        ]
        r = await client.post("/query", json={"queries": queries}, headers=AUTH)
        body = await r.get_json()
        assert r.status_code == 200, body
        assert body["results"][0]["results"] and body["results"][1]["results"] == []
        assert warned(body, "not-yet", "queries[1].filter.conversation_id")
    r = await client.post("/query", json={"queries": [{"query": "Pepper"}]}, headers=AUTH)
    assert (await r.get_json())["warnings"] == []  # a known namespace-wide search warns of nothing

    r = await client.post("/find", json={"pattern": "Pepper", "conversation_id": "not-yet"}, headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and body["matches"] == [] and warned(body, "not-yet", "conversation_id")
    r = await client.get("/stats?conversation_id=not-yet", headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and body["messages"] == 0 and warned(body, "not-yet", "conversation_id")
    r = await client.get("/instructions?conversation_id=not-yet", headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and body["instructions"] == [] and warned(body, "not-yet", "conversation_id")

    # right after it is forgotten: the same empty answer
    assert (await client.delete("/delete", json={"ids": ["c1"]}, headers=AUTH)).status_code == 200
    r = await client.post(
        "/query", json={"queries": [{"query": "Pepper", "filter": {"conversation_id": "c1"}}]}, headers=AUTH
    )
    assert r.status_code == 200 and warned(await r.get_json(), "c1", "queries[0].filter.conversation_id")
    # a path that names the resource stays a 404
    for path in ("/conversations/not-yet", "/conversations/not-yet/messages"):
        r = await client.get(path, headers=AUTH)
        assert r.status_code == 404 and (await r.get_json())["error"]["code"] == "not_found"


async def test_every_body_validation_error_is_a_422_naming_the_field(client: Any, settings: Any) -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/query", {"queries": [{"query": "x", "top_k": "five"}]}, "queries[0].top_k"),
        ("/query", {"queries": [{"query": "x", "top_k": 10_000}]}, "queries[0].top_k"),
        ("/query", {"queries": [{"query": "x", "filtre": {}}]}, "queries[0].filtre"),
        ("/remember", {"messages": [{"content": 5}]}, "messages[0].content"),
        ("/find", {"pattern": "x", "regex": "yes"}, "regex"),
        ("/context", {"budget_tokens": "big"}, "budget_tokens"),
        ("/upsert", {"documents": [{"text": "x", "metadata": {"colour": "red"}}]}, "documents[0].metadata.colour"),
    ]
    for path, body, field in cases:
        r = await client.post(path, json=body, headers=AUTH)
        got = await r.get_json()
        assert r.status_code == 422, (path, body, got)
        assert got["error"]["field"] == field, got
        assert "http" not in got["error"]["message"]
    # /context and /query: one limit (MAX_QUERY_CHARS), one answer
    long = "x" * (settings.max_query_chars + 1)
    r_query = await client.post("/query", json={"queries": [{"query": long}]}, headers=AUTH)
    r_context = await client.post("/context", json={"query": long}, headers=AUTH)
    assert r_query.status_code == r_context.status_code == 422
    said_query, said_context = (await r_query.get_json())["error"], (await r_context.get_json())["error"]
    assert said_query["message"] == said_context["message"] and "MAX_QUERY_CHARS" in said_query["message"]
    assert (said_query["field"], said_context["field"]) == ("queries[0].query", "query")
    r = await client.post("/context", json={"query": "x" * settings.max_query_chars}, headers=AUTH)
    assert r.status_code == 200


async def test_an_idempotency_key_stores_once_and_answers_the_same(client: Any, memory: Memory) -> None:
    """A retry of a remember after a timeout: messages without ids would be stored twice without the key."""
    plain = [{"speaker": "Ann", "content": "Book the tram tour for Friday."}]
    key = {**AUTH, "Idempotency-Key": "retry-1"}
    first = await client.post("/remember", json={"conversation_id": "t", "messages": plain}, headers=key)
    again = await client.post("/remember", json={"conversation_id": "t", "messages": plain}, headers=key)
    assert first.status_code == again.status_code and first.status_code in (200, 202)
    assert await first.get_json() == await again.get_json()
    assert memory.storage.counts("default")["messages"] == 1
    other = await client.post("/remember", json={"conversation_id": "t", "messages": CHAT}, headers=key)
    body = await other.get_json()
    assert other.status_code == 422 and body["error"]["field"] == "Idempotency-Key", body
    assert memory.storage.counts("default")["messages"] == 1
    # per namespace: the same key elsewhere is a new request
    r = await client.post("/remember", json={"namespace": "b", "conversation_id": "t", "messages": plain}, headers=key)
    assert r.status_code in (200, 202) and memory.storage.counts("b")["messages"] == 1
    # upsert too
    doc = {"documents": [{"text": "The vault code is kept by officer 7."}]}
    up1 = await client.post("/upsert", json=doc, headers={**AUTH, "Idempotency-Key": "doc-1"})
    up2 = await client.post("/upsert", json=doc, headers={**AUTH, "Idempotency-Key": "doc-1"})
    assert up1.status_code == 200 and await up1.get_json() == await up2.get_json()
    r = await client.post("/upsert", json=doc, headers={**AUTH, "Idempotency-Key": ""})
    assert r.status_code == 422 and (await r.get_json())["error"]["field"] == "Idempotency-Key"


async def test_the_openapi_document_describes_warnings_422s_and_the_header(client: Any, settings: Any) -> None:
    doc = await (await client.get("/openapi.json")).get_json()
    for path in ("/remember", "/upsert"):
        params = doc["paths"][path]["post"].get("parameters", [])
        header = [p for p in params if p["in"] == "header"]
        assert [p["name"] for p in header] == ["Idempotency-Key"], params
        assert "24 hours" in header[0]["description"]
    for path, method in (("/query", "post"), ("/find", "post"), ("/remember", "post"), ("/context", "post")):
        assert "422" in doc["paths"][path][method]["responses"], path
    schemas = named_schemas(doc)
    warning = schemas["RequestWarning"]
    assert set(warning["properties"]) == {"code", "message", "field", "conversation_id"}
    for schema in ("QueryResponse", "FindResponse", "StatsResponse", "InstructionList"):
        assert "warnings" in schemas[schema]["properties"], schema
    assert "404" not in doc["paths"]["/find"]["post"]["responses"]
    query = doc["components"]["schemas"]["Query"]["properties"]["query"]
    context = [b for b in schemas["ContextRequest"]["properties"]["query"]["anyOf"] if b.get("type") == "string"]
    assert query["maxLength"] == context[0]["maxLength"] == settings.max_query_chars  # one limit


async def test_mcp_is_as_strict_as_rest(tmp_path: Path, memory: Memory) -> None:
    settings = make_settings(tmp_path)
    async with serving(settings, memory) as url, mcp_client(url, TOKEN) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["recall"].input_schema.get("additionalProperties") is False
        assert tools["remember"].input_schema["properties"]["idempotency_key"]
        messages = tools["remember"].input_schema["$defs"]["Message"]["properties"]["content"]
        assert messages["maxLength"] == settings.max_message_chars  # REST's limits
        data(await client.call_tool("remember", {"conversation_id": "c1", "messages": CHAT}))
        before = memory.describer.describe("default")
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("recall", {"query": "cat", "filtre": {"conversation_id": "c1"}}, "filtre"),
            ("find", {"pattern": "cat", "limit": settings.find_max_limit + 1}, "limit"),
            ("recall", {"query": "cat", "top_k": settings.max_top_k + 1}, "top_k"),
            ("context", {"query": "x" * (settings.max_query_chars + 1)}, "query"),
            ("remember", {"messages": [{"content": "hi", "colour": "red"}]}, "messages.0.colour"),
            ("forget", {"ids": ["m1"], "everything": True}, "everything"),
        ]
        for tool, args, field in cases:
            text = error_text(await client.call_tool(tool, args))
            assert "\n" not in text and "http" not in text and "queries[0]" not in text, (tool, text)
            assert f"{field}:" in text.replace("[", ".").replace("]", ""), (tool, text)
        assert memory.describer.describe("default") == before
        # unknown conversation: the same empty answer and warning as REST
        got = data(await client.call_tool("recall", {"query": "cat", "filter": {"conversation_id": "nope"}}))
        assert got["results"][0]["results"] == [] and got["warnings"][0]["conversation_id"] == "nope"
        assert got["warnings"][0]["field"] == "filter.conversation_id"  # the tool's own argument
        # idempotency_key: a retry stores nothing twice
        plain = {"conversation_id": "c2", "messages": [{"content": "Remember the milk."}], "idempotency_key": "k"}
        first = data(await client.call_tool("remember", plain))
        assert data(await client.call_tool("remember", plain)) == first
        assert memory.describer.describe("default", "c2").messages == 1
        changed = {**plain, "messages": [{"content": "Remember the eggs."}]}
        assert "Idempotency-Key" in error_text(await client.call_tool("remember", changed))
