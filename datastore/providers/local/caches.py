"""The local store's namespace caches: each namespace's vectors (`VectorIndex`) and BM25 index (`TextIndex`) in
memory, kept current by this process's commits, reloaded when another process has written, dropped when idle.

A cache is as of its namespace's `version` row. This process's commits apply their rows to the cache inside the
transaction (`apply`); a reader that sees a newer version than the cache (another process's commit) reloads it,
in place, by one thread (`get`). A namespace searched once and then left alone does not keep its indexes for the
life of the process: a cache unused for IDLE_SECONDS is dropped at the next `get` of any namespace, and loaded
again on its own next search.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence

import numpy as np

from datastore.indexes.text import TextIndex
from datastore.indexes.vectors import VectorIndex

LOAD_SLICE = 20_000  # rows fetched at a time when a namespace's cache is loaded (caps the loading peak)
IDLE_SECONDS = 900.0  # a namespace cache unused this long is dropped
SWEEP_EVERY = 60.0  # seconds between sweeps for idle caches


def namespace_version(db: sqlite3.Connection, ns: str) -> int:
    """The namespace's version (bumped by every commit to it; 0 for a namespace never written)."""
    row = db.execute("SELECT version FROM namespaces WHERE namespace = ?", (ns,)).fetchone()
    return row[0] if row else 0


class NamespaceCache:
    """A namespace's in-memory search indexes, as of namespace `version`; `lock` guards both."""

    def __init__(self, dimension: int, ann_min_rows: int) -> None:
        self.index = VectorIndex(dimension, ann_min_rows)
        self.text = TextIndex()
        self.version = -1
        self.lock = threading.Lock()
        self.used = time.monotonic()


class NamespaceCaches:
    """The caches of every namespace searched recently. dimension: the vectors' (float32). ann_min_rows: the
    ANN_MIN_ROWS setting (the row count from which a namespace's vector search uses an IVF index)."""

    def __init__(self, dimension: int, ann_min_rows: int, idle_seconds: float = IDLE_SECONDS) -> None:
        self.dimension = dimension
        self.ann_min_rows = ann_min_rows
        self.idle_seconds = idle_seconds
        self._caches: dict[str, NamespaceCache] = {}
        self._guard = threading.Lock()
        self._swept = time.monotonic()

    def __len__(self) -> int:
        return len(self._caches)

    def get(self, db: sqlite3.Connection, ns: str) -> NamespaceCache:
        """The namespace's cache, current as of what `db` (this thread's reader) sees: loaded when missing,
        reloaded when another process has written since.

        A cache at or past the version this reader sees is current: this process's own commits keep it up to
        date (`apply`), and a reader whose snapshot began just before such a commit sees an older version; only
        a newer version (another process's commit) reloads it."""
        version = namespace_version(db, ns)
        now = time.monotonic()
        with self._guard:
            if now - self._swept > SWEEP_EVERY:
                self._sweep(now)
            cache = self._caches.get(ns)
            if cache is None:
                cache = self._caches[ns] = NamespaceCache(self.dimension, self.ann_min_rows)
            cache.used = now
        if cache.version >= version:
            return cache
        with cache.lock:
            if cache.version < version:
                db.execute("BEGIN")
                try:
                    version = namespace_version(db, ns)
                    cache.index = VectorIndex(self.dimension, self.ann_min_rows)
                    cache.text = TextIndex()
                    self._load(cache, db, ns, None)
                finally:
                    db.execute("COMMIT")
                cache.version = version
        return cache

    def _sweep(self, now: float) -> None:
        """Drop the caches unused for idle_seconds (called under the guard)."""
        self._swept = now
        for ns in [ns for ns, c in self._caches.items() if now - c.used > self.idle_seconds]:
            del self._caches[ns]

    def apply(self, db: sqlite3.Connection, ns: str, before: int, removed: list[int], added: list[int]) -> None:
        """Bring this process's cache of `ns` up to the commit being made in `db` (the writer, inside the
        transaction), which moves the namespace from version `before` to `before + 1`; a cache that was not at
        `before` (stale) is dropped instead."""
        with self._guard:
            cache = self._caches.get(ns)
        if cache is None:
            return
        with cache.lock:
            if cache.version != before:
                with self._guard:
                    self._caches.pop(ns, None)
                return
            cache.index.remove(np.array(removed, dtype=np.int64))
            cache.text.remove(np.array(removed, dtype=np.int64))
            self._load(cache, db, ns, added)
            cache.version = before + 1

    def drop(self, ns: str) -> None:
        """Forget the namespace's cache (its namespace was deleted)."""
        with self._guard:
            self._caches.pop(ns, None)

    def _load(self, cache: NamespaceCache, db: sqlite3.Connection, ns: str, rowids: Sequence[int] | None) -> None:
        """Add the namespace's rows (all of them, or those of `rowids`) to both indexes of `cache`, a slice at a
        time: a full load holds one slice of fetched rows besides the indexes, never the whole namespace twice."""
        cols = "rowid, level, start_time, end_time, text, embedding"
        if rowids is None:
            count = db.execute("SELECT COUNT(*) FROM nodes WHERE namespace = ? AND level >= 1", (ns,)).fetchone()[0]
            cache.index.reserve(count)
            cache.text.reserve(count)
            cur = db.execute(f"SELECT {cols} FROM nodes WHERE namespace = ? AND level >= 1 ORDER BY rowid", (ns,))
            while rows := cur.fetchmany(LOAD_SLICE):
                self._add_rows(cache, rows)
            return
        for i in range(0, len(rowids), 500):
            part = list(rowids[i : i + 500])
            self._add_rows(
                cache,
                db.execute(f"SELECT {cols} FROM nodes WHERE rowid IN ({','.join('?' * len(part))})", part).fetchall(),
            )

    def _add_rows(self, cache: NamespaceCache, rows: list[sqlite3.Row]) -> None:
        rows = [r for r in rows if r[1] >= 1]  # lines (level 0) are never search results: kept out of the indexes
        if not rows:
            return
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        levels = np.array([r[1] for r in rows], dtype=np.int16)
        starts = np.array([r[2] if r[2] is not None else np.nan for r in rows], dtype=np.float64)
        ends = np.array([r[3] if r[3] is not None else np.nan for r in rows], dtype=np.float64)
        vecs = np.frombuffer(b"".join(r[5] for r in rows), dtype=np.float32).reshape(len(rows), self.dimension)
        cache.index.add(ids, vecs, levels, starts, ends)
        cache.text.add(ids, [r[4] for r in rows], levels, starts, ends)
