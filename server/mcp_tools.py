"""The MCP front door: Pyramind's memory tools over the Model Context Protocol (the official `mcp` SDK).

Another door beside the REST routes, with no logic of its own: each tool is a few lines over the Memory
service its route calls (remember, query, expand, find, describe, outline, delete, context, core memory, standing
instructions), with the namespace resolved exactly as for REST (`server.auth.namespace_for`: a JWT fixes it; a
static-token or stdio caller may name one).

A tool's arguments are the pydantic request model of its REST route (models/), so MCP is exactly as strict as
REST: unknown arguments are refused naming them (the models forbid extra fields), the limits are REST's (the
models', plus the settings' limits of server/openapi.py's SETTING_LIMITS in the published schema and in the
services), and an error is one line naming the field, with the code of the REST error body (server/errors.py).
Adding a tool is one `ModelTool` entry in `build_mcp`: its arguments model, its output model and an async
function of (context, arguments).

Transports: stdio (`pyramind mcp`, see local_server/cli.py) and streamable HTTP at `/mcp` on the API server
(`server/mcp_http.py`, behind the REST auth).
"""

# No `from __future__ import annotations`: the SDK reads the tools' return annotations at run time.
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from datastore.indexing.background import Indexer
from datastore.memory import Memory
from models.api import (
    DeleteRequest,
    DeleteResponse,
    ExpandResponse,
    MemoryRef,
    Query,
    QueryResponse,
    RememberRequest,
    RememberResponse,
    namespace_field,
)
from models.context import ContextRequest, ContextResponse
from models.core import CoreDeleteResponse, CoreKey, CoreListResponse, CorePutRequest, CorePutResponse, CoreQuery
from models.find import FindRequest, FindResponse, StatsQuery, StatsResponse
from models.instructions import InstructionDeleteResponse, InstructionList, InstructionRef, InstructionsQuery
from models.outline import OutlineArguments, OutlineResponse
from models.settings import Settings
from server.auth import Principal, namespace_for
from server.common import off_loop
from server.errors import one_line, tool_message, validation_parts
from server.fit import fit_find, fit_query
from server.idempotency import IDEMPOTENCY_KEY_DESCRIPTION, remember_once
from server.openapi import SETTING_LIMITS, apply_limit
from services.errors import PyramindError

PRINCIPAL_KEY = "pyramind.principal"  # where server/mcp_http.py leaves the caller in the ASGI scope

INSTRUCTIONS = (
    "Pyramind is your long-term memory. Call `remember` with the messages worth keeping (the user's facts, "
    "preferences, decisions, events) and `recall` before answering anything that may depend on the past. Recall "
    "returns verbatim chunks (level 1) by default; `expand` one to reach the summary above it (level 2+), or a "
    "summary to read what it covers. `context` gives one block for the next answer (core memory first); keep "
    "lasting facts with `core_set`. Use `find` for exact words, names or numbers, `stats` for an overview, "
    "`outline` for what was said in a conversation, in order, `forget` only when the user asks. The user's "
    "standing rules and preferences, stated once in chat, are kept for you: `instructions_list` shows them."
)


class RememberArguments(RememberRequest):
    """POST /remember's body, and the Idempotency-Key header as an argument; `wait` defaults to true here, so a
    recall right after finds the messages."""

    wait: bool = Field(
        default=True,
        strict=True,
        description="true (default): return once searchable, so a recall right after finds them; false: return "
        "as soon as stored.",
    )
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=256, description=IDEMPOTENCY_KEY_DESCRIPTION
    )


class RecallArguments(Query):
    """One search of POST /query (its `queries[i]`), in the caller's namespace."""

    namespace: str | None = namespace_field()


def _principal(ctx: Context) -> Principal | None:
    """The HTTP caller (set by the /mcp auth gate), or None for stdio (a local process the user started)."""
    request = ctx.request_context.request
    scope = getattr(request, "scope", None)
    return scope.get(PRINCIPAL_KEY) if scope is not None else None


def _result(value: BaseModel) -> CallToolResult:
    """A tool's answer: the structured content, and the same as compact JSON text (the SDK's default text is
    indented, which costs a model's context tokens for nothing)."""
    data = value.model_dump(mode="json", by_alias=True)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def invalid_arguments(exc: ValidationError) -> ToolError:
    """The tool error of arguments that fail their model: one line, the REST code, the field named."""
    field, msg = validation_parts(exc)
    return ToolError(f"invalid_request: {one_line(msg, field)}")


async def _call(make: Callable[[], Awaitable[BaseModel]]) -> CallToolResult:
    """Run a store call and answer its result (`_result`); its errors become one-line tool errors with the REST
    error code and the field (the SDK reports them as is_error)."""
    try:
        return _result(await make())
    except PyramindError as exc:
        raise ToolError(tool_message(exc)) from exc
    except ValidationError as exc:
        raise invalid_arguments(exc) from exc


class _StrictTool(Tool):
    """The SDK's Tool whose arguments are validated by their model first, so that a bad call is one line naming
    the field (the SDK's own message is pydantic's multi-line text with URLs); a store's error is that line too
    (the SDK prefixes "Error executing tool <name>: " to a ToolError the tool raises: left off, so every error
    of every tool reads `code: field: message`)."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        try:
            self.fn_metadata.arg_model.model_validate(self.fn_metadata.pre_parse_json(arguments))
        except ValidationError as exc:
            raise invalid_arguments(exc) from exc
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as exc:
            if isinstance(exc.__cause__, ToolError):  # ours (`_call`), wrapped by the SDK
                raise exc.__cause__ from exc.__cause__.__cause__
            raise


def _schema_with_limits(model: type[BaseModel], settings: Settings) -> dict[str, Any]:
    """The model's JSON schema with the settings' limits REST publishes (SETTING_LIMITS), on the model's own
    properties (when it is, or derives from, the named model) and on its nested models ($defs)."""
    schema = model.model_json_schema(by_alias=True)
    names = {cls.__name__ for cls in model.__mro__}
    for (name, prop), (keyword, setting) in SETTING_LIMITS.items():
        targets = [schema] if name in names else []
        targets += [d for n, d in schema.get("$defs", {}).items() if n == name]
        for target in targets:
            if prop in target.get("properties", {}):
                apply_limit(target["properties"][prop], keyword, getattr(settings, setting))
    return schema


@dataclass(frozen=True)
class ModelTool:
    """One tool: `arguments` (a request model of models/, extra fields forbidden), `output` (its answer's model),
    `run(ctx, args)` answering an `output`, the SDK annotations; the description is `run`'s docstring."""

    arguments: type[BaseModel]
    output: type[BaseModel]
    run: Callable[[Context, Any], Awaitable[BaseModel]]
    annotations: ToolAnnotations

    def build(self, name: str, settings: Settings) -> Tool:
        """The SDK Tool: the arguments model as its input schema and validator, `run` behind `_call`."""
        arguments, run = self.arguments, self.run
        arg_model = type(f"{name}_arguments", (arguments, ArgModelBase), {"__module__": __name__})

        async def stub(ctx: Context) -> Any: ...

        stub.__annotations__ = {"ctx": Context, "return": Annotated[CallToolResult, self.output]}
        description = " ".join((run.__doc__ or "").split())  # one line: clients show it as it is
        tool = _StrictTool.from_function(stub, name=name, description=description, annotations=self.annotations)

        async def call(ctx: Context, **fields: Any) -> CallToolResult:
            return await _call(lambda: run(ctx, arguments.model_validate(fields)))

        tool.fn = call
        tool.fn_metadata.arg_model = arg_model
        tool.parameters = _schema_with_limits(arguments, settings)
        return tool


READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
FORGET = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def build_mcp(  # noqa: C901 (one short closure per tool: mccabe counts their branches as this function's)
    get_memory: Callable[[], Memory],
    settings: Settings,
    default_namespace: str | None = None,
    get_indexer: Callable[[], Indexer | None] | None = None,
) -> MCPServer:
    """An MCPServer whose tools call the Memory that `get_memory()` returns (the app's, opened at serving start).

    get_indexer: the app's background indexer, through which `remember` stores now and indexes later exactly as
    POST /remember does (None over stdio: remember indexes in the call).

    default_namespace: the namespace of callers without a principal that name none (stdio: `pyramind mcp -n`).
    """
    cap = settings.max_response_chars

    def ns(ctx: Context, requested: str | None, write: bool = False) -> str:
        principal = _principal(ctx)
        if principal is None and requested is None and default_namespace is not None:
            return default_namespace
        return namespace_for(principal, requested, write)  # ForbiddenError: a tool error like any other

    async def remember(ctx: Context, args: RememberArguments) -> RememberResponse:
        """Save chat messages to long-term memory. They are cut into chunks (level 1) and rolled up into
        summaries (level 2+). Resending a message id changes nothing; so does resending a call with the same
        `idempotency_key` within 24 hours."""
        req = RememberRequest.model_validate(args.model_dump(exclude={"idempotency_key"}))
        space = ns(ctx, args.namespace, write=True)

        async def store() -> tuple[RememberResponse, int]:
            indexer = get_indexer() if get_indexer else None
            if indexer is None:  # stdio: no background indexer; index in the call
                result = await off_loop(get_memory().writer.remember, space, req)
                return result, 202 if result.pending_message_ids else 200
            return await indexer.remember(space, req)

        return (await remember_once(get_memory(), space, args.idempotency_key, req, store))[0]

    async def recall(ctx: Context, args: RecallArguments) -> QueryResponse:
        """Search long-term memory: the memories most relevant to `query`, best first, each with its text,
        score, level, time range, speakers, parent_id and children (ids to `expand`). `filter` narrows it (a
        conversation the namespace does not hold gives no results and a warning)."""
        query = Query.model_validate(args.model_dump(exclude={"namespace"}))
        try:
            found = await off_loop(get_memory().reader.query, ns(ctx, args.namespace), [query])
        except PyramindError as exc:  # the query is the tool's arguments: `top_k`, not `queries[0].top_k`
            exc.field = exc.field.removeprefix("queries[0].") if exc.field else None
            raise
        for warning in found.warnings:
            warning.field = warning.field.removeprefix("queries[0].")
        return fit_query(found, cap)

    async def expand(ctx: Context, args: MemoryRef) -> ExpandResponse:
        """Open a memory: the node with its parent (the summary above it) and its children (what a summary
        covers, one level down, in order). Use it to zoom in on a summary or out from a chunk."""
        return await off_loop(get_memory().reader.expand, ns(ctx, args.namespace), args.id)

    async def find(ctx: Context, args: FindRequest) -> FindResponse:
        """Find the messages that contain exact words, a name, a number or a regex match (matches wrapped in
        ** marks), each with the chunk id that holds it. Use recall for meaning, find for exact text."""
        return fit_find(await off_loop(get_memory().finder.find, ns(ctx, args.namespace), args), cap)

    async def stats(ctx: Context, args: StatsQuery) -> StatsResponse:
        """Overview of what is remembered: conversations, messages, memory nodes per level, the first and last
        message time, and who spoke how often."""
        return await off_loop(get_memory().describer.describe, ns(ctx, args.namespace), args.conversation_id)

    async def outline(ctx: Context, args: OutlineArguments) -> OutlineResponse:
        """What was said in a conversation, line by line: each message's lead with its speaker, under its date,
        oldest first. Give `query` for the lines about it across the whole conversation (how things went)."""
        space = ns(ctx, args.namespace)
        return await off_loop(get_memory().outline.outline, space, args.conversation_id, args.query, args.budget_tokens)

    async def forget(ctx: Context, args: DeleteRequest) -> DeleteResponse:
        """Permanently forget memories: give exactly one of ids, filter or delete_all. Every summary built
        from a forgotten message is rebuilt without it. Only when the user asks."""
        return await off_loop(get_memory().deleter.delete, ns(ctx, args.namespace, write=True), args)

    async def context(ctx: Context, args: ContextRequest) -> ContextResponse:
        """Get one block of memory for the next answer, within a token budget: core facts, the user's standing
        instructions and preferences, recent turns, the memories most relevant to the query, and a dated
        timeline of what happened when. Put `context` in your prompt and follow its instructions."""
        return await off_loop(get_memory().context.assemble, ns(ctx, args.namespace), args)

    async def core_get(ctx: Context, args: CoreQuery) -> CoreListResponse:
        """List core memory: the short facts always shown first in the context block, most important first."""
        return await off_loop(get_memory().core.list_entries, ns(ctx, args.namespace), args.conversation_id)

    async def core_set(ctx: Context, args: CorePutRequest) -> CorePutResponse:
        """Keep a short fact in core memory (always in the context block). When the core budget is full, the
        least important, oldest facts move to long-term memory (`moved_out`), where recall still finds them."""
        return await off_loop(get_memory().core.put, ns(ctx, args.namespace, write=True), args)

    async def core_delete(ctx: Context, args: CoreKey) -> CoreDeleteResponse:
        """Remove a core-memory fact everywhere, including its moved-out copy in long-term memory."""
        space = ns(ctx, args.namespace, write=True)
        return await off_loop(get_memory().core.delete, space, args.key, args.conversation_id)

    async def instructions_list(ctx: Context, args: InstructionsQuery) -> InstructionList:
        """List the user's standing instructions and preferences (found in their messages as they are remembered),
        oldest first, each with the message, conversation, speaker and time it came from."""
        space = ns(ctx, args.namespace)
        return await off_loop(get_memory().instructions.list, space, args.conversation_id, args.include_superseded)

    async def instructions_delete(ctx: Context, args: InstructionRef) -> InstructionDeleteResponse:
        """Stop following a standing instruction or preference (its message stays); an older one it replaced is in
        force again. Only when the user asks."""
        return await off_loop(get_memory().instructions.delete, ns(ctx, args.namespace, write=True), args.id)

    tools = {
        "remember": ModelTool(RememberArguments, RememberResponse, remember, WRITE),
        "recall": ModelTool(RecallArguments, QueryResponse, recall, READ),
        "expand": ModelTool(MemoryRef, ExpandResponse, expand, READ),
        "find": ModelTool(FindRequest, FindResponse, find, READ),
        "stats": ModelTool(StatsQuery, StatsResponse, stats, READ),
        "outline": ModelTool(OutlineArguments, OutlineResponse, outline, READ),
        "forget": ModelTool(DeleteRequest, DeleteResponse, forget, FORGET),
        "context": ModelTool(ContextRequest, ContextResponse, context, READ),
        "core_get": ModelTool(CoreQuery, CoreListResponse, core_get, READ),
        "core_set": ModelTool(CorePutRequest, CorePutResponse, core_set, WRITE),
        "core_delete": ModelTool(CoreKey, CoreDeleteResponse, core_delete, FORGET),
        "instructions_list": ModelTool(InstructionsQuery, InstructionList, instructions_list, READ),
        "instructions_delete": ModelTool(InstructionRef, InstructionDeleteResponse, instructions_delete, FORGET),
    }
    return MCPServer(
        "pyramind",
        title="Pyramind memory",
        instructions=INSTRUCTIONS,
        version="0.1.0",
        log_level="WARNING",  # the SDK configures logging; keep the server's INFO chatter off
        tools=[tool.build(name, settings) for name, tool in tools.items()],
    )
