"""The listing routes: the namespace's conversations and documents, one source with its tree's roots, its messages,
its outline (datastore/read/outline.py).

Read-only; the logic lives in `datastore/read/listing.py`, the shapes in `models/listing.py`. Namespace-scoped like
every route: another namespace's id is a 404.
"""

from __future__ import annotations

from quart import Blueprint
from quart_schema import operation_id, tag, validate_querystring, validate_response

from models.listing import ListQuery, MessageList, MessagesQuery, NamespaceQuery, SourceDetail, SourceList
from models.outline import OutlineQuery, OutlineResponse
from server.auth import resolve_namespace
from server.common import app_memory, errors, off_loop

conversations = Blueprint("conversations", __name__)


@conversations.get("/conversations")
@tag(["browse"])
@operation_id("list_conversations")
@validate_querystring(ListQuery)
@validate_response(SourceList, 200)
@errors(401, 403, 422, 429)
async def list_conversations(query_args: ListQuery) -> SourceList:
    """List conversations and documents.

    One page (`limit`, default 20, max 100), ordered by id: each with source_type, title, time range, message
    count and nodes per level. Pass `next_cursor` as `cursor` for the next page.
    """
    ns = resolve_namespace(query_args.namespace)
    return await off_loop(app_memory().listing.sources, ns, query_args.limit, query_args.cursor)


@conversations.get("/conversations/<string:conversation_id>")
@tag(["browse"])
@operation_id("get_conversation")
@validate_querystring(NamespaceQuery)
@validate_response(SourceDetail, 200)
@errors(401, 403, 404, 422, 429)
async def get_conversation(conversation_id: str, query_args: NamespaceQuery) -> SourceDetail:
    """Get a conversation or document.

    Its summary (time range, message count, nodes per level) and `top_nodes`: the roots of its tree in time
    order. Walk down with GET /memories/{id}. 404 for an unknown id.
    """
    ns = resolve_namespace(query_args.namespace)
    return await off_loop(app_memory().listing.detail, ns, conversation_id)


@conversations.get("/conversations/<string:conversation_id>/messages")
@tag(["browse"])
@operation_id("list_messages")
@validate_querystring(MessagesQuery)
@validate_response(MessageList, 200)
@errors(401, 403, 404, 422, 429)
async def list_messages(conversation_id: str, query_args: MessagesQuery) -> MessageList:
    """List a conversation's messages.

    In order, one page at a time (`limit`, default 50, max 100; `cursor`). With `node_id`: only the messages
    that memory covers (a chunk's, or all under a summary). 404 for an unknown conversation or node.
    """
    ns = resolve_namespace(query_args.namespace)
    return await off_loop(
        app_memory().listing.messages, ns, conversation_id, query_args.limit, query_args.cursor, query_args.node_id
    )


@conversations.get("/conversations/<string:conversation_id>/outline")
@tag(["browse"])
@operation_id("get_outline")
@validate_querystring(OutlineQuery)
@validate_response(OutlineResponse, 200)
@errors(400, 401, 403, 404, 422, 429)
async def get_outline(conversation_id: str, query_args: OutlineQuery) -> OutlineResponse:
    """Outline a conversation: what was said, line by line.

    Each message's lead (filler left out) with its speaker, under its date (UTC), oldest first, cut at
    `budget_tokens` (default 2000). With `query`: the lines closest to it (hybrid), still oldest first. 404 for
    an unknown conversation.
    """
    ns = resolve_namespace(query_args.namespace)
    return await off_loop(app_memory().outline.outline, ns, conversation_id, query_args.query, query_args.budget_tokens)
