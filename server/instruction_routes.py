"""Routes of standing instructions and preferences: GET /instructions, DELETE /instructions/{instruction_id}.

Each calls `memory.instructions` (datastore/lifetime/instructions.py) in the caller's namespace; the instructions
themselves are found while messages are indexed, never here. Shapes are in models/instructions.py.
"""

from __future__ import annotations

from quart import Blueprint
from quart_schema import operation_id, tag, validate_querystring, validate_response

from models.instructions import InstructionDeleteResponse, InstructionList, InstructionsQuery
from models.listing import NamespaceQuery
from server.auth import resolve_namespace
from server.common import app_memory, errors, off_loop

instructions_api = Blueprint("instructions_api", __name__)


@instructions_api.get("/instructions")
@tag(["instructions"])
@operation_id("instructions_list")
@validate_querystring(InstructionsQuery)
@validate_response(InstructionList, 200)
@errors(401, 403, 422, 429, 501)
async def instructions_list(query_args: InstructionsQuery) -> InstructionList:
    """List standing instructions and preferences.

    Rules and lasting preferences the user stated in chat, found as messages are remembered, oldest first, each
    with its kind, message, conversation, speaker and time. A later one on a subject replaces the older. An
    unknown conversation_id lists none, with a `warnings` entry.
    """
    ns = resolve_namespace(query_args.namespace)
    return await off_loop(app_memory().instructions.list, ns, query_args.conversation_id, query_args.include_superseded)


@instructions_api.delete("/instructions/<string:instruction_id>")
@tag(["instructions"])
@operation_id("instructions_delete")
@validate_querystring(NamespaceQuery)
@validate_response(InstructionDeleteResponse, 200)
@errors(401, 403, 404, 422, 429, 501)
async def instructions_delete(instruction_id: str, query_args: NamespaceQuery) -> InstructionDeleteResponse:
    """Delete a standing instruction.

    Stops following it; the message it came from stays. An older instruction it had replaced is in force
    again (`reactivated`). 404 when the id is unknown.
    """
    ns = resolve_namespace(query_args.namespace)
    return await off_loop(app_memory().instructions.delete, ns, instruction_id)
