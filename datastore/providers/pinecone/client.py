"""The Pinecone store's calls to one index: records fetched, listed, selected, upserted, updated and deleted,
each SDK call retried and batched, a text split over part records joined back on every read.

`RecordClient` is the one interface the store and its capability tables (core, marks, instructions,
idempotency, leases) share: the store builds it over the SDK's index handle and passes it to each table's
constructor, so no table reaches into the store. Record ids and metadata codecs are `records.py`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from pinecone import ApiError, PineconeConnectionError, PineconeTimeoutError
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from datastore.providers.pinecone import records as rec
from services.errors import StoreUnavailableError

BATCH = 100  # records per upsert, ids per fetch, ids per `$in` filter
_DELETE_BATCH = 1000  # ids per delete call (Pinecone's cap)
_QUERY_CAP = 1000  # Pinecone's top_k cap when metadata or values are returned
_T = TypeVar("_T")

Record = tuple[str, list[float], dict[str, Any]]  # (record id, values, metadata)


def _retryable(exc: BaseException) -> bool:
    """True for rate limits (429), server errors (5xx), timeouts and dropped connections."""
    if isinstance(exc, ApiError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(exc, PineconeConnectionError | PineconeTimeoutError)


# The SDK already retries each HTTP request (3 times) on 408/429/5xx; this outer layer retries the whole
# operation on what survives that (a longer rate limit, a restarting host), with exponential backoff and jitter.
retried = retry(
    retry=retry_if_exception(_retryable),
    wait=wait_exponential_jitter(multiplier=0.5, max=20),
    stop=stop_after_attempt(4),
    reraise=True,
)


def chunks(items: Sequence[_T], size: int) -> Iterable[Sequence[_T]]:
    """`items` in consecutive slices of at most `size`."""
    return (items[i : i + size] for i in range(0, len(items), size))


class RecordClient:
    """The records of one Pinecone index. index: the SDK's data-plane handle (`Pinecone(...).Index(host=...)`);
    dimension: the index's, for the dummy vector; location: what an unreachable-store error names."""

    def __init__(self, index: Any, dimension: int, location: str) -> None:
        self.index = index
        self.location = location
        self.dummy = [1.0] + [0.0] * (dimension - 1)  # cosine indexes refuse all-zero vectors

    def call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """fn retried; a store that still does not answer is a StoreUnavailableError naming the index."""
        try:
            return retried(fn)(*args, **kwargs)
        except (PineconeConnectionError, PineconeTimeoutError) as exc:
            raise StoreUnavailableError(f"the pinecone store ({self.location}) is unreachable: {exc}") from exc

    def stats(self) -> Any:
        """The index's `describe_index_stats` answer (dimension, metric, namespaces)."""
        return self.call(self.index.describe_index_stats)

    def fetch(self, ns: str, ids: Sequence[str], values: bool = False) -> dict[str, dict[str, Any]]:
        """{record id: metadata} of the ids present (with `_values` when asked), parts joined."""
        out: dict[str, dict[str, Any]] = {}
        for part in chunks(list(dict.fromkeys(ids)), BATCH):
            res = self.call(self.index.fetch, ids=list(part), namespace=ns)
            for rid, v in res.vectors.items():
                out[rid] = dict(v.metadata or {}, **({"_values": v.values} if values else {}))
        return self._join_parts(ns, out)

    def _join_parts(self, ns: str, recs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        wanted = {
            rid: [f"{rid}#p{i}" for i in range(1, int(m["parts"]) + 1)] for rid, m in recs.items() if m.get("parts")
        }
        if wanted:
            parts = self.fetch(ns, [p for ids in wanted.values() for p in ids])
            for rid, ids in wanted.items():
                recs[rid][rec.TEXT_FIELD[recs[rid]["kind"]]] = "".join(parts[p]["text"] for p in ids)
        return recs

    def list_ids(self, ns: str, prefix: str) -> list[str]:
        """Every record id of the namespace starting with `prefix` (paginated list)."""
        ids: list[str] = []
        token = None
        while True:
            page = self.call(self.index.list_paginated, prefix=prefix, limit=100, pagination_token=token, namespace=ns)
            ids += [v.id for v in page.vectors if v.id]
            token = page.pagination.next if page.pagination else None
            if not token:
                return ids

    def select(self, ns: str, flt: dict[str, Any], prefix: str, values: bool = False) -> dict[str, dict[str, Any]]:
        """{record id: metadata} of every record matching `flt` (records under `prefix` only).

        A filtered query answers while it returns fewer than its cap; at the cap the prefix is listed, fetched
        and filtered here, so a result is never silently cut at 1000.
        """
        res = self.call(
            self.index.query,
            vector=self.dummy,
            top_k=_QUERY_CAP,
            namespace=ns,
            filter=flt,
            include_metadata=True,
            include_values=values,
        )
        if len(res.matches) < _QUERY_CAP:
            recs = {m.id: dict(m.metadata or {}, **({"_values": m.values} if values else {})) for m in res.matches}
            return self._join_parts(ns, recs)
        recs = self.fetch(ns, rec.main_ids(self.list_ids(ns, prefix)), values)
        return {rid: m for rid, m in recs.items() if rec.matches(m, flt)}

    def upsert(self, ns: str, records: list[Record]) -> None:
        """Write these records (replacing any with the same id), a batch at a time."""
        for part in chunks(records, BATCH):
            self.call(
                self.index.upsert,
                vectors=[{"id": i, "values": v, "metadata": m} for i, v, m in part],
                namespace=ns,
                show_progress=False,
            )

    def update_metadata(self, ns: str, rid: str, meta: dict[str, Any]) -> None:
        """Set these metadata fields of one record, its values kept."""
        self.call(self.index.update, id=rid, namespace=ns, set_metadata=meta)

    def delete(self, ns: str, ids: Sequence[str]) -> None:
        """Delete these record ids (absent ones are ignored)."""
        for part in chunks(list(ids), _DELETE_BATCH):
            self.call(self.index.delete, ids=list(part), namespace=ns)

    def delete_all(self, ns: str) -> None:
        """Delete every record of the namespace."""
        self.call(self.index.delete, delete_all=True, namespace=ns)
