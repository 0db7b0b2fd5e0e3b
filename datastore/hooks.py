"""The storage contract every provider fills in: the records a write carries, and the small synchronous hooks.

`StoreBase` holds the settings, the embedder and the summariser, and declares the provider hooks; the pipeline
lives above it in one room per concern (`remember.py`, `forget.py`, `read.py`), composed by
`datastore.DataStore`. Every hook takes the namespace: isolation is enforced in the pipeline, not in the routes.
"""

from __future__ import annotations

import random
import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from pyramind.models.api import DeleteFilter, QueryFilter
from pyramind.models.core import CoreEntry
from pyramind.models.memory import MemoryNode, SourceType, StoredMessage
from pyramind.models.settings import Settings
from pyramind.services.embedding import Embedder
from pyramind.services.errors import UnsupportedError
from pyramind.services.summarising import Summariser

DEFAULT_NAMESPACE = "default"
COMMIT_ATTEMPTS = 12


@dataclass
class SourceRow:
    """A conversation or document: its counters and a version bumped by every commit."""

    source_id: str
    source_type: SourceType
    version: int = 0
    n_messages: int = 0
    n_tokens: int = 0
    max_seq: int = -1
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Extended:
    """What one `_extend` did: node ids created/updated, summaries made, message ids skipped or left pending."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)


@dataclass
class WriteBatch:
    """Everything one call writes for one source, applied atomically by `_commit`.

    replace: delete all of the source's messages and nodes first. delete_source: remove the source entirely
    (then the other fields are ignored). nodes: (node, vector); a None vector keeps the stored one (a metadata
    update of an existing node, e.g. its parent or its position).
    """

    source: SourceRow
    messages: list[StoredMessage] = field(default_factory=list)
    nodes: list[tuple[MemoryNode, np.ndarray | None]] = field(default_factory=list)
    replace: bool = False
    delete_source: bool = False


@dataclass
class NodeMarks:
    """What a node records besides its content: visits (returned by a query) and a pin.

    pin_message_ids: the messages under the node when it was pinned (they stay protected from forgetting by
    policy even when a rebuild gives the node a new id)."""

    visit_count: int = 0
    last_visited_at: datetime | None = None
    pinned: bool = False
    pin_message_ids: list[str] = field(default_factory=list)


class StoreBase(ABC):
    """Settings, embedder, summariser, per-source write locks, and the provider hooks (all synchronous)."""

    name = "abstract"

    def __init__(self, settings: Settings, embedder: Embedder, summariser: Summariser) -> None:
        self.settings = settings
        self.embedder = embedder
        self.summariser = summariser
        self._locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()

    # ------------------------------------------------------------------ provider hooks
    @abstractmethod
    def _open(self) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Release connections and files; the store can't be used afterwards."""

    @abstractmethod
    def _record_embedding(self, model: str, dimension: int) -> tuple[str, int]:
        """The (model, dimension) the store was made with, recording the given ones when it has none yet."""

    @abstractmethod
    def _get_source(self, ns: str, source_id: str) -> SourceRow | None: ...

    @abstractmethod
    def _known_message_ids(self, ns: str, source_id: str, ids: Sequence[str]) -> set[str]: ...

    @abstractmethod
    def _messages_from(self, ns: str, source_id: str, tok_offset: int) -> list[StoredMessage]:
        """Messages of the source whose tokens end after `tok_offset`, in seq order."""

    @abstractmethod
    def _frontier(self, ns: str, source_id: str) -> list[MemoryNode]:
        """The source's nodes without a parent, plus the last node (highest position) of every level."""

    @abstractmethod
    def _source_nodes(self, ns: str, source_id: str) -> list[MemoryNode]: ...

    @abstractmethod
    def _get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]: ...

    @abstractmethod
    def _get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]: ...

    @abstractmethod
    def _commit(self, ns: str, batch: WriteBatch, expected_version: int) -> None:
        """Apply `batch` in one transaction if the source's stored version (0 when absent) equals
        `expected_version`, bumping it; else raise ConflictError and change nothing."""

    @abstractmethod
    def _search(
        self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None
    ) -> list[tuple[MemoryNode, float]]:
        """The top_k nodes of the namespace closest to `vector` (cosine, descending) that match `flt`."""

    @abstractmethod
    def _find_messages(
        self, ns: str, ids: Sequence[str] | None = None, flt: DeleteFilter | None = None
    ) -> list[tuple[str, str]]:
        """(source_id, message id) of the messages with one of `ids`, or matching `flt`."""

    @abstractmethod
    def _delete_namespace(self, ns: str) -> tuple[int, int]:
        """Remove everything of the namespace; returns (messages, nodes) removed."""

    # provider hooks for `datastore.migrate` (copying a whole store)
    @abstractmethod
    def _list_namespaces(self) -> list[str]:
        """Every namespace holding at least one source, sorted."""

    @abstractmethod
    def _list_sources(self, ns: str) -> list[str]:
        """The source ids (conversations and documents) of the namespace, sorted."""

    def _backlog(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with messages past its last chunk (stored while the embedder
        failed). Providers that can list them override this; the default finds none."""
        return []

    def node_counts(self) -> dict[str, int] | None:
        """Memory nodes per level over every namespace (`{"L1": n, "L2": m}`), for /health; None when the
        provider cannot count cheaply."""
        return None

    def _unrolled(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with a complete group of sealed nodes not yet summarised (the
        background indexer commits chunks first, summaries after). The default walks every source's frontier;
        providers that can ask for it in one query override this."""
        fan_out, top = self.settings.fan_out, self.settings.max_level
        out = []
        for ns in self._list_namespaces():
            for sid in self._list_sources(ns):
                counts: dict[int, int] = defaultdict(int)
                for n in {n.id: n for n in self._frontier(ns, sid)}.values():
                    if n.parent_id is None and n.sealed and n.level < top:
                        counts[n.level] += 1
                if any(c >= fan_out for c in counts.values()):
                    out.append((ns, sid))
        return out

    def _nodes_at(self, ns: str, source_id: str, level: int, first: int, last: int) -> list[MemoryNode]:
        """The source's nodes of `level` with position in [first, last], in position order. This default reads
        the whole source; providers override it with an indexed read."""
        return [n for n in self._source_nodes(ns, source_id) if n.level == level and first <= n.position <= last]

    def _roots(self, ns: str, source_id: str, limit: int) -> list[MemoryNode]:
        """Up to `limit` of the source's nodes without a parent, highest level first, then latest first. This
        default reads the frontier; providers override it with an indexed read."""
        roots = [n for n in self._frontier(ns, source_id) if n.parent_id is None]
        return sorted(roots, key=lambda n: (-n.level, -n.position))[:limit]

    # provider hooks for core memory (datastore/core.py); a provider without them refuses core memory
    def _core_entries(self, ns: str, scope: str) -> list[CoreEntry]:
        """The stored core entries of a scope (a conversation id, or "" for the namespace), expired ones too."""
        raise UnsupportedError(
            f"core memory is not supported by the {self.name} store (use the local or postgres store)")

    def _core_write(self, ns: str, scope: str, put: CoreEntry | None, delete: Sequence[str]) -> int:
        """In one transaction: delete the entries of `scope` with a key in `delete`, then store `put`
        (replacing its key). Returns how many entries were deleted."""
        raise UnsupportedError(
            f"core memory is not supported by the {self.name} store (use the local or postgres store)")

    # provider hooks for visits and pins (datastore/pins.py); kept apart from the node rows, so recording a
    # visit never rewrites a node, its text index or its vector
    def _get_marks(self, ns: str, ids: Sequence[str] | None) -> dict[str, NodeMarks]:
        """{node id: marks} of the given ids (all of the namespace when None) that have any."""
        raise NotImplementedError(f"the {self.name} store keeps no visits or pins")

    def _add_visits(self, ns: str, visits: dict[str, tuple[int, datetime]]) -> None:
        """Add `count` to each node's visit_count and raise its last_visited_at to `when` (one transaction)."""
        raise NotImplementedError(f"the {self.name} store keeps no visits or pins")

    def _set_marks(self, ns: str, marks: dict[str, NodeMarks]) -> None:
        """Replace the marks of these node ids (pins and visits as given; used by pin/unpin and import)."""
        raise NotImplementedError(f"the {self.name} store keeps no visits or pins")

    def _source_lock(self, ns: str, source_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks[(ns, source_id)]

    def _summarise(self, texts: list[str], context: str | None) -> tuple[str, str]:
        return self.summariser.summarise(texts, context, self.settings.summary_max_tokens)


def backoff(attempt: int) -> None:
    """Sleep before recomputing after a conflict: jittered, growing to ~0.5 s, so a writer in another process that
    keeps committing to the same source cannot starve this one."""
    time.sleep(random.uniform(0, min(0.5, 0.01 * 2**attempt)))
