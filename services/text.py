"""Text primitives every service shares: the project's one sentence splitter.

Issue 26 asks for one text module (one analyser, one splitter, one stemmer used everywhere); this module holds the
splitter, used by the extractive summariser (services/summarising.py) and instruction detection
(services/instruction_rules.py).

Sentences are split by BlingFire (`blingfire` on PyPI, MIT, Microsoft): a finite-state splitter whose model ships
inside the wheel, so nothing is downloaded at run time. Compared on the 3,435 LoCoMo dev messages and the 388 of
BEAM 100K chat 11 with pysbd and the regex the summariser used before (bench/RESULTS.md, "Sentence splitter"): it
keeps closing quotes inside their sentence (`"Finding Freedom."`, which the regex cut before the quote), is 40 to
140 times faster than pysbd, and does not miss plain sentence ends as pysbd did ("... to me. I'm living ...").
Every line break ends a sentence too (chat messages use lines for list items and code). Where BlingFire's native
library cannot be loaded (a platform without a build in the wheel), a regex splitter that cuts after `.`, `!` or
`?` and a space (not after common abbreviations) takes its place.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

log = logging.getLogger(__name__)

_ABBREV = re.compile(r"\b(?:e\.g|i\.e|etc|vs|mr|mrs|ms|dr|prof|approx|fig|cf|jr|sr|st|no|p\.m|a\.m)\.$", re.I)
_SENT_END = re.compile(r"[.!?\u3002\uff01\uff1f]+[\"')\]\u201d\u2019]*(?=\s)")


def _regex_spans(line: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _SENT_END.finditer(line):
        if _ABBREV.search(line[max(start, m.start() - 8) : m.end()]):
            continue
        spans.append((start, m.end()))
        start = m.end()
    spans.append((start, len(line)))
    return spans


def _load_blingfire() -> Callable[[str], list[tuple[int, int]]]:
    try:
        import blingfire

        blingfire.text_to_sentences_and_offsets("Load. Test.")
    except Exception as exc:  # an ImportError, or OSError from a native library missing for this platform
        log.warning("blingfire unavailable (%s); sentences are split by the regex fallback", type(exc).__name__)
        return _regex_spans

    def spans(line: str) -> list[tuple[int, int]]:
        _, offsets = blingfire.text_to_sentences_and_offsets(line)
        return [(int(a), int(b)) for a, b in offsets]

    return spans


_line_spans = _load_blingfire()


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of the sentences of `text`, in order: trimmed of surrounding whitespace,
    never empty, never across a line break. Pieces without a letter or digit ("...", "!!") are dropped."""
    out: list[tuple[int, int]] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if body.strip():
            for a, b in _line_spans(body):
                piece = body[a:b]
                stripped = piece.strip()
                if not stripped or not any(ch.isalnum() for ch in stripped):
                    continue
                a += len(piece) - len(piece.lstrip())
                out.append((offset + a, offset + a + len(stripped)))
        offset += len(line)
    return out


def sentences(text: str) -> list[str]:
    """The sentences of `text` (see `sentence_spans`)."""
    return [text[a:b] for a, b in sentence_spans(text)]
