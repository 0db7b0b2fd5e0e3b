"""Request and response bodies of the HTTP API (and of the CLI and MCP callers).

Requests forbid unknown fields, so a typo is a 400 naming the field rather than silently ignored. Limits that
depend on settings (top_k, messages per call, characters) are checked by the DataStore's `validate_*` helpers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from models.memory import SourceType

Strict = ConfigDict(extra="forbid", str_strip_whitespace=False)
MAX_LEVEL_FILTER = 64


def _iso_string(value: Any) -> Any:
    if not isinstance(value, str | datetime):
        raise ValueError("must be an ISO 8601 date-time string")
    return value


# A date-time given as an ISO 8601 string (the schema says so; numbers are not taken as epoch seconds).
IsoDateTime = Annotated[datetime, BeforeValidator(_iso_string)]

RetrievalMode = Literal["dense", "text", "hybrid", "tree"]
"""How a query ranks memories; see datastore/retrieval.py."""

NAMESPACE_PATTERN = r"^[A-Za-z0-9._:@|-]{1,128}$"


def namespace_field() -> Any:
    return Field(
        default=None, pattern=NAMESPACE_PATTERN,
        description="Namespace to work in (static-token callers only; a JWT fixes it). Default: `default`.",
    )


class Message(BaseModel):
    """One chat message; `speaker` (a name) or `role` (user/assistant/system) says who said it."""

    model_config = Strict

    id: str | None = Field(default=None, min_length=1, max_length=256, description="Stable message id; resending it changes nothing.")
    speaker: str | None = Field(default=None, min_length=1, max_length=128, description="Who said it, e.g. 'Caroline'.")
    role: str | None = Field(default=None, min_length=1, max_length=64, description="Chat role, used when speaker is absent.")
    content: str = Field(min_length=1, description="The message text.")
    created_at: IsoDateTime | None = Field(default=None, description="ISO 8601 time the message was sent.")

    @model_validator(mode="after")
    def _non_blank(self) -> Message:
        if not self.content.strip():
            raise ValueError("content must not be blank")
        return self

    @property
    def who(self) -> str:
        return self.speaker or self.role or "user"


class RememberRequest(BaseModel):
    """Chat history to remember; a new conversation id is made when none is given."""

    model_config = Strict

    namespace: str | None = namespace_field()

    conversation_id: str | None = Field(default=None, min_length=1, max_length=256)
    messages: list[Message] = Field(min_length=1)
    wait: bool = Field(
        default=False, strict=True,
        description="true: answer 200 once the messages are searchable and summarised (read-your-writes), or 202 "
        "with them still pending after the server's wait limit; false: answer 202 as soon as they are stored.",
    )


class RememberResponse(BaseModel):
    conversation_id: str
    chunk_ids: list[str] = Field(description="L1 chunks created by this call.")
    updated_chunk_ids: list[str] = Field(description="Open L1 chunks this call extended.")
    summary_ids: list[str] = Field(description="Summaries (level >= 2) created by this call.")
    skipped_message_ids: list[str] = Field(default_factory=list, description="Message ids already remembered.")
    pending_message_ids: list[str] = Field(
        default_factory=list,
        description="Messages stored but not yet searchable (indexed in the background within seconds; "
        "`wait: true` waits for them). The response status is then 202.",
    )


class QueryFilter(BaseModel):
    """Restricts a search; every given field must match."""

    model_config = Strict

    conversation_id: str | None = None
    document_id: str | None = None
    source_type: SourceType | None = None
    level: int | None = Field(default=None, ge=1, le=MAX_LEVEL_FILTER, strict=True)
    min_level: int | None = Field(default=None, ge=1, le=MAX_LEVEL_FILTER, strict=True)
    max_level: int | None = Field(default=None, ge=1, le=MAX_LEVEL_FILTER, strict=True)
    speaker: str | None = None
    start_date: IsoDateTime | None = Field(default=None, description="Nodes ending at or after this time.")
    end_date: IsoDateTime | None = Field(default=None, description="Nodes starting at or before this time.")

    @model_validator(mode="after")
    def _ranges(self) -> QueryFilter:
        if self.min_level and self.max_level and self.min_level > self.max_level:
            raise ValueError("min_level must not exceed max_level")
        if self.start_date and self.end_date and self.start_date > self.end_date:
            raise ValueError("start_date must not be after end_date")
        return self


class Query(BaseModel):
    model_config = Strict

    query: str = Field(min_length=1, description="Natural-language query.")
    top_k: int = Field(default=5, ge=1, strict=True, description="How many results to return.")
    filter: QueryFilter | None = None
    mode: RetrievalMode | None = Field(
        default=None,
        description="dense (cosine, every level), text (BM25, every level), hybrid (BM25 + cosine fused, L1 "
        "chunks) or tree (summaries descended to chunks); default: the server's RETRIEVAL_MODE.",
    )


class QueryRequest(BaseModel):
    model_config = Strict

    namespace: str | None = namespace_field()

    queries: list[Query] = Field(min_length=1)


class QueryResult(BaseModel):
    """One memory returned by a search; `score`: higher is closer (the cosine in mode dense, see Query.mode)."""

    id: str
    text: str
    score: float
    level: int
    source_type: SourceType
    conversation_id: str | None = None
    document_id: str | None = None
    children: list[str]
    parent_id: str | None
    message_ids: list[str]
    speakers: list[str]
    start_time: datetime | None
    end_time: datetime | None


class QueryResults(BaseModel):
    query: str
    results: list[QueryResult]


class QueryResponse(BaseModel):
    results: list[QueryResults]


class DocumentMetadata(BaseModel):
    """Retrieval-plugin-compatible document metadata."""

    model_config = Strict

    source: str | None = Field(default=None, max_length=256)
    source_id: str | None = Field(default=None, max_length=256)
    url: str | None = Field(default=None, max_length=2048)
    created_at: IsoDateTime | None = None
    author: str | None = Field(default=None, max_length=256)


class Document(BaseModel):
    model_config = Strict

    id: str | None = Field(default=None, min_length=1, max_length=256)
    text: str = Field(min_length=1)
    metadata: DocumentMetadata | None = None


class UpsertRequest(BaseModel):
    model_config = Strict

    namespace: str | None = namespace_field()

    documents: list[Document] = Field(min_length=1)


class UpsertResponse(BaseModel):
    ids: list[str]
    pending_ids: list[str] = Field(
        default_factory=list, description="Documents stored but not yet searchable (the embedder failed; status 202)."
    )


class DeleteFilter(BaseModel):
    """Selects messages (and documents) to forget; every given field must match."""

    model_config = Strict

    conversation_id: str | None = None
    document_id: str | None = None
    speaker: str | None = None
    start_date: IsoDateTime | None = None
    end_date: IsoDateTime | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> DeleteFilter:
        if not any(v is not None for v in self.model_dump().values()):
            raise ValueError("filter needs at least one field")
        return self


class DeleteRequest(BaseModel):
    """Exactly one of: `ids` (memory node ids, message ids, conversation or document ids), `filter`, `delete_all`."""

    model_config = Strict

    namespace: str | None = namespace_field()

    ids: list[str] | None = Field(default=None, min_length=1)
    filter: DeleteFilter | None = None
    delete_all: Literal[True] | None = Field(default=None, description="true: forget the whole namespace.")

    @model_validator(mode="after")
    def _one_of(self) -> DeleteRequest:
        given = [self.ids is not None, self.filter is not None, self.delete_all is not None]
        if sum(given) != 1:
            raise ValueError("give exactly one of ids, filter or delete_all=true")
        return self


class DeleteResponse(BaseModel):
    success: bool
    deleted_messages: int = Field(description="Messages and documents forgotten.")
    deleted_nodes: int = Field(description="Chunks and summaries removed (rebuilt ones included).")


class NodeView(BaseModel):
    """A memory node as `GET /memories/{id}` returns it."""

    id: str
    text: str
    level: int
    source_type: SourceType
    conversation_id: str | None = None
    document_id: str | None = None
    position: int
    sealed: bool
    children: list[str]
    parent_id: str | None
    message_ids: list[str]
    speakers: list[str]
    start_time: datetime | None
    end_time: datetime | None
    token_count: int
    summariser: str | None


class ExpandResponse(BaseModel):
    node: NodeView
    parent: NodeView | None
    children: list[NodeView]


class Health(BaseModel):
    status: Literal["ok"]
    datastore: str
    embedder: str
    embedding_dimension: int
    summariser: str


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    """The one error shape of every 4xx and 5xx."""

    error: ErrorDetail


def node_view(node: Any) -> NodeView:
    """MemoryNode -> NodeView."""
    return NodeView(
        id=node.id,
        text=node.text,
        level=node.level,
        source_type=node.source_type,
        conversation_id=node.source_id if node.source_type == "conversation" else None,
        document_id=node.source_id if node.source_type == "document" else None,
        position=node.position,
        sealed=node.sealed,
        children=list(node.children),
        parent_id=node.parent_id,
        message_ids=list(node.message_ids),
        speakers=list(node.speakers),
        start_time=node.start_time,
        end_time=node.end_time,
        token_count=node.token_count,
        summariser=node.summariser,
    )
