"""The Pinecone store's `leases` capability: a key's lease as the `lease#<h(key)>` record of the namespace (dummy
vector; owner token and expiry in the metadata). Pinecone has no transactions, so a commit's version check and
its writes can interleave with another process's; the writers' locks (datastore/locks.py) take these records
around each commit so that they serialise across processes too.

A released lease is deleted; one left by a crashed process expires and is replaced by the next taker, and
`delete_all` of the namespace removes it with everything else. Exports and migrations list other prefixes only.
"""

from __future__ import annotations

from datastore.providers.pinecone import records as rec
from datastore.providers.pinecone.client import RecordClient
from datastore.storage import Lease


def record_id(key: str) -> str:
    """The record id of a key's lease."""
    return f"lease#{rec.h(key)}"


class PineconeLeases:
    """LeaseTable over `lease#` records."""

    def __init__(self, client: RecordClient) -> None:
        self.client = client

    def get(self, ns: str, key: str) -> Lease | None:
        """The key's lease in the namespace (an expired one too), or None."""
        m = self.client.fetch(ns, [record_id(key)]).get(record_id(key))
        if m is None or m.get("key") != key:
            return None
        expires = rec.dt(m["expires_at"])
        assert expires is not None
        return Lease(m["owner"], expires)

    def put(self, ns: str, key: str, lease: Lease) -> None:
        """Write the key's lease (replacing any)."""
        meta = {"kind": "lease", "key": key, "owner": lease.owner, "expires_at": rec.ts(lease.expires_at)}
        self.client.upsert(ns, [(record_id(key), self.client.dummy, meta)])

    def delete(self, ns: str, key: str) -> None:
        """Remove the key's lease record."""
        self.client.delete(ns, [record_id(key)])
