"""The relevance floor of the context block (datastore/read/ranking.py `Floor`): a memory that shares only a common
word with the query is not shown as relevant, a namespace of several conversations asked without one draws from
the conversation the query is about, and a query no memory passes gets one line saying so."""

from __future__ import annotations

from datetime import timedelta

from datastore.memory import Memory
from models.api import Message, RememberRequest
from models.context import NOTHING, ContextRequest
from tests.support.synthetic import LONG_NOW


def _remember(memory: Memory) -> None:
    """A personal chat about a December trip, and a chat between two dancers, in one namespace."""
    at = LONG_NOW - timedelta(days=20)
    trip = [
        ("user", "In December I am flying to Oslo to see my sister and her two kids."),
        ("assistant", "That sounds lovely. Oslo in December is dark but the Christmas markets are beautiful."),
        ("user", "My sister loves knitting and her kids are crazy about dinosaurs."),
    ]
    dance = [
        ("Maria", "I had an idea for our routine: we could bring back the spin from last year's show."),
        ("Luis", "Great idea! Bring your red shoes to rehearsal on Thursday, the floor is slippery."),
        ("Maria", "Sure. The choreographer wants the tango section twice as fast now."),
    ]
    for cid, turns in (("trip", trip), ("dance", dance)):
        memory.writer.remember(
            "ns",
            RememberRequest(
                conversation_id=cid,
                messages=[
                    Message(id=f"{cid}{i}", speaker=who, content=text, created_at=at + timedelta(minutes=i))
                    for i, (who, text) in enumerate(turns)
                ],
            ),
        )


def test_a_memory_sharing_only_common_words_is_not_relevant(local_memory: Memory) -> None:
    _remember(local_memory)
    res = local_memory.context.assemble(
        "ns", ContextRequest(query="Any ideas for a gift to bring on my December trip?", recent=False, now=LONG_NOW)
    )
    shown = {i.source_id for s in res.sections if s.name in ("relevant", "timeline") for i in s.items}
    assert shown == {"trip"}, res.context
    assert "Oslo" in res.context and "tango" not in res.context


def test_a_query_no_memory_passes_gets_one_line(local_memory: Memory) -> None:
    _remember(local_memory)
    for cid in (None, "trip"):
        res = local_memory.context.assemble(
            "ns",
            ContextRequest(
                conversation_id=cid, query="quarterly corporate tax filing deadlines", recent=False, now=LONG_NOW
            ),
        )
        relevant = next(s for s in res.sections if s.name == "relevant")
        timeline = next(s for s in res.sections if s.name == "timeline")
        assert not relevant.items and not timeline.items, res.context
        assert f"## Relevant memories\n{NOTHING}" in res.context
        assert res.tokens_used < 40  # the room is not filled
    res = local_memory.context.assemble(
        "ns", ContextRequest(query="When am I flying to Oslo to see my sister?", now=LONG_NOW)
    )
    assert NOTHING not in res.context and "Oslo" in res.context
