"""Standing instructions and preferences, as the API and the context block see them: list, delete, and the ones in
force with their vectors.

They are found and superseded while messages are indexed, and dropped with the messages that stated them
(datastore/write/instructions.py); this service only reads them and deletes one on request. They live here,
beside visits, pins and forks, because they are memory that outlives the conversation it was said in: a rule
stated once holds in every later conversation of the namespace until a later one on its subject replaces it.
Kept in the storage's `instructions` table (the optional capability; without it, list and delete answer 501
and the context block has none).
"""

from __future__ import annotations

import builtins

import numpy as np

from datastore.storage import InstructionTable, Storage
from datastore.write.instructions import InstructionKeeper
from models.api import unknown_conversation
from models.instructions import Instruction, InstructionDeleteResponse, InstructionList
from services.errors import NotFoundError, UnsupportedError


class Instructions:
    """list, delete, active: the namespace's standing instructions.

    storage: its `instructions` capability (and `get_source`, to check a conversation filter). keeper: the
    namespace lock and the supersession a removal implies (the same as forgetting a message).
    """

    def __init__(self, storage: Storage, keeper: InstructionKeeper) -> None:
        self.storage = storage
        self.table: InstructionTable | None = storage.instructions
        self.keeper = keeper

    def _table(self) -> InstructionTable:
        if self.table is None:
            raise UnsupportedError(f"standing instructions are not supported by the {self.storage.name} store")
        return self.table

    def list(self, ns: str, conversation_id: str | None = None, include_superseded: bool = False) -> InstructionList:
        """The namespace's standing instructions and preferences (those said in `conversation_id` only, when
        given), oldest first, each with its provenance (message_id, conversation_id, speaker, created_at) and
        kind; superseded ones too when `include_superseded`. A conversation the namespace does not hold lists
        none, with an `unknown_conversation` warning. Raises UnsupportedError on a store without the capability."""
        table = self._table()
        if conversation_id is not None and self.storage.get_source(ns, conversation_id) is None:
            warning = unknown_conversation(conversation_id, "conversation_id")
            return InstructionList(instructions=[], active=0, warnings=[warning])
        entries = table.entries(ns, conversation_id, include_superseded)
        return InstructionList(instructions=entries, active=sum(1 for i in entries if i.superseded_by is None))

    def delete(self, ns: str, id: str) -> InstructionDeleteResponse:  # noqa: A002 - the API's name for it
        """Delete one instruction of the namespace (its message stays). The older ones it had superseded point
        at the next later one on their subject, or are in force again (`reactivated`). Raises NotFoundError
        (`id`) for an id the namespace does not hold (another namespace's included): nothing changes then;
        UnsupportedError on a store without the capability."""
        table = self._table()
        with self.keeper.lock(ns):
            if not table.get(ns, [id]):
                raise NotFoundError(f"no instruction {id!r} in this namespace", "id")
            stored = table.entries(ns, include_superseded=True)
            puts = self.keeper.change(ns, stored, {id})
            table.write(ns, puts, [id])
        return InstructionDeleteResponse(
            deleted=id,
            reactivated=[i.id for i, _ in puts if i.superseded_by is None],
        )

    def active(self, ns: str) -> builtins.list[tuple[Instruction, np.ndarray]]:  # `list` is a method here
        """The instructions in force, oldest first, each with the embedding of its statement (float32,
        (dimension,), L2-normalised): what the context block shows. [] on a store without the capability."""
        return self.standing(ns)[0]

    def standing(self, ns: str) -> tuple[builtins.list[tuple[Instruction, np.ndarray]], builtins.list[Instruction]]:
        """In one read of the table (and one of their vectors when any is in force): the instructions in force
        with their embeddings (`active`), and those a later one replaced (superseded_by another: not a revocation,
        which points at itself), oldest first: what the context block marks where a memory shows it. ([], []) on a
        store without the capability."""
        if self.table is None:
            return [], []
        entries = self.table.entries(ns, include_superseded=True)
        active = [i for i in entries if i.superseded_by is None]
        vectors = self.table.vectors(ns, [i.id for i in active]) if active else {}  # none in force: no read
        replaced = [i for i in entries if i.superseded_by is not None and i.superseded_by != i.id]
        return [(i, vectors[i.id]) for i in active if i.id in vectors], replaced
