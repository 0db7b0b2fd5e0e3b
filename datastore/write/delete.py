"""Forgetting: delete messages, nodes, sources or a namespace, then rebuild what was derived from them.

Every chunk and summary derived from a forgotten message is rebuilt from what remains (reusing every node whose
content, and for a summary its context, is unchanged), so a forgotten text comes back from no level. The standing
instructions a forgotten message stated go in the same commit (datastore/write/instructions.py: what they had
superseded comes back into force).
"""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np

from pyramind.datastore.locks import SourceLocks, retry_conflicts
from pyramind.datastore.read.nodes import subtree
from pyramind.datastore.storage import SourceRow, Storage, WriteBatch
from pyramind.datastore.write.build import TreeBuilder
from pyramind.datastore.write.instructions import InstructionKeeper, newly_covered
from pyramind.models.api import DeleteRequest, DeleteResponse
from pyramind.models.instructions import Instruction
from pyramind.models.memory import MemoryNode, StoredMessage
from pyramind.models.settings import Settings
from pyramind.services.chunking import measure
from pyramind.services.errors import EmbeddingError, InvalidRequestError, NotFoundError, SummaryError
from pyramind.services.instructions import said
from pyramind.services.tree import Frontier

log = logging.getLogger(__name__)


class Deleter:
    """delete (the API's forget), and `forget_messages`, the cascade every removal of messages goes through.

    settings: MAX_DELETE_IDS. builder: rebuilds a source's tree. locks: the writers' per-source locks.
    instructions: drops the standing instructions of forgotten messages (and finds those of kept messages that
    the rebuild covers for the first time).
    """

    def __init__(self, settings: Settings, storage: Storage, builder: TreeBuilder, locks: SourceLocks,
                 instructions: InstructionKeeper) -> None:
        self.settings = settings
        self.storage = storage
        self.builder = builder
        self.locks = locks
        self.instructions = instructions

    def delete(self, ns: str, req: DeleteRequest) -> DeleteResponse:
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
                    f"({', '.join(map(repr, holders[mid][:5]))}); give conversation_id to say which", "ids"
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
        return DeleteResponse(success=True, deleted_messages=sum(c[0] for c in counts),
                              deleted_nodes=sum(c[1] for c in counts))

    def forget_messages(self, ns: str, source_id: str, message_ids: set[str] | None) -> tuple[int, int]:
        """Remove messages (all of the source, and the source itself, when None) and rebuild the source's tree,
        reusing every chunk and summary whose content is unchanged; the standing instructions the removed messages
        stated go in the same commit. Returns (messages removed, nodes removed or rebuilt). Raises ConflictError
        when other writers kept committing to the source.

        Forgetting never waits on the embedder: if it fails, the source's nodes are all removed now and rebuilt
        from the remaining messages later (the backlog), so the forgotten text is gone at once either way.
        """
        storage, keeper = self.storage, self.instructions

        def attempt() -> tuple[int, int]:
            src = storage.get_source(ns, source_id)
            if src is None:
                return 0, 0
            messages = storage.messages(ns, source_id)
            keep = [m for m in messages if message_ids is not None and m.id not in message_ids]
            old = storage.source_nodes(ns, source_id)
            found: tuple[list[Instruction], np.ndarray | None] = ([], None)
            if not keep:
                batch = WriteBatch(source=src, delete_source=True)
                removed = len(old)
            else:
                chunked_to = max((o.tok_end for o in old if o.level == 1), default=0)
                uncovered = newly_covered(keep, chunked_to, src.n_tokens)  # before the offsets are measured again
                for seq, m in enumerate(keep):
                    m.seq = seq
                offset = measure(keep, None, 0)
                try:
                    nodes = self.rebuild(ns, src, keep, old)
                    first = keeper.detect(ns, src.source_type, source_id, uncovered) if nodes else []
                    if first:  # kept messages no chunk had covered: read now, as the chunk step would have
                        found = (first, self.builder.embedder.embed([said(i) for i in first], bulk=True))
                except (EmbeddingError, SummaryError) as exc:
                    log.warning("%s; %r is forgotten now and re-indexed later", exc.message, source_id)
                    nodes, found = [], ([], None)
                old_ids = {o.id for o in old}
                removed = len(old) - sum(1 for n, _ in nodes if n.id in old_ids)
                batch = WriteBatch(
                    source=SourceRow(source_id, src.source_type, src.version + 1, len(keep), offset, len(keep) - 1,
                                     src.metadata),
                    messages=keep, nodes=nodes, replace=True,
                )
            with keeper.lock(ns):
                gone = message_ids if keep else None  # the whole source goes: every instruction said in it
                batch.instructions, batch.drop_instructions = keeper.forget(ns, source_id, gone, *found)
                storage.commit(ns, batch, src.version)
            return len(messages) - len(keep), removed

        with self.locks(ns, source_id):
            return retry_conflicts(attempt, f"{source_id!r} kept changing under concurrent writers; retry", "ids")

    def rebuild(self, ns: str, src: SourceRow, keep: list[StoredMessage],
                old: list[MemoryNode]) -> list[tuple[MemoryNode, np.ndarray | None]]:
        """Every node of a source rebuilt from `keep` (measured messages), with vectors. A chunk with the same
        text and messages as an old one keeps its id and vector; so does a summary over the same children whose
        preceding summary (its context) is kept too. Raises EmbeddingError/SummaryError."""
        chunks, _ = self.builder.chunks(Frontier(), keep, src.source_type, src.source_id,
                                        src.source_type == "document")
        old_l1 = {(n.text, tuple(n.message_ids), n.sealed): n for n in old if n.level == 1}
        for c in chunks:
            match = old_l1.get((c.text, tuple(c.message_ids), c.sealed))
            if match is not None:
                c.id = match.id
        summaries, _ = self.builder.summaries(Frontier(), [c for c in chunks if c.sealed], _SummaryReuse(old))
        nodes = chunks + summaries
        old_ids = {o.id for o in old}
        vectors: dict[str, np.ndarray | None] = {
            n.id: v for n, v in self.builder.embed([n for n in nodes if n.id not in old_ids])}
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
