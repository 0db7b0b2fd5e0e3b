"""GET /instructions and DELETE /instructions/{id} over HTTP on the real app, store and embedder: provenance,
filters, supersession, another namespace's id, bad input, and 501 on a store that keeps none."""

from __future__ import annotations

from typing import Any

import pytest

from datastore.memory import Memory
from models.settings import Settings
from server.app import create_app
from services.errors import UnsupportedError
from tests.server.test_api import is_error
from tests.support.settings import AUTH
from tests.support.stores import recompose

MESSAGES = [
    {
        "id": "m1",
        "speaker": "Ann",
        "content": "Hi! From now on answer in French.",
        "created_at": "2024-05-01T09:00:00Z",
    },
    {
        "id": "m2",
        "speaker": "assistant",
        "content": "D'accord. Always ask me anything.",
        "created_at": "2024-05-01T09:01:00Z",
    },
    {
        "id": "m3",
        "speaker": "Ann",
        "content": "I prefer Bootstrap over Foundation.",
        "created_at": "2024-05-01T09:02:00Z",
    },
    {
        "id": "m4",
        "speaker": "Ann",
        "content": "Actually, from now on answer in English.",
        "created_at": "2024-05-02T10:00:00Z",
    },
]


async def _remember(client: Any, messages: list[dict], cid: str = "c1", ns: str | None = None) -> None:
    extra = {"namespace": ns} if ns else {}
    r = await client.post(
        "/remember", json={"conversation_id": cid, "messages": messages, "wait": True, **extra}, headers=AUTH
    )
    assert r.status_code == 200, await r.get_json()


async def _list(client: Any, query: str = "") -> dict:
    r = await client.get(f"/instructions{query}", headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200, body
    return body


async def test_remembered_instructions_are_listed_with_provenance_and_superseded(client: Any) -> None:
    await _remember(client, MESSAGES)
    body = await _list(client)
    assert body["active"] == 2 and [i["statement"] for i in body["instructions"]] == [
        "I prefer Bootstrap over Foundation.",
        "from now on answer in English.",
    ]
    pref = body["instructions"][0]
    assert {k: pref[k] for k in ("kind", "message_id", "conversation_id", "speaker", "created_at", "text")} == {
        "kind": "preference",
        "message_id": "m3",
        "conversation_id": "c1",
        "speaker": "Ann",
        "created_at": "2024-05-01T09:02:00Z",
        "text": "I prefer Bootstrap over Foundation.",
    }
    assert pref["id"].startswith("in_") and pref["superseded_by"] is None and pref["recorded_at"]

    every = await _list(client, "?include_superseded=true")
    french, english = every["instructions"][0], every["instructions"][2]
    assert french["message_id"] == "m1" and french["superseded_by"] == english["id"] and every["active"] == 2
    await _remember(client, [{"id": "x1", "speaker": "Ann", "content": "Call me Annie."}], cid="c2")
    assert [i["message_id"] for i in (await _list(client, "?conversation_id=c2"))["instructions"]] == ["x1"]
    assert len((await _list(client))["instructions"]) == 3

    r = await client.delete(f"/instructions/{english['id']}", headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and body == {"deleted": english["id"], "reactivated": [french["id"]]}
    assert [i["message_id"] for i in (await _list(client))["instructions"]] == ["m1", "m3", "x1"]
    r = await client.delete(f"/instructions/{english['id']}", headers=AUTH)
    assert r.status_code == 404 and is_error(await r.get_json(), "not_found", "id")


async def test_another_namespaces_instruction_is_not_found_and_nothing_changes(client: Any) -> None:
    await _remember(client, MESSAGES)
    await _remember(client, MESSAGES[:1], ns="bob")
    bobs = (await _list(client, "?namespace=bob"))["instructions"]
    mine = (await _list(client, "?include_superseded=true"))["instructions"]
    assert len(bobs) == 1 and bobs[0]["id"] not in {i["id"] for i in mine}
    r = await client.delete(f"/instructions/{bobs[0]['id']}", headers=AUTH)  # in the default namespace
    assert r.status_code == 404 and is_error(await r.get_json(), "not_found", "id")
    r = await client.delete(f"/instructions/{mine[0]['id']}?namespace=bob", headers=AUTH)
    assert r.status_code == 404 and is_error(await r.get_json(), "not_found", "id")
    assert (await _list(client, "?namespace=bob"))["instructions"] == bobs
    assert (await _list(client, "?include_superseded=true"))["instructions"] == mine


async def test_bad_input_is_a_4xx_naming_the_field(client: Any) -> None:
    await _remember(client, MESSAGES)
    cases = [
        ("/instructions?include_superseded=maybe", 422, "include_superseded"),
        ("/instructions?namespace=bad%20name", 422, "namespace"),
        ("/instructions?surprise=1", 422, "surprise"),
    ]
    for url, status, field in cases:
        r = await client.get(url, headers=AUTH)
        body = await r.get_json()
        assert r.status_code == status and is_error(body, field=field), (url, body)
    r = await client.get("/instructions")
    assert r.status_code == 401 and is_error(await r.get_json(), "unauthorized")
    r = await client.delete("/instructions/in_nope?namespace=bad%20name", headers=AUTH)
    assert r.status_code == 422 and is_error(await r.get_json(), field="namespace")


async def test_a_store_without_instructions_answers_501(settings: Settings, memory: Memory) -> None:
    storage = memory.storage
    kept, storage.instructions = storage.instructions, None  # as a provider without the capability
    try:
        bare = recompose(memory)
        with pytest.raises(UnsupportedError):
            bare.instructions.list("default")
        assert bare.instructions.active("default") == []
        app = create_app(settings, bare)
        async with app.test_app() as test_app:
            client = test_app.test_client()
            r = await client.post(
                "/remember", json={"conversation_id": "c1", "messages": MESSAGES, "wait": True}, headers=AUTH
            )
            assert r.status_code == 200  # remembering works; nothing is detected
            for r in (
                await client.get("/instructions", headers=AUTH),
                await client.delete("/instructions/in_x", headers=AUTH),
            ):
                assert r.status_code == 501 and is_error(await r.get_json(), "not_supported")
    finally:
        storage.instructions = kept
    assert memory.instructions.list("default").instructions == []


JON_AND_GINA = [  # a LoCoMo-style chat between two people, no assistant
    {"id": "g1", "speaker": "Gina", "content": "Hey Jon! How did the studio opening go?"},
    {"id": "j1", "speaker": "Jon", "content": "Slow start. I'm vegetarian, keep that in mind."},
    {"id": "g2", "speaker": "Gina", "content": "It'll pick up. And remember, I'm always here for you."},
    {"id": "j2", "speaker": "Jon", "content": "Thanks, that means a lot."},
]


async def test_a_chat_between_people_gives_only_its_users_preferences(client: Any) -> None:
    """Without `user`, neither Gina's encouragement nor Jon's diet becomes a standing preference (not in GET
    /instructions, not in /context); with `user` Jon, his diet only. A different user later is a 422 on `user`."""
    await _remember(client, JON_AND_GINA, cid="friends")
    assert (await _list(client))["instructions"] == []
    r = await client.post("/context", json={}, headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and "always here for you" not in body["context"], body

    r = await client.post(
        "/remember",
        json={"conversation_id": "jon", "user": "Jon", "messages": JON_AND_GINA, "wait": True},
        headers=AUTH,
    )
    assert r.status_code == 200, await r.get_json()
    listed = (await _list(client))["instructions"]
    assert [(i["kind"], i["speaker"], i["message_id"], i["conversation_id"]) for i in listed] == [
        ("preference", "Jon", "j1", "jon")
    ]
    more = [{"id": "j3", "speaker": "Jon", "content": "See you."}]
    for user in ("Gina", "Jon\nGina", ""):
        r = await client.post(
            "/remember", json={"conversation_id": "jon", "user": user, "messages": more}, headers=AUTH
        )
        assert r.status_code == 422 and is_error(await r.get_json(), field="user"), user


async def test_encouragement_to_the_other_person_is_not_the_users_preference(client: Any) -> None:
    """Gina's memory (`user` Gina) holds no standing preference from "And remember, I'm always here for you.":
    not in GET /instructions, not opening a /context without a query."""
    r = await client.post(
        "/remember",
        json={"conversation_id": "gina", "user": "Gina", "messages": JON_AND_GINA, "wait": True},
        headers=AUTH,
    )
    assert r.status_code == 200, await r.get_json()
    assert (await _list(client))["instructions"] == []
    r = await client.post("/context", json={"conversation_id": "gina", "recent": False}, headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and "## Standing instructions" not in body["context"], body
