"""The PostgreSQL store: pgvector for vectors, tables for the tree, messages and text (psycopg 3, sync pool).

- Schema by named, idempotent migrations (`pyramind_migrations`), each applied in one transaction under an
  advisory lock, so two processes starting together migrate once. The vector column is `vector(dimension)` of
  the embedder that first opened the database; `pyramind_meta` records the model (a mismatch is refused).
- `commit` is one transaction: `pg_advisory_xact_lock` on a hash of (namespace, source_id) serialises writers
  of one source across processes, then the version check decides (a stale writer gets ConflictError and the
  writer recomputes from the new state, so no children are ever summarised twice in the stored tree).
- Search is above the store (datastore/indexes/search.py: the in-memory BM25 and vector indexes, the same for
  every provider), fed by `index_entries`; the HNSW and tsvector indexes of the first migration are dropped by the
  eighth. `pyramind_namespaces` holds each namespace's version, bumped last in every commit (its row lock orders a
  namespace's commits, so a version read names every commit before it), and each source's `stamp` is the
  namespace version of its last commit. Every commit NOTIFYs its new version, so a process knows the versions
  without a round trip per search (`namespace_version`).
- Core memory (`core`), the marks of nodes (`marks`) and standing instructions (`instructions`, with a
  `vector(dimension)` column of their own; read whole per namespace, so no index on it) are tables of their own.
`PostgresStorage` implements the Storage protocol (datastore/storage.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from datastore.storage import (
    CoreTable,
    IdempotencyRecord,
    IdempotencyTable,
    IndexEntry,
    InstructionTable,
    LeaseTable,
    MarkTable,
    NodeMarks,
    SourceFacts,
    SourceRow,
    WriteBatch,
    instruction_order,
    merged,
    sentences_of,
    sentences_text,
)
from models.api import DeleteFilter
from models.core import CoreEntry
from models.instructions import Instruction
from models.memory import MemoryNode, StoredMessage
from models.settings import Settings
from models.time import utc
from services.errors import ConflictError, StoreError, StoreUnavailableError

_NODE_COLS = (
    "id, source_type, source_id, level, position, text, token_count, children, parent_id, message_ids, "
    "speakers, start_time, end_time, sealed, tok_start, tok_end, summariser, session_ids, sentence_ids"
)
_MSG_COLS = (
    "id, source_id, source_type, seq, speaker, content, created_at, tok_offset, n_tokens, show_time, session_id, "
    "sentences"
)
_MIGRATION_LOCK = 0x5079_7261_6D69  # any constant bigint: serialises migrations across processes
_HNSW_MAX_DIMENSION = 2000  # pgvector's limit for an HNSW index on `vector` (migration 001's; 008 drops it)
# the offset of the message holding token `lo` of a source's stream: the first of a backward read of the offset
# index (the largest offset <= lo), whatever the table's statistics say
_FIRST_AT = (
    "SELECT tok_offset FROM pyramind_messages WHERE namespace = %(ns)s AND source_id = %(sid)s "
    "AND tok_offset <= {lo} ORDER BY tok_offset DESC LIMIT 1"
)


def _schema_001(dimension: int) -> list[str]:
    statements = [
        "CREATE EXTENSION IF NOT EXISTS vector",
        "CREATE TABLE pyramind_meta (key text PRIMARY KEY, value text NOT NULL)",
        """CREATE TABLE pyramind_sources (namespace text NOT NULL, source_id text NOT NULL,
            source_type text NOT NULL, version integer NOT NULL, n_messages integer NOT NULL,
            n_tokens integer NOT NULL, max_seq integer NOT NULL, metadata jsonb NOT NULL DEFAULT '{}',
            PRIMARY KEY (namespace, source_id))""",
        """CREATE TABLE pyramind_messages (namespace text NOT NULL, source_id text NOT NULL, id text NOT NULL,
            source_type text NOT NULL, seq integer NOT NULL, speaker text NOT NULL, content text NOT NULL,
            created_at timestamptz, tok_offset integer NOT NULL, n_tokens integer NOT NULL,
            show_time boolean NOT NULL, PRIMARY KEY (namespace, source_id, id))""",
        "CREATE INDEX pyramind_messages_by_seq ON pyramind_messages (namespace, source_id, seq)",
        "CREATE INDEX pyramind_messages_by_id ON pyramind_messages (namespace, id)",
        f"""CREATE TABLE pyramind_nodes (namespace text NOT NULL, id text NOT NULL, source_type text NOT NULL,
            source_id text NOT NULL, level integer NOT NULL, position integer NOT NULL, text text NOT NULL,
            token_count integer NOT NULL, children text[] NOT NULL, parent_id text, message_ids text[] NOT NULL,
            speakers text[] NOT NULL, start_time timestamptz, end_time timestamptz, sealed boolean NOT NULL,
            tok_start integer NOT NULL, tok_end integer NOT NULL, summariser text,
            embedding vector({int(dimension)}) NOT NULL,
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
            PRIMARY KEY (namespace, id))""",
        "CREATE INDEX pyramind_nodes_by_source ON pyramind_nodes (namespace, source_id, level, position)",
        "CREATE INDEX pyramind_nodes_unparented ON pyramind_nodes (namespace, source_id) WHERE parent_id IS NULL",
        "CREATE INDEX pyramind_nodes_tsv ON pyramind_nodes USING gin (tsv)",
    ]
    if dimension <= _HNSW_MAX_DIMENSION:
        statements.append("CREATE INDEX pyramind_nodes_hnsw ON pyramind_nodes USING hnsw (embedding vector_cosine_ops)")
    return statements


def _m001_initial(conn: psycopg.Connection, dimension: int) -> None:
    for statement in _schema_001(dimension):
        conn.execute(statement)


def _m002_core_memory(conn: psycopg.Connection, dimension: int) -> None:
    """Core memory entries per namespace and scope (a conversation id, or '' for the whole namespace)."""
    conn.execute(
        """CREATE TABLE pyramind_core (namespace text NOT NULL, scope text NOT NULL, key text NOT NULL,
            value text NOT NULL, importance integer NOT NULL, created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL, expires_at timestamptz, tokens integer NOT NULL,
            PRIMARY KEY (namespace, scope, key))"""
    )


def _m003_sessions(conn: psycopg.Connection, dimension: int) -> None:
    """Each message's session, and the sessions a node covers (its first message's first)."""
    conn.execute("ALTER TABLE pyramind_messages ADD COLUMN session_id text")
    conn.execute("ALTER TABLE pyramind_nodes ADD COLUMN session_ids text[] NOT NULL DEFAULT '{}'")


def _m004_visits_pins(conn: psycopg.Connection, dimension: int) -> None:
    """Visits and pins of nodes, apart from the node rows (a visit never rewrites a node or its index entries)."""
    conn.execute(
        """CREATE TABLE pyramind_node_marks (namespace text NOT NULL, id text NOT NULL,
            visit_count integer NOT NULL DEFAULT 0, last_visited_at timestamptz, pinned boolean NOT NULL DEFAULT false,
            pin_message_ids text[] NOT NULL DEFAULT '{}', PRIMARY KEY (namespace, id))"""
    )


def _m005_instructions(conn: psycopg.Connection, dimension: int) -> None:
    """Standing instructions and preferences per namespace, with their provenance and the embedding of their
    statement (the store's dimension)."""
    conn.execute(
        f"""CREATE TABLE pyramind_instructions (namespace text NOT NULL, id text NOT NULL, kind text NOT NULL,
            text text NOT NULL, statement text, subject text NOT NULL, message_id text, conversation_id text,
            speaker text NOT NULL, created_at timestamptz, recorded_at timestamptz, superseded_by text,
            detector text NOT NULL, embedding vector({int(dimension)}) NOT NULL, PRIMARY KEY (namespace, id))"""
    )
    conn.execute(
        "CREATE INDEX pyramind_instructions_by_conversation ON pyramind_instructions (namespace, conversation_id)"
    )


def _m006_messages_by_offset(conn: psycopg.Connection, dimension: int) -> None:
    """Messages by their place in the source's token stream: a chunk's first and last message are a seek."""
    conn.execute("CREATE INDEX pyramind_messages_by_offset ON pyramind_messages (namespace, source_id, tok_offset)")


def _m009_idempotency(conn: psycopg.Connection, dimension: int) -> None:
    """The answers of writes sent with an Idempotency-Key, per namespace and key (kept 24 hours)."""
    conn.execute(
        """CREATE TABLE pyramind_idempotency (namespace text NOT NULL, key text NOT NULL, operation text NOT NULL,
            fingerprint text NOT NULL, status integer NOT NULL, response text NOT NULL,
            created_at timestamptz NOT NULL, PRIMARY KEY (namespace, key))"""
    )


def _m007_namespace_versions(conn: psycopg.Connection, dimension: int) -> None:
    """Each namespace's version (bumped by every commit) and each source's stamp (the version of its last
    commit): what the in-memory search indexes of every server process check before a search."""
    conn.execute("CREATE TABLE pyramind_namespaces (namespace text PRIMARY KEY, version bigint NOT NULL)")
    conn.execute("ALTER TABLE pyramind_sources ADD COLUMN stamp bigint NOT NULL DEFAULT 0")


def _m008_no_search_indexes(conn: psycopg.Connection, dimension: int) -> None:
    """Queries rank over the in-memory indexes above the providers: the HNSW index and the generated tsvector
    column with its GIN index served no query any more and cost every write (HNSW inserts were ~3 ms a node)."""
    conn.execute("DROP INDEX IF EXISTS pyramind_nodes_hnsw")
    conn.execute("DROP INDEX IF EXISTS pyramind_nodes_tsv")
    conn.execute("ALTER TABLE pyramind_nodes DROP COLUMN IF EXISTS tsv")


def _m010_sentences(conn: psycopg.Connection, dimension: int) -> None:
    """Each message's sentences as split when it was stored (datastore/storage.sentences_text; NULL for a message
    stored before: `pyramind upgrade` rebuilds such a store's trees on sentences)."""
    conn.execute("ALTER TABLE pyramind_messages ADD COLUMN sentences text")


def _m011_lines_outside_the_tree(conn: psycopg.Connection, dimension: int) -> None:
    """A line (level 0) has no parent (models/memory.MemoryNode): the lines' chunk links go, and the index of
    unparented nodes (the frontier, roots and `unrolled` read it) holds levels 1 and up only, not every line."""
    conn.execute("UPDATE pyramind_nodes SET parent_id = NULL WHERE level = 0 AND parent_id IS NOT NULL")
    conn.execute("DROP INDEX IF EXISTS pyramind_nodes_unparented")
    conn.execute(
        "CREATE INDEX pyramind_nodes_unparented ON pyramind_nodes (namespace, source_id) "
        "WHERE parent_id IS NULL AND level >= 1"
    )


def _m012_summary_sentences(conn: psycopg.Connection, dimension: int) -> None:
    """A summary's picked sentences (MemoryNode.sentence_ids; '{}' for every node written before, which rolls
    up from the sentences under it: datastore/write/spans.py)."""
    conn.execute("ALTER TABLE pyramind_nodes ADD COLUMN sentence_ids text[] NOT NULL DEFAULT '{}'")


MIGRATIONS: list[tuple[str, Callable[[psycopg.Connection, int], None]]] = [
    ("001_initial", _m001_initial),
    ("002_core_memory", _m002_core_memory),
    ("003_sessions", _m003_sessions),
    ("004_visits_pins", _m004_visits_pins),
    ("005_instructions", _m005_instructions),
    ("006_messages_by_offset", _m006_messages_by_offset),
    ("007_namespace_versions", _m007_namespace_versions),
    ("008_no_search_indexes", _m008_no_search_indexes),
    ("009_idempotency", _m009_idempotency),
    ("010_sentences", _m010_sentences),
    ("011_lines_outside_the_tree", _m011_lines_outside_the_tree),
    ("012_summary_sentences", _m012_summary_sentences),
]


def _node(r: dict[str, Any]) -> MemoryNode:
    return MemoryNode(
        id=r["id"],
        source_type=r["source_type"],
        source_id=r["source_id"],
        level=r["level"],
        position=r["position"],
        text=r["text"],
        token_count=r["token_count"],
        children=list(r["children"]),
        parent_id=r["parent_id"],
        message_ids=list(r["message_ids"]),
        speakers=list(r["speakers"]),
        start_time=r["start_time"],
        end_time=r["end_time"],
        sealed=r["sealed"],
        tok_start=r["tok_start"],
        tok_end=r["tok_end"],
        summariser=r["summariser"],
        session_ids=list(r["session_ids"]),
        sentence_ids=list(r["sentence_ids"]),
    )


def _node_row(n: MemoryNode) -> tuple[Any, ...]:
    """The node's values in `_NODE_COLS` order."""
    return (
        n.id,
        n.source_type,
        n.source_id,
        n.level,
        n.position,
        n.text,
        n.token_count,
        n.children,
        n.parent_id,
        n.message_ids,
        n.speakers,
        n.start_time,
        n.end_time,
        n.sealed,
        n.tok_start,
        n.tok_end,
        n.summariser,
        n.session_ids,
        n.sentence_ids,
    )


def _message(r: dict[str, Any]) -> StoredMessage:
    return StoredMessage(
        id=r["id"],
        source_id=r["source_id"],
        source_type=r["source_type"],
        seq=r["seq"],
        speaker=r["speaker"],
        content=r["content"],
        created_at=r["created_at"],
        tok_offset=r["tok_offset"],
        n_tokens=r["n_tokens"],
        show_time=r["show_time"],
        session_id=r["session_id"],
        sentences=sentences_of(r["sentences"]),
    )


def _message_where(flt: DeleteFilter | None, where: list[str], args: list[Any]) -> None:
    """Append the SQL conditions (over `pyramind_messages`) of a message filter."""
    if flt is not None:
        for sql, value in (
            ("source_type = 'conversation' AND source_id = %s", flt.conversation_id),
            ("source_type = 'document' AND source_id = %s", flt.document_id),
            ("speaker = %s", flt.speaker),
            ("created_at >= %s", utc(flt.start_date)),
            ("created_at <= %s", utc(flt.end_date)),
        ):
            if value is not None:
                where.append(sql)
                args.append(value)


class _Pool(ConnectionPool):
    """The connection pool, saying when the database went away: a lost or refused connection inside a
    `connection()` block (the transaction then rolled back) is a StoreUnavailableError naming POSTGRES_URL."""

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Any]:
        try:
            with super().connection(timeout) as conn:
                yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
            raise StoreUnavailableError(f"the postgres store (POSTGRES_URL) is unreachable: {exc}") from exc


_CHANNEL = "pyramind_versions"  # NOTIFY channel: [namespace, version] of every commit, at its commit


def _bump(conn: psycopg.Connection, ns: str) -> int:
    """Bump the namespace's version in the caller's transaction (last: its row lock is held to the commit, so
    a namespace's commits are ordered by it), notify it (delivered at the commit) and return the new version."""
    row = conn.execute(
        "WITH b AS (INSERT INTO pyramind_namespaces AS v VALUES (%s, 1) ON CONFLICT (namespace) DO UPDATE "
        "SET version = v.version + 1 RETURNING version) "
        f"SELECT version, pg_notify('{_CHANNEL}', json_build_array(%s::text, version)::text) FROM b",
        (ns, ns),
    ).fetchone()
    assert row is not None
    return int(row["version"])  # type: ignore[call-overload]  # the pool's rows are dicts


class PostgresStorage:
    """PostgreSQL + pgvector provider. settings: `POSTGRES_URL` names the database, `PG_POOL_SIZE` caps
    connections, FAN_OUT and MAX_LEVEL (what `unrolled` counts). dimension: the embedder's (the vector column's,
    fixed by the first opening).

    The database needs the `vector` extension available (created by the first migration when the role may).
    Raises StoreError when the database can't be reached or migrated.
    """

    name = "postgres"

    def __init__(self, settings: Settings, dimension: int) -> None:
        self.settings = settings
        self.dimension = dimension
        self.core: CoreTable | None = PgCore(self)
        self.marks: MarkTable | None = PgMarks(self)
        self.instructions: InstructionTable | None = PgInstructions(self)
        self.idempotency: IdempotencyTable | None = PgIdempotency(self)
        self.leases: LeaseTable | None = None  # its commit checks and writes in one transaction
        self._versions: dict[str, int] = {}  # namespace -> version, while the listener is connected
        self._listen_generation = 0  # bumped by every (re)connection of the listener; 0: not listening
        self._versions_lock = threading.Lock()
        self._closed = threading.Event()
        self._open()
        threading.Thread(target=self._listen, name="pyramind-pg-versions", daemon=True).start()

    # ------------------------------------------------------------------ lifecycle
    def _open(self) -> None:
        if self.settings.postgres_url is None:
            raise StoreError("DATASTORE=postgres needs POSTGRES_URL (postgresql://user:password@host:5432/db)")
        conninfo = self.settings.postgres_url.get_secret_value()
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=15) as conn:
                self._migrate(conn)
            self.pool: ConnectionPool[Any] = _Pool(  # rows are dicts (row_factory below)
                conninfo,
                min_size=1,
                max_size=self.settings.pg_pool_size,
                open=True,
                timeout=30,
                kwargs={"options": "-c timezone=UTC", "row_factory": dict_row, "autocommit": True},
                configure=self._configure,
            )
            self.pool.wait(timeout=30)
        except (psycopg.Error, TimeoutError) as exc:
            self.close()
            raise StoreError(f"cannot open the postgres store (POSTGRES_URL): {exc}") from exc

    @staticmethod
    def _configure(conn: psycopg.Connection) -> None:
        register_vector(conn)
        conn.commit()  # the pool wants connections back idle

    def close(self) -> None:
        """Close the connection pool (the listener of namespace versions stops within a second)."""
        closed = getattr(self, "_closed", None)
        if closed is not None:
            closed.set()
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close()

    def _migrate(self, conn: psycopg.Connection) -> None:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS pyramind_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL)"
        )
        for name, fn in MIGRATIONS:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                if conn.execute("SELECT 1 FROM pyramind_migrations WHERE name = %s", (name,)).fetchone():
                    continue
                fn(conn, self.dimension)
                conn.execute("INSERT INTO pyramind_migrations VALUES (%s, now())", (name,))

    def record_embedding(self, model: str, dimension: int) -> tuple[str, int]:
        """The (model, dimension) the database was made with, recording the given ones when it has none yet."""
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("LOCK TABLE pyramind_meta IN EXCLUSIVE MODE")
            rows = {
                r["key"]: r["value"]
                for r in conn.execute(
                    "SELECT key, value FROM pyramind_meta WHERE key IN ('embedding_model', 'embedding_dimension')"
                )
            }
            if not rows:
                conn.execute(
                    "INSERT INTO pyramind_meta VALUES ('embedding_model', %s), ('embedding_dimension', %s)",
                    (model, str(dimension)),
                )
                return model, dimension
        return rows.get("embedding_model", ""), int(rows.get("embedding_dimension", 0))

    @property
    def location(self) -> str:
        """`POSTGRES_URL` (never the URL: it holds the password)."""
        return "POSTGRES_URL"

    def all(self, sql: str, args: Sequence[Any] | dict[str, Any] = (), binary: bool = False) -> list[dict[str, Any]]:
        """Every row of one statement, as dicts, on a pooled connection (autocommit: one round trip; writes of
        several statements run in `conn.transaction()`). binary: rows in PostgreSQL's binary format (a vector is
        then read as float32 bytes, not parsed from text: ~8x less CPU a vector)."""
        with self.pool.connection() as conn:
            rows: list[dict[str, Any]] = conn.execute(sql, args, binary=binary).fetchall()
            return rows

    # ------------------------------------------------------------------ reads
    def get_source(self, ns: str, source_id: str) -> SourceRow | None:
        """The source's row, or None."""
        return self.get_sources(ns, [source_id]).get(source_id)

    def get_sources(self, ns: str, source_ids: Sequence[str]) -> dict[str, SourceRow]:
        """{source id: its row} of the ids found, in one round trip."""
        if not source_ids:
            return {}
        rows = self.all(
            "SELECT * FROM pyramind_sources WHERE namespace = %s AND source_id = ANY(%s)", (ns, list(source_ids))
        )
        return {r["source_id"]: SourceRow.of(r, r["metadata"]) for r in rows}

    def known_message_ids(self, ns: str, source_id: str, ids: Sequence[str]) -> set[str]:
        """Which of `ids` the source holds."""
        rows = self.all(
            "SELECT id FROM pyramind_messages WHERE namespace = %s AND source_id = %s AND id = ANY(%s)",
            (ns, source_id, list(ids)),
        )
        return {r["id"] for r in rows}

    def messages(
        self, ns: str, source_id: str, tok_from: int = 0, tok_to: int | None = None, limit: int | None = None
    ) -> list[StoredMessage]:
        """The source's messages whose rendered tokens overlap [tok_from, tok_to), in seq order, at most `limit`."""
        # the first message that can overlap starts at the largest offset <= tok_from (messages tile the stream,
        # so offset order is seq order); ordered by offset, the planner reads the offset index's range instead
        # of filtering every message of the source along the seq index (2.5 -> 0.36 ms a read at 5k messages).
        # That offset is read as the first row of a backward range (`_FIRST_AT`), not MAX(): with a freshly
        # loaded table's statistics (no ANALYZE yet) the planner aggregated every message before it instead.
        rows = self.all(
            f"SELECT {_MSG_COLS} FROM pyramind_messages WHERE namespace = %(ns)s AND source_id = %(sid)s "
            f"AND tok_offset >= COALESCE(({_FIRST_AT.format(lo='%(lo)s')}), 0) AND tok_offset < "
            "COALESCE(%(hi)s::integer, 2147483647) AND tok_offset + n_tokens > %(lo)s ORDER BY tok_offset, seq "
            "LIMIT %(limit)s",
            {"ns": ns, "sid": source_id, "lo": tok_from if tok_from > 0 else -1, "hi": tok_to, "limit": limit},
        )
        return [_message(r) for r in rows]

    def messages_in(self, ns: str, source_id: str, ranges: Sequence[tuple[int, int]]) -> list[StoredMessage]:
        """The source's messages overlapping one of `ranges`, each once, in seq order, in one query: each range
        (`merged`) read along the offset index as `messages` reads one (a context block's candidates: one round
        trip for what was one a chunk). Each range is its own index read (`OFFSET 0` keeps the planner from
        joining the ranges to every message of the source, as it did on a freshly loaded table's statistics: 10
        ranges of a 5,000-message conversation before ANALYZE, 16 -> 2.5-3.4 ms; bench/RESULTS.md, stop11-notes)."""
        spans = merged(ranges)
        if not spans:
            return []
        rows = self.all(
            "SELECT DISTINCT ON (m.tok_offset, m.seq) m.* FROM unnest(%(lo)s::integer[], %(hi)s::integer[]) AS "
            f"r(lo, hi) CROSS JOIN LATERAL (SELECT {_MSG_COLS} FROM pyramind_messages WHERE namespace = %(ns)s "
            f"AND source_id = %(sid)s AND tok_offset >= COALESCE(({_FIRST_AT.format(lo='r.lo')}), 0) "
            "AND tok_offset < r.hi AND tok_offset + n_tokens > r.lo OFFSET 0) AS m ORDER BY m.tok_offset, m.seq",
            {
                "ns": ns,
                "sid": source_id,
                "lo": [lo if lo > 0 else -1 for lo, _ in spans],
                "hi": [hi for _, hi in spans],
            },
        )
        return [_message(r) for r in rows]

    def frontier(self, ns: str, source_id: str) -> list[MemoryNode]:
        """The source's nodes of level 1 and up without a parent, plus the last node (highest position) of every
        level (lines included: the next line's position follows it)."""
        rows = self.all(
            f"""SELECT {_NODE_COLS} FROM pyramind_nodes
                WHERE namespace = %(ns)s AND source_id = %(sid)s AND parent_id IS NULL AND level >= 1
                UNION
                SELECT {_NODE_COLS} FROM pyramind_nodes n WHERE namespace = %(ns)s AND source_id = %(sid)s
                AND position = (SELECT MAX(position) FROM pyramind_nodes m
                                WHERE m.namespace = %(ns)s AND m.source_id = %(sid)s AND m.level = n.level)""",
            {"ns": ns, "sid": source_id},
        )
        return [_node(r) for r in rows]

    def source_nodes(
        self, ns: str, source_id: str, level: int | None = None, first: int = 0, last: int | None = None
    ) -> list[MemoryNode]:
        """The source's nodes (of `level`, positions in [first, last], when given), by level then position."""
        if level is None:
            rows = self.all(
                f"SELECT {_NODE_COLS} FROM pyramind_nodes WHERE namespace = %s AND source_id = %s "
                "ORDER BY level, position",
                (ns, source_id),
            )
        else:
            rows = self.all(
                f"SELECT {_NODE_COLS} FROM pyramind_nodes WHERE namespace = %s AND source_id = %s "
                "AND level = %s AND position >= %s AND (%s::integer IS NULL OR position <= %s) "
                "ORDER BY position",
                (ns, source_id, level, first, last, last),
            )
        return [_node(r) for r in rows]

    def roots(self, ns: str, source_id: str, limit: int) -> list[MemoryNode]:
        """Up to `limit` of the source's nodes of level 1 and up without a parent (lines are not in the tree),
        highest level first, then latest first."""
        rows = self.all(
            f"SELECT {_NODE_COLS} FROM pyramind_nodes WHERE namespace = %s AND source_id = %s "
            "AND parent_id IS NULL AND level >= 1 ORDER BY level DESC, position DESC LIMIT %s",
            (ns, source_id, limit),
        )
        return [_node(r) for r in rows]

    def get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]:
        """The namespace's nodes with these ids (unknown ids left out)."""
        rows = self.all(
            f"SELECT {_NODE_COLS} FROM pyramind_nodes WHERE namespace = %s AND id = ANY(%s)", (ns, list(ids))
        )
        return [_node(r) for r in rows]

    def get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """{node id: embedding (float32, (dimension,))} of the ids found."""
        rows = self.all(
            "SELECT id, embedding FROM pyramind_nodes WHERE namespace = %s AND id = ANY(%s)",
            (ns, list(ids)),
            binary=True,
        )
        return {r["id"]: np.asarray(r["embedding"].to_numpy(), dtype=np.float32) for r in rows}

    def find_messages(
        self, ns: str, ids: Sequence[str] | None = None, flt: DeleteFilter | None = None
    ) -> list[tuple[str, str]]:
        """(source id, message id) of the messages with one of `ids` (any source), or matching `flt`."""
        where: list[str] = ["namespace = %s"]
        args: list[Any] = [ns]
        if ids is not None:
            where.append("id = ANY(%s)")
            args.append(list(ids))
        _message_where(flt, where, args)
        rows = self.all(f"SELECT source_id, id FROM pyramind_messages WHERE {' AND '.join(where)}", args)
        return [(r["source_id"], r["id"]) for r in rows]

    def scan_messages(self, ns: str, flt: DeleteFilter | None) -> Iterator[StoredMessage]:
        """Messages matching `flt` in (source id, seq) order, read in keyset pages of 500."""
        after: tuple[str, int] = ("", -1)
        while True:
            where, args = ["namespace = %s", "(source_id, seq) > (%s, %s)"], [ns, *after]
            _message_where(flt, where, args)
            rows = self.all(
                f"SELECT {_MSG_COLS} FROM pyramind_messages WHERE {' AND '.join(where)} "
                "ORDER BY source_id, seq LIMIT 500",
                args,
            )
            yield from (_message(r) for r in rows)
            if len(rows) < 500:
                return
            after = (rows[-1]["source_id"], rows[-1]["seq"])

    def backlog(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with messages past its last chunk."""
        rows = self.all(
            """SELECT s.namespace, s.source_id FROM pyramind_sources s WHERE s.n_tokens > COALESCE(
                   (SELECT MAX(n.tok_end) FROM pyramind_nodes n
                    WHERE n.namespace = s.namespace AND n.source_id = s.source_id AND n.level = 1), 0)"""
        )
        return [(r["namespace"], r["source_id"]) for r in rows]

    def unrolled(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with a complete group of sealed nodes awaiting its summary."""
        rows = self.all(
            """SELECT DISTINCT namespace, source_id FROM (SELECT namespace, source_id FROM pyramind_nodes
                   WHERE parent_id IS NULL AND level >= 1 AND sealed AND level < %s
                   GROUP BY namespace, source_id, level
                   HAVING COUNT(*) >= %s) AS groups""",
            (self.settings.max_level, self.settings.fan_out),
        )
        return [(r["namespace"], r["source_id"]) for r in rows]

    def list_namespaces(self) -> list[str]:
        """Every namespace holding at least one source or core memory entry, sorted."""
        sql = "SELECT namespace FROM pyramind_sources UNION SELECT namespace FROM pyramind_core ORDER BY 1"
        return [r["namespace"] for r in self.all(sql)]

    def list_sources(self, ns: str, after: str | None = None, limit: int | None = None) -> list[str]:
        """Source ids of the namespace greater than `after`, in code-point order (COLLATE "C"), at most `limit`."""
        rows = self.all(
            'SELECT source_id FROM pyramind_sources WHERE namespace = %s AND source_id COLLATE "C" > %s '
            'ORDER BY source_id COLLATE "C" LIMIT %s',
            (ns, after if after is not None else "", limit),
        )
        return [r["source_id"] for r in rows]

    def source_facts(self, ns: str, source_ids: Sequence[str]) -> dict[str, SourceFacts]:
        """Node counts per level and time range of each source (one grouped query)."""
        out = {sid: SourceFacts() for sid in source_ids}
        rows = self.all(
            "SELECT source_id, level, COUNT(*) AS n, MIN(start_time) AS s, MAX(end_time) AS e FROM pyramind_nodes "
            "WHERE namespace = %s AND source_id = ANY(%s) GROUP BY source_id, level ORDER BY level",
            (ns, list(source_ids)),
        )
        for r in rows:
            f = out[r["source_id"]]
            f.level_counts[r["level"]] = r["n"]
            if r["s"] is not None:
                f.start_time = min(f.start_time, r["s"]) if f.start_time else r["s"]
            if r["e"] is not None:
                f.end_time = max(f.end_time, r["e"]) if f.end_time else r["e"]
        return out

    # ------------------------------------------------------------------ writes
    def commit(self, ns: str, batch: WriteBatch, expected_version: int) -> None:
        """Apply `batch` in one transaction if the source's version is `expected_version` (else ConflictError,
        nothing changed); writers of one source are serialised by an advisory lock."""
        self._saw(ns, self._commit(ns, batch, expected_version))  # this process's next search sees it at once

    def _commit(self, ns: str, batch: WriteBatch, expected_version: int) -> int:
        """`commit`'s transaction; returns the namespace version it committed."""
        src = batch.source
        key = (ns, src.source_id)
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (json.dumps(key),))
            row = conn.execute(
                "SELECT version FROM pyramind_sources WHERE namespace = %s AND source_id = %s", key
            ).fetchone()
            if (row["version"] if row else 0) != expected_version:
                raise ConflictError(f"{src.source_id!r} changed meanwhile")
            kept = [n.id for n, v in batch.nodes if v is None and not batch.delete_source]
            if batch.replace or batch.delete_source:  # nodes sent without a vector stay (their vector is kept)
                conn.execute(
                    "DELETE FROM pyramind_nodes WHERE namespace = %s AND source_id = %s AND NOT (id = ANY(%s))",
                    (*key, kept),
                )
                conn.execute("DELETE FROM pyramind_messages WHERE namespace = %s AND source_id = %s", key)
            _write_instructions(conn, ns, batch.instructions, batch.drop_instructions)
            if batch.delete_source:
                conn.execute("DELETE FROM pyramind_sources WHERE namespace = %s AND source_id = %s", key)
                return _bump(conn, ns)
            conn.execute(
                """INSERT INTO pyramind_sources (namespace, source_id, source_type, version, n_messages, n_tokens,
                   max_seq, metadata) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                   ON CONFLICT (namespace, source_id) DO UPDATE SET source_type = EXCLUDED.source_type,
                   version = EXCLUDED.version, n_messages = EXCLUDED.n_messages, n_tokens = EXCLUDED.n_tokens,
                   max_seq = EXCLUDED.max_seq, metadata = EXCLUDED.metadata""",
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
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO pyramind_messages (namespace, {_MSG_COLS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (
                            ns,
                            m.id,
                            m.source_id,
                            m.source_type,
                            m.seq,
                            m.speaker,
                            m.content,
                            m.created_at,
                            m.tok_offset,
                            m.n_tokens,
                            m.show_time,
                            m.session_id,
                            sentences_text(m),
                        )
                        for m in batch.messages
                    ],
                )
                cols = [c.strip() for c in _NODE_COLS.split(",")]
                cur.executemany(  # a node without a vector: every field but its vector is written
                    f"UPDATE pyramind_nodes SET {', '.join(f'{c} = %s' for c in cols[1:])} "
                    "WHERE namespace = %s AND id = %s",
                    [(*_node_row(n)[1:], ns, n.id) for n, v in batch.nodes if v is None],
                )
                cols.append("embedding")
                cur.executemany(
                    f"INSERT INTO pyramind_nodes (namespace, {', '.join(cols)}) VALUES (%s{', %s' * len(cols)}) "
                    f"ON CONFLICT (namespace, id) DO UPDATE SET "
                    + ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c != "id"),
                    [(ns, *_node_row(n), np.asarray(v, dtype=np.float32)) for n, v in batch.nodes if v is not None],
                )
            version = _bump(conn, ns)
            conn.execute(
                "UPDATE pyramind_sources SET stamp = %s WHERE namespace = %s AND source_id = %s", (version, *key)
            )
        return version

    def delete_namespace(self, ns: str) -> tuple[int, int]:
        """Remove everything of the namespace (core entries, marks and instructions too); returns (messages,
        nodes) removed."""
        with self.pool.connection() as conn, conn.transaction():
            n_msgs = conn.execute("DELETE FROM pyramind_messages WHERE namespace = %s", (ns,)).rowcount
            n_nodes = conn.execute("DELETE FROM pyramind_nodes WHERE namespace = %s", (ns,)).rowcount
            conn.execute("DELETE FROM pyramind_sources WHERE namespace = %s", (ns,))
            conn.execute("DELETE FROM pyramind_core WHERE namespace = %s", (ns,))
            conn.execute("DELETE FROM pyramind_node_marks WHERE namespace = %s", (ns,))
            conn.execute("DELETE FROM pyramind_instructions WHERE namespace = %s", (ns,))
            conn.execute("DELETE FROM pyramind_idempotency WHERE namespace = %s", (ns,))
            version = _bump(conn, ns)
        self._saw(ns, version)
        return n_msgs, n_nodes

    # ------------------------------------------------------------------ what the search indexes are fed from
    def namespace_version(self, ns: str) -> str:
        """The namespace's row of `pyramind_namespaces` (bumped by every commit), "0" when never written.

        No round trip while the listener is connected: every commit notifies its new version (LISTEN/NOTIFY,
        delivered at the commit, a few ms to another process), this process's own commits set it before they
        return, and a namespace not yet seen is read once. Without the listener (reconnecting), it is read."""
        with self._versions_lock:
            generation = self._listen_generation
            if generation and ns in self._versions:
                return str(self._versions[ns])
        rows = self.all("SELECT version FROM pyramind_namespaces WHERE namespace = %s", (ns,))
        version = int(rows[0]["version"]) if rows else 0
        if generation:
            self._saw(ns, version, generation)
        return str(version)

    def _saw(self, ns: str, version: int, generation: int | None = None) -> None:
        """Keep a namespace version known to be committed (the highest seen), while the listener that was
        connected when it was read (`generation`; None: any) still is."""
        with self._versions_lock:
            if self._listen_generation and generation in (None, self._listen_generation):
                self._versions[ns] = max(version, self._versions.get(ns, 0))

    def _listen(self) -> None:
        """(thread) LISTEN for the versions other processes commit; reconnect after a failure (the versions are
        then read until it is back)."""
        conninfo = self.settings.postgres_url.get_secret_value() if self.settings.postgres_url else ""
        generation = 0
        while not self._closed.is_set():
            try:
                with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {_CHANNEL}")
                    generation += 1
                    with self._versions_lock:
                        self._versions.clear()
                        self._listen_generation = generation
                    while not self._closed.is_set():
                        for note in conn.notifies(timeout=0.5):
                            ns, version = json.loads(note.payload)
                            self._saw(ns, int(version))
            except Exception:  # the database went away: read versions until the listener is back
                pass
            with self._versions_lock:
                self._versions.clear()
                self._listen_generation = 0
            self._closed.wait(1.0)

    def source_stamps(self, ns: str) -> dict[str, str]:
        """{source id: the namespace version of its last commit}."""
        rows = self.all("SELECT source_id, stamp FROM pyramind_sources WHERE namespace = %s", (ns,))
        return {r["source_id"]: str(r["stamp"]) for r in rows}

    def index_entries(self, ns: str, source_ids: Sequence[str] | None) -> Iterator[IndexEntry]:
        """The nodes of these sources (the namespace's when None), streamed by a server-side cursor in binary
        (the vectors are not parsed from text)."""
        where = "namespace = %s" + ("" if source_ids is None else " AND source_id = ANY(%s)")
        args: tuple[Any, ...] = (ns,) if source_ids is None else (ns, list(source_ids))
        with self.pool.connection() as conn, conn.transaction():
            with conn.cursor(name="pyramind_index_entries", binary=True, row_factory=tuple_row) as cur:
                cur.itersize = 5_000
                cur.execute(
                    "SELECT id, source_type, source_id, level, position, extract(epoch FROM start_time)::float8 AS s, "
                    "extract(epoch FROM end_time)::float8 AS e, speakers, session_ids, text, embedding "
                    f"FROM pyramind_nodes WHERE {where}",
                    args,
                )
                nan = np.nan
                for nid, stype, sid, level, position, s, e, speakers, sessions, text, vector in cur:
                    yield IndexEntry(
                        nid,
                        stype,
                        sid,
                        level,
                        position,
                        nan if s is None else s,
                        nan if e is None else e,
                        speakers,
                        sessions,
                        text,
                        vector.to_numpy(),  # float32 already (pgvector's binary loader)
                    )

    def counts(self, ns: str) -> dict[str, int]:
        """The namespace's `sources`, `messages` and nodes per level (`L1`, `L2`...)."""
        out = {
            "sources": self.all("SELECT COUNT(*) AS n FROM pyramind_sources WHERE namespace = %s", (ns,))[0]["n"],
            "messages": self.all("SELECT COUNT(*) AS n FROM pyramind_messages WHERE namespace = %s", (ns,))[0]["n"],
        }
        for r in self.all(
            "SELECT level, COUNT(*) AS n FROM pyramind_nodes WHERE namespace = %s GROUP BY level ORDER BY level", (ns,)
        ):
            out[f"L{r['level']}"] = r["n"]
        return out

    def node_counts(self) -> dict[str, int] | None:
        """Nodes per level over every namespace."""
        rows = self.all("SELECT level, COUNT(*) AS n FROM pyramind_nodes GROUP BY level ORDER BY level")
        return {f"L{r['level']}": r["n"] for r in rows}


class PgIdempotency:
    """IdempotencyTable over pyramind_idempotency (one row per namespace and key)."""

    def __init__(self, store: PostgresStorage) -> None:
        self.store = store

    def get(self, ns: str, key: str) -> IdempotencyRecord | None:
        """The key's record in the namespace, or None."""
        rows = self.store.all(
            "SELECT key, operation, fingerprint, status, response, created_at FROM pyramind_idempotency "
            "WHERE namespace = %s AND key = %s",
            (ns, key),
        )
        return IdempotencyRecord(**rows[0]) if rows else None

    def entries(self, ns: str) -> list[IdempotencyRecord]:
        """Every record of the namespace, by key."""
        rows = self.store.all(
            "SELECT key, operation, fingerprint, status, response, created_at FROM pyramind_idempotency "
            "WHERE namespace = %s ORDER BY key",
            (ns,),
        )
        return [IdempotencyRecord(**r) for r in rows]

    def put(self, ns: str, record: IdempotencyRecord, expired_before: datetime) -> None:
        """Store the record (replacing the key's) and drop the namespace's expired ones, in one transaction."""
        with self.store.pool.connection() as conn, conn.transaction():
            conn.execute(
                "DELETE FROM pyramind_idempotency WHERE namespace = %s AND created_at < %s", (ns, expired_before)
            )
            conn.execute(
                "INSERT INTO pyramind_idempotency VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (namespace, key) "
                "DO UPDATE SET operation = EXCLUDED.operation, fingerprint = EXCLUDED.fingerprint, "
                "status = EXCLUDED.status, response = EXCLUDED.response, created_at = EXCLUDED.created_at",
                (
                    ns,
                    record.key,
                    record.operation,
                    record.fingerprint,
                    record.status,
                    record.response,
                    record.created_at,
                ),
            )


class PgCore:
    """CoreTable over pyramind_core."""

    def __init__(self, store: PostgresStorage) -> None:
        self.store = store

    def entries(self, ns: str, scopes: list[str] | None) -> list[CoreEntry]:
        """The stored entries of these scopes (every scope when None), expired ones too, in one query."""
        sql = (
            "SELECT scope, key, value, importance, created_at, updated_at, expires_at, tokens "
            "FROM pyramind_core WHERE namespace = %s"
        )
        rows = (
            self.store.all(sql, (ns,))
            if scopes is None
            else self.store.all(sql + " AND scope = ANY(%s)", (ns, list(scopes)))
        )
        return [CoreEntry(conversation_id=r.pop("scope") or None, **r) for r in rows]

    def write(self, ns: str, scope: str, put: CoreEntry | None, delete: Sequence[str]) -> int:
        """Delete the scope's entries with a key in `delete`, then store `put`, in one transaction; returns how
        many entries were deleted."""
        with self.store.pool.connection() as conn, conn.transaction():
            gone = (
                conn.execute(
                    "DELETE FROM pyramind_core WHERE namespace = %s AND scope = %s AND key = ANY(%s)",
                    (ns, scope, list(delete)),
                ).rowcount
                if delete
                else 0
            )
            if put is not None:
                conn.execute(
                    "INSERT INTO pyramind_core VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (namespace, scope, key) DO UPDATE SET value = EXCLUDED.value, "
                    "importance = EXCLUDED.importance, created_at = EXCLUDED.created_at, "
                    "updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at, tokens = EXCLUDED.tokens",
                    (
                        ns,
                        scope,
                        put.key,
                        put.value,
                        put.importance,
                        put.created_at,
                        put.updated_at,
                        put.expires_at,
                        put.tokens,
                    ),
                )
        return gone


class PgMarks:
    """MarkTable over pyramind_node_marks."""

    def __init__(self, store: PostgresStorage) -> None:
        self.store = store

    def get(self, ns: str, ids: Sequence[str] | None) -> dict[str, NodeMarks]:
        """{node id: marks} of the given ids (every marked node of the namespace when None) that have any."""
        sql = "SELECT * FROM pyramind_node_marks WHERE namespace = %s"
        rows = self.store.all(sql, (ns,)) if ids is None else self.store.all(sql + " AND id = ANY(%s)", (ns, list(ids)))
        return {
            r["id"]: NodeMarks(r["visit_count"], r["last_visited_at"], r["pinned"], list(r["pin_message_ids"]))
            for r in rows
        }

    def add_visits(self, ns: str, visits: dict[str, tuple[int, datetime]]) -> None:
        """Add each count to its node's visit_count and raise its last_visited_at (one transaction)."""
        with self.store.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO pyramind_node_marks AS m (namespace, id, visit_count, last_visited_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (namespace, id) DO UPDATE SET "
                "visit_count = m.visit_count + EXCLUDED.visit_count, "
                "last_visited_at = GREATEST(m.last_visited_at, EXCLUDED.last_visited_at)",
                [(ns, i, n, when) for i, (n, when) in sorted(visits.items())],
            )

    def set(self, ns: str, marks: dict[str, NodeMarks]) -> None:
        """Replace the marks of these node ids."""
        with self.store.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO pyramind_node_marks VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (namespace, id) "
                "DO UPDATE SET visit_count = EXCLUDED.visit_count, last_visited_at = EXCLUDED.last_visited_at, "
                "pinned = EXCLUDED.pinned, pin_message_ids = EXCLUDED.pin_message_ids",
                [
                    (ns, i, m.visit_count, m.last_visited_at, m.pinned, m.pin_message_ids)
                    for i, m in sorted(marks.items())
                ],
            )


_INSTRUCTION_COLS = (
    "id, kind, text, statement, subject, message_id, conversation_id, speaker, created_at, "
    "recorded_at, superseded_by, detector"
)


def _instruction_row(i: Instruction) -> tuple[Any, ...]:
    """The instruction's values in `_INSTRUCTION_COLS` order."""
    return (
        i.id,
        i.kind,
        i.text,
        i.statement,
        i.subject,
        i.message_id,
        i.conversation_id,
        i.speaker,
        i.created_at,
        i.recorded_at,
        i.superseded_by,
        i.detector,
    )


def _write_instructions(
    conn: psycopg.Connection, ns: str, put: Sequence[tuple[Instruction, np.ndarray | None]], drop: Sequence[str]
) -> int:
    """In the caller's transaction: delete `drop`, then write `put` (a None vector: every field but the
    embedding). Returns how many were deleted."""
    gone = (
        conn.execute(
            "DELETE FROM pyramind_instructions WHERE namespace = %s AND id = ANY(%s)", (ns, list(drop))
        ).rowcount
        if drop
        else 0
    )
    cols = [c.strip() for c in _INSTRUCTION_COLS.split(",")]
    with conn.cursor() as cur:
        cur.executemany(
            f"UPDATE pyramind_instructions SET {', '.join(f'{c} = %s' for c in cols[1:])} "
            "WHERE namespace = %s AND id = %s",
            [(*_instruction_row(i)[1:], ns, i.id) for i, v in put if v is None],
        )
        cur.executemany(
            f"INSERT INTO pyramind_instructions (namespace, {_INSTRUCTION_COLS}, embedding) "
            f"VALUES (%s{', %s' * (len(cols) + 1)}) ON CONFLICT (namespace, id) DO UPDATE SET "
            + ", ".join(f"{c} = EXCLUDED.{c}" for c in [*cols[1:], "embedding"]),
            [(ns, *_instruction_row(i), np.asarray(v, dtype=np.float32)) for i, v in put if v is not None],
        )
    return gone


class PgInstructions:
    """InstructionTable over pyramind_instructions."""

    def __init__(self, store: PostgresStorage) -> None:
        self.store = store

    @staticmethod
    def _of(r: dict[str, Any]) -> Instruction:
        return Instruction(**{k: v for k, v in r.items() if k != "embedding"})

    def entries(
        self, ns: str, conversation_id: str | None = None, include_superseded: bool = False
    ) -> list[Instruction]:
        """The namespace's instructions (of one conversation when given), oldest first; in force only unless
        include_superseded."""
        sql = f"SELECT {_INSTRUCTION_COLS} FROM pyramind_instructions WHERE namespace = %s"
        args: list[Any] = [ns]
        if conversation_id is not None:
            sql += " AND conversation_id = %s"
            args.append(conversation_id)
        if not include_superseded:
            sql += " AND superseded_by IS NULL"
        return instruction_order([self._of(r) for r in self.store.all(sql, args)])

    def get(self, ns: str, ids: Sequence[str]) -> list[Instruction]:
        """The namespace's instructions with these ids (unknown ids left out)."""
        return [
            self._of(r)
            for r in self.store.all(
                f"SELECT {_INSTRUCTION_COLS} FROM pyramind_instructions WHERE namespace = %s AND id = ANY(%s)",
                (ns, list(ids)),
            )
        ]

    def vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """{instruction id: embedding (float32, (dimension,))} of the ids found."""
        rows = self.store.all(
            "SELECT id, embedding FROM pyramind_instructions WHERE namespace = %s AND id = ANY(%s)", (ns, list(ids))
        )
        return {r["id"]: np.asarray(r["embedding"].to_numpy(), dtype=np.float32) for r in rows}

    def write(self, ns: str, put: Sequence[tuple[Instruction, np.ndarray | None]], drop: Sequence[str]) -> int:
        """Delete `drop`, then write `put`, in one transaction; returns how many were deleted."""
        with self.store.pool.connection() as conn, conn.transaction():
            return _write_instructions(conn, ns, put, drop)
