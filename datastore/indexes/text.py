"""An in-memory BM25 index for one namespace: the local store's full-text search (`search_text`).

It replaces a query over SQLite FTS5, whose `bm25()` ranks every row that holds any query term through the
virtual table (~100 ms per query at 100k nodes). Here a query gathers the postings of its few terms from numpy
arrays and accumulates their BM25 contributions vectorised (a few ms at 100k).

Scores are FTS5's `bm25()` negated, so results are those of `tokenize='porter unicode61'` + `bm25(nodes_fts)`:

    score(d) = sum over query terms t of w_t * idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))
    idf(t)   = ln((N - df(t) + 0.5) / (df(t) + 0.5)), or 1e-6 where that is not positive

with tf = tf(t, d), k1 = 1.2, b = 0.75, |d| the document's token count (stop words included), avgdl the mean |d|,
N and df(t) over the live rows of the namespace (FTS5 counted every namespace of the file), and w_t the number of
query words that analyse to t (FTS5 scores each OR-ed phrase). A row scores only if it holds at least one query term.

Analysis is the project's one (services/text.py), which follows `unicode61` + `porter`: runs of letters and
digits, lower-cased, diacritics of Latin letters removed, then the Porter stemmer (PyStemmer's Snowball `porter`,
which FTS5's differs from on a handful of words such as "-logy", "-bly", "trekked"); tokens shorter than 3 or longer
than 64 bytes are not stemmed, as in FTS5. Excerpts, query terms, summaries and instruction detection read words
the same way.

Layout: rows are keyed by the store's integer row id in ascending order (like `VectorIndex`), with their level,
time range, token count and a live flag. Postings are a CSR block (per term: row positions int32, term frequency
uint16) plus a tail of per-term arrays appended since the block was last merged; the tail is merged into the block
when it reaches a quarter of it, dead rows are dropped when a quarter of the rows are dead.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from datastore.indexes.rows import RowTable
from services import text

K1 = 1.2
B = 0.75
IDF_FLOOR = 1e-6  # FTS5's idf for terms in half the rows or more
_MERGE_MIN = 1 << 16  # tail postings below which the tail is never merged
_MERGE_CHUNK = 1 << 22  # postings moved per step of a merge
_PREPARE_MOVES = 64  # block postings a `prepare` may copy per tail term it folds
_TOKENISE_CHARS = 1 << 20  # characters of ASCII text cut into tokens at a time (~8 MB of token objects)


class _Vocabulary(dict[str, int]):
    """word (folded) -> term id; an unknown word is stemmed and its term given the next id. One may serve several
    TextIndex objects (a namespace's nodes and lines): a term id is then only a name, and an index holding no
    postings of a term scores it as absent, as it would with a vocabulary of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.terms: dict[str, int] = {}  # stemmed term -> term id
        self.next_id = 0  # the id the next new term gets (ids of terms let go are never given again)
        self.ascii = _AsciiWords(self)  # ASCII words, keyed by their bytes (not held here too); the boundary -> -1

    def __missing__(self, word: str) -> int:
        tid = self[word] = self.term_id(word)
        return tid

    def __reduce__(self) -> tuple[Callable[[dict[str, int], int], _Vocabulary], tuple[dict[str, int], int]]:
        """For a snapshot: the stemmed terms only (what a search looks up); the words seen fill again as texts
        are added, so a read does not rebuild two more dicts of every word (~1 ms at 2k nodes, the GIL held)."""
        return _vocabulary, (self.terms, self.next_id)

    def term_id(self, word: str) -> int:
        """The term id of a folded word (a new one for a new term), without keeping the word itself."""
        term = text.stem(word)
        tid = self.terms.get(term)
        if tid is None:
            tid = self.terms[term] = self.next_id
            self.next_id += 1
        return tid

    def keep(self, held: set[int]) -> None:
        """Let go of every term whose id is not in `held` (no row holds it any more: a forgotten text's); the
        words seen start over, as some of them led to those terms."""
        gone = [term for term, tid in self.terms.items() if tid not in held]
        if not gone:
            return
        for term in gone:
            del self.terms[term]
        self.clear()
        self.ascii = _AsciiWords(self)


def _vocabulary(terms: dict[str, int], next_id: int) -> _Vocabulary:
    """A vocabulary of these stemmed terms and no word seen yet (how a snapshot's is read back)."""
    vocab = _Vocabulary()
    vocab.terms, vocab.next_id = terms, next_id
    return vocab


class _AsciiWords(dict[bytes, int]):
    """ASCII word (bytes, folded) -> term id, through the vocabulary; the boundary mark b"\\x01" -> -1."""

    def __init__(self, vocab: _Vocabulary) -> None:
        super().__init__({b"\x01": -1})
        self.vocab = vocab

    def __missing__(self, word: bytes) -> int:
        tid = self[word] = self.vocab.term_id(word.decode("ascii"))  # the word is kept once, as bytes
        return tid


class TextIndex(RowTable):
    """BM25 top-k over one namespace's node texts (module doc). Not thread-safe: callers lock."""

    EXTRA = ("lengths",)

    def __init__(self, vocabulary_of: TextIndex | None = None) -> None:
        """vocabulary_of: another index of the same namespace whose vocabulary this one shares (each word held
        once; scores are those of a vocabulary of its own), else a new vocabulary."""
        super().__init__()
        self.vocab: _Vocabulary = _Vocabulary() if vocabulary_of is None else vocabulary_of.vocab
        self.total_tokens = 0  # of the live rows
        self.lengths = np.zeros(0, dtype=np.int32)
        # postings: CSR block over term ids < len(indptr) - 1, then the tail (term id -> [(positions, tfs)])
        self.indptr = np.zeros(1, dtype=np.int64)
        self.post_rows = np.zeros(0, dtype=np.int32)
        self.post_tfs = np.zeros(0, dtype=np.uint16)
        self.tail: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.tail_size = 0
        self._norms: np.ndarray | None = None  # k1 * (1 - b + b * |d| / avgdl) per row, float32

    # ------------------------------------------------------------------ writes
    def add(
        self,
        rowids: Sequence[int] | np.ndarray,
        texts: Sequence[str],
        levels: Iterable[int] | np.ndarray,
        starts: Iterable[float] | np.ndarray,
        ends: Iterable[float] | np.ndarray,
    ) -> None:
        """Index rows; rowids must be greater than every id already added (the store's row ids increase).
        starts/ends: POSIX seconds, NaN for none."""
        if len(rowids) == 0:
            return
        sl, order = self._append(rowids, levels, starts, ends)
        first = sl.start
        rows_of, terms, lengths = self._tokenise([texts[j] for j in order])
        self.lengths[sl] = lengths
        self.total_tokens += int(lengths.sum())
        self._norms = None
        if len(terms) == 0:
            return
        keys, tfs = np.unique((terms << 32) | (rows_of + first), return_counts=True)  # by term, then row
        key_terms = keys >> 32
        bounds = np.flatnonzero(np.diff(key_terms)) + 1
        post_rows = (keys & 0xFFFFFFFF).astype(np.int32)
        post_tfs = np.minimum(tfs, np.iinfo(np.uint16).max).astype(np.uint16)
        for a, b in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(keys)]]), strict=True):
            self.tail.setdefault(int(key_terms[a]), []).append((post_rows[a:b], post_tfs[a:b]))
        self.tail_size += len(keys)
        if self.tail_size >= max(_MERGE_MIN, len(self.post_rows) // 4):
            self._merge()

    def _tokenise(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(text index, term id) of every token of `texts` (int64 arrays, any order), and each text's token count.

        ASCII texts (most chat) are cut in one pass: joined with a boundary mark, lower-cased and split by
        `bytes.translate` and `split`, each token looked up as bytes. Other texts go through `text.words`."""
        lengths = np.zeros(len(texts), dtype=np.int64)
        rows: list[np.ndarray] = []
        terms: list[np.ndarray] = []
        plain = [i for i, t in enumerate(texts) if t.isascii() and "\x01" not in t]
        for batch in _batches(plain, texts):  # a token is a bytes object (~45 bytes) until looked up: a batch at a time
            buf = " \x01 ".join(texts[i] for i in batch).encode("ascii").translate(text.ASCII_FOLD)
            tokens = buf.split()
            ids = np.fromiter(map(self.vocab.ascii.__getitem__, tokens), dtype=np.int64, count=len(tokens))
            del tokens, buf
            bounds = np.flatnonzero(ids < 0)  # the marks between texts
            counts = np.diff(np.concatenate([[-1], bounds, [len(ids)]])) - 1
            lengths[batch] = counts
            keep = ids >= 0
            rows.append(np.repeat(np.asarray(batch, dtype=np.int64), counts))
            terms.append(ids[keep])
        for i in sorted(set(range(len(texts))).difference(plain)):
            found = text.words(texts[i])
            if found:
                lengths[i] = len(found)
                rows.append(np.full(len(found), i, dtype=np.int64))
                terms.append(np.fromiter(map(self.vocab.__getitem__, found), dtype=np.int64, count=len(found)))
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), lengths
        return np.concatenate(rows), np.concatenate(terms), lengths

    def remove(self, rowids: Sequence[int] | np.ndarray) -> None:
        """Forget rows (unknown ids are ignored)."""
        pos = self._mark_dead(rowids)
        if len(pos) == 0:
            return
        self.total_tokens -= int(self.lengths[pos].sum())
        self._norms = None
        if self._needs_compaction():
            self._compact()

    def prepare(self) -> None:
        """Fold the postings added since the last merge into the CSR block now (a load ends with it) when that is
        cheap: a term's tail is two arrays and a list, ~400 bytes, where the block holds it in 8, but a merge copies
        the whole block (a transient second copy). So only while the block holds under _PREPARE_MOVES postings per
        tail term (a small namespace's load, whose block is empty). The postings and scores are the same."""
        if self.tail and len(self.tail) * _PREPARE_MOVES >= len(self.post_rows):
            self._merge()

    def _merge(self) -> None:
        """Fold the tail into the CSR block (no sort: each term's postings are its block's, then its tail's)."""
        if not self.tail:
            return
        n_terms = max(len(self.indptr) - 1, max(self.tail) + 1)
        old_counts = np.zeros(n_terms, dtype=np.int64)
        old_counts[: len(self.indptr) - 1] = np.diff(self.indptr)
        tids = np.array(sorted(self.tail), dtype=np.int64)
        parts = [self._tail_of(int(t)) for t in tids]
        tail_counts = np.array([len(r) for r, _ in parts], dtype=np.int64)
        counts = old_counts.copy()
        counts[tids] += tail_counts
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        total = int(indptr[-1])
        post_rows = np.empty(total, dtype=np.int32)
        post_tfs = np.empty(total, dtype=np.uint16)
        n_old = len(self.post_rows)
        if n_old:  # an old posting moves by how much its term's start moved; in chunks, to bound the index arrays
            shift = indptr[:-1] - np.concatenate([self.indptr[:-1], np.full(n_terms - len(self.indptr) + 1, n_old)])
            for a in range(0, n_old, _MERGE_CHUNK):
                b = min(n_old, a + _MERGE_CHUNK)
                at = np.arange(a, b, dtype=np.int64)
                dest = at + shift[np.searchsorted(self.indptr, at, side="right") - 1]
                post_rows[dest] = self.post_rows[a:b]
                post_tfs[dest] = self.post_tfs[a:b]
        starts = indptr[tids] + old_counts[tids]
        within = np.arange(int(tail_counts.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(tail_counts) - tail_counts, tail_counts
        )
        dest = np.repeat(starts, tail_counts) + within
        post_rows[dest] = np.concatenate([r for r, _ in parts])
        post_tfs[dest] = np.concatenate([f for _, f in parts])
        self.indptr, self.post_rows, self.post_tfs = indptr, post_rows, post_tfs
        self.tail, self.tail_size = {}, 0

    def compact(self) -> None:
        """Drop the dead rows and their postings now, whatever their share (a snapshot is written without them)."""
        if self.dead:
            self._compact()

    def held_terms(self) -> set[int]:
        """The ids of the terms some row's postings hold (a dead row's too, until `compact`)."""
        block = np.flatnonzero(np.diff(self.indptr)).tolist()
        return {*block, *(tid for tid, chunks in self.tail.items() if any(len(r) for r, _ in chunks))}

    def _compact(self) -> None:
        """Drop dead rows and their postings; positions are renumbered."""
        self._merge()
        keep = np.flatnonzero(self.alive[: self.size])
        new_pos = np.full(self.size, -1, dtype=np.int64)
        new_pos[keep] = np.arange(len(keep))
        live = self.alive[self.post_rows]
        kept = np.zeros(len(live) + 1, dtype=np.int32 if len(live) < 2**31 else np.int64)
        np.cumsum(live, out=kept[1:])
        self.indptr = kept[self.indptr].astype(np.int64)  # live postings before each term's start
        self.post_rows = new_pos[self.post_rows[live]].astype(np.int32)
        self.post_tfs = self.post_tfs[live]
        self._keep_rows(keep)
        self._norms = None

    # ------------------------------------------------------------------ reads
    @property
    def nbytes(self) -> int:
        """Bytes held in numpy arrays (rows, postings, tail); the vocabulary dicts come on top."""
        arrays = (
            self.rowids,
            self.levels,
            self.starts,
            self.ends,
            self.lengths,
            self.alive,
            self.indptr,
            self.post_rows,
            self.post_tfs,
        )
        tail = sum(r.nbytes + f.nbytes for chunks in self.tail.values() for r, f in chunks)
        return sum(a.nbytes for a in arrays) + tail

    def _tail_of(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """The term's tail postings as one pair of arrays (joined in place on first read)."""
        chunks = self.tail[tid]
        if len(chunks) > 1:
            chunks[:] = [(np.concatenate([r for r, _ in chunks]), np.concatenate([f for _, f in chunks]))]
        return chunks[0]

    def _postings(self, tid: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(row positions, tfs) parts of a term's postings, dead rows included."""
        parts = []
        if tid < len(self.indptr) - 1:
            a, b = self.indptr[tid], self.indptr[tid + 1]
            if b > a:
                parts.append((self.post_rows[a:b], self.post_tfs[a:b]))
        if tid in self.tail:
            parts.append(self._tail_of(tid))
        return parts

    def query_terms(self, query_words: Iterable[str]) -> Counter[int]:
        """Term id -> how many of the query's words analyse to it (words with no indexed term are dropped)."""
        out: Counter[int] = Counter()
        for w in query_words:
            for token in text.words(w):
                tid = self.vocab.terms.get(text.stem(token))
                if tid is not None:
                    out[tid] += 1
        return out

    def norms(self) -> np.ndarray:
        """k1 * (1 - b + b * |d| / avgdl) per row position (float32), cached until the next write."""
        if self._norms is None:
            live = len(self)
            avgdl = self.total_tokens / live if live else 1.0
            lengths = self.lengths[: self.size].astype(np.float64)
            self._norms = (K1 * (1 - B + B * lengths / (avgdl or 1.0))).astype(np.float32)
        return self._norms

    def _terms(self, query_words: Iterable[str]) -> list[tuple[list[tuple[np.ndarray, np.ndarray]], float]]:
        """Per query term: its live postings parts and its factor w_t * idf * (k1 + 1), rarest term first."""
        n = len(self)
        alive = self.alive[: self.size]
        out = []
        for tid, weight in self.query_terms(query_words).items():
            parts = self._postings(tid)
            if self.dead:
                parts = [(r[m], f[m]) for r, f in parts for m in (alive[r],)]
            df = sum(len(r) for r, _ in parts)
            if df:
                idf = math.log((n - df + 0.5) / (df + 0.5))
                out.append((df, parts, weight * (idf if idf > 0 else IDF_FLOOR) * (K1 + 1)))
        out.sort(key=lambda t: t[0])
        return [(parts, factor) for _, parts, factor in out]

    def scores(self, query_words: Iterable[str]) -> np.ndarray:
        """BM25 of every row position for the query's words (float32 (size,); 0 where no term matches)."""
        out = np.zeros(self.size, dtype=np.float32)
        norms = self.norms()
        for parts, factor in self._terms(query_words):
            for rows, tfs in parts:
                tf = tfs.astype(np.float32)
                out[rows] += np.float32(factor) * tf / (tf + norms[rows])
        return out

    def _allowed(
        self,
        candidates: np.ndarray | None,
        min_level: int | None,
        max_level: int | None,
        start: float | None,
        end: float | None,
    ) -> np.ndarray | None:
        """Boolean mask over row positions of the rows the filter allows (None: all)."""
        if candidates is None and all(b is None for b in (min_level, max_level, start, end)):
            return None
        n = self.size
        if candidates is not None:
            mask = np.zeros(n, dtype=bool)
            mask[self._positions(np.sort(np.asarray(candidates, dtype=np.int64)))] = True
        else:
            mask = np.ones(n, dtype=bool)
        kept: np.ndarray = mask & self._in_bounds(slice(0, n), min_level, max_level, start, end)
        return kept

    def search(
        self,
        query_words: Iterable[str],
        top_k: int,
        candidates: np.ndarray | None = None,
        min_level: int | None = None,
        max_level: int | None = None,
        start: float | None = None,
        end: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(row ids int64, BM25 scores float32) of the top_k live rows holding any query term, best first (ties by
        row id). query_words: the query's words (e.g. `retrieval.text_terms`); each is analysed like the texts.

        candidates: restrict to these row ids. Levels inclusive; `start`/`end` (POSIX seconds) keep rows whose time
        range ends at/after `start` and begins at/before `end` (rows without times are then excluded)."""
        if top_k <= 0 or len(self) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        allowed = self._allowed(candidates, min_level, max_level, start, end)
        terms = self._terms(query_words)
        norms = self.norms()
        acc = np.zeros(self.size, dtype=np.float32)
        bounds = [factor for _, factor in terms]  # a term adds less than its factor to any row
        rest = float(sum(bounds))
        theta = 0.0  # a lower bound of the k-th best score among the allowed rows
        i = 0
        while i < len(terms) and not (theta > 0 and rest < theta):  # MaxScore: rarest terms first, in full
            parts, factor = terms[i]
            for rows, tfs in parts:
                tf = tfs.astype(np.float32)
                acc[rows] += np.float32(factor) * tf / (tf + norms[rows])
                # the k-th best of any set of allowed rows bounds the final k-th best from below
                theta = max(theta, _kth(acc[rows] if allowed is None else acc[rows[allowed[rows]]], top_k))
            rest -= bounds[i]
            i += 1
        pos = np.flatnonzero(acc)
        if allowed is not None:
            pos = pos[allowed[pos]]
        # rows touched by no term so far score below theta: only those touched may still enter the top_k
        for parts, factor in terms[i:]:
            pos = pos[acc[pos] + np.float32(rest) * (1 + 1e-6) >= theta]
            for rows, tfs in parts:
                at = np.minimum(np.searchsorted(rows, pos), len(rows) - 1)
                hit = rows[at] == pos
                tf = tfs[at[hit]].astype(np.float32)
                acc[pos[hit]] += np.float32(factor) * tf / (tf + norms[pos[hit]])
            rest -= factor
            theta = max(theta, _kth(acc[pos], top_k))
        found = acc[pos]
        k = min(top_k, len(pos))
        if k == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        top = np.argpartition(-found, k - 1)[:k] if k < len(pos) else np.arange(len(pos))
        top = top[np.lexsort((pos[top], -found[top]))]
        return self.rowids[pos[top]], found[top]


def _batches(indexes: list[int], texts: Sequence[str]) -> Iterable[list[int]]:
    """`indexes` cut into runs whose texts hold about _TOKENISE_CHARS characters together (at least one text)."""
    batch: list[int] = []
    size = 0
    for i in indexes:
        batch.append(i)
        size += len(texts[i])
        if size >= _TOKENISE_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _kth(scores: np.ndarray, k: int) -> float:
    """The k-th largest of `scores`; 0.0 when there are fewer than k."""
    if len(scores) < k:
        return 0.0
    return float(np.partition(scores, len(scores) - k)[len(scores) - k])
