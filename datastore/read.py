"""Reading: queries (ranked by datastore/retrieval.py), a node with its parent and children, a subtree."""

from __future__ import annotations

import numpy as np

from pyramind.datastore.hooks import StoreBase
from pyramind.datastore.retrieval import retrieve
from pyramind.models.api import (
    ExpandResponse,
    Query,
    QueryFilter,
    QueryResponse,
    QueryResult,
    QueryResults,
    node_view,
)
from pyramind.models.memory import MemoryNode
from pyramind.services.errors import InvalidRequestError, NotFoundError


class Reading(StoreBase):
    """query_sync, search_vector, get_node, expand_sync, subtree."""

    def query_sync(self, ns: str, queries: list[Query]) -> QueryResponse:
        """Embed all queries in one batch and rank each by its mode (datastore/retrieval.py); best first.

        Raises InvalidRequestError when a limit (MAX_QUERIES, MAX_TOP_K, MAX_QUERY_CHARS) is exceeded.
        """
        s = self.settings
        if len(queries) > s.max_queries:
            raise InvalidRequestError(f"at most {s.max_queries} queries per call (MAX_QUERIES)", "queries")
        for i, q in enumerate(queries):
            if len(q.query) > s.max_query_chars:
                raise InvalidRequestError(
                    f"query longer than {s.max_query_chars} characters (MAX_QUERY_CHARS)", f"queries[{i}].query"
                )
            if q.top_k > s.max_top_k:
                raise InvalidRequestError(f"top_k must be at most {s.max_top_k} (MAX_TOP_K)", f"queries[{i}].top_k")
        vectors = self.embedder.embed([q.query for q in queries])
        out = []
        for q, v in zip(queries, vectors, strict=True):
            hits = retrieve(self, ns, q.query, v, q.top_k, q.filter, q.mode or s.retrieval_mode)
            out.append(QueryResults(query=q.query, results=self._with_neighbours(ns, hits, q.neighbours)))
        return QueryResponse(results=out)

    def _with_neighbours(self, ns: str, hits: list[tuple[MemoryNode, float]], k: int) -> list[QueryResult]:
        """The hits as results, each L1 hit preceded and followed by up to `k` chunks of its conversation (by
        position, one `_nodes_at` read per hit) marked `context_of` the hit, with its score. A chunk already
        returned (as a hit or a neighbour) is not repeated."""
        if k <= 0:
            return [to_result(n, score) for n, score in hits]
        seen = {n.id for n, _ in hits}
        out: list[QueryResult] = []
        for node, score in hits:
            around = (self._nodes_at(ns, node.source_id, 1, max(0, node.position - k), node.position + k)
                      if node.level == 1 else [])
            before = [n for n in around if n.position < node.position and n.id not in seen]
            after = [n for n in around if n.position > node.position and n.id not in seen]
            seen.update(n.id for n in before + after)
            out += [to_result(n, score, context_of=node.id) for n in before]
            out.append(to_result(node, score))
            out += [to_result(n, score, context_of=node.id) for n in after]
        return out

    def search_vector(
        self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None = None
    ) -> list[tuple[MemoryNode, float]]:
        """Search with a precomputed query vector (float32, (dimension,)); [(MemoryNode, cosine score)], best first."""
        return self._search(ns, np.asarray(vector, dtype=np.float32), top_k, flt)

    # ------------------------------------------------------------------ expand
    def get_node(self, ns: str, node_id: str) -> MemoryNode:
        """The node with this id in the namespace; raises NotFoundError (also for another namespace's id)."""
        found = self._get_nodes(ns, [node_id])
        if not found:
            raise NotFoundError(f"no memory with id {node_id!r}", "id")
        return found[0]

    def expand_sync(self, ns: str, node_id: str) -> ExpandResponse:
        """The node, its parent and its children (in order); raises NotFoundError."""
        node = self.get_node(ns, node_id)
        parent = self._get_nodes(ns, [node.parent_id]) if node.parent_id else []
        by_id = {c.id: c for c in self._get_nodes(ns, node.children)} if node.children else {}
        view = node_view(node)
        if node.level == 1:  # the sequence links: the chunks before and after it in its conversation
            around = {n.position: n.id for n in self._nodes_at(ns, node.source_id, 1, max(0, node.position - 1),
                                                                node.position + 1)}
            view.pre_id, view.next_id = around.get(node.position - 1), around.get(node.position + 1)
        return ExpandResponse(
            node=view,
            parent=node_view(parent[0]) if parent else None,
            children=[node_view(by_id[c]) for c in node.children if c in by_id],
        )

    def subtree(self, ns: str, node_id: str) -> list[MemoryNode]:
        """The node and every node below it, breadth first."""
        out = [self.get_node(ns, node_id)]
        frontier = out
        while frontier:
            child_ids = [c for n in frontier for c in n.children]
            frontier = self._get_nodes(ns, child_ids) if child_ids else []
            frontier.sort(key=lambda n: (n.level, n.position))
            out.extend(frontier)
        return out

def to_result(node: MemoryNode, score: float, context_of: str | None = None) -> QueryResult:
    """A search hit as the API returns it (`context_of`: the hit a neighbouring chunk was added for)."""
    return QueryResult(
        id=node.id,
        text=node.text,
        score=round(float(score), 6),
        level=node.level,
        source_type=node.source_type,
        conversation_id=node.source_id if node.source_type == "conversation" else None,
        document_id=node.source_id if node.source_type == "document" else None,
        children=list(node.children),
        parent_id=node.parent_id,
        message_ids=list(node.message_ids),
        speakers=list(node.speakers),
        start_time=node.start_time,
        end_time=node.end_time,
        session_id=node.session_ids[0] if node.session_ids else None,
        session_ids=list(node.session_ids),
        context_of=context_of,
    )
