"""Ranking: which nodes a query returns, best first, by mode, over anything `Searchable` (the in-memory search
over a Storage, datastore/indexes/search.py, the same for every provider; or the view of a fork's lineage,
datastore/read/lineage.py).

Modes (`Query.mode`, default the `RETRIEVAL_MODE` setting):

- `dense`: cosine similarity of the query's embedding over every level the filter allows (chunks and summaries).
- `text`: BM25 over the node texts, every level the filter allows.
- `hybrid` (the default): L1 chunks ranked by a fusion of both: each list's scores are min-max normalised over
  the pooled candidates and mixed `TEXT_WEIGHT * bm25 + (1 - TEXT_WEIGHT) * cosine`.
- `tree`: tree-guided: the best-matching summaries are descended to their closest chunks, and a chunk's cosine
  is raised by `ANCESTOR_WEIGHT` times the best cosine of its summaries above it.

`hybrid` and `tree` return L1 chunks unless the filter names levels: a summary costs context tokens but holds
only a selection of what it covers, and every chunk names its summary in `parent_id`. On LoCoMo (bench/RESULTS.md)
`hybrid` finds the most evidence per token. A view without text search degrades `text` and `hybrid` to
`dense` over the same levels. Every function returns `[(MemoryNode, score)]`, higher is better, on a scale that
is the same from query to query within a mode (so a `min_score` floor means something):

- `dense`: the cosine, in [-1, 1] (MiniLM: unrelated text ~0-0.2, a paraphrase ~0.5-0.8).
- `text`: `text_strength(bm25) = bm25 / (bm25 + BM25_HALF)`, in [0, 1) (0.5 at a BM25 of BM25_HALF).
- `hybrid`: in [0, 1]: the min-max rank fusion times the pool's best absolute match (see `hybrid`); the ranking,
  and so bench.recall, is the same as plain min-max fusion. Measured (bench/RESULTS.md "Relevance floor", the top
  33 of each question): a candidate holding the question's evidence scores 0.19-0.67 on LoCoMo and 0.19-0.64 on
  BEAM (5th-95th percentile, median 0.48 / 0.34); one from a conversation holding nothing about the question
  0.12-0.31 and 0.11-0.35 (median 0.17 / 0.18): a chunk sharing one common word with the query scores ~0.2, so
  the scales overlap and a floor only removes the weakest matches (`Floor`).
- `tree`: `cosine + ANCESTOR_WEIGHT * best ancestor cosine`, in [-1.25, 1.25].
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, get_args

import numpy as np

from datastore.storage import Hits, node_matches
from models.api import QueryFilter, RetrievalMode
from models.memory import MemoryNode

K = TypeVar("K", bound=Hashable)

MODES: tuple[str, ...] = get_args(RetrievalMode)
POOL = 50  # candidates drawn from each list before fusing (at least top_k)
TEXT_WEIGHT = 0.6  # share of BM25 in `hybrid`; tuned on LoCoMo (0.5-0.7 are within 0.005 of each other)
BM25_HALF = 8.0  # the BM25 at which the text strength of a `hybrid` match is 0.5 (see text_strength)
SUMMARY_BEAM = 5  # summaries `tree` descends from
ANCESTOR_WEIGHT = 0.25  # weight of the best ancestor's cosine in `tree`


@dataclass(frozen=True)
class Floor:
    """The relevance floor: what a query shares with a memory by meaning (the cosine of their MiniLM embeddings)
    or by words only (the `hybrid` score of a memory under the meaning floor). A memory passes when its cosine
    reaches `meaning`, or else its hybrid score reaches `words`. Chosen on LoCoMo dev and BEAM 100K chats 11-20
    (bench/floor.py, RESULTS "Relevance floor"; the same on the halves chosen on and held out): at 0.35 / 0.2 a
    candidate holding the question's evidence passes 96-97% of the time, one from a conversation holding nothing
    about it 45-54%. The two overlap: a higher floor cost the conversation-scoped block evidence (LoCoMo conv-26,
    30, 41 @1000: 0.746 today, 0.742 at 0.35 / 0.2, 0.740 at 0.35 / 0.25, 0.719 at 0.4 / 0.3)."""

    words: float
    meaning: float

    def passes(self, score: float, cosine: float) -> bool:
        """Whether a memory of `score` (hybrid) and `cosine` to the query is relevant enough to show."""
        return cosine >= self.meaning or score >= self.words


class TextSearch(Protocol):
    """BM25 full-text search over a namespace's nodes."""

    def search(self, ns: str, text: str, top_k: int, flt: QueryFilter | None = None) -> Hits:
        """The top_k nodes matching `flt` (levels included) that hold a word of `text` (services.text.text_terms,
        OR-ed, stemmed), [(node, bm25)] best first; [] when the text has no word."""
        ...


class RowSearch(Protocol):
    """Both searches answered as (row ids, scores) from in-memory indexes without reading a node, so `hybrid`
    fuses two pools and reads only the top_k nodes it returns (`hits`). Row ids are the index's own."""

    def vector_rows(
        self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(row ids int64, cosines float32) of the top_k nodes matching `flt`, best first."""
        ...

    def text_rows(self, ns: str, text: str, top_k: int, flt: QueryFilter | None) -> tuple[np.ndarray, np.ndarray]:
        """(row ids int64, BM25 scores float32) of the top_k nodes matching `flt` holding a word of `text`."""
        ...

    def row_cosines(self, ns: str, rowids: np.ndarray, vector: np.ndarray) -> dict[int, float]:
        """{row id: cosine to `vector`} of those rows still live."""
        ...

    def hits(self, ns: str, rowids: np.ndarray, scores: np.ndarray) -> Hits:
        """[(node, score)] for the row ids, in their order (nodes deleted meanwhile are left out)."""
        ...


class Searchable(Protocol):
    """What ranking reads: the in-memory search over a Storage (datastore/indexes/search.py), or a fork's
    lineage view over it."""

    text: TextSearch | None
    rows: RowSearch | None

    def search_vector(self, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None) -> Hits: ...

    def get_vectors(self, ns: str, ids: Sequence[str]) -> dict[str, np.ndarray]: ...

    def get_nodes(self, ns: str, ids: Sequence[str]) -> list[MemoryNode]: ...

    def source_nodes(
        self, ns: str, source_id: str, level: int | None = None, first: int = 0, last: int | None = None
    ) -> list[MemoryNode]: ...

    def fork_of(self, ns: str, source_id: str) -> dict[str, Any] | None:
        """The conversation's fork record (datastore/read/lineage.py), None when it is no fork or unknown."""
        ...

    def load_soon(self, ns: str) -> None:
        """Start making the namespace searchable in the background (a cold namespace's index load), returning at
        once: a caller's reads and embedding that do not depend on it overlap it."""
        ...


def with_levels(flt: QueryFilter | None, level: int | None = None, min_level: int | None = None) -> QueryFilter:
    """`flt` restricted to `level` (or to `min_level` and up) unless it already names levels itself."""
    base = flt or QueryFilter()
    if base.level is not None or base.min_level is not None or base.max_level is not None:
        if min_level is not None and base.level is None:  # a summary search inside the caller's range
            low = max(base.min_level or 1, min_level)
            if base.max_level is not None and low > base.max_level:
                return base.model_copy(update={"level": base.max_level + 1})  # matches nothing
            return base.model_copy(update={"min_level": low})
        return base
    return base.model_copy(update={"level": level, "min_level": min_level})


def dense(view: Searchable, ns: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None) -> Hits:
    """Cosine top_k over every level `flt` allows."""
    return view.search_vector(ns, np.asarray(vector, dtype=np.float32), top_k, flt)


def text(view: Searchable, ns: str, query: str, vector: np.ndarray, top_k: int, flt: QueryFilter | None) -> Hits:
    """BM25 top_k over every level `flt` allows, scored `text_strength(bm25)`; `dense` when the view has no
    text search."""
    if view.text is None:
        return dense(view, ns, vector, top_k, flt)
    return [(n, text_strength(s)) for n, s in view.text.search(ns, query, top_k, flt)]


def text_strength(bm25: float, half: float | None = None) -> float:
    """A BM25 score mapped to [0, 1) by saturation, `bm25 / (bm25 + half)` (0 for no match): the same BM25
    gives the same strength in every query, unlike a min-max over one query's candidates."""
    h = BM25_HALF if half is None else half
    return bm25 / (bm25 + h) if bm25 > 0 else 0.0


def _normalised(scores: dict[K, float]) -> dict[K, float]:
    """Min-max scaled to [0, 1] (all 1.0 when the scores are equal)."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    span = high - low
    return {k: (v - low) / span if span > 0 else 1.0 for k, v in scores.items()}


def hybrid(
    view: Searchable,
    ns: str,
    query: str,
    vector: np.ndarray,
    top_k: int,
    flt: QueryFilter | None,
    weight: float = TEXT_WEIGHT,
    floor: Floor | None = None,
) -> Hits:
    """L1 chunks (unless `flt` names levels) ranked by `weight * bm25 + (1 - weight) * cosine`, each min-max
    normalised over the pool (the top max(POOL, top_k) of each list; a text-only candidate gets its exact
    cosine, a dense-only one a BM25 of 0), scored as `fuse` says. `dense` over the same levels without a text
    search. A view with row search fuses row ids and reads only the nodes returned. `floor`: only the top_k that
    pass it are returned (with row search, only they are read)."""
    leaf = with_levels(flt, level=1)
    pool = max(POOL, top_k)
    if view.rows is not None:
        rows, cosines = view.rows.vector_rows(ns, vector, pool, leaf)
        text_rows, bm25s = view.rows.text_rows(ns, query, pool, leaf)
        cosine = dict(zip(rows.tolist(), cosines.tolist(), strict=True))
        missing = np.array([r for r in text_rows.tolist() if r not in cosine], dtype=np.int64)
        found = view.rows.row_cosines(ns, missing, vector)
        cosine.update((r, found[r]) for r in missing.tolist() if r in found)  # in text order, as below
        best = fuse(cosine, dict(zip(text_rows.tolist(), bm25s.tolist(), strict=True)), weight, top_k)
        if floor is not None:  # the candidates under the floor are never read
            best = [(r, s) for r, s in best if floor.passes(s, cosine.get(r, 0.0))]
        return view.rows.hits(ns, np.array([r for r, _ in best], dtype=np.int64), np.array([s for _, s in best]))
    dense_hits = dense(view, ns, vector, pool, leaf)
    if view.text is None:
        hits = dense_hits[:top_k]
    else:
        text_hits = view.text.search(ns, query, pool, leaf)
        nodes = {n.id: n for n, _ in dense_hits} | {n.id: n for n, _ in text_hits}
        cosine = {n.id: s for n, s in dense_hits}
        missing_ids = [i for i in nodes if i not in cosine]
        if missing_ids:
            q = np.asarray(vector, dtype=np.float32)
            vectors = view.get_vectors(ns, missing_ids)
            cosine.update((i, float(vectors[i] @ q)) for i in missing_ids if i in vectors)
        hits = [(nodes[i], s) for i, s in fuse(cosine, {n.id: s for n, s in text_hits}, weight, top_k)]
    return hits if floor is None else passing(view, ns, hits, vector, floor)


def passing(view: Searchable, ns: str, hits: Hits, vector: np.ndarray, floor: Floor) -> Hits:
    """The hits that pass `floor`, in order: by their score and their cosine to the query (0 for a node without
    an embedding)."""
    vectors = view.get_vectors(ns, [n.id for n, _ in hits])
    return [(n, sc) for n, sc in hits if floor.passes(sc, float(vectors[n.id] @ vector) if n.id in vectors else 0.0)]


def fuse(cosine: dict[K, float], bm25: dict[K, float], weight: float, top_k: int) -> list[tuple[K, float]]:
    """The top_k keys of both pools (cosine's first, then BM25's; ties keep that order) by
    `weight * minmax(bm25) + (1 - weight) * minmax(cosine)` (a key missing from a pool scores 0 there), each
    score multiplied by the pool's best absolute match, `max(weight * text_strength(bm25) + (1 - weight) *
    max(cosine, 0))`: in [0, 1] and comparable across queries, so an unrelated query scores low while the
    ranking (and recall) is the min-max fusion's."""
    keys = list(dict.fromkeys([*cosine, *bm25]))
    d, t = _normalised(cosine), _normalised(bm25)
    fused = {k: weight * t.get(k, 0.0) + (1 - weight) * d.get(k, 0.0) for k in keys}
    strength = max(
        (weight * text_strength(bm25.get(k, 0.0)) + (1 - weight) * max(cosine.get(k, 0.0), 0.0) for k in keys),
        default=0.0,
    )
    best = sorted(keys, key=lambda k: -fused[k])[:top_k]
    return [(k, fused[k] * strength) for k in best]


def tree(
    view: Searchable,
    ns: str,
    vector: np.ndarray,
    top_k: int,
    flt: QueryFilter | None,
    beam: int = SUMMARY_BEAM,
    weight: float = ANCESTOR_WEIGHT,
) -> Hits:
    """Tree-guided: descend from the `beam` closest summaries to their closest chunks (`beam` per level), pool
    them with the closest chunks, score each `cosine + weight * best ancestor cosine` (its own cosine when it
    has no summary yet). L1 chunks; plain `dense` when `flt` names levels."""
    if flt is not None and (flt.level is not None or flt.min_level is not None or flt.max_level is not None):
        return dense(view, ns, vector, top_k, flt)
    q = np.asarray(vector, dtype=np.float32)
    known: dict[str, MemoryNode] = {}
    cos: dict[str, float] = {}

    def score(nodes: Sequence[MemoryNode]) -> None:
        known.update((n.id, n) for n in nodes)
        todo = [n.id for n in nodes if n.id not in cos]
        cos.update((i, float(v @ q)) for i, v in view.get_vectors(ns, todo).items())

    leaves = [n for n, _ in dense(view, ns, q, max(POOL, top_k), with_levels(flt, level=1))]
    score(leaves)
    frontier = [n for n, _ in dense(view, ns, q, beam, with_levels(flt, min_level=2))]
    while frontier:  # descend: the `beam` closest nodes of each level below the closest summaries
        score(frontier)
        child_ids = [c for n in frontier for c in n.children]
        children = view.get_nodes(ns, child_ids) if child_ids else []
        score(children)
        leaves += [c for c in children if c.level == 1 and node_matches(c, flt)]
        frontier = sorted((c for c in children if c.level > 1), key=lambda c: -cos[c.id])[:beam]
    pool = {n.id: n for n in leaves}
    ancestors: dict[str, list[str]] = {n.id: [] for n in pool.values()}  # leaf id -> ancestor ids
    tips = {n.id: n.parent_id for n in pool.values()}
    while any(tips.values()):  # climb every leaf to its root, one batched read per level
        missing = [p for p in set(tips.values()) if p and p not in known]
        score(view.get_nodes(ns, missing) if missing else [])
        for leaf, parent in list(tips.items()):
            if parent is not None and parent in known:
                ancestors[leaf].append(parent)
                tips[leaf] = known[parent].parent_id
            else:
                tips[leaf] = None
    scores = {i: cos[i] + weight * max((cos[a] for a in ancestors[i]), default=cos[i]) for i in pool}
    best = sorted(scores, key=lambda i: -scores[i])[:top_k]
    return [(pool[i], scores[i]) for i in best]


def rank(
    view: Searchable,
    ns: str,
    query: str,
    vector: np.ndarray,
    top_k: int,
    flt: QueryFilter | None,
    mode: str,
    floor: Floor | None = None,
) -> Hits:
    """The top_k nodes for one query by `mode` (one of MODES), those that pass `floor` only when one is given
    (`passing`); raises ValueError for another mode."""
    if mode == "hybrid":
        return hybrid(view, ns, query, vector, top_k, flt, floor=floor)
    if mode == "dense":
        hits = dense(view, ns, vector, top_k, flt)
    elif mode == "text":
        hits = text(view, ns, query, vector, top_k, flt)
    elif mode == "tree":
        hits = tree(view, ns, vector, top_k, flt)
    else:
        raise ValueError(f"unknown retrieval mode {mode!r}; one of {', '.join(MODES)}")
    return hits if floor is None else passing(view, ns, hits, vector, floor)
