"""Segmentation: a rendered text cut into units (sentences, list items, lines, code), each with its speaker.

**Units** (`segment`). A rendered text (services/chunking.render: `[stamp] speaker: first line`, later lines of a
message indented by CONTINUATION) is cut into units, each with its character span and the speaker of its message
(carried to the message's later lines). A unit is one of: a sentence of a prose paragraph (lines of one message
joined when the next starts in lower case); a list item (`- `, `* `, `+ `, `•`, `1.`, `1)`), a heading or a
table row, whole; one line of code (a line of a fenced block, or an indented line of 4+ spaces or a tab), whole,
with the fence lines as units of their own that go with the block. Where a sentence of a paragraph ends is the
project's one splitter's answer (services/text.py, syntok; line breaks inside a paragraph read as spaces), and
an excerpt's elision mark between sentences is a cut too, so a speaker's prefix is never a unit, a line of code is
never cut, and a character (or an emoji sequence) is never split. The splitter does not end a sentence at an
abbreviation (Dr., e.g., i.e., U.S.), an initial, or a dot inside a number, version or URL; unlike the rules
excerpts had before, it rarely ends one before a word in lower case ("Really? ok. see you" is one sentence).
A text that starts inside a fenced block (an odd number of
fences before the first speaker line, the first one bare) is read as code up to that fence.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from services.chunking import CONTINUATION, SPEAKER_LINE
from services.text import line_spans

ELISION = "…"
_MARK = ELISION + " "
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


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_ITEM = re.compile(r"\s*(?:[-*+•]|\d{1,3}[.)])\s+\S")
_WHOLE_LINE = re.compile(r"\s*(?:#{1,6}\s|\||>\s*$|[-*_]{3,}\s*$)")
_CODE_INDENT = re.compile(r"(?: {4}|\t)")
# a line that starts in lower case continues the sentence of the line before unless that line ends in one of these
_SOFT_END = tuple(".!?:;…。！？")
# an excerpt's elision mark between two sentences, or after the last one ("sentence … sentence", "sentence …")
_GAP = re.compile(r" " + ELISION + r"(?= |$)")


def _sentence_ends(paragraph: str) -> list[int]:
    """Where the sentences of a paragraph (its lines joined, line breaks read as spaces) end, by the project's one
    splitter (services/text.line_spans), trailing whitespace left out; an elision mark is a cut too."""
    flat = paragraph.replace("\n", " ")
    ends: list[int] = []
    start = 0
    for stop in [m.start() for m in _GAP.finditer(flat)] + [len(flat)]:
        for _, b in line_spans(flat[start:stop]):
            end = start + len(flat[start : start + b].rstrip())
            if end > start and (not ends or end > ends[-1]):
                ends.append(end)
        start = stop
    return ends


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
    m = SPEAKER_LINE.match(line)
    if m is None or (speakers is not None and m["speaker"] not in speakers):
        return None
    return m


def segment(text: str, *, first_speaker: str | None = None, speakers: Collection[str] | None = None) -> list[Unit]:
    """The units of `text` in order (module doc), spans in characters of `text`; never raises.

    first_speaker: the speaker of lines before the first speaker line (a chunk that starts inside a message:
    `node.speakers[0]`). speakers: the names that make a speaker line; None: any name (a conversation's rendered
    text); empty: none (a document's text, whose lines are never speaker lines nor indented continuations).
    Elision marks (an excerpt's own output) belong to no unit, so an excerpt segments into the units it shows.
    """
    return _segment(text, first_speaker, speakers)


def _segment(text: str, first_speaker: str | None, speakers: Collection[str] | None) -> list[Unit]:  # noqa: C901 (one branch per kind of line: speaker, code, list, quote)
    """`segment`."""
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
        cuts = [p0 + e for e in _sentence_ends(text[p0:p1])]
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
        m = _speaker(line, speakers) if conversation else None
        if m is not None:
            flush()
            turn += 1
            speaker, prefix, speaker_line = m["speaker"], f"{m['stamp'] or ''}{m['speaker']}: ", ln
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
