"""The API routes. Each validates its body (quart-schema, 400 naming the field), calls the DataStore, answers.

Shapes are in `models.api`; the OpenAPI document (/openapi.json) is generated from these decorators, and
`.well-known/openapi.yaml` is a copy of it (a test keeps them equal).
"""

from __future__ import annotations

import re

from quart import Blueprint, current_app, request
from quart_schema import document_response, operation_id, security_scheme, tag, validate_request, validate_response

from datastore.datastore import DataStore
from models.api import (
    NAMESPACE_PATTERN,
    DeleteRequest,
    DeleteResponse,
    ErrorResponse,
    ExpandResponse,
    Health,
    QueryRequest,
    QueryResponse,
    RememberRequest,
    RememberResponse,
    UpsertRequest,
    UpsertResponse,
)
from server.auth import readable_namespaces, resolve_namespace
from services.errors import InvalidRequestError

api = Blueprint("api", __name__)


def _store() -> DataStore:
    store: DataStore = current_app.extensions["pyramind.store"]
    return store


def _namespace(requested: str | None) -> str:
    return resolve_namespace(requested)


def _errors(*codes: int):  # type: ignore[no-untyped-def]
    def wrap(fn):  # type: ignore[no-untyped-def]
        for code in codes:
            fn = document_response(ErrorResponse, code)(fn)
        return fn

    return wrap


@api.post("/remember")
@tag(["memory"])
@operation_id("remember")
@validate_request(RememberRequest)
@validate_response(RememberResponse, 200)
@validate_response(RememberResponse, 202)
@_errors(400, 401, 403, 413, 422, 429, 503)
async def remember(data: RememberRequest) -> tuple[RememberResponse, int]:
    """Remember chat messages.

    Appends the messages to the conversation (a new one when `conversation_id` is absent), cuts them into
    overlapping chunks of at most 200 tokens (L1) and rolls every 5 sealed nodes of a level up into a summary one
    level above. Resending a message id changes nothing. Returns the chunks created or extended and the summaries
    created. 202 when the messages are stored but the embedder is failing: they are indexed as soon as it
    recovers (`pending_message_ids`). 422 when a limit is exceeded (nothing is stored then).
    """
    result = await _store().remember(_namespace(data.namespace), data)
    return result, 202 if result.pending_message_ids else 200


@api.post("/query")
@tag(["memory"])
@operation_id("query")
@validate_request(QueryRequest)
@validate_response(QueryResponse, 200)
@_errors(400, 401, 403, 413, 422, 429, 503)
async def query(data: QueryRequest) -> QueryResponse:
    """Find the memories most relevant to each query.

    Ranks memories by `mode` (default hybrid: BM25 and embedding similarity fused over the verbatim L1 chunks;
    dense: embedding similarity over chunks and summaries of every level) within what the filter allows
    (conversation_id, document_id, level, min_level, max_level, speaker, start_date, end_date), and returns the
    `top_k` best per query, each with its text, `score` (higher is closer), `level`, `children`, `parent_id` and
    time range. A chunk's `parent_id` names the summary above it; expand any memory with GET /memories/{id}.
    """
    own = _namespace(data.namespace)
    if data.namespaces is not None:  # shared read-only memory: only granted namespaces (403 otherwise)
        return await _store().query_shared(own, readable_namespaces(data.namespaces, own), data.queries)
    return await _store().query(own, data.queries)


@api.post("/upsert")
@tag(["memory"])
@operation_id("upsert")
@validate_request(UpsertRequest)
@validate_response(UpsertResponse, 200)
@validate_response(UpsertResponse, 202)
@_errors(400, 401, 403, 413, 422, 429, 503)
async def upsert(data: UpsertRequest) -> tuple[UpsertResponse, int]:
    """Store documents.

    Each document is chunked like a conversation (its chunks rolled up into summaries); a document whose id is
    already stored is replaced. Returns the document ids; 202 when some are stored but not yet searchable
    because the embedder is failing (`pending_ids`).
    """
    result = await _store().upsert(_namespace(data.namespace), data.documents)
    return result, 202 if result.pending_ids else 200


@api.delete("/delete")
@tag(["memory"])
@operation_id("delete")
@validate_request(DeleteRequest)
@validate_response(DeleteResponse, 200)
@_errors(400, 401, 403, 404, 413, 429, 503)
async def delete(data: DeleteRequest) -> DeleteResponse:
    """Forget memories.

    Give exactly one of: `ids` (memory ids, message ids, conversation or document ids), `filter` (messages by
    conversation_id, document_id, speaker, start_date, end_date) or `delete_all: true` (this namespace only).
    Every chunk and summary derived from a forgotten message is rebuilt from what remains, so the forgotten text
    comes back from no level. 404 naming unknown ids (nothing is deleted then).
    """
    return await _store().delete(_namespace(data.namespace), data)


@api.get("/memories/<string:memory_id>")
@tag(["memory"])
@operation_id("get_memory")
@validate_response(ExpandResponse, 200)
@_errors(401, 403, 404, 422, 429)
async def get_memory(memory_id: str) -> ExpandResponse:
    """Expand a memory.

    Returns the node with its parent and its children in order: a summary's children are the nodes one level
    down that it summarises; an L1 chunk has none. 404 for an unknown id.
    """
    requested = request.args.get("namespace")
    if requested is not None and not re.match(NAMESPACE_PATTERN, requested):
        raise InvalidRequestError(f"namespace must match {NAMESPACE_PATTERN}", "namespace")
    return await _store().expand(_namespace(requested), memory_id)


@api.get("/health")
@tag(["service"])
@security_scheme([])
@operation_id("health")
@validate_response(Health, 200)
async def health() -> Health:
    """Check the service.

    Liveness and configuration: the datastore, the embedder (with its dimension) and the summariser in use. Needs
    no token.
    """
    store = _store()
    return Health(
        status="ok",
        datastore=store.name,
        embedder=store.embedder.model_name,
        embedding_dimension=store.embedder.dimension,
        summariser=getattr(store.summariser, "name", "unknown"),
    )
