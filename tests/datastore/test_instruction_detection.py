"""Standing instructions found by the LLM detector while messages are indexed: the factory picks it with
SUMMARISER=openai, every human message reaches it exactly once however the indexing is cut into steps, and its
subjects drive supersession. A real local store and embedder; the model is a loopback server in OpenAI's wire
format (bench/openai_loopback.py)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench.openai_loopback import LoopbackOpenAI
from pyramind.datastore.factory import open_memory
from pyramind.datastore.memory import Memory
from pyramind.models.api import DeleteRequest, Message, RememberRequest
from pyramind.services.embedding import LocalEmbedder
from pyramind.services.instructions import OpenAIDetector, PatternDetector
from pyramind.services.summarising import ExtractiveSummariser
from tests.conftest import make_settings
from tests.datastore.synthetic import conversation

T0 = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
SAYINGS = {  # what the model reports, by a word of the message
    "Bootstrap": ("I prefer Bootstrap over Foundation.", "preference"),
    "Tailwind": ("These days Tailwind is my thing for styling.", "preference"),
}


def reply(body: dict) -> str:
    """The model's answer: a `css framework` preference for every message that names a framework."""
    sent = json.loads(body["messages"][-1]["content"])
    items = [{"message_id": m["message_id"], "text": text, "kind": kind, "subject": "css framework"}
             for m in sent for word, (text, kind) in SAYINGS.items() if word in m["content"]]
    return json.dumps({"instructions": items})


@pytest.fixture
def llm() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as server:
        server.chat_reply = reply
        yield server


@pytest.fixture
def memory(tmp_path: Path, llm: LoopbackOpenAI, embedder: LocalEmbedder) -> Iterator[Memory]:
    settings = make_settings(tmp_path, summariser="openai", openai_api_key=llm.api_key, openai_base_url=llm.base_url,
                             openai_max_retries=0, instruction_model="rules-model")
    store = open_memory(settings, embedder, ExtractiveSummariser())  # the detector: the factory's choice
    yield store
    store.close()


def chat(n: int, start: datetime, prefix: str, said: dict[int, str]) -> list[Message]:
    out = conversation(("Ann", "assistant"), n, start=start, prefix=prefix)
    for i, text in said.items():
        out[i] = out[i].model_copy(update={"content": text})
    return out


def sent_ids(llm: LoopbackOpenAI) -> Counter[str]:
    return Counter(m["message_id"] for path, body in llm.requests if path == "/v1/chat/completions"
                   for m in json.loads(body["messages"][-1]["content"]))


def test_the_factory_picks_the_llm_and_each_message_reaches_it_once(memory: Memory, llm: LoopbackOpenAI) -> None:
    assert isinstance(memory.detector, OpenAIDetector) and memory.detector.model == "rules-model"
    messages = chat(60, T0, "m", {10: "I prefer Bootstrap over Foundation.",
                                  50: "These days Tailwind is my thing for styling."})
    memory.writer.accept("ns", RememberRequest(conversation_id="c", messages=messages[:25]))
    steps = 0
    while memory.steps.chunks("ns", "c", max_chunks=1).more:
        steps += 1
    memory.writer.remember("ns", RememberRequest(conversation_id="c", messages=messages[25:]))  # inline, the rest
    assert steps >= 3
    assert sent_ids(llm) == Counter({m.id: 1 for m in messages if m.speaker == "Ann"})  # never the assistant's
    rules = memory.instructions.list("ns", include_superseded=True).instructions
    assert [(i.message_id, i.subject, i.detector) for i in rules] == [
        ("m-10", "css framework", "openai:rules-model"), ("m-50", "css framework", "openai:rules-model")]
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
