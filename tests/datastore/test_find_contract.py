"""`find` and `describe` (stats) behave the same on every provider (local, postgres, pinecone): the
`_scan_messages` hook streams the same messages with the same filters, in the same order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from datastore.memory import Memory
from models.api import Message, RememberRequest
from models.find import FindRequest
from services.errors import InvalidRequestError
from tests.support.synthetic import conversation

T0 = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)


def fill(memory: Memory, ns: str) -> None:
    memory.writer.remember(ns, RememberRequest(conversation_id="c-a", messages=conversation(("Alice", "Bob"), 30)))
    memory.writer.remember(
        ns,
        RememberRequest(
            conversation_id="c-b",
            messages=[
                Message(
                    id="b-1",
                    speaker="Carol",
                    content="My passport number is X1234567, keep it safe.",
                    created_at=T0 + timedelta(days=3),
                ),
                Message(
                    id="b-2",
                    speaker="Dan",
                    content="The Vienna trip: call +43 1 234 5678 before noon.",
                    created_at=T0 + timedelta(days=4),
                ),
            ],
        ),
    )


def test_find_phrase_and_regex_with_filters(memory: Memory, ns: str) -> None:
    fill(memory, ns)
    res = memory.finder.find(ns, FindRequest(pattern="night train to vienna", limit=100))
    assert res.complete and res.matches and res.scanned == 32
    assert {m.conversation_id for m in res.matches} == {"c-a"}
    first = res.matches[0]
    assert "**night train to Vienna**" in first.text  # case-insensitive, original case kept inside the marks
    start, end = first.spans[0]
    assert first.chunk_id is not None
    chunk = memory.reader.get_node(ns, first.chunk_id)
    assert chunk.level == 1 and first.message_id in chunk.message_ids
    assert [m.message_id for m in res.matches] == sorted(
        (m.message_id for m in res.matches), key=lambda i: int(i.split("-")[1])
    )  # conversation order

    # a regex, and the same text taken literally
    res = memory.finder.find(ns, FindRequest(pattern=r"[A-Z]\d{7}", regex=True, case_sensitive=True))
    assert [(m.message_id, m.speaker, m.text) for m in res.matches] == [
        ("b-1", "Carol", "My passport number is **X1234567**, keep it safe.")
    ]
    assert memory.finder.find(ns, FindRequest(pattern=r"[A-Z]\d{7}")).matches == []
    # filters: speaker, conversation, time range
    assert {
        m.speaker for m in memory.finder.find(ns, FindRequest(pattern="about", speaker="Bob", limit=100)).matches
    } == {"Bob"}
    assert memory.finder.find(ns, FindRequest(pattern="vienna", conversation_id="c-b")).matches[0].message_id == "b-2"
    late = memory.finder.find(ns, FindRequest(pattern="e", start_date=T0 + timedelta(days=2), limit=100))
    assert [m.message_id for m in late.matches] == ["b-1", "b-2"]
    early = memory.finder.find(ns, FindRequest(pattern="Vienna", end_date=T0 + timedelta(days=1), limit=100))
    assert early.matches and all(m.conversation_id == "c-a" for m in early.matches)
    # limit
    assert len(memory.finder.find(ns, FindRequest(pattern="about", limit=3)).matches) == 3
    # another namespace sees nothing
    assert memory.finder.find(ns + "-other", FindRequest(pattern="passport")).matches == []


def test_find_bad_patterns_are_errors_naming_pattern(memory: Memory, ns: str) -> None:
    fill(memory, ns)
    with pytest.raises(InvalidRequestError) as err:
        memory.finder.find(ns, FindRequest(pattern="(unclosed", regex=True))
    assert err.value.field == "pattern"
    with pytest.raises(InvalidRequestError) as err:
        memory.finder.find(ns, FindRequest(pattern=r"(?<=look)behind", regex=True))  # RE2 has no lookbehind
    assert err.value.field == "pattern"
    with pytest.raises(InvalidRequestError) as err:
        memory.finder.find(ns, FindRequest(pattern="x", limit=memory.settings.find_max_limit + 1))
    assert err.value.field == "limit"


def test_stats_of_namespace_and_conversation(memory: Memory, ns: str) -> None:
    fill(memory, ns)
    whole = memory.describer.describe(ns)
    assert whole.sources == 2 and whole.messages == 32
    assert whole.levels[0].level == 1 and whole.levels[0].nodes >= 2
    assert {s.speaker: s.messages for s in whole.speakers} == {"Alice": 15, "Bob": 15, "Carol": 1, "Dan": 1}
    assert whole.start_time == T0 and whole.end_time == T0 + timedelta(days=4)
    one = memory.describer.describe(ns, "c-b")
    assert (one.sources, one.messages, one.conversation_id) == (1, 2, "c-b")
    assert [s.speaker for s in one.speakers] == ["Carol", "Dan"] and [lc.level for lc in one.levels] == [1]
    unknown = memory.describer.describe(ns, "no-such-conversation")  # empty, with a warning naming it
    assert (unknown.sources, unknown.messages) == (0, 0)
    assert [(w.code, w.conversation_id) for w in unknown.warnings] == [("unknown_conversation", "no-such-conversation")]
    found = memory.finder.find(ns, FindRequest(pattern="x", conversation_id="no-such-conversation"))
    assert found.matches == [] and found.warnings[0].field == "conversation_id"
    empty = memory.describer.describe(ns + "-empty")
    assert (empty.sources, empty.messages, empty.levels, empty.start_time) == (0, 0, [], None)
