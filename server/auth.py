"""Bearer authentication of the API: a static token compared in constant time (JWT comes later)."""

from __future__ import annotations

import hmac

from quart import Quart, Response, request

from models.settings import Settings
from server.errors import error_response

PUBLIC_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/redocs", "/scalar"})


def check_auth_settings(settings: Settings) -> None:
    """Raise ValueError naming BEARER_TOKEN when auth is on without a token."""
    if settings.auth == "bearer" and settings.bearer_token is None:
        raise ValueError("BEARER_TOKEN is required when AUTH=bearer (set AUTH=none only for a local server)")


def install_auth(app: Quart, settings: Settings) -> None:
    """Require `Authorization: Bearer <BEARER_TOKEN>` on every route but health, docs and .well-known.

    With AUTH=none (local_server) nothing is checked. With AUTH=bearer and no BEARER_TOKEN the app refuses to
    build (ValueError naming the key): an open server is never the silent default.
    """
    check_auth_settings(settings)
    if settings.auth == "none" or settings.bearer_token is None:
        return
    expected = settings.bearer_token.get_secret_value().encode()

    @app.before_request
    async def _check_bearer() -> Response | None:
        if request.method == "OPTIONS" or request.path in PUBLIC_PATHS or request.path.startswith("/.well-known/"):
            return None
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
            return error_response(401, "unauthorized", "missing or invalid bearer token",
                                  headers={"WWW-Authenticate": "Bearer"})
        return None
