"""services/excerpts: units, the leading fragment, budgeted excerpts and dedup, with the real cl100k tokenizer
on texts rendered and cut by the project's own chunker (services/chunking.py, services/tree.py)."""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.memory import MemoryNode, StoredMessage
from services.chunking import SentenceStream, measure, plan_windows, render
from services.excerpts import (
    BROKEN,
    ELISION,
    excerpt,
    fingerprint,
    fingerprints,
    normalise_line,
    remove_seen,
    segment,
    term_weights,
    terms,
)
from services.tokens import count_tokens
from services.tree import chunk_nodes

SENTENCES = [
    "Dr. Lee said the U.S. trip costs 2.5 thousand dollars, e.g. flights and hotels.",
    "We went to the aiseki restaurant that Ann liked so much.",
    "東京の寿司はとても美味しかったです。",
    "Café crème at the naïve résumé party 😀👨‍👩‍👧 was great!",
    "Python 3.11 is faster... really faster than 3.10.",
    "I think so. Maybe not? Let's see!",
    "The violin lesson is on 7 May 2023 at 5 p.m. in St. Louis.",
    "ok. see you there",
    "See https://example.com/a.b?x=1 for the menu.",
]
CODE = "Here is the fix:\n```python\ndef clean(x):\n    return x.strip()  # works. Really.\n```\nTry it."
LIST = "Plan:\n- buy milk. And bread.\n- call Bob\n1. pack\n2. go"
INDENTED = "Run this:\n\n    pip install pyramind\n    pyramind serve --port 8000\n\nThen open it."


def conversation(n: int = 40, seed: int = 3) -> list[StoredMessage]:
    """Several speakers (one with a space in the name), sessions with stamps, code, lists, CJK and emoji."""
    rng = random.Random(seed)
    t0 = datetime(2023, 5, 1, 9)
    msgs = []
    for i in range(n):
        body = {3: CODE, 5: LIST, 6: INDENTED}.get(i % 7) or " ".join(
            rng.choice(SENTENCES) for _ in range(rng.randint(2, 8))
        )
        msgs.append(
            StoredMessage(
                id=f"m{i}",
                source_id="c",
                seq=i,
                speaker=["Ann", "Bob", "Carol Jones"][i % 3],
                content=body,
                created_at=t0 + timedelta(minutes=10 * i if i < 20 else 300 + i),
            )
        )
    measure(msgs, None, 0)
    return msgs


def chunks(msgs: list[StoredMessage]) -> list[MemoryNode]:
    stream = SentenceStream.from_messages(msgs)
    return chunk_nodes(stream, plan_windows(stream, 0, 200, 20, final=True), "conversation", "c", 0)


MSGS = conversation()
FULL = "".join(render(m) for m in MSGS)
CHUNKS = chunks(MSGS)
BY_ID = {m.id: m for m in MSGS}


def texts(units: list) -> list[str]:
    return [u.text for u in units]


# ------------------------------------------------------------------------------------------------- segmentation


def test_units_are_their_spans_and_cover_the_text() -> None:
    for text in [FULL] + [c.text for c in CHUNKS]:
        units = segment(text)
        covered = [False] * len(text)
        for u in units:
            assert text[u.start : u.end] == u.text and u.text == u.text.rstrip() and u.text.strip()
            assert u.kind == "code" or u.text == u.text.lstrip()  # a code line keeps its own indentation
            covered[u.start : u.end] = [True] * (u.end - u.start)
        # what no unit holds is whitespace, a speaker prefix or an elision mark
        left = "".join(ch for ch, c in zip(text, covered, strict=True) if not c)
        assert not re.sub(r"(\[[^\]]+\] )?(Ann|Bob|Carol Jones):|\s", "", left).strip(ELISION + BROKEN)


def test_multibyte_characters_and_emoji_sequences_are_never_split() -> None:
    text = (
        "Bob: 東京の寿司はとても美味しかったです。また行きたい？ Café crème 😀. Naïve résumé 👨‍👩‍👧 is here. "
        "Ünïcödé straße!"
    )
    units = segment(text)
    assert texts(units) == [
        "東京の寿司はとても美味しかったです。",
        "また行きたい？",
        "Café crème 😀.",
        "Naïve résumé 👨‍👩‍👧 is here.",
        "Ünïcödé straße!",
    ]
    for u, v in zip(units, units[1:], strict=False):  # cuts fall after a sentence end, on whitespace or none
        assert u.text[-1] in "。？.!" and not text[u.end : v.start].strip()
    assert "👨\u200d👩\u200d👧" in units[3].text


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("Dr. Smith moved to the U.S. in 2019. He likes it.", ["Dr. Smith moved to the U.S. in 2019.", "He likes it."]),
        (
            "Use Python 3.11, e.g. for scripts, i.e. small ones. It costs 2.5 euros.",
            ["Use Python 3.11, e.g. for scripts, i.e. small ones.", "It costs 2.5 euros."],
        ),
        (
            "See https://example.com/a.b?x=1 for details. Next one.",
            ["See https://example.com/a.b?x=1 for details.", "Next one."],
        ),
        ("I was thinking... maybe not. Well... I agree.", ["I was thinking... maybe not.", "Well...", "I agree."]),
        (
            "J. K. Rowling wrote it. Mr. and Mrs. Smith read No. 5 at 3 p.m. today. Then they slept.",
            ["J. K. Rowling wrote it.", "Mr. and Mrs. Smith read No. 5 at 3 p.m. today.", "Then they slept."],
        ),
        ("No. I don't think so! Really? ok. see you", ["No.", "I don't think so!", "Really? ok. see you"]),
        (
            "Apples, pears, etc. and more. Milk, eggs etc. The end.",
            ["Apples, pears, etc. and more.", "Milk, eggs etc.", "The end."],
        ),
        ('He said "stop." Then he left…', ['He said "stop."', "Then he left…"]),
    ],
)
def test_sentences_respect_abbreviations_numbers_urls_and_ellipses(body: str, expected: list[str]) -> None:
    assert texts(segment(f"Ann: {body}")) == expected


def test_speaker_prefix_stays_out_of_units_and_speaker_is_carried() -> None:
    text = "[2023-05-01 09:00] Dr. Who: Hello there. How are you?\n  Fine, thanks.\nCarol Jones: ok\n  - milk\n"
    units = segment(text)
    assert texts(units) == ["Hello there.", "How are you?", "Fine, thanks.", "ok", "- milk"]
    assert [u.speaker for u in units] == ["Dr. Who"] * 3 + ["Carol Jones"] * 2
    assert units[0].prefix == "[2023-05-01 09:00] Dr. Who: " and units[0].line_start
    assert not units[1].line_start and units[2].lead == "  " and units[2].prefix == "[2023-05-01 09:00] Dr. Who: "
    # a headless chunk: its lines belong to the speaker the caller names
    assert {u.speaker for u in segment("  more of it. And more.", first_speaker="Bob")} == {"Bob"}
    # a document: no speaker lines at all
    assert [u.speaker for u in segment("Note: this is a document. Really.", speakers=())] == [None, None]


def test_code_is_cut_only_at_line_boundaries() -> None:
    text = render(StoredMessage(id="x", source_id="c", seq=0, speaker="Ann", content=CODE + "\n" + INDENTED))
    units = segment(text)
    lines = text.split("\n")
    code = [u for u in units if u.kind in ("code", "fence")]
    assert texts(code) == [
        "```python",
        "def clean(x):",
        "    return x.strip()  # works. Really.",
        "```",
        "    pip install pyramind",
        "    pyramind serve --port 8000",
    ]
    for u in code:  # one whole line each (after the message's indentation), never two, never a part
        assert u.line == u.end_line and lines[u.line] == u.lead + u.text
    assert {u.block for u in code[:4]} == {0} and code[4].block is None
    assert "Try it." in texts(units) and "Then open it." in texts(units)
    # a chunk that starts inside a block reads its lines as code up to the closing fence
    inside = segment("Ann: …\n      return x.strip()  # works. Really.\n  ```\n  Try it. Now.")
    assert [(u.kind, u.text) for u in inside] == [
        ("code", "    return x.strip()  # works. Really."),
        ("fence", "```"),
        ("sentence", "Try it."),
        ("sentence", "Now."),
    ]


def test_list_items_are_units() -> None:
    units = segment(render(StoredMessage(id="x", source_id="c", seq=0, speaker="Ann", content=LIST)))
    assert [(u.kind, u.text) for u in units] == [
        ("sentence", "Plan:"),
        ("item", "- buy milk. And bread."),
        ("item", "- call Bob"),
        ("item", "1. pack"),
        ("item", "2. go"),
    ]


# ---------------------------------------------------------------------------------------------------- excerpts

EXAMPLE = (
    "[2023-05-07 10:00] Ann: We landed in Lisbon. The hotel was fine. The tram was late.\n"
    "  ```python\n  def fare(n):\n      return 3 * n\n  ```\n"
    "Bob: Sounds good. Did you eat?\n"
    "Carol: The violin lesson is on Friday. It costs 40 euros. Bring the sheet music.\n"
)


def test_text_that_fits_comes_back_unchanged() -> None:
    for c in CHUNKS:
        e = excerpt(c.text, "violin lesson", count_tokens(c.text))
        assert e.text == c.text and e.whole and e.kept == tuple(range(len(e.units)))
    short = "Ann: hi there"
    assert excerpt(short, "anything", 50).text == short


def test_speaker_and_elision_marks() -> None:
    e = excerpt(EXAMPLE, "How much does it cost?", 12)
    assert e.text == "Carol: … It costs 40 euros. …"
    e = excerpt(EXAMPLE, "violin lesson cost", 19)
    assert e.text == "…\nCarol: The violin lesson is on Friday. It costs 40 euros. …"
    e = excerpt(EXAMPLE, "hotel tram", 27)
    assert e.text == "[2023-05-07 10:00] Ann: … The hotel was fine. The tram was late.\n  …"
    e = excerpt(EXAMPLE, "Lisbon tram", 27)
    assert e.text == "[2023-05-07 10:00] Ann: We landed in Lisbon. … The tram was late.\n  …"
    # a code line comes with its fences; the speaker of a message whose first line is left out is shown
    e = excerpt(EXAMPLE, "return fare", 36)
    assert e.text == "[2023-05-07 10:00] Ann: …\n  ```python\n  def fare(n):\n      return 3 * n\n  ```\n…"
    e = excerpt(EXAMPLE, "return fare", 32)  # a left-out code line is a line of its own
    assert e.text == "[2023-05-07 10:00] Ann: …\n  ```python\n  def fare(n):\n  …\n  ```\n…"


def test_query_rare_word_is_preferred_over_filler() -> None:
    filler = " ".join(["We talked about the weather and the trip and the plans."] * 6)
    text = f"Ann: {filler} My cello teacher moved to Porto. {filler}"
    others = [f"Bob: the trip to {place} was long" for place in ("Rome", "Oslo", "Kyiv", "Lima", "Baku", "Riga")]
    weights = term_weights([text, *others])  # over the request's candidates: "trip" is everywhere, "cello" rare
    e = excerpt(text, "What did Ann say about the trip and her cello?", 30, weights=weights)
    assert "My cello teacher moved to Porto." in e.text
    assert weights[terms("cello")[0]] > weights[terms("trip")[0]]


def test_a_line_that_says_nothing_does_not_fill_the_budget() -> None:
    text = (
        "assistant: Here is the plan for the pilot.\n### Conclusion\n2.\nMontserrat Media Hub\n"
        "- Track the interview scores of every candidate in the pilot each week.\n"
        "- Keep the budget for the hiring software under review."
    )
    e = excerpt(text, "Which hiring software did we pick?", 40)
    assert "hiring software" in e.text and "budget" in e.text  # the close line, then the lines that say something
    assert "Track the interview scores" in e.text
    assert "Conclusion" not in e.text and "\n2.\n" not in e.text and "Montserrat" not in e.text
    assert excerpt(text, None, 12).text.startswith("assistant: Here is the plan")  # no query: the head, as it is
    chat = (
        "user: Hi! I am planning a trip to Lisbon in May.\nassistant: Ok.\nuser: Where should we eat near the castle?"
    )
    ok = fingerprints("assistant: Ok.")  # shown elsewhere: the chat is excerpted, "Hi!" close to nothing
    e = excerpt(chat, "Where should we eat?", 100, seen=ok)
    assert e.text.startswith("user: Hi! I am planning a trip to Lisbon in May.\n")  # a turn's line is never bare


def test_a_date_or_number_the_query_names_wins_a_tie() -> None:
    text = (
        "[2023-05-07 10:00] Ann: We met at the cafe. We met at the park.\n"
        "[2023-06-02 10:00] Bob: We met at the museum. We met at the pier."
    )
    assert "Bob:" in excerpt(text, "Where did we meet on 2 June 2023?", 25).text
    assert "Ann:" in excerpt(text, "Where did we meet on May 7?", 25).text
    nums = "Ann: Room 12 is small. Room 14 is big. Room 16 is cold."
    assert excerpt(nums, "How is room 14?", 11).text == "Ann: … Room 14 is big. …"


def test_score_override() -> None:
    units = segment(EXAMPLE)
    wanted = next(u.index for u in units if u.text == "Bring the sheet music.")
    by_list = excerpt(EXAMPLE, "violin", 12, scores=[1.0 if u.index == wanted else 0.0 for u in units])
    by_call = excerpt(EXAMPLE, "violin", 12, scores=lambda u: float(u.text.startswith("Bring")))
    assert by_list.kept == by_call.kept and wanted in by_list.kept
    with pytest.raises(ValueError, match="scores"):
        excerpt(EXAMPLE, "violin", 12, scores=[1.0])
    with pytest.raises(ValueError, match="budget"):
        excerpt(EXAMPLE, "violin", -1)
    assert excerpt(EXAMPLE, "violin", 0).text == ""


def test_a_group_is_kept_or_left_out_whole() -> None:
    """Units given as a group (a short turn) go in together or not at all, whatever the budget: the room a
    group does not fit goes to the next closest unit."""
    text = "Ann: The violin lesson moved to Friday. Bring the sheet music.\nBo: Fine. The violin case is in the car."
    units = segment(text)
    first = [u.index for u in units if u.turn == 1]
    for budget in range(4, 40):
        ex = excerpt(text, "violin", budget, groups=[first])
        assert set(first) <= set(ex.kept) or not set(first) & set(ex.kept), (budget, ex.text)
        assert ex.tokens <= budget


QUERIES = st.lists(
    st.sampled_from(
        [
            "violin",
            "lesson",
            "aiseki",
            "Python",
            "cost",
            "strip",
            "東京",
            "milk",
            "7 May",
            "2023",
            "Bob",
            "naïve",
            "pip",
            "the",
            "what",
        ]
    ),
    max_size=4,
).map(" ".join)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(i=st.integers(0, len(CHUNKS) - 1), budget=st.integers(0, 260), query=QUERIES)
def test_budget_order_and_whole_units(i: int, budget: int, query: str) -> None:
    c = CHUNKS[i]
    e = excerpt(c.text, query, budget, first_speaker=c.speakers[0])
    assert e.tokens == count_tokens(e.text) <= budget
    assert BROKEN not in e.text or (e.whole and BROKEN in e.source)
    pos = 0
    for k in e.kept:  # each kept unit whole, in the source's order
        u = e.units[k]
        found = e.text.find(u.text, pos)
        assert found >= pos, (u.text, e.text)
        pos = found + len(u.text)
    assert list(e.kept) == sorted(e.kept)
    # the marks belong to no unit: the excerpt segments into exactly the units it shows
    assert fingerprints(e.text, first_speaker=c.speakers[0]) == e.fingerprints()
    if e.whole or not e.text:
        return
    # every line of an excerpt: a speaker's (prefix), a message's later line (indented), or a mark
    for line in e.text.split("\n"):
        assert (
            re.match(r"(\[[^\]]+\] )?(Ann|Bob|Carol Jones): ", line)
            or line.startswith("  ")
            or line in (ELISION, "")
            or re.fullmatch(r"(\[[^\]]+\] )?(Ann|Bob|Carol Jones): …", line)
        ), (line, e.text)
    assert f"{ELISION} {ELISION}" not in e.text and f"{ELISION}\n{ELISION}" not in e.text  # one mark per gap


# ------------------------------------------------------------------------------------------------------- dedup


def test_fingerprints_fold_whitespace_and_keep_case() -> None:
    assert normalise_line("  a  b\n   c ") == "a b c"
    assert fingerprints("Ann: Hello  there.\n  Bye.") == fingerprints("Ann: Hello there. Bye.")
    assert fingerprints("Ann: Hello there.") != fingerprints("Ann: hello there.")
    assert fingerprints("Ann: Hello there.") != fingerprints("Bob: Hello there.")


def test_overlap_between_consecutive_chunks_is_shown_once() -> None:
    repeated = 0
    for a, b in zip(CHUNKS, CHUNKS[1:], strict=False):
        ta, tb = a.text, b.text
        seen = fingerprints(ta)
        repeated += len(fingerprints(tb) & seen)
        kept = remove_seen(segment(tb), seen)
        assert not {fingerprint(u) for u in kept} & seen
        e = excerpt(tb, "violin", 10_000, seen=seen)
        assert not e.fingerprints() & seen and e.tokens <= 10_000
    assert repeated >= len(CHUNKS) // 2  # the overlap does repeat sentences, and they are recognised


def test_an_excerpt_segments_into_the_units_it_shows() -> None:
    for query, budget in [("hotel tram", 27), ("Lisbon tram", 27), ("return fare", 32), ("cost", 12), ("", 30)]:
        e = excerpt(EXAMPLE, query, budget)
        assert e.kept and fingerprints(e.text) == e.fingerprints()


def test_recent_turn_text_matches_chunk_text() -> None:
    m = MSGS[1]
    recent = f"{m.speaker}: {' '.join(m.content.split())}"  # how /context renders a recent turn
    assert fingerprints(render(m)) == fingerprints(recent)
