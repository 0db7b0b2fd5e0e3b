"""The preference floor on its labeled pairs (bench/preference_topics.py), as the benchmark measures it: a
stated preference is shown for questions about its topic (a diet for a restaurant or dinner question) and
rarely for others. Held to what the floor measured (bench/RESULTS.md, "Instructions only from the person the
memory belongs to")."""

from __future__ import annotations

from bench import preference_topics


def test_the_floor_holds_its_numbers_on_the_labeled_pairs() -> None:
    out = preference_topics.run()
    assert out["relevant"] >= 60 and out["shown"] >= 40
    assert out["precision"] >= 0.94 and out["recall"] >= 0.75, out
    assert out["auc"] >= 0.94, out
