"""chunk -> lines -> embed -> roll up: the one place new nodes of the tree are computed.

Remembering inline (`Writer`), the background indexer's steps (`IndexSteps`) and the rebuild after a delete
(`Deleter`) all compute their chunks and summaries here, from the stored frontier of a source and its messages;
they differ only in how much they take at once and in how they commit. Nothing here writes storage; the stored
embeddings of a new summary's older children are read through the `stored` reader a caller passes.

Lines (level 0, services/lines.py) are made for the messages a write newly covers with chunks (the same messages
whose standing instructions it reads: datastore/write/instructions.py `newly_covered`), embedded in the chunks'
embedding call, and committed in the chunks' WriteBatch; see datastore/read/outline.py for why lines are nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from datastore.write.spans import SpanReader
from models.memory import MemoryNode, SourceType, StoredMessage
from models.settings import Settings
from services.chunking import SentenceStream, plan_windows
from services.embedding import Embedder
from services.summarising import Summariser, Summary
from services.tree import Frontier, chunk_nodes, embedded_text, line_nodes, roll_up, summary_embedding

Reuse = Callable[[list[MemoryNode], MemoryNode | None], MemoryNode | None]
StoredVectors = Callable[[Sequence[str]], Mapping[str, np.ndarray]]
"""stored(node ids) -> {node id: its stored embedding} of the ids found (`storage.get_vectors` of a namespace)."""


class TreeBuilder:
    """Chunks, summaries and their embeddings for one source.

    settings: CHUNK_SIZE, CHUNK_OVERLAP, FAN_OUT, MAX_LEVEL, SUMMARY_MAX_TOKENS. embedder: bulk embeddings (raises
    EmbeddingError). summariser: summaries of FAN_OUT children (raises SummaryError).
    """

    def __init__(self, settings: Settings, embedder: Embedder, summariser: Summariser) -> None:
        self.settings = settings
        self.embedder = embedder
        self.summariser = summariser

    def chunk_start(self, frontier: Frontier) -> int:
        """Token offset where chunking resumes (the open chunk's start, or CHUNK_OVERLAP before the last end)."""
        return frontier.chunk_start(self.settings.chunk_overlap)

    def read_start(self, frontier: Frontier) -> int:
        """Token offset from which `chunks` needs the stream's messages: `chunk_start`, less the
        CHUNK_KEY_CONTEXT_TOKENS before it that the first window's retrieval key reads."""
        return max(self.chunk_start(frontier) - self.settings.chunk_key_context_tokens, 0)

    def chunks(
        self,
        frontier: Frontier,
        messages: Sequence[StoredMessage],
        source_type: SourceType,
        source_id: str,
        final: bool,
        limit: int | None = None,
    ) -> tuple[list[MemoryNode], bool]:
        """The L1 chunks from `chunk_start(frontier)` over `messages` (contiguous, in seq order, starting with the
        message that holds `read_start(frontier)`, or with the source's first), and whether more windows were
        planned than `limit` (then only the first `limit` are returned). The open chunk keeps its id and
        position; new chunks follow the last position. `final`: the source is complete (a document), so its last
        chunk is sealed too. Each chunk's `key_context` is set (CHUNK_KEY_CONTEXT_TOKENS). No embedding yet."""
        s = self.settings
        stream = SentenceStream.from_messages(messages)
        last = frontier.last.get(1) if frontier.open_chunk is None else None
        after = last.tok_end if last is not None else None
        windows = plan_windows(stream, self.chunk_start(frontier), s.chunk_size, s.chunk_overlap, final, after)
        more = limit is not None and len(windows) > limit
        if limit is not None:
            windows = windows[:limit]
        open_chunk = frontier.open_chunk
        first = open_chunk.position if open_chunk else frontier.counts.get(1, 0)
        nodes = chunk_nodes(
            stream,
            windows,
            source_type,
            source_id,
            first,
            first_id=open_chunk.id if open_chunk else None,
            key_tokens=s.chunk_key_context_tokens,
        )
        return nodes, more

    def lines(
        self,
        frontier: Frontier,
        covered: Sequence[StoredMessage],
        chunks: Sequence[MemoryNode],
        source_id: str,
        window: Sequence[StoredMessage] = (),
    ) -> list[MemoryNode]:
        """The level-0 lines of `covered` (the messages these `chunks` cover for the first time, in order; a
        fork's inherited ones are skipped), positions after the frontier's last line, each under the first of
        `chunks` holding its message. `window`: messages whose speakers' names are never a line's content (the
        speakers of `covered` count too). No embedding yet."""
        names = {m.speaker for m in (*window, *covered)} | {s for c in chunks for s in c.speakers}
        return line_nodes(covered, chunks, source_id, frontier.counts.get(0, 0), names)

    def summaries(
        self, frontier: Frontier, new_sealed: list[MemoryNode], spans: SpanReader, reuse: Reuse | None = None
    ) -> tuple[list[MemoryNode], list[MemoryNode]]:
        """Roll every complete group of FAN_OUT pending nodes up, level by level to MAX_LEVEL. Returns (the new
        summaries, lowest level first; the stored nodes of `frontier` that got a parent, to write back). Sets
        `parent_id` on every grouped child. `spans`: the source's sentences (datastore/write/spans.py);
        `reuse(children, context)` may return an existing summary instead of summarising (a rebuild). Raises
        SummaryError."""
        s = self.settings

        def summarise(children: list[MemoryNode], context: MemoryNode | None) -> Summary:
            return self.summariser.summarise(spans.span(children, context), s.summary_max_tokens)

        made = roll_up(frontier, new_sealed, summarise, s.fan_out, s.max_level, reuse)
        reparented = [n for nodes in frontier.pending.values() for n in nodes if n.parent_id]
        return made, reparented

    def embed(
        self, nodes: Sequence[MemoryNode], stored: StoredVectors | None = None
    ) -> list[tuple[MemoryNode, np.ndarray | None]]:
        """[(node, its embedding)] in order, one bulk embedding call (a line's text is embedded with its
        speaker, `embedded_text`; a summary's embedding is its children's, `summary_embedding`). Raises
        EmbeddingError."""
        return self.embed_with(nodes, [], stored=stored)[0]

    def embed_with(
        self,
        nodes: Sequence[MemoryNode],
        texts: Sequence[str],
        kept: Mapping[str, np.ndarray] | None = None,
        stored: StoredVectors | None = None,
    ) -> tuple[list[tuple[MemoryNode, np.ndarray | None]], np.ndarray]:
        """`embed(nodes)` and the embeddings of `texts` (float32, (len(texts), dimension); e.g. the statements of
        standing instructions found in the same messages) in the same bulk embedding call. `kept`: {node id:
        its stored embedding} of nodes whose embedded text is unchanged (`unchanged_open_chunk`): used as they
        are, not embedded again. A summary (level 2 and up) is not embedded: its embedding is the mean of its
        children's (services/tree.summary_embedding), taken from `nodes` or, for children stored by an earlier
        write, from `stored(ids)` (`functools.partial(storage.get_vectors, ns)`); a summary whose children's
        embeddings cannot all be found (none expected: every stored node has one) is embedded from its text.
        Raises EmbeddingError."""
        known = dict(kept or {})
        summaries = sorted((n for n in nodes if n.level >= 2 and n.id not in known), key=lambda n: n.level)
        here = {n.id for n in nodes}
        outside = list(dict.fromkeys(c for n in summaries for c in n.children if c not in here and c not in known))
        if outside and stored is not None:
            known.update(stored(outside))
        fresh = [n for n in nodes if n.id not in known and n.level < 2]
        if fresh or texts:
            vectors = self.embedder.embed([embedded_text(n) for n in fresh] + list(texts), bulk=True)
        else:
            vectors = np.zeros((0, self.embedder.dimension), dtype=np.float32)
        known.update((n.id, vectors[i]) for i, n in enumerate(fresh))
        unfound = []
        for n in summaries:  # lowest level first: a summary's children are known before it
            if all(c in known for c in n.children):
                known[n.id] = summary_embedding([known[c] for c in n.children])
            else:
                unfound.append(n)
        if unfound:
            again = self.embedder.embed([embedded_text(n) for n in unfound], bulk=True)
            known.update(zip([n.id for n in unfound], again, strict=True))
        out: list[tuple[MemoryNode, np.ndarray | None]] = [(n, known.get(n.id)) for n in nodes]
        return out, np.asarray(vectors[len(fresh) :], dtype=np.float32)

    def unchanged_open_chunk(self, frontier: Frontier, chunks: Sequence[MemoryNode]) -> str | None:
        """The id of the stored open chunk when `chunks` re-cut it from the same start into the same retrieval
        key (`embedded_text`): its text unchanged (it was full, and is sealed now). A key reads only the chunk's
        text and the text before it, so the stored embedding stands (`embed_with`'s `kept`); None otherwise. Since a
        chunk never spans two sessions (services/chunking.py), LoCoMo dev remembered one session per call embeds
        each chunk once: each session's open chunk is sealed unchanged by the next call. Known
        limit (as a rebuild after a delete): CHUNK_KEY_CONTEXT_TOKENS changed between the two calls keeps the
        vector of the old key."""
        old = frontier.open_chunk
        new = next((c for c in chunks if old is not None and c.id == old.id), None)
        if old is None or new is None or new.tok_start != old.tok_start:
            return None
        before = old.model_copy(update={"key_context": new.key_context})  # the context reads earlier text only
        return old.id if embedded_text(before) == embedded_text(new) else None

    def rollable(self, frontier: Frontier) -> bool:
        """Whether a complete group of sealed nodes awaits its summary below MAX_LEVEL."""
        s = self.settings
        return any(len(nodes) >= s.fan_out for lvl, nodes in frontier.pending.items() if lvl < s.max_level)
