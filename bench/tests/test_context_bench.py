"""bench/context.py's pure parts: what counts as evidence in a block, and the results table."""

from __future__ import annotations

from bench import context


def test_evidence_counts_only_verbatim_turn_text() -> None:
    texts = {"D1:1": "I adopted a cat called Miso.", "D1:2": "We moved to Porto last spring."}
    block = "## Relevant memories\n- [2023-05-01, 3 days ago] Ann: I adopted a cat\n  called Miso.\n"
    assert context.found(block, ("D1:1",), texts) == 1.0  # line breaks and indentation are folded
    assert context.found(block, ("D1:1", "D1:2"), texts) == 0.5
    assert context.found("Ann moved to Porto in spring.", ("D1:2",), texts) == 0.0  # a paraphrase does not count


def test_markdown_lists_every_variant_and_scale() -> None:
    groups = {
        "all": {b: round(0.1 * k + 0.3, 1) for k, b in enumerate(context.BUDGETS)},
        "1": {b: round(0.1 * k, 1) for k, b in enumerate(context.BUDGETS)},
    }
    results = {
        "evidence": {
            "n_questions": 2,
            "store": {"L1": 3},
            "n_per_category": {"1": 2},
            "elapsed_s": 1.0,
            "variants": {
                "query": {"groups": groups, "mean_section_tokens": {}},
                "context": {"groups": groups, "mean_section_tokens": {b: {"relevant": 10} for b in context.BUDGETS}},
            },
        },
        "latency": [
            {"nodes": 10_000, "build_s": 1.0, "requests": 5, "latency_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0}}
        ],
    }
    md = context.markdown(results, "cmd")
    assert "| query | 0.300 | 0.400 | 0.500 | 0.600 | 0.700 | 0.00 / 0.10 / 0.20 / 0.30 / 0.40 |" in md
    assert "1 multi-hop (n=2) @250/500/1000/2000/4000" in md
    assert "/context at 10,000 nodes: p50 1.0 ms, p95 2.0 ms" in md


def test_the_provider_table_says_which_providers_rank_as_the_embedded_store() -> None:
    groups = {"all": dict.fromkeys(context.BUDGETS, 0.5)}
    ranked = [[("c1", 1, 0, 0.9), ("c1", 2, 0, 0.5)], [("c1", 1, 3, 0.7)]]
    other = [[("c1", 1, 0, 0.9), ("c1", 2, 0, 0.5)], [("c1", 1, 4, 0.7)]]  # the second question differs
    assert context.same_share(ranked, ranked) == 1.0 and context.same_share(other, ranked) == 0.5

    def run(same: float | None) -> dict:
        ev = {
            "store": {"messages": 5},
            "variants": {"query": {"groups": groups}, "context": {"groups": groups}},
            "latency_ms": {k: {"p50": 1.0, "p95": 2.0} for k in ("query", "context")},
        }
        return {"evidence": ev if same is None else {**ev, "same_as_local": same}}

    md = context.providers_markdown({"local": run(1.0), "pinecone": run(0.5), "other": run(None)}, "cmd")
    assert "| same /query as local |" in md
    assert (
        "| pinecone | messages 5 | 0.500 / 0.500 / 0.500 / 0.500 | 0.500 / 0.500 / 0.500 / 0.500 | 0.5 | 1.0 / 2.0 |"
        in md
    )
    assert "| other | messages 5 |" in md and "| - | 1.0 / 2.0 |" in md
