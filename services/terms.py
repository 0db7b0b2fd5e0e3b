"""The words of a text for full-text search: lower-cased runs of letters and digits, stop words dropped.

The same function tokenises a query for every provider's text search (the local store's in-memory BM25, the
PostgreSQL `to_tsquery`) and for the context block's lexical closeness, so a word counts the same everywhere.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+")
STOP_WORDS = frozenset(
    "a an the and or but if of to in on at for with by from as is are was were be been being it its this that "
    "these those i me my we our you your he him his she her they them their what which who whom whose do does "
    "did done have has had not no so too very just can will would should could about into than then there here "
    "when where why how all any both each more most other some such only own same also up down out over again "
    "s t don doesn didn isn wasn am".split()
)


def text_terms(text: str) -> list[str]:
    """The query words of `text` for full-text search: lower-cased runs of letters and digits, each once, in
    order, stop words dropped (all kept when nothing else is left); [] for a text without a word."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    content = [w for w in words if w not in STOP_WORDS]
    return content or words
