"""How the context block is written: sections of items, compact by default, never over the budget.

Default rendering (no `memory_template`): a dated section (recent turns, relevant memories, timeline) lists its
memories in time order under one date line per day (`[2024-03-15, 8 months ago]`, or `[2024-03-15 to 2024-04-02,
7 months ago]` for a span), each memory as its own lines (`speaker: text`, `…` where text was left out); core
memory and the standing instructions are bullets (`- text`, later lines indented by two spaces), undated. With a
`memory_template`, every memory is rendered by it on its own (`{date}`, `{time_ago}`, ...), as before. Costs are
cl100k tokens, counted line by line as items are admitted; the assembler counts the whole block at the end and
drops the last items while a merge at a join makes it a token or two long.
"""

from __future__ import annotations

import string
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache

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
UNDATED = "[undated]"  # the date line of an untimed memory that follows dated ones (at the top: none)


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


@dataclass
class Entry:
    """An admitted item: its ContextItem and where it sorts (its time, then its order of admission)."""

    item: ContextItem
    day: str | None  # the date line it goes under (None: no date line)
    order: tuple[float, int]


@dataclass
class Section:
    """The items of one section, admitted against its budget (heading and date lines included)."""

    name: SectionName
    budget: int
    now: datetime
    memory_template: str | None = None
    max_chars: int | None = None  # a memory's text is clipped to this many characters (`max_memory_chars`)
    entries: list[Entry] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    used: int = 0

    @property
    def room(self) -> int:
        """Tokens still free (the heading counted once the first item is in)."""
        return self.budget - self.used - (0 if self.entries else heading_tokens(self.name))

    def line(self, item: ContextItem) -> str:
        """The item's own line(s) as rendered (without its date line)."""
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
            return item.text  # under its date line: the lines as said (`speaker: text`), no bullet to pay for
        return bullet(item.text)

    def day_of(self, item: ContextItem) -> str | None:
        """The date line the item goes under, or None (core, instructions, a custom template, no time)."""
        if self.memory_template is not None or self.name not in DATED:
            return None
        if item.start_time is None and item.end_time is None:
            return None
        return DATE_LINE.format(
            date=date_label(item.start_time, item.end_time), time_ago=time_ago(item.end_time, self.now)
        )

    def cost(self, item: ContextItem) -> int:
        """Tokens admitting `item` adds: its line(s), a date line when its day is new here, the heading if first."""
        text = self.line(item)
        tokens = count_tokens(text) + 1
        day = self.day_of(item)
        if day is not None and all(e.day != day for e in self.entries):
            tokens += count_tokens(day) + 1  # a new date line
        elif day is None and self.name in DATED and any(e.day is not None for e in self.entries):
            tokens += count_tokens(UNDATED) + 1  # an untimed memory after dated ones
        return tokens + (0 if self.entries else heading_tokens(self.name))

    def room_for(self, item: ContextItem) -> int:
        """Tokens left for `item`'s own lines once its date line (when new here) and the heading are paid."""
        return self.budget - self.used - self.cost(item.model_copy(update={"text": ""})) + 1

    def admit(self, item: ContextItem, when: float = 0.0) -> bool:
        """Add `item` when it fits (its text clipped to `max_chars`, its cost recorded in `item.tokens`); else
        record it as left out."""
        if self.max_chars is not None:
            item.text = clip(item.text, self.max_chars)
        cost = self.cost(item)
        if self.used + cost > self.budget:
            self.left_out.append(
                LeftOut(
                    id=item.id, section=self.name, tokens=count_tokens(self.line(item)), reason="no room in the budget"
                )
            )
            return False
        item.tokens = cost - (0 if self.entries else heading_tokens(self.name))
        self.used += cost
        self.entries.append(Entry(item, self.day_of(item), (when, len(self.entries))))
        return True

    def discard(self, ids: set[str]) -> None:
        """Take out the items with these ids (shown elsewhere in the block); the others are admitted again, in
        their order, so their costs (date lines, heading) stay exact."""
        kept = [e for e in self.entries if e.item.id not in ids]
        if len(kept) == len(self.entries):
            return
        self.entries, self.used = [], 0
        for e in kept:
            self.admit(e.item, e.order[0])

    def drop_last(self) -> None:
        """Take out the last admitted item (the block ran a token or two over at a join)."""
        gone = self.entries.pop()
        self.used -= gone.item.tokens + (0 if self.entries else heading_tokens(self.name))
        self.left_out.append(
            LeftOut(id=gone.item.id, section=self.name, tokens=gone.item.tokens, reason="no room in the budget")
        )

    def ordered(self) -> list[Entry]:
        """The entries in the order they are shown: in time order for a dated section, else as admitted."""
        if self.name in DATED:
            return sorted(self.entries, key=lambda e: e.order)
        return list(self.entries)

    def text(self) -> str:
        """The section's body (without its heading): date lines and items."""
        out: list[str] = []
        day: str | None = None
        for k, e in enumerate(self.ordered()):
            if e.day != day and (e.day is not None or k > 0):
                out.append(e.day if e.day is not None else UNDATED)
            day = e.day
            lines = self.line(e.item)
            if out and out[-1] == ELISION and lines.startswith(ELISION + "\n"):
                lines = lines[len(ELISION) + 1 :]  # one elision line between two excerpts, not two
            out.append(lines)
        return "\n".join(out)

    @property
    def items(self) -> list[ContextItem]:
        """The items in the order they appear in the block."""
        return [e.item for e in self.ordered()]
