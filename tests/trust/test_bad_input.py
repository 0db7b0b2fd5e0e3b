"""Hostile bodies and methods on the real app in-process: each gets a 4xx in the one JSON error shape, and
nothing is written.

Undecodable bytes, 10 MB bodies (with and without Content-Length), JSON nested 10,000 deep, bodies that are JSON
but not declared as JSON, methods a route does not take. Each case that could be accepted carries a valid
remember body, so a wrongly accepted request would show up in the row counts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from datastore.memory import Memory
from tests.server.test_api import is_error
from tests.support.settings import AUTH
from tests.support.stores import local_storage

VALID = json.dumps({"conversation_id": "bad-input", "messages": [{"id": "m1", "content": "hello there"}]})
JSON = {"Content-Type": "application/json"}
TEN_MB = 10 * 1024 * 1024
DEEP = 10_000
TOO_LARGE = f"larger than {4 * 1024 * 1024} bytes (MAX_BODY_BYTES)"


def counts(memory: Memory) -> tuple[int, ...]:
    """Rows of every table a write touches, over all namespaces."""
    db = local_storage(memory).db.reader
    return tuple(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("sources", "messages", "nodes"))


CASES = [
    # (name, method, path, body, headers, status, code)
    (
        "invalid utf-8",
        "POST",
        "/remember",
        b'{"messages": [{"content": "caf\xc3\x28 \xff\xfe"}]}',
        JSON,
        400,
        "invalid_json",
    ),
    (
        "latin-1 declared",
        "POST",
        "/remember",
        VALID.replace("hello", "caf\xe9").encode("latin-1"),
        {"Content-Type": "application/json; charset=latin-1"},
        400,
        "invalid_json",
    ),
    ("utf-16", "POST", "/remember", VALID.encode("utf-16"), JSON, 400, "invalid_json"),
    (
        "gzip not supported",
        "POST",
        "/remember",
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00",
        {**JSON, "Content-Encoding": "gzip"},
        400,
        "invalid_json",
    ),
    (
        "10 MB of JSON",
        "POST",
        "/remember",
        json.dumps({"messages": [{"content": "x" * TEN_MB}]}).encode(),
        JSON,
        413,
        None,
    ),
    ("10 MB query", "POST", "/query", b'{"queries": [{"query": "' + b"y" * TEN_MB + b'"}]}', JSON, 413, None),
    ("arrays 10000 deep", "POST", "/remember", b"[" * DEEP + b"]" * DEEP, JSON, 400, "invalid_json"),
    ("objects 10000 deep", "POST", "/query", b'{"a":' * DEEP + b"1" + b"}" * DEEP, JSON, 400, "invalid_json"),
    (
        "deep inside a field",
        "POST",
        "/remember",
        b'{"messages": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        JSON,
        400,
        "invalid_json",
    ),
    (
        "deep in a filter",
        "DELETE",
        "/delete",
        b'{"filter": ' + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"}",
        JSON,
        400,
        "invalid_json",
    ),
    ("text/plain", "POST", "/remember", VALID.encode(), {"Content-Type": "text/plain"}, 400, "invalid_request"),
    (
        "form-encoded",
        "POST",
        "/remember",
        b"conversation_id=bad-input&messages=hello",
        {"Content-Type": "application/x-www-form-urlencoded"},
        400,
        "invalid_request",
    ),
    (
        "multipart",
        "POST",
        "/remember",
        b'--b\r\nContent-Disposition: form-data; name="messages"\r\n\r\nhi\r\n--b--\r\n',
        {"Content-Type": "multipart/form-data; boundary=b"},
        400,
        "invalid_request",
    ),
    ("no content type", "POST", "/remember", VALID.encode(), {}, 400, "invalid_request"),
    ("empty body", "POST", "/remember", b"", JSON, 400, "invalid_json"),
    ("JSON null", "POST", "/remember", b"null", JSON, 422, "invalid_request"),
    (
        "a number too long to parse",
        "POST",
        "/query",
        b'{"queries": [{"query": "x", "top_k": ' + b"9" * 5000 + b"}]}",
        JSON,
        400,
        "invalid_json",
    ),
]


@pytest.mark.parametrize(
    ("name", "method", "path", "body", "headers", "status", "code"), CASES, ids=[c[0] for c in CASES]
)
async def test_bad_bodies_get_one_error_shape_and_write_nothing(  # noqa: PLR0913 (the parametrize columns)
    client, memory, name, method, path, body, headers, status, code
) -> None:
    before = counts(memory)
    r = await client.open(path, method=method, data=body, headers={**AUTH, **headers})
    assert r.status_code == status, (name, await r.get_data())
    assert r.content_type.startswith("application/json")
    assert is_error(await r.get_json(), code)
    if status == 413:  # the limit, in bytes, and the setting that raises it
        assert TOO_LARGE in (await r.get_json())["error"]["message"]
    assert counts(memory) == before


async def test_a_streamed_10_mb_body_without_length_is_refused(client, memory) -> None:
    """No Content-Length (chunked): the limit is enforced on the bytes as they arrive."""
    before = counts(memory)
    async with client.request("/remember", method="POST", headers={**AUTH, **JSON}) as conn:
        await conn.send(b'{"messages": [{"content": "')
        piece = b"z" * (256 * 1024)
        for _ in range(TEN_MB // len(piece)):
            await conn.send(piece)
        await conn.send(b'"}]}')
        await conn.send_complete()
    resp = await conn.as_response()
    assert resp.status_code == 413
    assert is_error(json.loads(await resp.get_data()))
    assert TOO_LARGE in json.loads(await resp.get_data())["error"]["message"]
    assert counts(memory) == before


NOT_ALLOWED = [
    ("GET", "/remember"),
    ("PUT", "/remember"),
    ("PATCH", "/remember"),
    ("DELETE", "/remember"),
    ("GET", "/query"),
    ("PUT", "/query"),
    ("DELETE", "/query"),
    ("GET", "/upsert"),
    ("PATCH", "/upsert"),
    ("GET", "/delete"),
    ("POST", "/delete"),
    ("PUT", "/delete"),
    ("POST", "/memories/x"),
    ("PUT", "/memories/x"),
    ("DELETE", "/memories/x"),
    ("POST", "/health"),
    ("DELETE", "/health"),
]


@pytest.mark.parametrize(("method", "path"), NOT_ALLOWED)
async def test_methods_not_allowed_get_405_with_allow(client, memory, method, path) -> None:
    before = counts(memory)
    r = await client.open(path, method=method, data=VALID.encode(), headers={**AUTH, **JSON})
    assert r.status_code == 405, await r.get_data()
    assert is_error(await r.get_json(), "method_not_allowed")
    allowed = {m.strip() for m in r.headers.get("Allow", "").split(",")}
    assert method not in allowed and allowed - {"HEAD", "OPTIONS"}, r.headers.get("Allow")
    assert counts(memory) == before


@pytest.mark.parametrize("field", ["level", "min_level", "max_level"])
async def test_a_level_beyond_64_bits_is_a_4xx(client, memory, field: str) -> None:
    await client.post("/remember", json=json.loads(VALID), headers=AUTH)  # something to search
    body: Any = {"queries": [{"query": "hello", "filter": {field: 2**64}}]}
    r = await client.post("/query", json=body, headers=AUTH)
    assert 400 <= r.status_code < 500, await r.get_data()
