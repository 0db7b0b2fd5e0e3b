"""The Idempotency-Key header of POST /remember and POST /upsert (and the MCP `remember` tool's `idempotency_key`).

`once` runs a write at most once per (namespace, key) within 24 hours: a repeat with the same body is answered
with the first answer (status and body) and stores nothing; the same key with another body is a 422 naming
`Idempotency-Key`. The answers are kept by the Memory's `idempotency` service (datastore/write/idempotency.py),
in the store; calls with one key are serialised in this process, so two concurrent retries store once.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel

from datastore.memory import Memory
from models.api import RememberRequest, RememberResponse
from server.common import off_loop

R = TypeVar("R", bound=BaseModel)

IDEMPOTENCY_KEY_DESCRIPTION = (
    "Any unique string (e.g. a UUID) per logical request; a retry with the same key within 24 hours answers "
    "what the first call answered and stores nothing twice. The same key with a different body is a 422."
)
_locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = weakref.WeakValueDictionary()


async def once(
    memory: Memory,
    ns: str,
    key: str | None,
    operation: str,
    request: BaseModel,
    answer: type[R],
    run: Callable[[], Awaitable[tuple[R, int]]],
) -> tuple[R, int]:
    """`run()` (an answer and its status, 200 or 202) once per key: without a key it just runs; with one, a
    repeat within the TTL replays the kept answer. The request body (less its namespace, which scopes the key) is
    what must match. Raises InvalidRequestError (`Idempotency-Key`) for a key reused with another body."""
    if key is None:
        return await run()
    body = request.model_dump(mode="json", exclude={"namespace"})
    lock = _locks.setdefault((ns, key), asyncio.Lock())
    async with lock:
        kept = await off_loop(memory.idempotency.replay, ns, key, operation, body)
        if kept is not None:
            return answer.model_validate_json(kept.response), kept.status
        result, status = await run()
        await off_loop(memory.idempotency.keep, ns, key, operation, body, status, result.model_dump_json())
        return result, status


async def remember_once(
    memory: Memory,
    ns: str,
    key: str | None,
    request: RememberRequest,
    run: Callable[[], Awaitable[tuple[RememberResponse, int]]],
) -> tuple[RememberResponse, int]:
    """`once` for a remember call (REST and MCP alike)."""
    return await once(memory, ns, key, "remember", request, RememberResponse, run)
