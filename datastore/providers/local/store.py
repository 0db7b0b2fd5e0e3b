"""The embedded default store: one SQLite file (WAL) holding messages, nodes, tree links, text and vectors.

`LocalStorage` implements the Storage protocol (datastore/storage.py) and offers every optional capability:
`core` (the core_memory table), `marks` (the node_marks table) and `instructions` (the instructions table,
instructions.py). Search is above it (datastore/indexes/search.py), fed by `namespace_version` (the
`namespaces` table, bumped by every commit), `source_stamps` (each source's `stamp`: the namespace version of its
last commit) and `index_entries`. Its rooms:

- schema.py: named, idempotent migrations; connections.py: one writer inside `BEGIN IMMEDIATE`, a reader per
  thread; codecs.py: rows <-> nodes and messages.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import numpy as np

from datastore.providers.local.codecs import MSG_COLS, NODE_COLS, dt, message_of, node_of, ts
from datastore.providers.local.connections import Connections
from datastore.providers.local.idempotency import LocalIdempotency
from datastore.providers.local.instructions import LocalInstructions, write_instructions
from datastore.storage import (
    CoreTable,
    IdempotencyTable,
    IndexEntry,
    InstructionTable,
    LeaseTable,
    MarkTable,
    NodeMarks,
    SourceFacts,
    SourceRow,
    WriteBatch,
    messages_in_of,
    sentences_text,
)
from models.api import DeleteFilter
from models.core import CoreEntry
from models.memory import MemoryNode, StoredMessage
from models.settings import Settings
from models.time import utc
from services.errors import ConflictError

_PART = 500  # ids per `IN (...)`: far below SQLite's limit on variables per statement


_Id = TypeVar("_Id", str, int)


def _parts(ids: Sequence[_Id]) -> Iterator[list[_Id]]:
    for i in range(0, len(ids), _PART):
        yield list(ids[i : i + _PART])


def _marks(n: int) -> str:
    return ",".join("?" * n)


class LocalStorage:
    """SQLite provider. settings: LOCAL_DB_PATH (the file, created with its folder when missing), ANN_MIN_ROWS,
    FAN_OUT and MAX_LEVEL (what `unrolled` counts). dimension: the embedder's. Raises StoreError naming the path
    when the file cannot be opened."""

    name = "local"

    def __init__(self, settings: Settings, dimension: int) -> None:
        self.settings = settings
        self.dimension = dimension
        self.path = Path(settings.local_db_path)
        self.db = Connections(self.path)
        self.core: CoreTable | None = LocalCore(self.db)
        self.marks: MarkTable | None = LocalMarks(self.db)
        self.instructions: InstructionTable | None = LocalInstructions(self.db)
        self.idempotency: IdempotencyTable | None = LocalIdempotency(self.db)
        self.leases: LeaseTable | None = None  # its commit checks and writes in one transaction

    @property
    def location(self) -> str:
        """`LOCAL_DB_PATH=<the file>`."""
        return f"LOCAL_DB_PATH={self.path}"

    def close(self) -> None:
        """Close every connection."""
        self.db.close()

    def record_embedding(self, model: str, dimension: int) -> tuple[str, int]:
        """The (model, dimension) the file was made with, recording the given ones when it has none yet."""
        with self.db.transaction() as db:
            rows = dict(
                db.execute(
                    "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dimension')"
                ).fetchall()
            )
            if not rows:
                db.execute(
                    "INSERT INTO meta VALUES ('embedding_model', ?), ('embedding_dimension', ?)",
                    (model, str(dimension)),
                )
                return model, dimension
        return rows.get("embedding_model", ""), int(rows.get("embedding_dimension", 0))

    # ------------------------------------------------------------------ sources
    def get_source(self, ns: str, source_id: str) -> SourceRow | None:
        """The source's row, or None."""
        r = self.db.reader.execute(
            "SELECT * FROM sources WHERE namespace = ? AND source_id = ?", (ns, source_id)
        ).fetchone()
        if r is None:
            return None
        return SourceRow.of(r, json.loads(r["metadata"]))

    def get_sources(self, ns: str, source_ids: Sequence[str]) -> dict[str, SourceRow]:
        """{source id: its row} of the ids found (an indexed read each, in process)."""
        found = {sid: self.get_source(ns, sid) for sid in dict.fromkeys(source_ids)}
        return {sid: row for sid, row in found.items() if row is not None}

    def list_namespaces(self) -> list[str]:
        """Every namespace holding at least one source or core memory entry, sorted."""
        sql = "SELECT namespace FROM sources UNION SELECT namespace FROM core_memory ORDER BY 1"
        return [r[0] for r in self.db.reader.execute(sql)]

    def list_sources(self, ns: str, after: str | None = None, limit: int | None = None) -> list[str]:
        """Source ids of the namespace greater than `after` (code-point order), ascending, at most `limit`."""
        rows = self.db.reader.execute(
            "SELECT source_id FROM sources WHERE namespace = ? AND source_id > ? ORDER BY source_id LIMIT ?",
            (ns, after if after is not None else "", -1 if limit is None else limit),
        )
        return [r[0] for r in rows]

    def source_facts(self, ns: str, source_ids: Sequence[str]) -> dict[str, SourceFacts]:
        """Node counts per level and time range of each source (one grouped query per 500 sources)."""
        out = {sid: SourceFacts() for sid in source_ids}
        for part in _parts(source_ids):
            rows = self.db.reader.execute(
                "SELECT source_id, level, COUNT(*), MIN(start_time), MAX(end_time) FROM nodes WHERE namespace = ? "
                f"AND source_id IN ({_marks(len(part))}) GROUP BY source_id, level ORDER BY level",
                (ns, *part),
            )
            for sid, level, n, start, end in rows:
                f = out[sid]
                f.level_counts[level] = n
                first, last = dt(start), dt(end)
                if first is not None and (f.start_time is None or first < f.start_time):
                    f.start_time = first
                if last is not None and (f.end_time is None or last > f.end_time):
                    f.end_time = last
        return out

    # ------------------------------------------------------------------ messages
    def known_message_ids(self, ns: str, source_id: str, ids: Sequence[str]) -> set[str]:
        """Which of `ids` the source holds."""
        known: set[str] = set()
        for part in _parts(ids):
            rows = self.db.reader.execute(
                f"SELECT id FROM messages WHERE namespace = ? AND source_id = ? AND id IN ({_marks(len(part))})",
                (ns, source_id, *part),
            )
            known.update(r[0] for r in rows)
        return known

    def messages(
        self, ns: str, source_id: str, tok_from: int = 0, tok_to: int | None = None, limit: int | None = None
    ) -> list[StoredMessage]:
        """The source's messages whose rendered tokens overlap [tok_from, tok_to), in seq order, at most `limit`."""
        # the first message that can overlap starts at the largest offset <= tok_from (messages tile the stream)
        rows = self.db.reader.execute(
            f"SELECT {MSG_COLS} FROM messages WHERE namespace = ?1 AND source_id = ?2 AND tok_offset >= COALESCE(("
            "SELECT MAX(tok_offset) FROM messages WHERE namespace = ?1 AND source_id = ?2 AND tok_offset <= ?3), 0) "
            "AND tok_offset < COALESCE(?4, 9223372036854775807) AND tok_offset + n_tokens > ?3 "
            "ORDER BY tok_offset, seq LIMIT ?5",
            (ns, source_id, tok_from if tok_from > 0 else -1, tok_to, -1 if limit is None else limit),
        )
        return [message_of(r) for r in rows]

    def messages_in(self, ns: str, source_id: str, ranges: Sequence[tuple[int, int]]) -> list[StoredMessage]:
        """The source's messages overlapping one of `ranges`, each once, in seq order: one read per range (SQLite
        reads cost no round trip)."""
        return messages_in_of(self, ns, source_id, ranges)

    def find_messages(
        self, ns: str, ids: Sequence[str] | None = None, flt: DeleteFilter | None = None
    ) -> list[tuple[str, str]]:
        """(source id, message id) of the messages with one of `ids` (any source), or matching `flt`."""
        if ids is not None and len(ids) > _PART:
            return [m for part in _parts(ids) for m in self.find_messages(ns, part, flt)]
        where: list[str] = ["namespace = ?"]
        args: list[object] = [ns]
        if ids is not None:
            where.append(f"id IN ({_marks(len(ids))})")
            args.extend(ids)
        _message_where(flt, where, args)
        rows = self.db.reader.execute(f"SELECT source_id, id FROM messages WHERE {' AND '.join(where)}", args)
        return [(r[0], r[1]) for r in rows]

    def scan_messages(self, ns: str, flt: DeleteFilter | None) -> Iterator[StoredMessage]:
        """Messages matching `flt` in (source id, seq) order, read in pages (no read transaction held between)."""
        after: tuple[str, int] = ("", -1)
        while True:
            where, args = ["namespace = ?", "(source_id, seq) > (?, ?)"], [ns, *after]
            _message_where(flt, where, args)
            rows = self.db.reader.execute(
                f"SELECT {MSG_COLS} FROM messages WHERE {' AND '.join(where)} ORDER BY source_id, seq LIMIT {_PART}",
                args,
            ).fetchall()
            yield from (message_of(r) for r in rows)
            if len(rows) < _PART:
                return
            after = (rows[-1]["source_id"], rows[-1]["seq"])

    # ------------------------------------------------------------------ nodes
    def frontier(self, ns: str, source_id: str) -> list[MemoryNode]:
        """The source's nodes of level 1 and up without a parent, plus the last node (highest position) of every
        level (lines included: the next line's position follows it)."""
        rows = self.db.reader.execute(
            f"""SELECT {NODE_COLS} FROM nodes WHERE namespace = ?1 AND source_id = ?2 AND parent_id IS NULL
                AND level >= 1
                UNION
                SELECT {NODE_COLS} FROM nodes n WHERE namespace = ?1 AND source_id = ?2 AND position = (
                    SELECT MAX(position) FROM nodes m
                    WHERE m.namespace = ?1 AND m.source_id = ?2 AND m.level = n.level)""",
            (ns, source_id),
        )
        return [node_of(r) for r in rows]

    def source_nodes(
        self, ns: str, source_id: str, level: int | None = None, first: int = 0, last: int | None = None
    ) -> list[MemoryNode]:
        """The source's nodes (of `level`, positions in [first, last], when given), by level then position."""
        if level is None:
            rows = self.db.reader.execute(
                f"SELECT {NODE_COLS} FROM nodes WHERE namespace = ? AND source_id = ? ORDER BY level, position",
                (ns, source_id),
            )
        else:
            rows = self.db.reader.execute(
                f"SELECT {NODE_COLS} FROM nodes WHERE namespace = ? AND source_id = ? AND level = ? "
                "AND position >= ? AND (? IS NULL OR position <= ?) ORDER BY position",
                (ns, source_id, level, first, last, last),
            )
        return [node_of(r) for r in rows]

    def roots(self, ns: str, source_id: str, limit: int) -> list[MemoryNode]:
        """Up to `limit` of the source's nodes of level 1 and up without a parent (lines are not in the tree),
        highest level first, then latest first."""
        rows = self.db.reader.execute(
            f"SELECT {NODE_COLS} FROM nodes WHERE namespace = ? AND source_id = ? AND parent_id IS NULL "
            "AND level >= 1 ORDER BY level DESC, position DESC LIMIT ?",
            (ns, source_id, limit),
        )
        return [node_of(r) for r in rows]

    def get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]:
        """The namespace's nodes with these ids (unknown ids left out)."""
        out: list[MemoryNode] = []
        for part in _parts(ids):
            rows = self.db.reader.execute(
                f"SELECT {NODE_COLS} FROM nodes WHERE namespace = ? AND id IN ({_marks(len(part))})", (ns, *part)
            )
            out.extend(node_of(r) for r in rows)
        return out

    def get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """{node id: embedding (float32, (dimension,))} of the ids found."""
        out: dict[str, np.ndarray] = {}
        for part in _parts(ids):
            rows = self.db.reader.execute(
                f"SELECT id, embedding FROM nodes WHERE namespace = ? AND id IN ({_marks(len(part))})", (ns, *part)
            )
            out.update((r[0], np.frombuffer(r[1], dtype=np.float32).copy()) for r in rows)
        return out

    # ------------------------------------------------------------------ what the search indexes are fed from
    def namespace_version(self, ns: str) -> str:
        """The namespace's row of the `namespaces` table (bumped by every commit), "0" when never written."""
        row = self.db.reader.execute("SELECT version FROM namespaces WHERE namespace = ?", (ns,)).fetchone()
        return str(row[0] if row else 0)

    def source_stamps(self, ns: str) -> dict[str, str]:
        """{source id: the namespace version of its last commit}."""
        rows = self.db.reader.execute("SELECT source_id, stamp FROM sources WHERE namespace = ?", (ns,))
        return {r[0]: str(r[1]) for r in rows}

    def index_entries(self, ns: str, source_ids: Sequence[str] | None) -> Iterator[IndexEntry]:
        """The nodes of these sources (the namespace's when None), read a slice at a time."""
        cols = (
            "id, source_type, source_id, level, start_time, end_time, speakers, session_ids, text, embedding, position"
        )
        parts: Iterator[list[str]] = iter([[]]) if source_ids is None else _parts(source_ids)
        for part in parts:
            where = "namespace = ?" if source_ids is None else f"namespace = ? AND source_id IN ({_marks(len(part))})"
            cur = self.db.reader.execute(f"SELECT {cols} FROM nodes WHERE {where} ORDER BY rowid", (ns, *part))
            while rows := cur.fetchmany(5_000):
                for r in rows:
                    yield IndexEntry(
                        r[0],
                        r[1],
                        r[2],
                        r[3],
                        r[10],
                        r[4] if r[4] is not None else np.nan,
                        r[5] if r[5] is not None else np.nan,
                        json.loads(r[6]),
                        json.loads(r[7]),
                        r[8],
                        np.frombuffer(r[9], dtype=np.float32),
                    )

    # ------------------------------------------------------------------ writes
    def commit(self, ns: str, batch: WriteBatch, expected_version: int) -> None:
        """Apply `batch` in one transaction if the source's version is `expected_version` (else ConflictError,
        nothing changed), bump the namespace's version and stamp the source with it."""
        src = batch.source
        with self.db.transaction() as db:
            row = db.execute(
                "SELECT version FROM sources WHERE namespace = ? AND source_id = ?", (ns, src.source_id)
            ).fetchone()
            if (row[0] if row else 0) != expected_version:
                raise ConflictError(f"{src.source_id!r} changed meanwhile")
            if batch.replace or batch.delete_source:
                db.execute("DELETE FROM nodes WHERE namespace = ? AND source_id = ?", (ns, src.source_id))
                db.execute("DELETE FROM messages WHERE namespace = ? AND source_id = ?", (ns, src.source_id))
            if batch.delete_source:
                db.execute("DELETE FROM sources WHERE namespace = ? AND source_id = ?", (ns, src.source_id))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO sources (namespace, source_id, source_type, version, n_messages, "
                    "n_tokens, max_seq, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        ns,
                        src.source_id,
                        src.source_type,
                        src.version,
                        src.n_messages,
                        src.n_tokens,
                        src.max_seq,
                        json.dumps(src.metadata),
                    ),
                )
                db.executemany(
                    f"INSERT INTO messages (namespace, {MSG_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            ns,
                            m.id,
                            m.source_id,
                            m.source_type,
                            m.seq,
                            m.speaker,
                            m.content,
                            ts(m.created_at),
                            m.tok_offset,
                            m.n_tokens,
                            m.show_time,
                            m.session_id,
                            sentences_text(m),
                        )
                        for m in batch.messages
                    ],
                )
                for node, vector in batch.nodes:
                    _write_node(db, ns, node, vector)
            dropped = write_instructions(db, ns, batch.instructions, batch.drop_instructions)
            version = db.execute(
                "INSERT INTO namespaces VALUES (?, 1) ON CONFLICT (namespace) DO UPDATE SET version = version + 1 "
                "RETURNING version",
                (ns,),
            ).fetchone()[0]
            db.execute(
                "UPDATE sources SET stamp = ? WHERE namespace = ? AND source_id = ?", (version, ns, src.source_id)
            )
        if batch.replace or batch.delete_source or dropped:
            self.db.scrub()

    def delete_namespace(self, ns: str) -> tuple[int, int]:
        """Remove everything of the namespace (core entries, marks and instructions too); returns (messages,
        nodes) removed."""
        with self.db.transaction() as db:
            n_msgs = db.execute("SELECT COUNT(*) FROM messages WHERE namespace = ?", (ns,)).fetchone()[0]
            n_nodes = db.execute("SELECT COUNT(*) FROM nodes WHERE namespace = ?", (ns,)).fetchone()[0]
            for table in ("nodes", "messages", "sources", "core_memory", "node_marks", "instructions", "idempotency"):
                db.execute(f"DELETE FROM {table} WHERE namespace = ?", (ns,))
            db.execute(
                "INSERT INTO namespaces VALUES (?, 1) ON CONFLICT (namespace) DO UPDATE SET version = version + 1",
                (ns,),
            )
        self.db.scrub()
        return n_msgs, n_nodes

    # ------------------------------------------------------------------ what the background indexer finds
    def backlog(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with messages past its last chunk."""
        rows = self.db.reader.execute(
            """SELECT s.namespace, s.source_id FROM sources s WHERE s.n_tokens > COALESCE(
                   (SELECT MAX(n.tok_end) FROM nodes n
                    WHERE n.namespace = s.namespace AND n.source_id = s.source_id AND n.level = 1), 0)"""
        )
        return [(r[0], r[1]) for r in rows]

    def unrolled(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with a complete group of sealed nodes awaiting its summary."""
        rows = self.db.reader.execute(
            """SELECT DISTINCT namespace, source_id FROM (SELECT namespace, source_id FROM nodes
                   WHERE parent_id IS NULL AND level >= 1 AND sealed AND level < ?
                   GROUP BY namespace, source_id, level
                   HAVING COUNT(*) >= ?)""",
            (self.settings.max_level, self.settings.fan_out),
        )
        return [(r[0], r[1]) for r in rows]

    def counts(self, ns: str) -> dict[str, int]:
        """The namespace's `sources`, `messages` and nodes per level (`L1`, `L2`...)."""
        db = self.db.reader
        out = {
            "sources": db.execute("SELECT COUNT(*) FROM sources WHERE namespace = ?", (ns,)).fetchone()[0],
            "messages": db.execute("SELECT COUNT(*) FROM messages WHERE namespace = ?", (ns,)).fetchone()[0],
        }
        for lvl, n in db.execute(
            "SELECT level, COUNT(*) FROM nodes WHERE namespace = ? GROUP BY level ORDER BY level", (ns,)
        ):
            out[f"L{lvl}"] = n
        return out

    def node_counts(self) -> dict[str, int] | None:
        """Nodes per level over every namespace."""
        rows = self.db.reader.execute("SELECT level, COUNT(*) FROM nodes GROUP BY level ORDER BY level")
        return {f"L{lvl}": n for lvl, n in rows}


def _write_node(db: sqlite3.Connection, ns: str, n: MemoryNode, vector: np.ndarray | None) -> None:
    """Write one node of a batch: a metadata update when `vector` is None, else a new row (replacing the old)."""
    meta = (n.position, json.dumps(n.children), n.parent_id, n.sealed, n.summariser)
    if vector is None:  # a metadata update of a stored node: its vector and text stay
        db.execute(
            "UPDATE nodes SET position = ?, children = ?, parent_id = ?, sealed = ?, summariser = ? "
            "WHERE namespace = ? AND id = ?",
            (*meta, ns, n.id),
        )
        return
    db.execute("DELETE FROM nodes WHERE namespace = ? AND id = ?", (ns, n.id))  # a new vector: a new row
    db.execute(
        f"INSERT INTO nodes ({NODE_COLS}, namespace, embedding) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            n.id,
            n.source_type,
            n.source_id,
            n.level,
            n.position,
            n.text,
            n.token_count,
            json.dumps(n.children),
            n.parent_id,
            json.dumps(n.message_ids),
            json.dumps(n.speakers),
            ts(n.start_time),
            ts(n.end_time),
            n.sealed,
            n.tok_start,
            n.tok_end,
            n.summariser,
            json.dumps(n.session_ids),
            json.dumps(n.sentence_ids),
            ns,
            np.ascontiguousarray(vector, dtype=np.float32).tobytes(),
        ),
    )


def _message_where(flt: DeleteFilter | None, where: list[str], args: list[object]) -> None:
    """Append the SQL conditions (over `messages`) of a message filter (datastore.storage.message_matches)."""
    if flt is None:
        return
    if flt.conversation_id is not None:
        where.append("source_type = 'conversation' AND source_id = ?")
        args.append(flt.conversation_id)
    if flt.document_id is not None:
        where.append("source_type = 'document' AND source_id = ?")
        args.append(flt.document_id)
    if flt.speaker is not None:
        where.append("speaker = ?")
        args.append(flt.speaker)
    if flt.start_date is not None:
        where.append("created_at >= ?")
        args.append(ts(utc(flt.start_date)))
    if flt.end_date is not None:
        where.append("created_at <= ?")
        args.append(ts(utc(flt.end_date)))


class LocalCore:
    """CoreTable over the core_memory table."""

    def __init__(self, db: Connections) -> None:
        self.db = db

    def entries(self, ns: str, scopes: list[str] | None) -> list[CoreEntry]:
        """The stored entries of these scopes (every scope when None), expired ones too."""
        sql = (
            "SELECT scope, key, value, importance, created_at, updated_at, expires_at, tokens FROM core_memory "
            "WHERE namespace = ?"
        )
        rows = (
            self.db.reader.execute(sql, (ns,))
            if scopes is None
            else self.db.reader.execute(sql + f" AND scope IN ({_marks(len(scopes))})", (ns, *scopes))
        )
        return [
            CoreEntry(
                key=r[1],
                value=r[2],
                importance=r[3],
                conversation_id=r[0] or None,
                created_at=dt(r[4]),
                updated_at=dt(r[5]),
                expires_at=dt(r[6]),
                tokens=r[7],
            )
            for r in rows
        ]

    def write(self, ns: str, scope: str, put: CoreEntry | None, delete: Sequence[str]) -> int:
        """Delete the scope's entries with a key in `delete`, then store `put`, in one transaction; returns how
        many entries were deleted."""
        with self.db.transaction() as db:
            gone = 0
            for key in delete:
                gone += db.execute(
                    "DELETE FROM core_memory WHERE namespace = ? AND scope = ? AND key = ?", (ns, scope, key)
                ).rowcount
            if put is not None:
                db.execute(
                    "INSERT OR REPLACE INTO core_memory VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        ns,
                        scope,
                        put.key,
                        put.value,
                        put.importance,
                        ts(put.created_at),
                        ts(put.updated_at),
                        ts(put.expires_at),
                        put.tokens,
                    ),
                )
        return gone


class LocalMarks:
    """MarkTable over the node_marks table."""

    def __init__(self, db: Connections) -> None:
        self.db = db

    def get(self, ns: str, ids: Sequence[str] | None) -> dict[str, NodeMarks]:
        """{node id: marks} of the given ids (every marked node of the namespace when None) that have any."""
        sql = "SELECT id, visit_count, last_visited_at, pinned, pin_message_ids FROM node_marks WHERE namespace = ?"
        if ids is None:
            rows = self.db.reader.execute(sql, (ns,)).fetchall()
        else:
            rows = [
                r
                for part in _parts(ids)
                for r in self.db.reader.execute(f"{sql} AND id IN ({_marks(len(part))})", (ns, *part))
            ]
        return {r[0]: NodeMarks(r[1], dt(r[2]), bool(r[3]), json.loads(r[4])) for r in rows}

    def add_visits(self, ns: str, visits: dict[str, tuple[int, datetime]]) -> None:
        """Add each count to its node's visit_count and raise its last_visited_at (one transaction)."""
        with self.db.transaction() as db:
            db.executemany(
                "INSERT INTO node_marks (namespace, id, visit_count, last_visited_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (namespace, id) DO UPDATE SET visit_count = visit_count + excluded.visit_count, "
                "last_visited_at = MAX(COALESCE(last_visited_at, 0), excluded.last_visited_at)",
                [(ns, i, n, ts(when)) for i, (n, when) in visits.items()],
            )

    def set(self, ns: str, marks: dict[str, NodeMarks]) -> None:
        """Replace the marks of these node ids."""
        with self.db.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO node_marks VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (ns, i, m.visit_count, ts(m.last_visited_at), m.pinned, json.dumps(m.pin_message_ids))
                    for i, m in marks.items()
                ],
            )
