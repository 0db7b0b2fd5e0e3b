"""Errors raised by the services and the datastore; the server maps each to one HTTP status."""

from __future__ import annotations


class PyramindError(Exception):
    """Base class; `code` is the machine-readable error code of the JSON error body."""

    code = "internal_error"
    status = 500

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class EmbeddingError(PyramindError):
    """The embedder could not be loaded or failed on a call; nothing was written."""

    code = "embedding_failed"
    status = 503


class SummaryError(PyramindError):
    """The summariser failed and no fallback was possible; nothing was written."""

    code = "summary_failed"
    status = 503


class StoreError(PyramindError):
    """The store cannot be used as configured (e.g. opened with a different embedding model)."""

    code = "store_error"
    status = 500


class StoreUnavailableError(StoreError):
    """The store went away or does not answer (a database down, a network cut): nothing of the call was
    written unless it said so; a retry once the store is back is safe."""

    code = "store_unavailable"
    status = 503


class EmbeddingMismatchError(StoreError):
    """The store holds vectors of another embedding model or dimension than the configured embedder."""

    code = "embedding_mismatch"


class NotFoundError(PyramindError):
    code = "not_found"
    status = 404


class InvalidRequestError(PyramindError):
    """A request that is well-formed JSON but breaks a limit or a rule; `field` names the culprit."""

    code = "invalid_request"
    status = 422


class ConflictError(PyramindError):
    """Another writer changed the same conversation meanwhile; the caller retries."""

    code = "conflict"
    status = 409


class UnsupportedError(PyramindError):
    """The configured provider lacks a capability (e.g. core memory on the pinecone store)."""

    code = "not_supported"
    status = 501
