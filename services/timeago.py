"""Relative times for people: "just now", "5 minutes ago", "3 days ago", "2 years ago" (or "in 3 days")."""

from __future__ import annotations

from datetime import datetime

_UNITS = (
    (365 * 86400, "year"),
    (30 * 86400, "month"),
    (7 * 86400, "week"),
    (86400, "day"),
    (3600, "hour"),
    (60, "minute"),
)
_MIN = {"year": 1, "month": 2, "week": 2, "day": 1, "hour": 1, "minute": 1}  # below 2 weeks say days, etc.


def time_ago(when: datetime | None, now: datetime) -> str:
    """`when` relative to `now` (both aware): "just now" under a minute, else the largest fitting unit, counted
    down ("3 days ago", "1 hour ago"); days up to 13, weeks up to 8, months up to 11; "in ..." for the future;
    "at an unknown time" for None."""
    if when is None:
        return "at an unknown time"
    seconds = (now - when).total_seconds()
    future, seconds = seconds < 0, abs(seconds)
    for size, unit in _UNITS:
        count = int(seconds // size)
        if count >= _MIN[unit]:
            words = f"{count} {unit}{'s' if count != 1 else ''}"
            return f"in {words}" if future else f"{words} ago"
    return "just now"
