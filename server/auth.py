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
import math
from dataclasses import dataclass

from jose import ExpiredSignatureError, jwt
from jose.exceptions import JOSEError
from quart import Quart, Response, g, request

from models.api import DEFAULT_NAMESPACE, is_namespace
from models.settings import Settings
from server.errors import error_response
from services.errors import ForbiddenError

PUBLIC_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/legal", "/favicon.ico"})
NUMERIC_CLAIMS = ("exp", "nbf", "iat")
PUBLIC_PREFIXES = ("/.well-known/", "/ui/")  # the web page's static files carry no data; it sends the token


@dataclass(frozen=True)
class Principal:
    """Who is calling: `namespace` is fixed by a JWT, None when the caller may choose (static token, no auth);
    `key` identifies the caller for rate limiting (a hash, never the token itself)."""

    namespace: str | None
    key: str
    read_namespaces: frozenset[str] = frozenset()  # other namespaces it may read (`namespaces`), never write


def check_auth_settings(settings: Settings) -> None:
    """Raise ValueError naming the missing key: BEARER_TOKEN for AUTH=bearer, a JWT key for AUTH=jwt."""
    if settings.auth == "bearer" and settings.bearer_token is None:
        raise ValueError("BEARER_TOKEN is required when AUTH=bearer (set AUTH=none only for a local server)")
    if settings.auth == "jwt" and not (settings.jwt_secret or settings.jwt_public_key or settings.jwt_jwks_file):
        raise ValueError("AUTH=jwt needs JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_FILE")


class JWTVerifier:
    """Verifies a JWT and returns its namespace claim; raises PermissionError with a safe message."""

    def __init__(self, settings: Settings) -> None:
        self.key = settings.jwt_verification_key()  # checked when the settings were read
        self.algorithms = settings.resolved_jwt_algorithms
        self.audience = settings.jwt_audience
        self.issuer = settings.jwt_issuer
        self.claim = settings.jwt_namespace_claim
        self.read_claim = settings.jwt_read_namespaces_claim
        self.leeway = settings.jwt_leeway

    def namespace(self, token: str) -> str:
        """The namespace of a valid token; raises PermissionError with a safe message."""
        return self.verify(token)[0]

    def verify(self, token: str) -> tuple[str, frozenset[str]]:
        """(namespace, namespaces it may also read) of a valid token; raises PermissionError."""
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") not in self.algorithms:
                raise PermissionError(f"token algorithm {header.get('alg')!r} is not allowed")
            claims = jwt.decode(
                token,
                self.key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                options={
                    "verify_aud": self.audience is not None,
                    "verify_iss": self.issuer is not None,
                    "require_aud": self.audience is not None,
                    "require_iss": self.issuer is not None,
                    "require_exp": True,
                    "leeway": self.leeway,
                },
            )
        except PermissionError:
            raise
        except ExpiredSignatureError as exc:
            raise PermissionError("token expired") from exc
        except (JOSEError, ValueError, TypeError) as exc:  # JWKError for a key of another type, too
            raise PermissionError(f"invalid token: {_safe(str(exc))}") from exc
        except Exception as exc:  # any other failure on a hostile token (OverflowError, RecursionError) is a 401
            raise PermissionError("invalid token") from exc
        for name in NUMERIC_CLAIMS:  # python-jose takes "123" (a string) for a time; RFC 7519 says NumericDate
            if name in claims and not _finite_number(claims[name]):
                raise PermissionError(f"invalid token: the {name!r} claim must be a number")
        if self.audience is not None and "aud" not in claims or self.issuer is not None and "iss" not in claims:
            raise PermissionError("invalid token: a required aud or iss claim is missing")
        value = claims.get(self.claim)
        if not is_namespace(value):
            raise PermissionError(f"token has no usable {self.claim!r} claim for the namespace")
        grants = claims.get(self.read_claim, [])
        if isinstance(grants, str):
            grants = [g.strip() for g in grants.split(",") if g.strip()]
        if not isinstance(grants, list) or not all(is_namespace(g) for g in grants):
            raise PermissionError(f"token's {self.read_claim!r} claim must be a list of namespaces")
        return value, frozenset(grants) - {value}


def _finite_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _safe(message: str) -> str:
    """A library message cut to a short sentence that cannot carry the token."""
    return message.split(".")[0][:80]


class Authenticator:
    """The one check of an `Authorization` header, shared by every front door (REST routes, MCP over HTTP).

    Raises ValueError (naming the key) when the mode lacks its secret: an open server is never the silent default.
    """

    def __init__(self, settings: Settings) -> None:
        check_auth_settings(settings)
        self.mode = settings.auth
        self.verifier = JWTVerifier(settings) if settings.auth == "jwt" else None
        self.expected = settings.bearer_token.get_secret_value().encode() if settings.bearer_token else b""
        self.read_only = frozenset(settings.read_only_namespaces)  # granted to the static token / no-auth caller

    def principal(self, authorization: str | None, remote_addr: str | None) -> Principal:
        """The caller of a request with this `Authorization` header; raises PermissionError with a safe message."""
        if self.mode == "none":
            return Principal(None, f"ip:{remote_addr}", self.read_only)
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise PermissionError("missing bearer token")
        if self.verifier is None:
            if not hmac.compare_digest(token.encode(), self.expected):
                raise PermissionError("invalid bearer token")
            return Principal(None, "static", self.read_only)
        ns, grants = self.verifier.verify(token)
        return Principal(ns, "ns:" + hashlib.sha256(ns.encode()).hexdigest()[:16], grants)


def install_auth(app: Quart, settings: Settings) -> Authenticator:
    """Authenticate every route but health, the schema and .well-known; sets `g.principal`.

    Returns the Authenticator (the MCP endpoint reuses it). Raises ValueError (naming the key) when the mode
    lacks its secret.
    """
    authenticator = Authenticator(settings)

    @app.before_request
    async def _authenticate() -> Response | None:
        if (
            request.method == "OPTIONS"
            or request.path in PUBLIC_PATHS
            or request.path == "/ui"
            or request.path.startswith(PUBLIC_PREFIXES)
        ):
            return None
        try:
            g.principal = authenticator.principal(request.headers.get("Authorization"), request.remote_addr)
        except PermissionError as exc:
            return _unauthorized(str(exc))
        return None

    return authenticator


def _unauthorized(message: str) -> Response:
    return error_response(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def resolve_namespace(requested: str | None) -> str:
    """The namespace of this request: the token's (JWT; a different `namespace` in the request is 403), else the
    one the request names, else `default`."""
    return namespace_for(g.get("principal"), requested, write=not is_read_request())


def namespace_for(principal: Principal | None, requested: str | None, write: bool = False) -> str:
    """`resolve_namespace` for a given principal (None: a trusted local caller, e.g. MCP over stdio). `write`:
    the call changes memory, so a namespace the caller may only read is a 403."""
    fixed = principal.namespace if principal else None
    if fixed is not None:
        if requested is not None and requested != fixed:
            raise ForbiddenError("the namespace is set by the token; omit `namespace`", "namespace")
        return fixed
    ns = requested or DEFAULT_NAMESPACE
    if write and principal is not None and ns in principal.read_namespaces:
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
