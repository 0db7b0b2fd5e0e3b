"""What a model is handed: are /query's chunks, the summaries and the outline's lines whole, dated and attributed?
(issue 33's first goal)

`python -m bench.chunk_text [--data locomo_dev.json] [--limit N]`: every LoCoMo dev conversation remembered into
one store (bench/out/chunk_text.db, the default settings), every question asked through `/query`'s read path
(top 5, the default mode, filtered to its conversation) and as the query of its conversation's outline (300
tokens), and every result's text, every outline line and every summary (level 2 and up) of the store checked
against the messages it shows (their stored sentences):

- **no date**: a chunk or summary does not open with `[YYYY-MM-DD HH:MM] ` of its first message; an outline line
  stands under no `[YYYY-MM-DD]` of its message;
- **a speaker missing**: a message it shows is not written `speaker: ...` with its own speaker;
- **starts (ends) inside a word / a sentence**: the text it shows of a message does not start (end) where one of
  its stored sentences starts (ends); a word is cut when the character before (after) it is a letter. An outline
  line's sentence too long for a line is cut at a word and ends with "…": that end is not counted;
- **no source**: a summary's line that none of the messages it names holds.

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
from models.outline import OutlineLine
from services.chunking import CONTINUATION, SPEAKER_LINE
from services.embedding import LocalEmbedder
from services.lines import SEPARATOR

NS = "bench"
TOP_K = 5
OUTLINE_BUDGET = 300
KINDS = ("chunks", "summaries", "outline lines")
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
        found |= cut_faults(said, m)
    return found


def cut_faults(said: str, message: StoredMessage) -> set[str]:
    """The start and end CHECKS that `said`, a text shown of `message`, fails: it must start where one of the
    message's stored sentences starts and end where one ends (whitespace folded). A text that is not one run of the
    message (a line or summary may join whole sentences with a gap, or with SEPARATOR between them) must be made of
    the message's sentences in order, else it counts as "no source"."""
    said, body = _fold(said), _fold(message.content)
    at = body.find(said)
    found: set[str] = set()
    if at < 0:
        whole = [_fold(message.content[s.start : s.end]) for s in message.sentences]
        if not any(said.startswith(w) for w in whole):
            found.add("starts inside a sentence")
        if not any(said.endswith(w) for w in whole):
            found.add("ends inside a sentence")
        return found or (set() if _made_of(said, whole) else {"no source"})
    if not any(_fold(message.content[s.start :]).startswith(said) for s in message.sentences):
        found.add("starts inside a word" if at > 0 and body[at - 1].isalnum() else "starts inside a sentence")
    if not any(_fold(message.content[: s.end]).endswith(said) for s in message.sentences):
        end = at + len(said)
        found.add("ends inside a word" if end < len(body) and body[end].isalnum() else "ends inside a sentence")
    return found


def _made_of(said: str, whole: list[str]) -> bool:
    """Whether `said` is sentences of `whole` (folded, in the message's order, gaps allowed) joined by a space or
    by SEPARATOR."""
    rest, after = said, 0
    while rest:
        rest = rest.removeprefix(SEPARATOR.strip()).strip()
        k = next((k for k in range(after, len(whole)) if whole[k] and rest.startswith(whole[k])), None)
        if k is None:
            return False
        rest, after = rest[len(whole[k]) :].strip(), k + 1
    return True


def summary_faults(text: str, held: dict[str, StoredMessage], sentence_ids: list[str]) -> set[str]:
    """The CHECKS a summary's `text` (level 2 and up) fails. It shows the sentences `sentence_ids` names
    (`<message id>:<n>`), so each line must be whole sentences of one of those messages said by the speaker it
    names, and the text must open with the date of the first of them."""
    ids = list(dict.fromkeys(i.rsplit(":", 1)[0] for i in sentence_ids))
    messages = [held[i] for i in ids if i in held]
    if not messages:
        return set()
    found: set[str] = set()
    first = messages[0].created_at
    if first is not None and not text.startswith(f"[{first:%Y-%m-%d %H:%M}] "):
        found.add("no date")
    for speaker, said, _ in shown(text):
        best = min((cut_faults(said, m) for m in messages if m.speaker == speaker), key=len, default={"no source"})
        if best and any(not cut_faults(said, m) for m in messages if m.speaker != speaker):
            best = {"a speaker missing"}  # another speaker's words under this name
        found |= best
    return found


def line_faults(line: OutlineLine, rendered: str, held: dict[str, StoredMessage]) -> set[str]:
    """The CHECKS an outline line fails: it names its message's speaker, stands under its message's date in the
    rendered outline, and each part (a lead, and a long message's point after SEPARATOR) is whole sentences of the
    message; a part that ends with "…" is one sentence longer than a line allows, cut at a word, and says so."""
    message = held.get(line.message_id)
    if message is None:
        return {"no source"}
    found: set[str] = set()
    if line.speaker != message.speaker:
        found.add("a speaker missing")
    if message.created_at is not None and f"[{message.created_at:%Y-%m-%d}]" not in rendered:
        found.add("no date")
    for part in line.text.split(SEPARATOR):
        cut = part.endswith("…") and not message.content.rstrip().endswith("…")
        faults_of_part = cut_faults(part.removesuffix("…").rstrip() if cut else part, message)
        if cut:
            faults_of_part -= {"ends inside a word", "ends inside a sentence"}
        found |= faults_of_part
    return found


def run(data: Path, limit: int | None) -> dict[str, object]:
    """Build the store, ask every question (`/query`, and the outline of its conversation at OUTLINE_BUDGET
    tokens with the question as its query), count the faults of every result and outline line, and of every
    summary (level 2 and up) in the store."""
    samples = dataset.load(data)
    memory: Memory = common.open_store(
        common.bench_settings(common.OUT / "chunk_text.db"),
        CachingEmbedder(LocalEmbedder(threads=2), common.OUT / "embeddings.sqlite"),
    )
    common.ingest(memory, samples, NS)
    held = {s["sample_id"]: {m.id: m for m in memory.storage.messages(NS, s["sample_id"])} for s in samples}
    questions = [q for s in samples for q in dataset.questions(s, s["sample_id"])][:limit]
    counts = {kind: dict.fromkeys(CHECKS, 0) for kind in KINDS}
    seen = dict.fromkeys(KINDS, 0)

    def count(kind: str, found: set[str]) -> None:
        seen[kind] += 1
        for fault in found:
            counts[kind][fault] = counts[kind].get(fault, 0) + 1

    for q in questions:
        query = Query(query=q.text, top_k=TOP_K, filter=QueryFilter(conversation_id=q.conversation_id))
        for r in memory.reader.query(NS, [query]).results[0].results:
            if r.level == 1:
                messages = held[r.conversation_id or ""]
                count("chunks", faults(r.text, [messages[i] for i in r.message_ids if i in messages]))
        outline = memory.outline.outline(NS, q.conversation_id, q.text, OUTLINE_BUDGET)
        for day in outline.days:
            for line in day.lines:
                count("outline lines", line_faults(line, outline.text, held[q.conversation_id]))
    for s in samples:
        for node in memory.storage.source_nodes(NS, s["sample_id"]):
            if node.level >= 2:
                count("summaries", summary_faults(node.text, held[s["sample_id"]], node.sentence_ids))
    memory.close()
    return {"questions": len(questions), "seen": seen, "counts": counts}


def markdown(out: dict[str, object], command: str) -> str:
    """The RESULTS section."""
    counts, seen = out["counts"], out["seen"]
    assert isinstance(counts, dict) and isinstance(seen, dict)
    faults_seen = list(dict.fromkeys(f for kind in KINDS for f in counts[kind]))

    def cell(kind: str, fault: str) -> str:
        v = counts[kind].get(fault, 0)
        return f"{v} ({v / max(1, seen[kind]):.1%})"

    rows = "\n".join(f"| {f} | " + " | ".join(cell(k, f) for k in KINDS) + " |" for f in faults_seen)
    return (
        "## What /query, the summaries and the outline hand a model: whole, dated, attributed text\n\n"
        f"{common.header(command)}\n"
        f"LoCoMo dev, {out['questions']} questions: their top {TOP_K} `/query` results (default mode, level 1), "
        f"{seen['chunks']} chunks; the lines of each question's outline (its conversation, the question as its "
        f"query, {OUTLINE_BUDGET} tokens), {seen['outline lines']} lines; every summary (level 2 and up) in the "
        f"store, {seen['summaries']}; each checked against the sentences stored with its messages "
        "(bench/chunk_text.py).\n\n"
        f"| fault | {' | '.join(KINDS)} |\n| --- | {' | '.join('---' for _ in KINDS)} |\n{rows}\n"
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
