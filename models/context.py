"""The token-budgeted context block (POST /context): request, sections, items."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from models.api import IsoDateTime, RetrievalMode, namespace_field, optional_text

Strict = ConfigDict(extra="forbid", str_strip_whitespace=False)

SectionName = Literal["core", "instructions", "recent", "relevant", "timeline"]
SECTIONS: tuple[str, ...] = ("core", "instructions", "recent", "relevant", "timeline")

DEFAULT_CONTEXT_TEMPLATE = "Memory of {user_name}'s conversations with {assistant_name}.\n\n{memories}"
DATE_LINE = "[{date}, {time_ago}]"  # the default rendering: one line per day, then its memories' lines
CONTEXT_FIELDS = ("user_name", "assistant_name", "memories", "core", "instructions", "recent", "relevant", "timeline")
MEMORY_FIELDS = ("time_ago", "speaker", "text", "date", "level")
NOTHING = "No memory about this."
"""The relevant memories' one line when a query was asked and no memory passes the relevance floor."""


class ContextRequest(BaseModel):
    """What to assemble; every field optional."""

    model_config = Strict

    namespace: str | None = namespace_field()
    conversation_id: str | None = optional_text(
        "The conversation being answered: its recent turns, core entries and timeline. None: namespace-wide."
    )
    query: str | None = Field(
        default=None,
        min_length=1,
        description="What the memories should serve; default: the conversation's latest message. At most "
        "MAX_QUERY_CHARS characters, as for /query (422).",
    )
    budget_tokens: int | None = Field(
        default=None, strict=True, description="Token budget (cl100k) of the whole block; default 2000."
    )
    now: IsoDateTime | None = Field(default=None, description="Time the block is for ('3 days ago'); default: now.")
    user_name: str = Field(default="the user", max_length=128, description="Fills {user_name} of the template.")
    assistant_name: str = Field(
        default="the assistant", max_length=128, description="Fills {assistant_name} of the template."
    )
    template: str | None = Field(
        default=None,
        max_length=4000,
        description=(
            "Block template: {user_name} {assistant_name} {memories} (all sections) or "
            "{core} {instructions} {recent} {relevant} {timeline}."
        ),
    )
    memory_template: str | None = Field(
        default=None,
        max_length=1000,
        description=(
            "Per-memory template: {time_ago} {speaker} {text} {date} {level}. Default: a '[date, time ago]' line per "
            "day, then each memory's lines."
        ),
    )
    max_memory_chars: int = Field(
        default=1200,
        ge=20,
        le=20_000,
        strict=True,
        description="Characters of one memory's text kept (longer ones are cut, '…').",
    )
    min_score: float | None = Field(
        default=None,
        strict=True,
        ge=0,
        le=1,
        description="Floor of relevant memories' score (hybrid scale 0-1); default CONTEXT_MIN_SCORE.",
    )
    mode: RetrievalMode | None = Field(
        default=None, description="Ranking of relevant memories; default RETRIEVAL_MODE."
    )
    neighbours: int = Field(
        default=0, ge=0, le=3, strict=True, description="Chunks either side of each relevant chunk to include with it."
    )
    all_conversations: bool = Field(
        default=True,
        strict=True,
        description="Relevant memories from every source of the namespace (false: this conversation only).",
    )
    core: bool = Field(default=True, strict=True, description="Include core memory.")
    instructions: bool = Field(
        default=True, strict=True, description="Include the standing instructions and preferences the user stated."
    )
    recent: bool = Field(default=True, strict=True, description="Include recent turns verbatim.")
    relevant: bool = Field(default=True, strict=True, description="Include relevant memories.")
    timeline: bool = Field(
        default=True, strict=True, description="Include the timeline: dated lines of the periods the query points at."
    )


class ContextItem(BaseModel):
    """One memory in the block."""

    id: str = Field(description="Node id (chunk/summary/line), message id (recent turn), instruction id or core key.")
    kind: Literal["core", "instruction", "preference", "message", "line", "chunk", "summary"] = Field(
        description="core: a core-memory entry; instruction / preference: a standing instruction or a stated "
        "preference; message: a recent turn verbatim; line: a message's lead line; chunk: an L1 chunk (or its "
        "excerpt); summary: L2+."
    )
    level: int = Field(description="0 core, instruction, preference, message or line, 1 chunk, >=2 summary.")
    text: str = Field(
        description="Its text as shown: `key: value` (core), the statement (instruction), `speaker: content` "
        "(message), the node's text or its sentences closest to the query, `…` where text was left out."
    )
    speaker: str | None = Field(default=None, description="Who said it (a node: its speakers, comma-separated).")
    source_id: str | None = Field(default=None, description="Conversation or document id.")
    start_time: IsoDateTime | None = Field(
        default=None,
        description="ISO 8601 UTC start of what it covers: a node's first message, a turn's time, a core entry's "
        "last update. Null: untimed.",
    )
    end_time: IsoDateTime | None = Field(
        default=None, description="ISO 8601 UTC end of what it covers (same sources as start_time). Null: untimed."
    )
    score: float | None = Field(default=None, description="Retrieval score (relevant) or query cosine (timeline).")
    why: str = Field(description="Why it is included.")
    tokens: int = Field(description="Tokens of its rendered line.")


class ContextSection(BaseModel):
    """One section of the block, in priority order: core, instructions, recent, relevant, timeline."""

    name: SectionName = Field(description="The section: core, instructions, recent, relevant or timeline.")
    budget_tokens: int = Field(description="Its share plus what earlier sections left unused.")
    tokens_used: int = Field(
        description="cl100k tokens its items and heading take, counted on their own (the sections' sum can pass the "
        "block's tokens_used by a few: tokens merge where the sections join)."
    )
    items: list[ContextItem] = Field(description="The memories included, in the order they appear in the block.")
    left_out: int = Field(description="Candidates that did not fit.")


class LeftOut(BaseModel):
    """A candidate memory that did not fit in the budget."""

    id: str = Field(description="Node id (chunk/summary), message id (recent turn), instruction id or core key.")
    section: SectionName = Field(description="The section it was a candidate for.")
    tokens: int = Field(description="cl100k tokens it would have taken.")
    reason: str = Field(description="Why it was left out, e.g. 'no room in the budget'.")


class ContextResponse(BaseModel):
    """The context block: `context` to put in the system prompt, and every section's items and why."""

    context: str = Field(description="The rendered block, ready for a system prompt.")
    tokens_used: int = Field(description="cl100k tokens of `context`; never above budget_tokens.")
    budget_tokens: int = Field(description="cl100k token budget the block was assembled within.")
    query: str | None = Field(description="The query the memories were chosen for.")
    sections: list[ContextSection] = Field(description="The five sections in priority order, with their items.")
    left_out: list[LeftOut] = Field(description="Candidates left out for lack of room (at most 50).")
