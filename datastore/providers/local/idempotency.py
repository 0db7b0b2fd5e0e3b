"""The local store's `idempotency` capability: the answers of keyed writes in the `idempotency` table."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from datastore.providers.local.codecs import dt, ts
from datastore.providers.local.connections import Connections
from datastore.storage import IdempotencyRecord

COLS = "key, operation, fingerprint, status, response, created_at"


def _record(row: tuple[Any, ...]) -> IdempotencyRecord:
    """A row of COLS as a record."""
    created = dt(row[5])
    assert created is not None
    return IdempotencyRecord(row[0], row[1], row[2], row[3], row[4], created)


class LocalIdempotency:
    """IdempotencyTable over the idempotency table (one row per namespace and key)."""

    def __init__(self, db: Connections) -> None:
        self.db = db

    def get(self, ns: str, key: str) -> IdempotencyRecord | None:
        """The key's record in the namespace, or None."""
        row = self.db.reader.execute(f"SELECT {COLS} FROM idempotency WHERE namespace = ? AND key = ?", (ns, key))
        found = row.fetchone()
        return _record(found) if found is not None else None

    def entries(self, ns: str) -> list[IdempotencyRecord]:
        """Every record of the namespace, by key."""
        rows = self.db.reader.execute(f"SELECT {COLS} FROM idempotency WHERE namespace = ? ORDER BY key", (ns,))
        return [_record(r) for r in rows.fetchall()]

    def put(self, ns: str, record: IdempotencyRecord, expired_before: datetime) -> None:
        """Store the record (replacing the key's) and drop the namespace's expired ones, in one transaction."""
        with self.db.transaction() as db:
            db.execute("DELETE FROM idempotency WHERE namespace = ? AND created_at < ?", (ns, ts(expired_before)))
            db.execute(
                "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    ns,
                    record.key,
                    record.operation,
                    record.fingerprint,
                    record.status,
                    record.response,
                    ts(record.created_at),
                ),
            )
