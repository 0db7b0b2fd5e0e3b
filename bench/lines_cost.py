"""What the lines (issue 25, item 1: each message's lead, a level-0 node with its own embedding) cost at ingest.

Each conversation is remembered into a fresh local store twice, with lines and without (`TreeBuilder.lines`
patched to make none: the tree of the commit before lines), alternating which goes first, with the real local
MiniLM embedder and no embedding cache (a cache would hide the chunks' cost and not the lines'). Measured per
variant: ingest seconds (wall), seconds inside the embedder, texts embedded and their cl100k tokens (the
embedding work, independent of the machine's load). Sources: BEAM chats (`--data`, `--chats`, one remember per
session as bench.beam does) and LoCoMo conversations (`--locomo N`, one remember per session).

    .venv/bin/python -m bench.lines_cost --data /work/beam/chats/100K --chats 11 --locomo 1 [--write-results]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import numpy as np

from bench import beam, common, dataset
from bench.meters import CountingEmbedder
from datastore.write.build import TreeBuilder
from models.api import Message, RememberRequest
from services.embedding import Embedder, LocalEmbedder
from services.tokens import count_tokens

SECTION = "lines-cost"


class _Work(CountingEmbedder):
    """CountingEmbedder that also counts the cl100k tokens of the texts it embeds."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.tokens = 0

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        self.tokens += sum(count_tokens(t) for t in texts)
        return super().embed(texts, bulk=bulk)


@contextmanager
def lines_off() -> Iterator[None]:
    """TreeBuilder.lines makes no line while inside."""
    original = TreeBuilder.lines
    TreeBuilder.lines = lambda self, *a, **k: []  # type: ignore[method-assign]
    try:
        yield
    finally:
        TreeBuilder.lines = original  # type: ignore[method-assign]


def ingest(sessions: list[list[Message]], cid: str, embedder: LocalEmbedder, lines: bool) -> dict:
    """Remember `sessions` (one call each) into a fresh local store; the measures of the run."""
    folder = Path(tempfile.mkdtemp(prefix="lines-cost-"))
    work = _Work(embedder)
    memory = common.open_store(common.bench_settings(folder / "lines.db"), work)
    try:
        t0 = time.perf_counter()
        with lines_off() if not lines else _nothing():
            for session in sessions:
                memory.writer.remember("bench", RememberRequest(conversation_id=cid, messages=session))
        wall = time.perf_counter() - t0
        counts = memory.storage.counts("bench")
    finally:
        memory.close()
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "ingest_s": round(wall, 2),
        "embed_s": round(work.seconds, 2),
        "texts": work.texts,
        "tokens": work.tokens,
        "lines": counts.get("L0", 0),
        "chunks": counts.get("L1", 0),
    }


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def compare(name: str, sessions: list[list[Message]], embedder: LocalEmbedder, rounds: int) -> dict:
    """Both variants `rounds` times, alternating which goes first; the median of each measure."""
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for r in range(rounds):
        for lines in (r % 2 == 0, r % 2 != 0):
            runs[lines].append(ingest(sessions, name, embedder, lines))
            print(f"{name} lines={'on' if lines else 'off'}: {runs[lines][-1]}", flush=True)

    def median(lines: bool, key: str) -> float:
        return float(np.median([run[key] for run in runs[lines]]))

    out: dict = {"messages": sum(len(s) for s in sessions)}
    for key in ("ingest_s", "embed_s", "texts", "tokens", "lines", "chunks"):
        out[key] = (round(median(False, key), 1), round(median(True, key), 1))
    return out


def markdown(rows: dict[str, dict], command: str) -> str:
    """The RESULTS.md section."""

    def pct(pair: tuple[float, float]) -> str:
        return f"{100 * (pair[1] - pair[0]) / pair[0]:+.0f}%" if pair[0] else "n/a"

    out = [
        "## Lines: what each message's lead costs at ingest (issue 25, item 1)",
        "",
        common.header(command),
        "Each conversation remembered into a fresh local store with lines and without (`TreeBuilder.lines` making",
        "none), alternating, real MiniLM embedder, no embedding cache; medians over the rounds. `tokens`: cl100k",
        "tokens of the texts embedded (the embedding work, whatever the machine's load); seconds are wall time on a",
        "shared machine, upper bounds.",
        "",
        "| conversation | messages | lines | chunks | texts off → on | tokens off → on | embed s off → on | "
        "ingest s off → on |",
        "| --- " * 8 + "|",
    ]
    for name, r in rows.items():
        out.append(
            f"| {name} | {r['messages']} | {r['lines'][1]:.0f} | {r['chunks'][1]:.0f} | "
            f"{r['texts'][0]:.0f} → {r['texts'][1]:.0f} | {r['tokens'][0]:,.0f} → {r['tokens'][1]:,.0f} "
            f"({pct(r['tokens'])}) | {r['embed_s'][0]} → {r['embed_s'][1]} ({pct(r['embed_s'])}) | "
            f"{r['ingest_s'][0]} → {r['ingest_s'][1]} ({pct(r['ingest_s'])}) |"
        )
    return "\n".join(out)


def _beam_sessions(folder: Path, number: int) -> list[list[Message]]:
    return beam.load_chat(folder, number).sessions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lines_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="BEAM repository root, or its chats/100K folder")
    parser.add_argument("--chats", default="11", help="BEAM chat numbers, e.g. 11 or 11-13")
    parser.add_argument("--locomo", type=int, default=1, help="how many LoCoMo dev conversations")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each variant (alternating)")
    parser.add_argument("--write-results", action="store_true", help="write the section of bench/RESULTS.md")
    args = parser.parse_args(argv)
    embedder = LocalEmbedder(threads=2)
    sources: list[tuple[str, Callable[[], list[list[Message]]]]] = []
    for sample in dataset.load()[: args.locomo]:
        sources.append((f"LoCoMo {sample['sample_id']}", partial(dataset.sessions, sample)))
    if args.data is not None:
        folder = beam.chats_folder(args.data)
        for number in beam.parse_chats(args.chats):
            sources.append((f"BEAM 100K chat {number}", partial(_beam_sessions, folder, number)))
    rows = {}
    try:
        embedder.embed(["warm up"])
        for name, load in sources:
            rows[name] = compare(name, load(), embedder, args.rounds)
    finally:
        embedder.close()
    text = markdown(rows, "python -m bench.lines_cost " + " ".join(sys.argv[1:] if argv is None else argv))
    print(text)
    if args.write_results:
        common.write_section(SECTION, text)


if __name__ == "__main__":
    main()
