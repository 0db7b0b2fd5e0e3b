"""Remembering: new messages and documents become L1 chunks and roll up into summaries.

validate -> render lines -> chunk -> embed -> roll up (summarise, embed) -> one atomic write. Everything a call
computes is computed before anything is written, and written in one provider transaction (`_commit`): an
embedder or summariser failure leaves the tree as it was (the messages are kept as backlog, indexed later).
Writers of one source are serialised in-process by a lock and across processes by the source's version number,
checked at commit (a stale writer gets ConflictError and recomputes).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from pyramind.datastore.hooks import COMMIT_ATTEMPTS, Extended, SourceRow, StoreBase, WriteBatch, backoff
from pyramind.models.api import Document, RememberRequest, RememberResponse, UpsertResponse
from pyramind.models.memory import SourceType, StoredMessage
from pyramind.models.time import utc
from pyramind.services.chunking import TokenStream, measure, plan_windows
from pyramind.services.errors import ConflictError, EmbeddingError, InvalidRequestError, SummaryError
from pyramind.services.sessions import assign_sessions
from pyramind.services.tree import Frontier, chunk_nodes, roll_up

log = logging.getLogger(__name__)


class Remembering(StoreBase):
    """remember_sync, upsert_sync and the backlog retry."""

    def remember_sync(self, ns: str, req: RememberRequest, index: bool = True) -> RememberResponse:
        """Add `req.messages` to a conversation and extend its tree.

        index=False (what `accept_sync` does): store the messages in one transaction and build nothing; they are
        all `pending_message_ids` until the background indexer (datastore/indexer.py) chunks and embeds them.

        Returns the conversation id (new when not given), the L1 chunks created and the open chunk extended, the
        summaries created, the message ids skipped as already remembered, and the message ids stored but not yet
        indexed because the embedder failed (`pending_message_ids`; indexed by the next call or retry_pending).
        Raises InvalidRequestError (a limit, or the id names a document): nothing is written then.
        """
        s = self.settings
        if len(req.messages) > s.max_messages:
            raise InvalidRequestError(f"at most {s.max_messages} messages per call (MAX_MESSAGES)", "messages")
        for i, m in enumerate(req.messages):
            if len(m.content) > s.max_message_chars:
                raise InvalidRequestError(
                    f"message longer than {s.max_message_chars} characters (MAX_MESSAGE_CHARS)",
                    f"messages[{i}].content",
                )
        conversation_id = req.conversation_id or uuid.uuid4().hex
        incoming, seen, repeated, sessions = [], set(), [], {}
        for m in req.messages:
            mid = m.id or uuid.uuid4().hex
            if mid in seen:
                repeated.append(mid)  # a repeat within the call is skipped, and said so
                continue
            seen.add(mid)
            incoming.append((mid, m.who, m.content, utc(m.created_at)))
            if m.session_id or req.session_id:
                sessions[mid] = m.session_id or req.session_id
        done = self._extend(ns, conversation_id, "conversation", incoming, False, index=index, sessions=sessions)
        return RememberResponse(
            conversation_id=conversation_id,
            chunk_ids=done.created,
            updated_chunk_ids=done.updated,
            summary_ids=done.summaries,
            skipped_message_ids=done.skipped + repeated,
            pending_message_ids=done.pending,
        )

    def _extend(
        self,
        ns: str,
        source_id: str,
        source_type: SourceType,
        incoming: list[tuple[str, str, str, datetime | None]],
        final: bool,
        replace: bool = False,
        metadata: dict[str, Any] | None = None,
        index: bool = True,
        sessions: dict[str, str] | None = None,
    ) -> Extended:
        """Append messages to a source, chunk its unchunked tail, embed, roll up, commit. See remember_sync.

        The tail also holds any backlog: messages stored earlier while the embedder was failing. If embedding
        fails now, the new messages are still committed (as backlog, `pending`) and the tree is left as it was;
        the next call on the source, or `retry_pending`, builds their chunks and summaries. index=False: only
        store the new messages (one transaction), leaving them as backlog for the background indexer.
        """
        s = self.settings
        with self._source_lock(ns, source_id):
            for attempt in range(COMMIT_ATTEMPTS):
                src = self._get_source(ns, source_id)
                if src and src.source_type != source_type:
                    field = "conversation_id" if source_type == "conversation" else "id"
                    raise InvalidRequestError(f"{source_id!r} is a {src.source_type}, not a {source_type}", field)
                version = src.version if src else 0
                if replace or src is None:
                    src_state = SourceRow(source_id, source_type, metadata=metadata or {})
                    known: set[str] = set()
                else:
                    src_state = src
                    known = self._known_message_ids(ns, source_id, [m[0] for m in incoming])
                fresh = [m for m in incoming if m[0] not in known]
                skipped = [m[0] for m in incoming if m[0] in known]
                frontier = Frontier.from_nodes(self._frontier(ns, source_id)) if src_state.version else Frontier()
                open_chunk, last_l1 = frontier.open_chunk, frontier.last.get(1)
                chunked_to = last_l1.tok_end if last_l1 else 0
                if not fresh and (chunked_to >= src_state.n_tokens or not index):
                    return Extended(skipped=skipped)

                stored = [
                    StoredMessage(id=mid, source_id=source_id, source_type=source_type,
                                  seq=src_state.max_seq + 1 + i, speaker=who, content=content, created_at=created_at)
                    for i, (mid, who, content, created_at) in enumerate(fresh)
                ]
                last = self._messages_from(ns, source_id, src_state.n_tokens - 1) if src_state.n_tokens else []
                assign_sessions(stored, last[-1] if last else None, sessions or {}, s.session_gap_hours)
                offset = measure(stored, last[-1].created_at if last else None, src_state.n_tokens)
                source = SourceRow(
                    source_id, source_type, version + 1, n_messages=src_state.n_messages + len(stored),
                    n_tokens=offset, max_seq=stored[-1].seq if stored else src_state.max_seq,
                    metadata=src_state.metadata,
                )
                backlog = WriteBatch(source=source, messages=stored, replace=replace and src is not None)
                if not index:  # store now, index later: the messages are the backlog of the background indexer
                    try:
                        self._commit(ns, backlog, version)
                    except ConflictError:
                        backoff(attempt)
                        continue
                    return Extended(skipped=skipped, pending=[m.id for m in stored])
                start = frontier.chunk_start(s.chunk_overlap)
                prior = self._messages_from(ns, source_id, start) if start < src_state.n_tokens else []
                stream = TokenStream.from_messages(prior + stored)
                windows = plan_windows(stream, start, s.chunk_size, s.chunk_overlap, final)
                first_position = open_chunk.position if open_chunk else frontier.counts.get(1, 0)
                chunks = chunk_nodes(
                    stream, windows, source_type, source_id, first_position,
                    first_id=open_chunk.id if open_chunk else None,
                )
                try:
                    chunk_vectors = self.embedder.embed([c.text for c in chunks], bulk=True)
                    summaries = roll_up(
                        frontier, [c for c in chunks if c.sealed], self._summarise, s.fan_out, s.max_level
                    )
                    summary_vectors = self.embedder.embed([n.text for n in summaries], bulk=True)
                except (EmbeddingError, SummaryError) as exc:
                    if not stored:
                        raise  # a retry of the backlog failed again: nothing new to keep
                    log.warning("%s; keeping %d messages of %r to index later", exc.message, len(stored), source_id)
                    try:
                        self._commit(ns, backlog, version)
                    except ConflictError:
                        backoff(attempt)
                        continue
                    return Extended(skipped=skipped, pending=[m.id for m in stored])
                reparented = [n for nodes in frontier.pending.values() for n in nodes if n.parent_id]
                batch = WriteBatch(
                    source=source,
                    messages=stored,
                    nodes=[(c, chunk_vectors[i]) for i, c in enumerate(chunks)]
                    + [(n, summary_vectors[i]) for i, n in enumerate(summaries)]
                    + [(n, None) for n in reparented],
                    replace=replace and src is not None,
                )
                try:
                    self._commit(ns, batch, version)
                except ConflictError:
                    backoff(attempt)
                    continue
                updated = [open_chunk.id] if open_chunk else []
                return Extended(
                    created=[c.id for c in chunks if c.id not in updated], updated=updated,
                    summaries=[n.id for n in summaries], skipped=skipped,
                )
        raise ConflictError(f"{source_id!r} kept changing under concurrent writers; retry", "conversation_id")

    def accept_sync(self, ns: str, req: RememberRequest) -> RememberResponse:
        """Store `req.messages` durably (one transaction) and index nothing: store now, index later.

        Same validation, skipping and errors as `remember_sync`; every stored message id is returned in
        `pending_message_ids` and `chunk_ids`/`summary_ids` are empty. The background indexer
        (`datastore.indexer.Indexer`) finds the messages in the store (`_backlog`) and makes them searchable.
        """
        return self.remember_sync(ns, req, index=False)

    def retry_pending_sync(self) -> int:
        """Build the chunks and summaries of every backlog (messages stored while the embedder failed).

        Returns how many sources were brought up to date; a source whose embedding fails again stays pending.
        """
        done = 0
        for ns, source_id in self._backlog():
            src = self._get_source(ns, source_id)
            if src is None:
                continue
            try:
                self._extend(ns, source_id, src.source_type, [], src.source_type == "document")
                done += 1
            except (EmbeddingError, SummaryError) as exc:
                log.warning("backlog of %r still pending: %s", source_id, exc.message)
        return done
    # ------------------------------------------------------------------ upsert
    def upsert_sync(self, ns: str, documents: list[Document]) -> UpsertResponse:
        """Store documents (a document with a known id is replaced); each is chunked like a conversation and
        its chunks rolled up. Returns the document ids.

        Raises InvalidRequestError (a limit: MAX_DOCUMENTS, MAX_DOCUMENT_CHARS; or an id that names a
        conversation, never replaced by a document): every document is checked before any is written.
        """
        s = self.settings
        if len(documents) > s.max_documents:
            raise InvalidRequestError(f"at most {s.max_documents} documents per call (MAX_DOCUMENTS)", "documents")
        for i, doc in enumerate(documents):
            if len(doc.text) > s.max_document_chars:
                raise InvalidRequestError(
                    f"document longer than {s.max_document_chars} characters (MAX_DOCUMENT_CHARS)",
                    f"documents[{i}].text",
                )
        doc_ids = [doc.id or uuid.uuid4().hex for doc in documents]
        for i, doc in enumerate(documents):
            src = self._get_source(ns, doc_ids[i]) if doc.id else None
            if src is not None and src.source_type != "document":
                raise InvalidRequestError(
                    f"{doc.id!r} is a {src.source_type}; a document cannot replace it", f"documents[{i}].id"
                )
        ids, pending = [], []
        for doc, doc_id in zip(documents, doc_ids, strict=True):
            meta = doc.metadata.model_dump(mode="json", exclude_none=True) if doc.metadata else {}
            author = (doc.metadata.author if doc.metadata else None) or "document"
            created = utc(doc.metadata.created_at) if doc.metadata else None
            done = self._extend(ns, doc_id, "document", [(doc_id, author, doc.text, created)], True, True, meta)
            ids.append(doc_id)
            pending += done.pending
        return UpsertResponse(ids=ids, pending_ids=pending)
