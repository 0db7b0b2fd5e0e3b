"""Shapes of memory over a lifetime: sessions, pins and visits, forgetting, forks, export and read-only grants."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SessionInfo(BaseModel):
    """One session of a conversation: its time range, its messages and the nodes that summarise it."""

    session_id: str = Field(
        description="Session id: the one given on /remember, else inferred 's-<start time>' (a new one after a "
        "gap of SESSION_GAP_HOURS)."
    )
    start_time: datetime | None = Field(default=None, description="Time of its earliest timed message.")
    end_time: datetime | None = Field(default=None, description="Time of its latest timed message.")
    message_count: int = Field(description="Messages in the session.")
    first_message_id: str = Field(description="Id of its first message.")
    last_message_id: str = Field(description="Id of its last message.")
    summary_ids: list[str] = Field(
        description="Highest nodes covering only this session (a summary or chunks), in order; else the chunks "
        "that hold it."
    )


class SessionsResponse(BaseModel):
    """A conversation's sessions, in order of their first message."""

    conversation_id: str = Field(description="The conversation.")
    sessions: list[SessionInfo] = Field(description="Its sessions, in order of their first message.")


class PinResponse(BaseModel):
    """A pinned or unpinned node."""

    id: str = Field(description="Id of the memory (chunk or summary).")
    pinned: bool = Field(description="Whether it is pinned now.")
    protected_message_ids: int = Field(description="Messages under the node, kept from forgetting while pinned.")


class ForgetRequest(BaseModel):
    """Run the forgetting policy on the caller's namespace now."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._:@|-]{1,128}$",
        description="Namespace (static-token callers only). Default: `default`.",
    )
    dry_run: bool = Field(default=True, strict=True, description="true (default): only report what would go.")


class ForgottenLeaf(BaseModel):
    """One L1 chunk forgotten (or that would be) by the policy, and why."""

    node_id: str = Field(description="Id of the L1 chunk.")
    source_id: str = Field(description="Its conversation id.")
    reason: Literal["max_nodes", "age"] = Field(
        description="max_nodes: the namespace is over FORGET_MAX_NODES chunks; age: older than FORGET_AFTER_DAYS."
    )
    message_ids: list[str] = Field(description="Its messages that go (messages under a pin stay).")
    visit_count: int = Field(description="Times a query returned it.")
    last_visited_at: datetime | None = Field(description="ISO 8601 UTC time a query last returned it; null: never.")
    end_time: datetime | None = Field(description="ISO 8601 UTC time of its last message; null: untimed.")


class ForgetReport(BaseModel):
    """What the forgetting policy did (or, in a dry run, would do) to one namespace."""

    namespace: str = Field(description="The namespace the policy ran on.")
    dry_run: bool = Field(description="true: nothing was forgotten; `forgotten` lists what would go.")
    enabled: bool = Field(description="false when FORGET_MAX_NODES and FORGET_AFTER_DAYS are both 0.")
    l1_before: int = Field(description="Conversation L1 chunks before.")
    l1_after: int | None = Field(description="Conversation L1 chunks after (null in a dry run).")
    forgotten: list[ForgottenLeaf] = Field(description="Chunks forgotten (or that would be), least important first.")
    deleted_messages: int = Field(description="Messages forgotten (0 in a dry run).")
    deleted_nodes: int = Field(description="Chunks and summaries removed, rebuilt ones included (0 in a dry run).")


class ForkRequest(BaseModel):
    """Branch a conversation after one of its messages."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._:@|-]{1,128}$",
        description="Namespace (static-token callers only). Default: `default`.",
    )
    at_message_id: str = Field(
        min_length=1,
        max_length=256,
        description="The last message the branch inherits (the parent's or one it inherits).",
    )
    new_conversation_id: str | None = Field(
        default=None, min_length=1, max_length=256, description="Id of the branch; default: a new one."
    )


class ForkResponse(BaseModel):
    """The new branch of the conversation."""

    conversation_id: str = Field(description="The new branch: remember into it like any conversation.")
    parent_id: str = Field(description="The conversation it branches from (where at_message_id lives).")
    at_message_id: str = Field(description="The last message the branch inherits from its parent.")
