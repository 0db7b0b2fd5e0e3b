"""bench/synthetic.py: its stores hold what a real write stores (the messages' sentences as split)."""

from __future__ import annotations

import numpy as np

from bench import synthetic
from datastore.memory import Memory
from services.chunking import split_message


def test_a_synthetic_message_is_stored_with_the_sentences_the_splitter_gives_it(memory: Memory) -> None:
    synthetic.fill(memory, "ns", 12, seed=3, with_lines=True)
    stored = memory.storage.messages("ns", "synthetic-00000", 0)
    assert len(stored) == 12 * synthetic.LINES
    for m in stored:
        assert m.sentences == split_message(m.content)
    # and over many more messages drawn as `fill` draws them (the splitter is what a real write runs)
    words, p = synthetic.vocabulary()
    rng = np.random.default_rng(0)
    drawn = np.array(words, dtype=object)
    for n in rng.integers(*synthetic.WORDS_PER_LINE, size=300):
        content = " ".join(drawn[rng.choice(len(words), size=int(n), p=p)])
        assert synthetic.sentences(content) == split_message(content)
