"""Lexical weights of a query's terms over a request's candidates (services/text.py's terms, BM25's analysis)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from services.text import term_set


def term_weights(texts: Iterable[str]) -> dict[str, float]:
    """IDF-like weights over `texts` (e.g. the candidate chunks of one request): term -> ln(1 + N / df), where
    N is the number of texts and df the number holding the term. Keys are `services.text.terms` terms."""
    df: dict[str, int] = {}
    n = 0
    for t in texts:
        n += 1
        for term in term_set(t):
            df[term] = df.get(term, 0) + 1
    return {t: math.log1p(n / d) for t, d in df.items()}
