"""Shapes of memory over a lifetime: sessions, pins and visits, forgetting, forks, export and read-only grants."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class SessionInfo(BaseModel):
    """One session of a conversation: its time range, its messages and the nodes that summarise it."""

    session_id: str
    start_time: datetime | None = Field(default=None, description="Time of its earliest timed message.")
    end_time: datetime | None = Field(default=None, description="Time of its latest timed message.")
    message_count: int
    first_message_id: str
    last_message_id: str
    summary_ids: list[str] = Field(
        description="Highest nodes covering only this session (a summary or chunks), in order; else the chunks "
        "that hold it."
    )


class SessionsResponse(BaseModel):
    conversation_id: str
    sessions: list[SessionInfo]


class PinResponse(BaseModel):
    """A pinned or unpinned node."""

    id: str
    pinned: bool
    protected_message_ids: int = Field(description="Messages under the node, kept from forgetting while pinned.")
