"""The `speed` section of RESULTS.md from `bench.speed.run`'s figures, with each target checked."""

from __future__ import annotations

from bench.report import _table

# (what, threshold, n or None): search-only and end-to-end p95 targets in ms at n nodes
SEARCH_P95_MS = {100_000: 5.0, 1_000_000: 40.0}
E2E_P95_MS = {100_000: 40.0, 1_000_000: 150.0}
INGEST_VS_RAW = 0.8
SUMMARISER_CALLS = 50.0


def _mark(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _growth(a: float, b: float) -> str:
    return f"x{b / a:.1f}" if a else "-"


def _index_kind(ann: object) -> str:
    """How the search ran: exact scan, the local IVF index, or a provider's own index (a name)."""
    return ann if isinstance(ann, str) else ("IVF" if ann else "exact")


def _ms(figures: dict | None) -> str:
    return f"{figures['p50']} / {figures['p95']} / {figures['p99']}" if figures else "-"


def _scale_table(points: list[dict]) -> str:
    """The latency, memory and disk table of scale points."""
    rows = []
    for p in points:
        s, e, b = p["search"], p["e2e"], p["build"]
        rows.append(
            [
                f"{p['n']:,}",
                _ms(e["default"]),
                _ms(e["dense"]),
                _ms(e.get("context")),
                e.get("first_query_s", "-"),
                _ms(s.get("hybrid_latency_ms")),
                _ms(s.get("text_latency_ms")),
                _ms(s["latency_ms"]),
                _index_kind(s.get("ann")) + f", {s.get('recall_at_5_vs_exact', 1.0)}",
                s.get("text_index_mib", "-"),
                s["cache_load_s"],
                s["peak_rss_mib"],
                e["server_peak_rss_mib"],
                b["disk_mib"],
                b["disk_bytes_per_node"],
                b["build_s"],
            ]
        )
    return _table(
        [
            "L1 nodes",
            "HTTP /query (default mode) p50/p95/p99 ms",
            "HTTP /query (dense) p50/p95/p99 ms",
            "HTTP /context p50/p95/p99 ms",
            "first /query after a restart s",
            "hybrid search-only p50/p95/p99 ms",
            "text search-only (BM25 top 50) p50/p95/p99 ms",
            "vector search-only p50/p95/p99 ms",
            "vector search, recall@5 vs exact",
            "BM25 index MiB",
            "cache load s",
            "search process peak RSS MiB",
            "server peak RSS MiB",
            "disk MiB",
            "disk bytes/node",
            "build s",
        ],
        rows,
    )


def pgvector_markdown(results: dict, header: str) -> str:
    """The pgvector scale points: provenance and the same table as the local store's."""
    return (
        "\n".join(
            [
                "## Speed on PostgreSQL + pgvector\n",
                header,
                f"- elapsed: {results['elapsed_s']} s; load average (1 min) {results['load_before']:.2f} before, "
                f"{results['load_after']:.2f} after\n",
                "PostgreSQL 16 + pgvector from the pgserver wheel, started by the benchmark on 127.0.0.1; the same "
                "synthetic nodes, queries and server as the local store's points above. Queries rank over the "
                "in-memory indexes above the providers (datastore/indexes/search.py), fed from PostgreSQL; 'cache "
                "load' and 'first /query after a restart' are a cold namespace's load from the database. 'disk' is "
                "pg_database_size. The machine is shared with other developers' jobs: latencies are upper bounds.\n",
                _scale_table(results["scale_pg"]),
            ]
        )
        + "\n"
    )


def markdown(results: dict, header: str) -> str:
    """Provenance, ingest table, scale table, growth, target checks."""
    out = [
        "## Speed\n",
        header,
        f"- elapsed: {results['elapsed_s']} s; load average (1 min) {results['load_before']:.2f} before, "
        f"{results['load_after']:.2f} after (other jobs share this machine: read latencies as upper bounds)\n",
    ]
    out.append("### Ingest (LoCoMo dev: 6 conversations, 3,435 messages, one session per remember call)\n")
    rows = []
    for r in results["ingest"]:
        levels = ", ".join(f"{k} {v}" for k, v in r["counts"].items() if k.startswith("L"))
        rows.append(
            [
                r["overlap"],
                levels,
                r["wall_s"],
                r["messages_per_s"],
                r["chunks_per_s"],
                f"{r['embedded_texts']} in {r['embed_s']} s",
                r["raw_texts_per_s"],
                f"{r['ingest_vs_raw']:.2f}",
                f"{r['summariser_calls']} ({r['summariser_s']} s)",
                r["summariser_calls_per_1000_messages"],
                r["summariser_tokens_per_1000_messages"],
            ]
        )
    out.append(
        _table(
            [
                "overlap",
                "nodes",
                "wall s",
                "messages/s",
                "chunks/s",
                "texts embedded",
                "raw embedder texts/s",
                "chunks/s ÷ raw",
                "summariser calls",
                "calls /1000 msgs",
                "tokens to summariser /1000 msgs",
            ],
            rows,
        )
    )
    out.append(
        f"\nEmbedder: local MiniLM, {results['ingest'][0]['threads']} thread(s). 'raw' embeds the same L1 "
        "chunk texts in one call. Ingest embeds more texts than it keeps chunks: each call re-embeds the "
        "open (last, growing) chunk, and summaries are embedded too.\n"
    )
    out.append("### Query latency, memory and disk (synthetic nodes in one namespace)\n")
    out.append(_scale_table(results["scale"]))
    pts = results["scale"]
    if len(pts) > 1:
        out.append("\nGrowth between points (n grows x10 each step):\n")
        rows = []
        for a, b in zip(pts, pts[1:], strict=False):
            rows.append(
                [
                    f"{a['n']:,} -> {b['n']:,}",
                    _growth(a["search"]["latency_ms"]["p50"], b["search"]["latency_ms"]["p50"]),
                    _growth(a["e2e"]["default"]["p50"], b["e2e"]["default"]["p50"]),
                    _growth(a["search"]["peak_rss_mib"], b["search"]["peak_rss_mib"]),
                    _growth(a["e2e"]["server_peak_rss_mib"], b["e2e"]["server_peak_rss_mib"]),
                    _growth(a["build"]["disk_mib"], b["build"]["disk_mib"]),
                ]
            )
        out.append(_table(["step", "search p50", "HTTP p50", "search RSS", "server RSS", "disk"], rows))
    out.append("\n### Targets\n")
    checks = []
    d = results["ingest"][0]
    checks.append(
        f"- ingest chunks/s >= {INGEST_VS_RAW} x raw embedder (default settings): "
        f"{d['ingest_vs_raw']:.2f}: {_mark(d['ingest_vs_raw'] >= INGEST_VS_RAW)}"
    )
    for r in results["ingest"]:
        v = r["summariser_calls_per_1000_messages"]
        checks.append(
            f"- summariser calls per 1000 messages <= {SUMMARISER_CALLS:.0f} (overlap {r['overlap']}): "
            f"{v}: {_mark(v <= SUMMARISER_CALLS)}"
        )
    for p in pts:
        if p["n"] in E2E_P95_MS:
            v = p["e2e"]["default"]["p95"]
            checks.append(
                f"- HTTP /query p95 <= {E2E_P95_MS[p['n']]:.0f} ms at {p['n']:,}: {v} ms: "
                f"{_mark(v <= E2E_P95_MS[p['n']])}"
            )
        if p["n"] in SEARCH_P95_MS:
            v = p["search"]["latency_ms"]["p95"]
            checks.append(
                f"- search-only p95 <= {SEARCH_P95_MS[p['n']]:.0f} ms at {p['n']:,}: {v} ms: "
                f"{_mark(v <= SEARCH_P95_MS[p['n']])}"
            )
    out.append("\n".join(checks))
    return "\n".join(out) + "\n"


def scale_markdown(results: dict, header: str) -> str:
    """The scale points alone (`--scale-only`): provenance, the table, the latency targets."""
    out = [
        "## Speed at scale (hybrid search)\n",
        header,
        f"- elapsed: {results['elapsed_s']} s; load average (1 min) {results['load_before']:.2f} before, "
        f"{results['load_after']:.2f} after (other jobs share this machine: read latencies as upper bounds)\n",
        "Synthetic L1 nodes in one namespace, rolled up into summaries as remember does (bench/synthetic.py: "
        "249 per 1,000 chunks, so the server has nothing to index while it is timed). 'hybrid search-only' is "
        "`retrieval.hybrid` (top 5, the L1 leaves) in-process, with a LoCoMo question and a random unit "
        "vector: a default /query without the embedder and HTTP. 'text search-only' is the BM25 half of it "
        "(top 50). 'cache load' loads the vectors and the BM25 index (and trains the IVF index from 50k nodes).\n",
        _scale_table(results["scale"]),
        "\n### Targets\n",
    ]
    checks = []
    for p in results["scale"]:
        if p["n"] in E2E_P95_MS:
            v = p["e2e"]["default"]["p95"]
            checks.append(
                f"- HTTP /query (hybrid) p95 <= {E2E_P95_MS[p['n']]:.0f} ms at {p['n']:,}: {v} ms: "
                f"{_mark(v <= E2E_P95_MS[p['n']])}"
            )
        if p["n"] in SEARCH_P95_MS:
            v = p["search"]["latency_ms"]["p95"]
            checks.append(
                f"- vector search-only p95 <= {SEARCH_P95_MS[p['n']]:.0f} ms at {p['n']:,}: {v} ms: "
                f"{_mark(v <= SEARCH_P95_MS[p['n']])}"
            )
    out.append("\n".join(checks))
    return "\n".join(out) + "\n"
