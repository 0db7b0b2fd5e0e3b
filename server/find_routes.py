"""`POST /find` (phrase or regex search over what was said) and `GET /stats` (what a namespace holds).

Thin callers of the Memory's services (`finder`, `describer`), like every route in `server/routes.py`.
"""

from __future__ import annotations

from quart import Blueprint, current_app
from quart_schema import operation_id, tag, validate_querystring, validate_request, validate_response

from models.find import FindRequest, FindResponse, StatsQuery, StatsResponse
from server.auth import resolve_namespace
from server.common import app_memory, errors, off_loop
from server.fit import fit_find

explore = Blueprint("explore", __name__)


@explore.post("/find")
@tag(["memory"])
@operation_id("find")
@validate_request(FindRequest)
@validate_response(FindResponse, 200)
@errors(400, 401, 403, 413, 422, 429)
async def find(data: FindRequest) -> FindResponse:
    """Find messages by exact words or an RE2 regex.

    Matching messages in conversation order, matches wrapped in ** marks, each with the L1 chunk holding it.
    Filters: conversation_id (unknown: no matches and a `warnings` entry), speaker, start_date, end_date. 422
    naming `pattern` for an invalid regex.
    """
    settings = current_app.extensions["pyramind.settings"]
    result = await off_loop(app_memory().finder.find, resolve_namespace(data.namespace), data)
    return fit_find(result, settings.max_response_chars)


@explore.get("/stats")
@tag(["memory"])
@operation_id("stats")
@validate_querystring(StatsQuery)
@validate_response(StatsResponse, 200)
@errors(401, 403, 422, 429)
async def stats(query_args: StatsQuery) -> StatsResponse:
    """Describe what is remembered.

    Counts of the namespace, or of one conversation: sources, messages, memory nodes per level, the time of the
    first and last message, and the speakers with their message counts. An unknown conversation_id counts
    nothing, with a `warnings` entry.
    """
    return await off_loop(
        app_memory().describer.describe, resolve_namespace(query_args.namespace), query_args.conversation_id
    )
