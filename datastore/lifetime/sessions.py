"""Sessions of a conversation, as the store holds them: each message's `session_id` and each node's
`session_ids` (assigned at remember time by services/sessions.py)."""

from __future__ import annotations

from typing import Any

from datastore.storage import Storage
from models.lifetime import SessionInfo
from models.memory import MemoryNode
from services.errors import NotFoundError


class Sessions:
    """list: a conversation's sessions with time range, message count and summarising nodes."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def of_conversation(self, ns: str, conversation_id: str) -> list[SessionInfo]:
        """The conversation's sessions in order of their first message.

        `summary_ids` names the highest nodes that cover this session only (a node none of whose ancestors does
        too), in level-then-position order; a session too short to own a chunk gets the chunks holding it.
        Raises NotFoundError (field `conversation_id`) for an unknown conversation or a document id.
        """
        src = self.storage.get_source(ns, conversation_id)
        if src is None or src.source_type != "conversation":
            raise NotFoundError(f"no conversation {conversation_id!r}", "conversation_id")
        messages = self.storage.messages(ns, conversation_id)
        nodes = [n for n in self.storage.source_nodes(ns, conversation_id) if n.level >= 1]  # lines: no summary
        by_id = {n.id: n for n in nodes}
        groups: dict[str, list[Any]] = {}
        for m in messages:
            groups.setdefault(m.session_id or "", []).append(m)
        out = []
        for sid, msgs in groups.items():
            times = [m.created_at for m in msgs if m.created_at is not None]
            out.append(
                SessionInfo(
                    session_id=sid,
                    start_time=min(times) if times else None,
                    end_time=max(times) if times else None,
                    message_count=len(msgs),
                    first_message_id=msgs[0].id,
                    last_message_id=msgs[-1].id,
                    summary_ids=_summarising(sid, nodes, by_id),
                )
            )
        return out


def _summarising(session: str, nodes: list[MemoryNode], by_id: dict[str, MemoryNode]) -> list[str]:
    own = {n.id for n in nodes if n.session_ids == [session]}
    top = [n for n in nodes if n.id in own and not (n.parent_id and n.parent_id in own)]
    if top:
        return [n.id for n in sorted(top, key=lambda n: (-n.level, n.position))]
    return [n.id for n in nodes if n.level == 1 and session in n.session_ids]
