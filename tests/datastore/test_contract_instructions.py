"""The provider contract for standing instructions and preferences: found when messages are indexed (each message
once, inline or in background steps), superseded by the newest on a subject, dropped with the messages that said
them, deleted by id; the same on every provider (local, postgres, pinecone). Fixtures: tests/datastore/conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from datastore.memory import Memory
from models.api import DeleteFilter, DeleteRequest, Message, RememberRequest
from models.instructions import Instruction
from services.embedding import LocalEmbedder
from services.errors import InvalidRequestError, NotFoundError
from tests.support.embedders import FailingEmbedder
from tests.support.stores import recompose
from tests.support.synthetic import conversation

T0 = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
FRENCH = "From now on answer in French."
ENGLISH = "From now on answer in English."
# message index -> what the user says there (even indices are the user's, odd ones the assistant's)
RULES = {
    4: FRENCH,
    12: "I prefer Bootstrap over Foundation.",
    18: "Thanks, that helps. Always include version numbers when I ask about libraries. See you tomorrow.",
    26: ENGLISH,
    32: "Call me Sam.",
}
ASSISTANT_SAYS = {7: "Always use tabs for indentation."}  # the assistant states no rules for itself
STATEMENTS = [
    FRENCH,
    "I prefer Bootstrap over Foundation.",
    "Always include version numbers when I ask about libraries.",
    ENGLISH,
    "Call me Sam.",
]


def chat(n: int = 40, *, prefix: str = "m", start: datetime = T0, rules: dict[int, str] | None = None) -> list[Message]:
    """`n` synthetic messages between `user` and `assistant`, one minute apart, with RULES (or `rules`) said by
    the user and one rule-like sentence said by the assistant."""
    out = conversation(("user", "assistant"), n, start=start, prefix=prefix)
    for i, text in {**(RULES if rules is None else rules), **ASSISTANT_SAYS}.items():
        if i < n:
            out[i] = out[i].model_copy(update={"content": text})
    return out


def listed(memory: Memory, ns: str, **kw: object) -> list[Instruction]:
    return memory.instructions.list(ns, include_superseded=True, **kw).instructions  # type: ignore[arg-type]


def said(items: list[Instruction]) -> list[tuple[str | None, str | None]]:
    return [(i.statement, i.superseded_by) for i in items]


def shape(items: list[Instruction]) -> list[tuple]:
    """What an instruction list says, ids aside (they differ between namespaces): each one's statement, kind,
    provenance and the position of the one that superseded it."""
    at = {i.id: k for k, i in enumerate(items)}
    return [(i.statement, i.kind, i.message_id, i.speaker, i.created_at, at.get(i.superseded_by or "")) for i in items]


def index_in_steps(memory: Memory, ns: str, cid: str) -> int:
    """Index the conversation's backlog one chunk per step; returns the steps taken."""
    steps = 0
    while True:
        step = memory.steps.chunks(ns, cid, max_chunks=1)
        steps += 1
        if not step.more:
            return steps


def test_found_once_per_message_inline_and_in_background_steps(memory: Memory, ns: str) -> None:
    messages = chat()
    for i in range(0, 40, 15):  # inline, in three calls
        memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages[i : i + 15]))
    inline = listed(memory, ns)
    assert [i.statement for i in inline] == STATEMENTS  # oldest first; none from the assistant
    by_id = {i.id: i for i in inline}
    french, english = inline[0], inline[3]
    assert french.superseded_by == english.id and english.superseded_by is None  # the newest wins
    assert [i.kind for i in inline] == ["instruction", "preference", "instruction", "instruction", "instruction"]
    third = inline[2]  # provenance: the message, its conversation, speaker and time; the sentence said
    assert (third.message_id, third.conversation_id, third.speaker) == ("m-18", "c", "user")
    assert third.created_at == T0 + timedelta(minutes=18) and third.recorded_at is not None
    assert third.text == "Always include version numbers when I ask about libraries."
    assert len(by_id) == 5 and third.detector == "pattern"

    other = ns + "-steps"  # the same messages stored now and indexed later, one chunk per step
    memory.writer.accept(other, RememberRequest(conversation_id="c", messages=messages[:20]))
    first = index_in_steps(memory, other, "c")
    memory.writer.accept(other, RememberRequest(conversation_id="c", messages=messages[20:]))
    assert first + index_in_steps(memory, other, "c") >= 6
    stepped = listed(memory, other)
    assert shape(stepped) == shape(inline)
    assert memory.instructions.list(other).active == 4 and len(memory.instructions.list(other).instructions) == 4
    assert listed(memory, other, conversation_id="c") == stepped
    unknown = memory.instructions.list(other, conversation_id="no-such-conversation")  # empty, with a warning
    assert unknown.instructions == [] and [w.field for w in unknown.warnings] == ["conversation_id"]


def test_active_instructions_come_with_their_statements_vectors(
    memory: Memory, ns: str, embedder: LocalEmbedder
) -> None:
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=chat()))
    active = memory.instructions.active(ns)
    assert [i.statement for i, _ in active] == STATEMENTS[1:]
    expected = embedder.embed([i.statement or i.text for i, _ in active])
    for (_, vector), want in zip(active, expected, strict=True):
        assert vector.dtype == np.float32 and vector.shape == (embedder.dimension,)
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-4 and float(vector @ want) > 0.999
    assert memory.instructions.active(ns + "-empty") == []
    in_force, replaced = memory.instructions.standing(ns)  # what the context block reads: one read of both
    assert [i.id for i, _ in in_force] == [i.id for i, _ in active]
    assert [i.statement for i in replaced] == [FRENCH]  # superseded by ENGLISH
    assert memory.instructions.standing(ns + "-empty") == ([], [])


def test_the_newest_said_wins_across_conversations_whatever_the_indexing_order(memory: Memory, ns: str) -> None:
    later = [Message(id="e", speaker="user", content=ENGLISH, created_at=T0 + timedelta(days=2))]
    memory.writer.remember(ns, RememberRequest(conversation_id="new-chat", messages=later))
    earlier = [Message(id="f", speaker="user", content=FRENCH, created_at=T0)]  # an old chat, imported later
    memory.writer.remember(ns, RememberRequest(conversation_id="old-chat", messages=earlier))
    items = listed(memory, ns)
    assert said(items) == [(FRENCH, items[1].id), (ENGLISH, None)]
    newer = [
        Message(id="g", speaker="user", content="From now on answer in German.", created_at=T0 + timedelta(days=3))
    ]
    memory.writer.remember(ns, RememberRequest(conversation_id="new-chat", messages=newer))
    items = listed(memory, ns)
    assert said(items) == [(FRENCH, items[1].id), (ENGLISH, items[2].id), ("From now on answer in German.", None)]
    someone = [
        Message(id="h", speaker="Bob", content="From now on answer in Spanish.", created_at=T0 + timedelta(days=4))
    ]
    memory.writer.remember(ns, RememberRequest(conversation_id="new-chat", messages=someone))
    assert listed(memory, ns)[2].superseded_by is None  # another speaker's rule replaces nobody else's


def test_forgetting_messages_removes_their_instructions_and_brings_back_what_they_replaced(
    memory: Memory, ns: str
) -> None:
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=chat()))
    memory.writer.remember(
        ns,
        RememberRequest(
            conversation_id="d",
            messages=chat(
                12,
                prefix="d",
                start=T0 + timedelta(days=1),
                rules={2: "From now on answer in German.", 6: "Stop using emojis."},
            ),
        ),
    )
    german = listed(memory, ns)[-2]
    assert said(listed(memory, ns, conversation_id="c"))[3] == (ENGLISH, german.id)  # c's English, then d's German

    memory.deleter.delete(ns, DeleteRequest(ids=["d-2"], conversation_id="d"))  # forget the German message
    items = listed(memory, ns)
    assert german.id not in {i.id for i in items}
    assert said(items)[:4] == [(FRENCH, items[3].id), *said(items)[1:3], (ENGLISH, None)]  # English again in force

    memory.deleter.delete(ns, DeleteRequest(ids=["m-26"]))  # forget the English message: French holds again
    assert said(listed(memory, ns))[0] == (FRENCH, None)
    memory.deleter.delete(ns, DeleteRequest(filter=DeleteFilter(conversation_id="c", speaker="user")))
    assert [i.conversation_id for i in listed(memory, ns)] == ["d"]  # a filter's messages go with theirs
    memory.deleter.delete(ns, DeleteRequest(ids=["d"]))  # a whole conversation
    assert listed(memory, ns) == []

    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=chat()))
    memory.writer.remember(ns + "-other", RememberRequest(conversation_id="c", messages=chat()))
    memory.deleter.delete(ns, DeleteRequest(delete_all=True))  # the namespace, and only it
    assert listed(memory, ns) == [] and len(listed(memory, ns + "-other")) == 5


def test_delete_by_id_reactivates_and_another_namespaces_id_is_not_found(memory: Memory, ns: str) -> None:
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=chat()))
    other = ns + "-other"
    memory.writer.remember(other, RememberRequest(conversation_id="c", messages=chat(rules={4: "Call me Kim."})))
    french, english = listed(memory, ns)[0], listed(memory, ns)[3]
    theirs = listed(memory, other)
    for space, unknown in ((ns, "in_nope"), (ns, theirs[0].id), (other, english.id)):
        with pytest.raises(NotFoundError) as err:
            memory.instructions.delete(space, unknown)
        assert err.value.field == "id" and unknown in err.value.message
    assert listed(memory, other) == theirs and len(listed(memory, ns)) == 5  # nothing changed anywhere

    res = memory.instructions.delete(ns, english.id)
    assert res.deleted == english.id and res.reactivated == [french.id]
    assert said(listed(memory, ns))[0] == (FRENCH, None) and english.id not in {i.id for i in listed(memory, ns)}
    assert [m.id for m in memory.storage.messages(ns, "c") if m.id == "m-26"] == ["m-26"]  # its message stays
    assert memory.instructions.delete(ns, french.id).reactivated == []
    assert memory.instructions.list(ns).active == 3


def test_forgetting_by_policy_removes_the_instructions_of_what_it_forgets(
    open_store: Callable[..., Memory], ns: str
) -> None:
    memory = open_store(forget_after_days=1.5)
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=chat()))  # day 0
    memory.writer.remember(
        ns,
        RememberRequest(
            conversation_id="c",
            messages=chat(8, prefix="n", start=T0 + timedelta(days=3), rules={2: "From now on answer in German."}),
        ),
    )
    assert said(listed(memory, ns))[3] == (ENGLISH, listed(memory, ns)[5].id)
    done = memory.policy.run(ns, dry_run=False, now=T0 + timedelta(days=3, hours=1))
    assert done.deleted_messages > 0
    left = {m.id for m in memory.storage.messages(ns, "c")}
    items = listed(memory, ns)
    assert all(i.message_id in left for i in items)
    assert said(items)[-1] == ("From now on answer in German.", None)
    assert not {i.message_id for i in items} & {f"m-{i}" for i in RULES} - left


def test_a_delete_reads_the_kept_messages_no_chunk_had_covered_and_nothing_twice(memory: Memory, ns: str) -> None:
    memory.writer.accept(ns, RememberRequest(conversation_id="c", messages=chat()))  # stored, not indexed
    assert listed(memory, ns) == []
    memory.deleter.delete(ns, DeleteRequest(ids=["m-0"]))  # the rebuild covers every kept message at once
    assert [i.statement for i in listed(memory, ns)] == STATEMENTS
    memory.steps.backlog()
    assert [i.statement for i in listed(memory, ns)] == STATEMENTS


def test_a_delete_whose_rebuild_fails_keeps_the_instructions_once(
    memory: Memory, ns: str, embedder: LocalEmbedder
) -> None:
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=chat()))
    before = listed(memory, ns)
    failing = recompose(memory, embedder=FailingEmbedder(embedder))
    failing.deleter.delete(ns, DeleteRequest(ids=["m-33"]))  # the tree goes now, rebuilt later
    assert memory.storage.source_nodes(ns, "c") == [] and listed(memory, ns) == before
    memory.steps.backlog()  # every kept message is covered again by the background steps
    assert listed(memory, ns) == before and memory.storage.source_nodes(ns, "c")


def test_documents_state_no_instructions(memory: Memory, ns: str) -> None:
    from models.api import Document

    memory.writer.upsert(ns, [Document(id="handbook", text="Always wear a helmet. From now on answer in French.")])
    assert listed(memory, ns) == []


# A LoCoMo-style chat between two people (no assistant): Gina encourages, Jon states a diet he wants kept.
ENCOURAGEMENT = "And remember, I'm always here for you."
VEGETARIAN = "I'm vegetarian, keep that in mind."


def people_chat(n: int = 40) -> list[Message]:
    """`n` messages between Jon (even indices) and Gina (odd ones), one minute apart: Gina's encouragement at 9
    and 25, Jon's diet at 14, his advice to her at 20."""
    out = conversation(("Jon", "Gina"), n, start=T0, prefix="m")
    says = {9: ENCOURAGEMENT, 14: VEGETARIAN, 20: "Always keep treats in your pocket at the park.", 25: ENCOURAGEMENT}
    for i, text in says.items():
        if i < n:
            out[i] = out[i].model_copy(update={"content": text})
    return out


def test_a_chat_between_people_states_nothing_without_its_user(memory: Memory, ns: str) -> None:
    """Neither side's encouragement nor preference is the user's when nobody said whose memory it is: inline, in
    background steps, and in a delete's rebuild."""
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=people_chat()))
    assert listed(memory, ns) == []
    memory.writer.accept(ns + "-steps", RememberRequest(conversation_id="c", messages=people_chat()))
    index_in_steps(memory, ns + "-steps", "c")
    assert listed(memory, ns + "-steps") == []
    memory.writer.accept(ns + "-rebuild", RememberRequest(conversation_id="c", messages=people_chat()))
    memory.deleter.delete(ns + "-rebuild", DeleteRequest(ids=["m-0"]))
    assert listed(memory, ns + "-rebuild") == []


def test_a_chat_between_people_keeps_only_its_users_preferences(memory: Memory, ns: str) -> None:
    """With `user` Jon: his diet, not Gina's encouragement, nor his advice to her; the same inline, in steps, in
    a delete's rebuild, and when only the conversation's first call named the user."""
    messages = people_chat()
    jon = [(VEGETARIAN, "preference", "m-14", "Jon")]

    def kept(space: str) -> list[tuple[str | None, str, str | None, str | None]]:
        return [(i.statement, i.kind, i.message_id, i.speaker) for i in listed(memory, space)]

    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages[:10], user="Jon"))
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages[10:]))  # the user is kept
    assert kept(ns) == jon
    memory.writer.accept(ns + "-steps", RememberRequest(conversation_id="c", messages=messages, user="Jon"))
    index_in_steps(memory, ns + "-steps", "c")
    assert kept(ns + "-steps") == jon
    memory.writer.accept(ns + "-rebuild", RememberRequest(conversation_id="c", messages=messages, user="jon"))
    memory.deleter.delete(ns + "-rebuild", DeleteRequest(ids=["m-0"]))  # the rebuild reads every kept message
    assert kept(ns + "-rebuild") == jon
    memory.writer.remember(ns + "-gina", RememberRequest(conversation_id="c", messages=messages, user="Gina"))
    assert listed(memory, ns + "-gina") == []  # never Jon's diet, nor her encouragement to him, in Gina's memory


def test_a_conversations_user_cannot_change(memory: Memory, ns: str) -> None:
    messages = people_chat(6)
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages[:3], user="Jon"))
    with pytest.raises(InvalidRequestError) as caught:
        memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages[3:], user="Gina"))
    assert caught.value.field == "user"
    assert memory.storage.get_source(ns, "c").n_messages == 3  # type: ignore[union-attr]
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages[3:], user="JON"))


def test_a_fork_keeps_its_parents_user(memory: Memory, ns: str) -> None:
    messages = people_chat()
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages[:10], user="Jon"))
    memory.forks.fork(ns, "c", "m-5", "f")
    own = [m.model_copy(update={"id": "f" + (m.id or "")}) for m in messages[10:]]
    memory.writer.remember(ns, RememberRequest(conversation_id="f", messages=own))
    assert [(i.conversation_id, i.message_id, i.speaker) for i in listed(memory, ns)] == [("f", "fm-14", "Jon")]
