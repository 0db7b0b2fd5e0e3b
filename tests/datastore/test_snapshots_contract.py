"""Index snapshots (INDEX_SNAPSHOT_DIR, datastore/indexes/snapshots.py) on every provider: a cold namespace read
back from its snapshot answers as one listed from the store, a stale snapshot is brought current by source, a
torn one is ignored, a forget takes the forgotten text off the disk before it returns, and a namespace smaller
than INDEX_SNAPSHOT_MIN_NODES is not snapshotted; a starting server's preload (INDEX_PRELOAD_SHARE) reads back the
namespaces used last within its share, brought current from the store, once each, and a forget still applies; a
cold /context block reads its snapshot while it reads its messages and embeds its query."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from datastore.indexes.namespaces import NamespaceIndex
from datastore.indexes.snapshots import mapped
from datastore.memory import Memory
from datastore.read import ranking
from datastore.storage import IndexEntry
from models.api import DeleteRequest, Document, RememberRequest
from models.context import ContextRequest
from tests.support.synthetic import long_conversation

QUESTIONS = ("When did Ann plan the trip to Kyoto?", "what happened to the garden", "the quarterly report")


def answers(memory: Memory, ns: str) -> list[list[tuple[str, float]]]:
    """Hybrid top 5 of each question, and the lines of conversation "a" ranked for the first: what a search finds."""
    out = []
    for q in QUESTIONS:
        v = memory.embedder.embed([q])[0]
        out.append([(n.id, round(s, 5)) for n, s in ranking.hybrid(memory.search, ns, q, v, 5, None)])
    v = memory.embedder.embed([QUESTIONS[0]])[0]
    out.append([(ln.message_id, 0.0) for ln in memory.outline.lines(ns, "a", v, 5, QUESTIONS[0])])
    return out


def listed(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> list[list[str] | None]:
    """The source ids of every `index_entries` call from now on (the store's own listing still runs)."""
    calls: list[list[str] | None] = []
    inner = memory.storage.index_entries

    def recording(ns: str, source_ids: list[str] | None) -> Iterator[IndexEntry]:
        calls.append(None if source_ids is None else sorted(source_ids))
        return inner(ns, source_ids)

    monkeypatch.setattr(memory.storage, "index_entries", recording)
    return calls


def remembered(open_store: Callable[..., Memory], ns: str, folder: Path) -> Memory:
    """A store with conversations "a" and "b", whose index of `ns` is loaded and snapshotted into `folder`."""
    writer = open_store(index_snapshot_dir=folder, index_snapshot_min_nodes=0)
    msgs = long_conversation(12)
    writer.writer.remember(ns, RememberRequest(conversation_id="a", messages=msgs[: len(msgs) // 2]))
    writer.writer.remember(ns, RememberRequest(conversation_id="b", messages=msgs[len(msgs) // 2 :]))
    answers(writer, ns)
    snapshots = writer.search.indexes.snapshots
    assert snapshots is not None
    snapshots.settle()
    assert snapshots.path(ns).exists()
    return writer


def test_a_cold_namespace_is_read_back_from_its_snapshot_with_the_same_answers(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = remembered(open_store, ns, tmp_path / "snapshots")
    expected = answers(writer, ns)
    # another process, after a restart
    restarted = open_store(index_snapshot_dir=tmp_path / "snapshots", index_snapshot_min_nodes=0)
    calls = listed(restarted, monkeypatch)
    assert answers(restarted, ns) == expected
    assert calls == []  # nothing listed from the store: the snapshot was current
    assert len(restarted.search.indexes.get(ns)) == len(writer.search.indexes.get(ns))


def test_a_stale_snapshot_is_brought_current_by_source(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = remembered(open_store, ns, tmp_path / "snapshots")
    more = [m.model_copy(update={"id": f"late-{m.id}"}) for m in long_conversation(3)]
    writer.writer.remember(ns, RememberRequest(conversation_id="c", messages=more))
    later = [m.model_copy(update={"id": f"later-{m.id}"}) for m in long_conversation(2)]
    writer.writer.remember(ns, RememberRequest(conversation_id="a", messages=later))
    fresh = open_store()  # no snapshots: listed whole from the store
    restarted = open_store(index_snapshot_dir=tmp_path / "snapshots", index_snapshot_min_nodes=0)
    calls = listed(restarted, monkeypatch)
    assert answers(restarted, ns) == answers(fresh, ns)
    assert calls and all(c is not None and "b" not in c for c in calls)  # only what changed was listed
    probe = writer.embedder.embed([later[0].content])[0]
    found = [(n.id, n.text) for n, _ in restarted.search.search_vector(ns, probe, 50, None)]
    assert found == [(n.id, n.text) for n, _ in fresh.search.search_vector(ns, probe, 50, None)]


def test_an_evicted_index_is_snapshotted_and_a_torn_snapshot_ignored(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path
) -> None:
    writer = remembered(open_store, ns, tmp_path / "snapshots")
    expected = answers(writer, ns)
    snapshots = writer.search.indexes.snapshots
    assert snapshots is not None
    writer.writer.remember(ns, RememberRequest(conversation_id="c", messages=long_conversation(2)))
    answers(writer, ns)  # refreshed: the snapshot on disk is now behind
    before = snapshots.path(ns).stat().st_mtime_ns
    writer.search.indexes.max_nodes = 1  # the next search of another namespace evicts this one
    answers(writer, f"{ns}-other")
    snapshots.settle()
    assert ns not in writer.search.indexes.held()
    assert snapshots.path(ns).stat().st_mtime_ns != before  # written again as it was dropped
    snapshots.path(ns).write_bytes(b"torn")
    restarted = open_store(index_snapshot_dir=tmp_path / "snapshots", index_snapshot_min_nodes=0)
    assert answers(restarted, ns) == answers(writer, ns) != expected
    assert not snapshots.path(ns).exists() or snapshots.path(ns).read_bytes() != b"torn"


def test_a_read_back_index_maps_its_arrays_and_never_writes_the_file(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path
) -> None:
    writer = remembered(open_store, ns, tmp_path / "snapshots")
    expected = answers(writer, ns)
    path = tmp_path / "snapshots"
    restarted = open_store(index_snapshot_dir=path, index_snapshot_min_nodes=0)
    assert answers(restarted, ns) == expected
    index = restarted.search.indexes.get(ns)
    arrays: list[np.ndarray] = [index.vectors.matrix, index.vectors.rowids, index.lines.vectors.matrix]
    arrays += [index.text.post_rows, index.ids.ids, index.ids.rowids]
    assert all(mapped(a) for a in arrays)  # read in place: not copied into memory of the index's own
    snapshots = restarted.search.indexes.snapshots
    assert snapshots is not None
    file = snapshots.path(ns)
    before = file.read_bytes()
    with index.lock:
        index.vectors.remove(index.vectors.rowids[:1].copy())  # marks a row dead in the mapped `alive`
    assert not index.vectors.alive[0]
    assert file.read_bytes() == before  # the mapping is private: the file is as written
    # a file cut inside its arrays is ignored and removed, the namespace listed from the store (put in place as the
    # server writes, by a rename: cutting the file in place would cut the mapping `restarted` still reads)
    file.with_suffix(".cut").write_bytes(before[: len(before) - 1000])
    os.replace(file.with_suffix(".cut"), file)
    cut = open_store(index_snapshot_dir=path, index_snapshot_min_nodes=0)
    assert answers(cut, ns) == expected
    assert not file.exists() or file.read_bytes() != before[: len(before) - 1000]


def test_a_forget_leaves_no_removed_snapshot_mapped(open_store: Callable[..., Memory], ns: str, tmp_path: Path) -> None:
    folder = tmp_path / "snapshots"
    remembered(open_store, ns, folder)
    one, other = (open_store(index_snapshot_dir=folder, index_snapshot_min_nodes=0) for _ in range(2))
    held = []
    for memory in (one, other):  # two processes, each reading the snapshot back: their arrays map the file
        answers(memory, ns)
        held.append(memory.search.indexes.get(ns))
        assert mapped(held[-1].vectors.matrix) and mapped(held[-1].lines.vectors.matrix)

    def still_mapped(index: NamespaceIndex) -> list[str]:
        parts = {"vectors": index.vectors, "text": index.text, "lines": index.lines.vectors}
        return [
            f"{p}.{k}" for p, o in parts.items() for k, v in vars(o).items() if isinstance(v, np.ndarray) and mapped(v)
        ]

    forgotten = next(n for n in one.storage.source_nodes(ns, "a") if n.level == 1)
    one.deleter.delete(ns, DeleteRequest(conversation_id="a", ids=forgotten.message_ids[:1]))
    assert still_mapped(held[0]) == []  # the forgetting process: before the forget returns
    assert still_mapped(held[1]) != []
    answers(other, ns)  # the other process: when its next search drops the forgotten rows
    assert still_mapped(held[1]) == []
    gc.collect()
    maps = Path("/proc/self/maps")
    if maps.exists():  # Linux: no mapping of the removed file is left in this process
        assert [line for line in maps.read_text().splitlines() if str(folder) in line] == []


def on_disk(folder: Path, needles: list[str]) -> list[str]:
    """Those of `needles` whose UTF-8 or UTF-32 bytes any file under `folder` holds (a pickle keeps strings as
    UTF-8, a numpy unicode array, as the index's node ids, as UTF-32 in the machine's byte order)."""
    blobs = [p.read_bytes() for p in folder.rglob("*") if p.is_file()]
    forms = {n: (n.encode(), np.array([n]).tobytes()) for n in needles}
    return [n for n in needles if any(form in b for b in blobs for form in forms[n])]


def vector_on_disk(folder: Path, vector: np.ndarray) -> bool:
    """Whether any file under `folder` holds this vector's float32 bytes."""
    needle = np.asarray(vector, dtype=np.float32).tobytes()
    return any(needle in p.read_bytes() for p in folder.rglob("*") if p.is_file())


def test_a_forget_takes_the_forgotten_text_off_the_disk_before_it_returns(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path
) -> None:
    folder = tmp_path / "snapshots"
    writer = remembered(open_store, ns, folder)
    forgotten = next(n for n in writer.storage.source_nodes(ns, "a") if n.level == 1)
    gone = [n.id for n in writer.storage.source_nodes(ns, "a") if set(n.message_ids) & {forgotten.message_ids[0]}]
    assert gone and on_disk(folder, gone) == gone  # the snapshot holds the nodes of that message
    vectors = writer.storage.get_vectors(ns, gone)
    assert [i for i in gone if vector_on_disk(folder, vectors[i])] == gone  # and their vectors
    writer.deleter.delete(ns, DeleteRequest(conversation_id="a", ids=forgotten.message_ids[:1]))
    assert on_disk(folder, gone) == []  # gone when the forget is acknowledged, with no write awaited
    snapshots = writer.search.indexes.snapshots
    assert snapshots is not None
    expected = answers(writer, ns)  # refreshed; then evicted: its snapshot is written again, without them
    writer.search.indexes.max_nodes = 1
    answers(writer, f"{ns}-other")
    snapshots.settle()
    assert snapshots.path(ns).exists() and on_disk(folder, gone) == []
    # the index held them as dead rows until its write: it is written compact, without their vectors
    assert not any(vector_on_disk(folder, vectors[i]) for i in gone)
    restarted = open_store(index_snapshot_dir=folder, index_snapshot_min_nodes=0)
    assert answers(restarted, ns) == expected
    writer.deleter.delete(ns, DeleteRequest(delete_all=True))
    assert not snapshots.path(ns).exists()


def test_a_write_queued_before_a_forget_does_not_put_its_text_back(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path
) -> None:
    folder = tmp_path / "snapshots"
    writer = remembered(open_store, ns, folder)
    indexes = writer.search.indexes
    assert indexes.snapshots is not None
    held = indexes.get(ns)
    forgotten = next(n for n in writer.storage.source_nodes(ns, "b") if n.level == 1)
    gone = [n.id for n in writer.storage.source_nodes(ns, "b") if set(n.message_ids) & {forgotten.message_ids[0]}]
    writer.deleter.delete(ns, DeleteRequest(conversation_id="b", ids=forgotten.message_ids[:1]))
    held.token = "queued before the forget"  # the index as it was: its snapshot is due again
    indexes.snapshots.save_later(ns, held)
    indexes.snapshots.settle()
    assert on_disk(folder, gone) == []


def test_a_namespace_below_the_minimum_is_not_snapshotted(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path
) -> None:
    memory = open_store(index_snapshot_dir=tmp_path / "snapshots", index_snapshot_min_nodes=10_000)
    memory.writer.remember(ns, RememberRequest(conversation_id="a", messages=long_conversation(4)))
    expected = answers(memory, ns)
    snapshots = memory.search.indexes.snapshots
    assert snapshots is not None
    memory.search.indexes.max_nodes = 1
    answers(memory, f"{ns}-other")  # evicted as well as loaded: neither writes a file
    snapshots.settle()
    assert ns not in memory.search.indexes.held() and not snapshots.path(ns).exists()
    assert answers(memory, ns) == expected


def test_a_replaced_document_leaves_the_snapshot_when_upsert_returns(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path
) -> None:
    folder = tmp_path / "snapshots"
    writer = remembered(open_store, ns, folder)
    writer.writer.upsert(ns, [Document(id="d", text="The lighthouse keeper painted the rowing boat bright yellow.")])
    old = [n.id for n in writer.storage.source_nodes(ns, "d")]
    answers(writer, ns)
    writer.search.indexes.max_nodes = 1  # evicted: its snapshot now holds the document
    answers(writer, f"{ns}-other")
    snapshots = writer.search.indexes.snapshots
    assert snapshots is not None
    snapshots.settle()
    assert old and on_disk(folder, old) == old
    writer.writer.upsert(ns, [Document(id="d", text="The orchard was sold to a cider maker in the spring.")])
    assert on_disk(folder, old) == []


# ---------------------------------------------------------------------------------------------- preload at start
def preloading(open_store: Callable[..., Memory], folder: Path, **overrides: object) -> Memory:
    """A restarted store over `folder`'s snapshots that preloads up to all of INDEX_MAX_NODES (unless overridden)."""
    settings: dict[str, object] = {"index_snapshot_dir": folder, "index_snapshot_min_nodes": 0}
    settings |= {"index_preload_share": 1.0} | overrides
    return open_store(**settings)


def test_a_memory_written_while_the_server_was_down_is_found_after_the_preload(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "snapshots"
    writer = remembered(open_store, ns, folder)
    writer.close()  # the server stops; another process writes meanwhile
    late = [m.model_copy(update={"id": f"late-{m.id}"}) for m in long_conversation(3)]
    open_store().writer.remember(ns, RememberRequest(conversation_id="c", messages=late))
    restarted = preloading(open_store, folder)
    state = restarted.search.indexes.preload()
    assert (state.namespaces, state.done) == (1, True) and ns in restarted.search.indexes.held()
    calls = listed(restarted, monkeypatch)
    probe = restarted.embedder.embed([late[0].content])[0]
    found = [(n.id, n.text) for n, _ in restarted.search.search_vector(ns, probe, 50, None)]
    fresh = open_store()  # no snapshots: listed whole from the store
    assert found == [(n.id, n.text) for n, _ in fresh.search.search_vector(ns, probe, 50, None)]
    assert any(n.source_id == "c" for n in restarted.storage.get_nodes(ns, [i for i, _ in found]))
    assert answers(restarted, ns) == answers(fresh, ns)
    assert calls == []  # the preload had brought "c" in: the searches listed nothing


def test_the_preload_reads_the_namespaces_used_last_within_its_share(
    open_store: Callable[..., Memory], tmp_path: Path, ns: str
) -> None:
    folder = tmp_path / "snapshots"
    names = [f"{ns}-{i}" for i in range(4)]
    writer = open_store(index_snapshot_dir=folder, index_snapshot_min_nodes=0)
    for name in names:
        writer.writer.remember(name, RememberRequest(conversation_id="a", messages=long_conversation(4)))
        answers(writer, name)
    sizes = writer.search.indexes.held()
    snapshots = writer.search.indexes.snapshots
    assert snapshots is not None
    snapshots.settle()
    for age, name in enumerate([names[2], names[0], names[3], names[1]]):  # used last: 2, then 0, 3, 1
        os.utime(snapshots.path(name), (1_000_000 - age, 1_000_000 - age))
    assert [n for n, _ in snapshots.recent()] == [names[2], names[0], names[3], names[1]]
    cap = sizes[names[2]] + sizes[names[0]] + sizes[names[3]] - 1  # room for two and most of a third
    requested = f"{ns}-requested"  # a request's namespace, loaded before the preload reads any
    writer.writer.remember(requested, RememberRequest(conversation_id="a", messages=long_conversation(2)))
    restarted = preloading(open_store, folder, index_max_nodes=1_000_000, index_preload_share=1.0)
    restarted.search.indexes.preload_nodes = cap
    answers(restarted, requested)
    state = restarted.search.indexes.preload()
    held = restarted.search.indexes.held()
    assert set(held) == {names[2], names[0], requested}  # the two used last; the third passes the share
    assert (state.namespaces, state.nodes) == (2, sizes[names[2]] + sizes[names[0]]) and state.nodes <= cap
    assert answers(restarted, names[2]) == answers(writer, names[2])
    # within INDEX_MAX_NODES too: nothing a request loaded is dropped to make room
    tight = preloading(open_store, folder, index_max_nodes=1_000)
    tight.search.indexes.max_nodes = sizes[names[2]] + len(tight.search.indexes.get(requested)) + 1
    tight.search.indexes.preload()
    assert set(tight.search.indexes.held()) == {requested, names[2]}


def test_a_request_during_the_preload_reads_its_snapshot_once(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "snapshots"
    expected = answers(remembered(open_store, ns, folder), ns)
    restarted = preloading(open_store, folder)
    snapshots = restarted.search.indexes.snapshots
    assert snapshots is not None
    reads: list[str] = []
    reading, release = threading.Event(), threading.Event()
    inner = snapshots.read

    def slow_read(name: str) -> NamespaceIndex | None:
        reads.append(name)
        reading.set()
        release.wait(timeout=60)
        return inner(name)

    monkeypatch.setattr(snapshots, "read", slow_read)
    calls = listed(restarted, monkeypatch)
    restarted.search.indexes.start_preload()
    assert reading.wait(timeout=60)
    found: list[list[list[tuple[str, float]]]] = []
    request = threading.Thread(target=lambda: found.append(answers(restarted, ns)))
    request.start()
    release.set()
    request.join()
    restarted.search.indexes.close()  # waits for the preload
    assert found == [expected] and reads == [ns] and calls == []
    assert restarted.search.indexes.preload_state().done


def test_a_preloaded_namespace_forgotten_is_not_served_from_memory(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path
) -> None:
    folder = tmp_path / "snapshots"
    remembered(open_store, ns, folder).close()
    restarted = preloading(open_store, folder)
    assert restarted.search.indexes.preload().namespaces == 1
    forgotten = next(n for n in restarted.storage.source_nodes(ns, "a") if n.level == 1)
    gone = {n.id for n in restarted.storage.source_nodes(ns, "a") if set(n.message_ids) & {forgotten.message_ids[0]}}
    probe = restarted.embedder.embed([forgotten.text])[0]
    assert forgotten.id in {n.id for n, _ in restarted.search.search_vector(ns, probe, 5, None)}
    restarted.deleter.delete(ns, DeleteRequest(conversation_id="a", ids=forgotten.message_ids[:1]))
    assert not on_disk(folder, sorted(gone))  # its snapshot left the disk with the forget
    served = {n.id for n, _ in restarted.search.search_vector(ns, probe, 50, None)}
    served |= {ln.message_id for ln in restarted.outline.lines(ns, "a", probe, 50, forgotten.text)}
    assert not served & (gone | set(forgotten.message_ids[:1]))


def test_a_cold_context_block_reads_its_snapshot_while_it_embeds_the_query(
    open_store: Callable[..., Memory], ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "snapshots"
    request = ContextRequest(conversation_id="a", query=QUESTIONS[0], now="2026-01-01T00:00:00Z")
    writer = remembered(open_store, ns, folder)
    expected = writer.context.assemble(ns, request)
    writer.close()
    restarted = preloading(open_store, folder, index_preload_share=0.0)
    snapshots = restarted.search.indexes.snapshots
    assert snapshots is not None
    reads: list[str] = []
    reading = threading.Event()
    read, embed = snapshots.read, restarted.embedder.embed

    def recorded_read(name: str) -> NamespaceIndex | None:
        reads.append(name)
        reading.set()
        return read(name)

    def waiting_embed(texts: list[str], *, bulk: bool = False) -> np.ndarray:
        reading.wait(timeout=10)  # the index load started meanwhile (it depends on nothing the block reads)
        return embed(texts, bulk=bulk)

    monkeypatch.setattr(snapshots, "read", recorded_read)
    monkeypatch.setattr(restarted.embedder, "embed", waiting_embed)
    calls = listed(restarted, monkeypatch)
    started = time.monotonic()
    found = restarted.context.assemble(ns, request)
    assert time.monotonic() - started < 10  # the embedding never waited for a load that had not begun
    assert found == expected and reads == [ns] and calls == []
