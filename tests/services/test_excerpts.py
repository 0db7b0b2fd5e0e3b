"""services/excerpts: budgeted excerpts of a memory's stored sentences, the one renderer's marks and dedup by
sentence id, with the real cl100k tokenizer on messages split and chunked by the project's own chunker
(services/chunking.py, services/tree.py)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.memory import MemoryNode, StoredMessage
from services.chunking import STAMP, SentenceStream, SpanSentence, measure, plan_windows, span_sentences
from services.excerpts import ELISION, excerpt, render, term_weights, terms
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


def conversation(n: int = 40, seed: int = 3) -> list[StoredMessage]:
    """Several speakers (one with a space in the name), sessions, code, lists, CJK and emoji."""
    rng = random.Random(seed)
    t0 = datetime(2023, 5, 1, 9)
    msgs = []
    for i in range(n):
        body = {3: CODE, 5: LIST}.get(i % 7) or " ".join(rng.choice(SENTENCES) for _ in range(rng.randint(2, 8)))
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


def said(msgs: Sequence[StoredMessage]) -> list[tuple[int, SpanSentence]]:
    """(stream offset, sentence) of every stored sentence, in order."""
    out = []
    for m in msgs:
        at = m.tok_offset
        for s in span_sentences(m):
            out.append((at, s))
            at += s.tokens
    return out


MSGS = conversation()
STREAM = SentenceStream.from_messages(MSGS)
CHUNKS: list[MemoryNode] = chunk_nodes(STREAM, plan_windows(STREAM, 0, 200, 20, final=True), "conversation", "c", 0)
PLACED = said(MSGS)


def of(chunk: MemoryNode) -> list[SpanSentence]:
    """A chunk's stored sentences: those of its window."""
    return [s for at, s in PLACED if chunk.tok_start <= at < chunk.tok_end]


def chat(*turns: tuple[str, str]) -> list[SpanSentence]:
    msgs = [StoredMessage(id=f"t{i}", source_id="x", seq=i, speaker=sp, content=c) for i, (sp, c) in enumerate(turns)]
    measure(msgs, None, 0)
    return [s for m in msgs for s in span_sentences(m)]


EXAMPLE = chat(
    ("Ann", "We landed in Lisbon. The hotel was fine. The tram was late."),
    ("Bob", "Sounds good. Did you eat?"),
    ("Carol", "The violin lesson is on Friday. It costs 40 euros. Bring the sheet music."),
)


def pick(sentences: list[SpanSentence], *texts: str, budget: int = 200) -> str:
    scores = [1.0 if s.text in texts else 0.0 for s in sentences]
    return excerpt(sentences, scores, budget).text if any(scores) else ""


def test_a_chunk_rendered_whole_is_its_text_without_stamps() -> None:
    for c in CHUNKS:
        sents = of(c)
        assert render(sents, range(len(sents)))[0] == STAMP.sub("", c.text).rstrip("\n")
        e = excerpt(sents, [0.0] * len(sents), count_tokens(c.text))
        assert e.whole and e.kept == tuple(range(len(sents))) and e.ids() == {s.id for s in sents}


def test_speaker_and_elision_marks() -> None:
    assert pick(EXAMPLE, "It costs 40 euros.", budget=12) == "Carol: … It costs 40 euros. …"
    costs = pick(EXAMPLE, "The violin lesson is on Friday.", "It costs 40 euros.", budget=19)
    assert costs == "Carol: The violin lesson is on Friday. It costs 40 euros. …"  # the head left out: no mark
    hotel = pick(EXAMPLE, "The hotel was fine.", "The tram was late.", budget=14)
    assert hotel == "Ann: … The hotel was fine. The tram was late. …"
    assert pick(EXAMPLE, "We landed in Lisbon.", "The tram was late.", budget=14) == (
        "Ann: We landed in Lisbon. … The tram was late. …"
    )
    ends = pick(EXAMPLE, "We landed in Lisbon.", "Bring the sheet music.", budget=17)
    assert ends == "Ann: We landed in Lisbon.\nCarol: … Bring the sheet music."  # one mark per gap
    assert pick(EXAMPLE, "Sounds good.", "Did you eat?", budget=10) == "Bob: Sounds good. Did you eat? …"


def test_a_message_keeps_its_lines_and_a_superseded_statement_is_marked() -> None:
    sents = chat(("Ann", "Plan:\n- buy milk\n- call Bob"), ("Bob", "From now on answer in French. Thanks!"))
    whole = render(sents, range(len(sents)))[0]
    assert whole == "Ann: Plan:\n  - buy milk\n  - call Bob\nBob: From now on answer in French. Thanks!"
    mark = {sents[3].id: " [old]"}
    e = excerpt(sents, [0.0, 0.0, 0.0, 1.0, 0.0], 13, after=mark)  # the mark is counted
    assert e.text == "Bob: From now on answer in French. [old] …" and e.tokens == 13


def test_query_rare_word_is_preferred_over_filler() -> None:
    others = [f"Bob: the trip to {place} was long" for place in ("Rome", "Oslo", "Kyiv", "Lima", "Baku", "Riga")]
    text = "Ann: We talked about the trip. My cello teacher moved to Porto."
    weights = term_weights([text, *others])  # over the request's candidates: "trip" is everywhere, "cello" rare
    assert weights[terms("cello")[0]] > weights[terms("trip")[0]]


def test_a_line_that_says_nothing_does_not_fill_the_budget() -> None:
    sents = chat(
        (
            "assistant",
            "Here is the plan for the pilot.\n### Conclusion\n2.\nMontserrat Media Hub\n"
            "- Track the interview scores of every candidate in the pilot each week.\n"
            "- Keep the budget for the hiring software under review.",
        )
    )
    scores = [2.0 if "hiring software" in s.text else 0.0 for s in sents]
    e = excerpt(sents, scores, 40)
    assert "hiring software" in e.text and "Track the interview scores" in e.text
    assert "Conclusion" not in e.text and "\n2.\n" not in e.text and "Montserrat" not in e.text


def test_scores_and_budget_are_checked() -> None:
    with pytest.raises(ValueError, match="scores"):
        excerpt(EXAMPLE, [1.0], 12)
    with pytest.raises(ValueError, match="budget"):
        excerpt(EXAMPLE, [0.0] * len(EXAMPLE), -1)
    assert excerpt(EXAMPLE, [0.0] * len(EXAMPLE), 0).text == ""


def test_a_group_is_kept_or_left_out_whole() -> None:
    """Sentences given as a group (a short turn) go in together or not at all, whatever the budget: the room a
    group does not fit goes to the next closest sentence."""
    sents = chat(("Ann", "The violin lesson moved to Friday. Bring the sheet music."), ("Bo", "Fine. The violin case."))
    first = [0, 1]
    scores = [1.0 if "violin" in s.text else 0.0 for s in sents]
    for budget in range(4, 40):
        ex = excerpt(sents, scores, budget, groups=[first])
        assert set(first) <= set(ex.kept) or not set(first) & set(ex.kept), (budget, ex.text)
        assert ex.tokens <= budget


def test_sentences_already_shown_are_left_out_by_id() -> None:
    """The overlap of consecutive chunks is the same stored sentences: shown once. A sentence of the same text in
    another message is another sentence (a turn is never taken for another one that says the same)."""
    repeated = 0
    for a, b in zip(CHUNKS, CHUNKS[1:], strict=False):
        seen = {s.id for s in of(a)}
        sb = of(b)
        repeated += len({s.id for s in sb} & seen)
        e = excerpt(sb, [0.0] * len(sb), 10_000, seen=seen)
        assert not e.ids() & seen and e.tokens <= 10_000
    assert repeated >= len(CHUNKS) // 2  # the overlap does repeat sentences, and they are recognised
    twice = chat(("Ann", "Thanks!"), ("Ann", "Thanks!"))
    e = excerpt(twice, [0.0, 0.0], 100, seen={twice[0].id})
    assert e.text == "Ann: Thanks!" and e.ids() == {twice[1].id}


QUERIES = st.lists(st.sampled_from(["violin", "lesson", "aiseki", "Python", "cost", "milk", "Bob", "the"]), max_size=3)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(i=st.integers(0, len(CHUNKS) - 1), budget=st.integers(0, 260), query=QUERIES)
def test_budget_order_and_whole_sentences(i: int, budget: int, query: list[str]) -> None:
    sents = of(CHUNKS[i])
    wanted = {t for q in query for t in terms(q)}
    scores = [float(len(wanted & set(terms(s.text)))) for s in sents]
    e = excerpt(sents, scores, budget)
    assert e.tokens == count_tokens(e.text) <= budget
    pos = 0
    for k in e.kept:  # each kept sentence whole, in order (a message's later lines indented)
        text = sents[k].text.replace("\n", "\n  ")
        found = e.text.find(text, pos)
        assert found >= pos, (text, e.text)
        pos = found + len(text)
    assert list(e.kept) == sorted(e.kept)
    for line in e.text.split("\n") if e.text else []:  # a speaker's line, a message's later line
        assert re.match(r"(Ann|Bob|Carol Jones): ", line) or line.startswith("  ") or not line, (line, e.text)
    assert f"{ELISION} {ELISION}" not in e.text  # one mark per gap
