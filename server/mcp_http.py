"""Streamable HTTP MCP at `/mcp` on the API server, behind the same auth as the REST routes.

`mount_mcp(app, settings, authenticator)` wraps the Quart app's ASGI callable with a small dispatcher: requests
to `/mcp` are authenticated with the REST `Authenticator` (401 JSON in the REST error shape, before the MCP app
sees the body) and the caller is left in the ASGI scope for the tools (`server.mcp_tools`); everything else goes
to Quart. The MCP app is stateless (every POST carries its own auth, no session affinity) and answers JSON. Its
session manager runs inside the server's lifespan, so it starts and stops with the app under hypercorn.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings
from quart import Quart

from pyramind.models.settings import Settings
from pyramind.server.auth import Authenticator
from pyramind.server.mcp_tools import PRINCIPAL_KEY, build_mcp

MCP_PATH = "/mcp"
LOCAL_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]


def _security(settings: Settings) -> TransportSecuritySettings:
    """DNS-rebinding protection where no token guards the endpoint (AUTH=none): only local Host/Origin headers."""
    if settings.auth != "none":
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", *settings.cors_origins]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=LOCAL_HOSTS,
                                     allowed_origins=origins)


async def _unauthorized(send: Any, message: str) -> None:
    body = json.dumps({"error": {"code": "unauthorized", "message": message}}).encode()
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def mount_mcp(app: Quart, settings: Settings, authenticator: Authenticator) -> None:
    """Serve MCP over streamable HTTP at /mcp beside the app's routes (same auth, same Memory)."""
    mcp = build_mcp(lambda: app.extensions["pyramind.memory"], settings,
                    get_indexer=lambda: app.extensions.get("pyramind.indexer"))
    mcp_app = mcp.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
                                      transport_security=_security(settings),
                                      max_request_body_size=settings.max_body_bytes)
    inner: Any = app.asgi_app

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
            await _unauthorized(send, str(exc))
            return
        scope[PRINCIPAL_KEY] = principal
        await mcp_app(scope, receive, send)

    app.asgi_app = dispatch  # type: ignore[method-assign,assignment]
