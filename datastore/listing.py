"""Listing: the namespace's conversations and documents, one source with the roots of its tree, a source's messages.

What a browser (the web page, a dashboard) needs to walk a namespace from the top: pages of sources with their
time range and node counts per level, then a source's roots (nodes without a parent), each expanded further with
`expand_sync`, down to the messages a chunk covers. Logic is the same for every provider; it stands on four small
hooks with generic defaults built from the contract hooks, which providers with a query engine override with one
query each (local, pgvector). Cursors are opaque strings (base64url); a bad one is an InvalidRequestError.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pyramind.datastore.hooks import StoreBase
from pyramind.models.api import node_view
from pyramind.models.listing import MessageList, MessageView, SourceDetail, SourceList, SourceSummary
from pyramind.models.memory import MemoryNode, StoredMessage
from pyramind.services.errors import InvalidRequestError, NotFoundError

MAX_ROOTS = 10_000  # a source has a few roots per level (fewer than FAN_OUT each); this only bounds the read


@dataclass
class SourceFacts:
    """What a source's nodes say about it: node counts per level and the time range they cover."""

    level_counts: dict[int, int] = field(default_factory=dict)
    start_time: datetime | None = None
    end_time: datetime | None = None


def facts_of(nodes: Sequence[MemoryNode]) -> SourceFacts:
    """SourceFacts computed from a source's nodes (the generic path)."""
    counts: dict[int, int] = {}
    for n in nodes:
        counts[n.level] = counts.get(n.level, 0) + 1
    starts = [n.start_time for n in nodes if n.start_time is not None]
    ends = [n.end_time for n in nodes if n.end_time is not None]
    return SourceFacts(dict(sorted(counts.items())), min(starts) if starts else None, max(ends) if ends else None)


def _encode(kind: str, value: str) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{value}".encode()).decode().rstrip("=")


def _decode(kind: str, cursor: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    got, sep, value = raw.partition(":")
    if got != kind or not sep:
        raise InvalidRequestError("cursor is not a next_cursor of this listing", "cursor")
    return value


class Listing(StoreBase):
    """list_sources_sync, source_detail_sync, source_messages_sync (and their async forms)."""

    # ------------------------------------------------------------------ hooks (generic defaults)
    def _source_page(self, ns: str, after: str | None, limit: int) -> list[str]:
        """Up to `limit` source ids of the namespace greater than `after` (code-point order), ascending."""
        ids = self._list_sources(ns)
        return [i for i in ids if after is None or i > after][:limit]

    def _source_facts(self, ns: str, source_ids: Sequence[str]) -> dict[str, SourceFacts]:
        """SourceFacts of each source (absent ones map to empty facts)."""
        return {sid: facts_of(self._source_nodes(ns, sid)) for sid in source_ids}

    def _message_window(self, ns: str, source_id: str, tok_from: int, tok_to: int | None,
                        limit: int) -> list[StoredMessage]:
        """Up to `limit` messages of the source whose rendered tokens overlap [tok_from, tok_to) (tok_to None:
        to the end), in seq order."""
        msgs = self._messages_from(ns, source_id, tok_from)
        return [m for m in msgs if tok_to is None or m.tok_offset < tok_to][:limit]

    # ------------------------------------------------------------------ logic
    def _summaries(self, ns: str, source_ids: Sequence[str]) -> list[SourceSummary]:
        facts = self._source_facts(ns, source_ids)
        out = []
        for sid in source_ids:
            row = self._get_source(ns, sid)
            if row is None:  # deleted between the page and this read
                continue
            f = facts.get(sid) or SourceFacts()
            meta = dict(row.metadata or {})
            title = meta.get("title")
            out.append(SourceSummary(
                id=sid, source_type=row.source_type, title=title if isinstance(title, str) else None,
                start_time=f.start_time, end_time=f.end_time, message_count=row.n_messages,
                node_counts={str(lvl): n for lvl, n in sorted(f.level_counts.items())}, metadata=meta,
            ))
        return out

    def list_sources_sync(self, ns: str, limit: int = 20, cursor: str | None = None) -> SourceList:
        """One page of the namespace's conversations and documents, ordered by id; `next_cursor` is None on the
        last page. Raises InvalidRequestError for a bad cursor or limit."""
        if limit < 1:
            raise InvalidRequestError("limit must be at least 1", "limit")
        after = _decode("s", cursor) if cursor else None
        ids = self._source_page(ns, after, limit + 1)
        page, more = ids[:limit], len(ids) > limit
        return SourceList(conversations=self._summaries(ns, page),
                          next_cursor=_encode("s", page[-1]) if more and page else None)

    def source_detail_sync(self, ns: str, source_id: str) -> SourceDetail:
        """The source's summary and its roots, highest level first, then by position (that is time order: the
        roll-up groups a level from its start, so what is left unparented is the tail). Raises NotFoundError."""
        summaries = self._summaries(ns, [source_id])
        if not summaries:
            raise NotFoundError(f"no conversation or document with id {source_id!r}", "id")
        roots = sorted(self._roots(ns, source_id, MAX_ROOTS), key=lambda n: (-n.level, n.position))
        return SourceDetail(conversation=summaries[0], top_nodes=[node_view(n) for n in roots])

    def _token_range(self, ns: str, source_id: str, node_id: str) -> tuple[int, int]:
        """[tok_start, tok_end) of the L1 chunks under a node of this source (descending its first and last
        child). Raises NotFoundError when the node is unknown or of another source."""
        found = self._get_nodes(ns, [node_id])
        if not found or found[0].source_id != source_id:
            raise NotFoundError(f"no memory with id {node_id!r} in {source_id!r}", "node_id")
        first = last = found[0]
        while first.level > 1 and first.children:
            got = self._get_nodes(ns, [first.children[0]])
            if not got:
                break
            first = got[0]
        while last.level > 1 and last.children:
            got = self._get_nodes(ns, [last.children[-1]])
            if not got:
                break
            last = got[0]
        return first.tok_start, last.tok_end

    def source_messages_sync(self, ns: str, source_id: str, limit: int = 50, cursor: str | None = None,
                             node_id: str | None = None) -> MessageList:
        """One page of the source's messages in order, or of those a memory covers (`node_id`: the messages
        whose text overlaps the chunks under it). Raises NotFoundError, InvalidRequestError (cursor, limit)."""
        if limit < 1:
            raise InvalidRequestError("limit must be at least 1", "limit")
        if self._get_source(ns, source_id) is None:
            raise NotFoundError(f"no conversation or document with id {source_id!r}", "id")
        tok_from, tok_to = self._token_range(ns, source_id, node_id) if node_id else (0, None)
        if cursor:
            value = _decode("t", cursor)
            if not value.isdigit():
                raise InvalidRequestError("cursor is not a next_cursor of this listing", "cursor")
            tok_from = max(tok_from, int(value))
        msgs = self._message_window(ns, source_id, tok_from, tok_to, limit + 1)
        page, more = msgs[:limit], len(msgs) > limit
        return MessageList(
            messages=[MessageView(id=m.id, conversation_id=m.source_id, source_type=m.source_type, seq=m.seq,
                                  speaker=m.speaker, content=m.content, created_at=m.created_at) for m in page],
            next_cursor=_encode("t", str(page[-1].tok_offset + page[-1].n_tokens)) if more and page else None,
        )

    # ------------------------------------------------------------------ async API
    async def list_sources(self, ns: str, limit: int = 20, cursor: str | None = None) -> SourceList:
        return await asyncio.to_thread(self.list_sources_sync, ns, limit, cursor)

    async def source_detail(self, ns: str, source_id: str) -> SourceDetail:
        return await asyncio.to_thread(self.source_detail_sync, ns, source_id)

    async def source_messages(self, ns: str, source_id: str, limit: int = 50, cursor: str | None = None,
                              node_id: str | None = None) -> MessageList:
        return await asyncio.to_thread(self.source_messages_sync, ns, source_id, limit, cursor, node_id)
