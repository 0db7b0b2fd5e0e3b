"""Chunking: a source's messages split into sentences once, and L1 chunks as windows of whole sentences.

A message is split into sentences when it is stored (`split_message`: services/text.py's splitter; a sentence
over MAX_SENTENCE_TOKENS cut at word boundaries, marked `cut`), and its sentences are kept with it. A source's
*stream* is its messages' sentences in order, each as long as its own cl100k_base tokens: a message's
`tok_offset` is where its first sentence starts, `n_tokens` their sum (`measure`).

An L1 chunk is a window `[start, end)` of that stream that starts and ends at sentence boundaries and whose
rendered text (`SentenceStream.text`) is at most `chunk_size` tokens: a window grows sentence by sentence while
its text fits, then is cut at the last message boundary in its second half, else after its last sentence. The
next window opens with the last sentences of the one before whose tokens add up to at most `overlap` (none when
its last sentence alone is longer). A chunk's text is self-contained: its first line carries the date and time
of its first message (`[YYYY-MM-DD HH:MM] `), a message that starts a session or another day carries its own,
and every message it shows, in part or whole, is written `speaker: sentences` (the first message's speaker
even when the chunk opens inside it). A chunk holds at least one sentence: one longer than `chunk_size`
(possible only for a CHUNK_SIZE under MAX_SENTENCE_TOKENS plus a header, or a single word longer than that) is
a chunk alone.

Windowing is prefix-stable: a window is *sealed* only once the stream holds the sentence that does not fit in
it, and then its cut depends on nothing after that sentence, so appending messages never changes a sealed chunk.
The last window, which everything after its start fits in, is *open*: searchable at once, extended by the next
call, sealed when full. A window never spans two sessions of a conversation: the last window of a session is sealed
at its end once the next session's first message is in, and the next window opens with that message (no overlap).
Remembered one session per call, a session's open chunk is then sealed unchanged by the next call and keeps its
embedding (datastore/write/build.py `unchanged_open_chunk`) instead of being embedded again grown.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from models.memory import Sentence, StoredMessage, sentence_id
from services import text
from services import tokens as tok
from services.speakers import is_human

SESSION_GAP = timedelta(minutes=30)
ELISION = "…"
"""What stands where text was left out (one cl100k token)."""


def shows_time(created_at: datetime | None, previous: datetime | None) -> bool:
    """Whether a message's line carries its time: when known and the first, or SESSION_GAP after the previous."""
    if created_at is None:
        return False
    return previous is None or abs(created_at - previous) >= SESSION_GAP


SPEAKER_LINE = re.compile(r"(?P<stamp>\[[^\]\n]{1,40}\] )?(?P<speaker>[^\s:\[\]][^:\n\[\]]{0,127}): ")
"""The start of a line `render` writes for a conversation message: its time stamp when shown, the speaker (a name
never starts with whitespace and holds no colon, bracket or line break, models/api.py) and ": " (written even
before an empty message, so a line ending in a bare colon is no speaker's). Groups `stamp` (or None) and
`speaker`; the message's text is the rest of the line. Nothing of the server parses rendered text (summaries,
excerpts and the /context block are rendered from stored sentences); the tests' invariants and bench/chunk_text.py
read chunks with it."""

STAMP = re.compile(r"^\[[^\]\n]{1,40}\] ", re.M)
"""A time stamp at the head of a rendered line (`[2024-03-15 09:00] `)."""


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
    stamp = f"[{m.created_at:%Y-%m-%d %H:%M}] " if m.show_time and m.created_at else ""
    return f"{stamp}{m.speaker}: {_body(m.content)}\n"


MAX_SENTENCE_TOKENS = 100
"""A sentence longer than this (cl100k_base tokens) is stored as pieces cut at word boundaries (`cut`)."""

_WORD = re.compile(r"\S+")


def _pieces(content: str, a: int, b: int) -> list[Sentence]:
    """content[a:b] (one sentence over MAX_SENTENCE_TOKENS) cut at word boundaries into pieces of at most
    MAX_SENTENCE_TOKENS tokens each (a single longer word stays whole), each marked `cut`."""
    out: list[Sentence] = []
    start = end = a
    for m in _WORD.finditer(content, a, b):
        if end > start and tok.count_tokens(content[start : m.end()]) > MAX_SENTENCE_TOKENS:
            out.append(Sentence(start=start, end=end, tokens=tok.count_tokens(content[start:end]), cut=True))
            start = m.start()
        end = m.end()
    out.append(Sentence(start=start, end=end, tokens=tok.count_tokens(content[start:end]), cut=True))
    return out


def split_message(content: str) -> list[Sentence]:
    """The sentences of a message's content, in order, as stored with it: the splitter's sentences
    (services/text.sentence_spans) with what lies between them that holds no letter or digit ("...", an emoji)
    kept with the sentence before (the first also takes what precedes it), so together they hold every
    character of the content but surrounding whitespace. A sentence over MAX_SENTENCE_TOKENS becomes pieces
    cut at word boundaries. Content with no letter or digit is one sentence; empty content one empty sentence
    of 1 token (so that every message has a place in the stream)."""
    lead, trail = len(content) - len(content.lstrip()), len(content.rstrip())
    if lead >= trail:
        return [Sentence(start=0, end=0, tokens=1)]
    spans = text.sentence_spans(content) or [(lead, trail)]
    starts = [lead] + [a for a, _ in spans[1:]]
    ends = [len(content[:nxt].rstrip()) for nxt in [a for a, _ in spans[1:]] + [trail]]
    out: list[Sentence] = []
    for a, b in zip(starts, ends, strict=True):
        n = tok.count_tokens(content[a:b])
        out.extend([Sentence(start=a, end=b, tokens=n)] if n <= MAX_SENTENCE_TOKENS else _pieces(content, a, b))
    return out


def measure(messages: Sequence[StoredMessage], previous_time: datetime | None, offset: int) -> int:
    """Set `show_time`, `sentences` (split when not yet), `tok_offset` and `n_tokens` of consecutive messages (in
    order) from the time of the message before them and the stream offset where they start; returns the offset
    after them."""
    for m in messages:
        m.show_time = m.source_type == "conversation" and shows_time(m.created_at, previous_time)
        previous_time = m.created_at or previous_time
        if not m.sentences:
            m.sentences = split_message(m.content)
        m.tok_offset = offset
        m.n_tokens = sum(s.tokens for s in m.sentences)
        offset += m.n_tokens
    return offset


@dataclass(frozen=True)
class Window:
    """A chunk's place in the stream: `[start, end)`, both sentence boundaries; `sealed` when it can no longer
    change."""

    start: int
    end: int
    sealed: bool


@dataclass(frozen=True)
class Unit:
    """A sentence in the stream: `messages[message].sentences[index]`, starting at stream offset `start`."""

    message: int
    index: int
    start: int
    tokens: int


def _body(content: str) -> str:
    """A message's text as its line shows it: trailing spaces dropped, second and later lines indented by
    CONTINUATION, blank lines blank, every line break written `\n`."""
    first, *rest = [ln.rstrip() for ln in content.strip().splitlines()] or [""]
    return "\n".join([first] + [CONTINUATION + ln if ln else "" for ln in rest])


@dataclass(frozen=True)
class Run:
    """What one line of a rendered text shows of a message: `text`, some of its sentences; `speaker` None for a
    document's text; `time` the message's; `session_start` whether the message starts a session (`show_time`)."""

    speaker: str | None
    time: datetime | None
    text: str
    session_start: bool = False

    @classmethod
    def of(cls, m: StoredMessage, text: str) -> Run:
        """The run of `m` showing `text`."""
        speaker = None if m.source_type == "document" else m.speaker
        return cls(speaker, m.created_at, text, m.show_time)


def render_runs(runs: Sequence[Run], stamps: bool = True) -> str:
    """The one rendering of sentences as text, for chunks, summaries and the /context block: per run a line,
    `speaker: text` (a document's text as it is; a message's later lines indented by CONTINUATION), prefixed
    `[YYYY-MM-DD HH:MM] ` when `stamps` and its time is known and it is the first run, starts a session, lies
    SESSION_GAP after the run before, or falls on another day than the last stamp (the block writes dates on
    lines of their own: no stamps). Lines joined by newlines, no newline at the end."""
    out: list[str] = []
    day = previous = None
    for k, r in enumerate(runs):
        if r.speaker is None:
            out.append(r.text)
            continue
        stamp = ""
        if (
            stamps
            and r.time is not None
            and (k == 0 or r.session_start or r.time.date() != day or (previous and shows_time(r.time, previous)))
        ):
            stamp = f"[{r.time:%Y-%m-%d %H:%M}] "
            day = r.time.date()
        previous = r.time or previous
        out.append(f"{stamp}{r.speaker}: {_body(r.text)}")
    return "\n".join(out)


@dataclass(frozen=True)
class SpanSentence:
    """One stored sentence of a message as a summary or the /context block sees it: `id`
    (models/memory.sentence_id), its message's id and the sentence's `index` in it, its `text` (the content
    between its offsets), its message's `speaker` (None: a document's text), `time` and `session_start`
    (`show_time`), `person` (said by a person, services/speakers.is_human), `tokens` (cl100k_base), `gap` (what
    stands between it and the message's sentence before it in the content: a space, a line break...; "" for the
    first) and `last` (the message's last sentence)."""

    id: str
    message_id: str
    index: int
    text: str
    speaker: str | None
    time: datetime | None
    person: bool
    tokens: int
    session_start: bool = False
    gap: str = " "
    last: bool = True


def span_sentences(m: StoredMessage) -> list[SpanSentence]:
    """The sentences of a message (split when it has none yet), in order, as SpanSentence."""
    speaker = None if m.source_type == "document" else m.speaker
    stored = m.sentences or split_message(m.content)
    return [
        SpanSentence(
            sentence_id(m.id, i),
            m.id,
            i,
            m.content[s.start : s.end],
            speaker,
            m.created_at,
            is_human(speaker),
            s.tokens,
            m.show_time,
            m.content[stored[i - 1].end : s.start] if i else "",
            i == len(stored) - 1,
        )
        for i, s in enumerate(stored)
    ]


def sentence_runs(
    picked: Sequence[SpanSentence], among: Sequence[SpanSentence] | None = None, after: Mapping[str, str] | None = None
) -> list[Run]:
    """The runs (`render_runs`) of sentences picked, in order: consecutive sentences of one message make one run,
    joined by " … " where sentences between them are left out.

    among: the sentences they are picked from, in order (the /context block's memory): neighbours are joined by
    what stands between them in the message (`gap`: a chunk's own text when every sentence is picked), and
    ELISION marks what else is left out, once per gap: a run opens with `… ` when sentences of its message
    before its first are left out, else the run before it ends with ` …` when anything between them (or, for
    the last run, after it) is left out. None (a summary): sentences of a message are joined by a space, no
    mark for what lies around them. after: sentence id -> what is written after it (a mark)."""
    after = after or {}
    pos = {s.id: k for k, s in enumerate(among)} if among is not None else {}
    runs: list[Run] = []
    for i, s in enumerate(picked):
        said = s.text + after.get(s.id, "")
        before = picked[i - 1] if i else None
        if before is not None and before.message_id == s.message_id:
            gap = (s.gap if among is not None else " ") if s.index == before.index + 1 else f" {ELISION} "
            runs[-1] = replace(runs[-1], text=f"{runs[-1].text}{gap}{said}")
            continue
        if among is not None:
            k = pos[s.id]
            head = k > 0 and among[k - 1].message_id == s.message_id  # its message's sentences before it left out
            if k > (pos[before.id] + 1 if before is not None else 0) and not head:  # what lies between: one mark
                runs[-1:] = [_marked(r) for r in runs[-1:]]
            said = f"{ELISION} {said}" if head else said
        runs.append(Run(s.speaker, s.time, said, s.session_start))
    if among is not None and picked and pos[picked[-1].id] < len(among) - 1:
        runs[-1] = _marked(runs[-1])
    return runs


def _marked(run: Run) -> Run:
    """The run with ELISION after its text (once)."""
    return run if run.text.endswith(ELISION) else replace(run, text=f"{run.text} {ELISION}")


def render_sentences(picked: Sequence[SpanSentence]) -> str:
    """The text of a summary's sentences (in order): `render_runs` of their `sentence_runs`, stamped as a chunk
    is."""
    return render_runs(sentence_runs(picked))


@dataclass
class SentenceStream:
    """A suffix of a source's stream: the sentences of `messages` (contiguous, in seq order) as `units`, each at
    its absolute offset (its message's `tok_offset` plus the tokens of the sentences before it). Built by
    `SentenceStream.from_messages`."""

    messages: list[StoredMessage]
    units: list[Unit]
    message_starts: list[int]
    _starts: list[int] = field(default_factory=list)

    @classmethod
    def from_messages(cls, messages: Sequence[StoredMessage]) -> SentenceStream:
        """The stream over `messages` (measured: `measure`); a message read without sentences is split here."""
        units: list[Unit] = []
        for k, m in enumerate(messages):
            if not m.sentences:
                m.sentences = split_message(m.content)
            at = m.tok_offset
            for i, s in enumerate(m.sentences):
                units.append(Unit(k, i, at, s.tokens))
                at += s.tokens
        return cls(list(messages), units, [m.tok_offset for m in messages], [u.start for u in units])

    @property
    def end(self) -> int:
        """The offset after the stream's last sentence."""
        last = self.units[-1] if self.units else None
        return last.start + last.tokens if last else 0

    def session_end(self, first: int) -> int:
        """The index of the first unit after `first` whose message starts another session than unit `first`'s
        (len(units) when none does): a window never spans two sessions of a conversation."""
        session = self.messages[self.units[first].message].session_id
        for k in range(first + 1, len(self.units)):
            u = self.units[k]
            if u.index == 0 and self.messages[u.message].session_id != session:
                return k
        return len(self.units)

    def first_at(self, offset: int) -> int:
        """The index of the first unit starting at or after `offset` (len(units) when none does)."""
        return bisect.bisect_left(self._starts, offset)

    def text(self, first: int, stop: int, stamps: bool = True) -> str:
        """The rendered text of units `[first, stop)` (module doc): per message, its shown sentences as they
        stand in its content (`speaker: ...` for a conversation), the date and time before the first and before
        any that starts a session or another day (`render_runs`; none when not `stamps`); ends with a newline
        when its last message is shown to its end."""
        runs: list[Run] = []
        k = first
        while k < stop:
            u = self.units[k]
            m = self.messages[u.message]
            last = k
            while last + 1 < stop and self.units[last + 1].message == u.message:
                last += 1
            piece = m.content[m.sentences[u.index].start : m.sentences[self.units[last].index].end]
            runs.append(Run.of(m, piece))
            k = last + 1
        tail = self.units[stop - 1] if stop > first else None
        whole = tail is not None and tail.index == len(self.messages[tail.message].sentences) - 1
        return render_runs(runs, stamps) + ("\n" if whole else "")

    def added(self, k: int) -> int:
        """About how many tokens unit `k` adds to the text of the units before it (a window's growth is estimated
        with it, then counted exactly): its own, a space before it, and for a message's first sentence its line
        break, `speaker: ` and, when the message starts a session or another day, its stamp."""
        u = self.units[k]
        if u.index > 0:
            return u.tokens + 1
        m = self.messages[u.message]
        before = self.messages[self.units[k - 1].message] if k > 0 else None
        new_day = before is None or (
            m.created_at is not None
            and before.created_at is not None
            and m.created_at.date() != before.created_at.date()
        )
        stamp = 11 if m.created_at is not None and (m.show_time or new_day) else 0
        return u.tokens + 1 + stamp + tok.count_tokens(f"{m.speaker}: ")

    def window_text(self, w: Window) -> str:
        """The rendered text of a window (`text` over its units)."""
        return self.text(self.first_at(w.start), self.first_at(w.end))

    def key_context(self, w: Window, tokens: int) -> str:
        """What precedes window `w` in the stream, for its retrieval key (`chunk_key`): the whole sentences
        right before its first, taken back while they hold at most `tokens` tokens (cl100k_base, each sentence's
        own count), rendered as `text` is but without time stamps; "" when `tokens` is 0, when the window opens
        the stream or when the sentence right before it alone is longer. Only text before the window is read,
        so a chunk's key is known when the chunk is made."""
        stop = self.first_at(w.start)
        first, held = stop, 0
        while first > 0 and held + self.units[first - 1].tokens <= tokens:
            first -= 1
            held += self.units[first].tokens
        return self.text(first, stop, stamps=False).rstrip("\n") if first < stop else ""

    def messages_in(self, start: int, end: int) -> list[StoredMessage]:
        """Messages whose sentences intersect `[start, end)`, in order."""
        first = max(bisect.bisect_right(self.message_starts, start) - 1, 0)
        last = bisect.bisect_left(self.message_starts, end)
        return self.messages[first:last]


def plan_windows(
    stream: SentenceStream, start: int, chunk_size: int, overlap: int, final: bool, after: int | None = None
) -> list[Window]:
    """Windows covering `stream` from the first sentence boundary at or after `start` to its end (module doc).

    chunk_size: tokens of a chunk's rendered text; overlap: tokens of the sentences a window shares with the one
    before (overlap < chunk_size / 2). `final`: the source is complete (a document), so the last window is
    sealed too. `after`: the end of the sealed chunk that `start` overlaps (None when `start` is an open chunk's
    or the source's start): when a session starts there, the first window opens with it (a window never spans
    two sessions, and shares no sentence with the session before). Returns [] when nothing lies past `start`.
    """
    units, windows = stream.units, []
    i, total = stream.first_at(start), len(stream.units)
    if after is not None and i < total and stream.session_end(i) == stream.first_at(after) < total:
        i = stream.first_at(after)
    while i < total:
        n = stream.session_end(i)
        j = i + 1
        cost = tok.count_tokens(stream.text(i, j))
        while j < n and cost + stream.added(j) <= chunk_size:  # grown by estimates, then fixed by exact counts
            cost += stream.added(j)
            j += 1
        while j > i + 1 and tok.count_tokens(stream.text(i, j)) > chunk_size:
            j -= 1
        while j < n and tok.count_tokens(stream.text(i, j + 1)) <= chunk_size:
            j += 1
        if j == n == total:
            windows.append(Window(units[i].start, stream.end, sealed=final))
            break
        if j == n:  # the session ends here: the window is cut at its end, the next opens with the next session
            windows.append(Window(units[i].start, units[n].start, sealed=True))
            i = n
            continue
        low, e = units[i].start + max(overlap, chunk_size // 2), j
        for k in range(j, i, -1):  # the last message boundary in the window's second half
            if units[k].start <= low:
                break
            if units[k].index == 0:
                e = k
                break
        windows.append(Window(units[i].start, units[e].start, sealed=True))
        i = max(stream.first_at(units[e].start - overlap), i + 1)
    return windows


def chunk_key(context: str, text: str) -> str:
    """A chunk's retrieval key: what its embedding is of (services/tree.embedded_text), its `text` after the
    `context` before it (`SentenceStream.key_context`) on a line of its own; its text alone when there is none.
    The chunk shows its text only."""
    return f"{context}\n{text}" if context else text


def next_start(tok_start: int, tok_end: int, overlap: int) -> int:
    """Where the window after a sealed `[tok_start, tok_end)` starts, before `plan_windows` moves it to the next
    sentence boundary: `overlap` tokens before its end, and after its start (so a window shorter than the overlap
    is not planned again)."""
    return max(tok_end - overlap, tok_start + 1)


def window_meta(stream: SentenceStream, w: Window) -> tuple[list[str], list[str], datetime | None, datetime | None]:
    """(message ids, speakers in order of first appearance, earliest time, latest time) covered by `w`."""
    msgs = stream.messages_in(w.start, w.end)
    speakers = list(dict.fromkeys(m.speaker for m in msgs if m.source_type == "conversation"))
    times = [m.created_at for m in msgs if m.created_at is not None]
    return [m.id for m in msgs], speakers, (min(times) if times else None), (max(times) if times else None)
