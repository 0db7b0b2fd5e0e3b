"""Whether a question asks about the course of things (datastore/context/questions.py `asks_overview`): its
precision and recall on labeled questions. Such a question gets a dated list of lines instead of the relevant
memories first, so a fact question taken for one ("What did I order on Friday?") loses its memories.

- test: bench/data/overview_questions_test.tsv, 40 everyday questions written and frozen before the cues were
  last changed, never tuned on (20 overview, 20 fact, many using "order", "progress", "history" in both senses);
- development (`--beam DIR`, BEAM's chats/100K, chats 11-20 only): a question of type event_ordering or
  summarization is labeled overview, every other type fact (a rough label: some of the others ask about a course
  of things too, "How is my progress coming along so far?"), and LoCoMo dev (`--locomo`), every question fact.

    .venv/bin/python -m bench.overview [--beam /path/to/BEAM/chats/100K] [--locomo] [--misses]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench import dataset
from datastore.context.questions import asks_overview

TEST = Path(__file__).resolve().parent / "data" / "overview_questions_test.tsv"
DEV_CHATS = range(11, 21)
OVERVIEW_TYPES = ("event_ordering", "summarization")


def test_set() -> list[tuple[bool, str]]:
    """(overview?, question) of the frozen test set."""
    rows = []
    for line in TEST.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            label, question = line.split("\t", 1)
            rows.append((label == "overview", question))
    return rows


def beam_set(folder: Path) -> list[tuple[bool, str]]:
    """(overview?, question) of BEAM chats 11-20's probing questions (their type decides the label)."""
    rows = []
    for chat in DEV_CHATS:
        probing = json.loads((folder / str(chat) / "probing_questions" / "probing_questions.json").read_text())
        for kind, questions in probing.items():
            rows += [(kind in OVERVIEW_TYPES, q["question"]) for q in questions]
    return rows


def scores(rows: list[tuple[bool, str]], misses: bool, name: str) -> None:
    """Prints precision and recall of `asks_overview` on `rows` (and the questions it gets wrong)."""
    said = [(label, asks_overview(q), q) for label, q in rows]
    tp = sum(1 for label, got, _ in said if label and got)
    fp = sum(1 for label, got, _ in said if got and not label)
    fn = sum(1 for label, got, _ in said if label and not got)
    precision = tp / max(1, tp + fp)
    recall = tp / max(1, tp + fn)
    print(f"{name}: {len(rows)} questions, precision {precision:.3f} ({fp} false), recall {recall:.3f} ({fn} missed)")
    if misses:
        for label, got, q in said:
            if label != got:
                print(f"  {'missed' if label else 'false '}  {q}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beam", type=Path, help="BEAM's chats/100K folder (chats 11-20 are read)")
    parser.add_argument("--locomo", action="store_true", help="LoCoMo dev's questions, all labeled fact")
    parser.add_argument("--misses", action="store_true", help="list the questions labeled otherwise")
    args = parser.parse_args()
    scores(test_set(), args.misses, "test (frozen)")
    if args.beam:
        scores(beam_set(args.beam), args.misses, "BEAM 11-20 (development)")
    if args.locomo:
        rows = [(False, q.text) for s in dataset.load() for q in dataset.questions(s, s["sample_id"])]
        said = sum(asks_overview(q) for _, q in rows)
        print(f"LoCoMo dev (development): {len(rows)} questions, {said} taken for overview questions")
        if args.misses:
            for _, q in rows:
                if asks_overview(q):
                    print(f"  false   {q}")


if __name__ == "__main__":
    main()
