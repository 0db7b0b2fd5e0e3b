"""The `leases` capability: on a provider without transactions (Pinecone), the writers of a conversation take a
lease record around each commit (datastore/locks.py), so that steps of several processes on one conversation
commit one at a time. Local and PostgreSQL commit in one transaction and offer none (`Storage.leases` is None),
so these tests run on the providers that offer it; the fast test
tests/trust/test_processes.py::test_two_processes_indexing_one_conversation_keep_its_tree_sound shows all three
providers keep one conversation's tree sound under three writers.

Each `Leases` below stands for one process (its own owner tokens); the clock is moved by hand, so a crashed
holder's lease expires without waiting for it.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from datastore.locks import Leases, SourceLocks
from datastore.memory import Memory
from datastore.storage import Lease, LeaseTable
from services.errors import ConflictError
from tests.support.clock import ManualClock

SECONDS = 30.0
WITH_LEASES = ["pinecone"]  # the providers that offer `leases`
pytestmark = pytest.mark.parametrize("provider_settings", WITH_LEASES, indirect=True)


def _table(memory: Memory) -> LeaseTable:
    table = memory.storage.leases
    assert table is not None
    return table


def test_records_are_kept_per_namespace_and_key(memory: Memory, ns: str) -> None:
    table = _table(memory)
    when = datetime(2026, 1, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    assert table.get(ns, "c") is None
    table.put(ns, "c", Lease("a", when))
    assert table.get(ns, "c") == Lease("a", when)
    assert table.get(ns + "-other", "c") is None and table.get(ns, "d") is None
    table.put(ns, "c", Lease("b", when + timedelta(seconds=5)))  # replaced
    assert table.get(ns, "c") == Lease("b", when + timedelta(seconds=5))
    table.put(ns, "\x00core:user", Lease("x", when))  # a lock key that is not a source id
    assert table.get(ns, "\x00core:user") == Lease("x", when)
    table.delete(ns, "c")
    assert table.get(ns, "c") is None and table.get(ns, "\x00core:user") is not None
    table.delete(ns, "c")  # deleting a missing lease is fine


def test_a_live_lease_keeps_other_processes_out_until_released(memory: Memory, ns: str) -> None:
    table, clock = _table(memory), ManualClock()
    one, two = Leases(table, SECONDS, 0.01, clock), Leases(table, SECONDS, 0.01, clock)
    held = one.try_take(ns, "c")
    assert held is not None and held.expires_at == clock() + timedelta(seconds=SECONDS)
    assert two.try_take(ns, "c") is None
    assert two.try_take(ns, "d") is not None  # another conversation is free
    with pytest.raises(ConflictError):  # waited its (short) life, and the holder never released
        Leases(table, 0.2, 0.01, clock).take(ns, "c")
    one.release(ns, "c", held)
    assert two.try_take(ns, "c") is not None


def test_a_crashed_holders_lease_is_taken_over_once_expired(memory: Memory, ns: str) -> None:
    table, clock = _table(memory), ManualClock()
    crashed, other = Leases(table, SECONDS, 0.01, clock), Leases(table, SECONDS, 0.01, clock)
    stale = crashed.try_take(ns, "c")  # never released
    assert stale is not None
    clock.advance(SECONDS - 1)
    assert other.try_take(ns, "c") is None
    clock.advance(2)
    taken = other.try_take(ns, "c")
    assert taken is not None
    crashed.release(ns, "c", stale)  # a late release leaves the new owner's lease alone
    assert table.get(ns, "c") == taken


class _WritesAfterEveryRead:
    """The store, with each taker's write held until every taker has read the lease (all read "free")."""

    def __init__(self, table: LeaseTable, takers: int) -> None:
        self.table, self.read = table, threading.Barrier(takers)

    def get(self, ns: str, key: str) -> Lease | None:
        return self.table.get(ns, key)

    def put(self, ns: str, key: str, lease: Lease) -> None:
        self.read.wait()
        self.table.put(ns, key, lease)

    def delete(self, ns: str, key: str) -> None:
        self.table.delete(ns, key)


def test_of_takers_racing_for_a_free_lease_one_goes_on(memory: Memory, ns: str) -> None:
    """Four processes read "free" at once and all write: each reads back after the settle wait, and only the one
    written last is still there."""
    racing, clock = _WritesAfterEveryRead(_table(memory), 4), ManualClock()
    takers = [Leases(racing, SECONDS, 0.5, clock) for _ in range(4)]
    got: list[Lease | None] = []
    threads = [threading.Thread(target=lambda t=t: got.append(t.try_take(ns, "c"))) for t in takers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [g for g in got if g is not None]
    assert len(got) == 4 and len(winners) == 1 and racing.get(ns, "c") == winners[0]


def test_the_locks_hold_the_lease_while_held_and_release_it_on_an_error(memory: Memory, ns: str) -> None:
    table, clock = _table(memory), ManualClock()
    locks, other = SourceLocks(Leases(table, SECONDS, 0.01, clock)), Leases(table, SECONDS, 0.01, clock)
    with locks(ns, "c"):
        assert table.get(ns, "c") is not None and other.try_take(ns, "c") is None
    assert table.get(ns, "c") is None
    with pytest.raises(RuntimeError), locks(ns, "c"):
        raise RuntimeError("the commit failed")
    assert table.get(ns, "c") is None and other.try_take(ns, "c") is not None
    assert memory.steps.locks.leases is not None  # the pipeline's writers of this store take them
