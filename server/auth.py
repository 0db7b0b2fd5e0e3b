"""Authentication of the API and the caller's namespace.

Three modes (AUTH): `bearer`, one static BEARER_TOKEN compared in constant time (one trusted caller, e.g. one
GPT, which may name a namespace per request); `jwt`, tokens verified with python-jose (HS256 secret, or RS256/
ES256 public key or JWKS file; exp, nbf, aud, iss checked; an algorithm allow-list that never admits `none`),
the namespace taken from a claim (JWT_NAMESPACE_CLAIM, default `sub`) and never from the request; `none`, for
the local server. Tokens never appear in logs or error bodies.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jose import ExpiredSignatureError, jwt
from jose.exceptions import JOSEError
from quart import Quart, Response, g, request

from datastore.datastore import DEFAULT_NAMESPACE
from models.settings import Settings
from server.errors import error_response
from services.errors import PyramindError

PUBLIC_PATHS = frozenset({"/health", "/openapi.json", "/docs"})
NAMESPACE_RE = re.compile(r"^[A-Za-z0-9._:@|-]{1,128}$")


@dataclass(frozen=True)
class Principal:
    """Who is calling: `namespace` is fixed by a JWT, None when the caller may choose (static token, no auth);
    `key` identifies the caller for rate limiting (a hash, never the token itself)."""

    namespace: str | None
    key: str
    read_namespaces: frozenset[str] = frozenset()  # other namespaces it may read (`namespaces`), never write


class ForbiddenError(PyramindError):
    code = "forbidden"
    status = 403


def check_auth_settings(settings: Settings) -> None:
    """Raise ValueError naming the missing key: BEARER_TOKEN for AUTH=bearer, a JWT key for AUTH=jwt."""
    if settings.auth == "bearer" and settings.bearer_token is None:
        raise ValueError("BEARER_TOKEN is required when AUTH=bearer (set AUTH=none only for a local server)")
    if settings.auth == "jwt" and not (settings.jwt_secret or settings.jwt_public_key or settings.jwt_jwks_file):
        raise ValueError("AUTH=jwt needs JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_FILE")


def _jwt_key(settings: Settings) -> Any:
    if settings.jwt_jwks_file:
        return json.loads(Path(settings.jwt_jwks_file).read_text())
    if settings.jwt_public_key:
        value = settings.jwt_public_key
        return Path(value).read_text() if not value.lstrip().startswith("-----") and Path(value).is_file() else value
    assert settings.jwt_secret is not None
    return settings.jwt_secret.get_secret_value()


class JWTVerifier:
    """Verifies a JWT and returns its namespace claim; raises PermissionError with a safe message."""

    def __init__(self, settings: Settings) -> None:
        self.key = _jwt_key(settings)
        self.algorithms = settings.resolved_jwt_algorithms
        self.audience = settings.jwt_audience
        self.issuer = settings.jwt_issuer
        self.claim = settings.jwt_namespace_claim
        self.read_claim = settings.jwt_read_namespaces_claim
        self.leeway = settings.jwt_leeway

    def namespace(self, token: str) -> str:
        return self.verify(token)[0]

    def verify(self, token: str) -> tuple[str, frozenset[str]]:
        """(namespace, namespaces it may also read) of a valid token; raises PermissionError."""
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") not in self.algorithms:
                raise PermissionError(f"token algorithm {header.get('alg')!r} is not allowed")
            claims = jwt.decode(
                token, self.key, algorithms=self.algorithms, audience=self.audience, issuer=self.issuer,
                options={"verify_aud": self.audience is not None, "verify_iss": self.issuer is not None,
                         "require_exp": True, "leeway": self.leeway},
            )
        except ExpiredSignatureError as exc:
            raise PermissionError("token expired") from exc
        except (JOSEError, ValueError, TypeError) as exc:  # JWKError for a key of another type, too
            raise PermissionError(f"invalid token: {_safe(str(exc))}") from exc
        value = claims.get(self.claim)
        if not isinstance(value, str) or not NAMESPACE_RE.match(value):
            raise PermissionError(f"token has no usable {self.claim!r} claim for the namespace")
        grants = claims.get(self.read_claim, [])
        if isinstance(grants, str):
            grants = [g.strip() for g in grants.split(",") if g.strip()]
        if not isinstance(grants, list) or not all(isinstance(g, str) and NAMESPACE_RE.match(g) for g in grants):
            raise PermissionError(f"token's {self.read_claim!r} claim must be a list of namespaces")
        return value, frozenset(grants) - {value}


def _safe(message: str) -> str:
    """A library message cut to a short sentence that cannot carry the token."""
    return message.split(".")[0][:80]


def install_auth(app: Quart, settings: Settings) -> None:
    """Authenticate every route but health, the schema and .well-known; sets `g.principal`.

    Raises ValueError (naming the key) when the mode lacks its secret: an open server is never the silent default.
    """
    check_auth_settings(settings)
    verifier = JWTVerifier(settings) if settings.auth == "jwt" else None
    expected = settings.bearer_token.get_secret_value().encode() if settings.bearer_token else b""
    read_only = frozenset(settings.read_only_namespaces)

    @app.before_request
    async def _authenticate() -> Response | None:
        if request.method == "OPTIONS" or request.path in PUBLIC_PATHS or request.path.startswith("/.well-known/"):
            return None
        if settings.auth == "none":
            g.principal = Principal(None, f"ip:{request.remote_addr}", read_only)
            return None
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return _unauthorized("missing bearer token")
        if verifier is None:
            if not hmac.compare_digest(token.encode(), expected):
                return _unauthorized("invalid bearer token")
            g.principal = Principal(None, "static", read_only)
            return None
        try:
            ns, grants = verifier.verify(token)
        except PermissionError as exc:
            return _unauthorized(str(exc))
        g.principal = Principal(ns, "ns:" + hashlib.sha256(ns.encode()).hexdigest()[:16], grants)
        return None


def _unauthorized(message: str) -> Response:
    return error_response(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def resolve_namespace(requested: str | None) -> str:
    """The namespace of this request: the token's (JWT; a different `namespace` in the request is 403), else the
    one the request names, else `default`."""
    principal: Principal | None = g.get("principal")
    fixed = principal.namespace if principal else None
    if fixed is not None:
        if requested is not None and requested != fixed:
            raise ForbiddenError("the namespace is set by the token; omit `namespace`", "namespace")
        return fixed
    ns = requested or DEFAULT_NAMESPACE
    if principal is not None and ns in principal.read_namespaces and not is_read_request():
        raise ForbiddenError(f"namespace {ns!r} is read-only for this caller", "namespace")
    return ns


READ_PATHS = frozenset({"/query", "/context", "/find"})


def is_read_request() -> bool:
    """Whether this request only reads: a GET, or a POST to a search route (READ_PATHS). Anything else counts
    as a write, so a route added later is guarded by default."""
    return request.method in ("GET", "HEAD") or request.path in READ_PATHS


def readable_namespaces(requested: list[str], own: str) -> list[str]:
    """`requested` (the `namespaces` of a search) checked against the caller's grants: its own namespace and
    those granted to read. Raises ForbiddenError (field `namespaces`) naming one not granted."""
    principal: Principal | None = g.get("principal")
    grants = principal.read_namespaces if principal else frozenset()
    for ns in requested:
        if ns != own and ns not in grants:
            raise ForbiddenError(f"no read access to namespace {ns!r}", "namespaces")
    return list(dict.fromkeys(requested))


async def rate_limit_key() -> str:
    """Rate-limit bucket of the caller (quart-rate-limiter key function)."""
    principal: Principal | None = g.get("principal")
    return principal.key if principal else f"ip:{request.remote_addr}"
