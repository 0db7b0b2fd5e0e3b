"""Chunking: a source's messages rendered as lines, one token stream, cut into overlapping L1 windows.

A source (a conversation or a document) is the concatenation of its messages' rendered lines, tokenised line by
line with cl100k_base: its *token stream*. An L1 chunk is a window `[start, end)` of that stream with
`end - start <= chunk_size`; the next window starts at `end - overlap`, so consecutive chunks share exactly
`overlap` tokens. Each cut prefers, within the window's second half, the last message boundary, else the last
sentence boundary (where the project's one splitter, services/text.py, ends a sentence or a line), else the
window's full size.

Windowing is prefix-stable: a window is *sealed* only once the stream extends past `start + chunk_size`, and
then its cut depends on nothing after that point, so appending messages never changes a sealed chunk. The last
window, shorter than that, is *open*: searchable at once, extended by the next call, sealed when full.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import accumulate

from models.memory import StoredMessage
from services import text
from services import tokens as tok

SESSION_GAP = timedelta(minutes=30)


def shows_time(created_at: datetime | None, previous: datetime | None) -> bool:
    """Whether a message's line carries its time: when known and the first, or SESSION_GAP after the previous."""
    if created_at is None:
        return False
    return previous is None or abs(created_at - previous) >= SESSION_GAP


SPEAKER_LINE = re.compile(r"(?P<stamp>\[[^\]\n]{1,40}\] )?(?P<speaker>[^\s:\[\]][^:\n\[\]]{0,127}): ")
"""The start of a line `render` writes for a conversation message: its time stamp when shown, the speaker (a name
never starts with whitespace and holds no colon, bracket or line break, models/api.py) and ": " (written even
before an empty message, so a line ending in a bare colon is no speaker's). Groups `stamp` (or None) and
`speaker`; the message's text is the rest of the line. The one parser of rendered text (the summariser's lines,
the excerpts' units)."""

CONTINUATION = "  "
"""Indent of a message's second and later lines: a speaker line starts with `[` (its time) or the speaker's name,
which never starts with whitespace (models/api.py), so no line of a message can pass for another speaker's."""


def render(m: StoredMessage) -> str:
    """The lines a message contributes to its source's text.

    Conversation: `speaker: content`, prefixed `[YYYY-MM-DD HH:MM] ` when `m.show_time` (the start of a
    session). The content keeps its line breaks (code and markdown keep their structure): its second and later
    lines are indented by CONTINUATION, blank lines stay blank, trailing spaces and the blank lines around the
    content are dropped, and every line break (CRLF, U+2028...) is written `\n`. Document: its text as given.
    Ends with a newline.
    """
    if m.source_type == "document":
        return m.content.rstrip("\n") + "\n"
    first, *rest = [ln.rstrip() for ln in m.content.strip().splitlines()] or [""]
    body = "\n".join([first] + [CONTINUATION + ln if ln else "" for ln in rest])
    stamp = f"[{m.created_at:%Y-%m-%d %H:%M}] " if m.show_time and m.created_at else ""
    return f"{stamp}{m.speaker}: {body}\n"


def measure(messages: Sequence[StoredMessage], previous_time: datetime | None, offset: int) -> int:
    """Set `show_time`, `tok_offset` and `n_tokens` of consecutive messages (in order) from the time of the
    message before them and the stream offset where they start; returns the offset after them."""
    for m in messages:
        m.show_time = m.source_type == "conversation" and shows_time(m.created_at, previous_time)
        previous_time = m.created_at or previous_time
        m.tok_offset = offset
        m.n_tokens = len(tok.encode(render(m)))
        offset += m.n_tokens
    return offset


@dataclass(frozen=True)
class Window:
    """A chunk's place in the token stream: tokens `[start, end)`; `sealed` when it can no longer change."""

    start: int
    end: int
    sealed: bool


@dataclass
class TokenStream:
    """A suffix of a source's token stream, starting at absolute offset `base`.

    `message_starts` holds the absolute offsets where messages begin (sorted); `messages` are the messages the
    segment covers, in order. Built by `TokenStream.from_messages`.
    """

    base: int
    tokens: list[int]
    message_starts: list[int]
    messages: list[StoredMessage]
    _sentence_ends: list[int] | None = None

    @classmethod
    def from_messages(cls, messages: Sequence[StoredMessage]) -> TokenStream:
        """Stream over `messages` (contiguous, in seq order); each message's tokens are its rendered line's."""
        base = messages[0].tok_offset if messages else 0
        toks: list[int] = []
        starts: list[int] = []
        for m in messages:
            starts.append(base + len(toks))
            toks.extend(tok.encode(render(m)))
        return cls(base=base, tokens=toks, message_starts=starts, messages=list(messages))

    @property
    def end(self) -> int:
        return self.base + len(self.tokens)

    def slice(self, start: int, end: int) -> list[int]:
        return self.tokens[start - self.base : end - self.base]

    def sentence_boundaries(self) -> list[int]:
        """Absolute offsets of the token boundaries where a sentence of a message ends (the project's one
        splitter, services/text.sentence_spans, over each message's rendered lines; every line break ends one),
        sorted: the first boundary at or after the sentence's last character and before the next one starts."""
        if self._sentence_ends is None:
            enc = tok.get_encoding()
            ends: list[int] = []
            starts = self.message_starts + [self.end]
            for k, m in enumerate(self.messages):
                rendered = render(m)
                first = starts[k] - self.base
                offsets = list(
                    accumulate(
                        len(enc.decode_single_token_bytes(t)) for t in self.tokens[first : starts[k + 1] - self.base]
                    )
                )
                spans = text.sentence_spans(rendered)
                for (_, e), nxt in zip(spans, [a for a, _ in spans[1:]] + [len(rendered)], strict=True):
                    low, high = len(rendered[:e].encode()), len(rendered[:nxt].encode())
                    i = bisect.bisect_left(offsets, low)  # tokens 0..i end at or after the sentence's end
                    if i < len(offsets) - 1 and offsets[i] <= high:
                        ends.append(self.base + first + i + 1)
            self._sentence_ends = ends
        return self._sentence_ends

    def messages_in(self, start: int, end: int) -> list[StoredMessage]:
        """Messages whose tokens intersect `[start, end)`, in order."""
        first = max(bisect.bisect_right(self.message_starts, start) - 1, 0)
        last = bisect.bisect_left(self.message_starts, end)
        return self.messages[first:last]


def _last_boundary(bounds: Sequence[int], low: int, high: int) -> int | None:
    """Largest boundary b with low < b <= high, or None."""
    i = bisect.bisect_right(bounds, high) - 1
    return bounds[i] if i >= 0 and bounds[i] > low else None


def plan_windows(stream: TokenStream, start: int, chunk_size: int, overlap: int, final: bool) -> list[Window]:
    """Windows covering `stream` from absolute offset `start` to its end.

    chunk_size, overlap: tokens (overlap < chunk_size / 2). `final`: the source is complete (a document), so
    the last window is sealed too. Returns [] when nothing lies past `start`.
    """
    windows: list[Window] = []
    s = start
    end = stream.end
    while end > s:
        if end - s <= chunk_size:
            windows.append(Window(s, end, sealed=final))
            break
        limit = s + chunk_size
        low = s + max(overlap, chunk_size // 2)
        e = (
            _last_boundary(stream.message_starts, low, limit)
            or _last_boundary(stream.sentence_boundaries(), low, limit)
            or limit
        )
        windows.append(Window(s, e, sealed=True))
        s = e - overlap
    return windows


def window_meta(stream: TokenStream, w: Window) -> tuple[list[str], list[str], datetime | None, datetime | None]:
    """(message ids, speakers in order of first appearance, earliest time, latest time) covered by `w`."""
    msgs = stream.messages_in(w.start, w.end)
    speakers = list(dict.fromkeys(m.speaker for m in msgs if m.source_type == "conversation"))
    times = [m.created_at for m in msgs if m.created_at is not None]
    return [m.id for m in msgs], speakers, (min(times) if times else None), (max(times) if times else None)
