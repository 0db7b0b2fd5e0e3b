"""What the remember benchmarks read beside a running server: the SQLite file's unindexed work, read-only.

The same questions as the local store's `_backlog` and `_unrolled` hooks, asked over a plain read-only sqlite3
connection, so a benchmark can watch a server process without loading an embedder of its own.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Work:
    """Sources with messages past their last chunk, sources with a complete group awaiting a summary, and the
    node counts (chunks, summaries)."""

    unchunked: int
    unrolled: int
    chunks: int
    summaries: int

    @property
    def done(self) -> bool:
        return not (self.unchunked or self.unrolled)


def read_work(db: Path, fan_out: int = 5, max_level: int = 5) -> Work:
    """The unindexed work in the local store at `db` (see `Work`)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        unchunked = con.execute(
            """SELECT COUNT(*) FROM sources s WHERE s.n_tokens > COALESCE((SELECT MAX(n.tok_end) FROM nodes n
                   WHERE n.namespace = s.namespace AND n.source_id = s.source_id AND n.level = 1), 0)"""
        ).fetchone()[0]
        unrolled = con.execute(
            """SELECT COUNT(DISTINCT namespace || ' ' || source_id) FROM (SELECT namespace, source_id FROM nodes
                   WHERE parent_id IS NULL AND sealed AND level < ? GROUP BY namespace, source_id, level
                   HAVING COUNT(*) >= ?)""",
            (max_level, fan_out),
        ).fetchone()[0]
        chunks, summaries = con.execute(
            "SELECT COALESCE(SUM(level = 1), 0), COALESCE(SUM(level > 1), 0) FROM nodes"
        ).fetchone()
        return Work(unchunked, unrolled, chunks, summaries)
    finally:
        con.close()
