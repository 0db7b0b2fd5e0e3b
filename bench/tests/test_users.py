"""bench.users' split of the Zipf latencies by what was in flight beside each request."""

from __future__ import annotations

from bench.users import by_overlap


def test_requests_are_grouped_by_the_most_in_flight_beside_them() -> None:
    spans = [
        (0.0, 0.05),  # alone
        (1.0, 1.10),  # beside (1.05, 1.2) only
        (1.05, 1.20),  # beside (1.0, 1.1), then (1.15, 1.3): one at a time
        (1.15, 1.30),  # beside (1.05, 1.2) only
        (2.0, 2.30),  # beside (2.1, 2.2) and (2.15, 2.25) at once
        (2.1, 2.20),
        (2.15, 2.25),
        (3.0, 3.01),  # ends before the next starts: alone
        (3.01, 3.02),
    ]
    groups = by_overlap(spans)
    assert {k: v["n"] for k, v in groups.items()} == {"0": 3, "1": 3, "2+": 3}
    assert round(groups["0"]["p50"]) == 10 and round(groups["2+"]["p50"]) == 100
