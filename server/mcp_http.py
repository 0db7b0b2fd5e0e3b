"""Streamable HTTP MCP at `/mcp` on the API server, behind the same auth as the REST routes.

`mount_mcp(app, settings, authenticator, limiter)` wraps the Quart app's ASGI callable with a small dispatcher:
requests to `/mcp` are authenticated with the REST `Authenticator` (401 JSON in the REST error shape, before the
MCP app sees the body), counted against RATE_LIMIT_PER_MINUTE like a REST route (the REST limiter's own store and
its GCRA rule: Quart's before_request hooks never see /mcp; 429 in the REST shape with Retry-After), and the caller
is left in the ASGI scope for the tools (`server.mcp_tools`); everything else goes to Quart. The MCP app is
stateless (every POST carries its own auth, no session affinity) and answers JSON. Its session manager runs inside
the server's lifespan, so it starts and stops with the app under hypercorn.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings
from quart import Quart
from quart_rate_limiter import RateLimiter

from models.settings import Settings
from server.auth import Authenticator
from server.errors import too_large_message
from server.mcp_tools import PRINCIPAL_KEY, build_mcp

MCP_PATH = "/mcp"
LOCAL_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]


def _security(settings: Settings) -> TransportSecuritySettings:
    """DNS-rebinding protection where no token guards the endpoint (AUTH=none): only local Host/Origin headers."""
    if settings.auth != "none":
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", *settings.cors_origins]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=LOCAL_HOSTS, allowed_origins=origins
    )


async def _error(send: Any, status: int, code: str, message: str, headers: list[tuple[bytes, bytes]]) -> None:
    """Answer in the REST error shape, before the MCP app reads the request."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class MCPRateLimit:
    """RATE_LIMIT_PER_MINUTE for /mcp, kept in the REST limiter's store by the same GCRA rule as quart-rate-limiter
    (a request is refused when it would arrive more than a period minus one interval ahead of its theoretical
    arrival time). /mcp counts as one route: its own bucket per caller, as each REST route has."""

    def __init__(self, limiter: RateLimiter, app_name: str, per_minute: int) -> None:
        self.store = limiter.store
        self.period = timedelta(minutes=1)
        self.interval = self.period / per_minute
        self.prefix = f"{app_name}-mcp-{per_minute}-{self.period.total_seconds()}-"

    async def retry_after(self, caller: str) -> int | None:
        """Seconds until `caller` may call again (the call is refused), or None (the call is counted)."""
        key = self.prefix + caller
        now = datetime.now(UTC)
        stored = await self.store.get(key, now)
        tat = max(stored if stored.tzinfo else stored.replace(tzinfo=UTC), now)
        allowed_ahead = self.period - self.interval
        if tat - now > allowed_ahead:
            return max(1, math.ceil((tat - allowed_ahead - now).total_seconds()))
        await self.store.set(key, tat + self.interval)
        return None


def mount_mcp(app: Quart, settings: Settings, authenticator: Authenticator, limiter: RateLimiter | None = None) -> None:
    """Serve MCP over streamable HTTP at /mcp beside the app's routes (same auth, same Memory); `limiter` (the REST
    rate limiter, when RATE_LIMIT_PER_MINUTE is set) limits it too."""
    mcp = build_mcp(
        lambda: app.extensions["pyramind.memory"], settings, get_indexer=lambda: app.extensions.get("pyramind.indexer")
    )
    mcp_app = mcp.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=_security(settings),
        max_request_body_size=settings.max_body_bytes,
    )
    inner: Any = app.asgi_app
    limit = (
        MCPRateLimit(limiter, app.import_name, settings.rate_limit_per_minute)
        if limiter is not None and settings.rate_limit_per_minute
        else None
    )

    async def dispatch(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            async with mcp.session_manager.run():
                await inner(scope, receive, send)
            return
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
            await inner(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        client = scope.get("client") or ("", 0)
        try:
            principal = authenticator.principal(headers.get(b"authorization", b"").decode("latin-1"), client[0])
        except PermissionError as exc:
            await _error(send, 401, "unauthorized", str(exc), [(b"www-authenticate", b"Bearer")])
            return
        retry = await limit.retry_after(principal.key) if limit is not None else None
        if retry is not None:
            await _error(
                send,
                429,
                "too_many_requests",
                f"more than {settings.rate_limit_per_minute} requests a minute (RATE_LIMIT_PER_MINUTE); retry later",
                [(b"retry-after", str(retry).encode())],
            )
            return
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > settings.max_body_bytes:  # the SDK's own 413 is plain text
            await _error(send, 413, "request_entity_too_large", too_large_message(settings.max_body_bytes), [])
            return
        scope[PRINCIPAL_KEY] = principal
        await mcp_app(scope, receive, send)

    app.asgi_app = dispatch  # type: ignore[method-assign,assignment]
