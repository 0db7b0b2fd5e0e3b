"""Context benchmark: how much evidence the /context block holds on LoCoMo, next to /query cut at the same budget,
and /context latency at 10k and 100k nodes.

Run: `.venv/bin/python -m bench.context` (about 10 minutes on 2 cores with a warm embedding cache; `--data` names
the LoCoMo file, `--skip-latency` / `--skip-evidence` run one half, `--variants` picks the block variants,
`--limit N` asks only the first N questions, `--budgets 500,1000` those budgets only (the section is then
not written), `--dump PATH` writes each question's evidence found per block and the blocks, as JSON lines).
`--datastore local|postgres|pinecone` runs on that provider (bench/common.py starts PostgreSQL or the needledb
emulator); several, comma-separated, run in turn and write one side-by-side table (section `context-providers`),
the provider comparison: evidence share and latency per provider, and the share of questions whose /query results
(conversation, level, position, score to 1e-5; node ids aside) are exactly the embedded store's.

1. Evidence: the 6 LoCoMo dev conversations are remembered as in bench/recall.py (tree store, default settings,
   MiniLM through the on-disk embedding cache). For each question with evidence, at budgets 250 / 500 / 1000 /
   2000 / 4000: the block `memory.context.assemble(ns, ContextRequest(conversation_id, query=question,
   budget_tokens, now=<the last session's date>, all_conversations=false, ...))` in each VARIANT (recent turns
   off, as a chat app whose own window holds them asks; on, the default request; one row per rendering choice:
   no timeline, a date on every line instead of one per day); and the `/query` results (default mode, top 40,
   filtered to the conversation) cut at the same budget (items in rank order until one does not fit, as
   bench/metrics.py cuts).
   An evidence turn counts as found when its text (whitespace folded) is inside the block, or inside the
   concatenated cut results: a summary holding the sentence verbatim counts, a paraphrase or a cut turn does not.
2. Latency: synthetic stores of 10k and 100k L1 nodes (bench/synthetic.py: 1,000 nodes per conversation, rolled
   up into summaries as remember does, and a line per message, 5,000 per conversation), `POST /context` through
   the app's in-process test client (request validation, the store and response serialisation; no network),
   one LoCoMo question and a random conversation per request, the default request (budget 2000, every
   section), sequential, after a warm-up. Reported p50 / p95 / p99.
3. One namespace (`--one-namespace`, instead of 1 and 2): a user's memory holds all their chats and a GPT asks
   without a conversation filter. The same store (reused when an earlier run left it whole), each question asked
   twice at each of `--budgets` (default 500, 1000): the conversation-scoped block of 1 (`context`) and the block
   of the whole namespace without a conversation (`ContextRequest(query, budget_tokens, now, recent=False)`, no
   conversation_id). Reported for both: evidence share, the share of the memory sections' tokens (relevant
   memories and timeline: the items' `tokens`) that come from conversations holding none of the question's
   evidence (every LoCoMo question's evidence is in its own conversation), the share of blocks holding any such
   token, and the share of blocks whose memories say "no memory about this"; on all conversations, on those the
   relevance floor was chosen on (bench/floor.py TUNE_LOCOMO) and on the held-out ones. `--limit N` asks the
   first N questions of each conversation here. Results: the `context-one-namespace` section.
Results: the `context` section of bench/RESULTS.md; every number in bench/out/context.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from bench import common, dataset, synthetic
from bench.cache import CachingEmbedder
from bench.meters import percentiles
from datastore.factory import open_memory
from datastore.memory import Memory
from models.api import DEFAULT_NAMESPACE, Query, QueryFilter, QueryResult
from models.context import NOTHING, ContextRequest
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from services.tokens import count_tokens

BUDGETS = (250, 500, 1000, 2000, 4000)
VARIANTS: dict[str, dict[str, object]] = {  # row -> the ContextRequest fields it sets
    "context": {"recent": False},
    "context+recent": {"recent": True},
    "context, no timeline": {"recent": False, "timeline": False},
    "context, a date per line": {"recent": False, "memory_template": "- [{date}, {time_ago}] {text}"},
}
TOP_K = 40
NS = "bench"
SCALES = (10_000, 100_000)
REQUESTS = 200
WARMUP = 10
DIR = common.OUT / "context"


def _fold(text: str) -> str:
    return " ".join(text.split())


def turns(sample: dict) -> dict[str, str]:
    """dia_id -> the turn's text, whitespace folded (what a chunk holds of it)."""
    conv = sample["conversation"]
    return {
        t["dia_id"]: _fold(dataset.turn_text(t))
        for k in dataset.session_keys(conv)
        for t in conv[k]
        if t.get("text", "").strip()
    }


def last_time(sample: dict) -> datetime:
    return max(m.created_at for s in dataset.sessions(sample) for m in s if m.created_at)


def found(text: str, evidence: tuple[str, ...], texts: dict[str, str]) -> float:
    """Share of the evidence turns whose text is inside `text` (folded)."""
    folded = _fold(text)
    return sum(texts[e] in folded for e in evidence) / len(evidence)


def cut_at(results: Sequence[QueryResult], tokens: dict[str, int], budget: int) -> str:
    """The results' texts in rank order, one a line, until one does not fit `budget` tokens (`tokens`: each
    result's count, by id), as bench/metrics.py cuts."""
    kept, used = [], 0
    for r in results:
        if used + tokens[r.id] > budget:
            break
        kept.append(r.text)
        used += tokens[r.id]
    return "\n".join(kept)


def held(text: str, evidence: tuple[str, ...], texts: dict[str, str]) -> list[str]:
    """The evidence turns (dia_ids) whose text is inside `text` (folded), in the question's order."""
    folded = _fold(text)
    return [e for e in evidence if texts[e] in folded]


def dump_record(q: dataset.Question) -> dict:
    """A question's record in `--dump` (filled in by `evidence`): `conversation`, `question`, `category`,
    `evidence` (dia_ids); `query`: the ids of its /query results (top TOP_K, best first); `found`: per
    `<variant>@<budget>` (and `query@<budget>`), the evidence turns held; `blocks`: per budget, the `context`
    variant's block text and its items as [section, id, kind, tokens]."""
    return {
        "conversation": q.conversation_id,
        "question": q.text,
        "category": q.category,
        "evidence": list(q.evidence),
        "query": [],
        "found": {},
        "blocks": {},
    }


def evidence(
    samples: list[dict],
    embedder: CachingEmbedder,
    variants: Sequence[str] = tuple(VARIANTS),
    limit: int | None = None,
    budgets: Sequence[int] = BUDGETS,
    dump: Path | None = None,
) -> dict:
    """Evidence share per budget and variant (those named), overall and per category (see the module doc), the
    latency of each question's /query and of the `context` variant's blocks (ms, in-process calls), and each
    question's /query results as (conversation, level, position, score) (`ranked`, compared across providers).
    limit: ask only the first N questions. budgets: those asked (tokens). dump: a JSON-lines file written with one
    record per question (`dump_record`): which evidence turns each block and each cut /query holds, and what the
    blocks show."""
    memory = common.open_store(common.bench_settings(DIR / "tree.db"), embedder)
    common.ingest(memory, samples, NS)
    counts = memory.storage.counts(NS)
    texts = {s["sample_id"]: turns(s) for s in samples}
    ends = {s["sample_id"]: last_time(s) for s in samples}
    questions = [q for s in samples for q in dataset.questions(s, s["sample_id"])][:limit]
    embedder.embed([q.text for q in questions])
    scores: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    sections: dict[str, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    token_cache: dict[str, int] = {}
    timings: dict[str, list[float]] = defaultdict(list)
    ranked: list[list[tuple]] = []
    records: list[dict] = []
    t0 = time.perf_counter()
    for i, q in enumerate(questions):
        tx = texts[q.conversation_id]
        record = dump_record(q)
        t_query = time.perf_counter()
        res = (
            memory.reader.query(
                NS, [Query(query=q.text, top_k=TOP_K, filter=QueryFilter(conversation_id=q.conversation_id))]
            )
            .results[0]
            .results
        )
        timings["query"].append((time.perf_counter() - t_query) * 1000)
        positions = {n.id: n.position for n in memory.storage.get_nodes(NS, [r.id for r in res])}
        ranked.append([(r.conversation_id, r.level, positions.get(r.id), round(r.score, 5)) for r in res])
        for r in res:
            token_cache.setdefault(r.id, count_tokens(r.text))
        record["query"] = [r.id for r in res]
        for b in budgets:
            kept = cut_at(res, token_cache, b)
            scores["query"][b].append(found(kept, q.evidence, tx))
            record["found"][f"query@{b}"] = held(kept, q.evidence, tx)
            for variant in variants:
                fields = VARIANTS[variant]
                t_context = time.perf_counter()
                ctx = memory.context.assemble(
                    NS,
                    ContextRequest.model_validate(
                        dict(
                            conversation_id=q.conversation_id,
                            query=q.text,
                            budget_tokens=b,
                            now=ends[q.conversation_id],
                            all_conversations=False,
                            **fields,
                        )
                    ),
                )
                if variant == "context":
                    timings["context"].append((time.perf_counter() - t_context) * 1000)
                assert ctx.tokens_used <= b
                scores[variant][b].append(found(ctx.context, q.evidence, tx))
                record["found"][f"{variant}@{b}"] = held(ctx.context, q.evidence, tx)
                if variant == "context":
                    record["blocks"][str(b)] = {
                        "text": ctx.context,
                        "items": [[sec.name, it.id, it.kind, it.tokens] for sec in ctx.sections for it in sec.items],
                    }
                for sec in ctx.sections:
                    sections[variant][b][sec.name] += sec.tokens_used
        records.append(record)
        if i % 200 == 0:
            print(f"  {i}/{len(questions)} questions, {time.perf_counter() - t0:.0f} s", flush=True)
    memory.close()
    if dump is not None:
        dump.write_text("".join(json.dumps(r) + "\n" for r in records))
    categories = [q.category for q in questions]
    out: dict = {"n_questions": len(questions), "store": counts, "variants": {}}
    for variant, per_budget in scores.items():
        groups: dict[str, dict[int, float]] = defaultdict(dict)
        for b, values in per_budget.items():
            by: dict[str, list[float]] = defaultdict(list)
            for v, c in zip(values, categories, strict=True):
                by["all"].append(v)
                by[str(c)].append(v)
            for k, vs in by.items():
                groups[k][b] = round(sum(vs) / len(vs), 4)
        out["variants"][variant] = {
            "groups": {k: groups[k] for k in sorted(groups, key=lambda k: (k != "all", k))},
            "mean_section_tokens": {
                b: {k: round(v / len(questions)) for k, v in sections[variant][b].items()} for b in budgets
            }
            if variant in sections
            else {},
        }
    out["n_per_category"] = {str(c): categories.count(c) for c in sorted(set(categories))}
    out["latency_ms"] = {k: percentiles(v) for k, v in timings.items()}
    out["elapsed_s"] = round(time.perf_counter() - t0, 1)
    out["ranked"] = ranked
    return out


ONE_NAMESPACE_BUDGETS = (500, 1000)
MEMORY_SECTIONS = ("relevant", "timeline")
TUNE = ("conv-26", "conv-30", "conv-41")  # the conversations the relevance floor was chosen on (bench/floor.py)


def locomo_store(samples: list[dict], embedder: CachingEmbedder) -> Memory:
    """The store of the 6 conversations in namespace NS under DIR: the one an earlier run left when it holds every
    message, else a fresh one."""
    settings = common.bench_settings(DIR / "tree.db")
    want = sum(len(s) for sample in samples for s in dataset.sessions(sample))
    if settings.local_db_path.exists():
        memory = open_memory(settings, embedder, ExtractiveSummariser())
        if memory.storage.counts(NS).get("messages", 0) == want:
            return memory
        memory.close()
    memory = common.open_store(settings, embedder)
    common.ingest(memory, samples, NS)
    return memory


def one_namespace(
    samples: list[dict], embedder: CachingEmbedder, budgets: Sequence[int], limit: int | None = None
) -> dict:
    """The scoped block and the namespace-wide block without a conversation (see the module doc, 3)."""
    memory = locomo_store(samples, embedder)
    texts = {s["sample_id"]: turns(s) for s in samples}
    ends = {s["sample_id"]: last_time(s) for s in samples}
    questions = [q for s in samples for q in dataset.questions(s, s["sample_id"])[:limit]]
    embedder.embed([q.text for q in questions])
    rows: list[dict] = []
    t0 = time.perf_counter()
    for i, q in enumerate(questions):
        for b in budgets:
            for variant, cid in (("scoped", q.conversation_id), ("one namespace", None)):
                ctx = memory.context.assemble(
                    NS,
                    ContextRequest(
                        conversation_id=cid,
                        query=q.text,
                        budget_tokens=b,
                        now=ends[q.conversation_id],
                        all_conversations=cid is None,
                        recent=False,
                    ),
                )
                items = [it for sec in ctx.sections if sec.name in MEMORY_SECTIONS for it in sec.items]
                rows.append(
                    {
                        "conversation": q.conversation_id,
                        "category": q.category,
                        "budget": b,
                        "variant": variant,
                        "found": found(ctx.context, q.evidence, texts[q.conversation_id]),
                        "tokens": sum(it.tokens for it in items),
                        "unrelated": sum(it.tokens for it in items if it.source_id != q.conversation_id),
                        "nothing": NOTHING in ctx.context,
                    }
                )
        if i % 200 == 0:
            print(f"  {i}/{len(questions)} questions, {time.perf_counter() - t0:.0f} s", flush=True)
    memory.close()
    groups = {"all": None, "tuning conversations": True, "held-out conversations": False}
    out: dict = {"n_questions": len(questions), "budgets": list(budgets), "groups": {}}
    for name, tuned in groups.items():
        picked = [r for r in rows if tuned is None or (r["conversation"] in TUNE) == tuned]
        table: dict = {}
        for b in budgets:
            for variant in ("scoped", "one namespace"):
                rs = [r for r in picked if r["budget"] == b and r["variant"] == variant]
                tokens = sum(r["tokens"] for r in rs)
                table[f"{variant} @{b}"] = {
                    "questions": len(rs),
                    "evidence": round(sum(r["found"] for r in rs) / max(1, len(rs)), 4),
                    "unrelated_share": round(sum(r["unrelated"] for r in rs) / max(1, tokens), 4),
                    "blocks_with_unrelated": round(sum(r["unrelated"] > 0 for r in rs) / max(1, len(rs)), 4),
                    "nothing": round(sum(r["nothing"] for r in rs) / max(1, len(rs)), 4),
                    "memory_tokens": round(tokens / max(1, len(rs)), 1),
                }
        out["groups"][name] = table
    out["elapsed_s"] = round(time.perf_counter() - t0, 1)
    return out


def one_namespace_markdown(results: dict, command: str) -> str:
    lines = [
        "## Context block in one namespace of every LoCoMo dev conversation, asked without a filter",
        "",
        common.header(command),
        f"{results['n_questions']} questions (bench/context.py, part 3). `scoped`: the block of the question's "
        "conversation (`all_conversations` false, recent turns off); `one namespace`: the block of the whole "
        "namespace, no conversation named, as a GPT asks. `unrelated tokens`: the share of the memory sections' "
        "tokens (relevant memories, timeline) from conversations holding none of the question's evidence; "
        "`blocks with some`: blocks holding any such token; `nothing`: blocks saying there is no memory about it.",
        "",
        "| conversations | block | evidence | unrelated tokens | blocks with some | nothing | memory tokens |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for group, table in results["groups"].items():
        for name, v in table.items():
            lines.append(
                f"| {group} | {name} | {v['evidence']:.3f} | {v['unrelated_share']:.3f} | "
                f"{v['blocks_with_unrelated']:.3f} | {v['nothing']:.3f} | {v['memory_tokens']} |"
            )
    lines += ["", f"- asked in {results['elapsed_s']} s"]
    return "\n".join(lines) + "\n"


def same_share(ranked: list[list[tuple]], reference: list[list[tuple]]) -> float:
    """Share of questions whose /query results (conversation, level, position, score) equal the reference's."""
    same = sum(a == b for a, b in zip(ranked, reference, strict=True))
    return round(same / max(1, len(ranked)), 4)


WITH_LINES = True  # the latency stores hold a line per message (bench/synthetic.py)


def latency(n: int, questions: list[str], requests: int) -> dict:
    """POST /context latency over a synthetic store of n L1 nodes (see the module doc)."""
    from server.app import create_app

    db = DIR / f"synthetic-{n}.db"
    embedder = LocalEmbedder()
    settings = common.bench_settings(db, bearer_token="bench", pending_retry_seconds=0)
    t = time.perf_counter()
    memory = common.open_store(settings, embedder)
    synthetic.fill(memory, DEFAULT_NAMESPACE, n, with_lines=WITH_LINES)
    build = time.perf_counter() - t
    sources = memory.storage.list_sources(DEFAULT_NAMESPACE)
    rng = random.Random(7)

    async def run() -> list[float]:
        app = create_app(settings, memory)
        ms: list[float] = []
        async with app.test_app() as test_app:
            client = test_app.test_client()
            for i in range(WARMUP + requests):
                body = {"conversation_id": rng.choice(sources), "query": questions[i % len(questions)]}
                t0 = time.perf_counter()
                r = await client.post("/context", json=body, headers={"Authorization": "Bearer bench"})
                elapsed = (time.perf_counter() - t0) * 1000
                assert r.status_code == 200, await r.get_data()
                if i >= WARMUP:
                    ms.append(elapsed)
        return ms

    ms = asyncio.run(run())
    memory.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return {"nodes": n, "build_s": round(build, 1), "requests": requests, "latency_ms": percentiles(ms)}


def markdown(results: dict, command: str) -> str:
    lines = ["## Context block on LoCoMo, and /context latency", "", common.header(command)]
    ev = results.get("evidence")
    if ev:
        names = dataset.CATEGORIES
        lines += [
            f"Evidence share: the fraction of a question's evidence turns whose text is inside the block (any "
            f"section; summaries count when they hold the sentence verbatim), {ev['n_questions']} questions, "
            f"store {ev['store']}. `query`: /query (default mode, top {TOP_K}) cut at the budget. `context`: "
            "the block without recent turns; `context+recent`: the default request (recent turns on); "
            "`no timeline`: relevant memories only; `a date per line`: the memory_template "
            "`- [{date}, {time_ago}] {text}` (the rendering before one date line per day).",
            "",
            "| variant | "
            + " | ".join(f"@{b}" for b in BUDGETS)
            + " | "
            + " | ".join(
                f"{c} {names[int(c)]} (n={n}) @" + "/".join(str(b) for b in BUDGETS)
                for c, n in ev["n_per_category"].items()
            )
            + " |",
            "| --- " * (1 + len(BUDGETS) + len(ev["n_per_category"])) + "|",
        ]
        for variant, v in ev["variants"].items():
            g = v["groups"]
            lines.append(
                f"| {variant} | "
                + " | ".join(f"{g['all'][b]:.3f}" for b in BUDGETS)
                + " | "
                + " | ".join(" / ".join(f"{g[c][b]:.2f}" for b in BUDGETS) for c in ev["n_per_category"])
                + " |"
            )
        lines += [
            "",
            "Mean tokens per section (context, without recent turns): "
            + "; ".join(
                f"@{b}: "
                + ", ".join(f"{k} {t}" for k, t in ev["variants"]["context"]["mean_section_tokens"][b].items())
                for b in BUDGETS
            ),
            "",
            f"- evidence part: {ev['elapsed_s']} s",
        ]
    for lat in results.get("latency", []):
        p = lat["latency_ms"]
        lines.append(
            f"- /context at {lat['nodes']:,} nodes: p50 {p['p50']} ms, p95 {p['p95']} ms, p99 {p['p99']} ms "
            f"({lat['requests']} requests, default request, budget 2000; store built in {lat['build_s']} s)"
        )
    return "\n".join(lines) + "\n"


def providers_markdown(results: dict, command: str) -> str:
    """One table of every provider run side by side: evidence share of /query and of the block (recent turns
    off) at each budget, the share of questions with the embedded store's exact /query results (`same_as_local`,
    "-" without a local run), and the per-question latency of both."""
    shown = [b for b in BUDGETS if b <= 2000]
    lines = [
        "## Context block on LoCoMo, per provider",
        "",
        common.header(command),
        "The same questions on each provider, one run: the evidence share of `/query` (default mode, top "
        f"{TOP_K}, cut at the budget) and of the `/context` block (recent turns off), as in the `context` section; "
        "`same /query as local`: the share of questions whose /query results (conversation, level, position, "
        "score to 1e-5) equal the embedded store's, in the same order. Latency: each question's /query and each "
        "block (every budget), in-process calls, ms. PostgreSQL is a pgserver cluster and Pinecone the needledb "
        "emulator, both on this machine (loopback).",
        "",
        "| provider | store | /query @"
        + " / ".join(map(str, shown))
        + " | /context @"
        + " / ".join(map(str, shown))
        + " | same /query as local | /query p50 / p95 ms | /context p50 / p95 ms |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, res in results.items():
        ev = res["evidence"]
        q, c = ev["variants"]["query"]["groups"]["all"], ev["variants"]["context"]["groups"]["all"]
        lq, lc = ev["latency_ms"]["query"], ev["latency_ms"]["context"]
        store = ", ".join(f"{k} {v}" for k, v in ev["store"].items())
        lines.append(
            f"| {name} | {store} | "
            + " / ".join(f"{q[b]:.3f}" for b in shown)
            + " | "
            + " / ".join(f"{c[b]:.3f}" for b in shown)
            + f" | {ev.get('same_as_local', '-')} | {lq['p50']} / {lq['p95']} | {lc['p50']} / {lc['p95']} |"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, samples: list[dict]) -> dict:
    """The parts `args` asks for on the provider of the enclosing `common.datastore` block."""
    results: dict = {}
    if not args.skip_evidence:
        embedder = CachingEmbedder(LocalEmbedder(threads=2), common.OUT / "embeddings.sqlite")
        results["evidence"] = evidence(samples, embedder, args.variants, args.limit, args.budgets or BUDGETS, args.dump)
        embedder.release()
        print(json.dumps(results["evidence"]["variants"], indent=1), flush=True)
    if not args.skip_latency:
        questions = [q.text for s in samples for q in dataset.questions(s, s["sample_id"])]
        random.Random(3).shuffle(questions)
        results["latency"] = [latency(n, questions, args.requests) for n in SCALES]
        print(json.dumps(results["latency"], indent=1), flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.context", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=dataset.DATA, help="the LoCoMo file (locomo_dev.json)")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-evidence", action="store_true")
    parser.add_argument("--limit", type=int, default=None, help="evidence: ask only the first N questions")
    parser.add_argument("--requests", type=int, default=REQUESTS, help="timed requests per scale point")
    parser.add_argument(
        "--one-namespace",
        action="store_true",
        help="the scoped block against the namespace-wide block without a conversation (part 3 of the doc)",
    )
    parser.add_argument(
        "--budgets",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        help="budgets, comma-separated (evidence: default all of BUDGETS, and the section is written only then; "
        f"--one-namespace: default {','.join(map(str, ONE_NAMESPACE_BUDGETS))})",
    )
    parser.add_argument(
        "--dump", type=Path, default=None, help="evidence: a JSON-lines file of each question's evidence per block"
    )
    parser.add_argument(
        "--variants",
        type=lambda v: ["context"] + [x for x in v.split(",") if x != "context"],
        default=list(VARIANTS),
        help=f"block variants, comma-separated (`context` always): {', '.join(VARIANTS)}",
    )
    common.datastore_argument(parser, several=True)
    parser.add_argument("--out", type=Path, default=None, help="the JSON of every number (default under bench/out)")
    args = parser.parse_args(argv)
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown --variants {sorted(unknown)}")
    DIR.mkdir(parents=True, exist_ok=True)
    samples = dataset.load(args.data)
    if args.one_namespace:
        embedder = CachingEmbedder(LocalEmbedder(threads=2), common.OUT / "embeddings.sqlite")
        budgets = args.budgets or list(ONE_NAMESPACE_BUDGETS)
        res = one_namespace(samples, embedder, budgets, args.limit)
        embedder.release()
        (args.out or common.OUT / "context-one-namespace.json").write_text(json.dumps(res, indent=1))
        command = ".venv/bin/python -m bench.context --one-namespace"
        command += f" --budgets {','.join(map(str, budgets))}" if budgets != list(ONE_NAMESPACE_BUDGETS) else ""
        command += f" --limit {args.limit}" if args.limit else ""
        text = one_namespace_markdown(res, command)
        print(text)
        if args.data == dataset.DATA:
            common.write_section("context-one-namespace", text)
        return
    per_provider: dict[str, dict] = {}
    for name in args.datastore:
        with common.datastore(name):
            per_provider[name] = run(args, samples)
    several = len(args.datastore) > 1
    local = per_provider.get("local", {}).get("evidence")
    for res in per_provider.values():
        if local is not None and "evidence" in res:
            res["evidence"]["same_as_local"] = same_share(res["evidence"]["ranked"], local["ranked"])
    results = per_provider if several else per_provider[args.datastore[0]]
    tag = "providers" if several else ("" if args.datastore == ["local"] else args.datastore[0])
    out = args.out or common.OUT / f"context{'-' + tag if tag else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    command = ".venv/bin/python -m bench.context" + (f" --data {args.data}" if args.data != dataset.DATA else "")
    if args.datastore != ["local"]:
        command += f" --datastore {','.join(args.datastore)}"
    if args.variants != list(VARIANTS):
        command += f" --variants {','.join(args.variants)}"
    command += f" --limit {args.limit}" if args.limit else ""
    command += " --skip-latency" if args.skip_latency else ""
    if args.data != dataset.DATA or args.budgets not in (None, list(BUDGETS)):
        return  # tiny or other data: the JSON only
    if several and not args.skip_evidence:
        common.write_section("context-providers", providers_markdown(per_provider, command))
        print(f"wrote {common.RESULTS}")
    elif not several and not args.skip_evidence and not args.skip_latency:
        common.write_section("context" + (f"-{tag}" if tag else ""), markdown(results, command))
        print(f"wrote {common.RESULTS}")


if __name__ == "__main__":
    main()
