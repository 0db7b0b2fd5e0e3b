"""The in-memory vector index: exact search with filters, and the IVF path for large namespaces."""

from __future__ import annotations

import sys
from importlib.util import find_spec

import numpy as np
import pytest

from datastore.indexes.vectors import VectorIndex


def clustered(n: int, dim: int = 64, centres: int = 40, seed: int = 0) -> np.ndarray:
    """Unit vectors around a few centres, like real embeddings (low intrinsic dimension), not uniform noise."""
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centres, dim))
    v = c[rng.integers(0, centres, n)] + 0.35 * rng.normal(size=(n, dim))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def fill(index: VectorIndex, vectors: np.ndarray) -> np.ndarray:
    n = len(vectors)
    rowids = np.arange(1, n + 1, dtype=np.int64) * 3
    levels = np.where(np.arange(n) % 5 == 0, 2, 1)
    index.add(rowids, vectors, levels, np.arange(n, dtype=float), np.arange(n, dtype=float) + 1)
    return rowids


def brute(vectors: np.ndarray, rowids: np.ndarray, q: np.ndarray, k: int, keep: np.ndarray | None = None) -> list[int]:
    scores = vectors @ q
    order = np.argsort(-scores, kind="stable")
    if keep is not None:
        order = order[keep[order]]
    return rowids[order[:k]].tolist()


def test_exact_search_matches_brute_force_with_filters_and_removals() -> None:
    vectors = clustered(3000)
    index = VectorIndex(64)
    rowids = fill(index, vectors)
    q = vectors[17]
    ids, scores = index.search(q, 10)
    assert ids.tolist() == brute(vectors, rowids, q, 10) and np.all(np.diff(scores) <= 0)
    ids, _ = index.search(q, 10, min_level=2)
    assert ids.tolist() == brute(vectors, rowids, q, 10, np.arange(3000) % 5 == 0)
    ids, _ = index.search(q, 10, start=2000.0)
    assert ids.tolist() == brute(vectors, rowids, q, 10, np.arange(3000) + 1 >= 2000)
    ids, _ = index.search(q, 5, candidates=rowids[100:200])
    assert ids.tolist() == brute(vectors[100:200], rowids[100:200], q, 5)
    index.remove(rowids[:1500])
    ids, _ = index.search(q, 10)
    assert ids.tolist() == brute(vectors[1500:], rowids[1500:], q, 10)


def test_large_namespaces_go_through_ivf_with_high_recall() -> None:
    vectors = clustered(20_000)
    exact, approx = VectorIndex(64), VectorIndex(64, ann_min_rows=10_000)
    rowids = fill(exact, vectors)
    fill(approx, vectors)
    rng = np.random.default_rng(1)
    hits = 0
    for qi in rng.choice(20_000, 50, replace=False):
        q = vectors[qi]
        want = set(exact.search(q, 10)[0].tolist())
        got, scores = approx.search(q, 10)
        hits += len(want & set(got.tolist()))
        assert np.allclose(scores, vectors[(got // 3) - 1] @ q, atol=1e-5)  # re-ranked with exact scores
    assert approx.ann is not None and exact.ann is None
    assert hits / 500 >= 0.95
    # rows added later are found; removed rows never come back
    new = clustered(10, seed=9)
    approx.add(np.arange(100_000, 100_010, dtype=np.int64), new, np.ones(10), np.zeros(10), np.ones(10))
    assert approx.search(new[3], 1)[0].tolist() == [100_003]
    approx.remove(np.array([100_003]))
    assert 100_003 not in approx.search(new[3], 10)[0].tolist()
    # a filter the candidates cannot satisfy falls back to the exact scan
    only = approx.search(vectors[0], 3, min_level=2, start=19_990.0)[0].tolist()
    rows = np.arange(20_000)
    assert only == brute(vectors, rowids, vectors[0], 3, (rows % 5 == 0) & (rows + 1 >= 19_990))


def test_without_faiss_a_large_namespace_is_searched_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """faiss is the optional `ann` extra: when it cannot be imported, the index past ann_min_rows answers with the
    exact scan (same ids and scores as brute force) instead of failing."""
    import importlib.util

    from datastore.indexes import ann

    monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` now raises ImportError, as without the extra
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "faiss" else find_spec(name))
    ann.available.cache_clear()
    try:
        vectors = clustered(3_000)
        index = VectorIndex(64, ann_min_rows=1_000)
        rowids = fill(index, vectors)
        for qi in (0, 1234, 2999):
            got, scores = index.search(vectors[qi], 10)
            assert got.tolist() == brute(vectors, rowids, vectors[qi], 10)
            assert np.allclose(scores, vectors[(got // 3) - 1] @ vectors[qi], atol=1e-5)
        assert index.ann is None
    finally:
        ann.available.cache_clear()


def test_a_pickled_index_answers_as_the_original_and_keeps_growing() -> None:
    """An index snapshot (datastore/indexes/snapshots.py) is a pickle: rows cut to those held, the IVF index
    serialised by faiss, not trained again; the copy searches alike and takes rows and removals after."""
    import pickle

    vectors = clustered(12_000)
    index = VectorIndex(64, ann_min_rows=10_000)
    rowids = fill(index, vectors)
    index.remove(rowids[:7])
    index.search(vectors[0], 5)  # trains the IVF index
    copy = pickle.loads(pickle.dumps(index))
    assert len(copy.matrix) == copy.size == index.size  # no spare capacity written
    if index.ann is not None:
        assert copy.ann is not None and copy.ann.trained_on == index.ann.trained_on
    for q in vectors[100:120]:
        a, b = index.search(q, 10), copy.search(q, 10)
        assert a[0].tolist() == b[0].tolist() and np.array_equal(a[1], b[1])
    new = clustered(3, seed=5)
    copy.add(np.array([10**7, 10**7 + 1, 10**7 + 2]), new, np.ones(3), np.zeros(3), np.ones(3))
    copy.remove(np.array([10**7 + 1]))
    assert copy.search(new[0], 1)[0].tolist() == [10**7]
    assert 10**7 + 1 not in copy.search(new[1], 10)[0].tolist()


def test_a_reserved_index_holds_no_spare_rows() -> None:
    """A load reserves each part's rows before adding them: the arrays end at the rows held, where growing by
    half left up to a third of a large matrix unused."""
    index = VectorIndex(8)
    rng = np.random.default_rng(0)
    for start, n in ((1, 1000), (1001, 200), (1201, 300)):  # growing by half would leave 1,516 then 2,290 rows
        index.reserve(n)
        rows = np.arange(start, start + n)
        index.add(
            rows, rng.standard_normal((n, 8)).astype(np.float32), np.ones(n), np.full(n, np.nan), np.full(n, np.nan)
        )
        assert len(index.matrix) == len(index.rowids) == index.size
