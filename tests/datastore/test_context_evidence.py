"""What the context block's memory sections choose, on the real SQLite store, MiniLM embedder and extractive
summariser: no line shown twice, excerpts of long messages, whole starts, several sessions, small stores, the
standing instructions and the timeline. The block's frame (sections, rendering, budget): test_context.py."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta

import pytest

from datastore.context.diversify import diversified
from datastore.context.evidence import Shown, Superseded
from datastore.context.questions import asks_overview
from datastore.context.render import SUPERSEDED, clip
from datastore.memory import Memory
from models.api import Message, RememberRequest
from models.context import ContextRequest, ContextResponse
from models.memory import MemoryNode, StoredMessage
from services.chunking import SpanSentence, span_sentences
from services.excerpts import ELISION
from services.lines import MAX_LINE_TOKENS
from services.tokens import count_tokens
from tests.support.synthetic import DATABASE_ANSWER, LONG_NOW, LONG_T0, conversation, long_conversation, turns

SUBJECTS = [
    "the harbour crane",
    "a copper kettle",
    "the night market",
    "an old lighthouse",
    "the glass atrium",
    "a rope bridge",
    "the spice warehouse",
    "a stone aqueduct",
    "the tram depot",
    "a salt marsh",
]
VERBS = [
    "was repaired by",
    "was painted by",
    "was measured by",
    "was photographed by",
    "was sold by",
    "was inspected by",
    "was moved by",
    "was sketched by",
]
PEOPLE = ["Ines", "Tomasz", "Keiko", "Baraka", "Lucia", "Anders", "Mei", "Omar", "Priya", "Jonas", "Sofia"]


def lecture(k: int, sentences: int = 14) -> str:
    """A long assistant answer (about 20 tokens a sentence), every sentence unique in the chat."""
    out = []
    for j in range(sentences):
        n = k * sentences + j
        out.append(
            f"In {1900 + n} {SUBJECTS[n % 10]} {VERBS[(n // 10) % 8]} {PEOPLE[n % 11]} "
            f"for {n + 3} florins, a detail noted in ledger {n}."
        )
    return " ".join(out)


def long_messages(n: int = 10, start: datetime = LONG_T0) -> list[Message]:
    """A chat of short user questions and long (~280 token) assistant answers: chunks start inside messages."""
    out = []
    for k in range(n):
        when = start + timedelta(days=k)
        out += [
            Message(
                id=f"q{k}",
                role="user",
                created_at=when,
                content=f"Tell me about the ledgers of year group {k}, please.",
            ),
            Message(id=f"a{k}", role="assistant", created_at=when + timedelta(minutes=1), content=lecture(k)),
        ]
    return out


def sentences_of(text: str) -> list[str]:
    """The sentences of 40+ characters of a block's text, speaker prefixes and elision marks taken off."""
    out = []
    for ln in text.splitlines():
        ln = re.sub(r"^(- )?[\w ]{1,40}: ", "", ln.strip())
        for piece in re.split(rf"(?<=[.!?])\s+|\s*{ELISION}\s*", ln):
            if len(piece.strip()) >= 40:
                out.append(piece.strip())
    return out


SAID = Counter(
    s for m in [*long_conversation(), *long_messages()] for s in sentences_of(f"{m.speaker or 'x'}: {m.content}")
)
"""How many times each sentence of the `mixed` conversations was said (a line said on two days is two)."""


def repeated(res: ContextResponse) -> list[str]:
    """The sentences the block shows more often than they were said (SAID): twice within its memories, or a
    recent turn's again in a memory. A sentence is a stored sentence (by id): the same words said on another
    day are another sentence, shown where it is relevant."""
    shown = [s for sec in res.sections for i in sec.items for s in sentences_of(i.text)]
    return [s for s, n in Counter(shown).items() if n > max(SAID[s], 1)]  # a piece clipped short: once


@pytest.fixture
def mixed(local_memory: Memory) -> Memory:
    """Two conversations: Ann's short turns (where lines repeat word for word on different days) and a chat of
    long assistant answers."""
    local_memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=long_conversation()))
    local_memory.writer.remember("ns", RememberRequest(conversation_id="c2", messages=long_messages()))
    return local_memory


@pytest.mark.parametrize("budget", [250, 700, 2000, 4000])
def test_no_line_is_shown_twice(mixed: Memory, budget: int) -> None:
    """Not the overlap of two chunks, not a recent turn again in a memory: each stored sentence once."""
    asks = [
        ("c1", "Who joins Ann in Lisbon for pottery?"),
        ("c1", "In what order did Ann plan her trips?"),
        ("c2", "What did Keiko sketch, and for how many florins?"),
        ("c2", "Summarise the ledgers so far"),
    ]
    for cid, query in asks:
        for recent in (True, False):
            res = mixed.context.assemble(
                "ns",
                ContextRequest(
                    conversation_id=cid, query=query, budget_tokens=budget, recent=recent, neighbours=1, now=LONG_NOW
                ),
            )
            assert not repeated(res), (cid, query, recent, repeated(res))
            assert sum(s.tokens_used for s in res.sections) and res.tokens_used <= budget


def test_words_said_again_in_another_message_count_as_shown() -> None:
    """`Shown.said_before`: a sentence whose words (whitespace folded) a memory already shows from another message
    is shown; from the same message, or with other words, it is not."""

    def said(message_id: str, index: int, text: str) -> SpanSentence:
        return SpanSentence(f"{message_id}:{index}", message_id, index, text, "Bo", None, True, count_tokens(text))

    shown = Shown()
    shown.say([said("m1", 0, "How did the  pottery go?"), said("m1", 1, "Who joins you?")])
    assert shown.said_before(said("m2", 3, "How did the pottery\ngo?"))
    assert not shown.said_before(said("m1", 0, "How did the pottery go?"))  # the same message: not again
    assert not shown.said_before(said("m2", 0, "How did the pottery go today?"))
    shown.say([said("m3", 0, "Who joins you?")])
    assert shown.said_before(said("m1", 1, "Who joins you?"))  # m3 shows it too
    assert set(shown.said) == {"m1:0", "m1:1", "m3:0"}


def test_repeated_short_turns_show_once_each(mixed: Memory) -> None:
    """Bo says "How did the pottery go, and who joins you in Lisbon?" on days 0, 10 and 20: three turns, three
    stored sentences; the block shows each at most once (the overlap of two chunks is not shown twice), under its
    own day, and each of Ann's own lines (they differ by day) stays."""
    res = mixed.context.assemble(
        "ns",
        ContextRequest(conversation_id="c1", query="pottery in Lisbon", recent=False, budget_tokens=2000, now=LONG_NOW),
    )
    said = res.context.count("How did the pottery go, and who joins you in Lisbon?")
    assert 1 <= said <= 3
    shown = [i for sec in res.sections for i in sec.items]
    assert len({i.id for i in shown}) == len(shown)
    assert all(f"My cousin number {d} joins me" in res.context for d in (0, 10))


def test_a_long_message_is_cut_to_its_sentences_closest_to_the_query(mixed: Memory) -> None:
    target = next(s + "." for s in lecture(4).split(". ") if s.startswith("In 1961 "))
    assert target == "In 1961 a copper kettle was moved by Mei for 64 florins, a detail noted in ledger 61."
    res = mixed.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c2",
            recent=False,
            timeline=False,
            query="Who moved the copper kettle in 1961?",
            budget_tokens=150,
            now=LONG_NOW,
        ),
    )
    relevant = res.sections[3]
    assert relevant.items and target in relevant.items[0].text  # the sentence that answers, whole
    text = relevant.items[0].text
    assert text.startswith("assistant: ") and ELISION in text  # the speaker kept, what was left out marked
    assert len(text) < len(lecture(4)) // 3  # an excerpt, not the message
    for piece in re.split(rf"\s*{ELISION}\s*", text.removeprefix("assistant: ")):
        assert not piece or piece in lecture(4)  # every piece word for word from the message


def test_no_memory_starts_or_ends_inside_a_word(mixed: Memory) -> None:
    """Chunks are 200-token windows: most start and end inside a long answer. Each piece a block shows is the
    message's own text from the start of a sentence to the end of one."""
    answers = {m.id: m.content for m in long_messages()}
    for query, budget in (
        ("Which ledgers mention Priya and the tram depot?", 2000),
        ("What did Omar measure in the salt marsh?", 500),
        ("florins paid for the rope bridge", 1000),
    ):
        res = mixed.context.assemble(
            "ns", ContextRequest(conversation_id="c2", query=query, recent=False, budget_tokens=budget, now=LONG_NOW)
        )
        shown = [i for s in res.sections[3:] for i in s.items]
        assert shown
        for item in shown:
            for ln in item.text.splitlines():
                body = ln.split(": ", 1)[1] if ln.startswith(("assistant: ", "user: ")) else ln
                for piece in re.split(rf"\s*{ELISION}\s*", body):
                    if not piece:
                        continue
                    assert piece[0].isupper(), (query, piece)  # starts a sentence
                    assert piece.endswith((".", "?", "!")), (query, piece)  # ends one
                    assert any(piece in a for a in answers.values()) or piece.startswith("Tell me"), piece


def test_hits_are_drawn_from_several_sessions() -> None:
    """Past SESSION_FREE hits of one session, each further one counts SESSION_DECAY less per hit of it already
    placed: another session's hit comes before the 5th neighbouring chunk of the first."""

    def hit(source: str, session: str, k: int, score: float) -> tuple[MemoryNode, float]:
        return MemoryNode(
            id=f"{source}-{session}-{k}", source_id=source, level=1, position=k, text="t", session_ids=[session]
        ), score

    busy = [hit("c1", "s1", k, 0.30 - 0.01 * k) for k in range(8)]
    others = [hit("c1", "s2", 0, 0.2), hit("c2", "s1", 0, 0.19)]  # another session; another conversation
    order = [n.id for n, _ in diversified(busy + others)]
    assert order[:4] == [n.id for n, _ in busy[:4]]  # a session's first hits keep their places
    assert order[4:6] == ["c1-s2-0", "c2-s1-0"] and order[6:] == [n.id for n, _ in busy[4:]]
    assert [n.id for n, _ in diversified(busy)] == [n.id for n, _ in busy]  # one session: the order as ranked
    assert diversified([]) == []


def test_relevant_memories_come_from_several_conversations(local_memory: Memory) -> None:
    """One conversation talks about the garden at length, two others in passing: the block holds all three."""
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c1", messages=conversation(("Ann", "Bo"), 60, topics=["garden"], start=LONG_T0, prefix="g")
        ),
    )
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c9",
            messages=conversation(("Ann", "Bo"), 60, topics=["music", "work", "travel"], start=LONG_T0, prefix="f"),
        ),
    )
    for k in range(2):
        when = LONG_T0 + timedelta(days=10 * (k + 1))
        local_memory.writer.remember(
            "ns",
            RememberRequest(
                conversation_id=f"c{k + 2}",
                messages=[
                    Message(
                        id=f"x{k}a",
                        speaker="Ann",
                        created_at=when,
                        content=f"The compost heap needs turning before the tomatoes ripen, {k}.",
                    ),
                    Message(
                        id=f"x{k}b",
                        speaker="Bo",
                        created_at=when,
                        content=f"And the tomatoes on the south fence need the compost too, {k}.",
                    ),
                ],
            ),
        )
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c1",
            recent=False,
            timeline=False,
            query="compost heap and tomatoes on the south fence",
            budget_tokens=1000,
            now=LONG_NOW,
        ),
    )
    assert {"c1", "c2", "c3"} <= {i.source_id for i in res.sections[3].items}


def test_a_small_store_finds_what_its_words_hold_in_another_form(local_memory: Memory) -> None:
    """ "allergic" does not reach "allergy" by BM25 here; the best hit is clearly related (dense floor), and a
    `min_score` above every hit does not empty the section when one hit is clearly the best."""
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="s",
            messages=[
                Message(
                    id="a1",
                    speaker="Mia",
                    content="Theo has a severe peanut allergy, so we carry an EpiPen everywhere.",
                    created_at=LONG_NOW - timedelta(days=9),
                ),
                Message(
                    id="a2",
                    speaker="Jon",
                    content="Good to know. Does he like the new school?",
                    created_at=LONG_NOW - timedelta(days=9),
                ),
                Message(
                    id="a3",
                    speaker="Mia",
                    content="He loves it, and his teacher plays the guitar.",
                    created_at=LONG_NOW - timedelta(days=8),
                ),
            ],
        ),
    )
    for min_score in (None, 0.9):
        res = local_memory.context.assemble(
            "ns",
            ContextRequest(
                conversation_id="s", query="What is Theo allergic to?", recent=False, min_score=min_score, now=LONG_NOW
            ),
        )
        assert "peanut allergy" in res.context, min_score
        assert (res.sections[3].items[0].score or 0) < 0.9  # below the floor, kept as clearly related
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="s",
            recent=False,
            min_score=0.9,
            now=LONG_NOW,
            query="quarterly corporate tax filing deadlines",
        ),
    )
    assert not res.sections[3].items  # unrelated: no memory is called relevant to fill the budget


def test_clip_never_splits_a_character() -> None:
    family = "👨\u200d👩\u200d👧\u200d👦"
    for text in (f"aa {family}{family}{family} tail", "e\u0301" * 30, "🇯🇵🇧🇷🇫🇷🇩🇪🇮🇹", "語" * 50):
        for n in range(3, len(text)):
            out = clip(text, n)
            assert len(out) <= n
            head = out.removesuffix(ELISION)
            assert text.startswith(head)
            rest = text[len(head) :]
            assert not rest or not (rest[0] == "\u200d" or rest[0] == "\u0301"), (text, n, out)
    assert clip("one two three four", 12) == "one two…" and clip("short", 10) == "short"


# ------------------------------------------------------------------------------------ standing instructions
def instruction_chat(prefix: str, rules: dict[int, str], n: int = 30) -> list[Message]:
    chat = conversation(("user", "assistant"), n, start=LONG_T0, prefix=prefix)
    for i, text in rules.items():
        chat[i] = chat[i].model_copy(update={"content": text})
    return chat


@pytest.fixture
def ruled(local_memory: Memory) -> Memory:
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c1",
            messages=instruction_chat(
                "c",
                {
                    4: "Always include version numbers when I ask about libraries.",
                    10: "I prefer Bootstrap over Foundation for CSS.",
                    20: "Actually I prefer Tailwind over Bootstrap for CSS now.",
                },
            ),
        ),
    )
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c2", messages=instruction_chat("o", {2: "From now on answer in French."}, n=6)
        ),
    )
    return local_memory


def test_standing_instructions_have_their_own_section(ruled: Memory) -> None:
    res = ruled.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c1",
            recent=False,
            now=LONG_NOW,
            budget_tokens=800,
            query="Which CSS framework should I use for the landing page?",
        ),
    )
    section = res.sections[1]
    assert [i.text for i in section.items] == [
        "Actually I prefer Tailwind over Bootstrap for CSS now.",  # the closest to the query first
        "From now on answer in French.",
        "Always include version numbers when I ask about libraries.",
    ]
    assert "## Standing instructions and preferences\n- Actually I prefer Tailwind" in res.context
    assert all("Foundation" not in i.text for i in section.items)  # superseded by the newer preference
    first = section.items[0]
    assert first.kind == "preference" and first.source_id == "c1" and first.speaker == "user"
    assert "message c-20" in first.why and first.start_time == LONG_T0 + timedelta(minutes=20)  # provenance
    # a preference is shown where its topic comes up; an instruction applies to every answer
    res = ruled.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c1", recent=False, now=LONG_NOW, query="What should I cook for dinner tonight?"
        ),
    )
    assert [i.text for i in res.sections[1].items] == [
        "From now on answer in French.",
        "Always include version numbers when I ask about libraries.",
    ]
    # scoped like the memories: this conversation's only when all_conversations is false
    res = ruled.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c1", recent=False, now=LONG_NOW, all_conversations=False, query="Which CSS framework?"
        ),
    )
    assert "French" not in res.context and len(res.sections[1].items) == 2
    res = ruled.context.assemble("ns", ContextRequest(conversation_id="c1", instructions=False, now=LONG_NOW))
    assert not res.sections[1].items and "## Standing" not in res.context
    assert all(not s.items for s in ruled.context.assemble("other", ContextRequest(query="CSS")).sections)


def test_an_instruction_said_in_a_recent_turn_is_read_there(ruled: Memory) -> None:
    res = ruled.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c2", budget_tokens=1500, now=LONG_NOW, query="Which CSS framework should I use?"
        ),
    )
    assert "o-2" in {i.id for i in res.sections[2].items}  # the turn that said it is among the recent turns
    assert res.context.count("From now on answer in French.") == 1
    assert [i.text for i in res.sections[1].items] == [
        "Actually I prefer Tailwind over Bootstrap for CSS now.",
        "Always include version numbers when I ask about libraries.",
    ]


def test_an_instruction_said_inside_a_longer_turn_is_shown_once(local_memory: Memory) -> None:
    rule = "From now on answer in French."
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c3",
            messages=instruction_chat(
                "p",
                {6: f"{rule} Also, the pottery class in Lisbon moved to Thursday evening at the old riverside studio."},
            ),
        ),
    )
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c3",
            recent=False,
            budget_tokens=1000,
            query="When is the pottery class in Lisbon now?",
            now=LONG_NOW,
        ),
    )
    assert res.context.count(rule) == 1  # once: the turn is shown whole (never cut), and read there
    assert f"user: {rule} Also, the pottery class" in "\n".join(i.text for i in res.sections[3].items)
    assert not res.sections[1].items and "## Standing" not in res.context
    # where no memory shows its turn, the instruction has its own line
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c3",
            recent=False,
            relevant=False,
            timeline=False,
            query="When is the pottery class?",
            now=LONG_NOW,
        ),
    )
    assert [i.text for i in res.sections[1].items] == [rule] and res.context.count(rule) == 1


def test_an_instruction_said_with_only_filler_beside_it_is_shown_once_in_its_turn(local_memory: Memory) -> None:
    # the turn's one informative sentence is the instruction's line: the turn is still shown whole, as said (a
    # dated list's line, not the instructions section, is what lets a memory leave such a turn out); the turn
    # scores under the relevance floor in this small store of filler (cosine 0.08), so the floor is lowered
    rule = "From now on answer in French."
    local_memory.writer.remember(
        "ns", RememberRequest(conversation_id="c4", messages=instruction_chat("q", {6: f"{rule} Thanks a lot!"}))
    )
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c4",
            recent=False,
            budget_tokens=1000,
            query="Which language do I want answers in?",
            min_score=0.0,
        ),
    )
    assert res.context.count(rule) == 1
    assert f"user: {rule} Thanks a lot!" in res.context  # the message as said
    assert not res.sections[1].items


FRENCH, ENGLISH_AGAIN = "From now on answer in French.", "Actually, answer in English again."


def test_a_superseded_instruction_is_marked_where_a_memory_shows_it(local_memory: Memory) -> None:
    """After "Actually, answer in English again." the French rule is history: a memory or a recent turn that
    shows it says so (SUPERSEDED after its sentence), and the instructions section holds the English one only."""
    local_memory.writer.remember(
        "ns",
        RememberRequest(
            conversation_id="c5",
            messages=instruction_chat(
                "s", {4: FRENCH, 6: "Also, the pottery class in Lisbon moved to Thursday.", 20: ENGLISH_AGAIN}
            ),
        ),
    )
    for recent in (False, True):
        res = local_memory.context.assemble(
            "ns",
            ContextRequest(
                conversation_id="c5",
                recent=recent,
                budget_tokens=1500,
                query="Which language should you answer in, French?",
                now=LONG_NOW,
            ),
        )
        assert [i.text for i in res.sections[1].items] == [ENGLISH_AGAIN] or ENGLISH_AGAIN in res.context
        shown = [i.text for s in res.sections[2:] for i in s.items if FRENCH in i.text]
        assert shown, res.context  # the turn is still shown: what was said, and when
        assert all(f"{FRENCH} {SUPERSEDED}" in t for t in shown), shown
        assert res.context.count(FRENCH) == res.context.count(f"{FRENCH} {SUPERSEDED}")
        assert ENGLISH_AGAIN + f" {SUPERSEDED}" not in res.context  # what holds now is not marked


def test_the_superseded_mark_follows_each_stored_sentence_that_stated_it() -> None:
    """The mark goes after the stored sentences of the message the replaced instruction was said in that state it
    (its spaces as they may be folded); the same words in another message are another statement."""
    said = StoredMessage(id="m1", source_id="c", seq=0, speaker="user", content=f"{FRENCH} Call me\nSam.  Thanks!")
    other = StoredMessage(id="m2", source_id="c", seq=1, speaker="user", content=FRENCH)
    superseded = Superseded.of([("m1", FRENCH), ("m1", "Call me Sam."), (None, " ")])
    sentences = span_sentences(said) + span_sentences(other)
    marks = superseded.marks(sentences)
    assert marks == {"m1:0": f" {SUPERSEDED}", "m1:2": f" {SUPERSEDED}"}  # "Call me" / "Sam.": once, after both
    assert Superseded.of([]).marks(sentences) == {}


def test_a_preference_is_shown_for_questions_about_its_topic(local_memory: Memory) -> None:
    """A diet matters to a question about a restaurant or dinner (by the meaning of the two sentences, the
    preference floor measured by bench/preference_topics.py), not to one about a router; an instruction to every
    question."""
    diet = "I'm vegetarian, keep that in mind."
    rules = {4: diet, 10: "I prefer Bootstrap over Foundation for CSS.", 16: "Always include version numbers."}
    local_memory.writer.remember("ns", RememberRequest(conversation_id="c6", messages=instruction_chat("v", rules)))

    def standing(query: str) -> list[str]:
        res = local_memory.context.assemble(
            "ns",
            ContextRequest(
                conversation_id="c6", recent=False, relevant=False, timeline=False, query=query, now=LONG_NOW
            ),
        )
        return [i.text for i in res.sections[1].items]

    for query in ("Can you suggest a restaurant for dinner on Friday?", "Where should I take my parents for dinner?"):
        assert standing(query) == [diet, "Always include version numbers."], query
    assert standing("How do I reset my router?") == ["Always include version numbers."]


# ------------------------------------------------------------------------------------------------ timeline
def test_a_question_about_the_course_of_things_reads_the_timeline(mixed: Memory) -> None:
    assert asks_overview("In what order did I bring up these topics?")
    assert asks_overview("Summarise how my project progressed") and asks_overview("Give me a recap")
    assert not asks_overview("What is Theo allergic to?")
    plain = mixed.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c2",
            recent=False,
            budget_tokens=1000,
            query="What did the ledgers say about Keiko?",
            now=LONG_NOW,
        ),
    )
    overview = mixed.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c2",
            recent=False,
            budget_tokens=1000,
            query="Summarise what the ledgers said about Keiko",
            now=LONG_NOW,
        ),
    )
    assert overview.sections[4].budget_tokens > plain.sections[4].budget_tokens
    timeline = overview.sections[4].items
    assert len(timeline) >= 2 and all(i.kind in ("line", "summary", "chunk") for i in timeline)
    starts = [i.start_time.timestamp() for i in timeline if i.start_time is not None]
    assert len(starts) == len(timeline) and starts == sorted(starts)  # dated, oldest first
    assert "## Timeline\n[" in overview.context  # dated
    # the user's own lines lead a period: what they brought up, in the order they did
    asked = [m.group(1) for m in re.finditer(r"ledgers of year group (\d+)", "\n".join(i.text for i in timeline))]
    assert asked and asked == sorted(asked, key=int)


def test_a_long_answer_gives_a_timeline_one_line_not_two(local_memory: Memory) -> None:
    """Any question's timeline shows one part of a long answer's line (its lead or its point, the one nearer the
    query), not both: the room holds more of what was said. A BEAM 11-20 question lost its update message to the
    two parts of the lines before it (RESULTS "stop8-notes")."""
    answer = DATABASE_ANSWER
    said = [
        ("user", "I need a database for the invoices of my bakery, which one should I pick?"),
        ("assistant", answer),
        ("user", "Thanks, I will go with PostgreSQL for the bakery invoices then."),
    ]
    t0 = LONG_NOW - timedelta(days=2)
    messages = turns(said, t0, "d")
    local_memory.writer.remember("ns", RememberRequest(conversation_id="db", messages=messages))
    query = "Which database suits the relational data of my bakery?"
    assert not asks_overview(query)
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="db",
            recent=False,
            relevant=False,
            budget_tokens=1000,
            query=query,
            now=LONG_NOW,
        ),
    )
    lines = [i.text for i in res.sections[4].items if i.kind == "line" and i.speaker == "assistant"]
    assert len(lines) == 1, res.context
    lead, point = "Let's look at your options for the database.", "In short, PostgreSQL suits your relational data"
    assert (lead in lines[0]) != (point in lines[0]), lines[0]  # one of the two, not both
    assert ELISION in lines[0]


def test_a_line_cut_inside_its_sentence_is_shown_whole(local_memory: Memory) -> None:
    """A message of one long sentence is embedded as a line cut at MAX_LINE_TOKENS ("…"); the timeline shows the
    whole sentence (up to `whole_line_tokens`): the dates at its end are what a question about it needs."""
    long = (
        "I'm still a bit nervous about who will run the allotment society, since my cousin Tomas said yes over "
        "lunch at the canal boathouse and my aunt and my brother, who both came to the spring meeting at the "
        "hall, would probably have picked someone else, which I found out on June 3 and again on June 20"
    )
    assert count_tokens(long) > MAX_LINE_TOKENS
    said = [
        ("user", long),
        ("assistant", "It is normal to feel that way about a new chair of a society."),
        ("user", "Thanks, I will talk to my aunt about the allotment society next week."),
    ]
    t0 = LONG_NOW - timedelta(days=2)
    messages = turns(said, t0, "e")
    local_memory.writer.remember("ns", RememberRequest(conversation_id="ex", messages=messages))
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="ex",
            recent=False,
            relevant=False,
            budget_tokens=1000,
            query="When did Tomas agree to run the allotment society?",
            now=LONG_NOW,
        ),
    )
    lines = [i.text for i in res.sections[4].items if i.kind == "line" and "Tomas" in i.text]
    assert f"user: {long}" in lines, res.context


def test_the_timeline_holds_no_period_the_block_already_shows(mixed: Memory) -> None:
    res = mixed.context.assemble(
        "ns",
        ContextRequest(conversation_id="c1", query="pottery in Lisbon", recent=True, budget_tokens=2000, now=LONG_NOW),
    )
    recent = {i.id for i in res.sections[2].items}
    nodes = mixed.storage.get_nodes("ns", [i.id for s in res.sections[3:] for i in s.items])
    assert nodes
    for n in nodes:
        assert not (n.message_ids and set(n.message_ids) <= recent)  # a chunk of recent turns only is not repeated
    assert count_tokens(res.context) == res.tokens_used <= 2000


def test_a_short_turn_is_shown_whole_or_not_at_all(local_memory: Memory) -> None:
    """A memory cut to the room left for it keeps each short turn whole or leaves it out (a turn is never cut to
    a sentence): at every budget, a turn of which the block shows a sentence is in it whole."""
    said = [
        ("Ann", "I planted the tomatoes on Sunday. The bed by the fence gets the most sun. Bo carried the soil."),
        ("Bo", "How tall are the tomato plants now? Mine in the greenhouse barely grew. The nights were too cold."),
        ("Ann", "They reach my knees already. I water them every morning at six. The basil beside them loves it too."),
        ("Bo", "Did the slugs come back to the garden? Last year they ate half my lettuce. I tried copper tape."),
        ("Ann", "The slugs stayed away this time. I spread crushed eggshells around each stem. It seems to work."),
        ("Bo", "What will you do with all the tomatoes? You could sell them at the market. People pay well there."),
        ("Ann", "I will make sauce with my aunt in August. We fill forty jars every summer. Some go to friends."),
        ("Bo", "Save me a jar of that tomato sauce. I will trade you honey from my bees. They had a good spring."),
    ]
    t0 = LONG_NOW - timedelta(days=3)
    messages = turns(said, t0, "m")
    local_memory.writer.remember("ns", RememberRequest(conversation_id="g", messages=messages))
    for budget in range(60, 400, 9):
        res = local_memory.context.assemble(
            "ns",
            ContextRequest(
                conversation_id="g",
                query="How does Ann look after her tomatoes and what will she do with them?",
                recent=False,
                timeline=False,
                budget_tokens=budget,
                now=LONG_NOW,
            ),
        )
        block = " ".join(res.context.split())
        for _, text in said:
            parts = [s for s in re.split(r"(?<=[.?!]) ", text) if s in block]
            assert not parts or text in block, (budget, text, block)


def test_the_room_the_block_leaves_goes_to_the_preferences_its_share_left_out(local_memory: Memory) -> None:
    """The instructions take up to their share first; what the block leaves unused afterwards (here: no memory
    section asked) goes to the preferences that share left out, the closest to the query first."""
    prefs = {
        8: "I prefer mixing standalone novels with long series, so that my reading never gets repetitive.",
        12: "I prefer historical fiction and fantasy novels over thrillers, romance novels and self-help books.",
        16: "Always mention the page count when you recommend a novel to me.",
    }
    local_memory.writer.remember("ns", RememberRequest(conversation_id="c7", messages=instruction_chat("r", prefs)))
    res = local_memory.context.assemble(
        "ns",
        ContextRequest(
            conversation_id="c7",
            recent=False,
            relevant=False,
            timeline=False,
            budget_tokens=200,
            query="Which novels should I read next? Suggest some books for me.",
            now=LONG_NOW,
        ),
    )
    section = res.sections[1]
    assert sorted(i.text for i in section.items) == sorted(prefs.values())  # its share alone holds one
    scores = [i.score or 0.0 for i in section.items]
    assert scores == sorted(scores, reverse=True)  # shown the closest first
    assert res.tokens_used <= 200 and section.left_out == 0
