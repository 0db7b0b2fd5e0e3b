"""An in-memory vector index for one namespace: float32 rows, cosine by dot product.

Rows, their level and time range and their removal are kept by `datastore.rows.RowTable` (shared with the BM25
index); this adds the vector matrix, compacted with the rows when a quarter of them are dead.

Search is exact, except that a namespace of at least `ann_min_rows` live rows is searched through an IVF index
(`datastore.ann`, when faiss is installed) whose candidates are re-ranked exactly; filters the candidates cannot
satisfy fall back to the exact scan.
"""

from __future__ import annotations

import numpy as np

from datastore.indexes import ann as ann_module
from datastore.indexes.ann import IVFIndex
from datastore.indexes.rows import RowTable

_ANN_CANDIDATES = 256  # candidates drawn from the IVF index per query (at least 8 x top_k)


class VectorIndex(RowTable):
    """Exact top-k over L2-normalised float32 vectors of one namespace. Not thread-safe: callers lock."""

    EXTRA = ("matrix",)

    def __init__(self, dimension: int, ann_min_rows: int = 0) -> None:
        """ann_min_rows: live rows from which searches go through an IVF index; 0 = always exact."""
        super().__init__()
        self.dimension = dimension
        self.ann_min_rows = ann_min_rows
        self.ann: IVFIndex | None = None
        self.matrix = np.zeros((0, dimension), dtype=np.float32)

    def add(
        self, rowids: np.ndarray, vectors: np.ndarray, levels: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> None:
        """Append rows; rowids must be greater than every id already added (the store's row ids increase)."""
        if len(rowids) == 0:
            return
        sl, order = self._append(rowids, levels, starts, ends)
        self.matrix[sl] = np.asarray(vectors, dtype=np.float32)[order]
        if self.ann is not None:
            self.ann.add(self.rowids[sl], self.matrix[sl])

    def remove(self, rowids: np.ndarray) -> None:
        """Forget rows (unknown ids are ignored)."""
        pos = self._mark_dead(rowids)
        if self.ann is not None:
            self.ann.remove(self.rowids[pos])
        if self._needs_compaction():
            self._keep_rows(np.flatnonzero(self.alive[: self.size]))

    def search(
        self,
        query: np.ndarray,
        top_k: int,
        candidates: np.ndarray | None = None,
        min_level: int | None = None,
        max_level: int | None = None,
        start: float | None = None,
        end: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, cosine scores) of the top_k live rows, best first.

        candidates: restrict to these row ids (sorted or not). Levels inclusive; `start`/`end` keep rows whose
        time range ends at/after `start` and begins at/before `end` (rows without times are then excluded).
        """
        bounds = (min_level, max_level, start, end)
        if candidates is None and self._ann_ready():
            found = self._search_ann(query, top_k, *bounds)
            if found is not None:
                return found
        if candidates is not None:
            pos = self._keep(self._positions(np.sort(np.asarray(candidates, dtype=np.int64))), *bounds)
            return self._top(pos, self.matrix[pos] @ query, top_k)
        if not self.dead and all(b is None for b in bounds):
            return self._top(np.arange(self.size), self.matrix[: self.size] @ query, top_k)
        # score every row in place (no copy of the passing rows: 150 MB per query at 100k) and rank those kept
        pos = self._keep(np.flatnonzero(self.alive[: self.size]), *bounds)
        return self._top(pos, (self.matrix[: self.size] @ query)[pos], top_k)

    def prepare(self) -> None:
        """Build the IVF index now when the rows call for one (else the next search does): a namespace's load
        ends with it, so its snapshot holds it too."""
        self._ann_ready()

    def cosines(self, rowids: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, cosines to `query`) of the live rows among `rowids` (sorted int64), in row order, unranked:
        one product over a view of the matrix when the rows lie together (a source's rows, added at once)."""
        pos = self._positions(rowids)
        if len(pos) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        first, last = int(pos[0]), int(pos[-1])
        if last - first + 1 == len(pos):  # contiguous: no copy of the rows
            scores = self.matrix[first : last + 1] @ query
        else:
            scores = self.matrix[pos] @ query
        return self.rowids[pos], scores

    def times(self, rowids: np.ndarray) -> list[float]:
        """The start time (POSIX seconds, NaN for none) of each of `rowids` (any order, each held), in that order."""
        held = self.rowids[: self.size]
        return self.starts[np.searchsorted(held, rowids)].tolist()  # type: ignore[no-any-return]

    def rows(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, their vectors (n, dimension) float32, a copy) of the live rows among `rowids` (sorted int64),
        in row order: the vectors as added, bit for bit."""
        pos = self._positions(rowids)
        return self.rowids[pos], self.matrix[pos]

    def _keep(
        self, pos: np.ndarray, min_level: int | None, max_level: int | None, start: float | None, end: float | None
    ) -> np.ndarray:
        """The positions among `pos` whose level and time range pass the bounds."""
        kept: np.ndarray = pos[self._in_bounds(pos, min_level, max_level, start, end)]
        return kept

    def _top(self, pos: np.ndarray, scores: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, scores) of the top_k of `scores` (aligned with positions `pos`), best first."""
        k = min(top_k, len(scores))
        if k == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        return self.rowids[pos[top]], scores[top]

    def _ann_ready(self) -> bool:
        """Whether searches go through the IVF index, (re)building it when the namespace reached the threshold
        or has doubled since it was trained."""
        live = len(self)
        if not self.ann_min_rows or live < self.ann_min_rows or not ann_module.available():
            self.ann = None
            return False
        if self.ann is None or live > 2 * self.ann.trained_on:
            pos = np.flatnonzero(self.alive[: self.size])
            self.ann = IVFIndex(self.dimension, self.rowids[pos], self.matrix[pos])
        return True

    def _search_ann(
        self,
        query: np.ndarray,
        top_k: int,
        min_level: int | None,
        max_level: int | None,
        start: float | None,
        end: float | None,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Top_k among the IVF candidates, re-ranked exactly; None when the bounds leave fewer than top_k."""
        assert self.ann is not None
        ids = self.ann.candidates(query, max(_ANN_CANDIDATES, 8 * top_k))
        pos = self._keep(self._positions(np.sort(ids)), min_level, max_level, start, end)
        if len(pos) < top_k:
            return None
        return self._top(pos, self.matrix[pos] @ query, top_k)
