"""What a fork sees: its own nodes, and each ancestor's nodes that lie wholly before the fork point.

A fork is a conversation whose source metadata names its parent and fork point (`{"fork": {"parent_id",
"at_message_id", "at_seq", "at_time", "chunk_from", "inherit_to", "tok_at"}}`; made by
datastore/lifetime/forks.py). Its token stream is its parent's stream up to the fork point (`tok_at`, the end of
the fork message) followed by its own messages, whose offsets start there: one coordinate system along the
lineage. Of that stream the fork inherits, copy-on-write, the parent's sealed L1 chunks ending at or before
`inherit_to` (and every summary over them only); the rest up to the fork point, from `chunk_from` (`inherit_to`
minus CHUNK_OVERLAP: the next chunk's start), is re-chunked into the fork's own chunks (its `Base`), which its own
messages then continue like any open chunk. So the fork sees every message up to the fork point and none after
it, and a chunk of the parent that straddles the fork point is replaced by the fork's own copy of its first part.
`fork_base` computes that base from the parent as it is now; the write path (datastore/write/) keeps it current
(a parent's deletion rebuilds its forks). Results inherited from an ancestor carry the ancestor's
`conversation_id`. The parent never sees its forks, nor a fork its siblings.

A fork made before bases existed (a record without `tok_at`) holds nothing of its parent: it inherits the
parent's chunks ending at or before the fork point, and a chunk straddling it stays unseen.

`view_for(storage, search, ns, flt)` is how the read path applies this: the `Searchable` a query with that filter
searches (the storage itself, or a `LineageView` when the filter names a fork). `stream_messages` reads a
source's token stream through its base (what the chunker reads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from datastore.read.ranking import RowSearch, Searchable, TextSearch
from datastore.storage import Hits, Storage
from models.api import QueryFilter
from models.memory import MemoryNode, StoredMessage
from services.chunking import next_start

SEARCH_CAP = 1000  # most nodes drawn from one ancestor per search (top_k plus its nodes past the fork point)
Lineage = list[tuple[str, set[str] | None]]  # [(source id, ids of its nodes the fork sees, None = all)]


def fork_info(storage: Storage, ns: str, conversation_id: str) -> dict[str, Any] | None:
    """The fork record of a conversation (None for a conversation that is not a fork, or an unknown one)."""
    src = storage.get_source(ns, conversation_id)
    return src.metadata.get("fork") if src is not None else None


def fork_point(storage: Storage, ns: str, parent: str, fork: dict[str, Any]) -> int:
    """The token offset in `parent`'s stream where the fork's inheritance ends (0 when nothing is left). When the
    fork message itself was deleted, the point is the parent's last message sent at or before it (by
    `created_at`; by position when untimed), or when the parent is a fork with no such message of its own, the
    end of what the parent holds of its own parent (its `tok_at`)."""
    messages = storage.messages(ns, parent)
    for m in messages:
        if m.id == fork["at_message_id"]:
            return m.tok_offset + m.n_tokens
    at_time = fork.get("at_time")
    if at_time is not None:
        when = datetime.fromisoformat(at_time)
        before = [m for m in messages if m.created_at is not None and m.created_at <= when]
    else:
        before = [m for m in messages if m.seq <= int(fork["at_seq"])]
    return max((m.tok_offset + m.n_tokens for m in before), default=tok_at(fork_info(storage, ns, parent)))


def tok_at(fork: dict[str, Any] | None) -> int:
    """Where a fork's own messages start in its token stream (the end of the fork message in its parent's
    stream), 0 for a conversation that is not a fork, or a fork made before bases existed."""
    return int(fork.get("tok_at", 0)) if fork else 0


def chunk_from(metadata: dict[str, Any]) -> int:
    """Token offset where a source's own chunks begin, from its source metadata: a fork's `chunk_from`, else 0
    (what `Frontier.base` is set to)."""
    fork = metadata.get("fork")
    return int(fork.get("chunk_from", 0)) if isinstance(fork, dict) else 0


@dataclass
class Base:
    """What a fork holds of its parent's token stream (token offsets, one coordinate system along the lineage).

    inherit_to: the parent's L1 chunks (its own or inherited) ending at or before it are inherited (the end of
    the last sealed one before the fork point; 0: none). chunk_from: where the fork's own chunks start (where
    the window after the last inherited chunk starts, services/chunking.next_start; 0 without one). tok_at: the
    fork point, where the fork's own messages start. messages: the parent's stream messages overlapping
    [chunk_from, tok_at), in order (the first may start before chunk_from), which the fork's own chunks are cut
    from.
    """

    chunk_from: int = 0
    inherit_to: int = 0
    tok_at: int = 0
    messages: list[StoredMessage] = field(default_factory=list)

    def record(self, fork: dict[str, Any]) -> dict[str, Any]:
        """The fork record `fork` with this base's offsets."""
        return {**fork, "chunk_from": self.chunk_from, "inherit_to": self.inherit_to, "tok_at": self.tok_at}


def fork_base(storage: Storage, ns: str, fork: dict[str, Any], overlap: int) -> Base:
    """The base a fork with record `fork` holds of its parent as the parent is now (`overlap`: CHUNK_OVERLAP,
    tokens): an empty Base when the parent is gone or nothing of it lies before the fork point."""
    parent = fork["parent_id"]
    if storage.get_source(ns, parent) is None:
        return Base()
    at = fork_point(storage, ns, parent, fork)
    if at <= 0:
        return Base()
    last: MemoryNode | None = None  # the last sealed chunk ending before the fork point
    for sid, ids in lineage(storage, ns, parent):
        for n in storage.source_nodes(ns, sid, level=1):
            if (
                (ids is None or n.id in ids)
                and n.sealed
                and n.tok_end <= at
                and (last is None or n.tok_end > last.tok_end)
            ):
                last = n
    inherit_to = last.tok_end if last is not None else 0
    start = next_start(last.tok_start, last.tok_end, overlap) if last is not None else 0
    return Base(start, inherit_to, at, stream_messages(storage, ns, parent, start, at))


def stream_messages(
    storage: Storage,
    ns: str,
    source_id: str,
    tok_from: int = 0,
    tok_to: int | None = None,
    limit: int | None = None,
    forks: Callable[[str], dict[str, Any] | None] | None = None,
) -> list[StoredMessage]:
    """The messages of the source's token stream overlapping [tok_from, tok_to) (to the end when None), in
    order, at most `limit`: a fork's stream holds its parent's messages before `tok_at` (read through the
    parent's own stream), then the fork's own. For any other source, `Storage.messages`. forks: source id -> its
    fork record (default: `fork_info`, read from the store at each call; a caller reading one source's spans
    many times passes a memo of it)."""
    fork = forks(source_id) if forks is not None else fork_info(storage, ns, source_id)
    at = tok_at(fork)
    out: list[StoredMessage] = []
    if fork is not None and at > max(tok_from, 0):
        end = at if tok_to is None else min(at, tok_to)
        out = stream_messages(storage, ns, fork["parent_id"], tok_from, end, limit, forks)
        out = [m for m in out if m.tok_offset < at]
    if (tok_to is None or tok_to > at) and (limit is None or len(out) < limit):
        out += storage.messages(ns, source_id, tok_from, tok_to, None if limit is None else limit - len(out))
    return out


def stream_messages_in(
    storage: Storage,
    ns: str,
    source_id: str,
    ranges: Sequence[tuple[int, int]],
    forks: Callable[[str], dict[str, Any] | None] | None = None,
) -> list[StoredMessage]:
    """The messages of the source's token stream overlapping one of `ranges` ([tok_from, tok_to), empty ones
    ignored), each once, in order: `stream_messages` of each range, with one `Storage.messages_in` read per source
    of the lineage (a fork's parts before its `tok_at` read through its parent's stream). forks: as for
    `stream_messages`."""
    fork = forks(source_id) if forks is not None else fork_info(storage, ns, source_id)
    at = tok_at(fork)
    out: list[StoredMessage] = []
    below = [(lo, min(hi, at)) for lo, hi in ranges if hi > lo and at > max(lo, 0)]
    if fork is not None and below:
        out = [m for m in stream_messages_in(storage, ns, fork["parent_id"], below, forks) if m.tok_offset < at]
    own = [(lo, hi) for lo, hi in ranges if hi > lo and hi > at]
    return out + (storage.messages_in(ns, source_id, own) if own else [])


def lineage(storage: Storage, ns: str, conversation_id: str) -> Lineage:
    """[(source id, ids of its nodes the conversation sees, None = all)], the conversation first."""
    out: Lineage = [(conversation_id, None)]
    seen = {conversation_id}
    fork = fork_info(storage, ns, conversation_id)
    while fork is not None:
        parent = fork["parent_id"]
        if parent in seen:
            break  # a cycle can't be made through Forks.fork; stop rather than loop
        seen.add(parent)
        end = int(fork["inherit_to"]) if "tok_at" in fork else fork_point(storage, ns, parent, fork)
        out.append((parent, _visible(storage, ns, parent, end)))
        fork = fork_info(storage, ns, parent)
    return out


def _visible(storage: Storage, ns: str, source_id: str, tok_end: int) -> set[str]:
    """Ids of the source's nodes a fork inheriting up to `tok_end` sees: the chunks ending there or before, the
    summaries all of whose children it sees, and the lines of the messages those chunks hold."""
    nodes = storage.source_nodes(ns, source_id)
    chunks = [n for n in nodes if n.level == 1 and n.tok_end <= tok_end]
    visible = {n.id for n in chunks}
    held = {mid for n in chunks for mid in n.message_ids}
    visible |= {n.id for n in nodes if n.level == 0 and n.message_ids and n.message_ids[0] in held}
    for n in sorted((n for n in nodes if n.level > 1), key=lambda n: n.level):
        if n.children and all(c in visible for c in n.children):
            visible.add(n.id)
    return visible


def view_for(storage: Storage, search: Searchable, ns: str, flt: QueryFilter | None) -> Searchable:
    """What a search with `flt` reads: a LineageView over `search` when `flt.conversation_id` names a fork, else
    `search` (the in-memory search over `storage`, datastore/indexes/search.py)."""
    if flt is None or flt.conversation_id is None or search.fork_of(ns, flt.conversation_id) is None:
        return search
    return LineageView(search, ns, lineage(storage, ns, flt.conversation_id))


class LineageView:
    """A `Searchable` over a fork's lineage (see the module docstring): searches run per source of the lineage
    and are merged by score; reads leave out what the fork does not see."""

    rows: RowSearch | None = None  # row ids cannot say which ancestor's rows are visible: fuse nodes instead

    def __init__(self, storage: Searchable, ns: str, lineage: Lineage) -> None:
        self.storage, self.ns, self.lineage = storage, ns, lineage
        self.visible = {i for _, ids in lineage if ids is not None for i in ids}
        self.own = lineage[0][0]
        self.text: TextSearch | None = _LineageText(self) if storage.text is not None else None

    def _fix(self, n: MemoryNode) -> MemoryNode:
        if n.source_id != self.own and n.parent_id and n.parent_id not in self.visible:
            return n.model_copy(update={"parent_id": None})
        return n

    def sees(self, n: MemoryNode) -> bool:
        """Whether the fork sees this node."""
        return n.source_id == self.own or n.id in self.visible

    def merge(self, search: Callable[[int, QueryFilter], Hits], top_k: int, flt: QueryFilter | None) -> Hits:
        """`search(k, filter)` run on each source of the lineage, visible hits merged best first, top_k."""
        hits: Hits = []
        for sid, ids in self.lineage:
            sub = (flt or QueryFilter()).model_copy(update={"conversation_id": sid})
            if ids is None:
                hits += search(top_k, sub)
            elif ids:
                n_hidden = sum(1 for n in self.storage.source_nodes(self.ns, sid) if n.level >= 1 and n.id not in ids)
                k = min(SEARCH_CAP, top_k + n_hidden)
                hits += [(self._fix(n), s) for n, s in search(k, sub) if n.id in ids][:top_k]
        hits.sort(key=lambda h: -h[1])
        return hits[:top_k]

    def search_vector(self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None) -> Hits:
        return self.merge(lambda k, f: self.storage.search_vector(ns, vector, k, f), top_k, flt)

    def get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        return self.storage.get_vectors(ns, ids)

    def fork_of(self, ns: str, source_id: str) -> dict[str, Any] | None:
        return self.storage.fork_of(ns, source_id)

    def load_soon(self, ns: str) -> None:
        self.storage.load_soon(ns)

    def get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]:
        return [self._fix(n) for n in self.storage.get_nodes(ns, ids) if self.sees(n)]

    def source_nodes(
        self, ns: str, source_id: str, level: int | None = None, first: int = 0, last: int | None = None
    ) -> list[MemoryNode]:
        return [self._fix(n) for n in self.storage.source_nodes(ns, source_id, level, first, last) if self.sees(n)]


class _LineageText:
    """The lineage's full-text search (offered when the storage has one)."""

    def __init__(self, view: LineageView) -> None:
        self.view = view

    def search(self, ns: str, text: str, top_k: int, flt: QueryFilter | None = None) -> Hits:
        text_search = self.view.storage.text
        assert text_search is not None
        return self.view.merge(lambda k, f: text_search.search(ns, text, k, f), top_k, flt)
