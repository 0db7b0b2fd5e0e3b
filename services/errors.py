"""Errors raised by the services and the datastore: what went wrong, in the domain's terms, never an HTTP status.

Each carries a machine-readable `code`, a `message` for a person and, when one field of the request is at fault,
`field` naming it. server/errors.py maps each class to its HTTP status, headers (Retry-After) and MCP tool error
in one place, so REST and MCP say the same thing.
"""

from __future__ import annotations


class PyramindError(Exception):
    """Base class; `code` is the machine-readable error code of the JSON error body."""

    code = "internal_error"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class EmbeddingError(PyramindError):
    """The embedder could not be loaded or failed on a call; nothing was written."""

    code = "embedding_failed"


class SummaryError(PyramindError):
    """The summariser failed and no fallback was possible; nothing was written."""

    code = "summary_failed"


class StoreError(PyramindError):
    """The store cannot be used as configured (e.g. opened with a different embedding model)."""

    code = "store_error"


class StoreUnavailableError(StoreError):
    """The store went away or does not answer (a database down, a network cut): nothing of the call was
    written unless it said so; a retry once the store is back is safe."""

    code = "store_unavailable"


class EmbeddingMismatchError(StoreError):
    """The store holds vectors of another embedding model or dimension than the configured embedder."""

    code = "embedding_mismatch"


class NotFoundError(PyramindError):
    """A resource named by the request (an id in a path or an id list) does not exist in the namespace."""

    code = "not_found"


class InvalidRequestError(PyramindError):
    """A request that is well-formed JSON but breaks a limit or a rule; `field` names the culprit."""

    code = "invalid_request"


class ConflictError(PyramindError):
    """Another writer changed the same conversation meanwhile, or an id is taken; the caller retries or renames."""

    code = "conflict"


class UnsupportedError(PyramindError):
    """The configured provider lacks a capability (e.g. core memory on the pinecone store)."""

    code = "not_supported"


class ForbiddenError(PyramindError):
    """The caller may not act in the namespace it named (a token fixes it, or grants it read-only)."""

    code = "forbidden"


class BacklogFullError(PyramindError):
    """The namespace has more unindexed text waiting than MAX_PENDING_TOKENS; `retry_after` seconds (>= 1) is
    when the caller may try again. Nothing was stored."""

    code = "too_many_requests"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
