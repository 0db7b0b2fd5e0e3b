"""The benchmarks' own tests (bench/ never imports tests/, and tests/ never imports bench/): the real local
embedder, loaded once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.embedding import LocalEmbedder


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(threads=1, workers=2)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here runs a benchmark's code on tiny data: `slow` (registered in pyproject.toml). The hook sees
    the whole session's items, so it marks only those under this folder."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.slow)
