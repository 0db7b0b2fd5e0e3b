"""The block and the summaries are the same in every process: a float summed over a set of strings in the set's
order changes with the process's hash seed (PYTHONHASHSEED, random per process), so two server processes, or the
same server after a restart, could score a sentence a last bit apart and break a tie the other way (seen on BEAM
11-20: one question's block differed between two runs of the same code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
from datetime import UTC, datetime

from datastore.context import evidence
from models.memory import MemoryNode
from services import excerpts
from services.chunking import SpanSentence
from services.summarising import ExtractiveSummariser, Span

TEXTS = [
    "Priya booked the ferry to Naxos, the guesthouse near the harbour and a cooking class for Thursday evening.",
    "The cooking class, the ferry and the guesthouse were booked by Priya for the Naxos weekend in June.",
    "Tom asked whether the harbour guesthouse in Naxos takes dogs, because Biscuit comes along on the ferry.",
    "Weather in June is hot, so Priya packed sunscreen, hats and a cooler for the ferry crossing.",
    "Tom found a vineyard tour near the guesthouse and a bakery that opens at six for the ferry mornings.",
    "Priya said the cooking class teaches octopus, fava and the harbour's lemon pie, Thursday evening.",
]
at = datetime(2024, 6, 1, tzinfo=UTC)
said = [
    SpanSentence(f"m{k}:0", f"m{k}", 0, t, ("Priya", "Tom")[k % 2], at, True, len(t.split()))
    for k, t in enumerate(TEXTS)
]
node = MemoryNode(id="c1", source_id="trip", level=1, position=0, text=" ".join(TEXTS))
piece = evidence.Piece(node, said, frozenset(), frozenset(s.id for s in said))
for query in ("Which ferry, guesthouse and cooking class did Priya book for Naxos on Thursday evening?",
              "What did Tom find near the harbour guesthouse for the ferry mornings?"):
    scores = evidence.closeness(piece, set(excerpts.terms(query)), evidence.weights_of(TEXTS))
    print([s.hex() for s in scores])
summary = ExtractiveSummariser().summarise(Span(said, TEXTS), 60)
print(summary.sentence_ids)
"""


def _run(seed: int) -> str:
    env = {**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_sentence_scores_and_summaries_do_not_depend_on_the_hash_seed() -> None:
    """The closeness of each sentence to a query (to the last bit) and the summary's picks, under eight seeds."""
    outputs = {seed: _run(seed) for seed in range(8)}
    assert len(set(outputs.values())) == 1, outputs
    assert "0x" in outputs[0]  # scores were printed
