"""Does the outline's query find the sentence that answers it? (issue 33, item 4's goal)

`python -m bench.outline [--data locomo_dev.json] [--budget 300] [--limit N]`: every LoCoMo dev conversation
remembered into one store (bench/out/outline.db, the default settings; message id = dia_id), and for every question
with evidence the conversation's outline asked with the question as its query at `--budget` tokens
(`Outline.outline`). A question counts as found when a sentence of one of its evidence turns (as
services/text.sentences splits it, whitespace folded) is in the outline's text. Also counted: outlines that
answer nothing ("No line ... is about"), and the mean number of lines shown. Writes the section `outline` of
bench/RESULTS.md (full runs only).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import common, dataset
from bench.cache import CachingEmbedder
from services.embedding import LocalEmbedder
from services.text import sentences

NS = "bench"
BUDGET = 300


def _fold(text: str) -> str:
    return " ".join(text.split())


def run(data: Path, budget: int, limit: int | None) -> dict[str, object]:
    """Build the store, outline every question, count what was found."""
    samples = dataset.load(data)
    memory = common.open_store(
        common.bench_settings(common.OUT / "outline.db"),
        CachingEmbedder(LocalEmbedder(threads=2), common.OUT / "embeddings.sqlite"),
    )
    common.ingest(memory, samples, NS)
    questions = [q for s in samples for q in dataset.questions(s, s["sample_id"])][:limit]
    found = empty = lines = 0
    by_category: dict[int, list[int]] = {}
    held: dict[str, dict[str, list[str]]] = {}
    for q in questions:
        if q.conversation_id not in held:
            held[q.conversation_id] = {
                m.id: [_fold(s) for s in sentences(m.content)] for m in memory.storage.messages(NS, q.conversation_id)
            }
        out = memory.outline.outline(NS, q.conversation_id, q.text, budget)
        text = _fold(out.text)
        hit = any(s and s in text for e in q.evidence for s in held[q.conversation_id].get(e, []))
        found += hit
        empty += not out.days
        lines += sum(len(d.lines) for d in out.days)
        by_category.setdefault(q.category, [0, 0])
        by_category[q.category][0] += hit
        by_category[q.category][1] += 1
    memory.close()
    n = max(1, len(questions))
    return {
        "questions": len(questions),
        "budget": budget,
        "found": found / n,
        "empty": empty / n,
        "mean_lines": lines / n,
        "by_category": {c: f"{k}/{t}" for c, (k, t) in sorted(by_category.items())},
    }


def markdown(out: dict[str, object], command: str) -> str:
    """The RESULTS section."""
    return (
        f"## The outline's query on LoCoMo dev\n\n{common.header(command)}\n"
        f"{out['questions']} questions with evidence, each the query of its conversation's outline at "
        f"{out['budget']} tokens (bench/outline.py). **Evidence sentence in the outline: {out['found']:.3f}**; "
        f"outlines that answer nothing: {out['empty']:.3f}; lines shown on average: {out['mean_lines']:.1f}. By "
        f"category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial): {out['by_category']}.\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=dataset.DATA, help="the LoCoMo file (locomo_dev.json)")
    parser.add_argument("--budget", type=int, default=BUDGET, help="the outline's budget_tokens")
    parser.add_argument("--limit", type=int, default=None, help="ask only the first N questions")
    args = parser.parse_args(argv)
    out = run(args.data, args.budget, args.limit)
    print(out)
    if args.limit is None and args.data == dataset.DATA:
        common.write_section("outline", markdown(out, "python -m bench.outline"))


if __name__ == "__main__":
    main()
