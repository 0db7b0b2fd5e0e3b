"""POST /find and GET /stats over HTTP: marks, filters, errors naming the field, hostile regexes in bounded time,
namespaces; and MAX_RESPONSE_CHARS cutting /query and /find to fit."""

from __future__ import annotations

import json
import time
from pathlib import Path

from datastore.memory import Memory
from models.api import Message, RememberRequest
from server.app import create_app
from tests.server.test_api import is_error
from tests.support.settings import AUTH, make_settings
from tests.support.stores import recompose


async def _remember(client, messages: list[dict], cid: str = "c1") -> None:
    r = await client.post("/remember", json={"conversation_id": cid, "messages": messages, "wait": True}, headers=AUTH)
    assert r.status_code in (200, 202), await r.get_json()


CHAT = [
    {"id": "m1", "speaker": "Ann", "content": "Call me at 555-0142 after the Lisbon meeting."},
    {"id": "m2", "speaker": "Ben", "content": "Sure. The Lisbon office moved to Rua Augusta 12."},
    {"id": "m3", "speaker": "Ann", "content": "And my locker code is 4471."},
]


async def test_find_marks_matches_and_names_the_chunk(client) -> None:
    await _remember(client, CHAT)
    r = await client.post("/find", json={"pattern": "lisbon"}, headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200, body
    assert [m["message_id"] for m in body["matches"]] == ["m1", "m2"] and body["complete"] is True
    assert body["matches"][0]["text"] == "Call me at 555-0142 after the **Lisbon** meeting."
    assert body["matches"][0]["spans"] == [[30, 36]]
    chunk = body["matches"][0]["chunk_id"]
    node = await (await client.get(f"/memories/{chunk}", headers=AUTH)).get_json()
    assert node["node"]["level"] == 1 and "m1" in node["node"]["message_ids"]
    r = await client.post(
        "/find", json={"pattern": r"\b\d{3}-\d{4}\b|\b\d{4}\b", "regex": True, "speaker": "Ann"}, headers=AUTH
    )
    assert [(m["message_id"], m["spans"]) for m in (await r.get_json())["matches"]] == [
        ("m1", [[11, 19]]),
        ("m3", [[22, 26]]),
    ]


async def test_find_bad_input_names_the_field(client) -> None:
    for body, status, field in [
        ({"pattern": "(unclosed", "regex": True}, 422, "pattern"),
        ({"pattern": "a{2000}{2000}", "regex": True}, 422, "pattern"),  # too big for RE2's memory cap
        ({"pattern": "x" * 10_000, "regex": True}, 422, "pattern"),  # longer than the schema allows
        ({"pattern": ""}, 422, "pattern"),
        ({"pattern": "x", "limit": 0}, 422, "limit"),
        ({"pattern": "x", "limit": 10**6}, 422, "limit"),
        ({"pattern": "x", "regex": "yes"}, 422, "regex"),
        ({"pattern": "x", "start_date": "2024-02-01T00:00:00Z", "end_date": "2024-01-01T00:00:00Z"}, 422, "start_date"),
    ]:
        r = await client.post("/find", json=body, headers=AUTH)
        assert r.status_code == status, (body, await r.get_json())
        assert is_error(await r.get_json(), field=field)
    r = await client.post("/find", json={"pattern": "x"})
    assert r.status_code == 401


async def test_hostile_regexes_answer_in_bounded_time(tmp_path: Path, memory: Memory) -> None:
    settings = make_settings(tmp_path, find_time_limit=2.0)
    memory = recompose(memory, settings=settings)  # the services read the limits
    long_a = "a" * 30_000
    memory.writer.remember(
        "default",
        RememberRequest(
            conversation_id="c", messages=[Message(id=f"h{i}", speaker="x", content=long_a + "!") for i in range(20)]
        ),
    )
    app = create_app(settings, memory)
    async with app.test_app() as test_app:
        client = test_app.test_client()
        for pattern in [
            r"(a+)+$",
            r"(a|aa)+b",
            r"(a*)*b",
            r"^(([a-z])+.)+[A-Z]([a-z])+$",
            "(" * 300 + "a*" + ")*" * 300 + "b",
            "(a|a?)" * 160,
        ]:
            started = time.monotonic()
            r = await client.post("/find", json={"pattern": pattern, "regex": True, "limit": 100}, headers=AUTH)
            elapsed = time.monotonic() - started
            assert r.status_code in (200, 422), await r.get_json()
            # the limit, plus one RE2 search and the HTTP round trip on a busy 2-core machine
            assert elapsed < settings.find_time_limit + 5, (pattern[:40], elapsed)
    # the scan itself stops at FIND_TIME_LIMIT and says so
    memory = recompose(memory, settings=make_settings(tmp_path, find_time_limit=1e-9))
    app = create_app(memory.settings, memory)
    async with app.test_app() as test_app:
        r = await test_app.test_client().post("/find", json={"pattern": "a"}, headers=AUTH)
        body = await r.get_json()
        assert r.status_code == 200 and body["complete"] is False and body["scanned"] < 20


async def test_stats_route(client) -> None:
    await _remember(client, CHAT)
    r = await client.get("/stats?conversation_id=c1", headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200, body
    assert body["messages"] == 3 and body["speakers"] == [
        {"speaker": "Ann", "messages": 2},
        {"speaker": "Ben", "messages": 1},
    ]
    r = await client.get("/stats?conversation_id=nope", headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and body["messages"] == 0 and body["warnings"][0]["conversation_id"] == "nope"
    r = await client.get("/stats?namespace=bad%20ns", headers=AUTH)
    assert r.status_code == 422


async def test_answers_are_cut_to_max_response_chars(tmp_path: Path, memory: Memory) -> None:
    cap = 3000
    messages = [
        Message(id=f"m{i}", speaker="Ann", content=f"Note {i}: the Lisbon trip budget line {i} " * 12)
        for i in range(40)
    ]
    memory.writer.remember("default", RememberRequest(conversation_id="c", messages=messages))
    memory = recompose(memory, settings=make_settings(tmp_path, max_response_chars=cap))
    app = create_app(memory.settings, memory)
    async with app.test_app() as test_app:
        client = test_app.test_client()
        r = await client.post("/query", json={"queries": [{"query": "Lisbon budget", "top_k": 30}]}, headers=AUTH)
        text = await r.get_data(as_text=True)
        body = json.loads(text)
        assert r.status_code == 200 and body["truncated"] is True
        assert len(text) <= cap and 0 < len(body["results"][0]["results"]) < 30
        r = await client.post("/find", json={"pattern": "lisbon", "limit": 40}, headers=AUTH)
        text = await r.get_data(as_text=True)
        body = json.loads(text)
        assert body["truncated"] is True and len(text) <= cap and 0 < len(body["matches"]) < 40
        r = await client.post("/find", json={"pattern": "Note 3:", "limit": 1}, headers=AUTH)
        assert (await r.get_json())["truncated"] is False
