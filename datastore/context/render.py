"""How the context block is written: sections of items, compact by default, never over the budget.

Default rendering (no `memory_template`): a dated section (recent turns, relevant memories, timeline) lists its
memories in time order under one date line per day (`[2024-03-15, 8 months ago]`; a memory whose lines were said
on several days is admitted with `parts`, each under its own day; one the caller could not cut keeps its span,
`[2024-03-15 to 2024-04-02, 7 months ago]`), each memory as its own lines (`speaker: text`, `…` where text was
left out); a memory of another source than the block's conversation names it on its date line (`[2024-03-15, 8
months ago, from “Trip”]`); memories with no time stand under UNDATED, after the dated ones. Core memory and the
standing instructions are bullets (`- text`, later lines indented by two spaces), undated. With a
`memory_template`, every memory is rendered by it on its own (`{date}`, `{time_ago}`, ...), as before. Costs are
cl100k tokens, counted line by line as items are admitted; the assembler counts the whole block at the end and
drops the last items while a merge at a join makes it a token or two long.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, lru_cache

from models.context import DATE_LINE, ContextItem, LeftOut, SectionName
from services.errors import InvalidRequestError
from services.excerpts import ELISION
from services.timeago import time_ago
from services.tokens import count_tokens

HEADINGS: dict[SectionName, str] = {
    "core": "## Core memory",
    "instructions": "## Standing instructions and preferences",
    "recent": "## Recent turns",
    "relevant": "## Relevant memories",
    "timeline": "## Timeline",
}
DATED: frozenset[SectionName] = frozenset({"recent", "relevant", "timeline"})  # sections with date lines
_JOINERS = (
    frozenset("\u200d\ufe0e\ufe0f")
    | {chr(c) for c in range(0x1F3FB, 0x1F400)}
    | {chr(c) for c in range(0x1F1E6, 0x1F200)}
)  # ZWJ, variation selectors, skin tones, regional indicators
UNDATED = "[undated]"  # the date line of memories with no time (after the dated ones)
SUPERSEDED = "[superseded: no longer holds]"
"""Written after a sentence a memory shows that stated an instruction or preference a later one replaced (the
sentence is marked where it is rendered: datastore/context/evidence.py `Superseded`)."""


@cache
def heading_tokens(name: SectionName) -> int:
    """Tokens a section's heading adds (its line and the blank line before it)."""
    return count_tokens(HEADINGS[name] + "\n") + 1


def template_fields(template: str, allowed: tuple[str, ...], name: str) -> None:
    """Raise InvalidRequestError naming `name` unless every {field} of `template` is in `allowed`."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise InvalidRequestError(f"{name} is not a valid template: {exc}", name) from exc
    unknown = sorted({f for f in fields if f not in allowed})
    if unknown:
        raise InvalidRequestError(
            f"{name} has unknown fields {', '.join('{' + f + '}' for f in unknown)}; allowed: "
            + ", ".join("{" + f + "}" for f in allowed),
            name,
        )


def date_label(start: datetime | None, end: datetime | None) -> str:
    """`2024-03-15`, `2024-03-15 to 2024-04-02` for a span of days, or `undated`."""
    if start is None and end is None:
        return "undated"
    a, b = (start or end), (end or start)
    assert a is not None and b is not None
    return f"{a:%Y-%m-%d}" if a.date() == b.date() else f"{a:%Y-%m-%d} to {b:%Y-%m-%d}"


@lru_cache(maxsize=4096)
def _date_line(start: datetime | None, end: datetime | None, now: datetime, offsets: tuple[object, object]) -> str:
    """A date line without its closing bracket (`[2024-03-15, 3 days ago`). Cached: a block asks it of every
    item it tries and every part of one, mostly for the same few days. `offsets`: the times' UTC offsets, in the
    key because two times of one instant are equal keys while their dates may differ."""
    return DATE_LINE.format(date=date_label(start, end), time_ago=time_ago(end or start, now))[:-1]


def clip(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` characters, ELISION included, at the last whitespace when the cut
    falls inside a word (never inside a character's combining marks or an emoji sequence)."""
    if len(text) <= max_chars:
        return text
    head = text[: max_chars - len(ELISION)]
    space = max(head.rfind(" "), head.rfind("\n"))
    if space > 0 and not text[len(head)].isspace():
        head = head[:space]
    while head and (unicodedata.combining(text[len(head)]) or text[len(head)] in _JOINERS):
        head = head[:-1]  # the next character belongs to the last one kept: leave both out
    return head.rstrip() + ELISION


def bullet(text: str) -> str:
    """`- text`, its later lines indented by two spaces."""
    return "- " + text.replace("\n", "\n  ")


Part = tuple[datetime | None, str]
"""A piece of an item's text said at one time (its lines under that day's date line): (time, lines)."""


@dataclass
class Entry:
    """What an admitted item shows under one date line: the item, the date line it goes under (None: none), its
    lines, and where it sorts (undated last, then by day, source, time, order of admission)."""

    item: ContextItem
    day: str | None
    text: str
    order: tuple[int, float, str, float, int, int]
    when: float  # the caller's time of the item (kept to admit it again)
    at: datetime | None  # the time of its part (None: the item shown whole)


def _day_key(t: datetime | None) -> float:
    return datetime(t.year, t.month, t.day, tzinfo=t.tzinfo).timestamp() if t is not None else 0.0


@dataclass
class Section:
    """The items of one section, admitted against its budget (heading and date lines included).

    home: the conversation the block is for: a memory of another source names it on its date line
    (`names(source_id)`, e.g. `“Trip to Lisbon”` or `conversation c2`); None: no source is named."""

    name: SectionName
    budget: int
    now: datetime
    memory_template: str | None = None
    max_chars: int | None = None  # a memory's text is clipped to this many characters (`max_memory_chars`)
    home: str | None = None
    names: Callable[[str], str] | None = None
    entries: list[Entry] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    used: int = 0
    admitted: int = 0

    @property
    def room(self) -> int:
        """Tokens still free (the heading counted once the first item is in)."""
        return self.budget - self.used - (0 if self.entries else heading_tokens(self.name))

    def line(self, item: ContextItem, text: str | None = None) -> str:
        """The item's own line(s) as rendered (without its date line); `text`: one day's part of it."""
        if self.memory_template is not None:
            values = {
                "time_ago": time_ago(item.end_time, self.now),
                "speaker": item.speaker or "",
                "date": date_label(item.start_time, item.end_time),
                "text": item.text,
                "level": str(item.level),
            }
            return self.memory_template.format_map(values)
        if self.name in DATED:
            # under its date line: the lines as said (`speaker: text`), no bullet to pay for
            return item.text if text is None else text
        return bullet(item.text)

    def day_of(self, item: ContextItem, start: datetime | None = None, end: datetime | None = None) -> str | None:
        """The date line the item (or its part said from `start` to `end`) goes under, or None (core,
        instructions, a custom template). A memory with no time stands under UNDATED; one of another source than
        `home` names it: `[2024-03-15, 3 days ago, from “Trip”]`."""
        if self.memory_template is not None or self.name not in DATED:
            return None
        if start is None and end is None:
            start, end = item.start_time, item.end_time
        source = ""
        if self.home is not None and item.source_id is not None and item.source_id != self.home:
            source = f", from {self.names(item.source_id) if self.names else item.source_id}"
        if start is None and end is None:
            return UNDATED[:-1] + source + "]"
        offsets = (start.utcoffset() if start else None, end.utcoffset() if end else None)
        return _date_line(start, end, self.now, offsets) + source + "]"

    def _parts(self, item: ContextItem, parts: list[Part] | None) -> list[tuple[str | None, str, datetime | None]]:
        """(date line, lines, time) per part of the item: one per day it was said on (`parts`), else the whole."""
        if parts and self.memory_template is None and self.name in DATED:
            return [(self.day_of(item, t, t), text, t) for t, text in parts]
        return [(self.day_of(item), self.line(item), item.start_time or item.end_time)]

    def cost(self, item: ContextItem, parts: list[Part] | None = None) -> int:
        """Tokens admitting `item` adds: its line(s), a date line for each day new here, the heading if first."""
        days = {e.day for e in self.entries}
        tokens = 0
        for day, text, _ in self._parts(item, parts):
            tokens += count_tokens(text) + 1
            if day is not None and day not in days:
                tokens += count_tokens(day) + 1  # a new date line
                days.add(day)
        return tokens + (0 if self.entries else heading_tokens(self.name))

    def room_for(self, item: ContextItem) -> int:
        """Tokens left for `item`'s own lines once its date line (when new here) and the heading are paid."""
        return self.budget - self.used - self.cost(item.model_copy(update={"text": ""})) + 1

    def admit(self, item: ContextItem, when: float = 0.0, parts: list[Part] | None = None) -> bool:
        """Add `item` when it fits (its text clipped to `max_chars`, its cost recorded in `item.tokens`); else
        record it as left out. `parts`: its text cut by the day each line was said (joined, they are its
        text): each part goes under its own date line."""
        if self.max_chars is not None and len(item.text) > self.max_chars:
            item.text = clip(item.text, self.max_chars)
            parts = None
        cost = self.cost(item, parts)
        if self.used + cost > self.budget:
            self.left_out.append(
                LeftOut(
                    id=item.id, section=self.name, tokens=count_tokens(self.line(item)), reason="no room in the budget"
                )
            )
            return False
        item.tokens = cost - (0 if self.entries else heading_tokens(self.name))
        self.used += cost
        for k, (day, text, t) in enumerate(self._parts(item, parts)):
            undated = day is not None and day.startswith(UNDATED[:-1])
            at = t.timestamp() if parts and t is not None else when  # a part sorts by its own time
            key = (1 if undated else 0, _day_key(t) if day is not None else 0.0, day or "", at, self.admitted, k)
            self.entries.append(Entry(item, day, text, key, when, t if parts else None))
        self.admitted += 1
        return True

    def _groups(self) -> list[tuple[ContextItem, float, list[Part] | None]]:
        """The admitted items in order of admission, with their parts (None: shown whole)."""
        out: list[tuple[ContextItem, float, list[Part]]] = []
        for e in sorted(self.entries, key=lambda e: (e.order[4], e.order[5])):
            if out and out[-1][0] is e.item:
                out[-1][2].append((e.at, e.text))
            else:
                out.append((e.item, e.when, [(e.at, e.text)]))
        return [(i, w, p if p[0][0] is not None or len(p) > 1 else None) for i, w, p in out]

    def discard(self, ids: set[str]) -> None:
        """Take out the items with these ids (shown elsewhere in the block); the others are admitted again, in
        their order, so their costs (date lines, heading) stay exact."""
        if not any(e.item.id in ids for e in self.entries):
            return
        kept = [g for g in self._groups() if g[0].id not in ids]
        self.entries, self.used, self.admitted = [], 0, 0
        for item, when, parts in kept:
            self.admit(item, when, parts)

    def reorder(self, key: Callable[[ContextItem], int]) -> None:
        """Admit the items again in the order of `key` (an undated section shows them as admitted); the items left
        out before that are now in are no longer listed as left out."""
        groups = sorted(self._groups(), key=lambda g: key(g[0]))
        shown = {g[0].id for g in groups}
        self.entries, self.used, self.admitted = [], 0, 0
        for item, when, parts in groups:
            self.admit(item, when, parts)
        self.left_out = [lo for lo in self.left_out if lo.id not in shown]

    def drop_last(self) -> None:
        """Take out the last admitted item (the block ran a token or two over at a join)."""
        last = max(e.order[4] for e in self.entries)
        gone = next(e.item for e in self.entries if e.order[4] == last)
        self.entries = [e for e in self.entries if e.order[4] != last]
        self.used -= gone.tokens + (0 if self.entries else heading_tokens(self.name))
        self.left_out.append(LeftOut(id=gone.id, section=self.name, tokens=gone.tokens, reason="no room in the budget"))

    def ordered(self) -> list[Entry]:
        """The entries in the order they are shown: by day, source and time for a dated section, else as
        admitted."""
        if self.name in DATED:
            return sorted(self.entries, key=lambda e: e.order)
        return sorted(self.entries, key=lambda e: (e.order[4], e.order[5]))

    def text(self) -> str:
        """The section's body (without its heading): date lines and items."""
        out: list[str] = []
        day: str | None = None
        for e in self.ordered():
            if e.day is not None and e.day != day:
                out.append(e.day)
            day = e.day
            out.append(e.text)
        return "\n".join(out)

    @property
    def items(self) -> list[ContextItem]:
        """The items in the order they appear in the block (an item shown under several days: once, first)."""
        out: list[ContextItem] = []
        for e in self.ordered():
            if all(i is not e.item for i in out):
                out.append(e.item)
        return out
