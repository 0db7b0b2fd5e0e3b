"""Copy a whole store into another (`pyramind migrate --from local --to postgres|pinecone`, and `import`).

Every table is copied as stored: source rows (version and counters), messages (seq and token offsets), nodes
with their embeddings and tree links (ids, parent, children, positions), the marks of nodes (visits and pins),
core memory entries, standing instructions with their embeddings and supersession, and the answers kept for
writes sent with an Idempotency-Key (so a retry after the move still answers the first answer). Nothing is re-chunked,
re-summarised, re-detected or re-embedded, so both stores must use the same embedding model (`migrate_memory`
checks; a dump re-embeds before it calls `copy`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from datastore.memory import Memory
from datastore.storage import (
    CoreTable,
    IdempotencyRecord,
    IdempotencyTable,
    InstructionTable,
    MarkTable,
    NodeMarks,
    SourceRow,
    Storage,
    WriteBatch,
)
from models.core import CoreEntry
from models.instructions import Instruction
from models.memory import MemoryNode, StoredMessage
from services.errors import EmbeddingMismatchError, StoreError

# progress(namespace, source_id, done, total, action): after each source; done/total count the namespace's
# sources; action is "copied" or "skipped".
Progress = Callable[[str, str, int, int, str], None]
KEYS = ("sources", "copied", "skipped", "messages", "nodes", "marks", "core_memory", "instructions", "idempotency")
NEVER = datetime.min.replace(tzinfo=UTC)  # `IdempotencyTable.put`'s expired_before that drops nothing


class Readable(Protocol):
    """What a copy reads from: any Storage, or a dump read into memory (datastore/portability/dump.py)."""

    name: str
    core: CoreTable | None
    marks: MarkTable | None
    instructions: InstructionTable | None
    idempotency: IdempotencyTable | None

    def list_namespaces(self) -> list[str]: ...

    def list_sources(self, ns: str, after: str | None = None, limit: int | None = None) -> list[str]: ...

    def get_source(self, ns: str, source_id: str) -> SourceRow | None: ...

    def messages(
        self, ns: str, source_id: str, tok_from: int = 0, tok_to: int | None = None, limit: int | None = None
    ) -> list[StoredMessage]: ...

    def source_nodes(
        self, ns: str, source_id: str, level: int | None = None, first: int = 0, last: int | None = None
    ) -> list[MemoryNode]: ...

    def get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]: ...


def migrate_memory(
    src: Memory, dst: Memory, namespaces: list[str] | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """`copy` from one opened store into another, after checking that both use the same embedding model.
    Raises EmbeddingMismatchError when they do not; see `copy` for the rest."""
    if (src.embedder.model_name, src.embedder.dimension) != (dst.embedder.model_name, dst.embedder.dimension):
        raise EmbeddingMismatchError(
            f"migrate copies vectors as they are: the source store's embedder is {src.embedder.model_name} "
            f"({src.embedder.dimension}), the destination's {dst.embedder.model_name} ({dst.embedder.dimension})"
        )
    return copy(src.storage, dst.storage, namespaces, progress)


def copy(
    src: Readable, dst: Storage, namespaces: list[str] | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """Copy every source of `namespaces` (default: all of `src`), then the marks, core memory entries, standing
    instructions and idempotency records (expired ones too, as stored) of each namespace, and verify the counts.

    Resumable: a source whose row at the destination has the source's version is skipped (each source is
    written by one `commit`, its row last, so a present row means a finished copy); any other state at the
    destination (absent, cut short, older) is replaced by the source's. Marks, core entries, instructions and
    idempotency records are written by key (replacing), so a second run writes them again without doubling them.

    Returns {"namespaces": {ns: {"sources", "copied", "skipped", "messages", "nodes", "marks", "core_memory",
    "instructions", "idempotency"}}, plus the same totals}, all counts of the source. Raises StoreError before
    writing anything when the source has marks, core entries, instructions or idempotency records the
    destination cannot keep, and after a copy whose counts at the destination differ from the source's.
    """
    chosen = namespaces if namespaces is not None else src.list_namespaces()
    marks = {ns: src.marks.get(ns, None) if src.marks is not None else {} for ns in chosen}
    core = {ns: src.core.entries(ns, None) if src.core is not None else [] for ns in chosen}
    rules = {
        ns: src.instructions.entries(ns, include_superseded=True) if src.instructions is not None else []
        for ns in chosen
    }
    answers = {ns: src.idempotency.entries(ns) if src.idempotency is not None else [] for ns in chosen}
    if any(core.values()) and dst.core is None:
        raise StoreError(
            f"the source holds {sum(map(len, core.values()))} core memory entries and the {dst.name} store keeps none"
        )
    if any(marks.values()) and dst.marks is None:
        raise StoreError(
            f"the source holds visits or pins of {sum(map(len, marks.values()))} nodes and the "
            f"{dst.name} store keeps none"
        )
    if any(rules.values()) and dst.instructions is None:
        raise StoreError(
            f"the source holds {sum(map(len, rules.values()))} standing instructions and the "
            f"{dst.name} store keeps none"
        )
    if any(answers.values()) and dst.idempotency is None:
        raise StoreError(
            f"the source holds the answers of {sum(map(len, answers.values()))} writes sent with an "
            f"Idempotency-Key and the {dst.name} store keeps none"
        )
    report: dict[str, Any] = {"namespaces": {}, **dict.fromkeys(KEYS, 0)}
    for ns in chosen:
        counts = _copy_namespace(src, dst, ns, progress)
        if marks[ns]:
            assert dst.marks is not None
            dst.marks.set(ns, marks[ns])
        by_scope: dict[str, list[CoreEntry]] = {}
        for entry in core[ns]:
            by_scope.setdefault(entry.conversation_id or "", []).append(entry)
        for scope, entries in by_scope.items():
            assert dst.core is not None
            for entry in entries:
                dst.core.write(ns, scope, entry, [])
        if rules[ns]:
            assert src.instructions is not None and dst.instructions is not None
            vectors = src.instructions.vectors(ns, [i.id for i in rules[ns]])
            missing = [i.id for i in rules[ns] if i.id not in vectors]
            if missing:
                raise StoreError(f"{ns}: the source store has no vector for instructions {missing[:5]}")
            dst.instructions.write(ns, [(i, vectors[i.id]) for i in rules[ns]], [])
        for record in answers[ns]:
            assert dst.idempotency is not None
            dst.idempotency.put(ns, record, NEVER)
        counts["marks"], counts["core_memory"], counts["instructions"] = len(marks[ns]), len(core[ns]), len(rules[ns])
        counts["idempotency"] = len(answers[ns])
        _verify_extras(dst, ns, marks[ns], core[ns], rules[ns])
        _verify_answers(dst, ns, answers[ns])
        report["namespaces"][ns] = counts
        for k in KEYS:
            report[k] += counts[k]
    return report


def _copy_namespace(src: Readable, dst: Storage, ns: str, progress: Progress | None) -> dict[str, int]:
    source_ids = src.list_sources(ns)
    out = dict.fromkeys(KEYS, 0)
    expected: dict[str, tuple[int, int]] = {}
    for done, sid in enumerate(source_ids, 1):
        row = src.get_source(ns, sid)
        if row is None:  # deleted since the listing
            continue
        messages = src.messages(ns, sid)
        nodes = src.source_nodes(ns, sid)
        expected[sid] = (len(messages), len(nodes))
        out["sources"] += 1
        out["messages"] += len(messages)
        out["nodes"] += len(nodes)
        have = dst.get_source(ns, sid)
        if have is not None and have.version == row.version:
            action = "skipped"
        else:
            vectors = src.get_vectors(ns, [n.id for n in nodes])
            missing = [n.id for n in nodes if n.id not in vectors]
            if missing:
                raise StoreError(f"{ns}/{sid}: the source store has no vector for nodes {missing[:5]}")
            batch = WriteBatch(source=row, messages=messages, nodes=[(n, vectors[n.id]) for n in nodes], replace=True)
            dst.commit(ns, batch, have.version if have else 0)
            action = "copied"
        out[action] += 1
        if progress is not None:
            progress(ns, sid, done, len(source_ids), action)
    for sid, (n_msgs, n_nodes) in expected.items():
        got = (len(dst.messages(ns, sid)), len(dst.source_nodes(ns, sid)))
        if got != (n_msgs, n_nodes):
            raise StoreError(
                f"{ns}/{sid}: the destination holds {got[0]} messages and {got[1]} nodes, the source "
                f"{n_msgs} and {n_nodes}; run migrate again"
            )
    return out


def _same_marks(a: NodeMarks | None, b: NodeMarks) -> bool:
    """Equal marks, the visit times within a millisecond (a provider may store times at a coarser grain)."""
    if a is None or (a.visit_count, a.pinned, a.pin_message_ids) != (b.visit_count, b.pinned, b.pin_message_ids):
        return False
    if a.last_visited_at is None or b.last_visited_at is None:
        return a.last_visited_at is b.last_visited_at
    return abs((a.last_visited_at - b.last_visited_at).total_seconds()) < 1e-3


def _verify_extras(
    dst: Storage, ns: str, marks: dict[str, NodeMarks], core: list[CoreEntry], rules: list[Instruction]
) -> None:
    """Raise StoreError unless the destination holds every copied mark, core entry and instruction as copied."""
    if marks and dst.marks is not None:
        held = dst.marks.get(ns, list(marks))
        wrong = [i for i, m in marks.items() if not _same_marks(held.get(i), m)]
        if wrong:
            raise StoreError(
                f"{ns}: the destination's visits and pins of {len(wrong)} nodes differ from the "
                f"source's (first: {wrong[0]!r}); run migrate again"
            )
    if core and dst.core is not None:
        held_keys = {(e.conversation_id or "", e.key) for e in dst.core.entries(ns, None)}
        lost = [e.key for e in core if (e.conversation_id or "", e.key) not in held_keys]
        if lost:
            raise StoreError(
                f"{ns}: {len(lost)} core memory entries are missing at the destination (first: "
                f"{lost[0]!r}); run migrate again"
            )
    if rules and dst.instructions is not None:
        kept = {i.id: i.superseded_by for i in dst.instructions.get(ns, [i.id for i in rules])}
        wrong = [i.id for i in rules if kept.get(i.id, "\x00") != i.superseded_by]
        if wrong:
            raise StoreError(
                f"{ns}: {len(wrong)} standing instructions are missing or differ at the destination "
                f"(first: {wrong[0]!r}); run migrate again"
            )


def _verify_answers(dst: Storage, ns: str, answers: list[IdempotencyRecord]) -> None:
    """Raise StoreError unless the destination holds every copied idempotency record as copied (times within a
    millisecond: a provider may store them at a coarser grain)."""
    if not answers or dst.idempotency is None:
        return
    held = {r.key: r for r in dst.idempotency.entries(ns)}

    def same(a: IdempotencyRecord, b: IdempotencyRecord | None) -> bool:
        return (
            b is not None
            and (a.operation, a.fingerprint, a.status, a.response) == (b.operation, b.fingerprint, b.status, b.response)
            and abs((a.created_at - b.created_at).total_seconds()) < 1e-3
        )

    wrong = [r.key for r in answers if not same(r, held.get(r.key))]
    if wrong:
        raise StoreError(
            f"{ns}: {len(wrong)} idempotency records are missing or differ at the destination (first: "
            f"{wrong[0]!r}); run migrate again"
        )
