"""The in-memory BM25 index: FTS5's scores (by the formula and against SQLite FTS5 itself), top-k by MaxScore equal
to scoring everything, incremental writes equal a rebuild, filters; and the local store's use of it."""

from __future__ import annotations

import math
import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from datastore.factory import open_memory
from datastore.indexes import text as text_index
from datastore.indexes.text import TextIndex
from datastore.memory import Memory
from datastore.read import ranking
from datastore.read.ranking import RowSearch
from models.api import DeleteRequest, Message, Query, QueryFilter, RememberRequest
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from services.text import text_terms
from tests.support.settings import make_settings
from tests.support.stores import local_storage, text_search
from tests.support.synthetic import conversation

NAN = float("nan")
WORDS = (
    "book books booking garden gardens gardening lake cabin violin violins bakery sister train museum recipe "
    "concert hiking piano the a and of to café cafe naïve Zoë 2023 x y relational conditional"
).split()


def build(texts: list[str], rowids: list[int] | None = None, levels: list[int] | None = None) -> TextIndex:
    index = TextIndex()
    n = len(texts)
    index.add(rowids or list(range(1, n + 1)), texts, levels or [1] * n, [NAN] * n, [NAN] * n)
    return index


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))) for _ in range(n)]


def by_rowid(index: TextIndex, terms: list[str]) -> dict[int, float]:
    scores = index.scores(terms)
    return {int(index.rowids[i]): float(scores[i]) for i in np.flatnonzero(scores) if index.alive[i]}


def test_scores_follow_the_bm25_formula_on_a_hand_checked_corpus() -> None:
    texts = ["The cat sat", "Cats and dogs", "a dog barked at the dog", "birds sing", "fish swim", "the sun rose"]
    index = build(texts)
    n, avgdl = 6, 19 / 6  # token counts 3, 3, 6, 2, 2, 3: stop words count, as in FTS5

    def part(df: int, tf: int, dl: int) -> float:
        idf = math.log((n - df + 0.5) / (df + 0.5))
        return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / avgdl))

    # "dogs" and "dog" stem alike: df 2, idf ln(4.5 / 2.5); row 3: tf 2 of 6 tokens, row 2: tf 1 of 3 (by hand below)
    ids, scores = index.search(["dogs"], 10)
    assert ids.tolist() == [3, 2]
    assert scores.tolist() == pytest.approx([part(2, 2, 6), part(2, 1, 3)], rel=1e-6)
    assert scores[0] == pytest.approx(0.6457, abs=1e-4) and scores[1] == pytest.approx(0.6007, abs=1e-4)
    ids, scores = index.search(["cat", "sun"], 10)  # row 6 holds the rarer "sun" (df 1)
    assert ids.tolist() == [6, 1, 2]
    assert scores.tolist() == pytest.approx([part(1, 1, 3), part(2, 1, 3), part(2, 1, 3)], rel=1e-6)
    ids, scores = index.search(["the"], 10)  # in 3 of 6 rows: idf ln(1) = 0, floored to 1e-6 as FTS5 does
    assert sorted(ids.tolist()) == [1, 3, 6] and scores.max() < 1e-5
    assert index.search(["cat", "cat"], 10)[1][0] == pytest.approx(2 * part(2, 1, 3), rel=1e-6)  # two phrases
    assert index.search(["unknown"], 10)[0].tolist() == [] and index.search([], 10)[0].tolist() == []


def test_scores_equal_sqlite_fts5_porter_unicode61_bm25() -> None:
    texts = corpus(2000) + ["Books\x01gardens", "SNAKE_case gardening-books (2023)", "Zoë's CAFÉ, naïve!", "", "..."]
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5(t, tokenize='porter unicode61')")
    db.executemany("INSERT INTO f (rowid, t) VALUES (?, ?)", list(enumerate(texts, 1)))
    index = build(texts)
    for query in (
        "books about gardens",
        "Café violin",
        "the",
        "naïve piano 2023 x",
        "Booking a CAFE for zoe",
        "relational conditionals",
        "nothing matches this",
        "snake case",
        "Zoe",
    ):
        terms = text_terms(query)
        want = dict(
            db.execute(
                "SELECT rowid, -bm25(f) FROM f WHERE f MATCH ?", (" OR ".join(f'"{w}"' for w in terms),)
            ).fetchall()
        )
        got = by_rowid(index, terms)
        assert got.keys() == want.keys(), query
        assert all(got[r] == pytest.approx(want[r], rel=1e-5) for r in want), query


def test_top_k_by_maxscore_equals_scoring_every_row() -> None:
    index = build(corpus(5000, seed=1), levels=[1 + i % 3 for i in range(5000)])
    rng = random.Random(2)
    for _ in range(60):
        terms = text_terms(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))))
        for k, low in ((1, None), (5, None), (50, 2), (4000, None)):
            scores = index.scores(terms)
            keep = scores > 0
            if low is not None:
                keep &= index.levels[: index.size] >= low
            want = np.sort(scores[keep])[::-1][:k]
            ids, got = index.search(terms, k, min_level=low)
            assert np.allclose(got, want, rtol=1e-5), (terms, k)
            assert np.allclose(scores[ids - 1], got) and np.all(np.diff(got) <= 0)


def test_incremental_adds_and_removals_equal_a_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_index, "_MERGE_MIN", 500)  # merge the tail often,
    monkeypatch.setattr(text_index, "_MERGE_CHUNK", 1000)  # in many steps
    texts = corpus(6000, seed=3)
    live = TextIndex()
    rng = random.Random(4)
    alive: dict[int, str] = {}
    for start in range(0, 6000, 37):
        batch = list(range(start + 1, min(start + 38, 6001)))
        live.add(batch, [texts[r - 1] for r in batch], [1] * len(batch), [NAN] * len(batch), [NAN] * len(batch))
        alive.update((r, texts[r - 1]) for r in batch)
        gone = rng.sample(sorted(alive), min(len(alive), 25))
        live.remove(gone + [10**9])  # an unknown id is ignored
        for r in gone:
            del alive[r]
    assert len(live) == len(alive) and live.size < 6000  # compacted on the way (more than a quarter dead)
    rebuilt = build(list(alive.values()), rowids=list(alive))
    for query in ("books about gardens", "Café violin", "the", "naïve piano 2023 x", "hiking lake cabin"):
        terms = text_terms(query)
        got, want = by_rowid(live, terms), by_rowid(rebuilt, terms)
        assert got.keys() == want.keys()
        assert all(got[r] == pytest.approx(want[r], rel=1e-5) for r in want)
        assert np.allclose(live.search(terms, 20)[1], rebuilt.search(terms, 20)[1], rtol=1e-5)
    with pytest.raises(ValueError):
        live.add([5], ["an older row id"], [1], [NAN], [NAN])


def test_filters_keep_exactly_the_allowed_rows() -> None:
    n = 3000
    texts = corpus(n, seed=5)
    index = TextIndex()
    rowids = np.arange(1, n + 1) * 2
    levels = 1 + np.arange(n) % 3
    starts = np.where(np.arange(n) % 7 == 0, np.nan, np.arange(n, dtype=float))
    index.add(rowids, texts, levels, starts, starts + 5)
    terms = text_terms("garden violin piano")
    scores = index.scores(terms)
    cand = rowids[::5]
    cases = [
        ({"min_level": 2}, levels >= 2),
        ({"max_level": 1}, levels <= 1),
        ({"min_level": 2, "max_level": 2}, levels == 2),
        ({"start": 1000.0}, starts + 5 >= 1000),
        ({"end": 500.0}, starts <= 500),
        ({"candidates": cand}, np.isin(rowids, cand)),
        (
            {"candidates": cand, "min_level": 3, "start": 100.0, "end": 2000.0},
            np.isin(rowids, cand) & (levels >= 3) & (starts + 5 >= 100) & (starts <= 2000),
        ),
    ]
    for kwargs, keep in cases:
        ids, _ = index.search(terms, n, **kwargs)  # type: ignore[arg-type]
        assert set(ids.tolist()) == set(rowids[keep & (scores > 0)].tolist()), kwargs


def test_the_local_store_keeps_its_text_index_in_step_with_its_own_and_other_processes_writes(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    settings = make_settings(tmp_path)
    a = open_memory(settings, embedder, ExtractiveSummariser())
    b = open_memory(settings, embedder, ExtractiveSummariser())  # another process, same file
    try:
        fts = "SELECT name FROM sqlite_master WHERE name LIKE 'nodes_fts%'"
        assert not local_storage(a).db.reader.execute(fts).fetchall()
        a.writer.remember("ns", RememberRequest(conversation_id="c1", messages=conversation(("Ann", "Ben"), 30)))
        assert text_search(a).search("ns", "xylophone", 5) == [] and text_search(b).search("ns", "xylophone", 5) == []
        said = Message(speaker="Ann", content="I tuned my old xylophones at the lake cabin today.")
        a.writer.remember("ns", RememberRequest(conversation_id="c2", messages=[said]))
        for memory in (a, b):  # a applies its own commit, b reloads at the new namespace version
            hits = text_search(memory).search("ns", "xylophone", 5, QueryFilter(level=1))
            assert [n.source_id for n, _ in hits] == ["c2"] and hits[0][1] > 0
            assert text_search(memory).search("ns", "xylophone", 5, QueryFilter(conversation_id="c1")) == []
            q = Query(query="xylophone lake", top_k=3, mode="hybrid")
            assert memory.reader.query("ns", [q]).results[0].results[0].conversation_id == "c2"
        b.deleter.delete("ns", DeleteRequest(ids=["c2"]))
        assert text_search(b).search("ns", "xylophone", 5) == [] and text_search(a).search("ns", "xylophone", 5) == []
    finally:
        a.close()
        b.close()


class _NodesOnly:
    """The same store's search seen through node searches only (no RowSearch, as a fork's lineage view): hybrid
    then reads both pools' nodes and the text-only candidates' vectors from the store."""

    rows: RowSearch | None = None

    def __init__(self, memory: Memory) -> None:
        search = memory.search
        self.text = search.text
        self.search_vector, self.get_vectors = search.search_vector, search.get_vectors
        self.get_nodes, self.source_nodes = search.get_nodes, search.source_nodes
        self.fork_of, self.load_soon = search.fork_of, search.load_soon


def test_hybrid_over_row_ids_ranks_and_scores_as_over_nodes(
    tmp_path: Path, embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hybrid fuses row ids from the in-memory indexes and reads only the top_k nodes; the path of a fork's view
    fuses nodes. Same hits, same order, same scores, with and without filters."""
    monkeypatch.setattr(ranking, "POOL", 6)  # pools smaller than the namespace: text-only candidates exist
    memory = open_memory(make_settings(tmp_path), embedder, ExtractiveSummariser())
    looked_up: list[int] = []
    row_search = memory.search
    row_cosines = row_search.row_cosines

    def counting(ns: str, rowids: np.ndarray, vector: np.ndarray) -> dict[int, float]:
        looked_up.append(len(rowids))
        return row_cosines(ns, rowids, vector)

    row_search.row_cosines = counting  # type: ignore[method-assign]
    try:
        for i, pair in enumerate((("Ann", "Ben"), ("Cy", "Dee"), ("Eve", "Fay"))):
            memory.writer.remember("ns", RememberRequest(conversation_id=f"c{i}", messages=conversation(pair, 60)))
        assert memory.search.rows is not None and _NodesOnly(memory).rows is None
        questions = [
            "where did they go hiking",
            "the lake cabin trip",
            "what did Ben cook for dinner",
            "violin lessons",
            "zzz qqq",
        ]
        vectors = embedder.embed(questions)
        for flt in (None, QueryFilter(conversation_id="c1"), QueryFilter(speaker="Eve")):
            for q, v in zip(questions, vectors, strict=True):
                rows = ranking.hybrid(memory.search, "ns", q, v, 4, flt)
                nodes = ranking.hybrid(_NodesOnly(memory), "ns", q, v, 4, flt)
                assert [n.id for n, _ in rows] == [n.id for n, _ in nodes] and rows, (q, flt)
                assert np.allclose([s for _, s in rows], [s for _, s in nodes], atol=1e-6)
        assert max(looked_up) > 0  # some text-only candidates took their cosine from the in-memory vectors
    finally:
        memory.close()


def test_what_a_loaded_index_holds_less_of_answers_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory cuts that must not move a score (bench/RESULTS.md, many users): the postings folded into one block
    at the end of a load (`prepare`), a vocabulary shared with another index of the namespace, texts cut into
    tokens a batch at a time; and an ASCII word is kept once, as bytes."""
    texts = corpus(3000, seed=7) + ["Zoë's CAFÉ, naïve!", "Books\x01gardens"]
    plain = build(texts)
    monkeypatch.setattr(text_index, "_TOKENISE_CHARS", 500)  # many batches
    other = build(corpus(500, seed=8) + ["relational words only here, zephyr"])  # its words first in the shared ids
    shared = TextIndex(other)
    n = len(texts)
    for a in range(0, n, 400):  # added in parts, as a load does: a tail of per-term arrays
        b = min(n, a + 400)
        shared.add(list(range(a + 1, b + 1)), texts[a:b], [1] * (b - a), [NAN] * (b - a), [NAN] * (b - a))
    assert shared.tail and shared.vocab is other.vocab
    before = {q: shared.search(text_terms(q), 20) for q in ("books about gardens", "relational", "Café violin")}
    shared.prepare()
    assert not shared.tail and shared.tail_size == 0
    for query in ("books about gardens", "Café violin", "the", "naïve piano 2023 x", "relational", "hiking lake"):
        terms = text_terms(query)
        assert by_rowid(shared, terms) == by_rowid(plain, terms), query  # equal, not approximately
        ids, scores = shared.search(terms, 20)
        want_ids, want_scores = plain.search(terms, 20)
        assert ids.tolist() == want_ids.tolist() and scores.tolist() == want_scores.tolist(), query
        if query in before:
            assert ids.tolist() == before[query][0].tolist() and scores.tolist() == before[query][1].tolist()
    assert "zephyr" not in shared.vocab and b"zephyr" in shared.vocab.ascii  # a word of ASCII texts: bytes only
    assert "naive" in shared.vocab  # a word of a text that is not ASCII: by its str
