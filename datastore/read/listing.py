"""Listing: the namespace's conversations and documents, one source with the roots of its tree, a source's messages.

What a browser (the web page, a dashboard) needs to walk a namespace from the top: pages of sources with their
time range and node counts per level, then a source's roots (nodes without a parent), each expanded further with
`Reader.expand`, down to the messages a chunk covers. Logic is the same for every provider and stands on the
storage protocol (`list_sources`, `source_facts`, `roots`, `messages`). Cursors are opaque strings (base64url); a
bad one is an InvalidRequestError.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from datastore.read.lineage import stream_messages
from datastore.storage import SourceFacts, Storage
from models.api import node_view
from models.listing import MessageList, MessageView, SourceDetail, SourceList, SourceSummary
from services.errors import InvalidRequestError, NotFoundError

MAX_ROOTS = 10_000  # a source has a few roots per level (fewer than FAN_OUT each); this only bounds the read


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


class Listing:
    """sources, detail, messages: what a browser walks a namespace with."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def _summaries(self, ns: str, source_ids: Sequence[str]) -> list[SourceSummary]:
        facts = self.storage.source_facts(ns, source_ids)
        out = []
        for sid in source_ids:
            row = self.storage.get_source(ns, sid)
            if row is None:  # deleted between the page and this read
                continue
            f = facts.get(sid) or SourceFacts()
            meta = dict(row.metadata or {})
            title = meta.get("title")
            out.append(
                SourceSummary(
                    id=sid,
                    source_type=row.source_type,
                    title=title if isinstance(title, str) else None,
                    start_time=f.start_time,
                    end_time=f.end_time,
                    message_count=row.n_messages,
                    node_counts={
                        str(lvl): n for lvl, n in sorted(f.level_counts.items()) if lvl >= 1
                    },  # lines left out
                    metadata=meta,
                )
            )
        return out

    def sources(self, ns: str, limit: int = 20, cursor: str | None = None) -> SourceList:
        """One page of the namespace's conversations and documents, ordered by id; `next_cursor` is None on the
        last page. Raises InvalidRequestError for a bad cursor or limit."""
        if limit < 1:
            raise InvalidRequestError("limit must be at least 1", "limit")
        after = _decode("s", cursor) if cursor else None
        ids = self.storage.list_sources(ns, after, limit + 1)
        page, more = ids[:limit], len(ids) > limit
        return SourceList(
            conversations=self._summaries(ns, page), next_cursor=_encode("s", page[-1]) if more and page else None
        )

    def detail(self, ns: str, source_id: str) -> SourceDetail:
        """The source's summary and its roots, highest level first, then by position (that is time order: the
        roll-up groups a level from its start, so what is left unparented is the tail). Raises NotFoundError."""
        summaries = self._summaries(ns, [source_id])
        if not summaries:
            raise NotFoundError(f"no conversation or document with id {source_id!r}", "conversation_id")
        roots = sorted(self.storage.roots(ns, source_id, MAX_ROOTS), key=lambda n: (-n.level, n.position))
        return SourceDetail(conversation=summaries[0], top_nodes=[node_view(n) for n in roots])

    def _token_range(self, ns: str, source_id: str, node_id: str) -> tuple[int, int]:
        """[tok_start, tok_end) of the L1 chunks under a node of this source (descending its first and last
        child). Raises NotFoundError when the node is unknown or of another source."""
        found = self.storage.get_nodes(ns, [node_id])
        if not found or found[0].source_id != source_id:
            raise NotFoundError(f"no memory with id {node_id!r} in {source_id!r}", "node_id")
        first = last = found[0]
        while first.level > 1 and first.children:
            got = self.storage.get_nodes(ns, [first.children[0]])
            if not got:
                break
            first = got[0]
        while last.level > 1 and last.children:
            got = self.storage.get_nodes(ns, [last.children[-1]])
            if not got:
                break
            last = got[0]
        return first.tok_start, last.tok_end

    def messages(
        self, ns: str, source_id: str, limit: int = 50, cursor: str | None = None, node_id: str | None = None
    ) -> MessageList:
        """One page of the source's messages in order, or of those a memory covers (`node_id`: the messages
        whose text overlaps the chunks under it; for a fork's own chunk, the parent's messages it holds too, each
        with its own `conversation_id`). Raises NotFoundError, InvalidRequestError (cursor, limit)."""
        if limit < 1:
            raise InvalidRequestError("limit must be at least 1", "limit")
        if self.storage.get_source(ns, source_id) is None:
            raise NotFoundError(f"no conversation or document with id {source_id!r}", "conversation_id")
        tok_from, tok_to = self._token_range(ns, source_id, node_id) if node_id else (0, None)
        if cursor:
            value = _decode("t", cursor)
            if not value.isdigit():
                raise InvalidRequestError("cursor is not a next_cursor of this listing", "cursor")
            tok_from = max(tok_from, int(value))
        if node_id:  # a fork's own chunk may hold its parent's messages before the fork point: list those too
            msgs = stream_messages(self.storage, ns, source_id, tok_from, tok_to, limit + 1)
        else:
            msgs = self.storage.messages(ns, source_id, tok_from, tok_to, limit + 1)
        page, more = msgs[:limit], len(msgs) > limit
        return MessageList(
            messages=[
                MessageView(
                    id=m.id,
                    conversation_id=m.source_id,
                    source_type=m.source_type,
                    seq=m.seq,
                    speaker=m.speaker,
                    content=m.content,
                    created_at=m.created_at,
                    session_id=m.session_id,
                )
                for m in page
            ],
            next_cursor=_encode("t", str(page[-1].tok_offset + page[-1].n_tokens)) if more and page else None,
        )
