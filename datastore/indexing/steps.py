"""Indexing the backlog in steps: chunks first (searchable soon), summaries after (an LLM may be slow).

`Writer.accept` stores messages and builds nothing; the background indexer (datastore/indexing/background.py)
then calls, per source, `IndexSteps.chunks` until the source has no backlog and `IndexSteps.summaries` until
every complete group of sealed nodes is rolled up. Each step does a bounded amount of work (`INDEX_CHUNK_BATCH`
chunks, or the summaries over that many chunks), computed by the same `TreeBuilder` as an inline remember, and
commits it in one `Storage.commit`, so a crash leaves either the step whole or nothing of it; what is left stays
in the store as backlog (`Storage.backlog`, `Storage.unrolled`) and is found again on restart.

A step computes without the source lock (embedding and summarising may take seconds; a `remember` to the same
conversation must not wait for them) and commits under it, after checking that what it built on is unchanged:
messages appended meanwhile are fine (they stay backlog for the next step); anything else (a delete, a replace,
another writer's chunks or summaries) makes the step recompute.

A chunk step makes the lines (level 0: each newly covered message's lead, datastore/write/build.py) and embeds
and commits them with its chunks. It also finds the standing instructions of the messages it newly covers
(datastore/write/instructions.py: each message once), embeds their statements in the chunks' embedding call, and
commits them, settled against the namespace's stored ones, in the same WriteBatch as the chunks. With a detector that
calls a model, the chunk step commits its chunks with an `unread_from` mark instead, and `IndexSteps.detect`
(the summary lane's) reads those messages after: chunks are searchable without waiting on the model, and the
chunk lane, one step at a time, is not held up by it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from datastore.locks import SourceLocks, retry_conflicts
from datastore.read.lineage import chunk_from, stream_messages
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
from models.memory import MemoryNode, StoredMessage
from models.settings import Settings
from services.errors import ConflictError
from services.instructions import said
from services.tree import Frontier

log = logging.getLogger(__name__)


@dataclass
class Step:
    """What one indexing step did to a source.

    created/updated: L1 chunk ids written (new, or the open chunk extended); summaries: summary ids written;
    instructions: ids of the standing instructions found; more: this phase has work left for the source;
    rollable: a complete group of sealed nodes awaits a summary; unread: chunked messages await a deferred
    detector (`IndexSteps.detect`); backlog_tokens: tokens of the source past its last chunk after the step.
    """

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)
    more: bool = False
    rollable: bool = False
    unread: bool = False
    backlog_tokens: int = 0


def _l1_key(f: Frontier) -> tuple[object, object]:
    last, open_chunk = f.last.get(1), f.open_chunk
    return (
        (last.id, last.position, last.tok_end) if last else None,
        (open_chunk.id, open_chunk.tok_end) if open_chunk else None,
    )


def _message_key(messages: Sequence[StoredMessage]) -> list[tuple[str, int, int]]:
    return [(m.id, m.seq, m.tok_offset) for m in messages]


def _bumped(src: SourceRow) -> SourceRow:
    return replace(src, version=src.version + 1)


class _Moved(ConflictError):
    """What a step built on changed before it could commit: recompute."""


class IndexSteps:
    """chunks, summaries, detect, backlog, unread: the store side of the background indexer;
    `indexed_view` and `open_chunk_id` for a `wait: true` remember.

    settings: INDEX_CHUNK_BATCH, FAN_OUT, CHUNK_SIZE. builder: computes chunks, summaries and their embeddings.
    locks: the writers' per-source locks (a step commits under its source's lock). instructions: finds the
    standing instructions of the messages a chunk step covers (or, when it is `deferred`, a detect step reads)
    and settles them for its commit.
    """

    def __init__(
        self,
        settings: Settings,
        storage: Storage,
        builder: TreeBuilder,
        locks: SourceLocks,
        instructions: InstructionKeeper,
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.builder = builder
        self.locks = locks
        self.instructions = instructions

    def chunks(self, ns: str, source_id: str, max_chunks: int | None = None) -> Step:
        """Cut and embed at most `max_chunks` (default INDEX_CHUNK_BATCH) L1 chunks of the source's backlog and
        commit them (no summaries), with the standing instructions of the messages they newly cover (with a
        deferred detector: with the `unread_from` mark at the step's start, Step.unread). Returns the Step;
        nothing to do gives an empty Step. Raises EmbeddingError (nothing written; the backlog stays) or
        ConflictError (the source kept changing; retry later)."""
        s, storage, builder, keeper = self.settings, self.storage, self.builder, self.instructions
        limit = max_chunks or s.index_chunk_batch

        def attempt() -> Step:
            src = storage.get_source(ns, source_id)
            if src is None:
                return Step()
            frontier = Frontier.from_nodes(storage.frontier(ns, source_id), chunk_from(src.metadata))
            open_chunk, last_l1 = frontier.open_chunk, frontier.last.get(1)
            chunked_to = last_l1.tok_end if last_l1 else 0
            if chunked_to >= src.n_tokens:
                return Step(rollable=builder.rollable(frontier))
            start = builder.chunk_start(frontier)
            # only the messages the first `limit` windows can reach: each window ends within chunk_size of the
            # previous one's end, so a stream reaching one window further plans those windows as the whole would
            reach = start + (limit + 1) * s.chunk_size
            read = builder.read_start(frontier)
            messages = [m for m in stream_messages(storage, ns, source_id, read) if m.tok_offset < reach]
            cut = bool(messages) and messages[-1].tok_offset + messages[-1].n_tokens < src.n_tokens
            chunks, planned_more = builder.chunks(
                frontier, messages, src.source_type, source_id, src.source_type == "document", limit
            )
            covered = newly_covered(messages, chunked_to, chunks[-1].tok_end if chunks else chunked_to)
            unread = keeper.deferred and src.source_type == "conversation" and bool(covered)
            found = (
                []
                if keeper.deferred
                else keeper.detect(ns, src.source_type, source_id, covered, conversation_user(src.metadata))
            )
            lines = builder.lines(frontier, covered, chunks, source_id, messages)
            same = builder.unchanged_open_chunk(frontier, chunks)
            kept = storage.get_vectors(ns, [same]) if same else {}
            nodes, said_vectors = builder.embed_with(chunks + lines, [said(i) for i in found], kept)
            with self.locks(ns, source_id):
                now = storage.get_source(ns, source_id)
                if now is None or now.source_type != src.source_type:
                    return Step()
                if now.version != src.version and not self._chunk_base_unchanged(
                    ns, source_id, frontier, read, messages
                ):
                    raise _Moved(f"{source_id!r} changed while being indexed")
                source = _bumped(now)
                if unread:  # read by the detect step: from here, or from where it had still to read
                    mark = unread_from(now.metadata)
                    source = replace(
                        source,
                        metadata=with_unread(now.metadata, min(mark, chunked_to) if mark is not None else chunked_to),
                    )
                with keeper.lock(ns, bool(found)):
                    batch = WriteBatch(source=source, nodes=nodes, instructions=keeper.settle(ns, found, said_vectors))
                    storage.commit(ns, batch, now.version)
            sealed = len(frontier.pending.get(1, [])) + sum(1 for c in chunks if c.sealed)
            updated = [open_chunk.id] if open_chunk else []
            return Step(
                created=[c.id for c in chunks if c.id not in updated],
                updated=updated,
                more=cut or planned_more,
                rollable=sealed >= s.fan_out or builder.rollable(frontier),
                unread=unread,
                instructions=[i.id for i in found],
                backlog_tokens=max(0, now.n_tokens - (chunks[-1].tok_end if chunks else chunked_to)),
            )

        return retry_conflicts(
            attempt, f"{source_id!r} kept changing while being indexed; retried later", "conversation_id"
        )

    def _chunk_base_unchanged(
        self, ns: str, source_id: str, frontier: Frontier, start: int, messages: list[StoredMessage]
    ) -> bool:
        """Whether the L1 end of the tree and the messages a chunk step read are as they were (appends are fine)."""
        if _l1_key(Frontier.from_nodes(self.storage.frontier(ns, source_id))) != _l1_key(frontier):
            return False
        now = stream_messages(self.storage, ns, source_id, start)[: len(messages)]
        return _message_key(now) == _message_key(messages)

    def summaries(self, ns: str, source_id: str, max_chunks: int | None = None) -> Step:
        """Roll the source's stored sealed nodes up into summaries (at most the groups over `max_chunks` L1
        chunks, default INDEX_CHUNK_BATCH, and what they complete above) and commit them. Returns the Step.
        Raises SummaryError or EmbeddingError (nothing written) or ConflictError (retry later)."""
        s, storage, builder = self.settings, self.storage, self.builder
        limit = max(s.fan_out, (max_chunks or s.index_chunk_batch) // s.fan_out * s.fan_out)

        def attempt() -> Step:
            src = storage.get_source(ns, source_id)
            if src is None:
                return Step()
            frontier = Frontier.from_nodes(storage.frontier(ns, source_id))
            if not builder.rollable(frontier):
                return Step()
            l1 = frontier.pending.get(1, [])
            more = len(l1) - limit >= s.fan_out
            frontier.pending[1] = l1[:limit]
            before = {n.id: (n.position, n.parent_id) for nodes in frontier.pending.values() for n in nodes}
            counts = dict(frontier.counts)
            made, reparented = builder.summaries(frontier, [], SpanReader(storage, ns, source_id))
            nodes = builder.embed(made, partial(storage.get_vectors, ns)) + [(n, None) for n in reparented]
            with self.locks(ns, source_id):
                now = storage.get_source(ns, source_id)
                if now is None:
                    return Step()
                if now.version != src.version and not self._rollup_base_unchanged(
                    ns, source_id, reparented, made, before, counts
                ):
                    raise _Moved(f"{source_id!r} changed while being summarised")
                storage.commit(ns, WriteBatch(source=_bumped(now), nodes=nodes), now.version)
            return Step(summaries=[n.id for n in made], more=more)

        return retry_conflicts(
            attempt, f"{source_id!r} kept changing while being summarised; retried later", "conversation_id"
        )

    def detect(self, ns: str, source_id: str, max_chunks: int | None = None) -> Step:
        """Read, with a deferred detector, the messages the chunk steps committed unread: those ending in
        (the source's `unread_from` mark, min(its L1 end, mark + `max_chunks` (default INDEX_CHUNK_BATCH) x
        CHUNK_SIZE)]; commit the instructions found, settled, with the mark moved past them (removed once every
        chunked message is read). Returns the Step (more: chunked messages are left unread); a source without
        the mark gives an empty Step. Raises EmbeddingError (nothing written; the mark stays) or ConflictError
        (the messages kept changing; retry later)."""
        s, storage, keeper = self.settings, self.storage, self.instructions
        span = (max_chunks or s.index_chunk_batch) * s.chunk_size

        def chunked_to(src: SourceRow) -> int:
            last = Frontier.from_nodes(storage.frontier(ns, source_id), chunk_from(src.metadata)).last.get(1)
            return last.tok_end if last else 0

        def window(mark: int, to: int) -> list[StoredMessage]:  # the stream's messages overlapping [mark, to)
            return stream_messages(storage, ns, source_id, mark, to) if to > mark else []

        def attempt() -> Step:
            src = storage.get_source(ns, source_id)
            mark = unread_from(src.metadata) if src is not None else None
            if src is None or mark is None:
                return Step()
            to = min(chunked_to(src), mark + span)
            messages = window(mark, to)
            found = keeper.detect(
                ns, src.source_type, source_id, newly_covered(messages, mark, to), conversation_user(src.metadata)
            )
            vectors = self.builder.embed_with([], [said(i) for i in found])[1]
            with self.locks(ns, source_id):
                now = storage.get_source(ns, source_id)
                if now is None:
                    return Step()
                if unread_from(now.metadata) != mark or _message_key(window(mark, to)) != _message_key(messages):
                    raise _Moved(f"{source_id!r} changed while its messages were read")
                left = to < chunked_to(now)
                source = replace(_bumped(now), metadata=with_unread(now.metadata, to if left else None))
                with keeper.lock(ns, bool(found)):
                    batch = WriteBatch(source=source, instructions=keeper.settle(ns, found, vectors))
                    storage.commit(ns, batch, now.version)
            return Step(instructions=[i.id for i in found], more=left)

        return retry_conflicts(
            attempt, f"{source_id!r} kept changing while its messages were read; retried later", "conversation_id"
        )

    def unread(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with messages a deferred detector has still to read (the
        `unread_from` mark). Reads every source's row: the indexer calls it at start, and at each scan while the
        detector is deferred."""
        storage = self.storage
        out = []
        for ns in storage.list_namespaces():
            for sid in storage.list_sources(ns):
                src = storage.get_source(ns, sid)
                if src is not None and unread_from(src.metadata) is not None:
                    out.append((ns, sid))
        return out

    def _rollup_base_unchanged(
        self,
        ns: str,
        source_id: str,
        reparented: list[MemoryNode],
        summaries: list[MemoryNode],
        before: dict[str, tuple[int, str | None]],
        counts: dict[int, int],
    ) -> bool:
        """Whether the nodes a roll-up grouped are still unsummarised at their positions, and no summary was
        added meanwhile at a level it wrote (chunks appended at L1 are fine)."""
        now = Frontier.from_nodes(self.storage.frontier(ns, source_id))
        free = {n.id: (n.position, n.parent_id) for nodes in now.pending.values() for n in nodes}
        if any(free.get(n.id) != before.get(n.id) for n in reparented if n.id in before):
            return False
        return all(now.counts.get(lvl, 0) == counts.get(lvl, 0) for lvl in {n.level for n in summaries})

    def indexed_view(
        self, ns: str, source_id: str, message_ids: Sequence[str], open_chunk_id: str | None
    ) -> tuple[list[str], list[str], list[str], list[str]]:
        """For the messages of one remember call: (chunk ids created, chunk ids extended, summary ids above
        them, message ids not yet in any chunk). `open_chunk_id`: the open chunk before the call."""
        wanted = set(message_ids)
        nodes = self.storage.source_nodes(ns, source_id)
        by_id = {n.id: n for n in nodes}
        chunks = sorted((n for n in nodes if n.level == 1 and wanted & set(n.message_ids)), key=lambda n: n.position)
        covered = {m for c in chunks for m in c.message_ids}
        summaries: dict[str, int] = {}
        for c in chunks:
            parent = by_id.get(c.parent_id) if c.parent_id else None
            while parent is not None and parent.id not in summaries:
                summaries[parent.id] = parent.level
                parent = by_id.get(parent.parent_id) if parent.parent_id else None
        return (
            [c.id for c in chunks if c.id != open_chunk_id],
            [c.id for c in chunks if c.id == open_chunk_id],
            sorted(summaries, key=lambda i: (summaries[i], by_id[i].position)),
            [m for m in message_ids if m not in covered],
        )

    def open_chunk_id(self, ns: str, source_id: str) -> str | None:
        """The id of the source's open (unsealed) L1 chunk, if any."""
        open_chunk = Frontier.from_nodes(self.storage.frontier(ns, source_id)).open_chunk
        return open_chunk.id if open_chunk else None

    def backlog(self) -> int:
        """Index everything the store holds unindexed, in this thread: every source's chunks
        (`Storage.backlog`), then its summaries (`Storage.unrolled`) and its messages a deferred detector has
        still to read (`unread`), until none is left. Returns the steps taken. For tools and tests; the server
        runs the same steps in the background. Raises what the steps raise."""
        steps = 0
        while True:
            work = [(self.chunks, key) for key in self.storage.backlog()]
            work += [(self.summaries, key) for key in self.storage.unrolled()]
            work += [(self.detect, key) for key in self.unread()]
            if not work:
                return steps
            for step, (ns, source_id) in work:
                step(ns, source_id)
                steps += 1
