"""MCP over both transports with the SDK's own client, against the real app, store and embedder.

HTTP: the API server (hypercorn, a loopback port) serves /mcp behind the REST auth; stdio: `pyramind mcp` as a
subprocess over a SQLite file.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from jose import jwt
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import TextContent

from datastore.memory import Memory
from models.api import Message, RememberRequest
from server.app import create_app
from tests.support.settings import TOKEN, make_settings

ROOT = Path(__file__).resolve().parents[2]
SECRET = "mcp-test-secret-0123456789abcdef0123456789"
TOOLS = {
    "remember",
    "recall",
    "expand",
    "find",
    "stats",
    "outline",
    "forget",
    "context",
    "core_get",
    "core_set",
    "core_delete",
    "instructions_list",
    "instructions_delete",
}
CHAT = [
    {"id": "m1", "speaker": "Caroline", "content": "I adopted a grey cat called Pepper last spring."},
    {"id": "m2", "speaker": "Melanie", "content": "Lovely! My passport number is X1234567, remind me later."},
    {"id": "m3", "speaker": "Caroline", "content": "I am training for the Lisbon marathon in October."},
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def serving(settings: Any, memory: Memory) -> AsyncIterator[str]:
    """The real app under hypercorn on a loopback port; yields its /mcp URL."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    port = _free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    stop = asyncio.Event()
    task = asyncio.create_task(serve(create_app(settings, memory), config, shutdown_trigger=stop.wait))
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            try:
                await http.get(f"http://127.0.0.1:{port}/health")
                break
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop.set()
        await task


@asynccontextmanager
async def mcp_client(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def data(result: Any) -> dict:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def error_text(result: Any) -> str:
    assert result.is_error, result.structured_content
    return " ".join(getattr(c, "text", "") for c in result.content)


async def test_http_tools_over_the_real_store(tmp_path: Path, memory: Memory) -> None:
    settings = make_settings(tmp_path)
    async with serving(settings, memory) as url, mcp_client(url, TOKEN) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        assert all(t.description and t.output_schema for t in tools.values())
        assert tools["recall"].input_schema["properties"]["top_k"]["maximum"] == settings.max_top_k
        forget, recall = tools["forget"].annotations, tools["recall"].annotations
        assert forget and forget.destructive_hint and recall and recall.read_only_hint

        saved = data(await client.call_tool("remember", {"conversation_id": "c1", "messages": CHAT}))
        assert saved["conversation_id"] == "c1" and saved["chunk_ids"]
        hits = data(await client.call_tool("recall", {"query": "what pet does Caroline have?", "top_k": 3}))
        top = hits["results"][0]["results"][0]
        assert "Pepper" in top["text"] and top["level"] == 1
        opened = data(await client.call_tool("expand", {"id": top["id"]}))
        assert opened["node"]["id"] == top["id"] and opened["node"]["message_ids"] == ["m1", "m2", "m3"]
        found = data(await client.call_tool("find", {"pattern": r"X\d{7}", "regex": True}))
        assert [m["message_id"] for m in found["matches"]] == ["m2"] and "**X1234567**" in found["matches"][0]["text"]
        assert found["matches"][0]["chunk_id"] == top["id"]
        overview = data(await client.call_tool("stats", {"conversation_id": "c1"}))
        assert overview["messages"] == 3 and {s["speaker"] for s in overview["speakers"]} == {"Caroline", "Melanie"}
        kept = data(await client.call_tool("core_set", {"key": "pet", "value": "Caroline has a cat, Pepper"}))
        assert kept["entry"]["key"] == "pet"
        assert [e["key"] for e in data(await client.call_tool("core_get", {}))["entries"]] == ["pet"]
        block = data(
            await client.call_tool("context", {"conversation_id": "c1", "query": "passport", "budget_tokens": 400})
        )
        assert block["tokens_used"] <= 400 and "Caroline has a cat, Pepper" in block["context"]
        assert [sec["name"] for sec in block["sections"]][0] == "core"
        assert data(await client.call_tool("core_delete", {"key": "pet"}))["deleted"] is True
        assert data(await client.call_tool("core_get", {}))["entries"] == []
        gone = data(await client.call_tool("forget", {"ids": ["m2"]}))
        assert gone["deleted_messages"] == 1
        assert data(await client.call_tool("find", {"pattern": "passport"}))["matches"] == []
    # the tools wrote to the same store the REST routes read
    assert memory.describer.describe("default", "c1").messages == 2


async def test_standing_instructions_over_mcp(tmp_path: Path, memory: Memory) -> None:
    """A rule said in a remembered chat is listed with its provenance, and deleted only by the destructive tool;
    another namespace's id is an error that changes nothing."""
    chat = [
        {"id": "u1", "speaker": "Caroline", "content": "From now on answer in French."},
        {"id": "u2", "speaker": "Caroline", "content": "Actually, from now on answer in English."},
        {"id": "u3", "speaker": "assistant", "content": "Always happy to help."},
    ]
    async with serving(make_settings(tmp_path), memory) as url, mcp_client(url, TOKEN) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        listing, deleting = tools["instructions_list"].annotations, tools["instructions_delete"].annotations
        assert listing and listing.read_only_hint and deleting and deleting.destructive_hint
        data(await client.call_tool("remember", {"conversation_id": "c1", "messages": chat}))
        data(await client.call_tool("remember", {"conversation_id": "c1", "messages": chat[:1], "namespace": "bob"}))
        rules = data(await client.call_tool("instructions_list", {}))["instructions"]
        assert [(r["message_id"], r["conversation_id"], r["speaker"]) for r in rules] == [("u2", "c1", "Caroline")]
        every = data(await client.call_tool("instructions_list", {"include_superseded": True}))["instructions"]
        assert [r["superseded_by"] for r in every] == [rules[0]["id"], None]
        bobs = data(await client.call_tool("instructions_list", {"namespace": "bob"}))["instructions"]
        assert "id: no instruction" in error_text(await client.call_tool("instructions_delete", {"id": bobs[0]["id"]}))
        done = data(await client.call_tool("instructions_delete", {"id": rules[0]["id"]}))
        assert done == {"deleted": rules[0]["id"], "reactivated": [every[0]["id"]]}
        assert data(await client.call_tool("instructions_list", {"namespace": "bob"}))["instructions"] == bobs
        missing = data(await client.call_tool("instructions_list", {"conversation_id": "nope"}))
        assert missing["instructions"] == [] and missing["warnings"][0]["conversation_id"] == "nope"


async def test_http_without_or_with_a_wrong_token_is_refused(tmp_path: Path, memory: Memory) -> None:
    async with serving(make_settings(tmp_path), memory) as url:
        async with httpx.AsyncClient() as http:
            r = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Accept": "application/json, text/event-stream"},
            )
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
        for token in (None, "wrong-token"):
            with pytest.raises(BaseException) as err:  # the SDK client surfaces the 401 as an MCPError
                async with mcp_client(url, token) as client:
                    await client.list_tools()
            assert any(isinstance(e, MCPError) for e in _leaves(err.value)), repr(err.value)
    assert memory.describer.describe("default").messages == 0


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def _jwt(sub: str) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time()) + 600}, SECRET, algorithm="HS256")


async def test_jwt_caller_cannot_reach_another_namespace_through_any_tool(tmp_path: Path, memory: Memory) -> None:
    memory.writer.remember("bob", RememberRequest(conversation_id="bob-c", messages=[Message(**m) for m in CHAT]))
    bob_node = memory.describer.describe("bob")
    bob_chunk = memory.storage.source_nodes("bob", "bob-c")[0].id
    settings = make_settings(tmp_path, auth="jwt", jwt_secret=SECRET, bearer_token=None)
    async with serving(settings, memory) as url, mcp_client(url, _jwt("alice")) as alice:
        data(
            await alice.call_tool(
                "remember",
                {
                    "conversation_id": "a-c",
                    "messages": [{"id": "a1", "speaker": "Alice", "content": "My cat is called Whiskers."}],
                },
            )
        )
        # her own namespace only
        hits = data(await alice.call_tool("recall", {"query": "cat called Pepper", "top_k": 10}))
        assert all("Pepper" not in r["text"] for r in hits["results"][0]["results"])
        assert data(await alice.call_tool("find", {"pattern": "Pepper"}))["matches"] == []
        assert data(await alice.call_tool("stats", {}))["namespace"] == "alice"
        # naming bob's namespace, or bob's ids, is an error naming the argument
        calls: list[tuple[str, dict[str, Any]]] = [
            ("recall", {"query": "cat"}),
            ("find", {"pattern": "cat"}),
            ("stats", {}),
            ("expand", {"id": bob_chunk}),
            ("forget", {"delete_all": True}),
            ("remember", {"messages": [{"content": "x"}]}),
            ("context", {}),
            ("core_get", {}),
            ("core_set", {"key": "k", "value": "v"}),
            ("core_delete", {"key": "k"}),
        ]
        for tool, args in calls:
            assert "namespace" in error_text(await alice.call_tool(tool, {**args, "namespace": "bob"})), tool
        assert "id" in error_text(await alice.call_tool("expand", {"id": bob_chunk}))
        assert "ids" in error_text(await alice.call_tool("forget", {"ids": [bob_chunk, "bob-c", "m1"]}))
        unseen = data(await alice.call_tool("stats", {"conversation_id": "bob-c"}))  # bob's: unknown to alice
        assert unseen["messages"] == 0 and unseen["warnings"][0]["conversation_id"] == "bob-c"
        gone = data(await alice.call_tool("forget", {"delete_all": True}))
        assert gone["deleted_messages"] == 1
    after = memory.describer.describe("bob")
    assert after == bob_node  # bob's memories untouched by everything alice did
    assert memory.describer.describe("alice").messages == 0


async def test_bad_calls_are_errors_naming_the_argument_and_change_nothing(tmp_path: Path, memory: Memory) -> None:
    async with serving(make_settings(tmp_path), memory) as url, mcp_client(url, TOKEN) as client:
        data(await client.call_tool("remember", {"conversation_id": "c1", "messages": CHAT}))
        before = memory.describer.describe("default")
        unknown = await client.call_tool("no_such_tool", {})
        assert "no_such_tool" in error_text(unknown)
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("recall", {"query": "cat", "top_k": "many"}, "top_k"),
            ("recall", {"query": "cat", "top_k": 10_000}, "top_k"),
            ("recall", {"top_k": 3}, "query"),
            (
                "recall",
                {"query": "cat", "filter": {"start_date": "2024-02-01T00:00:00Z", "end_date": "2024-01-01T00:00:00Z"}},
                "start_date",
            ),
            ("find", {"pattern": "(unclosed", "regex": True}, "pattern"),
            ("find", {"pattern": "x" * 5000}, "pattern"),
            ("remember", {"messages": "not a list"}, "messages"),
            ("remember", {"messages": [{"content": "   "}]}, "messages"),
            ("expand", {"id": "no-such-node"}, "id"),
            ("forget", {"ids": ["no-such-id"]}, "ids"),
            ("forget", {}, "ids"),
            ("stats", {"namespace": "bad namespace!"}, "namespace"),
            ("recall", {"query": "cat", "filtre": {"conversation_id": "c1"}}, "filtre"),
            ("find", {"pattern": "cat", "limit": 10_000}, "limit"),
            ("context", {"query": "x" * 5000}, "query"),
        ]
        for tool, args, field in cases:
            assert field in error_text(await client.call_tool(tool, args)), (tool, args)
        assert memory.describer.describe("default") == before
        # every error reads `code: field: message`, a store's as an argument's (no SDK prefix before it)
        assert error_text(await client.call_tool("outline", {"conversation_id": "nope"})).startswith(
            "not_found: conversation_id: "
        )
        assert error_text(await client.call_tool("expand", {"id": "nope"})).startswith("not_found: id: ")
        assert error_text(await client.call_tool("recall", {"query": "cat", "top_k": -3})).startswith(
            "invalid_request: top_k: "
        )


async def test_stdio_transport(tmp_path: Path) -> None:
    env = {**os.environ, "LOCAL_DB_PATH": str(tmp_path / "stdio.db"), "AUTH": "none", "EMBED_WORKERS": "1"}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "local_server.cli", "mcp", "-n", "me"], env=env, cwd=str(ROOT)
    )
    async with Client(params) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        data(await client.call_tool("remember", {"conversation_id": "c1", "messages": CHAT}))
        hits = data(await client.call_tool("recall", {"query": "marathon training", "top_k": 1}))
        assert "Lisbon marathon" in hits["results"][0]["results"][0]["text"]
        overview = data(await client.call_tool("stats", {}))
        assert (overview["namespace"], overview["messages"]) == ("me", 3)
        assert "id" in error_text(await client.call_tool("expand", {"id": "nope"}))


async def test_local_server_mcp_needs_no_token_but_refuses_foreign_hosts(tmp_path: Path, memory: Memory) -> None:
    from local_server.main import local_settings

    async with serving(local_settings(make_settings(tmp_path)), memory) as url:
        async with mcp_client(url, None) as client:  # AUTH=none: the local server, like its REST routes
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        async with httpx.AsyncClient() as http:  # DNS rebinding: a page on another host cannot drive it
            r = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Accept": "application/json, text/event-stream", "Host": "evil.example"},
            )
            assert r.status_code in (400, 403, 421)


def readme_mcp_tools() -> list[str]:
    """The tool names of the README's MCP tool table (section "Use it from an MCP client")."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use it from an MCP client", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", section, re.M)


async def test_tools_are_documented_one_line_each_and_answer_compact_text(tmp_path: Path, memory: Memory) -> None:
    """The README lists every tool the server lists; no description has a hard line break;
    recall's `query` says it is what to search for; a tool's text content is compact JSON (no indentation)."""
    async with serving(make_settings(tmp_path), memory) as url, mcp_client(url, TOKEN) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert sorted(readme_mcp_tools()) == sorted(tools)
        for tool in tools.values():
            assert "\n" not in (tool.description or ""), tool.name
            for name, prop in tool.input_schema["properties"].items():
                assert "\n" not in prop.get("description", ""), (tool.name, name)
        assert "search for" in tools["recall"].input_schema["properties"]["query"]["description"]
        result = await client.call_tool("remember", {"conversation_id": "c1", "messages": CHAT})
        hits = await client.call_tool("recall", {"query": "what pet does Caroline have?", "top_k": 2})
        for res in (result, hits):
            content = res.content[0]
            assert isinstance(content, TextContent)
            text = content.text
            assert json.loads(text) == data(res)
            assert text == json.dumps(data(res), ensure_ascii=False, separators=(",", ":")), text[:200]


async def test_mcp_gets_the_rest_rate_limit(tmp_path: Path, memory: Memory) -> None:
    """RATE_LIMIT_PER_MINUTE applies to /mcp (mounted beside Quart, outside its hooks), per caller,
    with the REST 429 shape and Retry-After."""
    list_tools = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {TOKEN}",
        "MCP-Protocol-Version": "2025-06-18",
    }
    async with serving(make_settings(tmp_path, rate_limit_per_minute=3), memory) as url:
        async with httpx.AsyncClient() as http:
            codes = [(await http.post(url, json=list_tools, headers=headers)).status_code for _ in range(3)]
            assert codes == [200, 200, 200]
            r = await http.post(url, json=list_tools, headers=headers)
            assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_requests"
            assert int(r.headers["retry-after"]) >= 1
            # unauthenticated calls are refused before they count against anyone
            r = await http.post(url, json=list_tools, headers={**headers, "Authorization": "Bearer wrong"})
            assert r.status_code == 401


async def test_a_body_over_max_body_bytes_names_the_limit(tmp_path: Path, memory: Memory) -> None:
    """The 413 of /mcp, like the REST one, names the limit in bytes and its setting."""
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {TOKEN}"}
    big = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "recall", "arguments": {"query": "x" * 5000}},
    }
    async with serving(make_settings(tmp_path, max_body_bytes=4096), memory) as url, httpx.AsyncClient() as http:
        r = await http.post(url, json=big, headers=headers)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["message"] == "the request body is larger than 4096 bytes (MAX_BODY_BYTES)"
