"""The sections that take what they need, up to their share of the budget (`shares`):

1. core: the core-memory entries of the namespace and the conversation (datastore/context/core.py), most
   important first.
2. instructions: the standing instructions and preferences the user stated (datastore/lifetime/instructions.py),
   the closest to the query first; a preference only where the query comes near it (`preference_floor`, and
   `preference_ratio` of the best preference's cosine); one said
   in a recent turn, or in a short turn a memory shows whole (a turn is never cut), is read there. Those its share
   left out get the room the whole block leaves unused once the memories are in (`_widen_instructions`).
3. recent: the conversation's last messages verbatim (from the stored messages, so also ones not yet indexed),
   newest kept first, shown oldest first.

The numbers named in `backticks` are fields of the block's policy (datastore/context/policy.py `BlockPolicy`).
"""

from __future__ import annotations

import numpy as np

from datastore.context.evidence import fold
from datastore.context.render import Section
from datastore.context.state import BlockState, when
from models.context import ContextItem
from models.memory import StoredMessage
from services.chunking import SpanSentence, span_sentences


class FirstSections(BlockState):
    """Fills core, instructions and recent turns."""

    def _fill_core(self, sec: Section) -> None:
        for e in self.given.core:
            item = ContextItem(
                id=e.key,
                kind="core",
                level=0,
                text=f"{e.key}: {e.value}",
                source_id=e.conversation_id,
                start_time=e.updated_at,
                end_time=e.updated_at,
                why=f"core memory (importance {e.importance})",
                tokens=0,
            )
            sec.admit(item)

    def _fill_instructions(self, sec: Section) -> None:
        """Every instruction in force while the share holds them, the closest to the query first (cosine of
        their embeddings), then the newest; a preference only where the query comes near its topic
        (`preference_floor`, `preference_ratio`): "I prefer Bootstrap" matters to a question about CSS, not to one
        about dinner."""
        active = list(self.given.instructions)
        if not self.req.all_conversations and self.req.conversation_id is not None:  # this conversation's only
            active = [(i, v) for i, v in active if i.conversation_id == self.req.conversation_id]
        if self.vector is not None:
            q = np.asarray(self.vector, dtype=np.float32)
            active.sort(key=lambda iv: (-float(iv[1] @ q), -when(iv[0])))
        else:
            active.sort(key=lambda iv: -when(iv[0]))
        best = max(
            (float(v @ self.vector) for i, v in active if i.kind == "preference" and self.vector is not None),
            default=0.0,
        )
        for ins, vec in active:
            score = float(vec @ self.vector) if self.vector is not None else None
            if (
                ins.kind == "preference"
                and score is not None
                and score < max(self.p.preference_floor, self.p.preference_ratio * best)
            ):
                continue  # a preference matters where its topic comes up; an instruction applies to every answer
            item = ContextItem(
                id=ins.id,
                kind=ins.kind,
                level=0,
                text=ins.text,
                speaker=ins.speaker,
                source_id=ins.conversation_id,
                start_time=ins.created_at,
                end_time=ins.created_at,
                score=None if score is None else round(score, 6),
                why=f"a standing {ins.kind} stated in message {ins.message_id}",
                tokens=0,
            )
            self.instruction_ranks[ins.id] = len(self.instruction_ranks)
            if sec.admit(item):
                self._instruction_shown(ins.id, ins.text, ins.message_id)
            else:  # it may fit in the room the memories leave (`_widen_instructions`)
                self.instruction_waiting.append((item, ins.message_id))

    def _instruction_shown(self, iid: str, text: str, message_id: str | None) -> None:
        self.instruction_texts[iid] = text
        if message_id is not None:  # its sentences there are shown
            self.instruction_messages[iid] = message_id
            self.shown.quoted.setdefault(message_id, []).append(fold(text))

    def _widen_instructions(self, sec: Section, spare: int) -> set[str]:
        """The room the block leaves unused (`spare` tokens) goes to the instructions and preferences their share
        left out, the closest to the query first; one whose message a memory shows whole is read there. The section
        is then shown in its order again (the closest first). Returns the ids added. BEAM chat 13 @1000: a reading
        preference (39 tokens) missed its 198-token share by 4 tokens while the block left 44 unused."""
        added: set[str] = set()
        if spare <= 0 or not self.instruction_waiting:
            return added
        sec.budget += spare
        left_out = list(sec.left_out)
        for item, message_id in self.instruction_waiting:
            if message_id is not None and (
                message_id in self.shown.messages or self.shown.said_by_memory(message_id, item.text)
            ):
                continue
            if sec.admit(item):
                self._instruction_shown(item.id, item.text, message_id)
                added.add(item.id)
        sec.left_out = left_out  # each left out once
        if added:
            sec.reorder(lambda item: self.instruction_ranks.get(item.id, 0))
        return added

    def _fill_recent(self, sec: Section) -> None:
        """The conversation's last messages, newest kept first, each on one line (its stored sentences, a
        superseded statement marked)."""
        kept: list[tuple[StoredMessage, list[SpanSentence]]] = []
        for m in reversed(self.tail):  # newest first
            said = span_sentences(m)
            marks = self.superseded.marks(said)
            item = ContextItem(
                id=m.id,
                kind="message",
                level=0,
                text=f"{m.speaker}: " + " ".join(fold(s.text) + marks.get(s.id, "") for s in said),
                speaker=m.speaker,
                source_id=m.source_id,
                start_time=m.created_at,
                end_time=m.created_at,
                why="recent turn",
                tokens=0,
            )
            if not sec.admit(item, float(m.seq)):  # shown in the order said
                break
            kept.append((m, said))
        for m, said in kept:
            self.shown.messages.add(m.id)
            self.shown.ids |= {s.id for s in said}
