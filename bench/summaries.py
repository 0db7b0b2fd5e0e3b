"""Summary filler: how many L2 summary lines of the LoCoMo dev conversations say nothing, or start inside a word.

Each of the 6 conversations is chunked and rolled up as remember does (services/chunking.py, services/tree.py;
default settings: CHUNK_SIZE 200, CHUNK_OVERLAP 20, FAN_OUT 5, SUMMARY_MAX_TOKENS 200; the extractive
summariser), without a store or an embedder. Every line of every L2 summary is classified:

- filler: `services.filler.is_filler` says its sentence says nothing (the one rule of services/filler.py:
  greetings, thanks, acknowledgements, bare exclamations, praise, a question back);
- cut: its speaker is not one of the conversation's speakers ("anie: Sounds great!"), or its sentence starts
  with a lower-case letter or punctuation (", can't agree more!");
- short: its sentence has at most three words (a rule-independent check on the filler rule).

    .venv/bin/python -m bench.summaries [--data PATH] [--show 20]

Prints the counts and the first `--show` filler / cut lines; `--markdown` prints a bench/RESULTS.md row.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from bench import dataset
from models.memory import StoredMessage
from models.settings import Settings
from services.chunking import SentenceStream, measure, plan_windows
from services.filler import is_filler
from services.summarising import ExtractiveSummariser
from services.tree import Frontier, chunk_nodes, roll_up

_LINE = re.compile(r"^(?:\[[^\]]*\] )?(?P<speaker>[^:]+): (?P<body>.*)$")


def l2_lines(sample: dict, settings: Settings) -> list[str]:
    """The lines of the L2 summaries of one LoCoMo conversation (all its sessions as one conversation)."""
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

    def summarise(texts: list[str], context: str | None) -> tuple[str, str]:
        return summariser.summarise(texts, context, settings.summary_max_tokens)

    sealed = [c for c in chunks if c.sealed]
    nodes = roll_up(Frontier(), sealed, summarise, settings.fan_out, 2)
    return [ln for n in nodes if n.level == 2 for ln in n.text.splitlines() if ln.strip()]


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
    total = 0
    counts = {"filler": 0, "cut": 0, "short": 0}
    shown: list[str] = []
    for sample in dataset.load(args.data):
        speakers = {m.who for session in dataset.sessions(sample) for m in session}
        lines = l2_lines(sample, settings)
        total += len(lines)
        for line in lines:
            faults = classify(line, speakers)
            for f in faults:
                counts[f] += 1
            if faults & {"filler", "cut"} and len(shown) < args.show:
                shown.append(f"{sorted(faults)} {line}")
        print(f"{sample['sample_id']}: {len(lines)} L2 lines")
    share = {k: v / max(total, 1) for k, v in counts.items()}
    print(
        f"{total} L2 lines: filler {counts['filler']} ({share['filler']:.1%}), cut {counts['cut']} "
        f"({share['cut']:.1%}), at most 3 words {counts['short']} ({share['short']:.1%})"
    )
    for line in shown:
        print("  ", line)
    if args.markdown:
        print(
            f"| {total} | {counts['filler']} ({share['filler']:.1%}) | {counts['cut']} ({share['cut']:.1%}) | "
            f"{counts['short']} ({share['short']:.1%}) |"
        )


if __name__ == "__main__":
    main()
