"""Shapes of memory over a lifetime: sessions, pins and visits, forgetting, forks, export and read-only grants."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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


class ForgetRequest(BaseModel):
    """Run the forgetting policy on the caller's namespace now."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:@|-]{1,128}$",
                                  description="Namespace (static-token callers only). Default: `default`.")
    dry_run: bool = Field(default=True, strict=True, description="true (default): only report what would go.")


class ForgottenLeaf(BaseModel):
    """One L1 chunk forgotten (or that would be) by the policy, and why."""

    node_id: str
    source_id: str
    reason: Literal["max_nodes", "age"]
    message_ids: list[str] = Field(description="Its messages that go (messages under a pin stay).")
    visit_count: int
    last_visited_at: datetime | None
    end_time: datetime | None


class ForgetReport(BaseModel):
    """What the forgetting policy did (or, in a dry run, would do) to one namespace."""

    namespace: str
    dry_run: bool
    enabled: bool = Field(description="false when FORGET_MAX_NODES and FORGET_AFTER_DAYS are both 0.")
    l1_before: int = Field(description="Conversation L1 chunks before.")
    l1_after: int | None = Field(description="Conversation L1 chunks after (null in a dry run).")
    forgotten: list[ForgottenLeaf]
    deleted_messages: int
    deleted_nodes: int


class ForkRequest(BaseModel):
    """Branch a conversation after one of its messages."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:@|-]{1,128}$",
                                  description="Namespace (static-token callers only). Default: `default`.")
    at_message_id: str = Field(min_length=1, max_length=256,
                               description="The last message the branch inherits (the parent's or one it inherits).")
    new_conversation_id: str | None = Field(default=None, min_length=1, max_length=256,
                                            description="Id of the branch; default: a new one.")


class ForkResponse(BaseModel):
    conversation_id: str = Field(description="The new branch: remember into it like any conversation.")
    parent_id: str = Field(description="The conversation it branches from (where at_message_id lives).")
    at_message_id: str
