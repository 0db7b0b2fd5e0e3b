"""Who is speaking: a person (a chat app's `user`, LoCoMo's named people) or the machinery (the assistant).

The summaries keep what each person's message brought up, the standing-instruction detector reads only people's
sentences, and the context block prefers their words: one rule for all of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

NON_HUMAN_SPEAKERS = frozenset({"assistant", "system", "tool", "bot", "ai", "function", "developer"})
"""Speakers (case-insensitive) that are not a person: the assistant and the machinery."""


def is_human(speaker: str | None) -> bool:
    """Whether a message's speaker (or role) is a person: anything but NON_HUMAN_SPEAKERS (None, a document's
    text, is not)."""
    return speaker is not None and speaker.strip().casefold() not in NON_HUMAN_SPEAKERS


SENTENCE_ENDS = '.!?:;"\u201c('
"""What may stand before a word that opens a sentence (or a quote)."""

ROLE_SPEAKERS = frozenset({"user", "human", "me", "you"})
"""Speakers (case-insensitive) that are a chat app's role for a person, not a name a question could say."""


def named_in(text: str, speakers: Iterable[str]) -> set[str]:
    """The speakers whose name `text` says as a word, as written ("Jon" in "What book is Jon reading?" and in
    "Jon's"; not in "John" nor "jon"): people only, not a chat app's roles (ROLE_SPEAKERS) nor the machinery. A
    name that opens a sentence counts only as a possessive ("Will's"): there it may be a word ("Will you ...",
    "May I ...", "Mark it done")."""
    names = {s.strip() for s in speakers if is_human(s) and s.strip() and s.strip().casefold() not in ROLE_SPEAKERS}
    out: set[str] = set()
    for name in names:
        for m in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", text):
            opens = not text[: m.start()].strip() or text[: m.start()].rstrip()[-1] in SENTENCE_ENDS
            if not opens or text[m.end() :].startswith(("'s", "\u2019s")):
                out.add(name)
                break
    return out
