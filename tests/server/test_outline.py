"""A conversation's outline (issue 25, item 1): GET /conversations/{id}/outline and the MCP tool `outline` (through
the real MCP SDK client), on the real app, store and embedder."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from datastore.memory import Memory
from models.api import Message, RememberRequest
from services.tokens import count_tokens
from tests.server.test_api import is_error
from tests.server.test_mcp import data, error_text, mcp_client, serving
from tests.support.settings import AUTH, TOKEN, make_settings
from tests.support.synthetic import long_conversation


def seed(memory: Memory, ns: str = "default") -> None:
    memory.writer.remember(ns, RememberRequest(conversation_id="trips", messages=long_conversation(8), title="Trips"))


async def test_the_outline_lists_dated_lines_oldest_first_cut_at_the_budget(client, memory) -> None:
    seed(memory)
    r = await client.get("/conversations/trips/outline?budget_tokens=100000", headers=AUTH)
    body = await r.get_json()
    assert r.status_code == 200 and body["title"] == "Trips" and body["omitted"] == 0
    days = body["days"]
    assert [d["date"] for d in days] == sorted(d["date"] for d in days) and days[0]["date"] == "2024-03-01"
    first = days[0]["lines"]
    assert [ln["message_id"] for ln in first] == ["d0a", "d0b", "d0c"] and first[0]["speaker"] == "Ann"
    assert body["text"].startswith("[2024-03-01]\nAnn: On day 0 I planned a trip to Lisbon")
    times = [ln["created_at"] for d in days for ln in d["lines"]]
    assert times == sorted(times) and all(ln["score"] is None for d in days for ln in d["lines"])

    r = await client.get("/conversations/trips/outline?budget_tokens=80", headers=AUTH)
    cut = await r.get_json()
    shown, note = cut["text"].rsplit("\n", 1)
    assert cut["tokens"] <= 80 and cut["omitted"] > 0 and body["text"].startswith(shown)
    assert note == f"({cut['omitted']} of 24 lines left out)"  # the text says that lines were left out

    r = await client.get("/conversations/trips/outline?query=the%20trip%20to%20Oslo&budget_tokens=80", headers=AUTH)
    focused = await r.get_json()
    shown = [ln for d in focused["days"] for ln in d["lines"]]
    assert focused["query"] == "the trip to Oslo" and focused["tokens"] <= 80
    assert "d2a" in {ln["message_id"] for ln in shown}  # day 2: "a trip to Oslo"
    assert [ln["created_at"] for ln in shown] == sorted(ln["created_at"] for ln in shown)
    assert all(ln["score"] is not None for ln in shown)


async def test_the_outline_query_finds_a_sentence_that_is_no_lead_and_answers_nothing_unrelated(client, memory) -> None:
    said = [
        (
            "Ann",
            "I finally sent the quarterly tax forms this morning. The accountant wanted three more receipts from "
            "March. Then I cleaned the whole kitchen and fixed the sink. Oh, I've been to Paris yesterday!",
        ),
        ("Bo", "Lovely. I mostly repaired the garden fence and planted tomatoes."),
        ("Ann", "Nice. My brother started a new job at the hospital."),
    ]
    messages = [
        Message(id=f"p{i}", role="user", speaker=who, content=text, created_at=datetime(2024, 5, 2 + i, 9, tzinfo=UTC))
        for i, (who, text) in enumerate(said)
    ]
    memory.writer.remember("default", RememberRequest(conversation_id="week", messages=messages))
    r = await client.get("/conversations/week/outline?query=Paris%20trip&budget_tokens=300", headers=AUTH)
    body = await r.get_json()
    shown = [ln for d in body["days"] for ln in d["lines"]]
    # the sentence that answers it, not the message's lead, under its date, with its sentence id
    assert [ln["text"] for ln in shown] == ["Oh, I've been to Paris yesterday!"] and shown[0]["id"] == "p0:3"
    assert body["text"].startswith("[2024-05-02]\nAnn: Oh, I've been to Paris yesterday!")
    r = await client.get("/conversations/week/outline?query=quantum%20chromodynamics%20lecture", headers=AUTH)
    nothing = await r.get_json()
    assert (
        nothing["days"] == []
        and nothing["text"] == "No line of this conversation is about 'quantum chromodynamics lecture'."
    )


async def test_a_long_lead_is_shown_as_its_whole_sentence(client, memory) -> None:
    # a first sentence of ~80 tokens: its line is embedded cut at 60 (services/lines.py MAX_LINE_TOKENS) but the
    # outline shows it whole, with and without a query (a model reads whole sentences)
    lead = (
        "When we finally reached the old harbour of Porto after driving for eleven hours through the rain, my "
        "sister Clara, who had organised the whole trip around the wine cellars, the tiled churches and a "
        "cooking class on the river, insisted that we celebrate with grilled sardines at the tiny restaurant "
        "her colleague had recommended."
    )
    messages = [
        Message(
            id="m0",
            role="user",
            speaker="Ann",
            content=f"{lead} It was worth it.",
            created_at=datetime(2024, 5, 2, 9, tzinfo=UTC),
        ),
        Message(
            id="m1",
            role="user",
            speaker="Bo",
            content="Sounds wonderful.",
            created_at=datetime(2024, 5, 2, 10, tzinfo=UTC),
        ),
    ]
    memory.writer.remember("default", RememberRequest(conversation_id="porto", messages=messages))
    assert 60 < count_tokens(lead) <= 100
    (stored,) = [n for n in memory.storage.source_nodes("default", "porto", level=0) if n.message_ids == ["m0"]]
    assert stored.text.endswith("…")  # the line as embedded
    for query in ("", "&query=sardines%20in%20Porto"):
        r = await client.get(f"/conversations/porto/outline?budget_tokens=500{query}", headers=AUTH)
        body = await r.get_json()
        (line,) = [ln for d in body["days"] for ln in d["lines"] if ln["message_id"] == "m0"]
        assert line["text"] == lead and f"Ann: {lead}" in body["text"] and "…" not in body["text"]


async def test_the_outline_of_an_unknown_conversation_is_a_404_and_input_is_checked(client, memory) -> None:
    seed(memory, "team-a")
    r = await client.get("/conversations/trips/outline", headers=AUTH)  # another namespace's: not found
    assert r.status_code == 404 and is_error(await r.get_json(), "not_found")
    r = await client.get("/conversations/nope/outline?namespace=team-a", headers=AUTH)
    assert r.status_code == 404 and is_error(await r.get_json(), "not_found")
    r = await client.get("/conversations/trips/outline?namespace=team-a&budget_tokens=5", headers=AUTH)
    assert r.status_code == 422 and is_error(await r.get_json(), "invalid_request", "budget_tokens")
    r = await client.get("/conversations/trips/outline?namespace=team-a&colour=red", headers=AUTH)
    assert r.status_code == 422 and is_error(await r.get_json(), "invalid_request", "colour")
    r = await client.get("/conversations/trips/outline?namespace=team-a", headers=AUTH)
    assert r.status_code == 200 and (await r.get_json())["total_lines"] == 24


async def test_the_outline_tool_over_mcp(tmp_path: Path, memory: Memory) -> None:
    seed(memory)
    async with serving(make_settings(tmp_path), memory) as url, mcp_client(url, TOKEN) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["outline"].output_schema and tools["outline"].annotations.read_only_hint  # type: ignore[union-attr]
        got = data(await client.call_tool("outline", {"conversation_id": "trips", "budget_tokens": 100000}))
        assert got["total_lines"] == 24 and got["days"][0]["lines"][0]["message_id"] == "d0a"
        focused = data(
            await client.call_tool("outline", {"conversation_id": "trips", "query": "Oslo", "budget_tokens": 60})
        )
        assert focused["tokens"] <= 60 and "Oslo" in focused["text"]
        assert "conversation_id" in error_text(await client.call_tool("outline", {"conversation_id": "nope"}))
        assert "budget_tokens" in error_text(
            await client.call_tool("outline", {"conversation_id": "trips", "budget_tokens": 1})
        )
