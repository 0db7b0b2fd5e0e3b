"""Relevance floor benchmark: how the scores of what a query returns fall for memories that answer it and for
memories that have nothing to do with it, on LoCoMo dev and BEAM 100K chats 11-20, split by what the query shares
with a memory: words only (its cosine under the meaning floor) or meaning (its cosine at or over it).

Run: `.venv/bin/python -m bench.floor --beam /work/beam/chats/100K` (a few minutes on 2 cores with a warm
embedding cache and the stores an earlier bench.context and bench.beam run left under bench/out; `--limit N` asks
only the first N LoCoMo questions of each conversation, `--skip-beam` leaves BEAM out).

1. LoCoMo: the 6 dev conversations remembered into one namespace (as bench/context.py; its store is reused when
   it holds them). Each question with evidence is asked without a conversation filter, as a GPT asks, at the
   candidate count of a 1000-token block (33): each hybrid candidate is `evidence` (its text holds one of the
   question's evidence turns verbatim), `other conversation` (a conversation that holds none of the question's
   evidence) or `same conversation` (the question's conversation, no evidence turn).
2. BEAM: each chat's store (bench/out/beam, left by bench/beam.py) is asked its own questions (candidates
   `evidence` when they hold an evidence message's signature sentence, else `same conversation`) and the
   questions of the chat before it (11 gets 20's), which it holds nothing about: `other conversation`.

Each candidate carries its hybrid score (datastore/read/ranking.py `fuse`), its cosine to the query (MiniLM) and
its text strength (`text_strength(bm25)`, 0 when it shares no word). Reported: percentiles of each per label, and
for a grid of floors (a candidate passes when its cosine reaches the meaning floor, or else its hybrid score
reaches the words floor) the share of evidence candidates kept and of other-conversation candidates kept, on the
conversations the floors were chosen on (LoCoMo conv-26, conv-30, conv-41; BEAM 11-15) and on the held-out ones
(conv-42, conv-43, conv-44; BEAM 16-20). Results: the `floor` section of bench/RESULTS.md (not with `--limit`);
every candidate in bench/out/floor.json.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Collection, Iterable
from pathlib import Path

import numpy as np

from bench import beam, common, dataset
from bench.cache import CachingEmbedder
from bench.context import turns
from datastore.factory import open_memory
from datastore.memory import Memory
from datastore.read.ranking import POOL, with_levels
from models.api import QueryFilter
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser

TOP_K = 33  # the candidates of a 1000-token block (BlockPolicy.candidate_tokens 30)
NS = "bench"
TUNE_LOCOMO = ("conv-26", "conv-30", "conv-41")
TUNE_BEAM = tuple(range(11, 16))
LABELS = ("evidence", "same conversation", "other conversation")
MEANING = (0.3, 0.35, 0.4, 0.45, 0.5)
WORDS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35)
DIR = common.OUT / "context"


def candidates(memory: Memory, query: str, vector: np.ndarray, flt: QueryFilter | None) -> list[dict]:
    """The hybrid candidates of `query` (top TOP_K) with their score, cosine and text strength, best first."""
    hits = memory.reader.search(NS, query, vector, TOP_K, flt, "hybrid")
    vectors = memory.storage.get_vectors(NS, [n.id for n, _ in hits])
    strength = {n.id: s for n, s in memory.reader.search(NS, query, vector, POOL, with_levels(flt, 1), "text")}
    return [
        {
            "node": n,
            "score": round(float(s), 5),
            "cosine": round(float(vectors[n.id] @ vector), 5) if n.id in vectors else 0.0,
            "words": round(float(strength.get(n.id, 0.0)), 5),
            "rank": r,
        }
        for r, (n, s) in enumerate(hits)
    ]


def locomo(samples: list[dict], embedder: CachingEmbedder, limit: int | None) -> list[dict]:
    """Every LoCoMo candidate (see the module doc, 1), without its node."""
    db = DIR / "tree.db"
    settings = common.bench_settings(db)
    memory = open_memory(settings, embedder, ExtractiveSummariser()) if db.exists() else None
    if memory is None or memory.storage.counts(NS).get("messages", 0) == 0:
        if memory is not None:
            memory.close()
        memory = common.open_store(settings, embedder)
        common.ingest(memory, samples, NS)
    texts = {s["sample_id"]: turns(s) for s in samples}
    questions = [q for s in samples for q in dataset.questions(s, s["sample_id"])[:limit]]
    vectors = embedder.embed([q.text for q in questions])
    out = []
    for i, (q, v) in enumerate(zip(questions, vectors, strict=True)):
        wanted = [texts[q.conversation_id][e] for e in q.evidence]
        for c in candidates(memory, q.text, v, None):
            n = c.pop("node")
            folded = beam.fold(n.text)
            label = (
                "other conversation"
                if n.source_id != q.conversation_id
                else "evidence"
                if any(w in folded for w in wanted)
                else "same conversation"
            )
            out.append({**c, "q": i, "conversation": q.conversation_id, "label": label})
    memory.close()
    return out


def beam_candidates(folder: Path, embedder: CachingEmbedder, chats: Iterable[int]) -> list[dict]:
    """Every BEAM candidate (see the module doc, 2), without its node."""
    numbers = list(chats)
    loaded = {n: beam.load_chat(beam.chats_folder(folder), n) for n in numbers}
    out: list[dict] = []
    for k, number in enumerate(numbers):
        chat, before = loaded[number], loaded[numbers[k - 1]]
        contents = {str(m.id): m.content for m in chat.messages}
        sigs = beam.signatures(contents)
        memory = beam.open_chat_store(number, embedder, reuse=True)
        if memory.storage.counts(beam.NS).get("messages", 0) != len(contents):
            raise SystemExit(f"no store of chat {number} under {beam.DIR}: run bench.beam first")
        flt = QueryFilter(conversation_id=chat.conversation_id)
        asked = [(q, True) for q in chat.questions] + [(q, False) for q in before.questions]
        vectors = embedder.embed([q.text for q, _ in asked])
        for j, ((q, own), v) in enumerate(zip(asked, vectors, strict=True)):
            for c in candidates(memory, q.text, v, flt):
                n = c.pop("node")
                label = "other conversation"
                if own:
                    folded = beam.fold(n.text)
                    label = (
                        "evidence" if any(beam.present(folded, sigs[e]) for e in q.evidence) else "same conversation"
                    )
                out.append({**c, "q": f"{number}/{j}", "conversation": number, "type": q.type, "label": label})
        memory.close()
    return out


def passes(c: dict, meaning: float, words: float) -> bool:
    """The floor rule measured: close in meaning (cosine >= meaning), or else a strong enough score (>= words)."""
    return bool(c["cosine"] >= meaning or c["score"] >= words)


def percentiles(values: list[float]) -> str:
    if not values:
        return "-"
    p = np.percentile(values, [5, 25, 50, 75, 95])
    return " / ".join(f"{x:.2f}" for x in p)


def distribution(rows: list[dict]) -> list[str]:
    """Markdown rows: per label, the count and the 5/25/50/75/95th percentiles of score, cosine, text strength."""
    lines = []
    for label in LABELS:
        got = [r for r in rows if r["label"] == label]
        lines.append(
            f"| {label} | {len(got)} | {percentiles([r['score'] for r in got])} | "
            f"{percentiles([r['cosine'] for r in got])} | {percentiles([r['words'] for r in got])} |"
        )
    return lines


def grid(rows: list[dict]) -> dict[str, dict[str, float]]:
    """{'meaning/words': {evidence, other, questions}}: shares of evidence and other-conversation candidates
    passing, and of questions keeping at least one evidence candidate among those that had one."""
    out: dict[str, dict[str, float]] = {}
    ev = [r for r in rows if r["label"] == "evidence"]
    other = [r for r in rows if r["label"] == "other conversation"]
    asked = {r["q"] for r in ev}
    for m in MEANING:
        for w in WORDS:
            kept = {r["q"] for r in ev if passes(r, m, w)}
            out[f"{m}/{w}"] = {
                "evidence": round(sum(passes(r, m, w) for r in ev) / max(1, len(ev)), 3),
                "other": round(sum(passes(r, m, w) for r in other) / max(1, len(other)), 3),
                "questions": round(len(kept) / max(1, len(asked)), 3),
            }
    return out


def markdown(results: dict, command: str) -> str:
    lines = ["## Relevance floor: scores of what answers and of what does not", "", common.header(command)]
    lines.append(
        "Candidates: the top 33 hybrid results (a 1000-token block's) of each question; LoCoMo asked in one "
        "namespace of the 6 dev conversations without a filter, BEAM in each chat's store with its own questions "
        "and the previous chat's (`other conversation`). Each cell: 5th / 25th / median / 75th / 95th percentile."
    )
    for name, part in results["parts"].items():
        lines += [
            "",
            f"### {name}",
            "",
            "| label | candidates | hybrid score | cosine | text strength |",
            "| --- | --- | --- | --- | --- |",
            *part["distribution"],
            "",
            "Floors (a candidate passes at cosine >= meaning, or else hybrid score >= words): share of evidence "
            "candidates kept / of other-conversation candidates kept / of questions keeping an evidence "
            "candidate, on the tuning half ; the held-out half.",
            "",
            "| meaning \\ words | " + " | ".join(str(w) for w in WORDS) + " |",
            "| --- " * (len(WORDS) + 1) + "|",
        ]
        for m in MEANING:
            cells = []
            for w in WORDS:
                a, b = part["tune"][f"{m}/{w}"], part["held_out"][f"{m}/{w}"]
                cells.append(
                    f"{a['evidence']:.2f}/{a['other']:.2f}/{a['questions']:.2f} ; "
                    f"{b['evidence']:.2f}/{b['other']:.2f}/{b['questions']:.2f}"
                )
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def part(rows: list[dict], tune: Collection[object]) -> dict:
    """One dataset's report: the score distribution of its candidates, and the grid of floors on the
    conversations floors were tuned on (`tune`) and on the others, held out."""
    split: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        split["tune" if r["conversation"] in tune else "held_out"].append(r)
    return {
        "distribution": distribution(rows),
        "tune": grid(split["tune"]),
        "held_out": grid(split["held_out"]),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=dataset.DATA, help="the LoCoMo file (locomo_dev.json)")
    parser.add_argument("--beam", type=Path, default=None, help="BEAM chats/100K (stores under bench/out/beam)")
    parser.add_argument("--limit", type=int, default=None, help="LoCoMo: the first N questions per conversation")
    parser.add_argument("--out", type=Path, default=common.OUT / "floor.json")
    args = parser.parse_args(argv)
    DIR.mkdir(parents=True, exist_ok=True)
    embedder = CachingEmbedder(LocalEmbedder(threads=2), common.OUT / "embeddings.sqlite")
    t0 = time.perf_counter()
    parts: dict[str, dict] = {}
    rows = locomo(dataset.load(args.data), embedder, args.limit)
    parts["LoCoMo dev, one namespace, no filter"] = part(rows, TUNE_LOCOMO)
    if args.beam is not None:
        brows = beam_candidates(args.beam, embedder, range(11, 21))
        parts["BEAM 100K chats 11-20, each chat's store"] = part(brows, TUNE_BEAM)
    embedder.release()
    results = {"parts": parts, "elapsed_s": round(time.perf_counter() - t0, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results))
    command = ".venv/bin/python -m bench.floor" + (f" --beam {args.beam}" if args.beam else "")
    command += f" --limit {args.limit}" if args.limit else ""
    text = markdown(results, command)
    print(text)
    if args.data == dataset.DATA and not args.limit:  # a check with --limit leaves RESULTS as it is
        common.write_section("floor", text)
        print(f"wrote {common.RESULTS}")


if __name__ == "__main__":
    main()
