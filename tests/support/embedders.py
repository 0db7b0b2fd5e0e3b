"""Embedders for tests: another model and dimension than MiniLM's, the real one made to fail, and the real one
recording what it is asked to embed."""

from __future__ import annotations

import numpy as np

from services.embedding import LocalEmbedder
from services.errors import EmbeddingError


class OtherEmbedder:
    """A deterministic 8-d embedder (hashed character trigrams): another model and dimension than MiniLM's."""

    model_name = "trigram-hash-8"
    dimension = 8

    def close(self) -> None:
        """Nothing to release."""

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, t in enumerate(texts):
            for j in range(max(1, len(t) - 2)):
                out[i, hash(t[j : j + 3]) % self.dimension] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


class FailingEmbedder:
    """The real embedder made to fail on every call (an injected fault, like a crashed model server)."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.model_name, self.dimension = inner.model_name, inner.dimension

    def close(self) -> None:
        """Nothing to release."""

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        raise EmbeddingError("injected failure")


class RecordingEmbedder(LocalEmbedder):
    """The real local embedder (one thread), recording in `texts` every text it is asked to embed, in order."""

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.texts: list[str] = []

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        self.texts.extend(texts)
        return super().embed(texts, bulk=bulk)
