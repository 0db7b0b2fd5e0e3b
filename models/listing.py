"""Response shapes of the listing endpoints: the namespace's conversations and documents, one source with the
roots of its tree, and a source's messages (GET /conversations, /conversations/{id}, /conversations/{id}/messages).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from models.api import NAMESPACE_PATTERN, NodeView
from models.memory import SourceType

MAX_LIST_LIMIT = 100


class ListQuery(BaseModel):
    """Query string of GET /conversations."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=20, ge=1, le=MAX_LIST_LIMIT, description="Sources per page (1-100).")
    cursor: str | None = Field(default=None, max_length=1024, description="`next_cursor` of the previous page.")
    namespace: str | None = Field(default=None, pattern=NAMESPACE_PATTERN, description="Static-token callers only.")


class MessagesQuery(ListQuery):
    """Query string of GET /conversations/{id}/messages."""

    limit: int = Field(default=50, ge=1, le=MAX_LIST_LIMIT, description="Messages per page (1-100).")
    node_id: str | None = Field(
        default=None, max_length=256, description="Only the messages a memory covers (a chunk or a summary)."
    )


class NamespaceQuery(BaseModel):
    """Query string of GET /conversations/{id}."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(default=None, pattern=NAMESPACE_PATTERN, description="Static-token callers only.")


class SourceSummary(BaseModel):
    """A conversation or a document: its time range, message count and nodes per level."""

    id: str = Field(description="Conversation or document id (as given to /remember or /upsert).")
    source_type: SourceType = Field(description="conversation or document.")
    title: str | None = Field(default=None, description="The source's title when it has one.")
    start_time: datetime | None = Field(description="Earliest time its memories cover (None: messages untimed).")
    end_time: datetime | None = Field(description="Latest time its memories cover (None: messages untimed).")
    message_count: int = Field(description="Messages (a document counts as one).")
    node_counts: dict[str, int] = Field(description="Nodes per level, keyed by level: {'1': 40, '2': 8, '3': 1}.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="A document's metadata (url, author...).")


class SourceList(BaseModel):
    """One page of the namespace's conversations and documents."""

    conversations: list[SourceSummary] = Field(description="Conversations and documents, ordered by id.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; None on the last page.")


class SourceDetail(BaseModel):
    """A conversation or document and the roots of its memory tree."""

    conversation: SourceSummary = Field(description="The source: time range, message count, nodes per level.")
    top_nodes: list[NodeView] = Field(
        description="The roots of the source's tree (nodes without a parent) in time order; expand each with "
        "GET /memories/{id}."
    )


class MessageView(BaseModel):
    """One stored message (a document is one message)."""

    id: str = Field(description="Message id (as given to /remember, else generated); a document's is its id.")
    conversation_id: str = Field(description="Its conversation or document id.")
    source_type: SourceType = Field(description="conversation or document.")
    seq: int = Field(description="Position in the source, from 0.")
    speaker: str = Field(
        description="Who said it (speaker, else role, else 'user'); a document's author, else 'document'."
    )
    content: str = Field(description="The message text as remembered.")
    created_at: datetime | None = Field(description="ISO 8601 UTC time it was sent; null: untimed.")
    session_id: str | None = Field(
        default=None, description="Its session (given, or inferred from time gaps); null for a document."
    )


class MessageList(BaseModel):
    """One page of a source's messages."""

    messages: list[MessageView] = Field(description="In order (seq).")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; None on the last page.")
