"""The read path: validate -> embed -> rank (per namespace, over a fork's lineage when the filter names a fork)
-> neighbours -> visits. Every search of the project goes through `Reader.search`; `/query`, MCP `recall`, the
CLI and read-only grants through `Reader.query`, the context block through `search` and `neighbours`.

Where a query goes: `ranking.rank` orders the nodes (modes in datastore/read/ranking.py) of the view that
`lineage.view_for` picks (the in-memory search over the storage, datastore/indexes/search.py, or a fork's
lineage over it); `neighbours` adds the chunks around each hit; the returned node ids are counted as visits
(`Visits.record`, buffered) in the caller's own namespace only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from datastore.lifetime.visits import Visits
from datastore.read.lineage import view_for
from datastore.read.nodes import get_node, subtree
from datastore.read.ranking import Floor, Searchable, rank
from datastore.storage import Hits, Storage
from models.api import (
    ExpandResponse,
    Query,
    QueryFilter,
    QueryResponse,
    QueryResult,
    QueryResults,
    node_view,
    unknown_conversation,
)
from models.memory import MemoryNode
from models.settings import Settings
from services.embedding import Embedder
from services.errors import InvalidRequestError


def check_query_chars(settings: Settings, text: str | None, field: str) -> None:
    """Raise InvalidRequestError naming `field` when a query text is longer than MAX_QUERY_CHARS: the one limit
    and answer of every query text (`/query`, `/context`, MCP `recall` and `context`)."""
    if text is not None and len(text) > settings.max_query_chars:
        raise InvalidRequestError(f"query longer than {settings.max_query_chars} characters (MAX_QUERY_CHARS)", field)


class Reader:
    """query, search, neighbours, and reading the tree by id (get_node, expand, subtree).

    settings: MAX_QUERIES, MAX_TOP_K, MAX_QUERY_CHARS and RETRIEVAL_MODE. storage: the provider (sources, the
    tree by id). search: what queries rank over (datastore/indexes/search.py: the in-memory indexes fed from
    the storage, one ranking for every provider). embedder: query embeddings (one batch per call; raises
    EmbeddingError). visits: where returned nodes are counted.
    """

    def __init__(
        self, settings: Settings, storage: Storage, search: Searchable, embedder: Embedder, visits: Visits
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.search_view = search
        self.embedder = embedder
        self.visits = visits

    def query(
        self, ns: str, queries: list[Query], namespaces: Sequence[str] | None = None, record_visits: bool = True
    ) -> QueryResponse:
        """Each query's top_k results, best first, each L1 hit with up to `neighbours` chunks either side.

        ns: the caller's namespace. namespaces: read-only grants already checked by the caller (server/auth.py):
        each query runs in every one of them (a fork's lineage, neighbours and limits alike), results carry
        their `namespace`, and are merged best first to top_k (a hybrid score is normalised within its own
        namespace, so the merge interleaves each namespace's best). Visits are recorded in `ns` only (a granted
        namespace is never written). Raises InvalidRequestError when a limit (MAX_QUERIES, MAX_TOP_K,
        MAX_QUERY_CHARS) is exceeded. A filter naming a conversation none of the namespaces holds (not yet, or
        no longer, remembered) answers that query with no results and an `unknown_conversation` warning naming
        `queries[i].filter.conversation_id`.
        """
        s = self.settings
        if len(queries) > s.max_queries:
            raise InvalidRequestError(f"at most {s.max_queries} queries per call (MAX_QUERIES)", "queries")
        for i, q in enumerate(queries):
            check_query_chars(s, q.query, f"queries[{i}].query")
            if q.top_k > s.max_top_k:
                raise InvalidRequestError(f"top_k must be at most {s.max_top_k} (MAX_TOP_K)", f"queries[{i}].top_k")
        searched = list(namespaces) if namespaces is not None else [ns]
        for name in searched:  # a cold index loads while the filters are checked and the queries embedded
            self.load_soon(name)
        warnings, unknown = [], set()
        for i, q in enumerate(queries):  # a filter on an unknown conversation: no results and a warning, not a 404
            cid = q.filter.conversation_id if q.filter else None
            if cid is not None and not any(_holds(self.storage, n, "conversation", cid) for n in searched):
                warnings.append(unknown_conversation(cid, f"queries[{i}].filter.conversation_id", _where(searched)))
                unknown.add(i)
        vectors = self.embedder.embed([q.query for q in queries])
        out, visited = [], []
        for i, (q, vector) in enumerate(zip(queries, vectors, strict=True)):
            results: list[QueryResult] = []
            if i in unknown:
                out.append(QueryResults(query=q.query, results=results))
                continue
            for name in namespaces if namespaces is not None else [ns]:
                view = view_for(self.storage, self.search_view, name, q.filter)
                hits = rank(view, name, q.query, vector, q.top_k, q.filter, q.mode or s.retrieval_mode)
                found = self._with_neighbours(view, name, hits, q.neighbours)
                if name == ns:
                    visited += [r.id for r in found]
                if namespaces is not None:
                    for r in found:
                        r.namespace = name
                results += found
            if namespaces is not None:
                results.sort(key=lambda r: -r.score)
                results = results[: q.top_k]
            out.append(QueryResults(query=q.query, results=results))
        if record_visits:
            self.visits.record(ns, visited)
        return QueryResponse(results=out, warnings=warnings)

    def load_soon(self, ns: str) -> None:
        """Start making namespace `ns` searchable in the background (a cold namespace's index load: datastore/
        indexes/namespaces.py `load_soon`) and return at once; a caller calls it before its reads and embedding
        that do not depend on the index, so they overlap the load."""
        self.search_view.load_soon(ns)

    def search(  # noqa: PLR0913 (one query's parts, each a field of the block's request)
        self,
        ns: str,
        query: str,
        vector: np.ndarray,
        top_k: int,
        flt: QueryFilter | None,
        mode: str | None = None,
        floor: Floor | None = None,
    ) -> Hits:
        """The top_k nodes for one query (its text and embedding), ranked by `mode` (default RETRIEVAL_MODE)
        over what `flt` selects (a fork's lineage when it names a fork), only those that pass `floor` when one
        is given (datastore/read/ranking.py `Floor`). No validation, no visits: for callers that validated their
        own request (the context block)."""
        view = view_for(self.storage, self.search_view, ns, flt)
        return rank(view, ns, query, vector, top_k, flt, mode or self.settings.retrieval_mode, floor)

    def neighbours(
        self, ns: str, node: MemoryNode, k: int, flt: QueryFilter | None = None
    ) -> tuple[list[MemoryNode], list[MemoryNode]]:
        """The up to `k` nodes before and the up to `k` after `node` among its source's nodes of the same level
        (for an L1 chunk: the chunks around it in the conversation), each list in position order, within what
        `flt` sees (a fork sees only its lineage); the node itself is in neither. k <= 0 gives ([], [])."""
        return _around(view_for(self.storage, self.search_view, ns, flt), ns, node, k)

    def _with_neighbours(self, view: Searchable, ns: str, hits: Hits, k: int) -> list[QueryResult]:
        """The hits as results, each L1 hit preceded and followed by up to `k` chunks of its source, marked
        `context_of` the hit and carrying its score. A chunk already returned is not repeated."""
        if k <= 0:
            return [to_result(n, score) for n, score in hits]
        seen = {n.id for n, _ in hits}
        out: list[QueryResult] = []
        around = _around_many(view, ns, [n for n, _ in hits if n.level == 1], k)
        for node, score in hits:
            before, after = around.get(node.id, ([], []))
            before = [n for n in before if n.id not in seen]
            after = [n for n in after if n.id not in seen]
            seen.update(n.id for n in before + after)
            out += [to_result(n, score, context_of=node.id) for n in before]
            out.append(to_result(node, score))
            out += [to_result(n, score, context_of=node.id) for n in after]
        return out

    # ------------------------------------------------------------------ the tree by id
    def get_node(self, ns: str, node_id: str) -> MemoryNode:
        """The node with this id in the namespace; raises NotFoundError (also for another namespace's id)."""
        return get_node(self.storage, ns, node_id)

    def subtree(self, ns: str, node_id: str) -> list[MemoryNode]:
        """The node and every node below it, breadth first; raises NotFoundError."""
        return subtree(self.storage, ns, node_id)

    def expand(self, ns: str, node_id: str) -> ExpandResponse:
        """The node, its parent and its children (in order), each with its visits and pin; a chunk also names
        the chunks before and after it (`pre_id`, `next_id`). Raises NotFoundError."""
        storage = self.storage
        node = get_node(storage, ns, node_id)
        parent = storage.get_nodes(ns, [node.parent_id]) if node.parent_id else []
        by_id = {c.id: c for c in storage.get_nodes(ns, node.children)} if node.children else {}
        view = node_view(node)
        if node.level == 1:  # the sequence links: the chunks before and after it in its conversation
            before, after = _around(self.search_view, ns, node, 1)
            view.pre_id = before[-1].id if before else None
            view.next_id = after[0].id if after else None
        res = ExpandResponse(
            node=view,
            parent=node_view(parent[0]) if parent else None,
            children=[node_view(by_id[c]) for c in node.children if c in by_id],
        )
        self.visits.show(ns, [res.node] + ([res.parent] if res.parent else []) + res.children)
        return res


def _holds(storage: Storage, ns: str, kind: str, source_id: str) -> bool:
    """Whether the namespace holds a source of this kind ("conversation" or "document") and id."""
    src = storage.get_source(ns, source_id)
    return src is not None and src.source_type == kind


def _where(namespaces: Sequence[str]) -> str:
    return f"namespace {namespaces[0]!r}" if len(namespaces) == 1 else "the namespaces searched"


def _around(view: Searchable, ns: str, node: MemoryNode, k: int) -> tuple[list[MemoryNode], list[MemoryNode]]:
    """(up to k nodes before, up to k after) `node` among its source's nodes of its level, in position order."""
    if k <= 0:
        return [], []
    around = view.source_nodes(ns, node.source_id, node.level, max(0, node.position - k), node.position + k)
    return [n for n in around if n.position < node.position], [n for n in around if n.position > node.position]


SPAN = 64  # positions one read of a source's chunks may span when neighbours of several hits are read at once


def _around_many(
    view: Searchable, ns: str, nodes: Sequence[MemoryNode], k: int
) -> dict[str, tuple[list[MemoryNode], list[MemoryNode]]]:
    """`_around` of each node, {node id: (before, after)}, reading the chunks of hits close together in one
    source (positions within SPAN) at once: one store read per group instead of one per hit."""
    out: dict[str, tuple[list[MemoryNode], list[MemoryNode]]] = {}
    if k <= 0:
        return out
    groups: dict[tuple[str, int], list[MemoryNode]] = {}
    for n in nodes:
        groups.setdefault((n.source_id, n.level), []).append(n)
    for (sid, level), members in groups.items():
        members.sort(key=lambda n: n.position)
        runs: list[list[MemoryNode]] = []
        for n in members:
            if runs and n.position - runs[-1][0].position <= SPAN:
                runs[-1].append(n)
            else:
                runs.append([n])
        for run in runs:
            first, last = max(0, run[0].position - k), run[-1].position + k
            read = view.source_nodes(ns, sid, level, first, last)
            for n in run:
                lo, hi = n.position - k, n.position + k
                out[n.id] = (
                    [m for m in read if lo <= m.position < n.position],
                    [m for m in read if n.position < m.position <= hi],
                )
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
