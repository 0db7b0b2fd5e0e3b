"""Times: every datetime Pyramind stores or compares is aware and in UTC."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


@overload
def utc(dt: datetime) -> datetime: ...


@overload
def utc(dt: None) -> None: ...


def utc(dt: datetime | None) -> datetime | None:
    """Aware UTC datetime (naive input is taken as UTC); None stays None."""
    if dt is None:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
