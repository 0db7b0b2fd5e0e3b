"""Recall benchmark: leaf-grounded evidence recall on LoCoMo under token budgets, per retrieval variant.

Run: `.venv/bin/python -m bench.recall` (about 10 minutes on 2 cores with a cold embedding cache, less warm);
`--datastore local|postgres|pinecone` builds the stores on that provider (bench/common.py starts PostgreSQL or the
needledb emulator), `--data` names another LoCoMo file (then only the JSON is written).

Each of the 6 LoCoMo dev conversations is remembered through the real pipeline (`remember_sync`, one session
per call, in time order, message id = dia_id, created_at = the session's date) into its own conversation;
every `qa` question with resolvable evidence is asked through `query_sync` with a filter on its conversation.
Variants differ in the store's settings (overlap, tree or flat) and the query's retrieval mode; all use the
same local MiniLM embedder, wrapped in an on-disk cache (bench/out/embeddings.sqlite) so that identical texts
are embedded once across variants and runs. Results: bench/RESULTS.md (section `recall`), bench/recall.png,
and every number in bench/out/recall.json.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import common, dataset, metrics, report
from bench.cache import CachingEmbedder
from datastore.memory import Memory
from models.api import Query, QueryFilter
from models.settings import Settings
from services.embedding import LocalEmbedder
from services.tokens import count_tokens

BUDGETS = (250, 500, 1000, 2000)
TOP_K = 40  # enough items to fill the largest budget
NS = "bench"
DEFAULTS = Settings(_env_file=None)


@dataclass(frozen=True)
class Variant:
    """One row of the results: a store (by key of STORES) and the retrieval mode its queries use."""

    key: str
    label: str
    store: str
    mode: str


# store key -> settings overrides (chunk size is the default 200 everywhere)
STORES: dict[str, dict[str, object]] = {
    "flat0": {"chunk_overlap": 0, "max_level": 1},
    "flat": {"chunk_overlap": DEFAULTS.chunk_overlap, "max_level": 1},
    "tree": {},
    **{f"tree{ov}": {"chunk_overlap": ov} for ov in (0, 20, 40, 60) if ov != DEFAULTS.chunk_overlap},
}

OV = DEFAULTS.chunk_overlap
VARIANTS = [
    Variant("a", "(a) flat, no overlap, dense", "flat0", "dense"),
    Variant("b", f"(b) flat, overlap {OV}, dense", "flat", "dense"),
    Variant("d", "(d) BM25 over (b)'s chunks", "flat", "text"),
    Variant(
        "c", f"(c) Pyramind default: tree, overlap {OV}, {DEFAULTS.retrieval_mode}", "tree", DEFAULTS.retrieval_mode
    ),
    *[
        Variant(f"tree-{m}", f"tree, overlap {OV}, {m}", "tree", m)
        for m in ("dense", "text", "hybrid", "tree")
        if m != DEFAULTS.retrieval_mode
    ],
    *[
        Variant(f"ov{ov}", f"tree, overlap {ov}, {DEFAULTS.retrieval_mode}", f"tree{ov}", DEFAULTS.retrieval_mode)
        for ov in (0, 20, 40, 60)
        if ov != OV
    ],
]


def build(key: str, embedder: CachingEmbedder, samples: list[dict], captions: bool) -> Memory:
    """A fresh store under bench/out/recall/ with the variant's settings and every conversation remembered."""
    db = common.OUT / "recall" / f"{key}{'-captions' if captions else ''}.db"
    memory = common.open_store(common.bench_settings(db, **STORES[key]), embedder)
    common.ingest(memory, samples, NS, captions)
    return memory


def answers(memory: Memory, questions: list[dataset.Question], mode: str) -> list[list[metrics.Item]]:
    """Each question's results (top TOP_K, any level, best first) as metric items, through `query_sync`."""
    out: list[list[metrics.Item]] = []
    tokens: dict[str, int] = {}
    batch = memory.settings.max_queries
    for i in range(0, len(questions), batch):
        part = questions[i : i + batch]
        queries = [
            Query(
                query=q.text,
                top_k=TOP_K,
                mode=mode,
                filter=QueryFilter(conversation_id=q.conversation_id),
            )
            for q in part
        ]
        for res in memory.reader.query(NS, queries).results:
            items = []
            for r in res.results:
                if r.id not in tokens:
                    tokens[r.id] = count_tokens(r.text)
                items.append(metrics.Item(r.level, tokens[r.id], tuple(r.message_ids)))
            out.append(items)
    return out


def run(captions: bool = False, data: Path = dataset.DATA) -> dict:
    """Build every store, ask every question in every variant; returns {variant key: results} (see report)."""
    started = time.perf_counter()
    samples = dataset.load(data)
    questions = [q for s in samples for q in dataset.questions(s, s["sample_id"])]
    embedder = CachingEmbedder(LocalEmbedder(threads=2), common.OUT / "embeddings.sqlite")
    embedder.embed([q.text for q in questions])  # warm the cache in one batch
    results: dict = {"variants": {}, "stores": {}, "n_questions": len(questions)}
    categories = [q.category for q in questions]
    for key in STORES:
        t0 = time.perf_counter()
        memory = build(key, embedder, samples, captions)
        results["stores"][key] = {
            "settings": STORES[key],
            "counts": memory.storage.counts(NS),
            "ingest_s": round(time.perf_counter() - t0, 1),
        }
        print(f"store {key}: {results['stores'][key]}", flush=True)
        for v in (v for v in VARIANTS if v.store == key):
            t1 = time.perf_counter()
            scored = [
                metrics.score(items, q.evidence, BUDGETS)
                for items, q in zip(answers(memory, questions, v.mode), questions, strict=True)
            ]
            groups = metrics.by_category(scored, categories)
            results["variants"][v.key] = {
                "label": v.label,
                "store": v.store,
                "mode": v.mode,
                "query_s": round(time.perf_counter() - t1, 1),
                "groups": {k: asdict(g) for k, g in groups.items()},
            }
            print(f"  {v.label}: " + " ".join(f"{groups['all'].recall[b]:.3f}" for b in BUDGETS), flush=True)
        memory.close()
    results["elapsed_s"] = round(time.perf_counter() - started, 1)
    results["embedder"] = {"hits": embedder.hits, "misses": embedder.misses}
    embedder.release()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recall", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--captions",
        action="store_true",
        help="append image captions to the turns that share an image (section recall-captions)",
    )
    parser.add_argument("--data", type=Path, default=dataset.DATA, help="the LoCoMo file (locomo_dev.json)")
    common.datastore_argument(parser)
    args = parser.parse_args(argv)
    with common.datastore(args.datastore):
        results = run(args.captions, args.data)
    results["datastore"] = args.datastore
    name = (
        "recall" + ("-captions" if args.captions else "") + ("" if args.datastore == "local" else f"-{args.datastore}")
    )
    common.OUT.mkdir(parents=True, exist_ok=True)
    (common.OUT / f"{name}.json").write_text(json.dumps(results, indent=1))
    if args.data != dataset.DATA:  # tiny or other data: the JSON only
        print(f"done in {results['elapsed_s']} s; wrote {common.OUT / f'{name}.json'}")
        return
    png = common.ROOT / "bench" / f"{name.replace('-', '_')}.png"
    report.plot(results, BUDGETS, png)
    command = ".venv/bin/python -m bench.recall" + (" --captions" if args.captions else "")
    command += "" if args.datastore == "local" else f" --datastore {args.datastore}"
    common.write_section(name, report.recall_markdown(results, BUDGETS, common.header(command), png.name))
    print(f"done in {results['elapsed_s']} s; wrote {common.RESULTS} and {png}")


if __name__ == "__main__":
    main()
