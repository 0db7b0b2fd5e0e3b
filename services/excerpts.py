"""Excerpts: the sentences of a chunk closest to a query, each whole, in order, under a token budget.

Pure logic over strings (no storage, no model): the /context block uses it to hold more evidence per token.

**Units** (`segment`). A rendered text (services/chunking.render: `[stamp] speaker: first line`, later lines of a
message indented by CONTINUATION) is cut into units, each with its character span and the speaker of its message
(carried to the message's later lines). A unit is one of: a sentence of a prose paragraph (lines of one message
joined when the next starts in lower case); a list item (`- `, `* `, `+ `, `•`, `1.`, `1)`), a heading or a
table row, whole; one line of code (a line of a fenced block, or an indented line of 4+ spaces or a tab), whole,
with the fence lines as units of their own that go with the block. Cuts fall only on whitespace after a sentence
end or after a CJK full stop, so a speaker's prefix is never a unit, a line of code is never cut, and a character
(or an emoji sequence) is never split. A sentence does not end at an abbreviation (Dr., e.g., i.e., U.S., etc.
before a lower-case word; No. 5), an initial (J. K.), an ellipsis before a lower-case word, or a dot inside a
number, version or URL (no whitespace follows it). A text that starts inside a fenced block (an odd number of
fences before the first speaker line, the first one bare) is read as code up to that fence.

**Leading fragment** (`complete_start`). A chunk is a window of tokens, so its first line may start mid-line,
even mid-word or mid-character. Given the first message's rendered text, the fragment is completed: the head of
its sentence (or line) is put back, with the line's speaker. Without it, the partial first sentence is dropped.
Either way a text that continues a message carries its speaker: `Ann: … rest` or a header line `Ann: …`.

**Excerpt** (`excerpt`). Units are ranked by closeness to the query: the summed weights of the query's terms a
unit holds (its speaker's name counted with it), plus NUMBER_BONUS times the query's top weight when the unit
holds a number or date the query names (a message's date is its session's stamp), or a caller's own scores.
Then ties go to units nearer the best ones and then to earlier ones. The best are kept whole, in their original
order, while the rendered excerpt fits `budget_tokens` (cl100k, counted on the rendered text); a whole line of a
message's body close to nothing (when some unit is close) fills the room only with MIN_FILL_WORDS words or more,
or as code (a heading, a list number or a name alone says nothing). A text that fits is returned as it is.

**Elision.** One mark, ELISION (`…`, one cl100k token), stands where text was left out, once per gap:
`Ann: … sentence` (the head of a line left out), `sentence … sentence` (inside a line), `sentence …` (the rest
of a line), a line `…` (whole lines; indented by CONTINUATION inside one message), or a header line `Ann: …`
before a kept later line of a message whose first line was left out (so the speaker is always shown).

**Dedup.** `fingerprint(unit)` is the speaker and the unit's text with whitespace folded (case kept); a unit
whose fingerprint is in the caller's `seen` set (the units already shown in the block, e.g. the 20-token overlap
of the previous chunk, or a recent turn's sentences) is left out like any other (`excerpt(..., seen=...)` or
`remove_seen`).

**Speed**, measured once by hand (speed targets live in bench/, not in tests) on the shared 2-core development
machine at load 4: 40 LoCoMo chunks (176 tokens on average) each completed from its first message and excerpted
to 60 tokens, with `term_weights` over the 40 and a growing `seen`, median of 60 requests: 0.41 ms per chunk
cold (per-text caches empty), 0.27 ms warm; a request of 40 takes 18.7 ms of CPU cold (p95 23), 11.6 ms warm
(p95 17). So excerpt the chunks a section admits (about 10 at 60 tokens in a 600-token section), not every
candidate. The unit choice renders each trial and counts it line by line with cached counts (exactly near the
budget): costing units additively instead left 15% of the budget unused, and topping it up exactly was slower.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
import unicodedata
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import Stemmer

from services.chunking import CONTINUATION
from services.terms import STOP_WORDS
from services.tokens import count_tokens

ELISION = "…"
_MARK = ELISION + " "
NUMBER_BONUS = 0.5  # a unit holding a number or date the query names: + this times the query's largest weight
MIN_FILL_WORDS = 4  # a body line close to nothing is kept only with this many words (see `excerpt`)
BROKEN = "\ufffd"  # what tokens.decode makes of a character cut between two tokens

Kind = Literal["sentence", "item", "code", "fence", "line"]


@dataclass(slots=True)
class Unit:
    """One unit of a text: `text == source[start:end]` (character offsets into the segmented text). Read-only
    by convention (not frozen: a frozen dataclass costs 2.9 µs per unit to build, a sixth of an excerpt).

    speaker: of its message (None in a document or a headless fragment); prefix: its message's speaker prefix
    (`[stamp] speaker: `, "" without one); turn: its message's number in the text; line, end_line: the lines it
    starts and ends on; lead: what precedes the content of its first line (the prefix on a speaker line, the
    indentation on another); line_start / line_end: whether it begins / ends its line's content; block: the
    fenced block it belongs to (code and fence units), else None.
    """

    index: int
    start: int
    end: int
    text: str
    kind: Kind
    speaker: str | None
    prefix: str
    turn: int
    line: int
    end_line: int
    lead: str
    on_speaker_line: bool
    line_start: bool
    line_end: bool
    block: int | None


Scores = Sequence[float] | Callable[[Unit], float]
"""A caller's closeness per unit: a list aligned with the units, or a function of a unit; higher is closer."""


# a speaker line (chunking.render): a name never starts with whitespace and holds no colon, bracket or line break;
# render always writes ": " after it, even before an empty message, so a line ending in a bare colon is no speaker's
_SPEAKER = re.compile(r"(\[[^\]\n]{1,40}\] )?([^\s:\[\]][^:\n\[\]]{0,127}): ")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_ITEM = re.compile(r"\s*(?:[-*+•]|\d{1,3}[.)])\s+\S")
_WHOLE_LINE = re.compile(r"\s*(?:#{1,6}\s|\||>\s*$|[-*_]{3,}\s*$)")
_CODE_INDENT = re.compile(r"(?: {4}|\t)")
# a sentence end: Latin punctuation before whitespace, or a CJK full stop (no space needed), with closing quotes
_END = re.compile(r"[.!?…]+[\"'”’)\]»]*(?=\s)|[。！？]+[\"'”’」』)\]]*")
_SOFT_END = tuple(".!?:;…。！？")
_DOTTED = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc inc ltd co corp dept approx mt ave blvd rd gen col capt lt sgt gov sen rep "
    "rev hon jan feb mar apr jun jul aug sep sept oct nov dec fig eq ca al cf viz ph.d e.g i.e a.k.a".split()
)
_BEFORE_NUMBER = frozenset("no nos vol vols p pp ch art sec ver v".split())  # abbreviations only before a number
_NEVER_END = frozenset("e.g i.e cf viz a.k.a".split())


def _is_end(text: str, m: re.Match[str], stop: int) -> bool:
    """Whether the punctuation `m` ends a sentence (whitespace then more text follows it before `stop`)."""
    punct = m.group().rstrip("\"'”’)]»」』")
    if punct[-1] in "。！？":
        return True
    nxt = text[m.end() : min(stop, m.end() + 40)].lstrip()[:2]
    if not nxt:
        return False
    if "!" in punct or "?" in punct or nxt[0] == ELISION:  # (an excerpt's mark follows a whole sentence)
        return True
    if len(punct) > 1 or punct == "…":  # an ellipsis ends a sentence only before a capital
        return nxt[0].isupper()
    before = text[max(0, m.start() - 40) : m.start()].rsplit(None, 1)
    word = before[-1].lstrip("([\"'“‘") if before else ""
    low = word.lower()
    if low in _NEVER_END:
        return False
    if low in _ABBREVIATIONS:
        return low == "etc" and nxt[0].isupper()
    if low in _BEFORE_NUMBER:
        return not nxt[0].isdigit()
    if len(word) == 1 and word.isupper():  # an initial
        return False
    if _DOTTED.fullmatch(word):  # U.S. (never), a.m. (before a capital)
        return word.islower() and nxt[0].isupper()
    return True


def _lines(text: str) -> list[tuple[int, int]]:
    out, pos = [], 0
    for ln in text.split("\n"):
        out.append((pos, pos + len(ln)))
        pos += len(ln) + 1
    return out


def _starts_in_fence(
    text: str, lines: list[tuple[int, int]], conversation: bool, speakers: Collection[str] | None
) -> str | None:
    """The fence marker when the text starts inside a fenced block: the lines that continue a message begun
    before the text (up to the first speaker line, after a header line `Ann: …`) hold an odd number of fences,
    the first of them bare (an opening fence usually names its language)."""
    first = 0
    if conversation and lines:
        m = _speaker(text[lines[0][0] : lines[0][1]], speakers)
        if m is not None:
            if text[lines[0][0] + m.end() : lines[0][1]].strip() != ELISION:
                return None  # a whole first message: no block is open before it
            first = 1
    fences: list[str] = []
    for a, b in lines[first:]:
        line = text[a:b]
        if conversation and _speaker(line, speakers):
            break
        content = line[len(CONTINUATION) :] if conversation and line.startswith(CONTINUATION) else line
        if _FENCE.match(content):
            fences.append(content.strip())
    if len(fences) % 2 == 1 and fences[0].strip(fences[0][0]) == "":
        return fences[0][:3]
    return None


def _speaker(line: str, speakers: Collection[str] | None) -> re.Match[str] | None:
    if line[:1].isspace():
        return None
    m = _SPEAKER.match(line)
    if m is None or (speakers is not None and m.group(2) not in speakers):
        return None
    return m


def segment(text: str, *, first_speaker: str | None = None, speakers: Collection[str] | None = None) -> list[Unit]:
    """The units of `text` in order (module doc), spans in characters of `text`; never raises.

    first_speaker: the speaker of lines before the first speaker line (a chunk that starts inside a message:
    `node.speakers[0]`). speakers: the names that make a speaker line; None: any name (a conversation's rendered
    text); empty: none (a document's text, whose lines are never speaker lines nor indented continuations).
    Elision marks (an excerpt's own output) belong to no unit, so an excerpt segments into the units it shows.
    """
    return _segment(text, first_speaker, speakers, partial_first=False)


def _segment(text: str, first_speaker: str | None, speakers: Collection[str] | None, partial_first: bool) -> list[Unit]:  # noqa: C901 (one branch per kind of line: speaker, code, list, quote)
    """`segment`; with `partial_first`, the first line is the tail of a line, never a speaker line."""
    conversation = speakers is None or len(speakers) > 0
    lines = _lines(text)
    units: list[Unit] = []
    first_speaker = first_speaker if conversation else None  # a document has no speakers
    speaker, prefix, turn = first_speaker, (f"{first_speaker}: " if first_speaker else ""), 0
    fence0 = _starts_in_fence(text, lines, conversation, speakers)
    fence, block = fence0, (0 if fence0 else -1)
    para: list[tuple[int, int, int, str]] = []  # prose lines of the open paragraph: (line, start, end, lead)

    def add(  # noqa: PLR0913 (a unit's fields, named at each call)
        kind: Kind, a: int, b: int, ln: int, end_ln: int, lead: str, on_speaker: bool, first: bool, last: bool
    ) -> None:
        in_block = kind == "fence" or (kind == "code" and fence is not None)  # not an indented code line
        units.append(
            Unit(
                len(units),
                a,
                b,
                text[a:b],
                kind,
                speaker,
                prefix,
                turn,
                ln,
                end_ln,
                lead,
                on_speaker,
                first,
                last,
                block if in_block else None,
            )
        )

    def flush() -> None:
        if not para:
            return
        p0, p1 = para[0][1], para[-1][2]
        starts = [p[1] for p in para]
        s = p0
        cuts = [m.end() for m in _END.finditer(text, p0, p1) if _is_end(text, m, p1)]
        for e in cuts + [p1]:
            if text.startswith(_MARK, s):  # a gap mark " … " between two sentences of an excerpt
                s += len(_MARK)
            if e <= s or text[s:e] == ELISION:  # nothing, or the mark of a line's left-out rest
                s = e
                while s < p1 and text[s].isspace():
                    s += 1
                continue
            a = s
            ln = b_ln = 0
            if len(para) > 1:  # the lines the sentence starts and ends on
                ln = bisect.bisect_right(starts, a) - 1
                b_ln = bisect.bisect_left(starts, e) - 1
            add(
                "sentence",
                a,
                e,
                para[ln][0],
                para[b_ln][0],
                para[ln][3],
                para[ln][0] == speaker_line,
                a == para[ln][1],
                e == para[b_ln][2],
            )
            s = e
            while s < p1 and text[s].isspace():
                s += 1
        para.clear()

    speaker_line = -1
    for ln, (ls, le) in enumerate(lines):
        line = text[ls:le]
        m = _speaker(line, speakers) if conversation and not (partial_first and ln == 0) else None
        if m is not None:
            flush()
            turn += 1
            speaker, prefix, speaker_line = m.group(2), f"{m.group(1) or ''}{m.group(2)}: ", ln
            fence = fence0 if ln == 0 else None  # a new message never continues a block (a header line may)
            cs = ls + m.end()
        elif conversation and line.startswith(CONTINUATION):
            cs = ls + len(CONTINUATION)
        else:
            cs = ls
        end = ls + len(line.rstrip())
        body = text[cs:end]
        first = cs + len(body) - len(body.lstrip())
        if text.startswith(ELISION, first) and (first + 1 == end or text[first + 1] == " "):
            first += len(_MARK) if first + 1 < end else 1  # "Ann: … rest", "  … rest", "…": the mark is lead
            if fence is None and first < end:
                cs, body = first, text[first:end]
        on_speaker = ln == speaker_line
        if first >= end:
            flush()
            continue
        if fence is not None:  # inside a fenced block: whole lines only
            flush()
            closing = body.strip().startswith(fence) and body.strip().strip(fence[0]) == ""
            add("fence" if closing else "code", cs, end, ln, ln, text[ls:cs], on_speaker, True, True)
            fence = None if closing else fence
            continue
        fm = _FENCE.match(body)
        if fm:
            flush()
            block += 1
            fence = fm.group(1)[:3]
            add("fence", first, end, ln, ln, text[ls:first], on_speaker, True, True)
            continue
        if _ITEM.match(body) or _WHOLE_LINE.match(body):
            flush()
            add("item" if _ITEM.match(body) else "line", first, end, ln, ln, text[ls:first], on_speaker, True, True)
            continue
        if _CODE_INDENT.match(body):
            flush()
            add("code", cs, end, ln, ln, text[ls:cs], on_speaker, True, True)
            continue
        if para and not (text[first].islower() and text[para[-1][2] - 1] not in _SOFT_END):
            flush()  # a new line that does not continue the sentence: a paragraph of its own
        para.append((ln, first, end, text[ls:first]))
    flush()
    return units


# ---------------------------------------------------------------------------------------------------- fragments


def _locate(text: str, message: str) -> int | None:
    """Offset in `message` where `text` starts (text continues past the message's end, or ends inside it)."""
    probe = text[:64]
    k = message.find(probe)
    while k >= 0:
        n = min(len(message) - k, len(text))
        if message[k : k + n] == text[:n]:
            return k
        k = message.find(probe, k + 1)
    for n in range(min(len(message), len(probe)) - 1, 0, -1):  # the text starts in the message's last n chars
        if message.endswith(text[:n]):
            return len(message) - n
    return None


def _restart(text: str, units: list[Unit], i: int, header: str) -> str:
    """`text` from unit i on: its line's lead put back, a mark where the head of the line is left out, and the
    speaker (`header`, "Ann: ") when unit i continues a message whose speaker line is not in the text."""
    u = units[i]
    mark = "" if u.line_start or u.lead.endswith(ELISION + " ") else f"{ELISION} "
    if u.on_speaker_line:
        return u.lead + mark + text[u.start :]
    if u.line == 0 and header:  # the rest of the partial first line, a speaker line or not: "Ann: … rest"
        return f"{header}{ELISION} " + text[u.start :]
    head = f"{header}{ELISION}\n" if header else ""
    return head + u.lead + mark + text[u.start :]


def complete_start(
    chunk_text: str,
    message: str | None = None,
    *,
    first_speaker: str | None = None,
    speakers: Collection[str] | None = None,
    partial: bool | None = None,
    mode: Literal["sentence", "line"] = "sentence",
) -> str:
    """A chunk's text with no partial first line: completed from its first message, else its fragment dropped.

    chunk_text: an L1 chunk's text (a token window of rendered messages). message: the rendered text
    (services/chunking.render) of the chunk's first message (`message_ids[0]`), or None. mode: complete the
    first sentence of the partial line (`Ann: … head of the sentence|rest`) or the whole line (`[stamp] Ann:
    ...|rest`); code, list and table lines are always completed whole. Without the message (or when the text is
    not found in it) the partial first sentence is dropped (the whole first line when it holds no second unit).
    partial: whether the chunk starts inside a line, when the caller knows it (a chunk whose `tok_start` is its
    first message's `tok_offset` does not); None: read it from the message, else guess it from the first line
    (a speaker line or an indented continuation is whole; a document's line is whole when it starts with a
    capital, a digit or a list mark). A first line that continues a message is given its speaker (`Ann: …`
    header) when the message or `first_speaker` says it. Characters broken by the token cut (U+FFFD) at either
    end are removed. Returns "" when nothing whole is left. Never raises.
    """
    text = chunk_text.lstrip(BROKEN).rstrip(BROKEN)
    broken = len(text) != len(chunk_text.rstrip(BROKEN))
    if text.startswith("\n"):  # the window starts at a line break: the next line is whole
        text, broken = text.lstrip("\n"), False
    conversation = speakers is None or len(speakers) > 0
    if message is not None and (k := _locate(text, message)) is not None:
        line_end = message.find("\n", k)
        mu = segment(message if line_end < 0 else message[:line_end], speakers=speakers)  # what precedes k matters
        head_prefix = mu[0].prefix if mu else ""
        ls = message.rfind("\n", 0, k) + 1
        if (partial is False or k == ls) and not broken:
            on_first_line = ls == 0
            return text if on_first_line or not head_prefix else f"{head_prefix}{ELISION}\n{text}"
        # the unit holding position k (or the next one when k falls between units)
        u = next((x for x in mu if x.end > k), None)
        if u is None:
            return ""
        skip = max(0, u.start - k)
        rest = text[skip:]
        whole = mode == "line" or u.kind != "sentence" or u.line_start
        if whole:  # from the start of k's line (mode "line") or of its unit's first line
            start = message.rfind("\n", 0, k if skip == 0 and mode == "line" else u.start) + 1
            head = message[start : k if skip == 0 else u.start]
            hdr = "" if start == 0 or not head_prefix else f"{head_prefix}{ELISION}\n"
            return hdr + head + rest
        lead = u.lead if u.lead.endswith(ELISION + " ") else f"{u.lead}{ELISION} "
        hdr = "" if u.on_speaker_line or not head_prefix else f"{head_prefix}{ELISION}\n"
        return hdr + lead + message[u.start : max(k, u.start)] + rest
    first_line = text.split("\n", 1)[0]
    if partial is None:
        if conversation:
            partial = not (
                _speaker(first_line, speakers) or first_line.startswith(CONTINUATION) or not first_line.strip()
            )
        else:
            partial = not (
                first_line[:1].isupper()
                or first_line[:1].isdigit()
                or _ITEM.match(first_line)
                or not first_line.strip()
            )
    header = f"{first_speaker}: " if first_speaker and conversation else ""
    units = _segment(text, first_speaker, speakers, partial_first=bool(partial or broken))
    if not (partial or broken):
        if units and header and not units[0].on_speaker_line and units[0].turn == 0:
            return f"{header}{ELISION}\n{text}"  # whole lines that continue a message: say whose
        return text
    # drop the unit the text starts inside (a sentence: up to its end; any other unit: its whole line)
    if not units:
        return ""
    u0 = units[0]
    if u0.kind == "sentence":
        nxt = units[1] if len(units) > 1 else None
    else:
        nxt = next((x for x in units if x.line > u0.end_line), None)
    if nxt is None:
        return ""
    return _restart(text, units, nxt.index, header if nxt.turn == 0 else "")


# -------------------------------------------------------------------------------------------------- closeness

_WORD = re.compile(r"[^\W_]+")
_STEM_MIN, _STEM_MAX = 3, 64  # bytes; shorter and longer words are not stemmed (datastore/indexes/text.py)
_STEMS: dict[str, str] = {}  # folded word -> stem, shared by threads; cleared past _STEMS_MAX words
_STEMS_MAX = 200_000
_local = threading.local()  # one PyStemmer object per thread


def _stem(word: str) -> str:
    """Porter stem of a folded word, as the text index analyses it; one PyStemmer object per thread (they are
    not thread-safe)."""
    stem = _STEMS.get(word)
    if stem is None:
        if not _STEM_MIN <= len(word.encode()) <= _STEM_MAX:
            stem = word
        else:
            stemmer = getattr(_local, "stemmer", None)
            if stemmer is None:
                stemmer = _local.stemmer = Stemmer.Stemmer("porter")
            stem = str(stemmer.stemWord(word))
        if len(_STEMS) >= _STEMS_MAX:
            _STEMS.clear()
        _STEMS[word] = stem
    return stem


@lru_cache(maxsize=65536)
def _fold_char(c: str) -> str:
    base = unicodedata.normalize("NFD", c)[0]
    return base if base != c and base.isascii() and base.isalpha() else c


def _fold(text: str) -> str:
    low = text.lower()
    return low if low.isascii() else "".join(map(_fold_char, low))


def terms(text: str) -> list[str]:
    """The text's terms, each once, in order: runs of letters and digits, lower-cased, Latin diacritics removed,
    stop words dropped (all kept when nothing else is left), Porter-stemmed (the text index's analysis)."""
    words = list(dict.fromkeys(_WORD.findall(_fold(text))))
    content = [w for w in words if w not in STOP_WORDS] or words
    return list(dict.fromkeys(_stem(w) for w in content))


@lru_cache(maxsize=8192)
def _stem_set(text: str) -> frozenset[str]:
    """Every term of `text`, stop words included (a query of stop words only looks for them). Folds word by
    word: a text with one curly quote would otherwise be folded character by character. Cached: a chunk's
    sentences come back in later requests."""
    return frozenset(_stem(w if w.isascii() else _fold(w)) for w in set(_WORD.findall(text.lower())))


def term_weights(texts: Iterable[str]) -> dict[str, float]:
    """IDF-like weights over `texts` (e.g. the candidate chunks of one request): term -> ln(1 + N / df), where
    N is the number of texts and df the number holding the term. Keys are `terms()` terms."""
    df: dict[str, int] = {}
    n = 0
    for t in texts:
        n += 1
        for term in _stem_set(t):
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
    speakers = {sp: _stem_set(sp) for sp in {u.speaker for u in units} if sp}
    sets = [_stem_set(u.text) | speakers[u.speaker] if u.speaker else _stem_set(u.text) for u in units]
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


# ----------------------------------------------------------------------------------------------------- excerpt


@dataclass(frozen=True)
class Excerpt:
    """What `excerpt` returns. text: what to show (at most the budget's tokens); source: the text the units'
    spans index (the input, after the leading-fragment rule when asked); units: every unit of source; kept: the
    indexes of the units shown, in order; tokens: count_tokens(text)."""

    text: str
    source: str
    units: tuple[Unit, ...]
    kept: tuple[int, ...]
    tokens: int

    @property
    def whole(self) -> bool:
        """Nothing was left out: text is source."""
        return self.text == self.source

    @property
    def spans(self) -> list[tuple[int, int]]:
        """(start, end) character spans in source of the units shown, in order."""
        return [(self.units[i].start, self.units[i].end) for i in self.kept]

    def fingerprints(self) -> set[str]:
        """Fingerprints of the units shown (add them to the `seen` of the next excerpt of the same block)."""
        return {fingerprint(self.units[i]) for i in self.kept}


def _render(source: str, units: Sequence[Unit], kept: Sequence[int]) -> str:
    """The kept units (indexes, ascending) with the elision marks of the module doc."""
    out: list[str] = []
    prev: Unit | None = None
    for i in kept:
        u = units[i]
        if prev is not None and i == prev.index + 1:
            out += [source[prev.end : u.start], u.text]  # neighbours: what lies between them, verbatim
        elif prev is None and i == 0:
            if u.prefix and u.turn == 0:  # headless text whose speaker the caller gave: say it
                out.append(f"{u.prefix}{ELISION}\n")
            out += [source[: u.start].lstrip("\n"), u.text]
        elif prev is not None and u.line == prev.end_line:
            out += [f" {ELISION} ", u.text]
        else:
            header = bool(u.prefix) and not u.on_speaker_line and (prev is None or prev.turn != u.turn)
            if prev is not None and not prev.line_end and not header and u.line_start:
                out.append(f" {ELISION}")  # the rest of the previous line is the gap
                marked = True
            else:
                marked = header or not u.line_start
            if prev is not None:
                out.append("\n")
            if header:
                out.append(f"{u.prefix}{ELISION}\n")
            if not marked:
                same = prev is not None and prev.turn == u.turn and bool(u.prefix) and not u.on_speaker_line
                out.append(f"{CONTINUATION if same else ''}{ELISION}\n")
            lead = u.lead
            if not u.line_start and not lead.endswith(ELISION + " "):
                lead += f"{ELISION} "
            out += [lead, u.text]
        prev = u
    if prev is not None and prev.index < len(units) - 1:
        nxt = units[prev.index + 1]
        if nxt.line == prev.end_line:
            out.append(f" {ELISION}")
        else:
            same = nxt.turn == prev.turn and bool(nxt.prefix)
            out.append(f"\n{CONTINUATION if same else ''}{ELISION}")
    return "".join(out)


@lru_cache(maxsize=16384)
def _tokens(piece: str) -> int:
    return count_tokens(piece)


def _estimate(text: str) -> int:
    """Tokens of `text` counted line by line (cached) plus one per line break: at most one token per line break
    above the exact count in practice (the tokenizer merges a break with punctuation before it)."""
    return sum(_tokens(line) for line in text.split("\n")) + text.count("\n")


def _distances(best: list[bool]) -> list[int]:
    """Per position, how far the nearest True is (0 everywhere when there is none)."""
    n = len(best)
    if not any(best):
        return [0] * n
    out = [n] * n
    last = -n
    for i in range(n):
        last = i if best[i] else last
        out[i] = i - last
    last = 2 * n
    for i in range(n - 1, -1, -1):
        last = i if best[i] else last
        out[i] = min(out[i], last - i)
    return out


def _bare_line(u: Unit) -> bool:
    """Whether the unit is a whole line of a message's body (not its speaker's line, not code) of fewer than
    MIN_FILL_WORDS words."""
    return (
        u.line_start
        and u.line_end
        and not u.on_speaker_line
        and u.kind != "code"
        and len(_WORD.findall(u.text)) < MIN_FILL_WORDS
    )


def excerpt(  # noqa: PLR0913 (the budget and the reader's context, each named at the call)
    text: str,
    query: str | None,
    budget_tokens: int,
    *,
    weights: Mapping[str, float] | None = None,
    scores: Scores | None = None,
    seen: Collection[str] = frozenset(),
    chunk: bool = False,
    message: str | None = None,
    first_speaker: str | None = None,
    speakers: Collection[str] | None = None,
) -> Excerpt:
    """The units of `text` closest to `query` that fit `budget_tokens` cl100k tokens, whole, in order.

    text: a rendered chunk, message or document. query: the request's query (None or "": the text's head is
    kept). budget_tokens: the most tokens `Excerpt.text` may count (0 gives ""). weights: term -> weight
    (`term_weights` over the request's candidates; default: IDF over this text's units). scores: a
    caller's closeness per unit instead (a list aligned with `segment(source)`, or a function of a Unit);
    higher is closer. seen: fingerprints already shown elsewhere in the block: those units are left out. chunk:
    apply `complete_start(text, message, first_speaker=..., speakers=...)` first. first_speaker, speakers: as
    in `segment`. A text that fits (and holds nothing seen) comes back as it is. Raises ValueError for a
    negative budget or a `scores` list of the wrong length.
    """
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    source = complete_start(text, message, first_speaker=first_speaker, speakers=speakers) if chunk else text
    units = segment(source, first_speaker=first_speaker, speakers=speakers)
    if scores is not None and not callable(scores) and len(scores) != len(units):
        raise ValueError(f"scores has {len(scores)} values for {len(units)} units")
    dropped = {u.index for u in units if fingerprint(u) in seen} if seen else set()
    # cl100k never merges across a space, so a text of more words than the budget cannot fit: no need to count
    if not dropped and len(source.split()) <= budget_tokens:
        n = count_tokens(source)
        if n <= budget_tokens:
            return Excerpt(source, source, tuple(units), tuple(u.index for u in units), n)
    if scores is None:
        closeness = _lexical(units, query or "", weights)
    elif callable(scores):
        closeness = [float(scores(u)) for u in units]
    else:
        closeness = [float(s) for s in scores]
    fences: dict[int, list[int]] = {}
    for u in units:
        if u.kind == "fence" and u.block is not None:
            fences.setdefault(u.block, []).append(u.index)
    top = max((closeness[u.index] for u in units if u.index not in dropped), default=0.0)
    distance = _distances([top > 0 and c == top and i not in dropped for i, c in enumerate(closeness)])
    # around the closest units, a line of a message's body close to nothing fills the budget only when it says
    # something: a list number, a heading or a name alone ("2.", "### Conclusion") costs its tokens and an
    # elision mark (a sentence of a line, a speaker's first line and code are never left out for it)
    order = sorted(
        (
            u.index
            for u in units
            if u.index not in dropped
            and u.kind != "fence"
            and (top <= 0 or closeness[u.index] > 0 or not _bare_line(u))
        ),
        key=lambda i: (-closeness[i], distance[i], i),
    )
    kept: set[int] = set()
    floor = 0  # a lower bound of the tokens of what is kept
    for i in order:
        u = units[i]
        if floor + _tokens(u.text) - 3 > budget_tokens:  # cannot fit (it may replace a mark line, no more)
            continue
        trial = kept | {i} | set(fences.get(u.block, []) if u.block is not None else [])
        trial -= dropped
        rendered = _render(source, units, sorted(trial))
        est = _estimate(rendered)
        # the estimate counts each line break apart, which the tokenizer often merges: count exactly when close
        low = est - rendered.count("\n")
        if est <= budget_tokens or (low <= budget_tokens and count_tokens(rendered) <= budget_tokens):
            kept, floor = trial, low
    ranked = {i: r for r, i in enumerate(order)}
    while True:
        shown = sorted(kept)
        out = _render(source, units, shown)
        n = count_tokens(out)
        if n <= budget_tokens:
            return Excerpt(out, source, tuple(units), tuple(shown), n)
        # the estimate was short by a token or two: drop the least close unit (with its fences when it was the
        # block's last code line)
        worst = max((i for i in kept if i in ranked), key=lambda i: ranked[i])
        kept.discard(worst)
        blk = units[worst].block
        if blk is not None and not any(units[j].block == blk and units[j].kind == "code" for j in kept):
            kept -= set(fences.get(blk, []))


def inline_elisions(text: str) -> str:
    """`text` with no line that is only ELISION (whole lines left out): such a line is written at the end of the
    line before it (` …`, once), or dropped at the head of the text."""
    out: list[str] = []
    for line in text.split("\n"):
        if line.strip() == ELISION:
            if out and not out[-1].rstrip().endswith(ELISION):
                out[-1] = out[-1].rstrip() + " " + ELISION
            continue
        out.append(line)
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------------ dedup


def normalise_line(text: str) -> str:
    """`text` with every run of whitespace (line breaks and indentation included) folded to one space, trimmed;
    case and punctuation kept."""
    return " ".join(text.split())


def fingerprint(unit: Unit) -> str:
    """A unit's identity across texts: `speaker \\x1f normalised text` (speaker "" when unknown). Equal for the
    same sentence of the same speaker whether it comes from a chunk, its overlapping neighbour or a recent
    turn rendered on one line."""
    return f"{unit.speaker or ''}\x1f{normalise_line(unit.text)}"


def fingerprints(
    text: str | Iterable[Unit], *, first_speaker: str | None = None, speakers: Collection[str] | None = None
) -> set[str]:
    """The fingerprints of a text's units (segmented as `segment` does) or of the given units."""
    units = segment(text, first_speaker=first_speaker, speakers=speakers) if isinstance(text, str) else text
    return {fingerprint(u) for u in units}


def remove_seen(units: Iterable[Unit], seen: Collection[str]) -> list[Unit]:
    """The units whose fingerprint is not in `seen`, in order. To show each sentence once in a block, keep one
    `seen` set per block, pass it to each `excerpt` (or filter with this), and add `Excerpt.fingerprints()`
    of what was shown. Exact matches only: a sentence cut short at a chunk's end differs from the whole one."""
    return [u for u in units if fingerprint(u) not in seen]
