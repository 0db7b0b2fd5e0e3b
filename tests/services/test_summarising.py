"""services/summarising.py: the extractive summariser picks stored sentences by id; its text is rendered from them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from datastore.write.spans import SpanReader
from models.memory import MemoryNode, StoredMessage
from services import tokens
from services.chunking import (
    SentenceStream,
    SpanSentence,
    measure,
    plan_windows,
    render_sentences,
    span_sentences,
)
from services.filler import is_filler
from services.summarising import ExtractiveSummariser, Span, Summary
from services.tree import Frontier, chunk_nodes, roll_up

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
CHAT = [
    ("Caroline", "I went to a LGBTQ support group yesterday and it was so powerful."),
    ("Melanie", "Wow, that's cool, Caroline! What happened that was so awesome?"),
    ("Caroline", "The transgender stories were so inspiring! I was so happy and thankful for all the support."),
    ("Melanie", "That's really cool. I'm painting a lake sunrise these days. Painting helps me relax."),
    ("Caroline", "I'm keen on counseling or working in mental health. I want to help people like me."),
    ("Melanie", "You'd be a great counselor! Your empathy will help others."),
    ("Melanie", "I ran a charity race for mental health last Saturday. It was so rewarding."),
    ("Caroline", "That's awesome, Mel! Running for a cause is great."),
    ("Caroline", "My friends and family have been a great support system during my transition."),
    ("Melanie", "Glad you have support, Caroline!"),
]


def stored(turns: list[tuple[str, str]], start: datetime | None = T0, step: timedelta = timedelta(minutes=1)):
    """Measured StoredMessages of `turns` (speaker, content), `step` apart from `start`."""
    messages = [
        StoredMessage(
            id=f"m{i}",
            source_id="c",
            seq=i,
            speaker=who,
            content=text,
            created_at=start + i * step if start else None,
        )
        for i, (who, text) in enumerate(turns)
    ]
    measure(messages, None, 0)
    return messages


def span_of(messages: list[StoredMessage], context: Sequence[SpanSentence] = ()) -> Span:
    sents = [s for m in messages for s in span_sentences(m)]
    return Span(sentences=sents, texts=[], context_sentences=context)


def by_id(messages: list[StoredMessage]) -> dict[str, SpanSentence]:
    return {s.id: s for m in messages for s in span_sentences(m)}


def test_a_summary_picks_stored_sentences_and_is_rendered_from_their_ids() -> None:
    messages = stored(CHAT)
    summary = ExtractiveSummariser().summarise(span_of(messages), 80)
    assert summary.made_by == "extractive" and summary.sentence_ids
    known = by_id(messages)
    picked = [known[i] for i in summary.sentence_ids]  # every id is a stored sentence, in order
    assert summary.sentence_ids == sorted(summary.sentence_ids, key=list(known).index)
    assert summary.text == render_sentences(picked)
    assert summary.text.startswith("[2023-05-08 13:5")  # dated by its first message, as a chunk is
    for line in summary.text.splitlines():
        speaker, _, said = line.split("] ")[-1].partition(": ")
        assert speaker in {"Caroline", "Melanie"}
        assert any(said.startswith(s.text) and s.speaker == speaker for s in picked), line  # whole sentences
    assert tokens.count_tokens(summary.text) <= 80


def test_sentences_of_one_message_share_its_line_and_a_gap_is_marked() -> None:
    messages = stored([("Ann", "I moved to Porto in May. It rains. My flat has a view of the river Douro.")])
    first, second, third = span_sentences(messages[0])
    assert render_sentences([first, third]) == (
        "[2023-05-08 13:56] Ann: I moved to Porto in May. … My flat has a view of the river Douro."
    )
    assert render_sentences([first, second]) == "[2023-05-08 13:56] Ann: I moved to Porto in May. It rains."


def test_a_later_session_or_day_is_dated_again() -> None:
    messages = stored(CHAT[:4], step=timedelta(hours=5))
    picked = [span_sentences(m)[0] for m in messages]
    lines = render_sentences(picked).splitlines()
    assert all(ln.startswith("[2023-05-") for ln in lines), lines  # 5 hours apart: each starts a session


def test_a_span_of_several_days_opens_with_its_first_day() -> None:
    # the first day says little, the next days much: the summary still opens on the day its span starts
    turns = [("Ann", "Nice, I see."), ("Bob", "Ok cool, the weather was fine.")] + CHAT
    messages = stored(turns, step=timedelta(hours=7))
    summary = ExtractiveSummariser().summarise(span_of(messages), 60)
    assert summary.text.startswith("[2023-05-08 "), summary.text
    assert summary.sentence_ids[0] in {s.id for m in messages[:2] for s in span_sentences(m)}
    one_day = stored(turns, step=timedelta(minutes=1))  # all on one day: the selection alone decides
    assert ExtractiveSummariser().summarise(span_of(one_day), 60).sentence_ids[0] not in {
        s.id for m in one_day[:2] for s in span_sentences(m)
    }


def test_summary_respects_token_cap_and_is_deterministic() -> None:
    s = ExtractiveSummariser()
    a = s.summarise(span_of(stored(CHAT)), 40)
    b = s.summarise(span_of(stored(CHAT)), 40)
    assert a == b and tokens.count_tokens(a.text) <= 40


def test_context_steers_away_from_what_the_previous_summary_picked() -> None:
    s = ExtractiveSummariser()
    messages = stored(CHAT)
    plain = s.summarise(span_of(messages), 40)
    first = by_id(messages)[plain.sentence_ids[0]]
    with_context = s.summarise(span_of(messages, [first]), 40)
    assert first.id not in with_context.sentence_ids


def test_what_each_person_brought_up_comes_first() -> None:
    """A summary too small for everything keeps the lead sentence of each of the user's messages before any
    of the assistant's sentences: the timeline tells what the user raised, and when."""
    answer = " ".join(f"Point {k}: the compiler inlines the loop and unrolls it by four for speed." for k in range(8))
    turns = [
        t for k in range(5) for t in (("user", f"How do I speed up topic {k}? It is slow."), ("assistant", answer))
    ]
    summary = ExtractiveSummariser().summarise(span_of(stored(turns)), 80)
    lines = summary.text.splitlines()
    assert all(any(f"user: How do I speed up topic {k}?" in ln for ln in lines) for k in range(5)), lines
    assert sum("assistant: " in ln for ln in lines) < 3  # the rest of the room, not before them
    assert tokens.count_tokens(summary.text) <= 80


def test_a_summary_never_keeps_filler_and_keeps_each_messages_most_informative_sentence() -> None:
    turns = [
        ("Caroline", "Hey Mel! Thanks so much! I went to an LGBTQ support group on Tuesday and met 12 people."),
        ("Melanie", "Wow, Caroline! That's so cool! How about you?"),
        ("Caroline", "Thanks, Melanie! Sounds great!"),
        ("Melanie", "Cool! My kids and I painted a sunset at Lake Tahoe."),
    ]
    messages = stored(turns)
    summary = ExtractiveSummariser().summarise(span_of(messages), 200)
    picked = [by_id(messages)[i] for i in summary.sentence_ids]
    assert [s.text for s in picked] == [
        "I went to an LGBTQ support group on Tuesday and met 12 people.",
        "My kids and I painted a sunset at Lake Tahoe.",
    ]
    assert not any(is_filler(s.text, {"Caroline", "Melanie", "Mel"}) for s in picked)


def test_a_documents_sentences_are_kept_without_a_speaker() -> None:
    doc = StoredMessage(
        id="d",
        source_id="d",
        source_type="document",
        seq=0,
        speaker="document",
        content="The pump station was rebuilt in 1998 after the flood.\nNote: the old intake was sealed in 2001.",
    )
    measure([doc], None, 0)
    summary = ExtractiveSummariser().summarise(span_of([doc]), 200)
    assert summary.text.startswith("The pump station was rebuilt in 1998 after the flood.")
    assert "document" not in summary.text


def roll(messages: list[StoredMessage], chunk_size: int = 48, fan_out: int = 2) -> list[MemoryNode]:
    """Chunks and summaries up to L3 of `messages`, rolled up as remember does (no store)."""
    stream = SentenceStream.from_messages(messages)
    windows = plan_windows(stream, 0, chunk_size, 8, final=False)
    chunks = chunk_nodes(stream, windows, "conversation", "c", 0)
    spans = SpanReader(None, "", "c", messages)
    summariser = ExtractiveSummariser()

    def summarise(children: list[MemoryNode], context: MemoryNode | None) -> Summary:
        return summariser.summarise(spans.span(children, context), 60)

    return chunks + roll_up(Frontier(), [c for c in chunks if c.sealed], summarise, fan_out, 3)


def test_summaries_of_chunks_and_of_summaries_pick_whole_sentences_by_id() -> None:
    messages = stored(CHAT * 3)
    nodes = roll(messages)
    known = by_id(messages)
    by_node = {n.id: n for n in nodes}
    l2 = [n for n in nodes if n.level == 2]
    l3 = [n for n in nodes if n.level == 3]
    assert l2 and l3
    for n in l2 + l3:
        assert n.text == render_sentences([known[i] for i in n.sentence_ids])  # rendered once, from the ids
        assert n.text.startswith(f"[{n.start_time:%Y-%m-%d}")  # dated as a chunk is
    for n in l3:  # a summary of summaries picks among what its children picked
        assert set(n.sentence_ids) <= {i for c in n.children for i in by_node[c].sentence_ids}
