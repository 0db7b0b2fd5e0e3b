"""A clock a test moves by hand (`Memory(..., clock=clock)`), instead of sleeping until something expires."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class ManualClock:
    """Starts at `start` (default: the machine's time now) and only moves when `advance` is called."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock `seconds` forward."""
        self.now += timedelta(seconds=seconds)
