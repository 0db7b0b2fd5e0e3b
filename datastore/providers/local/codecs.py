"""Row codecs of the local store: how a node, a message and a time are written to and read from SQLite rows."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

from datastore.storage import sentences_of
from models.memory import MemoryNode, StoredMessage

NODE_COLS = (
    "id, source_type, source_id, level, position, text, token_count, children, parent_id, message_ids, "
    "speakers, start_time, end_time, sealed, tok_start, tok_end, summariser, session_ids, sentence_ids"
)
MSG_COLS = (
    "id, source_id, source_type, seq, speaker, content, created_at, tok_offset, n_tokens, show_time, session_id, "
    "sentences"
)


def ts(when: datetime | None) -> float | None:
    """A time as stored: seconds since the epoch (REAL), or NULL."""
    return when.timestamp() if when is not None else None


def dt(seconds: float | None) -> datetime | None:
    """A stored time (seconds since the epoch, or NULL) as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, tz=UTC) if seconds is not None else None


def node_of(row: sqlite3.Row) -> MemoryNode:
    """A `nodes` row (NODE_COLS at least) as a MemoryNode."""
    # rows were validated on the way in: construct without validating again (the hot path of every search)
    return MemoryNode.model_construct(
        id=row["id"],
        source_type=row["source_type"],
        source_id=row["source_id"],
        level=row["level"],
        position=row["position"],
        text=row["text"],
        token_count=row["token_count"],
        children=json.loads(row["children"]),
        parent_id=row["parent_id"],
        message_ids=json.loads(row["message_ids"]),
        speakers=json.loads(row["speakers"]),
        start_time=dt(row["start_time"]),
        end_time=dt(row["end_time"]),
        sealed=bool(row["sealed"]),
        tok_start=row["tok_start"],
        tok_end=row["tok_end"],
        summariser=row["summariser"],
        session_ids=json.loads(row["session_ids"]),
        sentence_ids=json.loads(row["sentence_ids"]),
    )


def message_of(row: sqlite3.Row) -> StoredMessage:
    """A `messages` row (MSG_COLS) as a StoredMessage."""
    return StoredMessage(
        id=row["id"],
        source_id=row["source_id"],
        source_type=row["source_type"],
        seq=row["seq"],
        speaker=row["speaker"],
        content=row["content"],
        created_at=dt(row["created_at"]),
        tok_offset=row["tok_offset"],
        n_tokens=row["n_tokens"],
        show_time=bool(row["show_time"]),
        session_id=row["session_id"],
        sentences=sentences_of(row["sentences"]),
    )
