"""What every writer of the pipeline shares: one lock per source, and one way to retry a commit that lost a race.

Writers of one source are serialised in-process by `SourceLocks` and across processes by the source's version
number, checked by `Storage.commit` (a stale writer gets ConflictError and recomputes from the new state). That
check is enough where the provider checks and writes in one transaction (SQLite, PostgreSQL). A provider without
transactions (Pinecone) reads the version, then writes: two processes can both pass the check. There the store
offers `Storage.leases`, and `SourceLocks` also holds a `Leases` lease on the key, across processes, for as long
as it holds the in-process lock (a commit and the reads that check it): one path for every provider, the lease
its parameter.

Taking a lease (Fischer's mutual exclusion over plain reads and writes): read the record; if another owner's
lease is live, wait and read again; else write one's own (a fresh random owner token, expiring LEASE_SECONDS
from now), wait LEASE_SETTLE_SECONDS, read it back: still one's own -> held; else another process wrote after
us, so wait and start again. Two takers that both read "free" both write, and each reads back the one written
last: only that one goes on, provided each taker's write lands within LEASE_SETTLE_SECONDS of its read and reads
see the writes before them (a consistent store; on Pinecone serverless, which is eventually consistent, the lease
narrows the window but cannot close it: README, "Pinecone"). A holder that crashed leaves its lease to expire;
the next taker takes it over. Expiry compares the injected clock's times across processes (synchronised clocks).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import TypeVar

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from datastore.storage import Lease, LeaseTable
from services.clock import Clock, system_clock
from services.errors import ConflictError

T = TypeVar("T")
COMMIT_ATTEMPTS = 12


class Leases:
    """Takes and releases leases over a provider's `LeaseTable` (the protocol in the module docstring).

    table: the provider's lease records. seconds: LEASE_SECONDS, a lease's life. settle: LEASE_SETTLE_SECONDS,
    the wait between writing a lease and reading it back. clock: the time a lease expires by (injected).
    """

    def __init__(self, table: LeaseTable, seconds: float, settle: float, clock: Clock = system_clock) -> None:
        self.table = table
        self.seconds = seconds
        self.settle = settle
        self.clock = clock

    def try_take(self, ns: str, key: str) -> Lease | None:
        """One try: the lease taken (held until `release`), or None when another owner holds a live one or
        wrote its own meanwhile."""
        held = self.table.get(ns, key)
        if held is not None and held.expires_at > self.clock():
            return None
        mine = Lease(uuid.uuid4().hex, self.clock() + timedelta(seconds=self.seconds))
        self.table.put(ns, key, mine)
        if self.settle:
            time.sleep(self.settle)  # the protocol's wait: a taker that read "free" before our write writes by now
        back = self.table.get(ns, key)
        return mine if back is not None and back.owner == mine.owner else None

    def take(self, ns: str, key: str) -> Lease:
        """The lease, waiting (jittered, a few settle times a try) while another process holds it, at most
        LEASE_SECONDS and a little (by then a crashed holder's lease has expired). Raises ConflictError when it
        stays held (the caller's retry_conflicts tries again later)."""
        deadline = time.monotonic() + self.seconds + 4 * self.settle
        while True:
            lease = self.try_take(ns, key)
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                what = "conversation_id" if not key.startswith("\x00") else None  # core's and instructions' keys
                raise ConflictError(f"{key!r} is being written by another process", what)
            time.sleep(max(self.settle, 0.01) * random.uniform(1.0, 3.0))  # noqa: S311 (jitter, not secrecy)

    def release(self, ns: str, key: str, lease: Lease) -> None:
        """Remove the lease when it is still ours (an expired one taken over by another process is left)."""
        held = self.table.get(ns, key)
        if held is not None and held.owner == lease.owner:
            self.table.delete(ns, key)

    @contextmanager
    def held(self, ns: str, key: str) -> Iterator[Lease]:
        """`with leases.held(ns, key):` takes the lease, releases it on leaving (an exception too)."""
        lease = self.take(ns, key)
        try:
            yield lease
        finally:
            self.release(ns, key, lease)


class SourceLocks:
    """One `threading.Lock` per (namespace, key), where a key is a source id or another name a writer
    serialises on (core memory uses its scope). A lock that no thread holds or waits for is dropped (the table
    keeps weak references), so the table does not grow with every source ever written.

    leases: the store's cross-process leases (a provider without transactions); None: the in-process lock
    alone (the store's commit is atomic).
    """

    def __init__(self, leases: Leases | None = None) -> None:
        self._locks: weakref.WeakValueDictionary[tuple[str, str], threading.Lock] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()
        self.leases = leases

    def __call__(self, ns: str, key: str) -> AbstractContextManager[object]:
        """The lock of (ns, key), with the key's lease when the store has leases; hold it with
        `with locks(ns, key):` (the `with` keeps it alive). Entering may raise ConflictError (the lease stayed
        held by another process)."""
        with self._guard:
            lock = self._locks.get((ns, key))
            if lock is None:
                lock = self._locks[(ns, key)] = threading.Lock()
        if self.leases is None:
            return lock
        return self._leased(lock, self.leases, ns, key)

    @staticmethod
    @contextmanager
    def _leased(lock: threading.Lock, leases: Leases, ns: str, key: str) -> Iterator[object]:
        with lock, leases.held(ns, key):
            yield lock

    def __len__(self) -> int:
        return len(self._locks)


def retry_conflicts(attempt: Callable[[], T], message: str, field: str | None) -> T:
    """Run `attempt` until it returns without ConflictError, at most COMMIT_ATTEMPTS times, sleeping a jittered,
    growing delay (to ~0.5 s) between tries, so a writer in another process that keeps committing to the same
    source cannot starve this one. An attempt recomputes from the stored state; raising ConflictError is how it
    says the state moved under it. Raises ConflictError(message, field) when every attempt conflicted."""
    retrying = Retrying(
        retry=retry_if_exception_type(ConflictError),
        stop=stop_after_attempt(COMMIT_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.01, max=0.5),
    )
    try:
        return retrying(attempt)
    except RetryError as exc:
        raise ConflictError(message, field) from exc
