"""The memory tree: L1 chunks from windows of whole sentences, the roll-up of every FAN_OUT sealed nodes into a
summary, and the level-0 lines below the chunks (one per message that says something, services/lines.py).

Pure logic over in-memory nodes; the datastore loads the frontier, calls these, and writes what they return.

Invariants (tested): every node of level n+1 has exactly `fan_out` children, contiguous nodes of level n of the
same source, in order, each pointing back with `parent_id`; only sealed nodes are summarised; a node is
summarised at most once; positions at each level run 0, 1, 2, ... without gaps.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from models.memory import MemoryNode, SourceType, StoredMessage, sentence_id
from services import tokens as tok
from services.chunking import SentenceStream, Window, chunk_key, next_start, window_meta
from services.lines import line_of, spoken
from services.sessions import sessions_of
from services.summarising import Summary

SummariseFn = Callable[[list[MemoryNode], MemoryNode | None], Summary]
"""summarise(children, the previous summary of their parents' level or None) -> the children's summary."""


def new_node_id(level: int) -> str:
    """A fresh node id: `l0_<16 hex>` for lines, `c1_<16 hex>` for chunks, `s<level>_<16 hex>` for summaries
    (64 random bits)."""
    return f"{'lcs'[min(level, 2)]}{level}_{uuid.uuid4().hex[:16]}"


def chunk_nodes(
    stream: SentenceStream,
    windows: list[Window],
    source_type: SourceType,
    source_id: str,
    first_position: int,
    first_id: str | None = None,
    key_tokens: int = 0,
) -> list[MemoryNode]:
    """L1 nodes for `windows` (in order), positions from `first_position`.

    `first_id` keeps the id of the open chunk that the first window extends (an update, not a new chunk).
    `key_tokens`: at most this many tokens of the sentences before each window make its `key_context`
    (`SentenceStream.key_context`; 0: none).
    """
    nodes = []
    for i, w in enumerate(windows):
        ids, speakers, start, end = window_meta(stream, w)
        text = stream.window_text(w)
        nodes.append(
            MemoryNode(
                id=first_id if (i == 0 and first_id) else new_node_id(1),
                source_type=source_type,
                source_id=source_id,
                level=1,
                position=first_position + i,
                text=text,
                token_count=tok.count_tokens(text),
                message_ids=ids,
                speakers=speakers,
                start_time=start,
                end_time=end,
                sealed=w.sealed,
                tok_start=w.start,
                tok_end=w.end,
                session_ids=sessions_of(stream.messages_in(w.start, w.end)),
                key_context=stream.key_context(w, key_tokens),
            )
        )
    return nodes


def indexed_text(level: int, text: str, speakers: Sequence[str]) -> str:
    """What a node's embedding and its BM25 entry are of (datastore/indexes/namespaces.py): a line's (level 0)
    `speaker: text` (services/lines.spoken); a chunk's or a summary's text. A chunk's time stamps stay in: on
    LoCoMo dev, hybrid recall@2000 was 0.875 without them and 0.886 with them (bench/RESULTS.md, "Recall")."""
    if level == 0:
        return spoken(speakers[0] if speakers else None, text)
    return text


def embedded_text(node: MemoryNode) -> str:
    """What a line's or a chunk's embedding is of: `indexed_text`, for a chunk after its `key_context`
    (services/chunking.chunk_key). A summary's embedding is its children's (`summary_embedding`)."""
    return chunk_key(node.key_context, indexed_text(node.level, node.text, node.speakers))


def summary_embedding(children: Sequence[np.ndarray]) -> np.ndarray:
    """A summary's embedding: the mean of its children's embeddings (in order), L2-normalised; float32,
    (dimension,). Its text is not embedded: the text is drawn from the children (an extractive summary is some
    of their sentences), and embedding it was 12% of LoCoMo dev's embedded word pieces at ingest; without it the
    default retrieval and the context block find the same evidence on LoCoMo and BEAM, `mode: dense` more, `mode:
    tree` up to 0.017 less (bench/RESULTS.md, "stop10-notes"). Raises ValueError for no children."""
    if not children:
        raise ValueError("a summary has children")
    mean = np.mean(np.stack(children).astype(np.float32), axis=0)
    out: np.ndarray = (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32)
    return out


def line_nodes(
    messages: Sequence[StoredMessage],
    chunks: Sequence[MemoryNode],
    source_id: str,
    first_position: int,
    names: Collection[str] = (),
) -> list[MemoryNode]:
    """Level-0 line nodes (services/lines.py) of `messages` (the conversation messages of `source_id` only, in
    order: a fork's inherited messages are its parent's, a document has no lines), positions from
    `first_position`, for the messages `chunks` hold (a message no chunk holds gets no line yet). Each has
    `message_ids` its message, `sentence_ids` the stored sentences its text is made of, its times the message's,
    `tok_start`/`tok_end` the message's span in the token stream, and no parent: a line is not a node of the
    tree (models/memory.MemoryNode). A message of only filler gets none. `names`: the conversation's speakers
    (never a line's content). No embedding yet."""
    held = {mid for c in chunks for mid in c.message_ids}
    out: list[MemoryNode] = []
    for m in messages:
        if m.source_id != source_id or m.source_type != "conversation" or m.id not in held:
            continue
        line = line_of(m.content, names, m.sentences)
        if line is None:
            continue
        text, said = line
        out.append(
            MemoryNode(
                id=new_node_id(0),
                source_type=m.source_type,
                source_id=source_id,
                level=0,
                position=first_position + len(out),
                text=text,
                token_count=tok.count_tokens(text),
                message_ids=[m.id],
                speakers=[m.speaker],
                start_time=m.created_at,
                end_time=m.created_at,
                sealed=True,
                tok_start=m.tok_offset,
                tok_end=m.tok_offset + m.n_tokens,
                session_ids=[m.session_id] if m.session_id else [],
                sentence_ids=[sentence_id(m.id, k) for k in said],
            )
        )
    return out


@dataclass
class Frontier:
    """What the roll-up needs of a stored source, per level: the sealed nodes not yet summarised (in order),
    the number of nodes, and the last node (its text is the context of the next summary one level up).
    `base`: the token offset where the source's first chunk starts (0; a fork's own chunks start where what it
    inherits ends, datastore/read/lineage.py)."""

    pending: dict[int, list[MemoryNode]] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    last: dict[int, MemoryNode] = field(default_factory=dict)
    open_chunk: MemoryNode | None = None
    base: int = 0

    def chunk_start(self, overlap: int) -> int:
        """Stream offset where chunking resumes: the open chunk's start (it is re-cut with what follows), else
        where the window after the last chunk starts (services/chunking.next_start: `overlap` tokens before its
        end, moved to the next sentence boundary by the planner), else `base`."""
        last = self.last.get(1)
        if self.open_chunk is not None:
            return self.open_chunk.tok_start
        return next_start(last.tok_start, last.tok_end, overlap) if last is not None else self.base

    @classmethod
    def from_nodes(cls, nodes: Iterable[MemoryNode], base: int = 0) -> Frontier:
        """From the unparented nodes and the last node of each level (what providers' `_frontier` returns);
        `base`: see the class docstring."""
        f = cls(base=base)
        unique = {n.id: n for n in nodes}.values()
        for n in sorted(unique, key=lambda n: (n.level, n.position)):
            if n.parent_id is None and n.sealed and n.level >= 1:  # a line (level 0) is never rolled up
                f.pending.setdefault(n.level, []).append(n)
            if n.level not in f.last or n.position > f.last[n.level].position:
                f.last[n.level] = n
            if n.level == 1 and not n.sealed:
                f.open_chunk = n
        f.counts = {lvl: n.position + 1 for lvl, n in f.last.items()}
        return f


def _merge_times(values: list[datetime | None], pick: Callable[..., datetime]) -> datetime | None:
    known = [v for v in values if v is not None]
    return pick(known) if known else None


def summary_node(children: list[MemoryNode], summary: Summary, position: int) -> MemoryNode:
    """The level n+1 node over `children` (all of level n, same source, in order), with `summary`'s text, picked
    sentences and maker."""
    first = children[0]
    text = summary.text
    return MemoryNode(
        id=new_node_id(first.level + 1),
        source_type=first.source_type,
        source_id=first.source_id,
        level=first.level + 1,
        position=position,
        text=text,
        token_count=tok.count_tokens(text),
        children=[c.id for c in children],
        speakers=list(dict.fromkeys(s for c in children for s in c.speakers)),
        start_time=_merge_times([c.start_time for c in children], min),
        end_time=_merge_times([c.end_time for c in children], max),
        sealed=True,
        summariser=summary.made_by,
        session_ids=list(dict.fromkeys(s for c in children for s in c.session_ids)),
        sentence_ids=list(summary.sentence_ids),
    )


def roll_up(
    frontier: Frontier,
    new_sealed: list[MemoryNode],
    summarise: SummariseFn,
    fan_out: int,
    max_level: int,
    reuse: Callable[[list[MemoryNode], MemoryNode | None], MemoryNode | None] | None = None,
) -> list[MemoryNode]:
    """Summaries for every complete group of `fan_out` pending sealed nodes, level by level up to `max_level`.

    frontier: the stored state; new_sealed: L1 nodes sealed by this call (not yet in the frontier). Sets
    `parent_id` on every grouped child (stored or new) and returns the new summary nodes, lowest level first.
    `summarise(children, context)` makes a summary (context: the previous summary of the level, or None);
    `reuse(children, context_node)` may return an existing summary
    with the same content instead (used by rebuilds). Partial groups wait for later calls.
    """
    made: list[MemoryNode] = []
    pending = list(frontier.pending.get(1, [])) + list(new_sealed)
    for level in range(1, max_level):
        up = level + 1
        context = frontier.last.get(up)
        position = frontier.counts.get(up, 0)
        created: list[MemoryNode] = []
        for g in range(0, len(pending) - fan_out + 1, fan_out):
            children = pending[g : g + fan_out]
            node = reuse(children, context) if reuse else None
            if node is None:
                node = summary_node(children, summarise(children, context), position)
            else:
                node = node.model_copy(update={"position": position, "parent_id": None})
            for c in children:
                c.parent_id = node.id
            created.append(node)
            context = node
            position += 1
        made.extend(created)
        pending = list(frontier.pending.get(up, [])) + created
    return made
