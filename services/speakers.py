"""Who is speaking: a person (a chat app's `user`, LoCoMo's named people) or the machinery (the assistant).

The summaries keep what each person's message brought up, the standing-instruction detector reads only people's
sentences, and the context block prefers their words: one rule for all of them.
"""

from __future__ import annotations

NON_HUMAN_SPEAKERS = frozenset({"assistant", "system", "tool", "bot", "ai", "function", "developer"})
"""Speakers (case-insensitive) that are not a person: the assistant and the machinery."""


def is_human(speaker: str | None) -> bool:
    """Whether a message's speaker (or role) is a person: anything but NON_HUMAN_SPEAKERS (None, a document's
    text, is not)."""
    return speaker is not None and speaker.strip().casefold() not in NON_HUMAN_SPEAKERS
