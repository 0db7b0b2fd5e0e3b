"""Shapes of `POST /find` (full-text and regex search over what was said) and of the `stats` overview."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator

from models.api import WARNINGS_DESCRIPTION, FieldError, IsoDateTime, RequestWarning, namespace_field, optional_text
from models.memory import SourceType

MAX_PATTERN_CHARS = 1000
MARK_OPEN, MARK_CLOSE = "**", "**"


class FindRequest(BaseModel):
    """Messages whose text matches `pattern` (a phrase or a regex); every given filter must match too."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = namespace_field()
    pattern: str = Field(
        min_length=1,
        max_length=MAX_PATTERN_CHARS,
        description="Text to find: a literal phrase (regex false) or an RE2 regular expression (regex true).",
    )
    regex: bool = Field(default=False, strict=True, description="true: `pattern` is an RE2 regex (linear time).")
    case_sensitive: bool = Field(default=False, strict=True, description="true: match letter case exactly.")
    conversation_id: str | None = Field(
        default=None, min_length=1, max_length=256, description="Only messages of this conversation (or document)."
    )
    speaker: str | None = Field(
        default=None, min_length=1, max_length=128, description="Only messages by this speaker."
    )
    session_id: str | None = optional_text("Only messages of this session (see GET /conversations/{id}/sessions).")
    start_date: IsoDateTime | None = Field(default=None, description="Only messages sent at or after this time.")
    end_date: IsoDateTime | None = Field(default=None, description="Only messages sent at or before this time.")
    limit: int = Field(default=20, ge=1, strict=True, description="Most matching messages to return.")

    @model_validator(mode="after")
    def _range(self) -> FindRequest:
        if self.start_date and self.end_date and self.start_date > self.end_date:
            raise FieldError("start_date", "start_date must not be after end_date")
        return self


class StatsQuery(BaseModel):
    """Query string of GET /stats (and the MCP `stats` tool's arguments)."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = namespace_field()
    conversation_id: str | None = Field(
        default=None, min_length=1, max_length=256, description="Describe only this conversation (or document)."
    )


class FindMatch(BaseModel):
    """One message that matches, with every match marked **like this** and the L1 chunk that holds it."""

    message_id: str = Field(description="Id of the message.")
    source_type: SourceType = Field(description="conversation or document.")
    conversation_id: str | None = Field(default=None, description="Conversation of the message.")
    document_id: str | None = Field(default=None, description="Document, when the text is a document.")
    speaker: str = Field(description="Who said it.")
    created_at: datetime | None = Field(description="When it was said.")
    text: str = Field(description="The message text with the matches wrapped in ** marks.")
    spans: list[list[int]] = Field(
        description="[start, end) character offsets of the matches (at most 50) in the unmarked text."
    )
    chunk_id: str | None = Field(
        description="The L1 chunk holding the match (expand it with GET /memories/{id}); null when not yet indexed."
    )


class FindResponse(BaseModel):
    """The messages found, and how much was read."""

    matches: list[FindMatch] = Field(description="Matching messages in conversation order.")
    scanned: int = Field(description="Messages read to answer.")
    complete: bool = Field(description="false when the time limit (FIND_TIME_LIMIT) stopped the scan early.")
    truncated: bool = Field(default=False, description="true when matches were cut to keep the answer small.")
    warnings: list[RequestWarning] = Field(default_factory=list, description=WARNINGS_DESCRIPTION)


class LevelCount(BaseModel):
    """Nodes of one level."""

    level: int = Field(description="1 = chunks, 2+ = summaries.")
    nodes: int = Field(description="Nodes of this level.")


class SpeakerCount(BaseModel):
    """Messages of one speaker."""

    speaker: str = Field(description="A speaker's name or role.")
    messages: int = Field(description="Messages by this speaker.")


class StatsResponse(BaseModel):
    """What a namespace (or one conversation) holds."""

    namespace: str = Field(description="The namespace described.")
    conversation_id: str | None = Field(default=None, description="The conversation described; null: all of them.")
    sources: int = Field(description="Conversations and documents.")
    messages: int = Field(description="Messages (and documents) stored.")
    levels: list[LevelCount] = Field(description="Node counts per level, L1 first.")
    start_time: datetime | None = Field(description="Time of the earliest message.")
    end_time: datetime | None = Field(description="Time of the latest message.")
    speakers: list[SpeakerCount] = Field(description="Speakers, most messages first.")
    warnings: list[RequestWarning] = Field(default_factory=list, description=WARNINGS_DESCRIPTION)
