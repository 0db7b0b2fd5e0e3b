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
    {"type": "instruction", "namespace", "instruction": Instruction, "embedding"?: [float]}   (standing
     instructions and preferences, superseded ones too; the statement's embedding only with `embeddings`)
    {"type": "idempotency", "namespace", "record": {key, operation, fingerprint, status, response,
     created_at}}                                   (the answer kept for a write sent with an Idempotency-Key)
    {"type": "end", "records": n}                  (the number of lines before it: a cut dump is named)

Import reads and checks every line first (JSON, checksum, shape, order, the end record) and writes nothing when
one is wrong, naming the line. It then writes through `portability.migrate.copy` (the same per-source atomic
copy and count verification as `pyramind migrate`, marks, core memory, instructions and idempotency records
included), with the dump's vectors when it has them and the destination's embedder is the dump's model, else
re-embedding every node's text and every instruction's statement with the destination's embedder (same chunks,
summaries, ids and tree; the same instructions, nothing detected again). It refuses a destination that already
holds one of the dump's sources, and one that cannot keep the dump's core memory, marks, instructions or
idempotency records.
A dump written before idempotency records were carried (it has none) reads as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, TypeAdapter, ValidationError

from datastore.memory import Memory
from datastore.portability.migrate import copy
from datastore.storage import (
    CoreTable,
    IdempotencyRecord,
    IdempotencyTable,
    InstructionTable,
    MarkTable,
    NodeMarks,
    SourceRow,
    instruction_order,
)
from models.core import CoreEntry
from models.instructions import Instruction
from models.memory import MemoryNode, SourceType, StoredMessage
from services.chunking import SentenceStream, Window
from services.embedding import Embedder
from services.errors import InvalidRequestError, StoreError
from services.instructions import said
from services.tree import embedded_text, summary_embedding

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
def export_lines(memory: Memory, namespaces: list[str] | None = None, embeddings: bool = False) -> Iterator[str]:
    """The dump of `namespaces` (default: every namespace of the store), one line (no newline) at a time:
    sources with their messages and nodes (and vectors with `embeddings`), then the namespace's marks, core
    memory entries, standing instructions (with their statements' vectors with `embeddings`) and idempotency
    records."""
    storage = memory.storage
    n = 0

    def emit(obj: dict[str, Any]) -> str:
        nonlocal n
        n += 1
        return _line(obj)

    yield emit(
        {
            "type": "header",
            "format": FORMAT,
            "version": VERSION,
            "embeddings": embeddings,
            "embedding_model": memory.embedder.model_name,
            "embedding_dimension": memory.embedder.dimension,
        }
    )
    for ns in namespaces if namespaces is not None else storage.list_namespaces():
        for sid in storage.list_sources(ns):
            row = storage.get_source(ns, sid)
            if row is None:
                continue
            yield emit({"type": "source", "namespace": ns, "source": asdict(row)})
            for m in storage.messages(ns, sid):
                yield emit({"type": "message", "namespace": ns, "message": m.model_dump(mode="json")})
            nodes = storage.source_nodes(ns, sid)
            vectors = storage.get_vectors(ns, [x.id for x in nodes]) if embeddings else {}
            for node in nodes:
                obj: dict[str, Any] = {"type": "node", "namespace": ns, "node": node.model_dump(mode="json")}
                if embeddings:
                    obj["embedding"] = [float(v) for v in vectors[node.id]]
                yield emit(obj)
        marks = storage.marks.get(ns, None) if storage.marks is not None else {}
        for i, mk in sorted(marks.items()):
            yield emit({"type": "marks", "namespace": ns, "id": i, "marks": _marks_json(mk)})
        entries = storage.core.entries(ns, None) if storage.core is not None else []
        for e in sorted(entries, key=lambda e: (e.conversation_id or "", e.key)):
            yield emit({"type": "core_memory", "namespace": ns, "entry": e.model_dump(mode="json")})
        table = storage.instructions
        rules = table.entries(ns, include_superseded=True) if table is not None else []
        rule_vectors = table.vectors(ns, [i.id for i in rules]) if table is not None and embeddings else {}
        for rule in rules:
            obj = {"type": "instruction", "namespace": ns, "instruction": rule.model_dump(mode="json")}
            if embeddings:
                obj["embedding"] = [float(v) for v in rule_vectors[rule.id]]
            yield emit(obj)
        answers = storage.idempotency.entries(ns) if storage.idempotency is not None else []
        for record in answers:
            yield emit({"type": "idempotency", "namespace": ns, "record": _answer_json(record)})
    yield _line({"type": "end", "records": n})


def _marks_json(m: NodeMarks) -> dict[str, Any]:
    return {
        "visit_count": m.visit_count,
        "pinned": m.pinned,
        "pin_message_ids": list(m.pin_message_ids),
        "last_visited_at": m.last_visited_at.isoformat() if m.last_visited_at else None,
    }


def _answer_json(r: IdempotencyRecord) -> dict[str, Any]:
    return {**asdict(r), "created_at": r.created_at.isoformat()}


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


_ANSWER = TypeAdapter(IdempotencyRecord)  # an idempotency line's record, validated as the dataclass it is


class Dump:
    """A checked dump in memory, readable as `portability.migrate.copy` reads a store (`Readable`): sources,
    messages, nodes and vectors, marks (`marks`), core memory (`core`), standing instructions (`instructions`)
    and idempotency records (`idempotency`). Build with `Dump.read(lines)`; raises DumpError naming the first
    bad line."""

    name = "dump"

    def __init__(self) -> None:
        self.model = ""
        self.dimension = 0
        self.has_embeddings = False
        self.sources: dict[str, dict[str, SourceRow]] = {}
        self.messages_data: dict[tuple[str, str], list[StoredMessage]] = {}
        self.nodes: dict[tuple[str, str], list[MemoryNode]] = {}
        self.vectors: dict[tuple[str, str], np.ndarray] = {}
        self.marks_data: dict[str, dict[str, NodeMarks]] = {}
        self.core_memory: dict[str, list[CoreEntry]] = {}
        self.rules: dict[str, list[Instruction]] = {}
        self.rule_vectors: dict[tuple[str, str], np.ndarray] = {}
        self.answers: dict[str, list[IdempotencyRecord]] = {}
        self.embedder: Embedder | None = None
        self.key_tokens = 0  # CHUNK_KEY_CONTEXT_TOKENS of the store a re-embedded chunk is for (`get_vectors`)
        self.marks: MarkTable | None = _DumpMarks(self)
        self.core: CoreTable | None = _DumpCore(self)
        self.instructions: InstructionTable | None = _DumpInstructions(self)
        self.idempotency: IdempotencyTable | None = _DumpIdempotency(self)

    @classmethod
    def read(cls, lines: Iterable[str]) -> Dump:  # noqa: C901 (one branch per record kind of the dump format)
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
                        raise DumpError(
                            f"line {n}: dump version {obj.get('version')!r}; this reads {VERSION}", f"line {n}"
                        )
                    d.model, d.dimension = str(obj["embedding_model"]), int(obj["embedding_dimension"])
                    d.has_embeddings = bool(obj["embeddings"])
                elif kind == "end":
                    if obj.get("records") != n - 1:
                        raise DumpError(
                            f"line {n}: the end record counts {obj.get('records')} records, the dump "
                            f"has {n - 1}: lines are missing",
                            f"line {n}",
                        )
                    ended = True
                elif kind == "source":
                    ns, src = str(obj["namespace"]), _Source.model_validate(obj["source"])
                    if src.source_id in d.sources.get(ns, {}):
                        raise DumpError(f"line {n}: source {src.source_id!r} appears twice", f"line {n}")
                    d.sources.setdefault(ns, {})[src.source_id] = SourceRow(**src.model_dump())
                    current = (ns, src.source_id)
                    d.messages_data[current], d.nodes[current] = [], []
                elif kind in ("message", "node"):
                    ns = str(obj["namespace"])
                    item = (StoredMessage if kind == "message" else MemoryNode).model_validate(obj[kind])
                    if current != (ns, item.source_id):
                        raise DumpError(
                            f"line {n}: a {kind} of {ns}/{item.source_id} outside its source's lines", f"line {n}"
                        )
                    if kind == "message":
                        d.messages_data[current].append(item)  # type: ignore[arg-type]
                    else:
                        d.nodes[current].append(item)  # type: ignore[arg-type]
                        if d.has_embeddings:
                            vec = np.asarray(obj["embedding"], dtype=np.float32)
                            if vec.shape != (d.dimension,):
                                raise DumpError(
                                    f"line {n}: embedding of dimension {vec.shape}, the header says {d.dimension}",
                                    f"line {n}",
                                )
                            d.vectors[(ns, item.id)] = vec
                elif kind == "marks":
                    mk = _Marks.model_validate(obj["marks"])
                    d.marks_data.setdefault(str(obj["namespace"]), {})[str(obj["id"])] = NodeMarks(
                        mk.visit_count, mk.last_visited_at, mk.pinned, mk.pin_message_ids
                    )
                elif kind == "core_memory":
                    d.core_memory.setdefault(str(obj["namespace"]), []).append(CoreEntry.model_validate(obj["entry"]))
                elif kind == "instruction":
                    ns, rule = str(obj["namespace"]), Instruction.model_validate(obj["instruction"])
                    if any(i.id == rule.id for i in d.rules.get(ns, [])):
                        raise DumpError(f"line {n}: instruction {rule.id!r} appears twice", f"line {n}")
                    d.rules.setdefault(ns, []).append(rule)
                    if d.has_embeddings:
                        vec = np.asarray(obj["embedding"], dtype=np.float32)
                        if vec.shape != (d.dimension,):
                            raise DumpError(
                                f"line {n}: embedding of dimension {vec.shape}, the header says {d.dimension}",
                                f"line {n}",
                            )
                        d.rule_vectors[(ns, rule.id)] = vec
                elif kind == "idempotency":
                    answer = _ANSWER.validate_python(obj["record"])
                    if answer.created_at.tzinfo is None:
                        raise DumpError(f"line {n}: an idempotency record's created_at has no time zone", f"line {n}")
                    d.answers.setdefault(str(obj["namespace"]), []).append(answer)
                else:
                    raise DumpError(f"line {n}: unknown record type {kind!r}", f"line {n}")
            except (KeyError, TypeError, ValueError, ValidationError) as exc:
                if isinstance(exc, DumpError):
                    raise
                raise DumpError(
                    f"line {n}: a malformed {kind or 'record'}: {exc}".splitlines()[0][:300], f"line {n}"
                ) from exc
        if n == 0:
            raise DumpError("line 1: the dump is empty", "line 1")
        if not ended:
            raise DumpError(f"line {n}: the dump ends without its end record: it was cut short", f"line {n}")
        for (ns, sid), msgs in d.messages_data.items():
            if len(msgs) != d.sources[ns][sid].n_messages:
                raise DumpError(
                    f"source {ns}/{sid}: {len(msgs)} messages, its record says {d.sources[ns][sid].n_messages}", "line"
                )
        return d

    def rename_namespace(self, namespace: str) -> None:
        """Put everything of a one-namespace dump into `namespace`."""
        self.sources = dict.fromkeys([namespace], *self.sources.values()) if self.sources else {}
        self.marks_data = dict.fromkeys([namespace], *self.marks_data.values()) if self.marks_data else {}
        self.core_memory = dict.fromkeys([namespace], *self.core_memory.values()) if self.core_memory else {}
        self.rules = dict.fromkeys([namespace], *self.rules.values()) if self.rules else {}
        self.answers = dict.fromkeys([namespace], *self.answers.values()) if self.answers else {}
        self.rule_vectors = {(namespace, i): v for (_, i), v in self.rule_vectors.items()}
        self.messages_data = {(namespace, sid): v for (_, sid), v in self.messages_data.items()}
        self.nodes = {(namespace, sid): v for (_, sid), v in self.nodes.items()}
        self.vectors = {(namespace, i): v for (_, i), v in self.vectors.items()}

    # what `copy` reads (portability.migrate.Readable)
    def list_namespaces(self) -> list[str]:
        """Every namespace with a source, a mark, a core entry, an instruction or an idempotency record in the
        dump, sorted."""
        held = set(self.sources) | set(self.marks_data) | set(self.core_memory) | set(self.rules)
        return sorted(held | set(self.answers))

    def list_sources(self, ns: str, after: str | None = None, limit: int | None = None) -> list[str]:
        """The namespace's source ids, sorted (all of them: a dump is read whole)."""
        return sorted(self.sources.get(ns, {}))

    def get_source(self, ns: str, source_id: str) -> SourceRow | None:
        """The source's row, or None."""
        return self.sources.get(ns, {}).get(source_id)

    def messages(
        self, ns: str, source_id: str, tok_from: int = 0, tok_to: int | None = None, limit: int | None = None
    ) -> list[StoredMessage]:
        """Every message of the source, in seq order (copies)."""
        return [m.model_copy() for m in self.messages_data[(ns, source_id)]]

    def source_nodes(
        self, ns: str, source_id: str, level: int | None = None, first: int = 0, last: int | None = None
    ) -> list[MemoryNode]:
        """Every node of the source (copies)."""
        return [x.model_copy() for x in self.nodes[(ns, source_id)]]

    def get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The dump's vectors of these nodes, or (a dump without them, or of another model) as remembering gives
        them with `embedder`: a line's or a chunk's text embedded (a line's with its speaker, a chunk's after the
        `key_tokens` of its source's sentences before it, CHUNK_KEY_CONTEXT_TOKENS, read from the dump's
        messages: services/tree.embedded_text), a summary's the mean of its children's
        (services/tree.summary_embedding; embedded from its text when a child is not in the dump). One bulk
        embedding call. Raises EmbeddingError."""
        if self.vectors:
            return {i: self.vectors[(ns, i)] for i in ids}
        if not ids:
            return {}
        assert self.embedder is not None, "set Dump.embedder to re-embed"
        by_id = {x.id: x for (n, _), nodes in self.nodes.items() if n == ns for x in nodes}
        rolled: set[str] = set()  # summaries whose embedding is their children's
        embedded: dict[str, MemoryNode] = {}  # nodes whose text is embedded, in the order they are needed

        def need(x: MemoryNode) -> None:
            if x.id in rolled or x.id in embedded:
                return
            if x.level >= 2 and x.children and all(c in by_id for c in x.children):
                rolled.add(x.id)
                for c in x.children:
                    need(by_id[c])
            else:
                embedded[x.id] = x

        for i in ids:
            need(by_id[i])
        keyed = self._keyed(ns, list(embedded.values()))
        made = self.embedder.embed([embedded_text(x) for x in keyed], bulk=True)
        out: dict[str, np.ndarray] = dict(zip(embedded, made, strict=True))

        def vector(i: str) -> np.ndarray:
            if i not in out:
                out[i] = summary_embedding([vector(c) for c in by_id[i].children])
            return out[i]

        return {i: vector(i) for i in ids}

    def _keyed(self, ns: str, nodes: list[MemoryNode]) -> list[MemoryNode]:
        """`nodes` with each chunk's `key_context` (services/chunking.SentenceStream.key_context over its
        source's messages in the dump, `key_tokens`); other nodes as they are."""
        if not self.key_tokens:
            return nodes
        streams: dict[str, SentenceStream] = {}
        out = []
        for x in nodes:
            msgs = self.messages_data.get((ns, x.source_id))
            if x.level == 1 and msgs:
                if x.source_id not in streams:
                    streams[x.source_id] = SentenceStream.from_messages(msgs)
                window = Window(x.tok_start, x.tok_end, x.sealed)
                x = x.model_copy(update={"key_context": streams[x.source_id].key_context(window, self.key_tokens)})
            out.append(x)
        return out


class _DumpMarks:
    """The dump's marks as a read-only MarkTable."""

    def __init__(self, dump: Dump) -> None:
        self.dump = dump

    def get(self, ns: str, ids: Sequence[str] | None) -> dict[str, NodeMarks]:
        marks = self.dump.marks_data.get(ns, {})
        return dict(marks) if ids is None else {i: marks[i] for i in ids if i in marks}

    def add_visits(self, ns: str, visits: dict[str, tuple[int, datetime]]) -> None:
        raise StoreError("a dump is read-only")

    def set(self, ns: str, marks: dict[str, NodeMarks]) -> None:
        raise StoreError("a dump is read-only")


class _DumpCore:
    """The dump's core memory entries as a read-only CoreTable."""

    def __init__(self, dump: Dump) -> None:
        self.dump = dump

    def entries(self, ns: str, scopes: list[str] | None) -> list[CoreEntry]:
        entries = self.dump.core_memory.get(ns, [])
        return list(entries) if scopes is None else [e for e in entries if (e.conversation_id or "") in scopes]

    def write(self, ns: str, scope: str, put: CoreEntry | None, delete: Sequence[str]) -> int:
        raise StoreError("a dump is read-only")


class _DumpInstructions:
    """The dump's standing instructions as a read-only InstructionTable; their vectors are the dump's, or (a dump
    without them, or of another model) their statements embedded with the dump's `embedder`."""

    def __init__(self, dump: Dump) -> None:
        self.dump = dump

    def entries(
        self, ns: str, conversation_id: str | None = None, include_superseded: bool = False
    ) -> list[Instruction]:
        return instruction_order(
            [
                i
                for i in self.dump.rules.get(ns, [])
                if (conversation_id is None or i.conversation_id == conversation_id)
                and (include_superseded or i.superseded_by is None)
            ]
        )

    def get(self, ns: str, ids: Sequence[str]) -> list[Instruction]:
        wanted = set(ids)
        return [i for i in self.dump.rules.get(ns, []) if i.id in wanted]

    def vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Raises EmbeddingError when re-embedding fails."""
        if self.dump.rule_vectors:
            return {i: self.dump.rule_vectors[(ns, i)] for i in ids if (ns, i) in self.dump.rule_vectors}
        rules = self.get(ns, ids)
        if not rules:
            return {}
        assert self.dump.embedder is not None, "set Dump.embedder to re-embed"
        return dict(
            zip([i.id for i in rules], self.dump.embedder.embed([said(i) for i in rules], bulk=True), strict=True)
        )

    def write(self, ns: str, put: Sequence[tuple[Instruction, np.ndarray | None]], drop: Sequence[str]) -> int:
        raise StoreError("a dump is read-only")


class _DumpIdempotency:
    """The dump's idempotency records as a read-only IdempotencyTable."""

    def __init__(self, dump: Dump) -> None:
        self.dump = dump

    def get(self, ns: str, key: str) -> IdempotencyRecord | None:
        return next((r for r in self.dump.answers.get(ns, []) if r.key == key), None)

    def entries(self, ns: str) -> list[IdempotencyRecord]:
        return sorted(self.dump.answers.get(ns, []), key=lambda r: r.key)

    def put(self, ns: str, record: IdempotencyRecord, expired_before: datetime) -> None:
        raise StoreError("a dump is read-only")


def import_dump(memory: Memory, lines: Iterable[str], namespace: str | None = None) -> dict[str, Any]:
    """Restore a dump into `memory`'s store (any provider). `namespace`: put a one-namespace dump's contents
    there.

    Returns the copy's report (`portability.migrate.copy`: sources, messages, nodes, marks, core memory
    entries, instructions and idempotency records). Raises DumpError naming the line (nothing written) for a
    cut, changed or malformed dump, a dump of several namespaces with `namespace`, a destination already holding
    one of the dump's sources, or one that cannot keep the dump's core memory, marks, instructions or
    idempotency records.
    """
    dump = Dump.read(lines)
    if namespace is not None:
        held = dump.list_namespaces()
        if len(held) > 1:
            raise DumpError(f"the dump holds {len(held)} namespaces; --namespace needs one", "namespace")
        dump.rename_namespace(namespace)
    embedder, storage = memory.embedder, memory.storage
    same_model = (dump.model, dump.dimension) == (embedder.model_name, embedder.dimension)
    if not (dump.has_embeddings and same_model):
        dump.vectors, dump.rule_vectors = {}, {}  # re-embed with the destination's model
    dump.embedder, dump.key_tokens = embedder, memory.settings.chunk_key_context_tokens
    for ns, sources in dump.sources.items():
        taken = [sid for sid in sources if storage.get_source(ns, sid) is not None]
        if taken:
            raise DumpError(
                f"the store already holds {len(taken)} of the dump's sources in {ns!r} (first: "
                f"{taken[0]!r}); import into an empty namespace or delete them first",
                "namespace",
            )
    if dump.core_memory and storage.core is None:
        raise DumpError(f"the dump has core memory entries and the {storage.name} store keeps none", "core_memory")
    if dump.marks_data and storage.marks is None:
        raise DumpError(f"the dump has visits and pins and the {storage.name} store keeps none", "marks")
    if dump.rules and storage.instructions is None:
        raise DumpError(f"the dump has standing instructions and the {storage.name} store keeps none", "instructions")
    if dump.answers and storage.idempotency is None:
        raise DumpError(f"the dump has idempotency records and the {storage.name} store keeps none", "idempotency")
    return copy(dump, storage)
