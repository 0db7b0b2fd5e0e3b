"""What every writer of the pipeline shares: one lock per source, and one way to retry a commit that lost a race.

Writers of one source are serialised in-process by `SourceLocks` and across processes by the source's version
number, checked by `Storage.commit` (a stale writer gets ConflictError and recomputes from the new state).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from services.errors import ConflictError

T = TypeVar("T")
COMMIT_ATTEMPTS = 12


class SourceLocks:
    """One `threading.Lock` per (namespace, key), where a key is a source id or another name a writer
    serialises on (core memory uses its scope). A lock that no thread holds or waits for is dropped (the table
    keeps weak references), so the table does not grow with every source ever written."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[tuple[str, str], threading.Lock] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()

    def __call__(self, ns: str, key: str) -> threading.Lock:
        """The lock of (ns, key); hold it with `with locks(ns, key):` (the `with` keeps it alive)."""
        with self._guard:
            lock = self._locks.get((ns, key))
            if lock is None:
                lock = self._locks[(ns, key)] = threading.Lock()
            return lock

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
