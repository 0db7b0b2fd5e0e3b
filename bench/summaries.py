"""Summary form: how many L2 summary lines of the LoCoMo dev conversations say nothing, or are not whole sentences.

Each of the 6 conversations is chunked and rolled up as remember does (services/chunking.py, services/tree.py;
default settings: CHUNK_SIZE 200, CHUNK_OVERLAP 20, FAN_OUT 5, SUMMARY_MAX_TOKENS 200; the extractive
summariser), without a store or an embedder. Every line of every L2 summary is classified:

- filler: `services.filler.is_filler` says its sentence says nothing (the one rule of services/filler.py:
  greetings, thanks, acknowledgements, bare exclamations, praise, a question back);
- cut: its speaker is not one of the conversation's speakers ("anie: Sounds great!"), or its sentence starts
  with a lower-case letter or punctuation (", can't agree more!");
- short: its sentence has at most three words (a rule-independent check on the filler rule);
- inside: a piece of it (its text after `speaker: `, cut at " … ") is not whole stored sentences of a message of
  that speaker (services/chunking.split_message: it starts or ends inside a word or a sentence);
- no speaker: it does not start `[stamp] speaker: ` with one of the conversation's speakers.

And every L2 summary: *undated* when its first line carries no `[YYYY-MM-DD HH:MM]` stamp; *other day* when that
date is not the day of the summary's first message (its first line is a later message's).

    .venv/bin/python -m bench.summaries [--data PATH] [--show 20]

Prints the counts and the first `--show` filler / cut lines; `--markdown` prints a bench/RESULTS.md row.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from bench import dataset
from datastore.write.spans import SpanReader
from models.memory import MemoryNode, StoredMessage
from models.settings import Settings
from services.chunking import SentenceStream, measure, plan_windows
from services.filler import is_filler
from services.summarising import ExtractiveSummariser, Summary
from services.tree import Frontier, chunk_nodes, roll_up

_LINE = re.compile(r"^(?:\[[^\]]*\] )?(?P<speaker>[^:]+): (?P<body>.*)$")
_STAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2}) \d{2}:\d{2}\] ")


def l2_summaries(sample: dict, settings: Settings) -> tuple[list[MemoryNode], list[StoredMessage]]:
    """The L2 summaries of one LoCoMo conversation (all its sessions as one conversation), and its messages."""
    messages = [
        StoredMessage(
            id=m.id or str(i), source_id="c", seq=i, speaker=m.who, content=m.content, created_at=m.created_at
        )
        for i, m in enumerate(m for session in dataset.sessions(sample) for m in session)
    ]
    measure(messages, None, 0)
    stream = SentenceStream.from_messages(messages)
    windows = plan_windows(stream, 0, settings.chunk_size, settings.chunk_overlap, final=False)
    chunks = chunk_nodes(stream, windows, "conversation", "c", 0)
    summariser = ExtractiveSummariser()
    spans = SpanReader(None, "", "c", messages)

    def summarise(children: list[MemoryNode], context: MemoryNode | None) -> Summary:
        return summariser.summarise(spans.span(children, context), settings.summary_max_tokens)

    sealed = [c for c in chunks if c.sealed]
    nodes = roll_up(Frontier(), sealed, summarise, settings.fan_out, 2)
    return [n for n in nodes if n.level == 2], messages


def l2_lines(sample: dict, settings: Settings) -> list[str]:
    """The lines of the L2 summaries of one LoCoMo conversation."""
    return [ln for n in l2_summaries(sample, settings)[0] for ln in n.text.splitlines() if ln.strip()]


def whole(line: str, messages: list[StoredMessage]) -> bool:
    """Whether every piece of a summary line (after `speaker: `, cut at " … ") is whole stored sentences of one
    message of its speaker: it starts where one of its sentences starts and ends where one ends."""
    m = _LINE.match(line)
    if m is None:
        return False
    for piece in m["body"].split(" … "):
        found = False
        for msg in messages:
            if msg.speaker != m["speaker"]:
                continue
            at = msg.content.find(piece)
            starts = {s.start for s in msg.sentences}
            ends = {s.end for s in msg.sentences}
            while at >= 0 and not found:
                found = at in starts and at + len(piece) in ends
                at = msg.content.find(piece, at + 1)
            if found:
                break
        if not found:
            return False
    return True


def classify(line: str, speakers: set[str]) -> set[str]:
    """The faults of one summary line: a subset of {"filler", "cut", "short"}."""
    m = _LINE.match(line)
    if m is None:
        return {"cut"}
    body = m["body"].strip()
    names = {part for s in speakers for part in (s, s.split()[0])}
    out: set[str] = set()
    if is_filler(body, names):
        out.add("filler")
    if m["speaker"] not in speakers or not body or not (body[0].isupper() or body[0].isdigit() or body[0] in "\"'[("):
        out.add("cut")
    if len(body.split()) <= 3:
        out.add("short")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="LoCoMo file (default shared/bench/data/locomo_dev.json)")
    ap.add_argument("--show", type=int, default=10, help="print this many filler and cut lines")
    ap.add_argument("--markdown", action="store_true", help="print a bench/RESULTS.md table row")
    args = ap.parse_args(argv)
    settings = Settings()
    total = summaries = undated = other_day = 0
    counts = {"filler": 0, "cut": 0, "short": 0, "inside": 0, "no speaker": 0}
    shown: list[str] = []
    for sample in dataset.load(args.data):
        speakers = {m.who for session in dataset.sessions(sample) for m in session}
        nodes, messages = l2_summaries(sample, settings)
        lines = [ln for n in nodes for ln in n.text.splitlines() if ln.strip()]
        total += len(lines)
        summaries += len(nodes)
        for n in nodes:
            stamp = _STAMP.match(n.text)
            undated += stamp is None
            other_day += stamp is not None and n.start_time is not None and stamp[1] != f"{n.start_time:%Y-%m-%d}"
        for line in lines:
            faults = classify(line, speakers)
            if not whole(line, messages):
                faults.add("inside")
            if (m := _LINE.match(line)) is None or m["speaker"] not in speakers:
                faults.add("no speaker")
            for f in faults:
                counts[f] += 1
            if faults - {"short"} and len(shown) < args.show:
                shown.append(f"{sorted(faults)} {line}")
        print(f"{sample['sample_id']}: {len(lines)} L2 lines")
    share = {k: v / max(total, 1) for k, v in counts.items()}
    print(
        f"{total} L2 lines: filler {counts['filler']} ({share['filler']:.1%}), cut {counts['cut']} "
        f"({share['cut']:.1%}), at most 3 words {counts['short']} ({share['short']:.1%}), not whole sentences "
        f"{counts['inside']}, no speaker {counts['no speaker']}; {summaries} L2 summaries: undated {undated}, "
        f"first line of another day than the first message {other_day}"
    )
    for line in shown:
        print("  ", line)
    if args.markdown:
        print(
            f"| {total} | {counts['filler']} ({share['filler']:.1%}) | {counts['cut']} ({share['cut']:.1%}) | "
            f"{counts['short']} ({share['short']:.1%}) | {counts['inside']} | {counts['no speaker']} | "
            f"{summaries} | {undated} | {other_day} |"
        )


if __name__ == "__main__":
    main()
