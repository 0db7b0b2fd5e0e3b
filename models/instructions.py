"""Standing instructions and preferences stated in chat messages (services/instructions.py finds them).

A `Detected` is what a detector returns for one sentence of one message, before storage gives it an id; an
`Instruction` is the stored form, which a later statement on the same subject can supersede. `InstructionsQuery`,
`InstructionList` and `InstructionDeleteResponse` are what GET and DELETE /instructions take and answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from models.api import NAMESPACE_PATTERN, WARNINGS_DESCRIPTION, Message, RequestWarning

InstructionKind = Literal["instruction", "preference"]
"""instruction: a rule for the assistant's future behaviour; preference: a durable taste or constraint."""

_TEXT = "The sentence as the user said it, trimmed."
_STATEMENT = "The part of the sentence that states it (the clause), trimmed; the whole sentence when it is one clause."
_KIND = "instruction (a rule for the assistant's future answers) or preference (a durable taste or constraint)."
_SUBJECT = (
    "Short normalised key of what it is about (lowercase stems of its content words, or a model's 1-4 word "
    "subject), e.g. 'answer' for 'From now on answer in French'."
)
_DETECTOR = "What found it: `pattern` (the offline rules) or `openai:<model>`."


class Detected(BaseModel):
    """One standing instruction or preference found in one message (no id yet, nothing stored)."""

    text: str = Field(description=_TEXT)
    statement: str = Field(description=_STATEMENT)
    kind: InstructionKind = Field(description=_KIND)
    subject: str = Field(description=_SUBJECT)
    message_id: str | None = Field(default=None, description="Id of the message it was said in.")
    conversation_id: str | None = Field(default=None, description="Conversation of that message.")
    speaker: str = Field(description="Who said it (the message's speaker or role).")
    created_at: datetime | None = Field(default=None, description="When the message was sent, if known.")
    start: int | None = Field(
        default=None, ge=0, description="Character offset of the sentence in the message content; null if unknown."
    )
    end: int | None = Field(
        default=None, ge=0, description="Offset just past the sentence's last character; null if unknown."
    )
    detector: str = Field(default="pattern", description=_DETECTOR)
    rule: str | None = Field(default=None, description="Name of the pattern that matched (pattern detector only).")

    @classmethod
    def of(  # noqa: PLR0913 (each part of a detection, named at the call)
        cls,
        message: Message,
        conversation_id: str | None,
        start: int,
        end: int,
        *,
        statement: str,
        kind: InstructionKind,
        subject: str,
        detector: str,
        rule: str | None = None,
    ) -> Detected:
        """The detection of the sentence `message.content[start:end]` (character offsets) that states
        `statement`: its text the sentence stripped, its speaker and time the message's. What every detector
        builds (services/instructions.py, services/instruction_classifier.py)."""
        return cls(
            text=message.content[start:end].strip(),
            statement=statement,
            kind=kind,
            subject=subject,
            message_id=message.id,
            conversation_id=conversation_id,
            speaker=message.who,
            created_at=message.created_at,
            start=start,
            end=end,
            detector=detector,
            rule=rule,
        )

    def to_instruction(self, id: str) -> Instruction:  # noqa: A002 - the field is called id
        """This detection stored as the Instruction `id` (not superseded)."""
        return Instruction(id=id, **self.model_dump(exclude={"start", "end", "rule"}))


class Instruction(BaseModel):
    """A stored standing instruction or preference; `superseded_by` names the later one that replaced it."""

    id: str = Field(description="Id of the instruction.")
    text: str = Field(description=_TEXT)
    statement: str | None = Field(default=None, description=_STATEMENT)
    kind: InstructionKind = Field(description=_KIND)
    subject: str = Field(description=_SUBJECT)
    message_id: str | None = Field(default=None, description="Id of the message it was said in.")
    conversation_id: str | None = Field(default=None, description="Conversation of that message.")
    speaker: str = Field(description="Who said it.")
    created_at: datetime | None = Field(default=None, description="When it was said, if known.")
    superseded_by: str | None = Field(
        default=None, description="Id of the later instruction on the same subject that replaced it; null: in force."
    )
    detector: str = Field(default="pattern", description=_DETECTOR)
    recorded_at: datetime | None = Field(
        default=None, description="ISO 8601 UTC time Pyramind stored it (when the message was indexed)."
    )


class InstructionsQuery(BaseModel):
    """Query string of GET /instructions."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: str | None = Field(
        default=None, min_length=1, max_length=256, description="Only those said in this conversation."
    )
    include_superseded: bool = Field(
        default=False, description="true: also those a later one on the same subject replaced."
    )
    namespace: str | None = Field(default=None, pattern=NAMESPACE_PATTERN, description="Static-token callers only.")


class InstructionRef(BaseModel):
    """An instruction named by id (DELETE /instructions/{id}; the MCP `instructions_delete` tool's arguments)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=256, description="An instruction id, from GET /instructions.")
    namespace: str | None = Field(default=None, pattern=NAMESPACE_PATTERN, description="Static-token callers only.")


class InstructionList(BaseModel):
    """The standing instructions and preferences of a namespace (or of one conversation), oldest first."""

    instructions: list[Instruction] = Field(
        description="Oldest first (by when said: the message's time, else when stored); superseded ones only "
        "when asked for."
    )
    active: int = Field(description="How many of them are in force (superseded_by null).")
    warnings: list[RequestWarning] = Field(default_factory=list, description=WARNINGS_DESCRIPTION)


class InstructionDeleteResponse(BaseModel):
    """What deleting an instruction did."""

    deleted: str = Field(description="Id of the instruction deleted.")
    reactivated: list[str] = Field(
        description="Ids of older instructions it had superseded that are in force again (none later replaced them)."
    )
