"""What every REST blueprint shares: the app's store, the documented error responses, the query-string namespace."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from quart import current_app, request
from quart_schema import document_response

from pyramind.datastore.datastore import DataStore
from pyramind.models.api import NAMESPACE_PATTERN, ErrorResponse, is_namespace
from pyramind.server.auth import resolve_namespace
from pyramind.services.errors import InvalidRequestError, NotFoundError


def app_store() -> DataStore:
    """The DataStore the app opened at serving start (or was given)."""
    store: DataStore = current_app.extensions["pyramind.store"]
    return store


def errors(*codes: int) -> Callable[[Any], Any]:
    """Decorator: document the one JSON error shape (ErrorResponse) for each status in `codes`."""

    def wrap(fn: Any) -> Any:
        for code in codes:
            fn = document_response(ErrorResponse, code)(fn)
        return fn

    return wrap


def query_namespace() -> str:
    """The namespace of a request without a body: `?namespace=` (static-token callers; matched in full, a 422
    naming `namespace` otherwise), else the token's or `default`."""
    requested = request.args.get("namespace")
    if requested is not None and not is_namespace(requested):
        raise InvalidRequestError(f"namespace must match {NAMESPACE_PATTERN}", "namespace")
    return resolve_namespace(requested)


async def require_source(store: DataStore, namespaces: Sequence[str], source_id: str, field: str) -> None:
    """Raise NotFoundError naming `field` unless one of `namespaces` holds the conversation or document
    `source_id`: a filter on a mistyped id is a 404, not an empty answer that reads as "nothing remembered".
    Checked through the store's listing (one message of the source read)."""
    for ns in namespaces:
        try:
            await store.source_messages(ns, source_id, 1)
        except NotFoundError:
            continue
        return
    where = f"namespace {namespaces[0]!r}" if len(namespaces) == 1 else "the namespaces searched"
    raise NotFoundError(f"no conversation or document with id {source_id!r} in {where}", field)
