"""Standing instructions found by the LLM detector while messages are indexed: the factory picks it with
SUMMARISER=openai, every human message reaches it exactly once however the indexing is cut into steps, and its
subjects drive supersession. A real local store and embedder; the model is a loopback server in OpenAI's wire
format (loopback/openai_server.py)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from loopback.openai_server import LoopbackOpenAI
from models.api import DeleteRequest, Message, RememberRequest
from services.embedding import LocalEmbedder
from services.instructions import OpenAIDetector, PatternDetector
from services.summarising import ExtractiveSummariser
from tests.support.settings import make_settings
from tests.support.synthetic import conversation

T0 = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
SAYINGS = {  # what the model reports, by a word of the message
    "Bootstrap": ("I prefer Bootstrap over Foundation.", "preference"),
    "Tailwind": ("These days Tailwind is my thing for styling.", "preference"),
}


def reply(body: dict) -> str:
    """The model's answer: a `css framework` preference for every message that names a framework."""
    sent = json.loads(body["messages"][-1]["content"])
    items = [
        {"message_id": m["message_id"], "text": text, "kind": kind, "subject": "css framework"}
        for m in sent
        for word, (text, kind) in SAYINGS.items()
        if word in m["content"]
    ]
    return json.dumps({"instructions": items})


@pytest.fixture
def llm() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as server:
        server.chat_reply = reply
        yield server


@pytest.fixture
def memory(tmp_path: Path, llm: LoopbackOpenAI, embedder: LocalEmbedder) -> Iterator[Memory]:
    settings = make_settings(
        tmp_path,
        summariser="openai",
        openai_api_key=llm.api_key,
        openai_base_url=llm.base_url,
        openai_max_retries=0,
        instruction_model="rules-model",
    )
    memory = open_memory(settings, embedder, ExtractiveSummariser())  # the detector: the factory's choice
    yield memory
    memory.close()


def chat(n: int, start: datetime, prefix: str, said: dict[int, str]) -> list[Message]:
    out = conversation(("Ann", "assistant"), n, start=start, prefix=prefix)
    for i, text in said.items():
        out[i] = out[i].model_copy(update={"content": text})
    return out


def metadata(memory: Memory, source_id: str = "c") -> dict:
    src = memory.storage.get_source("ns", source_id)
    assert src is not None
    return src.metadata


def sent_ids(llm: LoopbackOpenAI) -> Counter[str]:
    return Counter(
        m["message_id"]
        for path, body in llm.requests
        if path == "/v1/chat/completions"
        for m in json.loads(body["messages"][-1]["content"])
    )


def test_the_factory_picks_the_llm_and_each_message_reaches_it_once(memory: Memory, llm: LoopbackOpenAI) -> None:
    assert isinstance(memory.detector, OpenAIDetector) and memory.detector.model == "rules-model"
    messages = chat(
        60, T0, "m", {10: "I prefer Bootstrap over Foundation.", 50: "These days Tailwind is my thing for styling."}
    )
    memory.writer.accept("ns", RememberRequest(conversation_id="c", messages=messages[:25]))
    steps = [memory.steps.chunks("ns", "c", max_chunks=1)]
    while steps[-1].more:
        steps.append(memory.steps.chunks("ns", "c", max_chunks=1))
    assert len(steps) >= 3 and all(s.unread for s in steps)
    # the chunk steps never wait on the model: their chunks are searchable, their messages read after
    assert not sent_ids(llm) and metadata(memory)["unread_from"] == 0
    assert memory.storage.source_nodes("ns", "c", 1)
    reads = [memory.steps.detect("ns", "c", max_chunks=1)]
    while reads[-1].more:
        reads.append(memory.steps.detect("ns", "c", max_chunks=1))
    assert len(reads) >= 3 and [i for r in reads for i in r.instructions]  # m-10, found in one of them
    assert "unread_from" not in metadata(memory)
    assert memory.steps.detect("ns", "c").instructions == [] and not memory.steps.unread()
    memory.writer.remember("ns", RememberRequest(conversation_id="c", messages=messages[25:]))  # inline, the rest
    assert sent_ids(llm) == Counter({m.id: 1 for m in messages if m.speaker == "Ann"})  # never the assistant's
    rules = memory.instructions.list("ns", include_superseded=True).instructions
    assert [(i.message_id, i.subject, i.detector) for i in rules] == [
        ("m-10", "css framework", "openai:rules-model"),
        ("m-50", "css framework", "openai:rules-model"),
    ]
    assert rules[0].superseded_by == rules[1].id  # the model's subjects say Tailwind replaces Bootstrap
    assert not PatternDetector().detect([messages[50]])  # which the offline rules would not have found


def test_a_delete_sends_only_the_kept_messages_no_chunk_had_covered(memory: Memory, llm: LoopbackOpenAI) -> None:
    messages = chat(12, T0 + timedelta(days=1), "d", {4: "I prefer Bootstrap over Foundation."})
    memory.writer.remember("ns", RememberRequest(conversation_id="c", messages=messages[:6]))
    memory.writer.accept("ns", RememberRequest(conversation_id="c", messages=messages[6:]))  # not indexed yet
    memory.deleter.delete("ns", DeleteRequest(ids=["d-0"]))
    memory.steps.backlog()
    assert sent_ids(llm) == Counter({m.id: 1 for m in messages if m.speaker == "Ann"})
    assert [i.message_id for i in memory.instructions.list("ns").instructions] == ["d-4"]


def test_messages_chunked_unread_are_read_after_a_restart(
    tmp_path: Path, llm: LoopbackOpenAI, embedder: LocalEmbedder
) -> None:
    settings = make_settings(
        tmp_path,
        summariser="openai",
        openai_api_key=llm.api_key,
        openai_base_url=llm.base_url,
        openai_max_retries=0,
        instruction_model="rules-model",
    )
    messages = chat(20, T0, "r", {8: "I prefer Bootstrap over Foundation."})
    first = open_memory(settings, embedder, ExtractiveSummariser())
    first.writer.accept("ns", RememberRequest(conversation_id="c", messages=messages))
    while first.steps.chunks("ns", "c").more:
        pass
    first.close()  # stopped before the summary lane read them
    again = open_memory(settings, embedder, ExtractiveSummariser())
    try:
        assert again.steps.unread() == [("ns", "c")] and not sent_ids(llm)
        again.steps.backlog()
        assert sent_ids(llm) == Counter({m.id: 1 for m in messages if m.speaker == "Ann"})
        assert [i.message_id for i in again.instructions.list("ns").instructions] == ["r-8"]
        assert not again.steps.unread()
    finally:
        again.close()


def test_a_delete_leaves_the_unread_messages_to_the_detect_step(memory: Memory, llm: LoopbackOpenAI) -> None:
    messages = chat(
        24, T0, "u", {4: "I prefer Bootstrap over Foundation.", 16: "These days Tailwind is my thing for styling."}
    )
    memory.writer.accept("ns", RememberRequest(conversation_id="c", messages=messages[:10]))
    while memory.steps.chunks("ns", "c").more:
        pass
    while memory.steps.detect("ns", "c").more:
        pass
    memory.writer.accept("ns", RememberRequest(conversation_id="c", messages=messages[10:]))
    while memory.steps.chunks("ns", "c").more:
        pass
    read_before = sent_ids(llm)
    assert set(read_before) == {m.id for m in messages[:10] if m.speaker == "Ann"}
    memory.deleter.delete("ns", DeleteRequest(ids=["u-2", "u-14"]))  # one message read, one not yet
    assert sent_ids(llm) == read_before  # the delete waits on no model
    mark = metadata(memory)["unread_from"]
    kept = memory.storage.messages("ns", "c")
    assert mark == next(m.tok_offset + m.n_tokens for m in kept if m.id == "u-9")  # the last kept one read
    memory.steps.backlog()
    assert sent_ids(llm) == Counter({m.id: 1 for m in messages if m.speaker == "Ann" and m.id != "u-14"})
    assert [i.message_id for i in memory.instructions.list("ns", include_superseded=True).instructions] == [
        "u-4",
        "u-16",
    ]


def test_the_deferred_read_keeps_only_the_users_preferences_between_people(memory: Memory) -> None:
    """The summary lane's read (IndexSteps.detect) passes the conversation's `user` too: in a chat between Jon
    and Gina, nothing without it, Jon's own preference with it."""
    messages = conversation(("Jon", "Gina"), 30, start=T0, prefix="p")
    says = {6: "I prefer Bootstrap over Foundation.", 7: "These days Tailwind is my thing for styling."}
    messages = [m.model_copy(update={"content": says[i]}) if i in says else m for i, m in enumerate(messages)]
    for cid, user in (("nobody", None), ("jon", "Jon")):
        memory.writer.accept("ns", RememberRequest(conversation_id=cid, messages=messages, user=user))
        while memory.steps.chunks("ns", cid, max_chunks=1).more:
            pass
        while memory.steps.detect("ns", cid).more:
            pass
    found = memory.instructions.list("ns", include_superseded=True).instructions
    assert [(i.conversation_id, i.message_id, i.speaker) for i in found] == [("jon", "p-6", "Jon")]
