"""Whether /context shows a stated preference for a question about its topic: precision and recall of the block's
rule on a labeled set of (preference, question) pairs.

bench/data/preference_topics.tsv (written for issue 34 item 3, not taken from a dataset): each row a preference
as a user says it to an assistant ("I'm vegetarian, keep that in mind.") and a question, labeled `relevant` (the
preference should shape the answer: a restaurant or dinner question for a diet) or `unrelated`. Each preference
is read by the PatternDetector, as the store keeps it (its statement; a few it keeps as instructions, which the
block shows for every question: the pairs measure the floor alone), and embedded with the local embedder
(MiniLM), as are the questions. The block's rule (datastore/context/sections.py `_fill_instructions`): a
preference is shown when its cosine to the query reaches `preference_floor` (datastore/context/policy.py) and
`preference_ratio` of the best preference's (one preference per pair here, so the floor decides). Prints
precision and recall at the policy's floor, the same for a range of floors, and the ranking's AUC.

    .venv/bin/python -m bench.preference_topics [--misses]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datastore.context.policy import DEFAULT_POLICY
from models.api import Message
from services.embedding import Embedder, LocalEmbedder
from services.instructions import PatternDetector

PAIRS = Path(__file__).resolve().parent / "data" / "preference_topics.tsv"
FLOORS = (0.10, 0.12, 0.15, 0.18, 0.20, 0.25)


@dataclass(frozen=True)
class Pair:
    """One labeled row: the preference as said, the question, whether the preference should be shown for it."""

    preference: str
    question: str
    relevant: bool


def load(path: Path = PAIRS) -> list[Pair]:
    """The labeled pairs at `path`, comments skipped; raises ValueError on a label other than relevant/unrelated."""
    out = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        label, preference, question = line.split("\t")
        if label not in ("relevant", "unrelated"):
            raise ValueError(f"unknown label {label!r}")
        out.append(Pair(preference, question, label == "relevant"))
    return out


def statement(said: str) -> str:
    """What the store keeps of a preference as said: the PatternDetector's statement (its clause); raises
    ValueError when the detector finds none (a pair the block could never show)."""
    found = PatternDetector().detect([Message(id="1", role="user", content=said)])
    if not found:
        raise ValueError(f"the detector keeps nothing of {said!r}")
    return found[0].statement


def cosines(pairs: list[Pair], embedder: Embedder) -> np.ndarray:
    """Per pair, the cosine of the preference's statement and the question (as the block computes it)."""
    kept = {p.preference: statement(p.preference) for p in pairs}
    said = sorted(set(kept.values()))
    questions = sorted({p.question for p in pairs})
    vs = dict(zip(said, embedder.embed(said), strict=True))
    vq = dict(zip(questions, embedder.embed(questions), strict=True))
    return np.array([float(vs[kept[p.preference]] @ vq[p.question]) for p in pairs], dtype=np.float32)


def scores(relevant: np.ndarray, cos: np.ndarray, floor: float) -> dict[str, float]:
    """Precision and recall of showing a preference when its cosine reaches `floor` (with tp, shown, positives)."""
    shown = cos >= floor
    tp = int((shown & relevant).sum())
    return {
        "precision": tp / max(int(shown.sum()), 1),
        "recall": tp / max(int(relevant.sum()), 1),
        "tp": tp,
        "shown": int(shown.sum()),
        "relevant": int(relevant.sum()),
    }


def auc(relevant: np.ndarray, cos: np.ndarray) -> float:
    """The share of (relevant, unrelated) pairs of rows the cosine orders right (ties count half)."""
    pos, neg = cos[relevant], cos[~relevant]
    if not len(pos) or not len(neg):
        return float("nan")
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (len(pos) * len(neg)))


def run(show_misses: bool = False, path: Path = PAIRS) -> dict[str, float]:
    """Measure and print (see the module doc); returns the scores at the policy's floor, with `auc`."""
    pairs = load(path)
    embedder = LocalEmbedder(threads=1)
    try:
        cos = cosines(pairs, embedder)
    finally:
        embedder.close()
    relevant = np.array([p.relevant for p in pairs])
    floor = DEFAULT_POLICY.preference_floor
    print(f"{len(pairs)} pairs ({int(relevant.sum())} relevant), {len({p.preference for p in pairs})} preferences")
    for f in sorted({*FLOORS, floor}):
        s = scores(relevant, cos, f)
        mark = "  <- preference_floor" if f == floor else ""
        print(
            f"cosine >= {f:.2f}: precision {s['tp']}/{s['shown']} = {s['precision']:.3f}; "
            f"recall {s['tp']}/{s['relevant']} = {s['recall']:.3f}{mark}"
        )
    out = {**scores(relevant, cos, floor), "auc": auc(relevant, cos)}
    print(f"AUC {out['auc']:.3f}")
    if show_misses:
        for p, c in sorted(zip(pairs, cos, strict=True), key=lambda t: float(t[1])):
            if p.relevant != (c >= floor):
                print(f"{'MISS' if p.relevant else 'FALSE'} {c:.3f} {p.preference} | {p.question}")
    return out


def main() -> None:
    """Command line: `--misses` lists the pairs the policy's floor gets wrong."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--misses", action="store_true", help="list the pairs the floor gets wrong")
    run(ap.parse_args().misses)


if __name__ == "__main__":
    main()
