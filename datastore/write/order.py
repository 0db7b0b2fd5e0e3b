"""Messages in time order: where a message remembered late goes, and what of a source's tree survives it.

A conversation's messages are kept in the order they were sent. A message whose `created_at` is earlier than the
conversation's latest (typically one re-remembered after its deletion) is not appended after newer ones: it goes
after the last message sent at or before it (`place`). Everything from there on moves in the token stream, so
the tree is cut back to the chunks that cannot change (`surviving`) and rebuilt from that point by the usual
chunker and roll-up, which gives exactly the tree of remembering everything in order at once (windows are
prefix-stable: a sealed window depends only on the stream up to its start plus CHUNK_SIZE).

Pure logic over in-memory messages and nodes; `Writer.extend` (datastore/write/remember.py) reads and commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from models.memory import MemoryNode, StoredMessage


def place(existing: Sequence[StoredMessage], fresh: Sequence[StoredMessage]) -> list[StoredMessage]:
    """`existing` (a source's messages, in order) with `fresh` (new ones, in call order) inserted by time.

    A timed fresh message goes after the last message sent at or before it (an untimed stored message counts as
    sent with the timed one before it, so it stays attached to what precedes it), and never before the fresh
    message before it in the call; an untimed fresh message follows the fresh message before it, or goes at the
    end. Equal times keep the stored message first. Returns the merged list (the same objects)."""
    out = list(existing)
    times: list[datetime | None] = []
    for m in out:
        times.append(m.created_at or (times[-1] if times else None))
    previous = -1  # index in `out` of the last fresh message placed
    for m in fresh:
        if m.created_at is None:
            at = previous + 1 if previous >= 0 else len(out)
        else:
            at = 0
            for j in range(len(out) - 1, previous, -1):  # a late message usually lands near the end
                t = times[j]
                if t is not None and t <= m.created_at:
                    at = j + 1
                    break
            at = max(at, previous + 1)
        out.insert(at, m)
        times.insert(at, m.created_at or (times[at - 1] if at > 0 else None))
        previous = at
    return out


def surviving(nodes: Sequence[MemoryNode], offset: int, chunk_size: int) -> list[MemoryNode]:
    """The nodes of a source that a change of its token stream at `offset` (tokens) leaves as they are: the
    sealed L1 chunks whose window was decided before `offset` (start + `chunk_size` < offset), and every
    summary all of whose children survive, and the lines (level 0) of the messages before `offset` that a
    surviving chunk holds (the others are made again with the chunks rebuilt). A survivor whose parent does not is
    returned as a copy without `parent_id` (its group is rolled up again). Sorted by level, then position."""
    kept: dict[str, MemoryNode] = {}
    ordered = sorted(nodes, key=lambda n: (n.level, n.position))
    for n in ordered:
        if n.level == 1:
            if n.sealed and n.tok_start + chunk_size < offset:
                kept[n.id] = n
        elif n.children and all(c in kept for c in n.children):
            kept[n.id] = n
    held = {mid for n in kept.values() if n.level == 1 for mid in n.message_ids}
    lines = [n for n in ordered if n.level == 0 and n.message_ids[0] in held and n.tok_end <= offset]
    kept.update({n.id: n for n in lines})
    return [
        n if n.parent_id is None or n.parent_id in kept else n.model_copy(update={"parent_id": None})
        for n in sorted(kept.values(), key=lambda n: (n.level, n.position))
    ]
