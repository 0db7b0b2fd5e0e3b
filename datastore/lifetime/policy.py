"""The forgetting policy: a namespace that grows past its limits forgets its least important unpinned leaves.

Off by default. Per namespace, when it holds more than FORGET_MAX_NODES conversation L1 chunks, the least
important unpinned chunks go first, ranked by MemForest's order: least recently visited (never visited first),
then least visited, then oldest (end time), in steps of FORGET_FRACTION of its chunks until it is back under the
limit. Chunks whose messages are older than FORGET_AFTER_DAYS go too. Forgetting a chunk forgets its messages
(not those under a pin) through the same cascade as DELETE (`Deleter.forget_messages`): every chunk and summary
derived from them is rebuilt from what remains, so no summary keeps a forgotten text. A message shared by two
chunks (the overlap) leaves both. Documents are never forgotten by policy (a document is one message: one
chunk's worth would take all of it); their chunks are not counted.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from datastore.lifetime.visits import Visits
from datastore.storage import NodeMarks, Storage
from datastore.write.delete import Deleter
from models.lifetime import ForgetReport, ForgottenLeaf
from models.memory import MemoryNode
from models.settings import Settings

MAX_STEPS = 50  # rounds of forgetting in one run (each recounts the chunks after the rebuild)
_NEVER = datetime.min.replace(tzinfo=UTC)


class ForgettingPolicy:
    """run (dry run or not) over one namespace, run_all; enabled.

    settings: FORGET_MAX_NODES, FORGET_AFTER_DAYS, FORGET_FRACTION. deleter: the cascade that forgets messages.
    visits: ranks by use, protects pinned messages, and carries visits over to rebuilt chunks.
    """

    def __init__(self, settings: Settings, storage: Storage, deleter: Deleter, visits: Visits) -> None:
        self.settings = settings
        self.storage = storage
        self.deleter = deleter
        self.visits = visits

    @property
    def enabled(self) -> bool:
        """Whether FORGET_MAX_NODES or FORGET_AFTER_DAYS is set."""
        return self.settings.forget_max_nodes > 0 or self.settings.forget_after_days > 0

    def _leaves(self, ns: str) -> list[MemoryNode]:
        out = []
        for sid in self.storage.list_sources(ns):
            src = self.storage.get_source(ns, sid)
            if src is not None and src.source_type == "conversation":
                out += self.storage.source_nodes(ns, sid, level=1)
        return out

    def _plan(self, ns: str, leaves: list[MemoryNode], now: datetime) -> list[ForgottenLeaf]:
        """The leaves to forget now, least important first (see the module docstring)."""
        s = self.settings
        protected = self.visits.protected_messages(ns)
        marks = self.visits.all(ns)
        blank = NodeMarks()

        def rank(n: MemoryNode) -> tuple[Any, ...]:
            m = marks.get(n.id, blank)
            return (
                m.last_visited_at or _NEVER,
                m.visit_count,
                n.end_time or n.start_time or _NEVER,
                n.source_id,
                n.position,
            )

        candidates = sorted(
            (n for n in leaves if not marks.get(n.id, blank).pinned and set(n.message_ids) - protected), key=rank
        )
        chosen: dict[str, str] = {}
        if s.forget_after_days > 0:
            cutoff = now - timedelta(days=s.forget_after_days)
            for n in candidates:
                if n.end_time is not None and n.end_time < cutoff:
                    chosen[n.id] = "age"
        if s.forget_max_nodes > 0 and len(leaves) - len(chosen) > s.forget_max_nodes:
            step = max(1, math.ceil(len(leaves) * s.forget_fraction))
            over = len(leaves) - len(chosen) - s.forget_max_nodes
            budget = math.ceil(over / step) * step
            for n in candidates:
                if budget <= 0:
                    break
                if n.id not in chosen:
                    chosen[n.id] = "max_nodes"
                    budget -= 1
        return [
            ForgottenLeaf(
                node_id=n.id,
                source_id=n.source_id,
                reason=chosen[n.id],
                message_ids=[m for m in n.message_ids if m not in protected],
                visit_count=marks.get(n.id, blank).visit_count,
                last_visited_at=marks.get(n.id, blank).last_visited_at,
                end_time=n.end_time,
            )
            for n in candidates
            if n.id in chosen
        ]

    def run(self, ns: str, dry_run: bool = True, now: datetime | None = None) -> ForgetReport:
        """Apply the forgetting policy to one namespace (or, with `dry_run`, report what would go: the first
        round's leaves). Returns a ForgetReport; does nothing when the policy is off."""
        now = now or datetime.now(UTC)
        leaves = self._leaves(ns)
        report = ForgetReport(
            namespace=ns,
            dry_run=dry_run,
            enabled=self.enabled,
            l1_before=len(leaves),
            l1_after=None if dry_run else len(leaves),
            forgotten=[],
            deleted_messages=0,
            deleted_nodes=0,
        )
        if not self.enabled:
            return report
        for _ in range(1 if dry_run else MAX_STEPS):
            plan = self._plan(ns, leaves, now)
            if not plan:
                break
            report.forgotten += plan
            if dry_run:
                break
            self.visits.flush()
            by_source: dict[str, set[str]] = defaultdict(set)
            for leaf in plan:
                by_source[leaf.source_id].update(leaf.message_ids)
            for sid, mids in by_source.items():
                before = [n for n in leaves if n.source_id == sid]
                n_msgs, n_nodes = self.deleter.forget_messages(ns, sid, mids)
                report.deleted_messages += n_msgs
                report.deleted_nodes += n_nodes
                self._carry_visits(ns, sid, before)
            leaves = self._leaves(ns)
            report.l1_after = len(leaves)
        return report

    def _carry_visits(self, ns: str, source_id: str, before: list[MemoryNode]) -> None:
        """Give each chunk a rebuild made the visits of the old chunks it shares a message with (the latest
        visit, the most visits), so the next round still ranks by use, not only by age."""
        if self.visits.marks is None:
            return
        marks = self.visits.marks.get(ns, [n.id for n in before])
        by_message: dict[str, list[NodeMarks]] = defaultdict(list)
        for n in before:
            if n.id in marks and marks[n.id].visit_count:
                for m in n.message_ids:
                    by_message[m].append(marks[n.id])
        if not by_message:
            return
        old_ids = {n.id for n in before}
        carried: dict[str, NodeMarks] = {}
        for n in self.storage.source_nodes(ns, source_id, level=1):
            if n.id in old_ids:
                continue
            found = [mk for m in n.message_ids for mk in by_message.get(m, [])]
            if found:
                times = [mk.last_visited_at for mk in found if mk.last_visited_at is not None]
                carried[n.id] = NodeMarks(max(mk.visit_count for mk in found), max(times) if times else None)
        if carried:
            self.visits.marks.set(ns, carried)

    def run_all(self, dry_run: bool = True) -> list[ForgetReport]:
        """`run` over every namespace of the store."""
        return [self.run(ns, dry_run) for ns in self.storage.list_namespaces()]
