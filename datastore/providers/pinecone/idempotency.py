"""The Pinecone store's `idempotency` capability: the answers of keyed writes as `idem#k#<h(key)>` records of the
namespace (dummy vector; the answer's JSON in `text`, split into part records when over the metadata limit).

Expired records are not listed and dropped (that would list the namespace's records on every write): a get
returns them and the service ignores them, a new answer to the key replaces them, and `delete_all` of the
namespace removes them with everything else.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from datastore.providers.pinecone import records as rec
from datastore.providers.pinecone.client import RecordClient
from datastore.storage import IdempotencyRecord


def record_id(key: str) -> str:
    """The record id of a key (three `#`, so that its part records are recognised as parts)."""
    return f"idem#k#{rec.h(key)}"


def _record(m: dict[str, Any]) -> IdempotencyRecord:
    """An `idem#` record's metadata (parts joined) as a record."""
    created = rec.dt(m["created_at"])
    assert created is not None
    return IdempotencyRecord(m["key"], m["operation"], m["fingerprint"], int(m["status"]), m["text"], created)


class PineconeIdempotency:
    """IdempotencyTable over `idem#` records."""

    def __init__(self, client: RecordClient) -> None:
        self.client = client

    def get(self, ns: str, key: str) -> IdempotencyRecord | None:
        """The key's record in the namespace, or None."""
        m = self.client.fetch(ns, [record_id(key)]).get(record_id(key))
        if m is None or m.get("key") != key:
            return None
        return _record(m)

    def entries(self, ns: str) -> list[IdempotencyRecord]:
        """Every record of the namespace, by key (the `idem#k#` prefix listed, then fetched)."""
        found = self.client.fetch(ns, rec.main_ids(self.client.list_ids(ns, "idem#k#")))
        return sorted((_record(m) for m in found.values()), key=lambda r: r.key)

    def put(self, ns: str, record: IdempotencyRecord, expired_before: datetime) -> None:
        """Store the record, replacing the key's (its old part records are overwritten or left unreferenced)."""
        meta: dict[str, Any] = {
            "kind": "idem",
            "key": record.key,
            "operation": record.operation,
            "fingerprint": record.fingerprint,
            "status": record.status,
            "text": record.response,
            "created_at": rec.ts(record.created_at),
        }
        packed = rec.pack(record_id(record.key), meta, "text")
        self.client.upsert(ns, [(rid, self.client.dummy, m) for rid, m in packed])
