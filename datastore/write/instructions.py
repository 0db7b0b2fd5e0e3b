"""Standing instructions kept in step with the messages: found when messages are indexed, dropped when they are
forgotten, superseded by later ones on the same subject. What every writer of the pipeline shares.

Where each part runs (one rule for every path, and for every provider):

- detect: `IndexSteps.chunks` (background) and `Writer.extend` (inline remember, the CLI importer) hand over the
  messages a step newly covers: those whose rendered tokens end within what the step newly chunked, i.e. in
  (the source's last L1 end before the step, the last new chunk's end]. A source's chunks only grow, so every
  message's end falls in exactly one step's window: each message is read by the detector once. Only
  conversations are read (a document's author states no rules for the assistant); the detector itself skips
  the assistant's and the machinery's messages, and in a chat between people keeps only the preferences of the
  conversation's `user` (its source metadata, `conversation_user`; each path passes it to `detect`). A rebuild
  after a delete keeps the instructions of the kept messages and detects the kept messages no chunk had covered
  yet (`Deleter.forget_messages`).
- deferred: a detector that calls a model (`Detector.calls_model`, seconds a call) is not waited on by the chunk
  step. The chunk step commits its chunks with the source metadata's `unread_from` mark (UNREAD_KEY, a token
  offset: the chunked messages ending past it are not read yet; a step lowers it to its window's start, never
  raises it), and `IndexSteps.detect`, in the summary lane, reads the messages ending in (mark, L1 end],
  a bounded window a step, and commits what it found with the mark moved past them (removed when all are
  read). The mark lives in the source row, so a restart finds it (`IndexSteps.unread`); a delete's rebuild
  reads the kept messages past it and removes it.
- settle: under the namespace's instruction lock, inside the source's lock, just before the step's commit: the
  new instructions are merged with the stored ones in force, oldest first (`said_order`), and the Superseder
  (services/instructions.py) marks each one a later one on its subject replaces, with the stored embeddings (no
  model call). The new ones and the stored ones whose `superseded_by` changed go into the step's WriteBatch, so
  chunks and instructions are committed together. A message that already holds an instruction is never read
  again (an idempotence guard: after a delete whose rebuild failed on the embedder, the whole source is indexed
  again from its first message).
- removal: forgetting messages (a delete, a conversation, the forgetting policy) drops the instructions they
  stated in the same batch as the messages; one deleted by id goes through `InstructionTable.write`. An older
  instruction that a removed one had superseded points at the next kept one along its chain, or is in force again,
  and the ones in force are settled again among themselves.

The namespace lock (`SourceLocks` key "\\x00instructions") serialises, within this process, everything that reads
the stored instructions and writes a change computed from them; the source lock is always taken first. Two
processes indexing two conversations of one namespace at the same instant may each miss the other's new
instruction on the same subject (both stay in force until the next one on it); nothing is lost.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from datastore.locks import SourceLocks
from datastore.storage import InstructionTable, Storage
from models.api import Message
from models.instructions import Instruction
from models.memory import SourceType, StoredMessage
from services.embedding import Embedder
from services.instructions import Detector, Superseder, after_removal, owned, people_only, said, said_order
from services.speakers import is_human

log = logging.getLogger(__name__)

MAX_INSTRUCTION_CHARS = 2000
"""A sentence longer than this is not kept as a standing instruction (a run-on paste, not a rule; and it must fit
one Pinecone record's metadata)."""
LOCK_KEY = "\x00instructions"
UNREAD_KEY = "unread_from"
"""Source metadata key: the token offset past which chunked messages are not yet read by a deferred detector."""
USER_KEY = "user"
"""Source metadata key: the conversation's `user`, the speaker whose memory it is (`conversation_user`)."""

Put = tuple[Instruction, np.ndarray | None]


def instruction_id(ns: str, source_id: str, message_id: str, n: int) -> str:
    """The id of the n-th (0-based) instruction found in a message: `in_` and 20 hex characters of a hash of
    (namespace, conversation id, message id, n), so the same statement found twice gets the same id, and no
    other namespace's."""
    digest = hashlib.blake2b(f"{ns}\n{source_id}\n{message_id}\n{n}".encode(), digest_size=10).hexdigest()
    return f"in_{digest}"


def newly_covered(messages: Sequence[StoredMessage], chunked_to: int, new_end: int) -> list[StoredMessage]:
    """The messages whose rendered tokens end in (chunked_to, new_end]: those a chunk step covers for the first
    time (see the module docstring)."""
    return [m for m in messages if chunked_to < m.tok_offset + m.n_tokens <= new_end]


def unread_from(metadata: dict[str, Any]) -> int | None:
    """The source's `unread_from` mark (see the module docstring), or None when every chunked message is read."""
    mark = metadata.get(UNREAD_KEY)
    return int(mark) if mark is not None else None


def conversation_user(metadata: dict[str, Any]) -> str | None:
    """The conversation's `user` (source metadata USER_KEY, set by RememberRequest.user): the speaker whose memory
    it is, whose preferences alone are kept in a chat between people; None when not set."""
    user = metadata.get(USER_KEY)
    return str(user) if user else None


def with_unread(metadata: dict[str, Any], mark: int | None) -> dict[str, Any]:
    """Source metadata with the `unread_from` mark set to `mark` (removed when None)."""
    out = {k: v for k, v in metadata.items() if k != UNREAD_KEY}
    return out if mark is None else {**out, UNREAD_KEY: mark}


class InstructionKeeper:
    """detect, settle, forget and change: standing instructions kept with the writes of Writer, IndexSteps,
    Deleter and the Instructions service.

    storage: its `instructions` capability (None: nothing is detected or kept). detector: finds instructions in
    messages (services/instructions.py, `make_detector`). embedder: the Superseder's, only used for instructions
    without a stored vector (none in practice: every instruction is stored with its embedding). locks: the
    writers' locks (this keeper's namespace lock is one of them).
    """

    def __init__(self, storage: Storage, detector: Detector, embedder: Embedder, locks: SourceLocks) -> None:
        self.storage = storage
        self.table: InstructionTable | None = storage.instructions
        self.detector = detector
        self.embedder = embedder
        self.superseder = Superseder(embedder)
        self.locks = locks

    @property
    def deferred(self) -> bool:
        """Whether messages are read after their chunks are committed (a detector that calls a model), by
        `IndexSteps.detect` in the summary lane, rather than in the step that chunks them."""
        return self.table is not None and self.detector.calls_model

    def lock(self, ns: str, needed: bool = True) -> AbstractContextManager[object]:
        """The namespace's instruction lock (take it inside a source lock), or a no-op when not `needed` (a step
        that found nothing need not serialise with the namespace's other writers)."""
        if not needed or self.table is None:
            return nullcontext()
        return self.locks(ns, LOCK_KEY)

    def detect(
        self,
        ns: str,
        source_type: SourceType,
        source_id: str,
        messages: Sequence[StoredMessage],
        user: str | None = None,
    ) -> list[Instruction]:
        """The instructions stated in `messages` (in order; the caller passes those newly covered), with ids and
        `recorded_at` (now, a microsecond apart in the order said); [] for a document or without the capability.
        user: the conversation's `user` (`conversation_user` of its source metadata), the speaker whose memory it
        is. In a chat between people (these messages' speakers and those of the stored nodes at the
        conversation's frontier: two or more people, no assistant) only the preferences `user` stated, none
        without one (services/instructions.owned): advice, encouragement or plans one person tells another are
        no rule for the assistant, nor the user's preference. A chat with an assistant: every statement of its
        people, `user` or not.
        A detector that raises is logged and finds nothing: it never stops indexing."""
        if self.table is None or source_type != "conversation" or not messages:
            return []
        spoken = [
            Message.model_construct(
                id=m.id, speaker=m.speaker, role=None, content=m.content, created_at=m.created_at, session_id=None
            )
            for m in messages
        ]
        try:
            found = self.detector.detect(spoken, source_id, user)
        except Exception:
            log.exception("instruction detection failed on %d messages of %r; none kept", len(spoken), source_id)
            return []
        if found and self._between_people(ns, source_id, messages):  # the stored speakers may say so, not these
            found = owned(found, True, user)
        now = datetime.now(UTC)
        out: list[Instruction] = []
        per_message: dict[str, int] = {}
        for d in found:
            if d.message_id is None or len(d.text) > MAX_INSTRUCTION_CHARS:
                continue
            n = per_message[d.message_id] = per_message.get(d.message_id, -1) + 1
            instruction = d.to_instruction(instruction_id(ns, source_id, d.message_id, n))
            instruction.recorded_at = now + timedelta(microseconds=len(out))
            out.append(instruction)
        return out

    def _between_people(self, ns: str, source_id: str, messages: Sequence[StoredMessage]) -> bool:
        """Whether the conversation is a chat between people (services/instructions.people_only): the speakers of
        these messages and of the stored nodes at its frontier (the last node of each level covers the most)."""
        speakers = {m.speaker for m in messages}
        if any(not is_human(s) for s in speakers):
            return False
        try:
            speakers |= {s for n in self.storage.frontier(ns, source_id) for s in n.speakers}
        except Exception:  # a store that cannot answer: judge by these messages alone
            log.exception("could not read the speakers of %r", source_id)
        return people_only(speakers)

    def settle(self, ns: str, found: Sequence[Instruction], vectors: np.ndarray) -> list[Put]:
        """What a commit writes for newly `found` instructions (`vectors`: their statements' embeddings, float32,
        (len(found), dimension), in order): those not already held (by id, or by their message), with their
        vectors, and every stored one that a new one supersedes, without. Call under `lock(ns)`."""
        if self.table is None or not found:
            return []
        return self.change(ns, self.table.entries(ns, include_superseded=True), set(), found, vectors)

    def forget(
        self,
        ns: str,
        source_id: str,
        message_ids: set[str] | None,
        found: Sequence[Instruction] = (),
        vectors: np.ndarray | None = None,
    ) -> tuple[list[Put], list[str]]:
        """(puts, drops) of a commit that forgets these messages of a source (all of it when None): the
        instructions said in them are dropped (see `change` for the rest), and `found` ones (of kept messages a
        rebuild covers for the first time, with their `vectors`) settled. Call under `lock(ns)`."""
        if self.table is None:
            return [], []
        stored = self.table.entries(ns, include_superseded=True)
        gone = {
            i.id
            for i in stored
            if i.conversation_id == source_id and (message_ids is None or i.message_id in message_ids)
        }
        return self.change(ns, stored, gone, found, vectors), sorted(gone)

    def change(
        self,
        ns: str,
        stored: Sequence[Instruction],
        gone: set[str],
        found: Sequence[Instruction] = (),
        vectors: np.ndarray | None = None,
    ) -> list[Put]:
        """The puts that removing the instructions `gone` and adding `found` (with `vectors`) imply. `stored`:
        every instruction of the namespace, superseded ones too. A kept one that a removed one superseded points
        at the next kept one along its chain, or is in force again (`after_removal`); a found one already held
        (by id, or by its message) is left out; then the ones in force and the new ones are settled, oldest
        first. Call under `lock(ns)`."""
        repoint = after_removal(stored, gone) if gone else {}
        changed = {i.id: i.model_copy(update={"superseded_by": repoint[i.id]}) for i in stored if i.id in repoint}
        kept = [changed.get(i.id, i) for i in stored if i.id not in gone]
        held_ids = {i.id for i in kept}
        held_messages = {(i.conversation_id, i.message_id) for i in kept}
        new = {
            i.id: (i, vectors[k])
            for k, i in enumerate(found)
            if vectors is not None and i.id not in held_ids and (i.conversation_id, i.message_id) not in held_messages
        }
        if not changed and not new:
            return []
        return self._resettle(ns, [i for i in kept if i.superseded_by is None], new, changed)

    def _resettle(
        self,
        ns: str,
        in_force: list[Instruction],
        new: dict[str, tuple[Instruction, np.ndarray]],
        changed: dict[str, Instruction],
    ) -> list[Put]:
        """Supersession over the stored instructions in force (`in_force`, as they will be after `changed`) and
        the `new` ones with their vectors, oldest first, with the stored vectors. Puts: every `changed` one and
        every stored one in force that a later one now replaces (without vectors), and the new ones (with)."""
        assert self.table is not None
        vectors = self.table.vectors(ns, [i.id for i in in_force])
        missing = [i for i in in_force if i.id not in vectors]
        if missing:  # stored without a vector (a provider lost it): embed their statements again
            vectors.update(zip([i.id for i in missing], self.embedder.embed([said(i) for i in missing]), strict=True))
        vectors.update({i: v for i, (_, v) in new.items()})
        items = sorted([*in_force, *(i for i, _ in new.values())], key=said_order)
        if not items:
            return [(i, None) for i in changed.values()]
        fresh = {*new, *(i for i, c in changed.items() if c.superseded_by is None)}
        settled = self.superseder.settle(items, np.stack([vectors[i.id] for i in items]), fresh)
        puts: dict[str, Put] = {i.id: (i, None) for i in changed.values()}
        for i in settled:
            if i.id in new:
                puts[i.id] = (i, new[i.id][1])
            elif i.superseded_by is not None:  # was in force, now replaced by a later one
                puts[i.id] = (i, None)
        return list(puts.values())
