"""Routes of memory over a lifetime: a conversation's sessions, pins, forks and read-only grants.

Each calls one of the Memory's services (datastore/lifetime/: sessions, visits, forks, policy; portability for
the export); shapes are in models/lifetime.py.
"""

from __future__ import annotations

import asyncio
import logging

from quart import Blueprint, Response, current_app, request
from quart_schema import hide, operation_id, tag, validate_request, validate_response

from datastore.memory import Memory
from models.lifetime import (
    ForgetReport,
    ForgetRequest,
    ForkRequest,
    ForkResponse,
    PinResponse,
    SessionsResponse,
)
from server.auth import resolve_namespace
from server.common import app_memory, errors, off_loop, query_namespace
from services.errors import InvalidRequestError

lifetime = Blueprint("lifetime", __name__)
log = logging.getLogger(__name__)


async def _flush_visits_every(every: float) -> None:
    """Write the visits buffered by queries every `every` seconds (off the request path)."""
    while True:
        await asyncio.sleep(every)
        memory: Memory | None = current_app.extensions.get("pyramind.memory")
        if memory is None:
            continue
        try:
            await off_loop(memory.visits.flush)
        except Exception:  # visits rank forgetting; a failed flush is retried with the next one
            log.exception("flushing visits failed")


async def _forget_every(every: float) -> None:
    """Apply the forgetting policy to every namespace every `every` seconds."""
    while True:
        await asyncio.sleep(every)
        memory: Memory | None = current_app.extensions.get("pyramind.memory")
        if memory is None or not memory.policy.enabled:
            continue
        try:
            for report in await off_loop(memory.policy.run_all, False):
                if report.forgotten:
                    log.info("forgot %d chunks of namespace %r", len(report.forgotten), report.namespace)
        except Exception:
            log.exception("the forgetting policy failed")


@lifetime.before_app_serving
async def _start_background() -> None:
    settings = current_app.extensions["pyramind.settings"]
    if settings.visit_flush_seconds > 0:
        current_app.extensions["pyramind.visits"] = asyncio.create_task(
            _flush_visits_every(settings.visit_flush_seconds)
        )
    if settings.forget_check_seconds > 0 and (settings.forget_max_nodes or settings.forget_after_days):
        current_app.extensions["pyramind.forget"] = asyncio.create_task(_forget_every(settings.forget_check_seconds))


@lifetime.after_app_serving
async def _stop_background() -> None:
    for key in ("pyramind.visits", "pyramind.forget"):
        task = current_app.extensions.pop(key, None)
        if task is not None:
            task.cancel()
    memory: Memory | None = current_app.extensions.get("pyramind.memory")
    if memory is not None:
        try:
            await off_loop(memory.visits.flush)
        except Exception:
            log.exception("flushing visits at shutdown failed")


@lifetime.get("/conversations/<string:conversation_id>/sessions")
@tag(["memory"])
@operation_id("list_sessions")
@validate_response(SessionsResponse, 200)
@errors(401, 403, 404, 422, 429)
async def list_sessions(conversation_id: str) -> SessionsResponse:
    """List a conversation's sessions.

    Each session (explicit `session_id` on remember, or inferred from a gap of SESSION_GAP_HOURS) with its time
    range, message count, first and last message ids, and the ids of the nodes that summarise it. 404 for an
    unknown conversation.
    """
    sessions = await off_loop(app_memory().sessions.of_conversation, query_namespace(), conversation_id)
    return SessionsResponse(conversation_id=conversation_id, sessions=sessions)


@lifetime.post("/memories/<string:memory_id>/pin")
@tag(["memory"])
@operation_id("pin_memory")
@validate_response(PinResponse, 200)
@errors(401, 403, 404, 422, 429)
async def pin_memory(memory_id: str) -> PinResponse:
    """Pin a memory.

    A pinned node and every message under it are never forgotten by the forgetting policy (an explicit
    DELETE still forgets them). 404 for an unknown id or another namespace's node.
    """
    return await off_loop(app_memory().visits.pin, query_namespace(), memory_id, True)


@lifetime.post("/memories/<string:memory_id>/unpin")
@tag(["memory"])
@operation_id("unpin_memory")
@validate_response(PinResponse, 200)
@errors(401, 403, 404, 422, 429)
async def unpin_memory(memory_id: str) -> PinResponse:
    """Unpin a memory.

    The node and its messages may be forgotten by policy again. 404 for an unknown id or another namespace's node.
    """
    return await off_loop(app_memory().visits.pin, query_namespace(), memory_id, False)


@lifetime.post("/forget")
@tag(["memory"])
@operation_id("forget_by_policy")
@validate_request(ForgetRequest)
@validate_response(ForgetReport, 200)
@errors(400, 401, 403, 413, 422, 429, 503)
async def forget_by_policy(data: ForgetRequest) -> ForgetReport:
    """Apply the forgetting policy now.

    Off unless FORGET_MAX_NODES or FORGET_AFTER_DAYS is set. Forgets the least important unpinned chunks of the
    namespace (least recently visited, then least visited, then oldest); `dry_run` (default true) only reports.
    """
    return await off_loop(app_memory().policy.run, resolve_namespace(data.namespace), data.dry_run)


@lifetime.get("/export")
@hide  # an NDJSON file for backups, not an operation for GPT Actions; left out of the OpenAPI document
async def export_memories() -> Response:
    """Export the namespace as a JSONL dump (application/x-ndjson).

    Every conversation, document, message, node (level, children, parent, sessions), visit, pin and core memory
    entry, one JSON
    object per line with a checksum; `?embeddings=true` adds the vectors. `pyramind import` restores it exactly.
    """
    ns = query_namespace()
    flag = request.args.get("embeddings", "false").lower()
    if flag not in ("true", "false"):
        raise InvalidRequestError("embeddings must be true or false", "embeddings")
    from datastore.portability.dump import export_lines

    memory = app_memory()
    lines = await off_loop(lambda: [line + "\n" for line in export_lines(memory, [ns], flag == "true")])
    return Response("".join(lines), mimetype="application/x-ndjson")


@lifetime.post("/conversations/<string:conversation_id>/fork")
@tag(["memory"])
@operation_id("fork_conversation")
@validate_request(ForkRequest)
@validate_response(ForkResponse, 201)
@errors(400, 401, 403, 404, 409, 413, 422, 429)
async def fork_conversation(conversation_id: str, data: ForkRequest) -> tuple[ForkResponse, int]:
    """Branch a conversation.

    The new conversation sees this one's memory up to and including `at_message_id` and its own after; nothing
    is copied. Queries on it never see the parent's later messages or a sibling branch's. 404 for an unknown
    conversation or message.
    """
    ns = resolve_namespace(data.namespace)
    return await off_loop(
        app_memory().forks.fork, ns, conversation_id, data.at_message_id, data.new_conversation_id
    ), 201
