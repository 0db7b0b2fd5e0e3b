"""The memory node: one L1 chunk or one summary of level >= 2, as stored and as returned."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, model_validator

SourceType = Literal["conversation", "document"]


class Sentence(BaseModel):
    """One sentence of a message, as split once when the message is stored (services/chunking.split_message).

    `start`, `end`: character offsets in the message's content; `tokens`: its length in cl100k_base tokens;
    `cut`: a piece of a sentence longer than MAX_SENTENCE_TOKENS, cut at a word boundary. Its id is
    `<message id>:<index>` (`sentence_id`).
    """

    start: int = Field(ge=0)
    end: int = Field(ge=0)
    tokens: int = Field(ge=0)
    cut: bool = False


def sentence_id(message_id: str, index: int) -> str:
    """The stable id of a message's sentence: `<message id>:<index>` (index from 0, in order)."""
    return f"{message_id}:{index}"


class StoredMessage(BaseModel):
    """One chat message (or one document) as kept in the store, the source every node is derived from.

    `seq` orders the messages of a source. A source's *stream* is its messages' sentences in order, each
    `tokens` long: `tok_offset` is where the message's first sentence starts in it, `n_tokens` the sum of its
    sentences' tokens (cl100k_base); `sentences` its sentences (at least one; an empty message's is empty and
    1 token long); `show_time` whether the message starts a session (its line carries the time).
    """

    id: str
    source_id: str
    source_type: SourceType = "conversation"
    seq: int
    speaker: str
    content: str
    created_at: datetime | None = None
    tok_offset: int = 0
    n_tokens: int = 0
    show_time: bool = False
    session_id: str | None = None
    sentences: list[Sentence] = Field(default_factory=list)


class MemoryNode(BaseModel):
    """A node of the memory tree.

    level 1 is a chunk: whole consecutive sentences of its source, rendered with the date of its first message
    and the speaker of every message it shows, at most CHUNK_SIZE tokens (services/chunking.py), covering
    `message_ids`; level n >= 2 summarises exactly
    FAN_OUT contiguous nodes of level n-1 (`children`, in order), each of which names it in `parent_id`. Times are
    the covered messages' range. Level 0 is a line: one message's informative lead (services/lines.py),
    `message_ids` that message (datastore/read/outline.py). A line is not a node of the tree: it belongs to its
    message, never has a parent or children (a `parent_id` read from a store or an export written before this
    rule is dropped), and searches, listings and the roll-up leave it out. So the tree has one rule: a node
    names a parent exactly when that parent lists it among its children.
    """

    id: str
    source_type: SourceType = "conversation"
    source_id: str
    level: int = Field(ge=0)
    position: int = Field(ge=0, description="Index of the node among its source's nodes of the same level.")
    text: str
    token_count: int = 0
    children: list[str] = Field(default_factory=list)
    parent_id: str | None = None
    message_ids: list[str] = Field(default_factory=list)
    speakers: list[str] = Field(default_factory=list)
    start_time: datetime | None = None
    end_time: datetime | None = None
    sealed: bool = True
    tok_start: int = 0
    tok_end: int = 0
    summariser: str | None = None
    session_ids: list[str] = Field(
        default_factory=list,
        description="Sessions of the covered messages in order of first appearance; the first is the node's session.",
    )
    sentence_ids: list[str] = Field(
        default_factory=list,
        description="The stored sentences (`sentence_id`) an extractive summary picked, or a line is made of, in "
        "order; a summary's text is rendered from them. Empty for chunks (their window names their sentences), "
        "model-written summaries, and summaries and lines written before them.",
    )

    key_context: str = Field(
        default="",
        exclude=True,
        description="A chunk's retrieval context: the text before its window that its embedding is of too "
        "(services/chunking.chunk_key, CHUNK_KEY_CONTEXT_TOKENS); set when the chunk is made, never stored, shown "
        "or exported.",
    )

    @model_validator(mode="after")
    def _line_outside_the_tree(self) -> MemoryNode:
        if self.level == 0 and self.parent_id is not None:
            self.parent_id = None  # stores and exports written before lines left the tree named their chunk
        return self

    @property
    def session_id(self) -> str | None:
        """The node's session: that of its first message (None for documents)."""
        return self.session_ids[0] if self.session_ids else None
