"""The MCP front door: Pyramind's memory tools over the Model Context Protocol (the official `mcp` SDK).

Another door beside the REST routes, with no logic of its own: each tool is a few lines over the Memory
service its route calls (remember, query, expand, find, describe, outline, delete, context, core memory, standing
instructions), with the
namespace resolved exactly as for REST (`server.auth.namespace_for`: a JWT fixes it; a static-token or stdio
caller may name one). Inputs and outputs are pydantic types, so every call answers structured content with a
schema. Store errors become tool errors that name the argument (`ids: unknown ids: ...`); nothing is changed by
a call that fails.

Transports: stdio (`pyramind mcp`, see local_server/cli.py) and streamable HTTP at `/mcp` on the API server
(`server/mcp_http.py`, behind the REST auth).
"""

# No `from __future__ import annotations`: the SDK reads the tool signatures, whose limits come from settings.
import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from datastore.indexing.background import Indexer
from datastore.memory import Memory
from models.api import (
    MAX_LEVEL_FILTER,
    DeleteFilter,
    DeleteRequest,
    DeleteResponse,
    ExpandResponse,
    Message,
    Query,
    QueryFilter,
    QueryResponse,
    RememberRequest,
    RememberResponse,
    RetrievalMode,
)
from models.context import ContextRequest, ContextResponse
from models.core import (
    MAX_TTL_SECONDS,
    CoreDeleteResponse,
    CoreListResponse,
    CorePutRequest,
    CorePutResponse,
)
from models.find import MAX_PATTERN_CHARS, FindRequest, FindResponse, StatsResponse
from models.instructions import InstructionDeleteResponse, InstructionList
from models.outline import DEFAULT_OUTLINE_BUDGET, MAX_OUTLINE_BUDGET, MAX_OUTLINE_QUERY_CHARS, OutlineResponse
from models.settings import Settings
from server.auth import Principal, namespace_for
from server.common import off_loop
from server.fit import fit_find, fit_query
from services.errors import PyramindError

F = TypeVar("F", bound=Callable[..., Any])
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

Namespace = Annotated[
    str | None,
    Field(
        default=None,
        pattern=r"^[A-Za-z0-9._:@|-]{1,128}$",
        description="Namespace to work in; omit it (a token may fix it). Default: `default`.",
    ),
]
ConversationId = Annotated[
    str | None, Field(default=None, min_length=1, max_length=256, description="Only this conversation (or document).")
]
Speaker = Annotated[
    str | None, Field(default=None, min_length=1, max_length=128, description="Only what this speaker said.")
]
StartDate = Annotated[datetime | None, Field(default=None, description="ISO 8601; only from this time on.")]
EndDate = Annotated[datetime | None, Field(default=None, description="ISO 8601; only up to this time.")]
Level = Annotated[int | None, Field(default=None, ge=1, le=MAX_LEVEL_FILTER, strict=True)]


def _principal(ctx: Context) -> Principal | None:
    """The HTTP caller (set by the /mcp auth gate), or None for stdio (a local process the user started)."""
    request = ctx.request_context.request
    scope = getattr(request, "scope", None)
    return scope.get(PRINCIPAL_KEY) if scope is not None else None


def _field(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "arguments"


def _one_line(fn: F) -> F:
    """The tool's docstring (its MCP description) as one line: clients show descriptions as they are, so the
    docstring's wrapping would reach them as hard line breaks."""
    fn.__doc__ = " ".join((fn.__doc__ or "").split())
    return fn


def _result(value: BaseModel) -> CallToolResult:
    """A tool's answer: the structured content, and the same as compact JSON text (the SDK's default text is
    indented, which costs a model's context tokens for nothing)."""
    data = value.model_dump(mode="json", by_alias=True)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


async def _call(make: Callable[[], Awaitable[BaseModel]]) -> CallToolResult:
    """Run a store call and answer its result (`_result`); its errors become tool errors naming the argument (the
    SDK reports them as is_error)."""
    try:
        return _result(await make())
    except PyramindError as exc:
        raise ToolError(f"{exc.field}: {exc.message}" if exc.field else exc.message) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ToolError(f"{_field(tuple(first.get('loc', ())))}: {first.get('msg', 'invalid value')}") from exc


def build_mcp(
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
    mcp = MCPServer(
        "pyramind", title="Pyramind memory", instructions=INSTRUCTIONS, version="0.1.0", log_level="WARNING"
    )  # the SDK configures logging; keep the server's INFO chatter off
    cap = settings.max_response_chars

    def ns(ctx: Context, requested: str | None, write: bool = False) -> str:
        principal = _principal(ctx)
        if principal is None and requested is None and default_namespace is not None:
            return default_namespace
        try:
            return namespace_for(principal, requested, write)
        except PyramindError as exc:
            raise ToolError(f"{exc.field}: {exc.message}") from exc

    read = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @mcp.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        )
    )
    @_one_line
    async def remember(
        ctx: Context,
        messages: Annotated[
            list[Message],
            Field(
                min_length=1,
                max_length=settings.max_messages,
                description="Messages in order; give `id`s so resending is safe.",
            ),
        ],
        conversation_id: Annotated[
            str | None,
            Field(
                default=None,
                min_length=1,
                max_length=256,
                description="Conversation to append to; omit to start a new one (its id is returned).",
            ),
        ] = None,
        wait: Annotated[
            bool,
            Field(
                description="true: return once searchable, so a recall right after finds "
                "them; false: return as soon as stored."
            ),
        ] = True,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, RememberResponse]:
        """Save chat messages to long-term memory. They are cut into chunks (level 1) and rolled up into
        summaries (level 2+). Resending a message id changes nothing."""

        async def run() -> RememberResponse:
            req = RememberRequest(conversation_id=conversation_id, messages=messages, wait=wait)
            indexer = get_indexer() if get_indexer else None
            if indexer is None:  # stdio: no background indexer; index in the call
                return await off_loop(get_memory().writer.remember, ns(ctx, namespace, write=True), req)
            return (await indexer.remember(ns(ctx, namespace, write=True), req))[0]

        return await _call(run)

    @mcp.tool(annotations=read)
    @_one_line
    async def recall(
        ctx: Context,
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=settings.max_message_chars,
                description="What to search for, in natural language: a question or a few words.",
            ),
        ],
        top_k: Annotated[
            int, Field(ge=1, le=settings.max_top_k, strict=True, description="How many memories to return.")
        ] = 5,
        mode: Annotated[
            RetrievalMode | None,
            Field(
                description="hybrid (words + meaning over chunks), dense (meaning, every level), text (words) or "
                "tree (summaries first); default: the server's."
            ),
        ] = None,
        conversation_id: ConversationId = None,
        speaker: Speaker = None,
        level: Annotated[
            int | None,
            Field(ge=1, le=MAX_LEVEL_FILTER, strict=True, description="Only this level (1 = chunks, 2+ = summaries)."),
        ] = None,
        start_date: StartDate = None,
        end_date: EndDate = None,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, QueryResponse]:
        """Search long-term memory: the memories most relevant to `query`, best first, each with its text,
        score, level, time range, speakers, parent_id and children (ids to `expand`)."""
        given = (conversation_id, speaker, level, start_date, end_date)

        async def run() -> QueryResponse:  # the shapes are built inside `_call`: their errors name the field
            flt = (
                QueryFilter(
                    conversation_id=conversation_id,
                    speaker=speaker,
                    level=level,
                    start_date=start_date,
                    end_date=end_date,
                )
                if any(v is not None for v in given)
                else None
            )
            q = Query(query=query, top_k=top_k, mode=mode, filter=flt)
            return fit_query(await off_loop(get_memory().reader.query, ns(ctx, namespace), [q]), cap)

        return await _call(run)

    @mcp.tool(annotations=read)
    @_one_line
    async def expand(
        ctx: Context,
        id: Annotated[str, Field(min_length=1, max_length=512, description="A memory id from recall or find.")],
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, ExpandResponse]:
        """Open a memory: the node with its parent (the summary above it) and its children (what a summary
        covers, one level down, in order). Use it to zoom in on a summary or out from a chunk."""
        return await _call(lambda: off_loop(get_memory().reader.expand, ns(ctx, namespace), id))

    @mcp.tool(annotations=read)
    @_one_line
    async def find(
        ctx: Context,
        pattern: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_PATTERN_CHARS,
                description="Exact words to find, or an RE2 regex when `regex` is true.",
            ),
        ],
        regex: Annotated[bool, Field(strict=True, description="true: `pattern` is a regex.")] = False,
        case_sensitive: Annotated[bool, Field(strict=True, description="true: match letter case.")] = False,
        conversation_id: ConversationId = None,
        speaker: Speaker = None,
        start_date: StartDate = None,
        end_date: EndDate = None,
        limit: Annotated[
            int, Field(ge=1, le=settings.find_max_limit, strict=True, description="Most messages to return.")
        ] = 20,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, FindResponse]:
        """Find the messages that contain exact words, a name, a number or a regex match (matches wrapped in
        ** marks), each with the chunk id that holds it. Use recall for meaning, find for exact text."""

        async def run() -> FindResponse:
            req = FindRequest(
                pattern=pattern,
                regex=regex,
                case_sensitive=case_sensitive,
                limit=limit,
                conversation_id=conversation_id,
                speaker=speaker,
                start_date=start_date,
                end_date=end_date,
            )
            return fit_find(await off_loop(get_memory().finder.find, ns(ctx, namespace), req), cap)

        return await _call(run)

    @mcp.tool(annotations=read)
    @_one_line
    async def stats(
        ctx: Context,
        conversation_id: Annotated[
            str | None,
            Field(
                default=None,
                min_length=1,
                max_length=256,
                description="Describe only this conversation; omit for the whole namespace.",
            ),
        ] = None,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, StatsResponse]:
        """Overview of what is remembered: conversations, messages, memory nodes per level, the first and last
        message time, and who spoke how often."""
        return await _call(lambda: off_loop(get_memory().describer.describe, ns(ctx, namespace), conversation_id))

    @mcp.tool(annotations=read)
    @_one_line
    async def outline(
        ctx: Context,
        conversation_id: Annotated[
            str, Field(min_length=1, max_length=256, description="The conversation to outline.")
        ],
        query: Annotated[
            str | None,
            Field(
                default=None,
                min_length=1,
                max_length=MAX_OUTLINE_QUERY_CHARS,
                description="Only the lines closest to this (still oldest first); omit for every line.",
            ),
        ] = None,
        budget_tokens: Annotated[
            int,
            Field(ge=20, le=MAX_OUTLINE_BUDGET, strict=True, description="Most tokens of the outline's text."),
        ] = DEFAULT_OUTLINE_BUDGET,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, OutlineResponse]:
        """What was said in a conversation, line by line: each message's lead with its speaker, under its date,
        oldest first. Give `query` for the lines about it across the whole conversation (how things went)."""
        return await _call(
            lambda: off_loop(get_memory().outline.outline, ns(ctx, namespace), conversation_id, query, budget_tokens)
        )

    @mcp.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        )
    )
    @_one_line
    async def forget(
        ctx: Context,
        ids: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=512)]] | None,
            Field(
                default=None,
                min_length=1,
                max_length=1000,
                description="Memory, message, conversation or document ids to forget.",
            ),
        ] = None,
        filter: Annotated[
            DeleteFilter | None, Field(description="Forget the messages matching all of these fields instead.")
        ] = None,
        delete_all: Annotated[bool, Field(strict=True, description="true: forget the whole namespace.")] = False,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, DeleteResponse]:
        """Permanently forget memories: give exactly one of ids, filter or delete_all. Every summary built
        from a forgotten message is rebuilt without it. Only when the user asks."""
        return await _call(
            lambda: off_loop(
                get_memory().deleter.delete,
                ns(ctx, namespace, write=True),
                DeleteRequest(ids=ids, filter=filter, delete_all=True if delete_all else None),
            )
        )

    @mcp.tool(annotations=read)
    @_one_line
    async def context(
        ctx: Context,
        conversation_id: Annotated[
            str | None,
            Field(
                default=None,
                min_length=1,
                max_length=256,
                description="The conversation being answered (its recent turns, core entries and timeline).",
            ),
        ] = None,
        query: Annotated[
            str | None,
            Field(
                default=None,
                min_length=1,
                max_length=8000,
                description="What the memories should serve; default: the conversation's latest message.",
            ),
        ] = None,
        budget_tokens: Annotated[
            int | None,
            Field(
                default=None,
                ge=1,
                le=settings.context_max_tokens,
                strict=True,
                description="Token budget of the whole block (default 2000).",
            ),
        ] = None,
        recent: Annotated[
            bool, Field(strict=True, description="false: leave out the recent turns (you have them already).")
        ] = True,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, ContextResponse]:
        """Get one block of memory for the next answer, within a token budget: core facts, the user's standing
        instructions and preferences, recent turns, the memories most relevant to the query, and a dated
        timeline of what happened when. Put `context` in your prompt and follow its instructions."""
        return await _call(
            lambda: off_loop(
                get_memory().context.assemble,
                ns(ctx, namespace),
                ContextRequest(
                    conversation_id=conversation_id, query=query, budget_tokens=budget_tokens, recent=recent
                ),
            )
        )

    @mcp.tool(annotations=read)
    @_one_line
    async def core_get(
        ctx: Context,
        conversation_id: Annotated[
            str | None,
            Field(
                default=None,
                min_length=1,
                max_length=256,
                description="Entries of this conversation; omit for the namespace's.",
            ),
        ] = None,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, CoreListResponse]:
        """List core memory: the short facts always shown first in the context block, most important first."""
        return await _call(lambda: off_loop(get_memory().core.list_entries, ns(ctx, namespace), conversation_id))

    @mcp.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        )
    )
    @_one_line
    async def core_set(
        ctx: Context,
        key: Annotated[
            str, Field(min_length=1, max_length=128, pattern=r"^[^\n]+$", description="Name of the fact, e.g. 'diet'.")
        ],
        value: Annotated[str, Field(min_length=1, max_length=8000, description="The fact itself.")],
        importance: Annotated[
            int, Field(ge=0, le=100, strict=True, description="0-100; the least important move out first.")
        ] = 50,
        ttl_seconds: Annotated[
            int | None,
            Field(
                default=None,
                ge=1,
                le=MAX_TTL_SECONDS,
                strict=True,
                description="Seconds until it expires; omit: never.",
            ),
        ] = None,
        conversation_id: Annotated[
            str | None,
            Field(
                default=None,
                min_length=1,
                max_length=256,
                description="Scope it to one conversation; omit for the namespace.",
            ),
        ] = None,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, CorePutResponse]:
        """Keep a short fact in core memory (always in the context block). When the core budget is full, the
        least important, oldest facts move to long-term memory (`moved_out`), where recall still finds them."""
        return await _call(
            lambda: off_loop(
                get_memory().core.put,
                ns(ctx, namespace, write=True),
                CorePutRequest(
                    key=key,
                    value=value,
                    importance=importance,
                    ttl_seconds=ttl_seconds,
                    conversation_id=conversation_id,
                ),
            )
        )

    @mcp.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        )
    )
    @_one_line
    async def core_delete(
        ctx: Context,
        key: Annotated[str, Field(min_length=1, max_length=128, description="The fact's name.")],
        conversation_id: Annotated[
            str | None,
            Field(default=None, min_length=1, max_length=256, description="The conversation it is scoped to, if any."),
        ] = None,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, CoreDeleteResponse]:
        """Remove a core-memory fact everywhere, including its moved-out copy in long-term memory."""
        return await _call(
            lambda: off_loop(get_memory().core.delete, ns(ctx, namespace, write=True), key, conversation_id)
        )

    @mcp.tool(annotations=read)
    @_one_line
    async def instructions_list(
        ctx: Context,
        conversation_id: Annotated[
            str | None,
            Field(
                default=None,
                min_length=1,
                max_length=256,
                description="Only those said in this conversation; omit for the namespace's.",
            ),
        ] = None,
        include_superseded: Annotated[
            bool, Field(strict=True, description="true: also those a later one on the same subject replaced.")
        ] = False,
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, InstructionList]:
        """List the user's standing instructions and preferences (found in their messages as they are remembered),
        oldest first, each with the message, conversation, speaker and time it came from."""
        return await _call(
            lambda: off_loop(get_memory().instructions.list, ns(ctx, namespace), conversation_id, include_superseded)
        )

    @mcp.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        )
    )
    @_one_line
    async def instructions_delete(
        ctx: Context,
        id: Annotated[str, Field(min_length=1, max_length=256, description="An id from instructions_list.")],
        namespace: Namespace = None,
    ) -> Annotated[CallToolResult, InstructionDeleteResponse]:
        """Stop following a standing instruction or preference (its message stays); an older one it replaced is in
        force again. Only when the user asks."""
        return await _call(lambda: off_loop(get_memory().instructions.delete, ns(ctx, namespace, write=True), id))

    return mcp
