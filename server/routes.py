"""The API routes. Each validates its body (quart-schema, 422 naming the field), calls the Memory's service, answers.

Shapes are in `models.api`; the OpenAPI document (/openapi.json, and /.well-known/openapi.yaml alike) is generated
from these decorators and the settings (server/openapi.py).
"""

from __future__ import annotations

from quart import Blueprint, current_app
from quart_schema import (
    operation_id,
    security_scheme,
    tag,
    validate_headers,
    validate_querystring,
    validate_request,
    validate_response,
)

from datastore.indexing.background import Indexer
from models.api import (
    NAMESPACE_PATTERN,
    DeleteRequest,
    DeleteResponse,
    ExpandResponse,
    Health,
    IdempotencyHeaders,
    MemoryQuery,
    QueryRequest,
    QueryResponse,
    RememberRequest,
    RememberResponse,
    UpsertRequest,
    UpsertResponse,
    is_namespace,
)
from server.auth import readable_namespaces, resolve_namespace
from server.common import app_memory, errors, off_loop
from server.fit import fit_query
from server.idempotency import once, remember_once
from services.errors import InvalidRequestError

api = Blueprint("api", __name__)


def _namespace(requested: str | None) -> str:
    return resolve_namespace(requested)


@api.post("/remember")
@tag(["memory"])
@operation_id("remember")
@validate_request(RememberRequest)
@validate_headers(IdempotencyHeaders)
@validate_response(RememberResponse, 200)
@validate_response(RememberResponse, 202)
@errors(400, 401, 403, 413, 422, 429, 503)
async def remember(data: RememberRequest, headers: IdempotencyHeaders) -> tuple[RememberResponse, int]:
    """Remember chat messages.

    Stores the messages and answers 202 with `pending_message_ids`; within seconds they are searchable as
    200-token chunks, rolled up into summaries. `wait: true` answers 200 once indexed. Resent ids are skipped;
    a resent Idempotency-Key replays the first answer. 429: backlog full (Retry-After).
    """
    ns = _namespace(data.namespace)
    indexer: Indexer | None = current_app.extensions.get("pyramind.indexer")

    async def store() -> tuple[RememberResponse, int]:
        if indexer is None:  # an app serving without background indexing: index inline
            result = await off_loop(app_memory().writer.remember, ns, data)
            return result, 202 if result.pending_message_ids else 200
        return await indexer.remember(ns, data)

    return await remember_once(app_memory(), ns, headers.idempotency_key, data, store)


@api.post("/query")
@tag(["memory"])
@operation_id("query")
@validate_request(QueryRequest)
@validate_response(QueryResponse, 200)
@errors(400, 401, 403, 413, 422, 429, 503)
async def query(data: QueryRequest) -> QueryResponse:
    """Find the memories most relevant to each query.

    The top_k best per query, best first: verbatim L1 chunks, or summaries too with `mode: dense` or
    `filter.min_level` 2. Filter by conversation (unknown: no results and a `warnings` entry), speaker, level or
    dates. Expand: GET /memories/{id}.
    """
    settings = current_app.extensions["pyramind.settings"]
    own = _namespace(data.namespace)
    # shared read-only memory: only granted namespaces (403 otherwise), searched as the caller's own
    granted = readable_namespaces(data.namespaces, own) if data.namespaces is not None else None
    found = await off_loop(app_memory().reader.query, own, data.queries, granted)
    return fit_query(found, settings.max_response_chars)


@api.post("/upsert")
@tag(["memory"])
@operation_id("upsert")
@validate_request(UpsertRequest)
@validate_headers(IdempotencyHeaders)
@validate_response(UpsertResponse, 200)
@validate_response(UpsertResponse, 202)
@errors(400, 401, 403, 413, 422, 429, 503)
async def upsert(data: UpsertRequest, headers: IdempotencyHeaders) -> tuple[UpsertResponse, int]:
    """Store documents.

    Each document is chunked like a conversation (its chunks rolled up into summaries); a stored id is replaced.
    Returns the document ids; 202 when some are stored but not yet searchable (`pending_ids`). A resent
    Idempotency-Key replays the first answer.
    """
    ns = _namespace(data.namespace)

    async def store() -> tuple[UpsertResponse, int]:
        result = await off_loop(app_memory().writer.upsert, ns, data.documents)
        return result, 202 if result.pending_ids else 200

    return await once(app_memory(), ns, headers.idempotency_key, "upsert", data, UpsertResponse, store)


@api.delete("/delete")
@tag(["memory"])
@operation_id("delete")
@validate_request(DeleteRequest)
@validate_response(DeleteResponse, 200)
@errors(400, 401, 403, 404, 413, 422, 429, 503)
async def delete(data: DeleteRequest) -> DeleteResponse:
    """Forget memories.

    Give exactly one of: ids (memory, message, conversation or document ids), filter, or delete_all: true (this
    namespace). Summaries built from forgotten messages are rebuilt without them, so the text comes back from no
    level. 404 naming unknown ids; nothing is deleted then.
    """
    return await off_loop(app_memory().deleter.delete, _namespace(data.namespace), data)


@api.get("/memories/<string:memory_id>")
@tag(["memory"])
@operation_id("get_memory")
@validate_querystring(MemoryQuery)
@validate_response(ExpandResponse, 200)
@errors(401, 403, 404, 422, 429)
async def get_memory(memory_id: str, query_args: MemoryQuery) -> ExpandResponse:
    """Expand a memory.

    Returns the node with its parent and its children in order: a summary's children are the nodes one level
    down that it summarises; an L1 chunk has none. 404 for an unknown id.
    """
    requested = query_args.namespace
    if requested is not None and not is_namespace(requested):
        raise InvalidRequestError(f"namespace must match {NAMESPACE_PATTERN}", "namespace")
    return await off_loop(app_memory().reader.expand, _namespace(requested), memory_id)


@api.get("/health")
@tag(["service"])
@security_scheme([])
@operation_id("health")
@validate_response(Health, 200)
async def health() -> Health:
    """Check the service.

    Liveness and configuration: the datastore, the embedder (with its dimension), the summariser in use, and the
    count of memory nodes per level. Needs no token.
    """
    memory = app_memory()
    nodes = await off_loop(memory.storage.node_counts)
    return Health(
        status="ok",
        datastore=memory.name,
        embedder=memory.embedder.model_name,
        embedding_dimension=memory.embedder.dimension,
        summariser=getattr(memory.summariser, "name", "unknown"),
        nodes=nodes,
    )
