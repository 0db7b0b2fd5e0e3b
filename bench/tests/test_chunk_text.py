"""bench/chunk_text.py: the checks that a chunk is whole, dated and attributed."""

from __future__ import annotations

from datetime import UTC, datetime

from bench.chunk_text import faults, line_faults, summary_faults
from models.memory import StoredMessage
from models.outline import OutlineLine
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


def test_a_summary_of_picked_whole_sentences_passes_and_a_cut_one_does_not() -> None:
    msgs = messages()
    held = {m.id: m for m in msgs}
    ids = ["m0:0", "m1:1", "m1:2"]
    picked = (
        "[2023-05-08 13:56] Gina: I'm here for you no matter what!\n"
        "Jon: Oh, I've been to Paris yesterday! … The studio opens next week."
    )
    assert summary_faults(picked, held, ids) == set()
    assert summary_faults(picked.replace("[2023-05-08 13:56] ", ""), held, ids) == {"no date"}
    assert summary_faults(picked.replace("Jon:", "Gina:"), held, ids) == {"a speaker missing"}
    cut = "[2023-05-08 13:56] Gina: I'm here for you no matter what!\nJon: been to Paris yesterday!"
    assert summary_faults(cut, held, ids) == {"starts inside a sentence"}


def test_an_outline_line_of_whole_sentences_passes_and_a_cut_one_does_not() -> None:
    msgs = messages()
    held = {m.id: m for m in msgs}

    def line(text: str) -> OutlineLine:
        return OutlineLine(id="m1:0", message_id="m1", speaker="Jon", created_at=msgs[1].created_at, text=text)

    rendered = "[2023-05-08]\nJon: ..."
    assert line_faults(line("Thanks, Gina. The studio opens next week."), rendered, held) == set()
    assert line_faults(line("Oh, I've been to Paris…"), rendered, held) == set()  # too long for a line, says so
    assert line_faults(line("Oh, I've been to Paris"), rendered, held) == {"ends inside a sentence"}
    assert line_faults(line("Thanks, Gina."), "[2023-05-09]\nJon: ...", held) == {"no date"}
