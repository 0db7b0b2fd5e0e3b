"""Forgetting: delete messages, nodes, sources or a namespace, then rebuild what was derived from them.

Every chunk, line and summary derived from a forgotten message is rebuilt from what remains (reusing every node
whose content, and for a summary its context, is unchanged), so a forgotten text comes back from no level; a
forgotten message's line (level 0) goes with it. The standing
instructions a forgotten message stated go in the same commit (datastore/write/instructions.py: what they had
superseded comes back into force).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np

from datastore.locks import SourceLocks, retry_conflicts
from datastore.read.lineage import Base, fork_base, lineage
from datastore.read.nodes import subtree
from datastore.storage import SourceRow, Storage, WriteBatch
from datastore.write.build import TreeBuilder
from datastore.write.instructions import (
    InstructionKeeper,
    conversation_user,
    newly_covered,
    unread_from,
    with_unread,
)
from datastore.write.spans import SpanReader
from models.api import DeleteRequest, DeleteResponse
from models.instructions import Instruction
from models.memory import MemoryNode, StoredMessage
from models.settings import Settings
from services.chunking import measure
from services.errors import EmbeddingError, InvalidRequestError, NotFoundError, SummaryError
from services.instructions import said
from services.tree import Frontier

log = logging.getLogger(__name__)


class Deleter:
    """delete (the API's forget), and `forget_messages`, the cascade every removal of messages goes through.

    settings: MAX_DELETE_IDS. builder: rebuilds a source's tree. locks: the writers' per-source locks.
    instructions: drops the standing instructions of forgotten messages (and finds those of kept messages that
    the rebuild covers for the first time). forgotten: called with the namespace after every commit that forgets
    something, before the forget returns (the search indexes remove its snapshot from the disk:
    `NamespaceIndexes.forgotten`).
    """

    def __init__(
        self,
        settings: Settings,
        storage: Storage,
        builder: TreeBuilder,
        locks: SourceLocks,
        instructions: InstructionKeeper,
        forgotten: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.builder = builder
        self.locks = locks
        self.instructions = instructions
        self.forgotten = forgotten

    def delete(self, ns: str, req: DeleteRequest) -> DeleteResponse:  # noqa: C901 (one branch per way of naming what to forget, each checked)
        """Forget: `ids` (memory node ids: everything the node covers; message ids; conversation or document
        ids), `filter` (messages matching), or `delete_all` (the caller's namespace only).

        Every chunk and summary derived from a forgotten message is rebuilt from what remains (or removed), so
        the forgotten text comes back from no level. Message ids are unique within their source only: with
        `req.conversation_id` they are looked up in that source; without it, a message id held by several
        sources is ambiguous. Raises NotFoundError naming unknown ids, InvalidRequestError for more than
        MAX_DELETE_IDS ids or an ambiguous message id (nothing is deleted then).
        """
        storage = self.storage
        if req.ids is not None and len(req.ids) > self.settings.max_delete_ids:
            raise InvalidRequestError(f"at most {self.settings.max_delete_ids} ids per call (MAX_DELETE_IDS)", "ids")
        if req.delete_all:
            n_msgs, n_nodes = storage.delete_namespace(ns)
            self.forgotten(ns)
            return DeleteResponse(success=True, deleted_messages=n_msgs, deleted_nodes=n_nodes)
        whole: set[str] = set()
        targets: dict[str, set[str]] = defaultdict(set)
        if req.ids is not None:
            unknown = []
            by_message = set(storage.find_messages(ns, ids=req.ids))
            if req.conversation_id is not None:
                by_message = {(sid, mid) for sid, mid in by_message if sid == req.conversation_id}
            holders: dict[str, list[str]] = defaultdict(list)
            for sid, mid in sorted(by_message):
                if sid != mid:  # a document's text is stored as one message with the document's id
                    holders[mid].append(sid)
            ambiguous = sorted(mid for mid, sids in holders.items() if len(sids) > 1)
            if ambiguous:
                mid = ambiguous[0]
                raise InvalidRequestError(
                    f"message id {mid!r} is in several conversations or documents "
                    f"({', '.join(map(repr, holders[mid][:5]))}); give conversation_id to say which",
                    "ids",
                )
            message_ids = {mid for _, mid in by_message}
            for i in req.ids:
                if storage.get_source(ns, i) is not None:
                    whole.add(i)
                elif storage.get_nodes(ns, [i]):
                    for n in subtree(storage, ns, i):
                        targets[n.source_id].update(n.message_ids)
                elif i not in message_ids:
                    unknown.append(i)
            if unknown:
                raise NotFoundError(f"unknown ids: {', '.join(map(repr, unknown[:10]))}", "ids")
            for sid, mid in by_message:
                targets[sid].add(mid)
        else:
            for sid, mid in storage.find_messages(ns, flt=req.filter):
                targets[sid].add(mid)
        work: list[tuple[str, set[str] | None]] = [(sid, None) for sid in whole]
        work += [(sid, mids) for sid, mids in targets.items() if sid not in whole]
        counts = [self.forget_messages(ns, sid, mids) for sid, mids in work]
        return DeleteResponse(
            success=True, deleted_messages=sum(c[0] for c in counts), deleted_nodes=sum(c[1] for c in counts)
        )

    def forget_messages(self, ns: str, source_id: str, message_ids: set[str] | None) -> tuple[int, int]:
        """Remove messages (all of the source, and the source itself, when None) and rebuild the source's tree,
        reusing every chunk and summary whose content is unchanged; the standing instructions the removed messages
        stated go in the same commit. Returns (messages removed, nodes removed or rebuilt). Raises ConflictError
        when other writers kept committing to the source.

        Forgetting never waits on the embedder: if it fails, the source's nodes are all removed now and rebuilt
        from the remaining messages later (the backlog), so the forgotten text is gone at once either way.

        A parent message forgotten is forgotten everywhere: the source's forks (and theirs) are rebuilt after it
        (`refresh_forks`), so no fork's own chunk keeps it. For a fork, ids of messages its chunks hold from an
        ancestor are forgotten in that ancestor; an empty set rebuilds the fork from its parent as it is now,
        and a fork whose own messages are all forgotten stays a fork (delete its id to remove it).
        """
        storage, keeper = self.storage, self.instructions
        counts = (0, 0)
        first = storage.get_source(ns, source_id)
        if first is not None and message_ids and "fork" in first.metadata:
            counts = self._forget_inherited(ns, source_id, message_ids)

        def attempt() -> tuple[tuple[int, int], list[str]]:
            src = storage.get_source(ns, source_id)
            if src is None:
                return (0, 0), []
            fork = src.metadata.get("fork")
            forks = list(src.metadata.get("forks") or [])
            messages = storage.messages(ns, source_id)
            keep = [m for m in messages if message_ids is not None and m.id not in message_ids]
            old = storage.source_nodes(ns, source_id)
            found: tuple[list[Instruction], np.ndarray | None] = ([], None)
            if message_ids is None or (not keep and fork is None):
                batch = WriteBatch(source=src, delete_source=True)
                removed = len(old)
            else:
                base = fork_base(storage, ns, fork, self.settings.chunk_overlap) if fork else Base()
                chunked_to = max((o.tok_end for o in old if o.level == 1), default=0)
                mark = unread_from(src.metadata)
                read_to = chunked_to if mark is None else min(mark, chunked_to)  # what the detector has read
                # before the offsets are measured again: the kept messages read, and those not read yet
                read = [m for m in keep if m.tok_offset + m.n_tokens <= read_to]
                uncovered = newly_covered(keep, read_to, src.n_tokens)
                for seq, m in enumerate(keep):
                    m.seq = seq
                previous = base.messages[-1].created_at if base.messages else None
                offset = measure(keep, previous, base.tok_at)
                deferred = keeper.deferred and src.source_type == "conversation" and bool(uncovered)
                try:
                    nodes = self.rebuild(ns, src, keep, old, base)
                    stated = (
                        keeper.detect(ns, src.source_type, source_id, uncovered, conversation_user(src.metadata))
                        if nodes and not deferred
                        else []
                    )
                    if stated:  # kept messages no detector had read: read now, as the chunk step would have
                        found = (stated, self.builder.embedder.embed([said(i) for i in stated], bulk=True))
                except (EmbeddingError, SummaryError) as exc:
                    log.warning("%s; %r is forgotten now and re-indexed later", exc.message, source_id)
                    nodes, found = [], ([], None)
                old_ids = {o.id for o in old}
                removed = len(old) - sum(1 for n, _ in nodes if n.id in old_ids)
                metadata = {**src.metadata, "fork": base.record(fork)} if fork else src.metadata
                # a deferred detector reads the rest later, from the end of the last kept message it read (the
                # offsets measured again); no nodes: every message is chunked, and marked, again
                metadata = with_unread(
                    metadata,
                    max((m.tok_offset + m.n_tokens for m in read), default=base.tok_at) if deferred and nodes else None,
                )
                batch = WriteBatch(
                    source=SourceRow(
                        source_id, src.source_type, src.version + 1, len(keep), offset, len(keep) - 1, metadata
                    ),
                    messages=keep,
                    nodes=nodes,
                    replace=True,
                )
            with keeper.lock(ns):
                gone = None if message_ids is None else message_ids  # None: every instruction said in the source
                batch.instructions, batch.drop_instructions = keeper.forget(ns, source_id, gone, *found)
                storage.commit(ns, batch, src.version)
            return (len(messages) - len(keep), removed), forks

        with self.locks(ns, source_id):
            done, forks = retry_conflicts(
                attempt, f"{source_id!r} kept changing under concurrent writers; retry", "ids"
            )
        if message_ids is None or message_ids:  # something forgotten (an empty set only rebuilds)
            self.forgotten(ns)
        if message_ids is not None and first is not None and "tok_at" not in first.metadata.get("fork", {"tok_at": 0}):
            self.register_fork(ns, first.metadata["fork"]["parent_id"], source_id)  # a fork made before bases
        self.refresh_forks(ns, source_id, forks)
        return counts[0] + done[0], counts[1] + done[1]

    def refresh_forks(self, ns: str, source_id: str, fork_ids: list[str]) -> None:
        """Rebuild each fork of `source_id` among `fork_ids` (its source metadata's `forks`) from the source as it
        is now, and theirs in turn: what a fork holds of its parent (datastore/read/lineage.py, `Base`) follows
        the parent's changes before the fork point. An id that is gone, or no longer a fork of it, is skipped."""
        for fid in fork_ids:
            child = self.storage.get_source(ns, fid)
            fork = child.metadata.get("fork") if child is not None else None
            if isinstance(fork, dict) and fork.get("parent_id") == source_id:
                self.forget_messages(ns, fid, set())

    def register_fork(self, ns: str, parent: str, fork_id: str) -> None:
        """Add `fork_id` to the `forks` listed in `parent`'s source metadata (once), so that a change of the
        parent rebuilds it (`refresh_forks`). Nothing when the parent is gone. Raises ConflictError when other
        writers kept committing to the parent."""
        storage = self.storage

        def attempt() -> None:
            src = storage.get_source(ns, parent)
            if src is None or fork_id in (src.metadata.get("forks") or []):
                return
            metadata = {**src.metadata, "forks": [*(src.metadata.get("forks") or []), fork_id]}
            storage.commit(ns, WriteBatch(source=replace(src, version=src.version + 1, metadata=metadata)), src.version)

        with self.locks(ns, parent):
            retry_conflicts(attempt, f"{parent!r} kept changing under concurrent writers; retry", "conversation_id")

    def _forget_inherited(self, ns: str, source_id: str, message_ids: set[str]) -> tuple[int, int]:
        """Forget, in the ancestors that keep them, the ids among `message_ids` that are not the fork's own but
        that it sees (its chunks hold them); returns the counts."""
        left = set(message_ids) - self.storage.known_message_ids(ns, source_id, sorted(message_ids))
        done = (0, 0)
        for sid, _ in lineage(self.storage, ns, source_id)[1:]:
            if not left:
                break
            found = self.storage.known_message_ids(ns, sid, sorted(left))
            if found:
                n = self.forget_messages(ns, sid, found)
                done = (done[0] + n[0], done[1] + n[1])
                left -= found
        return done

    def rebuild(
        self, ns: str, src: SourceRow, keep: list[StoredMessage], old: list[MemoryNode], base: Base | None = None
    ) -> list[tuple[MemoryNode, np.ndarray | None]]:
        """Every node of a source rebuilt from `keep` (measured messages), with vectors. A chunk with the same
        text and messages as an old one keeps its id and vector; so does a summary over the same children whose
        preceding summary (its context) is kept too. `base`: for a fork, what it holds of its parent (its
        chunks start at `base.chunk_from`, over the parent's messages up to the fork point, then `keep`).
        Raises EmbeddingError/SummaryError."""
        base = base or Base()
        chunks, _ = self.builder.chunks(
            Frontier(base=base.chunk_from),
            base.messages + keep,
            src.source_type,
            src.source_id,
            src.source_type == "document",
        )
        old_l1 = {(n.text, tuple(n.message_ids), n.sealed): n for n in old if n.level == 1}
        for c in chunks:
            match = old_l1.get((c.text, tuple(c.message_ids), c.sealed))
            if match is not None:
                c.id = match.id
        spans = SpanReader(self.storage, ns, src.source_id, base.messages + keep)
        summaries, _ = self.builder.summaries(Frontier(), [c for c in chunks if c.sealed], spans, _SummaryReuse(old))
        lines = self.builder.lines(Frontier(), keep, chunks, src.source_id, base.messages)
        old_lines = {(n.message_ids[0], n.text): n for n in old if n.level == 0 and n.message_ids}
        for line in lines:  # the same line of the same message keeps its id and vector
            match = old_lines.get((line.message_ids[0], line.text))
            if match is not None:
                line.id = match.id
        nodes = chunks + lines + summaries
        old_ids = {o.id for o in old}
        vectors: dict[str, np.ndarray | None] = {
            n.id: v
            for n, v in self.builder.embed(
                [n for n in nodes if n.id not in old_ids], partial(self.storage.get_vectors, ns)
            )
        }
        vectors.update(self.storage.get_vectors(ns, [n.id for n in nodes if n.id in old_ids]))
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
