"""datastore/write/order.py: where a late message goes (pure logic, no store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from datastore.write.order import place
from models.memory import StoredMessage

T0 = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)


def msg(mid: str, minute: int | None) -> StoredMessage:
    return StoredMessage(
        id=mid,
        source_id="c",
        seq=0,
        speaker="Ann",
        content=mid,
        created_at=None if minute is None else T0 + timedelta(minutes=minute),
    )


def ids(messages: list[StoredMessage]) -> list[str]:
    return [m.id for m in messages]


def test_place_inserts_by_time_and_keeps_what_has_no_time_attached() -> None:
    stored = [msg("a", 0), msg("b", 1), msg("u", None), msg("c", 3)]
    assert ids(place(stored, [msg("d", 4)])) == ["a", "b", "u", "c", "d"]  # the usual case: appended
    assert ids(place(stored, [msg("x", 2)])) == ["a", "b", "u", "x", "c"]  # after the untimed one that follows b
    assert ids(place(stored, [msg("x", 1)])) == ["a", "b", "u", "x", "c"]  # equal times: the stored one first
    assert ids(place(stored, [msg("x", -5)])) == ["x", "a", "b", "u", "c"]
    # a call's messages keep their order: an untimed one follows the one before it, a later one never precedes it
    assert ids(place(stored, [msg("x", 0), msg("y", None), msg("z", 0)])) == ["a", "x", "y", "z", "b", "u", "c"]
    assert ids(place(stored, [msg("y", None)])) == ["a", "b", "u", "c", "y"]
    assert ids(place([], [msg("x", 5), msg("y", 1)])) == ["x", "y"]
