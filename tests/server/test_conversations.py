"""The listing routes over HTTP (GET /conversations, /conversations/{id}, /conversations/{id}/messages) and the
public, packaged files of the web page and of Swagger UI, on the real app, store and embedder."""

from __future__ import annotations

from models.api import RememberRequest
from tests.server.test_api import is_error
from tests.support.settings import AUTH
from tests.support.synthetic import conversation


def seed(memory, ns: str = "default") -> None:
    memory.writer.remember(ns, RememberRequest(conversation_id="trip", messages=conversation(("Ann", "Bob"), 40)))
    memory.writer.remember(
        ns, RememberRequest(conversation_id="chat", messages=conversation(("Cy", "Di"), 3, prefix="c"))
    )


async def test_list_detail_and_messages(client, memory) -> None:
    seed(memory)
    r = await client.get("/conversations?limit=1", headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and [s["id"] for s in body["conversations"]] == ["chat"]
    r = await client.get(f"/conversations?limit=1&cursor={body['next_cursor']}", headers=AUTH)
    page = await r.get_json()
    trip = page["conversations"][0]
    assert trip["id"] == "trip" and page["next_cursor"] is None
    assert trip["message_count"] == 40 and trip["node_counts"]["1"] >= 5 and trip["start_time"].startswith("2024-01-01")

    r = await client.get("/conversations/trip", headers=AUTH)
    detail = await r.get_json()
    assert r.status_code == 200 and detail["conversation"]["id"] == "trip"
    top = detail["top_nodes"]
    assert top[0]["level"] == 2 and all(n["parent_id"] is None for n in top)
    assert [n["level"] for n in top] == sorted((n["level"] for n in top), reverse=True)

    chunk = (await (await client.get(f"/memories/{top[0]['children'][0]}", headers=AUTH)).get_json())["node"]
    r = await client.get(f"/conversations/trip/messages?node_id={chunk['id']}", headers=AUTH)
    msgs = (await r.get_json())["messages"]
    assert [m["id"] for m in msgs] == chunk["message_ids"] and msgs[0]["speaker"] == "Ann"
    r = await client.get("/conversations/trip/messages?limit=30", headers=AUTH)
    first = await r.get_json()
    r = await client.get(f"/conversations/trip/messages?limit=30&cursor={first['next_cursor']}", headers=AUTH)
    rest = await r.get_json()
    assert [m["id"] for m in first["messages"] + rest["messages"]] == [f"m-{i}" for i in range(40)]
    assert rest["next_cursor"] is None


async def test_listing_is_namespace_scoped_and_checks_its_input(client, memory) -> None:
    seed(memory, "team-a")
    r = await client.get("/conversations?namespace=team-a", headers=AUTH)
    assert {s["id"] for s in (await r.get_json())["conversations"]} == {"trip", "chat"}
    r = await client.get("/conversations", headers=AUTH)
    assert (await r.get_json()) == {"conversations": [], "next_cursor": None}
    for path in ("/conversations/trip", "/conversations/trip/messages"):
        r = await client.get(path, headers=AUTH)
        assert r.status_code == 404 and is_error(await r.get_json(), "not_found", "conversation_id")
    r = await client.get("/conversations/trip/messages?namespace=team-a&node_id=nope", headers=AUTH)
    assert r.status_code == 404 and is_error(await r.get_json(), "not_found", "node_id")

    r = await client.get("/conversations?limit=0", headers=AUTH)
    assert r.status_code == 422 and is_error(await r.get_json(), "invalid_request", "limit")
    r = await client.get("/conversations?limit=101", headers=AUTH)
    assert r.status_code == 422 and is_error(await r.get_json(), "invalid_request", "limit")
    r = await client.get("/conversations?colour=red", headers=AUTH)
    assert r.status_code == 422 and is_error(await r.get_json(), "invalid_request", "colour")
    r = await client.get("/conversations?cursor=Zm9vOmJhcg", headers=AUTH)
    assert r.status_code == 422 and is_error(await r.get_json(), "invalid_request", "cursor")
    r = await client.get("/conversations?namespace=bad%20ns", headers=AUTH)
    assert r.status_code == 422 and is_error(await r.get_json(), "invalid_request", "namespace")
    r = await client.get("/conversations")
    assert r.status_code == 401 and is_error(await r.get_json(), "unauthorized")


async def test_the_page_and_swagger_ui_are_served_from_the_package(client) -> None:
    r = await client.get("/ui")
    assert r.status_code == 308 and r.headers["Location"].endswith("/ui/")
    r = await client.get("/ui/")  # no token needed: the page asks for one
    html = (await r.get_data()).decode()
    assert r.status_code == 200 and '<script type="module" src="app.js">' in html
    for name, kind in (("app.js", "javascript"), ("api.js", "javascript"), ("style.css", "css")):
        r = await client.get(f"/ui/{name}")
        assert r.status_code == 200 and kind in r.headers["Content-Type"], name
    assert (await client.get("/ui/../server/app.py")).status_code == 404
    assert (await client.get("/ui/nothing.js")).status_code == 404

    r = await client.get("/docs")
    html = (await r.get_data()).decode()
    assert r.status_code == 200 and "/ui/swagger/swagger-ui-bundle.js" in html and "cdn" not in html.lower()
    r = await client.get("/ui/swagger/swagger-ui-bundle.js")
    js = await r.get_data()
    assert r.status_code == 200 and len(js) > 500_000 and b"SwaggerUIBundle" in js
    assert (await client.get("/ui/swagger/swagger-ui.css")).status_code == 200
    assert (await client.get("/ui/swagger/index.html")).status_code == 404


async def test_a_conversation_keeps_the_title_it_was_first_given(client) -> None:
    """`title` on /remember is kept (the first one given; a later one does not replace it) and
    listed by /conversations and /conversations/{id}; a title is a name: no line breaks."""
    first = {"speaker": "Ann", "content": "Shall we plan the trip to Lisbon?", "created_at": "2024-05-01T09:00:00Z"}
    r = await client.post(
        "/remember",
        json={"conversation_id": "t1", "title": "Lisbon trip", "wait": True, "messages": [first]},
        headers=AUTH,
    )
    assert r.status_code == 200, await r.get_json()
    r = await client.post(
        "/remember",
        json={
            "conversation_id": "t1",
            "title": "Something else",
            "messages": [{"speaker": "Bob", "content": "Yes, in June.", "created_at": "2024-05-01T09:01:00Z"}],
        },
        headers=AUTH,
    )
    assert r.status_code == 202
    r = await client.post("/remember", json={"conversation_id": "t2", "messages": [first]}, headers=AUTH)
    page = await (await client.get("/conversations", headers=AUTH)).get_json()
    listed = {s["id"]: s for s in page["conversations"]}
    assert listed["t1"]["title"] == "Lisbon trip" and listed["t2"]["title"] is None
    detail = await (await client.get("/conversations/t1", headers=AUTH)).get_json()
    assert detail["conversation"]["title"] == "Lisbon trip"
    r = await client.post(
        "/remember", json={"conversation_id": "t3", "title": "two\nlines", "messages": [first]}, headers=AUTH
    )
    assert r.status_code == 422 and is_error(await r.get_json(), field="title")


async def test_listed_messages_carry_their_session(client) -> None:
    """Every stored message has its session_id, and the message listing says it."""
    first = [
        {"id": "a", "speaker": "Ann", "content": "Hello.", "created_at": "2024-05-01T09:00:00Z"},
        {"id": "b", "speaker": "Bob", "content": "Hi.", "created_at": "2024-05-01T09:01:00Z", "session_id": "aside"},
    ]
    r = await client.post(
        "/remember",
        json={"conversation_id": "s", "session_id": "kickoff", "wait": True, "messages": first},
        headers=AUTH,
    )
    assert r.status_code == 200
    r = await client.post(
        "/remember",
        json={
            "conversation_id": "s",
            "wait": True,
            "messages": [
                {"id": "c", "speaker": "Ann", "content": "A day later.", "created_at": "2024-05-02T09:00:00Z"}
            ],
        },
        headers=AUTH,
    )
    body = await (await client.get("/conversations/s/messages", headers=AUTH)).get_json()
    assert [(m["id"], m["session_id"]) for m in body["messages"]] == [
        ("a", "kickoff"),
        ("b", "aside"),
        ("c", "s-2024-05-02T09:00:00Z"),
    ]
