"""Session assignment (services/sessions.py): explicit beats the call's, else a time gap starts a new one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from models.memory import StoredMessage
from services.sessions import assign_sessions, inferred_session_id

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


def msg(i: int, minutes: float | None) -> StoredMessage:
    when = T0 + timedelta(minutes=minutes) if minutes is not None else None
    return StoredMessage(id=f"m{i}", source_id="c", seq=i, speaker="a", content="x", created_at=when)


def test_gap_starts_a_new_inferred_session() -> None:
    ms = [msg(0, 0), msg(1, 10), msg(2, 10 + 4 * 60), msg(3, None), msg(4, 10 + 4 * 60 + 5)]
    assign_sessions(ms, None, {}, gap_hours=4)
    first, second = inferred_session_id(ms[0].created_at), inferred_session_id(ms[2].created_at)
    assert first != second
    assert [m.session_id for m in ms] == [first, first, second, second, second]


def test_explicit_sessions_and_continuation_from_the_stored_message() -> None:
    prev = msg(0, 0)
    prev.session_id = "monday"
    ms = [msg(1, 1), msg(2, 2), msg(3, 3)]
    assign_sessions(ms, prev, {"m2": "tuesday"}, gap_hours=4)
    assert [m.session_id for m in ms] == ["monday", "tuesday", "tuesday"]


def test_gap_zero_never_infers_and_untimed_first_message() -> None:
    ms = [msg(0, None), msg(1, 60 * 24 * 30)]
    assign_sessions(ms, None, {}, gap_hours=0)
    assert [m.session_id for m in ms] == ["s-start", "s-start"]
