"""Shapes of a conversation's outline: its lines (each message's informative lead, services/lines.py) under their
dates, optionally focused on a query (GET /conversations/{id}/outline, the MCP tool `outline`, `pyramind outline`).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from models.api import NAMESPACE_PATTERN

MAX_OUTLINE_QUERY_CHARS = 2000
DEFAULT_OUTLINE_BUDGET = 2000
MAX_OUTLINE_BUDGET = 100_000
UNDATED = "undated"
"""The `date` of the group holding the lines of untimed messages (rendered `[undated]`)."""


class OutlineQuery(BaseModel):
    """Query string of GET /conversations/{id}/outline."""

    model_config = ConfigDict(extra="forbid")

    query: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_OUTLINE_QUERY_CHARS,
        description=(
            "Focus: only the sentences sharing a word with it (any sentence, not only leads) and the lines close to it "
            "in meaning, still shown oldest first; none: one line saying so."
        ),
    )
    budget_tokens: int = Field(
        default=DEFAULT_OUTLINE_BUDGET,
        ge=20,
        le=MAX_OUTLINE_BUDGET,
        description="Most tokens (cl100k) of the rendered outline `text`; lines past it are left out (`omitted`).",
    )
    namespace: str | None = Field(default=None, pattern=NAMESPACE_PATTERN, description="Static-token callers only.")


class OutlineArguments(OutlineQuery):
    """Arguments of the MCP tool `outline`: the route's query string and the conversation its path names."""

    conversation_id: str = Field(min_length=1, max_length=256, description="The conversation to outline.")


class OutlineLine(BaseModel):
    """One line: what one message said, in its own words (its lead; for a long message also its point)."""

    id: str = Field(description="The line's memory id (a level-0 node), or a sentence's id (<message id>:<n>).")
    message_id: str = Field(description="The message it is the lead of.")
    speaker: str = Field(description="Who said it.")
    created_at: datetime | None = Field(description="When it was said (None: the message is untimed).")
    text: str = Field(description="The lead sentence; for a long message ' … ' and the sentence stating its point.")
    score: float | None = Field(
        default=None, description="Closeness to the query (hybrid fusion, in [0, 1]); null without a query."
    )


class OutlineDay(BaseModel):
    """The lines said on one date (UTC), oldest first."""

    date: str = Field(description="YYYY-MM-DD (UTC), or 'undated' for untimed messages.")
    lines: list[OutlineLine] = Field(description="The lines said on that date, oldest first.")


class OutlineResponse(BaseModel):
    """A conversation's outline: its dated lines, oldest first, grouped under their dates, cut at a budget."""

    conversation_id: str = Field(description="The conversation outlined.")
    title: str | None = Field(default=None, description="The conversation's title when it has one.")
    query: str | None = Field(default=None, description="The focus query, if any.")
    total_lines: int = Field(description="Lines the conversation holds (messages that say something).")
    omitted: int = Field(description="Lines left out (by the budget, or as farther from the query).")
    tokens: int = Field(description="Tokens (cl100k) of `text`.")
    days: list[OutlineDay] = Field(description="The lines shown, grouped under their dates, oldest first.")
    text: str = Field(
        description=(
            "The same, rendered: '[YYYY-MM-DD]' lines, then 'speaker: line' per line, then '(N of M lines left out)'."
        )
    )
