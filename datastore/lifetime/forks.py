"""Branches: a conversation forked after a message sees its parent's memory up to that message, copy-on-write.

A fork is a conversation of its own (its own messages, chunked and rolled up in it) whose source metadata names
its parent and fork point. It inherits the parent's chunks that end before the chunk straddling the fork point,
and holds as its own chunk the part of that straddling chunk up to the fork point, re-chunked from the parent's
messages with the same TreeBuilder as every write (its `Base`, datastore/read/lineage.py), which its own
messages then continue. What a fork sees, and how a search filtered to it reads its lineage, is the read path's
business (datastore/read/lineage.py); this room only makes forks.

Deleting a parent message removes it from the parent and every fork: a fork inherits what the parent keeps, and
the parent's forks are listed in its source metadata (`forks`) so the delete cascade rebuilds what they hold of
it (`Deleter.refresh_forks`). When the fork message itself is deleted, the fork point becomes the parent's last
message sent at or before it (by `created_at`; by position when untimed).
"""

from __future__ import annotations

import uuid
from typing import Any

from datastore.read.lineage import fork_info, fork_point, lineage
from datastore.storage import SourceRow, Storage, WriteBatch
from datastore.write.delete import Deleter
from datastore.write.instructions import USER_KEY, conversation_user
from models.lifetime import ForkResponse
from services.errors import ConflictError, NotFoundError


class Forks:
    """fork: branch a conversation after one of its (own or inherited) messages.

    deleter: builds what a fork holds of its parent (`forget_messages` with nothing to forget rebuilds a fork
    from its parent) and lists the fork in its parent's metadata (`register_fork`).
    """

    def __init__(self, storage: Storage, deleter: Deleter) -> None:
        self.storage = storage
        self.deleter = deleter

    def fork(
        self, ns: str, conversation_id: str, at_message_id: str, new_conversation_id: str | None = None
    ) -> ForkResponse:
        """Branch `conversation_id` after `at_message_id` (one of its messages or one it inherits: the branch then
        forks the ancestor that owns it). Raises NotFoundError (`conversation_id`: unknown, or a document;
        `at_message_id`: not a message the conversation sees) or ConflictError (`new_conversation_id` taken).

        The fork's own chunk, the parent's messages from the end of the last chunk it inherits up to the fork
        message, is cut and embedded here; if the embedder fails, it is left to the background indexer (the
        fork is made, and its base is its backlog)."""
        storage = self.storage
        src = storage.get_source(ns, conversation_id)
        if src is None or src.source_type != "conversation":
            raise NotFoundError(f"no conversation {conversation_id!r}", "conversation_id")
        owner = None
        for sid, _ in lineage(storage, ns, conversation_id):
            m = next((m for m in storage.messages(ns, sid) if m.id == at_message_id), None)
            if m is None:
                continue
            if sid == conversation_id or self._inherits(ns, conversation_id, sid, m.tok_offset + m.n_tokens):
                owner = (sid, m)
            break
        if owner is None:
            raise NotFoundError(
                f"{conversation_id!r} has no message {at_message_id!r} (its own or inherited)", "at_message_id"
            )
        sid, m = owner
        new_id = new_conversation_id or uuid.uuid4().hex
        if storage.get_source(ns, new_id) is not None:
            raise ConflictError(f"{new_id!r} already exists", "new_conversation_id")
        for ancestor, _ in reversed(lineage(storage, ns, sid)):  # forks made before bases: give them theirs
            if "tok_at" not in (fork_info(storage, ns, ancestor) or {"tok_at": 0}):
                self.deleter.forget_messages(ns, ancestor, set())
        fork = {
            "parent_id": sid,
            "at_message_id": m.id,
            "at_seq": m.seq,
            "at_time": m.created_at.isoformat() if m.created_at else None,
        }
        parent = storage.get_source(ns, sid)
        user = conversation_user(parent.metadata) if parent is not None else None
        metadata: dict[str, Any] = {"fork": fork, **({USER_KEY: user} if user else {})}  # the parent's user
        self.deleter.register_fork(ns, sid, new_id)  # first, so a change of the parent from now on reaches it
        try:
            storage.commit(ns, WriteBatch(source=SourceRow(new_id, "conversation", 1, metadata=metadata)), 0)
        except ConflictError as exc:
            raise ConflictError(f"{new_id!r} already exists", "new_conversation_id") from exc
        self.deleter.forget_messages(ns, new_id, set())  # its base: the parent's stream up to the fork point
        return ForkResponse(conversation_id=new_id, parent_id=sid, at_message_id=m.id)

    def _inherits(self, ns: str, conversation_id: str, ancestor: str, tok_end: int) -> bool:
        """Whether `conversation_id` sees `ancestor`'s message ending at `tok_end`."""
        child, fork = conversation_id, fork_info(self.storage, ns, conversation_id)
        while fork is not None:
            if fork["parent_id"] == ancestor:
                return tok_end <= fork_point(self.storage, ns, ancestor, fork)
            child = fork["parent_id"]
            fork = fork_info(self.storage, ns, child)
        return False
