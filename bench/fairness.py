"""Fairness: one caller's bulk ingest must not stall another caller's queries (issue 13, item 1).

A real `python -m server.main` (local store, local embedder, extractive summaries). A reader namespace
holds one
LoCoMo conversation (remembered with `wait: true`). First the reader's query latency is measured on the idle
server (`--queries` top_k=3 queries, one after another); then two bulk callers, each in its own namespace, send
`--bulk-calls` remember calls of ~110 KB (10 messages of ~11,000 characters) while the reader keeps querying
until the bulk backlog is indexed (or `--max-seconds`). Reported: the reader's p50/p95 idle and under load (target:
p95 under load <= 3x idle), the bulk callers' remember latency and statuses (202 stored, 429 over
MAX_PENDING_TOKENS), and how long the bulk backlog took to index.

    .venv/bin/python -m bench.fairness [--bulk-calls 2] [--queries 40] [--write-results]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bench import dataset
from bench.backlog import read_work
from bench.common import header, write_section
from bench.load import TOKEN, Server

AUTH = {"Authorization": f"Bearer {TOKEN}"}
WORDS = (
    "harbour lantern orchid granite meadow violin compass saffron glacier ember quarry willow beacon "
    "thistle copper falcon juniper marble nectar pebble"
).split()


def bulk_body(caller: int, call: int, rng: random.Random, chars: int = 11_000) -> dict:
    """~110 KB: 10 messages of ~`chars` characters of varied prose (so chunks and embeddings are real work)."""
    messages = []
    for j in range(10):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars:
            words += [rng.choice(WORDS) for _ in range(rng.randint(6, 14))] + ["and", "then."]
        messages.append({"id": f"b{caller}-{call}-{j}", "speaker": ("Ann", "Bob")[j % 2], "content": " ".join(words)})
    return {"namespace": f"bulk-{caller}", "conversation_id": f"import-{caller}-{call}", "messages": messages}


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else float("nan")


async def bench(args: argparse.Namespace) -> dict:
    samples = dataset.load(Path(args.data))
    questions = [q["question"] for q in samples[0]["qa"]][:200]
    folder = Path(tempfile.mkdtemp(prefix="pyramind-fairness-"))
    server = Server(folder, args.embed_threads, {"MAX_MESSAGE_CHARS": "32000"})
    rng = random.Random(7)
    try:
        await server.wait_ready()
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=300) as http:
            for session in dataset.sessions(samples[0]):
                body = {
                    "namespace": "reader",
                    "conversation_id": samples[0]["sample_id"],
                    "wait": True,
                    "messages": [m.model_dump(mode="json", exclude_none=True) for m in session],
                }
                (await http.post("/remember", json=body)).raise_for_status()

            async def query(i: int) -> float:
                t = time.perf_counter()
                r = await http.post(
                    "/query",
                    json={"namespace": "reader", "queries": [{"query": questions[i % len(questions)], "top_k": 3}]},
                )
                r.raise_for_status()
                return (time.perf_counter() - t) * 1000

            for i in range(5):  # warm up
                await query(i)
            idle = [await query(i) for i in range(args.queries)]

            bulk_ms: list[float] = []
            statuses: dict[int, int] = {}

            async def bulk(caller: int) -> None:
                for call in range(args.bulk_calls):
                    body = bulk_body(caller, call, rng)
                    t = time.perf_counter()
                    r = await http.post("/remember", json=body)
                    bulk_ms.append((time.perf_counter() - t) * 1000)
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

            t0 = time.monotonic()
            bulks = [asyncio.create_task(bulk(c)) for c in range(2)]
            loaded: list[float] = []
            i = 0
            indexed_after = None
            while time.monotonic() - t0 < args.max_seconds:
                loaded.append(await query(i))
                i += 1
                if all(b.done() for b in bulks) and read_work(folder / "pyramind.db").unchunked == 0:
                    indexed_after = time.monotonic() - t0
                    break
            await asyncio.gather(*bulks)
            work = read_work(folder / "pyramind.db")
    finally:
        server.stop()
    shutil.rmtree(folder, ignore_errors=True)
    return {
        "idle_p50": pct(idle, 50),
        "idle_p95": pct(idle, 95),
        "loaded_p50": pct(loaded, 50),
        "loaded_p95": pct(loaded, 95),
        "loaded_max": round(max(loaded), 1),
        "loaded_n": len(loaded),
        "bulk_p50": pct(bulk_ms, 50),
        "bulk_max": round(max(bulk_ms), 1),
        "statuses": statuses,
        "indexed_after_s": None if indexed_after is None else round(indexed_after, 1),
        "chunks": work.chunks,
    }


def markdown(r: dict, args: argparse.Namespace, command: str) -> str:
    ratio = r["loaded_p95"] / r["idle_p95"]
    indexed = (
        f"{r['indexed_after_s']} s"
        if r["indexed_after_s"] is not None
        else f"not within {args.max_seconds:g} s (queries measured until then)"
    )
    return (
        "## Fairness: a reader's queries while two callers bulk-ingest\n\n"
        + header(command)
        + f"\nTwo callers each send {args.bulk_calls} remember calls of ~110 KB (10 messages of ~11,000 characters) "
        "into their own namespace while a third queries its own (top_k 3, one query after another).\n\n"
        "| measure | value | target |\n|---|---|---|\n"
        f"| reader query p50 / p95, idle | {r['idle_p50']} / {r['idle_p95']} ms | |\n"
        f"| reader query p50 / p95 / max during the ingest ({r['loaded_n']} queries) | {r['loaded_p50']} / "
        f"{r['loaded_p95']} / {r['loaded_max']} ms | p95 <= 3x idle |\n"
        f"| ratio p95 loaded / idle | {ratio:.1f}x | <= 3x ({'met' if ratio <= 3 else 'MISSED'}) |\n"
        f"| bulk remember p50 / max (statuses) | {r['bulk_p50']} / {r['bulk_max']} ms ({r['statuses']}) | |\n"
        f"| bulk backlog indexed after | {indexed} ({r['chunks']} chunks in the store) | |\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bulk-calls", type=int, default=2, help="~110 KB remember calls per bulk caller")
    ap.add_argument("--queries", type=int, default=40, help="idle queries measured")
    ap.add_argument("--max-seconds", type=float, default=240.0, help="longest the loaded phase runs")
    ap.add_argument("--embed-threads", type=int, default=1)
    ap.add_argument("--data", default=str(dataset.DATA), help="LoCoMo JSON")
    ap.add_argument("--write-results", action="store_true", help="write the section of bench/RESULTS.md")
    args = ap.parse_args()
    r = asyncio.run(bench(args))
    text = markdown(r, args, f"python -m bench.fairness --bulk-calls {args.bulk_calls} --queries {args.queries}")
    print(text)
    if args.write_results:
        write_section("fairness", text)


if __name__ == "__main__":
    main()
