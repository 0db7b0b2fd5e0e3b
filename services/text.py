r"""The project's one text analysis: what a word is, what a term is, where a sentence ends.

Every service that reads words or sentences takes them from here, so BM25 (datastore/indexes/text.py), excerpts
(services/excerpts), query terms, summaries (services/summarising.py), chunk cuts (services/chunking.py),
instruction detection (services/instruction_rules.py) and lines (services/lines.py) see the same words and the
same sentence ends (issue 26: one analyser, one splitter, one stemmer).

**Words** (`words`): runs of letters and digits (`[^\W_]+`, so "don't" is "don" and "t", "3.11" is "3" and "11")
of the text lower-cased with the diacritics of Latin letters removed (`fold`: "Café" is "cafe"), as SQLite FTS5's
`unicode61` tokenizer reads them. **Terms** (`stem`, `terms`, `term_set`): a word stemmed by the Porter stemmer
(PyStemmer's Snowball `porter`, which FTS5's `porter` differs from on a handful of words such as "-logy", "-bly",
"trekked"); words shorter than 3 or longer than 64 bytes are kept as they are, as in FTS5. **Stop words**
(`STOP_WORDS`): the function words a query's terms leave out (`text_terms`, `terms`); a text of stop words only
keeps them.

**Sentences** (`sentence_spans`, `sentences`, `line_spans`) are split by BlingFire (`blingfire` on PyPI, MIT,
Microsoft): a finite-state splitter whose model ships inside the wheel, so nothing is downloaded at run time.
Compared on the 3,435 LoCoMo dev messages and the 388 of BEAM 100K chat 11 with pysbd and the regex the summariser
used before (bench/RESULTS.md, "Sentence splitter"): it keeps closing quotes inside their sentence (`"Finding
Freedom."`, which the regex cut before the quote), is 40 to 140 times faster than pysbd, and does not miss plain
sentence ends as pysbd did ("... to me. I'm living ..."). Every line break ends a sentence too (chat messages use
lines for list items and code). Where BlingFire's native library cannot be loaded (a platform without a build in
the wheel), a regex splitter that cuts after `.`, `!` or `?` and a space (not after common abbreviations) takes
its place.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Callable
from functools import lru_cache

import Stemmer

log = logging.getLogger(__name__)

_ABBREV = re.compile(r"\b(?:e\.g|i\.e|etc|vs|mr|mrs|ms|dr|prof|approx|fig|cf|jr|sr|st|no|p\.m|a\.m)\.$", re.I)
# titles: BlingFire reads a sentence end before one as no end ("trip. Dr. Smith" one sentence) or cuts after it when
# it opens a sentence ("Great. Dr. | Lee said hi."); a title opens its sentence, whatever stands before it
_TITLES = r"(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|Mt|Gen|Col|Capt|Lt|Sgt|Gov|Sen|Rep|Rev|Hon)\."
_TITLE = re.compile(_TITLES, re.I)
_END_BEFORE_TITLE = re.compile(r"(?<=\w\w[.!?])[\"'”’)\]]*(?=\s+" + _TITLES + r"\s)")
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


def _cut_before_titles(line: str, a: int, b: int) -> list[tuple[int, int]]:
    """The span line[a:b] cut after each sentence end that a title follows ("trip. | Dr. Smith")."""
    out: list[tuple[int, int]] = []
    for m in _END_BEFORE_TITLE.finditer(line, a, b):
        before = line[a : m.start()].split()
        if before and _TITLE.fullmatch(before[-1]):
            continue  # "Mr. Dr. Who": the end is a title's own dot
        out.append((a, m.end()))
        a = m.end()
    out.append((a, b))
    return out


def _load_blingfire() -> Callable[[str], list[tuple[int, int]]]:
    try:
        import blingfire

        if blingfire.text_to_sentences("Load this. Then test it.") != "Load this.\nThen test it.":
            raise OSError("unexpected sentences")
    except Exception as exc:  # an ImportError, or OSError from a native library missing for this platform
        log.warning("blingfire unavailable (%s); sentences are split by the regex fallback", type(exc).__name__)
        return _regex_spans

    def offsets(line: str) -> list[tuple[int, int]]:
        """BlingFire's sentences of a line, found in it in order: `text_to_sentences` is 2-3 times faster than
        `text_to_sentences_and_offsets`, whose wrapper maps byte offsets to characters byte by byte, and gives
        the same pieces (every one of 23,101 LoCoMo and BEAM lines); where a piece is not found, the latter."""
        spans: list[tuple[int, int]] = []
        pos = 0
        for piece in blingfire.text_to_sentences(line).split("\n"):
            k = line.find(piece, pos) if piece else -1
            if k < 0:
                return [(int(a), int(b)) for a, b in blingfire.text_to_sentences_and_offsets(line)[1]]
            spans.append((k, k + len(piece)))
            pos = k + len(piece)
        return spans

    @lru_cache(maxsize=32768)
    def spans(line: str) -> tuple[tuple[int, int], ...]:
        out: list[tuple[int, int]] = []
        for a, b in offsets(line):
            if out and _TITLE.fullmatch(line[out[-1][0] : out[-1][1]].strip()):
                out[-1] = (out[-1][0], b)  # a title is never a sentence: it opens the next one
            else:
                out.append((a, b))
        return tuple(piece for a, b in out for piece in _cut_before_titles(line, a, b))

    return lambda line: list(spans(line))


line_spans: Callable[[str], list[tuple[int, int]]] = _load_blingfire()
"""(start, end) character offsets of the sentences of one line (no line break in it), as the splitter gives
them: untrimmed, pieces without a letter included. `sentence_spans` is what most callers want."""


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of the sentences of `text`, in order: trimmed of surrounding whitespace,
    never empty, never across a line break. Pieces without a letter or digit ("...", "!!") are dropped."""
    out: list[tuple[int, int]] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if body.strip():
            for a, b in line_spans(body):
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


# ------------------------------------------------------------------------------------------------------- words

WORD = re.compile(r"[^\W_]+")
"""A word of a folded text: a run of letters and digits."""
ASCII_FOLD = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 or c == 1 else 32 for c in range(256)
)
"""`bytes.translate` table that makes `words` of ASCII bytes with one `split()`: letters lower-cased, digits
kept, the byte 0x01 kept (a caller's boundary mark), everything else a space."""
STOP_WORDS = frozenset(
    "a an the and or but if of to in on at for with by from as is are was were be been being it its this that "
    "these those i me my we our you your he him his she her they them their what which who whom whose do does "
    "did done have has had not no so too very just can will would should could about into than then there here "
    "when where why how all any both each more most other some such only own same also up down out over again "
    "s t m re ve ll d don doesn didn isn wasn am".split()
)
"""Function words a query's terms leave out ("s", "t", "m", "don": the pieces of "it's", "don't", "I'm")."""
STEM_MIN, STEM_MAX = 3, 64  # bytes; shorter and longer words are not stemmed (FTS5's porter passes them through)
_STEMS: dict[str, str] = {}  # folded word -> stem, shared by threads; cleared past _STEMS_MAX words
_STEMS_MAX = 200_000
_local = threading.local()  # one PyStemmer object per thread (they are not thread-safe)


@lru_cache(maxsize=65536)
def _fold_char(c: str) -> str:
    """A Latin letter with diacritics as its base letter ("é" -> "e"); any other character as it is."""
    base = unicodedata.normalize("NFD", c)[0]
    return base if base != c and base.isascii() and base.isalpha() else c


def fold(text: str) -> str:
    """`text` lower-cased, diacritics of Latin letters removed (FTS5 unicode61's `remove_diacritics=1`)."""
    text = text.lower()
    return text if text.isascii() else "".join(map(_fold_char, text))


def words(text: str) -> list[str]:
    """The words of `text` in order (module doc): runs of letters and digits of `fold(text)`. Folds word by word
    (a text with one curly quote would otherwise be folded character by character)."""
    low = text.lower()
    if low.isascii():
        return WORD.findall(low)
    return [w if w.isascii() else "".join(map(_fold_char, w)) for w in WORD.findall(low)]


def stem(word: str) -> str:
    """The term of a folded word (module doc): its Porter stem, or the word itself when shorter than 3 or longer
    than 64 bytes. Cached; safe from any thread."""
    term = _STEMS.get(word)
    if term is None:
        if not STEM_MIN <= len(word.encode()) <= STEM_MAX:
            term = word
        else:
            stemmer = getattr(_local, "stemmer", None)
            if stemmer is None:
                stemmer = _local.stemmer = Stemmer.Stemmer("porter")
            term = str(stemmer.stemWord(word))
        if len(_STEMS) >= _STEMS_MAX:
            _STEMS.clear()
        _STEMS[word] = term
    return term


def text_terms(text: str) -> list[str]:
    """The query words of `text` for full-text search: its `words`, each once, in order, stop words dropped
    (all kept when nothing else is left); [] for a text without a word. Unstemmed: the index stems them."""
    found = list(dict.fromkeys(words(text)))
    content = [w for w in found if w not in STOP_WORDS]
    return content or found


def terms(text: str) -> list[str]:
    """The terms of `text`, each once, in order: `text_terms` stemmed (what BM25 matches a query by)."""
    return list(dict.fromkeys(stem(w) for w in text_terms(text)))


@lru_cache(maxsize=8192)
def term_set(text: str) -> frozenset[str]:
    """Every term of `text`, stop words included. Cached: a chunk's sentences come back in later requests."""
    return frozenset(stem(w) for w in set(words(text)))
