"""Shared read-only memory: one search over the caller's namespace and namespaces it was granted to read.

Granting is the server's business (server/auth.py); this room only searches. A granted namespace is read and
never written: a search of it records no visits there (visits are a write). Results of all namespaces are merged
by score; in `hybrid` mode a score is normalised within its own namespace, so the merge interleaves each
namespace's best rather than comparing raw similarities.
"""

from __future__ import annotations

import asyncio

from pyramind.datastore.pins import Visiting
from pyramind.datastore.read import Reading
from pyramind.models.api import Query, QueryResponse, QueryResults


class SharedReading(Visiting):
    """query_shared_sync: search several namespaces; each result names its namespace."""

    def query_shared_sync(self, own: str, namespaces: list[str], queries: list[Query]) -> QueryResponse:
        """Each query over every namespace of `namespaces` (already checked against the caller's grants),
        merged best first to the query's top_k; visits are recorded in `own` only."""
        per_ns = []
        for ns in namespaces:
            res = self.query_sync(ns, queries) if ns == own else Reading.query_sync(self, ns, queries)
            for found in res.results:
                for r in found.results:
                    r.namespace = ns
            per_ns.append(res)
        out = []
        for i, q in enumerate(queries):
            merged = [r for res in per_ns for r in res.results[i].results]
            merged.sort(key=lambda r: -r.score)
            out.append(QueryResults(query=q.query, results=merged[: q.top_k]))
        return QueryResponse(results=out)

    async def query_shared(self, own: str, namespaces: list[str], queries: list[Query]) -> QueryResponse:
        """`query_shared_sync` in a worker thread."""
        return await asyncio.to_thread(self.query_shared_sync, own, namespaces, queries)
