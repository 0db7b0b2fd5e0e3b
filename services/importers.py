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
    conversation_id: str
    messages: list[Message]


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
    """A ChatGPT export: each conversation's main branch (current_node back to the root), user and assistant
    text only, in slices of BATCH messages."""
    for conv in json.loads(path.read_text(encoding="utf-8")):
        cid = conv.get("conversation_id") or conv.get("id")
        mapping: dict[str, Any] = conv.get("mapping") or {}
        if not cid or not mapping:
            continue
        node_id = conv.get("current_node") or next(
            (k for k, v in mapping.items() if not v.get("children")), None
        )
        chain = []
        while node_id and node_id in mapping:
            chain.append(mapping[node_id])
            node_id = mapping[node_id].get("parent")
        msgs = []
        for node in reversed(chain):
            m = node.get("message") or {}
            role = (m.get("author") or {}).get("role")
            parts = (m.get("content") or {}).get("parts") or []
            text = "\n".join(p for p in parts if isinstance(p, str)).strip()
            if role not in ("user", "assistant") or not text:
                continue
            ts = m.get("create_time")
            msgs.append(
                Message(id=m.get("id") or node.get("id"), role=role, content=text,
                        created_at=datetime.fromtimestamp(ts, tz=UTC) if ts else None)
            )
        for i in range(0, len(msgs), BATCH):
            yield Batch(cid, msgs[i : i + BATCH])


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
