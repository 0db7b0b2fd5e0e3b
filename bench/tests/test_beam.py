"""bench/beam.py on a tiny BEAM-shaped chat written here (never the real data): reading, scoring, the table."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import beam
from bench.meters import CountingEmbedder
from bench.tests.chats import SHARED, UNIQUE, write_chat
from services.embedding import LocalEmbedder


def test_load_chat_maps_batches_ids_times_and_questions(tmp_path: Path) -> None:
    root = write_chat(tmp_path)
    folder = beam.chats_folder(root)
    assert beam.chats_folder(folder) == folder  # the chats/100K folder itself is accepted too
    chat = beam.load_chat(folder, 3)
    assert [[m.id for m in s] for s in chat.sessions] == [["0", "1", "2", "3"], ["4", "5"]]
    first, *_ = chat.messages
    assert first.speaker == "user" and first.session_id == "batch-1"
    assert first.content == f"Hi. {UNIQUE}"  # the ->-> marker is stripped
    assert chat.messages[2].content.endswith("Thanks.")  # also the `->-> 1,2)` variant
    times = [m.created_at for m in chat.messages]
    assert times[0] == datetime(2024, 3, 15, 12, tzinfo=UTC) and times[3] == datetime(2024, 3, 15, 12, 0, 3, tzinfo=UTC)
    assert times[4] == datetime(2024, 5, 2, 12, tzinfo=UTC)
    assert all(a < b for a, b in zip(times, times[1:], strict=False))  # type: ignore[operator]
    assert [(q.type, q.evidence) for q in chat.questions] == [
        ("information_extraction", ("0",)),
        ("instruction_following", ("2", "0")),
    ]  # abstention skipped
    with pytest.raises(FileNotFoundError):
        beam.chats_folder(tmp_path / "nowhere")


def test_a_message_counts_only_by_a_sentence_no_other_message_holds(tmp_path: Path) -> None:
    chat = beam.load_chat(beam.chats_folder(write_chat(tmp_path)), 3)
    sigs = beam.signatures({str(m.id): m.content for m in chat.messages})
    assert sigs["0"] == (UNIQUE,)  # "Hi." is under 40 characters
    # message 2's only long sentence is also in message 3: it has no unique sentence, so its whole text decides
    assert sigs["2"] == (f"{SHARED} Thanks.",)
    block = (
        "## Relevant memories\n- [2024-03-15, 2 months ago] user: Hi. My sister Alma is moving to\n  Lisbon in "
        f"the first week of June.\n  assistant: Sure. You said: {SHARED}"
    )
    assert beam.evidence_share(block, ("0",), sigs) == 1.0  # line breaks and indentation are folded
    assert beam.evidence_share(block, ("2",), sigs) == 0.0  # the shared sentence alone does not show message 2
    assert beam.evidence_share(block, ("2", "0"), sigs) == 0.5
    assert beam.evidence_share("## Relevant memories\n- Alma moves to Lisbon in June.", ("0",), sigs) == 0.0
    assert beam.sentences("One.\nA line without a full stop that is long enough\nx") == [
        "A line without a full stop that is long enough"
    ]


def test_cut_sections_and_chats() -> None:
    assert beam.cut_texts([("a", 100), ("b", 150), ("c", 10)], 250) == ["a", "b"]
    assert beam.cut_texts([("a", 100), ("b", 200), ("c", 10)], 250) == ["a"]  # the first misfit ends the list
    parts = beam.block_sections("Memory of x.\n\n## Relevant memories\n- one\n\n## Earlier, summarised\n- two")
    assert list(parts) == ["", "Relevant memories", "Earlier, summarised"] and "two" in parts["Earlier, summarised"]
    assert beam.parse_chats("11-13") == [11, 12, 13] and beam.parse_chats("5,1-2") == [1, 2, 5]
    assert beam.flatten_ids({"a": [3, 1], "b": [1, [7]]}) == ["3", "1", "7"]


def test_summary_and_markdown_per_type_and_budget() -> None:
    def q(kind: str, ctx: float, query: float) -> dict:
        return {
            "type": kind,
            "n_evidence": 2,
            "roles": ["user", "assistant"],
            "present": {"context": {250: [int(ctx > 0), int(ctx > 0.5)]}, "query": {250: [1, 0]}},
            "scores": {"context": {250: ctx}, "query": {250: query}},
            "query_top_k": 1.0,
            "found_in": {250: {"Relevant memories": 1}},
            "section_tokens": {250: {"relevant": 200}},
            "query_levels": {250: {"L1": 1}},
            "truncated_items": {250: 0},
        }

    s = beam.summarise([q("summarization", 0.0, 0.5), q("event_ordering", 1.0, 0.5)], [250])
    assert s["scores"]["context"]["all"][250] == 0.5 and s["scores"]["query"]["summarization"][250] == 0.5
    assert s["n_per_type"] == {"event_ordering": 1, "summarization": 1}
    assert s["by_role"]["query"] == {"assistant": {250: 0.0}, "user": {250: 1.0}}
    assert s["by_role"]["context"]["assistant"][250] == 0.5
    results = {
        "budgets": [250],
        "chats_spec": "3",
        "summary": s,
        "questions_s": 1.0,
        "chats": {
            3: {"messages": 6, "tokens": 90, "store": {"L1": 1}, "ingest_s": 0.1, "embedded_texts": 2, "embed_s": 0.0}
        },
    }
    md = beam.markdown(results, "cmd")
    assert "| event_ordering (1, 2) | 1.000 / 0.500 |" in md
    assert "| **overall** (2, 4) | **0.500 / 0.500** |" in md
    assert "| user (2) | 0.500 / 1.000 |" in md


def test_run_chat_end_to_end_on_a_real_store(tmp_path: Path, embedder: LocalEmbedder) -> None:
    chat = beam.load_chat(beam.chats_folder(write_chat(tmp_path)), 3)
    counter = CountingEmbedder(embedder)
    done = beam.run_chat(chat, counter, counter, [250, 2000], tmp_path / "stores")
    ingest = done["ingest"]
    assert ingest["messages"] == 6 and ingest["sessions"] == 2 and ingest["store"]["messages"] == 6
    assert ingest["evidence_without_unique_sentence"] == 1  # message 2
    first, second = done["questions"]
    # the whole chat fits in 2000 tokens: /query returns it all and the block holds message 0's sentence
    assert first["scores"]["query"][2000] == first["scores"]["context"][2000] == 1.0
    assert first["found_in"][2000] == {"Relevant memories": 1}
    assert second["type"] == "instruction_following" and second["n_evidence"] == 2


def test_policy_option_changes_named_numbers_only() -> None:
    from datastore.context.policy import DEFAULT_POLICY

    p = beam.parse_policy("thread_weight=0.7, line_tokens=30")
    assert (p.thread_weight, p.line_tokens) == (0.7, 30) and isinstance(p.line_tokens, int)
    assert p.shares == DEFAULT_POLICY.shares and beam.parse_policy("") == DEFAULT_POLICY
    for bad in ("no_such_field=1", "shares=1", "line_tokens=many"):
        with pytest.raises(SystemExit):
            beam.parse_policy(bad)
