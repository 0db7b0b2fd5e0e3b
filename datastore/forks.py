"""Branches: a conversation forked after a message sees its parent's memory up to that message, copy-on-write.

A fork is a conversation of its own (its own messages, chunked and rolled up in it) whose source metadata names
its parent and fork point (`{"fork": {"parent_id", "at_message_id", "at_seq", "at_time"}}`); nothing of the
parent is copied. A search filtered to the fork (`conversation_id`) searches its lineage: the fork's own nodes,
and each ancestor's nodes that lie wholly before the fork point (an L1 chunk ending at or before the fork
message; a summary whose every chunk does). A chunk that straddles the fork point holds later messages and is
not seen; an inherited chunk whose summary straddles it comes back without `parent_id`. Results inherited from
an ancestor carry the ancestor's `conversation_id`. The parent never sees its forks, nor a fork its siblings.

Deleting a parent message that a fork inherits removes it from both (the fork never had a copy). When the fork
message itself is deleted, the fork point becomes the parent's last message sent at or before it (by
`created_at`; by position when untimed).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any

import numpy as np

from pyramind.datastore.hooks import SourceRow, WriteBatch
from pyramind.datastore.pins import Visiting
from pyramind.datastore.read import Reading, to_result
from pyramind.datastore.retrieval import TextSearch, retrieve
from pyramind.models.api import Query, QueryFilter, QueryResponse, QueryResults
from pyramind.models.lifetime import ForkResponse
from pyramind.models.memory import MemoryNode
from pyramind.services.errors import ConflictError, NotFoundError

SEARCH_CAP = 1000  # most nodes drawn from one ancestor per search (top_k plus its nodes past the fork point)


class Forking(Visiting):
    """fork_sync, and query_sync over a fork's lineage."""

    def fork_info(self, ns: str, conversation_id: str) -> dict[str, Any] | None:
        """The fork record of a conversation (None for a conversation that is not a fork)."""
        src = self._get_source(ns, conversation_id)
        return src.metadata.get("fork") if src is not None else None

    def _fork_point(self, ns: str, parent: str, fork: dict[str, Any]) -> int:
        """The token offset in `parent` where the fork's inheritance ends (0 when nothing is left)."""
        messages = self._messages_from(ns, parent, -1)
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

    def lineage(self, ns: str, conversation_id: str) -> list[tuple[str, set[str] | None]]:
        """[(source id, ids of its nodes the conversation sees, None = all)], the conversation first."""
        out: list[tuple[str, set[str] | None]] = [(conversation_id, None)]
        seen = {conversation_id}
        fork = self.fork_info(ns, conversation_id)
        while fork is not None:
            parent = fork["parent_id"]
            if parent in seen:
                break  # a cycle can't be made through fork_sync; stop rather than loop
            seen.add(parent)
            out.append((parent, self._visible(ns, parent, self._fork_point(ns, parent, fork))))
            fork = self.fork_info(ns, parent)
        return out

    def _visible(self, ns: str, source_id: str, tok_end: int) -> set[str]:
        nodes = self._source_nodes(ns, source_id)
        visible = {n.id for n in nodes if n.level == 1 and n.tok_end <= tok_end}
        for n in sorted((n for n in nodes if n.level > 1), key=lambda n: n.level):
            if n.children and all(c in visible for c in n.children):
                visible.add(n.id)
        return visible

    def fork_sync(self, ns: str, conversation_id: str, at_message_id: str,
                  new_conversation_id: str | None = None) -> ForkResponse:
        """Branch `conversation_id` after `at_message_id` (one of its messages or one it inherits: the branch then
        forks the ancestor that owns it). Raises NotFoundError (`conversation_id`: unknown, or a document;
        `at_message_id`: not a message the conversation sees) or ConflictError (`new_conversation_id` taken)."""
        src = self._get_source(ns, conversation_id)
        if src is None or src.source_type != "conversation":
            raise NotFoundError(f"no conversation {conversation_id!r}", "conversation_id")
        owner = None
        for sid, _ in self.lineage(ns, conversation_id):
            m = next((m for m in self._messages_from(ns, sid, -1) if m.id == at_message_id), None)
            if m is None:
                continue
            if sid == conversation_id or self._inherits(ns, conversation_id, sid, m.tok_offset + m.n_tokens):
                owner = (sid, m)
            break
        if owner is None:
            raise NotFoundError(f"{conversation_id!r} has no message {at_message_id!r} (its own or inherited)",
                                "at_message_id")
        sid, m = owner
        new_id = new_conversation_id or uuid.uuid4().hex
        if self._get_source(ns, new_id) is not None:
            raise ConflictError(f"{new_id!r} already exists", "new_conversation_id")
        fork = {"parent_id": sid, "at_message_id": m.id, "at_seq": m.seq,
                "at_time": m.created_at.isoformat() if m.created_at else None}
        try:
            self._commit(ns, WriteBatch(source=SourceRow(new_id, "conversation", 1, metadata={"fork": fork})), 0)
        except ConflictError as exc:
            raise ConflictError(f"{new_id!r} already exists", "new_conversation_id") from exc
        return ForkResponse(conversation_id=new_id, parent_id=sid, at_message_id=m.id)

    def _inherits(self, ns: str, conversation_id: str, ancestor: str, tok_end: int) -> bool:
        """Whether `conversation_id` sees `ancestor`'s message ending at `tok_end`."""
        child, fork = conversation_id, self.fork_info(ns, conversation_id)
        while fork is not None:
            if fork["parent_id"] == ancestor:
                return tok_end <= self._fork_point(ns, ancestor, fork)
            child = fork["parent_id"]
            fork = self.fork_info(ns, child)
        return False

    async def fork(self, ns: str, conversation_id: str, at_message_id: str,
                   new_conversation_id: str | None = None) -> ForkResponse:
        """`fork_sync` in a worker thread."""
        return await asyncio.to_thread(self.fork_sync, ns, conversation_id, at_message_id, new_conversation_id)

    # ------------------------------------------------------------------ search over a lineage
    def query_sync(self, ns: str, queries: list[Query]) -> QueryResponse:
        """Queries filtered to a fork search its lineage (see the module docstring); the others as before."""
        forked = [q.filter is not None and q.filter.conversation_id is not None
                  and self.fork_info(ns, q.filter.conversation_id) is not None for q in queries]
        if not any(forked):
            return super().query_sync(ns, queries)
        plain = [q for q, f in zip(queries, forked, strict=True) if not f]
        done = iter(super().query_sync(ns, plain).results if plain else [])
        vectors = self.embedder.embed([q.query for q, f in zip(queries, forked, strict=True) if f])
        vec = iter(vectors)
        out = []
        for q, f in zip(queries, forked, strict=True):
            if not f:
                out.append(next(done))
                continue
            assert q.filter is not None and q.filter.conversation_id is not None
            view = _lineage_view(self, ns, self.lineage(ns, q.filter.conversation_id))
            hits = retrieve(view, ns, q.query, next(vec), q.top_k, q.filter,  # type: ignore[arg-type]
                            q.mode or self.settings.retrieval_mode)
            out.append(QueryResults(query=q.query, results=[to_result(n, s) for n, s in hits]))
            self.record_visits(ns, [n.id for n, _ in hits])
        return QueryResponse(results=out)


class _LineageView:
    """What the retrieval functions call on a store, answering a fork's searches from its lineage."""

    def __init__(self, store: Reading, ns: str, lineage: list[tuple[str, set[str] | None]]) -> None:
        self.store, self.ns, self.lineage = store, ns, lineage
        self.visible = {i for _, ids in lineage if ids is not None for i in ids}
        self.own = lineage[0][0]

    def _fix(self, n: MemoryNode) -> MemoryNode:
        if n.source_id != self.own and n.parent_id and n.parent_id not in self.visible:
            return n.model_copy(update={"parent_id": None})
        return n

    def _merge(self, search: Any, top_k: int, flt: QueryFilter | None) -> list[tuple[MemoryNode, float]]:
        hits: list[tuple[MemoryNode, float]] = []
        for sid, ids in self.lineage:
            sub = (flt or QueryFilter()).model_copy(update={"conversation_id": sid})
            if ids is None:
                hits += search(top_k, sub)
            elif ids:
                n_hidden = len(self.store._source_nodes(self.ns, sid)) - len(ids)
                k = min(SEARCH_CAP, top_k + n_hidden)
                hits += [(self._fix(n), s) for n, s in search(k, sub) if n.id in ids][:top_k]
        hits.sort(key=lambda h: -h[1])
        return hits[:top_k]

    def search_vector(self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None = None) -> list:
        return self._merge(lambda k, f: self.store.search_vector(ns, vector, k, f), top_k, flt)

    def _get_vectors(self, ns: str, ids: list[str]) -> dict[str, np.ndarray]:
        return self.store._get_vectors(ns, ids)

    def _get_nodes(self, ns: str, ids: list[str]) -> list[MemoryNode]:
        return [self._fix(n) for n in self.store._get_nodes(ns, ids)
                if n.source_id == self.own or n.id in self.visible]


class _TextLineageView(_LineageView):
    def search_text(self, ns: str, text: str, top_k: int, flt: QueryFilter | None = None) -> list:
        return self._merge(lambda k, f: self.store.search_text(ns, text, k, f), top_k, flt)  # type: ignore[attr-defined]


def _lineage_view(store: Reading, ns: str, lineage: list[tuple[str, set[str] | None]]) -> _LineageView:
    cls = _TextLineageView if isinstance(store, TextSearch) else _LineageView
    return cls(store, ns, lineage)

