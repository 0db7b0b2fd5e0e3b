"""Request and response bodies of the HTTP API (and of the CLI and MCP callers).

Requests forbid unknown fields, so a typo is a 400 naming the field rather than silently ignored. Limits that
depend on settings (top_k, messages per call, characters) are checked by the DataStore's `validate_*` helpers.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeGuard

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from models.memory import SourceType

Strict = ConfigDict(extra="forbid", str_strip_whitespace=False)


class FieldError(ValueError):
    """What a check across fields raises to blame one of them: pydantic reports such a check at the model's own
    location, and the error body's `field` (server/errors.py, `validation_parts`) then names `field` below it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


MAX_LEVEL_FILTER = 64


def _iso_string(value: Any) -> Any:
    if not isinstance(value, str | datetime):
        raise ValueError("must be an ISO 8601 date-time string")
    return value


def _in_utc(value: datetime) -> datetime:
    """The aware UTC time (a naive time is UTC, as documented); a time that has no UTC equivalent in years
    1..9999 (e.g. `9999-12-31T23:59:59-01:00`) is an `out_of_range` error, which the API answers with 422."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise PydanticCustomError(
            "out_of_range", "date-time out of range: its UTC time must lie within years 1 to 9999"
        ) from None


# A date-time given as an ISO 8601 string (the schema says so; numbers are not taken as epoch seconds), kept as
# an aware UTC datetime. Every date field of the API uses it, so no later conversion can overflow or mix naive
# and aware times.
IsoDateTime = Annotated[datetime, BeforeValidator(_iso_string), AfterValidator(_in_utc)]

# Characters that would break a rendered line: control characters (newline, tab, escape...) and the Unicode
# line and paragraph separators.
_LINE_BREAKING = frozenset({"Cc", "Zl", "Zp"})


def _name(value: str | None) -> str | None:
    """A speaker, role or author name: one line that starts with a visible character, so a name can never
    start (or forge) a line of a chunk's text. A `bad_name` error, answered with 422."""
    if value is None:
        return None
    if any(unicodedata.category(ch) in _LINE_BREAKING for ch in value):
        raise PydanticCustomError("bad_name", "must not contain control characters or line breaks")
    if value[:1].isspace():
        raise PydanticCustomError("bad_name", "must not start with whitespace")
    return value


Name = Annotated[str, AfterValidator(_name)]

RetrievalMode = Literal["dense", "text", "hybrid", "tree"]
"""How a query ranks memories; see datastore/read/ranking.py."""

NAMESPACE_PATTERN = r"^[A-Za-z0-9._:@|-]{1,128}$"
DEFAULT_NAMESPACE = "default"  # the namespace of a caller that names none (and of a token without one)


def is_namespace(value: object) -> TypeGuard[str]:
    """Whether `value` is a valid namespace: the whole string matches NAMESPACE_PATTERN (a trailing newline
    does not pass, as it would with `re.match` and `$`)."""
    return isinstance(value, str) and re.fullmatch(NAMESPACE_PATTERN, value) is not None


def optional_text(description: str) -> Any:
    """An optional string field of 1 to 256 characters (an id, a conversation or session id, a name, a title)."""
    return Field(default=None, min_length=1, max_length=256, description=description)


def namespace_field() -> Any:
    return Field(
        default=None,
        pattern=NAMESPACE_PATTERN,
        description="Namespace to work in (static-token callers only; a JWT fixes it). Default: `default`.",
    )


class Message(BaseModel):
    """One chat message; `speaker` (a name) or `role` (user/assistant/system) says who said it."""

    model_config = Strict

    id: str | None = optional_text(
        "Stable message id; resending it changes nothing. Without one, a message is "
        "new each time it is sent (its generated id is in the answer's message_ids)."
    )
    speaker: Name | None = Field(
        default=None, min_length=1, max_length=128, description="Who said it, e.g. 'Caroline'."
    )
    role: Name | None = Field(
        default=None, min_length=1, max_length=64, description="Chat role, used when speaker is absent."
    )
    content: str = Field(min_length=1, description="The message text.")
    created_at: IsoDateTime | None = Field(
        default=None, description="ISO 8601 time the message was sent; default: the time it is received."
    )
    session_id: str | None = optional_text(
        "Session of this message; default the call's session_id, else inferred from time gaps."
    )

    @model_validator(mode="after")
    def _non_blank(self) -> Message:
        if not self.content.strip():
            raise FieldError("content", "content must not be blank")
        return self

    @property
    def who(self) -> str:
        return self.speaker or self.role or "user"


class RememberRequest(BaseModel):
    """Chat history to remember; a new conversation id is made when none is given."""

    model_config = Strict

    namespace: str | None = namespace_field()

    conversation_id: str | None = Field(
        default=None, min_length=1, max_length=256, description="Conversation to append to; omit to start a new one."
    )
    title: Name | None = optional_text(
        "The conversation's title, kept when it has none yet (a later one does not replace it); "
        "listed by GET /conversations."
    )
    user: Name | None = optional_text(
        "The speaker whose memory this is, in a chat between people (e.g. Jon of Jon and Gina): only "
        "their preferences are kept; without it none are. Kept by the conversation; it cannot change."
    )
    messages: list[Message] = Field(min_length=1, description="The messages, oldest first.")
    session_id: str | None = optional_text(
        "Session of the messages without their own; default: inferred (a gap of SESSION_GAP_HOURS starts one)."
    )
    wait: bool = Field(
        default=False,
        strict=True,
        description="true: answer 200 once the messages are searchable and summarised (read-your-writes), or 202 "
        "with them still pending after the server's wait limit; false: answer 202 as soon as they are stored.",
    )


class IdempotencyHeaders(BaseModel):
    """Headers of POST /remember and POST /upsert."""

    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        pattern=r"^[\x21-\x7e]+$",
        description="Any unique string (e.g. a UUID) per request; a retry with the same key within 24 hours answers "
        "what the first call answered and stores nothing twice. The same key with another body: 422.",
    )


class RememberResponse(BaseModel):
    """What a remember call stored."""

    conversation_id: str = Field(description="The conversation the messages were added to.")
    message_ids: list[str] = Field(
        default_factory=list,
        description="The id of each message of the call, in order: given, or generated for one sent without; "
        "resend with these ids to change nothing.",
    )
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

    conversation_id: str | None = Field(default=None, description="Only this conversation.")
    document_id: str | None = Field(default=None, description="Only this document.")
    source_type: SourceType | None = Field(default=None, description="Only conversations or only documents.")
    level: int | None = Field(
        default=None,
        ge=1,
        le=MAX_LEVEL_FILTER,
        strict=True,
        description="Only this level: 1 = verbatim chunks, 2+ = summaries.",
    )
    min_level: int | None = Field(
        default=None, ge=1, le=MAX_LEVEL_FILTER, strict=True, description="Only this level or above."
    )
    max_level: int | None = Field(
        default=None, ge=1, le=MAX_LEVEL_FILTER, strict=True, description="Only this level or below."
    )
    speaker: str | None = Field(default=None, description="Only memories where this speaker speaks.")
    session_id: str | None = Field(default=None, description="Nodes covering messages of this session.")
    start_date: IsoDateTime | None = Field(default=None, description="Nodes ending at or after this time.")
    end_date: IsoDateTime | None = Field(default=None, description="Nodes starting at or before this time.")

    @model_validator(mode="after")
    def _ranges(self) -> QueryFilter:
        if self.min_level and self.max_level and self.min_level > self.max_level:
            raise FieldError("min_level", "min_level must not exceed max_level")
        if self.start_date and self.end_date and self.start_date > self.end_date:
            raise FieldError("start_date", "start_date must not be after end_date")
        return self


class Query(BaseModel):
    model_config = Strict

    query: str = Field(min_length=1, description="What to search for, in natural language: a question or a few words.")
    top_k: int = Field(default=5, ge=1, strict=True, description="How many results to return.")
    filter: QueryFilter | None = Field(default=None, description="Only memories matching every given field.")
    mode: RetrievalMode | None = Field(
        default=None,
        description="dense (cosine, every level), text (BM25, every level), hybrid (BM25 + cosine fused, L1 "
        "chunks) or tree (summaries descended to chunks); default: the server's RETRIEVAL_MODE.",
    )
    neighbours: int = Field(
        default=0,
        ge=0,
        le=3,
        strict=True,
        description="Also return up to this many chunks before and after each chunk hit (its neighbouring turns), "
        "each marked with `context_of` the hit.",
    )


class QueryRequest(BaseModel):
    """One or more searches, answered in one call."""

    model_config = Strict

    namespace: str | None = namespace_field()
    namespaces: list[Annotated[str, Field(pattern=NAMESPACE_PATTERN)]] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description="Search these namespaces together: your own and those you were granted to read (else 403). "
        "Each result names its `namespace`.",
    )

    queries: list[Query] = Field(min_length=1, description="The searches; each is answered on its own.")


class QueryResult(BaseModel):
    """One memory returned by a search; `score`: higher is closer, on one scale per mode across queries (hybrid
    and text in [0, 1], dense the cosine; see the README's "What a query returns")."""

    id: str = Field(description="Memory id; expand it with GET /memories/{id}.")
    text: str = Field(description="The chunk's verbatim lines, or the summary.")
    score: float = Field(description="Relevance; higher is closer.")
    level: int = Field(description="1 = verbatim chunk, 2+ = summary of 5 nodes one level down.")
    source_type: SourceType = Field(description="conversation or document.")
    conversation_id: str | None = Field(default=None, description="Conversation it comes from.")
    document_id: str | None = Field(default=None, description="Document it comes from.")
    children: list[str] = Field(description="Ids of the nodes one level down that a summary covers.")
    parent_id: str | None = Field(description="Id of the summary one level up, if any.")
    message_ids: list[str] = Field(description="Ids of the messages it covers.")
    speakers: list[str] = Field(description="Who speaks in it.")
    start_time: datetime | None = Field(description="Time of its first message.")
    end_time: datetime | None = Field(description="Time of its last message.")
    session_id: str | None = Field(default=None, description="Session of the node's first message.")
    session_ids: list[str] = Field(default_factory=list, description="Every session the node covers.")
    namespace: str | None = Field(default=None, description="Namespace the memory came from (with `namespaces`).")
    context_of: str | None = Field(
        default=None, description="Set on a neighbouring chunk added by `neighbours`: the id of the hit it surrounds."
    )


class RequestWarning(BaseModel):
    """Something the request named that the namespace does not hold; the answer is still 200, with nothing from
    it. `unknown_conversation`: a filter names a conversation not (or not yet, or no longer) remembered."""

    code: Literal["unknown_conversation"] = Field(description="Machine-readable warning code.")
    message: str = Field(description="What was not found, for a person.")
    field: str = Field(description="The request field that named it, e.g. queries[0].filter.conversation_id.")
    conversation_id: str = Field(description="The conversation id the namespace does not hold.")


def unknown_conversation(conversation_id: str, field: str, where: str = "this namespace") -> RequestWarning:
    """The warning of a filter naming a conversation that `where` does not hold."""
    return RequestWarning(
        code="unknown_conversation",
        message=f"no conversation {conversation_id!r} in {where}: nothing from it",
        field=field,
        conversation_id=conversation_id,
    )


WARNINGS_DESCRIPTION = (
    "Filters that named what the namespace does not hold (code unknown_conversation, with conversation_id and "
    "field); the results are then empty for them. Absent or [] when none."
)


class QueryResults(BaseModel):
    """The results of one search."""

    query: str = Field(description="The search text.")
    results: list[QueryResult] = Field(description="Best first.")


class QueryResponse(BaseModel):
    """Results per search, in the order of the searches."""

    results: list[QueryResults] = Field(description="One entry per search.")
    truncated: bool = Field(
        default=False, description="true when the lowest-ranked results were cut to keep the answer small."
    )
    warnings: list[RequestWarning] = Field(default_factory=list, description=WARNINGS_DESCRIPTION)


class DocumentMetadata(BaseModel):
    """Retrieval-plugin-compatible document metadata."""

    model_config = Strict

    source: str | None = Field(default=None, max_length=256, description="Where it comes from, e.g. file or email.")
    source_id: str | None = Field(default=None, max_length=256, description="Its id at the source.")
    url: str | None = Field(default=None, max_length=2048, description="Its URL.")
    created_at: IsoDateTime | None = Field(default=None, description="ISO 8601 time it was written.")
    author: Name | None = Field(default=None, max_length=256, description="Who wrote it.")


class Document(BaseModel):
    """A document to remember, chunked and summarised like a conversation."""

    model_config = Strict

    id: str | None = optional_text("Document id; a stored id is replaced. Omit for a new id.")
    text: str = Field(min_length=1, description="The document text.")
    metadata: DocumentMetadata | None = Field(default=None, description="Optional source, author, time, URL.")


class UpsertRequest(BaseModel):
    """Documents to store."""

    model_config = Strict

    namespace: str | None = namespace_field()

    documents: list[Document] = Field(min_length=1, description="The documents.")


class UpsertResponse(BaseModel):
    """The stored documents' ids."""

    ids: list[str] = Field(description="Ids of the documents, in order.")
    pending_ids: list[str] = Field(
        default_factory=list, description="Documents stored but not yet searchable (the embedder failed; status 202)."
    )


class DeleteFilter(BaseModel):
    """Selects messages (and documents) to forget; every given field must match."""

    model_config = Strict

    conversation_id: str | None = Field(default=None, description="Messages of this conversation.")
    document_id: str | None = Field(default=None, description="This document.")
    speaker: str | None = Field(default=None, description="Messages by this speaker.")
    start_date: IsoDateTime | None = Field(default=None, description="Messages sent at or after this time.")
    end_date: IsoDateTime | None = Field(default=None, description="Messages sent at or before this time.")

    @model_validator(mode="after")
    def _not_empty(self) -> DeleteFilter:
        if not any(v is not None for v in self.model_dump().values()):
            raise ValueError("filter needs at least one field")
        return self


def _strict_true(value: Any) -> Any:
    """`delete_all` takes the JSON boolean only: 1, 1.0 or "true" are refused, not read as true."""
    if value is not None and not isinstance(value, bool):
        raise ValueError("must be the boolean true")
    return value


class DeleteRequest(BaseModel):
    """Exactly one of: `ids` (memory node, message, conversation or document ids), `filter`, `delete_all`.

    Message ids are unique within their conversation only: a message id held by several conversations (or
    documents) is refused as ambiguous unless `conversation_id` names the one to forget it from.
    """

    model_config = Strict

    namespace: str | None = namespace_field()

    ids: list[str] | None = Field(
        default=None, min_length=1, description="Memory, message, conversation or document ids to forget."
    )
    conversation_id: str | None = optional_text(
        "With `ids`: match message ids in this conversation (or document) only."
    )
    filter: DeleteFilter | None = Field(default=None, description="Forget the messages matching every field.")
    delete_all: Annotated[Literal[True], BeforeValidator(_strict_true)] | None = Field(
        default=None, description="true: forget the whole namespace."
    )

    @model_validator(mode="after")
    def _one_of(self) -> DeleteRequest:
        """Exactly one way of choosing; the field named is `ids` when none is given, else the second one given."""
        choices = {"ids": self.ids, "filter": self.filter, "delete_all": self.delete_all}
        given = [name for name, value in choices.items() if value is not None]
        one_of = "give exactly one of ids, filter or delete_all=true"
        if not given:
            raise FieldError("ids", f"{one_of} (none given)")
        if len(given) > 1:
            raise FieldError(given[1], f"{one_of} (got {' and '.join(given)})")
        if self.conversation_id is not None and self.ids is None:
            raise FieldError("conversation_id", "conversation_id goes with ids (a filter has its own conversation_id)")
        return self


class DeleteResponse(BaseModel):
    """What was forgotten."""

    success: bool = Field(description="true when the memories are forgotten.")
    deleted_messages: int = Field(description="Messages and documents forgotten.")
    deleted_nodes: int = Field(description="Chunks and summaries removed (rebuilt ones included).")


class NodeView(BaseModel):
    """A memory node as `GET /memories/{id}` returns it."""

    id: str = Field(description="Memory id.")
    text: str = Field(description="The chunk's verbatim lines, or the summary.")
    level: int = Field(description="1 = verbatim chunk, 2+ = summary of the nodes one level down.")
    source_type: SourceType = Field(description="conversation or document.")
    conversation_id: str | None = Field(default=None, description="Conversation it comes from.")
    document_id: str | None = Field(default=None, description="Document it comes from.")
    position: int = Field(description="Its index among its source's nodes of the same level.")
    sealed: bool = Field(description="false while a chunk can still grow with new messages.")
    children: list[str] = Field(description="Ids of the nodes one level down it summarises, in order.")
    parent_id: str | None = Field(description="Id of the summary one level up, if any.")
    message_ids: list[str] = Field(description="Ids of the messages it covers.")
    speakers: list[str] = Field(description="Who speaks in it.")
    start_time: datetime | None = Field(description="Time of its first message.")
    end_time: datetime | None = Field(description="Time of its last message.")
    token_count: int = Field(description="Its length in tokens (cl100k_base).")
    summariser: str | None = Field(description="What wrote a summary; null for a chunk.")

    session_ids: list[str] = Field(default_factory=list, description="Sessions the node covers, first one first.")
    visit_count: int = Field(default=0, description="Times a query returned the node.")
    last_visited_at: datetime | None = Field(default=None, description="When a query last returned the node.")
    pinned: bool = Field(default=False, description="Pinned: it and its messages are never forgotten by policy.")
    pre_id: str | None = Field(default=None, description="For a chunk: the chunk before it in its conversation.")
    next_id: str | None = Field(default=None, description="For a chunk: the chunk after it in its conversation.")


class MemoryQuery(BaseModel):
    """Query string of GET /memories/{id}; the route checks the pattern (422 naming `namespace`)."""

    namespace: str | None = Field(
        default=None,
        json_schema_extra={"pattern": NAMESPACE_PATTERN},
        description="Namespace to work in (static-token callers only; a JWT fixes it). Default: `default`.",
    )


class MemoryRef(BaseModel):
    """A memory named by id (GET /memories/{id}'s path and query string; the MCP `expand` tool's arguments)."""

    model_config = Strict

    id: str = Field(min_length=1, max_length=512, description="A memory id, from a search, find or another memory.")
    namespace: str | None = namespace_field()


class ExpandResponse(BaseModel):
    """A memory with its place in the tree."""

    node: NodeView = Field(description="The memory asked for.")
    parent: NodeView | None = Field(description="The summary one level up, or null.")
    children: list[NodeView] = Field(description="What a summary covers, one level down, in order.")


class Health(BaseModel):
    """The service and its configuration."""

    status: Literal["ok"] = Field(description="ok when the service answers.")
    datastore: str = Field(description="Storage provider in use.")
    embedder: str = Field(description="Embedding model in use.")
    embedding_dimension: int = Field(description="Length of its vectors.")
    summariser: str = Field(description="Summariser in use.")
    nodes: dict[str, int] | None = Field(
        default=None, description="Memory nodes per level over all namespaces (L1, L2, ...); null if not counted."
    )


class ErrorDetail(BaseModel):
    """What went wrong."""

    code: str = Field(description="Machine-readable error code, e.g. invalid_request.")
    message: str = Field(description="What went wrong, for a person.")
    field: str | None = Field(default=None, description="The request field at fault, if any.")


class ErrorResponse(BaseModel):
    """The one error shape of every 4xx and 5xx."""

    error: ErrorDetail = Field(description="The error.")


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
        session_ids=list(node.session_ids),
    )
