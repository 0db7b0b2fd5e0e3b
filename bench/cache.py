"""An embedder wrapper that caches vectors by text in a SQLite file, so benchmark variants embed each text once."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import numpy as np

from services.embedding import Embedder


class CachingEmbedder:
    """Wraps an Embedder: `embed` looks each text up by sha1 (per model) and embeds only the misses, in one call.

    The cache is a SQLite file (created with its folder); vectors are stored as float32 bytes. `hits` and
    `misses` count texts served from and added to the cache. Thread-safe.
    """

    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dimension = inner.dimension
        # the same model on another runtime (ONNX int8 vs PyTorch) gives slightly different vectors: keep them apart
        runtime = getattr(inner, "runtime", "")
        self._tag = f"{self.model_name}/{runtime}" if runtime else self.model_name
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)")
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _key(self, text: str) -> str:
        return hashlib.sha1(f"{self._tag}\0{text}".encode()).hexdigest()

    def close(self) -> None:
        """Stop the inner embedder's threads (restarted by the next call); the cache stays open."""
        self.inner.close()

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        """float32 array (len(texts), dimension), L2-normalised, identical to the inner embedder's."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        keys = [self._key(t) for t in texts]
        with self._lock:
            found: dict[str, bytes] = {}
            unique = list(dict.fromkeys(keys))
            for i in range(0, len(unique), 500):
                part = unique[i : i + 500]
                rows = self._db.execute(
                    f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(part))})", part
                )
                found.update(rows)
            missing = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in found))
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
            if missing:
                vectors = self.inner.embed(missing, bulk=bulk)
                new = {
                    self._key(t): np.ascontiguousarray(v, dtype=np.float32).tobytes()
                    for t, v in zip(missing, vectors, strict=True)
                }
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", list(new.items()))
                self._db.execute("COMMIT")
                found.update(new)
        for i, k in enumerate(keys):
            out[i] = np.frombuffer(found[k], dtype=np.float32)
        return out

    def release(self) -> None:
        """Close the cache file and the inner embedder (the end of a benchmark; `close` only stops the inner
        embedder's threads, as every Memory closing over this embedder asks)."""
        self._db.close()
        self.inner.close()
