"""The `idempotency` capability on every provider (local, postgres, pinecone): the answer to a keyed write is
kept per namespace, survives reopening the store, expires after 24 hours and refuses a reused key with another
body; the Idempotency service above it is the same for all three."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from datastore.memory import Memory
from datastore.storage import IdempotencyRecord
from datastore.write.idempotency import IDEMPOTENCY_TTL, Idempotency
from services.errors import InvalidRequestError
from tests.support.clock import ManualClock


def test_records_are_kept_per_namespace_and_replaced_by_key(memory: Memory, ns: str) -> None:
    table = memory.storage.idempotency
    assert table is not None
    now = datetime.now(UTC).replace(microsecond=0)
    first = IdempotencyRecord("k-1", "remember", "f1", 202, '{"conversation_id": "c"}', now)
    table.put(ns, first, now - IDEMPOTENCY_TTL)
    assert table.get(ns, "k-1") == first
    assert table.get(ns + "-other", "k-1") is None and table.get(ns, "k-2") is None
    big = "x" * 60_000  # over Pinecone's 40 KB of metadata: kept in parts, read back whole
    second = IdempotencyRecord("k-1", "upsert", "f2", 200, f'{{"ids": ["{big}"]}}', now + timedelta(seconds=1))
    table.put(ns, second, now - IDEMPOTENCY_TTL)
    assert table.get(ns, "k-1") == second
    other = IdempotencyRecord("k-0", "remember", "f0", 200, "{}", now - IDEMPOTENCY_TTL - timedelta(hours=1))
    table.put(ns, other, now - 2 * IDEMPOTENCY_TTL)
    assert table.entries(ns) == [other, second]  # every record by key, expired ones too (what migrate carries)
    assert table.entries(ns + "-other") == []


def test_the_service_replays_refuses_and_forgets_after_the_ttl(open_store: Callable[..., Memory], ns: str) -> None:
    memory = open_store()
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    service = Idempotency(memory.storage.idempotency, clock=clock)
    body = {"messages": [{"content": "hello"}]}
    assert service.replay(ns, "key", "remember", body) is None
    service.keep(ns, "key", "remember", body, 202, '{"conversation_id": "c"}')
    memory.close()
    again = Idempotency(open_store().storage.idempotency, clock=clock)  # a new process, same store
    kept = again.replay(ns, "key", "remember", body)
    assert kept is not None and (kept.status, kept.response) == (202, '{"conversation_id": "c"}')
    with pytest.raises(InvalidRequestError) as err:
        again.replay(ns, "key", "remember", {"messages": [{"content": "another"}]})
    assert err.value.field == "Idempotency-Key"
    with pytest.raises(InvalidRequestError):
        again.replay(ns, "key", "upsert", body)
    assert again.replay(ns + "-other", "key", "remember", {"x": 1}) is None  # keys are per namespace
    clock.advance((IDEMPOTENCY_TTL + timedelta(seconds=1)).total_seconds())
    assert again.replay(ns, "key", "remember", {"messages": [{"content": "another"}]}) is None  # expired
