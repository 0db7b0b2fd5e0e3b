"""The local store's connections: one writer used under a lock inside `BEGIN IMMEDIATE`, a reader per thread.

Every connection is made by `Connections.connect` (autocommit mode, rows by name, `synchronous=FULL`, a 30 s
busy timeout) and closed by `close`. The file is in WAL mode with `secure_delete` on; `scrub` checkpoints the
WAL so that deleted text leaves the disk.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from datastore.providers.local.schema import MIGRATIONS
from services.errors import StoreError

log = logging.getLogger(__name__)


class Connections:
    """The SQLite file at `path` (created with its folder when missing), migrated to the current schema.

    Raises StoreError naming the path when the file cannot be opened (not a database, a folder, no permission).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = self.connect()
            self.writer.execute("PRAGMA journal_mode=WAL")
            self.writer.execute("PRAGMA secure_delete=ON")  # deleted rows are zeroed, not left in free pages
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            self.close()
            raise StoreError(f"cannot open the local store at {self.path.resolve()}: {exc}") from exc

    def connect(self) -> sqlite3.Connection:
        """A new connection, kept for `close`: autocommit mode (transactions are begun explicitly), rows by name.
        Raises StoreError once the store is closed (a closed store does not open connections again)."""
        if self._closed:
            raise StoreError(f"the local store at {self.path} is closed")
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the local store at {self.path}: {exc}") from exc
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=30000")
        with self._guard:
            self._all.append(conn)
        return conn

    @property
    def reader(self) -> sqlite3.Connection:
        """This thread's read connection (made on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
        return conn

    def close(self) -> None:
        """Close every connection made; the store can't be used afterwards."""
        with self._guard:
            self._closed = True
            for conn in self._all:
                conn.close()
            self._all.clear()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The writer inside `BEGIN IMMEDIATE`, committed on exit, rolled back on any exception."""
        with self._write_lock:
            db = self.writer
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _migrate(self) -> None:
        with self.transaction() as db:
            db.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        done = {r[0] for r in self.writer.execute("SELECT name FROM migrations")}
        for name, fn in MIGRATIONS:
            if name in done:
                continue
            with self.transaction() as db:
                if db.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone():
                    continue
                fn(db)
                db.execute("INSERT INTO migrations VALUES (?, ?)", (name, datetime.now(UTC).isoformat()))

    def scrub(self) -> None:
        """Make what a commit deleted unrecoverable from disk: checkpoint the WAL into the file (secure_delete
        zeroes the freed space) and truncate the WAL. The full-text index lives in memory only
        (datastore/indexes/text.py), so no on-disk segment keeps a deleted text's words. Called after every
        commit that deletes text."""
        with self._write_lock:
            busy = self.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if busy:
            log.warning(
                "the WAL of %s could not be checkpointed (readers busy); forgotten text stays in %s-wal "
                "until the next checkpoint",
                self.path,
                self.path.name,
            )
