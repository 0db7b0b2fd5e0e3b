"""The time the services read: one callable returning an aware UTC datetime, given to each service that needs it.

`Memory` takes a `clock` (default `system_clock`); a test passes a clock it moves by hand instead of sleeping
(tests/support/clock.py), so an expiry is tested without waiting for it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
"""() -> the current time, timezone-aware (UTC)."""


def system_clock() -> datetime:
    """The machine's time, in UTC."""
    return datetime.now(UTC)
