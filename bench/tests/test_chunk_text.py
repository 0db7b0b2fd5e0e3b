"""bench/chunk_text.py: the checks that a chunk is whole, dated and attributed."""

from __future__ import annotations

from datetime import UTC, datetime

from bench.chunk_text import faults
from models.memory import StoredMessage
from services.chunking import SentenceStream, measure, plan_windows


def messages() -> list[StoredMessage]:
    said = [
        ("Gina", "I'm here for you no matter what! Take all the time you need."),
        ("Jon", "Thanks, Gina. Oh, I've been to Paris yesterday! The studio opens next week."),
    ]
    out = [
        StoredMessage(
            id=f"m{i}",
            source_id="c",
            seq=i,
            speaker=who,
            content=text,
            created_at=datetime(2023, 5, 8, 13, 56 + i, tzinfo=UTC),
        )
        for i, (who, text) in enumerate(said)
    ]
    measure(out, None, 0)
    return out


def test_a_chunk_of_whole_sentences_passes_and_a_token_window_does_not() -> None:
    msgs = messages()
    stream = SentenceStream.from_messages(msgs)
    [window] = plan_windows(stream, 0, 200, 20, final=True)
    assert faults(stream.window_text(window), msgs) == set()
    # what a token window gave: no date, the speaker cut to "ina", a sentence cut in two
    cut = (
        "ina: I'm here for you no matter what! Take all the time\nJon: Thanks, Gina. Oh, I've been to Paris yesterday!"
    )
    assert faults(cut, msgs) >= {"no date", "a speaker missing", "ends inside a sentence"}
    inside = "[2023-05-08 13:56] Gina: here for you no matter what!\nJon: Thanks, Gina."
    assert "starts inside a word" not in faults(inside, msgs) and "starts inside a sentence" in faults(inside, msgs)
    assert "starts inside a word" in faults("[2023-05-08 13:56] Gina: ere for you no matter what!", msgs[:1])
