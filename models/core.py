"""Core memory: short facts always injected at the top of the context block (PUT/GET/DELETE /core)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from models.api import namespace_field, optional_text

Strict = ConfigDict(extra="forbid", str_strip_whitespace=False)
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600


class CoreEntry(BaseModel):
    """One core-memory entry as stored and returned. `scope`: the conversation id, or "" for the namespace."""

    key: str = Field(description="Name of the fact, unique within its scope.")
    value: str = Field(description="The fact.")
    importance: int = Field(description="0-100; the least important entries are moved out first.")
    conversation_id: str | None = Field(
        default=None, description="The conversation it is scoped to; null: the whole namespace."
    )
    created_at: datetime = Field(description="ISO 8601 UTC time the key was first set.")
    updated_at: datetime = Field(description="ISO 8601 UTC time of its last write.")
    expires_at: datetime | None = Field(
        default=None, description="ISO 8601 UTC time it expires (from ttl_seconds); null: never."
    )
    tokens: int = Field(description="cl100k tokens of the rendered line `key: value`.")

    @property
    def scope(self) -> str:
        return self.conversation_id or ""


class CorePutRequest(BaseModel):
    """Set a core-memory entry (replacing one with the same key in the same scope)."""

    model_config = Strict

    namespace: str | None = namespace_field()
    key: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[^\n/]+$",
        description="Name of the fact, e.g. 'diet' (no / or line break).",
    )
    value: str = Field(min_length=1, max_length=8000, description="The fact, e.g. 'vegetarian since 2021'.")
    importance: int = Field(
        default=50,
        ge=0,
        le=100,
        strict=True,
        description="0-100 (default 50); the least important are moved out first.",
    )
    ttl_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TTL_SECONDS,
        strict=True,
        description="Seconds until the entry expires (disappears); none: never.",
    )
    conversation_id: str | None = optional_text("Scope the entry to one conversation; none: the namespace.")


class CoreQuery(BaseModel):
    """Query string of GET /core and DELETE /core/{key} (and the MCP `core_get` tool's arguments)."""

    model_config = Strict

    namespace: str | None = namespace_field()
    conversation_id: str | None = optional_text("Entries of this conversation; none: the namespace's.")


class CoreKey(CoreQuery):
    """The MCP `core_delete` tool's arguments: the key (DELETE /core/{key}'s path) and the query string."""

    key: str = Field(min_length=1, max_length=128, description="The fact's name, as set with PUT /core.")


class CorePutResponse(BaseModel):
    """The entry as stored, the entries moved out to make room, and the scope's tokens after the write."""

    entry: CoreEntry = Field(description="The entry as stored.")
    moved_out: list[CoreEntry] = Field(
        description="Entries moved to long-term memory (searchable documents `core:...`) to stay within the budget."
    )
    tokens_used: int = Field(description="Tokens of the scope's core memory after the write.")
    budget_tokens: int = Field(description="CORE_MAX_TOKENS.")


class CoreListResponse(BaseModel):
    """The scope's unexpired core-memory entries and the tokens they take."""

    entries: list[CoreEntry] = Field(description="Unexpired entries, most important first.")
    tokens_used: int = Field(description="cl100k tokens of the listed entries (sum of their `tokens`).")
    budget_tokens: int = Field(description="CORE_MAX_TOKENS: most tokens one scope may hold.")


class CoreDeleteResponse(BaseModel):
    """The core-memory entry is forgotten, with its copy in long-term memory."""

    deleted: bool = Field(description="Whether the entry, or its moved-out copy, existed.")
    deleted_documents: int = Field(description="Moved-out copies in long-term memory removed (0 or 1).")
