"""Speed benchmark: ingest throughput on LoCoMo, and query latency, memory and disk at 10k and 100k nodes.

Run: `.venv/bin/python -m bench.speed` (about 6-10 minutes on 2 cores); `--scale-1m` adds the 1M-node point
(about 15 more minutes, ~6 GB of disk under bench/out/speed/).

1. Ingest: the 6 LoCoMo dev conversations remembered one session per call through `remember_sync` with the
   offline embedder (MiniLM, the settings' threads and batch size, model loaded beforehand) and the extractive
   summariser, at the default settings and at overlap 20. Reported: messages/s and chunks/s, the embedder's
   and the summariser's share of the time, summariser calls per 1000 messages and tokens sent to it; then the
   raw embedder's throughput on the same L1 chunk texts (one call, the embedder's own batching).
2. Scale points (synthetic, see bench/synthetic.py: texts drawn from LoCoMo's vocabulary, clustered unit vectors):
   n L1 nodes in one namespace, built in a child process. Search-only latency is `memory.search.search_vector`
   (the in-memory index, top 5, no filter, random unit query vectors) in a fresh child process after the vector
   cache is loaded; its peak RSS is the store's. End-to-end latency is `POST /query` (one LoCoMo question per
   request, top 5, the default retrieval mode and then mode dense) over httpx against `create_app(settings)`
   served by hypercorn in a child process on 127.0.0.1, sequential requests after a warm-up; the server's peak
   RSS is its VmHWM.
   Search-only figures also time full-text search (`memory.search.text.search`, top 50 over L1, one LoCoMo question
   each) and hybrid retrieval (`ranking.hybrid`, top 5, the question's text with a random unit vector: the
   search work of a default /query without the embedder and HTTP), and report the BM25 index's size.
Results: the `speed` section of bench/RESULTS.md; every number in bench/out/speed.json.
`--scale-only --sizes 100000,1000000 --keep` runs only the scale points (section `speed-scale`), keeping each built
store under bench/out/speed/ and reusing it when it is there (the 1M build takes minutes). `--data` names the
LoCoMo file when it is not at the default place (it is passed on to the child processes). `--ingest-only` runs
the default ingest alone and prints its figures, among them `embedded_pieces`: the word pieces sent to the
embedder, which (unlike seconds) do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench import common, dataset, speed_report, synthetic
from bench.meters import (
    CountingEmbedder,
    CountingSummariser,
    minilm_pieces,
    peak_rss_mib,
    percentiles,
    proc_peak_rss_mib,
)
from datastore.factory import open_memory
from datastore.read import ranking
from models.api import DEFAULT_NAMESPACE, QueryFilter
from models.settings import Settings
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser

DIR = common.OUT / "speed"
TOKEN = "speed-bench-token"
SEARCHES = 300
REQUESTS = 300
DENSE_REQUESTS = 100
CONTEXT_REQUESTS = 100
WARMUP = 20


# ---------------------------------------------------------------------------------------------- ingest
def ingest(samples: list[dict], overlap: int | None) -> dict:
    """Ingest figures for one overlap (None = the default); see the module doc."""
    overrides = {} if overlap is None else {"chunk_overlap": overlap}
    settings = common.bench_settings(DIR / "ingest.db", **overrides)
    inner = LocalEmbedder(threads=settings.embed_threads, batch_size=settings.embed_batch_size)
    inner.embed(["load the model before timing"])
    embedder = CountingEmbedder(inner, minilm_pieces())
    summariser = CountingSummariser(ExtractiveSummariser())
    memory = common.open_store(settings, embedder, summariser)
    t = time.perf_counter()
    n_messages = common.ingest(memory, samples, DEFAULT_NAMESPACE)
    wall = time.perf_counter() - t
    counts = memory.storage.counts(DEFAULT_NAMESPACE)
    chunks = [
        n.text for s in samples for n in memory.storage.source_nodes(DEFAULT_NAMESPACE, s["sample_id"]) if n.level == 1
    ]
    memory.close()
    t = time.perf_counter()
    inner.embed(chunks)
    raw = time.perf_counter() - t
    return {
        "overlap": settings.chunk_overlap,
        "threads": settings.embed_threads,
        "messages": n_messages,
        "counts": counts,
        "wall_s": round(wall, 1),
        "messages_per_s": round(n_messages / wall, 1),
        "chunks_per_s": round(counts["L1"] / wall, 2),
        "embedded_texts": embedder.texts,
        "embedded_pieces": embedder.pieces,
        "embed_calls": embedder.calls,
        "embed_s": round(embedder.seconds, 1),
        "summariser_calls": summariser.calls,
        "summariser_s": round(summariser.seconds, 1),
        "summariser_calls_per_1000_messages": round(1000 * summariser.calls / n_messages, 1),
        "summariser_tokens_in": summariser.tokens_in,
        "summariser_tokens_per_1000_messages": round(1000 * summariser.tokens_in / n_messages),
        "raw_texts": len(chunks),
        "raw_s": round(raw, 1),
        "raw_texts_per_s": round(len(chunks) / raw, 2),
        "ingest_vs_raw": round((counts["L1"] / wall) / (len(chunks) / raw), 3),
    }


# ---------------------------------------------------------------------------------------------- children
def _child_argv(*args: str) -> list[str]:
    """The command line of a `python -m bench.speed` child (with the LoCoMo file this process reads)."""
    return [sys.executable, "-m", "bench.speed", "--data", str(dataset.DATA), *args]


def _child(args: list[str], timeout: float) -> dict:
    """Run `python -m bench.speed <args>` and return the JSON it prints last."""
    out = subprocess.run(
        _child_argv(*args), cwd=common.ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _settings(db: str, **overrides: object) -> Settings:
    """Settings of the benchmark store `db`: a SQLite file, or a PostgreSQL URL (then DATASTORE=postgres)."""
    if db.startswith("postgresql://"):
        return common.bench_settings(DIR / "unused.db", datastore="postgres", postgres_url=db, **overrides)
    return common.bench_settings(Path(db), **overrides)


def build_child(db: str, n: int) -> dict:
    """(child) A synthetic store of n nodes at `db` (file or PostgreSQL URL): build time, peak RSS, size."""
    if db.startswith("postgresql://"):
        memory = open_memory(_settings(db), LocalEmbedder(), ExtractiveSummariser())
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        memory = common.open_store(_settings(db), LocalEmbedder())
    t = time.perf_counter()
    synthetic.fill(memory, DEFAULT_NAMESPACE, n)
    build = time.perf_counter() - t
    if db.startswith("postgresql://"):
        with memory.storage.pool.connection() as conn:  # type: ignore[attr-defined]
            size = conn.execute("SELECT pg_database_size(current_database())").fetchone()["pg_database_size"]
    else:
        memory.storage.db.scrub()  # type: ignore[attr-defined]  # checkpoint the WAL into the file
        size = sum(Path(f"{db}{s}").stat().st_size for s in ("", "-wal", "-shm") if Path(f"{db}{s}").exists())
    memory.close()
    return {
        "build_s": round(build, 1),
        "build_peak_rss_mib": round(peak_rss_mib()),
        "disk_mib": round(size / 2**20, 1),
        "disk_bytes_per_node": round(size / n),
    }


def search_child(db: str) -> dict:
    """(child) Search-only latency over the store at `db`, and this process's peak RSS; for the local store also
    recall@5 of its search against an exact scan of the same rows. One BLAS thread, as the server runs."""
    from server.main import one_blas_thread

    one_blas_thread()  # OpenBLAS's threads on a shared machine made a 10k-row scan 40 ms instead of 1
    base_rss = peak_rss_mib()
    memory = open_memory(_settings(db), LocalEmbedder(), ExtractiveSummariser())
    queries = synthetic.unit_vectors(np.random.default_rng(1), SEARCHES + 1)
    t = time.perf_counter()
    memory.search.search_vector(DEFAULT_NAMESPACE, queries[0], 5, None)  # loads the namespace's indexes (and IVF)
    load = time.perf_counter() - t
    ms, found = [], []
    for q in queries[1:]:
        t = time.perf_counter()
        hits = memory.search.search_vector(DEFAULT_NAMESPACE, q, 5, None)
        ms.append((time.perf_counter() - t) * 1000)
        found.append({n.id for n, _ in hits})
    extra = _text_figures(memory, queries[1:])
    cache = memory.search.indexes.get(DEFAULT_NAMESPACE)
    index = cache.vectors  # exact top 5, same rows
    rows = np.flatnonzero(index.alive[: index.size])

    def exact(q: np.ndarray) -> set[str | None]:  # the node ids of the exact top 5
        return set(cache.ids.of(index.rowids[rows[np.argsort(-(index.matrix[rows] @ q))[:5]]]))

    recall = np.mean([len(f & exact(q)) / 5 for f, q in zip(found[:50], queries[1:51], strict=True)])
    memory.close()
    text_index = cache.text
    extra["provider"] = memory.name
    extra["text_index_mib"] = round(text_index.nbytes / 2**20, 1)
    extra["text_terms"] = len(text_index.vocab.terms)
    return {
        "cache_load_s": round(load, 2),
        "latency_ms": percentiles(ms),
        "peak_rss_mib": round(peak_rss_mib()),
        "python_baseline_rss_mib": round(base_rss),
        "ann": index.ann is not None,
        "recall_at_5_vs_exact": round(float(recall), 3),
        **extra,
    }


def _text_figures(memory: object, vectors: np.ndarray) -> dict:
    """Latency of full-text search (top 50 over L1, as hybrid asks) and of hybrid retrieval (top 5) over LoCoMo
    questions, each hybrid with one of `vectors` (the search work of a default /query, no embedder, no HTTP)."""
    samples = dataset.load()
    questions = [q.text for s in samples for q in dataset.questions(s, s["sample_id"])]
    random.Random(0).shuffle(questions)
    text_ms, hybrid_ms = [], []
    leaf = QueryFilter(level=1)
    for q, v in zip(questions[:SEARCHES], vectors, strict=False):
        t = time.perf_counter()
        memory.search.text.search(DEFAULT_NAMESPACE, q, ranking.POOL, leaf)  # type: ignore[attr-defined]
        text_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        ranking.hybrid(memory.search, DEFAULT_NAMESPACE, q, v, 5, None)  # type: ignore[attr-defined]
        hybrid_ms.append((time.perf_counter() - t) * 1000)
    return {"text_latency_ms": percentiles(text_ms), "hybrid_latency_ms": percentiles(hybrid_ms)}


def serve_child(db: str, port: int) -> None:
    """(child) Serve the app over the store at `db` on 127.0.0.1:port until terminated."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    from server.app import create_app
    from server.main import one_blas_thread

    one_blas_thread()  # as `pyramind serve` does
    settings = _settings(db, bearer_token=TOKEN, port=port, pending_retry_seconds=0)
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.startup_timeout = 600  # loading the embedder on a busy shared machine can take over the default 60 s
    asyncio.run(serve(create_app(settings), config))


# ---------------------------------------------------------------------------------------------- end to end
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def end_to_end(db: str | Path, questions: list[str], n: int = 0) -> dict:
    """HTTP /query latency against a server child over `db` (default mode, then dense), the first query's time
    (a cold namespace after a restart: its indexes are loaded from the store), /context latency (the default
    request, one of the `n` nodes' synthetic conversations each); server peak RSS."""
    port = _free_port()
    proc = subprocess.Popen(
        _child_argv("--serve", str(db), str(port)), cwd=common.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client:
            deadline = time.monotonic() + 180
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
                time.sleep(0.2)
            # the first query loads the namespace's vectors (and trains the IVF index from 50k nodes): minutes at 1M
            t = time.perf_counter()
            client.post("/query", json={"queries": [{"query": questions[0], "top_k": 5}]}, timeout=1200)
            out: dict[str, Any] = {"first_query_s": round(time.perf_counter() - t, 2)}
            for mode, count in ((None, REQUESTS), ("dense", DENSE_REQUESTS)):
                ms = []
                for i in range(WARMUP + count):
                    q: dict[str, object] = {"query": questions[i % len(questions)], "top_k": 5}
                    if mode:
                        q["mode"] = mode
                    t = time.perf_counter()
                    r = client.post("/query", json={"queries": [q]})
                    elapsed = (time.perf_counter() - t) * 1000
                    if r.status_code != 200:
                        raise RuntimeError(f"/query answered {r.status_code}: {r.text[:300]}")
                    if i >= WARMUP:
                        ms.append(elapsed)
                out[mode or "default"] = percentiles(ms)
            sources = [f"synthetic-{k:05d}" for k in range(max(1, -(-n // synthetic.PER_SOURCE)))]
            rng = random.Random(3)
            ms = []
            for i in range(WARMUP + CONTEXT_REQUESTS):
                body = {"conversation_id": rng.choice(sources), "query": questions[i % len(questions)]}
                t = time.perf_counter()
                r = client.post("/context", json=body)
                elapsed = (time.perf_counter() - t) * 1000
                if r.status_code != 200:
                    raise RuntimeError(f"/context answered {r.status_code}: {r.text[:300]}")
                if i >= WARMUP:
                    ms.append(elapsed)
            out["context"] = percentiles(ms)
            out["server_peak_rss_mib"] = round(proc_peak_rss_mib(proc.pid) or 0.0)
            return out
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def scale_point(n: int, questions: list[str], db: str | None = None, keep: bool = False) -> dict:
    """Build, search-only and end-to-end figures at n nodes in `db` (a PostgreSQL URL, or by default a SQLite
    file that is removed afterwards). keep: keep the SQLite file, and reuse it (with its build figures) when a
    previous run kept it."""
    db = db or str(DIR / f"scale-{n}.db")
    point: dict = {"n": n}
    figures = Path(f"{db}.build.json")
    if keep and Path(db).exists() and figures.exists():
        point["build"] = {**json.loads(figures.read_text()), "reused": True}
    else:
        point["build"] = _child(["--build", str(db), str(n)], timeout=3600)
        if keep:
            figures.write_text(json.dumps(point["build"]))
    point["search"] = _child(["--search", str(db)], timeout=3600)
    point["e2e"] = end_to_end(db, questions, n)
    if not db.startswith("postgresql://") and not keep:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    return point


def postgres_points(questions: list[str], sizes: tuple[int, ...]) -> list[dict]:
    """The scale points on the pgvector provider: PostgreSQL 16 + pgvector from the pgserver wheel, started here
    on 127.0.0.1 (the tests' fixture class) and stopped after; one fresh database per point."""
    from loopback.servers import Postgres

    pg = Postgres().start()
    try:
        points = []
        for n in sizes:
            url = pg.create_database()
            t = time.perf_counter()
            points.append(scale_point(n, questions, url))
            points[-1]["elapsed_s"] = round(time.perf_counter() - t, 1)
            print("scale (pgvector)", points[-1], flush=True)
            pg.drop_database(url)
        return points
    finally:
        pg.stop()


# ---------------------------------------------------------------------------------------------- main
def run(sizes: tuple[int, ...], ingest_too: bool = True, keep: bool = False) -> dict:
    """Every figure of the benchmark (see the module doc); the ingest figures only when `ingest_too`."""
    started = time.perf_counter()
    DIR.mkdir(parents=True, exist_ok=True)
    samples = dataset.load()
    results: dict = {"load_before": os.getloadavg()[0], "ingest": [], "scale": []}
    default_overlap = common.bench_settings(DIR / "ingest.db").chunk_overlap
    for overlap in (None, *((40,) if default_overlap != 40 else (20,))) if ingest_too else ():
        results["ingest"].append(ingest(samples, overlap))  # the default, and one other overlap
        print("ingest", results["ingest"][-1], flush=True)
    questions = [q.text for s in samples for q in dataset.questions(s, s["sample_id"])]
    random.Random(0).shuffle(questions)
    for n in sizes:
        t = time.perf_counter()
        results["scale"].append(scale_point(n, questions, keep=keep))
        results["scale"][-1]["elapsed_s"] = round(time.perf_counter() - t, 1)
        print("scale", results["scale"][-1], flush=True)
    results["load_after"] = os.getloadavg()[0]
    results["elapsed_s"] = round(time.perf_counter() - started, 1)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.speed", description=__doc__.splitlines()[0])
    parser.add_argument("--scale-1m", action="store_true", help="add the 1M-node point (~15 min more)")
    parser.add_argument("--sizes", help="scale points instead of 10000,100000 (e.g. 100000,1000000)")
    parser.add_argument(
        "--scale-only", action="store_true", help="only the scale points, no ingest figures (section speed-scale)"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the built scale stores under bench/out/speed/ and reuse those kept before",
    )
    parser.add_argument("--data", type=Path, default=dataset.DATA, help="the LoCoMo file (default: %(default)s)")
    parser.add_argument(
        "--ingest-only",
        action="store_true",
        help="only the default ingest; prints its figures (texts and word pieces embedded, seconds), writes nothing",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="only the scale points (10k and 100k, or --sizes), on the pgvector provider (~10 min)",
    )
    parser.add_argument("--build", nargs=2, metavar=("DB", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--search", metavar="DB", help=argparse.SUPPRESS)
    parser.add_argument("--serve", nargs=2, metavar=("DB", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dataset.DATA = args.data
    if args.build:
        print(json.dumps(build_child(args.build[0], int(args.build[1]))))
        return
    if args.search:
        print(json.dumps(search_child(args.search)))
        return
    if args.serve:
        serve_child(args.serve[0], int(args.serve[1]))
        return
    if args.ingest_only:
        DIR.mkdir(parents=True, exist_ok=True)
        load_before = os.getloadavg()[0]
        figures = ingest(dataset.load(), None)
        print(json.dumps({**figures, "load_before": load_before, "load_after": os.getloadavg()[0]}))
        return
    if args.postgres:
        common.OUT.mkdir(parents=True, exist_ok=True)  # a fresh clone has none: made before the minutes of work
        started = time.perf_counter()
        samples = dataset.load()
        questions = [q.text for s in samples for q in dataset.questions(s, s["sample_id"])]
        random.Random(0).shuffle(questions)
        load_before = os.getloadavg()[0]
        pg = {
            "scale_pg": postgres_points(
                questions, tuple(int(n) for n in args.sizes.split(",")) if args.sizes else (10_000, 100_000)
            ),
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "elapsed_s": round(time.perf_counter() - started, 1),
        }
        (common.OUT / "speed_pgvector.json").write_text(json.dumps(pg, indent=1))
        header = common.header(
            ".venv/bin/python -m bench.speed --postgres" + (f" --sizes {args.sizes}" if args.sizes else "")
        )
        common.write_section("speed-pgvector", speed_report.pgvector_markdown(pg, header))
        print(f"done in {pg['elapsed_s']} s; wrote {common.RESULTS}")
        return
    sizes = (
        tuple(int(n) for n in args.sizes.split(","))
        if args.sizes
        else (10_000, 100_000, *((1_000_000,) if args.scale_1m else ()))
    )
    results = run(sizes, not args.scale_only, args.keep)
    name = "speed-scale" if args.scale_only else "speed"
    (common.OUT / f"{name.replace('-', '_')}.json").write_text(json.dumps(results, indent=1))
    command = ".venv/bin/python -m bench.speed" + "".join(
        f" {flag}"
        for flag, on in (
            ("--scale-1m", args.scale_1m),
            (f"--sizes {args.sizes}", args.sizes),
            ("--scale-only", args.scale_only),
            ("--keep", args.keep),
        )
        if on
    )
    report = speed_report.scale_markdown if args.scale_only else speed_report.markdown
    common.write_section(name, report(results, common.header(command)))
    print(f"done in {results['elapsed_s']} s; wrote {common.RESULTS}")


if __name__ == "__main__":
    main()
