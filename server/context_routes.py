"""Routes of the context block and core memory: POST /context, PUT/GET /core, DELETE /core/{key}.

Each validates its body or arguments (422 naming the field), calls the Memory's service (context: the block,
datastore/context/assemble.py; core: datastore/context/core.py) in the caller's namespace and answers.
"""

from __future__ import annotations

import re

from quart import Blueprint, request
from quart_schema import operation_id, tag, validate_request, validate_response

from models.context import ContextRequest, ContextResponse
from models.core import CoreDeleteResponse, CoreListResponse, CorePutRequest, CorePutResponse
from server.auth import resolve_namespace
from server.common import app_memory, errors, off_loop, query_namespace
from services.errors import InvalidRequestError

context_api = Blueprint("context_api", __name__)


def _arg(name: str, pattern: str | None = None) -> str | None:
    """A query-string argument, checked against `pattern` (422 naming it)."""
    value = request.args.get(name)
    if value is not None and (not value or (pattern and not re.fullmatch(pattern, value)) or len(value) > 256):
        raise InvalidRequestError(f"{name} is not valid", name)
    return value


@context_api.post("/context")
@tag(["memory"])
@operation_id("context")
@validate_request(ContextRequest)
@validate_response(ContextResponse, 200)
@errors(400, 401, 403, 413, 422, 429, 503)
async def context(data: ContextRequest) -> ContextResponse:
    """Get the memory context for the next turn.

    One block within `budget_tokens` (cl100k, default 2000): core memory, the user's standing instructions,
    recent turns, memories relevant to `query` (default: the latest message) and a dated timeline. Put
    `context` in the system prompt; `sections` list every item and why.
    """
    return await off_loop(app_memory().context.assemble, resolve_namespace(data.namespace), data)


@context_api.put("/core")
@tag(["core memory"])
@operation_id("core_put")
@validate_request(CorePutRequest)
@validate_response(CorePutResponse, 200)
@errors(400, 401, 403, 404, 413, 422, 429, 501)
async def core_put(data: CorePutRequest) -> CorePutResponse:
    """Set a core memory entry.

    An always-included fact (`key`: `value`) of the namespace or one conversation. When the core budget
    (CORE_MAX_TOKENS) would be exceeded, the least important, oldest entries move to long-term memory
    (`moved_out`), still searchable. `ttl_seconds` makes it expire.
    """
    return await off_loop(app_memory().core.put, resolve_namespace(data.namespace), data)


@context_api.get("/core")
@tag(["core memory"])
@operation_id("core_list")
@validate_response(CoreListResponse, 200)
@errors(401, 403, 422, 429, 501)
async def core_list() -> CoreListResponse:
    """List core memory.

    The unexpired entries of the namespace, or of one conversation (`?conversation_id=`), most important first,
    with the tokens they take and the budget.
    """
    ns = query_namespace()
    return await off_loop(app_memory().core.list_entries, ns, _arg("conversation_id"))


@context_api.delete("/core/<string:key>")
@tag(["core memory"])
@operation_id("core_delete")
@validate_response(CoreDeleteResponse, 200)
@errors(401, 403, 404, 422, 429, 501)
async def core_delete(key: str) -> CoreDeleteResponse:
    """Delete a core memory entry.

    Removes the entry (of the namespace, or of `?conversation_id=`) everywhere, including its copy moved out to
    long-term memory. 404 when the key is unknown.
    """
    ns = query_namespace()
    return await off_loop(app_memory().core.delete, ns, key, _arg("conversation_id"))
