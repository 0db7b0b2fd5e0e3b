"""Recall parity across providers: the same LoCoMo memories on local (SQLite), postgres (PostgreSQL + pgvector from
the pgserver wheel) and pinecone (the needledb emulator), both started here on 127.0.0.1 as the tests do; the same
questions, the same evidence measure as bench/context.py, side by side from one run.

Run: `.venv/bin/python -m bench.parity` (`--providers local,postgres` for fewer; `--data` names the LoCoMo file;
`--limit N` asks only the first N questions).

For each provider: the 6 LoCoMo dev conversations are remembered one session per call (bench/common.py
`ingest`, MiniLM through the on-disk embedding cache, so every provider stores the same vectors); then for each
question with evidence, at budgets 250 / 500 / 1000 / 2000: `/query` (default mode, top 40, filtered to the
conversation) cut at the budget, and the `/context` block (scoped to the conversation, recent turns off, as
bench/context.py's `context` row). An evidence turn counts as found when its text is inside what comes back.
Also: the share of questions whose /query results (ids aside: conversation, level, position, score) are exactly
the embedded store's. Results: the `parity` section of bench/RESULTS.md; every number in bench/out/parity.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import common, dataset
from bench.cache import CachingEmbedder
from bench.context import found, last_time, turns
from datastore.factory import open_memory
from datastore.memory import Memory
from models.api import Query, QueryFilter
from models.context import ContextRequest
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from services.tokens import count_tokens

BUDGETS = (250, 500, 1000, 2000)
TOP_K = 40
NS = "parity"
DIR = common.OUT / "parity"
PROVIDERS = ("local", "postgres", "pinecone")


@contextmanager
def opened(provider: str, embedder: CachingEmbedder) -> Iterator[Memory]:
    """A fresh, empty store of `provider` (its loopback service started and stopped here)."""
    if provider == "local":
        db = DIR / "local.db"
        yield common.open_store(common.bench_settings(db), embedder)
        return
    from loopback.servers import Needle, Postgres

    if provider == "postgres":
        pg = Postgres().start()
        try:
            settings = common.bench_settings(DIR / "unused.db", datastore="postgres", postgres_url=pg.create_database())
            store = open_memory(settings, embedder, ExtractiveSummariser())
            try:
                yield store
            finally:
                store.close()
        finally:
            pg.stop()
        return
    needle = Needle().start()
    try:
        settings = common.bench_settings(
            DIR / "unused.db", datastore="pinecone", pinecone_api_key="x", pinecone_host=needle.host
        )
        store = open_memory(settings, embedder, ExtractiveSummariser())
        try:
            yield store
        finally:
            store.close()
    finally:
        needle.stop()


def measure(store: Memory, samples: list[dict], limit: int | None) -> dict:
    """Evidence share of /query and /context per budget, and each question's /query results (for parity)."""
    t0 = time.perf_counter()
    common.ingest(store, samples, NS)
    ingest_s = time.perf_counter() - t0
    texts = {s["sample_id"]: turns(s) for s in samples}
    ends = {s["sample_id"]: last_time(s) for s in samples}
    questions = [q for s in samples for q in dataset.questions(s, s["sample_id"])][:limit]
    shares: dict[str, dict[int, list[float]]] = {"query": {b: [] for b in BUDGETS}, "context": {b: [] for b in BUDGETS}}
    ranked: list[list[tuple]] = []
    t0 = time.perf_counter()
    for i, q in enumerate(questions):
        flt = QueryFilter(conversation_id=q.conversation_id)
        res = store.reader.query(NS, [Query(query=q.text, top_k=TOP_K, filter=flt)]).results[0].results
        positions = {n.id: n.position for n in store.storage.get_nodes(NS, [r.id for r in res])}
        ranked.append([(r.conversation_id, r.level, positions.get(r.id), round(r.score, 5)) for r in res])
        tx = texts[q.conversation_id]
        for b in BUDGETS:
            kept, used = [], 0
            for r in res:
                n = count_tokens(r.text)
                if used + n > b:
                    break
                kept.append(r.text)
                used += n
            shares["query"][b].append(found("\n".join(kept), q.evidence, tx))
            request = ContextRequest(
                conversation_id=q.conversation_id,
                query=q.text,
                budget_tokens=b,
                now=ends[q.conversation_id],
                all_conversations=False,
                recent=False,
            )
            ctx = store.context.assemble(NS, request)
            shares["context"][b].append(found(ctx.context, q.evidence, tx))
        if i % 200 == 0:
            print(f"  {store.name}: {i}/{len(questions)} questions, {time.perf_counter() - t0:.0f} s", flush=True)
    return {
        "n_questions": len(questions),
        "store": store.storage.counts(NS),
        "ingest_s": round(ingest_s, 1),
        "questions_s": round(time.perf_counter() - t0, 1),
        "share": {k: {b: round(sum(v) / len(v), 4) for b, v in per.items()} for k, per in shares.items()},
        "ranked": ranked,
    }


def markdown(results: dict, command: str) -> str:
    lines = [
        "## Recall parity across providers (LoCoMo dev)",
        "",
        common.header(command),
        f"- load average (1 min) {results['load_before']:.2f} before, {results['load_after']:.2f} after; the "
        "machine is shared with other developers' jobs",
        "",
        "Evidence share (bench/context.py's measure): `/query` = default mode, top 40 filtered to the conversation, "
        "cut at the budget; `/context` = the block scoped to the conversation, recent turns off. `same /query` = "
        "share of questions whose /query results (conversation, level, position, score to 1e-5) equal the "
        "embedded store's.",
        "",
        "| provider | /query @"
        + " / ".join(map(str, BUDGETS))
        + " | /context @"
        + " / ".join(map(str, BUDGETS))
        + " | same /query as local | questions | ingest s | questions s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results["providers"].items():
        lines.append(
            f"| {name} | "
            + " / ".join(f"{r['share']['query'][b]:.3f}" for b in BUDGETS)
            + " | "
            + " / ".join(f"{r['share']['context'][b]:.3f}" for b in BUDGETS)
            + f" | {r.get('same_as_local', '-')} | {r['n_questions']} | {r['ingest_s']} | {r['questions_s']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.parity", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=dataset.DATA, help="the LoCoMo file (locomo_dev.json)")
    parser.add_argument("--providers", default=",".join(PROVIDERS), help="comma-separated, local first")
    parser.add_argument("--limit", type=int, default=None, help="ask only the first N questions")
    args = parser.parse_args(argv)
    DIR.mkdir(parents=True, exist_ok=True)
    samples = dataset.load(args.data)
    embedder = CachingEmbedder(LocalEmbedder(threads=2), common.OUT / "embeddings.sqlite")
    results: dict = {"load_before": os.getloadavg()[0], "providers": {}}
    for provider in args.providers.split(","):
        with opened(provider, embedder) as store:
            results["providers"][provider] = measure(store, samples, args.limit)
        print(provider, json.dumps(results["providers"][provider]["share"]), flush=True)
    embedder.release()
    local = results["providers"].get("local")
    for r in results["providers"].values():
        if local is not None:
            same = sum(a == b for a, b in zip(r["ranked"], local["ranked"], strict=True))
            r["same_as_local"] = round(same / max(1, len(r["ranked"])), 4)
    results["load_after"] = os.getloadavg()[0]
    (common.OUT / "parity.json").write_text(json.dumps(results, indent=1, default=str))
    command = ".venv/bin/python -m bench.parity" + "".join(
        f" {flag}"
        for flag, on in (
            (f"--data {args.data}", args.data != dataset.DATA),
            (f"--providers {args.providers}", args.providers != ",".join(PROVIDERS)),
            (f"--limit {args.limit}", args.limit),
        )
        if on
    )
    common.write_section("parity", markdown(results, command))
    print(f"wrote {common.RESULTS}")


if __name__ == "__main__":
    main()
