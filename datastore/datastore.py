"""The DataStore: one abstract class that owns Pyramind's pipeline; providers fill in small storage hooks.

remember: validate -> render lines -> chunk -> embed -> roll up (summarise, embed) -> write atomically.
query:    embed every query in one batch -> search (any level, filters) -> answer.
delete:   forget messages, then rebuild what was derived from them, so no level keeps a forgotten text.

Everything a call computes (chunks, embeddings, summaries) is computed before anything is written, and written
in one provider transaction (`_commit`): an embedder or summariser failure leaves the store as it was. Writers
of one source are serialised in-process by a lock and across processes by the source's version number, checked
at commit (a stale writer gets ConflictError and recomputes).

Provider hooks are synchronous; the async API runs each call in a worker thread, so nothing blocks the event
loop. Every hook takes the namespace: isolation is enforced here, not in the routes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from datastore.retrieval import retrieve
from models.api import (
    DeleteFilter,
    DeleteRequest,
    DeleteResponse,
    Document,
    ExpandResponse,
    Query,
    QueryFilter,
    QueryResponse,
    QueryResult,
    QueryResults,
    RememberRequest,
    RememberResponse,
    UpsertResponse,
    node_view,
)
from models.memory import MemoryNode, SourceType, StoredMessage
from models.settings import Settings
from models.time import utc
from services.chunking import TokenStream, measure, plan_windows
from services.embedding import Embedder
from services.errors import (
    ConflictError,
    EmbeddingError,
    EmbeddingMismatchError,
    InvalidRequestError,
    NotFoundError,
    SummaryError,
)
from services.summarising import Summariser
from services.tree import Frontier, chunk_nodes, roll_up

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "default"
_COMMIT_ATTEMPTS = 12


@dataclass
class SourceRow:
    """A conversation or document: its counters and a version bumped by every commit."""

    source_id: str
    source_type: SourceType
    version: int = 0
    n_messages: int = 0
    n_tokens: int = 0
    max_seq: int = -1
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Extended:
    """What one `_extend` did: node ids created/updated, summaries made, message ids skipped or left pending."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)


@dataclass
class WriteBatch:
    """Everything one call writes for one source, applied atomically by `_commit`.

    replace: delete all of the source's messages and nodes first. delete_source: remove the source entirely
    (then the other fields are ignored). nodes: (node, vector); a None vector keeps the stored one (a metadata
    update of an existing node, e.g. its parent or its position).
    """

    source: SourceRow
    messages: list[StoredMessage] = field(default_factory=list)
    nodes: list[tuple[MemoryNode, np.ndarray | None]] = field(default_factory=list)
    replace: bool = False
    delete_source: bool = False


class DataStore(ABC):
    """Pyramind's storage and pipeline. Construct with settings, an embedder and a summariser; call `open()`."""

    name = "abstract"

    def __init__(self, settings: Settings, embedder: Embedder, summariser: Summariser) -> None:
        self.settings = settings
        self.embedder = embedder
        self.summariser = summariser
        self._locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()

    # ------------------------------------------------------------------ provider hooks
    @abstractmethod
    def _open(self) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Release connections and files; the store can't be used afterwards."""

    @abstractmethod
    def _record_embedding(self, model: str, dimension: int) -> tuple[str, int]:
        """The (model, dimension) the store was made with, recording the given ones when it has none yet."""

    @abstractmethod
    def _get_source(self, ns: str, source_id: str) -> SourceRow | None: ...

    @abstractmethod
    def _known_message_ids(self, ns: str, source_id: str, ids: Sequence[str]) -> set[str]: ...

    @abstractmethod
    def _messages_from(self, ns: str, source_id: str, tok_offset: int) -> list[StoredMessage]:
        """Messages of the source whose tokens end after `tok_offset`, in seq order."""

    @abstractmethod
    def _frontier(self, ns: str, source_id: str) -> list[MemoryNode]:
        """The source's nodes without a parent, plus the last node (highest position) of every level."""

    @abstractmethod
    def _source_nodes(self, ns: str, source_id: str) -> list[MemoryNode]: ...

    @abstractmethod
    def _get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]: ...

    @abstractmethod
    def _get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]: ...

    @abstractmethod
    def _commit(self, ns: str, batch: WriteBatch, expected_version: int) -> None:
        """Apply `batch` in one transaction if the source's stored version (0 when absent) equals
        `expected_version`, bumping it; else raise ConflictError and change nothing."""

    @abstractmethod
    def _search(
        self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None
    ) -> list[tuple[MemoryNode, float]]:
        """The top_k nodes of the namespace closest to `vector` (cosine, descending) that match `flt`."""

    @abstractmethod
    def _find_messages(
        self, ns: str, ids: Sequence[str] | None = None, flt: DeleteFilter | None = None
    ) -> list[tuple[str, str]]:
        """(source_id, message id) of the messages with one of `ids`, or matching `flt`."""

    @abstractmethod
    def _delete_namespace(self, ns: str) -> tuple[int, int]:
        """Remove everything of the namespace; returns (messages, nodes) removed."""

    # provider hooks for `datastore.migrate` (copying a whole store)
    @abstractmethod
    def _list_namespaces(self) -> list[str]:
        """Every namespace holding at least one source, sorted."""

    @abstractmethod
    def _list_sources(self, ns: str) -> list[str]:
        """The source ids (conversations and documents) of the namespace, sorted."""

    def _backlog(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with messages past its last chunk (stored while the embedder
        failed). Providers that can list them override this; the default finds none."""
        return []

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> DataStore:
        """Open the provider and check the embedding model; raises EmbeddingMismatchError, StoreError."""
        self._open()
        model, dimension = self.embedder.model_name, self.embedder.dimension
        recorded = self._record_embedding(model, dimension)
        if recorded != (model, dimension):
            self.close()
            raise EmbeddingMismatchError(
                f"the {self.name} store ({self.location}) holds {recorded[0]} vectors of dimension {recorded[1]}, "
                f"but the embedder is {model} ({dimension}); use another store or the same embedder"
            )
        return self

    @property
    def location(self) -> str:
        """Where the store lives, for messages (a file, a database, an index); never a secret."""
        return self.name

    def _source_lock(self, ns: str, source_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks[(ns, source_id)]

    # ------------------------------------------------------------------ async API (what the server calls)
    async def remember(self, ns: str, req: RememberRequest) -> RememberResponse:
        return await asyncio.to_thread(self.remember_sync, ns, req)

    async def upsert(self, ns: str, documents: list[Document]) -> UpsertResponse:
        return await asyncio.to_thread(self.upsert_sync, ns, documents)

    async def query(self, ns: str, queries: list[Query]) -> QueryResponse:
        return await asyncio.to_thread(self.query_sync, ns, queries)

    async def delete(self, ns: str, req: DeleteRequest) -> DeleteResponse:
        return await asyncio.to_thread(self.delete_sync, ns, req)

    async def expand(self, ns: str, node_id: str) -> ExpandResponse:
        return await asyncio.to_thread(self.expand_sync, ns, node_id)

    # ------------------------------------------------------------------ remember
    def remember_sync(self, ns: str, req: RememberRequest) -> RememberResponse:
        """Add `req.messages` to a conversation and extend its tree.

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
        incoming, seen = [], set()
        for m in req.messages:
            mid = m.id or uuid.uuid4().hex
            if mid in seen:
                continue
            seen.add(mid)
            incoming.append((mid, m.who, m.content, utc(m.created_at)))
        done = self._extend(ns, conversation_id, "conversation", incoming, False)
        return RememberResponse(
            conversation_id=conversation_id,
            chunk_ids=done.created,
            updated_chunk_ids=done.updated,
            summary_ids=done.summaries,
            skipped_message_ids=done.skipped,
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
    ) -> Extended:
        """Append messages to a source, chunk its unchunked tail, embed, roll up, commit. See remember_sync.

        The tail also holds any backlog: messages stored earlier while the embedder was failing. If embedding
        fails now, the new messages are still committed (as backlog, `pending`) and the tree is left as it was;
        the next call on the source, or `retry_pending`, builds their chunks and summaries.
        """
        s = self.settings
        with self._source_lock(ns, source_id):
            for attempt in range(_COMMIT_ATTEMPTS):
                src = self._get_source(ns, source_id)
                if src and src.source_type != source_type and not replace:
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
                if not fresh and chunked_to >= src_state.n_tokens:
                    return Extended(skipped=skipped)

                stored = [
                    StoredMessage(id=mid, source_id=source_id, source_type=source_type,
                                  seq=src_state.max_seq + 1 + i, speaker=who, content=content, created_at=created_at)
                    for i, (mid, who, content, created_at) in enumerate(fresh)
                ]
                last = self._messages_from(ns, source_id, src_state.n_tokens - 1) if src_state.n_tokens else []
                offset = measure(stored, last[-1].created_at if last else None, src_state.n_tokens)
                source = SourceRow(
                    source_id, source_type, version + 1, n_messages=src_state.n_messages + len(stored),
                    n_tokens=offset, max_seq=stored[-1].seq if stored else src_state.max_seq,
                    metadata=src_state.metadata,
                )
                if open_chunk is not None:
                    start = open_chunk.tok_start
                elif last_l1 is not None:
                    start = last_l1.tok_end - s.chunk_overlap
                else:
                    start = 0
                prior = self._messages_from(ns, source_id, start) if start < src_state.n_tokens else []
                stream = TokenStream.from_messages(prior + stored)
                windows = plan_windows(stream, start, s.chunk_size, s.chunk_overlap, final)
                first_position = open_chunk.position if open_chunk else frontier.counts.get(1, 0)
                chunks = chunk_nodes(
                    stream, windows, source_type, source_id, first_position,
                    first_id=open_chunk.id if open_chunk else None,
                )
                try:
                    chunk_vectors = self.embedder.embed([c.text for c in chunks])
                    summaries = roll_up(
                        frontier, [c for c in chunks if c.sealed], self._summarise, s.fan_out, s.max_level
                    )
                    summary_vectors = self.embedder.embed([n.text for n in summaries])
                except (EmbeddingError, SummaryError) as exc:
                    if not stored:
                        raise  # a retry of the backlog failed again: nothing new to keep
                    log.warning("%s; keeping %d messages of %r to index later", exc.message, len(stored), source_id)
                    batch = WriteBatch(source=source, messages=stored, replace=replace and src is not None)
                    try:
                        self._commit(ns, batch, version)
                    except ConflictError:
                        _backoff(attempt)
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
                    _backoff(attempt)
                    continue
                updated = [open_chunk.id] if open_chunk else []
                return Extended(
                    created=[c.id for c in chunks if c.id not in updated], updated=updated,
                    summaries=[n.id for n in summaries], skipped=skipped,
                )
        raise ConflictError(f"{source_id!r} kept changing under concurrent writers; retry", "conversation_id")

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

    def _summarise(self, texts: list[str], context: str | None) -> tuple[str, str]:
        return self.summariser.summarise(texts, context, self.settings.summary_max_tokens)

    # ------------------------------------------------------------------ upsert
    def upsert_sync(self, ns: str, documents: list[Document]) -> UpsertResponse:
        """Store documents (a document with a known id is replaced); each is chunked like a conversation and
        its chunks rolled up. Returns the document ids. Raises InvalidRequestError on a limit."""
        if len(documents) > self.settings.max_documents:
            raise InvalidRequestError(
                f"at most {self.settings.max_documents} documents per call (MAX_DOCUMENTS)", "documents"
            )
        ids, pending = [], []
        for doc in documents:
            doc_id = doc.id or uuid.uuid4().hex
            meta = doc.metadata.model_dump(mode="json", exclude_none=True) if doc.metadata else {}
            author = (doc.metadata.author if doc.metadata else None) or "document"
            created = utc(doc.metadata.created_at) if doc.metadata else None
            done = self._extend(ns, doc_id, "document", [(doc_id, author, doc.text, created)], True, True, meta)
            ids.append(doc_id)
            pending += done.pending
        return UpsertResponse(ids=ids, pending_ids=pending)

    # ------------------------------------------------------------------ query
    def query_sync(self, ns: str, queries: list[Query]) -> QueryResponse:
        """Embed all queries in one batch and rank each by its mode (datastore/retrieval.py); best first.

        Raises InvalidRequestError when a limit (MAX_QUERIES, MAX_TOP_K) is exceeded.
        """
        s = self.settings
        if len(queries) > s.max_queries:
            raise InvalidRequestError(f"at most {s.max_queries} queries per call (MAX_QUERIES)", "queries")
        for i, q in enumerate(queries):
            if q.top_k > s.max_top_k:
                raise InvalidRequestError(f"top_k must be at most {s.max_top_k} (MAX_TOP_K)", f"queries[{i}].top_k")
        vectors = self.embedder.embed([q.query for q in queries])
        out = []
        for q, v in zip(queries, vectors, strict=True):
            hits = retrieve(self, ns, q.query, v, q.top_k, q.filter, q.mode or s.retrieval_mode)
            out.append(QueryResults(query=q.query, results=[to_result(n, score) for n, score in hits]))
        return QueryResponse(results=out)

    def search_vector(
        self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None = None
    ) -> list[tuple[MemoryNode, float]]:
        """Search with a precomputed query vector (float32, (dimension,)); [(MemoryNode, cosine score)], best first."""
        return self._search(ns, np.asarray(vector, dtype=np.float32), top_k, flt)

    # ------------------------------------------------------------------ expand
    def get_node(self, ns: str, node_id: str) -> MemoryNode:
        """The node with this id in the namespace; raises NotFoundError (also for another namespace's id)."""
        found = self._get_nodes(ns, [node_id])
        if not found:
            raise NotFoundError(f"no memory with id {node_id!r}", "id")
        return found[0]

    def expand_sync(self, ns: str, node_id: str) -> ExpandResponse:
        """The node, its parent and its children (in order); raises NotFoundError."""
        node = self.get_node(ns, node_id)
        parent = self._get_nodes(ns, [node.parent_id]) if node.parent_id else []
        by_id = {c.id: c for c in self._get_nodes(ns, node.children)} if node.children else {}
        return ExpandResponse(
            node=node_view(node),
            parent=node_view(parent[0]) if parent else None,
            children=[node_view(by_id[c]) for c in node.children if c in by_id],
        )

    def subtree(self, ns: str, node_id: str) -> list[MemoryNode]:
        """The node and every node below it, breadth first."""
        out = [self.get_node(ns, node_id)]
        frontier = out
        while frontier:
            child_ids = [c for n in frontier for c in n.children]
            frontier = self._get_nodes(ns, child_ids) if child_ids else []
            frontier.sort(key=lambda n: (n.level, n.position))
            out.extend(frontier)
        return out

    # ------------------------------------------------------------------ delete
    def delete_sync(self, ns: str, req: DeleteRequest) -> DeleteResponse:
        """Forget: `ids` (memory node ids: everything the node covers; message ids; conversation or document
        ids), `filter` (messages matching), or `delete_all` (the caller's namespace only).

        Every chunk and summary derived from a forgotten message is rebuilt from what remains (or removed), so
        the forgotten text comes back from no level. Raises NotFoundError naming unknown ids (nothing deleted).
        """
        if req.delete_all:
            n_msgs, n_nodes = self._delete_namespace(ns)
            return DeleteResponse(success=True, deleted_messages=n_msgs, deleted_nodes=n_nodes)
        whole: set[str] = set()
        targets: dict[str, set[str]] = defaultdict(set)
        if req.ids is not None:
            unknown = []
            by_message = {m for m in self._find_messages(ns, ids=req.ids)}
            message_ids = {mid for _, mid in by_message}
            for i in req.ids:
                if self._get_source(ns, i) is not None:
                    whole.add(i)
                elif (found := self._get_nodes(ns, [i])):
                    for n in self.subtree(ns, found[0].id):
                        targets[n.source_id].update(n.message_ids)
                elif i not in message_ids:
                    unknown.append(i)
            if unknown:
                raise NotFoundError(f"unknown ids: {', '.join(map(repr, unknown[:10]))}", "ids")
            for sid, mid in by_message:
                targets[sid].add(mid)
        else:
            for sid, mid in self._find_messages(ns, flt=req.filter):
                targets[sid].add(mid)
        work: list[tuple[str, set[str] | None]] = [(sid, None) for sid in whole]
        work += [(sid, mids) for sid, mids in targets.items() if sid not in whole]
        counts = [self._forget(ns, sid, mids) for sid, mids in work]
        return DeleteResponse(success=True, deleted_messages=sum(c[0] for c in counts),
                              deleted_nodes=sum(c[1] for c in counts))

    def _forget(self, ns: str, source_id: str, message_ids: set[str] | None) -> tuple[int, int]:
        """Remove messages (all when None) of a source and rebuild its tree, reusing every chunk and summary
        whose content is unchanged. Returns (messages removed, nodes removed or rebuilt).

        Forgetting never waits on the embedder: if it fails, the source's nodes are all removed now and rebuilt
        from the remaining messages later (`retry_pending`), so the forgotten text is gone at once either way.
        """
        with self._source_lock(ns, source_id):
            for attempt in range(_COMMIT_ATTEMPTS):
                src = self._get_source(ns, source_id)
                if src is None:
                    return 0, 0
                messages = self._messages_from(ns, source_id, 0)
                keep = [m for m in messages if message_ids is not None and m.id not in message_ids]
                old = self._source_nodes(ns, source_id)
                if not keep:
                    batch = WriteBatch(source=src, delete_source=True)
                    removed = len(old)
                else:
                    for seq, m in enumerate(keep):
                        m.seq = seq
                    offset = measure(keep, None, 0)
                    try:
                        nodes = self._rebuild(ns, src, keep, old)
                    except (EmbeddingError, SummaryError) as exc:
                        log.warning("%s; %r is forgotten now and re-indexed later", exc.message, source_id)
                        nodes = []
                    old_ids = {o.id for o in old}
                    removed = len(old) - sum(1 for n, _ in nodes if n.id in old_ids)
                    batch = WriteBatch(
                        source=SourceRow(source_id, src.source_type, src.version + 1, len(keep), offset,
                                         len(keep) - 1, src.metadata),
                        messages=keep, nodes=nodes, replace=True,
                    )
                try:
                    self._commit(ns, batch, src.version)
                except ConflictError:
                    _backoff(attempt)
                    continue
                return len(messages) - len(keep), removed
        raise ConflictError(f"{source_id!r} kept changing under concurrent writers; retry", "ids")

    def _rebuild(
        self, ns: str, src: SourceRow, keep: list[StoredMessage], old: list[MemoryNode]
    ) -> list[tuple[MemoryNode, np.ndarray | None]]:
        """Every node of a source rebuilt from `keep` (measured messages), with vectors. A chunk with the same
        text and messages as an old one keeps its id and vector; so does a summary over the same children whose
        preceding summary (its context) is kept too. Raises EmbeddingError/SummaryError."""
        s = self.settings
        stream = TokenStream.from_messages(keep)
        final = src.source_type == "document"
        windows = plan_windows(stream, 0, s.chunk_size, s.chunk_overlap, final)
        chunks = chunk_nodes(stream, windows, src.source_type, src.source_id, 0)
        old_l1 = {(n.text, tuple(n.message_ids), n.sealed): n for n in old if n.level == 1}
        for c in chunks:
            match = old_l1.get((c.text, tuple(c.message_ids), c.sealed))
            if match is not None:
                c.id = match.id
        reuse = _SummaryReuse(old)
        summaries = roll_up(Frontier(), [c for c in chunks if c.sealed], self._summarise, s.fan_out, s.max_level,
                            reuse)
        nodes = chunks + summaries
        old_ids = {o.id for o in old}
        fresh = [n for n in nodes if n.id not in old_ids]
        vectors = dict(zip([n.id for n in fresh], self.embedder.embed([n.text for n in fresh]), strict=True))
        vectors.update(self._get_vectors(ns, [n.id for n in nodes if n.id in old_ids]))
        return [(n, vectors[n.id]) for n in nodes]


class _SummaryReuse:
    """Finds, for a rebuild, the old summary with the same children and the same context (preceding summary)."""

    def __init__(self, old: list[MemoryNode]) -> None:
        self.by_children = {tuple(n.children): n for n in old if n.level > 1}
        self.at = {(n.level, n.position): n for n in old}

    def __call__(self, children: list[MemoryNode], context: MemoryNode | None) -> MemoryNode | None:
        prev = self.by_children.get(tuple(c.id for c in children))
        if prev is None:
            return None
        before = self.at.get((prev.level, prev.position - 1))
        if (before.id if before else None) != (context.id if context else None):
            return None  # its context changed: the summary may have drawn on forgotten text
        return prev


def _backoff(attempt: int) -> None:
    """Sleep before recomputing after a conflict: jittered, growing to ~0.5 s, so a writer in another process that
    keeps committing to the same source cannot starve this one."""
    time.sleep(random.uniform(0, min(0.5, 0.01 * 2**attempt)))


def to_result(node: MemoryNode, score: float) -> QueryResult:
    """A search hit as the API returns it."""
    return QueryResult(
        id=node.id,
        text=node.text,
        score=round(float(score), 6),
        level=node.level,
        source_type=node.source_type,
        conversation_id=node.source_id if node.source_type == "conversation" else None,
        document_id=node.source_id if node.source_type == "document" else None,
        children=list(node.children),
        parent_id=node.parent_id,
        message_ids=list(node.message_ids),
        speakers=list(node.speakers),
        start_time=node.start_time,
        end_time=node.end_time,
    )
