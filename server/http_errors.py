"""The one JSON error shape also for requests too malformed to reach the app (hypercorn's HTTP/1.1 layer).

hypercorn answers a garbage request line, an over-long request line or header block (over 16 KiB,
`h11_max_incomplete_size`) or a broken header with an empty response (`Content-Length: 0`), before any app code
runs. `install()` replaces that one method of hypercorn's h11 protocol so the answer carries
`{"error": {"code": "bad_http_request", "message": ...}}` like every other error.

It is a private method: hypercorn has no public hook for it (its Config has no error-body setting, and an ASGI
middleware never sees a request hypercorn could not parse). So, as issue 18 asks, pyproject.toml pins hypercorn
to the tested minor version (TESTED_HYPERCORN) and tests/server/test_http_errors.py fails when the method, its
caller or what the replacement calls changes. On another hypercorn version, or without the method, the patch is
skipped with a warning and those answers are empty again (status codes unchanged).
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any

log = logging.getLogger(__name__)

TESTED_HYPERCORN = (0, 18)  # the (major, minor) the patch is tested against; pyproject.toml pins it
ORIGINAL: dict[str, Any] = {}  # hypercorn's methods as they were before install()


def error_body(status: int) -> bytes:
    """The JSON error body of a malformed HTTP request answered with `status`."""
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Bad Request"
    message = f"malformed HTTP request ({phrase.lower()}): the request line or headers could not be parsed"
    return json.dumps({"error": {"code": "bad_http_request", "message": message}}).encode()


def install() -> bool:
    """Patch hypercorn's H11Protocol error response; returns whether it was patched."""
    try:
        import h11
        from hypercorn.protocol.h11 import H11Protocol
    except ImportError:  # pragma: no cover - hypercorn is a dependency
        return False
    from importlib.metadata import version

    installed = version("hypercorn")
    if tuple(int(p) for p in installed.split(".")[:2] if p.isdigit()) != TESTED_HYPERCORN:
        log.warning(
            "hypercorn %s is not the tested %d.%d: malformed HTTP requests get empty error answers",
            installed,
            *TESTED_HYPERCORN,
        )
        return False
    original = getattr(H11Protocol, "_send_error_response", None)
    if original is None or getattr(original, "_pyramind", False):
        if original is None:
            log.warning("hypercorn changed: malformed HTTP requests get empty error answers")
        return original is not None
    ORIGINAL["_send_error_response"] = original

    async def send_json_error(self: Any, status_code: int) -> None:
        body = error_body(status_code)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *self.config.response_headers("h11"),
        ]
        await self._send_h11_event(h11.Response(status_code=status_code, headers=headers))
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())

    send_json_error._pyramind = True  # type: ignore[attr-defined]
    H11Protocol._send_error_response = send_json_error  # type: ignore[method-assign]
    return True
