"""The PostgreSQL store: pgvector for vectors, tables for the tree, messages and text (psycopg 3, sync pool).

- Schema by named, idempotent migrations (`pyramind_migrations`), each applied in one transaction under an
  advisory lock, so two processes starting together migrate once. The vector column is `vector(dimension)` of
  the embedder that first opened the database; `pyramind_meta` records the model (a mismatch is refused).
- `_commit` is one transaction: `pg_advisory_xact_lock` on a hash of (namespace, source_id) serialises writers
  of one source across processes, then the version check decides (a stale writer gets ConflictError and the
  DataStore recomputes from the new state, so no children are ever summarised twice in the stored tree).
- Search: HNSW (`vector_cosine_ops`); score = 1 - cosine distance. HNSW filters after its graph walk, so a
  selective filter can starve it: when it returns fewer than top_k rows the query is answered exactly.
- Full text: a generated `tsvector` column with a GIN index (`search_text`, ranked by `ts_rank`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from pyramind.datastore.datastore import DataStore, SourceRow, WriteBatch
from pyramind.datastore.hooks import NodeMarks
from pyramind.datastore.listing import SourceFacts
from pyramind.datastore.retrieval import text_terms
from pyramind.models.api import DeleteFilter, QueryFilter
from pyramind.models.core import CoreEntry
from pyramind.models.memory import MemoryNode, StoredMessage
from pyramind.models.time import utc
from pyramind.services.errors import ConflictError, StoreError

_NODE_COLS = (
    "id, source_type, source_id, level, position, text, token_count, children, parent_id, message_ids, "
    "speakers, start_time, end_time, sealed, tok_start, tok_end, summariser, session_ids"
)
_MSG_COLS = (
    "id, source_id, source_type, seq, speaker, content, created_at, tok_offset, n_tokens, show_time, session_id"
)
_MIGRATION_LOCK = 0x5079_7261_6D69  # any constant bigint: serialises migrations across processes
_HNSW_MAX_DIMENSION = 2000  # pgvector's limit for an HNSW index on `vector`; above it search is exact


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


MIGRATIONS: list[tuple[str, Callable[[psycopg.Connection, int], None]]] = [
    ("001_initial", _m001_initial),
    ("002_core_memory", _m002_core_memory),
    ("003_sessions", _m003_sessions),
    ("004_visits_pins", _m004_visits_pins),
]


def _node(r: dict[str, Any]) -> MemoryNode:
    return MemoryNode(
        id=r["id"], source_type=r["source_type"], source_id=r["source_id"], level=r["level"],
        position=r["position"], text=r["text"], token_count=r["token_count"], children=list(r["children"]),
        parent_id=r["parent_id"], message_ids=list(r["message_ids"]), speakers=list(r["speakers"]),
        start_time=r["start_time"], end_time=r["end_time"], sealed=r["sealed"], tok_start=r["tok_start"],
        tok_end=r["tok_end"], summariser=r["summariser"], session_ids=list(r["session_ids"]),
    )


def _node_row(n: MemoryNode) -> tuple[Any, ...]:
    """The node's values in `_NODE_COLS` order."""
    return (n.id, n.source_type, n.source_id, n.level, n.position, n.text, n.token_count, n.children, n.parent_id,
            n.message_ids, n.speakers, n.start_time, n.end_time, n.sealed, n.tok_start, n.tok_end, n.summariser,
            n.session_ids)


def _message(r: dict[str, Any]) -> StoredMessage:
    return StoredMessage(
        id=r["id"], source_id=r["source_id"], source_type=r["source_type"], seq=r["seq"], speaker=r["speaker"],
        content=r["content"], created_at=r["created_at"], tok_offset=r["tok_offset"], n_tokens=r["n_tokens"],
        show_time=r["show_time"], session_id=r["session_id"],
    )


class PgVectorDataStore(DataStore):
    """PostgreSQL + pgvector provider: `POSTGRES_URL` names the database, `PG_POOL_SIZE` caps connections.

    The database needs the `vector` extension available (created by the first migration when the role may).
    Raises StoreError at `open()` when the database can't be reached or migrated.
    """

    name = "postgres"

    # ------------------------------------------------------------------ lifecycle
    def _open(self) -> None:
        if self.settings.postgres_url is None:
            raise StoreError("DATASTORE=postgres needs POSTGRES_URL (postgresql://user:password@host:5432/db)")
        conninfo = self.settings.postgres_url.get_secret_value()
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=15) as conn:
                self._migrate(conn)
            self._pool: ConnectionPool[Any] = ConnectionPool(  # rows are dicts (row_factory below)
                conninfo, min_size=1, max_size=self.settings.pg_pool_size, open=True, timeout=30,
                kwargs={"options": "-c timezone=UTC", "row_factory": dict_row}, configure=self._configure,
            )
            self._pool.wait(timeout=30)
        except (psycopg.Error, TimeoutError) as exc:
            self.close()
            raise StoreError(f"cannot open the postgres store (POSTGRES_URL): {exc}") from exc

    @staticmethod
    def _configure(conn: psycopg.Connection) -> None:
        register_vector(conn)
        conn.commit()  # the pool wants connections back idle

    def close(self) -> None:
        pool = getattr(self, "_pool", None)
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
                fn(conn, self.embedder.dimension)
                conn.execute("INSERT INTO pyramind_migrations VALUES (%s, now())", (name,))

    def _record_embedding(self, model: str, dimension: int) -> tuple[str, int]:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("LOCK TABLE pyramind_meta IN EXCLUSIVE MODE")
            rows = {r["key"]: r["value"] for r in conn.execute(
                "SELECT key, value FROM pyramind_meta WHERE key IN ('embedding_model', 'embedding_dimension')")}
            if not rows:
                conn.execute("INSERT INTO pyramind_meta VALUES ('embedding_model', %s), ('embedding_dimension', %s)",
                             (model, str(dimension)))
                return model, dimension
        return rows.get("embedding_model", ""), int(rows.get("embedding_dimension", 0))

    @property
    def location(self) -> str:
        return "POSTGRES_URL"

    def _all(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        with self._pool.connection() as conn:
            return conn.execute(sql, args).fetchall()  # type: ignore[return-value]

    # ------------------------------------------------------------------ reads
    def _get_source(self, ns: str, source_id: str) -> SourceRow | None:
        rows = self._all("SELECT * FROM pyramind_sources WHERE namespace = %s AND source_id = %s", (ns, source_id))
        if not rows:
            return None
        r = rows[0]
        return SourceRow(r["source_id"], r["source_type"], r["version"], r["n_messages"], r["n_tokens"],
                         r["max_seq"], r["metadata"])

    def _known_message_ids(self, ns: str, source_id: str, ids: Sequence[str]) -> set[str]:
        rows = self._all("SELECT id FROM pyramind_messages WHERE namespace = %s AND source_id = %s AND id = ANY(%s)",
                         (ns, source_id, list(ids)))
        return {r["id"] for r in rows}

    def _messages_from(self, ns: str, source_id: str, tok_offset: int) -> list[StoredMessage]:
        rows = self._all(
            f"SELECT {_MSG_COLS} FROM pyramind_messages WHERE namespace = %s AND source_id = %s "
            "AND tok_offset + n_tokens > %s ORDER BY seq", (ns, source_id, tok_offset))
        return [_message(r) for r in rows]

    def _frontier(self, ns: str, source_id: str) -> list[MemoryNode]:
        rows = self._all(
            f"""SELECT {_NODE_COLS} FROM pyramind_nodes
                WHERE namespace = %(ns)s AND source_id = %(sid)s AND parent_id IS NULL
                UNION
                SELECT {_NODE_COLS} FROM pyramind_nodes n WHERE namespace = %(ns)s AND source_id = %(sid)s
                AND position = (SELECT MAX(position) FROM pyramind_nodes m
                                WHERE m.namespace = %(ns)s AND m.source_id = %(sid)s AND m.level = n.level)""",
            {"ns": ns, "sid": source_id})
        return [_node(r) for r in rows]

    def _source_nodes(self, ns: str, source_id: str) -> list[MemoryNode]:
        rows = self._all(f"SELECT {_NODE_COLS} FROM pyramind_nodes WHERE namespace = %s AND source_id = %s "
                         "ORDER BY level, position", (ns, source_id))
        return [_node(r) for r in rows]

    def _nodes_at(self, ns: str, source_id: str, level: int, first: int, last: int) -> list[MemoryNode]:
        rows = self._all(f"SELECT {_NODE_COLS} FROM pyramind_nodes WHERE namespace = %s AND source_id = %s "
                         "AND level = %s AND position BETWEEN %s AND %s ORDER BY position",
                         (ns, source_id, level, first, last))
        return [_node(r) for r in rows]

    def _roots(self, ns: str, source_id: str, limit: int) -> list[MemoryNode]:
        rows = self._all(f"SELECT {_NODE_COLS} FROM pyramind_nodes WHERE namespace = %s AND source_id = %s "
                         "AND parent_id IS NULL ORDER BY level DESC, position DESC LIMIT %s", (ns, source_id, limit))
        return [_node(r) for r in rows]

    # ------------------------------------------------------------------ core memory
    def _core_entries(self, ns: str, scope: str) -> list[CoreEntry]:
        rows = self._all("SELECT key, value, importance, created_at, updated_at, expires_at, tokens "
                         "FROM pyramind_core WHERE namespace = %s AND scope = %s", (ns, scope))
        return [CoreEntry(conversation_id=scope or None, **r) for r in rows]

    def _core_write(self, ns: str, scope: str, put: CoreEntry | None, delete: Sequence[str]) -> int:
        with self._pool.connection() as conn, conn.transaction():
            gone = conn.execute("DELETE FROM pyramind_core WHERE namespace = %s AND scope = %s AND key = ANY(%s)",
                                (ns, scope, list(delete))).rowcount if delete else 0
            if put is not None:
                conn.execute(
                    "INSERT INTO pyramind_core VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (namespace, scope, key) DO UPDATE SET value = EXCLUDED.value, "
                    "importance = EXCLUDED.importance, created_at = EXCLUDED.created_at, "
                    "updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at, tokens = EXCLUDED.tokens",
                    (ns, scope, put.key, put.value, put.importance, put.created_at, put.updated_at, put.expires_at,
                     put.tokens),
                )
        return gone

    def _get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]:
        rows = self._all(f"SELECT {_NODE_COLS} FROM pyramind_nodes WHERE namespace = %s AND id = ANY(%s)",
                         (ns, list(ids)))
        return [_node(r) for r in rows]

    def _get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        rows = self._all("SELECT id, embedding FROM pyramind_nodes WHERE namespace = %s AND id = ANY(%s)",
                         (ns, list(ids)))
        return {r["id"]: np.asarray(r["embedding"].to_numpy(), dtype=np.float32) for r in rows}

    def _find_messages(
        self, ns: str, ids: Sequence[str] | None = None, flt: DeleteFilter | None = None
    ) -> list[tuple[str, str]]:
        where: list[str] = ["namespace = %s"]
        args: list[Any] = [ns]
        if ids is not None:
            where.append("id = ANY(%s)")
            args.append(list(ids))
        self._message_where(flt, where, args)
        rows = self._all(f"SELECT source_id, id FROM pyramind_messages WHERE {' AND '.join(where)}", args)
        return [(r["source_id"], r["id"]) for r in rows]

    def _scan_messages(self, ns: str, flt: DeleteFilter | None) -> Iterator[StoredMessage]:
        """Messages matching `flt` in (source id, seq) order, read in keyset pages of 500."""
        after: tuple[str, int] = ("", -1)
        while True:
            where, args = ["namespace = %s", "(source_id, seq) > (%s, %s)"], [ns, *after]
            self._message_where(flt, where, args)
            rows = self._all(f"SELECT {_MSG_COLS} FROM pyramind_messages WHERE {' AND '.join(where)} "
                             "ORDER BY source_id, seq LIMIT 500", args)
            yield from (_message(r) for r in rows)
            if len(rows) < 500:
                return
            after = (rows[-1]["source_id"], rows[-1]["seq"])

    @staticmethod
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

    def _backlog(self) -> list[tuple[str, str]]:
        rows = self._all(
            """SELECT s.namespace, s.source_id FROM pyramind_sources s WHERE s.n_tokens > COALESCE(
                   (SELECT MAX(n.tok_end) FROM pyramind_nodes n
                    WHERE n.namespace = s.namespace AND n.source_id = s.source_id AND n.level = 1), 0)""")
        return [(r["namespace"], r["source_id"]) for r in rows]

    def _list_namespaces(self) -> list[str]:
        return [r["namespace"] for r in self._all("SELECT DISTINCT namespace FROM pyramind_sources ORDER BY 1")]

    def _list_sources(self, ns: str) -> list[str]:
        rows = self._all("SELECT source_id FROM pyramind_sources WHERE namespace = %s ORDER BY 1", (ns,))
        return [r["source_id"] for r in rows]

    # listing hooks (datastore/listing.py): one query each; ids compare in code-point order (COLLATE "C")
    def _source_page(self, ns: str, after: str | None, limit: int) -> list[str]:
        rows = self._all(
            'SELECT source_id FROM pyramind_sources WHERE namespace = %s AND source_id COLLATE "C" > %s '
            'ORDER BY source_id COLLATE "C" LIMIT %s', (ns, after if after is not None else "", limit))
        return [r["source_id"] for r in rows]

    def _source_facts(self, ns: str, source_ids: Sequence[str]) -> dict[str, SourceFacts]:
        out = {sid: SourceFacts() for sid in source_ids}
        rows = self._all(
            "SELECT source_id, level, COUNT(*) AS n, MIN(start_time) AS s, MAX(end_time) AS e FROM pyramind_nodes "
            "WHERE namespace = %s AND source_id = ANY(%s) GROUP BY source_id, level ORDER BY level",
            (ns, list(source_ids)))
        for r in rows:
            f = out[r["source_id"]]
            f.level_counts[r["level"]] = r["n"]
            if r["s"] is not None:
                f.start_time = min(f.start_time, r["s"]) if f.start_time else r["s"]
            if r["e"] is not None:
                f.end_time = max(f.end_time, r["e"]) if f.end_time else r["e"]
        return out

    def _message_window(self, ns: str, source_id: str, tok_from: int, tok_to: int | None,
                        limit: int) -> list[StoredMessage]:
        rows = self._all(
            f"SELECT {_MSG_COLS} FROM pyramind_messages WHERE namespace = %s AND source_id = %s "
            "AND tok_offset + n_tokens > %s AND (%s::integer IS NULL OR tok_offset < %s) ORDER BY seq LIMIT %s",
            (ns, source_id, tok_from, tok_to, tok_to, limit))
        return [_message(r) for r in rows]

    # ------------------------------------------------------------------ writes
    def _commit(self, ns: str, batch: WriteBatch, expected_version: int) -> None:
        src = batch.source
        key = (ns, src.source_id)
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (json.dumps(key),))
            row = conn.execute("SELECT version FROM pyramind_sources WHERE namespace = %s AND source_id = %s",
                               key).fetchone()
            if (row["version"] if row else 0) != expected_version:
                raise ConflictError(f"{src.source_id!r} changed meanwhile")
            kept = [n.id for n, v in batch.nodes if v is None and not batch.delete_source]
            if batch.replace or batch.delete_source:  # nodes sent without a vector stay (their vector is kept)
                conn.execute("DELETE FROM pyramind_nodes WHERE namespace = %s AND source_id = %s "
                             "AND NOT (id = ANY(%s))", (*key, kept))
                conn.execute("DELETE FROM pyramind_messages WHERE namespace = %s AND source_id = %s", key)
            if batch.delete_source:
                conn.execute("DELETE FROM pyramind_sources WHERE namespace = %s AND source_id = %s", key)
                return
            conn.execute(
                """INSERT INTO pyramind_sources VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                   ON CONFLICT (namespace, source_id) DO UPDATE SET source_type = EXCLUDED.source_type,
                   version = EXCLUDED.version, n_messages = EXCLUDED.n_messages, n_tokens = EXCLUDED.n_tokens,
                   max_seq = EXCLUDED.max_seq, metadata = EXCLUDED.metadata""",
                (ns, src.source_id, src.source_type, src.version, src.n_messages, src.n_tokens, src.max_seq,
                 json.dumps(src.metadata)),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO pyramind_messages (namespace, {_MSG_COLS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [(ns, m.id, m.source_id, m.source_type, m.seq, m.speaker, m.content, m.created_at, m.tok_offset,
                      m.n_tokens, m.show_time, m.session_id) for m in batch.messages],
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

    def _delete_namespace(self, ns: str) -> tuple[int, int]:
        with self._pool.connection() as conn, conn.transaction():
            n_msgs = conn.execute("DELETE FROM pyramind_messages WHERE namespace = %s", (ns,)).rowcount
            n_nodes = conn.execute("DELETE FROM pyramind_nodes WHERE namespace = %s", (ns,)).rowcount
            conn.execute("DELETE FROM pyramind_sources WHERE namespace = %s", (ns,))
            conn.execute("DELETE FROM pyramind_core WHERE namespace = %s", (ns,))
            conn.execute("DELETE FROM pyramind_node_marks WHERE namespace = %s", (ns,))
        return n_msgs, n_nodes

    # ------------------------------------------------------------------ visits and pins
    def _get_marks(self, ns: str, ids: Sequence[str] | None) -> dict[str, NodeMarks]:
        sql = "SELECT * FROM pyramind_node_marks WHERE namespace = %s"
        rows = self._all(sql, (ns,)) if ids is None else self._all(sql + " AND id = ANY(%s)", (ns, list(ids)))
        return {r["id"]: NodeMarks(r["visit_count"], r["last_visited_at"], r["pinned"], list(r["pin_message_ids"]))
                for r in rows}

    def _add_visits(self, ns: str, visits: dict[str, tuple[int, datetime]]) -> None:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO pyramind_node_marks AS m (namespace, id, visit_count, last_visited_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (namespace, id) DO UPDATE SET "
                "visit_count = m.visit_count + EXCLUDED.visit_count, "
                "last_visited_at = GREATEST(m.last_visited_at, EXCLUDED.last_visited_at)",
                [(ns, i, n, when) for i, (n, when) in sorted(visits.items())],
            )

    def _set_marks(self, ns: str, marks: dict[str, NodeMarks]) -> None:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO pyramind_node_marks VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (namespace, id) "
                "DO UPDATE SET visit_count = EXCLUDED.visit_count, last_visited_at = EXCLUDED.last_visited_at, "
                "pinned = EXCLUDED.pinned, pin_message_ids = EXCLUDED.pin_message_ids",
                [(ns, i, m.visit_count, m.last_visited_at, m.pinned, m.pin_message_ids)
                 for i, m in sorted(marks.items())],
            )

    # ------------------------------------------------------------------ search
    @staticmethod
    def _filter_sql(flt: QueryFilter | None) -> tuple[str, dict[str, Any]]:
        """(' AND ...' SQL, its named parameters) for a QueryFilter; same semantics as the local store."""
        if flt is None:
            return "", {}
        lo = flt.level if flt.level is not None else flt.min_level
        hi = flt.level if flt.level is not None else flt.max_level
        parts = {
            "conv": ("source_type = 'conversation' AND source_id = %(conv)s", flt.conversation_id),
            "doc": ("source_type = 'document' AND source_id = %(doc)s", flt.document_id),
            "stype": ("source_type = %(stype)s", flt.source_type),
            "lo": ("level >= %(lo)s", lo),
            "hi": ("level <= %(hi)s", hi),
            "speaker": ("%(speaker)s = ANY(speakers)", flt.speaker),
            "session": ("%(session)s = ANY(session_ids)", flt.session_id),
            "start": ("end_time >= %(start)s", utc(flt.start_date)),  # rows without times never match
            "end": ("start_time <= %(end)s", utc(flt.end_date)),
        }
        given = {k: (sql, v) for k, (sql, v) in parts.items() if v is not None}
        return "".join(f" AND {sql}" for sql, _ in given.values()), {k: v for k, (_, v) in given.items()}

    def _search(
        self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None
    ) -> list[tuple[MemoryNode, float]]:
        where, args = self._filter_sql(flt)
        args.update(ns=ns, q=np.asarray(vector, dtype=np.float32), k=top_k)
        sql = (f"SELECT {_NODE_COLS}, 1 - (embedding <=> %(q)s) AS score FROM pyramind_nodes "
               f"WHERE namespace = %(ns)s{where} ORDER BY embedding <=> %(q)s LIMIT %(k)s")
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(f"SET LOCAL hnsw.ef_search = {max(40, min(1000, 2 * top_k))}")
            rows = conn.execute(sql, args).fetchall()
            if len(rows) < top_k:  # HNSW may have starved on the filter: answer exactly (no index scan)
                conn.execute("SET LOCAL enable_indexscan = off")
                rows = conn.execute(sql, args).fetchall()
        return [(_node(r), float(r["score"])) for r in rows]

    def search_text(
        self, ns: str, text: str, top_k: int, flt: QueryFilter | None = None
    ) -> list[tuple[MemoryNode, float]]:
        """Full-text search over the namespace's nodes that match `flt` (same rules as `_search`): the query's
        words (`retrieval.text_terms`) OR-ed, English stemming, ranked by `ts_rank` (higher is better).
        Returns [(MemoryNode, rank)] best first; [] when the text has no word."""
        terms = text_terms(text)
        if not terms:
            return []
        where, args = self._filter_sql(flt)
        args.update(ns=ns, terms=" | ".join(terms), k=top_k)
        rows = self._all(
            f"SELECT {_NODE_COLS}, ts_rank(tsv, q) AS score FROM pyramind_nodes, to_tsquery('english', %(terms)s) q "
            f"WHERE namespace = %(ns)s AND tsv @@ q{where} ORDER BY score DESC, id LIMIT %(k)s", args)
        return [(_node(r), float(r["score"])) for r in rows]

    def node_counts(self) -> dict[str, int]:
        rows = self._all("SELECT level, COUNT(*) AS n FROM pyramind_nodes GROUP BY level ORDER BY level")
        return {f"L{r['level']}": r["n"] for r in rows}

    def stats(self, ns: str) -> dict[str, int]:
        """Counts of the namespace: sources, messages, nodes per level (`L1`, `L2`, ...)."""
        out = {
            "sources": self._all("SELECT COUNT(*) AS n FROM pyramind_sources WHERE namespace = %s", (ns,))[0]["n"],
            "messages": self._all("SELECT COUNT(*) AS n FROM pyramind_messages WHERE namespace = %s", (ns,))[0]["n"],
        }
        for r in self._all("SELECT level, COUNT(*) AS n FROM pyramind_nodes WHERE namespace = %s GROUP BY level "
                           "ORDER BY level", (ns,)):
            out[f"L{r['level']}"] = r["n"]
        return out
