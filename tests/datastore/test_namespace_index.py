"""One namespace's index bookkeeping: node ids held as arrays (`NodeIds`), rows added, moved and forgotten, and
what a snapshot of it pickles (no Python object per row)."""

from __future__ import annotations

import pickle
import random

import numpy as np

from datastore.indexes.namespaces import NamespaceIndex
from datastore.indexes.rows import NodeIds
from datastore.storage import IndexEntry


def test_node_ids_follow_a_dict_through_adds_removes_and_a_pickle() -> None:
    rng = random.Random(3)
    ids, nxt = NodeIds(), 1
    model: dict[int, str] = {}
    for step in range(60):
        if model and rng.random() < 0.35:
            gone = sorted(rng.sample(sorted(model), rng.randint(1, min(6, len(model)))))
            ids.remove(np.array(gone, dtype=np.int64))
            for r in gone:
                del model[r]
        else:
            n = rng.randint(1, 9)
            rows = np.arange(nxt, nxt + n, dtype=np.int64)
            nxt += n + rng.randint(0, 3)
            # ids of every width, some beyond ASCII, so the column widens as it grows
            new = [f"n{step}_{k}" + "é" * rng.randint(0, 12) for k in range(n)]
            ids.add(rows, new)
            model.update(zip(rows.tolist(), new, strict=True))
        if step == 30:  # read back as a snapshot would: the reverse map is built again on its first use
            buffers: list[pickle.PickleBuffer] = []
            ids = pickle.loads(pickle.dumps(ids, protocol=5, buffer_callback=buffers.append), buffers=buffers)
        probe = sorted(model) + [0, nxt + 5]
        assert ids.of(probe) == [model.get(r) for r in probe]
        assert len(ids) == len(model)
        assert ids.row_of() == {i: r for r, i in model.items()}


def entry(node_id: str, source: str, level: int, position: int, speakers: list[str], sessions: list[str]) -> IndexEntry:
    vector = np.random.default_rng(position).normal(size=8).astype(np.float32)
    text = f"{' and '.join(speakers)} talk about the harbour, entry {position}"
    return IndexEntry(node_id, "conversation", source, level, position, 0.0, 1.0, speakers, sessions, text, vector)


def test_a_moved_node_keeps_one_row_and_a_forget_leaves_no_fact_behind() -> None:
    index = NamespaceIndex(8, ann_min_rows=10_000)
    index.add([entry(f"c{i}", "a", 1, i, ["Ann"] if i % 2 else ["Ann", "Bo"], [f"s{i % 3}"]) for i in range(6)])
    index.add([entry(f"l{i}", "a", 0, i, ["Ann"], []) for i in range(4)])
    # c3 moves to source "b" (as when a node is re-parented between two listings)
    index.add([entry("c3", "b", 1, 0, ["Cy"], ["s9"])])
    assert len(index) == 10
    assert index.ids.row_of()["c3"] == 11
    assert 4 not in index.by_source["a"] and index.by_source["b"] == [11]
    assert index.speakers["Cy"] == {11} and 4 not in index.speakers["Ann"] and index.sessions["s9"] == {11}
    index.drop_sources(["b"])  # the moved node goes with its new source
    assert "Cy" not in index.speakers and "s9" not in index.sessions and "c3" not in index.ids.row_of()
    index.drop_sources(["a"])  # then everything else: no speaker, session, row or id is left
    assert len(index) == 0 and index.speakers == {} and index.sessions == {}
    assert index.ids.of([1, 7, 11]) == [None, None, None]


def test_a_snapshot_pickles_no_node_id_in_band() -> None:
    index = NamespaceIndex(8, ann_min_rows=10_000)
    index.add([entry(f"c1_{i:016x}", "a", 1, i, ["Ann"], ["s1"]) for i in range(300)])
    index.add([entry(f"l0_{i:016x}", "a", 0, i, ["Ann"], []) for i in range(300)])
    buffers: list[pickle.PickleBuffer] = []
    pickled = pickle.dumps(index, protocol=5, buffer_callback=buffers.append)
    assert not any(f"{i:016x}".encode() in pickled for i in range(300))  # the ids travel out of band, as arrays
    read = pickle.loads(pickled, buffers=buffers)
    assert read.ids.of(np.arange(1, 601)) == index.ids.of(np.arange(1, 601))
    assert read.text.vocab.terms == index.text.vocab.terms and read.lines.text.vocab is read.text.vocab
    read.add([entry("c1_new", "a", 1, 400, ["Ann"], ["s1"])])  # a read-back index takes new rows, words and ids
    assert read.ids.row_of()["c1_new"] == 601
    terms = read.text.vocab.terms  # the terms held keep their ids; the one new word ("400") gets the next
    assert {t: terms[t] for t in index.text.vocab.terms} == index.text.vocab.terms
    assert len(terms) == len(index.text.vocab.terms) + 1


def test_compacting_lets_go_of_a_forgotten_text_s_rows_and_words() -> None:
    index = NamespaceIndex(8, ann_min_rows=10_000)
    index.add([entry(f"c{i}", "a", 1, i, ["Ann"], []) for i in range(4)])
    secret = entry("c9", "b", 1, 9, ["Ann"], [])._replace(text="Ann keeps the zeppelin blueprints under the floor")
    index.add([secret, entry("l9", "b", 0, 9, ["Ann"], [])._replace(text="Ann: the zeppelin blueprints")])
    assert "zeppelin" in index.text.vocab.terms
    index.drop_sources(["b"])
    assert index.vectors.dead == 1 and index.lines.vectors.dead == 1  # only marked dead: a quarter is not reached
    index.compact()
    assert index.vectors.dead == index.text.dead == index.lines.vectors.dead == index.ids.dead == 0
    assert "zeppelin" not in index.text.vocab.terms and "harbour" in index.text.vocab.terms
    pickled = pickle.dumps(index, protocol=5, buffer_callback=lambda b: None)
    assert b"zeppelin" not in pickled and b"blueprint" not in pickled
    # a term let go is never given its id again: the word said anew gets a new id, found by a search
    before = index.text.vocab.next_id
    index.add([entry("c10", "a", 1, 10, ["Ann"], [])._replace(text="the zeppelin lands at noon")])
    assert index.text.vocab.terms["zeppelin"] >= before
    found, _ = index.text.search(["zeppelin"], 5)
    assert index.ids.of(found) == ["c10"]


def test_a_source_s_line_ids_follow_its_lines_through_adds_forgets_and_a_pickle() -> None:
    index = NamespaceIndex(8, ann_min_rows=10_000)
    index.add([entry(f"l{i}", "a", 0, i, ["Ann"], []) for i in range(3)] + [entry("c0", "a", 1, 0, ["Ann"], [])])
    assert index.line_ids_of("a") == ["l0", "l1", "l2"] and index.line_ids_of("b") == []
    index.add([entry("l3", "a", 0, 3, ["Ann"], []), entry("m0", "b", 0, 0, ["Bo"], [])])
    assert index.line_ids_of("a") == ["l0", "l1", "l2", "l3"] and index.line_ids_of("b") == ["m0"]
    index._forget([index.ids.row_of()["l1"]])  # a forget of one line
    assert index.line_ids_of("a") == ["l0", "l2", "l3"]
    index.drop_sources(["b"])
    assert index.line_ids_of("b") == []
    read = pickle.loads(pickle.dumps(index))
    assert read.line_ids == {} and read.line_ids_of("a") == ["l0", "l2", "l3"]
