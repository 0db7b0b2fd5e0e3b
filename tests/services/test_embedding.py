"""The local MiniLM embedder: shape, normalisation, meaning, and dynamic batching under concurrent calls."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from services.embedding import LocalEmbedder
from services.errors import EmbeddingError


def test_vectors_are_384_float32_unit_length_and_meaningful(embedder: LocalEmbedder) -> None:
    out = embedder.embed(["I adopted a kitten.", "We got a new cat at home.", "The stock market fell today."])
    assert out.shape == (3, 384) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert out[0] @ out[1] > out[0] @ out[2] + 0.2
    assert embedder.embed([]).shape == (0, 384)


def test_concurrent_calls_are_batched_and_each_gets_its_own_vectors(embedder: LocalEmbedder) -> None:
    texts = [f"Question number {i} about the trip to Lisbon in June" for i in range(24)]
    alone = embedder.embed(texts)
    got: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            got[i] = embedder.embed([texts[i], texts[(i + 1) % 24]])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(24):
        assert np.allclose(got[i][0], alone[i], atol=1e-5) and np.allclose(got[i][1], alone[(i + 1) % 24], atol=1e-5)


def test_a_failing_batch_fails_its_callers_and_the_next_call_works(embedder: LocalEmbedder) -> None:
    with pytest.raises(EmbeddingError, match="local embedding failed"):
        embedder.embed([None])  # type: ignore[list-item]
    assert embedder.embed(["still fine"]).shape == (1, 384)
