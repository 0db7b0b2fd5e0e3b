"""The local store's standing instructions: the `instructions` table (migration 007) as an InstructionTable, and
the one function that writes it, inside `LocalStorage.commit`'s transaction or a transaction of its own."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence

import numpy as np

from datastore.providers.local.codecs import dt, ts
from datastore.providers.local.connections import Connections
from datastore.storage import instruction_order
from models.instructions import Instruction

_COLS = (
    "id, kind, text, statement, subject, message_id, conversation_id, speaker, created_at, recorded_at, "
    "superseded_by, detector"
)
_PART = 500  # ids per `IN (...)`


def _parts(ids: Sequence[str]) -> Iterator[list[str]]:
    for i in range(0, len(ids), _PART):
        yield list(ids[i : i + _PART])


def _instruction(r: sqlite3.Row) -> Instruction:
    return Instruction(
        id=r["id"],
        kind=r["kind"],
        text=r["text"],
        statement=r["statement"],
        subject=r["subject"],
        message_id=r["message_id"],
        conversation_id=r["conversation_id"],
        speaker=r["speaker"],
        created_at=dt(r["created_at"]),
        recorded_at=dt(r["recorded_at"]),
        superseded_by=r["superseded_by"],
        detector=r["detector"],
    )


def write_instructions(
    db: sqlite3.Connection, ns: str, put: Sequence[tuple[Instruction, np.ndarray | None]], drop: Sequence[str]
) -> int:
    """In the caller's transaction: delete the namespace's instructions with an id in `drop`, then write `put`
    (a None vector: every field but the embedding). Returns how many rows were deleted."""
    gone = 0
    for part in _parts(list(drop)):
        gone += db.execute(
            f"DELETE FROM instructions WHERE namespace = ? AND id IN ({','.join('?' * len(part))})", (ns, *part)
        ).rowcount
    for i, vector in put:
        values = (
            i.kind,
            i.text,
            i.statement,
            i.subject,
            i.message_id,
            i.conversation_id,
            i.speaker,
            ts(i.created_at),
            ts(i.recorded_at),
            i.superseded_by,
            i.detector,
        )
        if vector is None:
            db.execute(
                "UPDATE instructions SET kind = ?, text = ?, statement = ?, subject = ?, message_id = ?, "
                "conversation_id = ?, speaker = ?, created_at = ?, recorded_at = ?, superseded_by = ?, detector = ? "
                "WHERE namespace = ? AND id = ?",
                (*values, ns, i.id),
            )
        else:
            db.execute(
                f"INSERT OR REPLACE INTO instructions (namespace, {_COLS}, embedding) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (ns, i.id, *values, np.ascontiguousarray(vector, dtype=np.float32).tobytes()),
            )
    return gone


class LocalInstructions:
    """InstructionTable over the instructions table. db: the store's connections (reads on this thread's reader,
    writes in the one writer's transaction, then the WAL scrubbed when something was deleted)."""

    def __init__(self, db: Connections) -> None:
        self.db = db

    def entries(
        self, ns: str, conversation_id: str | None = None, include_superseded: bool = False
    ) -> list[Instruction]:
        """The namespace's instructions (of one conversation when given), oldest first; in force only unless
        include_superseded."""
        sql = f"SELECT {_COLS} FROM instructions WHERE namespace = ?"
        args: list[object] = [ns]
        if conversation_id is not None:
            sql += " AND conversation_id = ?"
            args.append(conversation_id)
        if not include_superseded:
            sql += " AND superseded_by IS NULL"
        return instruction_order([_instruction(r) for r in self.db.reader.execute(sql, args)])

    def get(self, ns: str, ids: Sequence[str]) -> list[Instruction]:
        """The namespace's instructions with these ids (unknown ids left out)."""
        return [
            _instruction(r)
            for part in _parts(list(ids))
            for r in self.db.reader.execute(
                f"SELECT {_COLS} FROM instructions WHERE namespace = ? AND id IN ({','.join('?' * len(part))})",
                (ns, *part),
            )
        ]

    def vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """{instruction id: embedding (float32, (dimension,))} of the ids found."""
        return {
            r[0]: np.frombuffer(r[1], dtype=np.float32).copy()
            for part in _parts(list(ids))
            for r in self.db.reader.execute(
                f"SELECT id, embedding FROM instructions WHERE namespace = ? AND id IN ({','.join('?' * len(part))})",
                (ns, *part),
            )
        }

    def write(self, ns: str, put: Sequence[tuple[Instruction, np.ndarray | None]], drop: Sequence[str]) -> int:
        """Delete `drop`, write `put`, in one transaction; deleted text leaves the disk (the WAL is scrubbed)."""
        with self.db.transaction() as db:
            gone = write_instructions(db, ns, put, drop)
        if gone:
            self.db.scrub()
        return gone
