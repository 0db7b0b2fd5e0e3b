"""Lines: what a message says, in one or two of its own sentences (its informative lead, and for a long message
the sentence that states its point). Pure logic over strings; datastore/write/build.py makes the line nodes.

**Sentences** (`sentences`). A line picks the message's own sentences, as split once when it was stored
(`StoredMessage.sentences`, services/chunking.split_message); only prose sentences and list items count: a
sentence that starts on a line of code (inside a fenced block, a fence, or indented 4+ spaces or a tab), a
heading, a table row, a quote mark alone or a rule is no one's lead.

**Filler**: services/filler.py (`is_filler`), the rule the summaries share.

**Lead** (`lead_lines`). The first sentence that is not filler, cut to MAX_LINE_TOKENS (at a word, with "…").
A message of only filler has no line. In a short message (LONG_MESSAGE_TOKENS tokens at most, a turn of a chat)
a lead shorter than SHORT_LEAD_TOKENS takes the later sentences that are not filler until the line is that long
("Preikestolen at sunrise. Next month I am going skiing in Chamonix.": the plan is not lost).
A long message (more than LONG_MESSAGE_TOKENS tokens, typically an assistant's answer) adds its point: among
its later sentences, the one that shares the most content words with the rest of the message (its centre; per
square root of its own content words, so a long list item does not win by length), counted double when it
opens with a conclusion marker ("In short", "Overall", "I recommend", "The key ..."; POINT_MARKERS); none
when no later sentence shares a word.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Collection, Sequence

from models.memory import Sentence
from services.chunking import split_message
from services.filler import content_words, is_filler
from services.tokens import count_tokens, decode, encode

MAX_LINE_TOKENS = 60
"""A lead or point sentence longer than this (cl100k tokens) is cut at a word and ends with "…"."""
LONG_MESSAGE_TOKENS = 80
"""A message longer than this (cl100k tokens) adds the sentence that states its point to its lead."""
SHORT_LEAD_TOKENS = 12
"""A short message's lead shorter than this (cl100k tokens: "Preikestolen at sunrise." is 7) takes the message's
next sentences that are not filler until the line is this long; a longer lead says enough (a dated list has
room for more lines). BEAM @1000, dev 11-20 / held-out 1-10 (bench/RESULTS.md "BEAM: the held-out chats"):
every short message's line holding all of it cost dev event_ordering 0.453 -> 0.393; 16 cost preference_following
0.717 -> 0.667; 12 gives overall 0.688 -> 0.691 / 0.637 -> 0.640."""
WHOLE_LINE_TOKENS = 100
"""A lead cut inside its sentence (MAX_LINE_TOKENS: what is embedded) is shown as its whole sentence when that is at
most this long (`whole_line`): a model reads whole sentences (BEAM 11-20 @1000: 0.703 -> 0.721 when the timeline
showed them, bench/RESULTS.md "stop8-notes"; 80 and 150 measured the same within 0.002)."""
SEPARATOR = " … "
"""Between the lead and the point of a long message in a line's text."""

POINT_MARKERS = re.compile(
    r"^(in short|in summary|to summari[sz]e|to sum up|overall|in conclusion|the (key|main|bottom line|short answer|"
    r"best)\b|bottom line|so,|therefore|thus|i (would |'d )?recommend|i (would |'d )?suggest|my recommendation|"
    r"the answer is|the point is|you should|the most important)",
    re.IGNORECASE,
)

_MARKUP = re.compile(r"\*\*|__|`|^#{1,6}\s+|^(?:[-*+•]|\d{1,3}[.)])\s+")
_FENCE = re.compile(r" {0,3}(?:`{3,}|~{3,})")
_ITEM = re.compile(r"\s*(?:[-*+•]|\d{1,3}[.)])\s+\S")
_ENDED = re.compile(r"[.!?…]\W*$")
_NOT_PROSE = re.compile(r"\s*(?:#{1,6}\s|\||>\s*$|[-*_]{3,}\s*$)|(?: {4}|\t)")


def _prose_lines(content: str) -> list[tuple[int, bool, bool]]:
    """(start offset, whether it is prose or a list item, whether it is a list item) of each line of `content`:
    prose is not a fence, not inside a fenced block, not a heading, table row, bare quote mark, rule or indented
    code line."""
    out: list[tuple[int, bool, bool]] = []
    fence: str | None = None
    at = 0
    for line in content.split("\n"):
        body = line.strip()
        if fence is not None:
            out.append((at, False, False))
            if body.startswith(fence) and body.strip(fence[0]) == "":
                fence = None
        elif _FENCE.match(line):
            fence = body[:3]
            out.append((at, False, False))
        else:
            item = bool(_ITEM.match(line))
            out.append((at, item or not _NOT_PROSE.match(line), item))
        at += len(line) + 1
    return out


def sentences(content: str, spans: Sequence[Sentence] = ()) -> list[str]:
    """The prose sentences and list items of a message's content, in order, whitespace folded and markdown marks
    dropped (`**`, `__`, backticks, a heading's `#`, a list item's bullet or number); [] for a text without one.
    spans: the message's stored sentences (`StoredMessage.sentences`; the pieces of a sentence over
    MAX_SENTENCE_TOKENS count as one, and so do the sentences of one list item: an item is said whole); split
    here (services/chunking.split_message, as the store does) when not given."""
    return [text for text, _ in _said(content, spans)]


def _said(content: str, spans: Sequence[Sentence]) -> list[tuple[str, list[int]]]:
    """`sentences`, each with the indexes of the stored sentences it is made of."""
    lines = _prose_lines(content)
    starts = [a for a, _, _ in lines]
    whole: list[tuple[int, int, list[int]]] = []
    previous: Sentence | None = None
    for k, s in enumerate(spans or split_message(content)):
        line = bisect.bisect_right(starts, s.start) - 1
        same_item = bool(whole) and lines[line][2] and bisect.bisect_right(starts, whole[-1][0]) - 1 == line
        piece = s.cut and previous is not None and previous.cut and not _ENDED.search(content, 0, previous.end)
        if piece or same_item:
            whole[-1] = (whole[-1][0], s.end, [*whole[-1][2], k])  # pieces of one long sentence, or of one item
        else:
            whole.append((s.start, s.end, [k]))
        previous = s
    out = []
    for a, b, ks in whole:
        if b > a and lines[bisect.bisect_right(starts, a) - 1][1]:
            said = content[a:b].split("\n", 1)[0]  # a letterless tail on the next lines ("---") is no one's
            text = " ".join(_MARKUP.sub("", " ".join(said.split())).split())
            if text:
                out.append((text, ks))
    return out


def whole_line(text: str, content: str, spans: Sequence[Sentence], max_tokens: int = WHOLE_LINE_TOKENS) -> str:
    """What a line shows of its message: when its `text` is a lead cut inside its sentence (it ends with "…" and is
    no lead and point), the message's `content` from the first of the line's sentences (`spans`) to the last, its
    white space folded, if that is at most `max_tokens` cl100k tokens; else `text`."""
    if not spans or not text.endswith("…") or SEPARATOR in text:
        return text
    whole = " ".join(content[spans[0].start : spans[-1].end].split())
    return whole if whole and count_tokens(whole) <= max_tokens else text


def _cut(sentence: str, max_tokens: int) -> str:
    """`sentence`, or its head of at most `max_tokens` tokens cut at a word, ending with "…"."""
    ids = encode(sentence)
    if len(ids) <= max_tokens:
        return sentence
    head = decode(ids[: max_tokens - 1])
    space = head.rfind(" ")
    if space > len(head) // 2:
        head = head[:space]
    return head.rstrip(" ,;:-\ufffd") + "…"


def lead_lines(content: str, names: Collection[str] = (), spans: Sequence[Sentence] = ()) -> list[str]:
    """[lead] or [lead, point] of a message (module docstring; a short message's short lead takes its next
    informative sentences), each at most MAX_LINE_TOKENS; [] when every sentence is filler (or the message has no
    prose). `names`: the conversation's speakers (never content); `spans`: its stored sentences (`sentences`)."""
    return [text for text, _ in _lead(content, names, spans)]


def _lead(content: str, names: Collection[str], spans: Sequence[Sentence]) -> list[tuple[str, list[int]]]:
    """`lead_lines`, each with the indexes of the stored sentences it is made of."""
    found = _said(content, spans)
    said = [text for text, _ in found]
    first = next((i for i, s in enumerate(said) if not is_filler(s, names)), None)
    if first is None:
        return []
    out = [(_cut(said[first], MAX_LINE_TOKENS), list(found[first][1]))]
    later = said[first + 1 :]
    if count_tokens(content) <= LONG_MESSAGE_TOKENS:  # a short message: a short lead says what follows too
        for i, s in enumerate(later, start=first + 1):
            if count_tokens(out[0][0]) >= SHORT_LEAD_TOKENS:
                break
            if not is_filler(s, names):
                if count_tokens(f"{out[0][0]} {s}") > MAX_LINE_TOKENS:
                    break
                out[0] = (f"{out[0][0]} {s}", out[0][1] + found[i][1])
        return out
    if len(later) < 2:
        return out
    sets = [set(content_words(s, names)) for s in said]
    counts: Counter[str] = Counter(w for ws in sets for w in ws)
    best, best_score = None, 0.0
    for i, s in enumerate(later, start=first + 1):
        shared = sum(1 for w in sets[i] if counts[w] > 1)
        score = shared / math.sqrt(len(sets[i]) or 1) * (2.0 if POINT_MARKERS.match(s) else 1.0)
        if score > best_score:
            best, best_score = i, score
    if best is not None:
        out.append((_cut(said[best], MAX_LINE_TOKENS), list(found[best][1])))
    return out


def line_of(content: str, names: Collection[str] = (), spans: Sequence[Sentence] = ()) -> tuple[str, list[int]] | None:
    """A message's line and the indexes of the stored sentences it is made of (in order; `spans` when given):
    its lead, and for a long message its point after SEPARATOR; None when the message has no informative
    sentence."""
    parts = _lead(content, names, spans)
    if not parts:
        return None
    return SEPARATOR.join(text for text, _ in parts), [k for _, ks in parts for k in ks]


def line_text(content: str, names: Collection[str] = (), spans: Sequence[Sentence] = ()) -> str | None:
    """The text of a message's line (`line_of`)."""
    found = line_of(content, names, spans)
    return found[0] if found else None


def spoken(speaker: str | None, text: str) -> str:
    """`speaker: text`: how a line is shown, embedded and matched (a question naming a person finds what that
    person said)."""
    return f"{speaker}: {text}" if speaker else text
