"""Visits and pins: every node records how often and when a query returned it, and may be pinned.

Visits are counted off the request path: `query_sync` only adds the returned ids to an in-memory buffer (no
write, no lock held by the store); `flush_visits_sync` writes the buffer in one transaction per namespace (the
server calls it every VISIT_FLUSH_SECONDS and at shutdown). Visits buffered when a process dies are lost: they
rank forgetting, they are not memories. A pin records the messages under the node, so they stay protected from
forgetting by policy (datastore/forgetting.py) even when a later rebuild gives the node a new id.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from datetime import UTC, datetime

from pyramind.datastore.hooks import NodeMarks
from pyramind.datastore.read import Reading
from pyramind.models.api import ExpandResponse, Query, QueryResponse
from pyramind.models.context import ContextRequest, ContextResponse
from pyramind.models.lifetime import PinResponse


class Visiting(Reading):
    """query_sync records visits; flush_visits_sync, pin_sync, unpin_sync, protected_messages; expand shows marks."""

    _visit_guard = threading.Lock()  # replaced per store by _visits(); guards the buffer swap

    def _visits(self) -> dict[tuple[str, str], list]:
        buf = self.__dict__.get("_visit_buffer")
        if buf is None:
            with Visiting._visit_guard:
                buf = self.__dict__.setdefault("_visit_buffer", defaultdict(lambda: [0, None]))
                self.__dict__.setdefault("_visit_lock", threading.Lock())
        return buf

    def record_visits(self, ns: str, node_ids: list[str], when: datetime | None = None) -> None:
        """Count one visit of each id now (in memory; written by the next flush)."""
        when = when or datetime.now(UTC)
        buf = self._visits()
        with self.__dict__["_visit_lock"]:
            for i in node_ids:
                entry = buf[(ns, i)]
                entry[0] += 1
                entry[1] = when

    def flush_visits_sync(self) -> int:
        """Write the buffered visits (one transaction per namespace); returns the nodes updated. On a store
        error the visits are put back for the next flush."""
        buf = self._visits()
        with self.__dict__["_visit_lock"]:
            taken = dict(buf)
            buf.clear()
        by_ns: dict[str, dict[str, tuple[int, datetime]]] = defaultdict(dict)
        for (ns, i), (n, when) in taken.items():
            by_ns[ns][i] = (n, when)
        done = 0
        for ns, visits in by_ns.items():
            try:
                self._add_visits(ns, visits)
            except Exception:
                with self.__dict__["_visit_lock"]:
                    for i, (n, when) in visits.items():
                        entry = buf[(ns, i)]
                        entry[0] += n
                        entry[1] = max(entry[1], when) if entry[1] else when
                raise
            done += len(visits)
        return done

    def query_sync(self, ns: str, queries: list[Query]) -> QueryResponse:
        """Reading.query_sync, then each returned node counts one visit (buffered)."""
        res = super().query_sync(ns, queries)
        self.record_visits(ns, [r.id for q in res.results for r in q.results])
        return res

    def context_sync(self, ns: str, req: ContextRequest) -> ContextResponse:
        """ContextAssembly.context_sync (after this class in the DataStore's MRO), then each chunk and summary the
        block includes counts one visit (buffered), as for a query."""
        res: ContextResponse = super().context_sync(ns, req)  # type: ignore[misc]
        self.record_visits(ns, [i.id for sec in res.sections for i in sec.items if i.kind in ("chunk", "summary")])
        return res

    def expand_sync(self, ns: str, node_id: str) -> ExpandResponse:
        """Reading.expand_sync with each node's visit_count, last_visited_at and pinned as stored."""
        res = super().expand_sync(ns, node_id)
        views = [res.node] + ([res.parent] if res.parent else []) + res.children
        marks = self._get_marks(ns, [v.id for v in views])
        for v in views:
            m = marks.get(v.id)
            if m is not None:
                v.visit_count, v.last_visited_at, v.pinned = m.visit_count, m.last_visited_at, m.pinned
        return res

    # ------------------------------------------------------------------ pins
    def pin_sync(self, ns: str, node_id: str, pinned: bool = True) -> PinResponse:
        """Pin (or unpin) a node of the namespace: while pinned, it and the messages under it are never forgotten
        by policy. Raises NotFoundError (field `id`) for an unknown id or another namespace's node."""
        nodes = self.subtree(ns, node_id)
        message_ids = list(dict.fromkeys(m for n in nodes if n.level == 1 for m in n.message_ids))
        with self.__dict__.setdefault("_pin_lock", threading.Lock()):
            mark = self._get_marks(ns, [node_id]).get(node_id, NodeMarks())
            mark.pinned = pinned
            mark.pin_message_ids = message_ids if pinned else []
            self._set_marks(ns, {node_id: mark})
        return PinResponse(id=node_id, pinned=pinned, protected_message_ids=len(message_ids) if pinned else 0)

    def protected_messages(self, ns: str) -> set[str]:
        """Ids of the messages under a pinned node of the namespace."""
        return {m for mark in self._get_marks(ns, None).values() if mark.pinned for m in mark.pin_message_ids}

    async def pin(self, ns: str, node_id: str, pinned: bool = True) -> PinResponse:
        """`pin_sync` in a worker thread."""
        return await asyncio.to_thread(self.pin_sync, ns, node_id, pinned)

    async def flush_visits(self) -> int:
        """`flush_visits_sync` in a worker thread."""
        return await asyncio.to_thread(self.flush_visits_sync)
