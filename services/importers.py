"""Readers of chat-history files: LoCoMo JSON, a ChatGPT data export (`conversations.json`), JSONL messages.

Each reader yields `Batch`es: a conversation id and messages to remember together (a LoCoMo session, a slice of
a ChatGPT conversation), in time order. Raises ValueError naming the file and what is wrong with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from models.api import Message

Format = Literal["auto", "locomo", "chatgpt", "jsonl"]
BATCH = 200


@dataclass
class Batch:
    """Messages to remember together; `fork` (parent conversation id, message id): the conversation is a branch
    to create with `Forks.fork` before its first batch; `title`: the conversation's title, when the file has one
    (remembered with the batch: RememberRequest.title)."""

    conversation_id: str
    messages: list[Message]
    fork: tuple[str, str] | None = None
    title: str | None = None


def detect_format(path: Path) -> Format:
    """locomo, chatgpt or jsonl, from the extension and the first record; raises ValueError if unknown."""
    if path.suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    with path.open(encoding="utf-8") as f:
        head = f.read(4096).lstrip()
    if head.startswith("["):
        if '"mapping"' in head:
            return "chatgpt"
        if '"conversation"' in head or '"qa"' in head or '"sample_id"' in head:
            return "locomo"
        data = json.loads(path.read_text(encoding="utf-8"))
        first = data[0] if data else {}
        if "mapping" in first:
            return "chatgpt"
        if "conversation" in first:
            return "locomo"
    raise ValueError(f"{path}: cannot tell the format; pass --format locomo|chatgpt|jsonl")


def read_locomo(path: Path) -> Iterator[Batch]:
    """One batch per LoCoMo session, sessions in number order; message id = dia_id, time = the session date."""
    for sample in json.loads(path.read_text(encoding="utf-8")):
        yield from locomo_sessions(sample)


def locomo_sessions(sample: dict[str, Any]) -> Iterator[Batch]:
    """The sessions of one LoCoMo sample, in number order, as batches of its conversation."""
    conv = sample["conversation"]
    cid = sample.get("sample_id") or f"locomo-{id(sample)}"
    numbers = sorted(int(k.split("_")[1]) for k in conv if k.startswith("session_") and k.count("_") == 1)
    for n in numbers:
        when = _locomo_time(conv.get(f"session_{n}_date_time"))
        msgs = [
            Message(id=t["dia_id"], speaker=t["speaker"], content=t["text"], created_at=when)
            for t in conv[f"session_{n}"]
            if t.get("text", "").strip()
        ]
        if msgs:
            yield Batch(cid, msgs)


def _locomo_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(value, "%I:%M %p on %d %B, %Y")
    except ValueError:
        return None


def read_chatgpt(path: Path) -> Iterator[Batch]:
    """A ChatGPT export, following each conversation's `mapping` tree: the path from the root to `current_node`
    is the conversation; every other branch (an edited or regenerated message) becomes a fork of the conversation
    it departs from, named `<conversation id>~<first node id>`, at the last message before it departs (its
    first batch carries `fork`); a branch departing before any message is a conversation of its own. A branch
    follows its latest child; its other children branch again. User and assistant text only, in slices of
    BATCH messages. Every batch carries the conversation's `title` (its branches' too; line breaks and
    surrounding spaces collapsed, at most 256 characters). Raises ValueError naming the conversation and node for
    a malformed or cyclic mapping."""
    for conv in json.loads(path.read_text(encoding="utf-8")):
        cid = conv.get("conversation_id") or conv.get("id")
        mapping = conv.get("mapping") or {}
        if not cid or not mapping:
            continue
        title = conv.get("title")
        name = " ".join(title.split())[:256] if isinstance(title, str) else ""
        for batch in _chatgpt_branches(path, str(cid), mapping, conv.get("current_node")):
            batch.title = name or None
            yield batch


def _chatgpt_message(node: dict[str, Any]) -> Message | None:
    m = node.get("message") or {}
    role = (m.get("author") or {}).get("role")
    parts = (m.get("content") or {}).get("parts") or []
    text = "\n".join(p for p in parts if isinstance(p, str)).strip()
    if role not in ("user", "assistant") or not text:
        return None
    ts = m.get("create_time")
    return Message(
        id=m.get("id") or node.get("id"),
        role=role,
        content=text,
        created_at=datetime.fromtimestamp(ts, tz=UTC) if ts else None,
    )


def _chatgpt_branches(path: Path, cid: str, mapping: Any, current: str | None) -> Iterator[Batch]:  # noqa: C901 (ChatGPT export: one branch per node shape of its mapping)
    where = f"{path}: conversation {cid!r}"
    if not isinstance(mapping, dict) or not all(isinstance(v, dict) for v in mapping.values()):
        raise ValueError(f"{where}: `mapping` must be an object of node objects")
    for key, node in mapping.items():
        if not isinstance(node.get("children") or [], list):
            raise ValueError(f"{where}: node {key!r} has `children` that is not a list")
    node_id = current if current in mapping else next((k for k, v in mapping.items() if not v.get("children")), None)
    chain: list[str] = []
    while node_id is not None and node_id in mapping:
        if node_id in chain:
            raise ValueError(f"{where}: the mapping is cyclic at node {node_id!r}")
        chain.append(node_id)
        node_id = mapping[node_id].get("parent")
    chain.reverse()
    seen: set[str] = set(chain)
    # (conversation id, node ids in order, fork: (parent conversation, message id) or None)
    todo: list[tuple[str, list[str], tuple[str, str] | None]] = [(cid, chain, None)]
    while todo:
        conv_id, nodes, fork = todo.pop(0)
        msgs: list[Message] = []
        last_msg: list[str | None] = []  # the last message id at or before each node of the path
        for nid in nodes:
            msg = _chatgpt_message(mapping[nid])
            if msg is not None:
                msgs.append(msg)
            last_msg.append(msgs[-1].id if msgs else (fork[1] if fork else None))
        for i, nid in enumerate(nodes):
            for child in mapping[nid].get("children") or []:
                if child not in mapping or child in seen:
                    if child in seen and (i + 1 >= len(nodes) or nodes[i + 1] != child):
                        raise ValueError(f"{where}: the mapping is cyclic at node {child!r}")
                    continue
                branch: list[str] = []
                cur: str | None = child
                while cur is not None and cur in mapping:
                    if cur in seen:
                        raise ValueError(f"{where}: the mapping is cyclic at node {cur!r}")
                    seen.add(cur)
                    branch.append(cur)
                    kids = [k for k in mapping[cur].get("children") or [] if k in mapping]
                    cur = kids[-1] if kids else None
                at = last_msg[i]
                todo.append((f"{cid}~{child}", branch, (conv_id, at) if at is not None else None))
        for j in range(0, len(msgs), BATCH):
            yield Batch(conv_id, msgs[j : j + BATCH], fork if j == 0 else None)


def read_jsonl(path: Path) -> Iterator[Batch]:
    """One message object per line ({conversation_id?, id?, speaker|role, content, created_at?}); lines
    without a conversation_id belong to a conversation named after the file. Consecutive lines of one
    conversation are remembered together (up to BATCH)."""
    current: Batch | None = None
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                cid = obj.pop("conversation_id", None) or path.stem
                msg = Message.model_validate(obj)
            except Exception as exc:
                raise ValueError(f"{path}:{n}: not a message: {exc}") from exc
            if current is None or current.conversation_id != cid or len(current.messages) >= BATCH:
                if current is not None:
                    yield current
                current = Batch(cid, [])
            current.messages.append(msg)
    if current is not None:
        yield current


READERS = {"locomo": read_locomo, "chatgpt": read_chatgpt, "jsonl": read_jsonl}


def read(path: Path, fmt: Format = "auto") -> Iterator[Batch]:
    """Batches of `path` in the given (or detected) format."""
    return READERS[detect_format(path) if fmt == "auto" else fmt](path)
