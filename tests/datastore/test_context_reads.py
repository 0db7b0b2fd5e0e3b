"""A context block that reads right (issue 25, item 4), on the real SQLite store, MiniLM embedder and extractive
summariser: each line under the day it was said, another conversation named on its date line, no line that is
only an elision mark, `[undated]` above memories with no time, a message without a time dated when it came in,
no line in two sections, and a preference said to be one."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

from datastore.context.questions import asking_part, asks_overview, asks_what_user_said, overview_topic
from datastore.context.render import Section
from datastore.memory import Memory
from models.api import Document, DocumentMetadata, Message, RememberRequest
from models.context import ContextItem, ContextRequest
from services.excerpts import ELISION
from tests.support.synthetic import LONG_NOW, LONG_T0, long_conversation

DATE_LINE = re.compile(r"^\[(\d{4}-\d{2}-\d{2})[^\]]*\]$")


def _dated_lines(block: str) -> list[tuple[str | None, str]]:
    """(the date of the date line above it, line) for every line of the block's memory sections."""
    out: list[tuple[str | None, str]] = []
    day: str | None = None
    for line in block.split("\n"):
        if line.startswith("## "):
            day = None
            continue
        m = DATE_LINE.match(line)
        if m:
            day = m.group(1)
        elif line.strip():
            out.append((day, line))
    return out


def test_a_chunk_said_over_several_days_shows_each_line_under_its_own_date(local_memory: Memory) -> None:
    # three days a chunk: a chunk of one session (named by the caller: chunks never span two) spans days (one span
    # date line before)
    local_memory.writer.remember(
        "ns", RememberRequest(conversation_id="c1", session_id="diary", messages=long_conversation())
    )
    said: dict[str, set[str]] = {}  # the days each text was said on (Bo asks the same on several days)
    for m in long_conversation():
        assert m.created_at is not None
        said.setdefault(m.content, set()).add(f"{m.created_at:%Y-%m-%d}")
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c1",
            query="Which cousin joined the trip to Oslo, and the kayaking?",
            now=LONG_NOW,
            recent=False,
            budget_tokens=800,
        ),
    )
    assert not [ln for ln in res.context.split("\n") if DATE_LINE.match(ln) and " to " in ln]
    checked = 0
    for day, line in _dated_lines(res.context):
        content = line.split(": ", 1)[-1]
        if content in said:
            assert day in said[content], (day, line)
            checked += 1
    assert checked >= 3
    spans = [i for s in res.sections for i in s.items if i.kind == "chunk"]
    assert any(i.start_time and i.end_time and i.start_time.date() != i.end_time.date() for i in spans)


def test_a_memory_from_another_conversation_names_it_on_its_date_line(local_memory: Memory) -> None:
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="trip",
            title="Trip to Lisbon",
            messages=[
                Message(id="t1", speaker="Ann", content="We land in Lisbon on 3 June.", created_at=LONG_T0),
                Message(id="t2", speaker="Bo", content="I booked the tram tour for you.", created_at=LONG_T0),
            ],
        ),
    )
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="pets",
            messages=[Message(id="p1", speaker="Ann", content="My cat Miso hates the vacuum.", created_at=LONG_T0)],
        ),
    )
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="today",
            messages=[Message(id="n1", speaker="Ann", content="Hello again!", created_at=LONG_NOW)],
        ),
    )
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="today", query="When do we land in Lisbon, and what about Miso the cat?", now=LONG_NOW
        ),
    )
    lines = res.context.split("\n")
    lisbon = lines.index("Ann: We land in Lisbon on 3 June.")
    assert lines[lisbon - 1] == "[2024-03-01, 3 months ago, from “Trip to Lisbon”]"
    miso = lines.index("Ann: My cat Miso hates the vacuum.")
    assert lines[miso - 1] == "[2024-03-01, 3 months ago, from conversation pets]"
    # the block's own conversation is not named
    assert "[2024-06-01, just now]" in lines


def test_no_line_is_only_an_elision_mark(local_memory: Memory) -> None:
    answer = "\n".join(
        [
            "The harbour crane was repaired by Ines in 1901 for twelve florins.",
            "The copper kettle was painted by Tomasz in 1902, a detail noted in the ledger of the guild.",
            "The night market was measured by Keiko in 1903 with a rope of forty metres.",
            "An old lighthouse was photographed by Baraka in 1904 from the northern pier.",
            "The glass atrium was sold by Lucia in 1905 to a merchant from the coast.",
            "A rope bridge was inspected by Anders in 1906 after the spring floods.",
            "The spice warehouse was moved by Mei in 1907 to the eastern quay.",
        ]
    )
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c",
            messages=[
                Message(id="q", speaker="Ann", content="Tell me the history of the harbour.", created_at=LONG_T0),
                Message(id="a", speaker="assistant", content=answer, created_at=LONG_T0 + timedelta(minutes=1)),
            ],
        ),
    )
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c",
            query="Who repaired the harbour crane, and who moved the spice warehouse?",
            now=LONG_NOW,
            recent=False,
            budget_tokens=120,
        ),
    )
    shown = [i.text for s in res.sections for i in s.items]
    assert any("Ines" in t and "Mei" in t for t in shown)  # two lines far apart in one excerpt
    assert ELISION in res.context  # text was left out between them ...
    assert not [ln for ln in res.context.split("\n") if ln.strip() == ELISION]  # ... and no line says only that


def test_undated_memories_stand_under_undated(local_memory: Memory) -> None:
    local_memory.writer.upsert("ns", [Document(id="guide", text="The ferry to Cacilhas leaves every twenty minutes.")])
    local_memory.writer.upsert(
        "ns",
        [
            Document(
                id="menu",
                text="The ferry café serves grilled sardines on Fridays.",
                metadata=DocumentMetadata(created_at=LONG_T0),
            )
        ],
    )
    res = local_memory.context.assemble(
        "ns", ContextRequest(query="How often does the ferry to Cacilhas leave, and what does its café serve?")
    )
    lines = res.context.split("\n")
    ferry = next(k for k, ln in enumerate(lines) if "every twenty minutes" in ln)
    assert lines[ferry - 1] == "[undated]"  # at the top of its section too
    assert any(DATE_LINE.match(ln) for ln in lines)  # the dated document under its date


def test_a_message_sent_without_a_time_takes_the_time_it_was_received(local_memory: Memory) -> None:
    before = datetime.now(UTC)
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c", messages=[Message(id="m1", speaker="Ann", content="Book the tram tour, please.")]
        ),
    )
    after = datetime.now(UTC)
    (stored,) = local_memory.storage.messages("ns", "c")
    assert stored.created_at is not None and before <= stored.created_at <= after
    block = local_memory.context.assemble(
        "ns", ContextRequest(conversation_id="c", now=after + timedelta(hours=2))
    ).context
    assert f"[{stored.created_at:%Y-%m-%d}, 2 hours ago]\nAnn: Book the tram tour, please." in block
    assert "[undated]" not in block


def test_a_line_is_never_in_two_sections(local_memory: Memory) -> None:
    # short lines (under 30 characters) are what a summary keeps of short turns and a chunk shows whole
    msgs: list[Message] = []
    for d in range(24):
        when = LONG_T0 + timedelta(days=d)
        msgs += [
            Message(id=f"{d}a", speaker="Ann", content=f"I visited pier {d}.", created_at=when),
            Message(
                id=f"{d}b",
                speaker="Bo",
                content=f"Lovely, was pier {d} busy with boats and gulls and fishermen?",
                created_at=when + timedelta(minutes=1),
            ),
            Message(id=f"{d}c", speaker="Ann", content=f"Quiet at pier {d}.", created_at=when + timedelta(minutes=2)),
        ]
    local_memory.writer.remember("ns", RememberRequest(conversation_id="c", messages=msgs))
    for budget in (600, 1200, 2000):
        res = local_memory.context.assemble(
            "ns",
            ContextRequest(
                conversation_id="c",
                query="Which piers did I visit, in order?",
                now=LONG_NOW,
                recent=False,
                budget_tokens=budget,
            ),
        )
        where: dict[str, set[str]] = {}
        for s in res.sections:
            for item in s.items:
                for line in item.text.split("\n"):
                    if line.strip(ELISION + " ").strip():
                        where.setdefault(line.strip(), set()).add(s.name)
        twice = {ln: names for ln, names in where.items() if len(names) > 1}
        assert not twice, (budget, twice)
        assert len(where) > 10


def test_a_preference_is_shown_as_a_preference(local_memory: Memory) -> None:
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c",
            messages=[
                Message(id="m1", speaker="Ann", content="I prefer Bootstrap over Foundation.", created_at=LONG_T0),
                Message(
                    id="m2",
                    speaker="Ann",
                    content="From now on, always answer in French.",
                    created_at=LONG_T0 + timedelta(minutes=1),
                ),
            ],
        ),
    )
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c", query="Which CSS framework should I use for the page?", now=LONG_NOW, recent=False
        ),
    )
    kinds = {i.text: i.kind for i in res.sections[1].items}
    assert kinds == {
        "I prefer Bootstrap over Foundation.": "preference",
        "From now on, always answer in French.": "instruction",
    }


def test_a_question_about_the_course_of_things_gets_a_dated_list_of_lines(local_memory: Memory) -> None:
    local_memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=long_conversation()))
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c1",
            query="In what order did I bring up my trips to Oslo across our conversations?",
            now=LONG_NOW,
            recent=False,
            budget_tokens=600,
        ),
    )
    timeline = res.sections[4]
    lines = [i for i in timeline.items if i.kind == "line"]
    assert len(lines) >= 4
    times = [i.start_time for i in lines]
    assert times == sorted(t for t in times if t is not None)  # oldest first
    assert all(i.speaker in ("Ann", "Bo") and i.text.startswith(f"{i.speaker}: ") for i in lines)
    oslo = [i for s in res.sections for i in s.items if "Oslo" in i.text]
    assert len(oslo) >= 3  # days 2, 12 and 22
    for day, line in _dated_lines(res.context.split("## Timeline")[1]):
        days = {f"{i.start_time:%Y-%m-%d}" for i in lines if i.text == line and i.start_time is not None}
        assert day in days, (day, line)  # the same words said on several days: each under its own


def _trips_chat() -> list[Message]:
    """A short chat (no summaries yet) of a user's trips, with greetings and "Yes please." around what they say."""
    t0 = datetime(2024, 1, 10, 10, 0, tzinfo=UTC)
    said = [
        ("user", "Hi! I just got back from a week of hiking in Norway, the fjords were amazing."),
        ("assistant", "Welcome back! Norway sounds wonderful. What was the highlight?"),
        ("user", "Preikestolen at sunrise. Next month I am going skiing in the Alps, in Chamonix."),
        ("assistant", "Chamonix is a great choice for skiing. Do you want tips on the best runs?"),
        ("user", "Yes please. Also I booked a weekend in Rome for my birthday in April."),
    ]
    return [
        Message(id=f"t{k}", speaker=who, created_at=t0 + timedelta(minutes=k), content=text)
        for k, (who, text) in enumerate(said)
    ]


def test_a_dated_list_of_a_short_chat_shows_each_message_once_and_only_the_users(local_memory: Memory) -> None:
    # a new user's block repeated every message (as its line, then inside its chunk), showed the assistant's
    # lines for "did I bring up", and lost the plans said after a short first sentence
    local_memory.writer.remember("ns", RememberRequest(conversation_id="travel", messages=_trips_chat()))
    req = ContextRequest(
        conversation_id="travel",
        query="In what order did I bring up my trips?",
        now=datetime(2024, 2, 1, tzinfo=UTC),
        recent=False,
        budget_tokens=1000,
    )
    timeline = local_memory.context.assemble("ns", req).context.split("## Timeline")[1]
    shown = [line for _, line in _dated_lines(timeline)]
    assert shown == [
        "user: I just got back from a week of hiking in Norway, the fjords were amazing.",
        "user: Preikestolen at sunrise. Next month I am going skiing in the Alps, in Chamonix.",
        "user: Also I booked a weekend in Rome for my birthday in April.",
    ]
    req = req.model_copy(update={"query": "Summarize how my trip planning went"})
    memories = "## " + local_memory.context.assemble("ns", req).context.split("\n## ", 1)[1]  # without the frame
    said = [line for _, line in _dated_lines(memories)]
    assert "assistant: Chamonix is a great choice for skiing. Do you want tips on the best runs?" in said
    assert len(said) == len({line.split(": ", 1)[1].removeprefix("Hi! ") for line in said})  # no message twice


def test_a_question_about_the_course_of_things_is_ranked_for_its_topic() -> None:
    q = (
        "Can you walk me through the order in which I brought up different aspects of using AI in our hiring "
        "process across our conversations, in order?"
    )
    assert asks_overview(q) and asks_what_user_said(q)
    topic = overview_topic(q)
    assert "aspects of using AI in our hiring process" in topic
    assert not any(w in topic.lower() for w in ("order", "walk me", "conversations", "brought up", "different"))
    assert asks_overview("How many different book series have I mentioned?")
    assert asks_overview("What did we decide across our conversations about the budget?")
    assert not asks_what_user_said("Summarise how the ledgers went") and not asks_overview("Where is Miso?")
    assert overview_topic("Give me a summary") == "Give me a summary"  # nothing left: the question itself


def test_order_and_progress_ask_about_the_course_of_things_only_in_those_senses() -> None:
    # a fact question that says "order" or "progress" keeps its memories first (no dated list of lines)
    for fact in (
        "What did I order for dinner on Friday?",
        "Has my order of garden chairs shipped yet?",
        "How can I help my son's progress at school?",
        "What did the physio say about Dana's progress?",
    ):
        assert not asks_overview(fact), fact
    for course in (
        "In which order did we visit the three museums?",
        "Put the trips in chronological order.",
        "How is my piano practice progressing?",
        "What progress have we made on the roof?",
    ):
        assert asks_overview(course), course


def _marathon_chat() -> list[Message]:
    """A user who plans a movie marathon (and follows it up a minute later with a line that names no part of
    the topic), then speaks of other films and of other things for weeks."""
    t0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    said = [
        "I'm planning a family movie marathon for the kids on May 11 and need a schedule for the day.",
        "I think we'll start with Encanto at 2 PM, then take a snack break.",
    ]
    others = [
        "I watched a documentary about whales last night and loved the narration.",
        "My favourite film critic reviewed the new thriller and hated the ending.",
        "The cinema downtown is closing for renovation until the autumn.",
        "I bought a projector screen for the garden parties we host in summer.",
        "My brother recommended a film podcast about directors from the seventies.",
        "We repainted the living room in a pale green colour over the weekend.",
        "The tax office sent a letter about my quarterly payments for the studio.",
        "I started learning the cello with a teacher who lives two streets away.",
        "Our neighbour's dog barks at the postman every single morning now.",
        "I booked tickets for the film festival opening night in September.",
        "My sister's wedding will be held at a vineyard near the coast in June.",
        "I signed up for a streaming service that only shows classic westerns.",
    ]
    out = [
        Message(id=f"m{k}", speaker="user", created_at=t0 + timedelta(minutes=k), content=text)
        for k, text in enumerate(said)
    ]
    out += [
        Message(id=f"o{k}", speaker="user", created_at=t0 + timedelta(days=2 + k), content=text)
        for k, text in enumerate(others)
    ]
    return out


def test_a_dated_list_keeps_a_follow_up_with_the_message_it_follows(local_memory: Memory) -> None:
    # the follow-up names neither the marathon nor the plan: ranked on its own, lines about other films come
    # first; its thread neighbour (said a minute before) carries it (BlockPolicy.thread_weight)
    local_memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=_marathon_chat()))
    req = ContextRequest(
        conversation_id="c1",
        query="In what order did I bring up my movie marathon plans across our conversations?",
        now=datetime(2024, 6, 1, tzinfo=UTC),
        recent=False,
        budget_tokens=160,
    )
    follow_up = "user: I think we'll start with Encanto at 2 PM, then take a snack break."
    threaded = [i.text for i in local_memory.context.assemble("ns", req).sections[4].items]
    assert follow_up in threaded
    local_memory.context.policy = replace(local_memory.context.policy, thread_weight=0.0)  # each line on its own
    alone = [i.text for i in local_memory.context.assemble("ns", req).sections[4].items]
    assert follow_up not in alone and alone


def test_course_words_are_left_out_of_the_topic_in_their_common_forms() -> None:
    for q, topic in [
        ("Can you summarize how my reading goals have developed throughout our conversations?", "reading goals"),
        ("Give me a summary of my household budget over the past few months", "my household budget"),
        ("List the order in which I mentioned my trips to Norway during our chats", "my trips to Norway"),
    ]:
        got = overview_topic(q)
        assert topic in got and not any(w in got.lower() for w in ("conversations", "chats", "months", "summar"))
    assert asks_overview("How many children did I mention receiving gifts from me?")
    assert asks_overview("Considering my choices across all sessions, what should I read next?")
    assert not asks_overview("How many children do I have?")


def _garden_chat() -> list[Message]:
    """A user who brings up their garden plans three times over weeks, and between them talks of work: of short
    reports with dated points, of keeping things brief."""
    t0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    said = [
        "I want to turn the back garden into a vegetable patch this spring, starting with tomatoes.",
        "My manager wants every status report kept short: just the main points, each with its date.",
        "I'm reading a book on habits and keeping a journal of what I read each evening.",
        "For the vegetable patch I ordered raised beds and a compost bin from the garden centre.",
        "The team agreed to keep meeting notes brief and to list only the dated action points.",
        "I planted the tomato seedlings in the raised beds and put a net over them against the birds.",
        "Please keep the quarterly summary short, my director only reads the first few points.",
    ]
    return [
        Message(id=f"g{k}", speaker="user", created_at=t0 + timedelta(days=7 * k), content=text)
        for k, text in enumerate(said)
    ]


def test_what_a_question_says_about_answering_does_not_rank_its_dated_list(local_memory: Memory) -> None:
    # a question about the course of things, then how to answer it: the lines are ranked for what it asks about
    # (the garden), not for the words of the answer's form (short, main points, dates) that the work lines share;
    # ranked for both, the status report and meeting notes lines took the tomato seedlings' place
    local_memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=_garden_chat()))
    asked = "In what order did I bring up my garden plans?"
    query = f"{asked} Keep it short: just the main points with their dates."
    req = ContextRequest(
        conversation_id="c1",
        query=query,
        now=datetime(2024, 6, 1, tzinfo=UTC),
        recent=False,
        relevant=False,
        budget_tokens=160,
    )
    lines = [i.text for s in local_memory.context.assemble("ns", req).sections for i in s.items if i.kind == "line"]
    garden = [m.content for m in _garden_chat() if any(w in m.content for w in ("garden", "patch", "tomato"))]
    assert all(f"user: {g}" in lines for g in garden), lines
    assert not any("status report" in t or "meeting notes" in t for t in lines), lines
    assert overview_topic(query) == overview_topic(asked)  # ranked for the question alone


def test_the_part_that_asks_ends_with_the_last_asking_sentence() -> None:
    q = "I've been redoing the garden. In what order did I plant things? Keep it short."
    assert asking_part(q) == "I've been redoing the garden. In what order did I plant things?"  # context kept
    assert asking_part("Summarise my reading goals. Use bullet points.") == "Summarise my reading goals."
    assert asking_part("What did I say? Was it about Rome?") == "What did I say? Was it about Rome?"
    assert asking_part("Tell me about Miso. Be brief.") == "Tell me about Miso. Be brief."  # nothing asks: whole


def test_a_question_naming_a_person_draws_from_the_conversations_they_speak_in(local_memory: Memory) -> None:
    # one namespace, two chats between people, a question without a conversation (as a GPT asks): "Jon" and "John"
    # embed alike and John's chat is about books, but only Jon's holds what Jon reads
    def chat(cid: str, turns: list[tuple[str, str]]) -> None:
        msgs = [
            Message(id=f"{cid}{k}", speaker=who, content=text, created_at=LONG_T0 + timedelta(minutes=k))
            for k, (who, text) in enumerate(turns)
        ]
        local_memory.writer.remember("ns", RememberRequest(conversation_id=cid, messages=msgs))

    chat(
        "jon-gina",
        [
            ("Gina", "Are you reading any good book to unwind after the studio?"),
            ("Jon", "I'm reading The Alchemist at night, a book about following your dreams."),
        ],
    )
    chat(
        "john-maria",
        [
            ("Maria", "What book are you reading these days, John?"),
            ("John", "A thriller my sister lent me, I'm reading it on the train."),
            ("Maria", "I love reading books about history, and my book club meets on Fridays."),
            ("John", "Reading a good book before bed is the best, I finish one a week."),
        ],
    )
    res = local_memory.context.assemble(
        "ns", ContextRequest(query="What book is Jon reading?", now=LONG_NOW, recent=False, budget_tokens=300)
    )
    memories = [i for s in res.sections if s.name in ("relevant", "timeline") for i in s.items]
    assert "The Alchemist" in res.context
    assert memories and {i.source_id for i in memories} == {"jon-gina"}


def test_a_date_line_names_the_day_of_its_times_offset_even_for_one_instant() -> None:
    # 23:30 at UTC-5 and 04:30 UTC the next day are one instant (equal, same hash) but two days: the date line
    # is the day of the time as given, each time
    now = datetime(2024, 3, 20, tzinfo=UTC)
    section = Section("relevant", 500, now)
    utc_time = datetime(2024, 3, 16, 4, 30, tzinfo=UTC)
    local = utc_time.astimezone(timezone(timedelta(hours=-5)))
    item = ContextItem(id="m", kind="message", level=0, text="x", why="", tokens=0)
    assert section.day_of(item, local, local) == "[2024-03-15, 3 days ago]"
    assert section.day_of(item, utc_time, utc_time) == "[2024-03-16, 3 days ago]"
    assert section.day_of(item, local, local) == "[2024-03-15, 3 days ago]"
