"""Idempotent writes: the answer to a write sent with an Idempotency-Key, kept for IDEMPOTENCY_TTL per namespace.

A repeat of the same key with the same body within the TTL is answered with the first answer and stores nothing;
the same key with another body is an InvalidRequestError naming `Idempotency-Key`. The records are kept by the
storage's `idempotency` capability (datastore/storage.py), where the memory is kept, so they survive a restart
and are shared by every process over the same store. The HTTP header and the MCP argument are server/'s.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from datastore.storage import IdempotencyRecord, IdempotencyTable
from services.clock import Clock, system_clock
from services.errors import InvalidRequestError, UnsupportedError

IDEMPOTENCY_TTL = timedelta(hours=24)
KEY_FIELD = "Idempotency-Key"


def fingerprint(operation: str, body: dict[str, Any]) -> str:
    """sha256 of the operation and the canonical JSON of the request body (keys sorted)."""
    text = json.dumps([operation, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Idempotency:
    """replay and keep the answers of keyed writes.

    table: the storage's `idempotency` capability (None: a keyed write raises UnsupportedError). clock: the
    current time (services/clock.py; tests move one by hand).
    """

    def __init__(self, table: IdempotencyTable | None, clock: Clock = system_clock) -> None:
        self.table = table
        self.clock = clock

    def replay(self, ns: str, key: str, operation: str, body: dict[str, Any]) -> IdempotencyRecord | None:
        """The first answer to this key within the TTL, or None (none yet, or expired). Raises InvalidRequestError
        (`Idempotency-Key`) when the key was used with another operation or body, UnsupportedError without the
        capability."""
        if self.table is None:
            raise UnsupportedError("this store keeps no idempotency keys", KEY_FIELD)
        found = self.table.get(ns, key)
        if found is None or found.created_at < self.clock() - IDEMPOTENCY_TTL:
            return None
        if found.operation != operation or found.fingerprint != fingerprint(operation, body):
            raise InvalidRequestError(
                f"this Idempotency-Key was used with another request in the last "
                f"{int(IDEMPOTENCY_TTL.total_seconds() // 3600)} hours; use a new key for a new request",
                KEY_FIELD,
            )
        return found

    def keep(self, ns: str, key: str, operation: str, body: dict[str, Any], status: int, response: str) -> None:
        """Keep the answer (`status`, `response` JSON) to the key, dropping the namespace's expired records."""
        if self.table is None:
            raise UnsupportedError("this store keeps no idempotency keys", KEY_FIELD)
        now = self.clock()
        record = IdempotencyRecord(key, operation, fingerprint(operation, body), status, response, now)
        self.table.put(ns, record, now - IDEMPOTENCY_TTL)
