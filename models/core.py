"""Core memory: short facts always injected at the top of the context block (PUT/GET/DELETE /core)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from models.api import namespace_field

Strict = ConfigDict(extra="forbid", str_strip_whitespace=False)
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600


class CoreEntry(BaseModel):
    """One core-memory entry as stored and returned. `scope`: the conversation id, or "" for the namespace."""

    key: str
    value: str
    importance: int = Field(description="0-100; the least important entries are moved out first.")
    conversation_id: str | None = None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None
    tokens: int = Field(description="cl100k tokens of the rendered line `key: value`.")

    @property
    def scope(self) -> str:
        return self.conversation_id or ""


class CorePutRequest(BaseModel):
    """Set a core-memory entry (replacing one with the same key in the same scope)."""

    model_config = Strict

    namespace: str | None = namespace_field()
    key: str = Field(min_length=1, max_length=128, pattern=r"^[^\n/]+$",
                     description="Name of the fact, e.g. 'diet' (no / or line break).")
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
    conversation_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Scope the entry to one conversation; none: the namespace.",
    )


class CorePutResponse(BaseModel):
    entry: CoreEntry
    moved_out: list[CoreEntry] = Field(
        description="Entries moved to long-term memory (searchable documents `core:...`) to stay within the budget."
    )
    tokens_used: int = Field(description="Tokens of the scope's core memory after the write.")
    budget_tokens: int = Field(description="CORE_MAX_TOKENS.")


class CoreListResponse(BaseModel):
    entries: list[CoreEntry] = Field(description="Unexpired entries, most important first.")
    tokens_used: int
    budget_tokens: int


class CoreDeleteResponse(BaseModel):
    deleted: bool = Field(description="Whether the entry, or its moved-out copy, existed.")
    deleted_documents: int = Field(description="Moved-out copies in long-term memory removed (0 or 1).")
