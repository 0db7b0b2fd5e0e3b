"""Upgrade a store written before messages kept their sentences (`pyramind upgrade`).

A store written before issue 33 holds messages without sentences and chunks that are token windows (they may
start inside a word, carry no date, miss a speaker). Such a store still reads and grows: a message without
sentences is split when it is read into a stream (services/chunking.SentenceStream), and new chunks are whole
sentences. `upgrade` converts it: every source with a message stored without sentences is rebuilt the way a
delete rebuilds one (`Deleter.forget_messages` with nothing to forget): its messages are split and measured
again, its chunks, lines and summaries rebuilt from them (a summary whose children are unchanged is reused), in
one commit per source, its forks rebuilt after it. Nothing is lost: messages, their ids, sessions and times,
the standing instructions and core memory are kept as they are. Running it again finds nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from datastore.memory import Memory

Progress = Callable[[str, str, str], None]
"""progress(namespace, source_id, action) after each source; action is "rebuilt" or "current"."""


@dataclass
class UpgradeReport:
    """What `upgrade` did: sources rebuilt on sentences, sources already current, messages split."""

    rebuilt: int = 0
    current: int = 0
    messages: int = 0


def upgrade(memory: Memory, progress: Progress | None = None) -> UpgradeReport:
    """Rebuild on sentences every source of every namespace that holds a message stored without them (module
    doc). Returns the counts. Raises StoreError when the store cannot be read or written, ConflictError when
    other writers kept committing to a source (run it again: what was rebuilt stays rebuilt)."""
    storage, report = memory.storage, UpgradeReport()
    for ns in storage.list_namespaces():
        rows = {sid: storage.get_source(ns, sid) for sid in storage.list_sources(ns)}
        forks = {sid for sid, row in rows.items() if row is not None and "fork" in row.metadata}
        for sid in sorted(rows, key=lambda sid: sid in forks):  # parents first: a fork is rebuilt from its parent
            stale = [m for m in storage.messages(ns, sid) if not m.sentences]
            if stale:
                memory.deleter.forget_messages(ns, sid, set())
                report.rebuilt += 1
                report.messages += len(stale)
            else:
                report.current += 1
            if progress is not None:
                progress(ns, sid, "rebuilt" if stale else "current")
    return report
