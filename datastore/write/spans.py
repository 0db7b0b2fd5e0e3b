"""The stored sentences a summary is made of (services/summarising.Span), read for the roll-up of one source.

A summary of chunks (L2) is made of the sentences its chunks show: those of the source's stream that start in
`[first chunk's tok_start, last chunk's tok_end)`. A summary of summaries (L3+) is made of the sentences its
children picked (`MemoryNode.sentence_ids`). A child summary without picked ids (written by a model, or by the
extractive summariser before summaries kept their sentences) gives all the sentences under it: a store written
before the change rolls up without an upgrade, and a model's summaries can fall back to the extractive one.
The previous summary's picked sentences are the context (none when it has no ids).

Messages are read once per span from `held` (the messages a write has in memory, measured; the newest of the
stream, possibly not committed yet) and, before the first of them, from the store (through the source's
lineage: a fork's stream starts with its parent's messages). A reader told ahead what it will read (`read`: the
extents of many nodes) reads it in one go, the first and last children of summaries with one `get_nodes` a level
and the messages of every range with one `Storage.messages_in` (per source of the lineage), and serves a span
within what it read from there (a context block's candidates: datastore/context/evidence.py `Texts.read`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any

from datastore.read.lineage import fork_info, stream_messages, stream_messages_in
from datastore.storage import Storage, merged, overlaps
from models.memory import MemoryNode, StoredMessage
from services.chunking import SpanSentence, span_sentences
from services.summarising import Span


class SpanReader:
    """The spans of one source's summaries. storage, ns, source_id: where its stored nodes and messages are
    (None: nowhere, `held` is all of them); held: measured messages in stream order that override the store from
    the first one's offset on. A source's fork record is read once in a reader's life (a reader serves one
    request or one roll-up); forks: where it is read from (source id -> its fork record, None for none; default
    `fork_info`, a read of the source's row: a context block passes the rows it holds)."""

    def __init__(
        self,
        storage: Storage | None,
        ns: str,
        source_id: str,
        held: Sequence[StoredMessage] = (),
        forks: Callable[[str], dict[str, Any] | None] | None = None,
    ) -> None:
        self._storage, self._ns, self._source_id = storage, ns, source_id
        self._forks = cache(forks or self._fork)
        self._held = list(held)
        self._held_from = held[0].tok_offset if held else None
        self._nodes: dict[str, MemoryNode] = {}
        self._extents: dict[str, tuple[int, int]] = {}
        self._read: list[StoredMessage] = []  # what `read` read from the store, in stream order
        self._covered: list[tuple[int, int]] = []  # the ranges it read (`merged`)

    def read(self, nodes: Sequence[MemoryNode], ranges: Sequence[tuple[int, int]] = ()) -> None:
        """Read ahead what the spans of `nodes` (this source's) and the token `ranges` of its stream need from the
        store, in one go: the first and last children of the summaries (one `get_nodes` a level), then the stored
        messages of their extents and of `ranges` not read yet (`stream_messages_in`: one `messages_in` a source of
        the lineage). `messages` of a range within what was read is then served from it."""
        if self._storage is None:
            return
        level = [n for n in nodes if n.level > 1 and n.children and n.id not in self._extents]
        while level:
            ends = list(dict.fromkeys(i for n in level for i in (n.children[0], n.children[-1])))
            missing = [i for i in ends if i not in self._nodes]
            if missing:
                self._nodes.update((n.id, n) for n in self._storage.get_nodes(self._ns, missing))
            level = [self._nodes[i] for i in ends if i in self._nodes and self._nodes[i].level > 1]
        wanted = [self.extent(n) for n in nodes] + list(ranges)
        if self._held_from is not None:
            wanted = [(lo, min(hi, self._held_from)) for lo, hi in wanted]
        todo = [r for r in merged(wanted) if not self._within(*r)]
        if not todo:
            return
        got = stream_messages_in(self._storage, self._ns, self._source_id, todo, forks=self._forks)
        known = {m.id for m in self._read}
        self._read = sorted(self._read + [m for m in got if m.id not in known], key=lambda m: m.tok_offset)
        self._covered = merged(self._covered + todo)

    def _within(self, tok_from: int, tok_to: int) -> bool:
        """Whether [tok_from, tok_to) lies inside one range `read` read."""
        return any(lo <= tok_from and tok_to <= hi for lo, hi in self._covered)

    def span(self, children: list[MemoryNode], context: MemoryNode | None) -> Span:
        """The Span of the summary over `children` (same level, in order) after `context` (module doc)."""
        self._nodes.update((c.id, c) for c in children)
        bounds = [self.extent(c) for c in children]
        ctx_bounds = self.extent(context) if context is not None and context.sentence_ids else None
        lo = min([b[0] for b in bounds] + ([ctx_bounds[0]] if ctx_bounds else []))
        hi = max(b[1] for b in bounds)
        stream = [(at, s) for m in self.messages(lo, hi) for at, s in placed(m)]
        out: dict[str, SpanSentence] = {}
        for c, (a, b) in zip(children, bounds, strict=True):
            ids = set(c.sentence_ids) if c.level > 1 else set()
            for at, s in stream:
                if a <= at < b and (not ids or s.id in ids):
                    out.setdefault(s.id, s)
        context_sentences: list[SpanSentence] = []
        if context is not None and ctx_bounds is not None:
            ids = set(context.sentence_ids)
            context_sentences = [s for at, s in stream if s.id in ids and ctx_bounds[0] <= at < ctx_bounds[1]]
        return Span(
            sentences=list(out.values()),
            texts=[c.text for c in children],
            context=context.text if context is not None else None,
            context_sentences=context_sentences,
        )

    def extent(self, node: MemoryNode) -> tuple[int, int]:
        """[tok_start, tok_end) of the chunks under `node` (a chunk's own; a summary's from its first and last
        child, read from this roll-up's nodes, else the store)."""
        if node.level <= 1:
            return node.tok_start, node.tok_end
        got = self._extents.get(node.id)
        if got is None:
            first, last = self._node(node.children[0]), self._node(node.children[-1])
            got = (self.extent(first)[0], self.extent(last)[1]) if first and last else (0, 0)
            self._extents[node.id] = got
        return got

    def _node(self, node_id: str) -> MemoryNode | None:
        if node_id not in self._nodes and self._storage is not None:
            for n in self._storage.get_nodes(self._ns, [node_id]):
                self._nodes[n.id] = n
        return self._nodes.get(node_id)

    def _fork(self, source_id: str) -> dict[str, Any] | None:
        return fork_info(self._storage, self._ns, source_id) if self._storage is not None else None

    def messages(self, tok_from: int, tok_to: int) -> list[StoredMessage]:
        """The source's messages overlapping [tok_from, tok_to), in order (module doc)."""
        out: list[StoredMessage] = []
        held_from = self._held_from
        if self._storage is not None and (held_from is None or tok_from < held_from):
            end = tok_to if held_from is None else min(tok_to, held_from)
            if self._within(tok_from, end):
                out = [m for m in self._read if overlaps(m, tok_from, end)]
            else:
                out = stream_messages(self._storage, self._ns, self._source_id, tok_from, end, forks=self._forks)
            if held_from is not None:
                out = [m for m in out if m.tok_offset < held_from]
        return out + [m for m in self._held if m.tok_offset < tok_to and m.tok_offset + m.n_tokens > tok_from]


def placed(m: StoredMessage) -> Iterable[tuple[int, SpanSentence]]:
    """(stream offset where it starts, sentence) of each sentence of a measured message, in order."""
    at = m.tok_offset
    for s in span_sentences(m):
        yield at, s
        at += s.tokens
