"""What a model is handed: are /query's chunks whole, dated and attributed? (issue 33's first goal)

`python -m bench.chunk_text [--data locomo_dev.json] [--limit N]`: every LoCoMo dev conversation remembered into
one store (bench/out/chunk_text.db, the default settings), every question asked through `/query`'s read path
(top 5, the default mode, filtered to its conversation), and every result's text checked against the messages it
covers (their stored sentences):

- **no date**: the text does not open with `[YYYY-MM-DD HH:MM] ` of its first message;
- **a speaker missing**: a message the chunk shows is not written `speaker: ...` with its own speaker;
- **starts (ends) inside a word / a sentence**: the text of a message the chunk shows does not start (end) where
  one of its stored sentences starts (ends); a word is cut when the character before (after) it is a letter.

Prints the counts and writes the section `chunk-text` of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import common, dataset
from bench.cache import CachingEmbedder
from datastore.memory import Memory
from models.api import Query, QueryFilter
from models.memory import StoredMessage
from services.chunking import CONTINUATION, SPEAKER_LINE
from services.embedding import LocalEmbedder

NS = "bench"
TOP_K = 5
CHECKS = (
    "no date",
    "a speaker missing",
    "starts inside a word",
    "starts inside a sentence",
    "ends inside a word",
    "ends inside a sentence",
)


def shown(text: str) -> list[tuple[str, str, str | None]]:
    """(speaker, what the line shows of the message, stamp or None) per message of a rendered chunk, in order."""
    out: list[tuple[str, str, str | None]] = []
    for line in text.rstrip("\n").split("\n"):
        m = SPEAKER_LINE.match(line)
        if m is not None and not line.startswith(CONTINUATION):
            out.append((m["speaker"], line[m.end() :], m["stamp"]))
        elif out:
            said = line.removeprefix(CONTINUATION)
            out[-1] = (out[-1][0], f"{out[-1][1]}\n{said}", out[-1][2])
    return out


def _fold(text: str) -> str:
    """`text` with every run of whitespace one space (a chunk indents a message's later lines)."""
    return " ".join(text.split())


def faults(text: str, messages: list[StoredMessage]) -> set[str]:
    """The CHECKS a chunk's `text` fails, given the messages it covers (`message_ids`, in order)."""
    found: set[str] = set()
    parts = shown(text)
    first = messages[0] if messages else None
    if first is not None and first.created_at is not None:
        if not text.startswith(f"[{first.created_at:%Y-%m-%d %H:%M}] "):
            found.add("no date")
    if [p[0] for p in parts] != [m.speaker for m in messages]:
        found.add("a speaker missing")
    for (_, said, _), m in zip(parts, messages, strict=False):
        said, body = _fold(said), _fold(m.content)
        at = body.find(said)
        if at < 0:
            found.add("starts inside a sentence")
            continue
        if not any(_fold(m.content[s.start :]).startswith(said) for s in m.sentences):
            found.add("starts inside a word" if at > 0 and body[at - 1].isalnum() else "starts inside a sentence")
        if not any(_fold(m.content[: s.end]).endswith(said) for s in m.sentences):
            end = at + len(said)
            found.add("ends inside a word" if end < len(body) and body[end].isalnum() else "ends inside a sentence")
    return found


def run(data: Path, limit: int | None) -> dict[str, object]:
    """Build the store, ask every question, count the faults of every result."""
    samples = dataset.load(data)
    memory: Memory = common.open_store(
        common.bench_settings(common.OUT / "chunk_text.db"),
        CachingEmbedder(LocalEmbedder(threads=2), common.OUT / "embeddings.sqlite"),
    )
    common.ingest(memory, samples, NS)
    questions = [q for s in samples for q in dataset.questions(s, s["sample_id"])][:limit]
    counts = dict.fromkeys(CHECKS, 0)
    results = 0
    for q in questions:
        query = Query(query=q.text, top_k=TOP_K, filter=QueryFilter(conversation_id=q.conversation_id))
        for r in memory.reader.query(NS, [query]).results[0].results:
            if r.level != 1:
                continue
            results += 1
            held = {m.id: m for m in memory.storage.messages(NS, r.conversation_id or "")}
            for fault in faults(r.text, [held[i] for i in r.message_ids if i in held]):
                counts[fault] += 1
    memory.close()
    return {"questions": len(questions), "results": results, "counts": counts}


def markdown(out: dict[str, object], command: str) -> str:
    """The RESULTS section."""
    counts = out["counts"]
    assert isinstance(counts, dict)
    n = max(1, int(str(out["results"])))
    rows = "\n".join(f"| {k} | {v} | {v / n:.1%} |" for k, v in counts.items())
    return (
        f"## What /query hands a model: whole, dated, attributed chunks\n\n{common.header(command)}\n"
        f"LoCoMo dev, {out['questions']} questions, top {TOP_K} (default mode), {out['results']} chunk results "
        "checked against the sentences stored with their messages (bench/chunk_text.py).\n\n"
        f"| fault | results | share |\n| --- | --- | --- |\n{rows}\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=dataset.DATA, help="the LoCoMo file (locomo_dev.json)")
    parser.add_argument("--limit", type=int, default=None, help="ask only the first N questions")
    args = parser.parse_args(argv)
    out = run(args.data, args.limit)
    print(out)
    if args.limit is None:
        common.write_section("chunk-text", markdown(out, "python -m bench.chunk_text"))


if __name__ == "__main__":
    main()
