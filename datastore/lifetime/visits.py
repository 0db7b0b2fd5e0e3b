"""Visits and pins: every node records how often and when a query returned it, and may be pinned.

Visits are counted off the request path: the read path only adds the returned ids to an in-memory buffer (no
write, no lock held by the store); `flush` writes the buffer in one transaction per namespace (the server calls
it every VISIT_FLUSH_SECONDS and at shutdown). Visits buffered when a process dies are lost: they rank
forgetting, they are not memories. A pin records the messages under the node, so they stay protected from
forgetting by policy (datastore/lifetime/policy.py) even when a later rebuild gives the node a new id.
Without the storage's `marks` capability nothing is counted and pinning is refused (UnsupportedError).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from datastore.read.nodes import subtree
from datastore.storage import MarkTable, NodeMarks, Storage
from models.api import NodeView
from models.lifetime import PinResponse
from services.errors import UnsupportedError


class Visits:
    """The visit buffer and pins over the storage's MarkTable (`storage.marks`, None: visits are not kept)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.marks: MarkTable | None = storage.marks
        self._buffer: dict[tuple[str, str], list[Any]] = defaultdict(lambda: [0, None])  # (ns, id) -> [count, last]
        self._lock = threading.Lock()  # guards the buffer
        self._pin_lock = threading.Lock()  # serialises read-modify-write of a pin

    def record(self, ns: str, node_ids: Iterable[str], when: datetime | None = None) -> None:
        """Count one visit of each id now (in memory; written by the next flush)."""
        if self.marks is None:
            return
        when = when or datetime.now(UTC)
        with self._lock:
            for i in node_ids:
                entry = self._buffer[(ns, i)]
                entry[0] += 1
                entry[1] = when

    def flush(self) -> int:
        """Write the buffered visits (one transaction per namespace); returns the nodes updated. On a store
        error the visits are put back for the next flush, and the error is raised."""
        if self.marks is None:
            return 0
        with self._lock:
            taken = dict(self._buffer)
            self._buffer.clear()
        by_ns: dict[str, dict[str, tuple[int, datetime]]] = defaultdict(dict)
        for (ns, i), (n, when) in taken.items():
            by_ns[ns][i] = (n, when)
        done = 0
        for ns, visits in by_ns.items():
            try:
                self.marks.add_visits(ns, visits)
            except Exception:
                with self._lock:
                    for i, (n, when) in visits.items():
                        entry = self._buffer[(ns, i)]
                        entry[0] += n
                        entry[1] = max(entry[1], when) if entry[1] else when
                raise
            done += len(visits)
        return done

    def show(self, ns: str, views: list[NodeView]) -> None:
        """Fill each view's visit_count, last_visited_at and pinned as stored (as of the last flush)."""
        if self.marks is None or not views:
            return
        marks = self.marks.get(ns, [v.id for v in views])
        for v in views:
            m = marks.get(v.id)
            if m is not None:
                v.visit_count, v.last_visited_at, v.pinned = m.visit_count, m.last_visited_at, m.pinned

    def pin(self, ns: str, node_id: str, pinned: bool = True) -> PinResponse:
        """Pin (or unpin) a node of the namespace: while pinned, it and the messages under it are never forgotten
        by policy. Raises NotFoundError (field `id`) for an unknown id or another namespace's node,
        UnsupportedError when the storage keeps no marks."""
        if self.marks is None:
            raise UnsupportedError(f"pins are not supported by the {self.storage.name} store")
        nodes = subtree(self.storage, ns, node_id)
        message_ids = list(dict.fromkeys(m for n in nodes if n.level == 1 for m in n.message_ids))
        with self._pin_lock:
            mark = self.marks.get(ns, [node_id]).get(node_id, NodeMarks())
            mark.pinned = pinned
            mark.pin_message_ids = message_ids if pinned else []
            self.marks.set(ns, {node_id: mark})
        return PinResponse(id=node_id, pinned=pinned, protected_message_ids=len(message_ids) if pinned else 0)

    def protected_messages(self, ns: str) -> set[str]:
        """Ids of the messages under a pinned node of the namespace."""
        if self.marks is None:
            return set()
        return {m for mark in self.marks.get(ns, None).values() if mark.pinned for m in mark.pin_message_ids}

    def all(self, ns: str) -> dict[str, NodeMarks]:
        """{node id: marks} of every marked node of the namespace ({} without marks)."""
        return self.marks.get(ns, None) if self.marks is not None else {}
