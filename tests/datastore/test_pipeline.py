"""The pipeline over the real SQLite store, the real MiniLM embedder and the extractive summariser."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from models.api import DeleteRequest, Document, Message, Query, QueryFilter, RememberRequest
from services.embedders.openai_api import OpenAIEmbedder
from services.embedding import LocalEmbedder
from services.errors import (
    EmbeddingError,
    EmbeddingMismatchError,
    InvalidRequestError,
    NotFoundError,
    SummaryError,
)
from services.summarising import ExtractiveSummariser, Span, Summary
from tests.support.embedders import RecordingEmbedder
from tests.support.invariants import check_summary_vectors, check_tree
from tests.support.settings import locomo_sessions, make_settings
from tests.support.stores import recompose, text_search

NS = "default"


def remember_sessions(memory: Memory, sessions: list[list[Message]], cid: str = "conv") -> None:
    for msgs in sessions:
        memory.writer.remember(NS, RememberRequest(conversation_id=cid, messages=msgs))


def tree(memory: Memory, cid: str = "conv"):  # noqa: ANN201
    return memory.storage.source_nodes(NS, cid)


def check(memory: Memory, cid: str = "conv") -> dict[int, int]:
    s = memory.settings
    return check_tree(tree(memory, cid), s.chunk_size, s.chunk_overlap, s.fan_out, s.max_level)


def test_locomo_slice_builds_a_valid_three_level_tree(local_memory: Memory, locomo: list[dict]) -> None:
    sessions = locomo_sessions(locomo[0], limit=8)
    remember_sessions(local_memory, sessions)
    counts = check(local_memory)
    assert counts[1] >= 25 and counts[2] >= 5 and counts[3] >= 1
    stats = local_memory.storage.counts(NS)
    assert stats["messages"] == sum(len(s) for s in sessions)
    # every message is covered by some chunk
    covered = {m for n in tree(local_memory) if n.level == 1 for m in n.message_ids}
    assert covered == {m.id for s in sessions for m in s}
    # summaries carry who made them and the time range of what they cover
    for n in tree(local_memory):
        if n.level > 1:
            assert n.summariser == "extractive" and n.start_time is not None and n.start_time <= n.end_time


def test_incremental_and_one_shot_remember_give_the_same_chunks(
    tmp_path: Path, embedder: LocalEmbedder, locomo: list[dict]
) -> None:
    sessions = locomo_sessions(locomo[1], limit=4)
    texts = []
    for name, batches in [("one", [[m for s in sessions for m in s]]), ("many", sessions)]:
        memory = open_memory(make_settings(tmp_path / name), embedder, ExtractiveSummariser())
        remember_sessions(memory, batches)
        texts.append([n.text for n in tree(memory) if n.level == 1])
        check(memory)
        memory.close()
    assert texts[0] == texts[1]


def test_chunk_keys_read_earlier_text_only_so_pieces_embed_as_at_once(
    tmp_path: Path, embedder: LocalEmbedder, locomo: list[dict]
) -> None:
    """CHUNK_KEY_CONTEXT_TOKENS: a chunk is embedded after the sentences before it, its text unchanged; the
    context comes from earlier text only, so remembering in sessions embeds every chunk as remembering at once."""
    sessions = locomo_sessions(locomo[1], limit=4)
    got = []
    for name, batches, tokens in [
        ("one", [[m for s in sessions for m in s]], 40),
        ("many", sessions, 40),
        ("off", sessions, 0),
    ]:
        memory = open_memory(
            make_settings(tmp_path / name, chunk_key_context_tokens=tokens), embedder, ExtractiveSummariser()
        )
        remember_sessions(memory, batches)
        chunks = sorted((n for n in tree(memory) if n.level == 1), key=lambda n: n.position)
        vectors = memory.storage.get_vectors(NS, [n.id for n in chunks])
        got.append(([n.text for n in chunks], [vectors[n.id] for n in chunks]))
        memory.close()
    (one_texts, one_vecs), (many_texts, many_vecs), (off_texts, off_vecs) = got
    assert one_texts == many_texts == off_texts  # the shown text does not change
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(one_vecs, many_vecs, strict=True))
    assert np.allclose(one_vecs[0], off_vecs[0], atol=1e-5)  # nothing precedes the first chunk
    assert all(not np.allclose(a, b, atol=1e-3) for a, b in zip(one_vecs[1:], off_vecs[1:], strict=True))


def test_an_open_chunk_sealed_unchanged_keeps_its_vector(tmp_path: Path, locomo: list[dict]) -> None:
    """An open chunk that a later call seals with the same window keeps its stored vector instead of embedding
    its key again (no key is embedded twice); remembering in sessions still gives every chunk the vector of
    remembering at once."""
    sessions = locomo_sessions(locomo[3], limit=3)
    got, unchanged = [], 0
    for name, batches in [("one", [[m for s in sessions for m in s]]), ("many", sessions)]:
        embedder = RecordingEmbedder()
        settings = make_settings(tmp_path / name, chunk_key_context_tokens=80)
        memory = open_memory(settings, embedder, ExtractiveSummariser())
        for batch in batches:
            before = {n.id: n.text for n in tree(memory) if n.level == 1 and not n.sealed}
            memory.writer.remember(NS, RememberRequest(conversation_id="conv", messages=batch))
            unchanged += sum(1 for n in tree(memory) if n.level == 1 and before.get(n.id) == n.text)
        chunks = sorted((n for n in tree(memory) if n.level == 1), key=lambda n: n.position)
        vectors = memory.storage.get_vectors(NS, [n.id for n in chunks])
        keys = [t for t in embedder.texts if "\n" in t and not any(t == n.text for n in tree(memory))]
        assert keys
        assert len(keys) == len(set(keys))  # no key embedded twice
        got.append([vectors[n.id] for n in chunks])
        memory.close()
    assert unchanged > 0  # the sessions sealed an open chunk as it was (else this test tests nothing)
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(got[0], got[1], strict=True))


def test_open_chunk_is_searchable_at_once_then_extended(local_memory: Memory) -> None:
    r1 = local_memory.writer.remember(
        NS,
        RememberRequest(
            conversation_id="c",
            messages=[Message(id="a", speaker="Ann", content="My cat is called Miso and she is orange.")],
        ),
    )
    assert len(r1.chunk_ids) == 1 and not r1.updated_chunk_ids
    hits = local_memory.reader.query(NS, [Query(query="what is the cat's name", top_k=1)]).results[0].results
    assert hits[0].id == r1.chunk_ids[0] and "Miso" in hits[0].text
    r2 = local_memory.writer.remember(
        NS,
        RememberRequest(
            conversation_id="c", messages=[Message(id="b", speaker="Bob", content="Miso is a lovely name.")]
        ),
    )
    assert r2.updated_chunk_ids == r1.chunk_ids and not r2.chunk_ids
    node = local_memory.reader.get_node(NS, r1.chunk_ids[0])
    assert node.message_ids == ["a", "b"] and not node.sealed


def test_resending_message_ids_changes_nothing(local_memory: Memory, locomo: list[dict]) -> None:
    sessions = locomo_sessions(locomo[0], limit=3)
    remember_sessions(local_memory, sessions)
    before = [(n.id, n.text, n.parent_id) for n in tree(local_memory)]
    r = local_memory.writer.remember(NS, RememberRequest(conversation_id="conv", messages=sessions[1]))
    assert r.skipped_message_ids == [m.id for m in sessions[1]]
    assert not (r.chunk_ids or r.updated_chunk_ids or r.summary_ids)
    assert [(n.id, n.text, n.parent_id) for n in tree(local_memory)] == before


def test_query_filters_by_level_speaker_conversation_and_time(local_memory: Memory, locomo: list[dict]) -> None:
    remember_sessions(local_memory, locomo_sessions(locomo[0], limit=6), "a")
    remember_sessions(local_memory, locomo_sessions(locomo[1], limit=2), "b")
    q = "support group"

    def hits(flt: QueryFilter):  # noqa: ANN202
        return local_memory.reader.query(NS, [Query(query=q, top_k=50, filter=flt)]).results[0].results

    assert {h.level for h in hits(QueryFilter(level=2))} == {2}
    assert all(h.level >= 2 for h in hits(QueryFilter(min_level=2)))
    assert {h.conversation_id for h in hits(QueryFilter(conversation_id="b"))} == {"b"}
    assert all("Caroline" in h.speakers for h in hits(QueryFilter(speaker="Caroline")))
    some = hits(QueryFilter(conversation_id="a", level=1))
    cut = sorted(h.start_time for h in some)[len(some) // 2]
    late = hits(QueryFilter(conversation_id="a", start_date=cut))
    assert late and all(h.end_time >= cut for h in late)
    assert all(h.start_time <= cut for h in hits(QueryFilter(end_date=cut)))
    assert hits(QueryFilter(document_id="nope")) == []


def test_scores_are_cosine_and_sorted(local_memory: Memory, embedder: LocalEmbedder, locomo: list[dict]) -> None:
    remember_sessions(local_memory, locomo_sessions(locomo[0], limit=2))
    res = local_memory.reader.query(NS, [Query(query="painting a sunrise", top_k=5, mode="dense")]).results[0].results
    scores = [r.score for r in res]
    assert scores == sorted(scores, reverse=True)
    q = embedder.embed(["painting a sunrise"])[0]
    # the stored embedding: a chunk's is of its retrieval key (the sentences before it, then its text)
    v = local_memory.storage.get_vectors(NS, [res[0].id])[res[0].id]
    assert abs(float(q @ v) - scores[0]) < 1e-3


def test_delete_message_rebuilds_every_level_and_keeps_the_rest(local_memory: Memory, locomo: list[dict]) -> None:
    sessions = locomo_sessions(locomo[0], limit=8)
    remember_sessions(local_memory, sessions)
    before = {n.id: n for n in tree(local_memory)}
    victim = sessions[5][3]
    secret = victim.content
    local_memory.deleter.delete(NS, DeleteRequest(ids=[victim.id]))
    after = tree(local_memory)
    check(local_memory)
    assert all(secret not in n.text for n in after)
    assert all(victim.id not in n.message_ids for n in after)
    # nothing derived from earlier messages was rebuilt
    early = [n for n in before.values() if n.level == 1 and n.tok_end < 1000]
    assert early and all(n.id in {a.id for a in after} for n in early)
    found = local_memory.reader.query(NS, [Query(query=secret, top_k=100)]).results[0].results
    assert all(secret not in r.text for r in found)
    assert all(secret not in n.text for n, _ in text_search(local_memory).search(NS, secret, 100))


def test_delete_node_forgets_everything_it_covers(local_memory: Memory, locomo: list[dict]) -> None:
    remember_sessions(local_memory, locomo_sessions(locomo[0], limit=6))
    l2 = next(n for n in tree(local_memory) if n.level == 2)
    covered = {m for n in local_memory.reader.subtree(NS, l2.id) for m in n.message_ids}
    res = local_memory.deleter.delete(NS, DeleteRequest(ids=[l2.id]))
    assert res.deleted_messages == len(covered)
    left = {m for n in tree(local_memory) for m in n.message_ids}
    assert not covered & left
    with pytest.raises(NotFoundError):
        local_memory.reader.get_node(NS, l2.id)
    check(local_memory)


def test_delete_unknown_id_is_404_and_deletes_nothing(local_memory: Memory, locomo: list[dict]) -> None:
    remember_sessions(local_memory, locomo_sessions(locomo[0], limit=1))
    before = local_memory.storage.counts(NS)
    with pytest.raises(NotFoundError):
        local_memory.deleter.delete(NS, DeleteRequest(ids=["D1:1", "no-such-id"]))
    assert local_memory.storage.counts(NS) == before


def test_delete_conversation_filter_and_all(local_memory: Memory, locomo: list[dict]) -> None:
    remember_sessions(local_memory, locomo_sessions(locomo[0], limit=2), "a")
    remember_sessions(local_memory, locomo_sessions(locomo[1], limit=2), "b")
    local_memory.writer.remember("other", RememberRequest(conversation_id="a", messages=[Message(content="keep me")]))
    local_memory.deleter.delete(NS, DeleteRequest(ids=["a"]))
    assert tree(local_memory, "a") == [] and tree(local_memory, "b")
    spk = locomo_sessions(locomo[1], limit=1)[0][0].speaker
    local_memory.deleter.delete(NS, DeleteRequest(filter={"speaker": spk}))
    assert all(spk not in n.speakers for n in tree(local_memory, "b"))
    local_memory.deleter.delete(NS, DeleteRequest(delete_all=True))
    assert local_memory.storage.counts(NS) == {"sources": 0, "messages": 0}
    assert local_memory.storage.counts("other")["messages"] == 1


def test_documents_are_chunked_sealed_rolled_up_and_replaced(local_memory: Memory) -> None:
    text = " ".join(f"Paragraph {i} says the project codename is Falcon {i}." for i in range(150))
    ids = local_memory.writer.upsert(NS, [Document(id="doc1", text=text)]).ids
    nodes = tree(local_memory, "doc1")
    assert ids == ["doc1"] and all(n.sealed for n in nodes) and any(n.level == 2 for n in nodes)
    check(local_memory, "doc1")
    local_memory.writer.upsert(NS, [Document(id="doc1", text="Short replacement text about herons.")])
    nodes = tree(local_memory, "doc1")
    assert len(nodes) == 1 and nodes[0].text.startswith("Short replacement")
    hit = local_memory.reader.query(NS, [Query(query="herons", top_k=1, filter=QueryFilter(document_id="doc1"))])
    assert hit.results[0].results[0].document_id == "doc1"


def test_limits_are_checked_before_anything_is_written(local_memory: Memory) -> None:
    s = local_memory.settings
    too_many = [Message(content=f"m{i}") for i in range(s.max_messages + 1)]
    with pytest.raises(InvalidRequestError) as e:
        local_memory.writer.remember(NS, RememberRequest(messages=too_many))
    assert e.value.field == "messages"
    with pytest.raises(InvalidRequestError) as e:
        local_memory.writer.remember(NS, RememberRequest(messages=[Message(content="x" * (s.max_message_chars + 1))]))
    assert e.value.field == "messages[0].content"
    with pytest.raises(InvalidRequestError) as e:
        local_memory.reader.query(NS, [Query(query="x", top_k=s.max_top_k + 1)])
    assert e.value.field == "queries[0].top_k"
    assert local_memory.storage.counts(NS) == {"sources": 0, "messages": 0}


class FailingEmbedder:
    """The real embedder, made to fail from the n-th call on (an injected fault, like a crashed model)."""

    def __init__(self, inner: LocalEmbedder, fail_from: int) -> None:
        self.inner, self.fail_from, self.calls = inner, fail_from, 0
        self.model_name, self.dimension = inner.model_name, inner.dimension

    def close(self) -> None:
        """Nothing to release (the inner embedder is the session's)."""

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        self.calls += 1
        if self.calls >= self.fail_from:
            raise EmbeddingError("injected failure")
        return self.inner.embed(texts)


class FailingSummariser:
    """A summariser that always fails (an LLM that is down): the call fails after its chunks were computed."""

    name = "failing"

    def summarise(self, span: Span, max_tokens: int) -> Summary:
        raise SummaryError("injected failure")


@pytest.mark.parametrize("fault", ["embedder", "summariser"])
def test_embedder_failure_keeps_the_tree_and_the_messages(
    tmp_path: Path, embedder: LocalEmbedder, locomo: list[dict], fault: str
) -> None:
    """A failure mid-call leaves every chunk and summary as it was, stores the messages (nothing acknowledged
    is lost), and the next call or retry_pending indexes them."""
    sessions = locomo_sessions(locomo[0], limit=6)
    memory = open_memory(make_settings(tmp_path), embedder, ExtractiveSummariser())
    remember_sessions(memory, sessions[:4])
    before = [(n.id, n.text, n.parent_id, n.sealed) for n in tree(memory)]
    n_before = memory.storage.counts(NS)["messages"]
    failing = (
        recompose(memory, embedder=FailingEmbedder(embedder, 1))
        if fault == "embedder"
        else recompose(memory, summariser=FailingSummariser())
    )
    late = sessions[4] + sessions[5]
    r = failing.writer.remember(NS, RememberRequest(conversation_id="conv", messages=late))
    assert r.pending_message_ids == [m.id for m in late] and not (r.chunk_ids or r.summary_ids)
    assert [(n.id, n.text, n.parent_id, n.sealed) for n in tree(memory)] == before
    assert memory.storage.counts(NS)["messages"] == n_before + len(late)
    assert memory.storage.backlog() == [(NS, "conv")]
    assert failing.writer.retry_pending() == 0  # still failing: still pending, nothing half-written
    assert [(n.id, n.text, n.parent_id, n.sealed) for n in tree(memory)] == before
    assert memory.writer.retry_pending() == 1 and memory.storage.backlog() == []
    covered = {m for n in tree(memory) if n.level == 1 for m in n.message_ids}
    assert {m.id for m in late} <= covered
    check(memory)
    # the result is the tree of remembering everything without a failure
    clean = open_memory(make_settings(tmp_path / "clean"), embedder, ExtractiveSummariser())
    remember_sessions(clean, sessions[:4] + [late])
    assert [n.text for n in tree(memory) if n.level == 1] == [n.text for n in tree(clean) if n.level == 1]
    clean.close()
    memory.close()


def test_forgetting_does_not_wait_for_a_failing_embedder(
    tmp_path: Path, embedder: LocalEmbedder, locomo: list[dict]
) -> None:
    sessions = locomo_sessions(locomo[0], limit=3)
    memory = open_memory(make_settings(tmp_path), embedder, ExtractiveSummariser())
    remember_sessions(memory, sessions)
    victim = sessions[1][2]
    recompose(memory, embedder=FailingEmbedder(embedder, 1)).deleter.delete(NS, DeleteRequest(ids=[victim.id]))
    assert all(victim.content not in n.text for n in tree(memory))
    assert memory.writer.retry_pending() == 1
    assert all(victim.id not in n.message_ids and victim.content not in n.text for n in tree(memory))
    check(memory)
    memory.close()


def test_opening_with_another_embedding_model_is_a_clear_error(tmp_path: Path, local_memory: Memory) -> None:
    settings = make_settings(tmp_path, openai_api_key="sk-test", embedder="openai")
    with pytest.raises(EmbeddingMismatchError, match="all-MiniLM-L6-v2"):
        open_memory(settings, OpenAIEmbedder(settings), ExtractiveSummariser())


def test_namespaces_never_see_each_other(local_memory: Memory) -> None:
    a = local_memory.writer.remember(
        "alice", RememberRequest(conversation_id="c", messages=[Message(content="Alice's PIN is 4921.")])
    )
    local_memory.writer.remember(
        "bob", RememberRequest(conversation_id="c", messages=[Message(content="Bob likes tea.")])
    )
    res = local_memory.reader.query("bob", [Query(query="PIN number", top_k=10)]).results[0].results
    assert all("4921" not in r.text for r in res)
    with pytest.raises(NotFoundError):
        local_memory.reader.expand("bob", a.chunk_ids[0])
    with pytest.raises(NotFoundError):
        local_memory.deleter.delete("bob", DeleteRequest(ids=[a.chunk_ids[0]]))
    assert local_memory.reader.get_node("alice", a.chunk_ids[0]).text.endswith("4921.\n")


def test_sessions_remembered_one_per_call_embed_each_node_once(tmp_path: Path, locomo: list[dict]) -> None:
    """A chunk never spans two sessions, so a session's open chunk is sealed unchanged by the call that brings the
    next session and keeps its vector: remembered one session per call, the embedder reads each chunk, line and
    summary once (no grown open chunk embedded again), and a query right after each call finds its messages."""
    sessions = locomo_sessions(locomo[3], limit=4)
    embedder, asked = RecordingEmbedder(), []
    memory = open_memory(make_settings(tmp_path), embedder, ExtractiveSummariser())
    for batch in sessions:
        memory.writer.remember(NS, RememberRequest(conversation_id="conv", messages=batch))
        newest = max(tree(memory), key=lambda n: (n.level == 1, n.position))
        assert newest.level == 1 and not newest.sealed and batch[-1].content.split(".")[0][:40] in newest.text
        query = Query(query=batch[-1].content, top_k=10, mode="dense")
        asked.append(query.query)
        hits = memory.reader.query(NS, [query]).results[0].results
        assert newest.id in {h.id for h in hits}
    nodes = tree(memory)
    indexed = [t for t in embedder.texts if t not in asked]
    # no instructions here: one text a chunk and a line; a summary's embedding is its children's, none embedded
    assert len(indexed) == sum(1 for n in nodes if n.level < 2) and any(n.level >= 2 for n in nodes)
    assert not {n.text for n in nodes if n.level >= 2} & set(indexed)
    assert check_summary_vectors(memory.storage.get_vectors(NS, [n.id for n in nodes]), nodes) >= 1
    chunks = [n for n in nodes if n.level == 1]
    for s in sessions:  # no chunk holds messages of two sessions
        ids = {m.id for m in s if m.id}
        assert all(set(c.message_ids) <= ids or not set(c.message_ids) & ids for c in chunks)
    memory.close()


def test_a_summary_takes_its_childrens_mean_read_from_the_store_or_else_is_embedded_from_its_text(
    tmp_path: Path,
) -> None:
    """TreeBuilder.embed_with: a summary's vector is the normalised mean of its children's, from this call or from
    the `stored` reader (children of an earlier write); a summary whose children cannot all be found is embedded
    from its text, and no summary text is embedded otherwise."""
    from datastore.write.build import TreeBuilder
    from models.memory import MemoryNode

    embedder = RecordingEmbedder()
    builder = TreeBuilder(make_settings(tmp_path), embedder, ExtractiveSummariser())
    words = ["garden compost", "boiler repair", "school play", "tax return", "Lisbon flight", "piano lesson"]
    chunks = [MemoryNode(id=f"c1_{i}", source_id="s", level=1, position=i, text=w) for i, w in enumerate(words)]
    older = {c.id: v for c, v in zip(chunks[:3], embedder.embed([c.text for c in chunks[:3]]), strict=True)}
    summary = MemoryNode(
        id="s2_a", source_id="s", level=2, position=0, text="all of it", children=[c.id for c in chunks[:5]]
    )
    asked: list[list[str]] = []

    def stored(ids: Sequence[str]) -> dict[str, np.ndarray]:
        asked.append(list(ids))
        return {i: older[i] for i in ids if i in older}

    embedder.texts.clear()
    out = {n.id: v for n, v in builder.embed([*chunks[3:5], summary], stored) if v is not None}
    assert asked == [["c1_0", "c1_1", "c1_2"]]  # only the children this call does not hold
    assert embedder.texts == ["tax return", "Lisbon flight"]  # the summary's text is not embedded
    kids = np.stack([older["c1_0"], older["c1_1"], older["c1_2"], out["c1_3"], out["c1_4"]])
    mean = kids.mean(axis=0)
    assert np.allclose(out["s2_a"], mean / np.linalg.norm(mean), atol=1e-6)
    lost = summary.model_copy(update={"id": "s2_b", "children": ["c1_0", "c1_gone", "c1_2", "c1_3", "c1_4"]})
    embedder.texts.clear()
    out = {n.id: v for n, v in builder.embed([lost], stored) if v is not None}
    assert embedder.texts == ["all of it"]  # a child without a vector: the summary's own text
    assert np.allclose(out["s2_b"], embedder.embed(["all of it"])[0], atol=1e-5)
