"""The Pinecone store: one Pinecone namespace per Pyramind namespace, everything kept as records of that namespace.

Pinecone holds only vectors with metadata, so the tree, the messages and the source rows are all records
(one dense cosine index, dimension = the embedder's). Record ids carry a kind and a hash of the source id, so a
source's records are listed by id prefix (Pinecone ids must be ASCII; the hash makes any source or message id fit):

    src#<h(source_id)>                      the SourceRow (version, counters), the frontier, the source metadata
    msg#<h(source_id)>#<h(message_id)>      one StoredMessage (content, seq, token offsets, time as epoch float)
    node#<h(source_id)>#<node id>           one MemoryNode with its embedding (text and tree fields in metadata)
    instr#<instruction id>                  one standing Instruction with its statement's embedding
    ver#namespace                           the namespace's version token (a fresh random one per commit)
    mark#<node id>                          the visits and pin of one node
    core#<h(scope)>#<h(key)>                one core memory entry (scope: a conversation id, "" for the namespace)
    <record id>#p<i>                        part i of a text too large for Pinecone's 40 KB metadata limit

(The ids, metadata codecs and the split live in `records.py`; the SDK calls, retried and batched, in `client.py`,
whose `RecordClient` the store passes to each of its capability tables.)

Messages and sources carry a dummy unit vector and `kind` metadata; reads of nodes filter `kind == "node"`. This keeps
one namespace self-contained (`delete_all` of the namespace forgets everything) at the price of a few records.

Reads by filter use a filtered query (top_k 1000, Pinecone's cap with metadata); when that cap is reached the
answer comes from listing the id prefix and fetching, so results are never truncated. No `fetch_by_metadata`
(absent from the needledb emulator) and no delete-by-filter (not on every serverless index) are used.

Limits, stated plainly: Pinecone has no transactions. `commit` checks the version stored on `src#` and then
writes messages and nodes, then `src#` last; the check narrows but cannot close the window between two
processes writing the same source at the same moment (in-process writers are serialised by the writers'
per-source locks, datastore/locks.py). A failure mid-commit deletes the records this commit created (best
effort) and raises StoreError.
Pinecone serverless is eventually consistent: a read straight after a write may not see it yet.

`PineconeStorage` implements the Storage protocol (datastore/storage.py) with the `core` capability (`core#<h(scope)>
#<h(key)>` records, the entry's value split into parts like any long text), `marks` (`mark#<node id>` records) and
`instructions` (`instr#` records: a commit writes them with its messages and nodes, removals first, so a failure
never leaves a forgotten message's instruction behind).

Search for the read path is above the store (datastore/indexes/search.py: the in-memory BM25 and vector indexes,
the same for every provider; Pinecone's sparse vectors are not used), fed by `index_entries` (a source's node
records listed by id prefix and fetched with their values). Every commit writes a fresh random `stamp` on
`src#` and then a fresh token on `ver#namespace` (no counter: Pinecone has no atomic increment; a random token
never repeats), which the indexes of every server process read before a search.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from pinecone import ConflictError as IndexExists
from pinecone import Pinecone, ServerlessSpec

from datastore.providers.pinecone import records as rec
from datastore.providers.pinecone.client import BATCH, RecordClient, chunks, retried
from datastore.providers.pinecone.idempotency import PineconeIdempotency
from datastore.providers.pinecone.leases import PineconeLeases
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
    facts_of,
    instruction_order,
    merged,
    message_matches,
    overlaps,
    unrolled_of,
)
from models.api import DeleteFilter
from models.core import CoreEntry
from models.instructions import Instruction
from models.memory import MemoryNode, StoredMessage
from models.settings import Settings
from models.time import utc
from services.errors import ConflictError, EmbeddingMismatchError, StoreError, StoreUnavailableError

META_NAMESPACE = "__pyramind__"  # reserved: holds the embedding model record
_META_ID = "meta#embedding"
_VERSION_ID = "ver#namespace"  # the namespace's version token


class PineconeStorage:
    """Pinecone provider. settings: PINECONE_API_KEY; PINECONE_INDEX (created as a serverless cosine index in
    PINECONE_CLOUD/PINECONE_REGION when missing) or PINECONE_HOST (the data-plane host, used as given); FAN_OUT
    and MAX_LEVEL (what `unrolled` counts). dimension: the embedder's.

    Raises StoreError without a key or when the index is unusable; `record_embedding` raises
    EmbeddingMismatchError when the index's dimension (from describe_index_stats) differs from the embedder's.
    """

    name = "pinecone"

    def __init__(self, settings: Settings, dimension: int) -> None:
        self.settings = settings
        self.dimension = dimension
        self.client = self._open()
        self.core: CoreTable | None = PineconeCore(self.client)
        self.marks: MarkTable | None = PineconeMarks(self.client)
        self.instructions: InstructionTable | None = PineconeInstructions(self.client)
        self.idempotency: IdempotencyTable | None = PineconeIdempotency(self.client)
        self.leases: LeaseTable | None = PineconeLeases(self.client)  # no transactions: writers lease a source

    # ------------------------------------------------------------------ lifecycle
    def _open(self) -> RecordClient:
        """Connect to the index (made when missing); the client every read and write goes through."""
        s = self.settings
        if s.pinecone_api_key is None:
            raise StoreError("DATASTORE=pinecone needs PINECONE_API_KEY")
        self._pc = Pinecone(api_key=s.pinecone_api_key.get_secret_value())
        host = s.pinecone_host or self._ensure_index()
        self._index = self._pc.Index(host=host)
        return RecordClient(self._index, self.dimension, self.location)

    def _ensure_index(self) -> str:
        """Create PINECONE_INDEX when missing (serverless, cosine, the embedder's dimension); its host.

        The control plane is not emulated by needledb: tests/datastore/test_pinecone.py
        (test_missing_index_is_created_...) covers this path with scripted responses of the 2026-07
        control-plane API served from loopback, in front of a real needledb data plane.
        """
        s = self.settings
        if not retried(self._pc.has_index)(s.pinecone_index):
            try:  # the SDK's 9.x-compatible surface; it sends the 2026-07 schema/deployment request
                self._pc.create_index(
                    name=s.pinecone_index,
                    dimension=self.dimension,
                    metric="cosine",
                    spec=ServerlessSpec(cloud=s.pinecone_cloud, region=s.pinecone_region),
                    timeout=300,
                )
            except IndexExists:
                pass  # another process created it meanwhile
        host = retried(self._pc.describe_index)(s.pinecone_index).host
        if not host:
            raise StoreError(f"Pinecone index {s.pinecone_index!r} has no host yet; retry when it is ready")
        return host

    def close(self) -> None:
        """Close the SDK's clients."""
        for client in (getattr(self, "_index", None), getattr(self, "_pc", None)):
            if client is not None:
                client.close()

    def record_embedding(self, model: str, dimension: int) -> tuple[str, int]:
        """The (model, dimension) recorded in the index's meta namespace, recording these when none. Also checks
        the index itself: its dimension (the most common Pinecone failure) and its metric."""
        stats = self.client.stats()
        name = self.settings.pinecone_index
        if stats.dimension is not None and int(stats.dimension) != dimension:
            raise EmbeddingMismatchError(
                f"the Pinecone index {name!r} has dimension {stats.dimension}, but the embedder {model} makes "
                f"{dimension}; use another PINECONE_INDEX or the same embedder"
            )
        metric = getattr(stats, "metric", None)
        if metric not in (None, "cosine"):
            raise StoreError(f"the Pinecone index {name!r} uses the {metric} metric; Pyramind needs cosine")
        recorded = self.client.fetch(META_NAMESPACE, [_META_ID]).get(_META_ID)
        if recorded is None:
            meta = {"kind": "meta", "embedding_model": model, "embedding_dimension": dimension}
            self.client.upsert(META_NAMESPACE, [(_META_ID, self.client.dummy, meta)])
            return model, dimension
        return recorded["embedding_model"], int(recorded.get("embedding_dimension", dimension))

    @property
    def location(self) -> str:
        """`PINECONE_INDEX=<name>`."""
        return f"PINECONE_INDEX={self.settings.pinecone_index}"

    # ------------------------------------------------------------------ reads
    def get_source(self, ns: str, source_id: str) -> SourceRow | None:
        """The source's row (its `src#` record), or None."""
        return self.get_sources(ns, [source_id]).get(source_id)

    def get_sources(self, ns: str, source_ids: Sequence[str]) -> dict[str, SourceRow]:
        """{source id: its row} of the ids found (their `src#` records, one fetch)."""
        if not source_ids:
            return {}
        found = self.client.fetch(ns, [f"src#{rec.h(sid)}" for sid in dict.fromkeys(source_ids)])
        return {m["source_id"]: SourceRow.of(m, json.loads(m.get("source_meta") or "{}")) for m in found.values()}

    def known_message_ids(self, ns: str, source_id: str, ids: Sequence[str]) -> set[str]:
        """Which of `ids` the source holds (fetched by record id)."""
        by_rid = {f"msg#{rec.h(source_id)}#{rec.h(i)}": i for i in ids}
        return {by_rid[rid] for rid in self.client.fetch(ns, list(by_rid))}

    def messages(
        self, ns: str, source_id: str, tok_from: int = 0, tok_to: int | None = None, limit: int | None = None
    ) -> list[StoredMessage]:
        """The source's messages whose rendered tokens overlap [tok_from, tok_to), in seq order, at most `limit`."""
        flt = {"kind": "msg", "source_id": source_id, "tok_end": {"$gt": tok_from if tok_from > 0 else -1}}
        recs = self.client.select(ns, flt, f"msg#{rec.h(source_id)}#")
        found = sorted((rec.to_message(m) for m in recs.values()), key=lambda m: m.seq)
        return [m for m in found if tok_to is None or m.tok_offset < tok_to][:limit]

    def messages_in(self, ns: str, source_id: str, ranges: Sequence[tuple[int, int]]) -> list[StoredMessage]:
        """The source's messages overlapping one of `ranges`, each once, in seq order: one select from the first
        range's start, filtered here."""
        spans = merged(ranges)
        if not spans:
            return []
        lo = spans[0][0]
        flt = {"kind": "msg", "source_id": source_id, "tok_end": {"$gt": lo if lo > 0 else -1}}
        recs = self.client.select(ns, flt, f"msg#{rec.h(source_id)}#")
        found = sorted((rec.to_message(m) for m in recs.values()), key=lambda m: m.seq)
        return [m for m in found if any(overlaps(m, a, b) for a, b in spans)]

    def scan_messages(self, ns: str, flt: DeleteFilter | None) -> Iterator[StoredMessage]:
        """The namespace's messages matching `flt`, in (source id, seq) order, one source at a time."""
        for source_id in self.list_sources(ns):
            if flt is not None and flt.conversation_id is not None and source_id != flt.conversation_id:
                continue
            for m in self.messages(ns, source_id):
                if message_matches(m, flt):
                    yield m

    def frontier(self, ns: str, source_id: str) -> list[MemoryNode]:
        """The source's nodes of level 1 and up without a parent, plus the last node of every level (named on
        `src#`)."""
        h = rec.h(source_id)
        src = self.client.fetch(ns, [f"src#{h}"]).get(f"src#{h}")
        last = json.loads(src.get("frontier") or "{}") if src else {}
        recs = self.client.fetch(ns, [f"node#{h}#{nid}" for _, nid in last.values()])
        recs.update(
            self.client.select(
                ns, {"kind": "node", "source_id": source_id, "has_parent": False, "level": {"$gte": 1}}, f"node#{h}#"
            )
        )
        return [rec.to_node(m) for m in recs.values()]

    def source_nodes(
        self, ns: str, source_id: str, level: int | None = None, first: int = 0, last: int | None = None
    ) -> list[MemoryNode]:
        """The source's nodes (of `level`, positions in [first, last], when given), by level then position
        (listed by id prefix, then filtered)."""
        recs = self.client.fetch(ns, rec.main_ids(self.client.list_ids(ns, f"node#{rec.h(source_id)}#")))
        nodes = sorted((rec.to_node(m) for m in recs.values()), key=lambda n: (n.level, n.position))
        if level is None:
            return nodes
        return [n for n in nodes if n.level == level and n.position >= first and (last is None or n.position <= last)]

    def roots(self, ns: str, source_id: str, limit: int) -> list[MemoryNode]:
        """Up to `limit` of the source's nodes of level 1 and up without a parent, highest level first, then
        latest first."""
        roots = {n.id: n for n in self.frontier(ns, source_id) if n.parent_id is None and n.level >= 1}
        return sorted(roots.values(), key=lambda n: (-n.level, -n.position))[:limit]

    def _nodes_by_id(self, ns: str, ids: Sequence[str], values: bool = False) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for part in chunks(list(dict.fromkeys(ids)), BATCH):
            out.update(self.client.select(ns, {"kind": "node", "node_id": {"$in": list(part)}}, "node#", values))
        return out

    def get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]:
        """The namespace's nodes with these ids (unknown ids left out)."""
        return [rec.to_node(m) for m in self._nodes_by_id(ns, ids).values()]

    def get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """{node id: embedding (float32, (dimension,))} of the ids found."""
        return {
            m["node_id"]: np.asarray(m["_values"], dtype=np.float32)
            for m in self._nodes_by_id(ns, ids, values=True).values()
        }

    def find_messages(
        self, ns: str, ids: Sequence[str] | None = None, flt: DeleteFilter | None = None
    ) -> list[tuple[str, str]]:
        """(source id, message id) of the messages with one of `ids` (any source), or matching `flt`."""
        conds: list[dict[str, Any]] = [{"kind": "msg"}]
        if flt is not None:
            if flt.conversation_id is not None:
                conds += [{"source_type": "conversation"}, {"source_id": flt.conversation_id}]
            if flt.document_id is not None:
                conds += [{"source_type": "document"}, {"source_id": flt.document_id}]
            if flt.speaker is not None:
                conds.append({"speaker": flt.speaker})
            if flt.start_date is not None:
                conds.append({"created_at": {"$gte": rec.ts(utc(flt.start_date))}})
            if flt.end_date is not None:
                conds.append({"created_at": {"$lte": rec.ts(utc(flt.end_date))}})
        groups = [conds]
        if ids is not None:
            groups = [conds + [{"message_id": {"$in": list(p)}}] for p in chunks(ids, BATCH)]
        found: dict[str, dict[str, Any]] = {}
        for g in groups:
            found.update(self.client.select(ns, {"$and": g}, "msg#"))
        return [(m["source_id"], m["message_id"]) for m in found.values()]

    def backlog(self) -> list[tuple[str, str]]:
        """Sources whose messages run past their last chunk (`chunked_to` on `src#`), in every namespace."""
        out = []
        for ns in self.list_namespaces():
            for m in self.client.fetch(ns, self.client.list_ids(ns, "src#")).values():
                if int(m["n_tokens"]) > int(m.get("chunked_to", 0)):
                    out.append((ns, m["source_id"]))
        return out

    def unrolled(self) -> list[tuple[str, str]]:
        """(namespace, source id) of every source with a complete group of sealed nodes awaiting its summary
        (each source's frontier read in turn: Pinecone has no aggregate query)."""
        return unrolled_of(self, self.settings.fan_out, self.settings.max_level)

    def list_namespaces(self) -> list[str]:
        """Every Pinecone namespace of the index but the reserved meta namespace, sorted (a namespace holding any
        record: a source, a core memory entry)."""
        stats = self.client.stats()
        return sorted(ns for ns in (stats.namespaces or {}) if ns != META_NAMESPACE)

    def list_sources(self, ns: str, after: str | None = None, limit: int | None = None) -> list[str]:
        """Source ids of the namespace greater than `after` (code-point order), ascending, at most `limit`."""
        ids = sorted(m["source_id"] for m in self.client.fetch(ns, self.client.list_ids(ns, "src#")).values())
        return [i for i in ids if after is None or i > after][:limit]

    def source_facts(self, ns: str, source_ids: Sequence[str]) -> dict[str, SourceFacts]:
        """Node counts per level and time range of each source, from its nodes."""
        return {sid: facts_of(self.source_nodes(ns, sid)) for sid in source_ids}

    # ------------------------------------------------------------------ writes
    def commit(self, ns: str, batch: WriteBatch, expected_version: int) -> None:
        """Version check on `src#`, then: upsert messages and nodes, update re-parented nodes, delete what a
        replace left over, write `src#` (new version, frontier) last. See the module docstring for the limits."""
        src = batch.source
        h = rec.h(src.source_id)
        stored = self.client.fetch(ns, [f"src#{h}"]).get(f"src#{h}")
        if (int(stored["version"]) if stored else 0) != expected_version:
            raise ConflictError(f"{src.source_id!r} changed meanwhile")
        old = (
            self.client.list_ids(ns, f"msg#{h}#") + self.client.list_ids(ns, f"node#{h}#")
            if batch.replace or batch.delete_source
            else []
        )
        instructions = self.instructions
        assert isinstance(instructions, PineconeInstructions)
        if batch.delete_source:  # the instructions first: a failure never leaves a forgotten one behind
            instructions.write(ns, batch.instructions, batch.drop_instructions)
            self.client.delete(ns, old + [f"src#{h}"])
            self._bump(ns)
            return
        fresh = batch.replace or stored is None
        last = {} if fresh else json.loads(stored.get("frontier") or "{}")  # type: ignore[union-attr]
        chunked_to = 0 if fresh else int(stored.get("chunked_to", 0))  # type: ignore[union-attr]
        for n, _ in batch.nodes:  # the highest position of every level, for `_frontier`
            if str(n.level) not in last or n.position >= last[str(n.level)][0]:
                last[str(n.level)] = [n.position, n.id]
            if n.level == 1:
                chunked_to = max(chunked_to, n.tok_end)
        records: list[tuple[str, list[float], dict[str, Any]]] = []
        for m in batch.messages:
            packed = rec.pack(f"msg#{h}#{rec.h(m.id)}", rec.message_meta(m), "content")
            records += [(rid, self.client.dummy, meta) for rid, meta in packed]
        vectors = [(n, vec) for n, vec in batch.nodes if vec is not None]
        for n, vec in vectors:
            packed = rec.pack(f"node#{h}#{n.id}", rec.node_meta(n), "text")
            values = np.asarray(vec, dtype=np.float32).tolist()
            records += [(rid, self.client.dummy if rec.is_part(rid) else values, meta) for rid, meta in packed]
        updates: list[tuple[str, dict[str, Any]]] = []  # nodes without a vector: all metadata, vector kept
        for n, v in batch.nodes:
            if v is None:
                (rid, meta), *parts = rec.pack(f"node#{h}#{n.id}", rec.node_meta(n), "text")
                updates.append((rid, meta))
                records += [(part_id, self.client.dummy, part) for part_id, part in parts]
        for i, v in batch.instructions:
            if v is None:
                updates.append((f"instr#{i.id}", rec.instruction_meta(i)))
            else:
                records.append((f"instr#{i.id}", np.asarray(v, dtype=np.float32).tolist(), rec.instruction_meta(i)))
        fetched = [f"node#{h}#{n.id}" for n, _ in vectors]
        fetched += [f"instr#{i.id}" for i, v in batch.instructions if v is not None]
        existing = set(old) | set(self.client.fetch(ns, fetched)) | {r for r, _ in updates}
        written = {rid for rid, _, _ in records} | {rid for rid, _ in updates}
        source_meta = {
            "kind": "src",
            "source_id": src.source_id,
            "source_type": src.source_type,
            "version": src.version,
            "n_messages": src.n_messages,
            "n_tokens": src.n_tokens,
            "max_seq": src.max_seq,
            "source_meta": json.dumps(src.metadata),
            "frontier": json.dumps(last),
            "chunked_to": chunked_to,
            "stamp": uuid.uuid4().hex,
        }
        try:
            self.client.delete(ns, [f"instr#{i}" for i in batch.drop_instructions])
            self.client.upsert(ns, records)
            for rid, meta in updates:
                self.client.update_metadata(ns, rid, meta)
            self.client.delete(ns, [rid for rid in old if rid not in written])
            self.client.upsert(ns, [(f"src#{h}", self.client.dummy, source_meta)])
            self._bump(ns)
        except Exception as exc:
            created = [rid for rid in written if rid not in existing and rec.base(rid) not in existing]
            try:  # best effort: leave no new message that a retry would skip as already remembered
                self.client.delete(ns, created)
            finally:
                kind = StoreUnavailableError if isinstance(exc, StoreUnavailableError) else StoreError
                raise kind(f"Pinecone write of {src.source_id!r} failed: {exc}") from exc

    def delete_namespace(self, ns: str) -> tuple[int, int]:
        """Delete every record of the Pinecone namespace (core memory, marks and instructions too); returns
        (messages, nodes) removed."""
        ids = rec.main_ids(self.client.list_ids(ns, ""))
        n_msgs = sum(1 for i in ids if i.startswith("msg#"))
        n_nodes = sum(1 for i in ids if i.startswith("node#"))
        if ids:
            self.client.delete_all(ns)
        return n_msgs, n_nodes

    # ------------------------------------------------------------------ what the search indexes are fed from
    def _bump(self, ns: str) -> None:
        """A fresh version token for the namespace, written after the records of a commit."""
        self.client.upsert(ns, [(_VERSION_ID, self.client.dummy, {"kind": "ver", "token": uuid.uuid4().hex})])

    def namespace_version(self, ns: str) -> str:
        """The token of `ver#namespace` (one fetch), "" when the namespace holds none."""
        found = self.client.fetch(ns, [_VERSION_ID]).get(_VERSION_ID)
        return str(found["token"]) if found else ""

    def source_stamps(self, ns: str) -> dict[str, str]:
        """{source id: its `src#` stamp} (the `src#` prefix listed and fetched; a source written before stamps
        existed: its version)."""
        recs = self.client.fetch(ns, self.client.list_ids(ns, "src#")).values()
        return {m["source_id"]: str(m.get("stamp") or f"v{int(m['version'])}") for m in recs}

    def index_entries(self, ns: str, source_ids: Sequence[str] | None) -> Iterator[IndexEntry]:
        """The node records of these sources (the namespace's when None), listed by id prefix and fetched with
        their values, a page at a time."""
        prefixes = ["node#"] if source_ids is None else [f"node#{rec.h(sid)}#" for sid in source_ids]
        for prefix in prefixes:
            ids = rec.main_ids(self.client.list_ids(ns, prefix))
            for part in chunks(ids, BATCH):
                for m in self.client.fetch(ns, part, values=True).values():
                    yield IndexEntry(
                        m["node_id"],
                        m["source_type"],
                        m["source_id"],
                        int(m["level"]),
                        int(m["position"]),
                        float(m["start_time"]) if m.get("start_time") is not None else np.nan,
                        float(m["end_time"]) if m.get("end_time") is not None else np.nan,
                        list(m.get("speakers", [])),
                        list(m.get("session_ids", [])),
                        m["text"],
                        np.asarray(m["_values"], dtype=np.float32),
                    )

    def counts(self, ns: str) -> dict[str, int]:
        """Record counts of the namespace: `sources`, `messages`, `nodes` (listed by id prefix; no per-level
        split)."""
        ids = rec.main_ids(self.client.list_ids(ns, ""))
        return {
            kind: sum(1 for i in ids if i.startswith(prefix))
            for kind, prefix in (("sources", "src#"), ("messages", "msg#"), ("nodes", "node#"))
        }

    def node_counts(self) -> dict[str, int] | None:
        """None: counting every namespace's nodes would list the whole index."""
        return None


class PineconeMarks:
    """MarkTable: visits and pins as `mark#<node id>` records of the namespace."""

    def __init__(self, client: RecordClient) -> None:
        self.client = client

    def get(self, ns: str, ids: Sequence[str] | None) -> dict[str, NodeMarks]:
        """{node id: marks} of the given ids (every marked node of the namespace when None) that have any."""
        client = self.client
        rids = client.list_ids(ns, "mark#") if ids is None else [f"mark#{i}" for i in ids]
        return {
            m["node_id"]: NodeMarks(
                int(m.get("visit_count", 0)),
                rec.dt(m.get("last_visited_at")),
                bool(m.get("pinned", False)),
                list(m.get("pin_message_ids", [])),
            )
            for m in client.fetch(ns, rids).values()
        }

    def add_visits(self, ns: str, visits: dict[str, tuple[int, datetime]]) -> None:
        """Read, add, write: not atomic across processes (two flushing at once may each miss the other's)."""
        marks = self.get(ns, list(visits))
        for i, (n, when) in visits.items():
            m = marks.setdefault(i, NodeMarks())
            m.visit_count += n
            m.last_visited_at = max(m.last_visited_at, when) if m.last_visited_at else when
        self.set(ns, marks)

    def set(self, ns: str, marks: dict[str, NodeMarks]) -> None:
        """Replace the marks of these node ids."""
        records = []
        for i, m in marks.items():
            meta: dict[str, Any] = {
                "kind": "mark",
                "node_id": i,
                "visit_count": m.visit_count,
                "pinned": m.pinned,
                "pin_message_ids": list(m.pin_message_ids),
            }
            if m.last_visited_at is not None:
                meta["last_visited_at"] = rec.ts(m.last_visited_at)
            records.append((f"mark#{i}", self.client.dummy, meta))
        self.client.upsert(ns, records)


class PineconeInstructions:
    """InstructionTable: standing instructions as `instr#<id>` records of the namespace, the statement's
    embedding as the record's values."""

    def __init__(self, client: RecordClient) -> None:
        self.client = client

    def entries(
        self, ns: str, conversation_id: str | None = None, include_superseded: bool = False
    ) -> list[Instruction]:
        """The namespace's instructions (of one conversation when given), oldest first; in force only unless
        include_superseded (a filtered query, or the `instr#` prefix listed past its cap)."""
        conds: list[dict[str, Any]] = [{"kind": "instr"}]
        if conversation_id is not None:
            conds.append({"conversation_id": conversation_id})
        found = [rec.to_instruction(m) for m in self.client.select(ns, {"$and": conds}, "instr#").values()]
        return instruction_order([i for i in found if include_superseded or i.superseded_by is None])

    def get(self, ns: str, ids: Sequence[str]) -> list[Instruction]:
        """The namespace's instructions with these ids (fetched by record id)."""
        return [rec.to_instruction(m) for m in self.client.fetch(ns, [f"instr#{i}" for i in ids]).values()]

    def vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """{instruction id: embedding (float32, (dimension,))}: the records' values."""
        recs = self.client.fetch(ns, [f"instr#{i}" for i in ids], values=True)
        return {m["instruction_id"]: np.asarray(m["_values"], dtype=np.float32) for m in recs.values()}

    def write(self, ns: str, put: Sequence[tuple[Instruction, np.ndarray | None]], drop: Sequence[str]) -> int:
        """Delete `drop`, upsert `put` (a None vector: the metadata updated, the values kept). Not atomic
        (Pinecone has no transactions): deletions go first. Returns how many of `drop` existed."""
        client = self.client
        gone = len(client.fetch(ns, [f"instr#{i}" for i in drop])) if drop else 0
        client.delete(ns, [f"instr#{i}" for i in drop])
        client.upsert(
            ns,
            [
                (f"instr#{i.id}", np.asarray(v, dtype=np.float32).tolist(), rec.instruction_meta(i))
                for i, v in put
                if v is not None
            ],
        )
        for i, v in put:
            if v is None:
                client.update_metadata(ns, f"instr#{i.id}", rec.instruction_meta(i))
        return gone


class PineconeCore:
    """CoreTable: core memory entries as `core#<h(scope)>#<h(key)>` records of the namespace (a dummy vector;
    the value split into part records past the 40 KB metadata limit)."""

    def __init__(self, client: RecordClient) -> None:
        self.client = client

    def entries(self, ns: str, scopes: list[str] | None) -> list[CoreEntry]:
        """The stored entries of these scopes (every scope when None), expired ones too (each scope's id prefix
        listed, then all fetched at once)."""
        client = self.client
        prefixes = [rec.core_prefix(None)] if scopes is None else [rec.core_prefix(s) for s in dict.fromkeys(scopes)]
        ids = [i for p in prefixes for i in rec.main_ids(client.list_ids(ns, p))]
        return [rec.to_core(m) for m in client.fetch(ns, ids).values()] if ids else []

    def write(self, ns: str, scope: str, put: CoreEntry | None, delete: Sequence[str]) -> int:
        """Store `put` (replacing its key), then delete the scope's entries with a key in `delete` (but `put`'s).
        Not atomic (Pinecone has no transactions): the write goes first, so a failure in between leaves an entry
        moved out to long-term memory in both places rather than in none. Returns how many entries were deleted
        (`put`'s own key counts when it is in `delete` and was stored)."""
        client = self.client
        dropped = [rec.core_id(scope, k) for k in dict.fromkeys(delete)]
        put_id = rec.core_id(scope, put.key) if put is not None else None
        held = client.fetch(ns, dropped + ([put_id] if put_id else []))
        stale: list[str] = []  # records to delete: the dropped entries with their parts, `put`'s surplus parts
        if put is not None and put_id is not None:
            packed = rec.pack(put_id, rec.core_meta(scope, put), "value")
            client.upsert(ns, [(rid, client.dummy, meta) for rid, meta in packed])
            had = int(held[put_id].get("parts") or 0) if put_id in held else 0
            stale += [f"{put_id}#p{i}" for i in range(len(packed), had + 1)]
        for rid in dropped:
            if rid in held and rid != put_id:
                stale += [rid] + [f"{rid}#p{i}" for i in range(1, int(held[rid].get("parts") or 0) + 1)]
        client.delete(ns, stale)
        return sum(1 for rid in dropped if rid in held)
