"""Remember latency with a slow LLM summariser: /remember must not wait for a model.

A loopback OpenAI-compatible server (loopback/openai_server.py) answers each chat completion after `--delay`
seconds (default 2). A real `python -m server.main` (local store, local embedder, SUMMARISER=openai pointed at
the loopback) gets `--calls` remember calls of 10 LoCoMo messages each, spread over `--conversations`
conversations, open-loop at `--rate` calls per second. Measured:
- remember latency over HTTP (p50/p95/max; target p95 <= 100 ms);
- chunks: seconds after the last call until every message is in a chunk, and on the idle server afterwards the
  seconds from a remember until a text query finds its message (target <= 2 s);
- summaries: seconds from the first call until every complete group is summarised, against N x delay /
  INDEX_SUMMARY_CONCURRENCY for the N summaries made, and the most chat completions in flight at once.

    .venv/bin/python -m bench.remember_latency [--calls 100] [--rate 5] [--delay 2] [--concurrency 4]
        [--instruction-detector auto|pattern|openai] [--write-results]
"""

from __future__ import annotations

import argparse
import asyncio
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
from loopback.openai_server import LoopbackOpenAI

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def calls_from_locomo(samples: list[dict], conversations: int, calls: int, per_call: int = 10) -> list[dict]:
    """Remember bodies: each conversation's messages in order, `per_call` at a time, conversations interleaved."""
    queues = []
    for sample in samples[:conversations]:
        msgs = [m.model_dump(mode="json", exclude_none=True) for s in dataset.sessions(sample) for m in s]
        queues.append(
            [
                {"conversation_id": sample["sample_id"], "messages": msgs[i : i + per_call]}
                for i in range(0, len(msgs), per_call)
            ]
        )
    out: list[dict] = []
    while len(out) < calls and any(queues):
        for q in queues:
            if q and len(out) < calls:
                out.append(q.pop(0))
    return out


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else float("nan")


async def wait_for(check, timeout: float, every: float = 0.1) -> float | None:
    """Seconds until `check()` is true, or None after `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if await check():
            return time.monotonic() - t0
        await asyncio.sleep(every)
    return None


async def bench(args: argparse.Namespace) -> dict:
    samples = dataset.load(Path(args.data))
    bodies = calls_from_locomo(samples, args.conversations, args.calls)
    folder = Path(tempfile.mkdtemp(prefix="pyramind-remember-"))
    db = folder / "pyramind.db"
    with LoopbackOpenAI(delay=args.delay) as llm:
        server = Server(
            folder,
            args.embed_threads,
            {
                "SUMMARISER": "openai",
                "OPENAI_API_KEY": llm.api_key,
                "OPENAI_BASE_URL": llm.base_url,
                "OPENAI_MAX_RETRIES": "0",
                "OPENAI_TIMEOUT": str(args.delay * 10),
                "INDEX_SUMMARY_CONCURRENCY": str(args.concurrency),
                "INSTRUCTION_DETECTOR": args.instruction_detector,
            },
        )
        try:
            await server.wait_ready()
            async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=120) as http:
                latencies: list[float] = []
                statuses: dict[int, int] = {}

                async def one(body: dict) -> None:
                    t = time.perf_counter()
                    r = await http.post("/remember", json=body)
                    latencies.append((time.perf_counter() - t) * 1000)
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

                t_first = time.monotonic()
                tasks = []
                for i, body in enumerate(bodies):  # open loop: one call every 1/rate s, whatever the answers
                    await asyncio.sleep(max(0.0, t_first + i / args.rate - time.monotonic()))
                    tasks.append(asyncio.create_task(one(body)))
                await asyncio.gather(*tasks)
                t_last = time.monotonic()

                async def chunked() -> bool:
                    return read_work(db).unchunked == 0

                async def all_done() -> bool:
                    return read_work(db).done

                chunks_after_last = await wait_for(chunked, args.timeout)
                summaries_done = await wait_for(all_done, args.timeout)
                summaries_since_first = (time.monotonic() - t_first) if summaries_done is not None else None
                work = read_work(db)

                # on the now idle server: how long from a remember until its message is found
                searchable: list[float] = []
                for k in range(args.probes):
                    word = f"zebraprobe{k}x"
                    body = {
                        "conversation_id": f"probe-{k}",
                        "messages": [
                            {
                                "id": f"probe-{k}-{j}",
                                "speaker": "Ann",
                                "content": f"Message {j} of probe {k}: "
                                + ("the " + word + " is in the shed. " if j == 9 else "nothing to see here. "),
                            }
                            for j in range(10)
                        ],
                    }
                    t = time.monotonic()
                    await http.post("/remember", json=body)

                    async def found(word: str = word) -> bool:
                        r = await http.post("/query", json={"queries": [{"query": word, "top_k": 1, "mode": "text"}]})
                        return any(word in x["text"] for x in r.json()["results"][0]["results"])

                    if await wait_for(found, 30, every=0.02) is not None:
                        searchable.append(time.monotonic() - t)
        finally:
            server.stop()
            llm_completions, peak = llm.completions, llm.peak_concurrent
    shutil.rmtree(folder, ignore_errors=True)
    bound = work.summaries * args.delay / args.concurrency
    return {
        "calls": len(bodies),
        "statuses": statuses,
        "p50_ms": pct(latencies, 50),
        "p95_ms": pct(latencies, 95),
        "max_ms": round(max(latencies), 1),
        "chunks_after_last_s": chunks_after_last,
        "ingest_s": round(t_last - t_first, 1),
        "summaries_since_first_s": summaries_since_first,
        "summaries": work.summaries,
        "chunks": work.chunks,
        "completions": llm_completions,
        "peak_llm": peak,
        "bound_s": round(bound, 1),
        "searchable_s": [round(s, 2) for s in searchable],
    }


def markdown(r: dict, args: argparse.Namespace, command: str) -> str:
    def s(v: float | None) -> str:
        return "not within the timeout" if v is None else f"{v:.1f} s"

    ok = r["p95_ms"] <= 100
    done = r["summaries_since_first_s"]
    return (
        f"## Remember latency with a slow summariser (LLM answers after {args.delay:g} s)\n\n"
        + header(command)
        + f"\n{r['calls']} remember calls of 10 LoCoMo messages over {args.conversations} conversations at "
        f"{args.rate:g} calls/s (statuses {r['statuses']}), local embedder, INDEX_SUMMARY_CONCURRENCY="
        f"{args.concurrency}, INSTRUCTION_DETECTOR={args.instruction_detector}.\n\n"
        "| measure | value | target |\n|---|---|---|\n"
        f"| remember p50 / p95 / max | {r['p50_ms']} / {r['p95_ms']} / {r['max_ms']} ms | p95 <= 100 ms "
        f"({'met' if ok else 'MISSED'}) |\n"
        f"| every message in a chunk, after the last call | {s(r['chunks_after_last_s'])} | |\n"
        f"| idle server: remember -> found by a query | {', '.join(f'{x:.2f}' for x in r['searchable_s'])} s | "
        f"<= 2 s |\n"
        f"| all {r['summaries']} summaries, from the first call | {s(done)} (calls took {r['ingest_s']} s) | "
        f"<= N x {args.delay:g} s / {args.concurrency} = {r['bound_s']} s |\n"
        f"| chat completions / most in flight | {r['completions']} / {r['peak_llm']} | |\n\n"
        "Summaries of one conversation are made one after another (each takes the previous one as context), so "
        "the bound holds when the conversations' shares are even; the concurrency is across conversations.\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--rate", type=float, default=5.0, help="remember calls per second (open loop)")
    ap.add_argument("--conversations", type=int, default=4)
    ap.add_argument("--delay", type=float, default=2.0, help="seconds per chat completion")
    ap.add_argument("--concurrency", type=int, default=4, help="INDEX_SUMMARY_CONCURRENCY")
    ap.add_argument("--probes", type=int, default=5, help="idle remember -> searchable probes")
    ap.add_argument(
        "--instruction-detector",
        default="auto",
        choices=["auto", "pattern", "openai"],
        help="INSTRUCTION_DETECTOR (auto: the loopback model, as the summariser is openai)",
    )
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--embed-threads", type=int, default=1)
    ap.add_argument("--data", default=str(dataset.DATA), help="LoCoMo JSON")
    ap.add_argument("--write-results", action="store_true", help="write the section of bench/RESULTS.md")
    args = ap.parse_args()
    r = asyncio.run(bench(args))
    text = markdown(
        r,
        args,
        "python -m bench.remember_latency "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k in ("calls", "rate", "delay", "concurrency", "conversations", "instruction_detector")
        ),
    )
    print(text)
    if args.write_results:
        write_section("remember-latency", text)


if __name__ == "__main__":
    main()
