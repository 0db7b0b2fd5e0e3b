"""Pinecone records of the Pinecone store: ids, metadata codecs, the 40 KB split, and a local filter evaluator.

Record ids (Pinecone ids must be ASCII; a hash makes any source or message id fit):

    src#<h(source_id)>                      a SourceRow
    msg#<h(source_id)>#<h(message_id)>      a StoredMessage
    node#<h(source_id)>#<node id>           a MemoryNode
    instr#<instruction id>                  a standing Instruction (its values: the statement's embedding)
    mark#<node id>                          the visits and pin of a node
    core#<h(scope)>#<h(key)>                a core memory entry (scope: a conversation id, "" for the namespace)
    <record id>#p<i>                        part i of a text too large for one record's metadata

Metadata has no null (absent keys stand for None), times are epoch seconds (floats), lists hold strings.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from datastore.storage import sentences_of, sentences_text
from models.core import CoreEntry
from models.instructions import Instruction
from models.memory import MemoryNode, StoredMessage
from services.errors import StoreError

METADATA_LIMIT = 39_000  # bytes of metadata JSON per record (Pinecone: 40 KB)
PART_BYTES = 30_000  # bytes of text per part record


def h(text: str) -> str:
    """24 hex characters (96 bits) naming a source or message id inside record ids."""
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def ts(when: datetime | None) -> float | None:
    """Epoch seconds (float) of an aware datetime; None stays None."""
    return when.timestamp() if when is not None else None


def dt(seconds: Any) -> datetime | None:
    """The UTC datetime of epoch seconds (a metadata number); None stays None."""
    return datetime.fromtimestamp(float(seconds), tz=UTC) if seconds is not None else None


_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def matches(meta: dict[str, Any], flt: dict[str, Any]) -> bool:
    """Evaluate the subset of Pinecone's filter grammar this module emits ($and, $eq, $in, $gt(e), $lt(e)) on
    one record's metadata, as Pinecone does (a list field matches $eq/$in when any element does)."""
    for key, cond in flt.items():
        if key == "$and":
            if not all(matches(meta, f) for f in cond):
                return False
            continue
        value = meta.get(key)
        values = value if isinstance(value, list) else [value]
        for op, arg in (cond if isinstance(cond, dict) else {"$eq": cond}).items():
            if op == "$eq":
                ok = arg in values
            elif op == "$in":
                ok = any(v in arg for v in values)
            elif op in _CMP:
                ok = isinstance(value, int | float) and not isinstance(value, bool) and _CMP[op](value, arg)
            else:
                raise ValueError(f"filter operator {op} is not evaluated locally")
            if not ok:
                return False
    return True


TEXT_FIELD = {"msg": "content", "node": "text", "core": "value", "idem": "text"}
"""The metadata field a record of each kind moves into part records when it is over the limit."""


def split_text(text: str, limit: int) -> list[str]:
    """`text` cut into pieces of at most `limit` bytes of JSON each (escapes counted)."""
    pieces: list[str] = []
    cur: list[str] = []
    size = 0
    for ch in text:
        n = len(json.dumps(ch, ensure_ascii=False).encode()) - 2
        if size + n > limit and cur:
            pieces.append("".join(cur))
            cur, size = [], 0
        cur.append(ch)
        size += n
    pieces.append("".join(cur))
    return pieces


def pack(rid: str, meta: dict[str, Any], field: str) -> list[tuple[str, dict[str, Any]]]:
    """[(record id, metadata)] for one record: itself, or, when its metadata is over the limit, itself with
    `field` moved into part records `<rid>#p1..` (`parts` says how many). Raises StoreError if still too big."""
    if len(json.dumps(meta, ensure_ascii=False).encode()) <= METADATA_LIMIT:
        return [(rid, meta)]
    pieces = split_text(meta[field], PART_BYTES)
    main = {**meta, field: "", "parts": len(pieces)}
    if len(json.dumps(main, ensure_ascii=False).encode()) > METADATA_LIMIT:
        raise StoreError(f"record {rid} has more than 40 KB of metadata besides its text (Pinecone's limit)")
    return [(rid, main)] + [(f"{rid}#p{i}", {"kind": "part", "text": p}) for i, p in enumerate(pieces, 1)]


def node_meta(n: MemoryNode) -> dict[str, Any]:
    """A node's metadata: every MemoryNode field (times as epoch seconds, absent when None; parent_id "" when
    None with `has_parent` for filtering) plus `kind` "node" and `parts` 0."""
    meta: dict[str, Any] = {
        "kind": "node",
        "node_id": n.id,
        "source_id": n.source_id,
        "source_type": n.source_type,
        "level": n.level,
        "position": n.position,
        "text": n.text,
        "token_count": n.token_count,
        "children": list(n.children),
        "parent_id": n.parent_id or "",
        "has_parent": n.parent_id is not None,
        "message_ids": list(n.message_ids),
        "speakers": list(n.speakers),
        "sealed": n.sealed,
        "tok_start": n.tok_start,
        "tok_end": n.tok_end,
        "summariser": n.summariser or "",
        "parts": 0,
        "session_ids": list(n.session_ids),
        "sentence_ids": list(n.sentence_ids),
    }
    for key, value in (("start_time", ts(n.start_time)), ("end_time", ts(n.end_time))):
        if value is not None:  # Pinecone metadata has no null
            meta[key] = value
    return meta


def to_node(m: dict[str, Any]) -> MemoryNode:
    """The MemoryNode of a node record's metadata (numbers may come back as floats)."""
    return MemoryNode(
        id=m["node_id"],
        source_type=m["source_type"],
        source_id=m["source_id"],
        level=int(m["level"]),
        position=int(m["position"]),
        text=m["text"],
        token_count=int(m["token_count"]),
        children=list(m.get("children", [])),
        parent_id=m.get("parent_id") or None,
        message_ids=list(m.get("message_ids", [])),
        speakers=list(m.get("speakers", [])),
        start_time=dt(m.get("start_time")),
        end_time=dt(m.get("end_time")),
        sealed=bool(m["sealed"]),
        tok_start=int(m["tok_start"]),
        tok_end=int(m["tok_end"]),
        summariser=m.get("summariser") or None,
        session_ids=list(m.get("session_ids", [])),
        sentence_ids=list(m.get("sentence_ids", [])),
    )


def message_meta(m: StoredMessage) -> dict[str, Any]:
    """A message's metadata: every StoredMessage field, `tok_end` (offset + length, for `$gt` filters),
    `created_at` as epoch seconds when known, and `kind` "msg"."""
    meta: dict[str, Any] = {
        "kind": "msg",
        "message_id": m.id,
        "source_id": m.source_id,
        "source_type": m.source_type,
        "seq": m.seq,
        "speaker": m.speaker,
        "content": m.content,
        "tok_offset": m.tok_offset,
        "n_tokens": m.n_tokens,
        "tok_end": m.tok_offset + m.n_tokens,
        "show_time": m.show_time,
        "sentences": _sentences_field(m),
    }
    if m.created_at is not None:
        meta["created_at"] = m.created_at.timestamp()
    if m.session_id is not None:
        meta["session_id"] = m.session_id
    return meta


SENTENCES_MAX = 16_000
"""Bytes of a message's sentences (JSON) kept in its metadata; a longer list (a pasted document of thousands of
sentences) is left out, and the message is split again when read (services/chunking.SentenceStream): the same
splitter gives the same sentences, and the record stays under Pinecone's 40 KB."""


def _sentences_field(m: StoredMessage) -> str:
    text = sentences_text(m)
    return text if len(text) <= SENTENCES_MAX else ""


def to_message(m: dict[str, Any]) -> StoredMessage:
    """The StoredMessage of a message record's metadata."""
    return StoredMessage(
        id=m["message_id"],
        source_id=m["source_id"],
        source_type=m["source_type"],
        seq=int(m["seq"]),
        speaker=m["speaker"],
        content=m["content"],
        created_at=dt(m.get("created_at")),
        tok_offset=int(m["tok_offset"]),
        n_tokens=int(m["n_tokens"]),
        show_time=bool(m["show_time"]),
        session_id=m.get("session_id"),
        sentences=sentences_of(m.get("sentences")),
    )


def instruction_meta(i: Instruction) -> dict[str, Any]:
    """An instruction's metadata: every Instruction field (times as epoch seconds and absent when None, like
    message_id and conversation_id; statement and superseded_by "" when None, so that an update can clear them)
    plus `kind` "instr"."""
    meta: dict[str, Any] = {
        "kind": "instr",
        "instruction_id": i.id,
        "instruction_kind": i.kind,
        "text": i.text,
        "statement": i.statement or "",
        "has_statement": i.statement is not None,
        "subject": i.subject,
        "speaker": i.speaker,
        "superseded_by": i.superseded_by or "",
        "detector": i.detector,
    }
    for key, value in (
        ("message_id", i.message_id),
        ("conversation_id", i.conversation_id),
        ("created_at", ts(i.created_at)),
        ("recorded_at", ts(i.recorded_at)),
    ):
        if value is not None:
            meta[key] = value
    return meta


def to_instruction(m: dict[str, Any]) -> Instruction:
    """The Instruction of an instruction record's metadata."""
    return Instruction(
        id=m["instruction_id"],
        kind=m["instruction_kind"],
        text=m["text"],
        statement=m.get("statement") if m.get("has_statement") else None,
        subject=m["subject"],
        message_id=m.get("message_id"),
        conversation_id=m.get("conversation_id"),
        speaker=m["speaker"],
        created_at=dt(m.get("created_at")),
        recorded_at=dt(m.get("recorded_at")),
        superseded_by=m.get("superseded_by") or None,
        detector=m["detector"],
    )


def core_id(scope: str, key: str) -> str:
    """The record id of a core memory entry: `core#<h(scope)>#<h(key)>` (the hashes keep any key ASCII)."""
    return f"core#{h(scope)}#{h(key)}"


def core_prefix(scope: str | None) -> str:
    """The id prefix of a scope's core memory entries (every scope's when None)."""
    return "core#" if scope is None else f"core#{h(scope)}#"


def core_meta(scope: str, e: CoreEntry) -> dict[str, Any]:
    """A core memory entry's metadata: every CoreEntry field (times as epoch seconds, `expires_at` absent when
    None), its `scope` and `kind` "core"."""
    meta: dict[str, Any] = {
        "kind": "core",
        "scope": scope,
        "key": e.key,
        "value": e.value,
        "importance": e.importance,
        "created_at": e.created_at.timestamp(),
        "updated_at": e.updated_at.timestamp(),
        "tokens": e.tokens,
    }
    if e.expires_at is not None:
        meta["expires_at"] = ts(e.expires_at)
    return meta


def to_core(m: dict[str, Any]) -> CoreEntry:
    """The CoreEntry of a core record's metadata."""
    return CoreEntry(
        key=m["key"],
        value=m["value"],
        importance=int(m["importance"]),
        conversation_id=m.get("scope") or None,
        created_at=datetime.fromtimestamp(float(m["created_at"]), tz=UTC),
        updated_at=datetime.fromtimestamp(float(m["updated_at"]), tz=UTC),
        expires_at=dt(m.get("expires_at")),
        tokens=int(m["tokens"]),
    )


def is_part(rid: str) -> bool:
    """A part record's id: its main record's id (`msg#..#..`, `node#..#..`, `core#..#..`) plus `#p<i>`."""
    return rid.count("#") == 3


def base(rid: str) -> str:
    """The main record id of a part record's id (the id itself for a main record)."""
    return rid.rsplit("#", 1)[0] if is_part(rid) else rid


def main_ids(ids: Iterable[str]) -> list[str]:
    """Record ids without the part records."""
    return [i for i in ids if not is_part(i)]
