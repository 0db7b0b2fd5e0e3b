"""The storage protocol: what a provider (local SQLite, PostgreSQL, Pinecone) implements, and nothing more.

The pipeline (datastore/write, read, context, lifetime, portability, indexing) holds one `Storage` object and
calls only the methods below. Every method is synchronous and takes the namespace first: a provider scopes every
read, write, search and id lookup to it, so one namespace never sees another's memories.

Search is not a provider's: every provider persists and lists, and the ranking of every query (the exact
vector index, the BM25 index, the candidate pools and the hybrid fusion) is one code path above them,
`datastore/indexes/search.py` over the in-memory indexes of `datastore/indexes/namespaces.py`. Those are fed by
three listing methods every provider implements (`namespace_version`, `source_stamps`, `index_entries`): a
namespace's version token is read before each search (one small read), and when it moved (a commit of this or of
another process) the sources whose stamps changed are listed again, so several server processes over one store
search one memory. No provider offers a vector search of its own.

Five capabilities are optional, each an object the provider offers as an attribute or leaves None; `Memory`
reads them once when it is composed (datastore/memory.py), and a service that needs one says so in its
constructor:

- `core: CoreTable`   core memory entries per scope (without it, /core answers 501);
- `marks: MarkTable`  visits and pins of nodes (without it, nothing is counted and nothing can be pinned);
- `instructions: InstructionTable`  standing instructions and preferences with their embeddings (without it,
  none are detected or kept, and /instructions answers 501);
- `idempotency: IdempotencyTable`  the answers of writes sent with an Idempotency-Key, kept where the memory is
  kept, so a retry after a restart is answered too (without it, the key is refused with 501);
- `leases: LeaseTable`  lease records that let a provider without transactions (Pinecone) serialise the writers
  of one conversation across processes (datastore/locks.py takes, checks and releases them); a provider whose
  commit checks the version and writes in one transaction (SQLite, PostgreSQL) leaves it None.

The records a write carries (`SourceRow`, `WriteBatch`) and the filter semantics live here too: `node_matches`
(what the search above the providers applies to nodes) and `message_matches` (what every provider applies to
messages; the SQL of the local and PostgreSQL stores does the same).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import numpy as np
from pydantic import TypeAdapter

from models.api import DeleteFilter, QueryFilter
from models.core import CoreEntry
from models.instructions import Instruction
from models.memory import MemoryNode, Sentence, SourceType, StoredMessage
from models.time import utc
from services.instructions import said_order

Hits = list[tuple[MemoryNode, float]]
"""[(node, score)], best first; the score's scale is the search's own (cosine, BM25...)."""


# ---------------------------------------------------------------------- records
def sentences_text(m: StoredMessage) -> str:
    """A message's sentences as every provider stores them: compact JSON, `[[start, end, tokens], ...]` with a
    fourth item 1 for a piece of a cut sentence."""
    return json.dumps(
        [[s.start, s.end, s.tokens, 1] if s.cut else [s.start, s.end, s.tokens] for s in m.sentences],
        separators=(",", ":"),
    )


_SENTENCES = TypeAdapter(list[Sentence])


def sentences_of(stored: str | None) -> list[Sentence]:
    """The sentences `sentences_text` wrote; [] for a message stored before sentences were kept (NULL or
    absent: services/chunking splits it when it is read into a stream). Validated as one list (pydantic's
    validator builds them all: 53 against 86 us for 40 sentences, a model made per sentence; a block reads hundreds)."""
    if not stored:
        return []
    return _SENTENCES.validate_python(
        [{"start": s[0], "end": s[1], "tokens": s[2], "cut": len(s) > 3 and bool(s[3])} for s in json.loads(stored)]
    )


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

    @classmethod
    def of(cls, record: Mapping[str, Any], metadata: dict[str, Any]) -> SourceRow:
        """The row a provider stored as `record` (its columns or metadata fields named as this class's; numbers
        as ints, whatever their stored type: Pinecone keeps floats), with `metadata` decoded by the provider."""
        return cls(
            str(record["source_id"]),
            record["source_type"],
            int(record["version"]),
            int(record["n_messages"]),
            int(record["n_tokens"]),
            int(record["max_seq"]),
            metadata,
        )


@dataclass
class WriteBatch:
    """Everything one call writes for one source, applied atomically by `Storage.commit`.

    replace: delete all of the source's messages and nodes first. delete_source: remove the source entirely
    (then messages and nodes are ignored). nodes: (node, vector); a None vector keeps the stored one (a metadata
    update of an existing node, e.g. its parent or its position).

    Standing instructions are kept per namespace, not per source, and a batch names them explicitly (neither
    replace nor delete_source touches them): drop_instructions are deleted, then instructions are written,
    (instruction, its statement's embedding) by id; a None vector keeps the stored one (an update of
    `superseded_by`, possibly of an instruction stated in another source). A provider without the `instructions`
    capability is never sent any.
    """

    source: SourceRow
    messages: list[StoredMessage] = field(default_factory=list)
    nodes: list[tuple[MemoryNode, np.ndarray | None]] = field(default_factory=list)
    replace: bool = False
    delete_source: bool = False
    instructions: list[tuple[Instruction, np.ndarray | None]] = field(default_factory=list)
    drop_instructions: list[str] = field(default_factory=list)


class IndexEntry(NamedTuple):
    """One node as the in-memory search indexes hold it (`Storage.index_entries`): what ranking and its filters
    need, never the tree fields. start, end: POSIX seconds (NaN when the node has no time)."""

    id: str
    source_type: str
    source_id: str
    level: int
    position: int
    start: float
    end: float
    speakers: list[str]
    session_ids: list[str]
    text: str
    vector: np.ndarray


@dataclass
class NodeMarks:
    """What a node records besides its content: visits (returned by a query) and a pin.

    pin_message_ids: the messages under the node when it was pinned (they stay protected from forgetting by
    policy even when a rebuild gives the node a new id)."""

    visit_count: int = 0
    last_visited_at: datetime | None = None
    pinned: bool = False
    pin_message_ids: list[str] = field(default_factory=list)


@dataclass
class SourceFacts:
    """What a source's nodes say about it: node counts per level and the time range they cover."""

    level_counts: dict[int, int] = field(default_factory=dict)
    start_time: datetime | None = None
    end_time: datetime | None = None


def facts_of(nodes: Sequence[MemoryNode]) -> SourceFacts:
    """SourceFacts computed from a source's nodes (for a provider without an aggregate query)."""
    counts: dict[int, int] = {}
    for n in nodes:
        counts[n.level] = counts.get(n.level, 0) + 1
    starts = [n.start_time for n in nodes if n.start_time is not None]
    ends = [n.end_time for n in nodes if n.end_time is not None]
    return SourceFacts(dict(sorted(counts.items())), min(starts) if starts else None, max(ends) if ends else None)


def overlaps(m: StoredMessage, tok_from: int, tok_to: int | None) -> bool:
    """Whether the message's rendered tokens overlap [tok_from, tok_to) (to the end when tok_to is None): what
    `Storage.messages` reads (tok_from 0 or less: from the first message)."""
    return (tok_to is None or m.tok_offset < tok_to) and m.tok_offset + m.n_tokens > (tok_from if tok_from > 0 else -1)


def merged(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Token ranges [tok_from, tok_to) ascending, those that overlap or touch joined into one, empty ones (tok_to <=
    tok_from) left out: a message overlaps one of them exactly when it overlaps one of `ranges`."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(r for r in ranges if r[1] > r[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


class _Messages(Protocol):
    def messages(
        self, ns: str, source_id: str, tok_from: int = 0, tok_to: int | None = None, limit: int | None = None
    ) -> list[StoredMessage]: ...


def messages_in_of(
    storage: _Messages, ns: str, source_id: str, ranges: Sequence[tuple[int, int]]
) -> list[StoredMessage]:
    """`Storage.messages_in` from one `messages` read per range (`merged`), each message once, in seq order (for
    a provider whose reads cost no round trip: SQLite)."""
    out: dict[str, StoredMessage] = {}
    for lo, hi in merged(ranges):
        for m in storage.messages(ns, source_id, lo, hi):
            out.setdefault(m.id, m)
    return sorted(out.values(), key=lambda m: m.seq)


class _Frontiers(Protocol):
    def list_namespaces(self) -> list[str]: ...

    def list_sources(self, ns: str, after: str | None = None, limit: int | None = None) -> list[str]: ...

    def frontier(self, ns: str, source_id: str) -> list[MemoryNode]: ...


def unrolled_of(storage: _Frontiers, fan_out: int, max_level: int) -> list[tuple[str, str]]:
    """`Storage.unrolled` computed from every source's frontier (for a provider without an aggregate query):
    (namespace, source id) of the sources with `fan_out` or more sealed, unparented nodes at a level from 1 to
    below `max_level`."""
    out = []
    for ns in storage.list_namespaces():
        for sid in storage.list_sources(ns):
            counts: dict[int, int] = {}
            for n in {n.id: n for n in storage.frontier(ns, sid)}.values():
                if n.parent_id is None and n.sealed and 1 <= n.level < max_level:
                    counts[n.level] = counts.get(n.level, 0) + 1
            if any(c >= fan_out for c in counts.values()):
                out.append((ns, sid))
    return out


# ---------------------------------------------------------------------- filter semantics
def node_matches(node: MemoryNode, flt: QueryFilter | None) -> bool:
    """Whether `node` passes `flt`'s source, speaker, session and time fields (levels are not checked): what
    the search over every provider applies. A node without times never matches a date bound."""
    if flt is None:
        return True
    if flt.conversation_id is not None and (node.source_type, node.source_id) != ("conversation", flt.conversation_id):
        return False
    if flt.document_id is not None and (node.source_type, node.source_id) != ("document", flt.document_id):
        return False
    if flt.source_type is not None and node.source_type != flt.source_type:
        return False
    if flt.speaker is not None and flt.speaker not in node.speakers:
        return False
    if flt.session_id is not None and flt.session_id not in node.session_ids:
        return False
    if flt.start_date is not None and (node.end_time is None or node.end_time < utc(flt.start_date)):
        return False
    return flt.end_date is None or (node.start_time is not None and node.start_time <= utc(flt.end_date))


def message_matches(m: StoredMessage, flt: DeleteFilter | None) -> bool:
    """Whether a message passes a message filter (what `find_messages` and `scan_messages` apply). An untimed
    message never matches a date bound."""
    if flt is None:
        return True
    if flt.conversation_id is not None and m.source_id != flt.conversation_id:
        return False
    if flt.document_id is not None and (m.source_type != "document" or m.source_id != flt.document_id):
        return False
    if flt.speaker is not None and m.speaker != flt.speaker:
        return False
    at = utc(m.created_at)
    start, end = utc(flt.start_date), utc(flt.end_date)
    if start is not None and (at is None or at < start):
        return False
    return not (end is not None and (at is None or at > end))


# ---------------------------------------------------------------------- capabilities
class CoreTable(Protocol):
    """Core memory entries, per namespace and scope (a conversation id, or "" for the whole namespace)."""

    def entries(self, ns: str, scopes: list[str] | None) -> list[CoreEntry]:
        """The stored entries of these scopes (every scope when None), expired ones too, in one read on a provider
        with round trips (a context block reads the namespace's and its conversation's)."""
        ...

    def write(self, ns: str, scope: str, put: CoreEntry | None, delete: Sequence[str]) -> int:
        """In one transaction: delete the scope's entries with a key in `delete`, then store `put` (replacing its
        key). Returns how many entries were deleted."""
        ...


class InstructionTable(Protocol):
    """Standing instructions and preferences of a namespace, each with the embedding of its statement
    (float32, (dimension,), L2-normalised), written by `Storage.commit` (with the messages' chunks, or with
    their forgetting) and by `write`."""

    def entries(
        self, ns: str, conversation_id: str | None = None, include_superseded: bool = False
    ) -> list[Instruction]:
        """The namespace's instructions (those said in `conversation_id` only, when given), oldest first
        (`instruction_order`); those with a `superseded_by` only when include_superseded."""
        ...

    def get(self, ns: str, ids: Sequence[str]) -> list[Instruction]:
        """The namespace's instructions with these ids (unknown ids left out; any order)."""
        ...

    def vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """{instruction id: embedding (float32, (dimension,), L2-normalised)} of the ids found."""
        ...

    def write(self, ns: str, put: Sequence[tuple[Instruction, np.ndarray | None]], drop: Sequence[str]) -> int:
        """In one transaction: delete the instructions with an id in `drop`, then write `put` by id (a None
        vector keeps the stored one). Returns how many were deleted."""
        ...


def instruction_order(instructions: Sequence[Instruction]) -> list[Instruction]:
    """Instructions oldest first (services.instructions.said_order): the order every provider's `entries`
    returns, sorted here so that it is one rule for all of them."""
    return sorted(instructions, key=said_order)


@dataclass(frozen=True)
class IdempotencyRecord:
    """The answer to a write sent with an Idempotency-Key: `operation` ("remember", "upsert"), `fingerprint` (a
    hash of the request body), the HTTP-free answer (`status`, 200 or 202; `response`, its JSON text) and when it
    was first answered (`created_at`, aware UTC)."""

    key: str
    operation: str
    fingerprint: str
    status: int
    response: str
    created_at: datetime


class IdempotencyTable(Protocol):
    """Answers of idempotent writes, per namespace and key; one record per key (a new one replaces it)."""

    def get(self, ns: str, key: str) -> IdempotencyRecord | None:
        """The record of this key in the namespace, or None (expired records may be returned)."""
        ...

    def put(self, ns: str, record: IdempotencyRecord, expired_before: datetime) -> None:
        """Store the record (replacing the key's), and drop the namespace's records created before
        `expired_before`."""
        ...

    def entries(self, ns: str) -> list[IdempotencyRecord]:
        """Every record of the namespace, expired ones too, by key (what export and migrate carry)."""
        ...


@dataclass(frozen=True)
class Lease:
    """Who holds a key's lease (`owner`: a random token per taking) and until when (`expires_at`, aware UTC)."""

    owner: str
    expires_at: datetime


class LeaseTable(Protocol):
    """One lease record per (namespace, key): plain reads and writes, no atomicity asked; the protocol that makes
    them a lock (write, wait, read back) is above the providers (datastore/locks.py)."""

    def get(self, ns: str, key: str) -> Lease | None:
        """The key's lease record in the namespace (an expired one too), or None."""
        ...

    def put(self, ns: str, key: str, lease: Lease) -> None:
        """Write the key's lease record, replacing any."""
        ...

    def delete(self, ns: str, key: str) -> None:
        """Remove the key's lease record (none is fine)."""
        ...


class MarkTable(Protocol):
    """Visits and pins, kept apart from the node rows: recording a visit never rewrites a node or its vector."""

    def get(self, ns: str, ids: Sequence[str] | None) -> dict[str, NodeMarks]:
        """{node id: marks} of the given ids (every marked node of the namespace when None) that have any."""
        ...

    def add_visits(self, ns: str, visits: dict[str, tuple[int, datetime]]) -> None:
        """Add `count` to each node's visit_count and raise its last_visited_at to `when` (one transaction)."""
        ...

    def set(self, ns: str, marks: dict[str, NodeMarks]) -> None:
        """Replace the marks of these node ids (pins and visits as given; pin/unpin, import, migrate)."""
        ...


# ---------------------------------------------------------------------- the protocol
class Storage(Protocol):
    """A provider: sources, messages and nodes with their vectors, per namespace. See the module docstring.

    Construction opens it (raising StoreError naming the setting when it cannot); `close` releases it.
    """

    name: str  # "local", "postgres", "pinecone"
    core: CoreTable | None
    marks: MarkTable | None
    instructions: InstructionTable | None
    idempotency: IdempotencyTable | None
    leases: LeaseTable | None

    @property
    def location(self) -> str:
        """Where the store lives, for messages (a file, a database, an index); never a secret."""
        ...

    def close(self) -> None:
        """Release connections and files; the storage can't be used afterwards."""
        ...

    def record_embedding(self, model: str, dimension: int) -> tuple[str, int]:
        """The (model, dimension) the store was made with, recording the given ones when it has none yet."""
        ...

    # sources
    def get_source(self, ns: str, source_id: str) -> SourceRow | None:
        """The source's row, or None."""
        ...

    def get_sources(self, ns: str, source_ids: Sequence[str]) -> dict[str, SourceRow]:
        """{source id: its row} of the ids found (many at once: one read on a provider with round trips)."""
        ...

    def list_namespaces(self) -> list[str]:
        """Every namespace holding at least one source or core memory entry, sorted (what a default migrate or
        export copies)."""
        ...

    def list_sources(self, ns: str, after: str | None = None, limit: int | None = None) -> list[str]:
        """Source ids of the namespace greater than `after` (code-point order), ascending, at most `limit`."""
        ...

    def source_facts(self, ns: str, source_ids: Sequence[str]) -> dict[str, SourceFacts]:
        """SourceFacts of each source (an absent one maps to empty facts)."""
        ...

    # messages
    def known_message_ids(self, ns: str, source_id: str, ids: Sequence[str]) -> set[str]:
        """Which of `ids` the source holds."""
        ...

    def messages(
        self, ns: str, source_id: str, tok_from: int = 0, tok_to: int | None = None, limit: int | None = None
    ) -> list[StoredMessage]:
        """The source's messages whose rendered tokens overlap [tok_from, tok_to) (to the end when tok_to is
        None), in seq order, at most `limit`. tok_from 0: from the first message."""
        ...

    def messages_in(self, ns: str, source_id: str, ranges: Sequence[tuple[int, int]]) -> list[StoredMessage]:
        """The source's messages whose rendered tokens overlap one of the token ranges [tok_from, tok_to) (empty
        ones ignored), each once, in seq order: what `messages` reads for each range, in one read on a provider
        with round trips (a context block reads the sentences of its candidates this way, datastore/context/
        evidence.py `Texts.read`)."""
        ...

    def find_messages(
        self, ns: str, ids: Sequence[str] | None = None, flt: DeleteFilter | None = None
    ) -> list[tuple[str, str]]:
        """(source id, message id) of the messages with one of `ids` (any source), or matching `flt`."""
        ...

    def scan_messages(self, ns: str, flt: DeleteFilter | None) -> Iterator[StoredMessage]:
        """The namespace's messages matching `flt`, in (source id, seq) order, streamed (no read transaction
        held between pages)."""
        ...

    # nodes
    def frontier(self, ns: str, source_id: str) -> list[MemoryNode]:
        """The source's nodes of level 1 and up without a parent (a line, level 0, is not in the tree), plus the
        last node (highest position) of every level, lines included."""
        ...

    def source_nodes(
        self, ns: str, source_id: str, level: int | None = None, first: int = 0, last: int | None = None
    ) -> list[MemoryNode]:
        """The source's nodes (of `level` only, with position in [first, last], when given), ordered by level
        then position."""
        ...

    def roots(self, ns: str, source_id: str, limit: int) -> list[MemoryNode]:
        """Up to `limit` of the source's nodes of level 1 and up without a parent, highest level first, then
        latest first."""
        ...

    def get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]:
        """The nodes of the namespace with these ids (unknown ids left out; any order)."""
        ...

    def get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """{node id: embedding (float32, (dimension,), L2-normalised)} of the ids found."""
        ...

    # what the in-memory search indexes are fed from (datastore/indexes/namespaces.py)
    def namespace_version(self, ns: str) -> str:
        """A token kept in the store that changes with every commit to the namespace and with its deletion ("" or
        "0" for a namespace never written): one small read, made before every search."""
        ...

    def source_stamps(self, ns: str) -> dict[str, str]:
        """{source id: stamp} of every source of the namespace; a source's stamp changes with every commit of it
        and never repeats (a source deleted and made again gets a new one)."""
        ...

    def index_entries(self, ns: str, source_ids: Sequence[str] | None) -> Iterator[IndexEntry]:
        """The nodes of these sources (of the whole namespace when None) as IndexEntry, streamed in slices (a
        whole namespace is never held twice)."""
        ...

    # writes
    def commit(self, ns: str, batch: WriteBatch, expected_version: int) -> None:
        """Apply `batch` in one transaction if the source's stored version (0 when absent) equals
        `expected_version`; else raise ConflictError and change nothing."""
        ...

    def delete_namespace(self, ns: str) -> tuple[int, int]:
        """Remove everything of the namespace (core entries, marks and instructions too); returns (messages,
        nodes) removed."""
        ...

    # what the background indexer finds in the store
    def backlog(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with messages past its last chunk."""
        ...

    def unrolled(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with FAN_OUT or more sealed, unparented nodes at a level from 1
        to below MAX_LEVEL (a group awaiting its summary)."""
        ...

    def counts(self, ns: str) -> dict[str, int]:
        """Counts of a namespace: `sources`, `messages`, and nodes per level (`L1`, `L2`, ...), or `nodes` from a
        provider that cannot split them by level."""
        ...

    def node_counts(self) -> dict[str, int] | None:
        """Nodes per level over every namespace (`{"L1": n, ...}`), or None when the provider cannot count them
        cheaply (/health)."""
        ...
