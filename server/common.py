"""What every REST blueprint shares: the app's store, the documented error responses, the query-string namespace."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from quart import current_app, request
from quart_schema import document_response

from datastore.memory import Memory
from models.api import NAMESPACE_PATTERN, ErrorResponse, is_namespace
from server.auth import resolve_namespace
from services.errors import InvalidRequestError

P = ParamSpec("P")
T = TypeVar("T")


def app_memory() -> Memory:
    """The Memory the app opened at serving start (or was given)."""
    memory: Memory = current_app.extensions["pyramind.memory"]
    return memory


async def off_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in a worker thread: the pipeline's services are synchronous (SQLite, embedding), and
    nothing blocking runs on the event loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)


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
