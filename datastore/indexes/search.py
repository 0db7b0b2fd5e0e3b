"""Search for every provider: the `Searchable` the read path ranks over (datastore/read/ranking.py), answered
from the namespace's in-memory indexes (datastore/indexes/namespaces.py) and the store's rows.

`IndexedSearch` offers both of ranking's searches: `text` (BM25) and `rows` (vector and BM25 pools as row ids, so
hybrid fuses row ids and reads only the top_k rows it returns, `Storage.get_nodes`). Dense search is the exact
vector index (an IVF index from ANN_MIN_ROWS nodes, the `ann` extra). A filter's level and time bounds are
applied by the indexes; its source, speaker and session fields by the per-row facts the index keeps; so a query
reads the store twice: the namespace's version token, then the rows returned. The same code ranks on local,
postgres and pinecone: same candidate pools, same fusion, same scores.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from datastore.indexes.namespaces import NamespaceIndex, NamespaceIndexes
from datastore.indexes.snapshots import Snapshots
from datastore.read.lineage import fork_info
from datastore.read.ranking import RowSearch, TextSearch
from datastore.storage import Hits, Storage
from models.api import QueryFilter
from models.memory import MemoryNode
from models.settings import Settings
from models.time import utc
from services.text import text_terms

Bounds = tuple[int | None, int | None, float | None, float | None]  # (min_level, max_level, start, end)


class IndexedSearch:
    """The Searchable over one Storage: settings: ANN_MIN_ROWS, INDEX_IDLE_SECONDS, INDEX_MAX_NODES. storage:
    the provider (listing, rows by id). dimension: the embedder's. INDEX_SNAPSHOT_DIR, INDEX_SNAPSHOT_MIN_NODES: where
    cold namespaces are read back from, and from what size (datastore/indexes/snapshots.py); INDEX_PRELOAD_SHARE: how
    much of INDEX_MAX_NODES a starting server preloads from them (`NamespaceIndexes.start_preload`)."""

    def __init__(self, settings: Settings, storage: Storage, dimension: int) -> None:
        self.storage = storage
        snapshots = (
            None
            if settings.index_snapshot_dir is None
            else Snapshots(settings.index_snapshot_dir, settings.store_identity(), settings.index_snapshot_min_nodes)
        )
        self.indexes = NamespaceIndexes(
            storage,
            dimension,
            settings.ann_min_rows,
            settings.index_idle_seconds,
            settings.index_max_nodes,
            snapshots,
            int(settings.index_preload_share * settings.index_max_nodes),
        )
        self.text: TextSearch | None = IndexedText(self)
        self.rows: RowSearch | None = self

    def load_soon(self, ns: str) -> None:
        """Start loading the namespace's index in the background when it is cold (`NamespaceIndexes.load_soon`);
        returns at once."""
        self.indexes.load_soon(ns)

    # ------------------------------------------------------------------ row search (datastore/read/ranking.py)
    def _candidates(self, index: NamespaceIndex, flt: QueryFilter | None) -> tuple[np.ndarray | None, Bounds]:
        """The filter as (candidate row ids for its source, speaker and session fields, or None for all;
        (min_level, max_level, start, end) for the indexes). Same semantics as `storage.node_matches`."""
        if flt is None:
            return None, (None, None, None, None)
        start, end = utc(flt.start_date), utc(flt.end_date)
        bounds = (
            flt.level if flt.level is not None else flt.min_level,
            flt.level if flt.level is not None else flt.max_level,
            start.timestamp() if start is not None else None,
            end.timestamp() if end is not None else None,
        )
        sets: list[set[int]] = []
        if flt.conversation_id is not None:
            sets.append(index.rows_of_source("conversation", flt.conversation_id))
        if flt.document_id is not None:
            sets.append(index.rows_of_source("document", flt.document_id))
        if flt.source_type is not None:
            sets.append(index.rows_of_type(flt.source_type))
        if flt.speaker is not None:
            sets.append(index.speakers.get(flt.speaker, set()))
        if flt.session_id is not None:
            sets.append(index.sessions.get(flt.session_id, set()))
        if not sets:
            return None, bounds
        rows = set.intersection(*sorted(sets, key=len))
        return np.array(sorted(rows), dtype=np.int64), bounds

    def vector_rows(
        self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(row ids int64, cosines float32) of the top_k nodes matching `flt`, best first."""
        index = self.indexes.get(ns)
        with index.lock:
            candidates, bounds = self._candidates(index, flt)
            return index.vectors.search(np.asarray(vector, dtype=np.float32), top_k, candidates, *bounds)

    def text_rows(self, ns: str, text: str, top_k: int, flt: QueryFilter | None) -> tuple[np.ndarray, np.ndarray]:
        """(row ids int64, BM25 scores float32) of the top_k nodes matching `flt` holding a word of `text`."""
        terms = text_terms(text)
        if not terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        index = self.indexes.get(ns)
        with index.lock:
            candidates, bounds = self._candidates(index, flt)
            return index.text.search(terms, top_k, candidates, *bounds)

    def row_cosines(self, ns: str, rowids: np.ndarray, vector: np.ndarray) -> dict[int, float]:
        """{row id: cosine to `vector`} of those rows still held."""
        if len(rowids) == 0:
            return {}
        index = self.indexes.get(ns, refresh=False)  # rows of this search's pools, as of its version read
        with index.lock:
            found, scores = index.vectors.search(
                np.asarray(vector, dtype=np.float32), len(rowids), np.asarray(rowids, dtype=np.int64)
            )
        return dict(zip(found.tolist(), scores.tolist(), strict=True))

    def hits(self, ns: str, rowids: np.ndarray, scores: np.ndarray) -> Hits:
        """[(node, score)] for the row ids, in their order, read from the store (nodes deleted meanwhile are
        left out: the text served is always the store's)."""
        if len(rowids) == 0:
            return []
        index = self.indexes.get(ns, refresh=False)
        with index.lock:
            ids = index.ids.of(rowids)
        by_id = {n.id: n for n in self.storage.get_nodes(ns, [i for i in ids if i is not None])}
        return [(by_id[i], float(s)) for i, s in zip(ids, scores, strict=True) if i is not None and i in by_id]

    # ------------------------------------------------------------------ lines (datastore/read/outline.py)
    def line_scores(
        self,
        ns: str,
        sources: Sequence[tuple[str, Collection[str] | None]],
        vector: np.ndarray | None,
        terms: Sequence[str],
        pool: int,
    ) -> tuple[list[str], np.ndarray, dict[int, float], list[float]]:
        """The lines of `sources` [(source id, the line ids of it to take, None = all)], in that order and each
        source's in message order, as (their node ids; the cosine of each to `vector`, float64 (n,) in the ids'
        order, NaN for a line without a vector, shape (0,) without a vector: one product, no Python object per
        line; {index in those ids: BM25} of the top `pool` holding a word of `terms`, best first; each one's
        time, its node's start_time as POSIX seconds, NaN for none, in the ids' order), from the namespace's line
        indexes as of the store's namespace version read now (a line written or forgotten by any process is
        seen). Raises what the store raises."""
        index = self.indexes.get(ns)
        with index.lock:
            lines = index.lines
            rows: list[int] = []
            ids: list[str] = []
            for sid, only in sources:
                of_source = lines.by_source.get(sid, [])
                named = index.line_ids_of(sid)  # a source's rows are all held
                if only is not None:
                    keep = [k for k, i in enumerate(named) if i in only]
                    of_source, named = [of_source[k] for k in keep], [named[k] for k in keep]
                rows += of_source
                ids += named
            if not rows:
                return [], np.zeros(0), {}, []
            held = np.array(rows, dtype=np.int64)
            by_row = np.argsort(held, kind="stable")  # positions in the ids' order, by row id
            candidates = held[by_row]

            def at(found: np.ndarray) -> np.ndarray:  # the positions in the ids' order of these row ids
                return by_row[np.searchsorted(candidates, found)]

            cosine = np.zeros(0)
            if vector is not None:
                found, cos = lines.vectors.cosines(candidates, np.asarray(vector, dtype=np.float32))
                cosine = np.full(len(rows), np.nan)
                cosine[at(found)] = cos
            bm25: dict[int, float] = {}
            if terms:
                found, scores = lines.text.search(terms, pool, candidates)
                bm25 = dict(zip(at(found).tolist(), scores.tolist(), strict=True))
            times = lines.vectors.times(held)
        return ids, cosine, bm25, times

    # ------------------------------------------------------------------ the rest of Searchable
    def search_vector(self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None) -> Hits:
        """The top_k nodes closest to `vector` that match `flt`, [(node, cosine)], from the in-memory index."""
        return self.hits(ns, *self.vector_rows(ns, vector, top_k, flt))

    def get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """{node id: embedding} of the ids found: those the namespace's held index has, from it (the store's
        vectors as listed at the version its last search read, which ranked them: no round trip), the others
        from the store."""
        out: dict[str, np.ndarray] = {}
        index = self.indexes.held_index(ns)
        if index is not None:
            with index.lock:
                out = index.vectors_of(ids)
        missing = [i for i in ids if i not in out]
        if missing:
            out.update(self.storage.get_vectors(ns, missing))
        return out

    def fork_of(self, ns: str, source_id: str) -> dict[str, Any] | None:
        """The conversation's fork record (None: no fork, or unknown), read from the store once per namespace
        version (the index's `forks`, emptied by every refresh): a /context block asks it of each search."""
        index = self.indexes.get(ns)  # current as of the version read now
        with index.lock:
            token = index.token
            if source_id in index.forks:
                return index.forks[source_id]
        found = fork_info(self.storage, ns, source_id)
        with index.lock:
            if index.token == token:  # not refreshed meanwhile: what was read is at least as new
                index.forks[source_id] = found
        return found

    def get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]:
        """The nodes with these ids (the store's)."""
        return self.storage.get_nodes(ns, ids)

    def source_nodes(
        self, ns: str, source_id: str, level: int | None = None, first: int = 0, last: int | None = None
    ) -> list[MemoryNode]:
        """The source's nodes (the store's `source_nodes`)."""
        return self.storage.source_nodes(ns, source_id, level, first, last)


class IndexedText:
    """TextSearch: BM25 over the namespace's in-memory `TextIndex` (FTS5's `porter unicode61` tokens and
    `bm25()` scores), the nodes read from the store."""

    def __init__(self, search: IndexedSearch) -> None:
        self.search_ = search

    def search(self, ns: str, text: str, top_k: int, flt: QueryFilter | None = None) -> Hits:
        """The top_k nodes matching `flt` that hold a word of `text` (OR-ed, stemmed), [(node, bm25)] best first;
        [] when the text has no word."""
        return self.search_.hits(ns, *self.search_.text_rows(ns, text, top_k, flt))
