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

**Sentences** (`sentence_spans`, `sentences`, `line_spans`) are split by syntok (`syntok` on PyPI, MIT, 24 kB of
pure Python, no model files): a rule-based segmenter that knows abbreviations and titles ("Dr. Smith", "e.g.",
"3 p.m."), keeps closing quotes with their sentence (`"Finding Freedom."`) and gives character offsets. It replaced
BlingFire (issue 33: 99 MB of tokenizer models Pyramind never used); compared on LoCoMo dev and BEAM in
bench/RESULTS.md ("Sentence splitter"). Every line break ends a sentence too (chat messages use lines for list
items and code). Sentences are split once, when a message is stored (services/chunking.split_message), and kept
with it: ids and chunk cuts never depend on a later version of the splitter.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache

import Stemmer
from syntok import segmenter

_MORE_ENDS = re.compile(r"(?:[\u3002\uff01\uff1f]+|(?<=[\u2600-\u27bf\U0001f300-\U0001faff])[.!?]+)\s*(?=\S)")
"""Sentence ends syntok does not read: a full-width end (。！？) and an end right after an emoji ("Love it 😅. See
you"), each with text after it."""


@lru_cache(maxsize=32768)
def _spans(line: str) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for paragraph in segmenter.analyze(line):
        for sentence in paragraph:
            tokens = [t for t in sentence if t.value]
            if tokens:
                a, b = tokens[0].offset, tokens[-1].offset + len(tokens[-1].value)
                for m in _MORE_ENDS.finditer(line, a, b):
                    out.append((a, m.end()))  # sentence_spans trims the space after it
                    a = m.end()
                out.append((a, b))
    return tuple(out)


def line_spans(line: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of the sentences of one line (no line break in it), as syntok gives them:
    pieces without a letter included. Cached (a chunk's lines come back in later requests).
    `sentence_spans` is what most callers want."""
    return list(_spans(line))


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


@lru_cache(maxsize=4096)
def terms_held(text: str) -> frozenset[str]:
    """The set of `terms(text)`. Cached: the block scores the same sentences against its query for every cut it
    tries, and a conversation's sentences come back in later requests."""
    return frozenset(terms(text))


@lru_cache(maxsize=8192)
def term_set(text: str) -> frozenset[str]:
    """Every term of `text`, stop words included. Cached: a chunk's sentences come back in later requests."""
    return frozenset(stem(w) for w in set(words(text)))
