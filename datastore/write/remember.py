"""Remembering: new messages and documents become L1 chunks and roll up into summaries.

validate -> render lines -> chunk -> lines (each message's lead) -> embed -> roll up (summarise, embed) -> one
atomic write. Everything a call
computes is computed before anything is written (`TreeBuilder`), and written in one `Storage.commit`: an
embedder or summariser failure leaves the tree as it was (the messages are kept as backlog, indexed later). The
standing instructions of the messages the new chunks cover are found, embedded with the chunks and committed in
the same write (datastore/write/instructions.py), as the background indexer's steps do.
`accept` is the store-now-index-later form the HTTP route uses: it stores the messages in one transaction and
leaves the chunks and summaries to the background indexer (datastore/indexing).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import numpy as np

from datastore.locks import SourceLocks, retry_conflicts
from datastore.read.lineage import chunk_from, stream_messages, tok_at
from datastore.storage import SourceRow, Storage, WriteBatch
from datastore.write.build import TreeBuilder
from datastore.write.instructions import USER_KEY, InstructionKeeper, conversation_user, newly_covered
from datastore.write.order import place, surviving
from datastore.write.spans import SpanReader
from models.api import Document, RememberRequest, RememberResponse, UpsertResponse
from models.memory import MemoryNode, SourceType, StoredMessage
from models.settings import Settings
from models.time import utc
from services.chunking import measure
from services.errors import EmbeddingError, InvalidRequestError, SummaryError
from services.instructions import said, same_speaker
from services.sessions import assign_sessions
from services.tree import Frontier

log = logging.getLogger(__name__)

Incoming = tuple[str, str, str, datetime | None]  # (message id, speaker, content, created_at)


@dataclass
class Extended:
    """What one `extend` did: node ids created/updated, summaries made, message ids skipped or left pending."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SourceWrite:
    """What one write asks of a source (`Writer.extend`): the options of the one write path.

    source_id, source_type: the conversation or document written. incoming: the messages to append, in call
    order, as (message id, speaker, content, created_at); none for a retry of the source's backlog. final: the
    source is complete (a document: its last chunk is sealed). replace: the source's messages and nodes are
    replaced (an upserted document). metadata: the source's metadata when it is new or replaced. index: False
    stores the messages only, as backlog for the background indexer. sessions: message id -> the session id sent
    with it. title: kept in the source's metadata when it has no title yet (with the first messages it stores).
    user: the speaker whose memory the conversation is (source metadata `user`, kept like title; a different one
    than it holds is refused), read by the instruction detection of every later write.
    """

    source_id: str
    source_type: SourceType
    incoming: tuple[Incoming, ...] = ()
    final: bool = False
    replace: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)
    index: bool = True
    sessions: Mapping[str, str] = field(default_factory=dict)
    title: str | None = None
    user: str | None = None


@dataclass
class _Tail:
    """What one attempt of `extend` read of its source: the row as stored (None when new), the row it writes
    over (a fresh one when new or replaced), the version its commit expects, the incoming messages not yet stored
    and the ids of those already stored (skipped), the frontier of its tree and the token where its chunks end."""

    stored: SourceRow | None
    state: SourceRow
    version: int
    fresh: list[Incoming]
    skipped: list[str]
    frontier: Frontier
    chunked_to: int


class Writer:
    """remember, accept, upsert and the retry of backlogs, over one Storage.

    settings: the limits (MAX_MESSAGES, MAX_MESSAGE_CHARS, MAX_DOCUMENTS, MAX_DOCUMENT_CHARS) and
    SESSION_GAP_HOURS. builder: computes chunks and summaries. locks: serialises this process's writers of a
    source (other processes are stopped by the version check of `Storage.commit`). instructions: finds the
    standing instructions of the messages an indexing write covers and settles them for its commit.
    refresh_forks(ns, source id, fork ids): rebuilds a source's forks after a message was inserted before the end
    (`Deleter.refresh_forks`). forgotten(ns): called after a document is replaced, before upsert returns (its old
    text leaves the index snapshots: `NamespaceIndexes.forgotten`).
    """

    def __init__(
        self,
        settings: Settings,
        storage: Storage,
        builder: TreeBuilder,
        locks: SourceLocks,
        instructions: InstructionKeeper,
        refresh_forks: Callable[[str, str, list[str]], None] | None = None,
        forgotten: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.builder = builder
        self.locks = locks
        self.refresh_forks = refresh_forks
        self.forgotten = forgotten
        self.instructions = instructions

    def remember(self, ns: str, req: RememberRequest, index: bool = True) -> RememberResponse:
        """Add `req.messages` to a conversation and extend its tree.

        index=False (what `accept` does): store the messages in one transaction and build nothing; they are all
        `pending_message_ids` until the background indexer chunks and embeds them.

        A message without `created_at` takes the time the call came in. `req.title` is kept as the
        conversation's title (source metadata `title`) when it has none yet; `req.user`, the speaker whose
        memory it is, as its `user` likewise (datastore/write/instructions.py: in a chat between people only
        their preferences are kept). A
        message older than the conversation's latest is inserted by `created_at` (datastore/write/order.py) and
        the tree rebuilt from there, the conversation's forks too.

        Returns the conversation id (new when not given), the id of each message in call order (`message_ids`;
        a message without an id gets a new one, so resending it without one stores it again), the L1 chunks
        created and the open chunk extended, the summaries created, the message ids skipped as already
        remembered, and the message ids stored but not yet indexed because the embedder failed
        (`pending_message_ids`; indexed by the next call or retry_pending).
        Raises InvalidRequestError (a limit, the id names a document, or `user` differs from the
        conversation's): nothing is written then.
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
        received = datetime.now(UTC)  # a message sent without created_at was said when it came in
        incoming: list[Incoming] = []
        seen: set[str] = set()
        repeated: list[str] = []
        sessions: dict[str, str] = {}
        ids = [m.id or uuid.uuid4().hex for m in req.messages]  # without an id, a message is new each time
        for m, mid in zip(req.messages, ids, strict=True):
            if mid in seen:
                repeated.append(mid)  # a repeat within the call is skipped, and said so
                continue
            seen.add(mid)
            incoming.append((mid, m.who, m.content, utc(m.created_at) or received))
            session = m.session_id or req.session_id
            if session:
                sessions[mid] = session
        write = SourceWrite(
            conversation_id,
            "conversation",
            tuple(incoming),
            index=index,
            sessions=sessions,
            title=req.title,
            user=req.user,
        )
        done = self.extend(ns, write)
        return RememberResponse(
            conversation_id=conversation_id,
            message_ids=ids,
            chunk_ids=done.created,
            updated_chunk_ids=done.updated,
            summary_ids=done.summaries,
            skipped_message_ids=done.skipped + repeated,
            pending_message_ids=done.pending,
        )

    def accept(self, ns: str, req: RememberRequest) -> RememberResponse:
        """Store `req.messages` durably (one transaction) and index nothing: store now, index later.

        Same validation, skipping and errors as `remember`; every stored message id is returned in
        `pending_message_ids` and `chunk_ids`/`summary_ids` are empty. The background indexer
        (datastore/indexing/background.py) finds the messages in the store (`Storage.backlog`)."""
        return self.remember(ns, req, index=False)

    def upsert(self, ns: str, documents: list[Document]) -> UpsertResponse:
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
        replaced = False
        for i, doc in enumerate(documents):
            src = self.storage.get_source(ns, doc_ids[i]) if doc.id else None
            if src is not None and src.source_type != "document":
                raise InvalidRequestError(
                    f"{doc.id!r} is a {src.source_type}; a document cannot replace it", f"documents[{i}].id"
                )
            replaced = replaced or src is not None
        ids, pending = [], []
        for doc, doc_id in zip(documents, doc_ids, strict=True):
            meta = doc.metadata.model_dump(mode="json", exclude_none=True) if doc.metadata else {}
            author = (doc.metadata.author if doc.metadata else None) or "document"
            created = utc(doc.metadata.created_at) if doc.metadata else None
            incoming = ((doc_id, author, doc.text, created),)
            done = self.extend(ns, SourceWrite(doc_id, "document", incoming, final=True, replace=True, metadata=meta))
            ids.append(doc_id)
            pending += done.pending
        if replaced and self.forgotten is not None:  # a replaced document's old text is forgotten
            self.forgotten(ns)
        return UpsertResponse(ids=ids, pending_ids=pending)

    def retry_pending(self) -> int:
        """Build the chunks and summaries of every backlog (messages stored while the embedder failed), inline.

        Returns how many sources were brought up to date; a source whose embedding fails again stays pending.
        """
        done = 0
        for ns, source_id in self.storage.backlog():
            src = self.storage.get_source(ns, source_id)
            if src is None:
                continue
            try:
                self.extend(ns, SourceWrite(source_id, src.source_type, final=src.source_type == "document"))
                done += 1
            except (EmbeddingError, SummaryError) as exc:
                log.warning("backlog of %r still pending: %s", source_id, exc.message)
        return done

    def extend(self, ns: str, write: SourceWrite) -> Extended:
        """Append `write.incoming` to a source, chunk its unchunked tail, embed, roll up, commit. See `remember`.

        The tail also holds any backlog: messages stored earlier while the embedder was failing. If embedding
        fails now, the new messages are still committed (as backlog, `pending`) and the tree is left as it was;
        the next call on the source, or `retry_pending`, builds their chunks and summaries. The steps, retried
        whole when another writer committed first: `_read` (the source as stored, what is new) ->
        `_numbered` (the new messages as stored rows) -> `_insert` (a late message: placed by time, the tree
        rebuilt from there) or `_append` (store after the last) -> `_index` (chunk, lines, instructions, embed,
        roll up, one commit).
        Raises InvalidRequestError (the id names the other kind of source), ConflictError (other writers kept
        committing), EmbeddingError/SummaryError (a backlog retry failed again).
        """
        refresh: list[str] = []  # the forks to rebuild after an insertion (what they hold of this source moved)

        def attempt() -> Extended:
            tail = self._read(ns, write)
            user = conversation_user(tail.state.metadata)
            if write.user and user and not same_speaker(user, write.user):
                raise InvalidRequestError(f"{write.source_id!r} is {user!r}'s memory; its user cannot change", "user")
            if not tail.fresh and (tail.chunked_to >= tail.state.n_tokens or not write.index):
                return Extended(skipped=tail.skipped)
            stored = self._numbered(write, tail)
            # the message before them: the source's last, or for a new fork its parent's fork message
            state = tail.state
            last = stream_messages(self.storage, ns, write.source_id, state.n_tokens - 1) if state.n_tokens else []
            metadata = state.metadata
            if write.title and stored and not metadata.get("title"):
                metadata = {**metadata, "title": write.title}
            if write.user and stored and not conversation_user(metadata):
                metadata = {**metadata, USER_KEY: write.user}
            merged = self._in_time_order(ns, write.source_id, state, stored, last)
            if merged is not None:  # a late message: inserted by time, the tree rebuilt from there
                refresh[:] = list(state.metadata.get("forks") or [])
                return self._insert(ns, write, tail, metadata, merged, stored)
            return self._append(ns, write, tail, metadata, stored, last)

        with self.locks(ns, write.source_id):
            done = retry_conflicts(
                attempt, f"{write.source_id!r} kept changing under concurrent writers; retry", "conversation_id"
            )
        if refresh and self.refresh_forks is not None:
            self.refresh_forks(ns, write.source_id, refresh)
        return done

    def _read(self, ns: str, write: SourceWrite) -> _Tail:
        """The source as stored (a fresh row when it is new or replaced), which incoming messages are new, and its
        tree's frontier. Raises InvalidRequestError when the id names the other kind of source."""
        storage = self.storage
        src = storage.get_source(ns, write.source_id)
        if src and src.source_type != write.source_type:
            field_name = "conversation_id" if write.source_type == "conversation" else "id"
            raise InvalidRequestError(
                f"{write.source_id!r} is a {src.source_type}, not a {write.source_type}", field_name
            )
        if write.replace or src is None:
            state = SourceRow(write.source_id, write.source_type, metadata=dict(write.metadata))
            known: set[str] = set()
        else:
            state = src
            known = storage.known_message_ids(ns, write.source_id, [m[0] for m in write.incoming])
        frontier = Frontier.from_nodes(
            storage.frontier(ns, write.source_id) if state.version else [], chunk_from(state.metadata)
        )
        last_l1 = frontier.last.get(1)
        return _Tail(
            stored=src,
            state=state,
            version=src.version if src else 0,
            fresh=[m for m in write.incoming if m[0] not in known],
            skipped=[m[0] for m in write.incoming if m[0] in known],
            frontier=frontier,
            chunked_to=last_l1.tok_end if last_l1 else 0,
        )

    @staticmethod
    def _numbered(write: SourceWrite, tail: _Tail) -> list[StoredMessage]:
        """The new messages as stored rows, numbered after the source's last."""
        return [
            StoredMessage(
                id=mid,
                source_id=write.source_id,
                source_type=write.source_type,
                seq=tail.state.max_seq + 1 + i,
                speaker=who,
                content=content,
                created_at=created_at,
            )
            for i, (mid, who, content, created_at) in enumerate(tail.fresh)
        ]

    def _append(
        self,
        ns: str,
        write: SourceWrite,
        tail: _Tail,
        metadata: dict[str, Any],
        stored: list[StoredMessage],
        last: list[StoredMessage],
    ) -> Extended:
        """Store `stored` after the source's `last` message (sessions assigned, tokens measured); with
        `write.index` its unchunked tail is indexed in the same commit (`_index`), else they are backlog."""
        state = tail.state
        previous = last[-1] if last else None
        assign_sessions(stored, previous, dict(write.sessions), self.settings.session_gap_hours)
        offset = measure(stored, previous.created_at if previous else None, state.n_tokens)
        source = SourceRow(
            write.source_id,
            write.source_type,
            tail.version + 1,
            n_messages=state.n_messages + len(stored),
            n_tokens=offset,
            max_seq=stored[-1].seq if stored else state.max_seq,
            metadata=metadata,
        )
        backlog = WriteBatch(source=source, messages=stored, replace=write.replace and tail.stored is not None)
        if not write.index:  # store now, index later: the messages are the backlog of the background indexer
            self.storage.commit(ns, backlog, tail.version)
            return Extended(skipped=tail.skipped, pending=[m.id for m in stored])
        return self._index(ns, write, tail, backlog)

    def _index(self, ns: str, write: SourceWrite, tail: _Tail, backlog: WriteBatch) -> Extended:
        """Chunk the source's unchunked tail (its stored messages from the frontier's chunk start and `backlog`'s
        new ones), find their lines and standing instructions, embed, roll up, and commit it all with `backlog`
        in one write. When the embedder or summariser fails, `backlog` alone is committed (its messages pending)."""
        storage, builder, keeper = self.storage, self.builder, self.instructions
        source_id, frontier, stored = write.source_id, tail.frontier, backlog.messages
        start = builder.read_start(frontier)
        prior = stream_messages(storage, ns, source_id, start) if start < tail.state.n_tokens else []
        open_chunk = frontier.open_chunk
        try:
            chunks, _ = builder.chunks(frontier, prior + stored, write.source_type, source_id, write.final)
            spans = SpanReader(storage, ns, source_id, prior + stored)
            summaries, reparented = builder.summaries(frontier, [c for c in chunks if c.sealed], spans)
            end = chunks[-1].tok_end if chunks else tail.chunked_to
            covered = newly_covered(prior + stored, tail.chunked_to, end)
            lines = builder.lines(frontier, covered, chunks, source_id, prior)
            user = conversation_user(backlog.source.metadata) if backlog.source else None
            found = keeper.detect(ns, write.source_type, source_id, covered, user)
            same = builder.unchanged_open_chunk(frontier, chunks)
            kept = storage.get_vectors(ns, [same]) if same else {}
            older = partial(storage.get_vectors, ns)  # the stored children of a new summary
            nodes, said_vectors = builder.embed_with(chunks + lines + summaries, [said(i) for i in found], kept, older)
            nodes += [(n, None) for n in reparented]
        except (EmbeddingError, SummaryError) as exc:
            if not stored:
                raise  # a retry of the backlog failed again: nothing new to keep
            log.warning("%s; keeping %d messages of %r to index later", exc.message, len(stored), source_id)
            storage.commit(ns, backlog, tail.version)
            return Extended(skipped=tail.skipped, pending=[m.id for m in stored])
        with keeper.lock(ns, bool(found)):
            storage.commit(
                ns,
                WriteBatch(
                    source=backlog.source,
                    messages=stored,
                    nodes=nodes,
                    replace=backlog.replace,
                    instructions=keeper.settle(ns, found, said_vectors),
                ),
                tail.version,
            )
        updated = [open_chunk.id] if open_chunk else []
        return Extended(
            created=[c.id for c in chunks if c.id not in updated],
            updated=updated,
            summaries=[n.id for n in summaries],
            skipped=tail.skipped,
        )

    def _in_time_order(
        self, ns: str, source_id: str, state: SourceRow, fresh: list[StoredMessage], last: list[StoredMessage]
    ) -> list[StoredMessage] | None:
        """The source's messages with `fresh` placed by time (datastore/write/order.py), or None when they
        simply follow the stored ones (the common case, decided from the last stored message alone)."""
        if not fresh or state.n_messages == 0 or state.source_type != "conversation":
            return None
        times = [m.created_at for m in fresh if m.created_at is not None]
        if not times:
            return None
        latest = last[-1].created_at if last else None
        if latest is not None and min(times) >= latest:
            return None
        existing = self.storage.messages(ns, source_id)
        merged = place(existing, fresh)
        if all(a is b for a, b in zip(merged, existing, strict=False)):
            return None  # appended after all
        return merged

    def _insert(
        self,
        ns: str,
        write: SourceWrite,
        tail: _Tail,
        metadata: dict[str, Any],
        merged: list[StoredMessage],
        fresh: list[StoredMessage],
    ) -> Extended:
        """Commit `merged` (the source's messages with `fresh` inserted by time) with the tree cut back to what
        the insertion leaves unchanged; with `write.index`, the chunks and summaries from there are rebuilt in the
        same commit (else, or when the embedder fails, they are the backlog of the indexer)."""
        storage, builder, s = self.storage, self.builder, self.settings
        source_id, source_type, version, skipped = write.source_id, write.source_type, tail.version, tail.skipped
        sessions = dict(write.sessions)
        new_ids = {m.id for m in fresh}
        first = next(i for i, m in enumerate(merged) if m.id in new_ids)
        moved = next(m for m in merged[first:] if m.id not in new_ids).tok_offset  # where the stream changes
        before = merged[first - 1] if first else None
        if before is None and moved > 0:  # a fork's first message: its parent's fork message precedes it
            held = stream_messages(storage, ns, source_id, moved - 1, moved)
            before = held[-1] if held else None
        previous_time = next(
            (m.created_at for m in reversed(merged[:first]) if m.created_at is not None),
            before.created_at if before is not None else None,
        )
        for i in range(first, len(merged)):
            if merged[i].id in new_ids:
                assign_sessions([merged[i]], merged[i - 1] if i > 0 else before, sessions, s.session_gap_hours)
        for seq, m in enumerate(merged):
            m.seq = seq
        offset = measure(merged[first:], previous_time, moved)
        source = SourceRow(
            source_id,
            source_type,
            version + 1,
            n_messages=len(merged),
            n_tokens=offset,
            max_seq=len(merged) - 1,
            metadata=metadata,
        )
        kept = surviving(storage.source_nodes(ns, source_id), moved, s.chunk_size)
        vectors = storage.get_vectors(ns, [n.id for n in kept])
        kept_nodes: list[tuple[MemoryNode, np.ndarray | None]] = [(n, vectors[n.id]) for n in kept]
        backlog = WriteBatch(source=source, messages=merged, nodes=kept_nodes, replace=True)
        pending = Extended(skipped=skipped, pending=[m.id for m in fresh])
        if not write.index:
            storage.commit(ns, backlog, version)
            return pending
        frontier = Frontier.from_nodes(kept, chunk_from(metadata))
        start = builder.read_start(frontier)
        held_at = tok_at(metadata.get("fork"))
        prior = stream_messages(storage, ns, source_id, start, held_at) if start < held_at else []
        prior += [m for m in merged if m.tok_offset + m.n_tokens > start]
        keeper = self.instructions
        covered_before = {mid for n in storage.source_nodes(ns, source_id, 1) for mid in n.message_ids}
        try:
            chunks, _ = builder.chunks(frontier, prior, source_type, source_id, False)
            spans = SpanReader(storage, ns, source_id, prior)
            summaries, _ = builder.summaries(frontier, [c for c in chunks if c.sealed], spans)
            covered_now = {mid for c in chunks for mid in c.message_ids}
            newly = [m for m in merged if m.id in covered_now and m.id not in covered_before]  # read once each
            lined = {mid for n in kept if n.level == 0 for mid in n.message_ids}  # lines `surviving` kept
            end = chunks[-1].tok_end if chunks else 0
            unlined = [m for m in prior if m.id not in lined and m.tok_offset + m.n_tokens <= end]
            lines = builder.lines(frontier, unlined, chunks, source_id, prior)
            found = keeper.detect(ns, source_type, source_id, newly, conversation_user(metadata))
            made, said_vectors = builder.embed_with(
                chunks + lines + summaries, [said(i) for i in found], stored=partial(storage.get_vectors, ns)
            )
        except (EmbeddingError, SummaryError) as exc:
            log.warning("%s; keeping %d messages of %r to index later", exc.message, len(fresh), source_id)
            storage.commit(ns, backlog, version)
            return pending
        with keeper.lock(ns, bool(found)):
            storage.commit(
                ns,
                WriteBatch(
                    source=source,
                    messages=merged,
                    nodes=kept_nodes + made,
                    replace=True,
                    instructions=keeper.settle(ns, found, said_vectors),
                ),
                version,
            )
        return Extended(created=[c.id for c in chunks], summaries=[n.id for n in summaries], skipped=skipped)
