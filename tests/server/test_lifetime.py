"""Memory over a lifetime over HTTP on the real app and local store: sessions, pins and visits, forgetting,
read-only grants."""

from __future__ import annotations

from tests.server.test_api import is_error
from tests.support.settings import AUTH


def turns(prefix: str, n: int, day: int, topic: str) -> list[dict]:
    return [
        {
            "id": f"{prefix}-{i}",
            "speaker": "Ann" if i % 2 else "Bob",
            "content": f"On day {day} we talked about {topic}, point {i}: the {topic} matters a lot to us.",
            "created_at": f"2024-03-{day:02d}T09:{i:02d}:00Z",
        }
        for i in range(n)
    ]


async def seed_sessions(client) -> None:
    r = await client.post(
        "/remember",
        json={
            "conversation_id": "c",
            "session_id": "kickoff",
            "wait": True,
            "messages": turns("a", 12, 1, "gardening"),
        },
        headers=AUTH,
    )
    assert r.status_code == 200, await r.get_json()
    r = await client.post(
        "/remember", json={"conversation_id": "c", "wait": True, "messages": turns("b", 12, 5, "sailing")}, headers=AUTH
    )
    assert r.status_code == 200, await r.get_json()


async def test_sessions_listed_and_query_filtered(client) -> None:
    await seed_sessions(client)
    r = await client.get("/conversations/c/sessions", headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200, body
    sessions = body["sessions"]
    assert [s["session_id"] for s in sessions] == ["kickoff", "s-2024-03-05T09:00:00Z"]
    assert [s["message_count"] for s in sessions] == [12, 12]
    assert sessions[1]["start_time"].startswith("2024-03-05T09:00") and all(s["summary_ids"] for s in sessions)
    r = await client.post(
        "/query",
        json={"queries": [{"query": "gardening and sailing", "top_k": 20, "filter": {"session_id": "kickoff"}}]},
        headers=AUTH,
    )
    results = (await r.get_json())["results"][0]["results"]
    assert results and all("kickoff" in x["session_ids"] for x in results)
    assert all(all(m.startswith("a-") for m in x["message_ids"]) or "kickoff" in x["session_ids"] for x in results)
    r = await client.get("/conversations/nope/sessions", headers=AUTH)
    assert r.status_code == 404 and is_error(await r.get_json(), "not_found", "conversation_id")


async def test_pin_unpin_and_foreign_namespace(client, memory) -> None:
    await seed_sessions(client)
    r = await client.post("/query", json={"queries": [{"query": "sailing", "top_k": 1}]}, headers=AUTH)
    hit = (await r.get_json())["results"][0]["results"][0]
    r = await client.post(f"/memories/{hit['id']}/pin", headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and body["pinned"] and body["protected_message_ids"] == len(hit["message_ids"])
    memory.visits.flush()
    r = await client.get(f"/memories/{hit['id']}", headers=AUTH)
    node = (await r.get_json())["node"]
    assert node["pinned"] and node["visit_count"] == 1 and node["last_visited_at"]
    r = await client.post(f"/memories/{hit['id']}/pin?namespace=someone-else", headers=AUTH)
    assert r.status_code == 404 and is_error(await r.get_json(), "not_found", "id")
    assert memory.visits.protected_messages("someone-else") == set()
    r = await client.post(f"/memories/{hit['id']}/unpin", headers=AUTH)
    assert r.status_code == 200 and (await r.get_json())["pinned"] is False
    assert memory.visits.protected_messages("default") == set()
    r = await client.post("/memories/nope/pin", headers=AUTH)
    assert r.status_code == 404


async def test_forget_endpoint_dry_run_then_for_real(tmp_path, embedder) -> None:
    from datastore.factory import open_memory
    from server.app import create_app
    from services.summarising import ExtractiveSummariser
    from tests.support.settings import make_settings

    settings = make_settings(tmp_path, forget_max_nodes=2, forget_fraction=0.5)
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    try:
        app = create_app(settings, memory)
        async with app.test_app() as test_app:
            client = test_app.test_client()
            await seed_sessions(client)
            before = len(memory.storage.source_nodes("default", "c"))
            r = await client.post("/forget", json={}, headers=AUTH)
            body = await r.get_json()
            assert r.status_code == 200 and body["dry_run"] and body["forgotten"] and body["l1_after"] is None
            assert len(memory.storage.source_nodes("default", "c")) == before
            r = await client.post("/forget", json={"dry_run": False}, headers=AUTH)
            body = await r.get_json()
            assert r.status_code == 200 and body["l1_after"] <= 2 and body["deleted_messages"] > 0
            r = await client.post("/forget", json={"dry_run": "yes"}, headers=AUTH)
            assert r.status_code == 422
    finally:
        memory.close()


async def test_export_endpoint_is_namespace_scoped(client) -> None:
    import json

    await seed_sessions(client)
    r = await client.get("/export", headers=AUTH)
    assert r.status_code == 200
    lines = [json.loads(x) for x in (await r.get_data(as_text=True)).splitlines()]
    assert lines[0]["type"] == "header" and lines[-1] == {**lines[-1], "type": "end", "records": len(lines) - 1}
    assert {x["namespace"] for x in lines[1:-1]} == {"default"} and not any("embedding" in x for x in lines)
    r = await client.get("/export?namespace=elsewhere", headers=AUTH)
    assert [json.loads(x)["type"] for x in (await r.get_data(as_text=True)).splitlines()] == ["header", "end"]
    r = await client.get("/export?embeddings=maybe", headers=AUTH)
    assert r.status_code == 422 and is_error(await r.get_json(), field="embeddings")


async def test_fork_over_http(client) -> None:
    await seed_sessions(client)
    r = await client.post(
        "/conversations/c/fork", json={"at_message_id": "a-11", "new_conversation_id": "c2"}, headers=AUTH
    )
    body = await r.get_json()
    assert r.status_code == 201 and body == {"conversation_id": "c2", "parent_id": "c", "at_message_id": "a-11"}
    r = await client.post(
        "/remember",
        json={
            "conversation_id": "c2",
            "wait": True,
            "messages": [
                {"id": "x-1", "speaker": "Ann", "content": "In this branch we chose to learn the violin instead."}
            ],
        },
        headers=AUTH,
    )
    assert r.status_code == 200
    r = await client.post(
        "/query",
        json={"queries": [{"query": "sailing violin gardening", "top_k": 50, "filter": {"conversation_id": "c2"}}]},
        headers=AUTH,
    )
    results = (await r.get_json())["results"][0]["results"]
    assert {x["conversation_id"] for x in results} == {"c", "c2"}
    assert all(not m.startswith("b-") for x in results for m in x["message_ids"])  # never the parent's later ones
    for body, field, status in (
        ({"at_message_id": "nope"}, "at_message_id", 404),
        ({"at_message_id": "a-1", "new_conversation_id": "c2"}, "new_conversation_id", 409),
        ({"at_message_id": ""}, "at_message_id", 422),
    ):
        r = await client.post("/conversations/c/fork", json=body, headers=AUTH)
        assert r.status_code == status and is_error(await r.get_json(), field=field)
    r = await client.post(
        "/conversations/c/fork?namespace=x", json={"at_message_id": "a-1", "namespace": "other"}, headers=AUTH
    )
    assert r.status_code == 404 and is_error(await r.get_json(), "not_found", "conversation_id")


async def test_a_context_block_counts_a_visit_of_each_memory_it_includes(client, memory) -> None:
    await seed_sessions(client)
    r = await client.post(
        "/context",
        json={"conversation_id": "c", "query": "sailing", "budget_tokens": 600, "recent": False},
        headers=AUTH,
    )
    body = await r.get_json()
    assert r.status_code == 200, body
    shown = [i["id"] for s in body["sections"] for i in s["items"] if i["kind"] in ("chunk", "summary")]
    assert shown
    memory.visits.flush()
    for node_id in shown:
        r = await client.get(f"/memories/{node_id}", headers=AUTH)
        assert (await r.get_json())["node"]["visit_count"] == 1, node_id


async def test_query_neighbours_and_the_sequence_links_of_a_chunk(client) -> None:
    await seed_sessions(client)
    r = await client.post("/query", json={"queries": [{"query": "sailing point 7", "top_k": 1}]}, headers=AUTH)
    hit = (await r.get_json())["results"][0]["results"][0]
    assert hit["level"] == 1 and hit["context_of"] is None
    node = (await (await client.get(f"/memories/{hit['id']}", headers=AUTH)).get_json())["node"]
    assert node["pre_id"] or node["next_id"]
    r = await client.post(
        "/query", json={"queries": [{"query": "sailing point 7", "top_k": 1, "neighbours": 1}]}, headers=AUTH
    )
    results = (await r.get_json())["results"][0]["results"]
    ids = [x["id"] for x in results]
    # the hit between its previous and next chunk, in conversation order, the neighbours marked as context
    assert ids == [i for i in (node["pre_id"], hit["id"], node["next_id"]) if i]
    assert [x["context_of"] for x in results if x["id"] != hit["id"]] == [hit["id"]] * (len(ids) - 1)
    if node["next_id"]:
        after = (await (await client.get(f"/memories/{node['next_id']}", headers=AUTH)).get_json())["node"]
        assert after["pre_id"] == hit["id"]
    r = await client.post("/query", json={"queries": [{"query": "x", "neighbours": 4}]}, headers=AUTH)
    assert r.status_code == 422 and is_error(await r.get_json(), field="queries[0].neighbours")


async def test_find_filters_by_session(client) -> None:
    await seed_sessions(client)
    r = await client.post("/find", json={"pattern": "point 3", "limit": 10}, headers=AUTH)
    assert {m["message_id"] for m in (await r.get_json())["matches"]} == {"a-3", "b-3"}
    r = await client.post("/find", json={"pattern": "point 3", "session_id": "kickoff"}, headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200, body
    assert [m["message_id"] for m in body["matches"]] == ["a-3"]


# ---------------------------------------------------------------------- a fork sees its parent up to the fork point
WORDS = [
    "apricot",
    "bicycle",
    "cathedral",
    "dolphin",
    "elevator",
    "falcon",
    "glacier",
    "harbour",
    "igloo",
    "jasmine",
    "kayak",
    "lantern",
]


def worded(prefix: str, n: int, hour: int = 9) -> list[dict]:
    """`n` short messages, each naming one word of WORDS (so a query finds it), a minute apart."""
    return [
        {
            "id": f"{prefix}{i}",
            "speaker": "Ann" if i % 2 else "Bob",
            "content": f"Remember the {WORDS[i % len(WORDS)]} number {prefix}{i}.",
            "created_at": f"2024-04-01T{hour:02d}:{i:02d}:00Z",
        }
        for i in range(n)
    ]


async def seen_by(client, conversation_id: str, text: str) -> list[dict]:
    """Every result (top 100, hybrid) of a query filtered to the conversation."""
    r = await client.post(
        "/query",
        json={"queries": [{"query": text, "top_k": 100, "filter": {"conversation_id": conversation_id}}]},
        headers=AUTH,
    )
    body = await r.get_json()
    assert r.status_code == 200, body
    return body["results"][0]["results"]


async def test_a_fork_sees_the_messages_just_before_its_fork_point(client) -> None:
    """Ten short messages in one chunk, forked at the fifth: the fork sees m0..m4 (the chunk
    straddling the fork point used to hide all of them), never m5..m9; its own messages continue that chunk; a
    parent message forgotten is forgotten in the fork too, and so is the fork message itself."""
    r = await client.post(
        "/remember", json={"conversation_id": "p", "wait": True, "messages": worded("m", 10)}, headers=AUTH
    )
    body = await r.get_json()
    assert r.status_code == 200 and len(body["updated_chunk_ids"] + body["chunk_ids"]) == 1  # all in one chunk
    r = await client.post(
        "/conversations/p/fork", json={"at_message_id": "m4", "new_conversation_id": "f"}, headers=AUTH
    )
    assert r.status_code == 201, await r.get_json()
    everything = " ".join(WORDS)

    def ids(results: list[dict]) -> set[str]:
        return {m for x in results for m in x["message_ids"]}

    results = await seen_by(client, "f", everything)
    assert ids(results) == {f"m{i}" for i in range(5)}
    assert not any(w in x["text"] for x in results for w in WORDS[5:10])
    r = await client.post(
        "/remember",
        json={
            "conversation_id": "f",
            "wait": True,
            "messages": [
                {
                    "id": "f0",
                    "speaker": "Ann",
                    "content": "In this branch we take the kayak instead.",
                    "created_at": "2024-04-01T10:00:00Z",
                }
            ],
        },
        headers=AUTH,
    )
    assert r.status_code == 200
    results = await seen_by(client, "f", everything)
    assert ids(results) == {"m0", "m1", "m2", "m3", "m4", "f0"}
    assert any({"m4", "f0"} <= set(x["message_ids"]) for x in results)  # the fork's messages continue the chunk
    assert ids(await seen_by(client, "p", everything)) == {f"m{i}" for i in range(10)}  # the parent is unchanged
    own = next(x for x in results if x["conversation_id"] == "f")
    r = await client.get(f"/conversations/f/messages?node_id={own['id']}", headers=AUTH)
    listed = (await r.get_json())["messages"]
    assert [(m["id"], m["conversation_id"]) for m in listed] == [(f"m{i}", "p") for i in range(5)] + [("f0", "f")]

    r = await client.delete("/delete", json={"ids": ["m2"]}, headers=AUTH)
    assert r.status_code == 200, await r.get_json()
    results = await seen_by(client, "f", everything)
    assert ids(results) == {"m0", "m1", "m3", "m4", "f0"} and not any("cathedral" in x["text"] for x in results)
    r = await client.delete("/delete", json={"ids": ["m4"]}, headers=AUTH)
    assert r.status_code == 200
    results = await seen_by(client, "f", everything)  # the fork point is now m3, the last message before m4
    assert ids(results) == {"m0", "m1", "m3", "f0"} and not any("elevator" in x["text"] for x in results)


async def test_a_fork_inside_a_later_chunk_inherits_the_earlier_ones(client, memory) -> None:
    """The fork point inside the parent's third chunk: the chunks before it stay the parent's (inherited,
    nothing copied), the part of the straddling chunk up to the fork point is the fork's own."""
    r = await client.post(
        "/remember",
        json={"conversation_id": "p", "wait": True, "messages": turns("a", 40, 1, "gardening")},
        headers=AUTH,
    )
    assert r.status_code == 200
    chunks = sorted((n for n in memory.storage.source_nodes("default", "p", level=1)), key=lambda n: n.position)
    assert len(chunks) >= 4
    third = chunks[2]
    at = third.message_ids[len(third.message_ids) // 2]  # a message in the middle of the third chunk
    n_at = int(at.split("-")[1])
    r = await client.post("/conversations/p/fork", json={"at_message_id": at, "new_conversation_id": "f"}, headers=AUTH)
    assert r.status_code == 201
    results = await seen_by(client, "f", "gardening matters a lot to us")
    seen = {m for x in results for m in x["message_ids"]}
    assert seen == {f"a-{i}" for i in range(n_at + 1)}  # every message up to the fork point, none after
    inherited = {x["id"] for x in results if x["conversation_id"] == "p"}
    assert {chunks[0].id, chunks[1].id} <= inherited and third.id not in inherited
    own = [x for x in results if x["conversation_id"] == "f"]
    assert len(own) == 1 and own[0]["message_ids"][-1] == at

    r = await client.post(
        "/remember", json={"conversation_id": "f", "wait": True, "messages": turns("x", 20, 2, "sailing")}, headers=AUTH
    )
    assert r.status_code == 200
    results = await seen_by(client, "f", "gardening and sailing matter a lot to us")
    seen = {m for x in results for m in x["message_ids"]}
    assert seen == {f"a-{i}" for i in range(n_at + 1)} | {f"x-{i}" for i in range(20)}
    before = at.replace(str(n_at), str(n_at - 1))
    r = await client.delete("/delete", json={"ids": [before]}, headers=AUTH)
    assert r.status_code == 200
    results = await seen_by(client, "f", "gardening and sailing matter a lot to us")
    assert before not in {m for x in results for m in x["message_ids"]}
    assert not any(f"gardening, point {n_at - 1}:" in x["text"] for x in results)
    assert at in {m for x in results for m in x["message_ids"]}
