"""The OpenAI embedder and summariser against a loopback server speaking OpenAI's wire format.

OpenAI itself is unreachable from here; the stand-in (loopback/openai_server.py, shared with the benchmarks)
answers /v1/embeddings and /v1/chat/completions with the JSON shapes of the real API, and can be told to fail the
next N requests with a 500.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from datastore.factory import open_memory
from loopback.openai_server import LoopbackOpenAI
from models.api import Message, RememberRequest
from models.memory import StoredMessage
from services.chunking import span_sentences
from services.embedders.openai_api import OpenAIEmbedder
from services.errors import EmbeddingError
from services.summarising import ExtractiveSummariser, OpenAISummariser, Span
from tests.support.settings import make_settings


@pytest.fixture
def fake_openai() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as server:
        yield server


def openai_settings(tmp_path: Path, server: LoopbackOpenAI, **kw: object):  # noqa: ANN201
    return make_settings(
        tmp_path,
        openai_api_key="sk-test",
        openai_base_url=f"http://127.0.0.1:{server.server_port}/v1",
        openai_max_retries=2,
        openai_timeout=5,
        embedding_dimension=64,
        **kw,
    )


def test_embeddings_come_back_in_order_normalised(tmp_path: Path, fake_openai: LoopbackOpenAI) -> None:
    emb = OpenAIEmbedder(openai_settings(tmp_path, fake_openai))
    texts = [f"text {i}" for i in range(70)]  # more than one batch of 64
    out = emb.embed(texts)
    assert out.shape == (70, 64) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    again = emb.embed(["text 5"])
    assert np.allclose(out[5], again[0], atol=1e-6)  # the response's `index` order was honoured
    assert [p for p, _ in fake_openai.requests] == ["/v1/embeddings"] * 3
    assert fake_openai.requests[0][1]["dimensions"] == 64 and emb.model_name == "text-embedding-3-small"


def test_embedder_retries_server_errors_then_fails_clearly(tmp_path: Path, fake_openai: LoopbackOpenAI) -> None:
    emb = OpenAIEmbedder(openai_settings(tmp_path, fake_openai))
    fake_openai.fail_next = 2  # two 500s, then success: within the 2 retries
    assert emb.embed(["hello"]).shape == (1, 64)
    fake_openai.fail_next = 10
    with pytest.raises(EmbeddingError, match="OpenAI embedding request failed"):
        emb.embed(["hello"])


def test_summariser_uses_the_model_with_context_and_falls_back(tmp_path: Path, fake_openai: LoopbackOpenAI) -> None:
    summ = OpenAISummariser(openai_settings(tmp_path, fake_openai, summary_model="my-model"))
    moved = StoredMessage(id="m1", source_id="c", seq=0, speaker="Ann", content="I moved to Porto.")
    span = Span(span_sentences(moved), ["Ann: I moved to Porto.", "Bob: Nice!"], "Ann: earlier summary.")
    made = summ.summarise(span, 100)
    assert made.made_by == "openai:my-model" and made.text.startswith("SUMMARY of") and made.sentence_ids == []
    sent = fake_openai.requests[-1][1]
    assert sent["model"] == "my-model" and "earlier summary" in sent["messages"][-1]["content"]
    assert "Bob: Nice!" in sent["messages"][-1]["content"]  # the model reads the children's rendered texts
    fake_openai.fail_next = 10
    made = summ.summarise(span, 100)
    assert (made.made_by, made.text, made.sentence_ids) == ("extractive", "Ann: I moved to Porto.", ["m1:0"])


def test_store_records_the_summariser_of_each_summary(tmp_path: Path, fake_openai: LoopbackOpenAI, embedder) -> None:
    settings = openai_settings(tmp_path, fake_openai, chunk_size=32, chunk_overlap=4)
    memory = open_memory(settings, embedder, OpenAISummariser(settings, ExtractiveSummariser()))
    msgs = [
        Message(id=str(i), speaker="Ann", content=f"Fact number {i} is that the sky was colour {i}.") for i in range(30)
    ]
    r = memory.writer.remember("default", RememberRequest(conversation_id="c", messages=msgs))
    assert r.summary_ids
    made_by = {n.summariser for n in memory.storage.source_nodes("default", "c") if n.level > 1}
    assert made_by == {"openai:gpt-4o-mini"}
    memory.close()


def test_without_the_openai_extra_start_up_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """openai is the optional `openai` extra: with OPENAI_API_KEY set and the package missing, the embedder and
    the summariser refuse with the pip line, and the server's start-up check prints it as one line, exit 1."""
    from server.main import check_store
    from services.openai_client import OpenAIMissingError

    monkeypatch.setitem(sys.modules, "openai", None)  # `from openai import OpenAI` raises ImportError
    settings = make_settings(tmp_path, openai_api_key="sk-test")
    with pytest.raises(OpenAIMissingError, match=r"EMBEDDER=openai .*pip install 'pyramind\[openai\]'"):
        OpenAIEmbedder(settings)
    with pytest.raises(OpenAIMissingError, match=r"SUMMARISER=openai .*pyramind\[openai\]"):
        OpenAISummariser(settings)
    with pytest.raises(SystemExit) as exit_:
        check_store(settings)
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 1 and "\n" not in err and "pip install 'pyramind[openai]'" in err
    assert not settings.local_db_path.exists()  # refused before anything was created
