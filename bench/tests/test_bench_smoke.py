"""Smoke tests of the benchmarks' metrics and plumbing on tiny hand-made data (no LoCoMo file, no model)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from bench import common, dataset, metrics
from bench.cache import CachingEmbedder
from bench.metrics import Item
from bench.recall import answers
from bench.tests.chats import SAMPLE


class HashEmbedder:
    """Deterministic bag-of-words vectors (384-d, unit length): enough to exercise the plumbing."""

    model_name = "all-MiniLM-L6-v2"  # the stores' recorded model; no model is loaded
    dimension = 384

    def __init__(self) -> None:
        self.calls = 0

    def close(self) -> None:
        """Nothing to release."""

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dimension] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


# ------------------------------------------------------------------ evidence normalisation
def test_malformed_evidence_is_normalised_and_unknown_ids_dropped() -> None:
    turns = {"D8:6", "D9:17", "D11:26", "D30:5"}
    assert dataset.normalise_evidence(["D8:6; D9:17"], turns) == ("D8:6", "D9:17")
    assert dataset.normalise_evidence(["D:11:26"], turns) == ("D11:26",)
    assert dataset.normalise_evidence(["D30:05", "D30:5"], turns) == ("D30:5",)
    assert dataset.normalise_evidence(["D", "D99:1", "D8:6"], turns) == ("D8:6",)


def test_questions_without_resolvable_evidence_are_skipped() -> None:
    qs = dataset.questions(SAMPLE, "tiny")
    assert [q.text for q in qs] == ["What is the name of Ann's puppy?", "Where did Bob run a marathon?"]
    assert qs[1].evidence == ("D2:1", "D1:2") and qs[1].sessions == {"D1", "D2"}


def test_sessions_are_messages_in_time_order_with_optional_captions() -> None:
    plain, captioned = dataset.sessions(SAMPLE), dataset.sessions(SAMPLE, captions=True)
    assert [[m.id for m in s] for s in plain] == [["D1:1", "D1:2", "D1:3"], ["D2:1", "D2:2"]]
    assert plain[0][0].created_at is not None and plain[0][0].created_at.day == 8
    assert plain[0][2].content == "A beagle. Look at him!"
    assert captioned[0][2].content == "A beagle. Look at him! [shares a photo of a dog]"


# ------------------------------------------------------------------ metrics on a hand-checked answer
ANSWER = [
    Item(level=2, tokens=120, message_ids=("D1:1", "D2:1")),  # a summary: costs tokens, grounds nothing
    Item(level=1, tokens=100, message_ids=("D1:1", "D1:2")),
    Item(level=1, tokens=100, message_ids=("D2:1",)),
    Item(level=1, tokens=20, message_ids=("D3:1",)),
]


def test_budget_cut_stops_at_the_first_item_that_does_not_fit() -> None:
    assert metrics.cut(ANSWER, 220) == ANSWER[:2]
    assert metrics.cut(ANSWER, 300) == ANSWER[:2]  # the 100-token chunk does not fit; the 20-token one is not taken
    assert metrics.cut(ANSWER, 340) == ANSWER
    assert metrics.cut(ANSWER, 100) == []


def test_recall_session_recall_and_reciprocal_rank() -> None:
    s = metrics.score(ANSWER, ["D1:1", "D2:1", "D2:5"], (100, 250, 400))
    assert s.recall == {100: 0.0, 250: pytest.approx(1 / 3), 400: pytest.approx(2 / 3)}
    assert s.session_recall == {100: 0.0, 250: 0.5, 400: 1.0}
    assert s.reciprocal_rank == 0.5  # the first L1 chunk with evidence is ranked second, after the summary


def test_reciprocal_rank_is_read_within_the_largest_budget() -> None:
    assert metrics.score(ANSWER, ["D2:1"], (100, 300)).reciprocal_rank == 0.0
    assert metrics.score(ANSWER, ["D2:1"], (100, 320)).reciprocal_rank == pytest.approx(1 / 3)


def test_means_overall_and_per_category() -> None:
    a = metrics.score(ANSWER, ["D1:1"], (250,))
    b = metrics.score(ANSWER, ["D9:9"], (250,))
    groups = metrics.by_category([a, b, a], [4, 1, 4])
    assert list(groups) == ["all", "1", "4"]
    assert groups["all"].n == 3 and groups["all"].recall[250] == pytest.approx(2 / 3)
    assert groups["4"].recall[250] == 1.0 and groups["1"].recall[250] == 0.0
    assert groups["4"].mrr == 0.5 and groups["1"].mrr == 0.0


# ------------------------------------------------------------------ plumbing
def test_caching_embedder_embeds_each_text_once(tmp_path: Path) -> None:
    inner = HashEmbedder()
    cache = CachingEmbedder(inner, tmp_path / "cache.sqlite")
    first = cache.embed(["a b", "c", "a b"])
    again = CachingEmbedder(inner, tmp_path / "cache.sqlite").embed(["c", "a b"])
    assert inner.calls == 1 and cache.misses == 2 and cache.hits == 1
    np.testing.assert_array_equal(first[[1, 0]], again)


def test_questions_through_the_real_pipeline_find_their_evidence(tmp_path: Path) -> None:
    memory = common.open_store(common.bench_settings(tmp_path / "tiny.db"), HashEmbedder())
    try:
        assert common.ingest(memory, [SAMPLE], "bench") == 5
        qs = dataset.questions(SAMPLE, "tiny")
        for mode in ("dense", "text", "hybrid", "tree"):
            got = answers(memory, qs, mode)
            assert len(got) == 2 and all(items for items in got)
            scores = [metrics.score(items, q.evidence, (250, 2000)) for items, q in zip(got, qs, strict=True)]
            assert all(s.recall[2000] == 1.0 for s in scores), mode  # one small chunk holds every turn
    finally:
        memory.close()


def test_results_sections_are_replaced_in_place(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text("# Benchmark results\n\n<!-- other:start -->\nkeep\n<!-- other:end -->\n")
    common.write_section("recall", "first", path)
    common.write_section("recall", "second", path)
    text = path.read_text()
    assert "keep" in text and "second" in text and "first" not in text and text.count("recall:start") == 1
