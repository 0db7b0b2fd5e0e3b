"""The context block and core memory on the real SQLite store, MiniLM embedder and extractive summariser."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pyramind.datastore.context.assemble import l1_span
from pyramind.datastore.context.core import core_document_id
from pyramind.datastore.factory import open_memory
from pyramind.datastore.memory import Memory
from pyramind.models.api import Message, Query, QueryFilter, RememberRequest
from pyramind.models.context import ContextRequest
from pyramind.models.core import CorePutRequest
from pyramind.services.errors import InvalidRequestError, NotFoundError
from pyramind.services.summarising import ExtractiveSummariser
from pyramind.services.timeago import time_ago
from pyramind.services.tokens import count_tokens
from tests.conftest import make_settings

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
PLACES = ["Lisbon", "Kyoto", "Oslo", "Nairobi", "Lima", "Hanoi", "Quebec", "Tbilisi", "Perth", "Cusco"]
HOBBIES = ["pottery", "bouldering", "violin", "sourdough baking", "chess", "kayaking", "birdwatching",
           "salsa dancing", "woodcarving", "astronomy"]


def long_conversation(n_days: int = 24) -> list[Message]:
    """A conversation over `n_days` days: each day Ann tells one fact and Bo answers (distinct words per day)."""
    out = []
    for d in range(n_days):
        when = T0 + timedelta(days=3 * d)
        place, hobby = PLACES[d % 10], HOBBIES[(d * 3) % 10]
        out += [
            Message(id=f"d{d}a", speaker="Ann", created_at=when,
                    content=f"On day {d} I planned a trip to {place} and practised {hobby} for {d + 2} hours."),
            Message(id=f"d{d}b", speaker="Bo", created_at=when + timedelta(minutes=1),
                    content=f"That sounds great, Ann. How did the {hobby} go, and who joins you in {place}?"),
            Message(id=f"d{d}c", speaker="Ann", created_at=when + timedelta(minutes=2),
                    content=f"My cousin number {d} joins me; we booked a small flat near the old market of {place}."),
        ]
    return out


@pytest.fixture
def filled(store: Memory) -> Memory:
    store.writer.remember("ns", RememberRequest(conversation_id="c1", messages=long_conversation()))
    return store


def test_time_ago_reads_like_a_person() -> None:
    assert time_ago(NOW - timedelta(seconds=20), NOW) == "just now"
    assert time_ago(NOW - timedelta(minutes=5), NOW) == "5 minutes ago"
    assert time_ago(NOW - timedelta(hours=1, minutes=5), NOW) == "1 hour ago"
    assert time_ago(NOW - timedelta(days=3, hours=2), NOW) == "3 days ago"
    assert time_ago(NOW - timedelta(days=13), NOW) == "13 days ago"
    assert time_ago(NOW - timedelta(days=15), NOW) == "2 weeks ago"
    assert time_ago(NOW - timedelta(days=92), NOW) == "3 months ago"
    assert time_ago(NOW - timedelta(days=800), NOW) == "2 years ago"
    assert time_ago(NOW + timedelta(days=2), NOW) == "in 2 days"
    assert time_ago(None, NOW) == "at an unknown time"


def test_an_undated_memory_is_shown_without_a_date_by_the_default_template(store: Memory) -> None:
    store.writer.remember("ns", RememberRequest(conversation_id="c", messages=[
        Message(id="m1", speaker="Ann", content="We land in Lisbon on 3 June.", created_at=NOW - timedelta(days=2)),
        Message(id="m2", speaker="Bob", content="Book the tram tour for the 4th, please."),
    ]))
    block = store.context.assemble("ns", ContextRequest(conversation_id="c", now=NOW, budget_tokens=300)).context
    assert "- [2024-05-30, 2 days ago] Ann: We land in Lisbon on 3 June." in block
    assert "- Bob: Book the tram tour for the 4th, please." in block and "undated" not in block
    custom = store.context.assemble("ns", ContextRequest(conversation_id="c", now=NOW, budget_tokens=300,
                                                     memory_template="* {date}: {text}")).context
    assert "* undated: Bob: Book the tram tour" in custom  # a caller's own template is used as written


def test_default_block_for_a_small_conversation(store: Memory) -> None:
    store.core.put("ns", CorePutRequest(key="name", value="Ann Lee", importance=90))
    store.core.put("ns", CorePutRequest(key="diet", value="vegetarian"))
    store.writer.remember("ns", RememberRequest(conversation_id="c1", messages=[
        Message(id="m1", speaker="Ann", content="I adopted a grey cat called Miso.",
                created_at=NOW - timedelta(days=3)),
        Message(id="m2", speaker="Bo", content="Lovely! How old is Miso?", created_at=NOW - timedelta(days=3)),
        Message(id="m3", speaker="Ann", content="Two years old, and she hates the vacuum.",
                created_at=NOW - timedelta(hours=2)),
    ]))
    res = store.context.assemble("ns", ContextRequest(conversation_id="c1", now=NOW, user_name="Ann",
                                                  assistant_name="Bo"))
    assert res.context == (
        "Memory of Ann's conversations with Bo.\n"
        "\n"
        "## Core memory\n"
        "- name: Ann Lee\n"
        "- diet: vegetarian\n"
        "\n"
        "## Recent turns\n"
        "- [2024-05-29, 3 days ago] Ann: I adopted a grey cat called Miso.\n"
        "- [2024-05-29, 3 days ago] Bo: Lovely! How old is Miso?\n"
        "- [2024-06-01, 2 hours ago] Ann: Two years old, and she hates the vacuum."
    )
    assert res.query == "Two years old, and she hates the vacuum."  # the latest message by default
    assert res.tokens_used == count_tokens(res.context) <= res.budget_tokens == 2000
    assert [s.name for s in res.sections] == ["core", "recent", "relevant", "timeline"]
    # the only chunk holds nothing but the recent turns: neither relevant nor timeline repeats it
    assert [len(s.items) for s in res.sections] == [2, 3, 0, 0]


@pytest.mark.parametrize("budget", [40, 120, 400, 900, 2500])
def test_the_budget_is_never_exceeded(filled: Memory, budget: int) -> None:
    res = filled.context.assemble("ns", ContextRequest(conversation_id="c1", query="Who joins Ann in Kyoto?",
                                                   budget_tokens=budget, neighbours=1, now=NOW))
    assert res.tokens_used == count_tokens(res.context) <= budget
    assert sum(s.tokens_used for s in res.sections) <= budget
    if budget >= 400:
        assert res.left_out  # the conversation is bigger than the budget: something was left out, and said so


def test_sections_in_priority_order_and_unused_shares_pass_on(filled: Memory) -> None:
    filled.core.put("ns", CorePutRequest(key="home", value="Ann lives in Porto"))
    res = filled.context.assemble("ns", ContextRequest(conversation_id="c1", query="pottery in Kyoto",
                                                       budget_tokens=1500,
                                                   min_score=0.0, now=NOW))
    positions = [res.context.index(h) for h in ("## Core memory", "## Recent turns", "## Relevant memories",
                                                "## Earlier, summarised")]
    assert positions == sorted(positions)
    core, recent, relevant, timeline = res.sections
    assert core.items and recent.items and relevant.items and timeline.items
    # core used a little of its share: the rest went on to the recent turns' budget
    assert recent.budget_tokens > int(0.35 * 1500) and core.tokens_used < core.budget_tokens
    assert "Kyoto" in relevant.items[0].text and relevant.items[0].score is not None
    assert all(i.kind == "message" for i in recent.items)
    times = [i.end_time.timestamp() if i.end_time else 0.0 for i in recent.items]
    assert times == sorted(times) and recent.items[-1].id == "d23c"  # newest kept, shown oldest first


def test_without_recent_turns_the_budget_goes_to_memories(filled: Memory) -> None:
    res = filled.context.assemble("ns", ContextRequest(conversation_id="c1", query="pottery in Kyoto", recent=False,
                                                   budget_tokens=1000, now=NOW))
    names = {s.name: s for s in res.sections}
    assert not names["recent"].items
    assert names["relevant"].budget_tokens >= int(0.8 * 1000) - 30


def test_no_span_is_spent_twice(filled: Memory) -> None:
    fan = filled.settings.fan_out
    for budget, recent in ((700, False), (800, True), (2500, True), (2500, False)):
        res = filled.context.assemble("ns", ContextRequest(conversation_id="c1", query="bouldering in Oslo",
                                                       budget_tokens=budget, neighbours=1, recent=recent,
                                                       min_score=0.0, now=NOW))
        shown = {i.id for i in res.sections[1].items}
        nodes = filled.storage.get_nodes("ns", [i.id for s in res.sections[2:] for i in s.items])
        assert len(nodes) == sum(len(s.items) for s in res.sections[2:])
        spans = sorted(l1_span(n, fan) for n in nodes)
        for (a0, a1), (b0, b1) in zip(spans, spans[1:], strict=False):
            assert a1 <= b0, f"overlapping spans {(a0, a1)} and {(b0, b1)} at budget {budget}"
        for n in nodes:  # no chunk that only repeats the recent turns
            assert not (n.level == 1 and set(n.message_ids) <= shown)
        if budget == 700:  # chunks where the query points, a summary for a period they leave out
            assert {n.level for n in nodes} == {1, 2}


def test_timeline_is_refined_where_the_query_points(filled: Memory) -> None:
    res = filled.context.assemble("ns", ContextRequest(conversation_id="c1", query="bouldering in Oslo", relevant=False,
                                                   recent=False, budget_tokens=3000, now=NOW))
    items = res.sections[3].items
    assert items and all(i.kind in ("summary", "chunk") for i in items)
    assert any(i.why.startswith("refined from") for i in items)
    starts = [i.start_time.timestamp() if i.start_time else 0.0 for i in items]
    assert starts == sorted(starts)  # the timeline reads in time order


def test_templates_and_their_fields(filled: Memory) -> None:
    res = filled.context.assemble("ns", ContextRequest(
        conversation_id="c1", query="violin", budget_tokens=600, now=NOW, user_name="Ann", assistant_name="Bo",
        template="{assistant_name} remembers {user_name}:\n{recent}\n--\n{relevant}",
        memory_template="* {speaker} ({time_ago}, {date}, L{level}): {text}", max_memory_chars=40))
    assert res.context.startswith("Bo remembers Ann:\n* ")
    assert "## " not in res.context  # the sections' own fields carry no headings
    line = res.context.splitlines()[1]
    assert line.startswith("* Ann (4 weeks ago, 2024-05-03, L0): Ann: On day 21")  # {text}: who said what
    assert all(ln.endswith("…") or len(ln.split("): ", 1)[1]) <= 40 for ln in res.context.splitlines()
               if ln.startswith("* "))
    for field, bad in (("template", "{memories} {secret}"), ("memory_template", "{text} {user}"),
                       ("template", "{memories")):
        with pytest.raises(InvalidRequestError) as err:
            filled.context.assemble("ns", ContextRequest.model_validate({"conversation_id": "c1", field: bad}))
        assert err.value.field == field


def test_bad_budgets_and_unknown_conversations(filled: Memory) -> None:
    for budget in (0, -5, filled.settings.context_max_tokens + 1):
        with pytest.raises(InvalidRequestError) as err:
            filled.context.assemble("ns", ContextRequest(conversation_id="c1", budget_tokens=budget))
        assert err.value.field == "budget_tokens"
    for ns, cid in (("ns", "nope"), ("other", "c1")):  # another namespace's conversation does not exist here
        with pytest.raises(NotFoundError) as nf:
            filled.context.assemble(ns, ContextRequest(conversation_id=cid))
        assert nf.value.field == "conversation_id"


def test_namespace_wide_context_without_a_conversation(filled: Memory) -> None:
    res = filled.context.assemble("ns", ContextRequest(query="sourdough baking in Lima", budget_tokens=800, now=NOW))
    assert not res.sections[1].items and res.sections[2].items
    assert filled.context.assemble("other", ContextRequest(query="sourdough baking in Lima")).sections[2].items == []


def test_neighbours_are_the_chunks_around_a_node(filled: Memory) -> None:
    chunks = [n for n in filled.storage.source_nodes("ns", "c1") if n.level == 1]
    before, after = filled.reader.neighbours("ns", chunks[3], 2)
    assert [n.id for n in before] == [c.id for c in chunks[1:3]]
    assert [n.id for n in after] == [c.id for c in chunks[4:6]]
    assert filled.reader.neighbours("ns", chunks[0], 1) == ([], [chunks[1]])
    assert filled.reader.neighbours("other", chunks[3], 1) == ([], [])


def test_hybrid_scores_mean_the_same_from_query_to_query(filled: Memory) -> None:
    res = filled.reader.query("ns", [Query(query="Who joins Ann in Kyoto for pottery?", top_k=3),
                                   Query(query="quarterly tax filing deadlines for corporations", top_k=3)])
    related, unrelated = ([r.score for r in q.results] for q in res.results)
    assert all(0 <= s <= 1 for s in related + unrelated)
    assert related == sorted(related, reverse=True)
    assert related[0] > 0.3 > 0.15 > unrelated[0]  # the top hit of an unrelated query is no longer 1.0
    ctx = filled.context.assemble("ns", ContextRequest(conversation_id="c1", recent=False, timeline=False,
                                                   query="quarterly tax filing deadlines for corporations"))
    assert ctx.sections[2].items == []  # nothing above the floor: nothing included just to fill the budget


# ---------------------------------------------------------------------------------------------- core memory
@pytest.fixture
def small_core(tmp_path: Path, embedder) -> Iterator[Memory]:  # type: ignore[no-untyped-def]
    ds = open_memory(make_settings(tmp_path, core_max_tokens=20), embedder, ExtractiveSummariser())
    yield ds
    ds.close()


def test_core_overflow_moves_the_least_important_oldest_entries_to_long_term(small_core: Memory) -> None:
    ds = small_core
    ds.core.put("ns", CorePutRequest(key="pet", value="a grey cat called Miso", importance=20))
    ds.core.put("ns", CorePutRequest(key="car", value="an old red Volvo", importance=20))
    ds.core.put("ns", CorePutRequest(key="name", value="Ann Lee", importance=90))
    res = ds.core.put("ns", CorePutRequest(key="job", value="nurse in Porto", importance=50))
    assert [e.key for e in res.moved_out] == ["pet"]  # least important, and the older of the two
    assert res.tokens_used <= 20 and [e.key for e in ds.core.list_entries("ns").entries] == ["name", "job", "car"]
    # moved out, still recallable: a document in long-term memory
    hits = ds.reader.query("ns", [Query(query="grey cat Miso", top_k=3, filter=QueryFilter(source_type="document"))])
    assert hits.results[0].results[0].document_id == core_document_id("pet")
    assert "pet: a grey cat called Miso" in hits.results[0].results[0].text
    ctx = ds.context.assemble("ns", ContextRequest(query="what pet does Ann have?", min_score=0.0))
    assert "Miso" in ctx.sections[2].items[0].text and "pet" not in {i.id for i in ctx.sections[0].items}
    # deleting the key removes it everywhere, the moved-out copy included
    assert ds.core.delete("ns", "pet").deleted_documents == 1
    hits = ds.reader.query("ns", [Query(query="grey cat Miso", top_k=3, filter=QueryFilter(source_type="document"))])
    assert all("Miso" not in r.text for r in hits.results[0].results)
    with pytest.raises(NotFoundError):
        ds.core.delete("ns", "pet")


def test_core_value_over_the_budget_alone_is_refused_and_changes_nothing(small_core: Memory) -> None:
    small_core.core.put("ns", CorePutRequest(key="name", value="Ann"))
    with pytest.raises(InvalidRequestError) as err:
        small_core.core.put("ns", CorePutRequest(key="bio", value="word " * 40))
    assert err.value.field == "value"
    assert [e.key for e in small_core.core.list_entries("ns").entries] == ["name"]


def test_core_entries_expire_and_are_scoped(store: Memory) -> None:
    store.writer.remember("ns", RememberRequest(conversation_id="c1", messages=[Message(speaker="Ann", content="hi")]))
    store.core.put("ns", CorePutRequest(key="mood", value="tired today", ttl_seconds=1))
    store.core.put("ns", CorePutRequest(key="topic", value="planning the move", conversation_id="c1"))
    store.core.put("ns", CorePutRequest(key="name", value="Ann"))
    ctx = store.context.assemble("ns", ContextRequest(conversation_id="c1"))
    assert {i.id for i in ctx.sections[0].items} == {"mood", "topic", "name"}
    assert [e.key for e in store.core.list_entries("ns").entries] == ["name", "mood"]  # the namespace's own
    assert [e.key for e in store.core.list_entries("ns", "c1").entries] == ["topic"]
    time.sleep(1.2)
    ctx = store.context.assemble("ns", ContextRequest(conversation_id="c1"))
    assert {i.id for i in ctx.sections[0].items} == {"topic", "name"}
    assert "tired" not in ctx.context
    assert [e.key for e in store.core.list_entries("ns").entries] == ["name"]
    # another namespace sees none of it
    assert store.core.list_entries("other").entries == [] and store.core.entries("other", "c1") == []
    with pytest.raises(NotFoundError):
        store.core.delete("other", "name")
    # a conversation not yet remembered is an empty one: its entry waits for it, in its own namespace only
    store.core.put("other", CorePutRequest(key="x", value="y", conversation_id="c1"))
    assert [e.key for e in store.core.list_entries("other", "c1").entries] == ["x"]
    assert [e.key for e in store.core.list_entries("ns", "c1").entries] == ["topic"]
