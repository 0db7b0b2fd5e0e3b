"""The context block (its sections, rendering, budget and templates) on the real SQLite store,
MiniLM embedder and extractive summariser. What the memory sections choose: test_context_evidence.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from datastore.memory import Memory
from models.api import Document, Message, Query, RememberRequest
from models.context import ContextRequest
from models.core import CorePutRequest
from services.errors import InvalidRequestError
from services.timeago import time_ago
from services.tokens import count_tokens
from tests.support.synthetic import LONG_NOW, LONG_T0, long_conversation


@pytest.fixture
def filled(local_memory: Memory) -> Memory:
    local_memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=long_conversation()))
    return local_memory


RULE = "Always give me the travel times in hours."


def add_turns(memory: Memory, messages: list[Message]) -> None:
    """Remember `messages` as more of the `filled` store's conversation c1 (namespace ns)."""
    memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=messages))


def rule_turns() -> list[Message]:
    """Ann's standing rule said to an assistant (in a chat between Ann and Bo only it would be advice to Bo)."""
    at = LONG_T0 + timedelta(days=4)
    return [
        Message(id="rule", speaker="Ann", content=RULE, created_at=at),
        Message(id="ok", speaker="assistant", content="Noted.", created_at=at),
    ]


def test_time_ago_reads_like_a_person() -> None:
    assert time_ago(LONG_NOW - timedelta(seconds=20), LONG_NOW) == "just now"
    assert time_ago(LONG_NOW - timedelta(minutes=5), LONG_NOW) == "5 minutes ago"
    assert time_ago(LONG_NOW - timedelta(hours=1, minutes=5), LONG_NOW) == "1 hour ago"
    assert time_ago(LONG_NOW - timedelta(days=3, hours=2), LONG_NOW) == "3 days ago"
    assert time_ago(LONG_NOW - timedelta(days=13), LONG_NOW) == "13 days ago"
    assert time_ago(LONG_NOW - timedelta(days=15), LONG_NOW) == "2 weeks ago"
    assert time_ago(LONG_NOW - timedelta(days=92), LONG_NOW) == "3 months ago"
    assert time_ago(LONG_NOW - timedelta(days=800), LONG_NOW) == "2 years ago"
    assert time_ago(LONG_NOW + timedelta(days=2), LONG_NOW) == "in 2 days"
    assert time_ago(None, LONG_NOW) == "at an unknown time"


def test_the_default_block_is_compact_one_date_line_per_day(local_memory: Memory) -> None:
    local_memory.core.put("ns", CorePutRequest(key="name", value="Ann Lee", importance=90))
    local_memory.core.put("ns", CorePutRequest(key="diet", value="vegetarian"))
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c1",
            messages=[
                Message(
                    id="m1",
                    speaker="Ann",
                    content="I adopted a grey cat called Miso.",
                    created_at=LONG_NOW - timedelta(days=3),
                ),
                Message(
                    id="m2", speaker="Bo", content="Lovely! How old is Miso?", created_at=LONG_NOW - timedelta(days=3)
                ),
                Message(
                    id="m3",
                    speaker="Ann",
                    content="Two years old, and she hates the vacuum.",
                    created_at=LONG_NOW - timedelta(hours=2),
                ),
            ],
        ),
    )
    res = local_memory.context.assemble(
        "ns", ContextRequest(conversation_id="c1", now=LONG_NOW, user_name="Ann", assistant_name="Bo")
    )
    assert res.context == (
        "Memory of Ann's conversations with Bo.\n"
        "\n"
        "## Core memory\n"
        "- name: Ann Lee\n"
        "- diet: vegetarian\n"
        "\n"
        "## Recent turns\n"
        "[2024-05-29, 3 days ago]\n"
        "Ann: I adopted a grey cat called Miso.\n"
        "Bo: Lovely! How old is Miso?\n"
        "[2024-06-01, 2 hours ago]\n"
        "Ann: Two years old, and she hates the vacuum."
    )
    assert res.query == "Two years old, and she hates the vacuum."  # the latest message by default
    assert res.tokens_used == count_tokens(res.context) <= res.budget_tokens == 2000
    assert [s.name for s in res.sections] == ["core", "instructions", "recent", "relevant", "timeline"]
    # the only chunk holds nothing but the recent turns: neither relevant nor timeline repeats it
    assert [len(s.items) for s in res.sections] == [2, 0, 3, 0, 0]
    # a section's tokens: its heading, date lines and lines, counted line by line (a bound on what it adds)
    recent = res.sections[2]
    assert count_tokens(res.context.split("\n\n")[-1]) + 2 <= recent.tokens_used
    assert sum(i.tokens for i in recent.items) + count_tokens("## Recent turns\n") + 1 == recent.tokens_used


def test_an_undated_memory_follows_the_dated_ones_under_its_own_line(local_memory: Memory) -> None:
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c",
            messages=[
                Message(
                    id="m1",
                    speaker="Ann",
                    content="We land in Lisbon on 3 June.",
                    created_at=LONG_NOW - timedelta(days=2),
                )
            ],
        ),
    )
    local_memory.writer.upsert("ns", [Document(id="tram", text="The tram tour starts at the cathedral on the 4th.")])
    req = ContextRequest(
        conversation_id="c", query="When do we land, and where does the tram tour start?", now=LONG_NOW
    )
    block = local_memory.context.assemble("ns", req.model_copy(update={"budget_tokens": 300})).context
    assert block.endswith(
        "## Recent turns\n[2024-05-30, 2 days ago]\nAnn: We land in Lisbon on 3 June.\n\n"
        "## Relevant memories\n[undated, from document tram]\nThe tram tour starts at the cathedral on the 4th."
    )
    custom = local_memory.context.assemble(
        "ns", req.model_copy(update={"budget_tokens": 300, "memory_template": "* {date}: {text}"})
    ).context
    assert "* undated: The tram tour starts" in custom  # a caller's own template is used as written
    assert "* 2024-05-30: Ann: We land in Lisbon" in custom and "[2024-05-30" not in custom


UNICODE = [
    "Ich würde gern Käsespätzle kochen 🧀🇩🇪 — für 4 Personen, bitte mit Ölpreis-Schätzung.",
    "東京で寿司を食べました。とても美味しかったです！次は大阪に行きたい。",
    "Here is the fix:\n```python\ndef total(xs: list[int]) -> int:\n    return sum(x * 2 for x in xs)  # doubled\n```"
    "\nRun it with `python fix.py` 👩‍💻.",
    "Emoji families 👨‍👩‍👧‍👦 and flags 🇯🇵🇧🇷 must never be split, nor é composed as e\u0301.",
]


@pytest.mark.parametrize("budget", [40, 120, 250, 400, 900, 2500])
def test_the_budget_is_never_exceeded(filled: Memory, budget: int) -> None:
    more = [
        Message(
            id=f"u{k}",
            speaker="Ann" if k % 2 else "Bo",
            content=UNICODE[k % len(UNICODE)] * (1 + k % 3),
            created_at=LONG_T0 + timedelta(days=80, minutes=k),
        )
        for k in range(12)
    ]
    filled.writer.remember("ns", RememberRequest(conversation_id="c2", messages=more))
    for cid, query in (("c1", "Who joins Ann in Kyoto?"), ("c2", "Käsespätzle 寿司 python fix 👩‍💻")):
        for recent in (True, False):
            res = filled.context.assemble(
                "ns",
                ContextRequest(
                    conversation_id=cid, query=query, recent=recent, budget_tokens=budget, neighbours=1, now=LONG_NOW
                ),
            )
            assert res.tokens_used == count_tokens(res.context) <= budget
            assert sum(s.tokens_used for s in res.sections) <= budget
            assert "\ufffd" not in res.context  # no character cut between two tokens
            if budget >= 400 and cid == "c1" and recent:
                assert res.left_out  # the turns are more than the budget: some were left out, and said so


def test_sections_in_priority_order_and_unused_shares_pass_on(filled: Memory) -> None:
    filled.core.put("ns", CorePutRequest(key="home", value="Ann lives in Porto"))
    add_turns(filled, rule_turns())
    # a query some of whose dated lines the other sections do not already show (the timeline shows no line twice)
    res = filled.context.assemble(
        "ns", ContextRequest(conversation_id="c1", query="sourdough baking in Kyoto", budget_tokens=1500, now=LONG_NOW)
    )
    positions = [
        res.context.index(h)
        for h in (
            "## Core memory",
            "## Standing instructions and preferences",
            "## Recent turns",
            "## Relevant memories",
            "## Timeline",
        )
    ]
    assert positions == sorted(positions)
    core, instructions, recent, relevant, timeline = res.sections
    assert core.items and instructions.items and recent.items and relevant.items and timeline.items
    assert instructions.items[0].text == RULE
    # core, instructions and recent took what they needed up to their shares; the memories share the rest
    assert core.tokens_used < core.budget_tokens and instructions.tokens_used < instructions.budget_tokens
    assert recent.tokens_used <= recent.budget_tokens < 0.36 * 1500 and recent.left_out
    frame = count_tokens("Memory of the user's conversations with the assistant.\n\n")
    memories = 1500 - frame - core.tokens_used - instructions.tokens_used - recent.tokens_used
    assert relevant.budget_tokens <= memories and relevant.tokens_used + timeline.budget_tokens == memories
    assert relevant.items[0].score is not None and any("Kyoto" in i.text for i in relevant.items)
    assert all(i.kind == "message" for i in recent.items)
    times = [i.end_time.timestamp() if i.end_time else 0.0 for i in recent.items]
    assert times == sorted(times) and recent.items[-1].id == "d23c"  # newest kept, shown oldest first
    for sec in (relevant, timeline):  # a dated section reads in time order
        starts = [i.start_time.timestamp() if i.start_time else 0.0 for i in sec.items]
        assert starts == sorted(starts)


def test_a_standing_instruction_is_not_dated_again_in_the_timeline(filled: Memory) -> None:
    add_turns(filled, rule_turns())
    res = filled.context.assemble(
        "ns",
        ContextRequest(conversation_id="c1", query="travel times", recent=False, budget_tokens=2000, now=LONG_NOW),
    )
    names = {s.name: s for s in res.sections}
    assert [i.text for i in names["instructions"].items] == [RULE]
    assert names["timeline"].items  # the timeline has lines to show, but not the instruction a second time
    assert res.context.count("travel times in hours") == 1, res.context


def test_the_same_words_said_twice_are_shown_once(filled: Memory) -> None:
    said = "The glaze workshop in Kyoto moved to the old tea house by the river."
    at = [LONG_T0 + timedelta(days=k, hours=5) for k in (2, 9)]
    add_turns(filled, [Message(id=f"again{k}", speaker="Ann", content=said, created_at=t) for k, t in enumerate(at)])
    res = filled.context.assemble(
        "ns",
        ContextRequest(conversation_id="c1", query="glaze workshop", recent=False, budget_tokens=2000, now=LONG_NOW),
    )
    assert res.context.count("old tea house by the river") == 1, res.context


def test_without_recent_turns_the_budget_goes_to_memories(filled: Memory) -> None:
    res = filled.context.assemble(
        "ns",
        ContextRequest(conversation_id="c1", query="pottery in Kyoto", recent=False, budget_tokens=1000, now=LONG_NOW),
    )
    names = {s.name: s for s in res.sections}
    assert not names["recent"].items and not names["core"].items and not names["instructions"].items
    assert names["relevant"].budget_tokens >= 1000 - count_tokens(res.context.split("\n\n")[0]) - 10
    assert names["relevant"].items and names["relevant"].tokens_used > 250


def test_a_small_budget_holds_the_best_memory_and_no_timeline(filled: Memory) -> None:
    for budget in (120, 250):
        res = filled.context.assemble(
            "ns",
            ContextRequest(
                conversation_id="c1", query="Who joins Ann in Kyoto?", recent=False, budget_tokens=budget, now=LONG_NOW
            ),
        )
        relevant, timeline = res.sections[3], res.sections[4]
        assert relevant.items and "Kyoto" in relevant.items[0].text
        assert not timeline.items and "## Timeline" not in res.context  # no room for a useful line of it


def test_templates_and_their_fields(filled: Memory) -> None:
    res = filled.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c1",
            query="violin",
            budget_tokens=600,
            now=LONG_NOW,
            user_name="Ann",
            assistant_name="Bo",
            template="{assistant_name} remembers {user_name}:\n{recent}\n--\n{relevant}",
            memory_template="* {speaker} ({time_ago}, {date}, L{level}): {text}",
            max_memory_chars=40,
        ),
    )
    assert res.context.startswith("Bo remembers Ann:\n* ")
    assert "## " not in res.context and "[20" not in res.context  # no headings, no date lines: the template's own
    first = res.sections[2].items[0]  # the oldest recent turn kept
    assert first.kind == "message" and first.start_time is not None
    assert res.context.splitlines()[1] == (
        f"* {first.speaker} ({time_ago(first.end_time, LONG_NOW)}, {first.start_time:%Y-%m-%d}, L0): {first.text}"
    )  # {text}: who said it
    bodies = [ln.split("): ", 1)[1] for ln in res.context.splitlines() if ln.startswith("* ")]
    assert bodies and all(len(b) <= 40 for b in bodies) and any(b.endswith("…") for b in bodies)
    said = {m.id: f"{m.speaker}: {m.content}" for m in long_conversation()}
    for turn in res.sections[2].items:  # a turn is clipped after a whole word
        head = turn.text.removesuffix("…")
        assert said[turn.id] == head or said[turn.id].startswith(head + " ")
    for field, bad in (
        ("template", "{memories} {secret}"),
        ("memory_template", "{text} {user}"),
        ("template", "{memories"),
    ):
        with pytest.raises(InvalidRequestError) as err:
            filled.context.assemble("ns", ContextRequest.model_validate({"conversation_id": "c1", field: bad}))
        assert err.value.field == field


def test_bad_budgets_are_refused(filled: Memory) -> None:
    for budget in (0, -5, filled.settings.context_max_tokens + 1):
        with pytest.raises(InvalidRequestError) as err:
            filled.context.assemble("ns", ContextRequest(conversation_id="c1", budget_tokens=budget))
        assert err.value.field == "budget_tokens"


def test_a_conversation_not_yet_remembered_is_an_empty_one(filled: Memory) -> None:
    """A chat app's first turn: get context, answer, remember. The new conversation has no turns yet; the core
    memory scoped to it, the namespace's core memory and its memories still count."""
    filled.core.put("ns", CorePutRequest(key="name", value="Ann Lee"))
    filled.core.put("ns", CorePutRequest(key="topic", value="planning Kyoto", conversation_id="new"))
    res = filled.context.assemble(
        "ns", ContextRequest(conversation_id="new", query="Who joins Ann in Kyoto?", budget_tokens=600, now=LONG_NOW)
    )
    core, _, recent, relevant, _ = res.sections
    assert {i.id for i in core.items} == {"name", "topic"} and not recent.items
    assert relevant.items and "Kyoto" in relevant.items[0].text  # the namespace's memories (all_conversations)
    res = filled.context.assemble(
        "ns",
        ContextRequest(conversation_id="new", query="Who joins Ann in Kyoto?", all_conversations=False, now=LONG_NOW),
    )
    assert [len(s.items) for s in res.sections] == [2, 0, 0, 0, 0]  # its own memories: none yet
    other = filled.context.assemble("other", ContextRequest(conversation_id="c1", query="Who joins Ann in Kyoto?"))
    assert all(not s.items for s in other.sections) and "Ann" not in other.context  # another namespace's c1


def test_namespace_wide_context_without_a_conversation(filled: Memory) -> None:
    res = filled.context.assemble(
        "ns", ContextRequest(query="sourdough baking in Lima", budget_tokens=800, now=LONG_NOW)
    )
    assert not res.sections[2].items and res.sections[3].items
    assert filled.context.assemble("other", ContextRequest(query="sourdough baking in Lima")).sections[3].items == []


def test_neighbours_are_the_chunks_around_a_node(filled: Memory) -> None:
    chunks = [n for n in filled.storage.source_nodes("ns", "c1") if n.level == 1]
    before, after = filled.reader.neighbours("ns", chunks[3], 2)
    assert [n.id for n in before] == [c.id for c in chunks[1:3]]
    assert [n.id for n in after] == [c.id for c in chunks[4:6]]
    assert filled.reader.neighbours("ns", chunks[0], 1) == ([], [chunks[1]])
    assert filled.reader.neighbours("other", chunks[3], 1) == ([], [])
    res = filled.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c1",
            query="violin in Lima",
            recent=False,
            timeline=False,
            neighbours=1,
            budget_tokens=2000,
            now=LONG_NOW,
        ),
    )
    assert any(i.why.startswith("neighbour of ") for i in res.sections[3].items)


def test_hybrid_scores_mean_the_same_from_query_to_query(filled: Memory) -> None:
    res = filled.reader.query(
        "ns",
        [
            Query(query="Who joins Ann in Kyoto for pottery?", top_k=3),
            Query(query="quarterly tax filing deadlines for corporations", top_k=3),
        ],
    )
    related, unrelated = ([r.score for r in q.results] for q in res.results)
    assert all(0 <= s <= 1 for s in related + unrelated)
    assert related == sorted(related, reverse=True)
    assert related[0] > 0.3 > 0.15 > unrelated[0]  # the top hit of an unrelated query is no longer 1.0
    ctx = filled.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c1", recent=False, timeline=False, query="quarterly tax filing deadlines for corporations"
        ),
    )
    assert ctx.sections[3].items == []  # nothing above the floor: nothing included just to fill the budget


# Core memory (budget, overflow, expiry, scopes) is tested on every provider: test_contract_core.py.
