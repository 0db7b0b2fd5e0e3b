"""The relevant memories: the block's candidates (datastore/context/inputs.py: the same retrieval as /query, above
the relevance floor), drawn from several sessions (datastore/context/diversify.py); a chunk of short turns whole, a
chunk of long messages cut to its sentences closest to the query (datastore/context/evidence.py), the best hit whole;
each with its `neighbours` chunks when asked.

The numbers named in `backticks` are fields of the block's policy (datastore/context/policy.py `BlockPolicy`).
"""

from __future__ import annotations

from datastore.context.render import Section
from datastore.context.state import BlockState
from models.memory import MemoryNode
from services.tokens import fits


class Relevant(BlockState):
    """Fills the relevant memories."""

    def _fill_relevant(self, sec: Section, most: int) -> None:
        """The hits in their (diversified) order, each chunk of short turns whole, a chunk of long messages cut
        to its closest sentences (the first hit whole up to a chunk); the section may stretch to `most` tokens
        for its first item when its share cannot hold it (a small budget: the best chunk before a timeline)."""
        fails, read_to = 0, self.p.min_candidates  # `_gather` read the first candidates' sentences
        for rank, (n, _) in enumerate(self.candidates):
            score = self.scores.get(n.id, 0.0)
            if fails >= self.p.hit_misses:
                break
            if self.shown.covers(n):
                continue
            if rank >= read_to:  # the sentences of this candidate and the next ones: one read a source
                read_to = rank + self.p.min_candidates
                self.texts.read(c for c, _ in self.candidates[rank:read_to])
            group = [n]  # the hit first: its neighbours only with it (the section shows them in time order)
            if self.req.neighbours and n.level == 1:
                before, after = self.o.reader.neighbours(self.ns, n, self.req.neighbours, self.flt)
                group = [n] + before[::-1] + after
            whole = rank < self.p.whole_hits or self._short_turns(n)
            budget = self.o.settings.chunk_size + 2 * self.p.short_turn if whole else self.p.hit_tokens
            if not sec.entries and sec.budget < most:
                sec.budget = min(most, max(sec.budget, self._cost_whole(sec, n)))
            if sec.room < self.p.min_item:
                break
            for node in group:
                if self.shown.covers(node):
                    continue
                why = f"relevant to the query (score {score:.3f})" if node is n else f"neighbour of {n.id}"
                ok = self._show(sec, node, budget, why, score if node is n else None)
                if node is n:
                    fails = 0 if ok else fails + 1
                    if not ok:
                        break

    def _cost_whole(self, sec: Section, n: MemoryNode) -> int:
        """Tokens the section would take with `n` whole as its first item (heading and date line included)."""
        return sec.cost(self._node_item(n, self.texts.text(n), "", None)) + 2

    def _short_turns(self, n: MemoryNode) -> bool:
        """Whether the chunk is a chat of turns (none over LONG_TURN tokens): it is shown whole, such a chunk
        has no sentence to spare; a chunk of a long message (an assistant's answer, a document) is cut to its
        sentences closest to the query."""
        turns: dict[str, list[str]] = {}
        for s in self.texts.piece(n).sentences:
            turns.setdefault(s.message_id, []).append(s.text)
        return all(fits(" ".join(t), self.p.long_turn) for t in turns.values())
