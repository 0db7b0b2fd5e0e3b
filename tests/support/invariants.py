"""Checks of the memory tree's invariants over all nodes of one source (shared by the store and API tests)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping

import numpy as np

from models.memory import MemoryNode
from services import tokens
from services.chunking import MAX_SENTENCE_TOKENS, SPEAKER_LINE


def check_tree(
    nodes: list[MemoryNode],
    chunk_size: int,
    overlap: int,
    fan_out: int,
    max_level: int = 99,
    rolled_up: bool = True,
    written_before: Collection[str] = (),
) -> dict[int, int]:
    """Assert the invariants; returns the node count per level. rolled_up=False: complete groups may still wait
    for their summary (the background indexer commits chunks first, summaries after). written_before: ids of
    summaries stored before summaries kept their picked sentences (they name none).

    Each L(n+1) has exactly `fan_out` children, contiguous nodes of level n in order, each pointing back; only
    sealed nodes have parents; no node has two parents; a node names a parent exactly when that parent lists it
    (lines included: they name none); positions run 0.. per level; L1 chunks have at most
    `chunk_size` tokens (one sentence alone may have more), open with the date of their first message, and
    consecutive chunks share whole sentences of at most `overlap` tokens. An extractive summary with text names
    the sentences it picked (`sentence_ids`): for an L2 sentences of the messages its chunks hold, above that
    sentences its children picked; a line, a chunk or a model's summary names none. The lines (level 0)
    are checked by `check_lines` and not counted.
    """
    check_lines(nodes)
    by_id = {n.id: n for n in nodes}
    nodes = [n for n in nodes if n.level >= 1]
    levels: dict[int, list[MemoryNode]] = defaultdict(list)
    for n in nodes:
        levels[n.level].append(n)
    for lvl, ns in levels.items():
        ns.sort(key=lambda n: n.position)
        assert [n.position for n in ns] == list(range(len(ns))), f"L{lvl} positions have gaps"
    parents_of: dict[str, str] = {}
    for n in nodes:
        if n.level == 1:
            assert not n.children and not n.sentence_ids
            continue
        assert len(n.children) == fan_out, f"{n.id} has {len(n.children)} children"
        kids = [by_id[c] for c in n.children]
        assert all(k.level == n.level - 1 and k.sealed for k in kids)
        pos = [k.position for k in kids]
        assert pos == list(range(pos[0], pos[0] + fan_out)), f"{n.id} children not contiguous"
        if n.id not in written_before:
            check_picked(n, kids)
        for k in kids:
            assert k.parent_id == n.id, f"{k.id} does not point back to {n.id}"
            assert k.id not in parents_of, f"{k.id} summarised twice"
            parents_of[k.id] = n.id
    for n in by_id.values():  # the tree's one rule, over every node of the source (lines included)
        assert n.parent_id == parents_of.get(n.id), f"{n.id} names {n.parent_id}, listed by {parents_of.get(n.id)}"
    chunks = levels.get(1, [])
    for c in chunks:
        # at most chunk_size tokens of text, unless it is one sentence (piece) or one word longer than that
        body = SPEAKER_LINE.sub("", c.text, count=1).strip()
        assert tokens.count_tokens(c.text) <= chunk_size or (
            len(c.message_ids) == 1 and (c.tok_end - c.tok_start <= MAX_SENTENCE_TOKENS or len(body.split()) == 1)
        )
        if c.source_type == "conversation" and c.start_time is not None:
            assert c.text.startswith(f"[{c.start_time:%Y-%m-%d} "), c.text[:40]  # dated by its first message
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert a.sealed
        # the next chunk opens with the last whole sentences of this one, up to `overlap` tokens
        assert a.tok_start < b.tok_start <= a.tok_end and a.tok_end - b.tok_start <= overlap
    # every group of fan_out sealed nodes below the top has been rolled up
    for lvl, ns in levels.items():
        sealed = [n for n in ns if n.sealed]
        assert not rolled_up or lvl >= max_level or sum(1 for n in sealed if n.parent_id is None) < fan_out, (
            f"L{lvl} not rolled up"
        )
    return {lvl: len(ns) for lvl, ns in levels.items()}


def check_picked(summary: MemoryNode, children: list[MemoryNode]) -> None:
    """Assert that a summary's `sentence_ids` are what its summariser picked from its children (check_tree)."""
    if summary.summariser != "extractive":
        assert not summary.sentence_ids, f"{summary.id} was written by {summary.summariser} yet names sentences"
        return
    assert bool(summary.sentence_ids) == bool(summary.text), f"{summary.id}: text and picked sentences disagree"
    assert len(set(summary.sentence_ids)) == len(summary.sentence_ids), f"{summary.id} picks a sentence twice"
    if summary.level == 2:
        held = {mid for c in children for mid in c.message_ids}
        assert all(sid.rsplit(":", 1)[0] in held for sid in summary.sentence_ids), f"{summary.id} picks elsewhere"
    elif all(c.sentence_ids for c in children):
        below = {sid for c in children for sid in c.sentence_ids}
        assert set(summary.sentence_ids) <= below, f"{summary.id} picks what its children did not"


def check_lines(nodes: list[MemoryNode]) -> list[MemoryNode]:
    """Assert the lines' invariants among a source's nodes (level 0: one message's lead each), and return them in
    position order: positions run 0..; each has one message, neither parent nor children (a line is not in the
    tree), the stored sentences its text is made of are its message's, in order, each once (none for a line
    written before lines kept them), and a chunk (level 1, among `nodes`) holds its message; at most one line per
    message; lines follow the messages' order."""
    held = {mid for n in nodes if n.level == 1 for mid in n.message_ids}
    lines = sorted((n for n in nodes if n.level == 0), key=lambda n: n.position)
    assert [n.position for n in lines] == list(range(len(lines))), "line positions have gaps"
    for line in lines:
        assert len(line.message_ids) == 1 and not line.children and line.text.strip(), line
        picked = [sid.rsplit(":", 1) for sid in line.sentence_ids]
        assert all(mid == line.message_ids[0] for mid, _ in picked), f"{line.id} names another message's sentence"
        assert [int(k) for _, k in picked] == sorted({int(k) for _, k in picked}), f"{line.id}: sentences out of order"
        assert line.parent_id is None, f"{line.id} names a parent: a line is not in the tree"
        assert line.message_ids[0] in held, f"{line.id}: no chunk holds its message"
    messages = [line.message_ids[0] for line in lines]
    assert len(set(messages)) == len(messages), "a message has two lines"
    assert [n.tok_start for n in lines] == sorted(n.tok_start for n in lines), "lines out of message order"
    return lines


def check_summary_vectors(vectors: Mapping[str, np.ndarray], nodes: list[MemoryNode]) -> int:
    """Assert that every summary (level 2 and up) among `nodes` has the embedding of its children: their mean,
    L2-normalised (services/tree.summary_embedding). `vectors`: {node id: stored embedding} of every node.
    Returns how many summaries were checked."""
    checked = 0
    for n in nodes:
        if n.level < 2:
            continue
        mean = np.mean([vectors[c] for c in n.children], axis=0)
        assert np.allclose(vectors[n.id], mean / np.linalg.norm(mean), atol=1e-5), n.id
        assert abs(float(np.linalg.norm(vectors[n.id])) - 1.0) < 1e-5
        checked += 1
    return checked
