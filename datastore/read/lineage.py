"""What a fork sees: its own nodes, and each ancestor's nodes that lie wholly before the fork point.

A fork is a conversation whose source metadata names its parent and fork point (`{"fork": {"parent_id",
"at_message_id", "at_seq", "at_time"}}`; made by datastore/lifetime/forks.py); nothing of the parent is copied.
A search filtered to the fork searches its lineage: the fork's own nodes, and each ancestor's nodes that lie
wholly before the fork point (an L1 chunk ending at or before the fork message; a summary whose every chunk
does). A chunk that straddles the fork point holds later messages and is not seen; an inherited chunk whose
summary straddles it comes back without `parent_id`. Results inherited from an ancestor carry the ancestor's
`conversation_id`. The parent never sees its forks, nor a fork its siblings.

`view_for(storage, ns, flt)` is how the read path applies this: the `Searchable` a query with that filter
searches (the storage itself, or a `LineageView` when the filter names a fork).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from pyramind.datastore.storage import Hits, RowSearch, Storage, TextSearch
from pyramind.models.api import QueryFilter
from pyramind.models.memory import MemoryNode

SEARCH_CAP = 1000  # most nodes drawn from one ancestor per search (top_k plus its nodes past the fork point)
Lineage = list[tuple[str, set[str] | None]]  # [(source id, ids of its nodes the fork sees, None = all)]


def fork_info(storage: Storage, ns: str, conversation_id: str) -> dict[str, Any] | None:
    """The fork record of a conversation (None for a conversation that is not a fork, or an unknown one)."""
    src = storage.get_source(ns, conversation_id)
    return src.metadata.get("fork") if src is not None else None


def fork_point(storage: Storage, ns: str, parent: str, fork: dict[str, Any]) -> int:
    """The token offset in `parent` where the fork's inheritance ends (0 when nothing is left). When the fork
    message itself was deleted, the point is the parent's last message sent at or before it (by `created_at`;
    by position when untimed)."""
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
    return max((m.tok_offset + m.n_tokens for m in before), default=0)


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
        out.append((parent, _visible(storage, ns, parent, fork_point(storage, ns, parent, fork))))
        fork = fork_info(storage, ns, parent)
    return out


def _visible(storage: Storage, ns: str, source_id: str, tok_end: int) -> set[str]:
    nodes = storage.source_nodes(ns, source_id)
    visible = {n.id for n in nodes if n.level == 1 and n.tok_end <= tok_end}
    for n in sorted((n for n in nodes if n.level > 1), key=lambda n: n.level):
        if n.children and all(c in visible for c in n.children):
            visible.add(n.id)
    return visible


def view_for(storage: Storage, ns: str, flt: QueryFilter | None) -> Storage | LineageView:
    """What a search with `flt` reads: a LineageView when `flt.conversation_id` names a fork, else the storage."""
    if flt is None or flt.conversation_id is None or fork_info(storage, ns, flt.conversation_id) is None:
        return storage
    return LineageView(storage, ns, lineage(storage, ns, flt.conversation_id))


class LineageView:
    """A `Searchable` over a fork's lineage (see the module docstring): searches run per source of the lineage
    and are merged by score; reads leave out what the fork does not see."""

    rows: RowSearch | None = None  # row ids cannot say which ancestor's rows are visible: fuse nodes instead

    def __init__(self, storage: Storage, ns: str, lineage: Lineage) -> None:
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
                n_hidden = len(self.storage.source_nodes(self.ns, sid)) - len(ids)
                k = min(SEARCH_CAP, top_k + n_hidden)
                hits += [(self._fix(n), s) for n, s in search(k, sub) if n.id in ids][:top_k]
        hits.sort(key=lambda h: -h[1])
        return hits[:top_k]

    def search_vector(self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None) -> Hits:
        return self.merge(lambda k, f: self.storage.search_vector(ns, vector, k, f), top_k, flt)

    def get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        return self.storage.get_vectors(ns, ids)

    def get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]:
        return [self._fix(n) for n in self.storage.get_nodes(ns, ids) if self.sees(n)]

    def source_nodes(self, ns: str, source_id: str, level: int | None = None, first: int = 0,
                     last: int | None = None) -> list[MemoryNode]:
        return [self._fix(n) for n in self.storage.source_nodes(ns, source_id, level, first, last) if self.sees(n)]


class _LineageText:
    """The lineage's full-text search (offered when the storage has one)."""

    def __init__(self, view: LineageView) -> None:
        self.view = view

    def search(self, ns: str, text: str, top_k: int, flt: QueryFilter | None = None) -> Hits:
        text_search = self.view.storage.text
        assert text_search is not None
        return self.view.merge(lambda k, f: text_search.search(ns, text, k, f), top_k, flt)
