"""One block being assembled (`BlockState`): the request, its inputs, what is shown so far; and what the memory
sections share: their candidates (`_gather`: the read path's hits above the floor, diversified) and how a memory is
shown (`_show`: the excerpt of its text within a budget).

A memory is its stored sentences (datastore/context/evidence.py): a chunk of short turns is shown whole, a chunk of
long messages cut to its sentences closest to the query. A sentence that stated an instruction or preference a later
one replaced is marked where a memory section shows it (render.SUPERSEDED after it).
"""

from __future__ import annotations

from datastore.context import evidence
from datastore.context.diversify import diversified
from datastore.context.evidence import Shown, Superseded, Texts
from datastore.context.inputs import InputReader, Inputs
from datastore.context.render import Section
from datastore.storage import SourceRow
from models.context import ContextItem, ContextRequest
from models.instructions import Instruction
from models.memory import MemoryNode, StoredMessage
from services import excerpts
from services.excerpts import Excerpt


def when(n: MemoryNode | StoredMessage | Instruction | None) -> float:
    """When it was said, in seconds since the epoch (a node's start, else its end); 0.0 when unknown."""
    t = None
    if isinstance(n, MemoryNode):
        t = n.start_time or n.end_time
    elif isinstance(n, StoredMessage | Instruction):
        t = n.created_at
    return t.timestamp() if t is not None else 0.0


class BlockState:
    """One block being assembled: the request, its inputs, what is shown so far; the sections' shared steps."""

    def __init__(self, owner: InputReader, ns: str, req: ContextRequest, given: Inputs) -> None:
        self.o, self.ns, self.req, self.p = owner, ns, req, owner.policy
        self.storage = owner.storage
        self.given = given
        self.budget, self.template, self.now = given.budget, given.template, given.now
        self.cid, self.tail, self.query = given.cid, given.tail, given.query
        self.overview, self.topic = given.overview, given.topic
        self.vector, self.topic_vector = given.vector, given.topic_vector
        self.flt, self.nothing = given.flt, given.nothing
        self.shown = Shown()
        self.superseded = Superseded.of(given.superseded)  # a superseded rule a memory shows is marked so
        # the source rows the block holds: the conversation's, then the candidates' (`_gather`), each read once
        self.sources: dict[str, SourceRow] = {given.source_row.source_id: given.source_row} if given.source_row else {}
        self.texts = Texts(owner.storage, ns, self.p, self.sources)
        self.query_terms = set(excerpts.terms(self.query or ""))
        self.candidates: list[tuple[MemoryNode, float]] = []
        self.weights: dict[str, float] = {}
        self.people_share = 1.0  # of the candidates' text, what people (not an assistant) said
        self.scores: dict[str, float] = {}
        self.instruction_messages: dict[str, str] = {}  # instruction id -> the message it was said in
        self.instruction_texts: dict[str, str] = {}  # instruction id -> its text (shown in its section)
        self.instruction_ranks: dict[str, int] = {}  # instruction id -> its place, the closest to the query first
        self.instruction_waiting: list[tuple[ContextItem, str | None]] = []  # left out for room, with their message
        self.source_names: dict[str, str] = {}
        self.said_nothing = False  # no memory passed the floor: the relevant memories are one line (NOTHING)

    # ------------------------------------------------------------------ retrieval, shared by relevant and timeline
    def _gather(self) -> None:
        """The candidates both memory sections draw from: the read path's hits for the query, above the floor
        (`ContextAssembler.read`), diversified across sessions; and the IDF weights of terms over their texts."""
        hits = self.given.hits
        if not hits:
            return
        self.scores = {n.id: sc for n, sc in hits}  # what an item reports: the read path's score
        self.candidates = diversified(hits, self.p)
        unread = [i for i in dict.fromkeys(n.source_id for n, _ in self.candidates) if i not in self.sources]
        self.sources.update(self.storage.get_sources(self.ns, unread) if unread else {})
        # over the stored texts: a chunk's sentences are read only for the first candidates and those shown
        self.weights = evidence.weights_of(n.text for n, _ in self.candidates)
        said: dict[bool, int] = {True: 0, False: 0}
        first = self.candidates[: self.p.min_candidates]
        self.texts.read(n for n, _ in first)  # their sentences in one read a source, not one a chunk
        for n, _ in first:
            piece = self.texts.piece(n)
            for s in piece.sentences:
                said[s.person] += len(s.text) if s.id in piece.own else 0
        total = said[True] + said[False]
        self.people_share = said[True] / total if total else 1.0

    def _node_item(self, n: MemoryNode, text: str, why: str, score: float | None) -> ContextItem:
        return ContextItem(
            id=n.id,
            kind="chunk" if n.level == 1 else "summary",
            level=n.level,
            text=text,
            speaker=", ".join(n.speakers) or None,
            source_id=n.source_id,
            start_time=n.start_time,
            end_time=n.end_time,
            score=None if score is None else round(float(score), 6),
            why=why,
            tokens=0,
        )

    def _show(
        self, sec: Section, n: MemoryNode, budget: int, why: str, score: float | None, people_first: bool = False
    ) -> bool:
        """Admit the excerpt of `n`'s text within `budget` tokens (and `max_memory_chars`) when something new
        fits."""
        limit = min(budget, sec.room_for(self._node_item(n, "", why, score)) - 2)  # a merge at a join
        if limit < self.p.min_item:
            return False
        piece = self.texts.piece(n)
        weights = self.weights or evidence.weights_of([self.texts.text(n)])

        def cut(limit: int) -> Excerpt | None:
            return evidence.cut(
                piece, limit, self.query_terms, weights, self.shown, people_first, self.p, self.superseded
            )

        ex = cut(limit)
        while ex is not None and len(ex.text) > self.req.max_memory_chars and limit > self.p.min_item:
            limit = max(self.p.min_item, limit * self.req.max_memory_chars // len(ex.text) - 2)  # fewer, still whole
            ex = cut(limit)
        if ex is None:
            return False
        item = self._node_item(n, ex.text, why, score)
        parts = evidence.dated(n, ex.runs)  # a node said over several days: each line under its own date
        for _ in range(3):
            over = sec.used + sec.cost(item, parts) - sec.budget
            if parts is None or over <= 0 or limit <= self.p.min_item:
                break
            limit = max(self.p.min_item, limit - over - 1)  # the date lines cost more than the span's one: cut more
            ex = cut(limit)
            if ex is None:
                return False
            item = self._node_item(n, ex.text, why, score)
            parts = evidence.dated(n, ex.runs)
        times = [t for t, _ in parts or [] if t is not None]
        if times:  # what the item shows was said from its first part to its last
            item.start_time, item.end_time = min(times), max(times)
        if not sec.admit(item, when(n), parts):  # clipped to max_memory_chars
            return False
        shown = ex.ids()
        self.shown.ids |= shown
        self.shown.memory |= shown
        self.shown.say(s for s in ex.sentences if s.id in shown)
        self.shown.nodes.add(n.id)
        if ex.whole:
            self.shown.messages.update(n.message_ids if n.level == 1 else [])
        return True
