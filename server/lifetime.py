"""Routes of memory over a lifetime: a conversation's sessions, pins, forks and read-only grants.

Each calls one store method (datastore/sessions.py, pins.py, forks.py ...); shapes are in models/lifetime.py.
"""

from __future__ import annotations

from quart import Blueprint, current_app, request
from quart_schema import document_response, operation_id, tag, validate_response

from datastore.datastore import DataStore
from models.api import NAMESPACE_PATTERN, ErrorResponse
from models.lifetime import SessionsResponse
from server.auth import resolve_namespace
from services.errors import InvalidRequestError

lifetime = Blueprint("lifetime", __name__)


def _store() -> DataStore:
    store: DataStore = current_app.extensions["pyramind.store"]
    return store


def _query_namespace() -> str:
    """The namespace of a request without a body: `?namespace=` (static-token callers), else the token's."""
    import re

    requested = request.args.get("namespace")
    if requested is not None and not re.match(NAMESPACE_PATTERN, requested):
        raise InvalidRequestError(f"namespace must match {NAMESPACE_PATTERN}", "namespace")
    return resolve_namespace(requested)


def _errors(*codes: int):  # type: ignore[no-untyped-def]
    def wrap(fn):  # type: ignore[no-untyped-def]
        for code in codes:
            fn = document_response(ErrorResponse, code)(fn)
        return fn

    return wrap


@lifetime.get("/conversations/<string:conversation_id>/sessions")
@tag(["memory"])
@operation_id("list_sessions")
@validate_response(SessionsResponse, 200)
@_errors(401, 403, 404, 422, 429)
async def list_sessions(conversation_id: str) -> SessionsResponse:
    """List a conversation's sessions.

    Each session (explicit `session_id` on remember, or inferred from a gap of SESSION_GAP_HOURS) with its time
    range, message count, first and last message ids, and the ids of the nodes that summarise it. 404 for an
    unknown conversation.
    """
    sessions = await _store().sessions(_query_namespace(), conversation_id)
    return SessionsResponse(conversation_id=conversation_id, sessions=sessions)
