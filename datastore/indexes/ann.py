"""Approximate nearest neighbours for large namespaces: a faiss inverted-file index over 8-bit vectors.

faiss is the optional `ann` extra (`pip install 'pyramind[ann]'`, 66 MB): without it every search is the exact
scan, which is what a namespace below ANN_MIN_ROWS gets anyway (see `available`).

`VectorIndex` keeps exact float32 rows and answers small namespaces and filtered searches exactly; above
ANN_MIN_ROWS live rows it asks this index for a few hundred candidates and re-ranks them exactly. The index is
trained (k-means, `nlist` ~ 4 sqrt(n) lists) on the rows present when built, takes later rows into the trained
lists, and is rebuilt when the namespace has doubled since.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from typing import cast

import numpy as np

log = logging.getLogger(__name__)

_TRAIN_PER_LIST = 40  # training points per list (faiss warns below 39)
_NPROBE_SHARE = 1 / 16  # share of the lists scanned per query


@functools.cache
def available() -> bool:
    """Whether faiss is installed (the `ann` extra); says once in the log when it is not."""
    if importlib.util.find_spec("faiss") is not None:
        return True
    log.warning(
        "a namespace reached ANN_MIN_ROWS nodes but faiss is not installed: searching it exactly "
        "(pip install 'pyramind[ann]' for the IVF index)"
    )
    return False


class IVFIndex:
    """faiss IndexIVFScalarQuantizer (8-bit, inner product) keyed by the store's row ids. Not thread-safe."""

    def __init__(self, dimension: int, rowids: np.ndarray, vectors: np.ndarray, seed: int = 0) -> None:
        """Train on and add `vectors` (float32 (n, dimension), L2-normalised) under `rowids` (int64 (n,))."""
        import faiss

        faiss.omp_set_num_threads(1)  # queries run one per request thread; faiss threads would fight them
        n = len(rowids)
        self.nlist = int(np.clip(min(4 * np.sqrt(n), n / _TRAIN_PER_LIST), 16, 16384))
        quantizer = faiss.IndexFlatIP(dimension)
        self._index = faiss.IndexIVFScalarQuantizer(
            quantizer, dimension, self.nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )
        self._index.cp.niter = 10
        rng = np.random.default_rng(seed)
        sample = rng.choice(n, size=min(n, _TRAIN_PER_LIST * self.nlist), replace=False)
        self._index.train(np.ascontiguousarray(vectors[np.sort(sample)], dtype=np.float32))
        self._index.nprobe = max(8, int(self.nlist * _NPROBE_SHARE))
        self.trained_on = n
        self.add(rowids, vectors)

    def __getstate__(self) -> dict[str, object]:
        """For a snapshot (datastore/indexes/snapshots.py): the faiss index as faiss serialises it."""
        import faiss

        return {**self.__dict__, "_index": faiss.serialize_index(self._index)}

    def __setstate__(self, state: dict[str, object]) -> None:
        import faiss

        self.__dict__.update(state)
        serialised = state["_index"]
        assert isinstance(serialised, np.ndarray)
        self._index = cast("faiss.IndexIVFScalarQuantizer", faiss.deserialize_index(serialised))

    def add(self, rowids: np.ndarray, vectors: np.ndarray) -> None:
        if len(rowids):
            self._index.add_with_ids(
                np.ascontiguousarray(vectors, dtype=np.float32), np.ascontiguousarray(rowids, dtype=np.int64)
            )

    def remove(self, rowids: np.ndarray) -> None:
        import faiss

        if len(rowids):
            self._index.remove_ids(faiss.IDSelectorBatch(np.ascontiguousarray(rowids, dtype=np.int64)))

    def candidates(self, query: np.ndarray, k: int) -> np.ndarray:
        """Row ids of about the `k` rows closest to `query` (float32 (dimension,)); fewer when the index is small."""
        _, ids = self._index.search(np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32), k)
        found = ids[0]
        hits: np.ndarray = found[found >= 0]
        return hits
