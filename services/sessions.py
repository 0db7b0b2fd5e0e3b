"""Sessions: which session each message of a conversation belongs to.

A conversation is a series of sessions. A message's session is, in order of precedence: its own `session_id`,
the `session_id` of the remember call, or inferred: the session of the message before it, unless SESSION_GAP_HOURS
or more passed since that message (or it is the conversation's first message), which starts a new session named
after its first message's time (`s-2024-05-01T09:30:00Z`; `s-start` when the time is unknown). Documents have
no session. A node's sessions are those of the messages it covers, in order of first appearance
(`MemoryNode.session_ids`; its first one is the node's `session_id`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from models.memory import StoredMessage


def inferred_session_id(created_at: datetime | None) -> str:
    """The name of an inferred session starting with a message sent at `created_at` (UTC, seconds)."""
    return f"s-{created_at:%Y-%m-%dT%H:%M:%SZ}" if created_at is not None else "s-start"


def assign_sessions(
    messages: Sequence[StoredMessage],
    previous: StoredMessage | None,
    explicit: dict[str, str],
    gap_hours: float,
) -> None:
    """Set `session_id` of consecutive new conversation messages (in order), in place.

    previous: the stored message just before them (None for a new conversation); explicit: message id ->
    session id given by the caller; gap_hours: the inference gap (0 = never infer a new session after the first).
    """
    gap = timedelta(hours=gap_hours) if gap_hours > 0 else None
    prev_session = previous.session_id if previous else None
    prev_time = previous.created_at if previous else None
    for m in messages:
        if m.source_type != "conversation":
            continue
        given = explicit.get(m.id)
        if given is not None:
            m.session_id = given
        elif prev_session is None:
            m.session_id = inferred_session_id(m.created_at)
        elif gap is not None and m.created_at is not None and prev_time is not None and m.created_at - prev_time >= gap:
            m.session_id = inferred_session_id(m.created_at)
        else:
            m.session_id = prev_session
        prev_session = m.session_id
        prev_time = m.created_at or prev_time


def sessions_of(messages: Iterable[StoredMessage]) -> list[str]:
    """The distinct sessions of `messages`, in order of first appearance."""
    return list(dict.fromkeys(m.session_id for m in messages if m.session_id is not None))
