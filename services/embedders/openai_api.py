"""OpenAI embeddings (or any OpenAI-compatible server's) through the official client (the `openai` extra)."""

from __future__ import annotations

import numpy as np

from models.settings import Settings
from services.errors import EmbeddingError
from services.openai_client import openai_client

OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
OPENAI_DEFAULT_DIMENSION = 1536


class OpenAIEmbedder:
    """OpenAI embeddings (`text-embedding-3-small` by default, EMBEDDING_MODEL / EMBEDDING_DIMENSION otherwise).

    Works with any OpenAI-compatible server via `OPENAI_BASE_URL`. Retries (the client's own, with backoff) on
    429/5xx and timeouts; raises EmbeddingError when they are exhausted, OpenAIMissingError without the extra.
    """

    def __init__(self, settings: Settings) -> None:
        self._client = openai_client(settings, "EMBEDDER=openai (the default when OPENAI_API_KEY is set)")
        self.model_name = settings.embedding_model or OPENAI_DEFAULT_MODEL
        self.dimension = settings.embedding_dimension or OPENAI_DEFAULT_DIMENSION
        self._batch_size = max(settings.embed_batch_size, 64)

    def close(self) -> None:
        """Close the HTTP client's connections (a later call opens new ones)."""
        self._client.close()

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        """embeddings: float32 array (n, dimension), L2-normalised; raises EmbeddingError on API failure.
        `bulk` is accepted for the Embedder protocol (a remote API has no local priority)."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i in range(0, len(texts), self._batch_size):
            batch = texts[i : i + self._batch_size]
            try:
                resp = self._client.embeddings.create(model=self.model_name, input=batch, dimensions=self.dimension)
            except Exception as exc:
                raise EmbeddingError(f"OpenAI embedding request failed: {type(exc).__name__}") from exc
            rows = sorted(resp.data, key=lambda d: d.index)
            if len(rows) != len(batch) or any(len(r.embedding) != self.dimension for r in rows):
                raise EmbeddingError("OpenAI embedding response has the wrong shape")
            out[i : i + len(batch)] = [r.embedding for r in rows]
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        unit: np.ndarray = out / np.maximum(norms, 1e-12)
        return unit
