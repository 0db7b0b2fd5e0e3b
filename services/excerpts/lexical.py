"""Lexical closeness of units to a query: terms (services/text.py, BM25's analysis), weights, numbers and dates.

A unit's closeness is the summed weights of the query's terms it holds (its speaker's name counted with it),
plus NUMBER_BONUS times the query's top weight when the unit holds a number or date the query names (a
message's date is its session's stamp).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from services.excerpts.units import Unit
from services.text import term_set, terms

NUMBER_BONUS = 0.5  # a unit holding a number or date the query names: + this times the query's largest weight


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


_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*")
_MONTHS = {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}
_MONTH = (
    r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|"
    r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_DATES = [
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), "ymd"),
    (re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?(?:\s+of)?\s+{_MONTH}\.?(?:,?\s+(\d{{4}}))?\b", re.I), "dmy"),
    (re.compile(rf"\b{_MONTH}\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?", re.I), "mdy"),
    (re.compile(rf"\b{_MONTH}\.?\s+(\d{{4}})\b", re.I), "my"),
]


def _dates(text: str, specific: bool) -> set[str]:
    """Dates in `text` as keys `Y-M-D`, `Y-M`, `M-D`: with `specific` (the query) only the most precise key of
    each date, else (a unit) every key a query may use for it."""
    out: set[str] = set()
    taken: list[tuple[int, int]] = []  # "7 May 2023" is one date, not also "May 2023"
    for rx, form in _DATES:
        for m in rx.finditer(text):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            taken.append(m.span())
            g = m.groups()
            if form == "ymd":
                y, mo, d = g[0], int(g[1]), int(g[2])
            elif form == "dmy":
                y, mo, d = g[2], _MONTHS[g[1][:3].lower()], int(g[0])
            elif form == "mdy":
                y, mo, d = g[2], _MONTHS[g[0][:3].lower()], int(g[1])
            else:
                y, mo, d = g[1], _MONTHS[g[0][:3].lower()], 0
            keys = [
                f"{y}-{mo:02d}-{d:02d}" if y and d else "",
                f"{y}-{mo:02d}" if y else "",
                f"{mo:02d}-{d:02d}" if d else "",
            ]
            keys = [k for k in keys if k]
            out.update(keys[:1] if specific else keys)
    return out


def _lexical(units: list[Unit], query: str, weights: Mapping[str, float] | None) -> list[float]:
    """Per unit: the summed weights of the query terms it holds, plus the number/date bonus (module doc)."""
    q = terms(query)
    if not q:
        return [0.0] * len(units)
    speakers = {sp: term_set(sp) for sp in {u.speaker for u in units} if sp}
    sets = [term_set(u.text) | speakers[u.speaker] if u.speaker else term_set(u.text) for u in units]
    if weights is None:
        n = len(units)
        w = {t: math.log1p(n / max(1, sum(t in s for s in sets))) for t in q}
    else:
        default = max(weights.values(), default=1.0)
        w = {t: weights.get(t, default) for t in q}
    scores = [sum(w[t] for t in q if t in s) for s in sets]
    numbers = set(_NUMBER.findall(query))
    dates = _dates(query, specific=True)
    if numbers or dates:
        bonus = NUMBER_BONUS * max(w.values())
        stamp_dates: set[str] = set()
        turn = -1
        for i, u in enumerate(units):
            if u.turn != turn and u.prefix.startswith("["):
                stamp_dates = _dates(u.prefix, specific=False)  # a session's date holds for its later messages
            turn = u.turn
            if numbers & set(_NUMBER.findall(u.text)) or dates & (_dates(u.text, specific=False) | stamp_dates):
                scores[i] += bonus
    return scores
