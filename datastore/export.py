"""Export and import, lossless: a whole store (or some namespaces) as one JSONL dump, and back into any provider.

The dump, one JSON object per line, each carrying `sha256`, the SHA-256 of the line's canonical JSON without it
(sorted keys, no spaces), so a tampered line is named on import:

    {"type": "header", "format": "pyramind-dump", "version": 1, "embedding_model", "embedding_dimension",
     "embeddings": bool}
    {"type": "source", "namespace", "source": {source_id, source_type, version, n_messages, n_tokens, max_seq,
     metadata}}                                     then, for that source:
    {"type": "message", "namespace", "message": StoredMessage}       (seq, offsets, session_id, ...)
    {"type": "node", "namespace", "node": MemoryNode, "embedding"?: [float]}   (level, children, parent,
     position, session_ids, ...; the embedding only with `embeddings`)
    {"type": "marks", "namespace", "id", "marks": {visit_count, last_visited_at, pinned, pin_message_ids}}
    {"type": "core_memory", "namespace", "entry": {...}}   (core memory, when the store keeps it: see below)
    {"type": "end", "records": n}                  (the number of lines before it: a cut dump is named)

Import reads and checks every line first (JSON, checksum, shape, order, the end record) and writes nothing when
one is wrong, naming the line. It then writes through `datastore.migrate` (the same per-source atomic copy and
count verification as `pyramind migrate`), with the dump's vectors when it has them and the destination's
embedder is the dump's model, else re-embedding every node's text with the destination's embedder (same
chunks, summaries, ids and tree). It refuses a destination that already holds one of the dump's sources.

Core memory: a store that keeps core memory entries provides `export_core_memory(ns) -> list[dict]` and
`import_core_memory(ns, entries)`; the dump carries them as `core_memory` lines (none today).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from pyramind.datastore.datastore import DataStore
from pyramind.datastore.hooks import NodeMarks, SourceRow
from pyramind.datastore.migrate import migrate
from pyramind.models.memory import MemoryNode, SourceType, StoredMessage
from pyramind.services.errors import InvalidRequestError

FORMAT = "pyramind-dump"
VERSION = 1


class DumpError(InvalidRequestError):
    """A dump line that can't be imported; the message names the line (nothing was written)."""

    code = "invalid_dump"


def _canonical(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _line(obj: dict[str, Any]) -> str:
    return json.dumps({**obj, "sha256": hashlib.sha256(_canonical(obj)).hexdigest()}, ensure_ascii=False)


def is_dump(head: str) -> bool:
    """Whether a file starting with `head` (its first line or more) is a Pyramind dump."""
    first = head.lstrip().split("\n", 1)[0]
    return first.startswith("{") and f'"format": "{FORMAT}"' in first


# ---------------------------------------------------------------------- export
def export_lines(store: DataStore, namespaces: list[str] | None = None, embeddings: bool = False) -> Iterator[str]:
    """The dump of `namespaces` (default: every namespace of the store), one line (no newline) at a time."""
    n = 0

    def emit(obj: dict[str, Any]) -> str:
        nonlocal n
        n += 1
        return _line(obj)

    yield emit({"type": "header", "format": FORMAT, "version": VERSION, "embeddings": embeddings,
                "embedding_model": store.embedder.model_name, "embedding_dimension": store.embedder.dimension})
    for ns in namespaces if namespaces is not None else store._list_namespaces():
        node_ids: list[str] = []
        for sid in store._list_sources(ns):
            row = store._get_source(ns, sid)
            if row is None:
                continue
            yield emit({"type": "source", "namespace": ns, "source": asdict(row)})
            for m in store._messages_from(ns, sid, -1):
                yield emit({"type": "message", "namespace": ns, "message": m.model_dump(mode="json")})
            nodes = store._source_nodes(ns, sid)
            vectors = store._get_vectors(ns, [x.id for x in nodes]) if embeddings else {}
            for node in nodes:
                obj: dict[str, Any] = {"type": "node", "namespace": ns, "node": node.model_dump(mode="json")}
                if embeddings:
                    obj["embedding"] = [float(v) for v in vectors[node.id]]
                yield emit(obj)
            node_ids += [x.id for x in nodes]
        try:
            marks = store._get_marks(ns, None)
        except NotImplementedError:
            marks = {}
        for i, mk in sorted(marks.items()):
            yield emit({"type": "marks", "namespace": ns, "id": i, "marks": _marks_json(mk)})
        exporter = getattr(store, "export_core_memory", None)
        for entry in exporter(ns) if exporter else []:
            yield emit({"type": "core_memory", "namespace": ns, "entry": entry})
    yield _line({"type": "end", "records": n})


def _marks_json(m: NodeMarks) -> dict[str, Any]:
    return {"visit_count": m.visit_count, "pinned": m.pinned, "pin_message_ids": list(m.pin_message_ids),
            "last_visited_at": m.last_visited_at.isoformat() if m.last_visited_at else None}


# ---------------------------------------------------------------------- import
class _Source(BaseModel):
    source_id: str
    source_type: SourceType
    version: int
    n_messages: int
    n_tokens: int
    max_seq: int
    metadata: dict[str, Any]


class _Marks(BaseModel):
    visit_count: int
    last_visited_at: datetime | None
    pinned: bool
    pin_message_ids: list[str]


class Dump:
    """A checked dump in memory: what `migrate` reads from a source store (the hooks it calls), plus marks and
    core memory entries. Build with `Dump.read(lines)`; raises DumpError naming the first bad line."""

    def __init__(self) -> None:
        self.model = ""
        self.dimension = 0
        self.has_embeddings = False
        self.sources: dict[str, dict[str, SourceRow]] = {}
        self.messages: dict[tuple[str, str], list[StoredMessage]] = {}
        self.nodes: dict[tuple[str, str], list[MemoryNode]] = {}
        self.vectors: dict[tuple[str, str], np.ndarray] = {}
        self.marks: dict[str, dict[str, NodeMarks]] = {}
        self.core_memory: dict[str, list[dict[str, Any]]] = {}
        self.embedder: Any = None

    @classmethod
    def read(cls, lines: Iterable[str]) -> Dump:
        d = cls()
        n = 0
        ended = False
        current: tuple[str, str] | None = None
        for n, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            if ended:
                raise DumpError(f"line {n}: data after the end record", f"line {n}")
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise DumpError(f"line {n}: not a JSON object (a cut or damaged line): {exc.msg}", f"line {n}") from exc
            if not isinstance(obj, dict) or "sha256" not in obj:
                raise DumpError(f"line {n}: not a dump record (no sha256)", f"line {n}")
            sha = obj.pop("sha256")
            if hashlib.sha256(_canonical(obj)).hexdigest() != sha:
                raise DumpError(f"line {n}: checksum mismatch: the line was changed after export", f"line {n}")
            kind = obj.get("type")
            try:
                if n == 1 or kind == "header":
                    if n != 1 or kind != "header" or obj.get("format") != FORMAT:
                        raise DumpError(f"line {n}: a dump starts with its header, and only there", f"line {n}")
                    if obj.get("version") != VERSION:
                        raise DumpError(f"line {n}: dump version {obj.get('version')!r}; this reads {VERSION}",
                                        f"line {n}")
                    d.model, d.dimension = str(obj["embedding_model"]), int(obj["embedding_dimension"])
                    d.has_embeddings = bool(obj["embeddings"])
                elif kind == "end":
                    if obj.get("records") != n - 1:
                        raise DumpError(f"line {n}: the end record counts {obj.get('records')} records, the dump "
                                        f"has {n - 1}: lines are missing", f"line {n}")
                    ended = True
                elif kind == "source":
                    ns, src = str(obj["namespace"]), _Source.model_validate(obj["source"])
                    if src.source_id in d.sources.get(ns, {}):
                        raise DumpError(f"line {n}: source {src.source_id!r} appears twice", f"line {n}")
                    d.sources.setdefault(ns, {})[src.source_id] = SourceRow(**src.model_dump())
                    current = (ns, src.source_id)
                    d.messages[current], d.nodes[current] = [], []
                elif kind in ("message", "node"):
                    ns = str(obj["namespace"])
                    item = (StoredMessage if kind == "message" else MemoryNode).model_validate(obj[kind])
                    if current != (ns, item.source_id):
                        raise DumpError(f"line {n}: a {kind} of {ns}/{item.source_id} outside its source's lines",
                                        f"line {n}")
                    if kind == "message":
                        d.messages[current].append(item)  # type: ignore[arg-type]
                    else:
                        d.nodes[current].append(item)  # type: ignore[arg-type]
                        if d.has_embeddings:
                            vec = np.asarray(obj["embedding"], dtype=np.float32)
                            if vec.shape != (d.dimension,):
                                raise DumpError(f"line {n}: embedding of dimension {vec.shape}, the header says "
                                                f"{d.dimension}", f"line {n}")
                            d.vectors[(ns, item.id)] = vec  # type: ignore[union-attr]
                elif kind == "marks":
                    mk = _Marks.model_validate(obj["marks"])
                    d.marks.setdefault(str(obj["namespace"]), {})[str(obj["id"])] = NodeMarks(
                        mk.visit_count, mk.last_visited_at, mk.pinned, mk.pin_message_ids)
                elif kind == "core_memory":
                    d.core_memory.setdefault(str(obj["namespace"]), []).append(dict(obj["entry"]))
                else:
                    raise DumpError(f"line {n}: unknown record type {kind!r}", f"line {n}")
            except (KeyError, TypeError, ValueError, ValidationError) as exc:
                if isinstance(exc, DumpError):
                    raise
                raise DumpError(f"line {n}: a malformed {kind or 'record'}: {exc}".splitlines()[0][:300],
                                f"line {n}") from exc
        if n == 0:
            raise DumpError("line 1: the dump is empty", "line 1")
        if not ended:
            raise DumpError(f"line {n}: the dump ends without its end record: it was cut short", f"line {n}")
        for (ns, sid), msgs in d.messages.items():
            if len(msgs) != d.sources[ns][sid].n_messages:
                raise DumpError(f"source {ns}/{sid}: {len(msgs)} messages, its record says "
                                f"{d.sources[ns][sid].n_messages}", "line")
        return d

    def rename_namespace(self, namespace: str) -> None:
        """Put everything of a one-namespace dump into `namespace`."""
        self.sources = dict.fromkeys([namespace], *self.sources.values()) if self.sources else {}
        self.marks = dict.fromkeys([namespace], *self.marks.values()) if self.marks else {}
        self.core_memory = dict.fromkeys([namespace], *self.core_memory.values()) if self.core_memory else {}
        self.messages = {(namespace, sid): v for (_, sid), v in self.messages.items()}
        self.nodes = {(namespace, sid): v for (_, sid), v in self.nodes.items()}
        self.vectors = {(namespace, i): v for (_, i), v in self.vectors.items()}

    # the hooks `migrate` reads a source store through
    def _list_namespaces(self) -> list[str]:
        return sorted(self.sources)

    def _list_sources(self, ns: str) -> list[str]:
        return sorted(self.sources.get(ns, {}))

    def _get_source(self, ns: str, source_id: str) -> SourceRow | None:
        return self.sources.get(ns, {}).get(source_id)

    def _messages_from(self, ns: str, source_id: str, tok_offset: int) -> list[StoredMessage]:
        return [m.model_copy() for m in self.messages[(ns, source_id)]]

    def _source_nodes(self, ns: str, source_id: str) -> list[MemoryNode]:
        return [x.model_copy() for x in self.nodes[(ns, source_id)]]

    def _get_vectors(self, ns: str, ids: list[str]) -> dict[str, np.ndarray]:
        if self.vectors:
            return {i: self.vectors[(ns, i)] for i in ids}
        by_id = {x.id: x for (n, _), nodes in self.nodes.items() if n == ns for x in nodes}
        texts = [by_id[i].text for i in ids]
        return dict(zip(ids, self.embedder.embed(texts, bulk=True), strict=True)) if ids else {}


def import_dump(store: DataStore, lines: Iterable[str], namespace: str | None = None) -> dict[str, Any]:
    """Restore a dump into `store` (any provider). `namespace`: put a one-namespace dump's contents there.

    Returns migrate's report plus "marks" and "core_memory" counts. Raises DumpError naming the line (nothing
    written) for a cut, changed or malformed dump, a dump of several namespaces with `namespace`, or a
    destination already holding one of the dump's sources.
    """
    dump = Dump.read(lines)
    if namespace is not None:
        if len(dump.sources) > 1:
            raise DumpError(f"the dump holds {len(dump.sources)} namespaces; --namespace needs one", "namespace")
        dump.rename_namespace(namespace)
    same_model = (dump.model, dump.dimension) == (store.embedder.model_name, store.embedder.dimension)
    if not (dump.has_embeddings and same_model):
        dump.vectors = {}  # re-embed with the destination's model
    dump.embedder = store.embedder
    for ns, sources in dump.sources.items():
        taken = [sid for sid in sources if store._get_source(ns, sid) is not None]
        if taken:
            raise DumpError(f"the store already holds {len(taken)} of the dump's sources in {ns!r} (first: "
                            f"{taken[0]!r}); import into an empty namespace or delete them first", "namespace")
    if dump.core_memory and not hasattr(store, "import_core_memory"):
        raise DumpError("the dump has core memory entries and this store keeps none", "core_memory")
    report = migrate(dump, store)  # type: ignore[arg-type]
    for ns, marks in dump.marks.items():
        store._set_marks(ns, marks)
    for ns, entries in dump.core_memory.items():
        store.import_core_memory(ns, entries)  # type: ignore[attr-defined]
    report["marks"] = sum(len(m) for m in dump.marks.values())
    report["core_memory"] = sum(len(e) for e in dump.core_memory.values())
    return report
